"""What a bench measures of one phase: every request's start, end and generated tokens, noted by
a `Metered` backend wrapped around each server's client, and the figures of a time window.

A request's tokens are counted when its answer comes, but they were generated over its whole
life. A window's figures spread each request's tokens evenly over its life and count the part
that fell inside the window, so that a window shorter than a request (a 512-token answer at 20
tokens/s takes 25 s) still measures what the server generated in it. The phases drain their
requests after the window closes, so that every request that overlaps the window is counted.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from crawdad.backends.base import Backend, ChatRequest, ChatResult, ServerInfo
from crawdad.backends.guard import StreamGuard
from crawdad.backends.pool import ModelPool
from crawdad.run.server_series import ServerFigures


@dataclass(slots=True)
class Span:
    start: float
    end: float | None = None
    tokens: int = 0
    prompt_tokens: int = 0
    ok: bool = False
    error: str | None = None  # why it failed (the exception's type and message)
    cancelled: bool = False  # cut when its phase ended (neither answered nor failed)


@dataclass(frozen=True)
class Window:
    """A window's figures: generated tokens and answered requests inside it (by the share of
    each request's life inside it), and the mean number of requests in flight."""

    seconds: float
    tokens: float
    requests: float
    in_flight: float

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0

    @property
    def requests_per_second(self) -> float:
        return self.requests / self.seconds if self.seconds > 0 else 0.0


@dataclass
class RequestLog:
    """Every request of a phase, as the Metered backends saw them; with `record`, the requests
    themselves too (with their pool), in the order they were sent: the work a load generator
    can replay (`loadgen.replay_targets`)."""

    spans: list[Span] = field(default_factory=list)
    running: set[int] = field(default_factory=set)  # indexes of the spans in flight
    record: bool = False
    requests: list[tuple[ModelPool, ChatRequest]] = field(default_factory=list)

    def begin(self, pool: ModelPool | None = None, request: ChatRequest | None = None) -> int:
        self.spans.append(Span(time.monotonic()))
        self.running.add(len(self.spans) - 1)
        if self.record and pool is not None and request is not None:
            self.requests.append((pool, request))
        return len(self.spans) - 1

    @property
    def longest(self) -> float:
        """The longest life of a request of the phase so far, in seconds (0: none ended)."""
        return max((s.end - s.start for s in self.spans if s.end is not None), default=0.0)

    def end(
        self, index: int, result: ChatResult | None, error: BaseException | None = None
    ) -> None:
        span = self.spans[index]
        span.end = time.monotonic()
        if isinstance(error, asyncio.CancelledError):
            span.cancelled = True
        elif error is not None:
            span.error = f"{type(error).__name__}: {error}"[:300]
        if result is not None:
            span.ok = True
            span.tokens = result.completion_tokens or 0
            span.prompt_tokens = result.prompt_tokens or 0
        self.running.discard(index)

    @property
    def first_start(self) -> float | None:
        return self.spans[0].start if self.spans else None

    def in_flight_since(self, moment: float) -> int:
        """Requests still in flight that started before `moment`."""
        return sum(1 for i in self.running if self.spans[i].start < moment)

    @property
    def sent(self) -> int:
        return len(self.spans)

    @property
    def answered(self) -> int:
        return sum(s.ok for s in self.spans)

    @property
    def failed(self) -> int:
        return sum(1 for s in self.spans if s.end is not None and not s.ok and not s.cancelled)

    @property
    def tokens(self) -> int:
        return sum(s.tokens for s in self.spans)

    def errors(self, most: int = 5) -> list[str]:
        """The most common reasons requests failed, with their counts."""
        counts = Counter(s.error for s in self.spans if s.error)
        return [f"{n} x {e}" for e, n in counts.most_common(most)]

    @property
    def prompt_tokens(self) -> int:
        return sum(s.prompt_tokens for s in self.spans)

    def window(self, start: float, stop: float) -> Window:
        """The figures of [start, stop]. Requests still in flight count as running until now
        (their tokens are not known yet)."""
        seconds = max(0.0, stop - start)
        tokens = requests = busy = 0.0
        now = time.monotonic()
        for s in self.spans:
            end = s.end if s.end is not None else now
            overlap = min(end, stop) - max(s.start, start)
            if overlap <= 0:
                continue
            busy += overlap
            life = end - s.start
            share = overlap / life if life > 0 else 1.0
            if s.ok:
                tokens += s.tokens * share
                requests += share
        return Window(seconds, tokens, requests, busy / seconds if seconds > 0 else 0.0)


def work_window(spans: list[Span]) -> Window | None:
    """The figures of these requests from the first one's start to the last one's end (None:
    none ended)."""
    ended = [s for s in spans if s.end is not None]
    if not ended:
        return None
    log = RequestLog(spans=ended)
    return log.window(min(s.start for s in ended), max(s.end or 0.0 for s in ended))


@dataclass
class LoadResult:
    """One level of the sweep (first-turn prompts), or the replay of a crawdad phase's own
    requests (`work` "same-work"): P requests in flight for `window.seconds`."""

    parallel: int
    window: Window
    sent: int  # requests sent to the servers (every attempt, the failed ones too)
    answered: int
    failed: int
    tokens: int  # generated tokens of every answered request, the drained ones included
    prompt_tokens: int
    seconds: float  # first request to last answer, the drain included
    cpu_seconds: float  # the load generator's own CPU, drain included
    cut: int = 0  # requests still unanswered when the drain gave up (cancelled)
    errors: list[str] = field(default_factory=list)  # why requests failed, most common first
    work: str = "first-turn"  # "first-turn": the sweep's prompts; "same-work": a phase replayed
    longest: float = 0.0  # seconds, the longest request of the phase
    # seconds waited before the phase for the servers to have nothing running or waiting
    waited: float = 0.0
    # the servers' running and waiting requests when the phase started (url -> figures), where
    # their metrics tell
    at_start: dict[str, dict[str, float]] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        """Every request of the window was answered or failed within the drain: none was cut,
        so the window's figures count every token generated in it."""
        return self.cut == 0

    @property
    def cpu_ms_per_token(self) -> float | None:
        return 1000 * self.cpu_seconds / self.tokens if self.tokens else None


@dataclass
class CrawdadResult:
    """A short crawdad run at one concurrency."""

    concurrency: int
    window: Window
    sent: int
    answered: int
    failed: int
    tokens: int  # generated tokens of every answered request of the phase
    seconds: float  # first request to the end of the phase (the drain included)
    cpu_seconds: float  # crawdad's process over the same time
    debates: int  # debates finished (written to the bench's run folder)
    cut: int  # requests in flight when the run was stopped, cancelled (and not counted)
    finished_all: bool  # the questions ran out before the window closed
    folder: str
    errors: list[str] = field(default_factory=list)  # why requests failed, most common first
    # the servers' own metrics over the phase (crawdad.run.server_series.figures_of)
    servers: list[ServerFigures] = field(default_factory=list)
    waited: float = 0.0  # seconds waited before the phase for the servers to drain
    longest: float = 0.0  # seconds, the longest request of the phase
    at_start: dict[str, dict[str, float]] = field(default_factory=dict)  # as LoadResult's
    # the figures of this phase's requests sent in its window and answered, from the first's
    # start to the last one's end: the work its same-work ceiling replays
    work_window: Window | None = None
    # the load generator sending those requests, as many in flight (None: not run)
    same_work: LoadResult | None = None

    @property
    def cpu_ms_per_token(self) -> float | None:
        return 1000 * self.cpu_seconds / self.tokens if self.tokens else None

    @property
    def cores(self) -> float:
        """crawdad's CPU, in cores (one process runs on one core at most, bar the threads)."""
        return self.cpu_seconds / self.seconds if self.seconds > 0 else 0.0


class Metered:
    """A Backend that notes each request in a RequestLog and passes it on unchanged."""

    def __init__(self, inner: Backend, log: RequestLog, pool: ModelPool | None = None) -> None:
        self.inner = inner
        self.log = log
        self.pool = pool
        self.url = inner.url

    async def chat(self, request: ChatRequest, guard: StreamGuard | None = None) -> ChatResult:
        index = self.log.begin(self.pool, request)
        try:
            result = await self.inner.chat(request, guard)
        except BaseException as e:
            self.log.end(index, None, e)
            raise
        self.log.end(index, result)
        return result

    async def list_models(self) -> list[str]:
        return await self.inner.list_models()

    async def describe(self) -> ServerInfo:
        return await self.inner.describe()

    async def aclose(self) -> None:
        await self.inner.aclose()


def meter_pools(pools: Iterable[ModelPool], log: RequestLog) -> None:
    """Note every request of these pools in `log` (from now on: a pool metered before for
    another log is switched to this one)."""
    for pool in pools:
        for endpoint in pool.endpoints:
            if isinstance(endpoint.backend, Metered):
                endpoint.backend.log = log
            else:
                endpoint.backend = Metered(endpoint.backend, log, pool)
