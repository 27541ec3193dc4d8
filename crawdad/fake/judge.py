"""A seeded fake judge (judge protocol): reads the debaters' answers from the prompt, and
replies with the JSON the judge schema asks for: a verdict, or a follow-up question while the
schema allows one.

Its verdict is right with `accuracy` (by rung), sides with the last speaker with
`last_speaker_bias` (a position bias the analysis should find), follows the debaters when they
agree, and asks a follow-up question with `question_rate` when they disagree, put to one debater
with `address_one_rate` (else to all).
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from crawdad.fake.answer_key import AnswerKey, KeyEntry, prompt_key
from crawdad.fake.behaviour import FakeModel, FakeReply, FakeRequest, seeded_rng
from crawdad.fake.parsing import Answer, last_stance

_DEBATER = re.compile(r"^Debater (\d+)'s response:\s*$", re.MULTILINE)


class JudgeParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    accuracy_by_rung: dict[int, float] = Field(default_factory=lambda: {1: 0.92, 2: 0.85, 3: 0.75})
    accuracy: float = Field(default=0.85, ge=0, le=1)
    follow_agreement: float = Field(default=0.92, ge=0, le=1)
    last_speaker_bias: float = Field(default=0.2, ge=0, le=1)
    question_rate: float = Field(default=0.4, ge=0, le=1)
    # A follow-up question is put to one debater (drawn) rather than to all, where the schema
    # has a `to` key (MAC's judge asks "each or both side").
    address_one_rate: float = Field(default=0.5, ge=0, le=1)


def is_judge_request(request: FakeRequest) -> bool:
    schema = request.schema or {}
    return "decision" in (schema.get("properties") or {})


def debater_answers(prompt: str) -> list[Answer | None]:
    """The latest answer of each debater section, in the order the sections appear."""
    marks = list(_DEBATER.finditer(prompt))
    answers = []
    for i, mark in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(prompt)
        answers.append(last_stance(prompt[mark.end() : end])[0])
    return answers


def judge_reply(
    request: FakeRequest, key: AnswerKey, params: JudgeParams, seed: int = 0
) -> FakeReply:
    prompt = request.prompt
    k = prompt_key(prompt)
    entry = (key.get(k) if k else None) or KeyEntry(None)
    rng = seeded_rng(seed, "judge", request.model, request.digest, request.seed)
    said = debater_answers(prompt)
    known = [a for a in said if a is not None]
    if known and len(set(known)) == 1 and rng.random() < params.follow_agreement:
        answer: Answer = known[0]
    elif said and said[-1] is not None and rng.random() < params.last_speaker_bias:
        answer = said[-1]
    elif entry.gold is not None:
        p = params.accuracy_by_rung.get(entry.rung or 0, params.accuracy)
        answer = entry.gold if rng.random() < p else ("no" if entry.gold == "yes" else "yes")
    else:
        answer = "yes" if rng.random() < 0.5 else "no"
    allowed = _decisions(request.schema or {})
    ask = "question" in allowed and len(set(known)) > 1 and rng.random() < params.question_rate
    reply: dict[str, Any] = {
        "decision": "question" if ask else "verdict",
        "answer": answer,
        "confidence": round(rng.uniform(0.6, 1.0) * 20) / 20,
        "question": (
            "Debater 1 and Debater 2, you disagree: state the estimand you computed and the "
            "probabilities you put into it, so that your arithmetic can be checked."
            if ask
            else ""
        ),
    }
    targets = _targets(request.schema or {})
    if targets:  # drawn last, so that the draws before are those of a judge without `to`
        reply["to"] = "all"
        if ask and len(targets) > 1 and rng.random() < params.address_one_rate:
            reply["to"] = targets[int(rng.random() * len(targets))]
            reply["question"] = (
                f"{reply['to'].capitalize()}, state the estimand you computed and the "
                "probabilities you put into it, so that your arithmetic can be checked."
            )
    thinking = f"The debaters answered {', '.join(a or '?' for a in said)}. I check the estimand."
    return FakeReply(thinking=thinking, text=json.dumps(reply))


def _targets(schema: dict[str, Any]) -> list[str]:
    """The single debaters the schema's `to` allows ([] when it has no `to`)."""
    spec = (schema.get("properties") or {}).get("to") or {}
    return [t for t in spec.get("enum", []) if t != "all"]


def _decisions(schema: dict[str, Any]) -> list[str]:
    spec = (schema.get("properties") or {}).get("decision") or {}
    if "enum" in spec:
        return list(spec["enum"])
    if "const" in spec:
        return [spec["const"]]
    return ["verdict", "question"]


class FakeJudge(FakeModel):
    """A judge model of its own (a fake server may also let a debater model judge)."""

    def __init__(
        self, answer_key: AnswerKey | None = None, params: JudgeParams | None = None, seed: int = 0
    ) -> None:
        self.key = answer_key or AnswerKey()
        self.params = params or JudgeParams()
        self.seed = seed
        self.thinks = True

    def reply(self, request: FakeRequest) -> FakeReply:
        from crawdad.fake.graphs import is_plan_judge_request, plan_judge_reply

        if is_plan_judge_request(request):  # the coding protocol's judge
            return plan_judge_reply(self.seed, request)
        return judge_reply(request, self.key, self.params, self.seed)
