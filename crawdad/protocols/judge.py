"""Debaters before a judge (MAC's meta-debate, section 3.1.1; Liang et al.'s MAD).

In round 0 the debaters speak in an order drawn per question, each shown every earlier debater
text. Then the judge reads the debaters' final texts, never their traces, and replies through a
JSON schema with a verdict (answer and confidence) or a follow-up question, put to every debater
or to one (`to`, as MAC's judge asks "each or both side"). Only the debaters a question is for
speak in the next round, in speaking order, shown every earlier debater text and the judge's
questions. In the last round the schema allows only a verdict. The final answer is the judge's.
A judge reply that is not the schema's JSON (a null `question` aside: read as none asked) is read
by the extractor; an unreadable verdict is a null answer with its reason.

With `stances = true` the debaters take sides. By default as MAC (`stance_mode = "mac"`): the
first speaker is the affirmative side and opens with its own answer; every other debater is
negative, told the affirmative's latest answer and to argue against it (its `stance` is the
other answer). With `stance_mode = "fixed"`: an affirmative argues "yes" and a negative "no",
sides alternating in speaking order from a side drawn per question.
"""

from __future__ import annotations

import json
from string import Template
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from crawdad.backends.base import ChatResult
from crawdad.errors import PromptError
from crawdad.protocols.base import (
    DebateSetup,
    ask,
    check_runaway,
    draw,
    extract,
    history,
    request_seed,
    respond,
    speaking_order,
)
from crawdad.records import Answer, DebateRecord, Extraction, ExtractionMethod, Turn
from crawdad.tasks.base import Item

ALL = "all"
Side = Literal["affirmative", "negative"]
OTHER: dict[str, Answer] = {"yes": "no", "no": "yes"}


class JudgeReply(BaseModel):
    model_config = ConfigDict(extra="forbid")

    decision: Literal["verdict", "question"]
    answer: Literal["yes", "no"]
    confidence: float = Field(ge=0.0, le=1.0)
    question: str = ""
    # Who must answer the question: "all", or "debater N" (numbered in speaking order).
    to: str = ALL


def parse_reply(text: str) -> tuple[JudgeReply, str | None]:
    """The judge's reply as the schema's JSON, and a note when it was read leniently: a null
    `question` (as some models write an empty field) is read as no question, its verdict
    being plain. Anything else off the schema raises ValidationError."""
    try:
        return JudgeReply.model_validate_json(text), None
    except ValidationError:
        try:
            data = json.loads(text)
        except (ValueError, RecursionError):
            data = None
        if not (isinstance(data, dict) and "question" in data and data["question"] is None):
            raise
    reply = JudgeReply.model_validate_json(json.dumps({**data, "question": ""}))
    return reply, "`question` was null; read as no question"


def judge_schema(last_round: bool, debaters: int) -> dict[str, Any]:
    schema = JudgeReply.model_json_schema()
    if last_round:
        schema["properties"]["decision"] = {"enum": ["verdict"], "type": "string"}
    to = [ALL, *(f"debater {n}" for n in range(1, debaters + 1))]
    schema["properties"]["to"] = {"enum": to, "type": "string"}
    schema["required"] = ["decision", "answer", "confidence", "question", "to"]
    return schema


def addressees(to: str, order: list[str]) -> list[str]:
    """The debaters a follow-up question is for, in speaking order; "all" (or a debater number
    out of range) is every debater."""
    number = to.strip().lower().removeprefix("debater").strip()
    if number.isdigit() and 1 <= int(number) <= len(order):
        return [order[int(number) - 1]]
    return list(order)


def fixed_stances(setup: DebateSetup, question: Item, order: list[str]) -> dict[str, Answer]:
    """stance_mode "fixed": "yes" and "no" alternating in speaking order from a drawn side."""
    sides: tuple[Answer, Answer] = ("yes", "no")
    start = 0 if draw(setup.seed, question.question_id, "stance") < 0.5 else 1
    return {name: sides[(start + i) % 2] for i, name in enumerate(order)}


def sides_of(setup: DebateSetup, question: Item, order: list[str]) -> dict[str, Side]:
    """Each debater's side: MAC's affirmative is the first speaker; fixed sides follow the
    stance each was drawn ("yes": affirmative)."""
    if not setup.protocol.stances:
        return {}
    if setup.protocol.stance_mode == "fixed":
        drawn = fixed_stances(setup, question, order)
        return {n: "affirmative" if a == "yes" else "negative" for n, a in drawn.items()}
    return {name: "affirmative" if i == 0 else "negative" for i, name in enumerate(order)}


def stance_of(
    setup: DebateSetup, record: DebateRecord, side: Side | None
) -> tuple[Answer | None, str]:
    """What a debater of `side` argues, and the prompt's stance text. MAC's negative argues
    against the affirmative's latest answer, which its text names."""
    if side is None:
        return None, ""
    if setup.protocol.stance_mode == "fixed":
        stance: Answer = "yes" if side == "affirmative" else "no"
        return stance, _stance_text(setup, stance)
    if side == "affirmative":
        return None, _stance_text(setup, "affirmative")
    said = [t.answer for t in record.turns if t.side == "affirmative" and t.answer is not None]
    if said and said[-1] in OTHER:
        text = Template(_stance_text(setup, "negative")).safe_substitute(answer=said[-1])
        return OTHER[said[-1]], text
    return None, _stance_text(setup, "negative_unread")


def _stance_text(setup: DebateSetup, key: str) -> str:
    prompts = setup.prompts
    if key not in prompts.stances:
        mode = setup.protocol.stance_mode
        raise PromptError(
            f"the prompt set {prompts.name!r} has no [stances] {key} text, which stance_mode "
            f"{mode!r} needs: add it to {prompts.folder}/set.toml, or inherit the paper set"
        )
    return prompts.stances[key]


def _shown(turns: list[Turn]) -> list[int]:
    """What a debater, or the judge, is shown: every debater turn, and the judge's questions."""
    return [i for i, t in enumerate(turns) if t.agent != "judge" or t.followup]


async def debater_turn(
    setup: DebateSetup, question: Item, record: DebateRecord, speaker: str, side: Side | None
) -> Turn:
    prompts = setup.prompts
    stance, stance_text = stance_of(setup, record, side)
    if not record.turns:
        template = prompts["judge_initial"]
        prompt = template.fill(question=setup.task.show(question), stance=stance_text)
        version, seen, role = template.version, [], "initial"
    else:
        seen = _shown(record.turns)
        block, entry_version = history(setup, record.turns, seen, speaker, record.speaking_order)
        template = prompts["judge_debate"]
        prompt = template.fill(
            question=setup.task.show(question), history=block, stance=stance_text
        )
        version, role = f"{template.version}+{entry_version}", "argument"
    return await ask(
        setup,
        question,
        agent=speaker,
        round_=len(record.turns),  # the turn's position picks its seed, as in the crawdad protocol
        role=role,  # type: ignore[arg-type]
        prompt=prompt,
        version=version,
        seen=seen,
        stance=stance,
        side=side,
    )


async def judge_turn(
    setup: DebateSetup, question: Item, record: DebateRecord, round_: int, last: bool
) -> Turn:
    assert setup.judge is not None
    prompts = setup.prompts
    seen = _shown(record.turns)
    block, entry_version = history(setup, record.turns, seen, "judge", record.speaking_order)
    template = prompts["judge"]
    instruction = prompts.fragments["judge_last_round" if last else "judge_more_rounds"]
    prompt = template.fill(
        question=setup.task.show(question), history=block, round_instruction=instruction
    )
    turn, result = await respond(
        setup,
        setup.judge,
        agent="judge",
        round_=round_,
        role="verdict",
        prompt=prompt,
        version=f"{template.version}+{entry_version}",
        seen=seen,
        seed=request_seed(setup.seed, question.question_id, len(record.turns)),
        json_schema=judge_schema(last, len(record.speaking_order)),
        item=question,
    )
    await read_verdict(setup, turn, result, last, record.speaking_order)
    return turn


async def read_verdict(
    setup: DebateSetup, turn: Turn, result: ChatResult, last: bool, order: list[str]
) -> None:
    """The judge's JSON; failing that, the extractor's reading of its text (a verdict if it
    found an answer)."""
    model = setup.judge.spec.model if setup.judge else ""
    try:
        reply, note = parse_reply(turn.text.strip())
    except ValidationError:
        extraction, answer, confidence = await extract(setup, result)
        extraction.reason = "the judge's reply is not the schema's JSON; read by the extractor" + (
            f"; {extraction.reason}" if extraction.reason else ""
        )
        turn.extraction, turn.answer, turn.confidence = extraction, answer, confidence
        return
    turn.answer, turn.confidence = reply.answer, reply.confidence
    method: ExtractionMethod = (
        "strict" if note is None else "tolerant"
    )  # tolerant: read past a null `question`
    turn.extraction = Extraction(method=method, model=model, raw=turn.text)
    if reply.decision == "question" and not last and reply.question.strip():
        turn.followup = reply.question.strip()
        turn.followup_to = addressees(reply.to, order)


async def play(setup: DebateSetup, question: Item, record: DebateRecord) -> None:
    order = speaking_order(setup.seed, question.question_id, list(setup.agents))
    record.speaking_order = order
    record.first_speaker, record.second_speaker = order[0], order[1]
    record.judge = setup.judge.spec.model if setup.judge else None
    sides = sides_of(setup, question, order)
    rounds = setup.protocol.rounds
    speakers = order
    for round_ in range(rounds):
        for speaker in speakers:
            turn = await debater_turn(setup, question, record, speaker, sides.get(speaker))
            record.turns.append(turn)
            check_runaway(setup, turn)
        last = round_ == rounds - 1
        verdict = await judge_turn(setup, question, record, round_, last)
        record.turns.append(verdict)
        check_runaway(setup, verdict)
        debaters = [t for t in record.turns if t.agent != "judge"]
        record.agent_answers = {t.agent: t.answer for t in debaters}
        record.consensus = setup.task.agree(list(record.agent_answers.values()))
        if verdict.followup is None and (verdict.answer is not None or last):
            record.final_answer, record.final_confidence = verdict.answer, verdict.confidence
            record.end = "cap" if last else "verdict"
            return
        speakers = verdict.followup_to or order
