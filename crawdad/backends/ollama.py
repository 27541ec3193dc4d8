"""Ollama's native API (/api/chat): streamed chats read straight off aiohttp
(`crawdad.backends.streaming`), everything else through the official `ollama` client."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

import httpx

from crawdad import __version__
from crawdad.backends.base import (
    FAKE_HEADER,
    GARBAGE_ERRORS,
    ChatRequest,
    ChatResult,
    ModelBuild,
    ServerInfo,
    ToolCallOut,
    garbled,
    text_or_none,
)
from crawdad.backends.guard import StreamGuard
from crawdad.backends.server_metrics import ANSWER_LIMITS, json_within, read_body
from crawdad.backends.streaming import StreamConnections, ollama_result, read_ndjson
from crawdad.backends.transport import (
    TRANSPORT_ERRORS,
    diagnose,
    nothing_answers,
    ollama_transport,
)
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


class OllamaError(Exception):
    """An HTTP error status from Ollama, with its message (the fields of the SDK's
    ResponseError, which this module imports only for non-streamed chats)."""

    def __init__(self, error: str, status_code: int = -1) -> None:
        super().__init__(error)
        self.error = error
        self.status_code = status_code


def _status_error(e: BaseException) -> OllamaError | None:
    if isinstance(e, OllamaError):
        return e
    sdk = sys.modules.get("ollama")
    if sdk is not None and isinstance(e, sdk.ResponseError):
        return OllamaError(str(e.error), e.status_code)
    return None


def translate_error(e: BaseException, url: str, model: str) -> BackendError:
    """One place where transport and HTTP errors become crawdad errors with a fix-it message."""
    status = _status_error(e)
    if status is not None:
        if status.status_code == 404 and "not found" in str(status.error).lower():
            return ModelNotFound(
                f"the Ollama server at {url} does not have model {model!r}; run: ollama pull {model}",
                endpoint=url,
            )
        transient = status.status_code in (-1, 408, 429) or status.status_code >= 500
        return BackendError(
            f"Ollama at {url} answered {status.status_code}: {status.error}",
            transient=transient,
            endpoint=url,
        )
    kind, cause = diagnose(e) or (None, f"{type(e).__name__}: {e}")
    if kind == "refused":
        return ServerUnavailable(
            nothing_answers(url, "`ollama serve`", "ollama", "OLLAMA_HOST or base_urls"),
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
    """Streamed chats, the model list and the version go over crawdad's own aiohttp session;
    the `ollama` client (a noticeable import) is made for non-streamed chats only."""

    def __init__(self, url: str, *, timeout: float = 1800.0) -> None:
        self.url = url
        self._timeout = timeout
        self._http = StreamConnections(url, 10.0, timeout)  # sessions made in the loop
        self._client: Any = None  # the ollama SDK's AsyncClient, on first non-streamed chat
        self._chat_url = f"{url.rstrip('/')}/api/chat"
        self._headers = {"User-Agent": f"crawdad/{__version__}"}

    def _sdk(self) -> Any:
        if self._client is None:
            import ollama

            self._client = ollama.AsyncClient(
                host=self.url,
                timeout=httpx.Timeout(self._timeout, connect=10.0),
                transport=ollama_transport(),
                follow_redirects=False,  # answers come from the server itself, never elsewhere
            )
        return self._client

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
                resp = await self._sdk().chat(**kwargs, stream=False)
                result = ollama_result(
                    resp, resp.message.content or "", resp.message.thinking or ""
                )
                result.tool_calls = _tool_calls(resp.message)
        except Exception as e:
            if (status := _status_error(e)) is not None or isinstance(e, TRANSPORT_ERRORS):
                raise translate_error(status or e, self.url, request.model) from e
            if isinstance(e, GARBAGE_ERRORS):
                raise garbled(self.url, "an Ollama chat response", e) from e
            raise
        result.seconds = time.monotonic() - start
        result.endpoint = self.url
        return result

    async def _stream(self, body: dict[str, Any], guard: StreamGuard | None) -> ChatResult:
        async with (
            asyncio.timeout(self._timeout),
            await self._http.post(self._chat_url, json=body, headers=self._headers) as resp,
        ):
            if resp.status >= 400:
                raise OllamaError(_error_text(await resp.text(errors="replace")), resp.status)
            return await read_ndjson(resp, self.url, guard, OllamaError)

    async def _get_json(self, path: str, seconds: float) -> Any:
        return (await self._get(path, seconds))[0]

    async def _get(self, path: str, seconds: float) -> tuple[Any, bool]:
        """The JSON body of GET `path`, and whether crawdad's fake server sent it."""
        url = f"{self.url.rstrip('/')}{path}"
        # Read within bounds (server_metrics.ANSWER_LIMITS): bytes as sent and decompressed,
        # JSON's depth; past one, a `Lost` (a ValueError: a garbled answer).
        headers = {**self._headers, "Accept-Encoding": "gzip, deflate"}
        async with (
            asyncio.timeout(seconds),
            await self._http.get(url, headers=headers, auto_decompress=False) as resp,
        ):
            body = await read_body(resp, ANSWER_LIMITS)
            if resp.status >= 400:
                raise OllamaError(_error_text(body.decode("utf-8", "replace")), resp.status)
            return json_within(body, ANSWER_LIMITS), FAKE_HEADER in resp.headers

    async def _listing(self) -> tuple[list[dict[str, Any]], bool]:
        try:
            listing, fake = await self._get("/api/tags", self._timeout)
            models = list(listing["models"])
            found = [str(m.get("model") or m.get("name")) for m in models]  # checks each shape
        except (OllamaError, *TRANSPORT_ERRORS) as e:
            raise translate_error(e, self.url, "") from e
        except GARBAGE_ERRORS as e:  # Key-, Type- and AttributeError among them
            raise garbled(self.url, "Ollama's list of models", e) from e
        return [{**m, "model": name} for m, name in zip(models, found, strict=True)], fake

    async def list_models(self) -> list[str]:
        return list((await self._builds())[0])

    async def _builds(self) -> tuple[dict[str, ModelBuild], bool]:
        """Each served model's build, under its name (and without `:latest`, as Ollama takes it)."""
        models, fake = await self._listing()
        builds: dict[str, ModelBuild] = {}
        for m in models:
            raw = m.get("details")
            details: dict[str, Any] = raw if isinstance(raw, dict) else {}
            build = ModelBuild(
                digest=text_or_none(m.get("digest")),
                quantization=text_or_none(details.get("quantization_level")),
                parameter_size=text_or_none(details.get("parameter_size")),
            )
            builds[m["model"]] = build
            if m["model"].endswith(":latest"):
                builds[m["model"].removesuffix(":latest")] = build
        return builds, fake

    async def describe(self) -> ServerInfo:
        builds, fake = await self._builds()
        try:
            answer = await self._get_json("/api/version", 10.0)
            version = text_or_none(answer.get("version"))
        except (OllamaError, *TRANSPORT_ERRORS, ValueError, AttributeError):
            version = None  # the version is nice to have, never worth failing on
        return ServerInfo(software="ollama", version=version, simulated=fake, models=builds)

    async def aclose(self) -> None:
        await self._http.close()
        if self._client is not None:
            await self._client._client.aclose()


def _error_text(body: str) -> str:
    """Ollama's error body {"error": "..."} as its message (the SDK reads it so too)."""
    try:
        value = json.loads(body)
    except ValueError:
        return body
    return str(value.get("error", body)) if isinstance(value, dict) else body


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


def _tool_calls(message: Any) -> list[ToolCallOut]:
    return [
        ToolCallOut(name=c.function.name, arguments=dict(c.function.arguments or {}))
        for c in message.tool_calls or []
    ]
