"""The servers during a run: requests running and waiting, KV cache, tokens/s and the
prefix-cache hit rate over the run's own clock, one line per server."""

from __future__ import annotations

import pandas as pd
from crawdad.analysis.figures._style import MODEL_PALETTE, new_figure, no_data_figure, styled
from matplotlib.figure import Figure

__all__ = ["servers_figure"]


@styled
def servers_figure(series: pd.DataFrame) -> Figure:
    """Four panels over time (seconds, minutes, or hours past three, since the run began): requests
    running (solid), waiting (dashed) and crawdad's in flight (dotted); KV cache in use (%);
    tokens/s generated (server) and received (crawdad, dotted); prefix-cache hit rate (%).
    Input: `metrics.servers.server_series` of one run."""
    title = "Servers during the run"
    if series.empty:
        return no_data_figure(title, "no samples of any server")
    longest = series["minutes"].max()
    x_unit, scale = ("h", 1 / 60) if longest > 180 else ("min", 1.0)
    if longest < 2:
        x_unit, scale = "s", 60.0
    x_col = "minutes"
    panels = [
        ("Requests (count)", [("running", "-"), ("waiting", "--"), ("in_flight", ":")], 1.0),
        ("KV cache in use (%)", [("kv_cache", "-")], 100.0),
        ("Tokens/s", [("server_tokens_per_s", "-"), ("received_tokens_per_s", ":")], 1.0),
        ("Prefix-cache hit rate (%)", [("prefix_hit_rate", "-")], 100.0),
    ]
    shown = [p for p in panels if any(series[c].notna().any() for c, _ in p[1])]
    fig = new_figure(1.3 * len(shown) + 0.8, width=6.5)
    axes = fig.subplots(len(shown), 1, sharex=True, squeeze=False)[:, 0]
    names = {"running": "running", "waiting": "waiting", "in_flight": "crawdad in flight"}
    names |= {"server_tokens_per_s": "generated (server)", "received_tokens_per_s": "received"}
    servers = list(dict.fromkeys(series["server"]))
    for ax, (label, cols, factor) in zip(axes, shown, strict=True):
        for i, server in enumerate(servers):
            g = series[series["server"] == server]
            color = MODEL_PALETTE[i % len(MODEL_PALETTE)]
            for col, style in cols:
                if g[col].notna().any():
                    # A line of a few samples is hard to see, and one sample draws no line at
                    # all: each sample gets its marker until they are many.
                    few = g[col].notna().sum() <= FEW_SAMPLES
                    ax.plot(
                        g[x_col] * scale,
                        g[col] * factor,
                        style,
                        color=color,
                        lw=0.9,
                        marker="o" if few else None,
                        ms=2.5,
                        label=f"{server}: {names.get(col, col)}" if len(cols) > 1 else server,
                    )
        ax.set_ylabel(label)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        if len(cols) > 1 or len(servers) > 1:  # beside the panel, never over its data
            ax.legend(fontsize=5, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    axes[-1].set_xlabel(f"Time since the run began ({x_unit})")
    axes[0].set_title(f"{title} ({_sources(series)}; crawdad's own counts dotted)", fontsize=7)
    return fig


# The server's own figures, as opposed to crawdad's counts beside them.
SERVER_FIGURES = ("running", "waiting", "kv_cache", "server_tokens_per_s", "prefix_hit_rate")
FEW_SAMPLES = 30  # a line of at most this many samples marks each one


def _sources(series: pd.DataFrame) -> str:
    """The sources of what is drawn: those of servers that gave a figure of their own (Ollama's
    GET /api/ps gives none of these, so is not named)."""
    drawn = series[series[list(SERVER_FIGURES)].notna().any(axis=1)]
    sources = sorted({s for s in drawn["source"] if s})
    if not sources:
        return "no server gave figures of its own"
    return "sources: " + ", ".join(sources)
