"""An experiment's stopping decisions, recomputed from its run folders: each variant's outcomes in
the run's order, the settled prefix (every earlier question finished for the variant and the
baseline), the confidence sequences over it, the decision the rule reaches on them (the same
function the run used: `crawdad.run.scheduler.decisions_of`), and what the stopped run spent
against a full pass projected from the measured cost per question."""

from __future__ import annotations

from typing import Any

import pandas as pd

from crawdad.run.scheduler import (
    Outcome,
    budget_spent_of,
    decisions_of,
    rule_judge,
    settled_outcomes,
    variant_sequence,
)

__all__ = [
    "DECISION_COLUMNS",
    "SEQUENCE_COLUMNS",
    "SPENDING_COLUMNS",
    "decision_table",
    "outcomes_of",
    "sequence_frame",
    "spending_table",
]

SEQUENCE_COLUMNS = ["variant", "questions", "estimate", "lower", "upper"]
DECISION_COLUMNS = ["variant", "decision", "questions", "estimate", "lower", "upper", "settled"]
SPENDING_COLUMNS = [
    "variant",
    "questions_run",
    "selected",
    "requests",
    "tokens",
    "gpu_seconds",
    "full_requests",
    "full_tokens",
    "full_gpu_seconds",
    "saved_requests",
    "saved_tokens",
    "saved_gpu_seconds",
]


def outcomes_of(exp: Any) -> tuple[list[str], dict[str, dict[str, Outcome]]]:
    """The run's order (the baseline's selected ids, in order) and each variant's outcome per
    finished question (1 right, 0 wrong)."""
    by_name = {v.name: v for v in exp.variants}
    first = by_name.get(exp.baseline) or exp.variants[0]
    order = list(first.order)
    outcomes: dict[str, dict[str, Outcome]] = {}
    for v in exp.variants:
        q = v.questions[~v.questions["errored"]]
        outcomes[v.name] = {
            str(i): int(bool(c)) for i, c in zip(q["question_id"], q["correct"], strict=True)
        }
    return order, outcomes


def _rule(exp: Any) -> Any:
    from crawdad.run.experiment import stop_rule

    return stop_rule(exp.manifest.stop or {})


def sequence_frame(exp: Any) -> pd.DataFrame:
    """SEQUENCE_COLUMNS: each variant's confidence sequence over its settled prefix, the paired
    difference from the baseline (or the accuracy, for the baseline itself), one row per
    question counted."""
    rule = _rule(exp)
    order, outcomes = outcomes_of(exp)
    base = outcomes.get(exp.baseline) if exp.baseline else None
    compared = max(1, len(outcomes) - 1)
    frames = []
    for name, mine in outcomes.items():
        paired = base if name != exp.baseline else None
        a, b = settled_outcomes(order, mine, paired)
        if not a:
            continue
        seq = variant_sequence(a, b, len(order), rule, compared)
        frames.append(seq.assign(variant=name)[SEQUENCE_COLUMNS])
    if not frames:
        return pd.DataFrame(columns=SEQUENCE_COLUMNS)
    return pd.concat(frames, ignore_index=True)


def decision_table(exp: Any) -> pd.DataFrame:
    """DECISION_COLUMNS: each compared variant's decision (undecided where the rule never held;
    "budget spent" where, undecided, its records count the rule's `max_gpu_seconds`: the run
    stopped it there, as `crawdad.run.scheduler.budget_spent_of` says), the questions it used
    and its sequence at the stop (at the last settled question if none)."""
    rule = _rule(exp)
    order, outcomes = outcomes_of(exp)
    compared = max(1, len(outcomes) - 1)
    decided = decisions_of(order, outcomes, exp.baseline, rule_judge(rule, compared))
    spent = {v.name: float(v.questions["gpu_seconds"].sum()) for v in exp.variants}
    seqs = sequence_frame(exp)
    rows = []
    for name, decision in decided.items():
        seq = seqs[seqs["variant"] == name]
        settled = int(seq["questions"].max()) if not seq.empty else 0
        decision = budget_spent_of(decision, spent[name], rule.max_gpu_seconds, settled)
        if decision is not None and decision.outcome == "budget spent":
            used, at, what = settled, seq.tail(1), str(decision.outcome)
        elif decision is not None:
            used = int(decision.questions)
            at = seq[seq["questions"] == used]
            what = str(decision.outcome)
        else:
            used, at, what = settled, seq.tail(1), "undecided"
        row = at.iloc[0] if not at.empty else None
        rows.append(
            {
                "variant": name,
                "decision": what,
                "questions": used,
                "estimate": float(row["estimate"]) if row is not None else float("nan"),
                "lower": float(row["lower"]) if row is not None else float("nan"),
                "upper": float(row["upper"]) if row is not None else float("nan"),
                "settled": settled,
            }
        )
    return pd.DataFrame(rows, columns=DECISION_COLUMNS)


def spending_table(exp: Any) -> pd.DataFrame:
    """SPENDING_COLUMNS: what each variant spent (every debate run, those finished after its
    decision included) against a full pass over its selected questions, projected from its mean
    cost per question."""
    rows = []
    for v in exp.variants:
        q = v.questions
        n = len(q)
        selected = len(v.order) or n
        row: dict[str, Any] = {"variant": v.name, "questions_run": n, "selected": selected}
        for col in ("requests", "tokens", "gpu_seconds"):
            spent = float(q[col].sum())
            full = spent / n * selected if n else float("nan")
            if col != "gpu_seconds" and n:  # counts are whole, projected ones too
                spent, full = float(int(spent)), float(round(full))
            row[col] = spent if col == "gpu_seconds" else int(spent)
            row[f"full_{col}"] = full
            # a variant that ran every question saved nothing: 0, never a rounding's -0.000
            saved = full - spent
            row[f"saved_{col}"] = 0.0 if n == selected or abs(saved) < 1e-9 else saved
        rows.append(row)
    return pd.DataFrame(rows, columns=SPENDING_COLUMNS)
