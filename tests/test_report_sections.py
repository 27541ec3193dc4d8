"""The report-section interface: a section is computed (tables, figures, text) and returned; the
one writer (`ReportWriter`) writes its files and links; a task's own sections are found through
the task (`Task.report_sections`), so a task's analysis lives in one place and `report.py` does
not name it."""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import pytest
from crawdad.analysis.load import load_run
from crawdad.analysis.report import write_report
from crawdad.analysis.report_files import ReportWriter
from crawdad.analysis.section import Plot, Section, Table
from crawdad.analysis.synthetic_runs import write_synthetic_run

from crawdad.tasks import TASKS

OWN_SECTIONS = """
import pandas as pd
import matplotlib.pyplot as plt
from crawdad.analysis.section import Plot, Section, Table


def _bars(counts):
    fig, ax = plt.subplots()
    ax.bar(counts["agent"], counts["n"])
    return fig


def run_sections(runs):
    counts = pd.DataFrame(
        [{"run": r.label, "agent": a, "n": n} for r in runs
         for a, n in r.turns["agent"].value_counts().sort_index().items()]
    )
    return [Section("Turns per agent (a task's own section)", [
        "Counted from the turns frame.",
        Table("turns_per_agent", counts, "Turns per agent", "One row per agent."),
        Plot("turns_per_agent", "Turns per agent", _bars, (counts,)),
    ], folder="own")]
"""


def _bars(df: pd.DataFrame) -> plt.Figure:
    fig, ax = plt.subplots()
    ax.plot(df["x"], df["y"])
    return fig


def test_the_writer_writes_every_table_and_figure_and_links_them(tmp_path: Path) -> None:
    long = pd.DataFrame({"run": "r", "x": range(30), "y": range(30)})
    section = Section(
        "Top",
        [
            "Text first.",
            Table(
                "long", long, "A long table", "Thirty rows.", files=(("LaTeX", "long.tex", "%"),)
            ),
            Table("hidden", long.head(2), show=False),
            Section("Inside", [Plot("line", "A line", _bars, (long,))], folder="elsewhere"),
        ],
        folder="top",
    )
    w = ReportWriter(tmp_path)
    md = "\n".join(w.markdown([section]))
    w.draw()
    assert md.startswith("## Top\n\nText first.") and "### Inside" in md
    assert (
        "**A long table.** Thirty rows. [CSV](top/tables/long.csv) · [LaTeX](top/tables/long.tex)"
        in md
    )
    assert "<details><summary>A long table: 30 rows</summary>" in md  # folded past 24 rows
    assert "| run |" not in md and pd.read_csv(tmp_path / "top/tables/long.csv").shape == (30, 3)
    assert (tmp_path / "top/tables/hidden.csv").is_file() and "hidden" not in md
    assert "![A line](elsewhere/figures/line.png)" in md
    assert (tmp_path / "elsewhere/figures/line.png").stat().st_size > 0
    assert section.tables().keys() == {"long", "hidden"} and section.plots().keys() == {"line"}


@pytest.fixture
def own_sections(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "own_sections.py").write_text(OWN_SECTIONS)
    monkeypatch.syspath_prepend(str(tmp_path))
    task = TASKS["cladder"]
    monkeypatch.setattr(task, "report_sections", (*task.report_sections, "own_sections"))
    yield "own_sections"
    sys.modules.pop("own_sections", None)


def test_a_task_names_its_sections_and_the_report_shows_them(
    tmp_path: Path, own_sections: str
) -> None:
    run = write_synthetic_run(tmp_path / "run", 12)
    out = tmp_path / "report"
    md = write_report([run], out, workers=1).read_text()
    assert "## Turns per agent (a task's own section)" in md
    assert "[CSV](own/tables/turns_per_agent.csv)" in md
    counts = pd.read_csv(out / "own" / "tables" / "turns_per_agent.csv")
    assert counts["n"].sum() == len(load_run(run).turns)
    assert (out / "own" / "figures" / "turns_per_agent.png").is_file()
    # before the runs' own sections, after the header
    assert md.index("Turns per agent") < md.index("## Run `run`")


def test_a_task_without_sections_gets_the_yes_no_sections_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(TASKS["cladder"], "report_sections", ())
    run = write_synthetic_run(tmp_path / "run", 6)
    md = write_report([run], tmp_path / "report", workers=1).read_text()
    assert "## Run `run`" in md and "Table 1" in md
