"""crawdad's CPU per request and per generated token, on the same debates, against the real
servers of the real-server suite (llama-cpp-python's server, vLLM on the CPU) and against the
fakes made to behave like them; with `--profile`, where that CPU goes (cProfile, by package).

The debates (the paper's protocol over `--questions` example questions, `--concurrency` in
flight, `--max-tokens` per response) run to their end through crawdad's runner, metered as
`crawdad bench` meters a phase (crawdad.bench.measure.crawdad_phase). The fakes run in their own
process, so that crawdad's process CPU (getrusage) is crawdad's alone; the real servers too.

    .venv/bin/python benchmarks/bench_request_cost.py [--servers fake-llamacpp,fake-vllm,llamacpp,vllm]
        [--questions 12] [--concurrency 8] [--max-tokens 64] [--profile]

The real servers need `bash .ci/real_servers.sh` (or CRAWDAD_REAL_SERVERS_DIR pointing at them);
a server that is missing is skipped, said why.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import json
import pstats
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT / "tests" / "real"))

from common import header  # noqa: E402
from servers import llamacpp_server, missing_requirements, vllm_server  # noqa: E402

from crawdad.bench.measure import crawdad_phase  # noqa: E402
from crawdad.config import AgentConfig, ExtractorConfig, ProtocolConfig, RetryConfig, RunConfig  # noqa: E402
from crawdad.data.demo_questions import write_cladder  # noqa: E402
from crawdad.data.questions import Dataset, load_cladder  # noqa: E402
from crawdad.run.runner import check_servers_of  # noqa: E402

DEBATER, EXTRACTOR = "fake-debater", "fake-extractor"
REAL = ("llamacpp", "vllm")

# The fakes, each in the manner of a real server (crawdad/fake/protocol.py, openai_app.py):
# one event a token, llama.cpp's /metrics, its structured-output form, a request not streamed
# finished after its client went; vLLM's chunks are one token each too.
FAKES: dict[str, dict[str, Any]] = {
    "fake-llamacpp": {  # llama-cpp-python's server, as the real-server suite runs it
        "chunking": "token",
        "metrics": "llamacpp",
        "finish_unstreamed": True,
        "reasoning_style": "reasoning_content",
        "structured_forms": ["json_object_schema"],
        "unsupported_structured": "error",
        "unsupported_status": 500,
    },
    "fake-llama-server": {  # the C++ llama-server of the GPU kit: closes every connection
        "chunking": "token",
        "metrics": "llamacpp",
        "finish_unstreamed": True,
        "reasoning_style": "reasoning_content",
        "close_after_stream": True,
    },
    "fake-vllm": {"chunking": "token", "metrics": "vllm"},
}

FAKE_MAIN = """
import json, sys
from crawdad.fake import FakeServer, LatencyModel, paper_models
settings, per_token, capacity = json.loads(sys.argv[1]), float(sys.argv[2]), int(sys.argv[5])
models = paper_models()
models = {sys.argv[3]: models["qwen3:32b"], sys.argv[4]: models["granite3.3:2b"]}
latency = LatencyModel(base_seconds=0.01, per_token_seconds=per_token, capacity=capacity)
with FakeServer("openai", models, latency=latency, **settings) as server:
    print(server.url, flush=True)
    sys.stdin.read()
"""


@contextlib.contextmanager
def fake(name: str, per_token: float, capacity: int = 64) -> Iterator[tuple[str, str, str]]:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            FAKE_MAIN,
            json.dumps(FAKES[name]),
            str(per_token),
            DEBATER,
            EXTRACTOR,
            str(capacity),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        yield url, DEBATER, EXTRACTOR
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(timeout=30)


@contextlib.contextmanager
def real(name: str) -> Iterator[tuple[str, str, str]]:
    # llama-cpp-python cuts a stream when another request comes unless told not to (WIRE_NOTES)
    server = llamacpp_server(interrupt_requests=False) if name == "llamacpp" else vllm_server()
    with server:
        yield server.base_url, server.model, server.model


def config_for(url: str, debater: str, extractor: str, args: argparse.Namespace) -> RunConfig:
    common: dict[str, Any] = dict(backend="openai", base_urls=[url], temperature=0.0, top_p=1.0)
    return RunConfig(
        agents=[
            AgentConfig(name="a", model=debater, max_tokens=args.max_tokens, **common),
            AgentConfig(name="b", model=debater, max_tokens=args.max_tokens, **common),
        ],
        extractor=ExtractorConfig(model=extractor, max_tokens=48, **common),
        protocol=ProtocolConfig(max_turns=4),
        retry=RetryConfig(attempts=3, initial_wait=0.5, max_wait=5.0),
        concurrency=args.concurrency,
        server_metrics=0,
    )


async def measure(cfg: RunConfig, dataset: Dataset, profile: cProfile.Profile | None) -> Any:
    servers = await check_servers_of(cfg)
    folder = Path(tempfile.mkdtemp(prefix="crawdad-request-cost-")) / "run"
    if profile is not None:
        profile.enable()
    try:
        result, _ = await crawdad_phase(cfg, dataset, folder, cfg.concurrency, 1e9, servers)
    finally:
        if profile is not None:
            profile.disable()
    return result


GROUPS = (
    ("crawdad/backends/streaming", "crawdad: stream reader"),
    ("crawdad/backends", "crawdad: backends"),
    ("crawdad/bench", "crawdad: bench meter"),
    ("crawdad/run", "crawdad: runner, records"),
    ("crawdad/protocols", "crawdad: protocols"),
    ("crawdad/scoring", "crawdad: extraction"),
    ("crawdad/", "crawdad: other"),
    ("openai/", "openai SDK"),
    ("httpx", "httpx (under openai)"),
    ("aiohttp/", "aiohttp"),
    ("pydantic", "pydantic"),
    ("asyncio/", "asyncio"),
    ("json/", "json"),
    ("ssl", "ssl"),
)


def by_package(profile: cProfile.Profile) -> list[tuple[str, float]]:
    """Own CPU time (tottime) summed by package."""
    stats = pstats.Stats(profile)
    totals: dict[str, float] = defaultdict(float)
    for (path, _, _), (_, _, tottime, _, _) in stats.stats.items():  # type: ignore[attr-defined]
        label = next((g for key, g in GROUPS if key in path), None)
        if label is None:
            label = "builtins, C calls" if path == "~" else "other Python"
        totals[label] += tottime
    return sorted(totals.items(), key=lambda x: -x[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--servers", default="fake-llamacpp,fake-vllm,llamacpp,vllm")
    parser.add_argument("--questions", type=int, default=12)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--fake-per-token", type=float, default=0.004, help="the fakes' s/token")
    parser.add_argument("--fake-slots", type=int, default=64, help="the fakes' requests at once")
    parser.add_argument("--profile", action="store_true", help="where the CPU goes (cProfile)")
    parser.add_argument(
        "--paced",
        action="store_true",
        help="after each real server, its fake twin at the pace the real one had",
    )
    parser.add_argument("--top", type=int, default=15, help="functions listed with --profile")
    args = parser.parse_args()
    header("crawdad's CPU per request and per token, same debates, real and fake servers", args)
    dataset = load_cladder(write_cladder(Path(tempfile.mkdtemp()) / "data", args.questions))
    rows = []
    names = args.servers.split(",")
    if args.paced:  # each real server followed by its fake twin, at the real one's pace
        names = [x for n in names for x in ((n, f"fake-{n}") if n in REAL else (n,))]
    paced: dict[str, tuple[float, int]] = {}
    for name in names:
        if name in REAL and (missing := missing_requirements(name)):  # type: ignore[arg-type]
            print(f"{name}: skipped ({'; '.join(missing)})")
            continue
        per_token, capacity = paced.get(name, (args.fake_per_token, args.fake_slots))
        place = real(name) if name in REAL else fake(name, per_token, capacity)
        with place as (url, debater, extractor):
            cfg = config_for(url, debater, extractor, args)
            profile = cProfile.Profile(time.process_time) if args.profile else None
            t0 = time.monotonic()
            r = asyncio.run(measure(cfg, dataset, profile))
            wall = time.monotonic() - t0
        if name in REAL and r.tokens:
            # the twin's pace: a request's life over its tokens (llama-cpp-python serves one
            # request at a time: a twin of one slot; vLLM batches)
            life = r.window.in_flight * r.window.seconds / max(1, r.sent)
            one = name == "llamacpp"
            paced[f"fake-{name}"] = (
                (wall / r.tokens) if one else life * r.sent / r.tokens,
                1 if one else 64,
            )
        per_request = 1000 * r.cpu_seconds / max(1, r.sent)
        rows.append((name, r, wall, per_request))
        note = f" (paced: {paced[name][0] * 1000:.1f} ms a token)" if name in paced else ""
        print(
            f"{name:>17}: {r.debates} debates, {r.sent} requests ({r.failed} failed), "
            f"{r.tokens} tokens in {wall:.1f} s{note}; crawdad {r.cpu_seconds:.2f} s CPU = "
            f"{per_request:.2f} ms/request, {r.cpu_ms_per_token or 0:.3f} ms/token"
        )
        if profile is not None:
            total = sum(t for _, t in by_package(profile)) or 1.0
            print("    own CPU by package (cProfile, its overhead included):")
            for label, t in by_package(profile)[:10]:
                print(f"      {label:<26} {t:6.2f} s  {t / total:5.1%}")
            print(f"    top {args.top} functions by own time:")
            stats = pstats.Stats(profile)
            stats.sort_stats("tottime")
            for func in stats.fcn_list[: args.top]:  # type: ignore[attr-defined]
                _, ncalls, tottime, cumtime, _ = stats.stats[func]  # type: ignore[attr-defined]
                where = f"{Path(func[0]).parent.name}/{Path(func[0]).name}:{func[1]}({func[2]})"
                print(f"      {tottime:6.3f} s own {cumtime:6.3f} s cum {ncalls:>7} calls  {where}")
    fakes = {n: r for n, r, _, _ in rows if n.startswith("fake")}
    for name, _, _, per_request in rows:
        twin = fakes.get(f"fake-{name}")
        if twin is not None and twin.sent:
            ratio = per_request / (1000 * twin.cpu_seconds / twin.sent)
            print(f"{name}: {ratio:.2f} x the CPU per request against fake-{name}")


if __name__ == "__main__":
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    main()
