"""How to start a model on a server, for messages that say so (`crawdad doctor`, a refused
connection): the `vllm serve` line of a served model name, with its reasoning parser. The line
comes from the vLLM engine module (crawdad/serving/engines/vllm.py), which also builds the
command crawdad runs itself: a user is told the command crawdad would run. Light: no SDK is
imported here."""

from __future__ import annotations

from crawdad.serving.engines._common import HF_MODELS
from crawdad.serving.engines._common import reasoning_parser as _parser
from crawdad.serving.engines.vllm import serve_line

__all__ = ["HF_MODELS", "reasoning_parser", "vllm_serve"]


def reasoning_parser(model: str) -> str | None:
    """vLLM's `--reasoning-parser` for a served model name (None: none needed, or unknown)."""
    return _parser(model)


def vllm_serve(model: str, port: str | None = None) -> str:
    """The `vllm serve` command line that serves `model` under its name."""
    return serve_line(model, port)
