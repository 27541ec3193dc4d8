"""Seeded fake debaters whose accuracy, confidence and persuadability follow a profile.

Two seeds drive a reply. The question seed (profile seed, model, question) fixes what the model
"believes" about a question, so its first answer and its later defence agree unless it is
persuaded. The request seed (profile seed, model, sha256 of the messages) draws everything else,
so the same request always gets the same reply.
"""

from __future__ import annotations

import json
import random
import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from crawdad.fake.answer_key import AnswerKey, KeyEntry, prompt_key, question_line_span
from crawdad.fake.behaviour import FakeModel, FakeReply, FakeRequest, seeded_rng
from crawdad.fake.judge import JudgeParams, is_judge_request, judge_reply
from crawdad.fake.parsing import Answer, opponent_stance
from crawdad.fake.text import QuestionContext, Writer

Range = tuple[float, float]
_STANCE = re.compile(r"you are on the (affirmative|negative) side", re.IGNORECASE)


class ProfileParams(BaseModel):
    """How a fake debater behaves. The defaults give paper-like numbers (~0.8 initial accuracy)."""

    model_config = ConfigDict(extra="forbid")

    accuracy: float = Field(default=0.8, ge=0, le=1)  # when the rung is unknown
    accuracy_by_rung: dict[int, float] = Field(default_factory=lambda: {1: 0.9, 2: 0.82, 3: 0.7})
    # Accuracy of the model's own judgement in debate turns; None: same as the initial accuracy.
    debate_accuracy: float | dict[int, float] | None = None
    confidence_correct: Range = (0.85, 1.0)
    confidence_wrong: Range = (0.6, 0.95)
    overconfidence_rate: float = Field(
        default=0.35, ge=0, le=1
    )  # wrong answers with correct-like conf.
    # P(switch to the opponent's answer) = base + per_confidence * opponent's stated confidence,
    # times `to_correct` or `to_wrong` by whether the opponent is right.
    switch_base: float = Field(default=0.02, ge=0, le=1)
    switch_per_confidence: float = Field(default=0.45, ge=0)
    switch_to_correct: float = Field(default=1.4, ge=0)
    switch_to_wrong: float = Field(default=0.6, ge=0)
    thinking_words: Range = (250, 2000)
    initial_words: Range = (120, 280)
    debate_words: Range = (40, 200)
    short_text_rate: float = Field(default=0.05, ge=0, le=1)  # debate texts under 100 characters
    loop_rate: float = Field(default=0.0, ge=0, le=1)  # replies that loop until the token budget
    # Share of first answers drawn afresh for each sampling seed rather than from the model's
    # fixed belief about the question: what makes independent samples (solo, self-consistency)
    # differ, and correlated, as a real model's are.
    independence: float = Field(default=0.3, ge=0, le=1)
    stance_obedience: float = Field(default=0.85, ge=0, le=1)  # argues the side it is assigned
    thinks: bool = True

    @model_validator(mode="after")
    def _ranges_ordered(self) -> ProfileParams:
        for name in (
            "confidence_correct",
            "confidence_wrong",
            "thinking_words",
            "initial_words",
            "debate_words",
        ):
            low, high = getattr(self, name)
            if low > high:
                raise ValueError(f"{name}: {low} > {high}")
        return self

    def initial_accuracy(self, rung: int | None) -> float:
        if rung is not None and rung in self.accuracy_by_rung:
            return self.accuracy_by_rung[rung]
        return self.accuracy

    def judgement_accuracy(self, rung: int | None) -> float:
        if self.debate_accuracy is None:
            return self.initial_accuracy(rung)
        if isinstance(self.debate_accuracy, dict):
            if rung is not None and rung in self.debate_accuracy:
                return self.debate_accuracy[rung]
            return self.initial_accuracy(rung)
        return self.debate_accuracy


PRESETS: dict[str, dict[str, Any]] = {
    # Paper, table 1 and section 4.4: Qwen3-32B is more accurate, longer-winded and less
    # persuadable; DeepSeek-R1-Distill-Qwen-32B answers 22.6% of debate turns in <=100 characters.
    "qwen3": {
        "accuracy": 0.84,
        "accuracy_by_rung": {1: 0.94, 2: 0.9, 3: 0.72},
        "debate_accuracy": {1: 0.95, 2: 0.92, 3: 0.78},
        "switch_per_confidence": 0.35,
        "debate_words": (80, 220),
        "initial_words": (150, 300),
        "short_text_rate": 0.004,
        "confidence_correct": (0.9, 1.0),
    },
    "deepseek-r1": {
        "accuracy": 0.78,
        "accuracy_by_rung": {1: 0.91, 2: 0.77, 3: 0.68},
        "debate_accuracy": {1: 0.92, 2: 0.82, 3: 0.72},
        "switch_per_confidence": 0.6,
        "debate_words": (25, 120),
        "initial_words": (100, 220),
        "short_text_rate": 0.22,
    },
}


def preset(name: str, **overrides: Any) -> ProfileParams:
    """Profile parameters of a named preset ("qwen3", "deepseek-r1"), with overrides."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; known: {', '.join(PRESETS)}")
    return ProfileParams(**{**PRESETS[name], **overrides})


class ProfileModel(FakeModel):
    """A seeded fake debater: answers CLadder questions with profile-driven accuracy."""

    def __init__(
        self,
        answer_key: AnswerKey | None = None,
        params: ProfileParams | str | None = None,
        *,
        seed: int = 0,
        **overrides: Any,
    ) -> None:
        if isinstance(params, str):
            params = preset(params, **overrides)
        elif overrides:
            params = (params or ProfileParams()).model_copy(update=overrides)
            params = ProfileParams.model_validate(params.model_dump())
        self.params = params or ProfileParams()
        self.answer_key = answer_key or AnswerKey()
        self.seed = seed
        self.thinks = self.params.thinks

    def reply(self, request: FakeRequest) -> FakeReply:
        if is_judge_request(request):  # a debater model may judge, too
            return judge_reply(request, self.answer_key, JudgeParams(), self.seed)
        prompt = request.prompt
        span = question_line_span(prompt)
        question_line = prompt[span[0] : span[1]] if span else ""
        key = prompt_key(prompt)
        entry = (self.answer_key.get(key) if key else None) or KeyEntry(None)
        rng = seeded_rng(self.seed, request.model, request.digest, request.seed)
        belief = seeded_rng(self.seed, request.model, key or request.digest).random()

        opponent = opponent_stance(prompt, span[1]) if span else (None, None)
        in_debate = opponent[0] is not None or "opponent" in prompt.lower()
        if not in_debate:
            fresh = seeded_rng(self.seed, request.model, key, request.seed)
            if fresh.random() < self.params.independence:
                belief = fresh.random()
        answer, switched = self._decide(entry, belief, rng, opponent if in_debate else None)
        side = _STANCE.search(prompt)
        if side and rng.random() < self.params.stance_obedience:
            answer = "yes" if side.group(1).lower() == "affirmative" else "no"
        correct = entry.gold is None or answer == entry.gold
        confidence = self._confidence(rng, correct or switched)

        writer = Writer(rng, QuestionContext.from_prompt(prompt, question_line))
        thinking = writer.thinking(
            _draw_int(rng, self.params.thinking_words), answer, opponent if in_debate else None
        )
        if request.structured:
            return FakeReply(thinking=thinking, text=_structured_text(request, answer, confidence))
        if rng.random() < self.params.loop_rate:
            return FakeReply(thinking=thinking[: len(thinking) // 3], repeat=writer.loop_span())
        if in_debate:
            short = rng.random() < self.params.short_text_rate
            words = _draw_int(rng, self.params.debate_words)
            text = writer.debate_text(words, answer, confidence, opponent[0], short=short)
        else:
            text = writer.initial_text(
                _draw_int(rng, self.params.initial_words), answer, confidence
            )
        return FakeReply(thinking=thinking, text=text)

    def _decide(
        self,
        entry: KeyEntry,
        belief: float,
        rng: random.Random,
        opponent: tuple[Answer | None, float | None] | None,
    ) -> tuple[Answer, bool]:
        p = self.params
        if entry.gold is None:
            own: Answer = "yes" if belief < 0.5 else "no"
        else:
            threshold = (
                p.initial_accuracy(entry.rung)
                if opponent is None
                else p.judgement_accuracy(entry.rung)
            )
            own = entry.gold if belief < threshold else _other(entry.gold)
        if opponent is None or opponent[0] is None or opponent[0] == own:
            return own, False
        stated = 0.5 if opponent[1] is None else opponent[1]
        chance = p.switch_base + p.switch_per_confidence * stated
        if entry.gold is not None:
            chance *= p.switch_to_correct if opponent[0] == entry.gold else p.switch_to_wrong
        if rng.random() < min(1.0, chance):
            return opponent[0], True
        return own, False

    def _confidence(self, rng: random.Random, confident: bool) -> float:
        p = self.params
        low, high = p.confidence_wrong
        if confident or rng.random() < p.overconfidence_rate:
            low, high = p.confidence_correct
        return min(1.0, round(rng.uniform(low, high) * 20) / 20)


def _draw_int(rng: random.Random, bounds: Range) -> int:
    return int(rng.uniform(bounds[0], bounds[1]))


def _other(answer: Answer) -> Answer:
    return "no" if answer == "yes" else "yes"


def _structured_text(request: FakeRequest, answer: Answer, confidence: float) -> str:
    schema = request.schema or {}
    properties = schema.get("properties") or {"answer": {}, "confidence": {}}
    values: dict[str, Any] = {}
    for name, spec in properties.items():
        kind = spec.get("type") if isinstance(spec, dict) else None
        if "answer" in name:
            values[name] = answer
        elif "confidence" in name:
            values[name] = confidence
        else:
            values[name] = {"number": 0.0, "integer": 0, "boolean": False}.get(str(kind), "")
    return json.dumps(values)
