"""WHAT-IF, not crawdad's code: the two hot spots the profile of bench_orchestrator points at,
patched in for a measurement (`--what-if` on bench_orchestrator and bench_server_bound).

1. The Ollama transport. `crawdad/backends/ollama.py` goes through ollama-python, i.e. httpx on
   anyio: ~2.5 ms of CPU per streamed request here, and a new TCP connection per request (the
   stream is closed as soon as the `done` part arrives, before the body ends, so the connection
   cannot go back to the pool; reusing connections is slower still, httpcore's pool scans every
   connection on each request). The same request through aiohttp costs ~0.7 ms.
2. The loop detector (`crawdad/backends/guard.py`) compresses the last 6,000 characters with
   zlib level 6 every 500 new characters: ~0.9 ms per debater response. Level 1 costs a third
   and separates the cases as well (repeated text ~0.014, reasoning text ~0.40; threshold 0.12).

`apply()` swaps both in for this process. Same requests, same replies, same records.
"""

from __future__ import annotations

import json
import time
import zlib
from typing import Any

import aiohttp

import crawdad.backends.guard as guard
import crawdad.runner as runner
from crawdad.backends import make_backend
from crawdad.backends.base import ChatRequest, ChatResult, split_think, stop_reason_of
from crawdad.backends.guard import StreamGuard
from crawdad.backends.ollama import _options
from crawdad.config import ModelSpec
from crawdad.errors import BackendError, ServerUnavailable


class AiohttpOllama:
    """Ollama's /api/chat over one aiohttp session (streaming NDJSON), errors as crawdad's."""

    def __init__(self, url: str, timeout: float) -> None:
        self.url = url.rstrip("/")
        self._timeout = timeout
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0),
                timeout=aiohttp.ClientTimeout(total=self._timeout, sock_connect=10),
            )
        return self._session

    async def chat(self, request: ChatRequest, guard: StreamGuard | None = None) -> ChatResult:
        start = time.monotonic()
        body: dict[str, Any] = {
            "model": request.model,
            "messages": [{"role": "user", "content": request.prompt}],
            "think": request.think,
            "options": _options(request),
            "keep_alive": request.keep_alive,
            "stream": request.stream,
        }
        if request.json_schema is not None:
            body["format"] = request.json_schema
        try:
            async with self._client().post(f"{self.url}/api/chat", json=body) as response:
                if response.status >= 400:
                    text = await response.text()
                    raise BackendError(
                        f"Ollama at {self.url} answered {response.status}: {text}",
                        transient=response.status in (408, 429) or response.status >= 500,
                        endpoint=self.url,
                    )
                if not request.stream:
                    result = _result(await response.json(), None, None)
                else:
                    result = await self._stream(response, guard)
        except aiohttp.ClientConnectorError as e:
            raise ServerUnavailable(f"cannot connect to Ollama at {self.url}: {e}") from e
        except aiohttp.ClientError as e:
            raise BackendError(f"Ollama at {self.url}: {e}", transient=True) from e
        result.seconds = time.monotonic() - start
        result.endpoint = self.url
        return result

    async def _stream(
        self, response: aiohttp.ClientResponse, guard: StreamGuard | None
    ) -> ChatResult:
        content: list[str] = []
        thinking: list[str] = []
        async for line in response.content:
            part = json.loads(line)
            if "error" in part:
                raise BackendError(f"Ollama at {self.url}: {part['error']}", transient=True)
            message = part.get("message") or {}
            delta_text, delta_think = message.get("content") or "", message.get("thinking") or ""
            content.append(delta_text)
            thinking.append(delta_think)
            if part.get("done"):
                return _result(part, "".join(content), "".join(thinking))
            if guard is not None and (verdict := guard.feed(delta_think + delta_text)):
                text, trace = split_think("".join(content), "".join(thinking))
                return ChatResult(
                    text=text, thinking=trace, stop_reason=verdict, raw_stop_reason=verdict
                )
        raise BackendError(f"the stream from Ollama at {self.url} ended early", transient=True)

    async def list_models(self) -> list[str]:
        return []

    async def version(self) -> str | None:
        return None

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()


def _result(part: dict[str, Any], content: str | None, thinking: str | None) -> ChatResult:
    message = part.get("message") or {}
    text, trace = split_think(
        content if content is not None else message.get("content") or "",
        thinking if thinking is not None else message.get("thinking") or "",
    )
    total = part.get("total_duration")
    return ChatResult(
        text=text,
        thinking=trace,
        prompt_tokens=part.get("prompt_eval_count"),
        completion_tokens=part.get("eval_count"),
        server_seconds=total * 1e-9 if total else None,
        stop_reason=stop_reason_of(part.get("done_reason")),
        raw_stop_reason=part.get("done_reason"),
    )


def _fast_ratio(text: str) -> float:
    raw = text.encode("utf-8", "ignore")
    return len(zlib.compress(raw, 1)) / max(1, len(raw))


def apply() -> None:
    def patched(spec: ModelSpec, url: str) -> Any:
        if spec.backend == "ollama":
            return AiohttpOllama(url, spec.timeout)
        return make_backend(spec, url)

    runner.make_backend = patched  # type: ignore[assignment]
    guard.compression_ratio = _fast_ratio
    print(
        "WHAT-IF: aiohttp Ollama transport and zlib level 1 patched in (see benchmarks/whatif.py)"
    )
