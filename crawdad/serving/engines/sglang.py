"""SGLang: `python -m sglang.launch_server --model-path WEIGHTS`, OpenAI-compatible, health at
/health. Its reasoning parsers are vLLM's, named with a hyphen (deepseek-r1)."""

from __future__ import annotations

from typing import Literal

from crawdad.serving.base import EngineName, ServerPlan
from crawdad.serving.engines import _common


class SGLang:
    name: EngineName = "sglang"
    backend: Literal["openai", "ollama"] = "openai"
    scratch_env: tuple[str, ...] = ()
    # Which of crawdad's readers of a server's own metrics applies (backends/server_metrics.py).
    metrics_kind: str | None = "sglang"

    def __init__(self, executable: str | None = None) -> None:
        self.executable = executable or "python3"

    def command(self, server: ServerPlan) -> list[str]:
        argv = [self.executable, "-m", "sglang.launch_server", "--model-path", server.weights]
        argv += ["--served-model-name", server.served_name]
        argv += ["--host", server.host, "--port", str(server.port)]
        argv += ["--context-length", str(server.context_length)]
        if server.gpus and server.memory_fraction is not None:
            argv += ["--mem-fraction-static", f"{server.memory_fraction:g}"]
        if server.tensor_parallel > 1:
            argv += ["--tp-size", str(server.tensor_parallel)]
        if server.kv_cache_dtype:
            kv = "fp8_e4m3" if server.kv_cache_dtype == "fp8" else server.kv_cache_dtype
            argv += ["--kv-cache-dtype", kv]
        if server.reasoning_parser:
            argv += ["--reasoning-parser", server.reasoning_parser]
        return argv + list(server.args)

    def health_path(self) -> str:
        return "/health"

    def api_key(self, secret: str) -> tuple[dict[str, str], list[str]]:
        return {}, ["--api-key", secret]  # SGLang reads no variable for it

    def key_path(self) -> str | None:
        return "/v1/models"  # everything but /health* and /metrics needs the key

    def installed(self) -> bool:
        return _common.has_module(_common.resolve(self.executable), "sglang")

    def install_hint(self) -> str:
        return (
            'pip install "sglang[all]"   (into the Python named by the serve table\'s executable)'
        )

    def version(self) -> str | None:
        return _common.dist_version(_common.resolve(self.executable), "sglang")

    def reasoning_parser(self, model: str, weights: str = "") -> str | None:
        parser = _common.reasoning_parser(model, weights)
        return parser.replace("_", "-") if parser else None
