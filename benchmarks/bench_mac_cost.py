"""What each variant of configs/experiments/mac.toml costs on the fakes: requests (generations
plus extractor calls, as the experiment report counts them) and completion tokens per ordered
pair and per graph, over crawdad's example graphs on the discovery-pairs task (the coding agents
on the same graphs whole, their data sampled from seeded random tables), and how many
requests the whole experiment sent against its variants run apart. Prints a Markdown table (the
numbers in mac.toml's header and the README's "Causal discovery (MAC)" section come from here).

    .venv/bin/python benchmarks/bench_mac_cost.py [--graphs N] [--seed S]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path

from common import CHUNKING, machine

from crawdad.config import SelectionConfig
from crawdad.data.demo_questions import EXAMPLES
from crawdad.demo import answer_key, with_sampled_models
from crawdad.fake import AnswerKey, FakeModel, FakeServer, models_for
from crawdad.records import DebateRecord
from crawdad.run.experiment import (
    experiment_manifest,
    load_experiment,
    run_experiment,
    variant_configs,
)
from crawdad.run.store import RunStore
from crawdad.tasks import task_named

ROOT = Path(__file__).resolve().parents[1]
FILE = ROOT / "configs" / "experiments" / "mac.toml"


def requests_of(rec: DebateRecord) -> int:
    """Generations plus extractor calls (a judge's own JSON verdict needs none)."""
    calls = sum(
        t.extraction is not None
        and (
            t.extraction.prompt_tokens is not None
            or t.extraction.completion_tokens is not None
            or t.extraction.seconds > 0
        )
        for t in rec.turns
    )
    return len(rec.turns) + calls


def tokens_of(rec: DebateRecord) -> int:
    return sum(
        (t.completion_tokens or 0)
        + ((t.extraction.completion_tokens or 0) if t.extraction is not None else 0)
        for t in rec.turns
    )


async def measure(out: Path, graphs: int | None, seed: int) -> None:
    spec, sha = load_experiment(FILE)
    configs = variant_configs(spec, str(FILE), {"seed": seed})
    datasets, key = {}, AnswerKey()
    for name, cfg in configs.items():  # pair variants and the coding agents' whole graphs
        task = task_named(cfg.task)
        dataset = task.load(EXAMPLES)
        if graphs:
            dataset = task.select(dataset, SelectionConfig(limit=graphs), seed)
        if task.answers is None:  # the example graphs' data: seeded random tables
            dataset = with_sampled_models(dataset, seed)
        datasets[name] = dataset
        answer_key(dataset.questions, task, key)
    pairs = next(d for n, d in datasets.items() if configs[n].task == "discovery-pairs")
    n_pairs, n_graphs = len(pairs.questions), len(pairs.graphs)
    models: dict[str, FakeModel] = {}
    for cfg in configs.values():
        models |= models_for(cfg.model_names(), cfg.extractor.model, key, seed=seed)
    async with FakeServer("ollama", models, chunking=CHUNKING) as server:
        for cfg in configs.values():
            cfg.serve_all_from(server.url)
            cfg.concurrency = 64
        manifest = experiment_manifest(spec, str(FILE), sha, list(configs))
        await run_experiment(
            configs, manifest, datasets, out, progress=False, simulated=True, check_servers=False
        )
        sent = len(server.requests)
    print(f"{n_graphs} graphs, {n_pairs} ordered pairs, seed {seed}\n")
    print("| variant | requests / pair | requests / graph | tokens / graph | pair accuracy |")
    print("|---|---|---|---|---|")
    apart = 0
    for name in configs:
        records = RunStore(out / name).records()
        req = sum(requests_of(r) for r in records)
        tok = sum(tokens_of(r) for r in records)
        acc = sum(r.final_answer == r.gold for r in records) / len(records)  # a graph: exact
        apart += req
        print(
            f"| {name} | {req / n_pairs:.2f} | {req / n_graphs:.1f} | {tok / n_graphs:,.0f} "
            f"| {acc:.3f} |"
        )
    print(
        f"\nThe whole experiment sent {sent} requests ({sent / n_graphs:.1f} per graph) against "
        f"{apart} ({apart / n_graphs:.1f} per graph) for its variants run apart: "
        f"{apart - sent} ({100 * (apart - sent) / apart:.0f}%) answered from the response store."
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--graphs", type=int, default=30, help="the first N example graphs")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(f"{machine()}; configs/experiments/mac.toml on the fakes' default profiles\n")
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(measure(Path(tmp) / "mac", args.graphs, args.seed))


if __name__ == "__main__":
    main()
