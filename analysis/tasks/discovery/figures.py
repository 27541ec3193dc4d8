"""Causal discovery figures over `analysis.tasks.discovery.metrics`'s summary: the graphs' scores
against what they cost (one point per run or variant and system, 95% CI bars), and the scores by
CLadder's commonsense alignment (do the names help, or mislead?)."""

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
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

__all__ = ["discovery_alignment_figure", "discovery_cost_figure", "system_label"]

MARKERS = "os^Dv<>p"
ALIGNMENT_ORDER = ("Comm.", "Anti-C.", "Nonsens.")


def system_label(run: str, who: str, stage: str, several_runs: bool) -> str:
    """A system as shown: "first: qwen3 (qwen3:32b)", prefixed by the run when there are several."""
    own = who if stage == "final" else f"{stage}: {who}"
    return f"{run}: {own}" if several_runs else own


def _overall(summary: pd.DataFrame) -> pd.DataFrame:
    s = summary[(summary["dimension"] == "overall") & (summary["graphs"] > 0)].copy()
    several = s["run"].nunique() > 1
    s["label"] = [
        system_label(r, w, st, several)
        for r, w, st in zip(s["run"], s["who"], s["stage"], strict=True)
    ]
    return s.reset_index(drop=True)


def _tokens(x: float, _pos: int) -> str:
    if x >= 1000:  # 13.5k and 14k, never two ticks both "14k"
        return f"{x / 1000:.1f}k".replace(".0k", "k")
    return f"{x:.0f}"


def _shd_top(values: pd.DataFrame) -> float:
    """The SHD axis's top: room above the largest mean or CI end, at least 1 (SHD counts pairs,
    so an axis of -0.05 to 0.05 around all-zero means would only mislead)."""
    largest = np.nanmax(values.to_numpy(dtype=float)) if values.size else 0.0
    return max(1.0, float(largest) if np.isfinite(largest) else 0.0) * 1.1


def _bar(ax: Axes, x: float, y: float, lo: float, hi: float, i: int, final: bool, label: str):
    color = MODEL_PALETTE[i % len(MODEL_PALETTE)]
    err = None
    if not (np.isnan(lo) or np.isnan(hi)):
        err = [[max(y - lo, 0)], [max(hi - y, 0)]]
    ax.errorbar(
        [x],
        [y],
        yerr=err,
        fmt=MARKERS[i % len(MARKERS)],
        ms=4,
        color=color,
        mfc=color if final else "white",
        capsize=2,
        lw=0.8,
        label=label,
    )


@styled
def discovery_cost_figure(summary: pd.DataFrame, title: str = "Graphs against cost") -> Figure:
    """Mean SHD (top) and mean edge F1 (bottom) of each system's graphs against its completion
    tokens per graph; filled markers: the protocol's final answers, open: an agent's first
    answers (or its majority / last answers)."""
    s = _overall(summary)
    if s.empty:
        return no_data_figure(title, "no complete graph")
    fig = new_figure(2.2 + 0.16 * len(s) + 2.0, COLUMN_WIDTH)
    top, bottom = fig.subplots(2, 1, sharex=True)
    for i, r in s.iterrows():
        final = r["stage"] == "final"
        x = float(r["tokens_per_graph"])
        _bar(top, x, r["shd"], r["shd_lo"], r["shd_hi"], int(i), final, str(r["label"]))  # type: ignore[call-overload]
        _bar(bottom, x, r["edge_f1"], r["edge_f1_lo"], r["edge_f1_hi"], int(i), final, "")  # type: ignore[call-overload]
    xs = s["tokens_per_graph"].astype(float)
    if xs.min() > 0 and xs.max() / xs.min() > 3:
        top.set_xscale("log")
        bottom.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        bottom.xaxis.set_minor_formatter(NullFormatter())
    bottom.xaxis.set_major_formatter(FuncFormatter(_tokens))
    top.margins(x=0.2)
    top.set_ylabel("mean SHD (lower is better)")
    top.set_ylim(-0.1, _shd_top(s[["shd", "shd_hi"]]))
    bottom.set_ylabel("mean edge F1")
    bottom.set_ylim(-0.02, 1.02)
    bottom.set_xlabel("completion tokens per graph (all parties)")
    top.set_title(title)
    legend_below(fig, top, ncol=1)
    return fig


@styled
def discovery_alignment_figure(summary: pd.DataFrame) -> Figure:
    """Mean SHD with its 95% CI by commonsense alignment, one marker per system."""
    title = "SHD by commonsense alignment"
    a = summary[(summary["dimension"] == "alignment") & (summary["graphs"] > 0)].copy()
    if a.empty:
        return no_data_figure(title, "no graphs with an alignment")
    several = a["run"].nunique() > 1
    a["label"] = [
        system_label(r, w, st, several)
        for r, w, st in zip(a["run"], a["who"], a["stage"], strict=True)
    ]
    groups = [g for g in ALIGNMENT_ORDER if g in set(a["group"])]
    groups += sorted(set(a["group"]) - set(groups))
    labels = list(dict.fromkeys(a["label"]))
    fig = new_figure(2.4 + 0.16 * len(labels))
    ax = fig.add_subplot()
    width = 0.8 / max(len(labels), 1)
    for i, label in enumerate(labels):
        mine = a[a["label"] == label].set_index("group")
        for j, grp in enumerate(groups):
            if grp not in mine.index:
                continue
            r = mine.loc[grp]
            x = j - 0.4 + width * (i + 0.5)
            _bar(
                ax,
                x,
                r["shd"],
                r["shd_lo"],
                r["shd_hi"],
                i,
                r["stage"] == "final",
                label if j == min(k for k, g in enumerate(groups) if g in mine.index) else "",
            )
    ax.set_xticks(range(len(groups)), groups)
    ax.set_xlim(-0.6, len(groups) - 0.4)
    ax.set_ylim(-0.1, _shd_top(a[["shd", "shd_hi"]]))
    ax.set_ylabel("mean SHD (lower is better)")
    ax.set_title(title)
    legend_below(fig, ax, ncol=1)
    return fig
