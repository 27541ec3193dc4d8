"""Seeded fake debaters whose accuracy, confidence and persuadability follow a profile.

Two seeds drive a reply. The question seed (profile seed, model, question) fixes what the model
"believes" about a question, so its first answer and its later defence agree unless it is
persuaded. The request seed (profile seed, model, sha256 of the messages) draws everything else,
so the same request always gets the same reply.
"""

from __future__ import annotations

import json
import math
import random
import re
from statistics import NormalDist
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from crawdad.fake.answer_key import AnswerKey, KeyEntry, prompt_key, question_line_span
from crawdad.fake.behaviour import FakeModel, FakeReply, FakeRequest, seeded_rng
from crawdad.fake.graphs import (
    graph_reply,
    is_plan_judge_request,
    is_plan_request,
    plan_judge_reply,
    plan_reply,
)
from crawdad.fake.judge import JudgeParams, is_judge_request, judge_reply
from crawdad.fake.parsing import Answer, opponent_stance
from crawdad.fake.text import QuestionContext, Writer

Range = tuple[float, float]
Situation = Literal["initial", "agree", "defend", "persuaded"]
_STANCE = re.compile(r"you are on the (affirmative|negative) side", re.IGNORECASE)
_NORMAL = NormalDist()
_HISTORY_LABEL = re.compile(
    r"^[^\n]{0,30}\b(?:your|opponent)\b[^\n]{0,40}\b(?:response|answer)\b[^\n]{0,30}$",
    re.IGNORECASE | re.MULTILINE,
)


class ConfidenceHabits(BaseModel):
    """How a debater states its confidence: discrete values, lower on harder rungs, higher when it
    agrees with its opponent or has been persuaded, never lower when it defends (paper, figs. 3
    and 5). A question's base level is drawn once per model and question, so a model's later
    turns are stated relative to its first one."""

    model_config = ConfigDict(extra="forbid")

    levels: dict[float, float]  # stated value -> weight of the base level
    # Levels lower at a rung: 0.4 is one level 40% of the time, 1.3 one level plus another 30%.
    drop_by_rung: dict[int, float] = Field(default_factory=dict)
    drop_wrong: float = Field(default=0.0, ge=0, le=1)  # P(one level lower) for a wrong answer
    agree: float = Field(default=0.0, ge=0, le=1)  # P(one level higher) agreeing with the opponent
    defend: float = Field(default=0.0, ge=0, le=1)  # P(one level higher) keeping a contested answer
    persuaded: float = Field(default=0.0, ge=0, le=1)  # one level higher, plus P(another)

    @model_validator(mode="after")
    def _weights(self) -> ConfidenceHabits:
        if (
            not self.levels
            or any(w < 0 for w in self.levels.values())
            or not any(self.levels.values())
        ):
            raise ValueError("levels: give at least one value with a positive weight")
        if any(not 0 <= v <= 1 for v in self.levels):
            raise ValueError("levels: stated values must be between 0 and 1")
        return self


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
    # Initial accuracy by commonsense alignment (Table 1's columns): a question's accuracy is its
    # rung's, moved by (its alignment's accuracy - `accuracy`), in debate turns too.
    accuracy_by_alignment: dict[str, float] = Field(default_factory=dict)
    # Correlation (0..1) of how hard a question is for all models of one seed; 0: each model errs
    # independently. Real models mostly fail on the same questions, so they mostly agree.
    shared_difficulty: float = Field(default=0.0, ge=0, lt=1)
    # Spread errors evenly: within each (rung, alignment) of the answer key, a question's belief
    # is its rank among those questions' draws, so that a few hundred questions show the set
    # accuracies instead of sampling noise. Questions outside the key draw as usual.
    spread_errors: bool = False
    # Only the opponent's confidence above this counts in the switch chance.
    switch_threshold: float = Field(default=0.0, ge=0, le=1)
    # Switch chance multiplier by round (0-based: the number of responses the history shows).
    # Round 1 is the second speaker's first reply, where going along ends the debate.
    switch_scale_by_round: dict[int, float] = Field(default_factory=dict)
    # None: confidences uniform in `confidence_correct` / `confidence_wrong`.
    confidence_habits: ConfidenceHabits | None = None
    debate_thinking_words: Range | None = None  # None: `thinking_words`
    thinking_by_rung: dict[int, float] = Field(default_factory=dict)  # trace length multiplier

    @model_validator(mode="after")
    def _ranges_ordered(self) -> ProfileParams:
        for name in (
            "confidence_correct",
            "confidence_wrong",
            "thinking_words",
            "initial_words",
            "debate_words",
            "debate_thinking_words",
        ):
            if getattr(self, name) is None:
                continue
            low, high = getattr(self, name)
            if low > high:
                raise ValueError(f"{name}: {low} > {high}")
        return self

    def initial_accuracy(self, rung: int | None, alignment: str | None = None) -> float:
        if rung is not None and rung in self.accuracy_by_rung:
            return self._shifted(self.accuracy_by_rung[rung], alignment)
        return self._shifted(self.accuracy, alignment)

    def judgement_accuracy(self, rung: int | None, alignment: str | None = None) -> float:
        if self.debate_accuracy is None:
            return self.initial_accuracy(rung, alignment)
        if isinstance(self.debate_accuracy, dict):
            if rung is not None and rung in self.debate_accuracy:
                return self._shifted(self.debate_accuracy[rung], alignment)
            return self.initial_accuracy(rung, alignment)
        return self._shifted(self.debate_accuracy, alignment)

    def _shifted(self, value: float, alignment: str | None) -> float:
        if alignment is None or alignment not in self.accuracy_by_alignment:
            return value
        return min(1.0, max(0.0, value + self.accuracy_by_alignment[alignment] - self.accuracy))


# What the "qwen3" and "deepseek-r1" presets imitate, for the reports of simulated runs.
PAPER_PROFILE_NOTE = (
    "The simulated debaters follow crawdad's `qwen3` and `deepseek-r1` profiles "
    "(crawdad/fake/profile.py), set from the CRAwDAD paper's published results: initial accuracy "
    "by model, rung and commonsense alignment (Table 1); errors shared between the models and "
    "persuasion that favours the right answer, DeepSeek-R1 more easily persuaded (fig. 2); "
    "confidence of 0.6 or more, lower on harder rungs, about as high when wrong, Qwen3 a little "
    "higher (fig. 3); answer changes more likely against a more confident opponent (fig. 4); "
    "confidence up when persuaded and never down when defending (fig. 5); most debates agreed "
    "after two responses, fewer on rung 3 (fig. 6); DeepSeek-R1's short debate replies, 22.6% "
    "of them 100 characters or less (fig. 7); longer generation in round 0, on rung 3 and for "
    "Qwen3 (fig. 8). The final accuracies, persuasion counts and rounds follow from these "
    "habits; they are not set directly."
)

PRESETS: dict[str, dict[str, Any]] = {
    # The CRAwDAD paper's two debaters, as published (see PAPER_FIGURES): Qwen3-32B is more
    # accurate, more confident, longer-winded and harder to persuade; DeepSeek-R1-Distill-Qwen-32B
    # is persuaded more easily and answers 22.6% of its debate turns in <=100 characters.
    "qwen3": {
        # Table 1, "Qwen3 (Initial)": overall, by rung, by commonsense alignment.
        "accuracy": 0.8416,
        "accuracy_by_rung": {1: 0.9377, 2: 0.8980, 3: 0.7153},
        "accuracy_by_alignment": {
            "commonsense": 0.8496,
            "nonsense": 0.8310,
            "anticommonsense": 0.8469,
        },
        "debate_accuracy": {1: 0.95, 2: 0.91, 3: 0.78},
        "shared_difficulty": 0.6,
        "spread_errors": True,
        "switch_base": 0.0,
        "switch_per_confidence": 0.6,
        "switch_threshold": 0.45,
        "switch_to_correct": 1.5,
        "switch_to_wrong": 0.25,
        "switch_scale_by_round": {1: 0.5, 2: 2.2, 3: 2.6},
        "confidence_habits": {
            "levels": {0.6: 2, 0.7: 1, 0.8: 3, 0.85: 9, 0.9: 30, 0.95: 38, 1.0: 17},
            "drop_by_rung": {2: 0.5, 3: 1.1},
            "drop_wrong": 0.15,
            "agree": 0.6,
            "defend": 0.35,
            "persuaded": 0.5,
        },
        "thinking_words": (500, 1500),
        "debate_thinking_words": (250, 900),
        "thinking_by_rung": {1: 0.8, 2: 1.0, 3: 1.35},
        "initial_words": (110, 200),
        "debate_words": (65, 170),
        "short_text_rate": 0.004,
    },
    "deepseek-r1": {
        # Table 1, "DeepSeek-R1 (Initial)".
        "accuracy": 0.7803,
        "accuracy_by_rung": {1: 0.9067, 2: 0.7729, 3: 0.6794},
        "accuracy_by_alignment": {
            "commonsense": 0.7763,
            "nonsense": 0.7724,
            "anticommonsense": 0.7942,
        },
        "debate_accuracy": {1: 0.92, 2: 0.80, 3: 0.71},
        "shared_difficulty": 0.6,
        "spread_errors": True,
        "switch_base": 0.0,
        "switch_per_confidence": 0.8,
        "switch_threshold": 0.45,
        "switch_to_correct": 1.3,
        "switch_to_wrong": 0.45,
        "switch_scale_by_round": {1: 0.5, 2: 2.2, 3: 2.6},
        "confidence_habits": {
            "levels": {0.6: 3, 0.7: 1.5, 0.8: 4, 0.85: 13, 0.9: 34, 0.95: 32, 1.0: 12},
            "drop_by_rung": {2: 0.5, 3: 1.1},
            "drop_wrong": 0.15,
            "agree": 0.6,
            "defend": 0.35,
            "persuaded": 0.5,
        },
        "thinking_words": (450, 1400),
        "debate_thinking_words": (250, 900),
        "thinking_by_rung": {1: 0.8, 2: 1.0, 3: 1.35},
        "initial_words": (70, 140),
        "debate_words": (15, 70),
        "short_text_rate": 0.226,
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
        self._spread: dict[str, dict[object, float]] = {}  # model -> question -> belief

    def reply(self, request: FakeRequest) -> FakeReply:
        if is_judge_request(request):  # a debater model may judge, too
            return judge_reply(request, self.answer_key, JudgeParams(), self.seed)
        if is_plan_judge_request(request):  # the coding protocol's judge
            return plan_judge_reply(self.seed, request)
        prompt = request.prompt
        span = question_line_span(prompt)
        question_line = prompt[span[0] : span[1]] if span else ""
        key = prompt_key(prompt)
        entry = (self.answer_key.get(key) if key else None) or KeyEntry(None)
        rng = seeded_rng(self.seed, request.model, request.digest, request.seed)
        after = span[1] if span else 0
        if is_plan_request(prompt):  # MAC's coding agents: a plan for the data
            return plan_reply(self.seed, request, entry, rng, after)
        if entry.graph is not None:  # a whole-graph item: an edge list
            return graph_reply(self.params, self.seed, request, entry, rng, after)
        opponent = opponent_stance(prompt, span[1]) if span else (None, None)
        in_debate = opponent[0] is not None or "opponent" in prompt.lower()
        answer, confidence = self.stance(
            request.model,
            key or request.digest,
            entry,
            rng,
            opponent if in_debate else None,
            history_round(prompt) if in_debate else 0,
            sample_seed=request.seed,
        )
        side = _STANCE.search(prompt)
        if side and rng.random() < self.params.stance_obedience:
            answer = "yes" if side.group(1).lower() == "affirmative" else "no"

        p = self.params
        writer = Writer(rng, QuestionContext.from_prompt(prompt, question_line))
        trace_words = (p.debate_thinking_words or p.thinking_words) if in_debate else None
        words = _draw_int(rng, trace_words or p.thinking_words)
        words = int(words * p.thinking_by_rung.get(entry.rung or 0, 1.0))
        thinking = writer.thinking(words, answer, opponent if in_debate else None)
        if request.structured:
            return FakeReply(thinking=thinking, text=_structured_text(request, answer, confidence))
        if rng.random() < p.loop_rate:
            return FakeReply(thinking=thinking[: len(thinking) // 3], repeat=writer.loop_span())
        if in_debate:
            short = rng.random() < p.short_text_rate
            words = _draw_int(rng, p.debate_words)
            text = writer.debate_text(words, answer, confidence, opponent[0], short=short)
        else:
            text = writer.initial_text(_draw_int(rng, p.initial_words), answer, confidence)
        return FakeReply(thinking=thinking, text=text)

    def stance(
        self,
        model: str,
        question: object,
        entry: KeyEntry,
        rng: random.Random,
        opponent: tuple[Answer | None, float | None] | None,
        round_: int = 0,
        sample_seed: int | None = None,
    ) -> tuple[Answer, float]:
        """(answer, confidence) of `model` on `question` at `round_`, facing `opponent`'s stated
        stance (None: the initial answer). `rng` is the request's own; the question's draws
        are not."""
        belief = self._belief(model, question)
        if opponent is None and sample_seed is not None:  # an independent sample of a first answer
            fresh = seeded_rng(self.seed, model, question, sample_seed)
            if fresh.random() < self.params.independence:
                belief = fresh.random()
        answer, switched = self._decide(entry, belief, rng, opponent, round_)
        correct = entry.gold is None or answer == entry.gold
        if self.params.confidence_habits is None:
            return answer, self._confidence(rng, correct or switched)
        if opponent is None or opponent[0] is None:
            situation: Situation = "initial"
        elif switched:
            situation = "persuaded"
        else:
            situation = "agree" if opponent[0] == answer else "defend"
        return answer, self._habit_confidence(rng, model, question, entry, correct, situation)

    def _belief(self, model: str, question: object) -> float:
        if not self.params.spread_errors:
            return self._drawn_belief(model, question)
        if model not in self._spread:
            self._spread[model] = self._spread_beliefs(model)
        spread = self._spread[model].get(question)
        return self._drawn_belief(model, question) if spread is None else spread

    def _spread_beliefs(self, model: str) -> dict[object, float]:
        cells: dict[tuple[int | None, str | None], list[tuple[float, object]]] = {}
        for key, entry in self.answer_key.items():
            cell = cells.setdefault((entry.rung, entry.alignment), [])
            cell.append((self._drawn_belief(model, key), key))
        spread: dict[object, float] = {}
        for cell in cells.values():
            for rank, (_, question) in enumerate(sorted(cell, key=lambda pair: pair[0])):
                spread[question] = (rank + 0.5) / len(cell)
        return spread

    def _drawn_belief(self, model: str, question: object) -> float:
        """Uniform in [0, 1): the answer is right when it is below the accuracy. With
        `shared_difficulty`, a draw shared by every model of this seed is mixed in (a Gaussian
        copula), so that models err on the same questions without changing their accuracy."""
        own = seeded_rng(self.seed, model, question).random()
        rho = self.params.shared_difficulty
        if rho <= 0:
            return own
        shared = seeded_rng(self.seed, "shared difficulty", question).random()
        z = math.sqrt(rho) * _probit(shared) + math.sqrt(1 - rho) * _probit(own)
        return _NORMAL.cdf(z)

    def _decide(
        self,
        entry: KeyEntry,
        belief: float,
        rng: random.Random,
        opponent: tuple[Answer | None, float | None] | None,
        round_: int = 0,
    ) -> tuple[Answer, bool]:
        p = self.params
        if entry.gold is None:
            own: Answer = "yes" if belief < 0.5 else "no"
        else:
            threshold = (
                p.initial_accuracy(entry.rung, entry.alignment)
                if opponent is None
                else p.judgement_accuracy(entry.rung, entry.alignment)
            )
            own = entry.gold if belief < threshold else _other(entry.gold)
        if opponent is None or opponent[0] is None or opponent[0] == own:
            return own, False
        stated = 0.5 if opponent[1] is None else opponent[1]
        chance = p.switch_base + p.switch_per_confidence * max(0.0, stated - p.switch_threshold)
        if entry.gold is not None:
            chance *= p.switch_to_correct if opponent[0] == entry.gold else p.switch_to_wrong
        chance *= p.switch_scale_by_round.get(round_, 1.0)
        if rng.random() < min(1.0, chance):
            return opponent[0], True
        return own, False

    def _confidence(self, rng: random.Random, confident: bool) -> float:
        p = self.params
        low, high = p.confidence_wrong
        if confident or rng.random() < p.overconfidence_rate:
            low, high = p.confidence_correct
        return min(1.0, round(rng.uniform(low, high) * 20) / 20)

    def _habit_confidence(
        self,
        rng: random.Random,
        model: str,
        question: object,
        entry: KeyEntry,
        correct: bool,
        situation: Situation,
    ) -> float:
        habits = self.params.confidence_habits
        assert habits is not None
        levels = sorted(habits.levels)
        q = seeded_rng(self.seed, model, question, "confidence")
        base = q.choices(range(len(levels)), weights=[habits.levels[v] for v in levels])[0]
        drop = habits.drop_by_rung.get(entry.rung or 0, 0.0)
        base -= int(drop) + (q.random() < drop - int(drop))
        wrong_drop = q.random() < habits.drop_wrong
        defend_up = q.random() < habits.defend  # drawn per question: both defences say the same
        index = base - (wrong_drop and not correct)
        if situation == "agree":
            index = max(index, base) + (rng.random() < habits.agree)
        elif situation == "defend":
            index += defend_up
        elif situation == "persuaded":
            index += 1 + (rng.random() < habits.persuaded)
        return levels[min(len(levels) - 1, max(0, index))]


def history_round(prompt: str) -> int:
    """How many responses a debate prompt's history shows: its labels ("Your opponent's response
    (round 0)", "Your initial response (round 0)"): short lines naming whose response they
    label, and not ending like a sentence."""
    return sum(
        not label.rstrip().endswith((".", "!", "?")) for label in _HISTORY_LABEL.findall(prompt)
    )


def _probit(u: float) -> float:
    return _NORMAL.inv_cdf(min(max(u, 1e-12), 1 - 1e-12))


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
