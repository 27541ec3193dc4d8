"""Answers that are "yes" or "no" with a confidence, read by the paper's extractor: the schema,
the reading and the agreement that CLadder's questions and MAC's pair questions share."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from crawdad.records import YES_NO
from crawdad.scoring.extract import extractor_schema, parse_reply
from crawdad.tasks.base import Reading, same_answer


class YesNoAnswers:
    """A task's members for yes/no answers; a task class inherits them."""

    answers: tuple[str, ...] | None = YES_NO

    def extractor_schema(self, confidence: bool, uncertain: bool = False) -> dict[str, Any]:
        return extractor_schema(confidence, uncertain)

    def read(self, reply: str, confidence: bool, uncertain: bool = False) -> Reading:
        parsed = parse_reply(reply, confidence=confidence, uncertain=uncertain)
        return Reading(parsed.answer, parsed.confidence, parsed.method, parsed.reason)

    def agree(self, answers: Sequence[str | None]) -> bool:
        return same_answer(answers)
