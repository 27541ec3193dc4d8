"""OpenAI-compatible servers (vLLM, llama.cpp server, SGLang, LM Studio) through `openai`.

The reasoning trace comes as `reasoning` (new vLLM), `reasoning_content` (older vLLM, llama.cpp,
SGLang) or inline `<think>` in the content; all three are read. Structured output is asked for as
`response_format` (JSON schema), falling back to vLLM's `structured_outputs` / `guided_json` when
a server refuses the first form.
"""

from __future__ import annotations

import json
import time
from typing import Any

import openai

from crawdad.backends.base import (
    GARBAGE_ERRORS,
    ChatRequest,
    ChatResult,
    ToolCallOut,
    garbled,
    split_think,
    stop_reason_of,
)
from crawdad.backends.guard import StreamGuard
from crawdad.backends.transport import diagnose, failure_kind, openai_http_client
from crawdad.errors import BackendError, ModelNotFound, ServerUnavailable

# Tried in this order until a server takes one: the OpenAI form (vLLM, SGLang, LM Studio),
# llama-cpp-python's own form (it refuses the first with a 500), vLLM's native field.
STRUCTURED_FORMS = ("json_schema", "json_object", "structured_outputs")
_STRUCTURED_WORDS = ("response_format", "json_schema", "json_object", "structured", "schema")
REASONING_FIELDS = ("reasoning_content", "reasoning")


def translate_error(e: BaseException, url: str, model: str) -> BackendError:
    if isinstance(e, openai.APIResponseValidationError):
        return garbled(url, "what the OpenAI API sends", e, e.body)
    if isinstance(e, openai.APIStatusError):
        message = _message(e)
        if e.status_code == 404 or (e.status_code == 400 and "does not exist" in message):
            return ModelNotFound(
                f"the server at {url} does not serve model {model!r} ({message}); check the served "
                "model name (`--served-model-name`) or start it with that model",
                endpoint=url,
            )
        if e.status_code in (401, 403):
            return BackendError(
                f"{url} refused the API key ({e.status_code}); set api_key_env in the config",
                endpoint=url,
            )
        transient = e.status_code in (408, 409, 429) or e.status_code >= 500
        return BackendError(
            f"{url} answered {e.status_code}: {message}", transient=transient, endpoint=url
        )
    kind, cause = diagnose(e) or (None, f"{type(e).__name__}: {e}")
    if kind == "refused":
        return ServerUnavailable(
            f"cannot connect to the OpenAI-compatible server at {url}; start it (vLLM: `vllm serve "
            f"{model or 'MODEL'} --reasoning-parser deepseek_r1`; llama.cpp: `llama-server -m "
            "FILE.gguf`) or fix base_urls",
            endpoint=url,
        )
    if kind == "timeout" or (kind is None and isinstance(e, openai.APITimeoutError)):
        return BackendError(f"{url} did not answer in time", transient=True, endpoint=url)
    if kind == "broken" or isinstance(e, openai.APIConnectionError):
        return BackendError(f"connection to {url} failed: {cause}", transient=True, endpoint=url)
    return BackendError(f"{url}: {cause}", endpoint=url)


def _message(e: openai.APIStatusError) -> str:
    body = e.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])
        if isinstance(body.get("message"), str):
            return str(body["message"])
    return str(e.message)


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
                    "function": {"name": c["name"], "arguments": _as_text(c["arguments"])},
                }
                for i, c in enumerate(m["tool_calls"])
            ]
        if m["role"] == "tool":
            message["tool_call_id"] = m.get("tool_call_id") or "call_0"
        out.append(message)
    return out


def _as_text(arguments: Any) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments)


def _tool_calls(message: Any) -> list[ToolCallOut]:
    return [
        ToolCallOut(id=c.id, name=c.function.name, arguments=c.function.arguments or "")
        for c in getattr(message, "tool_calls", None) or []
    ]


def _completion(resp: Any) -> ChatResult:
    choice = resp.choices[0]
    text, trace = split_think(choice.message.content or "", _reasoning(choice.message))
    return ChatResult(
        tool_calls=_tool_calls(choice.message),
        text=text,
        thinking=trace,
        prompt_tokens=resp.usage.prompt_tokens if resp.usage else None,
        completion_tokens=resp.usage.completion_tokens if resp.usage else None,
        stop_reason=stop_reason_of(choice.finish_reason),
        raw_stop_reason=choice.finish_reason,
    )


def _reasoning(obj: Any) -> str:
    extra = getattr(obj, "model_extra", None) or {}
    for name in REASONING_FIELDS:
        value = getattr(obj, name, None) or extra.get(name)
        if value:
            return str(value)
    return ""


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
            http_client=openai_http_client(timeout),
        )
        self._structured_form = STRUCTURED_FORMS[0]

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
        except openai.APIStatusError as e:
            if request.json_schema is None or not self._next_structured_form(e):
                raise translate_error(e, self.url, request.model) from e
            return await self.chat(request, guard)
        except Exception as e:
            if isinstance(e, openai.APIError) or failure_kind(e):
                raise translate_error(e, self.url, request.model) from e
            if isinstance(e, GARBAGE_ERRORS):
                raise garbled(self.url, "a chat completion", e) from e
            raise
        result.seconds = time.monotonic() - start
        result.endpoint = self.url
        return result

    def _next_structured_form(self, e: openai.APIStatusError) -> bool:
        """After a refusal that names structured output, try the next form this server may know."""
        text = _message(e).lower()
        if e.status_code not in (400, 422, 500) or not any(k in text for k in _STRUCTURED_WORDS):
            return False
        i = STRUCTURED_FORMS.index(self._structured_form)
        if i + 1 >= len(STRUCTURED_FORMS):
            return False
        self._structured_form = STRUCTURED_FORMS[i + 1]
        return True

    async def _chat_once(self, req: ChatRequest, guard: StreamGuard | None) -> ChatResult:
        kwargs = self._kwargs(req)
        if not req.stream:
            resp = await self._client.chat.completions.create(**kwargs)
            try:  # the SDK does not check the body: a missing or odd field shows up here
                return _completion(resp)
            except GARBAGE_ERRORS as e:
                raise garbled(self.url, "a chat completion", e, resp) from e
        return await self._stream(kwargs, guard)

    async def _stream(self, kwargs: dict[str, Any], guard: StreamGuard | None) -> ChatResult:
        content: list[str] = []
        thinking: list[str] = []
        finish: str | None = None
        usage = None
        # Servers that send no usage in streams (llama.cpp) send one token per chunk.
        chunks = 0
        calls: dict[int, dict[str, Any]] = {}  # streamed tool calls by index: id, name, pieces
        stream = await self._client.chat.completions.create(
            **kwargs, stream=True, stream_options={"include_usage": True}
        )
        chunk: Any = None
        async with stream:
            try:
                async for chunk in stream:
                    usage = chunk.usage or usage
                    if not chunk.choices:
                        continue
                    choice = chunk.choices[0]
                    delta_text, delta_think = choice.delta.content or "", _reasoning(choice.delta)
                    chunks += bool(delta_text or delta_think)
                    for c in getattr(choice.delta, "tool_calls", None) or []:
                        call = calls.setdefault(c.index, {"id": None, "name": "", "args": []})
                        call["id"] = c.id or call["id"]
                        if c.function is not None:
                            # OpenAI and vLLM send the name once and the arguments in pieces;
                            # llama-cpp-python repeats the whole name (and the arguments so far)
                            # in every chunk.
                            call["name"] = c.function.name or call["name"]
                            piece, so_far = c.function.arguments or "", "".join(call["args"])
                            if so_far and piece.startswith(so_far):
                                call["args"] = [piece]
                            else:
                                call["args"].append(piece)
                    content.append(delta_text)
                    thinking.append(delta_think)
                    finish = choice.finish_reason or finish
                    if guard is not None and (verdict := guard.feed(delta_think + delta_text)):
                        text, trace = split_think("".join(content), "".join(thinking))
                        return ChatResult(
                            text=text,
                            thinking=trace,
                            completion_tokens=chunks,
                            stop_reason=verdict,
                            raw_stop_reason=verdict,
                        )
            except GARBAGE_ERRORS as e:  # a chunk the SDK could not decode, or of odd shape
                shape = not isinstance(e, ValueError)  # else the SDK could not decode it
                raise garbled(
                    self.url, "a chat completion chunk", e, chunk if shape else None
                ) from e
        kind = stream.response.headers.get("content-type", "")
        if chunk is None and "event-stream" not in kind:  # e.g. a proxy's HTML error page
            raise garbled(self.url, "an event stream", ValueError(), f"Content-Type {kind!r}")
        if finish is None:
            raise BackendError(
                f"the stream from {self.url} ended before the response was done",
                transient=True,
                endpoint=self.url,
            )
        text, trace = split_think("".join(content), "".join(thinking))
        return ChatResult(
            tool_calls=[
                ToolCallOut(id=c["id"], name=c["name"], arguments="".join(c["args"]))
                for _, c in sorted(calls.items())
            ],
            text=text,
            thinking=trace,
            prompt_tokens=usage.prompt_tokens if usage else None,
            completion_tokens=usage.completion_tokens if usage else chunks,
            stop_reason=stop_reason_of(finish),
            raw_stop_reason=finish,
        )

    async def list_models(self) -> list[str]:
        try:
            page = await self._client.models.list()
            return [str(m.id) for m in page.data]
        except Exception as e:
            if isinstance(e, openai.APIError) or failure_kind(e):
                raise translate_error(e, self.url, "") from e
            if isinstance(e, GARBAGE_ERRORS):
                raise garbled(self.url, "a list of models", e) from e
            raise

    async def version(self) -> str | None:
        root = self.url.removesuffix("/v1")
        try:
            resp = await self._client._client.get(f"{root}/version")  # vLLM has it; others may not
            return str(resp.json()["version"]) if resp.status_code == 200 else None
        except Exception:  # the version is nice to have, never worth failing on
            return None

    async def aclose(self) -> None:
        await self._client.close()
