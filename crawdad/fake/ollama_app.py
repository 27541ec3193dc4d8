"""Ollama's native API: /api/chat (NDJSON stream by default), /api/tags, /api/version, /api/show,
/api/ps, with Ollama's error bodies `{"error": "..."}`.

Thinking: new servers (>= 0.12.4) think by default and send the trace in `message.thinking`
(`thinking_style="field"`; `think: false` turns it off); from 0.9 to 0.12.3 the trace is split off
only when `think` is sent, and inline otherwise. Servers before 0.9 put `<think>...</think>` in the
content whatever `think` says (`"inline"`, or `"inline_no_open"` for templates that pre-fill the
opening tag).
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from datetime import UTC, datetime
from typing import Any, Literal

from aiohttp import web
from pydantic import Field, model_validator

from crawdad.fake.behaviour import FakeModel, FakeRequest, FaultKind
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


class OllamaSettings(CommonSettings):
    version: str = "0.12.6"
    # Default from the version: "inline" before 0.9 (no `think` parameter), else "field".
    thinking_style: Literal["field", "inline", "inline_no_open"] = "field"
    default_num_ctx: int = Field(default=4096, ge=1)  # used when a request does not set num_ctx

    @model_validator(mode="after")
    def _style_from_version(self) -> OllamaSettings:
        if "thinking_style" not in self.model_fields_set and self.version_tuple < (0, 9, 0):
            self.thinking_style = "inline"
        return self

    @property
    def version_tuple(self) -> tuple[int, ...]:
        return tuple(int(p) for p in re.findall(r"\d+", self.version)[:3])


class OllamaStyle:
    """Ollama's errors: a status code and `{"error": message}`."""

    def render(self, error: FakeHTTPError) -> web.Response:
        return web.json_response({"error": error.message}, status=error.status)

    def not_found(self, model: str) -> FakeHTTPError:
        return FakeHTTPError(404, f'model "{model}" not found, try pulling it first')

    def internal(self, message: str | None = None) -> FakeHTTPError:
        return FakeHTTPError(500, message or "llama runner process has terminated: exit status 2")

    def unavailable(self) -> FakeHTTPError:
        return self.busy()

    def busy(self) -> FakeHTTPError:
        return FakeHTTPError(
            503, "server busy, please try again.  maximum pending requests exceeded"
        )


def _calls(plan: Plan) -> list[dict[str, Any]]:
    """Ollama's shape (0.12): arguments always an object (its parser drops what is not)."""
    out = []
    for i, call in enumerate(plan.tool_calls or []):
        arguments = call.get("arguments")
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except (ValueError, RecursionError):  # not JSON, or deeper than Python reads
                arguments = {}
        out.append(
            {
                "id": f"call_{hashlib.sha256(json.dumps(call).encode()).hexdigest()[:8]}",
                "function": {
                    "index": i,
                    "name": call["name"],
                    "arguments": arguments if isinstance(arguments, dict) else {},
                },
            }
        )
    return out


def _now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


class OllamaRender:
    def __init__(self, model: str, stream: bool) -> None:
        self.content_type = "application/x-ndjson" if stream else "application/json"
        self.model = model
        self.created_at = _now()
        self._head = (
            f'{{"model":{json.dumps(model)},"created_at":"{self.created_at}",'
            '"message":{"role":"assistant","content":'
        )

    def start(self) -> bytes:
        return b""

    def chunk(self, channel: int, text: str) -> bytes:
        if channel == THINKING:
            return f'{self._head}"","thinking":{json.dumps(text)}}},"done":false}}\n'.encode()
        return f'{self._head}{json.dumps(text)}}},"done":false}}\n'.encode()

    def final(self, plan: Plan, timings: Timings) -> bytes:
        calls = b""
        if plan.tool_calls:  # Ollama sends the calls whole, in one chunk before the last
            message = {"role": "assistant", "content": "", "tool_calls": _calls(plan)}
            body = {"model": self.model, "created_at": _now(), "message": message, "done": False}
            calls = json.dumps(body).encode() + b"\n"
        return calls + self._done({"role": "assistant", "content": ""}, plan, timings) + b"\n"

    def whole(self, plan: Plan, timings: Timings) -> bytes:
        message: dict[str, Any] = {"role": "assistant", "content": plan.text}
        if plan.thinking:
            message["thinking"] = plan.thinking
        if plan.tool_calls:
            message["tool_calls"] = _calls(plan)
        return self._done(message, plan, timings)

    def error(self, message: str) -> bytes:
        return json.dumps({"error": message}).encode() + b"\n"

    def garbage(self, kind: FaultKind, stream: bool) -> bytes:
        """A body (or a line of the stream) that is not what Ollama sends."""
        if kind == "html":
            return HTML_PAGE
        if kind == "empty_json":
            body = b"{}"
        elif kind == "wrong_shape":  # `message` a string, not an object
            body = json.dumps({"model": self.model, "message": "oops", "done": "no"}).encode()
        else:
            body = GARBLED
        return body + b"\n" if stream else body

    def _done(self, message: dict[str, Any], plan: Plan, t: Timings) -> bytes:
        return json.dumps(
            {
                "model": self.model,
                "created_at": _now(),
                "message": message,
                "done_reason": plan.done_reason,
                "done": True,
                "total_duration": t.total_ns,
                "load_duration": t.load_ns,
                "prompt_eval_count": t.prompt_tokens,
                "prompt_eval_duration": t.prompt_ns,
                "eval_count": t.eval_tokens,
                "eval_duration": t.eval_ns,
            }
        ).encode()


def build_ollama_app(engine: Engine, settings: OllamaSettings) -> web.Application:
    style = OllamaStyle()
    app = web.Application(middlewares=[engine.middleware(style)], client_max_size=64 * 2**20)
    app.on_response_prepare.append(announce_fake)

    async def chat(request: web.Request) -> web.StreamResponse:
        arrived = time.monotonic()
        body = await engine.read_json(request)
        name = body.get("model")
        if not name:
            raise FakeHTTPError(400, "model is required")
        model = engine.resolve(name)
        if model is None:
            raise style.not_found(str(name))
        messages = body.get("messages") or []
        if not isinstance(messages, list):
            raise FakeHTTPError(400, "messages must be an array")
        if not messages:  # an empty chat loads (or with keep_alive 0 unloads) the model
            reason = "unload" if body.get("keep_alive") in (0, "0", "0s") else "load"
            return web.json_response(
                {
                    "model": name,
                    "created_at": _now(),
                    "message": {"role": "assistant", "content": ""},
                    "done_reason": reason,
                    "done": True,
                }
            )
        think = body.get("think")
        if think not in (None, False) and not model.thinks and settings.thinking_style == "field":
            raise FakeHTTPError(400, f'"{name}" does not support thinking')
        tools = body.get("tools") or None
        if tools and not model.supports_tools:
            raise FakeHTTPError(400, f"registry.ollama.ai/library/{name} does not support tools")
        options = body.get("options") or {}
        num_ctx = int(options.get("num_ctx") or settings.default_num_ctx)
        tokens_in = prompt_tokens(messages)
        truncated = tokens_in > num_ctx
        if truncated:  # real Ollama cuts the prompt from the front and says nothing
            engine.stats.truncated_prompts += 1
            tokens_in = num_ctx
        num_predict = options.get("num_predict")
        budget = _budget(num_predict, num_ctx, tokens_in)
        fmt = body.get("format")
        schema = fmt if isinstance(fmt, dict) else ({} if fmt == "json" else None)
        stream = body.get("stream", True) is not False
        fake = FakeRequest(
            api="ollama",
            model=str(name),
            messages=messages,
            think=think,
            schema=schema,
            max_tokens=budget,
            temperature=options.get("temperature"),
            top_p=options.get("top_p"),
            seed=options.get("seed"),
            extra={"options": options, "keep_alive": body.get("keep_alive")},
            tools=tools,
        )
        call = CallRecord(
            api="ollama",
            model=str(name),
            stream=stream,
            think=think,
            structured="format" if schema is not None else None,
            temperature=fake.temperature,
            top_p=fake.top_p,
            seed=fake.seed,
            max_tokens=num_predict,
            num_ctx=num_ctx,
            prompt_tokens=tokens_in,
            truncated=truncated,
        )
        engine.record(request, call)
        reply = await engine.reply(request, fake, model, call, style)
        plan = plan_reply(reply, _mode(settings, think), budget, settings.max_loop_tokens)
        job = Job(fake, reply, plan, call, stream, tokens_in, arrived)
        return await engine.generate(request, job, OllamaRender(str(name), stream), style)

    async def tags(request: web.Request) -> web.Response:
        return web.json_response({"models": [_model_entry(n, m) for n, m in engine.models.items()]})

    async def version(request: web.Request) -> web.Response:
        return web.json_response({"version": settings.version})

    async def show(request: web.Request) -> web.Response:
        body = await engine.read_json(request)
        name = body.get("model") or body.get("name")
        model = engine.resolve(name)
        if model is None:
            raise style.not_found(str(name))
        capabilities = ["completion", "thinking"] if model.thinks else ["completion"]
        if model.supports_tools:
            capabilities.append("tools")
        return web.json_response(
            {
                "modelfile": f"FROM {name}\n",
                "parameters": "temperature 0.6\ntop_p 0.95",
                "template": "{{ .Prompt }}",
                "details": _details(model),
                "model_info": {
                    "general.architecture": model.family,
                    f"{model.family}.context_length": model.context_length,
                },
                "capabilities": capabilities,
                "modified_at": "2025-06-01T12:00:00Z",
            }
        )

    async def ps(request: web.Request) -> web.Response:
        running = [
            {
                **_model_entry(n, engine.models[n]),
                "expires_at": "2099-01-01T00:00:00Z",
                "size_vram": _model_entry(n, engine.models[n])["size"],
                "context_length": engine.models[n].context_length,
            }
            for n in engine.scheduler.resident
            if n in engine.models
        ]
        return web.json_response({"models": running})

    async def root(request: web.Request) -> web.Response:
        return web.Response(text="Ollama is running")

    async def pull(request: web.Request) -> web.StreamResponse:
        """Ollama's pull, streamed as it does (NDJSON progress); a tag with "missing" in its
        name does not exist. The pulled tag is not served: the fake knows its models only."""
        body = await engine.read_json(request)
        name = str(body.get("model") or body.get("name"))
        if "missing" in name:
            return web.json_response(
                {"error": "pull model manifest: file does not exist"}, status=500
            )
        response = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
        await response.prepare(request)
        steps: list[dict[str, object]] = [{"status": "pulling manifest"}]
        steps += [
            {"status": "pulling 1a2b3c", "digest": "sha256:1a2b3c", "total": 1000, "completed": n}
            for n in (0, 500, 1000)
        ]
        steps += [{"status": "verifying sha256 digest"}, {"status": "success"}]
        for step in steps:
            await response.write(json.dumps(step).encode() + b"\n")
        await response.write_eof()
        return response

    app.router.add_post("/api/chat", chat)
    app.router.add_get("/api/tags", tags)
    app.router.add_get("/api/version", version)
    app.router.add_post("/api/show", show)
    app.router.add_get("/api/ps", ps)
    app.router.add_get("/", root)
    app.router.add_post("/api/pull", pull)
    return app


def _budget(num_predict: Any, num_ctx: int, tokens_in: int) -> int | None:
    if num_predict is None:
        return None
    n = int(num_predict)
    if n == -2:  # fill the context
        return max(0, num_ctx - tokens_in)
    return None if n < 0 else n


def _mode(settings: OllamaSettings, think: Any) -> ThinkingMode:
    if settings.thinking_style != "field":
        return settings.thinking_style
    if think is False:
        return "drop"
    if think is None and settings.version_tuple < (0, 12, 4):
        return "inline"  # before 0.12.4 the trace was split off only when `think` was sent
    return "field"


def _details(model: FakeModel) -> dict[str, Any]:
    return {
        "parent_model": "",
        "format": "gguf",
        "family": model.family,
        "families": [model.family],
        "parameter_size": model.parameter_size,
        "quantization_level": model.quantization_level,
    }


def _model_entry(name: str, model: FakeModel) -> dict[str, Any]:
    digest = hashlib.sha256(name.encode()).hexdigest()
    return {
        "name": name,
        "model": name,
        "modified_at": "2025-06-01T12:00:00Z",
        "size": 19_851_349_856,
        "digest": digest,
        "details": _details(model),
    }
