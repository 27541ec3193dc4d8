"""A run whose server answers its metrics in a hostile way, against the same run beside an honest
one: every debate's wall time and crawdad's peak memory (issue 47).

Each case is a 32-question run on the fakes (one fake vLLM in its own process, the server-bound
setup of bench_metrics_overhead.py), sampled every `--every` seconds (default 0.5 s: ten times
the default rate). The metrics are read from a server of tests/hostile_servers.py at its real
sizes (in a process of its own): an endless page, a 200 MB page, a million label values, a gzip
bomb of 1 GB, a slow answer, and the honest page. Each run is in a fresh process, so that its
peak RSS (`ru_maxrss`) is that run's alone. Prints per case: wall time, the ratio to the honest
run's, debates finished, peak RSS of crawdad's process, samples written and lost.

    .venv/bin/python benchmarks/bench_hostile_metrics.py [--quick] [--repeats 2] [--every 0.5]
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing as mp
import resource
import statistics
import sys
import tempfile
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

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

sys.path.append(str(Path(__file__).resolve().parents[1]))  # tests.hostile_servers

CASES = ["honest", "endless", "huge", "million_labels", "gzip_bomb", "slow"]


def _serve_hostile(mode: str, scale: Any, conn: Connection) -> None:
    """Child process: the hostile metrics server, until told to stop."""
    import asyncio

    from aiohttp import web

    from tests.hostile_servers import hostile_app

    async def serve() -> None:
        runner = web.AppRunner(hostile_app(mode, scale), access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        conn.send(f"http://127.0.0.1:{port}/v1")
        await asyncio.get_running_loop().run_in_executor(None, conn.recv)
        await runner.cleanup()

    asyncio.run(serve())


def _run_case(
    model_url: str, metrics_url: str, data: Path, n: int, every: float, conn: Connection
) -> None:
    """Child process: one run, its metrics read from `metrics_url`; sends its figures back."""
    from crawdad.run import server_series
    from crawdad.run.server_series import read_series

    # The run's requests go to the fake model server; its sampler reads the hostile server.
    server_series.ServerSampler.servers = lambda self: {metrics_url: "openai"}  # type: ignore[method-assign]
    dataset = synthetic(n, data)
    config = config_for([model_url], kind="openai", concurrency=16, models="one")
    config.server_metrics = every
    out = Path(tempfile.mkdtemp(prefix="crawdad-bench-hostile-")) / "run"
    m = measure(config, dataset, out)
    lines = read_series(out)
    samples = [x for x in lines if "servers" in x]
    lost = max((x["servers"].get(metrics_url, {}).get("lost", 0) for x in samples), default=0)
    read = sum("kind" in x["servers"].get(metrics_url, {}) for x in samples)
    conn.send(
        {
            "wall": m.wall,
            "finished": m.summary.finished,
            "errored": m.summary.errored,
            "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "samples": len(samples),
            "read": read,
            "lost": lost,
            "notes": [x["note"] for x in lines if "note" in x],
        }
    )


def parse_costs() -> None:
    """The parse of one sample, in the worker thread: a real vLLM page, and pages at the caps."""
    import time

    try:
        from crawdad.backends.server_metrics import LIMITS, Lost, parse_prometheus
    except ImportError:  # a crawdad before the bounds (PYTHONPATH=an older checkout)
        print("parse costs: not measured (this crawdad has no bounded reader)")
        return

    real = (Path(__file__).resolve().parents[1] / "tests/real/wire/vllm_metrics.txt").read_bytes()
    line = b'vllm:num_requests_running{engine="0",id="%d"} 1.0\n'
    pages = {
        f"real vLLM page ({len(real) / 1e3:.0f} KB)": real,
        "4 MB of lines crawdad does not read": b"# HELP x y\n" * (LIMITS.max_bytes // 11),
        "2,000 series of a read metric": b"".join(line % i for i in range(2_000)),
        "100,000 series (refused at 2,000)": b"".join(line % i for i in range(100_000)),
    }
    print(f"{'page':<40} {'ms a parse':>10}")
    for name, page in pages.items():
        n = max(1, int(2e6 // len(page)))
        t0 = time.perf_counter()
        for _ in range(n):
            with contextlib.suppress(Lost):
                parse_prometheus(page)
        print(f"{name:<40} {1e3 * (time.perf_counter() - t0) / n:>10.3f}")


def main() -> None:
    main_guard()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one repeat, fewer cases")
    parser.add_argument("--questions", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--every", type=float, default=0.5, help="seconds between samples")
    parser.add_argument("--cases", nargs="*", default=CASES, choices=CASES)
    args = parser.parse_args()
    from tests.hostile_servers import Scale

    scale = Scale(
        huge=200_000_000, labels=1_000_000, bomb=1_000_000_000, slow_s=3600.0, ps_models=1_000_000
    )
    cases = ["honest", *(c for c in args.cases if c != "honest")]
    cases = cases[:4] if args.quick else cases
    repeats = 1 if args.quick else args.repeats
    header(f"a {args.questions}-question run beside a hostile metrics server", args)
    parse_costs()
    folder = Path(tempfile.mkdtemp(prefix="crawdad-bench-hostile-"))
    synthetic(args.questions, folder / "data")
    spec = ServerSpec("openai", server_bound_latency(), models=SERVER_BOUND_MODELS)
    (model,) = start_servers([spec], folder / "data")
    ctx = mp.get_context("spawn")
    results: dict[str, list[dict[str, Any]]] = {c: [] for c in cases}
    try:
        for r in range(repeats):
            for case in cases if r % 2 == 0 else cases[::-1]:
                ours, theirs = ctx.Pipe()
                server = ctx.Process(target=_serve_hostile, args=(case, scale, theirs))
                server.start()
                metrics_url = ours.recv()
                mine, child = ctx.Pipe()
                runner = ctx.Process(
                    target=_run_case,
                    args=(model.url, metrics_url, folder, args.questions, args.every, child),
                )
                runner.start()
                results[case].append(mine.recv())
                runner.join()
                ours.send("stop")
                server.join(timeout=30)
    finally:
        model.stop()
    honest = statistics.median(x["wall"] for x in results["honest"])
    print(
        f"{'case':<15} {'wall s':>7} {'ratio':>6} {'debates':>8} {'peak MB':>8} "
        f"{'samples':>8} {'read':>5} {'lost':>5}"
    )
    for case in cases:
        xs = results[case]
        wall = statistics.median(x["wall"] for x in xs)
        print(
            f"{case:<15} {wall:>7.2f} {wall / honest:>6.2f} "
            f"{min(x['finished'] for x in xs):>4}/{args.questions:<3} "
            f"{max(x['rss_mb'] for x in xs):>8.0f} {xs[0]['samples']:>8} {xs[0]['read']:>5} "
            f"{xs[0]['lost']:>5}"
        )
    for case in cases:  # what each case's notes said (one per cause)
        for note in results[case][0]["notes"]:
            print(f"  {case}: {note.split(' was lost: ')[-1].split(';')[0][:100]}")


if __name__ == "__main__":
    main()
