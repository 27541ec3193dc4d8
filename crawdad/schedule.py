"""Order of work when one GPU holds one model at a time.

In "grouped" mode a request waits until its model is the active one. The active model changes
only when it has nothing in flight and nothing waiting (or after a long phase, so that no model
starves), and then to the model with the most requests waiting. Debates still follow the protocol
exactly: only the order in which ready turns reach the server changes.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator


class ModelGate:
    def __init__(self, max_phase: int = 4096) -> None:
        self.active: str | None = None
        self.waiting: Counter[str] = Counter()
        self.in_flight = 0
        self.switches = 0
        self.max_phase = max_phase  # requests admitted in one phase while others wait
        self._phase_count = 0
        self._changed = asyncio.Condition()

    def _may_enter(self, model: str) -> bool:
        if self.active is None:
            return True
        if model != self.active:
            return False
        others_waiting = sum(n for m, n in self.waiting.items() if m != model) > 0
        return not (others_waiting and self._phase_count >= self.max_phase)

    def _maybe_switch(self) -> None:
        if self.in_flight or not self.waiting:
            return
        if (
            self.active is not None
            and self.waiting.get(self.active)
            and self._phase_count < self.max_phase
        ):
            return
        candidates = [m for m in self.waiting if m != self.active] or list(self.waiting)
        nxt = max(candidates, key=lambda m: self.waiting[m])
        if nxt != self.active:
            if self.active is not None:
                self.switches += 1
            self.active = nxt
            self._phase_count = 0

    @contextlib.asynccontextmanager
    async def turn(self, model: str) -> AsyncIterator[None]:
        async with self._changed:
            self.waiting[model] += 1
            try:
                self._maybe_switch()
                while not self._may_enter(model):
                    await self._changed.wait()
                    self._maybe_switch()
            finally:
                self.waiting[model] -= 1
                if not self.waiting[model]:
                    del self.waiting[model]
            if self.active is None:
                self.active = model
            self.in_flight += 1
            self._phase_count += 1
        try:
            yield
        finally:
            async with self._changed:
                self.in_flight -= 1
                self._maybe_switch()
                self._changed.notify_all()
