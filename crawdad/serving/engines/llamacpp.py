"""llama.cpp: `llama-server -m FILE.gguf` (health at /health), or, where the executable is a
Python with llama-cpp-python, `python -m llama_cpp.server --model FILE.gguf` (its flags are
spelled with underscores; it has no /health: /v1/models answers once the model is loaded; and
`--interrupt_requests false`, without which a new request cuts a streamed answer short)."""

from __future__ import annotations

from typing import Literal

from crawdad.serving.base import EngineName, ServerPlan
from crawdad.serving.engines import _common


class LlamaCpp:
    name: EngineName = "llamacpp"
    backend: Literal["openai", "ollama"] = "openai"
    scratch_env: tuple[str, ...] = ()

    def __init__(self, executable: str | None = None) -> None:
        self.executable = executable or "llama-server"

    @property
    def metrics_kind(self) -> str | None:
        """llama-server publishes /metrics and /slots; llama-cpp-python's server neither."""
        return None if self.python else "llamacpp"

    @property
    def python(self) -> bool:
        return _common.is_python(self.executable)

    def command(self, server: ServerPlan) -> list[str]:
        # One context per slot: llama-server splits -c among its -np slots.
        total = server.context_length * server.parallel
        layers = "-1" if server.gpus else "0"
        if self.python:
            argv = [self.executable, "-m", "llama_cpp.server", "--model", server.weights]
            argv += ["--model_alias", server.served_name]
            argv += ["--host", server.host, "--port", str(server.port)]
            argv += ["--n_ctx", str(server.context_length), "--n_gpu_layers", layers]
            if "--interrupt_requests" not in server.args:  # else a new request cuts a stream
                argv += ["--interrupt_requests", "false"]
        else:
            argv = [self.executable, "-m", server.weights, "--alias", server.served_name]
            argv += ["--host", server.host, "--port", str(server.port)]
            argv += ["-c", str(total), "-np", str(server.parallel)]
            argv += ["-ngl", "999" if server.gpus else "0", "--jinja", "--metrics"]
            if server.reasoning_parser:  # the thinking goes to reasoning_content
                argv += ["--reasoning-format", "deepseek"]
            if server.tensor_parallel > 1:
                argv += ["--split-mode", "layer"]
        return argv + list(server.args)

    def health_path(self) -> str:
        return "/v1/models" if self.python else "/health"

    def api_key(self, secret: str) -> tuple[dict[str, str], list[str]]:
        # llama-server: --api-key's variable; llama-cpp-python: its settings' api_key, which
        # pydantic-settings reads from API_KEY
        return {"API_KEY" if self.python else "LLAMA_API_KEY": secret}, []

    def key_path(self) -> str | None:
        # llama-server leaves /health and /v1/models open; /props needs the key
        return "/v1/models" if self.python else "/props"

    def installed(self) -> bool:
        if self.python:
            return _common.has_module(_common.resolve(self.executable), "llama_cpp")
        return _common.resolve(self.executable) is not None

    def install_hint(self) -> str:
        if self.python:
            return 'pip install "llama-cpp-python[server]"   (into that Python)'
        return _common.install_line(
            "llama.cpp",
            'pip install "llama-cpp-python[server]" and set serve.executable to that Python '
            "(or build llama-server: github.com/ggml-org/llama.cpp, docs/build.md)",
        )

    def version(self) -> str | None:
        if self.python:
            return _common.dist_version(_common.resolve(self.executable), "llama_cpp_python")
        return _common.version_output(self.executable)

    def reasoning_parser(self, model: str, weights: str = "") -> str | None:
        """llama-server splits the thinking itself (--reasoning-format deepseek): the family's
        name, or None."""
        return _common.reasoning_parser(model, weights)
