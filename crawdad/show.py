"""One debate as text, laid out like the paper's appendix C."""

from __future__ import annotations

import textwrap

from crawdad.records import DebateRecord


def _answer(answer: str | None, confidence: float | None) -> str:
    conf = "?" if confidence is None else f"{confidence:g}"
    return f"Answer: {answer or 'not extracted'} (Confidence: {conf})"


def format_debate(record: DebateRecord, thinking: bool = False) -> str:
    head = [
        f"Question {record.question_id} ({record.desc_id or '-'}): rung {record.rung}, {record.query_type}, "
        f"{record.alignment}; gold answer: {record.gold}",
        f"First speaker: {record.first_speaker}. Ended by {record.end} after {len(record.turns)} responses; "
        f"final answer {record.final_answer or 'none'}"
        + (" (consensus)" if record.consensus else ""),
    ]
    if record.simulated:
        head.append("(simulated: served by crawdad's fake servers, not real models)")
    if record.error:
        head.append(f"ERROR: {record.error}")
    parts = ["\n".join(head)]
    for turn in record.turns:
        lines = [
            f"— Round {turn.round} by {turn.agent.upper()} ({turn.model}) —",
            "",
            _answer(turn.answer, turn.confidence),
        ]
        if turn.answer is None and turn.extraction and turn.extraction.reason:
            lines.append(f"(not extracted: {turn.extraction.reason})")
        lines.append(
            f"[{turn.role}; {turn.completion_tokens or '?'} tokens in {turn.seconds:.1f} s; stop: {turn.stop_reason}]"
        )
        if thinking and turn.thinking:
            lines += ["", "Thinking:", "", textwrap.indent(turn.thinking.strip(), "  ")]
        lines += ["", "Reasoning:", "", turn.text.strip() or "(no final text)"]
        parts.append("\n".join(lines))
    return "\n\n".join(parts) + "\n"
