"""Experiment metrics: the variants side by side (accuracy with CIs, cost per question) and paired
comparisons with the baseline. Pure functions of the frames `analysis.experiment_folder` builds
(QUESTION_COLUMNS). Self-consistency curves are in `self_consistency`.

Rules: a question counts for a comparison only if every variant in it finished it (no error);
the rest are left out and counted. A question without an exact answer (a table of one's own) is
left out of every accuracy and comparison, and counted (`crawdad.scoring.scored`). An unextracted or tied final answer counts as wrong. Accuracy
CIs are Wilson score intervals; paired differences have Newcombe's score interval for paired
proportions (neither collapses to a point at 0%, 100% or no discordant pair); McNemar tests are
exact.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from crawdad.analysis.metrics._stats import (
    mcnemar_exact,
    newcombe_paired_difference,
    wilson_proportion,
)
from crawdad.analysis.metrics.accuracy import ALIGNMENT_LABELS, RUNG_LABELS

from crawdad.scoring.scored import accuracy, has_answer

__all__ = [
    "COST_METRICS",
    "PAIRED_COLUMNS",
    "accuracy_rows",
    "common_questions",
    "cost_rows",
    "coverage",
    "left_out_note",
    "paired_comparisons",
]

ALIGNMENT_NAMES = {
    "commonsense": "commonsensical",
    "anticommonsense": "anti-commonsensical",
    "nonsense": "nonsensical",
}
assert set(ALIGNMENT_NAMES) == set(ALIGNMENT_LABELS)


def _finished(q: pd.DataFrame, variant: str) -> set[str]:
    rows = q[(q["variant"] == variant) & ~q["errored"]]
    return set(rows["question_id"])


def common_questions(q: pd.DataFrame, variants: Sequence[str]) -> set[str]:
    """Questions every one of `variants` finished."""
    sets = [_finished(q, v) for v in variants]
    return set.intersection(*sets) if sets else set()


def coverage(q: pd.DataFrame, variants: Sequence[str], universe: set[str]) -> pd.DataFrame:
    """Per variant: questions selected (in any variant), finished, errored, not run yet."""
    rows = []
    for v in variants:
        mine = q[q["variant"] == v]
        recorded = set(mine["question_id"])
        rows.append(
            {
                "variant": v,
                "questions": len(universe),
                "finished": int((~mine["errored"]).sum()),
                "errored": int(mine["errored"].sum()),
                "unfinished": len(universe - recorded),
            }
        )
    return pd.DataFrame(rows)


def left_out_note(q: pd.DataFrame, variants: Sequence[str], universe: set[str]) -> str:
    parts = []
    for v in variants:
        mine = q[q["variant"] == v]
        errored = int(mine["errored"].sum())
        unfinished = len(universe - set(mine["question_id"]))
        if errored:
            parts.append(f"{errored} errored in {v}")
        if unfinished:
            parts.append(f"{unfinished} unfinished in {v}")
    return "; ".join(parts)


# --- accuracy and cost, one column per variant ----------------------------------------------------


def _groups(q: pd.DataFrame) -> list[tuple[str, str, pd.Series]]:
    """(dimension, group label, mask) of overall, each rung, alignment and query type."""
    out: list[tuple[str, str, pd.Series]] = [("overall", "all", pd.Series(True, index=q.index))]
    # Items of other tasks than CLadder's questions have no rung and no query type.
    for r in sorted(q["rung"].dropna().unique()):
        out.append(("rung", RUNG_LABELS.get(int(r), f"Rung {r}"), q["rung"] == r))
    for a in ALIGNMENT_NAMES:
        if (q["alignment"] == a).any():
            out.append(("alignment", ALIGNMENT_NAMES[a], q["alignment"] == a))
    for t in sorted(q["query_type"].dropna().unique()):
        out.append(("query_type", str(t), q["query_type"] == t))
    return out


ACCURACY_COLUMNS = ["variant", "dimension", "group", "n", "n_correct", "acc", "ci_lo", "ci_hi"]
ACCURACY_COLUMNS += ["unscored"]


def accuracy_rows(q: pd.DataFrame, variants: Sequence[str], keep: set[str]) -> pd.DataFrame:
    """Accuracy of the final answer with its Wilson CI, per variant, overall and by rung,
    alignment and query type, over the questions `keep`: `n` of them scored, `unscored` without
    an exact answer left out (the one rule, `crawdad.scoring.scored`)."""
    rows = []
    for v in variants:
        mine = q[(q["variant"] == v) & q["question_id"].isin(keep)]
        for dim, group, mask in _groups(mine):
            sub = mine[mask]
            acc = accuracy(
                int(c) if has_answer(g) else None
                for c, g in zip(sub["correct"], sub["gold"], strict=True)
            )
            lo, hi = wilson_proportion(acc.correct, acc.scored)
            rows.append(
                {
                    "variant": v,
                    "dimension": dim,
                    "group": group,
                    "n": acc.scored,
                    "n_correct": acc.correct,
                    "acc": acc.value if acc.value is not None else float("nan"),
                    "ci_lo": lo,
                    "ci_hi": hi,
                    "unscored": acc.unscored,
                }
            )
    return pd.DataFrame(rows, columns=ACCURACY_COLUMNS)


COST_METRICS = {
    "requests": "requests / question (generations + extractions)",
    "tokens_debaters": "completion tokens / question: debaters",
    "tokens_judge": "completion tokens / question: judge",
    "tokens_extractor": "completion tokens / question: extractor",
    "tokens": "completion tokens / question: all",
    "gpu_seconds": "GPU seconds / question",
    "extractor_seconds": "of which extractor seconds (wall)",
}


def _time_source(server: int, turns: int) -> str:
    if turns == 0 or server == turns:
        return "server-reported"
    if server == 0:
        return "wall (the server reports no time)"
    return f"server-reported for {100 * server / turns:.0f}% of turns, wall for the rest"


def cost_rows(q: pd.DataFrame, variants: Sequence[str], keep: set[str]) -> pd.DataFrame:
    """Mean cost per question of each variant over the questions `keep` (long: variant, metric,
    value, note)."""
    rows = []
    for v in variants:
        mine = q[(q["variant"] == v) & q["question_id"].isin(keep)]
        for col, label in COST_METRICS.items():
            value = float(mine[col].mean()) if len(mine) else float("nan")
            rows.append({"variant": v, "metric": label, "value": value, "note": ""})
        turns = int(mine["turns"].sum())
        rows.append(
            {
                "variant": v,
                "metric": "GPU seconds measured as",
                "value": float("nan"),
                "note": _time_source(int(mine["turns_server_timed"].sum()), turns),
            }
        )
        rows.append(
            {
                "variant": v,
                "metric": "turns shared with another variant (%)",
                "value": 100 * mine["shared_turns"].sum() / turns if turns else float("nan"),
                "note": "",
            }
        )
        missing = int(mine["turns_without_tokens"].sum())
        rows.append(
            {
                "variant": v,
                "metric": "turns without a token count (counted as 0)",
                "value": float(missing),
                "note": "",
            }
        )
    return pd.DataFrame(rows, columns=["variant", "metric", "value", "note"])


# --- paired comparisons with the baseline -------------------------------------------------------


def _pair_row(base: pd.Series, var: pd.Series) -> dict[str, float | int]:
    """base, var: correctness (bool) of the same questions, same order."""
    b, v = base.to_numpy(bool), var.to_numpy(bool)
    both, only_b, only_v = int((b & v).sum()), int((b & ~v).sum()), int((~b & v).sum())
    neither = len(b) - both - only_b - only_v
    n = len(b)
    lo, hi = newcombe_paired_difference(both, only_b, only_v, neither)
    return {
        "n": n,
        "baseline_acc": b.mean() if n else float("nan"),
        "variant_acc": v.mean() if n else float("nan"),
        "diff": (only_v - only_b) / n if n else float("nan"),
        "ci_lo": lo,
        "ci_hi": hi,
        "only_baseline": only_b,
        "only_variant": only_v,
        "p_value": mcnemar_exact(only_b, only_v),
    }


PAIRED_COLUMNS = [
    "variant",
    "baseline",
    "group",
    "n",
    "left_out",
    "left_out_note",
    "baseline_acc",
    "variant_acc",
    "diff",
    "ci_lo",
    "ci_hi",
    "only_baseline",
    "only_variant",
    "p_value",
]


def paired_comparisons(
    q: pd.DataFrame, baseline: str, variants: Sequence[str], universe: set[str]
) -> pd.DataFrame:
    """Each variant against the baseline on the questions both finished, overall and by rung:
    difference in accuracy (variant - baseline) with Newcombe's paired score CI and the exact
    McNemar p-value. `only_baseline` / `only_variant`: questions only one of them got right."""
    rows = []
    base = q[q["variant"] == baseline].set_index("question_id")
    for v in variants:
        if v == baseline:
            continue
        keep = sorted(common_questions(q, [baseline, v]))
        var = q[q["variant"] == v].set_index("question_id")
        b, w = base.loc[keep], var.loc[keep]
        note = left_out_note(q, [baseline, v], universe)
        rows.append(
            {
                "variant": v,
                "baseline": baseline,
                "group": "all",
                "left_out": len(universe) - len(keep),
                "left_out_note": note,
                **_pair_row(b["correct"], w["correct"]),
            }
        )
        for r in sorted(b["rung"].dropna().unique()):  # other tasks' items have no rung
            m = (b["rung"] == r).to_numpy()
            rows.append(
                {
                    "variant": v,
                    "baseline": baseline,
                    "group": RUNG_LABELS.get(int(r), f"Rung {r}"),
                    "left_out": np.nan,
                    "left_out_note": "",
                    **_pair_row(b["correct"][m], w["correct"][m]),
                }
            )
    return pd.DataFrame(rows, columns=PAIRED_COLUMNS)
