"""What a fake model answers: the reply type, the request it sees, and the scripted model.

A behaviour turns a `FakeRequest` into a `FakeReply`; the servers turn the reply into the wire
format, cut it at the token budget and pace it. Seeded debaters live in `profile.py`, the fake
extractor in `extractor.py`.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

FaultKind = Literal[
    "http_500",
    "http_503",
    "reset",
    "hang",
    "cut",
    "stream_error",
    "not_found",
    # 200 with a body that is not the API's (see faults.GARBAGE_FAULTS)
    "garbled",
    "empty_json",
    "html",
    "wrong_shape",
]
Api = Literal["ollama", "openai"]


class FakeReply(BaseModel):
    """One scripted or generated response of a fake model."""

    model_config = ConfigDict(extra="forbid")

    thinking: str = ""
    text: str = ""
    # What the server reports when the reply is not cut by the token budget.
    done_reason: Literal["stop", "length"] = "stop"
    # Repeated after `thinking` until the token budget runs out: a looping reasoning model.
    repeat: str | None = None
    fault: FaultKind | None = None
    # Seconds the whole generation takes, instead of what the latency model says.
    delay: float | None = Field(default=None, ge=0)
    # Native tool calls: {"name": ..., "arguments": object, or JSON text (possibly broken)}.
    tool_calls: list[dict[str, Any]] | None = None


@dataclass
class FakeRequest:
    """What the fake model is asked, whichever API it came through."""

    api: Api
    model: str
    messages: list[dict[str, Any]]
    think: bool | str | None = None
    # JSON schema of a structured-output request the server honours ({} for plain JSON mode).
    schema: dict[str, Any] | None = None
    # Structured output was asked for in a form this server ignores (old or new vLLM).
    schema_ignored: bool = False
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    tools: list[dict[str, Any]] | None = None  # function specs of a tool-calling request

    @property
    def structured(self) -> bool:
        return self.schema is not None

    @property
    def wants_thinking(self) -> bool:
        return self.think is not False and self.think != "false"

    @cached_property
    def prompt(self) -> str:
        """All message contents joined by blank lines, as a model would read them."""
        return "\n\n".join(_content_text(m.get("content")) for m in self.messages)

    @cached_property
    def digest(self) -> str:
        """sha256 of the messages: the same messages give the same seeded reply."""
        raw = json.dumps(self.messages, sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(raw.encode()).hexdigest()

    def last_user_text(self) -> str:
        for message in reversed(self.messages):
            if message.get("role") == "user":
                return _content_text(message.get("content"))
        return self.prompt


def seeded_rng(*parts: object) -> random.Random:
    """A RNG seeded by a hash of `parts`: the same parts always draw the same numbers."""
    digest = hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI content parts
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


class FakeModel:
    """Base of the fake behaviours: `reply()` plus what /api/tags and /api/show tell about it."""

    thinks: bool = True  # False: a `think: true` request is refused like Ollama does
    supports_tools: bool = True  # False: a request with `tools` is refused like Ollama does
    family: str = "qwen3"
    parameter_size: str = "32.8B"
    quantization_level: str = "Q4_K_M"
    context_length: int = 40960

    def reply(self, request: FakeRequest) -> FakeReply:
        raise NotImplementedError


class ScriptExhausted(RuntimeError):
    """A scripted model was asked for more replies than were enqueued (served as HTTP 500)."""


class ScriptedModel(FakeModel):
    """Answers from a FIFO of replies, one per request, for tests that need exact replies."""

    def __init__(self, replies: Iterable[FakeReply | str] = (), *, thinks: bool = True) -> None:
        self._queue: deque[FakeReply] = deque()
        self.thinks = thinks
        self.seen: list[FakeRequest] = []
        self.enqueue(replies)

    def enqueue(self, replies: Iterable[FakeReply | str]) -> ScriptedModel:
        for reply in replies:
            self._queue.append(FakeReply(text=reply) if isinstance(reply, str) else reply)
        return self

    @property
    def remaining(self) -> int:
        return len(self._queue)

    def reply(self, request: FakeRequest) -> FakeReply:
        self.seen.append(request)
        if not self._queue:
            raise ScriptExhausted(
                f"fake script for model {request.model!r} is exhausted: "
                f"request {len(self.seen)} came but only {len(self.seen) - 1} replies were enqueued"
            )
        return self._queue.popleft()


class FunctionModel(FakeModel):
    """Wraps a plain function `request -> FakeReply | str`."""

    def __init__(self, function: Callable[[FakeRequest], FakeReply | str]) -> None:
        self._function = function

    def reply(self, request: FakeRequest) -> FakeReply:
        reply = self._function(request)
        return FakeReply(text=reply) if isinstance(reply, str) else reply


Behaviour = FakeModel | Callable[[FakeRequest], FakeReply | str]


def as_models(models: Mapping[str, Behaviour]) -> dict[str, FakeModel]:
    return {name: b if isinstance(b, FakeModel) else FunctionModel(b) for name, b in models.items()}
