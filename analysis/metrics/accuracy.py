"""Accuracy: Table 1, accuracy by any column, McNemar before vs after debate, accuracy by cap.

Definitions (paper, section 4, and docs/explanation/design.md):
- "initial" accuracy of a model: over the debates where it spoke first, its round-0 answer;
- "final" accuracy of a model: over the same debates, the debate's final answer (so the final
  answer is attributed to the first speaker's model);
- an answer that was not extracted (null) or a debate that errored counts as WRONG; the counts of
  both are carried in every table (`n_unanswered`, `n_errored`) so nothing is dropped silently.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from crawdad.analysis.metrics._stats import (
    add_proportion_ci,
    mcnemar_exact,
    newcombe_paired_difference,
)

__all__ = [
    "ALIGNMENT_LABELS",
    "ALL",
    "RUNG_LABELS",
    "accuracy_by",
    "accuracy_by_cap",
    "mcnemar",
    "run_summary",
    "table1",
]

ALL = "all"  # group / agent value for "all of them"
RUNG_LABELS = {
    0: "No rung",
    1: "Rung 1 (association)",
    2: "Rung 2 (intervention)",
    3: "Rung 3 (counterfactual)",
}
ALIGNMENT_LABELS = {"commonsense": "Comm.", "nonsense": "Nonsens.", "anticommonsense": "Anti-C."}
STAGES = ("initial", "final")


def rung_label(rung: int) -> str:
    return RUNG_LABELS.get(int(rung), f"Rung {rung}")


def _stage_frame(debates: pd.DataFrame) -> pd.DataFrame:
    """Two rows per debate: stage "initial" (round-0 answer) and "final" (final answer)."""
    parts = []
    for stage, col in (("initial", "initial_answer"), ("final", "final_answer")):
        ans = debates[col]
        parts.append(
            pd.DataFrame(
                {
                    "run": debates["run"].to_numpy(),
                    "agent": debates["first_agent"].to_numpy(),
                    "stage": stage,
                    "correct": (ans == debates["gold"]).to_numpy(dtype=bool),
                    "unanswered": ans.isna().to_numpy(),
                    "errored": debates["errored"].to_numpy(dtype=bool),
                    "rung": debates["rung"].to_numpy(),
                    "alignment": debates["alignment"].to_numpy(),
                    "query_type": debates["query_type"].to_numpy(),
                    "gold": debates["gold"].to_numpy(),
                }
            )
        )
    return pd.concat(parts, ignore_index=True)


def _count(frame: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    g = frame.groupby(keys, sort=True, observed=True)
    out = g.agg(
        n=("correct", "size"),
        n_correct=("correct", "sum"),
        n_unanswered=("unanswered", "sum"),
        n_errored=("errored", "sum"),
    ).reset_index()
    for c in ("n", "n_correct", "n_unanswered", "n_errored"):
        out[c] = out[c].astype("int64")
    out["acc"] = out["n_correct"] / out["n"]
    return add_proportion_ci(out)


def _order_stage(df: pd.DataFrame, extra: list[str]) -> pd.DataFrame:
    df = df.copy()
    df["_s"] = df["stage"].map({s: i for i, s in enumerate(STAGES)})
    df = df.sort_values(["run", "agent", "_s", *extra], kind="stable").drop(columns="_s")
    return df.reset_index(drop=True)


def accuracy_by(debates: pd.DataFrame, by: str | None = None) -> pd.DataFrame:
    """Initial and final accuracy per run, first-speaker agent and (optionally) a column of debates.

    Columns: run, agent, stage, [by], n, n_correct, n_unanswered, n_errored, acc, ci_lo, ci_hi.
    Agent "all" pools both first speakers (the debate system as a whole).
    """
    st = _stage_frame(debates)
    keys = ["run", "agent", "stage"] + ([by] if by else [])
    per_agent = _count(st, keys)
    pooled = _count(st.assign(agent=ALL), keys)
    return _order_stage(pd.concat([per_agent, pooled], ignore_index=True), [by] if by else [])


def table1(debates: pd.DataFrame) -> pd.DataFrame:
    """Table 1 of the paper, tidy: accuracy overall, by rung, by commonsense alignment.

    Columns: run, agent, stage, dimension ("overall" | "rung" | "alignment"), group, n, n_correct,
    n_unanswered, n_errored, acc, ci_lo, ci_hi. Rung groups are labelled with RUNG_LABELS.
    """
    parts = []
    overall = accuracy_by(debates).assign(dimension="overall", group="Overall")
    parts.append(overall)
    by_rung = accuracy_by(debates, "rung")
    by_rung = by_rung.assign(dimension="rung", group=by_rung["rung"].map(rung_label))
    parts.append(by_rung.drop(columns="rung"))
    by_al = accuracy_by(debates, "alignment")
    by_al = by_al.assign(
        dimension="alignment", group=by_al["alignment"].map(lambda a: ALIGNMENT_LABELS.get(a, a))
    )
    parts.append(by_al.drop(columns="alignment"))
    out = pd.concat(parts, ignore_index=True)
    cols = ["run", "agent", "stage", "dimension", "group"]
    rest = [c for c in out.columns if c not in cols]
    out = out[cols + rest]
    order = {"Overall": 0, **{v: 1 + i for i, v in enumerate(RUNG_LABELS.values())}}
    order.update({v: 10 + i for i, v in enumerate(ALIGNMENT_LABELS.values())})
    out["_g"] = out["group"].map(lambda g: order.get(g, 99))
    out["_s"] = out["stage"].map({s: i for i, s in enumerate(STAGES)})
    out["_a"] = (out["agent"] == ALL).astype(int)
    out = out.sort_values(["run", "_a", "agent", "_s", "_g"], kind="stable")
    return out.drop(columns=["_g", "_s", "_a"]).reset_index(drop=True)


def mcnemar(debates: pd.DataFrame) -> pd.DataFrame:
    """Exact McNemar test of initial vs final correctness, per run and first-speaker agent.

    Pairs: for each question where the agent spoke first, (its round-0 answer correct?, the
    debate's final answer correct?). Discordant pairs: `i_to_c` (wrong first, right final) and
    `c_to_i` (right first, wrong final); p = two-sided binomial test of i_to_c in
    i_to_c + c_to_i at 1/2. `gain` = final - initial accuracy, with Newcombe's paired score CI.
    Agent "all" pools every debate (the first speaker's answer vs the debate's answer).
    """
    ic = (debates["initial_answer"] == debates["gold"]).to_numpy(dtype=bool)
    fc = (debates["final_answer"] == debates["gold"]).to_numpy(dtype=bool)
    cells = pd.DataFrame(
        {
            "run": debates["run"].to_numpy(),
            "agent": debates["first_agent"].to_numpy(),
            "both_correct": ic & fc,
            "c_to_i": ic & ~fc,
            "i_to_c": ~ic & fc,
            "both_wrong": ~ic & ~fc,
        }
    )
    rows = []
    for pooled in (False, True):
        frame = cells.assign(agent=ALL) if pooled else cells
        for (run, agent), g in frame.groupby(["run", "agent"], sort=True):
            both, ci_, ic_, bw = (
                int(g[c].sum()) for c in ("both_correct", "c_to_i", "i_to_c", "both_wrong")
            )
            n = both + ci_ + ic_ + bw
            lo, hi = newcombe_paired_difference(both, ci_, ic_, bw)
            rows.append(
                {
                    "run": run,
                    "agent": agent,
                    "n": n,
                    "both_correct": both,
                    "i_to_c": ic_,
                    "c_to_i": ci_,
                    "both_wrong": bw,
                    "initial_acc": (both + ci_) / n if n else np.nan,
                    "final_acc": (both + ic_) / n if n else np.nan,
                    "gain": (ic_ - ci_) / n if n else np.nan,
                    "gain_ci_lo": lo,
                    "gain_ci_hi": hi,
                    "p_value": mcnemar_exact(ic_, ci_),
                }
            )
    out = pd.DataFrame(rows)
    if out.empty:
        return out
    out["_a"] = (out["agent"] == ALL).astype(int)
    return out.sort_values(["run", "_a", "agent"]).drop(columns="_a").reset_index(drop=True)


def _answers_by_round(turns: pd.DataFrame) -> pd.DataFrame:
    """(run, question_id) x round -> extracted answer (NaN where none)."""
    return turns.pivot_table(
        index=["run", "question_id"], columns="round", values="answer", aggfunc="last"
    )


def accuracy_by_cap(debates: pd.DataFrame, turns: pd.DataFrame) -> pd.DataFrame:
    """Accuracy had every debate been stopped after `cap` responses.

    The answer at cap k is the answer of response k (round k-1) if the debate has one, else the
    debate's final answer (None for an errored debate: the error came before response k). cap 1 is "the first speaker's answer alone"; the largest cap
    is the debate's accuracy. Per run, for agent "all" and per first-speaker agent.
    Columns: run, agent, cap, n, n_correct, acc, ci_lo, ci_hi.
    """
    if debates.empty:
        return pd.DataFrame(
            columns=["run", "agent", "cap", "n", "n_correct", "acc", "ci_lo", "ci_hi"]
        )
    by_round = _answers_by_round(turns) if not turns.empty else pd.DataFrame()
    d = debates.set_index(["run", "question_id"])
    max_cap = max(int(d["n_turns"].max()), 1)
    rows = []
    gold = d["gold"]
    for cap in range(1, max_cap + 1):
        if cap - 1 in getattr(by_round, "columns", []):
            mid = by_round[cap - 1].reindex(d.index)
        else:
            mid = pd.Series(np.nan, index=d.index, dtype=object)
        # Response `cap` exists: its answer (for a finished debate that ends there, it is the
        # final answer; for an errored one, the error came later). Otherwise the final answer.
        ans = d["final_answer"].where(d["n_turns"] < cap, mid)
        correct = (ans == gold).to_numpy(dtype=bool)
        frame = pd.DataFrame(
            {
                "run": d.index.get_level_values("run"),
                "agent": d["first_agent"].to_numpy(),
                "c": correct,
            }
        )
        for pooled in (True, False):
            f = frame.assign(agent=ALL) if pooled else frame
            g = f.groupby(["run", "agent"], sort=True).agg(n=("c", "size"), n_correct=("c", "sum"))
            rows.append(g.reset_index().assign(cap=cap))
    out = pd.concat(rows, ignore_index=True)
    out["n_correct"] = out["n_correct"].astype("int64")
    out["acc"] = out["n_correct"] / out["n"]
    out = add_proportion_ci(out)
    out["_a"] = (out["agent"] != ALL).astype(int)
    out = out.sort_values(["run", "_a", "agent", "cap"]).drop(columns="_a")
    return out[["run", "agent", "cap", "n", "n_correct", "acc", "ci_lo", "ci_hi"]].reset_index(
        drop=True
    )


def run_summary(debates: pd.DataFrame, turns: pd.DataFrame) -> pd.DataFrame:
    """One row per run: how many debates, how many errored / unanswered, consensus, accuracy."""
    rows = []
    for run, d in debates.groupby("run", sort=True):
        t = turns[turns["run"] == run]
        ok = d[~d["errored"]]
        rows.append(
            {
                "run": run,
                "debates": len(d),
                "errored": int(d["errored"].sum()),
                "final_unanswered": int(d["final_answer"].isna().sum()),
                "initial_unanswered": int(d["initial_answer"].isna().sum()),
                "turns": len(t),
                "turns_unanswered": int(t["answer"].isna().sum()),
                "consensus": int(ok["consensus"].sum()),
                "no_consensus": int((~ok["consensus"]).sum()),
                "first_speaker_acc": float((d["initial_answer"] == d["gold"]).mean()),
                "debate_acc": float((d["final_answer"] == d["gold"]).mean()),
            }
        )
    return pd.DataFrame(rows)
