"""A model served by one or more endpoints: least-busy routing, caps, health, retries.

Each endpoint has a cap on requests in flight (`max_in_flight`, none by default). A 503 or 429
(a full queue) halves the endpoint's cap, at most once per round trip, and each success earns it
back slowly (AIMD), so a busy server slows crawdad down instead of failing the run. Requests
that find no room wait in crawdad, not in the server's queue: runs (experiment variants) take
turns, and within a run the debate furthest behind goes first (`crawdad.backends.schedule.DebateProgress`),
first come first served among equals.

An endpoint that cannot be reached is set aside for a while (`retry.down_wait`, 5 s, doubling up to 60 s). When it
is due again it gets one request at a time until one succeeds, as long as another endpoint is
serving; with no other endpoint, the waiting requests all try it (and retry as usual).

An endpoint whose server crawdad restarts (`hold`, then `release`: crawdad/run/served.py) takes
no request until it is back; a request that fails because its server went down while held, or
was restarted since it was sent, is sent again without using up an attempt.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import math
import random
import re
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from crawdad.backends.base import Backend, ChatRequest, ChatResult
from crawdad.backends.guard import StreamGuard
from crawdad.backends.schedule import CURRENT_DEBATE, ModelGate
from crawdad.config import ModelSpec, RetryConfig
from crawdad.errors import BackendError, ServerUnavailable

# "... answered 503: ..." (both backends word HTTP errors so); the URL may hold "503" too.
_OVERLOAD = re.compile(r"\banswered (429|503)\b")
_RAISE_TO_MAX = 4096.0  # a cap earned back this high is no cap at all
MAX_CONGESTION_RETRIES = 32  # per request, on top of RetryConfig.attempts


MAX_RESTART_RETRIES = 16  # per request: resends after its server was restarted under it


class _Restarted(Exception):
    """A request failed because crawdad was restarting its server."""

    def __init__(self, error: BackendError) -> None:
        super().__init__(str(error))
        self.error = error


class _Congestion(Exception):
    """A 503 / 429 that came while other requests were in flight on the same endpoint."""

    def __init__(self, error: BackendError) -> None:
        super().__init__(str(error))
        self.error = error


@dataclass
class Endpoint:
    backend: Backend
    max_cap: float  # the configured cap (inf: none)
    cap: float = math.inf  # the current cap: max_cap, or less after a 503
    in_flight: int = 0
    peak_in_flight: int = 0
    served: int = 0
    completion_tokens: int = 0
    failures: int = 0
    overloads: int = 0  # 503 / 429 answers
    down_until: float = 0.0
    probing: bool = False  # set aside before: on trial until a request succeeds
    cuts: int = 0  # times the cap was halved (a 503 to a request sent before a cut is ignored)
    unreachable_since: float | None = None  # first failure to connect since it last answered
    last_error: str = ""
    active: set[StreamGuard] = field(default_factory=set)  # requests in flight, by their guard
    held: bool = False  # its server is being restarted: no request until it is back
    supervised: bool = False  # crawdad runs its server: one that cannot be reached is restarted
    restarts: int = 0  # times its server was restarted (a request sent before one is not blamed)
    last_answer: float = 0.0  # when a request here was last answered whole (monotonic; 0: never)
    _down_streak: int = 0

    @property
    def url(self) -> str:
        return self.backend.url

    def healthy(self, now: float) -> bool:
        return not self.held and now >= self.down_until

    def has_room(self) -> bool:
        return self.in_flight < self.cap

    def unreachable_for(self, now: float) -> float:
        """Seconds since it could first not be reached, with no answer since (0: reachable)."""
        return 0.0 if self.unreachable_since is None else now - self.unreachable_since

    def silent_for(self, now: float) -> float:
        """Seconds that every request in flight here has gone without a chunk or an answer."""
        if not self.active:
            return 0.0
        return now - max(g.last_progress for g in self.active)

    def last_progress(self) -> float:
        """When its server last showed it works: a chunk of a request in flight, or a whole
        answer (monotonic; 0.0: never). The supervisor's freeze rule reads it."""
        chunks = max((g.last_chunk for g in self.active), default=0.0)
        return max(self.last_answer, chunks)

    def stalled(self, now: float, after: float) -> tuple[int, float]:
        """(requests in flight, the longest wait) when none of them has had a chunk or an answer
        for `after` seconds, else (0, 0): requests queued behind ones that stream are not
        stalled, the server is busy."""
        if not self.active or self.silent_for(now) < after:
            return 0, 0.0
        return len(self.active), now - min(g.last_progress for g in self.active)

    @property
    def limited(self) -> bool:
        """The cap is below the configured one (the server said it is full)."""
        return self.cap < self.max_cap


@dataclass
class CallStats:
    attempts: int = 0
    errors: list[str] = field(default_factory=list)


def is_transient(e: BaseException) -> bool:
    return isinstance(e, BackendError) and e.transient


def is_overload(e: BaseException) -> bool:
    return isinstance(e, BackendError) and bool(_OVERLOAD.search(str(e)))


def backoff(retry: RetryConfig, failures: int) -> float:
    """Seconds to wait after the `failures`-th failed attempt: capped exponential, with jitter."""
    if retry.initial_wait <= 0:
        return 0.0
    wait = retry.initial_wait * 2.0 ** min(failures - 1, 60) + random.uniform(0, retry.initial_wait)
    return min(wait, retry.max_wait)


class ModelPool:
    """Requests for one model, spread over its endpoints."""

    def __init__(
        self,
        spec: ModelSpec,
        make_backend: Callable[[str], Backend],
        retry: RetryConfig,
        gate: ModelGate | None = None,
    ) -> None:
        self.spec = spec
        cap = float(spec.max_in_flight) if spec.max_in_flight else math.inf
        self.endpoints = [
            Endpoint(make_backend(url), max_cap=cap, cap=cap) for url in spec.base_urls
        ]
        self.retry = retry
        self.gate = gate
        # Models on the same servers share a gate group; others do not wait for each other.
        self.server_key = " ".join(sorted(spec.base_urls))
        # Requests waiting for room, per run: heaps of (requests their debate has made, arrival,
        # future); `_turns` holds the runs with requests waiting, the next one to be served first.
        self._waiters: dict[int, list[tuple[int, int, asyncio.Future[Endpoint]]]] = {}
        self._turns: deque[int] = deque()
        self._arrivals = itertools.count()
        self._timer: asyncio.TimerHandle | None = None

    @property
    def in_flight(self) -> int:
        return sum(e.in_flight for e in self.endpoints)

    @property
    def waiting(self) -> int:
        """Requests waiting in crawdad for room on an endpoint."""
        return sum(not f.done() for heap in self._waiters.values() for _, _, f in heap)

    # --- choosing an endpoint ------------------------------------------------------------------

    def _pick(self) -> Endpoint | None:
        """The least busy endpoint with room, relative to its cap; None if none has room."""
        if len(self.endpoints) == 1:  # the common case, kept cheap
            e = self.endpoints[0]
            if (
                e.in_flight < e.cap
                and not e.held
                and (not e.down_until or e.healthy(time.monotonic()))
            ):
                return e
            return None
        now = time.monotonic()
        healthy = [e for e in self.endpoints if e.healthy(now)]
        # A recovering endpoint gets one request at a time while another one serves normally.
        serving = any(not e.probing for e in healthy)
        best: Endpoint | None = None
        best_key: tuple[float, int] = (math.inf, 0)
        for e in healthy:
            if not e.has_room() or (e.probing and serving and e.in_flight):
                continue
            load = e.in_flight / e.cap if e.cap != math.inf else float(e.in_flight)
            key = (load, e.served)
            if best is None or key < best_key:
                best, best_key = e, key
        return best

    async def _acquire(self, rank: int = 0, run: int = 0) -> Endpoint:
        if not self._turns and (endpoint := self._pick()) is not None:
            self._take(endpoint)
            return endpoint
        future: asyncio.Future[Endpoint] = asyncio.get_running_loop().create_future()
        if run not in self._waiters:
            self._waiters[run] = []
            self._turns.append(run)
        heapq.heappush(self._waiters[run], (rank, next(self._arrivals), future))
        self._dispatch()
        try:
            return await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():  # handed an endpoint as it was cancelled
                self._release(future.result())
            raise

    def _take(self, endpoint: Endpoint) -> None:
        endpoint.in_flight += 1
        endpoint.peak_in_flight = max(endpoint.peak_in_flight, endpoint.in_flight)

    def _release(self, endpoint: Endpoint) -> None:
        endpoint.in_flight -= 1
        if self._turns:
            self._dispatch()

    def _dispatch(self) -> None:
        """Hand free room to waiting requests: each run in turn, and in a run the debate
        furthest behind first."""
        while self._turns:
            run = self._turns[0]
            heap = self._waiters[run]
            while heap and heap[0][2].done():  # cancelled while waiting
                heapq.heappop(heap)
            if not heap:
                self._turns.popleft()
                del self._waiters[run]
                continue
            endpoint = self._pick()
            if endpoint is None:
                break
            future = heapq.heappop(heap)[2]
            self._turns.rotate(-1)  # the next run's turn
            self._take(endpoint)
            future.set_result(endpoint)
        if self._turns:
            self._wake_when_due()

    def _wake_when_due(self) -> None:
        """Endpoints set aside come back by the clock, not by a release: set a timer for that."""
        now = time.monotonic()
        # A held endpoint comes back by `release`, not by the clock.
        due = [e.down_until for e in self.endpoints if not e.held and not e.healthy(now)]
        if not due:
            return
        when = min(due)
        loop = asyncio.get_running_loop()
        if self._timer is not None:
            if not self._timer.cancelled() and self._timer.when() <= loop.time() + (when - now):
                return
            self._timer.cancel()
        self._timer = loop.call_later(max(0.0, when - now) + 0.001, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._dispatch()

    # --- health and caps -----------------------------------------------------------------------

    def _on_error(self, endpoint: Endpoint, e: BackendError, cuts_at_send: int) -> None:
        endpoint.failures += 1
        endpoint.last_error = str(e)
        if isinstance(e, ServerUnavailable):
            if endpoint.unreachable_since is None:
                endpoint.unreachable_since = time.monotonic()
            self._set_aside(endpoint)
        elif not e.transient:  # it answered (an HTTP error): it can be reached
            endpoint.unreachable_since = None
        elif is_overload(e):
            endpoint.overloads += 1
            if endpoint.cuts == cuts_at_send:  # one cut per round trip, not one per rejection
                endpoint.cuts += 1
                endpoint.cap = max(1.0, min(endpoint.cap, endpoint.in_flight) / 2)

    def _set_aside(self, endpoint: Endpoint) -> None:
        now = time.monotonic()
        if not endpoint.healthy(now):
            return  # already set aside by a request sent at the same time
        endpoint._down_streak += 1
        endpoint.probing = True
        endpoint.down_until = now + min(
            60.0, self.retry.down_wait * 2 ** min(endpoint._down_streak - 1, 16)
        )

    def _on_success(self, endpoint: Endpoint, result: ChatResult) -> None:
        endpoint.served += 1
        endpoint.last_answer = time.monotonic()
        endpoint.completion_tokens += result.completion_tokens or 0
        endpoint.unreachable_since = None
        endpoint._down_streak = 0
        endpoint.probing = False
        if endpoint.cap < endpoint.max_cap:
            endpoint.cap = min(endpoint.max_cap, endpoint.cap + 1.0 / max(1.0, endpoint.cap))
            if endpoint.cap > _RAISE_TO_MAX:
                endpoint.cap = endpoint.max_cap

    # --- sending -------------------------------------------------------------------------------

    async def _send(
        self, request: ChatRequest, guard_factory: Callable[[], StreamGuard | None]
    ) -> ChatResult:
        debate = CURRENT_DEBATE.get()
        endpoint = await (self._acquire(debate.steps, debate.run) if debate else self._acquire())
        if debate is not None:
            debate.steps += 1
        cuts, restarts = endpoint.cuts, endpoint.restarts
        # Always a guard: its clock of the last chunk shows requests that stall.
        guard = guard_factory() or StreamGuard()
        guard.last_progress = time.monotonic()
        endpoint.active.add(guard)
        try:
            async with asyncio.timeout(request.timeout):  # no extra task, unlike wait_for
                result = await endpoint.backend.chat(request, guard)
        except TimeoutError:
            err = BackendError(
                f"{endpoint.url} gave no complete answer within {request.timeout:.0f} s",
                transient=True,
                endpoint=endpoint.url,
            )
            self._on_error(endpoint, err, cuts)
            raise err from None
        except BackendError as e:
            if e.transient and (endpoint.held or endpoint.restarts != restarts):
                raise _Restarted(e) from e  # not the request's fault: its server was restarted
            crowded = endpoint.in_flight > 1  # others in flight too: a lower cap is the answer
            self._on_error(endpoint, e, cuts)
            if endpoint.supervised and isinstance(e, ServerUnavailable):
                # set aside, and the supervisor restarts it (or stops the run): not the
                # request's fault either
                raise _Restarted(e) from e
            if crowded and is_overload(e):
                raise _Congestion(e) from e
            raise
        else:
            self._on_success(endpoint, result)
        finally:
            endpoint.active.discard(guard)
            self._release(endpoint)
        return result

    async def _once(
        self, request: ChatRequest, guard_factory: Callable[[], StreamGuard | None]
    ) -> ChatResult:
        if self.gate is None:
            return await self._send(request, guard_factory)
        async with self.gate.turn(request.model, self.server_key):
            return await self._send(request, guard_factory)

    async def chat(
        self,
        request: ChatRequest,
        guard_factory: Callable[[], StreamGuard | None] = lambda: None,
        stats: CallStats | None = None,
    ) -> ChatResult:
        """Send with retries on transient errors (capped exponential backoff with jitter).

        A 503 / 429 that comes while other requests are in flight on the endpoint is congestion,
        which the lowered cap already answers: it is resent at once (when there is room) and
        does not use up an attempt, up to `MAX_CONGESTION_RETRIES` times.
        """
        stats = stats if stats is not None else CallStats()
        failures = congested = restarted = 0
        while True:
            stats.attempts += 1
            try:
                return await self._once(request, guard_factory)
            except _Restarted as r:
                stats.errors.append(str(r.error))
                restarted += 1
                if restarted <= MAX_RESTART_RETRIES:
                    continue  # it waits in _acquire until the server is back
                raise r.error from None
            except _Congestion as c:
                stats.errors.append(str(c.error))
                congested += 1
                if congested <= MAX_CONGESTION_RETRIES:
                    continue
                failures += 1
                if failures >= self.retry.attempts:
                    raise c.error from None
            except BackendError as e:
                stats.errors.append(str(e))
                failures += 1
                if not e.transient or failures >= self.retry.attempts:
                    raise
            if wait := backoff(self.retry, failures):
                await asyncio.sleep(wait)

    # --- servers crawdad restarts (crawdad/run/served.py) ---------------------------------------

    def hold(self, url: str) -> None:
        """The server at `url` is being restarted: send it nothing until `release`."""
        for e in self.endpoints:
            if e.url == url.rstrip("/"):
                e.held = True
                e.restarts += 1
                e.unreachable_since = None  # down on purpose: not a server the run lost

    def release(self, url: str) -> None:
        """The server at `url` is back: the requests waiting for it go."""
        for e in self.endpoints:
            if e.url == url.rstrip("/"):
                e.held = False
                e.down_until = 0.0
                e.probing = False
                e._down_streak = 0
                e.unreachable_since = None
        if self._turns:
            self._dispatch()

    def supervise(self, url: str) -> None:
        """crawdad runs the server at `url`: one it cannot reach costs a request no attempt."""
        for e in self.endpoints:
            if e.url == url.rstrip("/"):
                e.supervised = True

    async def aclose(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for endpoint in self.endpoints:
            with contextlib.suppress(Exception):
                await endpoint.backend.aclose()
