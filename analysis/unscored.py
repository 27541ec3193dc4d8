"""Debates over questions without an exact answer (a table of one's own, `crawdad data own`):
what was answered, how the agents agreed and which tools they called, and which of the report's
scores need an exact answer and so are not available for them. Nothing here is scored."""

from __future__ import annotations

import pandas as pd
from crawdad.analysis.load import Run
from crawdad.analysis.section import Block, Section, Table

from crawdad.records import ToolCall

HEADING = "Questions without an exact answer"

# What the report computes only against an exact answer (each run's sections, the task's).
NEEDS_AN_ANSWER = (
    "accuracy before and after debate (Table 1) and its CIs",
    "the McNemar test of initial against final answers",
    "accuracy had the debate stopped earlier, by query type and by gold answer",
    "persuasion outcomes (which side was right)",
    "confidence by correctness, confidently wrong answers corrected",
    "calibration (ECE, Brier score, reliability diagrams)",
    "the published figures beside the run's",
    "the data section's scores against the exact answer and the perfect estimator",
    "step scoring of the tools' calls",
)

ANSWER_COLUMNS = [
    "question_id",
    "table",
    "initial_answer",
    "final_answer",
    "final_confidence",
    "consensus",
    "n_turns",
    "end",
    "agent_answers",
    "tools_called",
    "tool_values",
    "error",
]


def _values(calls: list[ToolCall]) -> str:
    """What the tools computed: each value a call returned, with how (an estimate's method and
    adjustment set), in call order."""
    out = []
    for c in calls:
        result = c.result if isinstance(c.result, dict) else {}
        value = result.get("value")
        if not isinstance(value, int | float) or isinstance(value, bool):
            continue
        how = [str(result["method"])] if result.get("method") else []
        if result.get("adjustment"):
            how.append("adjusting for " + ", ".join(map(str, result["adjustment"])))
        label = str(result.get("effect") or c.name)
        out.append(f"{label} = {value:.4g}" + (f" ({'; '.join(how)})" if how else ""))
    return "; ".join(out)


def _per_question(run: Run) -> pd.DataFrame:
    """One row per debate: its answers and what its agents called."""
    records = {str(r.question_id): r for r in run.records()}
    rows = []
    for d in run.debates.itertuples(index=False):
        rec = records.get(str(d.question_id))
        made = [c for t in rec.turns for c in t.tool_calls] if rec is not None else []
        calls = [c.name for c in made]
        rows.append(
            {
                "question_id": d.question_id,
                "table": (rec.item.get("table") if rec is not None else None),
                "initial_answer": d.initial_answer,
                "final_answer": d.final_answer,
                "final_confidence": d.final_confidence,
                # one agent agrees with no one: no consensus to show (empty)
                "consensus": bool(d.consensus) if len(d.agents) > 1 else None,
                "n_turns": int(d.n_turns),
                "end": d.end,
                "agent_answers": "; ".join(f"{a}: {x or '-'}" for a, x in d.agent_answers),
                "tools_called": ", ".join(f"{n} x{calls.count(n)}" for n in sorted(set(calls))),
                "tool_values": _values(made),
                "error": d.error,
            }
        )
    return pd.DataFrame(rows, columns=ANSWER_COLUMNS)


def _answer_counts(debates: pd.DataFrame) -> pd.DataFrame:
    """The final answers counted, errored debates apart."""
    ok = debates[~debates["errored"]]
    answers = ok["final_answer"].fillna("unread").value_counts()
    rows = [{"final_answer": a, "debates": int(answers.get(a, 0))} for a in sorted(answers.index)]
    if errored := int(debates["errored"].sum()):
        rows.append({"final_answer": "errored", "debates": errored})
    return pd.DataFrame(rows, columns=["final_answer", "debates"])


def unscored_section(run: Run) -> Section:
    """The section of one run's debates over questions without an exact answer (`run` holds
    only those: `Run.unscored()`)."""
    d = run.debates
    ok = d[~d["errored"]]
    agreed = int(ok["consensus"].sum())
    several = any(len(agents) > 1 for agents in d["agents"])
    intro = (
        f"{len(d)} debate{'s' if len(d) != 1 else ''} over questions that have no exact answer (`gold` is null: a table of "
        "one's own). They are answered, never scored: no table of this report that compares an "
        "answer with the truth counts them. Not available for them, because each needs an "
        "exact answer: " + "; ".join(NEEDS_AN_ANSWER) + "."
    )
    blocks: list[Block] = [
        intro,
        Table(
            "unscored_answers",
            _answer_counts(d),
            "Final answers",
            f"The agents agreed in {agreed} of {len(ok)} finished debates."
            if several
            else f"{len(ok)} finished, one agent each.",
            fold="never",
        ),
        Table(
            "unscored_debates",
            _per_question(run),
            "Each question's answers",
            "Initial: the first speaker's first answer; final: the protocol's answer; agent "
            "answers: each agent's last; tools: the calls made in the debate, and the values "
            "they computed.",
        ),
    ]
    return Section(HEADING, blocks)


__all__ = ["NEEDS_AN_ANSWER", "unscored_section"]
