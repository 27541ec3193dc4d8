"""An OpenAI-compatible server in the manner of vLLM (and llama.cpp's server).

POST /v1/chat/completions (JSON, or SSE `data: {...}` chunks ending with `data: [DONE]`),
GET /v1/models, /version, /health. Errors are vLLM's `{"error": {"message", "type", "param",
"code"}}` (old versions: the same fields flat, with `"object": "error"`); a missing or wrong API
key is 401 `{"error": "Unauthorized"}`.

Reasoning goes in `reasoning` (vLLM since late 2025), `reasoning_content` (older vLLM,
llama.cpp), both (the transition), inline `<think>` in the content (no reasoning parser), or
nowhere. Structured output comes as `response_format`, `structured_outputs: {"json": ...}` (new
vLLM) or `guided_json` (old vLLM, removed in 0.12); vLLM silently ignores request fields it does
not know, so by default a form the server lacks is ignored, not refused.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import Any, Literal

from aiohttp import web
from pydantic import Field

from crawdad.fake.behaviour import FakeRequest, FaultKind
from crawdad.fake.engine import Engine, announce_fake
from crawdad.fake.generation import THINKING, Plan, ThinkingMode, plan_reply, prompt_tokens
from crawdad.fake.protocol import (
    GARBLED,
    HTML_PAGE,
    CallRecord,
    CommonSettings,
    FakeHTTPError,
    Job,
    Timings,
)
from crawdad.fake.server_load import MetricsStyle, metrics_text, slots_json

ReasoningStyle = Literal[
    "reasoning", "reasoning_content", "both", "inline", "inline_no_open", "none"
]
# "json_object_schema": llama-cpp-python's `{"type": "json_object", "schema": ...}`.
StructuredForm = Literal[
    "response_format", "structured_outputs", "guided_json", "json_object_schema"
]
# llama-cpp-python's server: only its own form, and a 500 for response_format json_schema.
LLAMACPP_FORMS: tuple[StructuredForm, ...] = ("json_object_schema",)

NEW_VLLM_FORMS: tuple[StructuredForm, ...] = ("response_format", "structured_outputs")
_ERROR_TYPES = {400: "BadRequestError", 404: "NotFoundError", 500: "InternalServerError"}


class OpenAISettings(CommonSettings):
    version: str = "0.11.0"
    reasoning_style: ReasoningStyle = "reasoning"
    structured_forms: list[StructuredForm] = Field(default_factory=lambda: list(NEW_VLLM_FORMS))
    unsupported_structured: Literal["ignore", "error"] = "ignore"
    unsupported_status: int = 400  # llama-cpp-python answers 500 (a validation traceback)
    api_key: str | None = None
    max_model_len: int | None = None  # None: no context check
    # A completion budget beyond the context: "clamp" it to what is left (vLLM >= 0.10 or so),
    # or refuse the request with 400 (older vLLM).
    context_overflow: Literal["clamp", "error"] = "clamp"
    error_style: Literal["nested", "flat"] = "nested"
    # vLLM started with --enable-auto-tool-choice --tool-call-parser: `tools` with tool_choice
    # "auto" (the default) work; without, such a request is refused with 400.
    auto_tool_choice: bool = True
    # What the server tells of its load: vLLM's /metrics (its names since 0.9, or 0.8's
    # `gpu_*` ones), llama-server's /metrics and /slots, or nothing (llama-cpp-python's server).
    metrics: MetricsStyle = "vllm"
    # Seconds /health waits before it answers: llama-cpp-python's server answers it only between
    # generations, so a busy one answers late (here: always this late, the worst case).
    health_delay: float = Field(default=0.0, ge=0)


class OpenAIStyle:
    def __init__(self, error_style: str) -> None:
        self.error_style = error_style

    def render(self, error: FakeHTTPError) -> web.Response:
        info = {
            "message": error.message,
            "type": error.err_type or _ERROR_TYPES.get(error.status, "InternalServerError"),
            "param": error.param,
            "code": error.status,
        }
        body = {"error": info} if self.error_style == "nested" else {"object": "error", **info}
        return web.json_response(body, status=error.status)

    def not_found(self, model: str) -> FakeHTTPError:
        return FakeHTTPError(404, f"The model `{model}` does not exist.", "NotFoundError", "model")

    def internal(self, message: str | None = None) -> FakeHTTPError:
        return FakeHTTPError(
            500,
            message or "EngineCore encountered an issue. See stack trace for the root cause.",
            "InternalServerError",
        )

    def unavailable(self) -> FakeHTTPError:
        return FakeHTTPError(503, "The server is temporarily unavailable.", "ServiceUnavailable")

    def busy(self) -> FakeHTTPError:
        return FakeHTTPError(503, "Too many requests waiting in the queue.", "ServiceUnavailable")


class OpenAIRender:
    def __init__(self, model: str, style: ReasoningStyle, stream: bool, usage: bool) -> None:
        self.content_type = "text/event-stream" if stream else "application/json"
        self.model, self.style, self.usage = model, style, usage
        self.id = f"chatcmpl-{uuid.uuid4().hex}"
        self.created = int(time.time())
        self._head = (
            f'data: {{"id":"{self.id}","object":"chat.completion.chunk","created":{self.created},'
            f'"model":{json.dumps(model)},"choices":[{{"index":0,"delta":'
        )
        self._tail = ',"logprobs":null,"finish_reason":null}]}\n\n'

    def start(self) -> bytes:
        return f'{self._head}{{"role":"assistant","content":""}}{self._tail}'.encode()

    def chunk(self, channel: int, text: str) -> bytes:
        value = json.dumps(text)
        if channel != THINKING:
            return f'{self._head}{{"content":{value}}}{self._tail}'.encode()
        if self.style == "both":
            return f'{self._head}{{"reasoning":{value},"reasoning_content":{value}}}{self._tail}'.encode()
        return f'{self._head}{{"{self.style}":{value}}}{self._tail}'.encode()

    def final(self, plan: Plan, timings: Timings) -> bytes:
        calls = ""
        for i, call in enumerate(_calls(plan)):  # vLLM: id and name first, then the arguments
            head = {"index": i, "id": call["id"], "type": "function"}
            head["function"] = {"name": call["function"]["name"], "arguments": ""}
            calls += f'{self._head}{{"tool_calls":[{json.dumps(head)}]}}{self._tail}'
            text = call["function"]["arguments"]
            for piece in (text[: len(text) // 2], text[len(text) // 2 :]):
                delta = {"index": i, "function": {"arguments": piece}}
                calls += f'{self._head}{{"tool_calls":[{json.dumps(delta)}]}}{self._tail}'
        end = calls + (
            f'{self._head}{{"content":""}},"logprobs":null,'
            f'"finish_reason":"{_finish(plan)}","stop_reason":null}}]}}\n\n'
        )
        if self.usage:
            chunk = {
                "id": self.id,
                "object": "chat.completion.chunk",
                "created": self.created,
                "model": self.model,
                "choices": [],
                "usage": _usage(timings),
            }
            end += f"data: {json.dumps(chunk)}\n\n"
        return (end + "data: [DONE]\n\n").encode()

    def whole(self, plan: Plan, timings: Timings) -> bytes:
        message: dict[str, Any] = {
            "role": "assistant",
            # vLLM leaves the content null when the budget ran out inside the reasoning.
            "content": plan.text if plan.text or not plan.thinking else None,
            "tool_calls": _calls(plan),
        }
        if self.style in ("reasoning", "both"):
            message["reasoning"] = plan.thinking if plan.thinking else None
        if self.style in ("reasoning_content", "both"):
            message["reasoning_content"] = plan.thinking if plan.thinking else None
        body = {
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": _finish(plan),
                    "stop_reason": None,
                }
            ],
            "usage": _usage(timings),
            "prompt_logprobs": None,
        }
        return json.dumps(body).encode()

    def error(self, message: str) -> bytes:
        error = {"message": message, "type": "InternalServerError", "param": None, "code": 500}
        return f"data: {json.dumps({'error': error})}\n\ndata: [DONE]\n\n".encode()

    def garbage(self, kind: FaultKind, stream: bool) -> bytes:
        """A body (or an event of the stream) that is not what an OpenAI server sends."""
        if kind == "html":
            return HTML_PAGE
        if kind == "empty_json":
            body = b"{}"
        elif kind == "wrong_shape":  # `choices` not a list of choices
            shape = {"id": self.id, "object": "chat.completion", "choices": "oops"}
            body = json.dumps(shape).encode()
        else:
            body = GARBLED
        return b"data: " + body + b"\n\n" if stream else body


def _calls(plan: Plan) -> list[dict[str, Any]]:
    """vLLM's shape: an id, type "function", arguments as JSON text (passed on as the model
    wrote it, so a broken call stays broken)."""
    out = []
    for call in plan.tool_calls or []:
        arguments = call.get("arguments")
        text = arguments if isinstance(arguments, str) else json.dumps(arguments)
        out.append(
            {
                "id": f"chatcmpl-tool-{uuid.uuid4().hex[:16]}",
                "type": "function",
                "function": {"name": call["name"], "arguments": text},
            }
        )
    return out


def _finish(plan: Plan) -> str:
    return "tool_calls" if plan.tool_calls else plan.done_reason


def _usage(t: Timings) -> dict[str, Any]:
    return {
        "prompt_tokens": t.prompt_tokens,
        "total_tokens": t.prompt_tokens + t.eval_tokens,
        "completion_tokens": t.eval_tokens,
        "prompt_tokens_details": None,
    }


def build_openai_app(engine: Engine, settings: OpenAISettings) -> web.Application:
    style = OpenAIStyle(settings.error_style)
    app = web.Application(middlewares=[engine.middleware(style)], client_max_size=64 * 2**20)
    app.on_response_prepare.append(announce_fake)

    def check_key(request: web.Request) -> None:
        if settings.api_key is None:
            return
        if request.headers.get("Authorization") != f"Bearer {settings.api_key}":
            raise FakeHTTPError(401, "Unauthorized", body={"error": "Unauthorized"})

    async def chat(request: web.Request) -> web.StreamResponse:
        arrived = time.monotonic()
        check_key(request)
        body = await engine.read_json(request)
        name = body.get("model") or next(iter(engine.models), "")
        model = engine.resolve(name)
        if model is None:
            raise style.not_found(str(name))
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise FakeHTTPError(400, "messages: Field required", "BadRequestError", "messages")
        tools = body.get("tools") or None
        choice = body.get("tool_choice")
        if tools and not settings.auto_tool_choice and choice in (None, "auto"):
            raise FakeHTTPError(
                400,
                '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser '
                "to be set",
                "BadRequestError",
            )
        schema, form = _structured(body, settings, engine)
        tokens_in = prompt_tokens(messages)
        max_tokens = body.get("max_completion_tokens") or body.get("max_tokens")
        budget = _context_budget(settings, tokens_in, max_tokens)
        template_kwargs = body.get("chat_template_kwargs") or {}
        think = template_kwargs.get("enable_thinking")
        stream = body.get("stream") is True
        fake = FakeRequest(
            api="openai",
            model=str(name),
            messages=messages,
            think=think,
            schema=schema,
            schema_ignored=form is not None and schema is None,
            max_tokens=budget,
            temperature=body.get("temperature"),
            top_p=body.get("top_p"),
            seed=body.get("seed"),
            extra={"chat_template_kwargs": template_kwargs, "tool_choice": choice},
            tools=tools,
        )
        call = CallRecord(
            api="openai",
            model=str(name),
            stream=stream,
            think=think,
            structured=form if schema is not None else None,
            temperature=fake.temperature,
            top_p=fake.top_p,
            seed=fake.seed,
            max_tokens=max_tokens,
            num_ctx=settings.max_model_len,
            prompt_tokens=tokens_in,
        )
        engine.record(request, call)
        reply = await engine.reply(request, fake, model, call, style)
        plan = plan_reply(reply, _mode(settings, think), budget, settings.max_loop_tokens)
        usage = bool((body.get("stream_options") or {}).get("include_usage"))
        render = OpenAIRender(str(name), settings.reasoning_style, stream, usage)
        job = Job(fake, reply, plan, call, stream, tokens_in, arrived)
        return await engine.generate(request, job, render, style)

    async def models(request: web.Request) -> web.Response:
        check_key(request)
        created = int(time.time())
        data: list[dict[str, Any]] = [
            {
                "id": name,
                "object": "model",
                "created": created,
                "owned_by": "vllm",
                "root": name,
                "parent": None,
                "max_model_len": settings.max_model_len or model.context_length,
                "permission": [],
            }
            for name, model in engine.models.items()
        ]
        return web.json_response({"object": "list", "data": data})

    async def version(request: web.Request) -> web.Response:
        return web.json_response({"version": settings.version})

    async def health(request: web.Request) -> web.Response:
        if settings.health_delay:
            await asyncio.sleep(settings.health_delay)
        return web.Response()

    async def metrics(request: web.Request) -> web.Response:
        page = metrics_text(engine.load, list(engine.models), settings.metrics)
        return web.Response(body=page, content_type="text/plain", charset="utf-8")

    async def slots(request: web.Request) -> web.Response:
        n_ctx = settings.max_model_len or 4096
        return web.json_response(slots_json(engine.load, list(engine.models), n_ctx))

    if settings.metrics != "none":
        app.router.add_get("/metrics", metrics)
    if settings.metrics == "llamacpp":
        app.router.add_get("/slots", slots)
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/version", version)
    app.router.add_get("/health", health)
    return app


def _context_budget(settings: OpenAISettings, tokens_in: int, max_tokens: int | None) -> int | None:
    limit = settings.max_model_len
    if limit is None:
        return max_tokens
    if tokens_in > limit:
        raise FakeHTTPError(
            400,
            f"This model's maximum context length is {limit} tokens. However, your prompt "
            f"contains {tokens_in} input tokens, which exceeds this limit even without any "
            "output tokens. Please reduce the length of the input prompt.",
            "BadRequestError",
            "input_tokens",
        )
    room = limit - tokens_in
    if max_tokens is not None and max_tokens > room and settings.context_overflow == "error":
        raise FakeHTTPError(
            400,
            f"This model's maximum context length is {limit} tokens. However, you requested "
            f"{tokens_in + max_tokens} tokens ({tokens_in} in the messages, {max_tokens} in the "
            "completion). Please reduce the length of the messages or completion.",
            "BadRequestError",
        )
    return room if max_tokens is None else min(max_tokens, room)


def _structured(
    body: dict[str, Any], settings: OpenAISettings, engine: Engine
) -> tuple[dict[str, Any] | None, StructuredForm | None]:
    """The JSON schema the request asks for and the form it used; schema None if ignored."""
    asked: list[tuple[StructuredForm, dict[str, Any]]] = []
    response_format = body.get("response_format") or {}
    if response_format.get("type") == "json_schema":
        spec = response_format.get("json_schema") or {}
        asked.append(("response_format", spec.get("schema") or {}))
    elif response_format.get("type") == "json_object":
        if response_format.get("schema") is not None:
            asked.append(("json_object_schema", _as_schema(response_format["schema"])))
        else:
            asked.append(("response_format", {}))
    outputs = body.get("structured_outputs") or {}
    if outputs.get("json") is not None:
        asked.append(("structured_outputs", _as_schema(outputs["json"])))
    if body.get("guided_json") is not None:
        asked.append(("guided_json", _as_schema(body["guided_json"])))
    for form, schema in asked:
        if form in settings.structured_forms:
            return schema, form
    if not asked:
        return None, None
    form = asked[0][0]
    if settings.unsupported_structured == "error":
        raise FakeHTTPError(
            settings.unsupported_status,
            f"structured output through '{form}' is not supported (response_format)",
            "BadRequestError",
            form,
        )
    engine.stats.structured_ignored += 1
    return None, form


def _as_schema(value: Any) -> dict[str, Any]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return {}
    return value if isinstance(value, dict) else {}


def _mode(settings: OpenAISettings, think: Any) -> ThinkingMode:
    if think is False or settings.reasoning_style == "none":
        return "drop"
    if settings.reasoning_style in ("inline", "inline_no_open"):
        return settings.reasoning_style
    return "field"
