"""One-GPU workstation: one model resident at a time, a model switch costs S = 2 s.

One fake Ollama server (in its own process) serves the paper's two debaters and the extractor,
one at a time (`resident_models=1`), one request at a time per model (`capacity=1`), with
GPU-like timings (`gpu_latency`: ~0.8 s to first token, ~25 tokens/s, the 2B extractor ~7x
faster) and S = 2 s to load a model that is not resident. Time runs `--time-scale` times faster
than real; every time printed is converted back to real (unscaled) seconds.

Prints model switches per 100 debates (counted by the server: loads that evicted another model)
for fifo and for grouped scheduling, and the real time they would take. crawdad's request
timeouts are scaled too (1800 s for a debater, 120 s for the extractor). Runs send at most
`--max-in-flight` requests per model to the server (crawdad holds the rest), so that a request's
timeout clock does not run while it sits in the server's queue; the last run shows what happens
without that cap.

    .venv/bin/python benchmarks/bench_grouped.py [--quick]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from common import ServerSpec, add_chunking, config_for, header, measure, start_servers, synthetic

from crawdad.fake import gpu_latency

S = 2.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100 questions, not 400")
    parser.add_argument("--time-scale", type=float, default=0.0005)
    parser.add_argument("--max-in-flight", type=int, default=2)
    parser.add_argument("--fifo", type=int, nargs="*", default=[4, 32], help="fifo concurrencies")
    parser.add_argument(
        "--grouped", type=int, nargs="*", default=[32, 128, 256, 400], help="grouped concurrencies"
    )
    parser.add_argument(
        "--uncapped", type=int, nargs="*", default=[400], help="grouped, no max_in_flight"
    )
    add_chunking(parser)
    args = parser.parse_args()
    n = 100 if args.quick else 400
    header(f"grouped vs fifo: one resident model, switch {S:.0f} s, {n} questions", args)

    folder = Path(tempfile.mkdtemp(prefix="crawdad-bench-"))
    dataset = synthetic(n, folder)
    latency = gpu_latency(args.time_scale, switch_seconds=S)
    print(
        f"setup: fake Ollama server in a process, {latency.resident_models} model resident, "
        f"capacity {latency.capacity} per model, time scale {args.time_scale}, "
        f"{args.chunking} chunks"
    )
    print(
        "mode     concurrency  max_in_flight  switches  per 100 debates  real time  "
        "of it switching  per debate  retried turns  errored"
    )
    answers: dict[str, list[tuple[object, ...]]] = {}
    cap = args.max_in_flight
    runs = [("fifo", c, cap) for c in args.fifo] + [("grouped", c, cap) for c in args.grouped]
    runs += [("grouped", c, None) for c in args.uncapped]
    for mode, concurrency, max_in_flight in runs:
        (server,) = start_servers(
            [ServerSpec("ollama", latency, chunking=args.chunking)], folder / "data"
        )
        try:
            config = config_for(
                [server.url],
                kind="ollama",
                concurrency=min(concurrency, n),
                schedule=mode,
                max_in_flight=max_in_flight,
            )
            for spec in [*config.agents, config.extractor]:
                spec.timeout *= args.time_scale
            out = folder / f"run-{mode}-{concurrency}-{max_in_flight}"
            m = measure(config, dataset, out)
            stats = server.stats()["latency"]
        finally:
            server.stop()
        switches = stats["model_switches"]
        real = m.wall / args.time_scale
        debates = m.debates
        print(
            f"{mode:8s} {concurrency:11d} {max_in_flight or '-':>14} {switches:9d} "
            f"{100 * switches / debates:16.1f} "
            f"{real / 3600:8.2f} h {switches * S / 60:13.1f} min {real / debates:9.0f} s "
            f"{_retried(out):14d} {m.summary.errored:8d}"
        )
        if not m.summary.errored:
            answers[f"{mode}-{concurrency}-{max_in_flight}"] = _fingerprint(out)
        else:
            print(f"  errors: {m.summary.errors.most_common(1)}")
    same = len({tuple(v) for v in answers.values()}) == 1
    print(
        f"same debates in the {len(answers)} runs without errors "
        f"(answers, texts, first speakers per question): {same}"
    )


def _retried(out: Path) -> int:
    from crawdad.run.store import RunStore

    return sum(t.attempts > 1 for r in RunStore(out).records() for t in r.turns)


def _fingerprint(out: Path) -> list[tuple[object, ...]]:
    from crawdad.run.store import RunStore

    records = sorted(RunStore(out).records(), key=lambda r: str(r.question_id))
    return [
        (r.question_id, r.first_speaker, r.final_answer, tuple((t.text, t.answer) for t in r.turns))
        for r in records
    ]


if __name__ == "__main__":
    main()
