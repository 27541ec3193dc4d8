"""Ollama: `ollama serve` on the planned port (OLLAMA_HOST), with OLLAMA_NUM_PARALLEL and
OLLAMA_MAX_LOADED_MODELS from the plan; one server holds every tag the run uses. Health at
/api/version."""

from __future__ import annotations

import re
from typing import Literal

from crawdad.serving.base import EngineName, ServerPlan
from crawdad.serving.engines import _common


class Ollama:
    name: EngineName = "ollama"
    backend: Literal["openai", "ollama"] = "ollama"
    scratch_env: tuple[str, ...] = ()
    # Which of crawdad's readers of a server's own metrics applies (backends/server_metrics.py).
    metrics_kind: str | None = "ollama"

    def __init__(self, executable: str | None = None) -> None:
        self.executable = executable or "ollama"

    def command(self, server: ServerPlan) -> list[str]:
        return [self.executable, "serve", *server.args]

    def environment(self, server: ServerPlan) -> dict[str, str]:
        """What `ollama serve` reads instead of flags."""
        return {
            "OLLAMA_HOST": f"{server.host}:{server.port}",
            "OLLAMA_NUM_PARALLEL": str(server.parallel),
            "OLLAMA_MAX_LOADED_MODELS": str(max(1, len(server.tags))),
            "OLLAMA_CONTEXT_LENGTH": str(server.context_length),
        }

    def health_path(self) -> str:
        return "/api/version"

    def api_key(self, secret: str) -> tuple[dict[str, str], list[str]]:
        return {}, []  # Ollama takes no key: its ownership is proven by the socket alone

    def key_path(self) -> str | None:
        return None

    def installed(self) -> bool:
        return _common.resolve(self.executable) is not None

    def install_hint(self) -> str:
        return "curl -fsSL https://ollama.com/install.sh | sh   (or see ollama.com/download)"

    def version(self) -> str | None:
        line = _common.version_output(self.executable)
        found = re.search(r"(\d+\.\d+\.\d+\S*)", line or "")
        return found.group(1) if found else line

    def reasoning_parser(self, model: str, weights: str = "") -> str | None:
        return None  # Ollama splits the thinking itself (`think`)
