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

from common import machine

from crawdad.config import RunConfig, load_config
from crawdad.data import load_cladder
from crawdad.demo import answer_key
from crawdad.fake import FakeExtractor, FakeServer, ProfileModel
from crawdad.records import DebateRecord
from crawdad.runner import run
from crawdad.store import RunStore
from crawdad.synthetic import write_cladder

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = [None, *sorted((ROOT / "configs" / "protocols").glob("*.toml"))]


def models_for(cfg: RunConfig, key):  # type: ignore[no-untyped-def]
    names = [a.model for a in cfg.agents] + ([cfg.judge.model] if cfg.judge else [])
    models = {m: ProfileModel(key, "deepseek-r1" if "deepseek" in m else "qwen3") for m in names}
    return models | {cfg.extractor.model: FakeExtractor()}


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
    async with FakeServer("ollama", models_for(cfg, answer_key(dataset.questions))) as server:
        cfg = cfg.serve_all_from(server.url)
        cfg.concurrency = 64
        await run(cfg, dataset, out, progress=False, simulated=True, check_servers=False)
    return costs(RunStore(out).records())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--questions", type=int, default=300)
    args = parser.parse_args()
    print(f"{machine()}; {args.questions} synthetic questions, fakes' default profiles\n")
    print("| config | debater requests | judge requests | extractor requests | completion tokens | accuracy |")
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


if __name__ == "__main__":
    main()
