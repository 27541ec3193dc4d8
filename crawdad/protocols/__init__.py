"""Debate protocols: one module per kind, each a `play(setup, question, record)` coroutine that
fills in a DebateRecord's turns and final answer using the shared turn machinery in `base`.

A new kind is a new module here and one line in KINDS (and its name in config.ProtocolKind).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from crawdad.backends.schedule import CURRENT_DEBATE, DebateProgress
from crawdad.errors import BackendError
from crawdad.protocols import coding, crawdad, judge, pipeline, simultaneous, solo
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

KINDS: dict[str, Play] = {
    "coding": coding.play,
    "crawdad": crawdad.play,
    "judge": judge.play,
    "simultaneous": simultaneous.play,
    "solo": solo.play,
    "pipeline": pipeline.play,
}


async def run_debate(setup: DebateSetup, question: Item) -> DebateRecord:
    """One question under the setup's protocol -> its record (with the error, if it failed)."""
    record = new_record(setup, question)
    start = time.monotonic()
    progress = CURRENT_DEBATE.set(DebateProgress(run=id(setup)))  # a setup per run
    try:
        await KINDS[setup.protocol.kind](setup, question, record)
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
