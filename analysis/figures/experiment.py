"""The experiment's accuracy-against-compute figure: each variant a point (mean completion tokens
per question, accuracy with its 95% CI), numbered, its name and protocol (the marker's shape) in
the key below, and the self-consistency curve of each solo agent for
k = 1..K samples, so that a debate can be read against a vote of the same cost."""

from __future__ import annotations

import itertools
from collections.abc import Mapping

import numpy as np
import pandas as pd
from crawdad.analysis.figures._style import (
    ALL_COLOR,
    COLUMN_WIDTH,
    MODEL_PALETTE,
    new_figure,
    no_data_figure,
    styled,
)
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg, RendererAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.text import Annotation, Text
from matplotlib.ticker import (
    FuncFormatter,
    LogLocator,
    MaxNLocator,
    NullFormatter,
    StrMethodFormatter,
)
from matplotlib.transforms import Bbox

__all__ = ["MARKERS", "compute_figure", "curve_colors"]

TITLE = "Accuracy against compute"
# One marker per protocol kind; debates dark, solo variants in their model's colour.
MARKERS = {"crawdad": "o", "judge": "s", "simultaneous": "D", "solo": "^"}
LOG_RATIO = 3.0
LINE_STYLES = ("-", "--", ":", "-.")
STOPPED = "stopped early"
# In lines short enough for a legend column of a one-column figure (two columns side by side).
STOPPED_KEY = (
    "hollow, no bar: stopped early by\nthe stopping rule; its fixed-sample\n"
    "interval is not valid after the stop\n(its sequence at the stop: Decisions)"
)
POINT_COLOR = "#222222"  # a log x axis once the costliest point costs this many times the cheapest


def curve_colors(models: list[str]) -> dict[str, str]:
    """One colour per model (sorted), the palette of the run figures."""
    return {m: MODEL_PALETTE[i % len(MODEL_PALETTE)] for i, m in enumerate(sorted(set(models)))}


def _tokens_formatter(x: float, _pos: int) -> str:
    if x >= 10_000:
        return f"{x / 1000:.0f}k"
    if x >= 1000:
        return f"{x / 1000:.1f}k".replace(".0k", "k")
    return f"{x:.0f}"


# Where a point's label may go, in order of preference: beside the marker (dx, dy in points,
# horizontal alignment), or centred above / below its error bar ("above", "below").
_PLACES: tuple[tuple[float, float, str] | str, ...] = (
    (6, 0, "left"),
    (-6, 0, "right"),
    "above",
    "below",
    (5, 9, "left"),
    (5, -9, "left"),
    (-5, 9, "right"),
    (-5, -9, "right"),
    (6, 18, "left"),
    (6, -18, "left"),
    (-6, 18, "right"),
    (-6, -18, "right"),
)


# How much covering each kind of thing costs: a label across an error bar or another label
# misleads, one across a curve only clutters.
_HEAVY, _LIGHT = 10.0, 1.0


def _obstacles(
    ax: Axes, points: pd.DataFrame, pad: float, renderer: RendererAgg
) -> list[tuple[Bbox, float]]:
    """Display boxes a label should not cover, with their weights: every marker and error bar,
    the curves (sampled along their segments) and the texts already drawn (the k labels)."""
    to_disp = ax.transData
    boxes = []
    for _, p in points.iterrows():
        x, lo = to_disp.transform((p["tokens"], 100 * p["ci_lo"]))
        _, hi = to_disp.transform((p["tokens"], 100 * p["ci_hi"]))
        boxes.append((Bbox([[x - 2.5 * pad, lo - pad], [x + 2.5 * pad, hi + pad]]), _HEAVY))
    for line in ax.get_lines():
        data = np.c_[np.asarray(line.get_xdata(), float), np.asarray(line.get_ydata(), float)]
        xy = to_disp.transform(data)
        for a, b in itertools.pairwise(xy):
            for t in np.linspace(0, 1, 12):
                x, y = a + t * (b - a)
                boxes.append((Bbox([[x - pad, y - pad], [x + pad, y + pad]]), _LIGHT))
    boxes += [(t.get_window_extent(renderer), _HEAVY) for t in ax.texts]
    return boxes


def _overlap(box: Bbox, others: list[tuple[Bbox, float]]) -> float:
    total = 0.0
    for o, weight in others:
        w = min(box.x1, o.x1) - max(box.x0, o.x0)
        h = min(box.y1, o.y1) - max(box.y0, o.y0)
        if w > 0 and h > 0:
            total += weight * w * h
    return total


def _place(
    ax: Axes, p: pd.Series, label: str, place: tuple[float, float, str] | str, px: float
) -> Annotation:
    xy = (p["tokens"], 100 * p["acc"])
    _, y = ax.transData.transform(xy)
    if place in ("above", "below"):
        _, end = ax.transData.transform(
            (p["tokens"], 100 * p["ci_hi" if place == "above" else "ci_lo"])
        )
        dx, dy, ha = 0.0, (end - y) / px + (2 if place == "above" else -2), "center"
        va = "bottom" if place == "above" else "top"
    else:
        assert isinstance(place, tuple)
        dx, dy, ha = place
        va = "center"
    text = ax.annotate(
        label,
        xy=xy,
        xytext=(dx, dy),
        textcoords="offset points",
        ha=ha,
        va=va,
        fontsize=7.5,
        color="#222222",
        zorder=5,
        arrowprops=(
            {"arrowstyle": "-", "lw": 0.4, "color": "#8C8C8C", "shrinkA": 1, "shrinkB": 3}
            if dy != 0 and isinstance(place, tuple)
            else None
        ),
    )
    assert isinstance(text, Annotation)
    return text


def _label_points(
    ax: Axes, fig: Figure, points: pd.DataFrame, labels: list[str], label_colors: list[str]
) -> None:
    """Each variant's name near its point, at the place of `_PLACES` that covers least (error
    bars, markers and labels weigh more than curves; earlier places win ties). The points with
    the fewest free places are labelled first. A label set above or below its marker at an
    angle gets a thin leader line."""
    canvas = FigureCanvasAgg(fig)  # measures text; savefig renders with its own canvas anyway
    canvas.draw()  # fixes the limits and the layout, so display coordinates hold
    renderer = canvas.get_renderer()
    px = fig.dpi / 72  # pixels per point
    taken = _obstacles(ax, points, 2 * px, renderer)
    frame = ax.get_window_extent(renderer)

    def extent(text: Annotation) -> Bbox:
        text.update_positions(renderer)
        return Text.get_window_extent(text, renderer)  # the text alone, not its leader line

    def cost(text: Annotation, against: list[tuple[Bbox, float]]) -> float:
        box = extent(text)
        out = box.x0 < frame.x0 or box.x1 > frame.x1 or box.y0 < frame.y0 or box.y1 > frame.y1
        return _overlap(box, against) + (1e12 if out else 0.0)

    rows = list(points.iterrows())
    free: list[int] = []
    for _, p in rows:
        n = 0
        for place in _PLACES:
            text = _place(ax, p, "", place, px)
            text.set_text(labels[len(free)])
            n += cost(text, taken) == 0
            text.remove()
        free.append(n)
    for i in np.argsort(free, kind="stable"):
        p = rows[i][1]
        best: tuple[float, Annotation] | None = None
        for rank, place in enumerate(_PLACES):
            text = _place(ax, p, labels[i], place, px)
            text.set_color(label_colors[i])
            c = cost(text, taken) + rank * 1e-6
            if best is None or c < best[0]:
                if best is not None:
                    best[1].remove()
                best = (c, text)
            else:
                text.remove()
            if c < 1e-3:
                break
        assert best is not None
        taken.append((extent(best[1]).padded(3 * px), _HEAVY))  # a gap between numbers


def _solo_color(
    points_row: pd.Series, curves: pd.DataFrame, colors: Mapping[str, str]
) -> str | None:
    """A solo variant of one agent is the end of that agent's curve: drawn in its colour."""
    if points_row["protocol"] != "solo":
        return None
    mine = curves[curves["variant"] == points_row["variant"]]
    if mine["agent"].nunique() != 1:
        return None
    return colors.get(str(mine["model"].iloc[0]))


def _distinct_curves(curves: pd.DataFrame) -> list[tuple[list[str], pd.DataFrame]]:
    """The curves to draw, each with the variants it stands for: two solo variants that sent
    the same requests of one model (same seeds: an experiment shares them) have the same curve,
    drawn once."""
    out: list[tuple[list[str], pd.DataFrame]] = []
    keys: list[tuple[object, ...]] = []
    for (variant, _agent), c in curves.groupby(["variant", "agent"], sort=False):
        key = (
            str(c["model"].iloc[0]),
            tuple(np.round(c["acc"].to_numpy(float), 9)),
            tuple(np.round(c["tokens"].to_numpy(float), 6)),
        )
        if key in keys:
            out[keys.index(key)][0].append(str(variant))
        else:
            keys.append(key)
            out.append(([str(variant)], c))
    return out


def _draw_curves(ax: Axes, curves: pd.DataFrame, colors: Mapping[str, str], ends: set[str]) -> None:
    """One line per distinct (solo variant, agent) curve; colour per model, line style per
    variant. `ends`: variants whose own point marks the curve's end (their label says k = K)."""
    several = curves["variant"].nunique() > 1
    styles: dict[str, str] = {}
    for variants, c in _distinct_curves(curves):
        model = str(c["model"].iloc[0])
        col = colors.get(model, ALL_COLOR)
        style = styles.setdefault(variants[0], LINE_STYLES[len(styles) % len(LINE_STYLES)])
        label = f"self-consistency, {model}" + (f" ({', '.join(variants)})" if several else "")
        ax.plot(c["tokens"], 100 * c["acc"], style, color=col, lw=1.1, label=label, zorder=2)
        ax.plot(c["tokens"], 100 * c["acc"], ".", color=col, ms=4, zorder=2)
        first, last = c.iloc[0], c.iloc[-1]
        ax.annotate(
            f"k={int(first['k'])}",
            xy=(first["tokens"], 100 * first["acc"]),
            xytext=(-3, 0),
            textcoords="offset points",
            ha="right",
            va="center",
            fontsize=6.5,
            color=col,
        )
        if not ends & set(variants):
            ax.annotate(
                f"k={int(last['k'])}",
                xy=(last["tokens"], 100 * last["acc"]),
                xytext=(3, 0),
                textcoords="offset points",
                ha="left",
                va="center",
                fontsize=6.5,
                color=col,
            )


@styled
def compute_figure(
    points: pd.DataFrame, curves: pd.DataFrame, colors: Mapping[str, str] | None = None
) -> Figure:
    """points: variant, protocol, tokens, acc, ci_lo, ci_hi, baseline (bool), and optionally
    stopped (bool: stopped early by a stopping rule, drawn hollow without its interval); curves:
    `metrics.experiment.curve_frame` (variant, agent, model, k, tokens, acc)."""
    pts = points.dropna(subset=["acc"])
    pts = pts[pts["tokens"] > 0].reset_index(drop=True)
    if pts.empty:
        return no_data_figure(TITLE, "no variant has finished questions with token counts")
    colors = dict(colors or curve_colors(list(curves["model"])))
    n_curves = len(_distinct_curves(curves)) if len(curves) else 0
    has_stopped = "stopped" in pts and bool(pts["stopped"].any())
    # The key of stopped variants is four lines long: the key then takes one column, and the
    # figure grows by its lines (two columns of it would not fit a column's width).
    ncol = 1 if has_stopped else (2 if len(pts) > 3 else 1)
    rows = len(pts) + 4 if has_stopped else (len(pts) + 1) / 2
    fig = new_figure(3.1 + 0.13 * rows + 0.15 * n_curves, COLUMN_WIDTH)
    ax = fig.add_subplot()
    point_colors = [_solo_color(p, curves, colors) for _, p in pts.iterrows()]
    ends = {v for v, c in zip(pts["variant"], point_colors, strict=True) if c is not None}
    _draw_curves(ax, curves, colors, ends)
    # Each point carries a number (short labels find a free place even among crowded points);
    # the key below names each number's variant beside its marker, whose shape is its protocol.
    key: list[tuple[Line2D, str]] = []
    for i, ((_, p), solo) in enumerate(zip(pts.iterrows(), point_colors, strict=True), 1):
        col = solo or POINT_COLOR
        y = 100 * p["acc"]
        marker = MARKERS.get(str(p["protocol"]), "o")
        stopped = bool(p.get("stopped", False))
        face = "white" if p["baseline"] or stopped else col
        # a stopped variant's fixed-sample interval ignores the stopping: not drawn
        bar = None if stopped else [[y - 100 * p["ci_lo"]], [100 * p["ci_hi"] - y]]
        ax.errorbar(
            p["tokens"],
            y,
            yerr=bar,
            fmt=marker,
            ms=5,
            mfc=face,
            mec=col,
            mew=1.2,
            ecolor=col,
            elinewidth=0.9,
            capsize=2,
            zorder=4,
        )
        k = curves.loc[curves["variant"] == p["variant"], "k"]
        name = f"{p['variant']} (k={int(k.max())})" if solo and len(k) else str(p["variant"])
        what = str(p["protocol"]) + (", baseline" if p["baseline"] else "")
        what += f", {STOPPED}" if stopped else ""
        handle = Line2D([], [], ls="none", marker=marker, ms=5, mfc=face, mec=col, mew=1.2)
        key.append((handle, f"{i} {name} ({what})"))
    labels = [str(i) for i in range(1, len(pts) + 1)]
    xs = np.r_[pts["tokens"].to_numpy(float), curves["tokens"].to_numpy(float)]
    xs = xs[xs > 0]
    if xs.max() / xs.min() >= LOG_RATIO:
        ax.set_xscale("log")
        ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("completion tokens per question (log scale)")
        ax.set_xlim(xs.min() / 1.35, xs.max() * 2.0)
        ax.xaxis.set_major_formatter(FuncFormatter(_tokens_formatter))
    else:
        ax.set_xlabel("completion tokens per question")
        span = xs.max() - xs.min() or xs.max()
        ax.set_xlim(xs.min() - 0.12 * span, xs.max() + 0.4 * span)
        # Whole tokens with thousands separators: on a narrow span (1,220 to 1,300) the ticks
        # stay distinct, where a "1.2k" style reads 1.2k five times.
        ax.xaxis.set_major_locator(MaxNLocator(nbins=5, integer=True, min_n_ticks=3))
        ax.xaxis.set_major_formatter(StrMethodFormatter("{x:,.0f}"))
    if has_stopped:  # a legend entry says what the hollow ones are
        key.append(
            (Line2D([], [], ls="none", marker="o", ms=5, mfc="white", mec=POINT_COLOR), STOPPED_KEY)
        )
    ys = np.r_[100 * pts["ci_lo"], 100 * pts["ci_hi"], 100 * curves["acc"]]
    pad = max(1.0, 0.06 * (ys.max() - ys.min()))
    ax.set_ylim(ys.min() - pad, min(ys.max() + pad, 100 + pad))
    ax.set_ylabel("accuracy (%)")
    ax.set_title(TITLE)
    ax.grid(color="#E5E5E5", lw=0.6)
    ax.set_axisbelow(True)
    lines, names = ax.get_legend_handles_labels()  # the self-consistency curves
    fig.legend(
        [*(h for h, _ in key), *lines],
        [*(n for _, n in key), *names],
        loc="outside lower center",
        ncol=ncol,
        fontsize=6.5,
        handlelength=2.2,
        columnspacing=1.0,
    )
    _label_points(ax, fig, pts, labels, [c or POINT_COLOR for c in point_colors])
    return fig
