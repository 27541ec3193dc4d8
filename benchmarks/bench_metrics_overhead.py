"""Does sampling the servers' metrics slow a run? The same run with and without it, side by side.

The server-bound setup of bench_server_bound.py (one fake vLLM in its own process, P = 64 slots,
L = 0.2 s + 2 ms a token, replies streamed one token a chunk), serving vLLM's /metrics. Each
repeat runs the same questions twice, in alternating order: `server_metrics = 0` (off) and
`server_metrics = --every` seconds (default 0.5 s: ten times the default rate, so that a run of
seconds takes enough samples to show a cost). Prints each pair's wall time and crawdad's CPU, the
samples taken, and the median ratio with/without (the target: within 2%).

    .venv/bin/python benchmarks/bench_metrics_overhead.py [--quick] [--repeats 5] [--every 0.5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from common import (
    SERVER_BOUND_MODELS,
    ServerSpec,
    config_for,
    header,
    main_guard,
    measure,
    server_bound_latency,
    start_servers,
    synthetic,
)

from crawdad.run.server_series import read_series


def main() -> None:
    main_guard()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer questions and repeats")
    parser.add_argument("--questions", type=int, default=400)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--every", type=float, default=0.5, help="seconds between samples")
    args = parser.parse_args()
    if args.quick:
        args.questions, args.repeats = 120, 3
    header("server metrics sampling: a run's wall time with and without it", args)
    folder = Path(tempfile.mkdtemp(prefix="crawdad-bench-metrics-"))
    dataset = synthetic(args.questions, folder / "data")
    spec = ServerSpec("openai", server_bound_latency(), models=SERVER_BOUND_MODELS)
    (server,) = start_servers([spec], folder / "data")
    try:
        ratios, cpu_ratios = [], []
        print(
            f"{'repeat':>6} {'off s':>8} {'on s':>8} {'ratio':>7} {'CPU off':>8} "
            f"{'CPU on':>8} {'samples':>7}"
        )
        for i in range(args.repeats):
            runs = {}
            order = (0.0, args.every) if i % 2 == 0 else (args.every, 0.0)
            for every in order:
                config = config_for(
                    [server.url], kind="openai", concurrency=args.concurrency, models="one"
                )
                config.server_metrics = every
                out = folder / f"run-{i}-{every}" / "run"
                runs[every] = (measure(config, dataset, out), out)
            (off, _), (on, out_on) = runs[0.0], runs[args.every]
            samples = sum("servers" in x for x in read_series(out_on))
            ratio, cpu_ratio = on.wall / off.wall, on.cpu / off.cpu
            ratios.append(ratio)
            cpu_ratios.append(cpu_ratio)
            print(
                f"{i + 1:>6} {off.wall:>8.2f} {on.wall:>8.2f} {ratio:>7.3f} {off.cpu:>8.2f} "
                f"{on.cpu:>8.2f} {samples:>7}"
            )
        print(
            f"median wall ratio with/without sampling: {statistics.median(ratios):.3f} "
            f"(range {min(ratios):.3f}-{max(ratios):.3f}); crawdad CPU ratio "
            f"{statistics.median(cpu_ratios):.3f}"
        )
    finally:
        server.stop()


if __name__ == "__main__":
    main()
