"""One response -> its yes/no answer and confidence, and how they were got.

A prompt set with `uncertain = true` (the Causal Agent's setting, paper 001) also lets a response
answer "uncertain": the extractor's schema then has it, and it is read as an answer of its own,
apart from a response that gives none (null, with the reason).

The extractor model answers through the server's JSON-schema output; its reply is parsed strictly
first, then tolerantly (JSON inside prose or code fences, "85%", "yes." ...). What cannot be read
is recorded as null with the reason: never guessed.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from crawdad.records import UNCERTAIN, YES_NO, ExtractionMethod


class ExtractorReply(BaseModel):
    """The JSON schema the extractor is asked to fill ("none": the response gives no answer)."""

    model_config = ConfigDict(extra="forbid")

    answer: Literal["yes", "no", "none"]
    confidence: float | None = Field(ge=0.0, le=1.0)


class AnswerOnlyReply(BaseModel):
    """The schema of a prompt set that asks for no confidence (the no-confidence ablation)."""

    model_config = ConfigDict(extra="forbid")

    answer: Literal["yes", "no", "none"]


class UncertainReply(BaseModel):
    """The schema where the prompt set allows "uncertain" (`uncertain = true`)."""

    model_config = ConfigDict(extra="forbid")

    answer: Literal["yes", "no", "uncertain", "none"]
    confidence: float | None = Field(ge=0.0, le=1.0)


class UncertainOnlyReply(BaseModel):
    """ "uncertain" allowed, no confidence asked for."""

    model_config = ConfigDict(extra="forbid")

    answer: Literal["yes", "no", "uncertain", "none"]


EXTRACTOR_SCHEMA: dict[str, Any] = ExtractorReply.model_json_schema()
ANSWER_ONLY_SCHEMA: dict[str, Any] = AnswerOnlyReply.model_json_schema()
_MODELS: dict[tuple[bool, bool], type[BaseModel]] = {
    (True, False): ExtractorReply,
    (False, False): AnswerOnlyReply,
    (True, True): UncertainReply,
    (False, True): UncertainOnlyReply,
}


def extractor_schema(confidence: bool = True, uncertain: bool = False) -> dict[str, Any]:
    if not uncertain:
        return EXTRACTOR_SCHEMA if confidence else ANSWER_ONLY_SCHEMA
    return _MODELS[(confidence, uncertain)].model_json_schema()


CONFIDENCE_WORDS = {
    "very high",
    "high",
    "medium",
    "moderate",
    "low",
    "very low",
    "certain",
    "uncertain",
}


@dataclass(frozen=True)
class Parsed:
    answer: str | None  # yes or no; "uncertain" where the prompt set allows it
    confidence: float | None
    method: ExtractionMethod
    reason: str | None


NO_ANSWER = "the response gives no final yes/no answer"


def parse_strict(raw: str, confidence: bool = True, uncertain: bool = False) -> Parsed | None:
    try:
        reply = _MODELS[(confidence, uncertain)].model_validate_json(raw.strip())
    except ValidationError:
        return None
    fields = reply.model_dump()
    answer, value = fields["answer"], fields.get("confidence")
    if answer == "none":
        return Parsed(None, value, "strict", NO_ANSWER)
    reason = None if value is not None or not confidence else "the response states no confidence"
    return Parsed(answer, value, "strict", reason)


def _json_object(raw: str) -> dict[str, Any] | None:
    text = re.sub(r"```(?:json)?", "", raw, flags=re.IGNORECASE)
    for match in re.finditer(r"\{[^{}]*\}", text, flags=re.DOTALL):
        try:
            value = json.loads(match.group(0))
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            return {str(k).lower(): v for k, v in value.items()}
    return None


def normalize_answer(value: Any, uncertain: bool = False) -> tuple[str | None, str | None]:
    if value is None:
        return None, "no answer in the extractor's reply"
    text = str(value).strip().strip(".!\"'*").lower()
    if text in YES_NO or (uncertain and text == UNCERTAIN):
        return text, None
    if text in ("none", "null", "n/a", "unknown", ""):
        return None, NO_ANSWER
    return None, f"answer {value!r} is not yes or no"


def normalize_confidence(value: Any) -> tuple[float | None, str | None]:
    """0.85, "0.85", "85%", 85 -> 0.85; "high", 1.5, -1, missing -> None with the reason."""
    if value is None:
        return None, "no confidence in the extractor's reply"
    if isinstance(value, bool):
        return None, f"confidence {value!r} is not a number"
    text = str(value).strip().lower()
    percent = text.endswith("%")
    try:
        number = float(text.rstrip("%").strip())
    except ValueError:
        kind = "in words" if text in CONFIDENCE_WORDS else "not a number"
        return None, f"confidence {value!r} is {kind}"
    if percent or 10 <= number <= 100:
        number /= 100
    if not 0.0 <= number <= 1.0:
        return None, f"confidence {value!r} is outside 0..1"
    return number, None


def parse_tolerant(raw: str, confidence: bool = True, uncertain: bool = False) -> Parsed:
    obj = _json_object(raw)
    if obj is None:
        words = "yes|no|uncertain" if uncertain else "yes|no"
        answer_m = re.search(rf"answer\W{{0,5}}({words})\b", raw, flags=re.IGNORECASE)
        conf_m = re.search(r"confidence\W{0,5}([0-9.]+\s*%?)", raw, flags=re.IGNORECASE)
        if not answer_m:
            return Parsed(None, None, "none", f"the extractor's reply is not JSON: {raw[:80]!r}")
        obj = {"answer": answer_m.group(1), "confidence": conf_m.group(1) if conf_m else None}
    answer, answer_reason = normalize_answer(obj.get("answer"), uncertain)
    value, conf_reason = normalize_confidence(obj.get("confidence"))
    if not confidence:  # none was asked for: none is read
        value, conf_reason = None, None
    if answer is None:
        return Parsed(None, value, "none", answer_reason)
    return Parsed(answer, value, "tolerant", conf_reason)


def parse_reply(raw: str, confidence: bool = True, uncertain: bool = False) -> Parsed:
    """`confidence=False`: the prompt set asked for none, so none is read (no-confidence);
    `uncertain=True`: "uncertain" is an answer (the prompt set allows it)."""
    return parse_strict(raw, confidence, uncertain) or parse_tolerant(raw, confidence, uncertain)
