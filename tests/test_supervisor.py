"""The supervisor of the servers crawdad starts itself (crawdad/serving/supervisor.py), against
the stand-in engine (crawdad/fake/standin.py): start, health wait and its bound, failures named
with their cause and log, restarts after a death and a freeze, the bound of restarts, and a stop
that leaves no process. Faults are counted in requests, never timed."""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import hashlib
import io
import json
import os
import re
import shutil
import socket
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil
import pytest

from crawdad.config import ServingConfig
from crawdad.errors import ConfigError
from crawdad.fake.standin import LOADING, START_ERRORS
from crawdad.records import ServerRestart
from crawdad.serving.base import GPU, Plan, ServerPlan
from crawdad.serving.causes import likely_cause
from crawdad.serving.supervisor import ServerStartError, Supervisor


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def standin_program() -> str:
    """An executable that runs the stand-in (as `vllm` would be one), made once per process."""
    global _PROGRAM
    if _PROGRAM is None:
        folder = Path(tempfile.mkdtemp(prefix="crawdad-standin-"))
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        program = folder / "standin-engine"
        program.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m crawdad.fake.standin "$@"\n')
        program.chmod(0o755)
        _PROGRAM = str(program)
    return _PROGRAM


_PROGRAM: str | None = None


def standin(key: str = "s0", env: dict[str, str] | None = None, **kw: object) -> ServerPlan:
    port = free_port()
    command = [standin_program(), "serve", "w", "--port", str(port)]
    fields: dict[str, object] = {
        "key": key,
        "engine": "vllm",
        "weights": "w",
        "served_name": "qwen3:32b",
        "models": ["agents.0"],
        "port": port,
        "context_length": 4096,
        "env": env or {},
        "command": command,
    }
    return ServerPlan.model_validate(fields | kw)


class Events:
    """A listener that keeps what it was told."""

    def __init__(self) -> None:
        self.seen: asyncio.Queue[tuple[str, str]] = asyncio.Queue()

    def server_down(self, server: ServerPlan, reason: str) -> None:
        self.seen.put_nowait(("down", reason))

    def server_up(self, server: ServerPlan) -> None:
        self.seen.put_nowait(("up", server.key))

    def gave_up(self, message: str) -> None:
        self.seen.put_nowait(("gave up", message))

    async def next(self) -> tuple[str, str]:
        return await asyncio.wait_for(self.seen.get(), 60)


def serving(**kw: float | bool) -> ServingConfig:
    """Timings far below the floors a config is held to (5 s), built without those checks, so
    that a freeze is seen in a second and a check comes every 0.1 s."""
    fast = {"startup_timeout": 60.0, "freeze_timeout": 1.0, "check_interval": 0.1}
    return ServingConfig.model_construct(**(fast | kw))


def descendants() -> list[psutil.Process]:
    return [p for p in psutil.Process().children(recursive=True) if p.is_running()]


def standins() -> list[psutil.Process]:
    out = []
    for p in descendants():
        with_cmd = []
        try:
            with_cmd = p.cmdline()
        except psutil.Error:
            continue
        if "crawdad.fake.standin" in with_cmd and p.status() != psutil.STATUS_ZOMBIE:
            out.append(p)
    return out


def keyed(key: str | None) -> dict[str, str]:
    """The header that carries a server's key (each start has its own: `secret_of`)."""
    return {"Authorization": f"Bearer {key}"} if key else {}


async def chat(server: ServerPlan, key: str | None) -> None:
    """One generation request (the stand-in's faults count these)."""
    body = {"model": server.served_name, "messages": [{"role": "user", "content": "hi"}]}
    async with httpx.AsyncClient(trust_env=False, headers=keyed(key)) as client:
        # the server may die (or freeze) under the request
        with contextlib.suppress(httpx.HTTPError):
            await client.post(f"{server.base_url}/chat/completions", json=body, timeout=30)


async def test_start_health_record_and_stop_leave_no_process(tmp_path: Path) -> None:
    plan = Plan(gpus=[GPU(index=0, name="Sim 80GB", memory_mib=81920)])
    plan = plan.model_copy(update={"servers": [standin("a", gpus=[0]), standin("b")]})
    sup = Supervisor(plan, serving(), tmp_path, progress=False)
    await sup.start()
    try:
        async with httpx.AsyncClient(trust_env=False) as client:
            for server in plan.servers:
                url, key = f"{server.base_url}/models", sup.secret_of(server)
                assert (await client.get(url, headers=keyed(key))).status_code == 200
                assert (await client.get(url)).status_code == 401  # its key guards it
        assert len(standins()) == 2
        records = {r.key: r for r in sup.records()}
        assert records["a"].command == plan.servers[0].command
        assert {r.pid for r in records.values()} == set(sup.pids().values())
        assert records["a"].proven_by == ["api key", "socket"]
        assert not any(
            sup.keys()[s.base_url] in (tmp_path / f"{s.key}.log").read_text() for s in plan.servers
        )
        assert records["a"].gpus == ["0: Sim 80GB"] and records["b"].gpus == []
        assert sup.urls() == {"agents.0": [s.base_url for s in plan.servers]}
        assert "Uvicorn running" in (tmp_path / "a.log").read_text()
    finally:
        await sup.stop()
    assert standins() == []
    assert json.loads((tmp_path / "status.json").read_text())["a"]["state"] == "stopped"


async def test_failed_start_names_the_cause_and_shows_the_log(tmp_path: Path) -> None:
    bad = standin("bad", env={"CRAWDAD_STANDIN_FAULT": "fail-start:oom"})
    plan = Plan(servers=[standin("good"), bad])
    sup = Supervisor(plan, serving(), tmp_path, progress=False)
    with pytest.raises(ServerStartError) as e:
        await sup.start()
    text = str(e.value)
    assert "server bad exited with code 1 while starting" in text
    assert "Likely cause: out of memory: give it more GPU memory" in text
    assert "| torch.OutOfMemoryError: CUDA out of memory" in text
    assert str(tmp_path / "bad.log") in text
    assert standins() == []  # the good one was stopped again


@pytest.mark.parametrize(
    ("log", "cause"),
    [
        (START_ERRORS["oom"], "out of memory"),
        ("ValueError: No available memory for the cache blocks. Try increasing", "out of memory"),
        (
            "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 4096.00 MiB on device 0: "
            "cudaMalloc failed: out of memory",
            "out of memory",
        ),
        (START_ERRORS["weights"], "missing weights"),
        ("ValueError: Model path does not exist: /models/x.gguf", "missing weights"),
        ("Error: pull model manifest: file does not exist", "missing weights"),
        (START_ERRORS["port"], "port taken"),
        ("couldn't bind HTTP server socket, hostname: 127.0.0.1, port: 8080", "port taken"),
        (START_ERRORS["unsupported"], "unsupported model"),
        (
            "llama_model_load: error loading model: unknown model architecture: 'fancy'",
            "unsupported model",
        ),
        ("INFO: loading weights\nall fine", None),
    ],
)
def test_the_engines_messages_give_the_likely_cause(log: str, cause: str | None) -> None:
    found = likely_cause(f"INFO 05-01 starting\n{log}\n")
    assert (found[0] if found else None) == cause


async def test_a_server_that_never_answers_is_bounded_by_the_startup_timeout(
    tmp_path: Path,
) -> None:
    plan = Plan(servers=[standin(env={"CRAWDAD_STANDIN_FAULT": "fail-start:hang"})])
    sup = Supervisor(plan, serving(startup_timeout=1.0), tmp_path, progress=False)
    with pytest.raises(ServerStartError, match=r"within serving.startup_timeout \(1 s\)"):
        await sup.start()
    assert standins() == []


async def test_a_taken_port_is_refused_before_anything_starts_if_not_replanned(
    tmp_path: Path,
) -> None:
    server = standin()
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", server.port))
        busy.listen()
        config = serving(replan_ports=False)
        sup = Supervisor(Plan(servers=[standin("other"), server]), config, tmp_path)
        with pytest.raises(ServerStartError) as e:
            await sup.start()
    said = str(e.value)
    assert f"port {server.port} on 127.0.0.1 is taken: pid {os.getpid()}: " in said
    # what listens, named by its command line (this test's own process: pytest, or xdist's worker)
    assert Path(sys.executable).name in said and "no server was started" in said
    assert standins() == [] and not (tmp_path / "other.log").exists()


async def test_an_engine_not_installed_is_named_with_its_install_line(tmp_path: Path) -> None:
    server = standin().model_copy(update={"command": ["no-such-vllm-here", "serve", "w"]})
    with pytest.raises(ConfigError, match="'no-such-vllm-here' \\(vllm\\) is not installed"):
        await Supervisor(Plan(servers=[server]), serving(), tmp_path).start()


async def restart_once(tmp_path: Path, fault: str) -> tuple[Supervisor, ServerPlan, Events]:
    env = {"CRAWDAD_STANDIN_FAULT": f"{fault}:1", "CRAWDAD_STANDIN_ONCE": str(tmp_path / "once")}
    server = standin(env=env)
    events = Events()
    sup = Supervisor(Plan(servers=[server]), serving(), tmp_path, listener=events, progress=False)
    await sup.start()
    return sup, server, events


@pytest.mark.parametrize(("fault", "reason"), [("die-after", "exited"), ("freeze-after", "frozen")])
async def test_a_server_that_dies_or_freezes_is_restarted(
    tmp_path: Path, fault: str, reason: str
) -> None:
    sup, server, events = await restart_once(tmp_path, fault)
    watch = asyncio.create_task(sup.watch())
    try:
        first = standins()[0].pid
        request = asyncio.create_task(chat(server, sup.secret_of(server)))
        kind, why = await events.next()
        assert kind == "down" and reason in why
        assert await events.next() == ("up", "s0")
        request.cancel()
        assert [p.pid for p in standins()] != [first]  # a new process serves
        async with httpx.AsyncClient(trust_env=False, headers=keyed(sup.secret_of(server))) as c:
            assert (await c.get(f"{server.base_url}/models")).status_code == 200  # a new key
        assert sup.restart_counts()["s0"][0] == 1
        lines = (tmp_path / "restarts.jsonl").read_text().splitlines()
        restart = ServerRestart.model_validate_json(lines[0])
        assert len(lines) == 1 and restart.back and reason in restart.reason
    finally:
        watch.cancel()
        await sup.stop()
    assert standins() == []


async def test_past_the_bound_of_restarts_it_gives_up_with_the_log(tmp_path: Path) -> None:
    server = standin(env={"CRAWDAD_STANDIN_FAULT": "die-after:1"})  # dies every time
    events = Events()
    sup = Supervisor(
        Plan(servers=[server]), serving(max_restarts=1), tmp_path, listener=events, progress=False
    )
    await sup.start()
    watch = asyncio.create_task(sup.watch())
    try:
        await chat(server, sup.secret_of(server))
        assert (await events.next())[0] == "down"
        assert await events.next() == ("up", "s0")
        await chat(server, sup.secret_of(server))
        assert (await events.next())[0] == "down"
        kind, message = await events.next()
        assert kind == "gave up"
        assert "after 1 restart(s)" in message and "serving.max_restarts = 1" in message
        assert "die-after at generation request 1" in message  # the log's end
        assert "run the same command again to resume" in message
    finally:
        watch.cancel()
        await sup.stop()
    assert standins() == []
    lines = [ServerRestart.model_validate_json(x) for x in (tmp_path / "restarts.jsonl").open()]
    assert [r.back for r in lines] == [True, False]


async def test_crawdad_serve_that_gives_a_server_up_stops_all_and_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`crawdad serve` (keep_serving) with a server past its restarts: every server stopped, an
    error (exit 1 from the CLI) that says what happened, and no word of resuming a run."""
    from crawdad.run.served import ServeStopped, keep_serving

    dying = standin("dies", env={"CRAWDAD_STANDIN_FAULT": "die-after:1"})
    healthy = standin("fine")
    plan = Plan(servers=[dying, healthy])
    serve = asyncio.create_task(keep_serving(plan, serving(max_restarts=0), tmp_path, False))
    while "Ctrl-C stops them" not in capsys.readouterr().out:  # both up
        assert not serve.done(), serve.exception()
        await asyncio.sleep(0.05)
    key = json.loads((tmp_path / "keys.json").read_text())[dying.base_url]  # crawdad serve's
    await chat(dying, key)  # it dies, and may not be restarted
    with pytest.raises(ServeStopped) as stopped:
        await asyncio.wait_for(serve, 60)
    message = str(stopped.value)
    assert "dies" in message and "serving.max_restarts = 0" in message
    assert "crawdad serve stopped every server" in message and "resume" not in message
    assert standins() == []  # the healthy one too


async def test_a_missing_ollama_tag_is_pulled_with_progress_and_a_bad_one_named() -> None:
    from crawdad.fake import FakeServer, paper_models
    from crawdad.serving.ollama_pull import PullError, pull_missing

    async with FakeServer("ollama", paper_models()) as fake:

        def plan(tag: str) -> ServerPlan:
            return standin().model_copy(
                update={"engine": "ollama", "weights": tag, "port": fake.port}
            )

        assert await pull_missing(plan("qwen3:32b"), progress=False) is False  # it has it
        assert await pull_missing(plan("qwen3:8b"), progress=False) is True
        with pytest.raises(PullError, match="pulling missing:1b failed: pull model manifest"):
            await pull_missing(plan("missing:1b"), progress=False)


class Tokens(Events):
    """Events, and the run's word on the tokens it got from the server (as PoolListener's
    `last_progress`): the time of the last chunk a request of the test read."""

    def __init__(self) -> None:
        super().__init__()
        self.last = 0.0

    def last_progress(self, server: ServerPlan) -> float:
        return self.last


async def stream_until(server: ServerPlan, key: str | None, tokens: Tokens, until: float) -> None:
    """Streamed requests one after another until `until` (monotonic), each chunk noted."""
    body = {
        "model": server.served_name,
        "messages": [{"role": "user", "content": "hi"}],
        "stream": True,
    }
    async with httpx.AsyncClient(trust_env=False, headers=keyed(key)) as client:
        while time.monotonic() < until:
            url = f"{server.base_url}/chat/completions"
            async with client.stream("POST", url, json=body, timeout=30) as r:
                assert r.status_code == 200
                async for _chunk in r.aiter_bytes():
                    tokens.last = time.monotonic()


async def test_a_server_whose_health_is_late_is_kept_while_its_tokens_come(
    tmp_path: Path,
) -> None:
    """Health answers 2 s late (past the 1 s probe timeout): while tokens come for four freeze
    timeouts it is not restarted; once they stop it is, within freeze_timeout + a check."""
    env = {"CRAWDAD_STANDIN_FAULT": "slow-health:2", "CRAWDAD_STANDIN_ONCE": str(tmp_path / "once")}
    server = standin(env=env)
    tokens = Tokens()
    config = serving()
    sup = Supervisor(Plan(servers=[server]), config, tmp_path, listener=tokens, progress=False)
    await sup.start()
    assert sup.probe_timeout < 2.0
    watch = asyncio.create_task(sup.watch())
    try:
        until = time.monotonic() + 4 * config.freeze_timeout
        await stream_until(server, sup.secret_of(server), tokens, until)
        assert tokens.last > 0 and tokens.seen.empty()  # never taken as frozen
        kind, why = await tokens.next()
        seen = time.monotonic()
        assert kind == "down" and why.startswith("frozen: no health answer and no tokens for")
        bound = config.freeze_timeout + config.check_interval
        assert config.freeze_timeout <= seen - tokens.last <= bound + 1.0  # scheduling slack
        assert await tokens.next() == ("up", "s0")
    finally:
        watch.cancel()
        await sup.stop()
    restart = ServerRestart.model_validate_json((tmp_path / "restarts.jsonl").read_text())
    assert config.freeze_timeout <= restart.silent_for <= bound + 1.0
    assert restart.downtime > restart.silent_for and restart.back


async def test_a_frozen_server_is_acted_on_in_time_and_its_downtime_covers_the_freeze(
    tmp_path: Path,
) -> None:
    """SIGSTOPped at its first request: acted on within freeze_timeout + one check of the
    freeze, and its downtime counts from its last health answer, not from when it was seen."""
    sup, server, events = await restart_once(tmp_path, "freeze-after")
    config = sup.serving
    watch = asyncio.create_task(sup.watch())
    try:
        sent = time.monotonic()
        request = asyncio.create_task(chat(server, sup.secret_of(server)))
        kind, why = await events.next()
        seen = time.monotonic()
        assert kind == "down" and "frozen" in why
        bound = config.freeze_timeout + config.check_interval
        # Silence counts from the last sign of life, which may be a health answer up to a check
        # before the request was sent: acted on from freeze_timeout less a check after `sent`.
        earliest = config.freeze_timeout - config.check_interval
        assert earliest <= seen - sent <= bound + 1.0  # scheduling slack
        assert await events.next() == ("up", "s0")
        back = time.monotonic()
        request.cancel()
    finally:
        watch.cancel()
        await sup.stop()
    restart = ServerRestart.model_validate_json((tmp_path / "restarts.jsonl").read_text())
    assert config.freeze_timeout <= restart.silent_for <= bound + 1.0
    # from its last sign of life (at most a check before the request froze it) to back
    assert restart.downtime >= back - sent - config.check_interval - 1.0
    assert restart.downtime >= restart.silent_for + 0.1  # and the restart itself
    assert sup.restart_counts()["s0"][1] == pytest.approx(restart.downtime, abs=0.01)


def slow_start(tmp_path: Path) -> tuple[ServerPlan, Path]:
    gate = tmp_path / "gate"
    env = {"CRAWDAD_STANDIN_FAULT": "slow-start:60", "CRAWDAD_STANDIN_GATE": str(gate)}
    return standin(env=env), gate


async def test_a_slow_start_without_a_terminal_says_how_long_and_the_last_log_line(
    tmp_path: Path,
) -> None:
    server, gate = slow_start(tmp_path)
    lines: list[str] = []
    loading = asyncio.Event()

    def say(line: str) -> None:
        lines.append(line)
        if LOADING in line:
            loading.set()

    sup = Supervisor(Plan(servers=[server]), serving(), tmp_path, progress=False, say=say)
    sup.still_every = 0.2  # 30 s in use
    start = asyncio.create_task(sup.start())
    try:
        await asyncio.wait_for(loading.wait(), 60)
        gate.touch()  # the stand-in listens now
        await asyncio.wait_for(start, 60)
    finally:
        await sup.stop()
    still = [line for line in lines if line.startswith("still starting s0: ")]
    assert still and all(re.match(r"still starting s0: \d+ s, last log line: ", x) for x in still)
    assert any(f"last log line: {LOADING}: " in x for x in still)  # after its \r, uncoloured
    assert not any(re.search(r"[\x00-\x1f]", x) for x in lines)


class Terminal(io.StringIO):
    """stderr as a terminal (tqdm draws on it); `shown` is set once `text` is drawn."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text
        self.shown = asyncio.Event()

    def isatty(self) -> bool:
        return True

    def write(self, s: str) -> int:
        if self.text in s:
            self.shown.set()
        return super().write(s)


async def test_a_slow_start_on_a_terminal_shows_elapsed_time_and_the_last_log_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server, gate = slow_start(tmp_path)
    terminal = Terminal(LOADING)
    monkeypatch.setattr(sys, "stderr", terminal)
    lines: list[str] = []
    sup = Supervisor(Plan(servers=[server]), serving(), tmp_path, say=lines.append)
    assert sup.terminal
    start = asyncio.create_task(sup.start())
    try:
        await asyncio.wait_for(terminal.shown.wait(), 60)
        gate.touch()
        await asyncio.wait_for(start, 60)
    finally:
        await sup.stop()
    drawn = terminal.getvalue()
    assert re.search(rf"starting s0.*\d+ s; s0: {LOADING}: \d+ steps", drawn)
    assert "\x1b[32m" not in drawn  # the log's colours never reach the terminal
    assert lines == []  # a bar, not lines


async def test_hashing_the_weights_for_the_manifest_shows_its_progress(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CRAWDAD_CACHE_DIR", str(tmp_path / "cache"))
    weights = tmp_path / "model.gguf"
    weights.write_bytes(b"\0" * (20 * 1024 * 1024))  # three chunks
    lines: list[str] = []
    server = standin(weights=str(weights))
    sup = Supervisor(Plan(servers=[server]), serving(), tmp_path, progress=False, say=lines.append)
    sup.still_every = 0.0  # a line per chunk (30 s in use)
    await sup.start()
    await sup.stop()
    hashed = [x for x in lines if x.startswith("still hashing s0's weights for the manifest: ")]
    assert [x.split(": ")[1].split(",")[0] for x in hashed] == [
        "8 MB of 21 MB",
        "17 MB of 21 MB",
        "21 MB of 21 MB",
    ]
    assert (
        sup.records()[0].weights_hash
        == f"sha256:{hashlib.sha256(weights.read_bytes()).hexdigest()}"
    )
    lines.clear()
    sup = Supervisor(Plan(servers=[server]), serving(), tmp_path, progress=False, say=lines.append)
    await sup.start()  # the hash is cached: nothing to show
    await sup.stop()
    assert lines == []
