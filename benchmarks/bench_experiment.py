"""Experiments: do the variants keep the server full, and is every shared request saved?

1. Server bound (P = 64 slots, L = 0.2 s, one model answering every request, as in
   bench_server_bound.py): an experiment of [solo k = 1, paper] over 512 questions. Prints the
   fraction of the server's bound reached, and the requests sent against those of the two
   variants run one after the other (every paper round 0 is the solo sample of the same model:
   the saving should be exactly those requests and their extractions). Run with no cap (the
   server's queue decides the order) and with `max_in_flight` = P and 1.25 P (crawdad's queue
   decides: the debate furthest behind first, so the debates end together).
2. Orchestrator bound: 4 variants (paper, solo, judge, no-be-confident) over 2,500 questions each
   against an instant server. Prints wall time, CPU per turn and peak memory, beside a plain run
   of the paper's protocol over the same questions.

    .venv/bin/python benchmarks/bench_experiment.py [--quick] [--part 1 2]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from bench_orchestrator import RssSampler
from common import (
    SERVER_BOUND_MODELS,
    L,
    LatencyModel,
    P,
    ServerHandle,
    ServerSpec,
    T,
    add_chunking,
    bound,
    config_for,
    header,
    measure,
    requests_served,
    rss_mb,
    server_bound_latency,
    synthetic,
    warm_clients,
)

from crawdad.config import RunConfig
from crawdad.data.questions import Dataset
from crawdad.records import ExperimentManifest
from crawdad.run.experiment import run_experiment
from crawdad.run.store import RunStore


def variants(base: RunConfig, names: list[str]) -> dict[str, RunConfig]:
    out = {}
    for name in names:
        config = base.model_copy(deep=True)
        if name == "solo":
            config = RunConfig.model_validate(
                {
                    **config.model_dump(),
                    "agents": config.model_dump()["agents"][:1],
                    "protocol": {"kind": "solo"},
                }
            )
        elif name == "judge":
            data = config.model_dump()
            judge = {**data["agents"][0]}
            judge.pop("name")
            config = RunConfig.model_validate(
                {**data, "protocol": {"kind": "judge", "rounds": 2}, "judge": judge}
            )
        elif name == "no-be-confident":
            config.prompt_set = "no-be-confident"
        out[name] = config
    return out


def run_variants(configs: dict[str, RunConfig], dataset: Dataset, out: Path) -> tuple[float, float]:
    manifest = ExperimentManifest(
        crawdad_version="bench",
        created_at=time.time(),  # type: ignore[arg-type]
        file="bench",
        file_sha256="",
        variants={n: {} for n in configs},
    )
    for config in configs.values():
        warm_clients(config)
    t0, c0 = time.monotonic(), time.process_time()
    asyncio.run(
        run_experiment(
            configs, manifest, dataset, out, progress=False, simulated=True, check_servers=False
        )
    )
    return time.monotonic() - t0, time.process_time() - c0


def turns_in(out: Path, names: list[str]) -> int:
    return sum(len(r.turns) for n in names for r in RunStore(out / n).records())


def server_bound(
    n: int,
    folder: Path,
    concurrency: int = 256,
    caps: tuple[int, ...] = (0, P, P + P // 4),
    chunking: str = "token",
) -> None:
    dataset = synthetic(n, folder)
    print(
        f"\n-- 1. server bound: P={P}, L={L} s + {T} s a token, {chunking} chunks; {n} questions; "
        f"concurrency {concurrency} per variant"
    )

    def one_model_server() -> ServerHandle:
        return ServerHandle(
            ServerSpec(
                "ollama", server_bound_latency(), models=SERVER_BOUND_MODELS, chunking=chunking
            ),
            folder / "data",
        )

    def config(url: str, cap: int = 0) -> RunConfig:
        return config_for(
            [url],
            kind="ollama",
            concurrency=concurrency,
            models=SERVER_BOUND_MODELS,
            max_in_flight=cap or None,
        )

    apart = 0
    for name in ("solo", "paper"):
        with one_model_server() as server:
            m = measure(
                variants(config(server.url), [name])[name], dataset, folder / f"apart-{name}"
            )
            served = requests_served(server.stats())
        apart += served
        print(f"{name} alone: {served} requests in {m.wall:.1f} s")
    for cap in caps:
        exp = folder / f"exp-cap{cap}"
        with one_model_server() as server:
            wall, cpu = run_variants(
                variants(config(server.url, cap), ["solo", "paper"]), dataset, exp
            )
            stats = server.stats()
            together = requests_served(stats)
        shared_round0 = sum(
            r.turns[0].shared for v in ("paper", "solo") for r in RunStore(exp / v).records()
        )
        rate = together / wall
        print(
            f"experiment [solo, paper], max_in_flight {cap or 'none'}: {together} requests in "
            f"{wall:.1f} s = {rate:.0f}/s = {rate / bound(stats):.3f} of the bound (target >= 0.9); "
            f"crawdad CPU {cpu:.1f} s"
        )
        saved = apart - together
        print(
            f"  requests sent: {together} against {apart} apart: {saved} saved "
            f"({100 * saved / apart:.1f}%); round-0 turns answered from the store: "
            f"{shared_round0} of {n} (each saves its request and its extraction: "
            f"{2 * shared_round0} requests)"
        )


def orchestrator_bound(n: int, folder: Path, chunking: str = "token") -> None:
    dataset = synthetic(n, folder)
    latency = LatencyModel(base_seconds=0.0, capacity=100_000, max_queue=1_000_000)
    names = ["paper", "solo", "judge", "no-be-confident"]
    print(
        f"\n-- 2. orchestrator bound: {len(names)} variants x {n} questions, instant server, "
        f"{chunking} chunks"
    )
    with ServerHandle(
        ServerSpec("ollama", latency, models="one", chunking=chunking), folder / "data"
    ) as server:
        base = config_for([server.url], kind="ollama", concurrency=256, models="one")
        m = measure(base, dataset, folder / "plain")
        plain_turns = sum(len(r.turns) for r in RunStore(folder / "plain").records())
        print(
            f"plain run (paper): {n} debates in {m.wall:.1f} s, "
            f"{1000 * m.cpu / plain_turns:.2f} ms CPU per turn, peak RSS {m.rss_mb:.0f} MB"
        )
        sampler = RssSampler()
        sampler.start()
        wall, cpu = run_variants(variants(base, names), dataset, folder / "exp")
        samples = sampler.stop()
    turns = turns_in(folder / "exp", names)
    quarters = [samples[int(len(samples) * f)][1] for f in (0.25, 0.5, 0.75)] if samples else []
    print(
        f"experiment: {len(names) * n} debates ({turns} turns) in {wall:.1f} s, "
        f"{1000 * cpu / turns:.2f} ms CPU per turn, peak RSS {rss_mb():.0f} MB; "
        f"RSS at 1/4, 1/2, 3/4 of the run: {', '.join(f'{q:.0f}' for q in quarters)} MB"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="128 and 500 questions")
    parser.add_argument("--part", type=int, nargs="*", default=[1, 2])
    parser.add_argument("--concurrency", type=int, default=256, help="per variant, part 1")
    parser.add_argument(
        "--cap",
        type=int,
        nargs="*",
        default=[0, P, P + P // 4],
        help="max_in_flight, part 1 (0: none)",
    )
    add_chunking(parser)
    args = parser.parse_args()
    header("experiments", args)
    folder = Path(tempfile.mkdtemp(prefix="crawdad-bench-exp-"))
    if 1 in args.part:
        server_bound(
            128 if args.quick else 512,
            folder / "one",
            args.concurrency,
            tuple(args.cap),
            args.chunking,
        )
    if 2 in args.part:
        orchestrator_bound(500 if args.quick else 2500, folder / "two", args.chunking)


if __name__ == "__main__":
    main()
