"""Model servers behind one protocol: Ollama's native API and OpenAI-compatible servers."""

from crawdad.backends.base import Backend, ChatRequest, ChatResult
from crawdad.backends.pool import ModelPool
from crawdad.config import ModelSpec


def make_backend(spec: ModelSpec, url: str) -> Backend:
    # Imported here: each client library takes a noticeable time to import.
    if spec.backend == "ollama":
        from crawdad.backends.ollama import OllamaBackend

        return OllamaBackend(url, timeout=spec.timeout)
    from crawdad.backends.openai_compat import OpenAIBackend

    return OpenAIBackend(url, api_key=spec.resolved_api_key(), timeout=spec.timeout)


__all__ = ["Backend", "ChatRequest", "ChatResult", "ModelPool", "make_backend"]
