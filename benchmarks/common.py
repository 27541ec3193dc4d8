"""What the throughput benchmarks share: synthetic data, fake servers (in a thread or in a
process of their own), configs, and measuring a run.

Not a test module: the benchmarks print figures and never assert on wall-clock time.
"""

from __future__ import annotations

import asyncio
import importlib
import multiprocessing as mp
import os
import platform
import resource
import sys
import tempfile
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Literal

from crawdad.config import RunConfig
from crawdad.data.demo_questions import write_cladder
from crawdad.data.questions import Dataset, load_cladder
from crawdad.demo import answer_key
from crawdad.fake import (
    FakeExtractor,
    FakeModel,
    FakeReply,
    FakeRequest,
    FakeServer,
    FaultPlan,
    LatencyModel,
    ProfileModel,
    paper_models,
)
from crawdad.run.runner import RunSummary, run

Kind = Literal["ollama", "openai"]
QWEN, DEEPSEEK, GRANITE = "qwen3:32b", "deepseek-r1:32b", "granite3.3:2b"
ONE_MODEL = "gpu-model"
# How the fakes stream in every benchmark: one token a chunk, as real servers do.
CHUNKING = "token"


# --- the machine -------------------------------------------------------------------------------


def machine() -> str:
    cpu = platform.processor() or "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return (
        f"{os.cpu_count()} cores ({cpu}), Python {platform.python_version()}, "
        f"load average {load} at start"
    )


def header(title: str, args: Any) -> None:
    print(f"== {title}{' (--quick)' if getattr(args, 'quick', False) else ''}")
    print(f"machine: {machine()}")


def rss_mb() -> float:
    """Peak resident memory of this process so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# --- data and models ---------------------------------------------------------------------------


def synthetic(n: int, folder: Path | None = None) -> Dataset:
    folder = folder or Path(tempfile.mkdtemp(prefix="crawdad-bench-"))
    return load_cladder(write_cladder(folder / "data", n))


# Shorter replies than the profile's (~520 tokens a request on average, ~150 with these): one
# token a chunk at the server-bound setup's pace, a paper-length run would take many minutes.
SHORT_REPLIES: dict[str, Any] = {
    "thinking_words": (60, 200),
    "debate_thinking_words": (40, 120),
    "initial_words": (30, 60),
    "debate_words": (20, 50),
}


class OneModel(FakeModel):
    """One served model answering both debaters' turns and the extractor's requests, so that
    every request of a run counts against the same P slots of one server (a self-debate)."""

    def __init__(self, dataset_folder: Path, seed: int = 0, **profile: Any) -> None:
        key = answer_key(load_cladder(dataset_folder).questions)
        self.debater = ProfileModel(key, "qwen3", seed=seed, **profile)
        self.extractor = FakeExtractor(seed=seed)

    def reply(self, request: FakeRequest) -> FakeReply:
        if request.structured:
            return self.extractor.reply(request)
        return self.debater.reply(request)


class StreamingModel(FakeModel):
    """A reply of `thinking` + `text` words drawn from a vocabulary (seeded by the request, so
    it reads as varied text to the loop check), for measuring the cost of streaming alone."""

    TEXT = (
        "the effect of X on Y goes through V2 so we condition on V3 and compute P(Y=1|X=1) "
        "= 0.42 minus 0.17 which is 0.25 wait let me check the backdoor path again because "
        "the story says smoking causes tar and tar causes cancer therefore yes no maybe "
        "indirect direct total natural counterfactual intervention estimand collider"
    )

    def __init__(self, thinking: int, text: int) -> None:
        self.thinking, self.text = thinking, text

    def reply(self, request: FakeRequest) -> FakeReply:
        import random

        rng = random.Random(request.digest)
        vocabulary = self.TEXT.split(" ")
        words = [rng.choice(vocabulary) for _ in range(self.thinking + self.text)]
        return FakeReply(
            thinking=" ".join(words[: self.thinking]),
            text=" ".join(words[self.thinking :]),
        )


def build_models(which: str, dataset_folder: Path, seed: int = 0) -> dict[str, FakeModel]:
    if which == "one":
        return {ONE_MODEL: OneModel(dataset_folder, seed)}
    if which == "one-short":
        return {ONE_MODEL: OneModel(dataset_folder, seed, **SHORT_REPLIES)}
    if which.startswith("stream:"):  # "stream:THINKING:TEXT" words
        _, thinking, text = which.split(":")
        return {ONE_MODEL: StreamingModel(int(thinking), int(text))}
    return paper_models(answer_key(load_cladder(dataset_folder).questions), seed=seed)


# --- fake servers ------------------------------------------------------------------------------


@dataclass
class ServerSpec:
    kind: Kind
    latency: LatencyModel
    models: str = "paper"  # "paper": qwen3, deepseek-r1 and granite; "one": ONE_MODEL
    faults: FaultPlan | None = None
    overrides: dict[str, Any] = field(default_factory=dict)
    # One token a chunk, each paced by the latency model, as real servers stream ("coarse": a
    # few big chunks, as the fakes did before).
    chunking: str = CHUNKING

    def server(self, dataset_folder: Path) -> FakeServer:
        return FakeServer(
            self.kind,
            build_models(self.models, dataset_folder),
            latency=self.latency,
            faults=self.faults,
            **{"chunking": self.chunking, **self.overrides},
        )


def _serve(spec: ServerSpec, dataset_folder: Path, conn: Connection) -> None:
    """Child process: serve until told to stop; answer stats requests meanwhile."""
    server = spec.server(dataset_folder)
    with server:
        conn.send(server.url)
        while True:
            command = conn.recv()
            if command == "stats":
                conn.send(server.stats.model_dump())
            elif command == "usage":
                conn.send({"cpu": time.process_time(), "rss_mb": rss_mb()})
            else:
                break
    conn.send("stopped")


class ServerHandle:
    """A fake server in this process (a thread with its own event loop) or in another one."""

    def __init__(self, spec: ServerSpec, dataset_folder: Path, where: str = "process") -> None:
        self.spec, self.where = spec, where
        self.dataset_folder = dataset_folder
        self._server: FakeServer | None = None
        self._conn: Connection | None = None
        self._process: Any = None
        self.url = ""

    def start(self) -> ServerHandle:
        if self.where == "thread":
            self._server = self.spec.server(self.dataset_folder).start()
            self.url = self._server.url
            return self
        ctx = mp.get_context("spawn")
        ours, theirs = ctx.Pipe()
        self._process = ctx.Process(
            target=_serve, args=(self.spec, self.dataset_folder, theirs), daemon=True
        )
        self._process.start()
        self._conn = ours
        self.url = ours.recv()
        return self

    def stats(self) -> dict[str, Any]:
        if self._server is not None:
            return self._server.stats.model_dump()
        assert self._conn is not None
        self._conn.send("stats")
        return self._conn.recv()  # type: ignore[no-any-return]

    def usage(self) -> dict[str, float] | None:
        """CPU seconds and peak RSS of the server process (None: it runs in this process)."""
        if self._conn is None:
            return None
        self._conn.send("usage")
        return self._conn.recv()  # type: ignore[no-any-return]

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None
        if self._conn is not None:
            self._conn.send("stop")
            self._conn.recv()
            self._process.join(timeout=30)
            self._conn = None

    def __enter__(self) -> ServerHandle:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def add_chunking(parser: Any) -> None:
    """`--chunking`: how the fakes stream (one token a chunk by default, as real servers do)."""
    parser.add_argument(
        "--chunking",
        choices=["token", "coarse"],
        default="token",
        help="fakes stream one token a chunk (default) or a few big chunks (the figures before "
        "the streaming session)",
    )


def start_servers(
    specs: list[ServerSpec], dataset_folder: Path, where: str = "process"
) -> list[ServerHandle]:
    return [ServerHandle(s, dataset_folder, where).start() for s in specs]


# --- the server-bound setup (bench_server_bound.py, bench_experiment.py) ----------------------

# Slots, seconds before the first token, seconds a token (500 tokens/s a stream, a small model
# on a big GPU), slowdown per other request in flight. Replies stream one token a chunk.
P, L, T, SLOWDOWN = 64, 0.2, 0.002, 0.002
SERVER_BOUND_MODELS = "one-short"


def server_bound_latency() -> LatencyModel:
    return LatencyModel(
        base_seconds=L, per_token_seconds=T, capacity=P, slowdown=SLOWDOWN, max_queue=100_000
    )


def request_seconds(stats: dict[str, Any]) -> float:
    """A request's time in a full server: L + T x the run's mean tokens a reply, slowed down."""
    latency = stats["latency"]
    tokens = latency["generated_tokens"] / max(1, latency["served"])
    return (L + T * tokens) * (1 + SLOWDOWN * (P - 1))


def bound(stats: dict[str, Any]) -> float:
    """Requests per second the server can answer at most: P slots, each busy a request's time."""
    return P / request_seconds(stats)


# --- configs and runs --------------------------------------------------------------------------


def config_for(
    urls: list[str] | dict[str, list[str]],
    *,
    kind: Kind,
    concurrency: int,
    models: str = "paper",
    schedule: str = "fifo",
    max_in_flight: int | None = None,
    seed: int = 0,
) -> RunConfig:
    """Agents qwen3 and deepseek-r1 and the extractor; `urls` for all three, or per role
    ("qwen3", "deepseek-r1", "extractor")."""
    config = RunConfig(seed=seed, concurrency=concurrency, schedule=schedule)  # type: ignore[arg-type]
    names = {
        "qwen3": QWEN if models == "paper" else ONE_MODEL,
        "deepseek-r1": DEEPSEEK if models == "paper" else ONE_MODEL,
        "extractor": GRANITE if models == "paper" else ONE_MODEL,
    }
    specs = {a.name: a for a in config.agents} | {"extractor": config.extractor}
    for role, spec in specs.items():
        spec.backend = kind
        spec.model = names[role]
        spec.base_urls = list(urls[role] if isinstance(urls, dict) else urls)
        spec.max_in_flight = max_in_flight
    return config


@dataclass
class Measured:
    summary: RunSummary
    wall: float
    cpu: float  # CPU seconds of this process (crawdad, plus the servers if they run in it)
    rss_mb: float  # peak RSS of this process

    @property
    def debates(self) -> int:
        return self.summary.finished + self.summary.errored


def warm_clients(config: RunConfig) -> None:
    """Import the client libraries the run uses: about a second, once per process, which is in
    no run's wall time then (a real run lasts hours, a benchmark's runs seconds)."""
    for spec in [*config.agents, config.extractor]:
        importlib.import_module(
            "crawdad.backends.ollama"
            if spec.backend == "ollama"
            else "crawdad.backends.openai_compat"
        )


def measure(
    config: RunConfig, dataset: Dataset, out: Path | None = None, *, progress: bool = False
) -> Measured:
    out = out or Path(tempfile.mkdtemp(prefix="crawdad-bench-run-")) / "run"
    warm_clients(config)
    t0, c0 = time.monotonic(), time.process_time()
    summary = asyncio.run(
        run(config, dataset, out, progress=progress, simulated=True, check_servers=False)
    )
    return Measured(summary, time.monotonic() - t0, time.process_time() - c0, rss_mb())


def requests_served(stats: dict[str, Any]) -> int:
    return int(stats["latency"]["served"])


def main_guard() -> None:
    """Spawned server processes import the benchmark's module: keep them quiet."""
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[attr-defined]
