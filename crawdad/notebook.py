"""crawdad from Python and notebooks: runs and experiments started synchronously or awaited
(inside Jupyter's running event loop too), and run folders loaded into pandas frames whose
tables are the report's.

    import crawdad
    summary = crawdad.run_sync("examples", "runs/demo", config="protocols/judge", limit=20)
    frames = crawdad.load_frames("runs/demo")
    tables = crawdad.report_tables(frames)
    tables["table1"]                      # the paper's Table 1 for this run

Everything here is a thin layer over the functions the command line calls: a run started here
writes the same folder `crawdad run` writes, and `report_tables` computes the tables the report
writes (`crawdad.analysis.report.compute_tables`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import warnings
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from crawdad.config import (
    Backend,
    Overrides,
    RunConfig,
    SelectionConfig,
    check_url,
    deep_merge,
    load_config,
    override_items,
    with_overrides,
)
from crawdad.errors import CrawdadError, ServersNotReady, StoreError

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

    from crawdad.analysis.load import Run
    from crawdad.fake import FakeServer
    from crawdad.run.runner import RunSummary

T = TypeVar("T")

# --- running -------------------------------------------------------------------------------------


def in_running_loop() -> bool:
    """Whether this thread runs an event loop (Jupyter does), where `asyncio.run` fails."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _sync(make: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run a coroutine to its end from synchronous code: here, or, when this thread already runs
    an event loop, in a worker thread with a loop of its own (the caller waits for it)."""
    if not in_running_loop():
        return asyncio.run(make())
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="crawdad") as pool:
        return pool.submit(lambda: asyncio.run(make())).result()


def _config(config: RunConfig | str | Path | None) -> RunConfig:
    if isinstance(config, RunConfig):
        return config
    return load_config(Path(config) if config is not None else None)


def _serve(cfg: RunConfig, server: str | None) -> RunConfig:
    """Every model of the config asked at one server (`server`), or as the config says."""
    if server is None:
        return cfg
    backend: Backend = "openai" if server.rstrip("/").endswith("/v1") else "ollama"
    return cfg.serve_all_from(check_url(server), backend)


SERVERS_FIX = (
    "From Python, say where the models are served: server=URL (one server for every model, as "
    "a `crawdad fake-server` or one Ollama), overrides={'agents.0.base_urls': [URL], ...} per "
    "model, base_urls in the config file, or OLLAMA_HOST in the environment before starting "
    "Python (Ollama's default: http://localhost:11434). Without a GPU, "
    "crawdad.fake_server(CONFIG_OR_EXPERIMENT) simulates every model it names: pass its .url "
    "as server=."
)


async def _servers_named(run: Coroutine[Any, Any, T]) -> T:
    """The run, its servers-not-ready error naming what a Python caller passes."""
    try:
        return await run
    except ServersNotReady as e:
        raise ServersNotReady(f"{e}\n{SERVERS_FIX}") from None


async def run_async(
    data: str | Path,
    out: str | Path,
    config: RunConfig | str | Path | None = None,
    *,
    limit: int | None = None,
    selection: SelectionConfig | None = None,
    overrides: Overrides | None = None,
    server: str | None = None,
    progress: bool = False,
    simulated: bool = False,
) -> RunSummary:
    """Run (or resume) debates: `crawdad run --data DATA --out OUT [--config CONFIG]
    [--set KEY=VALUE ...]`, awaited.

    `config`: a `RunConfig`, a TOML file, a ready config by name (`"protocols/judge"`), or None
    for the paper's setup. `data`: a CLadder folder, zip or file, or `"examples"`. `limit` takes
    the first N selected questions; `selection` replaces the config's selection.
    `overrides`: settings replaced as `--set` replaces them, a dict
    (`{"agents.0.model": "qwen3:8b", "protocol.max_turns": 2}`) or `--set`'s strings
    (`["agents.0.model=qwen3:8b"]`). The servers: `server` asks every model at one URL (a
    `crawdad fake-server`, one Ollama; a URL ending in /v1 is OpenAI-compatible); otherwise each
    model's `base_urls` (the config, or `overrides={"agents.1.base_urls": [URL]}`), and for
    Ollama models without one, `OLLAMA_HOST`."""
    from crawdad.run.runner import run_debates
    from crawdad.run.store import selection_for
    from crawdad.tasks import load_items, task_named

    cfg = with_overrides(_config(config).model_copy(deep=True), overrides)
    cfg = _serve(cfg, server)
    if selection is not None:
        cfg.selection = selection
    if limit is not None:
        cfg.selection.limit = limit
    task = task_named(cfg.task)
    items = load_items(task, Path(data), cfg.selection.questions_file, cfg.table_limits)
    cfg.selection = selection_for(cfg.selection, Path(out))
    dataset = task.select(items, cfg.selection, cfg.seed)
    return await _servers_named(
        run_debates(cfg, dataset, Path(out), progress=progress, simulated=simulated)
    )


def run_sync(
    data: str | Path,
    out: str | Path,
    config: RunConfig | str | Path | None = None,
    **options: Any,
) -> RunSummary:
    """`run_async`, waited for: works in a script and inside a notebook's running loop alike."""
    return _sync(lambda: run_async(data, out, config, **options))


async def experiment_async(
    file: str | Path,
    data: str | Path,
    out: str | Path,
    *,
    limit: int | None = None,
    overrides: Overrides | None = None,
    server: str | None = None,
    progress: bool = False,
) -> list[RunSummary]:
    """Run (or resume) every variant of an experiment: `crawdad experiment FILE --data DATA
    --out OUT`, awaited. `file`: an experiment file or a ready one by name
    (`"experiments/paper-ablations"`). `overrides` and `server` as in `run_async`, applied to
    every variant (`crawdad fake-server --config experiments/paper-ablations` serves every model
    the experiment names at one URL)."""
    from crawdad.run.experiment import nest, prepare, run_experiment

    # The selection is the experiment's (every variant runs on the same questions): it goes in
    # before the questions are chosen; the rest applies to each variant's config.
    flags: dict[str, Any] = {"selection": {"limit": limit}} if limit is not None else {}
    rest: dict[str, Any] = {}
    for path, value, _name in override_items(overrides or {}):
        if path[0] == "selection":
            flags = deep_merge(flags, nest({".".join(map(str, path)): value}))
        else:
            rest[".".join(map(str, path))] = value
    configs, manifest, dataset = prepare(Path(file), Path(data), flags or None, Path(out))
    configs = {
        name: _serve(with_overrides(cfg, rest, f"overrides (variant {name!r})"), server)
        for name, cfg in configs.items()
    }
    return await _servers_named(
        run_experiment(configs, manifest, dataset, Path(out), progress=progress)
    )


def experiment_sync(
    file: str | Path, data: str | Path, out: str | Path, **options: Any
) -> list[RunSummary]:
    """`experiment_async`, waited for (in a notebook's running loop too)."""
    return _sync(lambda: experiment_async(file, data, out, **options))


def fake_server(
    config: RunConfig | str | Path | None = None,
    data: str | Path | None = None,
    *,
    kind: Literal["ollama", "openai"] = "ollama",
    tools: bool = False,
    seed: int = 0,
) -> FakeServer:
    """A started fake server, simulating the models a config or an experiment names: `crawdad
    fake-server [--config CONFIG] [--data DATA]` from Python (no GPU). Pass its `.url` as
    `server=`; `.stop()` it when done (or use it in a `with` block).

    `config`: a `RunConfig`, a file or a ready config or experiment by name
    (`"experiments/paper-ablations"`: every model its variants name), or None for the paper's
    three models. `data`: the questions the fakes know the answers of (a `crawdad data tables`
    folder, a CLadder file of one's own); by default crawdad's example questions (`"examples"`),
    and any other question is answered at chance. `tools`: every debater calls the causal
    calculator when offered it."""
    from crawdad.demo import served_configs, served_models
    from crawdad.fake import FakeServer

    configs: list[RunConfig] = []
    if isinstance(config, RunConfig):
        configs = [config]
    elif config is not None:
        configs = served_configs(Path(config))
    folder = Path(data) if data is not None and str(data) != "examples" else None
    models, _calling = served_models(seed, tools, configs, folder)
    return FakeServer(kind, models).start()


# --- loading ---------------------------------------------------------------------------------


@dataclass
class Frames:
    """Run folders as pandas frames. Accuracies, shares and confidences are fractions (0-1),
    differences of them too (0.032: what crawdad prints as 3.2 points); tokens are counts;
    times are seconds.

    - `debates`: one row per debate (question), the columns of
      `crawdad.analysis.load.DEBATE_COLUMNS`: `run` (the run's label), `question_id`, `rung`,
      `query_type`, `alignment`, `gold` (None: no exact answer, a table of one's own; the
      report's tables leave such rows out), `first_agent` and `second_agent` (agent labels),
      `n_turns`, `initial_answer` and `initial_confidence` (the first speaker's round 0; 0-1),
      `final_answer`, `final_confidence` (0-1), `final_agent`, `consensus`, `end` (why it
      ended), `errored`, `error`, `seconds` (wall time of the debate), `simulated`, `protocol`,
      `prompt_set`, `judge`, `tie`, `agents`, `speaking_order`, `agent_answers`, `stances`.
    - `turns`: one row per response, the columns of `TURN_COLUMNS`: `run`, `question_id`,
      `round`, `agent`, `role`, `answer`, `confidence` (0-1), `text_chars` and `thinking_chars`
      (lengths of the final text and the trace, characters), `sentiment` (VADER compound),
      `seconds` (wall time of the generation), `server_seconds` (as the server reported),
      `completion_tokens`, `prompt_tokens`, `stop_reason`, `extraction` (how the answer was
      read), `attempts` (requests, retries included), the extractor's tokens and seconds, and
      more.
    - `tool_calls`: one row per tool call: `run`, `question_id`, `round`, `agent`, `model`,
      `tool` (the function named), `mode` (native or text), `malformed` (the call could not be
      read), `error` (what the model was told instead of a result; empty when it got one),
      `seconds` (compute time of the call).
    - `runs`: the loaded runs (`crawdad.analysis.load.Run`: path, manifest, counts, warnings).
    - `servers`: the servers during each run, one row per server per sample (the columns of
      `crawdad.analysis.metrics.servers.SERIES_COLUMNS`): `run`, `server` (its URL), `kind`,
      `source` (what was read), `minutes` since the run began, `running` and `waiting`
      (requests, the server's counts), `kv_cache` (0-1), `server_tokens_per_s`,
      `prefix_hit_rate` (0-1), `in_flight` and `received_tokens_per_s` (crawdad's own), and the
      raw counters. Empty for runs without servers.jsonl (`server_metrics = 0`, older runs).
    """

    debates: pd.DataFrame
    turns: pd.DataFrame
    tool_calls: pd.DataFrame
    runs: list[Run] = field(default_factory=list)
    servers: pd.DataFrame | None = None

    @property
    def labels(self) -> list[str]:
        """The runs' labels (the `run` column's values), in load order."""
        return [r.label for r in self.runs]

    def __repr__(self) -> str:
        shown = ", ".join(self.labels[:6]) + (", ..." if len(self.runs) > 6 else "")
        return (
            f"Frames({len(self.runs)} run{'s' if len(self.runs) != 1 else ''}: {shown}; "
            f"{len(self.debates)} debates, {len(self.turns)} turns, "
            f"{len(self.tool_calls)} tool calls; debates columns: "
            f"{', '.join(map(str, self.debates.columns[:8]))}, ... "
            f"({len(self.debates.columns)}))"
        )


TOOL_CALL_COLUMNS = ["run", "question_id", "round", "agent", "model", "tool", "mode"]
TOOL_CALL_COLUMNS += ["malformed", "error", "seconds"]


def _tool_calls(runs: list[Run]) -> pd.DataFrame:
    import pandas as pd

    rows = [
        {
            "run": run.label,
            "question_id": str(r.question_id),
            "round": t.round,
            "agent": t.agent,
            "model": t.model,
            "tool": c.name,
            "mode": c.mode,
            "malformed": c.malformed,
            "error": c.error or "",
            "seconds": c.seconds,
        }
        for run in runs
        for r in run.records()
        for t in r.turns
        for c in t.tool_calls
    ]
    return pd.DataFrame(rows, columns=TOOL_CALL_COLUMNS)


def load_frames(*paths: str | Path, compare: bool = False) -> Frames:
    """Load run folders (or one experiment folder: its variants) into frames. Folders that are
    shards of one run (the same settings, disjoint questions) are pooled into one run, as
    `crawdad analyze` does, unless `compare`."""
    from crawdad.analysis.load import concat, load_runs
    from crawdad.analysis.shards import pool_shards
    from crawdad.run.store import is_experiment

    folders = [Path(p) for p in paths]
    root = None
    if len(folders) == 1 and is_experiment(folders[0]):
        root = folders[0]
        folders = []
        for p in sorted(root.glob("*/manifest.json")):
            if p.parent.is_symlink():  # a variant's folder must be in the experiment's folder
                warnings.warn(
                    f"{p.parent} is a link to {os.readlink(p.parent)}: crawdad does not read "
                    f"through links inside {root}; that variant is left out (replace the link "
                    "with the folder itself to load it)",
                    stacklevel=2,
                )
                continue
            folders.append(p.parent)
        if not folders:
            raise StoreError(f"no variant of {root} has a run folder of its own to load")
    runs = pool_shards(load_runs(folders, root=root), compare=compare)
    debates, turns = concat(runs)
    return Frames(
        debates=debates,
        turns=turns,
        tool_calls=_tool_calls(runs),
        runs=runs,
        servers=_servers(runs),
    )


def _servers(runs: list[Run]) -> pd.DataFrame:
    import pandas as pd

    from crawdad.analysis.metrics.servers import SERIES_COLUMNS, server_series

    frames = [server_series(r.folders[0], r.label)[0] for r in runs]
    frames = [f for f in frames if not f.empty]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=SERIES_COLUMNS)


def report_tables(frames: Frames) -> dict[str, pd.DataFrame]:
    """Every table of the report over these frames (the functions `crawdad analyze` uses),
    by name: "table1", "persuasion", "calibration", ... (each has a `run` column). Accuracies
    and their intervals are fractions (table1's `acc`, `ci_lo`, `ci_hi`: 0.712, where the
    report prints 71.2%). Where a stopping rule cut a run short, every table with intervals gets
    an `interval_note` column: empty, or, for that run, why its fixed-sample intervals do not
    hold at their stated level."""
    from crawdad.analysis.metrics.stopping import stopped_runs
    from crawdad.analysis.report import compute_tables

    tables = compute_tables(frames.debates, frames.turns)
    stopped = stopped_runs(frames.runs)
    if not stopped:
        return tables
    for name, table in tables.items():  # a stopped run's fixed-sample intervals say so
        if {"run", "ci_lo"} <= set(table.columns):
            tables[name] = table.assign(
                interval_note=[stopped.get(str(r), "") for r in table["run"]]
            )
    return tables


def report_figures(frames: Frames, run: str | None = None) -> dict[str, Figure]:
    """The report's figures of one run (its label; needed when the frames hold several) as
    matplotlib figures, by name: "accuracy", "fig2_persuasion", ..., "reliability" (those that
    apply to the run's protocol), and its protocol section's: "protocol_accuracy" (each agent's
    first answer and the final answer), and the protocol's own ("judge_bias",
    "simultaneous_rounds", "self_consistency"). Shown inline by Jupyter; `fig.savefig(...)` to
    keep one."""
    from crawdad.analysis.report import run_figures

    labels = [r.label for r in frames.runs]
    if not labels:
        raise CrawdadError("no runs loaded: load_frames(FOLDER) first")
    if run is None and len(labels) > 1:
        raise CrawdadError(
            f"these frames hold {len(labels)} runs ({', '.join(labels)}): name one, "
            f"report_figures(frames, run={labels[0]!r}), or draw each: "
            "{label: report_figures(frames, run=label) for label in frames.labels}"
        )
    label = run or labels[0]
    if label not in labels:
        raise CrawdadError(f"no run {label!r}; the runs are {', '.join(labels)}")
    chosen = next(r for r in frames.runs if r.label == label)
    # over the debates with an exact answer, as the report draws them (crawdad.scoring.scored)
    return run_figures(chosen.scored(), report_tables(frames))


# --- stopping rules --------------------------------------------------------------------------


def sequences(folder: str | Path) -> pd.DataFrame:
    """An experiment's confidence sequences (one with a `[stop]` rule), as its report draws them:
    each compared variant's paired difference from the baseline, valid at every moment at once,
    as fractions (0.032: what the report and the live view print as 3.2 points). Columns
    `variant`, `questions` (scored questions settled), `estimate`, `lower`, `upper` (NaN once a
    sequence contradicted itself), `contradicted`, `target` ("models" or "run") and `about` (what
    the target means, in words). The baseline's own accuracy is apart:
    `crawdad.baseline_sequence(folder)`."""
    from crawdad.analysis.experiment_folder import load_experiment
    from crawdad.analysis.metrics.stopping import sequence_frame

    return sequence_frame(_stopping_experiment(load_experiment(Path(folder)), folder))


def baseline_sequence(folder: str | Path) -> pd.DataFrame:
    """The baseline's own accuracy sequence in an experiment with a `[stop]` rule (an accuracy,
    not a difference: apart from `sequences`), same columns, at the alpha the variants share."""
    from crawdad.analysis.experiment_folder import load_experiment
    from crawdad.analysis.metrics.stopping import baseline_frame

    return baseline_frame(_stopping_experiment(load_experiment(Path(folder)), folder))


def decisions(folder: str | Path) -> pd.DataFrame:
    """An experiment's stopping decisions, recomputed from its records as the run reached them:
    columns `variant`, `decision` (better, worse, equivalent, undecided, budget spent or
    contradicted), `questions` (used), `estimate`, `lower`, `upper` (the sequence at the stop, a
    difference of fractions: 0.032 is 3.2 points), `settled`, `unscored` (settled questions
    without an exact answer, left out), `target`, `about` (what the decision is about, over
    which pool of questions, in words), `reason` (why undecided), `estimate_note` (for a decided
    variant: the estimate is the difference at the stop, which stopping early overstates)."""
    from crawdad.analysis.experiment_folder import load_experiment
    from crawdad.analysis.metrics.stopping import decision_table
    from crawdad.stopping.claims import STOP_ESTIMATE

    table = decision_table(_stopping_experiment(load_experiment(Path(folder)), folder))
    stopped = table["decision"].isin(["better", "worse", "equivalent"])
    return table.assign(estimate_note=[STOP_ESTIMATE if s else "" for s in stopped])


def _stopping_experiment(exp: Any, folder: str | Path) -> Any:
    if exp.manifest.stop is None or exp.baseline is None:
        raise ValueError(
            f"{folder} was run without a stopping rule ([stop] in the experiment file, or "
            "--stop): it has no decisions"
        )
    return exp
