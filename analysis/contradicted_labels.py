"""Debates on questions whose CLadder label the exact causal audit contradicts: left out or marked.

The audit file is the JSON that `crawdad data audit DATA --json FILE` writes. "leave-out" drops
those debates (and their turns) before any table is computed; "mark" keeps them and adds a
`label_contradicted` column. Either way the run's warnings (printed in the report) say how many.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Literal

from crawdad.analysis.load import Run

from crawdad.data.label_audit import AuditFile, contradicted_ids, read_audit

Mode = Literal["leave-out", "mark"]


def apply_audit(
    runs: Sequence[Run], audit: AuditFile | Path, mode: Mode = "leave-out"
) -> list[Run]:
    """The runs with debates on contradicted questions left out or marked."""
    if not isinstance(audit, AuditFile):
        audit = read_audit(Path(audit))
    bad = contradicted_ids(audit)
    exact = {r.question_id: r.exact_answer for r in audit.rows}
    out = []
    for run in runs:
        hit = run.debates["question_id"].astype(str).isin(bad)
        n = int(hit.sum())
        where = f"{n} debate(s) on questions whose CLadder label the exact causal audit contradicts"
        if mode == "leave-out":
            keep_ids = set(run.debates.loc[~hit, "question_id"].astype(str))
            debates = run.debates.loc[~hit].reset_index(drop=True)
            turns = run.turns.loc[run.turns["question_id"].astype(str).isin(keep_ids)]
            note = (
                f"{where} were left out ({len(bad)} such questions in the audit of {audit.source})"
            )
            out.append(
                replace(run, debates=debates, turns=turns.reset_index(drop=True),
                        warnings=[*run.warnings, note])
            )  # fmt: skip
        else:
            debates = run.debates.assign(label_contradicted=hit.to_numpy())
            if n:
                sub = debates.loc[hit]
                ids = sub["question_id"].astype(str)
                right_stored = float((sub["final_answer"] == sub["gold"]).mean())
                right_exact = float((sub["final_answer"] == ids.map(exact)).mean())
                note = (
                    f"{where} are kept and marked (column label_contradicted): final answers match "
                    f"the stored label in {right_stored:.0%} of them, the exact answer in "
                    f"{right_exact:.0%}"
                )
            else:
                note = f"{where}: none in this run"
            out.append(replace(run, debates=debates, warnings=[*run.warnings, note]))
    return out
