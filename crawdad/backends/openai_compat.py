"""OpenAI-compatible servers (vLLM, llama.cpp server, SGLang, LM Studio): chats, streamed or
not, sent and read straight off aiohttp (`crawdad.backends.streaming`; a whole answer decoded by
msgspec into the fields crawdad reads), the model list and version through `openai`. Through the
SDK a whole answer cost ~1.5 ms of CPU (httpx's request and response objects over aiohttp, the
SDK's pydantic models); straight, ~0.2 ms (benchmarks/README.md): the extractor's every request.

The reasoning trace comes as `reasoning` (new vLLM), `reasoning_content` (older vLLM, llama.cpp,
SGLang) or inline `<think>` in the content; all three are read. Structured output is asked for as
`response_format` (JSON schema), falling back to vLLM's `structured_outputs` / `guided_json` when
a server refuses the first form.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any
from urllib.parse import urlsplit

import msgspec
import openai

from crawdad.backends import server_keys
from crawdad.backends.base import (
    FAKE_HEADER,
    GARBAGE_ERRORS,
    ChatRequest,
    ChatResult,
    ModelBuild,
    ServerInfo,
    ToolCallOut,
    garbled,
    split_think,
    stop_reason_of,
    text_or_none,
)
from crawdad.backends.guard import StreamGuard
from crawdad.backends.serve_hints import vllm_serve
from crawdad.backends.server_metrics import ANSWER_LIMITS, json_within
from crawdad.backends.streaming import StreamConnections, StreamError, read_sse
from crawdad.backends.transport import (
    diagnose,
    failure_kind,
    nothing_answers,
    openai_http_client,
)
from crawdad.errors import BackendError, ModelNotFound, ServerUnavailable

# What /v1/models' `owned_by` says of the software serving it. llama-cpp-python writes "me".
SOFTWARE = {
    "vllm": "vllm",
    "sglang": "sglang",
    "llamacpp": "llama.cpp",
    "me": "llama-cpp-python",
}

# Tried in this order until a server takes one: the OpenAI form (vLLM, SGLang, LM Studio),
# llama-cpp-python's own form (it refuses the first with a 500), vLLM's native field.
STRUCTURED_FORMS = ("json_schema", "json_object", "structured_outputs")
_STRUCTURED_WORDS = ("response_format", "json_schema", "json_object", "structured", "schema")


def translate_error(e: BaseException, url: str, model: str) -> BackendError:
    if isinstance(e, openai.APIResponseValidationError):
        return garbled(url, "what the OpenAI API sends", e, e.body)
    if isinstance(e, openai.APIStatusError):
        return status_error(e.status_code, _message(e), url, model)
    if isinstance(e, StatusError):
        return status_error(e.status, e.message, url, model)
    kind, cause = diagnose(e) or (None, f"{type(e).__name__}: {e}")
    if kind == "refused":
        return ServerUnavailable(
            nothing_answers(
                url,
                f"vLLM: `{vllm_serve(model or 'MODEL', _port(url))}`; llama.cpp: `llama-server "
                "-m FILE.gguf`",
                where="base_urls",
            ),
            endpoint=url,
        )
    if kind == "timeout" or (kind is None and isinstance(e, openai.APITimeoutError)):
        return BackendError(f"{url} did not answer in time", transient=True, endpoint=url)
    if kind == "broken" or isinstance(e, openai.APIConnectionError):
        return BackendError(f"connection to {url} failed: {cause}", transient=True, endpoint=url)
    return BackendError(f"{url}: {cause}", endpoint=url)


def _port(url: str) -> str | None:
    return str(urlsplit(url).port) if urlsplit(url).port else None


def status_error(status: int, message: str, url: str, model: str) -> BackendError:
    if status == 404 or (status == 400 and "does not exist" in message):
        return ModelNotFound(
            f"the server at {url} does not serve model {model!r} ({message}); check the served "
            "model name (`--served-model-name`) or start it with that model",
            endpoint=url,
        )
    if status in (401, 403):
        return BackendError(
            f"{url} refused the API key ({status}); set api_key_env in the config (a server of "
            "`crawdad serve` or --keep-servers: set serving.keys_file to its keys.json)",
            endpoint=url,
        )
    transient = status in (408, 409, 429) or status >= 500
    return BackendError(f"{url} answered {status}: {message}", transient=transient, endpoint=url)


class StatusError(Exception):
    """An HTTP error status answering a streamed request (the SDK's APIStatusError, in short)."""

    def __init__(self, status: int, text: str) -> None:
        try:
            body: Any = msgspec.json.decode(text)
        except msgspec.DecodeError:
            body = text
        fallback = f"Error code: {status}" + (f" - {body}" if body else "")
        super().__init__(fallback)
        self.status = status
        self.message = _message_of(body, fallback)


def _message(e: openai.APIStatusError) -> str:
    return _message_of(e.body, str(e.message))


def _message_of(body: Any, fallback: str) -> str:
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])
        if isinstance(body.get("message"), str):
            return str(body["message"])
    return fallback


def _messages(req: ChatRequest) -> list[dict[str, Any]]:
    """The neutral conversation in OpenAI's form: call arguments as JSON text, tool results
    answering a call id."""
    if req.messages is None:
        return [{"role": "user", "content": req.prompt}]
    out: list[dict[str, Any]] = []
    for m in req.messages:
        message: dict[str, Any] = {"role": m["role"], "content": m.get("content") or ""}
        if m.get("tool_calls"):
            message["tool_calls"] = [
                {
                    "id": c.get("id") or f"call_{i}",
                    "type": "function",
                    "function": {"name": c["name"], "arguments": _astext_or_none(c["arguments"])},
                }
                for i, c in enumerate(m["tool_calls"])
            ]
        if m["role"] == "tool":
            message["tool_call_id"] = m.get("tool_call_id") or "call_0"
        out.append(message)
    return out


def _astext_or_none(arguments: Any) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments)


class _WholeMessage(msgspec.Struct, gc=False):
    content: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None
    tool_calls: list[Any] | None = None


class _WholeChoice(msgspec.Struct, gc=False):
    message: _WholeMessage
    finish_reason: str | None = None


class _Usage(msgspec.Struct, gc=False):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


class _Completion(msgspec.Struct, gc=False):
    """What crawdad reads of a chat completion; the rest is skipped, never built."""

    choices: list[_WholeChoice]
    usage: _Usage | None = None


_COMPLETION = msgspec.json.Decoder(_Completion)


def _whole(raw: bytes) -> ChatResult:
    """A chat completion's result from its body (msgspec errors are ValueErrors: garbage)."""
    resp = _COMPLETION.decode(raw)
    choice = resp.choices[0]
    message = choice.message
    text, trace = split_think(
        message.content or "", message.reasoning_content or message.reasoning or ""
    )
    calls = [
        ToolCallOut(
            id=c.get("id"),
            name=c["function"]["name"],
            arguments=c["function"].get("arguments") or "",
        )
        for c in message.tool_calls or []
    ]
    return ChatResult(
        tool_calls=calls,
        text=text,
        thinking=trace,
        prompt_tokens=resp.usage.prompt_tokens if resp.usage else None,
        completion_tokens=resp.usage.completion_tokens if resp.usage else None,
        stop_reason=stop_reason_of(choice.finish_reason),
        raw_stop_reason=choice.finish_reason,
    )


def _structured(form: str, schema: dict[str, Any]) -> dict[str, Any]:
    if form == "json_schema":
        return {
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "answer", "schema": schema, "strict": True},
            }
        }
    if form == "json_object":
        return {"response_format": {"type": "json_object", "schema": schema}}
    return {"extra_body": {"structured_outputs": {"json": schema}}}


class OpenAIBackend:
    def __init__(self, url: str, *, api_key: str | None = None, timeout: float = 1800.0) -> None:
        self.url = url.rstrip("/")
        self._client = openai.AsyncOpenAI(
            base_url=self.url,
            api_key=api_key or "not-needed",
            max_retries=0,  # crawdad retries itself, per request, on transient errors only
            timeout=timeout,
            http_client=openai_http_client(timeout, tls=not self.url.startswith("http://")),
        )
        self._structured_form = STRUCTURED_FORMS[0]
        self._timeout = timeout
        self._http = StreamConnections(url, self._timeout, self._timeout)  # streamed chats
        self._api_key = api_key
        self._headers = {
            "Authorization": f"Bearer {api_key or 'not-needed'}",
            "Accept": "text/event-stream",
        }
        self._whole_headers = {**self._headers, "Accept": "application/json"}

    def _auth(self) -> dict[str, str]:
        """The config's key, else the key of crawdad's own server there (a new one after each
        restart: looked up per request), else none."""
        if self._api_key:
            return {}
        return server_keys.headers_for(self.url)

    def _kwargs(self, req: ChatRequest) -> dict[str, Any]:
        kwargs: dict[str, Any] = dict(
            model=req.model,
            messages=_messages(req),
            temperature=req.temperature,
            top_p=req.top_p,
            max_tokens=req.max_tokens,
        )
        if req.tools is not None:
            kwargs["tools"] = req.tools
        if req.seed is not None:
            kwargs["seed"] = req.seed
        extra: dict[str, Any] = {}
        if not req.think:
            # Hybrid models (Qwen3) think unless their chat template is told not to; servers
            # whose template has no such switch ignore it.
            extra["chat_template_kwargs"] = {"enable_thinking": False}
        extra.update(req.options)
        if req.top_k is not None:
            extra["top_k"] = req.top_k
        if req.json_schema is not None:
            structured = _structured(self._structured_form, req.json_schema)
            extra.update(structured.pop("extra_body", {}))
            kwargs.update(structured)
        if extra:
            kwargs["extra_body"] = extra
        return kwargs

    async def chat(self, request: ChatRequest, guard: StreamGuard | None = None) -> ChatResult:
        start = time.monotonic()
        try:
            result = await self._chat_once(request, guard)
        except (openai.APIStatusError, StatusError) as e:
            status, message = (
                (e.status, e.message)
                if isinstance(e, StatusError)
                else (e.status_code, _message(e))
            )
            if request.json_schema is None or not self._next_structured_form(status, message):
                raise translate_error(e, self.url, request.model) from e
            return await self.chat(request, guard)
        except StreamError as e:  # as the SDK raised it: an APIError, not retried
            raise BackendError(f"{self.url}: APIError: {e.message}", endpoint=self.url) from e
        except Exception as e:
            if isinstance(e, openai.APIError) or failure_kind(e):
                raise translate_error(e, self.url, request.model) from e
            if isinstance(e, GARBAGE_ERRORS):
                raise garbled(self.url, "a chat completion", e) from e
            raise
        result.seconds = time.monotonic() - start
        result.endpoint = self.url
        return result

    def _next_structured_form(self, status: int, message: str) -> bool:
        """After a refusal that names structured output, try the next form this server may know."""
        text = message.lower()
        if status not in (400, 422, 500) or not any(k in text for k in _STRUCTURED_WORDS):
            return False
        i = STRUCTURED_FORMS.index(self._structured_form)
        if i + 1 >= len(STRUCTURED_FORMS):
            return False
        self._structured_form = STRUCTURED_FORMS[i + 1]
        return True

    async def _chat_once(self, req: ChatRequest, guard: StreamGuard | None) -> ChatResult:
        kwargs = self._kwargs(req)
        if not req.stream:
            return await self._complete(kwargs)
        return await self._stream(kwargs, guard)

    async def _complete(self, kwargs: dict[str, Any]) -> ChatResult:
        """A whole chat completion, not streamed."""
        body = {k: v for k, v in kwargs.items() if k != "extra_body"}
        body.update(kwargs.get("extra_body") or {})
        url = f"{self.url}/chat/completions"
        async with (
            asyncio.timeout(self._timeout),
            await self._http.post(
                url, json=body, headers={**self._whole_headers, **self._auth()}
            ) as resp,
        ):
            raw = await resp.read()
            if resp.status >= 400:
                raise StatusError(resp.status, raw.decode("utf-8", "replace"))
        try:
            return _whole(raw)
        except GARBAGE_ERRORS as e:
            raise garbled(self.url, "a chat completion", e, raw) from e

    async def _stream(self, kwargs: dict[str, Any], guard: StreamGuard | None) -> ChatResult:
        body = {k: v for k, v in kwargs.items() if k != "extra_body"}
        body.update(kwargs.get("extra_body") or {})
        body.update(stream=True, stream_options={"include_usage": True})
        url = f"{self.url}/chat/completions"
        async with (
            asyncio.timeout(self._timeout),
            await self._http.post(
                url, json=body, headers={**self._headers, **self._auth()}
            ) as resp,
        ):
            if resp.status >= 400:
                raise StatusError(resp.status, await resp.text(errors="replace"))
            return await read_sse(resp, self.url, guard)

    async def _models(self) -> list[Any]:
        try:
            page = await self._client.models.list(extra_headers=self._auth() or None)
            return list(page.data)
        except Exception as e:
            if isinstance(e, openai.APIError) or failure_kind(e):
                raise translate_error(e, self.url, "") from e
            if isinstance(e, GARBAGE_ERRORS):
                raise garbled(self.url, "a list of models", e) from e
            raise

    async def list_models(self) -> list[str]:
        return [str(m.id) for m in await self._models()]

    async def describe(self) -> ServerInfo:
        models = await self._models()
        owners = {str(getattr(m, "owned_by", "") or "") for m in models}
        builds = {
            str(m.id): ModelBuild(root=text_or_none(getattr(m, "root", None))) for m in models
        }
        software = next((SOFTWARE[o] for o in owners if o in SOFTWARE), None)
        # vLLM (and SGLang) tell their version at /version; llama-server its build at /props.
        answer, fake = await self._get_root("/version")
        version = text_or_none(answer.get("version"))
        if version is None:
            props, fake_props = await self._get_root("/props")
            fake = fake or fake_props
            if build := text_or_none(props.get("build_info")):
                software, version = "llama.cpp", build
        if software is None:
            software = next(iter(sorted(owners - {""})), None) or "openai-compatible"
        return ServerInfo(software=software, version=version, simulated=fake, models=builds)

    async def _get_root(self, path: str) -> tuple[dict[str, Any], bool]:
        """GET a path beside /v1 (the JSON object, or {} on any failure) and whether crawdad's
        fake server answered: nice to have, never worth failing on."""
        root = self.url.rstrip("/").removesuffix("/v1")
        limits = ANSWER_LIMITS
        try:  # within bounds: uncompressed (asked so; anything else refused), bytes, time, depth
            async with (
                asyncio.timeout(limits.seconds),
                self._client._client.stream(
                    "GET", f"{root}{path}", headers={"Accept-Encoding": "identity", **self._auth()}
                ) as resp,
            ):
                fake = FAKE_HEADER in resp.headers
                coding = resp.headers.get("Content-Encoding", "identity").strip().lower()
                if resp.status_code != 200 or coding not in ("", "identity"):
                    return {}, fake
                data = bytearray()
                async for chunk in resp.aiter_raw():
                    data += chunk
                    if len(data) > limits.max_bytes:
                        return {}, fake
            body = json_within(bytes(data), limits)
            return (body if isinstance(body, dict) else {}), fake
        except Exception:
            return {}, False

    async def aclose(self) -> None:
        await self._http.close()
        await self._client.close()
