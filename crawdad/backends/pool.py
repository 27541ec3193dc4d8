"""A model served by one or more endpoints: least-busy routing, caps, health, retries.

Each endpoint has a cap on requests in flight. A 503 (a full queue) halves the endpoint's cap and
each success earns it back slowly, so a busy server slows crawdad down instead of failing the
run. An endpoint that cannot be reached is set aside for a while and tried again later.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_exponential_jitter

from crawdad.backends.base import Backend, ChatRequest, ChatResult
from crawdad.backends.guard import StreamGuard
from crawdad.config import ModelSpec, RetryConfig
from crawdad.errors import BackendError, ServerUnavailable
from crawdad.schedule import ModelGate


@dataclass
class Endpoint:
    backend: Backend
    max_cap: float  # the configured cap (inf: none)
    cap: float = math.inf
    in_flight: int = 0
    served: int = 0
    completion_tokens: int = 0
    failures: int = 0
    down_until: float = 0.0
    _down_streak: int = 0

    @property
    def url(self) -> str:
        return self.backend.url

    def healthy(self, now: float) -> bool:
        return now >= self.down_until

    def has_room(self) -> bool:
        return self.in_flight < self.cap


@dataclass
class CallStats:
    attempts: int = 0
    errors: list[str] = field(default_factory=list)


def is_transient(e: BaseException) -> bool:
    return isinstance(e, BackendError) and e.transient


class ModelPool:
    """Requests for one model, spread over its endpoints."""

    def __init__(
        self,
        spec: ModelSpec,
        make_backend: Callable[[str], Backend],
        retry: RetryConfig,
        gate: ModelGate | None = None,
        down_seconds: float = 5.0,
    ) -> None:
        self.spec = spec
        cap = float(spec.max_in_flight) if spec.max_in_flight else math.inf
        self.endpoints = [
            Endpoint(make_backend(url), max_cap=cap, cap=cap) for url in spec.base_urls
        ]
        self.retry = retry
        self.gate = gate
        self.down_seconds = down_seconds
        self._changed = asyncio.Condition()

    @property
    def in_flight(self) -> int:
        return sum(e.in_flight for e in self.endpoints)

    def _pick(self) -> Endpoint | None:
        now = time.monotonic()
        ready = [e for e in self.endpoints if e.healthy(now) and e.has_room()]
        return (
            min(
                ready,
                key=lambda e: (
                    e.in_flight / max(e.cap, 1e-9) if e.cap != math.inf else e.in_flight,
                    e.served,
                ),
            )
            if ready
            else None
        )

    async def _wait_for_room(self) -> Endpoint:
        async with self._changed:
            while (endpoint := self._pick()) is None:
                now = time.monotonic()
                wake = min(
                    (e.down_until for e in self.endpoints if not e.healthy(now)), default=None
                )
                timeout = max(0.01, wake - now) if wake is not None else None
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), timeout)
            endpoint.in_flight += 1
            return endpoint

    async def _release(self, endpoint: Endpoint) -> None:
        endpoint.in_flight -= 1
        async with self._changed:
            self._changed.notify_all()

    @contextlib.asynccontextmanager
    async def _endpoint(self) -> AsyncIterator[Endpoint]:
        endpoint = await self._wait_for_room()
        try:
            yield endpoint
        finally:
            await self._release(endpoint)

    def _on_error(self, endpoint: Endpoint, e: BackendError) -> None:
        endpoint.failures += 1
        if isinstance(e, ServerUnavailable):
            endpoint._down_streak += 1
            endpoint.down_until = time.monotonic() + min(
                60.0, self.down_seconds * 2 ** (endpoint._down_streak - 1)
            )
        elif "503" in str(e) or "429" in str(e):
            endpoint.cap = max(1.0, min(endpoint.cap, endpoint.in_flight) / 2)

    def _on_success(self, endpoint: Endpoint, result: ChatResult) -> None:
        endpoint.served += 1
        endpoint.completion_tokens += result.completion_tokens or 0
        endpoint._down_streak = 0
        if endpoint.cap < endpoint.max_cap:
            endpoint.cap = min(endpoint.max_cap, endpoint.cap + 1.0 / max(1.0, endpoint.cap))
            if endpoint.cap > 4096:
                endpoint.cap = endpoint.max_cap

    async def _once(
        self, request: ChatRequest, guard_factory: Callable[[], StreamGuard | None]
    ) -> ChatResult:
        gate = self.gate.turn(request.model) if self.gate else contextlib.nullcontext()
        async with gate, self._endpoint() as endpoint:
            try:
                result = await asyncio.wait_for(
                    endpoint.backend.chat(request, guard_factory()), request.timeout
                )
            except TimeoutError:
                err = BackendError(
                    f"{endpoint.url} gave no complete answer within {request.timeout:.0f} s",
                    transient=True,
                    endpoint=endpoint.url,
                )
                self._on_error(endpoint, err)
                raise err from None
            except BackendError as e:
                self._on_error(endpoint, e)
                raise
            self._on_success(endpoint, result)
            return result

    async def chat(
        self,
        request: ChatRequest,
        guard_factory: Callable[[], StreamGuard | None] = lambda: None,
        stats: CallStats | None = None,
    ) -> ChatResult:
        """Send with retries on transient errors (capped exponential backoff with jitter)."""
        stats = stats if stats is not None else CallStats()
        retrying = AsyncRetrying(
            stop=stop_after_attempt(self.retry.attempts),
            wait=wait_exponential_jitter(
                multiplier=self.retry.initial_wait,
                max=self.retry.max_wait,
                jitter=self.retry.initial_wait,
            ),
            retry=retry_if_exception(is_transient),
            reraise=True,
        )
        async for attempt in retrying:
            with attempt:
                stats.attempts += 1
                try:
                    return await self._once(request, guard_factory)
                except BackendError as e:
                    stats.errors.append(str(e))
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    async def aclose(self) -> None:
        for endpoint in self.endpoints:
            await endpoint.backend.aclose()
