"""How long a fake request takes, and how many are served at once.

A request waits for a slot (at most `capacity` per model in flight, like OLLAMA_NUM_PARALLEL or
vLLM's batch), loads its model if it is not resident (`switch_seconds`), then takes
`base_seconds` plus `per_token_seconds` per token, slowed by `slowdown` for each other request in
flight. With every time at zero nothing sleeps at all, so the fakes stay fast for throughput runs.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field


class LatencyModel(BaseModel):
    """Timing and capacity of a fake server. All times are in seconds."""

    model_config = ConfigDict(extra="forbid")

    base_seconds: float = Field(default=0.0, ge=0)  # L: before the first token (prompt processing)
    per_token_seconds: float = Field(default=0.0, ge=0)  # per generated token
    per_prompt_token_seconds: float = Field(default=0.0, ge=0)
    capacity: int = Field(default=1, ge=1)  # P: requests in flight at once per model
    max_queue: int = Field(default=512, ge=0)  # waiting requests beyond this are refused with 503
    # Tokens the simulated KV cache holds (contexts of the running requests; /metrics);
    # None: 4,096 per slot.
    kv_cache_tokens: int | None = Field(default=None, ge=1)
    slowdown: float = Field(
        default=0.0, ge=0
    )  # extra time per token for each other request in flight
    switch_seconds: float = Field(default=0.0, ge=0)  # S: loading a model that is not resident
    resident_models: int | None = Field(default=None, ge=1)  # models that fit at once; None: all
    model_speed: dict[str, float] = Field(default_factory=dict)  # per-model time multiplier
    jitter: float = Field(default=0.0, ge=0, le=1)  # relative random spread of the times
    time_scale: float = Field(
        default=1.0, ge=0
    )  # multiplies every wait: 0.001 makes minutes seconds

    @property
    def instant(self) -> bool:
        """True when nothing ever sleeps."""
        return self.time_scale == 0 or not (
            self.base_seconds
            or self.per_token_seconds
            or self.per_prompt_token_seconds
            or self.switch_seconds
        )


class LatencyStats(BaseModel):
    """Counters of the scheduler. Read them after (or during) a run."""

    served: int = 0  # requests admitted to a slot
    in_flight: int = 0
    queued: int = 0
    max_concurrent: int = 0
    max_concurrent_by_model: dict[str, int] = Field(default_factory=dict)
    by_model: dict[str, int] = Field(default_factory=dict)
    model_loads: int = 0
    model_switches: int = 0  # loads that had to evict another model
    queue_waits: int = 0  # requests that had to wait for a slot
    queue_wait_seconds: float = 0.0
    max_queue_wait_seconds: float = 0.0
    rejected: int = 0  # refused because the queue was full
    busy_seconds: float = 0.0  # slot time held by requests (served x time in a slot)
    generated_tokens: int = 0  # tokens of the replies served (what the model generated)
    # prompt tokens processed: those of each prompt its prefix cache did not hold (server_load)
    prefilled_tokens: int = 0


class QueueFull(Exception):
    """More requests waiting than `max_queue`."""


@dataclass(slots=True)
class Slot:
    model: str
    load: bool  # this request loads the model
    speed: float
    rng: random.Random | None = None
    loaded: asyncio.Future[None] | None = None
    done: bool = False
    since: float = field(default_factory=time.monotonic)  # admitted into the slot
    # The model's own clock: where its work so far ends. Sleeping until it (not for a duration)
    # keeps the fake's event-loop lag out of the modelled times, as a GPU does not wait for
    # its HTTP server.
    clock: float = 0.0


@dataclass(slots=True)
class _Runtime:
    """State bound to one event loop; made anew when the server (re)starts."""

    active: dict[str, int] = field(default_factory=dict)
    total_active: int = 0
    resident: OrderedDict[str, None] = field(default_factory=OrderedDict)
    loading: dict[str, asyncio.Future[None]] = field(default_factory=dict)
    waiters: deque[tuple[str, asyncio.Future[tuple[bool, float]], float]] = field(
        default_factory=deque
    )


class Scheduler:
    """Admits requests into slots and paces them as the `LatencyModel` says."""

    def __init__(self, model: LatencyModel, stats: LatencyStats | None = None) -> None:
        self.model = model
        self.stats = stats or LatencyStats()
        self._rt = _Runtime()

    @property
    def instant(self) -> bool:
        return self.model.instant

    @property
    def resident(self) -> list[str]:
        return list(self._rt.resident)

    def active(self, model: str) -> int:
        """Requests of `model` in a slot now."""
        return self._rt.active.get(model, 0)

    def waiting(self, model: str) -> int:
        """Requests of `model` queued for a slot now."""
        return sum(1 for m, f, _ in self._rt.waiters if m == model and not f.done())

    def reset(self) -> None:
        """Forget in-flight state (not the counters): the server restarted."""
        self._rt = _Runtime()
        self.stats.in_flight = 0
        self.stats.queued = 0

    async def acquire(self, model: str, seed: str = "") -> Slot:
        rt = self._rt
        if not rt.waiters and self._can_admit(model):
            load, admitted = self._admit(model), time.monotonic()
        else:
            if len(rt.waiters) >= self.model.max_queue:
                self.stats.rejected += 1
                raise QueueFull(model)
            future: asyncio.Future[tuple[bool, float]] = asyncio.get_running_loop().create_future()
            queued_at = time.monotonic()
            rt.waiters.append((model, future, queued_at))
            self._pump()
            load, admitted = (
                future.result() if future.done() else await self._wait(model, future, queued_at)
            )
        slot = Slot(model, load, self.model.model_speed.get(model, 1.0), since=admitted)
        slot.clock = admitted
        if self.model.jitter:
            slot.rng = random.Random(f"{seed}|{self.stats.served}")
        if load and not self.instant:
            slot.loaded = asyncio.get_running_loop().create_future()
            rt.loading[model] = slot.loaded
        return slot

    async def _wait(
        self, model: str, future: asyncio.Future[tuple[bool, float]], queued_at: float
    ) -> tuple[bool, float]:
        try:
            admission = await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self._release_counts(model)  # admitted just as the client gave up
            self._pump()
            raise
        wait = admission[1] - queued_at
        self.stats.queue_waits += 1
        self.stats.queue_wait_seconds += wait
        self.stats.max_queue_wait_seconds = max(self.stats.max_queue_wait_seconds, wait)
        return admission

    def release(self, slot: Slot) -> None:
        if slot.done:
            return
        slot.done = True
        self.stats.busy_seconds += time.monotonic() - slot.since
        if slot.loaded is not None and not slot.loaded.done():
            slot.loaded.set_result(None)
        self._release_counts(slot.model)
        self._pump()

    async def prefill(self, slot: Slot, prompt_tokens: int) -> None:
        """Wait for the model to be loaded, then for the prompt to be processed."""
        if self.instant:
            return
        m = self.model
        if slot.loaded is not None:
            await asyncio.sleep(m.switch_seconds * m.time_scale)
            slot.loaded.set_result(None)
            slot.clock = time.monotonic()
        else:
            loading = self._rt.loading.get(slot.model)
            if loading is not None and not loading.done():
                await asyncio.shield(loading)
                slot.clock = time.monotonic()
        seconds = m.base_seconds + prompt_tokens * m.per_prompt_token_seconds
        await self._sleep(slot, seconds)

    async def pace(self, slot: Slot, tokens: int) -> None:
        """Wait as long as generating `tokens` takes now."""
        if not self.instant and tokens:
            await self._sleep(slot, tokens * self.model.per_token_seconds)

    async def _sleep(self, slot: Slot, seconds: float) -> None:
        if (delay := self._advance(slot, seconds)) > 0:
            await asyncio.sleep(delay)

    def advance(self, slot: Slot, tokens: int) -> float:
        """Move the model's clock on by `tokens` generated now; seconds until they are out (<= 0:
        out already, the server is behind). `pace` is this and a sleep."""
        if self.instant or not tokens:
            return 0.0
        return self._advance(slot, tokens * self.model.per_token_seconds)

    def _advance(self, slot: Slot, seconds: float) -> float:
        m = self.model
        factor = slot.speed * (1 + m.slowdown * max(0, self._rt.total_active - 1))
        if slot.rng is not None:
            factor *= 1 + m.jitter * (2 * slot.rng.random() - 1)
        duration = seconds * factor * m.time_scale
        if duration <= 0:
            return 0.0
        slot.clock += duration
        return slot.clock - time.monotonic()

    def _can_admit(self, model: str) -> bool:
        rt = self._rt
        if rt.active.get(model, 0) >= self.model.capacity:
            return False
        limit = self.model.resident_models
        if model in rt.resident or limit is None or len(rt.resident) < limit:
            return True
        return any(not rt.active.get(m) for m in rt.resident)

    def _admit(self, model: str) -> bool:
        rt, stats = self._rt, self.stats
        load = model not in rt.resident
        if load:
            limit = self.model.resident_models
            if limit is not None and len(rt.resident) >= limit:
                victim = next(m for m in rt.resident if not rt.active.get(m))
                del rt.resident[victim]
                rt.loading.pop(victim, None)
                stats.model_switches += 1
            rt.resident[model] = None
            stats.model_loads += 1
        else:
            rt.resident.move_to_end(model)
        rt.active[model] = rt.active.get(model, 0) + 1
        rt.total_active += 1
        stats.served += 1
        stats.in_flight = rt.total_active
        stats.by_model[model] = stats.by_model.get(model, 0) + 1
        stats.max_concurrent = max(stats.max_concurrent, rt.total_active)
        best = stats.max_concurrent_by_model.get(model, 0)
        stats.max_concurrent_by_model[model] = max(best, rt.active[model])
        return load

    def _release_counts(self, model: str) -> None:
        rt = self._rt
        rt.active[model] -= 1
        rt.total_active -= 1
        self.stats.in_flight = rt.total_active

    def _pump(self) -> None:
        """Admit waiting requests in order; a model load that cannot happen blocks the rest."""
        rt = self._rt
        kept: deque[tuple[str, asyncio.Future[tuple[bool, float]], float]] = deque()
        blocked = False
        while rt.waiters:
            item = rt.waiters.popleft()
            model, future, _ = item
            if future.done():
                continue
            if blocked or rt.active.get(model, 0) >= self.model.capacity:
                kept.append(item)
            elif self._can_admit(model):
                future.set_result((self._admit(model), time.monotonic()))
            else:
                blocked = True
                kept.append(item)
        rt.waiters = kept
        self.stats.queued = len(kept)
