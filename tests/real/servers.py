"""Start and stop the REAL OpenAI-compatible inference servers used by tests/real.

Plain Python (stdlib only): importable without pytest, httpx or the servers' own
packages. The servers run from their own virtual environments, which
``bash .ci/real_servers.sh`` creates (see that script for versions).

Typical use (tests/real is a package: its modules use ``from .servers import ...``;
``from tests.real.servers import ...`` works from the repo root, and a script that puts
tests/real on sys.path can ``import servers``)::

    from tests.real.servers import llamacpp_server, vllm_server

    with llamacpp_server() as srv:          # starts, waits for /v1/models
        client = openai.OpenAI(base_url=srv.base_url, api_key="x")
        client.chat.completions.create(model=srv.model, messages=[...])

    srv = vllm_server()
    srv.start()
    srv.kill()        # SIGKILL the whole process group: "server dies mid-run"
    srv.restart()     # same port, waits until ready again
    srv.stop()        # SIGTERM, then SIGKILL after a grace period

Locations (env var -> default, relative to the repo root):

    CRAWDAD_REAL_SERVERS_DIR  .cache/real-servers
    CRAWDAD_LLAMACPP_PYTHON   $DIR/venv-llamacpp/bin/python
    CRAWDAD_VLLM_PYTHON       $DIR/venv-vllm/bin/python
    CRAWDAD_GGUF_MODEL        $DIR/SmolLM2-135M-Instruct.Q8_0.gguf (made by the script from the
                              package's Q4_1 GGUF: llama.cpp computes prompts faster from Q8_0)
    CRAWDAD_HF_MODEL_DIR      $DIR/smollm2-hf
    CRAWDAD_THINK_MODEL_DIR   $DIR/smollm2-hf-think (made on demand by ensure_think_model())
    CRAWDAD_REAL_LOG_DIR      $DIR/logs

All traffic is loopback only: servers bind 127.0.0.1.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Literal

ServerKind = Literal["llamacpp", "vllm"]

REPO_ROOT = Path(__file__).resolve().parents[2]
HOST = "127.0.0.1"

#: Default served model names (what /v1/models lists and what `model` must be).
LLAMACPP_MODEL_NAME = "smollm2-135m-gguf"
VLLM_MODEL_NAME = "smollm2-135m"

#: Context windows the helpers start the servers with.
LLAMACPP_N_CTX = 4096
# llama-cpp-python computes a prompt on every core (`n_threads_batch`) and the answer on half of
# them (`n_threads`), and threads that wait for each other spin. Beside other work (CI runs the
# fast suite beside this one) a thread spinning for a descheduled sibling burns a core: six
# requests on 2 busy cores took 58 CPU seconds (60 s) with the default, 35 (38 s) with as many
# batch threads as answer threads. Every llama.cpp server of the suite (and each one crawdad
# starts in it) gets these.
LLAMACPP_THREADS = max(1, (os.cpu_count() or 2) // 2)
LLAMACPP_THREAD_ARGS = (
    "--n_threads",
    str(LLAMACPP_THREADS),
    "--n_threads_batch",
    str(LLAMACPP_THREADS),
)
VLLM_MAX_MODEL_LEN = 2048


def _env_path(name: str, default: Path) -> Path:
    value = os.environ.get(name)
    return Path(value) if value else default


def cache_dir() -> Path:
    return _env_path("CRAWDAD_REAL_SERVERS_DIR", REPO_ROOT / ".cache" / "real-servers")


def llamacpp_python() -> Path:
    return _env_path("CRAWDAD_LLAMACPP_PYTHON", cache_dir() / "venv-llamacpp" / "bin" / "python")


def vllm_python() -> Path:
    return _env_path("CRAWDAD_VLLM_PYTHON", cache_dir() / "venv-vllm" / "bin" / "python")


def gguf_model() -> Path:
    """The GGUF llama.cpp serves: SmolLM2-135M re-encoded as Q8_0 by .ci/real_servers.sh from the
    package's Q4_1 (llama.cpp computes prompts faster from Q8_0 on a CPU)."""
    return _env_path("CRAWDAD_GGUF_MODEL", cache_dir() / "SmolLM2-135M-Instruct.Q8_0.gguf")


def hf_model_dir() -> Path:
    return _env_path("CRAWDAD_HF_MODEL_DIR", cache_dir() / "smollm2-hf")


def log_dir() -> Path:
    return _env_path("CRAWDAD_REAL_LOG_DIR", cache_dir() / "logs")


def missing_requirements(kind: ServerKind) -> list[str]:
    """What is missing to start `kind` (empty list: ready). Handy for pytest.skip reasons."""
    missing: list[str] = []
    if kind == "llamacpp":
        if not llamacpp_python().exists():
            missing.append(f"llama.cpp venv python {llamacpp_python()}")
        if not gguf_model().exists():
            missing.append(f"GGUF model {gguf_model()}")
    else:
        if not vllm_python().exists():
            missing.append(f"vLLM venv python {vllm_python()}")
        if not (hf_model_dir() / "config.json").exists():
            missing.append(f"HF model folder {hf_model_dir()}")
    if missing:
        missing.append("run: bash .ci/real_servers.sh")
    return missing


def free_port() -> int:
    """A currently free TCP port on 127.0.0.1 (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


class ServerStartError(RuntimeError):
    """The server exited or did not answer /v1/models in time. Message has the log tail."""


class RealServer:
    """One real inference server run as a subprocess (its own process group) on 127.0.0.1."""

    def __init__(
        self,
        kind: ServerKind,
        argv: Sequence[str],
        *,
        model: str,
        port: int,
        env: Mapping[str, str] | None = None,
        log_path: Path | None = None,
        startup_timeout: float = 300.0,
    ) -> None:
        self.kind: ServerKind = kind
        self.argv: list[str] = list(argv)
        self.model = model
        self.port = port
        self.env: dict[str, str] = dict(env) if env is not None else dict(os.environ)
        self.log_path: Path = log_path or (log_dir() / f"{kind}-{port}.log")
        self.startup_timeout = startup_timeout
        self.startup_seconds: float | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    # -- addresses -----------------------------------------------------------------------
    @property
    def origin(self) -> str:
        """``http://127.0.0.1:PORT`` (no path)."""
        return f"http://{HOST}:{self.port}"

    @property
    def base_url(self) -> str:
        """OpenAI-style base URL, ``http://127.0.0.1:PORT/v1`` (pass to openai.OpenAI)."""
        return f"{self.origin}/v1"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    # -- lifecycle -----------------------------------------------------------------------
    def is_running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self, wait: bool = True) -> RealServer:
        """Spawn the server (appending to the log file); by default wait until ready."""
        if self.is_running():
            raise RuntimeError(f"{self.kind} server already running (pid {self.pid})")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            log.write(f"\n===== {time.strftime('%F %T')} start: {' '.join(self.argv)}\n".encode())
            log.flush()
            self._proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                cwd=str(REPO_ROOT),
                start_new_session=True,  # own process group: vLLM forks an engine-core process
            )
        if wait:
            self.wait_ready()
        return self

    def wait_ready(self, timeout: float | None = None) -> float:
        """Poll GET /v1/models until HTTP 200. Returns seconds waited; raises ServerStartError."""
        limit = self.startup_timeout if timeout is None else timeout
        t0 = time.monotonic()
        while True:
            if self._proc is None or self._proc.poll() is not None:
                code = None if self._proc is None else self._proc.returncode
                raise ServerStartError(
                    f"{self.kind} server exited (code {code}) before answering "
                    f"{self.base_url}/models\n--- tail of {self.log_path} ---\n{self.log_tail()}"
                )
            if self.ready():
                self.startup_seconds = time.monotonic() - t0
                return self.startup_seconds
            if time.monotonic() - t0 > limit:
                raise ServerStartError(
                    f"{self.kind} server did not answer {self.base_url}/models within "
                    f"{limit:.1f}s\n--- tail of {self.log_path} ---\n{self.log_tail()}"
                )
            time.sleep(0.5)

    def ready(self) -> bool:
        """True if GET /v1/models answers 200 right now."""
        try:
            with urllib.request.urlopen(f"{self.base_url}/models", timeout=2) as resp:
                return bool(resp.status == 200)
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def models(self) -> list[str]:
        """Model ids listed by GET /v1/models."""
        with urllib.request.urlopen(f"{self.base_url}/models", timeout=5) as resp:
            body = json.loads(resp.read())
        return [str(m["id"]) for m in body.get("data", [])]

    def _signal_group(self, sig: int) -> None:
        if self._proc is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._proc.pid, sig)

    def stop(self, grace: float = 15.0) -> int | None:
        """SIGTERM the process group, SIGKILL it after `grace` seconds. Returns the exit code."""
        proc = self._proc
        if proc is None:
            return None
        if proc.poll() is None:
            self._signal_group(signal.SIGTERM)
            try:
                proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                self._signal_group(signal.SIGKILL)
                proc.wait(timeout=30)
        # Children (e.g. vLLM's EngineCore) may outlive the leader: make sure the group is gone.
        self._signal_group(signal.SIGKILL)
        self._wait_port_free()
        return proc.returncode

    def kill(self) -> int | None:
        """Die abruptly: SIGKILL the whole process group at once (no graceful shutdown)."""
        proc = self._proc
        if proc is None:
            return None
        self._signal_group(signal.SIGKILL)
        proc.wait(timeout=30)
        self._wait_port_free()
        return proc.returncode

    def restart(self, wait: bool = True) -> RealServer:
        """Start again on the same port (after kill() or stop())."""
        if self.is_running():
            self.stop()
        return self.start(wait=wait)

    def _wait_port_free(self, timeout: float = 10.0) -> None:
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    s.bind((HOST, self.port))
                    return
                except OSError:
                    time.sleep(0.2)

    # -- logs ----------------------------------------------------------------------------
    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return "(no log file)"
        return "\n".join(text.splitlines()[-lines:])

    # -- context manager -----------------------------------------------------------------
    def __enter__(self) -> RealServer:
        if not self.is_running():
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.is_running() else "stopped"
        return f"RealServer({self.kind}, {self.base_url}, model={self.model!r}, {state})"


@functools.cache
def _sockets_folder() -> str:
    """A folder for the ZeroMQ socket files of the vLLMs the suite starts by hand (vLLM leaves
    them where it is stopped by signal; crawdad's own keepers give each server one), removed
    when the session ends."""
    folder = tempfile.mkdtemp(prefix="crawdad-real-vllm-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


def _base_env(extra: Mapping[str, str] | None) -> dict[str, str]:
    env = dict(os.environ)
    # Never reach a model hub; everything is local.
    env.update(
        {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1"}
    )
    env.setdefault("NO_PROXY", "127.0.0.1,localhost")
    env.setdefault("no_proxy", "127.0.0.1,localhost")
    if extra:
        env.update(extra)
    return env


def llamacpp_server(
    *,
    port: int | None = None,
    model: str = LLAMACPP_MODEL_NAME,
    n_ctx: int = LLAMACPP_N_CTX,
    interrupt_requests: bool | None = None,
    extra_args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    log_path: Path | None = None,
    startup_timeout: float = 120.0,
) -> RealServer:
    """A llama-cpp-python server (`python -m llama_cpp.server`) for the SmolLM2 GGUF. Not started.

    `interrupt_requests`: llama-cpp-python's ``--interrupt_requests`` (server default: true). With
    it on, a request that arrives while a STREAMED response is being generated cuts that stream
    short: the server sends ``data: [DONE]`` with no ``finish_reason`` and serves the newcomer.
    Non-streamed requests are never cut; concurrent requests are always served one at a time.
    None leaves the server default.
    """
    port = port or free_port()
    argv = [
        str(llamacpp_python()), "-m", "llama_cpp.server",
        "--model", str(gguf_model()),
        "--model_alias", model,
        "--host", HOST, "--port", str(port),
        "--n_ctx", str(n_ctx), *LLAMACPP_THREAD_ARGS,
    ]  # fmt: skip
    if interrupt_requests is not None:
        argv += ["--interrupt_requests", "true" if interrupt_requests else "false"]
    argv += list(extra_args)
    return RealServer(
        "llamacpp", argv, model=model, port=port, env=_base_env(env),
        log_path=log_path, startup_timeout=startup_timeout,
    )  # fmt: skip


def vllm_server(
    *,
    port: int | None = None,
    model: str = VLLM_MODEL_NAME,
    model_dir: Path | None = None,
    max_model_len: int = VLLM_MAX_MODEL_LEN,
    reasoning_parser: str | None = None,
    extra_args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    log_path: Path | None = None,
    startup_timeout: float = 300.0,
) -> RealServer:
    """A vLLM (CPU) OpenAI server for the converted SmolLM2 folder. Not started.

    `reasoning_parser` ("deepseek_r1", "qwen3", ...) adds ``--reasoning-parser``;
    `model_dir` replaces the converted SmolLM2 folder (e.g. ``ensure_think_model()``).
    """
    port = port or free_port()
    argv = [
        str(vllm_python()), "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(model_dir or hf_model_dir()),
        "--served-model-name", model,
        "--host", HOST, "--port", str(port),
        "--max-model-len", str(max_model_len),
        "--dtype", "bfloat16",
        "--enforce-eager",
    ]  # fmt: skip
    if reasoning_parser:
        argv += ["--reasoning-parser", reasoning_parser]
    argv += list(extra_args)
    base = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
    base["VLLM_RPC_BASE_PATH"] = _sockets_folder()
    if env:
        base.update(env)
    return RealServer(
        "vllm", argv, model=model, port=port, env=_base_env(base),
        log_path=log_path, startup_timeout=startup_timeout,
    )  # fmt: skip


_THINK_MODEL_SCRIPT = r"""
import pathlib, shutil, sys
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from tokenizers import AddedToken
src, dst = sys.argv[1], pathlib.Path(sys.argv[2])
tmp = dst.with_name(dst.name + ".tmp")
shutil.rmtree(tmp, ignore_errors=True)
tok = AutoTokenizer.from_pretrained(src)
model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.bfloat16)
dot = tok.convert_tokens_to_ids(".")
newline = tok.encode("\n", add_special_tokens=False)[0]
tok.add_tokens([AddedToken("<think>", special=False, normalized=False),
                AddedToken("</think>", special=False, normalized=False)])
start, end = tok.convert_tokens_to_ids("<think>"), tok.convert_tokens_to_ids("</think>")
model.resize_token_embeddings(len(tok))
emb = model.get_input_embeddings().weight
with torch.no_grad():
    emb[start] = emb[newline]
    # "</think>" = a slightly stronger "." (embeddings are tied): wherever greedy decoding would
    # emit ".", it emits "</think>" instead, so the text before the first "." becomes reasoning.
    emb[end] = emb[dot] * 1.05
model.tie_weights()
model.save_pretrained(tmp)
tok.save_pretrained(tmp)
tmp.rename(dst)
print("think model:", dst, "ids", start, end)
"""


def think_model_dir() -> Path:
    return _env_path("CRAWDAD_THINK_MODEL_DIR", cache_dir() / "smollm2-hf-think")


def ensure_think_model(timeout: float = 600.0) -> Path:
    """A copy of the HF model whose vocabulary has ``<think>``/``</think>`` tokens (made once).

    SmolLM2 is no reasoning model: vLLM's deepseek_r1 parser refuses to start without those
    tokens. In this copy ``</think>`` is a slightly stronger ``.``, so with temperature 0 the
    text up to the first full stop comes back as reasoning and the rest as content: enough to
    exercise the reasoning fields of a real vLLM server. Needs the vLLM venv.
    """
    dst = think_model_dir()
    if (dst / "config.json").exists():
        return dst
    subprocess.run(
        [str(vllm_python()), "-c", _THINK_MODEL_SCRIPT, str(hf_model_dir()), str(dst)],
        check=True, timeout=timeout, env=_base_env(None),
    )  # fmt: skip
    return dst


def make_server(kind: ServerKind, **kwargs: object) -> RealServer:
    """`llamacpp_server(**kwargs)` or `vllm_server(**kwargs)` by name."""
    if kind == "llamacpp":
        return llamacpp_server(**kwargs)  # type: ignore[arg-type]
    if kind == "vllm":
        return vllm_server(**kwargs)  # type: ignore[arg-type]
    raise ValueError(f"unknown server kind {kind!r}")


__all__ = [
    "LLAMACPP_MODEL_NAME",
    "VLLM_MODEL_NAME",
    "RealServer",
    "ServerKind",
    "ServerStartError",
    "cache_dir",
    "ensure_think_model",
    "free_port",
    "gguf_model",
    "hf_model_dir",
    "llamacpp_python",
    "llamacpp_server",
    "make_server",
    "missing_requirements",
    "think_model_dir",
    "vllm_python",
    "vllm_server",
]
