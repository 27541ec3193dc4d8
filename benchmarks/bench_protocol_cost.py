"""What each protocol costs per question on the fakes' default profile: requests (debaters,
judge, extractor), completion tokens, and accuracy, for every config in configs/protocols/ and
the paper's default. Prints a Markdown table (the README's "Protocols" table comes from here).

    .venv/bin/python benchmarks/bench_protocol_cost.py [--questions 300]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path

from common import CHUNKING, machine

from crawdad.config import RunConfig, load_config
from crawdad.data.demo_questions import write_cladder
from crawdad.data.questions import load_cladder
from crawdad.demo import answer_key
from crawdad.fake import FakeServer, models_for
from crawdad.records import DebateRecord
from crawdad.run.runner import run
from crawdad.run.store import RunStore

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = [None, *sorted((ROOT / "configs" / "protocols").glob("*.toml"))]


def models_of(cfg: RunConfig, key):  # type: ignore[no-untyped-def]
    return models_for(cfg.model_names(), cfg.extractor.model, key)


def costs(records: list[DebateRecord]) -> dict[str, float]:
    n = len(records)
    turns = [t for r in records for t in r.turns]
    # The judge's own JSON is read without the extractor; only a reply that is not that JSON
    # goes to it.
    extracted = [
        t
        for t in turns
        if t.extraction is not None
        and t.extraction.raw
        and (t.agent != "judge" or "read by the extractor" in (t.extraction.reason or ""))
    ]
    return {
        "debater": sum(t.agent != "judge" for t in turns) / n,
        "judge": sum(t.agent == "judge" for t in turns) / n,
        "extractor": len(extracted) / n,
        "tokens": sum((t.completion_tokens or 0) for t in turns) / n,
        "accuracy": sum(r.final_answer == r.gold for r in records) / n,
    }


async def measure(path: Path | None, data: Path, out: Path) -> dict[str, float]:
    cfg = load_config(path)
    dataset = load_cladder(data)
    async with FakeServer(
        "ollama", models_of(cfg, answer_key(dataset.questions)), chunking=CHUNKING
    ) as server:
        cfg = cfg.serve_all_from(server.url)
        cfg.concurrency = 64
        await run(cfg, dataset, out, progress=False, simulated=True, check_servers=False)
    return costs(RunStore(out).records())


async def experiment_cost(data: Path, out: Path) -> tuple[float, float, int]:
    """(requests sent per question, requests the variants would send apart, questions) for
    configs/experiments/paper-ablations.toml."""
    from crawdad.run.experiment import (
        experiment_manifest,
        load_experiment,
        run_experiment,
        variant_configs,
    )

    path = ROOT / "configs" / "experiments" / "paper-ablations.toml"
    spec, sha = load_experiment(path)
    configs = variant_configs(spec, str(path))
    dataset = load_cladder(data)
    key = answer_key(dataset.questions)
    models: dict = {}
    for cfg in configs.values():
        models |= models_of(cfg, key)
    async with FakeServer("ollama", models, chunking=CHUNKING) as server:
        for cfg in configs.values():
            cfg.serve_all_from(server.url)
        manifest = experiment_manifest(spec, str(path), sha, list(configs))
        await run_experiment(
            configs, manifest, dataset, out, progress=False, simulated=True, check_servers=False
        )
        sent = len(server.requests)
    n = len(dataset.questions)
    apart = 0.0
    for name in configs:
        c = costs(RunStore(out / name).records())
        apart += c["debater"] + c["judge"] + c["extractor"]
    return sent / n, apart, n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--questions", type=int, default=300)
    args = parser.parse_args()
    print(f"{machine()}; {args.questions} synthetic questions, fakes' default profiles\n")
    print(
        "| config | debater requests | judge requests | extractor requests | completion tokens | accuracy |"
    )
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        data = write_cladder(Path(tmp) / "data", args.questions)
        for i, path in enumerate(CONFIGS):
            c = asyncio.run(measure(path, data, Path(tmp) / f"run{i}"))
            name = "paper (defaults)" if path is None else str(path.relative_to(ROOT))
            print(
                f"| {name} | {c['debater']:.2f} | {c['judge']:.2f} | {c['extractor']:.2f} "
                f"| {c['tokens']:,.0f} | {c['accuracy']:.3f} |"
            )
        sent, apart, n = asyncio.run(experiment_cost(data, Path(tmp) / "experiment"))
        print(
            f"\nconfigs/experiments/paper-ablations.toml ({n} questions): {sent:.1f} requests "
            f"per question sent, against {apart:.1f} for its variants run apart: "
            f"{apart - sent:.1f} ({100 * (apart - sent) / apart:.0f}%) answered from the store"
        )


if __name__ == "__main__":
    main()
