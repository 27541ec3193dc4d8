"""The grader model's verdicts (`[grader]`, paper 004's model-graded evaluation) beside the
exact scoring: per run, the accuracy each gives on the same debates, how often they agree
(and Cohen's kappa), and the debates the grader gave no verdict on. Pure functions over
records, and the report's section."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
from crawdad.analysis.formatting import fmt_pct
from crawdad.analysis.section import Section, Table

from crawdad.records import DebateRecord


def _kappa(pairs: list[tuple[bool, bool]]) -> float:
    """Cohen's kappa of two yes/no raters (nan when chance agreement is total)."""
    n = len(pairs)
    if not n:
        return float("nan")
    seen = sum(a == b for a, b in pairs) / n
    pa, pb = sum(a for a, _ in pairs) / n, sum(b for _, b in pairs) / n
    chance = pa * pb + (1 - pa) * (1 - pb)
    return float("nan") if chance == 1 else (seen - chance) / (1 - chance)


def grading_table(named_runs: Sequence[tuple[str, list[DebateRecord]]]) -> pd.DataFrame:
    """One row per run with graded debates: `n` graded, `n_verdict` with a verdict read,
    `exact_acc` (final answer = label) and `grader_acc` ("Y") over those, `agreement` and
    `kappa` between the two, and `no_verdict` (unreadable reply or failed request)."""
    rows = []
    for label, records in named_runs:
        graded = [r for r in records if r.ok and r.grading is not None]
        if not graded:
            continue
        pairs = [
            (r.final_answer == r.gold, bool(r.grading.verdict))
            for r in graded
            if r.grading is not None and r.grading.verdict is not None
        ]
        n = len(pairs)
        rows.append(
            {
                "run": label,
                "grader": graded[0].grading.model if graded[0].grading else "",
                "n": len(graded),
                "n_verdict": n,
                "exact_acc": sum(e for e, _ in pairs) / n if n else float("nan"),
                "grader_acc": sum(g for _, g in pairs) / n if n else float("nan"),
                "agreement": sum(e == g for e, g in pairs) / n if n else float("nan"),
                "kappa": _kappa(pairs),
                "no_verdict": len(graded) - n,
            }
        )
    return pd.DataFrame(rows)


def grading_section(named_runs: Sequence[tuple[str, list[DebateRecord]]]) -> list[Section]:
    """The report's section (none when no run was graded)."""
    table = grading_table(named_runs)
    if table.empty:
        return []
    shown = pd.DataFrame(
        {
            "run": table["run"],
            "grader": table["grader"],
            "graded": table["n"],
            "exact accuracy %": [fmt_pct(x) for x in table["exact_acc"]],
            "grader accuracy %": [fmt_pct(x) for x in table["grader_acc"]],
            "agreement %": [fmt_pct(x) for x in table["agreement"]],
            "kappa": ["-" if pd.isna(k) else f"{k:.2f}" for k in table["kappa"]],
            "no verdict": table["no_verdict"],
        }
    )
    line = (
        "A grader model (`[grader]`) read each finished debate's final response beside the "
        "question and the ideal answer (the label) and said whether they match, as paper 004 "
        "grades its answers (OpenAI evals' closed_qa template). Exact accuracy is crawdad's "
        "own scoring (the extracted final answer equals the label) on the same debates; "
        "agreement is how often the two scorings agree, kappa corrects it for chance. Debates "
        "with no verdict (an unreadable reply, a failed request) are left out of the rates."
    )
    table_block = Table("grading", table, line=line, shown=shown, fold="never")
    return [Section("Grader model against exact scoring", [table_block], folder="grading")]
