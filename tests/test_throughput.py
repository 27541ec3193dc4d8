"""Throughput machinery against the fake servers: replicas, caps, 503s, grouping, concurrency.

No wall-clock assertions and no sleeps here: what is checked is what the servers saw (their
counters) and what the records say.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path

from crawdad.backends.base import ChatRequest, ChatResult
from crawdad.backends.pool import ModelPool, is_overload
from crawdad.backends.schedule import CURRENT_DEBATE, DebateProgress, ModelGate
from crawdad.config import ModelSpec, RetryConfig, RunConfig
from crawdad.data.demo_questions import write_cladder
from crawdad.data.questions import Dataset, load_cladder
from crawdad.demo import answer_key
from crawdad.errors import BackendError, ServerUnavailable
from crawdad.fake import FakeServer, LatencyModel, paper_models
from crawdad.run.runner import run

MODELS = ("qwen3:32b", "deepseek-r1:32b", "granite3.3:2b")


def dataset(tmp_path: Path, n: int) -> Dataset:
    return load_cladder(write_cladder(tmp_path / "data", n))


def config(urls: list[str], concurrency: int, **top: object) -> RunConfig:
    cfg = RunConfig(concurrency=concurrency, **top)  # type: ignore[arg-type]
    for spec in [*cfg.agents, cfg.extractor]:
        spec.base_urls = list(urls)
    cfg.retry.initial_wait = 0
    return cfg


def records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "debates.jsonl").read_text().splitlines()]


def fingerprint(out: Path) -> list[tuple]:
    """Per question: first speaker, then every turn's agent, text and extracted answer."""
    return sorted(
        (
            str(r["question_id"]),
            r["first_speaker"],
            r["final_answer"],
            tuple((t["agent"], t["text"], t["answer"]) for t in r["turns"]),
        )
        for r in records(out)
    )


# Requests take a few milliseconds at the fake server, so that several overlap there.
def latency(**overrides: object) -> LatencyModel:
    return LatencyModel(**{"base_seconds": 0.003, "capacity": 64, **overrides})  # type: ignore[arg-type]


async def test_concurrency_overlaps_debates(tmp_path: Path) -> None:
    ds = dataset(tmp_path, 24)
    async with FakeServer("ollama", paper_models(answer_key(ds.questions)), latency=latency()) as s:
        summary = await run(
            config([s.url], 16), ds, tmp_path / "run", progress=False, simulated=True
        )
        most = s.stats.latency.max_concurrent
    assert summary.finished == 24 and summary.errored == 0
    assert most > 1  # debates really were in flight together
    assert most <= 16  # one request per debate at a time: never more than the concurrency


async def test_replicas_share_the_load(tmp_path: Path) -> None:
    ds = dataset(tmp_path, 24)
    models = paper_models(answer_key(ds.questions))
    async with (
        FakeServer("ollama", models, latency=latency()) as a,
        FakeServer("ollama", models, latency=latency()) as b,
    ):
        summary = await run(
            config([a.url, b.url], 16), ds, tmp_path / "run", progress=False, simulated=True
        )
        served = [a.stats.latency.served, b.stats.latency.served]
    assert summary.finished == 24 and summary.errored == 0
    assert min(served) >= sum(served) // 4  # both replicas did a fair share
    endpoints = Counter(t["endpoint"] for r in records(tmp_path / "run") for t in r["turns"])
    assert set(endpoints) == {a.url, b.url}


async def test_dead_replica_is_set_aside(tmp_path: Path) -> None:
    ds = dataset(tmp_path, 16)
    models = paper_models(answer_key(ds.questions))
    dead = FakeServer("ollama", models)
    await dead.astart()
    dead_url = dead.url
    await dead.astop()  # nothing listens there any more: connections are refused
    async with FakeServer("ollama", models, latency=latency()) as live:
        summary = await run(
            config([dead_url, live.url], 8), ds, tmp_path / "run", progress=False, simulated=True
        )
        served = live.stats.latency.served
    assert summary.finished == 16 and summary.errored == 0
    turns = [t for r in records(tmp_path / "run") for t in r["turns"]]
    assert {t["endpoint"] for t in turns} == {live.url}  # every answer came from the live one
    assert served == 2 * len(turns)  # a debater request and an extractor request per turn
    # The dead one cost each request at most one failed try before it was set aside.
    assert all(t["attempts"] <= 2 for t in turns)


async def test_per_endpoint_cap_is_never_exceeded(tmp_path: Path) -> None:
    ds = dataset(tmp_path, 24)
    cfg = config([], 24)
    async with FakeServer("ollama", paper_models(answer_key(ds.questions)), latency=latency()) as s:
        for spec in [*cfg.agents, cfg.extractor]:
            spec.base_urls = [s.url]
            spec.max_in_flight = 2
        summary = await run(cfg, ds, tmp_path / "run", progress=False, simulated=True)
        by_model = s.stats.latency.max_concurrent_by_model
    assert summary.finished == 24 and summary.errored == 0
    assert all(by_model[m] <= 2 for m in MODELS)
    assert max(by_model.values()) == 2  # the cap was reached, so it is what held the load


async def test_roles_on_the_same_model_and_server_share_its_cap(tmp_path: Path) -> None:
    """A self-debate: both debaters (and the extractor) are one model on one server. The cap is
    the server's, so it holds for all their requests together, not for each role."""
    ds = dataset(tmp_path, 24)
    models = paper_models(answer_key(ds.questions))
    async with FakeServer("ollama", {"one": models["qwen3:32b"]}, latency=latency()) as s:
        cfg = config([s.url], 24)
        for spec in cfg.agents:
            spec.model, spec.max_in_flight = "one", 3
        cfg.extractor.model = "granite3.3:2b"  # another model: a pool of its own, no cap
        async with FakeServer("ollama", models, latency=latency()) as extractor_server:
            cfg.extractor.base_urls = [extractor_server.url]
            summary = await run(cfg, ds, tmp_path / "run", progress=False, simulated=True)
        most = s.stats.latency.max_concurrent
    assert summary.finished == 24 and summary.errored == 0
    assert most == 3  # reached, and never more: one cap for both debaters


async def test_full_queue_503s_slow_down_but_do_not_fail(tmp_path: Path) -> None:
    ds = dataset(tmp_path, 24)
    # One request at a time per model and room for two more in the queue: 24 debates at once
    # overflow it, and the server answers 503 until crawdad has lowered its caps.
    tight = latency(capacity=1, max_queue=2)
    async with FakeServer("ollama", paper_models(answer_key(ds.questions)), latency=tight) as s:
        cfg = config([s.url], 24)
        # A 503 that is not congestion counts as a failed try: with no wait at all between tries
        # (the suite's default) a busy machine can spend them all before the server frees a
        # slot; a twentieth of crawdad's default first wait is enough.
        cfg.retry.initial_wait = 0.05
        summary = await run(cfg, ds, tmp_path / "run", progress=False, simulated=True)
        rejected, statuses = s.stats.latency.rejected, s.stats.statuses
    assert rejected > 0 and statuses.get(503, 0) == rejected  # the queue really was full
    assert summary.finished == 24 and summary.errored == 0  # ...and no debate failed for it


async def test_grouped_mode_same_debates_fewer_switches(tmp_path: Path) -> None:
    ds = dataset(tmp_path, 24)
    models = paper_models(answer_key(ds.questions))
    # One model on the GPU at a time, one request at a time: every change of model is a switch.
    one_gpu = LatencyModel(base_seconds=0.001, capacity=1, resident_models=1, switch_seconds=0.001)
    switches, summaries = {}, {}
    for mode in ("fifo", "grouped"):
        async with FakeServer("ollama", models, latency=one_gpu) as s:
            cfg = config([s.url], 24, schedule=mode, seed=7)
            summaries[mode] = await run(cfg, ds, tmp_path / mode, progress=False, simulated=True)
            switches[mode] = s.stats.latency.model_switches
    assert summaries["fifo"].finished == summaries["grouped"].finished == 24
    assert fingerprint(tmp_path / "fifo") == fingerprint(tmp_path / "grouped")
    assert switches["grouped"] < switches["fifo"]
    assert summaries["grouped"].switches > 0 and summaries["fifo"].switches == 0


# --- the pool and the gate on their own, with a backend that answers when told to -----------


class Stub:
    """A backend whose requests end when the test says so, with the error it says."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.pending: list[asyncio.Future[ChatResult]] = []

    async def chat(self, request: ChatRequest, guard: object = None) -> ChatResult:
        future: asyncio.Future[ChatResult] = asyncio.get_running_loop().create_future()
        self.pending.append(future)
        return await future

    def finish(self, error: BackendError | None = None) -> None:
        future = self.pending.pop(0)
        if error is None:
            future.set_result(ChatResult(text="ok", endpoint=self.url))
        else:
            future.set_exception(error)

    async def list_models(self) -> list[str]:
        return []

    async def version(self) -> str | None:
        return None

    async def aclose(self) -> None:
        pass


def request() -> ChatRequest:
    return ChatRequest(model="m", prompt="p", temperature=0, top_p=1, max_tokens=8)


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)  # let every ready task run (no time passes)


def busy(url: str) -> BackendError:
    return BackendError(f"Ollama at {url} answered 503: server busy", transient=True)


def test_overload_is_read_from_the_status_not_from_the_port() -> None:
    assert is_overload(busy("http://h:1"))
    assert not is_overload(BackendError("Ollama at http://127.0.0.1:5030 answered 500: boom"))


async def test_503_halves_the_cap_once_per_round_trip_and_costs_no_attempt() -> None:
    spec = ModelSpec(model="m", base_urls=["http://s"], max_in_flight=8)
    pool = ModelPool(spec, Stub, RetryConfig(attempts=1, initial_wait=0))
    stub: Stub = pool.endpoints[0].backend  # type: ignore[assignment]
    calls = [asyncio.create_task(pool.chat(request())) for _ in range(8)]
    await settle()
    assert len(stub.pending) == 8
    for _ in range(4):  # four 503s from the same round trip: one cut, 8 -> 4
        stub.finish(busy(stub.url))
    await settle()
    assert pool.endpoints[0].cap == 4
    assert len(stub.pending) == 4  # the four still in flight; the retries wait for room
    while stub.pending:
        stub.finish()
        await settle()
    results = await asyncio.gather(*calls)  # with attempts=1, none failed
    assert all(r.text == "ok" for r in results)
    assert pool.endpoints[0].peak_in_flight == 8


async def test_replica_that_comes_back_gets_one_request_at_a_time() -> None:
    spec = ModelSpec(model="m", base_urls=["http://a", "http://b"])
    pool = ModelPool(spec, Stub, RetryConfig(attempts=3, initial_wait=0))
    a, b = pool.endpoints
    first = asyncio.create_task(pool.chat(request()))
    await settle()
    stub_a: Stub = a.backend  # type: ignore[assignment]
    stub_a.finish(ServerUnavailable("cannot connect", endpoint="http://a"))
    await settle()
    assert not a.healthy(a.down_until - 1) and a.probing  # set aside, on trial when back
    a.down_until = 0.0  # its time is up
    more = [asyncio.create_task(pool.chat(request())) for _ in range(4)]
    await settle()
    assert a.in_flight == 1 and b.in_flight == 4  # one trial request; the rest on b
    stub_a.finish()
    stub_b: Stub = b.backend  # type: ignore[assignment]
    while stub_b.pending:
        stub_b.finish()
    await asyncio.gather(first, *more)
    assert not a.probing


async def test_gate_runs_one_model_at_a_time_and_switches_to_the_busiest() -> None:
    gate = ModelGate()
    log: list[str] = []
    release = asyncio.Event()

    async def turn(model: str) -> None:
        async with gate.turn(model):
            log.append(model)
            await release.wait()

    tasks = [asyncio.create_task(turn(m)) for m in ["a", "b", "c", "c", "a"]]
    await settle()
    assert log == ["a", "a"]  # "a" came first; b and c wait while it runs
    release.set()
    await asyncio.gather(*tasks)
    assert log == ["a", "a", "c", "c", "b"]  # then the model with most waiting
    assert gate.switches == 2


class Recording(Stub):
    """A Stub that notes the prompt of each request in the order it was sent."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.sent: list[str] = []

    async def chat(self, request: ChatRequest, guard: object = None) -> ChatResult:
        self.sent.append(request.prompt)
        return await super().chat(request, guard)


async def test_waiting_requests_go_to_the_debate_furthest_behind_first() -> None:
    spec = ModelSpec(model="m", base_urls=["http://s"], max_in_flight=1)
    pool = ModelPool(spec, Recording, RetryConfig(attempts=1, initial_wait=0))
    stub: Recording = pool.endpoints[0].backend  # type: ignore[assignment]

    async def from_debate(sent: int, name: str) -> None:
        debate = DebateProgress(steps=sent)
        CURRENT_DEBATE.set(debate)  # this task's own context, as run_debate sets it
        await pool.chat(request().model_copy(update={"prompt": name}))
        assert debate.steps == sent + 1  # the request counts for its debate

    tasks = [
        asyncio.create_task(from_debate(s, n))
        for s, n in [(5, "holds the slot"), (3, "3"), (0, "0 first"), (2, "2"), (0, "0 second")]
    ]
    await settle()
    while stub.pending:
        stub.finish()
        await settle()
    await asyncio.gather(*tasks)
    assert stub.sent == ["holds the slot", "0 first", "0 second", "2", "3"]


async def test_each_debate_counts_its_own_requests(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    ranks: dict[int, list[int]] = {}
    debates: list[DebateProgress | None] = []  # kept alive, so that no two share an id
    acquire = ModelPool._acquire

    async def noting(self: ModelPool, rank: int = 0, run: int = 0) -> object:
        debates.append(CURRENT_DEBATE.get())
        ranks.setdefault(id(debates[-1]), []).append(rank)
        return await acquire(self, rank, run)

    monkeypatch.setattr(ModelPool, "_acquire", noting)
    ds = dataset(tmp_path, 8)
    async with FakeServer("ollama", paper_models(answer_key(ds.questions)), latency=latency()) as s:
        summary = await run(
            config([s.url], 4), ds, tmp_path / "run", progress=False, simulated=True
        )
    assert summary.finished == 8
    assert id(None) not in ranks  # every request was sent inside a debate
    assert sorted(len(r) for r in ranks.values()) == sorted(
        2 * len(r["turns"]) for r in records(tmp_path / "run")
    )
    assert all(r == list(range(len(r))) for r in ranks.values())


async def test_runs_take_turns_so_short_debates_do_not_hold_up_long_ones() -> None:
    """Two runs on one capped server (an experiment's variants): one run's many requests of
    debates at their start do not keep the other run's later requests waiting until they
    are all served."""
    spec = ModelSpec(model="m", base_urls=["http://s"], max_in_flight=1)
    pool = ModelPool(spec, Recording, RetryConfig(attempts=1, initial_wait=0))
    stub: Recording = pool.endpoints[0].backend  # type: ignore[assignment]

    async def from_debate(run: int, steps: int, name: str) -> None:
        CURRENT_DEBATE.set(DebateProgress(run=run, steps=steps))
        await pool.chat(request().model_copy(update={"prompt": name}))

    waiting = [(1, 0, "holds the slot")] + [(1, 0, f"short {i}") for i in range(4)]
    waiting += [(2, 3, "long a"), (2, 5, "long b")]
    tasks = [asyncio.create_task(from_debate(*w)) for w in waiting]
    await settle()
    while stub.pending:
        stub.finish()
        await settle()
    await asyncio.gather(*tasks)
    assert stub.sent == [
        "holds the slot",
        *("short 0", "long a", "short 1", "long b", "short 2", "short 3"),
    ]
