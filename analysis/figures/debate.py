"""Figures about the debates' course: rounds to finish (fig. 6), response lengths (fig. 7),
generation time (fig. 8)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from analysis.figures._style import (
    RESPONSES_COLORS,
    color_of,
    new_figure,
    no_data_figure,
    one_run,
    short_label,
    styled,
)
from analysis.metrics.accuracy import ALL

__all__ = ["lengths_figure", "rounds_figure", "timing_figure"]


@styled
def rounds_figure(
    rounds: pd.DataFrame,
    consensus: pd.DataFrame,
    colors: Mapping[str, str] | None = None,
) -> Figure:
    """Fig. 6: (a) how many responses finished debates took, by rung; (b) mean responses by rung
    and first speaker; (c) consensus rate by number of responses.
    Input: `metrics.rounds_to_finish` and `metrics.consensus_by_round` of one run."""
    r = one_run(rounds)
    title = "Rounds taken to finish a debate"
    if r.empty:
        return no_data_figure(title, "no finished debate")
    fig = new_figure(6.0)
    ax_a, ax_b, ax_c = fig.subplots(3, 1, height_ratios=[1.25, 1, 0.8])

    # (a) stacked shares by rung, all first speakers
    a = r[r["first_agent"] == ALL]
    rungs = [*sorted(x for x in a["rung"].unique() if x != ALL), ALL]
    resp = sorted(int(x) for x in a["responses"].unique())
    bottom = np.zeros(len(rungs))
    for k in resp:
        share = np.array(
            [100 * a.loc[(a["rung"] == g) & (a["responses"] == k), "share"].sum() for g in rungs]
        )
        ax_a.bar(
            range(len(rungs)),
            share,
            bottom=bottom,
            width=0.65,
            label=f"{k} responses",
            color=RESPONSES_COLORS.get(k, "#3F007D"),
            edgecolor="white",
            lw=0.4,
        )
        for x, (s, b) in enumerate(zip(share, bottom, strict=True)):
            if s >= 7:
                ax_a.text(
                    x,
                    b + s / 2,
                    f"{s:.0f}%",
                    ha="center",
                    va="center",
                    fontsize=8,
                    color="white" if k >= 3 else "black",
                )
        bottom += share
    n_by = [int(a.loc[a["rung"] == g, "n"].iloc[0]) for g in rungs]
    ax_a.set_xticks(range(len(rungs)))
    ax_a.set_xticklabels(
        [
            f"Rung {g}\nn={n}" if g != ALL else f"all\nn={n}"
            for g, n in zip(rungs, n_by, strict=True)
        ]
    )
    ax_a.set_ylabel("debates (%)")
    ax_a.set_ylim(0, 100)
    ax_a.set_title("(a) responses until the debate ended", loc="left", fontsize=8)

    # (b) mean responses per rung and first speaker
    b = r[(r["first_agent"] != ALL)].drop_duplicates(["rung", "first_agent"])
    agents = sorted(b["first_agent"].unique())
    brungs = [g for g in rungs if g != ALL]
    for k, agent in enumerate(agents):
        g = b[b["first_agent"] == agent].set_index("rung").reindex(brungs)
        xs = np.arange(len(brungs)) + (k - (len(agents) - 1) / 2) * 0.1
        ax_b.plot(
            xs,
            g["mean_responses"],
            marker="o",
            ms=4,
            lw=1,
            color=color_of(agent, colors),
            label=f"first: {short_label(agent)}",
        )
    ax_b.set_xticks(range(len(brungs)))
    ax_b.set_xticklabels([f"Rung {g}" for g in brungs])
    ax_b.set_ylabel("mean responses")
    ax_b.set_title("(b) by first speaker", loc="left", fontsize=8)
    ax_b.grid(axis="y", color="#E5E5E5", lw=0.6)

    # (c) consensus rate by number of responses
    c = one_run(consensus)
    c = c[c["responses"] != ALL].copy()
    c["k"] = c["responses"].astype(int)
    c = c.sort_values("k")
    ax_c.bar(
        c["k"].astype(str),
        100 * c["rate"],
        color=[RESPONSES_COLORS.get(k, "#3F007D") for k in c["k"]],
        edgecolor="#555555",
        lw=0.4,
        width=0.6,
    )
    for x, (rate, cons, n) in enumerate(zip(c["rate"], c["consensus"], c["n"], strict=True)):
        ax_c.text(x, 100 * rate + 2, f"{cons:,}/{n:,}", ha="center", va="bottom", fontsize=8)
    ax_c.set_ylim(0, 118)
    ax_c.set_yticks([0, 50, 100])
    ax_c.set_xlabel("responses in the debate")
    ax_c.set_ylabel("consensus (%)")
    ax_c.set_title("(c) consensus reached, by debate length", loc="left", fontsize=8)
    fig.suptitle(title)
    ha, la = ax_a.get_legend_handles_labels()
    hb, lb = ax_b.get_legend_handles_labels()
    fig.legend([*ha, *hb], [*la, *lb], loc="outside lower center", ncol=2)
    return fig


LENGTH_PANELS = (
    ("debate text", "(a) debate responses (rounds 1+)"),
    ("initial text", "(b) initial responses (round 0)"),
    ("debate trace", "(c) reasoning traces of debate responses"),
)


@styled
def lengths_figure(
    points: pd.DataFrame,
    short: pd.DataFrame,
    colors: Mapping[str, str] | None = None,
    limit: int = 100,
) -> Figure:
    """Fig. 7: distributions of response lengths (characters, log scale) per model: (a) debate
    responses, with the share of `limit` characters or less; (b) initial responses; (c) the
    reasoning traces behind debate responses.
    Input: `metrics.length_points` and `metrics.short_debate_turns` of one run."""
    p = one_run(points)
    title = "Response lengths"
    if p.empty:
        return no_data_figure(title, "no responses")
    agents = sorted(p["agent"].unique())
    shown = p["chars"][p["kind"].isin([k for k, _ in LENGTH_PANELS])]
    hi = max(float(shown.max()) if len(shown) else 10.0, 10.0)
    lo = min(10.0, 10 ** np.floor(np.log10(max(float(shown.min()) if len(shown) else 1.0, 1.0))))
    edges = np.logspace(np.log10(lo), np.log10(hi * 1.05), 36)
    fig = new_figure(5.6)
    axes = fig.subplots(3, 1, sharex=True)
    sh = short.set_index("agent")
    for ax, (kind, label) in zip(axes, LENGTH_PANELS, strict=True):
        g = p[p["kind"] == kind]
        notes = []
        for agent in agents:
            c = g.loc[g["agent"] == agent, "chars"].to_numpy()
            if not len(c):
                continue
            col = color_of(agent, colors)
            note = f"median {np.median(c):,.0f}"
            if kind == "debate text" and agent in sh.index:
                note += f"; {100 * sh.loc[agent, 'share_short']:.1f}% \u2264 {limit}"
            notes.append((note, col))
            ax.hist(
                np.clip(c, lo, None),
                bins=edges,
                weights=np.full(len(c), 100 / len(c)),
                histtype="step",
                lw=1.1,
                color=col,
                label=short_label(agent),
            )
        if kind == "debate text":
            ax.axvline(limit, color="#777777", lw=0.8, ls="--")
        for k, (note, col) in enumerate(notes):
            ax.text(
                0.01, 0.95 - 0.13 * k, note, color=col, transform=ax.transAxes, va="top", fontsize=8
            )
        if not notes:
            ax.text(0.5, 0.5, "no data", transform=ax.transAxes, ha="center", color="#777777")
        ax.set_xscale("log")
        ax.set_xlim(lo, hi * 1.05)
        ax.set_ylabel("% of responses")
        ax.set_title(label, loc="left", fontsize=8)
        ax.set_ylim(0, ax.get_ylim()[1] * 1.5)
    axes[-1].set_xlabel("length (characters, log scale)")
    fig.suptitle(title)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(
        handles,
        labels,
        loc="outside lower center",
        ncol=2,
        title=f"dashed line: {limit} characters",
    )
    return fig


@styled
def timing_figure(timing: pd.DataFrame, colors: Mapping[str, str] | None = None) -> Figure:
    """Fig. 8: median generation time (wall seconds) per model by round, one panel per rung.
    Input: `metrics.timing` of one run."""
    t = one_run(timing)
    t = t[(t["rung"] != ALL) & (t["agent"] != ALL)]
    title = "Median generation time"
    if t.empty:
        return no_data_figure(title, "no responses")
    rungs = sorted(t["rung"].unique())
    agents = sorted(t["agent"].unique())
    rounds = sorted(t["round"].unique())
    fig = new_figure(2.7)
    axes = fig.subplots(1, len(rungs), sharey=True, squeeze=False)[0]
    for ax, rung in zip(axes, rungs, strict=True):
        for agent in agents:
            g = t[(t["rung"] == rung) & (t["agent"] == agent)].sort_values("round")
            ax.plot(
                g["round"],
                g["median_s"],
                marker="o",
                ms=3.5,
                lw=1,
                color=color_of(agent, colors),
                label=short_label(agent),
            )
        ax.set_title(f"Rung {rung}", fontsize=8)
        ax.set_xticks(rounds)
        ax.set_xlabel("round")
        ax.grid(axis="y", color="#E5E5E5", lw=0.6)
    axes[0].set_ylim(0, float(t["median_s"].max()) * 1.08)
    axes[0].set_ylabel("median time per response (s)")
    fig.suptitle(title)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=2)
    return fig
