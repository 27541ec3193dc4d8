"""The report-section interface: a section computes its tables, figures and text from the loaded
runs and returns them as a `Section`; `crawdad.analysis.report_files.ReportWriter` alone writes
the files (CSV, Markdown, figures) and the Markdown that links them, for report.md and the HTML
made from it alike.

A section is plain data, so a notebook can compute one and look at its frames without writing
anything: `[b.df for b in section.blocks if isinstance(b, Table)]`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, Union

import pandas as pd
from matplotlib.figure import Figure


@dataclass(frozen=True)
class Table:
    """A table: written as `<name>.csv` (full precision) and `<name>.md` in its section's
    `tables/` folder, and shown in report.md as `**title.** line [CSV]` over its Markdown."""

    name: str
    df: pd.DataFrame
    title: str = ""  # the bold lead; none: the line alone
    line: str = ""  # the generated statement shown with it
    # what report.md shows: a frame already formatted for reading, or Markdown; None: `df`
    # (less the columns in `hide`) with numbers as they are
    shown: pd.DataFrame | str | None = None
    hide: tuple[str, ...] = ("run",)
    # files written beside the CSV and linked after it: (label, file name, text), e.g.
    # ("LaTeX", "table1.tex", ...)
    files: tuple[tuple[str, str, str], ...] = ()
    links: tuple[tuple[str, str], ...] = ()  # more links: (label, a file's path in tables/)
    fold: Literal["long", "always", "never"] = "long"  # into <details>; long: past 24 rows
    show: bool = True  # False: written to its files only (a frame the report does not show)


@dataclass(frozen=True)
class Plot:
    """A figure: `draw(*args)` is drawn (in a worker process, with the others) and saved as
    `<name>.png` and `<name>.pdf` in its section's `figures/` folder."""

    name: str
    caption: str
    draw: Callable[..., Figure]
    args: tuple[object, ...] = ()


Block = Union[str, Table, Plot, "Section"]  # a str is a paragraph of Markdown


@dataclass
class Section:
    """A heading (none: blocks only) and its blocks in order. `folder`: where its files go,
    relative to the report folder; a subsection without one uses its parent's."""

    heading: str
    blocks: list[Block] = field(default_factory=list)
    folder: str | None = None

    def tables(self) -> dict[str, pd.DataFrame]:
        """Every table of the section and its subsections, by name."""
        out: dict[str, pd.DataFrame] = {}
        for b in self.blocks:
            if isinstance(b, Table):
                out[b.name] = b.df
            elif isinstance(b, Section):
                out |= b.tables()
        return out

    def plots(self) -> dict[str, Plot]:
        out: dict[str, Plot] = {}
        for b in self.blocks:
            if isinstance(b, Plot):
                out[b.name] = b
            elif isinstance(b, Section):
                out |= b.plots()
        return out


__all__ = ["Block", "Plot", "Section", "Table"]
