"""`crawdad bench`'s same-work ceiling on the fakes: when crawdad is not the limit, crawdad's
tokens/s over the load generator replaying crawdad's own requests ("of ceiling") is 1 within 0.1.

The fake (llama.cpp-like: one event a token, /metrics, a request not streamed finished after its
client went) runs in its own process, slow enough per token that the server, not crawdad's CPU,
sets the pace. Each concurrency is a full bench: first-turn sweep, crawdad, same-work replay,
with the waits for an idle server between them.

    .venv/bin/python benchmarks/bench_same_work.py [--concurrency 8,32] [--seconds 6]
        [--per-token 0.002] [--stream]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_request_cost import fake
from common import header

from crawdad.bench import run_bench
from crawdad.bench.advice import same_work_share
from crawdad.config import AgentConfig, ExtractorConfig, RunConfig
from crawdad.data.demo_questions import write_cladder
from crawdad.data.questions import load_cladder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", default="8,32")
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--per-token", type=float, default=0.002)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--stream", action="store_true", help="stream the debaters")
    args = parser.parse_args()
    header("the same-work ceiling against crawdad, on a llama.cpp-like fake", args)
    levels = [int(c) for c in args.concurrency.split(",")]
    data = write_cladder(Path(tempfile.mkdtemp()) / "data", 8 * max(levels))
    dataset = load_cladder(data)
    with fake("fake-llamacpp", args.per_token) as (url, debater, extractor):
        common = dict(backend="openai", base_urls=[url], max_tokens=args.max_tokens)
        cfg = RunConfig(
            agents=[
                AgentConfig(name=n, model=debater, stream=args.stream, **common)  # type: ignore[arg-type]
                for n in ("a", "b")
            ],
            extractor=ExtractorConfig(model=extractor, backend="openai", base_urls=[url]),
        )
        bench = run_bench(
            cfg, dataset, Path(tempfile.mkdtemp()) / "b", parallel=[max(levels)],
            concurrencies=levels, seconds=args.seconds, progress=False, say=lambda _: None,
        )  # fmt: skip
        result = asyncio.run(bench)
    for run in result.crawdad:
        share = same_work_share(run)
        replay = run.same_work
        assert replay is not None and run.work_window is not None
        print(
            f"C={run.concurrency:>3}: crawdad {run.work_window.tokens_per_second:8,.0f} tok/s at "
            f"{run.work_window.in_flight:5.1f} in flight ({run.cores:.2f} cores); replay "
            f"P={replay.parallel} {replay.window.tokens_per_second:8,.0f} tok/s at "
            f"{replay.window.in_flight:5.1f}; of ceiling {share:.3f}"
            + ("  (within 0.1 of 1)" if share is not None and abs(share - 1) <= 0.1 else "  (!)")
        )


if __name__ == "__main__":
    main()
