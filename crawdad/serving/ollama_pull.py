"""Ollama tags a served model needs, pulled through the server's own API (`ollama` client,
streamed) with a progress bar, once the server crawdad started answers: a run never waits on a
first request that silently downloads 20 GB."""

from __future__ import annotations

from typing import Any

import httpx
from tqdm.auto import tqdm

from crawdad.errors import CrawdadError
from crawdad.serving.base import ServerPlan


class PullError(CrawdadError):
    """A tag could not be pulled (it does not exist, or the registry cannot be reached)."""


def _has(names: set[str], tag: str) -> bool:
    return tag in names or (":" not in tag and f"{tag}:latest" in names)


async def pull_missing(server: ServerPlan, progress: bool = True) -> bool:
    """Pull `server.weights` (an Ollama tag) unless the server has it; True when it pulled."""
    import ollama

    client = ollama.AsyncClient(host=f"http://{server.host}:{server.port}")
    try:
        listed = await client.list()
        if _has({str(m.model) for m in listed.models}, server.weights):
            return False
        with tqdm(
            desc=f"pulling {server.weights}",
            unit="B",
            unit_scale=True,
            disable=not progress,
            leave=False,
        ) as bar:
            parts: Any = await client.pull(server.weights, stream=True)
            async for part in parts:
                if part.total:
                    bar.total = part.total
                    bar.n = part.completed or 0
                bar.set_postfix_str(str(part.status or ""), refresh=True)
    except (
        ollama.ResponseError,
        ConnectionError,
        OSError,
        httpx.HTTPError,
        ValueError,  # a garbled answer: not JSON, another shape (the SDK's models refuse it),
        TypeError,  # not an object,
        RecursionError,  # too deep
    ) as e:
        text = (str(getattr(e, "error", None) or e).splitlines() or [type(e).__name__])[0][:300]
        raise PullError(
            f"server {server.key}: pulling {server.weights} failed: {text}. Check the tag "
            "(`ollama list`, ollama.com/library) and the network"
        ) from None
    return True
