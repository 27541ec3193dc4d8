"""Shared look of the figures: sizes, fonts, colours, saving, and the "no data" figure.

Figures are built on `matplotlib.figure.Figure` directly, never through pyplot, so no global
figure registry fills up and nothing needs closing; rendering uses the Agg (PNG) and PDF canvases.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, ParamSpec

import matplotlib as mpl
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from crawdad.errors import ConfigError

P = ParamSpec("P")

COLUMN_WIDTH = 3.5  # inches: one column of a two-column paper
FONT = 8  # points, the smallest size used
RC: Any = {  # matplotlib rc settings (typed Any: its stubs want literal keys)
    "font.size": FONT,
    "axes.titlesize": FONT + 1,
    "axes.labelsize": FONT,
    "xtick.labelsize": FONT,
    "ytick.labelsize": FONT,
    "legend.fontsize": FONT,
    "legend.title_fontsize": FONT,
    "figure.titlesize": FONT + 1,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": False,
    "legend.frameon": False,
    "pdf.fonttype": 42,  # embed TrueType: text stays text in the PDF
    "savefig.pad_inches": 0.03,
}
DPI = 300

FORMATS = ("png", "pdf")  # each figure's files: PNG shown in report.md, PDF for a paper
FIGURES_ENV = "CRAWDAD_FIGURES"  # "png": PNG only, for drafts (PDFs are most of a report's time)


def figure_formats(value: str | None = None) -> tuple[str, ...]:
    """The formats each figure is saved in: `value` ("png,pdf" or "png"), else the environment's
    CRAWDAD_FIGURES, else both. PNG is always among them: report.md shows it."""
    raw = value if value is not None else os.environ.get(FIGURES_ENV, "")
    asked = {f.strip().lower() for f in raw.split(",") if f.strip()} or set(FORMATS)
    if not asked <= set(FORMATS) or "png" not in asked:
        where = "--figures" if value is not None else FIGURES_ENV
        raise ConfigError(
            f"{where} is {raw!r}: use png,pdf (both, the default) or png (PNG only, for drafts)"
        )
    return tuple(f for f in FORMATS if f in asked)


# Okabe-Ito colours without green and vermillion, which mean correct / wrong here.
MODEL_PALETTE = ("#0072B2", "#E69F00", "#CC79A7", "#56B4E9", "#8C6D31", "#000000", "#F0E442")
ALL_COLOR = "#4D4D4D"
CORRECT = "#009E73"
WRONG = "#D55E00"
OUTCOME_COLORS = {
    "C->C": "#BDBDBD",
    "I->C": CORRECT,
    "C->I": WRONG,
    "I->I": "#636363",
    "U->C": "#FFFFFF",  # hatched in the outcome's colour: the first answer was not extracted
    "U->I": "#FFFFFF",
}
OUTCOME_HATCH = {"U->C": ("////", CORRECT), "U->I": ("////", "#636363")}
OUTCOME_LABELS = {
    "C->C": "correct \u2192 correct",
    "I->C": "wrong \u2192 correct",
    "C->I": "correct \u2192 wrong",
    "I->I": "wrong \u2192 wrong",
    "U->C": "not extracted \u2192 correct",
    "U->I": "not extracted \u2192 wrong",
}
RESPONSES_COLORS = {1: "#F2F0F7", 2: "#CBC9E2", 3: "#9E9AC8", 4: "#6A51A3", 5: "#3F007D"}


def agent_colors(agents: Iterable[str]) -> dict[str, str]:
    """One colour per agent label, assigned in sorted order (stable for a given set)."""
    names = sorted({a for a in agents if a != "all"})
    out = {a: MODEL_PALETTE[i % len(MODEL_PALETTE)] for i, a in enumerate(names)}
    out["all"] = ALL_COLOR
    return out


def color_of(agent: str, colors: Mapping[str, str] | None) -> str:
    if colors and agent in colors:
        return colors[agent]
    return agent_colors([agent])[agent]


def styled(fn: Callable[P, Figure]) -> Callable[P, Figure]:
    """Build the figure under the shared rc settings."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> Figure:
        with mpl.rc_context(RC):
            return fn(*args, **kwargs)

    return wrapper


def new_figure(height: float, width: float = COLUMN_WIDTH) -> Figure:
    return Figure(figsize=(width, height), layout="constrained")


@styled
def no_data_figure(title: str, note: str, height: float = 1.6) -> Figure:
    """A titled figure that says there is nothing to show, and why."""
    fig = new_figure(height)
    ax = fig.add_subplot()
    ax.set_axis_off()
    ax.set_title(title)
    ax.text(0.5, 0.5, f"no data\n{note}", ha="center", va="center", wrap=True, color="#555555")
    return fig


def one_run(df: pd.DataFrame) -> pd.DataFrame:
    """Figures show one run: refuse a frame with several."""
    if "run" in df.columns and df["run"].nunique() > 1:
        raise ValueError("a figure shows one run; filter the frame by its `run` column first")
    return df


def short_label(agent: str, width: int = 28) -> str:
    """Agent label wrapped onto two lines if long: "name\\n(model)"."""
    if len(agent) <= width or " (" not in agent:
        return agent
    name, model = agent.split(" (", 1)
    return f"{name}\n({model}"


def legend_below(fig: Figure, ax: Axes, ncol: int = 2, **kw: object) -> None:
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="outside lower center", ncol=ncol, **kw)  # type: ignore[arg-type]


def save(
    fig: Figure, root: Path, rel: str, name: str, formats: tuple[str, ...] = FORMATS
) -> list[Path]:
    """Write `name`.png and `name`.pdf (or the `formats` given) into the folder `rel` of `root`
    (made if missing, never through a link: crawdad.safe_files); return their paths."""
    import io

    from crawdad.safe_files import Folder

    paths = []
    with mpl.rc_context(RC), Folder(root, *Path(rel).parts) as out:
        lay_out_once(fig)
        for ext in formats:
            buffer = io.BytesIO()
            fig.savefig(
                buffer,
                format=ext,
                dpi=DPI,
                metadata={"Creator": "crawdad analysis"} if ext == "pdf" else None,
            )
            paths.append(out.write_bytes(f"{name}.{ext}", buffer.getvalue()))
    return paths


def lay_out_once(fig: Figure) -> None:
    """Solve the figure's constrained layout once, at the resolution it is saved at, and keep it.

    With a layout engine set, `savefig` draws the whole figure once without output to run the
    layout, then again into the file; and it would solve the layout again for each format. Done
    here, each format is drawn once, into identical bytes (the same layout, the same DPI). The
    engine is removed, not set to "none": "none" leaves a placeholder engine, for which `savefig`
    still makes that first draw (a tenth of a figure's time)."""
    engine = fig.get_layout_engine()
    if engine is None:
        return
    fig.set_dpi(DPI)
    engine.execute(fig)
    fig.set_layout_engine(None)
