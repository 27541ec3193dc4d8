"""Figures of the protocol tables (analysis.metrics.protocols): accuracy of the final and first
answers by rung, judge bias, simultaneous rounds, the self-consistency curve, and accuracy
against cost across runs."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd
from crawdad.analysis.figures._style import (
    ALL_COLOR,
    CORRECT,
    MODEL_PALETTE,
    WRONG,
    agent_colors,
    color_of,
    legend_below,
    new_figure,
    no_data_figure,
    one_run,
    styled,
)
from crawdad.analysis.metrics.protocols import FINAL
from matplotlib.figure import Figure

__all__ = [
    "cost_accuracy_figure",
    "judge_bias_figure",
    "protocol_accuracy_figure",
    "self_consistency_figure",
    "simultaneous_figure",
]

_STAGE_NAMES = {"first": "first answer", "last": "last answer", "majority": "majority"}


def _who_label(who: str, stage: str) -> str:
    name = who.split(" (", 1)[0]
    return FINAL if stage == "final" else f"{name}, {_STAGE_NAMES.get(stage, stage)}"


def _err(acc: pd.Series, lo: pd.Series, hi: pd.Series) -> np.ndarray:
    return np.vstack([(acc - lo).clip(lower=0).fillna(0), (hi - acc).clip(lower=0).fillna(0)])


@styled
def protocol_accuracy_figure(acc: pd.DataFrame, colors: Mapping[str, str] | None = None) -> Figure:
    """Grouped bars: accuracy of the final answer and of each agent's first answer, overall and
    by rung, with 95% CIs."""
    acc = one_run(acc)
    a = acc[acc["dimension"].isin(["overall", "rung"]) & acc["stage"].isin(["final", "first"])]
    if a.empty:
        return no_data_figure("Accuracy by rung", "no debates")
    series = list(dict.fromkeys(zip(a["who"], a["stage"], strict=True)))
    groups = list(dict.fromkeys(a["group"]))
    fig = new_figure(2.6)
    ax = fig.add_subplot()
    width = 0.8 / len(series)
    x = np.arange(len(groups))
    for i, (who, stage) in enumerate(series):
        s = a[(a["who"] == who) & (a["stage"] == stage)].set_index("group").reindex(groups)
        color = ALL_COLOR if stage == "final" else color_of(who, colors)
        ax.bar(
            x + (i - (len(series) - 1) / 2) * width,
            s["acc"].fillna(0),
            width,
            yerr=_err(s["acc"], s["ci_lo"], s["ci_hi"]),
            color=color,
            hatch="" if stage == "final" else "//",
            edgecolor="white" if stage == "final" else color,
            facecolor=color if stage == "final" else "white",
            error_kw={"elinewidth": 0.7, "capsize": 1.5},
            label=_who_label(who, stage),
        )
    ax.set_xticks(x, [g.split(" (", 1)[0] for g in groups])
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("accuracy")
    ax.set_title("Final answer vs each agent's first answer")
    legend_below(fig, ax, ncol=2)
    return fig


@styled
def judge_bias_figure(bias: pd.DataFrame) -> Figure:
    """Horizontal bars: how the verdicts side (share with 95% CI and k/n), 0.5 marked."""
    b = one_run(bias)
    if b.empty:
        return no_data_figure("Judge verdicts", "no judged debates")
    b = b.iloc[::-1].reset_index(drop=True)
    fig = new_figure(0.45 + 0.28 * len(b))
    ax = fig.add_subplot()
    y = np.arange(len(b))
    colors = [ALL_COLOR if m in ("gold is yes",) else "#0072B2" for m in b["measure"]]
    colors = [
        CORRECT if m == "verdict correct" else c for m, c in zip(b["measure"], colors, strict=True)
    ]
    ax.barh(
        y,
        b["share"].fillna(0),
        xerr=_err(b["share"], b["ci_lo"], b["ci_hi"]),
        color=colors,
        error_kw={"elinewidth": 0.7, "capsize": 1.5},
        height=0.6,
    )
    for yi, r in zip(y, b.itertuples(index=False), strict=True):
        ax.text(
            1.02, yi, f"{r.k}/{r.n}", va="center", fontsize=7, transform=ax.get_yaxis_transform()
        )
    ax.axvline(0.5, color="#999999", lw=0.7, ls="--")
    ax.set_yticks(y, b["measure"])
    ax.set_xlim(0, 1)
    ax.set_xlabel("share of verdicts (95% CI)")
    ax.set_title("Judge verdicts")
    return fig


@styled
def simultaneous_figure(changes: pd.DataFrame, majority: pd.DataFrame) -> Figure:
    """Left: share of agents changing their answer per round (to correct / to wrong). Right:
    accuracy of the round's majority, with moves toward / away from the gold answer."""
    changes, majority = one_run(changes), one_run(majority)
    if majority.empty:
        return no_data_figure("Simultaneous rounds", "no simultaneous debates")
    fig = new_figure(2.3)
    left, right = fig.subplots(1, 2)
    if not changes.empty:
        rounds = changes["round"].to_numpy()
        to_c = changes["to_correct"] / changes["n"]
        to_w = changes["to_wrong"] / changes["n"]
        left.bar(rounds, to_c, color=CORRECT, label="to correct", width=0.6)
        left.bar(rounds, to_w, bottom=to_c, color=WRONG, label="to wrong", width=0.6)
        for r, k, n in zip(rounds, changes["changed"], changes["n"], strict=True):
            left.text(r, 0.01, f"{k}/{n}", ha="center", va="bottom", fontsize=7, rotation=90)
        left.set_xticks(rounds)
        top = float(np.nanmax((to_c + to_w).to_numpy())) if len(changes) else 0.0
        left.set_ylim(0, max(0.1, top * 1.3))
    left.set_xlabel("round")
    left.set_ylabel("share of agents changing")
    left.set_title("Answer changes")
    r = majority["round"].to_numpy()
    right.errorbar(
        r,
        majority["acc"],
        yerr=_err(majority["acc"], majority["ci_lo"], majority["ci_hi"]),
        color=ALL_COLOR,
        marker="o",
        ms=3,
        lw=1,
        capsize=2,
    )
    for x, _acc, tw, aw in zip(
        r, majority["acc"], majority["toward"], majority["away"], strict=True
    ):
        if x > 0:
            right.text(x, 0.04, f"+{tw}/\u2212{aw}", ha="center", fontsize=7)
    right.set_xticks(r)
    right.set_ylim(0, 1.05)
    right.set_ylabel("majority correct")
    right.set_title("Majority correct")
    right.set_xlabel("round (+toward/\u2212away)")
    legend_below(fig, left)
    return fig


@styled
def self_consistency_figure(curve: pd.DataFrame, colors: Mapping[str, str] | None = None) -> Figure:
    """Accuracy of a majority of k samples against k, per agent, with a 95% CI band."""
    c = one_run(curve)
    if c.empty:
        return no_data_figure("Self-consistency", "no solo samples")
    fig = new_figure(2.4)
    ax = fig.add_subplot()
    colors = colors or agent_colors(c["agent"].unique())
    for agent, g in c.groupby("agent", sort=False):
        color = color_of(str(agent), colors)
        ax.plot(g["k"], g["acc"], marker="o", ms=3, color=color, label=str(agent).split(" (")[0])
        ax.fill_between(g["k"], g["ci_lo"], g["ci_hi"], color=color, alpha=0.15, lw=0)
    ks = sorted(c["k"].unique())
    ax.set_xticks(ks)
    lo = float(np.nanmin(c["ci_lo"])) if c["ci_lo"].notna().any() else 0.0
    ax.set_ylim(max(0.0, lo - 0.05), 1.02)
    ax.set_xlabel("samples voted (k)")
    ax.set_ylabel("accuracy")
    ax.set_title("Self-consistency: majority of k samples")
    legend_below(fig, ax)
    return fig


@styled
def cost_accuracy_figure(accuracy: pd.DataFrame, cost: pd.DataFrame) -> Figure:
    """Several runs: final-answer accuracy (95% CI) against tokens per question, one point per
    run, labelled with its run and protocol."""
    a = accuracy[(accuracy["stage"] == "final") & (accuracy["dimension"] == "overall")]
    c = cost[cost["party"] == "all"][["run", "tokens_per_q"]]
    m = a.merge(c, on="run")
    if m.empty:
        return no_data_figure("Accuracy and cost", "no runs")
    fig = new_figure(2.6)
    ax = fig.add_subplot()
    for i, r in enumerate(m.itertuples(index=False)):
        ax.errorbar(
            [r.tokens_per_q],
            [r.acc],
            yerr=[[max(r.acc - r.ci_lo, 0)], [max(r.ci_hi - r.acc, 0)]],
            fmt="os^Dv<>p"[i % 8],
            ms=4,
            color=MODEL_PALETTE[i % len(MODEL_PALETTE)],
            capsize=2,
            lw=0.8,
            label=f"{r.run} ({r.protocol})",
        )
    ax.set_xscale("log")
    ax.set_ylim(
        min(0.95, float(np.nanmin(m["ci_lo"])) - 0.05) if m["ci_lo"].notna().any() else 0, 1.05
    )
    ax.margins(x=0.25)
    ax.set_xlabel("tokens per question (all parties, log scale)")
    ax.set_ylabel("final answer accuracy")
    ax.set_title("Accuracy against cost, one point per run")
    legend_below(fig, ax, ncol=1)
    return fig
