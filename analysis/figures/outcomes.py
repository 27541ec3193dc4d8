"""Figures about answers: accuracy before/after debate, persuasion outcomes (fig. 2), reliability."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd
from crawdad.analysis.figures._style import (
    OUTCOME_COLORS,
    OUTCOME_HATCH,
    OUTCOME_LABELS,
    color_of,
    new_figure,
    no_data_figure,
    one_run,
    short_label,
    styled,
)
from crawdad.analysis.metrics.accuracy import ALL, RUNG_LABELS
from crawdad.analysis.metrics.dynamics import OUTCOMES
from matplotlib.artist import Artist
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

__all__ = ["accuracy_figure", "persuasion_figure", "reliability_figure"]


@styled
def accuracy_figure(table1: pd.DataFrame, colors: Mapping[str, str] | None = None) -> Figure:
    """Initial (open) and final (filled) accuracy per first-speaker model, overall and by rung,
    with 95% Wilson CIs. Input: `metrics.table1` of one run."""
    t = one_run(table1)
    t = t[(t["agent"] != ALL) & t["dimension"].isin(["overall", "rung"])]
    title = "Accuracy before and after debate"
    if t.empty or t["n"].sum() == 0:
        return no_data_figure(title, "no debates")
    groups = ["Overall", *[g for g in RUNG_LABELS.values() if g in set(t["group"])]]
    agents = sorted(t["agent"].unique())
    fig = new_figure(2.6)
    ax = fig.add_subplot()
    width = 0.7 / max(len(agents), 1)
    for i, agent in enumerate(agents):
        c = color_of(agent, colors)
        for j, g in enumerate(groups):
            x = j - 0.35 + width * (i + 0.5)
            rows = t[(t["agent"] == agent) & (t["group"] == g)].set_index("stage")
            if rows.empty or rows["n"].iloc[0] == 0:
                continue
            ini, fin = rows.loc["initial"], rows.loc["final"]
            for stage_row, dx, face in ((ini, -width * 0.18, "white"), (fin, width * 0.18, c)):
                y = 100 * stage_row["acc"]
                err = [[y - 100 * stage_row["ci_lo"]], [100 * stage_row["ci_hi"] - y]]
                ax.errorbar(
                    x + dx,
                    y,
                    yerr=err,
                    fmt="o",
                    ms=4.5,
                    mfc=face,
                    mec=c,
                    ecolor=c,
                    elinewidth=0.9,
                    capsize=1.5,
                    zorder=3,
                )
            ax.annotate(
                "",
                xy=(x + width * 0.18, 100 * fin["acc"]),
                xytext=(x - width * 0.18, 100 * ini["acc"]),
                arrowprops={"arrowstyle": "-", "color": c, "lw": 0.8},
            )
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels([g.split(" (")[0] for g in groups])
    ax.set_ylabel("accuracy (%)")
    ax.set_title(title)
    ax.grid(axis="y", color="#E5E5E5", lw=0.6)
    ax.set_axisbelow(True)
    handles: list[Artist] = [Patch(color=color_of(a, colors), label=short_label(a)) for a in agents]
    handles += [
        Line2D([], [], ls="", marker="o", mfc="white", mec="#333333", label="initial"),
        Line2D([], [], ls="", marker="o", mfc="#333333", mec="#333333", label="after debate"),
    ]
    fig.legend(handles=handles, loc="outside lower center", ncol=2)
    return fig


@styled
def persuasion_figure(persuasion: pd.DataFrame, colors: Mapping[str, str] | None = None) -> Figure:
    """Fig. 2: outcomes of debates with 3+ responses, from the first speaker's initial answer to
    the final answer, per first speaker and rung. A first answer that was not extracted is its
    own (hatched) class, drawn only when there is one. Input: `metrics.persuasion` of one run."""
    p = one_run(persuasion)
    p = p[p["agent"] != ALL]
    title = "Persuasion: first answer \u2192 final answer"
    if p.empty or p["n"].sum() == 0:
        return no_data_figure(title, "no debate reached a third response (round 2)")
    agents = sorted(p["agent"].unique())
    rungs = [*sorted(r for r in p["rung"].unique() if r != ALL), ALL]
    shown = [o for o in OUTCOMES if not o.startswith("U") or p[o].sum() > 0]
    fig = new_figure(0.9 + 0.22 * len(rungs) * len(agents) + 0.35 * len(agents))
    axes = fig.subplots(len(agents), 1, sharex=True, squeeze=False)[:, 0]
    for ax, agent in zip(axes, agents, strict=True):
        rows = p[p["agent"] == agent].set_index("rung").reindex(rungs)
        y = np.arange(len(rungs))[::-1]
        left = np.zeros(len(rungs))
        n = rows["n"].fillna(0).to_numpy()
        for o in shown:
            cnt = rows[o].fillna(0).to_numpy()
            share = np.divide(100 * cnt, n, out=np.zeros_like(left), where=n > 0)
            hatch, hatch_color = OUTCOME_HATCH.get(o, (None, "white"))
            ax.barh(
                y,
                share,
                left=left,
                color=OUTCOME_COLORS[o],
                height=0.75,
                label=OUTCOME_LABELS[o],
                hatch=hatch,
                edgecolor=hatch_color,
                linewidth=0.4,
            )
            for yi, s, l0, cn in zip(y, share, left, cnt, strict=True):
                if s >= 9:
                    dark = o in ("I->I", "C->I", "I->C")
                    ax.text(
                        l0 + s / 2,
                        yi,
                        f"{int(cn)}",
                        ha="center",
                        va="center",
                        fontsize=8,
                        color="white" if dark else "black",
                        bbox={"fc": "white", "ec": "none", "pad": 0.5}
                        if o in OUTCOME_HATCH
                        else None,
                    )
            left += share
        for yi, nn in zip(y, n, strict=True):
            ax.text(101, yi, f"n={int(nn)}", va="center", fontsize=8)
        ax.set_yticks(y)
        ax.set_yticklabels([f"Rung {r}" if r != ALL else "all" for r in rungs])
        ax.set_xlim(0, 100)
        ax.set_title(
            f"first speaker: {short_label(agent, 40)}",
            color=color_of(agent, colors),
            fontsize=8,
            loc="left",
        )
        ax.spines["left"].set_visible(False)
        ax.tick_params(axis="y", length=0)
    axes[-1].set_xlabel("share of debates with 3+ responses (%)")
    fig.suptitle(title)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=2)
    return fig


@styled
def reliability_figure(
    reliability: pd.DataFrame,
    calibration: pd.DataFrame,
    colors: Mapping[str, str] | None = None,
) -> Figure:
    """Reliability diagrams (10 equal-width bins) of initial and final answers per model; marker
    area grows with the number of answers in the bin; ECE in the legend.
    Input: `metrics.reliability` and `metrics.calibration_summary` of one run."""
    r = one_run(reliability)
    r = r[(r["agent"] != ALL) & (r["n"] > 0)]
    title = "Calibration of stated confidence"
    if r.empty:
        return no_data_figure(title, "no answer with an extracted confidence")
    cal = calibration.set_index(["agent", "stage"])
    agents = sorted(r["agent"].unique())
    lo = min(0.5, float(np.floor(r["lo"].min() * 10) / 10))
    fig = new_figure(2.5)
    axes = fig.subplots(1, 2, sharey=True)
    nmax = max(int(r["n"].max()), 1)
    ylo = min(lo, float(np.floor(r["accuracy"].min() * 10) / 10))
    for ax, stage in zip(axes, ("initial", "final"), strict=True):
        ax.plot([lo, 1], [lo, 1], ls="--", color="#999999", lw=0.8)
        eces = []
        for agent in agents:
            g = r[(r["agent"] == agent) & (r["stage"] == stage)].sort_values("bin")
            if g.empty:
                continue
            c = color_of(agent, colors)
            eces.append((agent, c, cal["ece"].get((agent, stage), np.nan)))
            ax.plot(g["mean_confidence"], g["accuracy"], color=c, lw=1, label=short_label(agent))
            ax.scatter(
                g["mean_confidence"],
                g["accuracy"],
                s=8 + 60 * g["n"] / nmax,
                color=c,
                edgecolor="white",
                linewidth=0.4,
                zorder=3,
            )
        for k, (_agent, c, ece) in enumerate(reversed(eces)):
            ax.text(
                0.98,
                0.03 + 0.12 * k,
                f"ECE {ece:.3f}",
                color=c,
                ha="right",
                va="bottom",
                transform=ax.transAxes,
                fontsize=8,
            )
        ax.set_xlim(lo, 1.0)
        ax.set_ylim(ylo, 1.02)
        ax.set_title(stage if stage == "initial" else "final (last speaker)", fontsize=8)
        ax.set_xlabel("stated confidence")
    axes[0].set_ylabel("accuracy (share correct)")
    fig.suptitle(title)
    handles, labels = axes[0].get_legend_handles_labels()
    handles.append(Line2D([], [], ls="--", color="#999999", lw=0.8))
    labels.append("perfect calibration")
    fig.legend(
        handles,
        labels,
        loc="outside lower center",
        ncol=2,
        title="10 equal-width bins; marker area ~ answers in bin",
    )
    return fig
