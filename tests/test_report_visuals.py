"""What a reader sees in the report's figures and tables (issue 46, point 5): tick labels that
differ, units said once and kept, no `+nan`, no fractional tokens, headers in words."""

from __future__ import annotations

import pandas as pd
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg


def _tick_labels(ax, axis: str = "x") -> list[str]:
    FigureCanvasAgg(ax.figure).draw()
    ticks = ax.get_xticklabels() if axis == "x" else ax.get_yticklabels()
    lo, hi = ax.get_xlim() if axis == "x" else ax.get_ylim()
    pos = ax.get_xticks() if axis == "x" else ax.get_yticks()
    return [t.get_text() for t, v in zip(ticks, pos, strict=True) if lo <= v <= hi and t.get_text()]


@pytest.mark.parametrize("tokens", [[1210, 1240, 1260, 1290], [1600, 1610, 1590, 1650], [96, 97, 98]])
def test_accuracy_against_compute_has_distinct_x_ticks(tokens: list[int]) -> None:
    from crawdad.analysis.figures.experiment import compute_figure

    n = len(tokens)
    points = pd.DataFrame(
        {
            "variant": [f"v{i}" for i in range(n)],
            "protocol": ["crawdad"] * n,
            "tokens": tokens,
            "acc": [0.8] * n,
            "ci_lo": [0.7] * n,
            "ci_hi": [0.9] * n,
            "baseline": [True] + [False] * (n - 1),
        }
    )
    curves = pd.DataFrame(columns=["variant", "agent", "model", "k", "tokens", "acc"])
    fig = compute_figure(points, curves)
    labels = _tick_labels(fig.axes[0])
    assert len(labels) >= 3 and len(set(labels)) == len(labels), labels
