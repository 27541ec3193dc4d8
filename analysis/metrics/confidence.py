"""Stated confidence: distributions by rung and correctness (fig. 3), by commonsense alignment
(paper, 4.2), and calibration.

A confidence point is one stated answer with its confidence: "initial" points are the round-0
answers (by the first speaker), "final" points the debates' final answers (by the agent that gave
the last response). Answers or confidences that were not extracted carry no point; the counts left
out are reported (`n_excluded`). Calibration uses N_BINS = 10 equal-width bins on [0, 1]: bin i
holds [i/10, (i+1)/10), the last bin also holds 1.0.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from crawdad.analysis.metrics.accuracy import ALL

__all__ = [
    "N_BINS",
    "calibration_summary",
    "confidence_by_alignment",
    "confidence_points",
    "confidence_summary",
    "reliability",
]

N_BINS = 10
STAGES = ("initial", "final")
ALIGNMENTS = ("commonsense", "nonsense", "anticommonsense")  # the paper's Table 1 order


def confidence_points(debates: pd.DataFrame) -> pd.DataFrame:
    """Columns: run, question_id, stage, rung, alignment, agent, answered (answer and confidence
    both extracted), confidence, correct (answer == gold; False when not extracted)."""
    parts = []
    for stage, ans, conf, agent in (
        ("initial", "initial_answer", "initial_confidence", "first_agent"),
        ("final", "final_answer", "final_confidence", "final_agent"),
    ):
        parts.append(
            pd.DataFrame(
                {
                    "run": debates["run"].to_numpy(),
                    "question_id": debates["question_id"].to_numpy(),
                    "stage": stage,
                    "rung": debates["rung"].to_numpy(),
                    "alignment": debates["alignment"].to_numpy(),
                    "agent": debates[agent].to_numpy(),
                    "answered": (debates[ans].notna() & debates[conf].notna()).to_numpy(),
                    "confidence": debates[conf].to_numpy(dtype=float),
                    "correct": (debates[ans] == debates["gold"]).to_numpy(dtype=bool),
                }
            )
        )
    return pd.concat(parts, ignore_index=True)


def _stage_order(df: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    df = df.copy()
    df["_s"] = df["stage"].map({s: i for i, s in enumerate(STAGES)})
    df["_a"] = (df["agent"] == ALL).astype(int)
    return (
        df.sort_values(["run", "_a", "agent", "_s", *keys])
        .drop(columns=["_s", "_a"])
        .reset_index(drop=True)
    )


def confidence_summary(debates: pd.DataFrame) -> pd.DataFrame:
    """Confidence by run, stage, agent (and "all"), rung (and "all"), correctness.

    Columns: run, agent, stage, rung, correct, n, mean, median, q25, q75, share_ge_0_9.
    """
    p = confidence_points(debates)
    p = p[p["answered"]].assign(rung=lambda x: x["rung"].astype(str))
    cols = [
        "run",
        "agent",
        "stage",
        "rung",
        "correct",
        "n",
        "mean",
        "median",
        "q25",
        "q75",
        "share_ge_0_9",
    ]
    if p.empty:
        return pd.DataFrame(columns=cols)
    p = pd.concat([p, p.assign(agent=ALL)], ignore_index=True)
    p = pd.concat([p, p.assign(rung=ALL)], ignore_index=True)
    g = p.groupby(["run", "agent", "stage", "rung", "correct"], sort=True)["confidence"]
    out = g.agg(
        n="size",
        mean="mean",
        median="median",
        q25=lambda s: s.quantile(0.25),
        q75=lambda s: s.quantile(0.75),
        share_ge_0_9=lambda s: (s >= 0.9).mean(),
    ).reset_index()
    return _stage_order(out, ["rung", "correct"])[cols]


def confidence_by_alignment(debates: pd.DataFrame) -> pd.DataFrame:
    """Confidence of initial and final answers by commonsense alignment and model (paper, 4.2:
    "no evident difference between the commonsense alignment of the question and a model's
    confidence"). Initial answers belong to the first speaker, final answers to the last speaker,
    as in `confidence_summary`; the paper does not split this by correctness, so neither does
    this table, but `accuracy` is given beside the confidence. Rows with agent and/or alignment
    "all" pool the others.

    Columns: run, agent, stage, alignment, n, n_excluded (answer or confidence not extracted),
    mean, median, q25, q75, share_ge_0_9, accuracy (of the n answers).
    """
    cols = [
        "run",
        "agent",
        "stage",
        "alignment",
        "n",
        "n_excluded",
        "mean",
        "median",
        "q25",
        "q75",
        "share_ge_0_9",
        "accuracy",
    ]
    p = confidence_points(debates)
    if p.empty:
        return pd.DataFrame(columns=cols)
    p = pd.concat([p, p.assign(agent=ALL)], ignore_index=True)
    p = pd.concat([p, p.assign(alignment=ALL)], ignore_index=True)
    keys = ["run", "agent", "stage", "alignment"]
    a = p[p["answered"]]
    out = (
        a.groupby(keys, sort=True)
        .agg(
            n=("confidence", "size"),
            mean=("confidence", "mean"),
            median=("confidence", "median"),
            q25=("confidence", lambda s: s.quantile(0.25)),
            q75=("confidence", lambda s: s.quantile(0.75)),
            share_ge_0_9=("confidence", lambda s: (s >= 0.9).mean()),
            accuracy=("correct", "mean"),
        )
        .reset_index()
    )
    excluded = (~p["answered"]).groupby([p[k] for k in keys]).sum()
    idx = pd.MultiIndex.from_frame(out[keys])
    out["n_excluded"] = excluded.reindex(idx, fill_value=0).to_numpy().astype("int64")
    order = {a: i for i, a in enumerate((*ALIGNMENTS, ALL))}
    out["_al"] = out["alignment"].map(lambda x: order.get(x, len(order)))
    return _stage_order(out, ["_al"])[cols]


def _bin_index(conf: np.ndarray, n_bins: int) -> np.ndarray:
    # floor(conf * n_bins), nudged so that 0.3 * 10 = 3.0000000000000004 and 0.7 land in their
    # own bins, and 1.0 goes to the last bin.
    idx = np.floor(np.clip(conf, 0.0, 1.0) * n_bins + 1e-9).astype(int)
    return np.minimum(idx, n_bins - 1)


def _answered_points(debates: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    p = confidence_points(debates)
    p = pd.concat([p, p.assign(agent=ALL)], ignore_index=True)
    return p[p["answered"]], p


def reliability(debates: pd.DataFrame, n_bins: int = N_BINS) -> pd.DataFrame:
    """Reliability-diagram data per run, agent ("all" too) and stage; one row per bin, empty
    bins included (n = 0). Columns: run, agent, stage, bin, lo, hi, n, mean_confidence, accuracy.
    """
    pts, _ = _answered_points(debates)
    rows = []
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    for (run, agent, stage), g in pts.groupby(["run", "agent", "stage"], sort=True):
        b = _bin_index(g["confidence"].to_numpy(), n_bins)
        conf = g["confidence"].to_numpy()
        corr = g["correct"].to_numpy(dtype=float)
        n = np.bincount(b, minlength=n_bins)
        sc = np.bincount(b, weights=conf, minlength=n_bins)
        sa = np.bincount(b, weights=corr, minlength=n_bins)
        with np.errstate(invalid="ignore", divide="ignore"):
            mc, acc = sc / n, sa / n
        for i in range(n_bins):
            rows.append(
                {
                    "run": run,
                    "agent": agent,
                    "stage": stage,
                    "bin": i,
                    "lo": edges[i],
                    "hi": edges[i + 1],
                    "n": int(n[i]),
                    "mean_confidence": float(mc[i]) if n[i] else np.nan,
                    "accuracy": float(acc[i]) if n[i] else np.nan,
                }
            )
    cols = ["run", "agent", "stage", "bin", "lo", "hi", "n", "mean_confidence", "accuracy"]
    if not rows:
        return pd.DataFrame(columns=cols)
    return _stage_order(pd.DataFrame(rows), ["bin"])[cols]


def calibration_summary(debates: pd.DataFrame, n_bins: int = N_BINS) -> pd.DataFrame:
    """ECE (n_bins equal-width bins) and Brier score per run, agent ("all" too) and stage.

    ECE = sum over bins of (n_bin / n) * |accuracy_bin - mean_confidence_bin|;
    Brier = mean of (confidence - correct)^2. Columns: run, agent, stage, n, n_excluded (answers
    or confidences not extracted), mean_confidence, accuracy, ece, brier.
    """
    _, allp = _answered_points(debates)
    rows = []
    for (run, agent, stage), g in allp.groupby(["run", "agent", "stage"], sort=True):
        a = g[g["answered"]]
        conf = a["confidence"].to_numpy()
        corr = a["correct"].to_numpy(dtype=float)
        n = len(a)
        if n:
            b = _bin_index(conf, n_bins)
            gap = np.abs(
                np.bincount(b, weights=corr, minlength=n_bins)
                - np.bincount(b, weights=conf, minlength=n_bins)
            )
            ece = float(
                gap.sum() / n
            )  # sum_b (n_b/n)|acc_b - conf_b| = sum_b |sum corr - sum conf| / n
            brier = float(np.mean((conf - corr) ** 2))
        else:
            ece = brier = np.nan
        rows.append(
            {
                "run": run,
                "agent": agent,
                "stage": stage,
                "n": n,
                "n_excluded": int(len(g) - n),
                "mean_confidence": float(conf.mean()) if n else np.nan,
                "accuracy": float(corr.mean()) if n else np.nan,
                "ece": ece,
                "brier": brier,
            }
        )
    cols = [
        "run",
        "agent",
        "stage",
        "n",
        "n_excluded",
        "mean_confidence",
        "accuracy",
        "ece",
        "brier",
    ]
    if not rows:
        return pd.DataFrame(columns=cols)
    return _stage_order(pd.DataFrame(rows), [])[cols]
