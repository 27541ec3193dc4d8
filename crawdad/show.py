"""One debate as text, laid out like the paper's appendix C, for every protocol."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import TYPE_CHECKING

from crawdad.errors import CrawdadError
from crawdad.records import DebateRecord, Turn

if TYPE_CHECKING:
    from crawdad.run.store import RunStore


def _answer(answer: str | None, confidence: float | None) -> str:
    conf = "?" if confidence is None else f"{confidence:g}"
    return f"Answer: {answer or 'not extracted'} (Confidence: {conf})"


def _header(record: DebateRecord) -> list[str]:
    n = len(record.turns)
    final = record.final_answer or "none"
    if record.tie:
        final += " (tied vote" + (", broken by confidence)" if record.final_answer else ")")
    elif record.consensus and len(record.agents) > 1:  # one agent agrees with no one
        final += " (consensus)"
    rung = f"rung {record.rung}" if record.rung is not None else None
    about = ", ".join(str(p) for p in (rung, record.query_type, record.alignment) if p)
    head = [
        f"Question {record.question_id} ({record.desc_id or '-'})"
        + (f": {about}" if about else "")
        + f"; gold answer: {record.gold or 'none (no exact answer)'}",
        f"Protocol {record.protocol}, prompt set {record.prompt_set or 'crawdad-v1'}; agents: "
        + ", ".join(f"{name} ({model})" for name, model in record.agents.items())
        + (f"; judge: {record.judge}" if record.judge else ""),
    ]
    if record.protocol in ("crawdad", "judge") and record.first_speaker:
        order = " -> ".join(record.speaking_order or [record.first_speaker])
        head.append(f"Speaking order: {order}.")
    head.append(f"Ended by {record.end} after {n} responses; final answer {final}")
    if record.agent_answers and record.protocol in ("simultaneous", "solo"):
        head.append(
            "Each agent's "
            + ("majority" if record.protocol == "solo" else "last answer")
            + ": "
            + ", ".join(f"{a}={v or 'none'}" for a, v in record.agent_answers.items())
        )
    if record.simulated:
        head.append("(simulated: served by crawdad's fake servers, not real models)")
    if record.error:
        head.append(f"ERROR: {record.error}")
    return head


def _title(turn: Turn, protocol: str) -> str:
    who = f"{turn.agent.upper()} ({turn.model})"
    if turn.role == "verdict":
        return f"— Round {turn.round}: the JUDGE ({turn.model}) —"
    if protocol == "solo":
        return f"— Sample {turn.sample} by {who} —"
    label = f"— Round {turn.round} by {who}"
    if turn.side:
        label += f", {turn.side}"
    if turn.stance:
        label += f", arguing {turn.stance}"
    elif turn.side == "affirmative":
        label += ", its own answer"
    return label + " —"


def format_turn(turn: Turn, protocol: str, thinking: bool = False) -> str:
    lines = [_title(turn, protocol), "", _answer(turn.answer, turn.confidence)]
    if turn.answer is None and turn.extraction and turn.extraction.reason:
        lines.append(f"(not extracted: {turn.extraction.reason})")
    seen = "" if turn.seen is None else f"; shown turns {turn.seen or 'none'}"
    lines.append(
        f"[{turn.role}; {turn.completion_tokens or '?'} tokens in {turn.seconds:.1f} s; "
        f"stop: {turn.stop_reason}{seen}]"
    )
    if thinking and turn.thinking:
        lines += ["", "Thinking:", "", textwrap.indent(turn.thinking.strip(), "  ")]
    if turn.role == "verdict":
        to = f" (to {', '.join(turn.followup_to)})" if turn.followup_to else ""
        lines += ["", f"Follow-up question{to}:" if turn.followup else "Verdict:", ""]
        lines.append(turn.followup or turn.text.strip() or "(no final text)")
    else:
        lines += ["", "Reasoning:", "", turn.text.strip() or "(no final text)"]
    return "\n".join(lines)


NO_TEXT = "(the question's text is not in the record: pass --data, the data the run read)"


def format_debate(record: DebateRecord, thinking: bool = False, question: str | None = None) -> str:
    """The debate as text; `question`: the question as the models saw it (background, given
    information and the question; records do not hold it, the run's data does)."""
    parts = ["\n".join(_header(record)), textwrap.indent((question or NO_TEXT).strip(), "  ")]
    parts += [format_turn(t, record.protocol, thinking) for t in record.turns]
    return "\n\n".join(parts) + "\n"


def question_text(store: RunStore, question_id: str, data: Path | None = None) -> str | None:
    """The question as the models saw it, from `data` or the data the run's manifest names
    (None where neither can be read: a run made elsewhere, data moved)."""
    from crawdad.data.questions import load_cladder

    try:
        info = store.read_manifest().dataset
    except CrawdadError:
        info = None
    source = data or (Path(info.source) if info is not None else None)
    if source is None:
        return None
    questions_file = info.selection.get("questions_file") if info is not None else None
    try:
        dataset = load_cladder(source, questions_file, require_answers=False)
    except (CrawdadError, OSError):
        if data is not None:
            raise
        return None
    question = next((q for q in dataset.questions if str(q.question_id) == question_id), None)
    return question.block if question is not None else None
