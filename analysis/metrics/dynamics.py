"""Debate dynamics: persuasion outcomes, answer changes, confidence changes, rounds to finish.

Rounds are 0-based as in the records (round 0 is the first speaker's initial answer); the number
of responses in a debate (1..4 by default) is what the paper calls its number of rounds.
Errored debates are left out of these tables (they did not finish); `run_summary` counts them.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from crawdad.analysis.metrics._stats import add_proportion_ci
from crawdad.analysis.metrics.accuracy import ALL

__all__ = [
    "CONFIDENCE_BINS",
    "OUTCOMES",
    "challenged_turns",
    "change_vs_opponent_confidence",
    "confidence_change",
    "confident_wrong_corrected",
    "consensus_by_round",
    "persuasion",
    "rounds_to_finish",
]

OUTCOMES = ("C->C", "I->C", "C->I", "I->I", "U->C", "U->I")
# Opponent-confidence bins for answer changes: [lo, hi) except the last, which is exactly 1.0.
CONFIDENCE_BINS: tuple[tuple[str, float, float], ...] = (
    ("<0.6", 0.0, 0.6),
    ("0.6-0.7", 0.6, 0.7),
    ("0.7-0.8", 0.7, 0.8),
    ("0.8-0.9", 0.8, 0.9),
    ("0.9-0.95", 0.9, 0.95),
    ("0.95-<1", 0.95, 1.0),
    ("1.0", 1.0, np.inf),
)


def _rung_str(rung: pd.Series) -> pd.Series:
    return rung.astype("int64").astype(str)


def _with_all(frame: pd.DataFrame, cols: list[str]) -> pd.DataFrame:
    """frame plus copies with each subset of `cols` set to "all" (for pooled rows)."""
    out = [frame]
    for c in cols:
        out += [f.assign(**{c: ALL}) for f in out]
    return pd.concat(out, ignore_index=True)


def persuasion(debates: pd.DataFrame, min_responses: int = 3) -> pd.DataFrame:
    """Persuasion outcomes for debates with at least `min_responses` responses (round 2 reached).

    From the first speaker's round-0 answer to the debate's final answer: C->C, I->C, C->I, I->I
    (C correct, I incorrect), and U->C, U->I when the first answer was not extracted (U: unread;
    it is neither right nor wrong, so it is not counted as I). A final answer that was not
    extracted counts as incorrect, as in Table 1. Per run, first-speaker agent and rung, with
    "all" rows pooling agents and/or rungs. Columns: run, agent, rung, n, C->C, I->C, C->I, I->I,
    U->C, U->I, net (I->C minus C->I).
    """
    d = debates[(debates["n_turns"] >= min_responses) & ~debates["errored"]]
    unread = d["initial_answer"].isna().to_numpy()
    ic = (d["initial_answer"] == d["gold"]).to_numpy(dtype=bool)
    fc = (d["final_answer"] == d["gold"]).to_numpy(dtype=bool)
    first = np.where(unread, "U", np.where(ic, "C", "I"))
    outcome = np.char.add(first.astype(str), np.where(fc, "->C", "->I"))
    f = pd.DataFrame(
        {
            "run": d["run"].to_numpy(),
            "agent": d["first_agent"].to_numpy(),
            "rung": _rung_str(d["rung"]).to_numpy(),
            "outcome": outcome,
        }
    )
    cols = ["run", "agent", "rung", "n", *OUTCOMES, "net"]
    if f.empty:
        return pd.DataFrame(columns=cols)
    f = _with_all(f, ["agent", "rung"])
    out = pd.crosstab([f["run"], f["agent"], f["rung"]], f["outcome"]).reindex(
        columns=list(OUTCOMES), fill_value=0
    )
    out = out.reset_index()
    out.columns.name = None
    out["n"] = out[list(OUTCOMES)].sum(axis=1)
    out["net"] = out["I->C"] - out["C->I"]
    out["_a"] = (out["agent"] == ALL).astype(int)
    out["_r"] = (out["rung"] == ALL).astype(int)
    out = out.sort_values(["run", "_a", "agent", "_r", "rung"]).drop(columns=["_a", "_r"])
    return out[cols].reset_index(drop=True)


def confident_wrong_corrected(debates: pd.DataFrame, threshold: float = 0.9) -> pd.DataFrame:
    """First answers wrong with confidence > threshold, and how many the debate corrected.

    Per run, first-speaker agent and rung (with "all" rows). Columns: run, agent, rung, debates,
    confident_wrong, corrected, share_corrected.
    """
    d_ans = debates["initial_answer"]
    wrong = d_ans.notna() & (d_ans != debates["gold"]) & (debates["initial_confidence"] > threshold)
    corrected = wrong & (debates["final_answer"] == debates["gold"])
    f = pd.DataFrame(
        {
            "run": debates["run"].to_numpy(),
            "agent": debates["first_agent"].to_numpy(),
            "rung": _rung_str(debates["rung"]).to_numpy(),
            "w": wrong.to_numpy(dtype=bool),
            "c": corrected.to_numpy(dtype=bool),
        }
    )
    cols = ["run", "agent", "rung", "debates", "confident_wrong", "corrected", "share_corrected"]
    if f.empty:
        return pd.DataFrame(columns=cols)
    f = _with_all(f, ["agent", "rung"])
    out = (
        f.groupby(["run", "agent", "rung"], sort=True)
        .agg(debates=("w", "size"), confident_wrong=("w", "sum"), corrected=("c", "sum"))
        .reset_index()
    )
    out["confident_wrong"] = out["confident_wrong"].astype("int64")
    out["corrected"] = out["corrected"].astype("int64")
    out["share_corrected"] = out["corrected"] / out["confident_wrong"].where(
        out["confident_wrong"] > 0
    )
    return out[cols]


def rounds_to_finish(debates: pd.DataFrame) -> pd.DataFrame:
    """How many responses finished debates took, per run, rung and first speaker ("all" pooled).

    Columns: run, rung, first_agent, responses, count, share (of the group's finished debates),
    n (finished debates in the group), mean_responses (of the group).
    """
    d = debates[~debates["errored"]]
    f = pd.DataFrame(
        {
            "run": d["run"].to_numpy(),
            "rung": _rung_str(d["rung"]).to_numpy(),
            "first_agent": d["first_agent"].to_numpy(),
            "responses": d["n_turns"].to_numpy(),
        }
    )
    cols = ["run", "rung", "first_agent", "responses", "count", "share", "n", "mean_responses"]
    if f.empty:
        return pd.DataFrame(columns=cols)
    f = _with_all(f, ["rung", "first_agent"])
    keys = ["run", "rung", "first_agent"]
    counts = f.groupby([*keys, "responses"], sort=True).size().rename("count").reset_index()
    tot = f.groupby(keys, sort=True).agg(
        n=("responses", "size"), mean_responses=("responses", "mean")
    )
    out = counts.merge(tot.reset_index(), on=keys)
    out["share"] = out["count"] / out["n"]
    return out[cols]


def consensus_by_round(debates: pd.DataFrame) -> pd.DataFrame:
    """Consensus rate of finished debates by their number of responses (and "all").

    Columns: run, responses, n, consensus, rate.
    """
    d = debates[~debates["errored"]]
    f = pd.DataFrame(
        {
            "run": d["run"].to_numpy(),
            "responses": d["n_turns"].astype(str).to_numpy(),
            "c": d["consensus"].to_numpy(dtype=bool),
        }
    )
    if f.empty:
        return pd.DataFrame(columns=["run", "responses", "n", "consensus", "rate"])
    f = _with_all(f, ["responses"])
    out = f.groupby(["run", "responses"], sort=True).agg(n=("c", "size"), consensus=("c", "sum"))
    out = out.reset_index()
    out["consensus"] = out["consensus"].astype("int64")
    out["rate"] = out["consensus"] / out["n"]
    out["_a"] = (out["responses"] == ALL).astype(int)
    return out.sort_values(["run", "_a", "responses"]).drop(columns="_a").reset_index(drop=True)


def challenged_turns(turns: pd.DataFrame) -> pd.DataFrame:
    """Responses given after the opponent contradicted the responder's own previous answer.

    A turn qualifies when the responder spoke before in the debate, the turn just before it is the
    opponent's, and the opponent's answer differs from the responder's previous answer (all three
    answers extracted). By default these are the rounds 2 and 3. Columns: run, question_id, round,
    rung, agent, own_answer, own_confidence (previous), opp_confidence, answer, confidence,
    changed (answer != own previous answer), outcome ("persuaded" | "defended"), delta_confidence.
    """
    cols = [
        "run",
        "question_id",
        "round",
        "rung",
        "agent",
        "own_answer",
        "own_confidence",
        "opp_confidence",
        "answer",
        "confidence",
        "changed",
        "outcome",
        "delta_confidence",
    ]
    t = turns[~turns["errored"]].sort_values(["run", "question_id", "round"], kind="stable")
    if t.empty:
        return pd.DataFrame(columns=cols)
    by_debate = t.groupby(["run", "question_id"], sort=False)
    opp_agent = by_debate["agent"].shift(1)
    opp_answer = by_debate["answer"].shift(1)
    opp_conf = by_debate["confidence"].shift(1)
    by_own = t.groupby(["run", "question_id", "agent"], sort=False)
    own_answer = by_own["answer"].shift(1)
    own_conf = by_own["confidence"].shift(1)
    keep = (
        opp_agent.notna()
        & (opp_agent != t["agent"])
        & own_answer.notna()
        & opp_answer.notna()
        & t["answer"].notna()
        & (opp_answer != own_answer)
    )
    out = t.loc[
        keep, ["run", "question_id", "round", "rung", "agent", "answer", "confidence"]
    ].copy()
    out["own_answer"] = own_answer[keep]
    out["own_confidence"] = own_conf[keep].astype("float64")
    out["opp_confidence"] = opp_conf[keep].astype("float64")
    out["changed"] = (out["answer"] != out["own_answer"]).astype(bool)
    out["outcome"] = np.where(out["changed"], "persuaded", "defended")
    out["delta_confidence"] = out["confidence"] - out["own_confidence"]
    return out[cols].reset_index(drop=True)


def _bin_labels(conf: pd.Series, bins: tuple[tuple[str, float, float], ...]) -> pd.Series:
    lab = pd.Series(pd.NA, index=conf.index, dtype=object)
    for name, lo, hi in bins:
        lab[(conf >= lo) & (conf < hi)] = name
    return lab


def change_vs_opponent_confidence(
    challenged: pd.DataFrame, bins: tuple[tuple[str, float, float], ...] = CONFIDENCE_BINS
) -> pd.DataFrame:
    """P(changing one's answer) by the contradicting opponent's confidence (binned), per agent.

    Input: `challenged_turns(...)`. Turns whose opponent gave no confidence are left out.
    Columns: run, agent, bin, lo, hi, n, n_changed, p_change, ci_lo, ci_hi (Wilson 95%).
    """
    cols = ["run", "agent", "bin", "lo", "hi", "n", "n_changed", "p_change", "ci_lo", "ci_hi"]
    c = challenged[challenged["opp_confidence"].notna()]
    if c.empty:
        return pd.DataFrame(columns=cols)
    f = pd.DataFrame(
        {
            "run": c["run"].to_numpy(),
            "agent": c["agent"].to_numpy(),
            "bin": _bin_labels(c["opp_confidence"], bins).to_numpy(),
            "changed": c["changed"].to_numpy(dtype=bool),
        }
    ).dropna(subset=["bin"])
    f = _with_all(f, ["agent"])
    out = f.groupby(["run", "agent", "bin"]).agg(
        n=("changed", "size"), n_changed=("changed", "sum")
    )
    out = out.reset_index()
    out["n_changed"] = out["n_changed"].astype("int64")
    out["p_change"] = out["n_changed"] / out["n"]
    out = add_proportion_ci(out, k="n_changed")
    edges = {name: (lo, hi) for name, lo, hi in bins}
    order = {name: i for i, (name, _, _) in enumerate(bins)}
    out["lo"] = out["bin"].map(lambda b: edges[b][0])
    out["hi"] = out["bin"].map(lambda b: edges[b][1])
    out["_b"] = out["bin"].map(order)
    out["_a"] = (out["agent"] == ALL).astype(int)
    out = out.sort_values(["run", "_a", "agent", "_b"]).drop(columns=["_b", "_a"])
    return out[cols].reset_index(drop=True)


def confidence_change(challenged: pd.DataFrame) -> pd.DataFrame:
    """Change of confidence (new minus own previous) when defending vs when persuaded, per agent.

    Input: `challenged_turns(...)`. Columns: run, agent, outcome, n, n_with_confidence,
    mean_delta, median_delta, share_up, share_same, share_down.
    """
    cols = [
        "run",
        "agent",
        "outcome",
        "n",
        "n_with_confidence",
        "mean_delta",
        "median_delta",
        "share_up",
        "share_same",
        "share_down",
    ]
    if challenged.empty:
        return pd.DataFrame(columns=cols)
    f = challenged[["run", "agent", "outcome", "delta_confidence"]]
    f = _with_all(f, ["agent"])
    rows = []
    for (run, agent, outcome), g in f.groupby(["run", "agent", "outcome"], sort=True):
        dlt = g["delta_confidence"].dropna()
        m = len(dlt)
        rows.append(
            {
                "run": run,
                "agent": agent,
                "outcome": outcome,
                "n": len(g),
                "n_with_confidence": m,
                "mean_delta": float(dlt.mean()) if m else np.nan,
                "median_delta": float(dlt.median()) if m else np.nan,
                "share_up": float((dlt > 0).mean()) if m else np.nan,
                "share_same": float((dlt == 0).mean()) if m else np.nan,
                "share_down": float((dlt < 0).mean()) if m else np.nan,
            }
        )
    out = pd.DataFrame(rows, columns=cols)
    out["_a"] = (out["agent"] == ALL).astype(int)
    return (
        out.sort_values(["run", "_a", "agent", "outcome"]).drop(columns="_a").reset_index(drop=True)
    )
