"""Benchmark: `crawdad view` on a full-size synthetic run (10,112 debates, as CLadder).

    .venv/bin/python benchmarks/bench_viewer.py [--n 10112] [--keep DIR]

Writes a synthetic run folder with reasoning traces (about 170 MB of JSONL for 10,112 debates),
then prints: the start time (indexing debates.jsonl once), the resident memory of the index, and
the time of the main pages served over loopback (the table unfiltered, filtered, sorted, a late
page; a debate page; the persuasion bars), and of a reload after 100 debates were appended;
then the live view's `/live.json` (what its page polls every 2 s): its first answer with a full
servers.jsonl (4,000 samples, the bound), a poll with nothing new, and one after 100 debates
and 1 sample were appended.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psutil
from crawdad.analysis.synthetic_runs import synthetic_records, write_synthetic_run

from crawdad.view import Server, Viewer


def _rss_mb() -> float:
    return psutil.Process().memory_info().rss / 1e6


TOKEN = "bench"  # the viewer's session token, sent with every request as a script does


def _time(url: str, repeat: int = 5) -> tuple[float, int]:
    """Median milliseconds of a GET, and the page's size in bytes."""
    times, size = [], 0
    request = urllib.request.Request(url, headers={"Authorization": f"token {TOKEN}"})
    for _ in range(repeat):
        t0 = time.perf_counter()
        with urllib.request.urlopen(request, timeout=60) as r:
            size = len(r.read())
        times.append(1000 * (time.perf_counter() - t0))
    return statistics.median(times), size


def _sample(i: int) -> str:
    """A servers.jsonl sample of a vLLM server, 5 s apart."""
    fig = {
        "kind": "vllm",
        "source": "GET /metrics",
        "running": 48 + i % 16,
        "waiting": i % 7,
        "kv_cache": 0.5 + (i % 40) / 100,
        "generation_tokens": 900 * i,
        "in_flight": 64,
        "responses": 3 * i,
        "tokens": 890 * i,
    }
    line = {"at": 1.8e9 + 5 * i, "t": 5 * i, "servers": {"http://gpu:8000/v1": fig}, "debates": i}
    return json.dumps(line) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10_112, help="debates to generate")
    ap.add_argument("--keep", type=Path, default=None, help="write the run here and keep it")
    args = ap.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        run = (args.keep or Path(tmp)) / "run"
        if not (run / "debates.jsonl").exists():
            t0 = time.perf_counter()
            write_synthetic_run(run, args.n, seed=0, error_rate=0.005, unextracted_rate=0.005)
            print(f"generated the run in {time.perf_counter() - t0:.1f} s")
        size_mb = (run / "debates.jsonl").stat().st_size / 1e6
        print(f"run: {run} ({size_mb:.0f} MB of JSONL)")

        rss0 = _rss_mb()
        t0 = time.perf_counter()
        viewer = Viewer.open([run])
        server = Server(viewer, 0, token=TOKEN)
        url = server.start()
        start_s = time.perf_counter() - t0
        n = len(viewer.entries())
        print(f"start (index {n} debates + serve): {start_s:.2f} s")
        print(f"memory: {_rss_mb():.0f} MB resident ({_rss_mb() - rss0:+.0f} MB for the index)")
        try:
            qids = random.Random(0).sample(sorted(viewer.runs["run"].entries), 20)
            pages = {
                "table, no filter": url,
                "table, rung 3 + outcome I->C": url + "?rung=3&outcome=I-%3EC",
                "table, 4 filters": url + "?rung=2&alignment=nonsense&consensus=no&stop=length",
                "table, sorted by length": url + "?sort=length&dir=desc",
                "table, page 150": url + "?page=150",
                "persuasion outcomes": url + "outcomes",
            }
            for name, page in pages.items():
                ms, size = _time(page)
                print(f"{name:32s} {ms:7.1f} ms  ({size / 1000:.0f} kB)")
            debate = [_time(f"{url}debate/run/{q}", repeat=1) for q in qids]
            print(
                f"{'debate page (median of 20)':32s} "
                f"{statistics.median(ms for ms, _ in debate):7.1f} ms  "
                f"({statistics.median(s for _, s in debate) / 1000:.0f} kB)"
            )
            size = (run / "debates.jsonl").stat().st_size
            with (run / "debates.jsonl").open("a") as f:
                for rec in synthetic_records(100, seed=3, ids=range(10**6, 10**6 + 100)):
                    f.write(rec.model_dump_json() + "\n")
            ms, _ = _time(url, repeat=1)
            print(
                f"{'reload after 100 appended':32s} {ms:7.1f} ms  ({len(viewer.entries())} debates)"
            )
            series = run / "servers.jsonl"
            series.write_text("".join(_sample(i) for i in range(4000)))
            ms, size = _time(url + "live.json", repeat=1)
            print(f"{'live.json, first (4,000 samples)':32s} {ms:7.1f} ms  ({size / 1000:.0f} kB)")
            ms, size = _time(url + "live.json", repeat=20)
            print(f"{'live.json, nothing new (med. 20)':32s} {ms:7.1f} ms  ({size / 1000:.0f} kB)")
            with (run / "debates.jsonl").open("a") as f:
                for rec in synthetic_records(100, seed=4, ids=range(2 * 10**6, 2 * 10**6 + 100)):
                    f.write(rec.model_dump_json() + "\n")
            with series.open("a") as f:
                f.write(_sample(4000))
            ms, size = _time(url + "live.json", repeat=1)
            print(
                f"{'live.json, 100 + 1 sample new':32s} {ms:7.1f} ms  "
                f"({len(viewer.entries())} debates)"
            )
            print(f"memory at the end: {_rss_mb():.0f} MB resident")
        finally:
            server.stop()
            if "size" in locals():  # leave a kept run as it was
                with (run / "debates.jsonl").open("r+b") as f:
                    f.truncate(size)
            (run / "servers.jsonl").unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
