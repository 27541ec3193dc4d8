"""crawdad's own CPU while it starts three servers and waits for them (issue 43: at most 1 s
beyond the servers' own loading).

The servers are the stand-in engine (`python -m crawdad.fake.standin`), started by the
supervisor exactly as a run starts vLLM: port checks, logs in a run folder, a process group
each, health polled until each answers, the manifest's records (engine version, weights hash of
a 64 MiB GGUF-like file, hashed once and then read from the cache), then stopped. crawdad's
CPU is `getrusage(RUSAGE_SELF)` over the whole of it: the servers' own CPU (their loading) is
their processes', not crawdad's, and is printed beside it.

    .venv/bin/python benchmarks/bench_serving_startup.py [--servers 3] [--repeat 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import socket
import sys
import tempfile
import time
from pathlib import Path

from crawdad.config import ServingConfig
from crawdad.serving.base import Plan, ServerPlan
from crawdad.serving.supervisor import Supervisor


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _program(folder: Path) -> str:
    """The stand-in as an engine's program (a Python alone would be taken for vLLM's)."""
    program = folder / "standin-engine"
    program.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m crawdad.fake.standin "$@"\n')
    program.chmod(0o755)
    return str(program)


def _plan(n: int, weights: Path) -> Plan:
    servers = []
    program = _program(weights.parent)
    for i in range(n):
        port = _port()
        command = [program, "serve", str(weights)]
        servers.append(
            ServerPlan(
                key=f"s{i}",
                engine="llamacpp",
                weights=str(weights),
                served_name=f"m{i}",
                models=[f"agents.{i}"],
                port=port,
                context_length=4096,
                command=[*command, "--port", str(port)],
            )
        )
    return Plan(servers=servers)


async def once(n: int, folder: Path, weights: Path) -> tuple[float, float, float]:
    """(crawdad's CPU s, the servers' CPU s, wall s) of starting `n` servers and stopping them."""
    sup = Supervisor(_plan(n, weights), ServingConfig(), folder, progress=False)
    self0, kids0 = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    t0 = time.perf_counter()
    await sup.start()
    await sup.stop()
    wall = time.perf_counter() - t0
    self1, kids1 = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )

    def cpu(a: resource.struct_rusage, b: resource.struct_rusage) -> float:
        return (b.ru_utime - a.ru_utime) + (b.ru_stime - a.ru_stime)

    return cpu(self0, self1), cpu(kids0, kids1), wall


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--servers", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["CRAWDAD_CACHE_DIR"] = str(Path(tmp) / "cache")
        weights = Path(tmp) / "model.gguf"
        weights.write_bytes(os.urandom(64 << 20))
        print(f"{args.servers} stand-in servers, started and stopped {args.repeat} times")
        print("run  crawdad CPU s  servers' CPU s  wall s")
        for i in range(args.repeat):
            mine, theirs, wall = asyncio.run(once(args.servers, Path(tmp) / f"run{i}", weights))
            note = "  (the weights hashed: first time)" if i == 0 else ""
            print(f"{i + 1:>3}  {mine:>13.3f}  {theirs:>14.2f}  {wall:>6.2f}{note}")


if __name__ == "__main__":
    main()
