"""A server's keeper (crawdad/serving/keeper.py): how long `spawn` takes (the keeper up and the
server started), how fast a server that floods its log writes through the keeper (the keeper
must never make it wait), the log's size after, and how long a stop takes.

    .venv/bin/python benchmarks/bench_keeper.py [--mib 300]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

from crawdad.serving.base import ServerPlan
from crawdad.serving.processes import spawn, stop_group

FLOOD = (
    "import sys, time\n"
    "block = (b'x' * 99 + b'\\n') * 10486\n"
    "t = time.perf_counter()\n"
    "for _ in range({mib}): sys.stdout.buffer.write(block)\n"
    "sys.stdout.flush()\n"
    "print('wrote in %.3f s' % (time.perf_counter() - t), flush=True)\n"
    "time.sleep(600)\n"
)


def plan(command: list[str]) -> ServerPlan:
    return ServerPlan(
        key="b",
        engine="vllm",
        weights="w",
        served_name="m",
        models=["agents.0"],
        port=1,
        context_length=1,
        command=command,
    )


def _written(log: Path) -> str:
    """The flooding server's own line saying how long it took (polled: a benchmark)."""
    while b"wrote in" not in log.read_bytes()[-200:]:
        time.sleep(0.05)
    return log.read_bytes()[-200:].decode().strip().splitlines()[-1]


async def main(mib: int) -> None:
    folder = Path(tempfile.mkdtemp(prefix="crawdad-bench-keeper-"))
    log = folder / "b.log"
    fd = os.open(log, os.O_RDWR | os.O_CREAT)
    sleeper = [sys.executable, "-c", "import time; time.sleep(600)"]
    times = []
    for _ in range(3):
        t = time.perf_counter()
        started = spawn(plan(sleeper), fd)
        times.append(time.perf_counter() - t)
        await stop_group(started, 10.0)
    print(f"spawn (keeper up, server started): {', '.join(f'{x:.3f}' for x in times)} s")
    started = spawn(plan([sys.executable, "-c", FLOOD.format(mib=mib)]), fd)
    said = await asyncio.to_thread(_written, log)
    print(f"{mib} MiB written through the keeper: {said}; log {log.stat().st_size / 2**20:.1f} MiB")
    t = time.perf_counter()
    await stop_group(started, 10.0)
    print(f"stop (SIGTERM, the server gone): {time.perf_counter() - t:.3f} s")
    os.close(fd)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=int, default=300)
    asyncio.run(main(parser.parse_args().mib))
