"""The CRAwDAD paper's protocol (section 3.2), for N >= 2 debaters.

Round 0: the first speaker answers the initial prompt (appendix A). Then the debaters speak in
turn, each seeing every earlier final text (never a reasoning trace), until the latest answers of
all debaters agree (early stop) or the cap on responses is reached. With two debaters the roles
are the paper's: the second speaker critiques, the first speaker defends (the authors' code gives
odd rounds the critique and even rounds the defence instruction). With more, a debater who has
spoken before defends and one who has not critiques.
"""

from __future__ import annotations

from crawdad.protocols.base import (
    DebateSetup,
    ask,
    check_runaway,
    history,
    speaking_order,
)
from crawdad.records import DebateRecord, Role, Turn
from crawdad.tasks.base import Item


def role_of(speaker: str, order: list[str], turns: list[Turn]) -> Role:
    if not turns:
        return "initial"
    if len(order) == 2:
        return "defence" if speaker == order[0] else "critique"
    return "defence" if any(t.agent == speaker for t in turns) else "critique"


def render(
    setup: DebateSetup,
    question: Item,
    turns: list[Turn],
    speaker: str,
    role: Role,
    order: list[str],
) -> tuple[str, str, list[int]]:
    """The prompt for the next turn, the template version it came from, and what it shows."""
    prompts = setup.prompts
    if role == "initial":
        template = prompts["initial"]
        return template.fill(question=setup.task.show(question)), template.version, []
    seen = list(range(len(turns)))
    block, entry_version = history(setup, turns, seen, speaker, order)
    template = prompts[role]
    return (
        template.fill(question=setup.task.show(question), history=block),
        f"{template.version}+{entry_version}",
        seen,
    )


def latest_answers(turns: list[Turn], order: list[str]) -> dict[str, str | None]:
    """Each debater's latest answer, in speaking order, for those who have spoken."""
    latest = {t.agent: t.answer for t in turns}
    return {n: latest[n] for n in order if n in latest}


async def play(setup: DebateSetup, question: Item, record: DebateRecord) -> None:
    order = speaking_order(setup.seed, question.question_id, list(setup.agents))
    record.speaking_order = order
    record.first_speaker, record.second_speaker = order[0], order[1]
    protocol = setup.protocol
    for round_ in range(protocol.max_turns):
        speaker = order[round_ % len(order)]
        role = role_of(speaker, order, record.turns)
        prompt, version, seen = render(setup, question, record.turns, speaker, role, order)
        turn = await ask(
            setup,
            question,
            agent=speaker,
            round_=round_,
            role=role,
            prompt=prompt,
            version=version,
            seen=seen,
        )
        record.turns.append(turn)
        check_runaway(setup, turn)
        latest = latest_answers(record.turns, order)
        record.agent_answers = latest
        record.consensus = len(latest) == len(order) and setup.task.agree(list(latest.values()))
        if record.consensus and protocol.early_stop:
            record.end = "consensus"
            break
    else:
        record.end = "cap"
    last = record.turns[-1]
    record.final_answer, record.final_confidence = last.answer, last.confidence
