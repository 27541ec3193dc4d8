"""The stopping decisions' figure: each compared variant's confidence sequence for its paired
difference from the baseline, narrowing over the questions, with the margin and the stop marked."""

from __future__ import annotations

import pandas as pd
from crawdad.analysis.figures._style import (
    COLUMN_WIDTH,
    MODEL_PALETTE,
    new_figure,
    no_data_figure,
    styled,
)
from matplotlib.figure import Figure

__all__ = ["sequences_figure"]

TITLE = "Confidence sequences (paired differences)"


@styled
def sequences_figure(seqs: pd.DataFrame, decisions: pd.DataFrame, margin: float) -> Figure:
    """`seqs`: SEQUENCE_COLUMNS (the compared variants'); `decisions`: DECISION_COLUMNS."""
    names = list(decisions["variant"])
    seqs = seqs[seqs["variant"].isin(names)]
    if seqs.empty:
        return no_data_figure(TITLE, "no settled question compared with the baseline yet")
    fig = new_figure(2.4, COLUMN_WIDTH)
    ax = fig.add_subplot()
    for i, name in enumerate(names):
        s = seqs[seqs["variant"] == name]
        colour = MODEL_PALETTE[i % len(MODEL_PALETTE)]
        d = decisions[decisions["variant"] == name].iloc[0]
        ax.fill_between(s["questions"], s["lower"], s["upper"], color=colour, alpha=0.25, lw=0)
        ax.plot(
            s["questions"], s["estimate"], color=colour, lw=0.8, label=f"{name}: {d['decision']}"
        )
        if d["decision"] != "undecided":
            ax.axvline(d["questions"], color=colour, lw=0.6, ls=":")
    ax.axhline(0, color="#222222", lw=0.6)
    for y in (-margin, margin):
        ax.axhline(y, color="#888888", lw=0.5, ls="--")
    ax.set_xscale("log")
    ax.set_ylim(-1, 1)
    ax.set_xlabel("questions settled (log scale)")
    ax.set_ylabel("difference from the baseline")
    ax.set_title(TITLE)
    ax.legend(fontsize="x-small", loc="upper right")
    return fig
