"""Figures about stated confidence: distributions (fig. 3), answer changes against the opponent's
confidence (fig. 4), confidence change when defending or persuaded (fig. 5)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd
from crawdad.analysis.figures._style import (
    CORRECT,
    WRONG,
    color_of,
    new_figure,
    no_data_figure,
    one_run,
    short_label,
    styled,
)
from crawdad.analysis.metrics.accuracy import ALL
from matplotlib.figure import Figure
from matplotlib.patches import Patch

__all__ = ["change_figure", "confidence_change_figure", "confidence_figure"]


@styled
def confidence_figure(points: pd.DataFrame, bin_width: float = 0.05) -> Figure:
    """Fig. 3: confidence of correct vs incorrect answers by rung, initial and final (both models
    together). Each curve is normalised to its own total, so shapes compare across sizes.
    Input: `metrics.confidence_points` of one run."""
    p = one_run(points)
    p = p[p["answered"]]
    title = "Stated confidence by rung and correctness"
    if p.empty:
        return no_data_figure(title, "no answer with an extracted confidence")
    rungs = sorted(p["rung"].unique())
    lo = min(0.5, float(np.floor(p["confidence"].min() * 10) / 10))
    # Bins centred on multiples of bin_width: stated confidences are round numbers (0.6, 0.95, 1.0)
    # and each should sit in the middle of its own bin, not on an edge.
    centres = np.round(np.arange(lo, 1.0 + bin_width / 2, bin_width), 6)
    edges = np.append(centres - bin_width / 2, centres[-1] + bin_width / 2)
    fig = new_figure(0.9 + 1.05 * len(rungs))
    axes = fig.subplots(len(rungs), 2, sharex=True, sharey=True, squeeze=False)
    for i, rung in enumerate(rungs):
        for j, stage in enumerate(("initial", "final")):
            ax = axes[i, j]
            g = p[(p["rung"] == rung) & (p["stage"] == stage)]
            for correct, color, name in ((True, CORRECT, "correct"), (False, WRONG, "incorrect")):
                c = g.loc[g["correct"] == correct, "confidence"].to_numpy()
                if len(c):
                    w = np.full(len(c), 100 / len(c))
                    ax.hist(
                        c, bins=edges, weights=w, histtype="step", color=color, lw=1.1, label=name
                    )
                    ax.hist(
                        c, bins=edges, weights=w, histtype="stepfilled", color=color, alpha=0.15
                    )
            n_ok, n_bad = int(g["correct"].sum()), int((~g["correct"]).sum())
            ax.text(0.02, 0.95, f"n={n_ok} / {n_bad}", transform=ax.transAxes, va="top", fontsize=8)
            if i == 0:
                ax.set_title(stage, fontsize=8)
            if j == 0:
                ax.set_ylabel(f"Rung {rung}\n% of answers")
            if i == len(rungs) - 1:
                ax.set_xlabel("stated confidence")
    fig.suptitle(title)
    fig.legend(
        handles=[
            Patch(facecolor=CORRECT, alpha=0.5, label="correct"),
            Patch(facecolor=WRONG, alpha=0.5, label="incorrect"),
        ],
        loc="outside lower center",
        ncol=2,
        title="n = correct / incorrect; final = last speaker's answer",
    )
    return fig


@styled
def change_figure(
    change: pd.DataFrame, colors: Mapping[str, str] | None = None, min_n: int = 5
) -> Figure:
    """Fig. 4: share of contradicted responses that switched to the opponent's answer, by the
    opponent's stated confidence, per model, with 95% Wilson CIs. Bins with fewer than `min_n`
    responses are not drawn. Input: `metrics.change_vs_opponent_confidence` of one run."""
    c = one_run(change)
    c = c[(c["agent"] != ALL)]
    title = "Answer changes vs opponent's confidence"
    shown = c[c["n"] >= min_n]
    if shown.empty:
        return no_data_figure(title, f"no confidence bin with {min_n}+ contradicted responses")
    bins = list(dict.fromkeys(c.sort_values("lo")["bin"]))
    pos = {b: i for i, b in enumerate(bins)}
    agents = sorted(c["agent"].unique())
    fig = new_figure(2.6)
    ax = fig.add_subplot()
    for k, agent in enumerate(agents):
        g = shown[shown["agent"] == agent]
        if g.empty:
            continue
        x = g["bin"].map(pos).to_numpy() + (k - (len(agents) - 1) / 2) * 0.12
        y = 100 * g["p_change"].to_numpy()
        err = [y - 100 * g["ci_lo"].to_numpy(), 100 * g["ci_hi"].to_numpy() - y]
        col = color_of(agent, colors)
        ax.errorbar(
            x,
            y,
            yerr=err,
            color=col,
            marker="o",
            ms=3.5,
            lw=1,
            elinewidth=0.8,
            capsize=1.5,
            label=short_label(agent),
        )
    ax.set_xticks(range(len(bins)))
    ax.set_xticklabels(bins, rotation=30, ha="right")
    ax.set_xlabel("opponent's stated confidence")
    ax.set_ylabel("changed own answer (%)")
    ax.set_ylim(-3, 103)
    ax.set_title(title)
    ax.grid(axis="y", color="#E5E5E5", lw=0.6)
    ax.set_axisbelow(True)
    handles, labels = ax.get_legend_handles_labels()
    fig.legend(
        handles,
        labels,
        loc="outside lower center",
        ncol=2,
        title=f"contradicted responses; bins with n < {min_n} hidden",
    )
    return fig


@styled
def confidence_change_figure(
    challenged: pd.DataFrame, colors: Mapping[str, str] | None = None
) -> Figure:
    """Fig. 5: confidence of the new response minus the responder's previous confidence, when it
    defended its answer vs when it was persuaded. Boxes: quartiles; whiskers: 5-95th percentile;
    diamond: mean. Input: `metrics.challenged_turns` of one run."""
    ch = one_run(challenged)
    ch = ch[ch["delta_confidence"].notna()]
    title = "Confidence change after being contradicted"
    if ch.empty:
        return no_data_figure(title, "no contradicted response with both confidences extracted")
    agents = sorted(ch["agent"].unique())
    outcomes = ("defended", "persuaded")
    fig = new_figure(2.6)
    ax = fig.add_subplot()
    width = 0.7 / len(agents)
    for k, agent in enumerate(agents):
        col = color_of(agent, colors)
        for j, outcome in enumerate(outcomes):
            d = ch.loc[(ch["agent"] == agent) & (ch["outcome"] == outcome), "delta_confidence"]
            if d.empty:
                continue
            x = j - 0.35 + width * (k + 0.5)
            bp = ax.boxplot(
                d.to_numpy(),
                positions=[x],
                widths=width * 0.8,
                whis=(5, 95),
                showfliers=False,
                patch_artist=True,
            )
            for box in bp["boxes"]:
                box.set(facecolor=col, alpha=0.35, edgecolor=col)
            for part in ("whiskers", "caps", "medians"):
                for line in bp[part]:
                    line.set(color=col, lw=1)
            ax.plot([x], [d.mean()], marker="D", ms=3.5, mfc="white", mec=col, zorder=3)
            ax.text(
                x,
                0.01,
                f"n={len(d)}",
                ha="center",
                va="bottom",
                fontsize=8,
                transform=ax.get_xaxis_transform(),
            )
    ax.axhline(0, color="#999999", lw=0.7, ls="--")
    ax.set_xticks(range(len(outcomes)))
    ax.set_xticklabels(["defended own answer", "switched to opponent's"])
    ax.set_xlim(-0.5, len(outcomes) - 0.5)
    q = ch["delta_confidence"].quantile([0.05, 0.95]).to_numpy()
    span = max(0.25, float(np.abs(q).max()) * 1.15)
    ax.set_ylim(-span * 1.25, span)  # room at the bottom for the n labels
    ax.set_ylabel("confidence change (new \u2212 old)")
    ax.set_title(title)
    handles = [
        Patch(facecolor=color_of(a, colors), alpha=0.6, label=short_label(a)) for a in agents
    ]
    fig.legend(handles=handles, loc="outside lower center", ncol=2)
    return fig
