"""Watching a streamed response: stop it when it loops or runs past its time budget.

A looping reasoning model repeats a span of text over and over until the token budget runs out
(the paper saw one run for 40 minutes). Repetition makes text compress far better than any real
reasoning does, so the detector compares the compressed size of the recent tail with its length.
"""

from __future__ import annotations

import time
import zlib
from dataclasses import dataclass, field
from typing import Literal

Verdict = Literal["loop", "timeout"] | None


def compression_ratio(text: str) -> float:
    raw = text.encode("utf-8", "ignore")
    # Level 1: a third of the cost of the default, and the same verdicts.
    return len(zlib.compress(raw, 1)) / max(1, len(raw))


@dataclass
class LoopDetector:
    """Flags a text whose recent `window` characters compress below `threshold`.

    Ordinary reasoning (even with repeated formulas and numbers) compresses to about 0.3-0.5 of
    its size; a span repeated again and again falls under 0.1. The check runs every `every` new
    characters and never before `min_chars`, so it costs little on a long stream.
    """

    min_chars: int = 2000
    window: int = 6000
    threshold: float = 0.12
    every: int = 2000  # about 500 tokens: a loop runs for thousands
    _buffer: list[str] = field(default_factory=list)
    _size: int = 0
    _next_check: int = 0

    def feed(self, delta: str) -> bool:
        if not delta:
            return False
        self._buffer.append(delta)
        self._size += len(delta)
        if self._size < max(self.min_chars, self._next_check):
            return False
        self._next_check = self._size + self.every
        tail = "".join(self._buffer)[-self.window :]
        self._buffer = [tail]
        return compression_ratio(tail) < self.threshold


@dataclass(eq=False)  # hashed by identity: the pool keeps the ones in flight in a set
class StreamGuard:
    """Fed every streamed delta; says when to stop, and why."""

    loop: LoopDetector | None = None
    budget_seconds: float | None = None
    started: float = field(default_factory=time.monotonic)
    verdict: Verdict = None
    # When the last chunk came (the start, before any): the pool reports requests that stall.
    last_progress: float = field(default_factory=time.monotonic)
    last_chunk: float = 0.0  # when the last chunk came (0: none yet): the server's sign of life

    def feed(self, delta: str) -> Verdict:
        self.last_progress = self.last_chunk = time.monotonic()
        if self.verdict:
            return self.verdict
        if self.loop is not None and self.loop.feed(delta):
            self.verdict = "loop"
        elif (
            self.budget_seconds is not None
            and time.monotonic() - self.started > self.budget_seconds
        ):
            self.verdict = "timeout"
        return self.verdict
