"""What the engine and the two API modules share: settings, counters, call records, errors,
and the shapes of an API's error style and of a response renderer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field

from crawdad.fake.behaviour import FakeReply, FakeRequest, FaultKind
from crawdad.fake.generation import Plan
from crawdad.fake.latency import LatencyStats


class CommonSettings(BaseModel):
    """Settings both fake APIs have; `OllamaSettings` and `OpenAISettings` add their own."""

    model_config = ConfigDict(extra="forbid")

    version: str = "0.0.0"
    # "token": one token a chunk, each paced by the latency model, as vLLM, Ollama and llama.cpp
    # stream (the benchmarks' default); "coarse": chunks of at least `chunk_tokens` tokens,
    # at most about `max_chunks` a channel (fewer, bigger writes: fast tests).
    chunking: Literal["coarse", "token"] = "coarse"
    chunk_tokens: int = Field(default=8, ge=1)  # fewest tokens per streamed chunk
    max_chunks: int = Field(default=32, ge=1)  # about the most chunks per channel of one reply
    min_chunk_seconds: float = Field(default=0.005, ge=0)  # paced streams: fewest seconds per chunk
    # Where a looping reply stops when the request sets no token budget.
    max_loop_tokens: int = Field(default=16384, ge=1)
    max_recorded_requests: int = Field(default=10_000, ge=0)
    # As llama-server does: the connection of a streamed reply is closed once the reply is done,
    # though the reply announced keep-alive. A client that sends its next request on that pooled
    # connection gets no byte of an answer ("Server disconnected"): the request never reached
    # the model. Counted in `ServerStats.stale_requests`.
    close_after_stream: bool = False
    # What happens to a request whose client goes away before its answer: a stream is always
    # aborted (the next write fails, the slot is freed, as vLLM and llama.cpp do); a request
    # that is not streamed is generated to its end when this is set, holding its slot and
    # showing in /metrics as running (llama.cpp's server notices no disconnect until it writes
    # the answer), or aborted at once when it is not (Ollama).
    finish_unstreamed: bool = False


class ServerStats(BaseModel):
    """Counters of a fake server (the scheduler's are in `latency`)."""

    requests: int = 0  # HTTP requests of any kind but reads of its metrics
    metrics_requests: int = 0  # GET /metrics, /slots, /api/ps
    connections: int = 0  # distinct client connections (keep-alive reuses one)
    # Requests sent on a connection closed after a streamed reply (close_after_stream): dropped.
    stale_requests: int = 0
    by_route: dict[str, int] = Field(default_factory=dict)
    statuses: dict[int, int] = Field(default_factory=dict)  # of generation requests
    faults: dict[str, int] = Field(default_factory=dict)
    truncated_prompts: int = 0  # prompts longer than num_ctx, silently cut (Ollama)
    structured_ignored: int = 0  # structured output asked in a form the server ignores
    disconnects: int = 0  # clients that went away mid-response
    hangs_released: int = 0  # hanging requests ended because the server stopped
    latency: LatencyStats = Field(default_factory=LatencyStats)


@dataclass(slots=True)
class CallRecord:
    """What one generation request asked for and got, for tests to assert on."""

    api: str
    model: str
    stream: bool
    think: bool | str | None
    structured: str | None  # which structured-output form was honoured
    temperature: float | None
    top_p: float | None
    seed: int | None
    max_tokens: int | None  # num_predict / max_tokens / max_completion_tokens
    num_ctx: int | None
    prompt_tokens: int
    truncated: bool = False
    fault: FaultKind | None = None
    status: int = 200
    done_reason: str | None = None
    eval_count: int = 0
    disconnected: bool = False


CALL_KEY: web.RequestKey[CallRecord] = web.RequestKey("crawdad_fake_call", CallRecord)


class FakeHTTPError(Exception):
    """An error response; the API style renders it, unless `body` gives the exact body."""

    def __init__(
        self,
        status: int,
        message: str,
        err_type: str = "",
        param: str | None = None,
        body: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.err_type = err_type
        self.param = param
        self.body = body


class ApiStyle(Protocol):
    """The error vocabulary of one API."""

    def render(self, error: FakeHTTPError) -> web.Response: ...
    def not_found(self, model: str) -> FakeHTTPError: ...
    def internal(self, message: str | None = None) -> FakeHTTPError: ...
    def unavailable(self) -> FakeHTTPError: ...
    def busy(self) -> FakeHTTPError: ...


HTML_PAGE = (
    b"<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n"
    b"<center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>nginx</center>\r\n"
    b"</body>\r\n</html>\r\n"
)
GARBLED = b'\x1f\x8b\x08\x00{"mo\xffdel":\xfe\x00 garbled'


@dataclass(slots=True)
class Timings:
    total_ns: int
    load_ns: int
    prompt_ns: int
    eval_ns: int
    prompt_tokens: int
    eval_tokens: int


class Renderer(Protocol):
    """The wire format of one response."""

    content_type: str

    def start(self) -> bytes: ...
    def chunk(self, channel: int, text: str) -> bytes: ...
    def final(self, plan: Plan, timings: Timings) -> bytes: ...
    def whole(self, plan: Plan, timings: Timings) -> bytes: ...
    def error(self, message: str) -> bytes: ...
    def garbage(self, kind: FaultKind, stream: bool) -> bytes: ...


@dataclass(slots=True)
class Job:
    request: FakeRequest
    reply: FakeReply
    plan: Plan
    call: CallRecord
    stream: bool
    prompt_tokens: int
    arrived: float
    cached_tokens: int = 0  # of the prompt, found in the prefix cache: not processed again
