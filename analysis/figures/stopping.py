"""The stopping decisions' figure: each compared variant's confidence sequence for its paired
difference from the baseline, in points, narrowing over the questions, with the margin and each
stop marked and labelled on the figure. Each band has its own colour, hatching and outline, so
that overlapping bands stay apart (and in greyscale)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from crawdad.analysis.figures._style import (
    COLUMN_WIDTH,
    MODEL_PALETTE,
    legend_below,
    new_figure,
    no_data_figure,
    styled,
)
from matplotlib.figure import Figure

from crawdad.stopping.decide import target_name

__all__ = ["sequences_figure"]

TITLE = "Confidence sequences (paired differences)"
_BOX = {"facecolor": "white", "edgecolor": "none", "alpha": 0.85, "pad": 0.6}
HATCHES = ("////", "\\\\\\\\", "....", "xxxx", "||||", "----", "++++")
LINESTYLES = ("-", "--", "-.", ":")


@styled
def sequences_figure(seqs: pd.DataFrame, decisions: pd.DataFrame, margin: float) -> Figure:
    """`seqs`: SEQUENCE_COLUMNS (the compared variants'); `decisions`: DECISION_COLUMNS."""
    names = list(decisions["variant"])
    seqs = seqs[seqs["variant"].isin(names)]
    if seqs.empty:
        return no_data_figure(TITLE, "no settled question compared with the baseline yet")
    fig = new_figure(3.0, COLUMN_WIDTH)
    ax = fig.add_subplot()
    top = 0.0
    for i, name in enumerate(names):
        s = seqs[seqs["variant"] == name]
        if s.empty:
            continue
        colour = MODEL_PALETTE[i % len(MODEL_PALETTE)]
        d = decisions[decisions["variant"] == name].iloc[0]
        q = s["questions"].to_numpy()
        lo, hi = 100 * s["lower"].to_numpy(float), 100 * s["upper"].to_numpy(float)
        est = 100 * s["estimate"].to_numpy(float)
        ax.fill_between(
            q, lo, hi, facecolor=colour, alpha=0.12, lw=0, zorder=1
        )  # a light wash, then the hatching and the outline on top, fully opaque
        ax.fill_between(
            q,
            lo,
            hi,
            facecolor="none",
            edgecolor=colour,
            hatch=HATCHES[i % len(HATCHES)],
            lw=0,
            alpha=0.55,
            zorder=2,
        )
        style = LINESTYLES[i % len(LINESTYLES)]
        ax.plot(q, lo, color=colour, lw=0.7, ls=style, zorder=3)
        ax.plot(q, hi, color=colour, lw=0.7, ls=style, zorder=3)
        ax.plot(q, est, color=colour, lw=1.1, zorder=4, label=f"{name}: {d['decision']}")
        finite = np.isfinite(lo) & np.isfinite(hi)
        if finite.any():
            top = max(top, float(np.nanmax(np.abs(np.r_[lo[finite], hi[finite]]))))
        if d["decision"] not in ("undecided", "budget spent") and d["questions"]:
            at = int(d["questions"])
            ax.axvline(at, color=colour, lw=0.8, ls=":", zorder=5)
            # past the middle of the (log) axis the label goes left of its line, to stay inside
            span = np.log(max(2.0, float(seqs["questions"].max())))
            left = np.log(max(1, at)) > span / 2
            ax.annotate(
                f"{name} stops: {d['decision']} ({at})",
                (at, 1.0),
                xycoords=("data", "axes fraction"),
                xytext=(-2 if left else 2, -3 - 9 * i),
                textcoords="offset points",
                ha="right" if left else "left",
                va="top",
                fontsize="x-small",
                color=colour,
                bbox=_BOX,
                zorder=6,
            )
    pts = 100 * margin
    ax.axhline(0, color="#222222", lw=0.7, zorder=5)
    for y in (-pts, pts):
        ax.axhline(y, color="#555555", lw=0.7, ls="--", zorder=5)
    xmax = float(seqs["questions"].max())
    for sign, where in (("+", "bottom"), ("−", "top")):
        ax.text(
            xmax,
            pts if sign == "+" else -pts,
            f"{sign}margin ({'' if sign == '+' else '−'}{pts:g} pts)",
            ha="right",
            va=where,
            fontsize="x-small",
            color="#555555",
            bbox=_BOX,
            zorder=6,
        )
    ax.set_xscale("log")
    lim = min(100.0, max(2 * pts, top) * 1.08)
    ax.set_ylim(-lim, lim)
    ax.set_xlabel("questions settled (log scale)")
    ax.set_ylabel("difference from the baseline (points)")
    target = seqs["target"].iloc[0] if "target" in seqs.columns else None
    ax.set_title(TITLE + (f",\nabout {target_name(str(target))}" if target else ""))
    legend_below(fig, ax, ncol=min(3, max(1, len(names))), fontsize="x-small")
    return fig
