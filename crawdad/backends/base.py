"""The one protocol every backend speaks: a chat request in, a ChatResult out."""

from __future__ import annotations

import json
import re
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator

from crawdad.backends.guard import StreamGuard
from crawdad.errors import GarbledReply
from crawdad.records import Count, ModelBuild, Seconds, StopReason


class ToolCallOut(BaseModel):
    """A tool call the model made, as its server sent it."""

    id: str | None = None
    name: str
    arguments: str | dict[str, Any]  # OpenAI servers send JSON text, Ollama an object


class ChatRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str
    prompt: str  # sent as one user message: the debate history lives inside the prompt
    # A conversation with tool calls: the whole of it, the prompt's user message first, in
    # crawdad's neutral form (each backend writes its own): {"role": "user" | "assistant" |
    # "tool", "content", "tool_calls": [{"id", "name", "arguments"}], "tool_call_id", "name"}.
    # None: the prompt alone, as before tools existed.
    messages: list[dict[str, Any]] | None = None
    tools: list[dict[str, Any]] | None = None  # function specs, as OpenAI and Ollama take them
    temperature: float
    top_p: float
    top_k: int | None = None
    max_tokens: int
    num_ctx: int | None = None  # Ollama only
    seed: int | None = None
    think: bool = False
    json_schema: dict[str, Any] | None = None  # structured output (the extractor)
    keep_alive: str | None = None
    stream: bool = True
    timeout: float = 1800.0
    options: dict[str, Any] = Field(default_factory=dict)


class ChatResult(BaseModel):
    text: str = ""
    thinking: str = ""
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    seconds: float = 0.0
    server_seconds: float | None = None
    stop_reason: StopReason = "stop"
    raw_stop_reason: str | None = None
    endpoint: str = ""
    shared: bool = (
        False  # answered from an experiment's response store (crawdad/run/response_store.py)
    )
    tool_calls: list[ToolCallOut] = Field(default_factory=list)  # native tool calls

    @field_validator("prompt_tokens", "completion_tokens", mode="before")
    @classmethod
    def _count_or_unknown(cls, value: Any) -> int | None:
        """A server's token count that is no count (negative, huge, not a number) is unknown:
        the record's checks would refuse it, and a run never fails over a server's figure."""
        return _valid(_COUNT, value)

    @field_validator("server_seconds", mode="before")
    @classmethod
    def _seconds_or_unknown(cls, value: Any) -> float | None:
        return _valid(_SECONDS, value)


_COUNT: TypeAdapter[int] = TypeAdapter(Count)
_SECONDS: TypeAdapter[float] = TypeAdapter(Seconds)


def _valid(adapter: TypeAdapter[Any], value: Any) -> Any:
    if value is None:
        return None
    try:
        return adapter.validate_python(value)
    except ValidationError:
        return None


# crawdad's fake servers put this header on every response, so that a run against
# `crawdad fake-server` is marked simulated like the demo's.
FAKE_HEADER = "X-Crawdad-Fake"


class ServerInfo(BaseModel):
    """What a server says of itself: its software, version, whether it is crawdad's fake, and
    each served model's build."""

    software: str | None = None
    version: str | None = None
    simulated: bool = False
    models: dict[str, ModelBuild] = Field(default_factory=dict)


def text_or_none(value: Any) -> str | None:
    """A field a server may leave out or empty, as text (None when it is absent)."""
    return str(value) if value not in (None, "") else None


class Backend(Protocol):
    """One server (one base URL) serving one or more models."""

    url: str

    async def chat(self, request: ChatRequest, guard: StreamGuard | None = None) -> ChatResult: ...

    async def list_models(self) -> list[str]: ...

    async def describe(self) -> ServerInfo: ...

    async def aclose(self) -> None: ...


_THINK = re.compile(r"<think>(.*?)(?:</think>|$)", re.DOTALL)


def split_think(content: str, thinking: str = "") -> tuple[str, str]:
    """Move inline <think>...</think> (closed or not, as older servers send it) into the trace.

    A lone `</think>` with no opening tag (some chat templates put `<think>` in the prompt) marks
    everything before it as thinking.
    """
    if "<think>" in content:
        traces = [m.group(1).strip() for m in _THINK.finditer(content)]
        content = _THINK.sub("", content)
        thinking = "\n".join(t for t in [thinking.strip(), *traces] if t)
    elif "</think>" in content:
        before, _, content = content.partition("</think>")
        thinking = "\n".join(t for t in [thinking.strip(), before.strip()] if t)
    return content.strip(), thinking.strip()


def stop_reason_of(raw: str | None) -> StopReason:
    return "length" if raw == "length" else "stop"


# What the client libraries raise on a 200 whose body is not what the API sends: JSON and UTF-8
# decoding errors and pydantic's ValidationError (all ValueErrors), and the Attribute-, Type-,
# Index- and KeyErrors of reading fields that are missing or of the wrong type, and the
# RecursionError of JSON nested deeper than the decoder goes (a model's tool call, say).
GARBAGE_ERRORS: tuple[type[Exception], ...] = (
    ValueError,
    KeyError,
    AttributeError,
    TypeError,
    IndexError,
    RecursionError,
)


def garbled(url: str, expected: str, e: BaseException, body: object = None) -> GarbledReply:
    """A transient error naming the server, what was expected and the start of what came."""
    return GarbledReply(
        f"{url} answered 200 with a body that is not {expected}: {_excerpt(e, body)}",
        endpoint=url,
    )


def _excerpt(e: BaseException, body: object) -> str:
    """The first 80 characters of the body, or the best the error tells of it."""
    if isinstance(body, bytes):
        text = body.decode("utf-8", "replace")
    elif isinstance(body, str):
        text = body
    elif body is not None and hasattr(body, "to_json"):  # an openai model built without checks
        text = body.to_json(indent=None, warnings=False)
    elif isinstance(e, json.JSONDecodeError):
        text = e.doc or "(empty)"
    elif isinstance(e, UnicodeDecodeError):
        text = e.object.decode("utf-8", "replace")
    elif isinstance(e, ValidationError) and e.errors():
        err = e.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "body"
        text = f"{e.title}.{where}: {err['msg']}, got {err.get('input')!r}"
    else:
        text = f"{type(e).__name__}: {e}"
    return " ".join(text.split())[:80]
