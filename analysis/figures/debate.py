"""Figures about the debates' course: rounds to finish (fig. 6), response lengths (fig. 7),
generation time (fig. 8)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd
from crawdad.analysis.figures._style import (
    RESPONSES_COLORS,
    color_of,
    new_figure,
    no_data_figure,
    one_run,
    short_label,
    styled,
)
from crawdad.analysis.metrics.accuracy import ALL
from matplotlib.figure import Figure

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
    ("short trace", "(c) traces behind debate responses \u2264 {limit} chars"),
    ("debate trace", "(d) traces behind all debate responses"),
)


def _panel_points(p: pd.DataFrame, panel: str) -> pd.DataFrame:
    if panel.endswith(" text"):  # a runaway turn without a final text has no text length
        return p[(p["kind"] == panel) & ~p["no_text"]]
    if panel == "short trace":
        return p[(p["kind"] == "debate trace") & p["short"]]
    return p[p["kind"] == panel]


def _length_notes(
    kind: str, agent: str, chars: np.ndarray, no_text: int, short: pd.DataFrame, limit: int
) -> list[str]:
    """The lines written in a panel of fig. 7 for one model."""
    name = agent.split(" (")[0]
    if not len(chars):
        return [f"{name}: no short responses"] if kind == "short trace" else []
    line = f"{name}: median {np.median(chars):,.0f}, n={len(chars):,}"
    if kind == "debate text" and agent in short.index:
        line += f"; {100 * short.loc[agent, 'share_short']:.1f}% \u2264 {limit}"
    lines = [line]
    if no_text:
        turns = "turn" if no_text == 1 else "turns"
        lines.append(f"{name}: +{no_text:,} runaway {turns} with no final text")
    return lines


@styled
def lengths_figure(
    points: pd.DataFrame,
    short: pd.DataFrame,
    colors: Mapping[str, str] | None = None,
    limit: int = 100,
) -> Figure:
    """Fig. 7: distributions of response lengths (characters, log scale) per model: (a) debate
    responses with a final text, with the share of `limit` characters or less and the number of
    runaway turns without a final text; (b) initial responses; (c) the reasoning traces behind
    the short debate responses (the paper's fig. 7c); (d) the traces behind all debate responses.
    Input: `metrics.length_points` and `metrics.short_debate_turns` of one run."""
    p = one_run(points)
    title = "Response lengths"
    if p.empty:
        return no_data_figure(title, "no responses")
    agents = sorted(p["agent"].unique())
    panels = {kind: _panel_points(p, kind) for kind, _ in LENGTH_PANELS}
    shown = pd.concat(panels.values())["chars"]
    hi = max(float(shown.max()) if len(shown) else 10.0, 10.0)
    lo = min(10.0, 10 ** np.floor(np.log10(max(float(shown.min()) if len(shown) else 1.0, 1.0))))
    edges = np.logspace(np.log10(lo), np.log10(hi * 1.05), 36)
    fig = new_figure(7.0)
    axes = fig.subplots(len(LENGTH_PANELS), 1, sharex=True)
    sh = short.set_index("agent")
    for ax, (kind, label) in zip(axes, LENGTH_PANELS, strict=True):
        g = panels[kind]
        notes = []
        for agent in agents:
            c = g.loc[g["agent"] == agent, "chars"].to_numpy()
            col = color_of(agent, colors)
            no_text = 0
            if kind.endswith(" text"):
                is_agent = (p["kind"] == kind) & (p["agent"] == agent)
                no_text = int((is_agent & p["no_text"]).sum())
            notes += [(n, col) for n in _length_notes(kind, agent, c, no_text, sh, limit)]
            if not len(c):
                continue
            ax.hist(
                np.clip(c, lo, None),
                bins=edges,
                weights=np.full(len(c), 100 / len(c)),
                histtype="step",
                lw=1.1,
                color=col,
                label=short_label(agent),
            )
        step = 0.13  # of the axes height, per line of notes
        below_notes = max(0.3, 0.9 - step * len(notes))
        if kind == "debate text":
            ax.axvline(limit, ymax=below_notes, color="#777777", lw=0.8, ls="--")
        for k, (note, col) in enumerate(notes):
            ax.text(
                0.01,
                0.96 - step * k,
                note,
                color=col,
                transform=ax.transAxes,
                va="top",
                fontsize=8,
            )
        ax.set_xscale("log")
        ax.set_xlim(lo, hi * 1.05)
        ax.set_ylabel("% of responses")
        ax.set_title(label.format(limit=limit), loc="left", fontsize=8)
        # room above the bars for the notes
        ax.set_ylim(0, ax.get_ylim()[1] / below_notes)
        ax.set_yticks([y for y in ax.get_yticks() if 0 <= y <= 100])  # no "150%" in the headroom
    axes[-1].set_xlabel("length (characters, log scale)")
    fig.suptitle(title)
    handles, labels = [], []
    for ax in axes:  # a model may be missing from a panel
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    fig.legend(
        handles,
        labels,
        loc="outside lower center",
        ncol=2,
        title=f"dashed line: {limit} characters",
    )
    return fig


def time_label(source: str) -> str:
    """How a time source is named in legends and captions."""
    return "server-reported time" if source == "server" else "wall time"


@styled
def timing_figure(timing: pd.DataFrame, colors: Mapping[str, str] | None = None) -> Figure:
    """Fig. 8: median generation time per model by round, one panel per rung. The time is the
    server's own generation time for a model whose server reports one, else crawdad's wall time
    (which under concurrency includes queueing); the legend says which, per model.
    Input: `metrics.timing` of one run."""
    t = one_run(timing)
    t = t[(t["rung"] != ALL) & (t["agent"] != ALL)]
    title = "Median generation time"
    if t.empty:
        return no_data_figure(title, "no responses")
    rungs = sorted(t["rung"].unique())
    agents = sorted(t["agent"].unique())
    rounds = sorted(t["round"].unique())
    source = t.groupby("agent")["time_source"].first()
    fig = new_figure(2.9)
    axes = fig.subplots(1, len(rungs), sharey=True, squeeze=False)[0]
    for ax, rung in zip(axes, rungs, strict=True):
        for agent in agents:
            g = t[(t["rung"] == rung) & (t["agent"] == agent)].sort_values("round")
            ax.plot(
                g["round"],
                g["median_s"],
                marker="o" if source[agent] == "server" else "s",
                ms=3.5,
                lw=1,
                ls="-" if source[agent] == "server" else "--",
                color=color_of(agent, colors),
                label=agent,
            )
        ax.set_title(f"Rung {rung}", fontsize=8)
        ax.set_xticks(rounds)
        ax.set_xlabel("round")
        ax.grid(axis="y", color="#E5E5E5", lw=0.6)
    axes[0].set_ylim(0, float(t["median_s"].max()) * 1.08)
    axes[0].set_ylabel("median time per response (s)")
    fig.suptitle(title)
    handles, labels = axes[0].get_legend_handles_labels()
    labels = [f"{a if len(a) <= 40 else short_label(a)}: {time_label(source[a])}" for a in labels]
    mixed = source.nunique() > 1
    fig.legend(
        handles,
        labels,
        loc="outside lower center",
        ncol=1,
        title="wall time includes queueing; server time does not" if mixed else None,
    )
    return fig
