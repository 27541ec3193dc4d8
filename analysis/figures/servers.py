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
    fig = new_figure(1.3 * len(shown) + 0.8, width=5.5)
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
                    ax.plot(
                        g[x_col] * scale,
                        g[col] * factor,
                        style,
                        color=color,
                        lw=0.9,
                        label=f"{server}: {names.get(col, col)}" if len(cols) > 1 else server,
                    )
        ax.set_ylabel(label)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        if len(cols) > 1 or len(servers) > 1:
            ax.legend(fontsize=5, loc="upper right")
    axes[-1].set_xlabel(f"Time since the run began ({x_unit})")
    sources = ", ".join(sorted({s for s in series["source"] if s})) or "no server metrics"
    axes[0].set_title(f"{title} (sources: {sources}; crawdad's own counts dotted)", fontsize=7)
    return fig
