"""The supervisor of the servers crawdad starts itself (crawdad/serving/supervisor.py), against
the stand-in engine (crawdad/fake/standin.py): start, health wait and its bound, failures named
with their cause and log, restarts after a death and a freeze, the bound of restarts, and a stop
that leaves no process. Faults are counted in requests, never timed."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import sys
import tempfile
from pathlib import Path

import httpx
import psutil
import pytest

from crawdad.config import ServingConfig
from crawdad.errors import ConfigError
from crawdad.fake.standin import START_ERRORS
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


def serving(**kw: float) -> ServingConfig:
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


async def chat(server: ServerPlan) -> None:
    """One generation request (the stand-in's faults count these)."""
    body = {"model": server.served_name, "messages": [{"role": "user", "content": "hi"}]}
    async with httpx.AsyncClient(trust_env=False) as client:
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
                assert (await client.get(f"{server.base_url}/models")).status_code == 200
        assert len(standins()) == 2
        records = {r.key: r for r in sup.records()}
        assert records["a"].command == plan.servers[0].command
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


async def test_a_taken_port_is_refused_before_anything_starts(tmp_path: Path) -> None:
    server = standin()
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", server.port))
        busy.listen()
        sup = Supervisor(Plan(servers=[standin("other"), server]), serving(), tmp_path)
        with pytest.raises(
            ServerStartError, match=rf"port taken: s0 needs 127.0.0.1:{server.port}"
        ):
            await sup.start()
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
        request = asyncio.create_task(chat(server))
        kind, why = await events.next()
        assert kind == "down" and reason in why
        assert await events.next() == ("up", "s0")
        request.cancel()
        assert [p.pid for p in standins()] != [first]  # a new process serves
        async with httpx.AsyncClient(trust_env=False) as client:
            assert (await client.get(f"{server.base_url}/models")).status_code == 200
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
        await chat(server)
        assert (await events.next())[0] == "down"
        assert await events.next() == ("up", "s0")
        await chat(server)
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
