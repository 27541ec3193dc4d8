"""Tool use per model and rung: how often the calculator was offered and called, how many calls
were malformed (counted apart, as paper 004 does) or refused by the calculator, and accuracy
with and without the tool across an experiment's variants; per tool (the data tools, the
pipeline's own calls), parse failures apart from wrong calls. Pure functions over records."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import pandas as pd

from crawdad.records import DebateRecord
from crawdad.scoring.scored import outcome

COLUMNS = [
    "model",
    "rung",
    "turns",  # turns that could call the tool
    "calling_turns",  # of them, turns that called it at least once
    "calls",
    "malformed",  # calls that could not be read (not JSON, not of the schema)
    "refused",  # readable calls the calculator answered with an error (missing numbers...)
    "calls_per_turn",
    "text_mode_turns",
    # With step scoring on: calls scored, and of them those with the question's graph / numbers.
    "scored_calls",
    "right_graph",
    "right_numbers",
]


def tool_use(records: Iterable[DebateRecord]) -> pd.DataFrame:
    """One row per (model, rung) over the turns that had a tool."""
    rows = []
    for record in records:
        for turn in record.turns:
            if turn.tool_mode is None:
                continue
            calls = turn.tool_calls
            rows.append(
                {
                    "model": turn.model,
                    "rung": record.rung,
                    "turns": 1,
                    "calling_turns": int(bool(calls)),
                    "calls": len(calls),
                    "malformed": sum(c.malformed for c in calls),
                    "refused": sum(bool(c.error) and not c.malformed for c in calls),
                    "text_mode_turns": int(turn.tool_mode == "text"),
                    "scored_calls": sum(c.scores is not None for c in calls),
                    "right_graph": sum(bool(c.scores and c.scores.graph) for c in calls),
                    "right_numbers": sum(bool(c.scores and c.scores.numbers) for c in calls),
                }
            )
    if not rows:
        return pd.DataFrame(columns=COLUMNS)
    table = pd.DataFrame(rows).groupby(["model", "rung"], as_index=False).sum()
    table["calls_per_turn"] = table["calls"] / table["turns"]
    return table[COLUMNS]


def accuracy_with_and_without(variants: Mapping[str, Iterable[DebateRecord]]) -> pd.DataFrame:
    """Final accuracy per variant and rung, with whether the variant's debaters had the tool
    and the share of its debates in which the tool was called; over the debates with an exact
    answer (the one rule: `crawdad.scoring.scored`)."""
    rows = []
    for name, records in variants.items():
        for r in records:
            if not r.ok or outcome(r.gold, r.final_answer) is None:
                continue
            rows.append(
                {
                    "variant": name,
                    "rung": r.rung,
                    "correct": outcome(r.gold, r.final_answer) == 1,
                    "tool": any(t.tool_mode is not None for t in r.turns),
                    "called": any(t.tool_calls for t in r.turns),
                }
            )
    if not rows:
        return pd.DataFrame(columns=["variant", "rung", "debates", "accuracy", "tool", "called"])
    frame = pd.DataFrame(rows)
    return (
        frame.groupby(["variant", "rung"], as_index=False)
        .agg(
            debates=("correct", "size"),
            accuracy=("correct", "mean"),
            tool=("tool", "any"),
            called=("called", "mean"),
        )
        .sort_values(["variant", "rung"], ignore_index=True)
    )


BY_TOOL_COLUMNS = [
    "run",
    "tool",
    "questions",  # questions of the run
    "questions_calling",  # of them, questions with at least one call of this tool
    "calls",
    "calls_per_question",
    "malformed",  # parse failures: not JSON, not of the schema, no such tool
    "wrong",  # read, but the tool answered with an error (a limit, a column the table lacks...)
    "answered",
    "pipeline_calls",  # made by crawdad itself on the pipeline protocol's task (step 2)
]


def calls_by_tool(runs: Mapping[str, Iterable[DebateRecord]]) -> pd.DataFrame:
    """One row per (run, tool name): how often each tool was called and how its calls ended,
    parse failures apart from wrong calls, counting the models' calls in their turns and the
    calls the pipeline protocol made (whatever the tool: the calculator or the data tools)."""
    rows = []
    for label, records in runs.items():
        records = list(records)
        per_tool: dict[str, dict[str, int]] = {}
        calling: dict[str, set[str]] = {}
        for r in records:
            calls = [c for t in r.turns for c in t.tool_calls]
            calls += [c for p in r.pipeline for c in (p.call, *p.more_calls) if c is not None]
            for c in calls:
                name = c.name or "(no name)"
                row = per_tool.setdefault(
                    name, {"calls": 0, "malformed": 0, "wrong": 0, "answered": 0, "pipe": 0}
                )
                row["calls"] += 1
                row["malformed"] += int(c.malformed)
                row["wrong"] += int(bool(c.error) and not c.malformed)
                row["answered"] += int(c.error is None)
                row["pipe"] += int(c.mode == "pipeline")
                calling.setdefault(name, set()).add(str(r.question_id))
        for name in sorted(per_tool):
            row = per_tool[name]
            rows.append(
                {
                    "run": label,
                    "tool": name,
                    "questions": len(records),
                    "questions_calling": len(calling[name]),
                    "calls": row["calls"],
                    "calls_per_question": row["calls"] / len(records) if records else 0.0,
                    "malformed": row["malformed"],
                    "wrong": row["wrong"],
                    "answered": row["answered"],
                    "pipeline_calls": row["pipe"],
                }
            )
    return (
        pd.DataFrame(rows, columns=BY_TOOL_COLUMNS)
        if rows
        else pd.DataFrame(columns=BY_TOOL_COLUMNS)
    )
