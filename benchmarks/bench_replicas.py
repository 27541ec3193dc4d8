"""The same load over 1, 2 and 4 replicas (fake Ollama servers, one process each).

Every replica serves the paper's three models, at most P requests at once per model, a debater
request taking L seconds and the 2B extractor's a fifth of that. Each of crawdad's three models
lists every replica in `base_urls`; requests go to the least busy one. The concurrency stays the
same for every replica count, large enough to fill four. Prints request throughput and the
speed-up over one replica (target: >= 1.8x with 2, >= 3.5x with 4).

    .venv/bin/python benchmarks/bench_replicas.py [--quick]
"""

from __future__ import annotations

import argparse
import tempfile
from collections import Counter
from pathlib import Path

from common import (
    LatencyModel,
    ServerSpec,
    add_chunking,
    config_for,
    header,
    measure,
    requests_served,
    start_servers,
    synthetic,
)

from crawdad.run.store import RunStore

P, L = 4, 0.5


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="128 questions, not 512")
    parser.add_argument("--replicas", type=int, nargs="*", default=[1, 2, 4])
    parser.add_argument("--concurrency", type=int, default=96)
    add_chunking(parser)
    args = parser.parse_args()
    n = 128 if args.quick else 512
    header(f"replicas: the same {n} questions over {args.replicas} fake servers", args)

    folder = Path(tempfile.mkdtemp(prefix="crawdad-bench-"))
    dataset = synthetic(n, folder)
    latency = LatencyModel(
        base_seconds=L, capacity=P, model_speed={"granite3.3:2b": 0.2}, max_queue=100_000
    )
    print(
        f"setup: each replica in its own process, P={P} per model, L={L} s (extractor "
        f"{0.2 * L} s), concurrency {args.concurrency}; server bound per replica "
        f"{2 * P / L:.0f} debater requests/s; {args.chunking} chunks"
    )
    base = 0.0
    for count in args.replicas:
        servers = start_servers(
            [ServerSpec("ollama", latency, chunking=args.chunking)] * count, folder / "data"
        )
        try:
            config = config_for(
                [s.url for s in servers], kind="ollama", concurrency=args.concurrency
            )
            out = folder / f"run-{count}"
            m = measure(config, dataset, out)
            served = [requests_served(s.stats()) for s in servers]
        finally:
            for s in servers:
                s.stop()
        rate = sum(served) / m.wall
        base = base or rate
        endpoints = Counter(t.endpoint for r in RunStore(out).records() for t in r.turns)
        print(
            f"{count} replica(s): {sum(served)} requests in {m.wall:.1f} s = {rate:.1f}/s, "
            f"{rate / base:.2f}x one replica; requests per replica {served}; "
            f"debater turns per replica {sorted(endpoints.values())}; errored {m.summary.errored}"
        )


if __name__ == "__main__":
    main()
