"""How to start a model on a server, for messages that say so (`crawdad doctor`, a refused
connection): the `vllm serve` line of a served model name, with its reasoning parser. Light: no
SDK is imported here."""

from __future__ import annotations

# Served names of the paper's models on vLLM, and the reasoning parser each needs (None: not a
# reasoning model, as the Granite extractor).
HF_MODELS: dict[str, tuple[str, str | None]] = {
    "qwen3:32b": ("Qwen/Qwen3-32B", "qwen3"),
    "deepseek-r1:32b": ("deepseek-ai/DeepSeek-R1-Distill-Qwen-32B", "deepseek_r1"),
    "qwq:32b": ("Qwen/QwQ-32B", "deepseek_r1"),
    "granite3.3:2b": ("ibm-granite/granite-3.3-2b-instruct", None),
}
# Other models by family: vLLM's parser for each (its docs' table of reasoning models).
_PARSERS = (("qwen3", "qwen3"), ("deepseek-r1", "deepseek_r1"), ("qwq", "deepseek_r1"))


def reasoning_parser(model: str) -> str | None:
    """vLLM's `--reasoning-parser` for a served model name (None: none needed, or unknown)."""
    if model in HF_MODELS:
        return HF_MODELS[model][1]
    name = model.lower()
    return next((parser for family, parser in _PARSERS if family in name), None)


def vllm_serve(model: str, port: str | None = None) -> str:
    """The `vllm serve` command line that serves `model` under its name."""
    hf = HF_MODELS.get(model, (model, None))[0]
    parser = reasoning_parser(model)
    named = f" --served-model-name {model}" if hf != model else ""
    return (
        f"vllm serve {hf}{named}"
        + (f" --port {port}" if port else "")
        + (f" --reasoning-parser {parser}" if parser else "")
    )
