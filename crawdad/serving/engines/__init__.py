"""One module per inference engine, each behind `crawdad.serving.base.Engine`: its command
line, health path, whether it is installed (and the line that installs it), its version."""

from __future__ import annotations

from crawdad.serving.base import Engine, EngineName


def engine(name: EngineName, executable: str | None = None) -> Engine:
    """The engine `name`, running `executable` (None: its usual program on PATH)."""
    if name == "vllm":
        from crawdad.serving.engines.vllm import VLLM

        return VLLM(executable)
    if name == "sglang":
        from crawdad.serving.engines.sglang import SGLang

        return SGLang(executable)
    if name == "llamacpp":
        from crawdad.serving.engines.llamacpp import LlamaCpp

        return LlamaCpp(executable)
    if name == "ollama":
        from crawdad.serving.engines.ollama import Ollama

        return Ollama(executable)
    raise ValueError(f"unknown engine {name!r}: vllm, sglang, llamacpp or ollama")


def reasoning_parser(name: EngineName, model: str, weights: str = "") -> str | None:
    """The reasoning parser engine `name` needs for a model (None: none)."""
    found: str | None = getattr(engine(name), "reasoning_parser")(model, weights)  # noqa: B009
    return found
