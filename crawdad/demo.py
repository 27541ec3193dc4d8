"""`crawdad demo`: the whole pipeline on crawdad's example questions, against simulated servers.

The fake servers speak Ollama's real wire format over loopback HTTP; their debaters answer from a
seeded accuracy profile and the extractor reads the answers back. Records are marked simulated.
"""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import random
import signal
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from crawdad.causal.model import BinaryModel
from crawdad.config import RunConfig, SelectionConfig
from crawdad.data.demo_questions import EXAMPLES
from crawdad.data.questions import load_cladder
from crawdad.errors import CrawdadError
from crawdad.fake import (
    AnswerKey,
    FakeExtractor,
    FakeModel,
    FakeServer,
    FaultPlan,
    LatencyModel,
    models_for,
    paper_models,
)
from crawdad.fake.data_agent import DataAgentModel, DataCalls
from crawdad.fake.profile import PAPER_PROFILE_NOTE
from crawdad.run.runner import RunSummary, run
from crawdad.safe_files import write_file
from crawdad.tasks import TASKS, Task, load_items, task_named

# Tasks with open answers the fakes answer: an edge list for a whole graph.
GRAPH_TASKS = ("discovery-graph",)

# A run folder's note on what its simulated models imitate; the report quotes it.
SIMULATION_NOTE = "simulation.txt"


def answer_key(
    items: Sequence[Any], task: Task | None = None, key: AnswerKey | None = None
) -> AnswerKey:
    """The gold answers the fake debaters need, keyed by the items as `task` shows them
    (CLadder's questions by default; added to `key` if given); a whole-graph item's is its
    true edge text."""
    task = task or task_named("cladder")
    key = key if key is not None else AnswerKey()
    for item in items:
        fields = task.record_fields(item)
        if task.answers is None:
            key.add_graph(
                task.show(item),
                fields["gold"],
                fields["item"]["variables"],
                question_id=item.question_id,
                alignment=fields.get("alignment"),
            )
            continue
        for shown in {t.show(item): t for t in displays(task)}:
            key.add_block(
                shown,
                fields["gold"],
                rung=fields.get("rung"),
                question_id=item.question_id,
                alignment=fields.get("alignment"),
            )
    return key


def displays(task: Task) -> list[Task]:
    """The tasks that show `task`'s items: itself, and for questions answered from data every
    data task (with and without the counts: an experiment's variants may show either)."""
    if not hasattr(task, "tool_context"):
        return [task]
    return [task, *(t for t in TASKS.values() if t is not task and hasattr(t, "tool_context"))]


def data_calls(items: Sequence[Any], task: Task) -> DataCalls | None:
    """What the fake data agents know of questions answered from data (each one's task, by
    the question as `task` shows it); None for a task whose items have no table."""
    if not hasattr(task, "tool_context"):
        return None
    calls = DataCalls()
    for item in items:
        for shown in {t.show(item) for t in displays(task)}:
            data = getattr(item, "data", None)
            calls.add(
                shown,
                getattr(item, "meta", {}),
                getattr(data, "table", None),
                answered=getattr(item, "answer", None) is not None,
            )
    return calls


TABLES_NOTE = (
    "crawdad's example graphs come without probability tables: for the demo each got seeded "
    "random ones (every probability in [0.1, 0.9]) over its true graph, and the data an "
    "algorithm sees are rows sampled from them."
)


def random_model(graph: Any, seed: int) -> BinaryModel:
    """Seeded random probability tables over a graph's true structure (its CLadder symbols)."""
    rng = random.Random(f"demo-model:{seed}:{graph.graph_id}")
    symbol = dict(zip(graph.names, graph.symbols, strict=True))
    edges = sorted(graph.truth.edges)
    parents = {s: tuple(symbol[a] for a, b in edges if symbol[b] == s) for s in graph.symbols}

    def table(depth: int) -> Any:
        return rng.uniform(0.1, 0.9) if depth == 0 else [table(depth - 1), table(depth - 1)]

    return BinaryModel.from_tables(
        {s: (ps, table(len(ps))) for s, ps in parents.items()}, where=graph.graph_id
    )


def with_sampled_models(dataset: Any, seed: int) -> Any:
    """A graph dataset whose graphs without data or tables get `random_model`'s."""
    from crawdad.tasks.discovery.whole_graph import GraphItem

    graphs = [
        g
        if g.table is not None or g.model is not None or g.truth is None
        else dataclasses.replace(g, model=random_model(g, seed))
        for g in dataset.graphs
    ]
    return dataclasses.replace(dataset, questions=[GraphItem(g) for g in graphs], graphs=graphs)


def demo_latency(capacity: int = 8) -> LatencyModel:
    """Fast enough for a demo, slow enough that concurrency shows; Qwen3 a little slower than
    DeepSeek-R1 (paper, fig. 8), the extractor much faster."""
    return LatencyModel(
        base_seconds=0.01,
        per_token_seconds=0.00003,
        capacity=capacity,
        model_speed={"qwen3:32b": 1.25, "granite3.3:2b": 0.3},
    )


def demo_config(
    url: str, concurrency: int, seed: int = 0, base: RunConfig | None = None
) -> RunConfig:
    """The paper's setup, or `base` (a config file's protocol, prompts and models), on the
    simulated server at `url`."""
    config = (base or RunConfig(seed=seed)).model_copy(deep=True)
    config.concurrency = concurrency
    return config.serve_all_from(url)


def run_demo(
    out: Path,
    *,
    limit: int | None = None,
    concurrency: int = 16,
    progress: bool = True,
    seed: int = 0,
    config: RunConfig | None = None,
    data: Path | None = None,
) -> RunSummary:
    """The example questions (or those of `data`) on simulated servers; with `config`, under
    its protocol, prompt set and models (every model it names is simulated)."""
    base = config or RunConfig(seed=seed)
    task = task_named(base.task)
    if task.answers is None and task.name not in GRAPH_TASKS:
        raise CrawdadError(
            f"the demo's simulated models answer yes/no items and whole graphs, and the "
            f"{task.name} task's answers are neither: run it on real models"
        )
    dataset = load_items(task, data or EXAMPLES, None, base.table_limits)
    if limit:
        dataset = task.select(dataset, SelectionConfig(limit=limit), seed)
    note = PAPER_PROFILE_NOTE
    if task.answers is None:  # the example graphs have no tables to sample data from
        dataset = with_sampled_models(dataset, seed)
        note += " " + TABLES_NOTE
    models = models_for(
        base.model_names(),
        base.extractor.model,
        answer_key(dataset.questions, task),
        seed=seed,
        tool_models=base.tool_model_names(),
        data_calls=data_calls(dataset.questions, task),
    )
    models = with_graders(models, [base])
    with FakeServer("ollama", models, latency=demo_latency()) as server:
        print(f"simulated Ollama server at {server.url} ({', '.join(models)})")
        run_config = demo_config(server.url, concurrency, seed, base)
        summary = asyncio.run(run(run_config, dataset, out, simulated=True, progress=progress))
    write_file(out, SIMULATION_NOTE, note + "\n")
    for line in summary.lines():
        print(line)
    return summary


def _start(server: FakeServer) -> None:
    try:
        server.start()
    except OSError as e:
        port = server.port
        if e.errno == errno.EADDRINUSE:
            raise CrawdadError(
                f"port {port} on 127.0.0.1 is already in use (a real Ollama or vLLM, or another "
                "fake server?): pick another with --port N, or --port 0 for any free port"
            ) from None
        if e.errno == errno.EACCES:
            raise CrawdadError(
                f"port {port} needs root rights: use a port above 1023 with --port N"
            ) from None
        raise CrawdadError(f"cannot serve on 127.0.0.1:{port}: {e.strerror or e}") from None


def server_banner(
    server: FakeServer,
    faults: FaultPlan | None,
    latency: LatencyModel,
    tool_models: list[str] | None = None,
    data: Path | None = None,
) -> str:
    """What the fake server serves, what questions it knows the answers of (`data`, else
    crawdad's examples), and how to point crawdad at it."""
    models = list(server.models)
    known = (
        f"  questions: knows the answers of {data}'s questions"
        if data is not None
        else "  questions: knows the answers of crawdad's example questions only; any other "
        "(CLadder's own, a table of yours) it answers at chance: start it with --data DATA "
        "(the data your run reads) to know them"
    )
    lines = [
        f"fake {server.kind} server at {server.url} (simulated answers, not real models)",
        f"  models: {', '.join(models)}",
        f"  latency: {latency.base_seconds:g} s a request, {latency.capacity} at once per model",
    ]
    if faults is not None and faults.rate > 0:
        only = f" to {', '.join(faults.models)}" if faults.models else ""
        lines.append(
            f"  faults: {faults.rate:.0%} of generation requests{only} fail with "
            f"{', '.join(faults.kinds)} (fault seed {faults.seed})"
        )
    else:
        lines.append("  faults: none (add some with --fail-rate and --faults)")
    if tool_models:
        lines.append(
            f"  tools: {', '.join(tool_models)} call the causal calculator once a turn when "
            "offered it (DeepSeek-like models only in text mode)"
        )
    else:
        lines.append("  tools: no model calls tools (add --tools, or --config with a tools config)")
    lines.append(known)
    url = server.url
    sets = [f"--set 'agents.{i}.base_urls=[\"{url}\"]'" for i in (0, 1)]
    sets.append(f"--set 'extractor.base_urls=[\"{url}\"]'")
    if server.kind == "openai":
        sets += [f"--set {k}.backend=openai" for k in ("agents.0", "agents.1", "extractor")]
    backend = '  backend = "openai"\n' if server.kind == "openai" else ""
    lines += [
        "point crawdad at it in a config file, under each [[agents]] and under [extractor]:",
        f'  base_urls = ["{url}"]\n{backend}' + "or with flags:",
        "  crawdad doctor " + " ".join(sets),
    ]
    if server.kind == "ollama":
        lines.append(f"or: OLLAMA_HOST={server.host}:{server.port} crawdad doctor")
    lines.append("Ctrl-C stops it.")
    return "\n".join(lines)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def served_configs(path: Path) -> list[RunConfig]:
    """What `--config` names for a fake server: a run config, or every variant of an
    experiment file."""
    from crawdad.config import load_config, read_toml

    if not {"variants", "axes"} & set(read_toml(path)):
        return [load_config(path)]
    from crawdad.run.experiment import load_experiment, variant_configs

    spec, _ = load_experiment(path)
    return list(variant_configs(spec, str(path)).values())


def served_models(
    seed: int = 0,
    tools: bool = False,
    config: RunConfig | Sequence[RunConfig] | None = None,
    data: Path | None = None,
    accuracies: Mapping[str, float] | None = None,
) -> tuple[dict[str, FakeModel], list[str]]:
    """What `crawdad fake-server` serves: the paper's three models, or a config's (its
    debaters, judge and extractor; an experiment's variants give several configs, and every
    model any of them names is served), and which of them call the causal calculator: every
    debater with `tools`, else those the config gives tools. With `data`, they know its
    questions (loaded as the config's task); over a folder of `crawdad data tables`, every
    debater is a fake data agent (it calls the data tools when offered them)."""
    configs = [config] if isinstance(config, RunConfig) else list(config or [])
    base = configs[0] if configs else RunConfig(seed=seed)
    task = task_named(base.task)
    if data is None and hasattr(task, "tool_context"):
        raise CrawdadError(
            f"this config's task ({task.name}) answers questions from data tables: pass --data"
            " FOLDER, a folder written by `crawdad data tables` (e.g. `crawdad data tables"
            " DATA --out tables`), so that the fake models know the tables and call the data"
            " tools"
        )
    items = task.load(data).questions if data else load_cladder(EXAMPLES).questions
    key = answer_key(items, task if data else None)
    if not data:
        for name in ("discovery-pairs", "discovery-graph"):  # MAC's tasks on the example graphs
            graphs = task_named(name)
            answer_key(graphs.load(EXAMPLES).questions, graphs, key)
    names = list(dict.fromkeys(n for c in configs or [base] for n in c.model_names()))
    calls = data_calls(items, task) if data else None
    tool_names = dict.fromkeys(n for c in configs or [base] for n in c.tool_model_names())
    calling = names if tools or calls is not None else list(tool_names)
    if not configs and not tools and calls is None and not accuracies:
        return paper_models(key, seed=seed), []
    models: dict[str, FakeModel] = {}
    for extractor in dict.fromkeys(c.extractor.model for c in configs or [base]):
        models |= models_for(
            names,
            extractor,
            key,
            seed=seed,
            tool_models=calling,
            data_calls=calls,
            accuracies=accuracies,
        )
    return with_graders(models, configs), calling


def with_graders(
    models: dict[str, FakeModel], configs: Sequence[RunConfig]
) -> dict[str, FakeModel]:
    """`models` and the configs' grader models, each played by the fake extractor
    (crawdad/fake/grader.py) unless already served."""
    for c in configs:
        if c.grader is not None and c.grader.model not in models:
            models[c.grader.model] = FakeExtractor()
    return models


def serve_forever(
    kind: str,
    port: int,
    latency: float,
    capacity: int,
    faults: FaultPlan | None = None,
    seed: int = 0,
    tools: bool = False,
    config: RunConfig | Sequence[RunConfig] | None = None,
    data: Path | None = None,
    close_after_stream: bool = False,
    accuracies: Mapping[str, float] | None = None,
) -> None:
    """`crawdad fake-server`: the paper's three models (or a config's) on 127.0.0.1 until
    Ctrl-C; with `tools`, or those a config gives tools, calling the causal calculator; with
    `data`, knowing that dataset's questions (and calling the data tools over its tables)."""
    model = LatencyModel(base_seconds=latency, capacity=capacity)
    models, calling = served_models(seed, tools, config, data, accuracies)
    unknown = sorted(set(faults.models or []) - set(models)) if faults else []
    if unknown:
        raise CrawdadError(
            f"--fail-model {', '.join(unknown)}: the fake server serves {', '.join(models)}"
        )
    server = FakeServer(
        kind,  # type: ignore[arg-type]
        models,
        latency=model,
        faults=faults,
        port=port,
        close_after_stream=close_after_stream,
    )
    _start(server)
    signal.signal(signal.SIGTERM, _interrupt)  # `kill PID` stops it as cleanly as Ctrl-C
    try:
        banner = server_banner(server, faults, model, calling, data)
        if data and any(isinstance(m, DataAgentModel) for m in models.values()):
            banner = banner.replace(
                "call the causal calculator once a turn", "call the data tools once a turn"
            )
        print(banner, flush=True)
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
