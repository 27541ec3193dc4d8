"""Is a run bounded by the server, not by crawdad? P = 64 slots, L = 0.2 s + 2 ms a token.

One fake Ollama server in its own process serves one model that answers every request of the
run (both debaters' turns, a self-debate, and the extractor's), so that all requests share the
same P slots. A request takes L seconds to its first token and T seconds a token after that,
streamed one token a chunk as real servers do (replies shorter than the profile's, ~150 tokens,
so that a run lasts seconds), all slowed by `slowdown` for each other request in flight; the
server's bound is therefore P / ((L + T x mean tokens) * (1 + slowdown * (P - 1))) requests per
second, with the mean tokens a reply of the run.

Prints the achieved request throughput as a fraction of that bound at a few concurrencies (with
no cap, and with the endpoint capped at P and at 1.25 P), and the speed-up over one request at a time
(concurrency 1), extrapolated from a serial run over the first `--serial` questions: serial time
per request, times the requests of the full run.

Short of the bound by the run's tail: each debate's requests go one after another, so the last
debates finish their chains with the server part empty. With a cap, the requests beyond it wait
in crawdad, the debate furthest behind first, and the debates end together: a shorter tail. A
cap of exactly P leaves a slot empty for each request's trip back to crawdad and out again;
1.25 P keeps a few queued at the server.

    .venv/bin/python benchmarks/bench_server_bound.py [--quick]
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
from pathlib import Path

from common import (
    SERVER_BOUND_MODELS,
    SLOWDOWN,
    L,
    P,
    ServerSpec,
    T,
    bound,
    config_for,
    header,
    measure,
    requests_served,
    server_bound_latency,
    start_servers,
    synthetic,
)

from crawdad.run.store import RunStore


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="128 questions, not 512")
    parser.add_argument("--concurrency", type=int, nargs="*", default=[64, 128, 256])
    parser.add_argument("--serial", type=int, default=24, help="questions of the serial run")
    parser.add_argument(
        "--cap",
        type=int,
        nargs="*",
        default=[0, P, P + P // 4],
        help="max_in_flight for the server (0: none); each is run at each concurrency",
    )
    parser.add_argument("--server", choices=["process", "thread"], default="process")
    args = parser.parse_args()
    n = 128 if args.quick else 512
    header(
        f"server bound: P={P}, L={L} s, T={T} s a token, slowdown {SLOWDOWN} per other "
        f"request, {n} questions",
        args,
    )

    folder = Path(tempfile.mkdtemp(prefix="crawdad-bench-"))
    dataset = synthetic(n, folder)
    latency = server_bound_latency()
    print(
        f"setup: one fake Ollama server in a {args.server}, one model for every request, one "
        f"token a chunk; bound = {P} / ((L + T x mean tokens) x {1 + SLOWDOWN * (P - 1):.3f})"
    )

    best = 0.0
    full_requests = 0
    for cap in args.cap:
        for concurrency in args.concurrency:
            (server,) = start_servers(
                [ServerSpec("ollama", latency, models=SERVER_BOUND_MODELS)],
                folder / "data",
                args.server,
            )
            try:
                config = config_for(
                    [server.url],
                    kind="ollama",
                    concurrency=concurrency,
                    models=SERVER_BOUND_MODELS,
                    max_in_flight=cap or None,
                )
                out = folder / f"run-{cap}-{concurrency}"
                before = server.usage() or {"cpu": 0.0}
                m = measure(config, dataset, out)
                stats = server.stats()
                server_cpu = (server.usage() or {"cpu": 0.0})["cpu"] - before["cpu"]
            finally:
                server.stop()
            requests = requests_served(stats)
            full_requests = requests
            rate = requests / m.wall
            limit = bound(stats)
            best = max(best, rate / limit)
            span = _serving_span(out)
            print(
                f"cap {cap or 'none':>4} concurrency {concurrency:4d}: {requests} requests in "
                f"{m.wall:.2f} s = {rate:.0f}/s = {rate / limit:.3f} of the bound ({limit:.0f}/s) "
                f"({requests / span / limit:.3f} from the first request to the last answer, "
                f"{span:.2f} s); most in flight at the server "
                f"{stats['latency']['max_concurrent']}; crawdad CPU {m.cpu:.1f} s "
                f"({100 * m.cpu / m.wall:.0f}% of a core), server CPU {server_cpu:.1f} s; errored "
                f"{m.summary.errored}"
            )

    subset = dataclasses.replace(dataset, questions=dataset.questions[: args.serial])
    (server,) = start_servers(
        [ServerSpec("ollama", latency, models=SERVER_BOUND_MODELS)], folder / "data", args.server
    )
    try:
        serial = measure(
            config_for([server.url], kind="ollama", concurrency=1, models=SERVER_BOUND_MODELS),
            subset,
        )
        serial_requests = requests_served(server.stats())
    finally:
        server.stop()
    per_request = serial.wall / serial_requests
    serial_total = per_request * full_requests
    concurrent_wall = full_requests / (best * limit)
    print(
        f"serial (concurrency 1): {serial_requests} requests of the first {args.serial} questions "
        f"in {serial.wall:.1f} s = {1000 * per_request:.0f} ms each; x {full_requests} requests "
        f"= {serial_total:.0f} s for the whole set (extrapolated)"
    )
    print(
        f"best concurrent run: {concurrent_wall:.1f} s -> {serial_total / concurrent_wall:.0f}x "
        f"the serial run; {best:.3f} of the server's bound"
        + (
            f" (target >= 0.9) -> {best >= 0.9}"
            if not args.quick
            else " (a short run: the tail weighs)"
        )
    )


def _serving_span(out: Path) -> float:
    """Seconds from the first request sent to the last debate finished (no start-up cost)."""
    records = RunStore(out).records()
    first = min(r.turns[0].started_at for r in records if r.turns and r.turns[0].started_at)
    last = max(r.finished_at for r in records if r.finished_at)
    return (last - first).total_seconds()


if __name__ == "__main__":
    main()
