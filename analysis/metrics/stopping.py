"""An experiment's stopping decisions, recomputed from its run folders: each variant's outcomes in
the run's order, the settled prefix (every earlier question finished for the variant and the
baseline), the confidence sequences over it, the decision the rule reaches on them (the same
function the run used: `crawdad.run.scheduler.decisions_of`), and what the stopped run spent
against a full pass projected from the measured cost per question."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from crawdad.run.scheduler import (
    Outcome,
    budget_spent_of,
    decisions_of,
    pool_of,
    prefix_decision,
    rule_judge,
    settled_prefix,
    undecided_reason,
)
from crawdad.scoring.scored import outcome
from crawdad.stopping.claims import UNKNOWN_POOL
from crawdad.stopping.decide import CONTRADICTED, target_words

__all__ = [
    "DECISION_COLUMNS",
    "SEQUENCE_COLUMNS",
    "SPENDING_COLUMNS",
    "baseline_frame",
    "decision_table",
    "experiment_pool",
    "outcomes_of",
    "sequence_frame",
    "spending_table",
    "stopped_runs",
]

SEQUENCE_COLUMNS = [
    "variant",
    "questions",
    "estimate",
    "lower",
    "upper",
    "contradicted",
    "target",
    "about",
]
DECISION_COLUMNS = [
    "variant",
    "decision",
    "questions",
    "estimate",
    "lower",
    "upper",
    "settled",
    "unscored",
    "target",
    "about",
    "reason",
]
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
    finished question (1 right, 0 wrong, None: no exact answer, left out as the run leaves it
    out: `crawdad.scoring.scored.outcome`)."""
    by_name = {v.name: v for v in exp.variants}
    first = by_name.get(exp.baseline) or exp.variants[0]
    order = list(first.order)
    outcomes: dict[str, dict[str, Outcome]] = {}
    for v in exp.variants:
        q = v.questions[~v.questions["errored"]]
        outcomes[v.name] = {
            str(i): outcome(gold, answer)
            for i, gold, answer in zip(q["question_id"], q["gold"], q["final_answer"], strict=True)
        }
    return order, outcomes


def experiment_pool(exp: Any) -> str:
    """The pool the experiment's questions were drawn from, in words (the baseline's run
    manifest: `crawdad.run.scheduler.pool_of`); "" where no manifest says."""
    by_name = {v.name: v for v in exp.variants}
    first = by_name.get(exp.baseline) or (exp.variants[0] if exp.variants else None)
    manifest = getattr(getattr(first, "run", None), "manifest", None)
    return pool_of(manifest.dataset) if manifest is not None else ""


def _rule(exp: Any) -> Any:
    from crawdad.run.experiment import recorded_rule

    return recorded_rule(exp.manifest.stop or {})


def _frame(seq: pd.DataFrame, name: str, target: str, kind: str, pool: str) -> pd.DataFrame:
    about = target_words(target, "difference" if kind == "difference" else "accuracy", pool)
    return seq.assign(variant=name, target=target, about=about)[SEQUENCE_COLUMNS]


def sequence_frame(exp: Any) -> pd.DataFrame:
    """SEQUENCE_COLUMNS: each compared variant's confidence sequence for its paired difference
    from the baseline over its settled prefix, one row per scored question counted; `target`
    and `about` say what it is about. The baseline's own accuracy is `baseline_frame`'s."""
    rule = _rule(exp)
    order, outcomes = outcomes_of(exp)
    base = outcomes.get(exp.baseline) if exp.baseline else None
    compared = max(1, len(outcomes) - 1)
    pool = experiment_pool(exp) or UNKNOWN_POOL
    frames = []
    for name, mine in outcomes.items():
        if name == exp.baseline:
            continue
        prefix = settled_prefix(order, mine, base)
        if not prefix.a:
            continue
        seq, _ = prefix_decision(prefix, rule, compared)
        frames.append(_frame(seq, name, rule.target, "difference", pool))
    if not frames:
        return pd.DataFrame(columns=SEQUENCE_COLUMNS)
    return pd.concat(frames, ignore_index=True)


def baseline_frame(exp: Any) -> pd.DataFrame:
    """SEQUENCE_COLUMNS: the baseline's own accuracy sequence over its settled prefix (at the
    alpha the variants' sequences share): its accuracy, not a difference, and apart from them."""
    rule = _rule(exp)
    order, outcomes = outcomes_of(exp)
    mine = outcomes.get(exp.baseline) if exp.baseline else None
    if mine is None:
        return pd.DataFrame(columns=SEQUENCE_COLUMNS)
    prefix = settled_prefix(order, mine, None)
    if not prefix.a:
        return pd.DataFrame(columns=SEQUENCE_COLUMNS)
    seq, _ = prefix_decision(prefix, rule, max(1, len(outcomes) - 1))
    pool = experiment_pool(exp) or UNKNOWN_POOL
    return _frame(seq, str(exp.baseline), rule.target, "accuracy", pool).reset_index(drop=True)


def decision_table(exp: Any) -> pd.DataFrame:
    """DECISION_COLUMNS: each compared variant's decision (undecided where the rule never held;
    "budget spent" where, undecided, its records count the rule's `max_gpu_seconds`: the run
    stopped it there, as `crawdad.run.scheduler.budget_spent_of` says; "contradicted" where its
    sequence ran empty first), the scored questions it used, its sequence at the stop (at the
    last settled question if none; NaN bounds when contradicted), the scored questions settled,
    the settled questions without an exact answer (left out), the target and what it means in
    words, and `reason`: why an undecided variant is undecided, or what a contradiction means."""
    rule = _rule(exp)
    order, outcomes = outcomes_of(exp)
    compared = max(1, len(outcomes) - 1)
    decided = decisions_of(order, outcomes, exp.baseline, rule_judge(rule, compared))
    base = outcomes.get(exp.baseline) if exp.baseline else None
    spent = {v.name: float(v.questions["gpu_seconds"].sum()) for v in exp.variants}
    seqs = sequence_frame(exp)
    pool = experiment_pool(exp) or UNKNOWN_POOL
    rows = []
    for name, decision in decided.items():
        prefix = settled_prefix(order, outcomes[name], base)
        seq = seqs[seqs["variant"] == name]
        settled = len(prefix.a)
        decision = budget_spent_of(decision, spent[name], rule.max_gpu_seconds, settled)
        reason = ""
        if decision is not None and decision.outcome == "budget spent":
            used, at, what = settled, seq.tail(1), str(decision.outcome)
            reason = f"its debates counted max_gpu_seconds = {rule.max_gpu_seconds:g}"
        elif decision is not None:
            used = int(decision.questions)
            at = seq[seq["questions"] == used]
            what = str(decision.outcome)
            reason = CONTRADICTED if what == "contradicted" else ""
        else:
            used, at, what = settled, seq.tail(1), "undecided"
            reason = undecided_reason(prefix, rule.max_questions)
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
                "unscored": prefix.unscored,
                "target": rule.target,
                "about": target_words(rule.target, pool=pool),
                "reason": reason,
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


def _rule_over(run: Any) -> dict[str, Any] | None:
    """The stopping rule a run ran under: its own (`--stop`), or its experiment's `[stop]` (a
    variant's folder lies in the experiment's)."""
    from crawdad.errors import CrawdadError
    from crawdad.run.store import is_experiment, read_experiment

    manifest = run.manifest
    if manifest is not None and manifest.stop is not None:
        return dict(manifest.stop)
    parent = Path(run.path).parent
    if not is_experiment(parent):
        return None
    try:
        exp = read_experiment(parent)
    except CrawdadError:
        return None
    if exp is None or exp.stop is None or Path(run.path).name == exp.baseline:
        return None  # the baseline runs on while any variant is undecided
    return dict(exp.stop)


def stopped_runs(runs: list[Any]) -> dict[str, str]:
    """Runs (`crawdad.analysis.load.Run`) a stopping rule may have cut short, by label, each
    with the caveat its fixed-sample intervals carry: run under a rule, with fewer finished
    questions than it selected. Their Wilson, Newcombe, McNemar and per-rung figures ignore the
    optional stopping."""
    from crawdad.stopping.claims import FIXED_SAMPLE

    out = {}
    for run in runs:
        manifest = run.manifest
        if manifest is None or _rule_over(run) is None:
            continue
        finished = int((~run.debates["errored"]).sum()) if "errored" in run.debates else 0
        if finished < manifest.dataset.n_selected:
            out[run.label] = (
                f"{FIXED_SAMPLE} (it ran under a stopping rule and finished {finished} of its "
                f"{manifest.dataset.n_selected} selected questions)"
            )
    return out
