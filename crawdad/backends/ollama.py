"""Ollama's native API (/api/chat): streamed chats read straight off aiohttp
(`crawdad.backends.streaming`), everything else through the official `ollama` client."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import aiohttp
import httpx
import ollama

from crawdad.backends.base import (
    GARBAGE_ERRORS,
    ChatRequest,
    ChatResult,
    ToolCallOut,
    garbled,
)
from crawdad.backends.guard import StreamGuard
from crawdad.backends.streaming import new_session, ollama_result, read_ndjson
from crawdad.backends.transport import TRANSPORT_ERRORS, diagnose, ollama_transport
from crawdad.errors import BackendError, ModelNotFound, ServerUnavailable

NS = 1e-9


def _options(req: ChatRequest) -> dict[str, Any]:
    options: dict[str, Any] = {
        "temperature": req.temperature,
        "top_p": req.top_p,
        "num_predict": req.max_tokens,
    }
    if req.top_k is not None:
        options["top_k"] = req.top_k
    if req.num_ctx is not None:
        options["num_ctx"] = req.num_ctx
    if req.seed is not None:
        options["seed"] = req.seed
    return {**options, **req.options}


def translate_error(e: BaseException, url: str, model: str) -> BackendError:
    """One place where transport and HTTP errors become crawdad errors with a fix-it message."""
    if isinstance(e, ollama.ResponseError):
        if e.status_code == 404 and "not found" in str(e.error).lower():
            return ModelNotFound(
                f"the Ollama server at {url} does not have model {model!r}; run: ollama pull {model}",
                endpoint=url,
            )
        transient = e.status_code in (-1, 408, 429) or e.status_code >= 500
        return BackendError(
            f"Ollama at {url} answered {e.status_code}: {e.error}",
            transient=transient,
            endpoint=url,
        )
    kind, cause = diagnose(e) or (None, f"{type(e).__name__}: {e}")
    if kind == "refused":
        return ServerUnavailable(
            f"cannot connect to Ollama at {url}; start it with `ollama serve` (or set OLLAMA_HOST / base_urls)",
            endpoint=url,
        )
    if kind == "timeout":
        return BackendError(f"Ollama at {url} did not answer in time", transient=True, endpoint=url)
    if kind == "broken":
        return BackendError(
            f"connection to Ollama at {url} failed: {cause}", transient=True, endpoint=url
        )
    return BackendError(f"Ollama at {url}: {cause}", transient=False, endpoint=url)


class OllamaBackend:
    def __init__(self, url: str, *, timeout: float = 1800.0) -> None:
        self.url = url
        self._client = ollama.AsyncClient(
            host=url,
            timeout=httpx.Timeout(timeout, connect=10.0),
            transport=ollama_transport(),
        )
        self._timeout = timeout
        self._session: aiohttp.ClientSession | None = None  # streamed chats; made in the loop
        http = self._client._client
        self._chat_url = str(http.base_url.join("/api/chat"))
        self._headers = {
            k: v for k, v in http.headers.items() if k.lower() in ("user-agent", "authorization")
        }

    async def chat(self, request: ChatRequest, guard: StreamGuard | None = None) -> ChatResult:
        start = time.monotonic()
        kwargs: dict[str, Any] = dict(
            model=request.model,
            messages=_messages(request),
            think=request.think,
            options=_options(request),
            keep_alive=request.keep_alive,
        )
        if request.tools is not None:
            kwargs["tools"] = request.tools
        if request.json_schema is not None:
            kwargs["format"] = request.json_schema
        try:
            if request.stream:
                # The body the `ollama` client sends (tools [] when there are none).
                body = {"tools": [], **{k: v for k, v in kwargs.items() if v is not None}}
                result = await self._stream({**body, "stream": True}, guard)
            else:
                resp = await self._client.chat(**kwargs, stream=False)
                result = ollama_result(
                    resp, resp.message.content or "", resp.message.thinking or ""
                )
                result.tool_calls = _tool_calls(resp.message)
        except (ollama.ResponseError, *TRANSPORT_ERRORS) as e:
            raise translate_error(e, self.url, request.model) from e
        except GARBAGE_ERRORS as e:
            raise garbled(self.url, "an Ollama chat response", e) from e
        result.seconds = time.monotonic() - start
        result.endpoint = self.url
        return result

    async def _stream(self, body: dict[str, Any], guard: StreamGuard | None) -> ChatResult:
        if self._session is None:
            self._session = new_session(10.0, self._timeout)
        async with (
            asyncio.timeout(self._timeout),
            self._session.post(self._chat_url, json=body, headers=self._headers) as resp,
        ):
            if resp.status >= 400:
                raise ollama.ResponseError(await resp.text(errors="replace"), resp.status)
            return await read_ndjson(resp, self.url, guard, ollama.ResponseError)

    async def list_models(self) -> list[str]:
        try:
            listing = await self._client.list()
            found = [m.model for m in listing.models if m.model]
        except (ollama.ResponseError, *TRANSPORT_ERRORS) as e:
            raise translate_error(e, self.url, "") from e
        except GARBAGE_ERRORS as e:
            raise garbled(self.url, "Ollama's list of models", e) from e
        names: list[str] = []
        for name in found:
            names.append(name)
            if name.endswith(":latest"):
                names.append(name.removesuffix(":latest"))
        return names

    async def version(self) -> str | None:
        try:
            resp = await self._client._client.get("/api/version")  # the client has no call for it
            resp.raise_for_status()
            return str(resp.json().get("version"))
        except (*TRANSPORT_ERRORS, ValueError):
            return None

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
        await self._client._client.aclose()


def _messages(req: ChatRequest) -> list[dict[str, Any]]:
    """The neutral conversation in Ollama's form: call arguments as objects, tool results
    named by `tool_name`."""
    if req.messages is None:
        return [{"role": "user", "content": req.prompt}]
    out: list[dict[str, Any]] = []
    for m in req.messages:
        message: dict[str, Any] = {"role": m["role"], "content": m.get("content") or ""}
        if m.get("tool_calls"):
            message["tool_calls"] = [
                {"function": {"name": c["name"], "arguments": _as_object(c["arguments"])}}
                for c in m["tool_calls"]
            ]
        if m["role"] == "tool" and m.get("name"):
            message["tool_name"] = m["name"]
        out.append(message)
    return out


def _as_object(arguments: Any) -> dict[str, Any]:
    """Ollama takes call arguments only as an object; a malformed call is echoed as {}."""
    if isinstance(arguments, dict):
        return arguments
    try:
        value = json.loads(arguments)
    except (TypeError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _tool_calls(message: ollama.Message) -> list[ToolCallOut]:
    return [
        ToolCallOut(name=c.function.name, arguments=dict(c.function.arguments or {}))
        for c in message.tool_calls or []
    ]
