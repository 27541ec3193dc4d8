"""Debate protocols: one module per kind, each a `play(setup, question, record)` coroutine that
fills in a DebateRecord's turns and final answer using the shared turn machinery in `base`.

A new kind is a new module here and one line in KINDS (and its name in config.ProtocolKind).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from importlib import import_module

from crawdad.backends.schedule import CURRENT_DEBATE, DebateProgress
from crawdad.errors import BackendError
from crawdad.protocols.base import (
    DebateSetup,
    Participant,
    first_speaker,
    new_record,
    request_seed,
    speaking_order,
)
from crawdad.records import DebateRecord
from crawdad.tasks.base import Item

Play = Callable[[DebateSetup, Item, DebateRecord], Awaitable[None]]

# Each kind's module, imported when a run uses it: MAC's coding agents pull in causal-learn
# (seconds of start-up) that no other protocol needs.
KINDS: dict[str, str] = {
    "coding": "crawdad.protocols.coding",
    "crawdad": "crawdad.protocols.crawdad",
    "judge": "crawdad.protocols.judge",
    "simultaneous": "crawdad.protocols.simultaneous",
    "solo": "crawdad.protocols.solo",
    "pipeline": "crawdad.protocols.pipeline",
}


def play_of(kind: str) -> Play:
    """The protocol `kind`'s `play` (its module imported on first use)."""
    return import_module(KINDS[kind]).play


async def run_debate(setup: DebateSetup, question: Item) -> DebateRecord:
    """One question under the setup's protocol -> its record (with the error, if it failed)."""
    record = new_record(setup, question)
    start = time.monotonic()
    progress = CURRENT_DEBATE.set(DebateProgress(run=id(setup)))  # a setup per run
    try:
        await play_of(setup.protocol.kind)(setup, question, record)
        if setup.grader is not None:  # [grader]: beside the exact scoring (paper 004)
            from crawdad.protocols.grading import grade

            await grade(setup, question, record)
    except BackendError as e:
        record.error, record.error_kind = str(e), type(e).__name__
        record.end = "error"
        record.final_answer = record.final_confidence = None
    finally:
        CURRENT_DEBATE.reset(progress)
    record.seconds = time.monotonic() - start
    record.finished_at = datetime.now(UTC)
    return record


__all__ = [
    "KINDS",
    "DebateSetup",
    "Participant",
    "first_speaker",
    "request_seed",
    "run_debate",
    "speaking_order",
]
