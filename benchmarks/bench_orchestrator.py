"""crawdad's own cost: 10,112 debates against a fake Ollama server that answers at once.

With the server's latency near zero and no cap on requests in flight, the run is bounded by the
CPU that crawdad (and the fake server) spend per request. Prints wall time, CPU per turn, peak
memory, and RSS over the run (it should stay flat: records stream to disk).

The fake server runs in a process of its own by default (`--server process`): on a 2-core
machine that gives crawdad one core and the server the other. `--server thread` runs it in this
process, sharing the GIL with crawdad (slower, and its CPU is counted as crawdad's).

    .venv/bin/python benchmarks/bench_orchestrator.py [--quick] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import psutil
from common import (
    LatencyModel,
    ServerSpec,
    add_chunking,
    config_for,
    header,
    measure,
    start_servers,
    synthetic,
)

FULL, QUICK = 10_112, 1_000


class RssSampler(threading.Thread):
    """RSS of this process every `every` seconds while the run goes on."""

    def __init__(self, every: float = 0.5) -> None:
        super().__init__(daemon=True)
        self.every, self.samples = every, []  # type: ignore[var-annotated]
        self._halt = threading.Event()
        self._process = psutil.Process()

    def run(self) -> None:
        start = time.monotonic()
        while not self._halt.wait(self.every):
            self.samples.append((time.monotonic() - start, self._process.memory_info().rss / 2**20))

    def stop(self) -> list[tuple[float, float]]:
        self._halt.set()
        self.join()
        return self.samples


def by_package(profile: cProfile.Profile, top: int = 14) -> list[str]:
    """Own time of the profiled run, summed per package (crawdad per module)."""
    stats = pstats.Stats(profile)
    total: Counter[str] = Counter()
    for (filename, _, name), (_, _, own, _, _) in stats.stats.items():  # type: ignore[attr-defined]
        if "site-packages/" in filename:
            key = filename.split("site-packages/")[1].split("/")[0]
        elif "/crawdad/" in filename:
            key = "crawdad/" + filename.split("/crawdad/")[1]
        elif filename.startswith("~"):
            key = f"builtin {name}"[:48]
        else:
            key = "stdlib " + filename.rsplit("/", 1)[-1]
        total[key] += own
    whole = sum(total.values())
    return [f"  {t:6.2f} s {100 * t / whole:5.1f}%  {key}" for key, t in total.most_common(top)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=f"{QUICK} questions, not {FULL}")
    parser.add_argument("--questions", type=int, default=None)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--server", choices=["process", "thread"], default="process")
    parser.add_argument("--profile", action="store_true", help="cProfile crawdad's process")
    add_chunking(parser)
    args = parser.parse_args()
    n = args.questions or (QUICK if args.quick else FULL)
    header(f"orchestrator: {n} debates, latency 0, no cap", args)

    folder = Path(tempfile.mkdtemp(prefix="crawdad-bench-"))
    dataset = synthetic(n, folder)
    latency = LatencyModel(capacity=1_000_000, max_queue=1_000_000)  # nothing waits, ever
    (server,) = start_servers(
        [ServerSpec("ollama", latency, chunking=args.chunking)], folder / "data", args.server
    )
    config = config_for([server.url], kind="ollama", concurrency=args.concurrency)
    print(
        f"setup: fake Ollama server in a {args.server} ({args.chunking} chunks), "
        f"concurrency {args.concurrency}, "
        f"default config (streaming, loop detection on), records to {folder / 'run'}"
    )
    usage0 = server.usage()
    sampler = RssSampler()
    sampler.start()
    profile = cProfile.Profile() if args.profile else None
    if profile:
        profile.enable()
    m = measure(config, dataset, folder / "run")
    if profile:
        profile.disable()
    samples = sampler.stop()
    usage1 = server.usage()
    stats = server.stats()
    server.stop()

    requests = int(stats["latency"]["served"])
    turns = requests // 2  # every turn is a debater request plus its extractor request
    s = m.summary
    print(
        f"debates: {s.finished} finished, {s.errored} errored; {turns} turns, {requests} requests"
    )
    print(
        f"wall time: {m.wall:.1f} s ({m.debates / m.wall:.0f} debates/s, "
        f"{requests / m.wall:.0f} requests/s)"
    )
    print(
        f"crawdad CPU: {m.cpu:.1f} s = {1000 * m.cpu / turns:.2f} ms per turn "
        f"({1000 * m.cpu / requests:.2f} ms per request)"
        + (" [includes the in-thread server]" if args.server == "thread" else "")
    )
    if usage0 and usage1:
        server_cpu = usage1["cpu"] - usage0["cpu"]
        print(
            f"fake server CPU: {server_cpu:.1f} s = {1000 * server_cpu / requests:.2f} ms per "
            f"request (its own process, peak RSS {usage1['rss_mb']:.0f} MB)"
        )
    print(f"peak RSS of crawdad's process: {m.rss_mb:.0f} MB")
    if samples:
        quarters = [samples[min(len(samples) - 1, len(samples) * q // 4)] for q in (1, 2, 3, 4)]
        print(
            "RSS over the run: "
            + ", ".join(f"{mb:.0f} MB at {t:.0f} s" for t, mb in quarters)
            + " (flat: records go to disk as they finish)"
        )
    size = (folder / "run" / "debates.jsonl").stat().st_size / 2**20
    print(f"debates.jsonl: {size:.0f} MB")
    if n == FULL:
        print(f"target: wall < 120 s and RSS < 500 MB -> {m.wall < 120 and m.rss_mb < 500}")
    if profile:
        print("profile (own time per package, crawdad's process):")
        print("\n".join(by_package(profile)))


if __name__ == "__main__":
    main()
