"""Benchmark: `write_report` on a full-size synthetic run (10,112 debates, as CLadder).

    .venv/bin/python benchmarks/bench_analysis.py [--n 10112] [--workers N] [--keep DIR]

Writes a synthetic run folder (realistic reasoning traces of several thousand characters each,
varied text) into a temporary folder, then times `write_report` on it and prints the wall time and
the peak resident memory of this process and of the largest worker process. Targets: under one
minute and under 2 GB on a 2-core machine.
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from crawdad.analysis.report import write_report
from crawdad.analysis.synthetic_runs import write_synthetic_run


def _maxrss_mb(who: int) -> float:
    return resource.getrusage(who).ru_maxrss / 1024  # kilobytes on Linux


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10_112, help="debates to generate")
    ap.add_argument("--workers", type=int, default=None, help="processes (default: CPUs, max 4)")
    ap.add_argument("--keep", type=Path, default=None, help="write run and report here, keep them")
    args = ap.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        base = args.keep or Path(tmp)
        run = base / "run"
        t0 = time.perf_counter()
        write_synthetic_run(run, args.n, seed=0, error_rate=0.005, unextracted_rate=0.005)
        gen_s = time.perf_counter() - t0
        size_mb = (run / "debates.jsonl").stat().st_size / 1e6
        lines = sum(1 for _ in (run / "debates.jsonl").open("rb"))
        rss_before = _maxrss_mb(resource.RUSAGE_SELF)
        print(f"generated {args.n} debates ({lines} lines, {size_mb:.0f} MB) in {gen_s:.1f} s")

        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            report = write_report([run], base / "report", workers=args.workers)
        report_s = time.perf_counter() - t0

        files = [p for p in report.parent.rglob("*") if p.is_file()]
        print(f"write_report: {report_s:.1f} s wall, {len(files)} files written")
        print(
            f"peak RSS: this process {_maxrss_mb(resource.RUSAGE_SELF):.0f} MB "
            f"(before the report: {rss_before:.0f} MB), "
            f"largest worker {_maxrss_mb(resource.RUSAGE_CHILDREN):.0f} MB"
        )
        ok = report_s < 60 and _maxrss_mb(resource.RUSAGE_SELF) < 2048
        print("targets (< 60 s, < 2 GB):", "met" if ok else "MISSED")
    return 0


if __name__ == "__main__":
    sys.exit(main())
