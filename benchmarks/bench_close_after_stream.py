"""A server that closes its connection after every streamed reply (llama-server's habit) against
one that keeps its connections: the same debates, the same pacing, side by side.

    .venv/bin/python benchmarks/bench_close_after_stream.py [--debates 48] [--concurrency 8]

Before crawdad resent such requests at once, each one that found its pooled connection closed
failed and waited out the retry delay (issue 30: 2-5 retries, 1.6-2.1x the time). Prints the wall
time of each, their ratio (goal: at most 1.05), the requests the server dropped on closed
connections and the turns that needed a retry (goal: none).
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from common import header

from crawdad.config import RunConfig
from crawdad.data.demo_questions import EXAMPLES
from crawdad.data.questions import SelectionConfig, load_cladder, select
from crawdad.demo import answer_key
from crawdad.fake import FakeServer, LatencyModel, paper_models
from crawdad.records import DebateRecord
from crawdad.run.runner import run


async def one(kind: str, closes: bool, debates: int, concurrency: int) -> tuple[float, int, int]:
    dataset = select(load_cladder(EXAMPLES), SelectionConfig(limit=debates), 0)
    latency = LatencyModel(base_seconds=0.02, per_token_seconds=0.00005, capacity=concurrency * 2)
    models = paper_models(answer_key(dataset.questions))
    server = FakeServer(
        kind,  # type: ignore[arg-type]
        models,
        latency=latency,
        close_after_stream=closes,
        chunking="token",
    )
    async with server:
        config = RunConfig(concurrency=concurrency).serve_all_from(server.url)
        if kind == "openai":
            for spec in [*config.agents, config.extractor]:
                spec.backend = "openai"
        with tempfile.TemporaryDirectory() as tmp:
            start = time.perf_counter()
            await run(config, dataset, Path(tmp) / "run", progress=False)
            seconds = time.perf_counter() - start
            lines = (Path(tmp) / "run" / "debates.jsonl").read_text().splitlines()
    retried = sum(
        t.attempts > 1 for line in lines for t in DebateRecord.model_validate_json(line).turns
    )
    return seconds, server.stats.stale_requests, retried


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--debates", type=int, default=48)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    header("a server that closes connections after each streamed reply", args)
    print(f"{'wire':<8} {'keeps s':>8} {'closes s':>9} {'ratio':>6} {'dropped':>8} {'retried':>8}")
    for kind in ("ollama", "openai"):
        asyncio.run(one(kind, False, 8, args.concurrency))  # warm-up: imports, first connections
        keeps, _, _ = asyncio.run(one(kind, False, args.debates, args.concurrency))
        closes, dropped, retried = asyncio.run(one(kind, True, args.debates, args.concurrency))
        print(
            f"{kind:<8} {keeps:>8.2f} {closes:>9.2f} {closes / keeps:>6.2f} {dropped:>8}"
            f" {retried:>8}"
        )


if __name__ == "__main__":
    main()
