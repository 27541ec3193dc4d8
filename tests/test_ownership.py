"""crawdad knows the servers it started, never by their port alone (crawdad/serving/ownership.py,
ports.py): each start has a secret of its own as its API key and is proven by it (and by its
listening socket) before its health counts; ports are held from planning to listening, so two
crawdads started together never share one; a stranger already on a planned port gets no request.
Against the stand-in engine and fake servers, on loopback."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from crawdad.backends import server_keys
from crawdad.config import RetryConfig, RunConfig, SelectionConfig
from crawdad.data.demo_questions import EXAMPLES
from crawdad.data.questions import load_cladder, select
from crawdad.errors import ConfigError
from crawdad.fake import FakeServer, paper_models
from crawdad.run.runner import run_debates
from crawdad.run.store import RunStore
from crawdad.serving import ownership, ports
from crawdad.serving.base import Plan, ServerPlan
from crawdad.serving.supervisor import ServerStartError, Supervisor
from tests.test_supervisor import free_port, keyed, serving, standin, standin_program, standins

MODELS = ["agents.0", "agents.1", "extractor"]


def paper_config() -> RunConfig:
    return RunConfig(seed=3, concurrency=4, retry=RetryConfig(initial_wait=0, attempts=2))


def endpoints(out: Path) -> set[str]:
    """Every URL that answered a turn of the run."""
    found = set()
    for line in (out / "debates.jsonl").read_text().splitlines():
        found |= {t["endpoint"] for t in json.loads(line)["turns"]}
    return found


async def test_two_runs_started_together_each_finish_on_the_server_they_started(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same plan (the same port) for both: one is moved, each proves its own server, and
    every turn of each run was answered by that run's own server."""
    plan = Plan(servers=[standin("paper", models=MODELS)])
    dataset = select(load_cladder(EXAMPLES), SelectionConfig(limit=4), 3)
    outs = [tmp_path / "one", tmp_path / "two"]
    summaries = await asyncio.gather(
        *(run_debates(paper_config(), dataset, out, plan=plan, progress=False) for out in outs)
    )
    assert all(s.done_total == s.selected == 4 and s.errored == 0 for s in summaries)
    started = [RunStore(out).read_manifest().started[0] for out in outs]
    assert len({s.pid for s in started}) == 2 and None not in {s.pid for s in started}
    assert len({s.base_url for s in started}) == 2  # one of them moved
    assert {s.port for s in started} >= {plan.servers[0].port}
    for out, server in zip(outs, started, strict=True):
        assert server.proven_by == ["api key", "socket"]
        assert endpoints(out) == {server.base_url}  # no request reached the other's
        log = (out / "servers/paper.log").read_text()
        assert f"--port {server.port}" in log
    said = capsys.readouterr().out
    assert f"is taken (another crawdad (pid {os.getpid()}) holds it): it serves on port" in said
    assert standins() == []


def test_two_crawdad_runs_started_together_never_share_a_server(tmp_path: Path) -> None:
    """Two `crawdad run` processes, the same served config, started at the same moment."""
    from tests.test_served_run import served_toml

    config = served_toml(tmp_path, {})
    outs = [tmp_path / "one", tmp_path / "two"]
    argv = ["run", "--data", str(EXAMPLES), "--config", str(config), "--limit", "2"]
    runs = [
        subprocess.Popen(
            [sys.executable, "-m", "crawdad", *argv, "--out", str(out), "--no-progress"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "CRAWDAD_GPUS": "none"},
        )
        for out in outs
    ]
    try:
        said = [run.communicate(timeout=240) for run in runs]
    finally:
        for run in runs:
            if run.poll() is None:
                run.kill()
    assert [run.returncode for run in runs] == [0, 0], said
    started = [RunStore(out).read_manifest().started for out in outs]
    urls = [{s.base_url for s in servers} for servers in started]
    assert len(urls[0]) == len(urls[1]) == 3 and not urls[0] & urls[1]
    assert not {s.pid for s in started[0]} & {s.pid for s in started[1]}
    for out, mine in zip(outs, urls, strict=True):
        assert endpoints(out) <= mine
    assert standins() == []


@pytest.mark.parametrize("key", [None, "the-strangers-own-key"], ids=["no key", "a key"])
async def test_a_stranger_on_a_planned_port_gets_no_request(
    tmp_path: Path, key: str | None, capsys: pytest.CaptureFixture[str]
) -> None:
    dataset = select(load_cladder(EXAMPLES), SelectionConfig(limit=2), 3)
    async with FakeServer("openai", paper_models(), api_key=key) as stranger:
        planned = ports.with_port(standin("paper", models=MODELS), stranger.port)
        summary = await run_debates(
            paper_config(), dataset, tmp_path / "run", plan=Plan(servers=[planned]), progress=False
        )
        assert stranger.stats.requests == 0
    assert summary.done_total == 2 and summary.errored == 0
    (server,) = RunStore(tmp_path / "run").read_manifest().started
    assert server.port != stranger.port and endpoints(tmp_path / "run") == {server.base_url}
    said = capsys.readouterr()
    note = f"server paper: port {stranger.port} is taken (pid {os.getpid()}: "
    assert note in said.out + said.err and f"it serves on port {server.port} instead" in (
        said.out + said.err
    )


async def test_a_stranger_that_answers_before_ours_is_named_and_never_trusted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stranger that took the port after it was reserved (the reservation's checks skipped
    here): its health answer is not taken for our server's; the start fails naming it."""

    def unchecked(host: str, wanted: int, **_: Any) -> ports.Reservation:
        return ports.Reservation(wanted, wanted, None, None)

    monkeypatch.setattr("crawdad.serving.supervisor.reserve", unchecked)
    async with FakeServer("openai", paper_models()) as stranger:
        planned = ports.with_port(standin("paper"), stranger.port)
        sup = Supervisor(Plan(servers=[planned]), serving(), tmp_path, progress=False)
        with pytest.raises(ServerStartError) as e:
            await sup.start()
        assert stranger.stats.by_route.get("/v1/chat/completions", 0) == 0
    said = str(e.value)
    assert f"127.0.0.1:{stranger.port}" in said and f"pid {os.getpid()}: " in said, said
    assert standins() == []


async def test_the_key_proof_refuses_a_stranger_with_or_without_a_key() -> None:
    async with httpx.AsyncClient(trust_env=False) as client:
        for key, why in [
            (None, "with any API key"),
            ("theirs", "refuses the API key crawdad gave its server (401)"),
        ]:
            async with FakeServer("openai", paper_models(), api_key=key) as fake:
                server = ports.with_port(standin(), fake.port)
                found = await ownership.key_proof(server, "ours", "/v1/models", client, 5)
                assert found.refused is not None and why in found.refused
                # and by the socket: the fake is this process's, not the server's tree
                owned = ownership.socket_owned("127.0.0.1", fake.port, {os.getpid() + 10**7})
                assert isinstance(owned, str) and f"pid {os.getpid()}: " in owned
                assert ownership.socket_owned("127.0.0.1", fake.port, {os.getpid()}) is True
        async with FakeServer("openai", paper_models(), api_key="ours") as fake:
            server = ports.with_port(standin(), fake.port)
            found = await ownership.key_proof(server, "ours", "/v1/models", client, 5)
            assert found.by == ["api key"] and found.refused is None
            other = server.model_copy(update={"served_name": "not-this-one"})
            found = await ownership.key_proof(other, "ours", "/v1/models", client, 5)
            assert found.refused is not None and "not 'not-this-one'" in found.refused


def test_the_stand_in_honours_its_api_key_as_vllm_does() -> None:
    """vLLM's VLLM_API_KEY (or --api-key) guards /v1/*: 401 for a missing or wrong key;
    /health stays open (tests/real/WIRE_NOTES.md)."""
    port = free_port()
    argv = [standin_program(), "serve", "w", "--port", str(port)]
    for extra, env in [([], {"VLLM_API_KEY": "k1"}), (["--api-key", "k1"], {})]:
        proc = subprocess.Popen(
            argv + extra, env={**os.environ, **env}, stdout=subprocess.PIPE, text=True
        )
        try:
            assert proc.stdout is not None
            for line in proc.stdout:  # until it listens (or ends: the test fails below)
                if "Uvicorn running" in line:
                    break
            with httpx.Client(trust_env=False, timeout=5) as client:
                root = f"http://127.0.0.1:{port}"
                assert client.get(f"{root}/health").status_code == 200
                models = f"{root}/v1/models"
                assert client.get(models).status_code == 401
                wrong = client.get(models, headers=keyed("k2"))
                assert wrong.status_code == 401 and wrong.json() == {"error": "Unauthorized"}
                assert client.get(models, headers=keyed("k1")).status_code == 200
                body = {"model": "qwen3:32b", "messages": []}
                assert client.post(f"{root}/v1/chat/completions", json=body).status_code == 401
        finally:
            proc.terminate()
            proc.wait(10)


def test_a_reserved_port_is_not_given_to_another_crawdad_until_released() -> None:
    port = free_port()
    first = ports.reserve("127.0.0.1", port)
    try:
        assert (first.port, first.why) == (port, None)
        second = ports.reserve("127.0.0.1", port, avoid={port + 1})
        try:
            assert second.port > port + 1 and second.port != port
            assert second.why == f"another crawdad (pid {os.getpid()}) holds it"
            with pytest.raises(ports.PortTaken, match=rf"port {port} on 127.0.0.1 is taken"):
                ports.reserve("127.0.0.1", port, move=False)
        finally:
            second.release()
    finally:
        first.release()
    again = ports.reserve("127.0.0.1", port)
    assert again.port == port
    again.release()
    assert ports.registry().parent.stat().st_mode & 0o077 == 0  # the user's own folder


def test_a_moved_server_has_its_port_in_its_command_and_environment() -> None:
    vllm = standin()
    moved = ports.with_port(vllm, vllm.port + 7)
    assert moved.command[-1] == str(vllm.port + 7) and moved.base_url.endswith(
        f":{vllm.port + 7}/v1"
    )
    ollama = ServerPlan(
        key="o", engine="ollama", weights="qwen3:32b", served_name="qwen3:32b", models=[],
        port=8100, context_length=4096, command=["ollama", "serve"],
        env={"OLLAMA_HOST": "127.0.0.1:8100", "OLLAMA_NUM_PARALLEL": "1"},
    )  # fmt: skip
    assert ports.with_port(ollama, 8105).env["OLLAMA_HOST"] == "127.0.0.1:8105"
    mine = ollama.model_copy(update={"env": {"OLLAMA_HOST": "0.0.0.0:9999"}})
    assert ports.with_port(mine, 8105).env["OLLAMA_HOST"] == "0.0.0.0:9999"  # the user's own


def test_a_keys_file_others_may_read_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    path.write_text(json.dumps({"http://127.0.0.1:8100/v1": "k"}))
    path.chmod(0o644)
    with pytest.raises(ConfigError, match="chmod 600"):
        server_keys.use_file(path)
    path.chmod(0o600)
    server_keys.use_file(path)
    try:
        assert server_keys.key_for("http://127.0.0.1:8100/v1/chat/completions") == "k"
        path.write_text(json.dumps({"http://127.0.0.1:8100": "new"}))  # a restart's new key
        assert server_keys.key_for("http://127.0.0.1:8100/v1") == "new"
    finally:
        server_keys.drop_file(path)
    path.write_text("not json")
    with pytest.raises(ConfigError, match="not a keys file of crawdad's"):
        server_keys.use_file(path)
