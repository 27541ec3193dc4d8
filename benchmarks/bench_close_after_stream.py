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

from common import ServerSpec, header, main_guard, start_servers

from crawdad.config import RunConfig
from crawdad.data.demo_questions import EXAMPLES
from crawdad.data.questions import SelectionConfig, load_cladder, select
from crawdad.fake import LatencyModel
from crawdad.records import DebateRecord
from crawdad.run.runner import run


async def _run(kind: str, url: str, debates: int, concurrency: int) -> tuple[float, int]:
    dataset = select(load_cladder(EXAMPLES), SelectionConfig(limit=debates), 0)
    config = RunConfig(concurrency=concurrency).serve_all_from(url)
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
    return seconds, retried


def one(kind: str, closes: bool, debates: int, concurrency: int) -> tuple[float, int, int]:
    """Wall seconds, requests the server dropped on closed connections, turns retried; the fake
    server in a process of its own, as a real server's work is not crawdad's."""
    latency = LatencyModel(base_seconds=0.02, per_token_seconds=0.00005, capacity=concurrency * 2)
    spec = ServerSpec(kind, latency, overrides={"close_after_stream": closes})  # type: ignore[arg-type]
    (server,) = start_servers([spec], EXAMPLES)
    try:
        seconds, retried = asyncio.run(_run(kind, server.url, debates, concurrency))
        dropped = server.stats()["stale_requests"]
    finally:
        server.stop()
    return seconds, dropped, retried


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--debates", type=int, default=48)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    header("a server that closes connections after each streamed reply", args)
    print(f"{'wire':<8} {'keeps s':>8} {'closes s':>9} {'ratio':>6} {'dropped':>8} {'retried':>8}")
    for kind in ("ollama", "openai"):
        one(kind, False, 8, args.concurrency)  # warm-up: imports, first connections
        keeps, _, _ = one(kind, False, args.debates, args.concurrency)
        closes, dropped, retried = one(kind, True, args.debates, args.concurrency)
        print(
            f"{kind:<8} {keeps:>8.2f} {closes:>9.2f} {closes / keeps:>6.2f} {dropped:>8}"
            f" {retried:>8}"
        )


if __name__ == "__main__":
    main_guard()
    main()
