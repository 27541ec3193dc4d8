"""write_report end to end on synthetic runs: every table and figure written, non-empty; the
report shows them all; no-data figures; figure hygiene (size, fonts, colours, no pyplot)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from crawdad.analysis import figures as F
from crawdad.analysis import metrics as M
from crawdad.analysis.load import load_run
from crawdad.analysis.report import FIGURES, TABLES, write_report
from crawdad.analysis.synthetic_runs import synthetic_records, write_synthetic_run
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.text import Text

from crawdad.records import DebateRecord
from tests.conftest import made_once


def _two_response_run(folder: Path, n: int = 12) -> Path:
    """A run where every debate ends in agreement after two responses: nothing reaches round 2."""
    folder.mkdir(parents=True)
    (folder / "debates.jsonl").write_text("")
    write_synthetic_run(folder, 0)  # manifest only
    with (folder / "debates.jsonl").open("w") as f:
        for rec in synthetic_records(n, seed=3, trace_chars=(100, 200)):
            t0, t1 = rec.turns[0], rec.turns[1]
            t1 = t1.model_copy(update={"answer": t0.answer, "confidence": 0.9})
            r = rec.model_copy(
                update={
                    "turns": [t0, t1],
                    "final_answer": t1.answer,
                    "final_confidence": 0.9,
                    "consensus": True,
                    "end": "consensus",
                    "error": None,
                    "seed": 0,  # the run's seed (3 only varies the content)
                }
            )
            f.write(DebateRecord.model_validate(r.model_dump()).model_dump_json() + "\n")
    return folder


def _make_report(base: Path) -> None:
    big = write_synthetic_run(base / "big", 250, seed=5, error_rate=0.03, unextracted_rate=0.02)
    # a few errored debates stay errored (never retried): they must be counted, not dropped
    with (big / "debates.jsonl").open("a") as f:
        for rec in synthetic_records(3, seed=9, error_rate=1.0, ids=[1000, 1001, 1002]):
            f.write(rec.model_copy(update={"seed": 5}).model_dump_json() + "\n")
    small = _two_response_run(base / "agree")
    write_report([big, small], base / "out", figures="png,pdf")  # the suite's default is PNG


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> tuple[Path, Path]:
    out = made_once(tmp_path_factory, "report", _make_report) / "out"
    return out / "report.md", out


def test_returns_report_md(report):
    path, out = report
    assert path == out / "report.md" and path.stat().st_size > 0


@pytest.mark.parametrize("run", ["big", "agree"])
def test_every_table_and_figure_is_written(report, run):
    _, out = report
    for name in TABLES:
        for ext in ("csv", "md"):
            p = out / run / "tables" / f"{name}.{ext}"
            assert p.exists() and p.stat().st_size > 0, p
    assert (out / run / "tables" / "table1.tex").read_text().count(r"\midrule") == 1
    for name in FIGURES:
        for ext in ("png", "pdf"):
            p = out / run / "figures" / f"{name}.{ext}"
            assert p.exists() and p.stat().st_size > 1000, p


def test_report_shows_everything(report):
    path, out = report
    text = path.read_text()
    assert text.splitlines()[2].startswith("> **SIMULATED DATA.**")
    assert "## Runs side by side" in text
    for name in ("headline", "table1"):
        assert (out / "compare" / "tables" / f"{name}.csv").stat().st_size > 0
    for run in ("big", "agree"):
        for name in FIGURES:
            assert f"]({run}/figures/{name}.png)" in text
            assert f"]({run}/figures/{name}.pdf)" in text
        for name in TABLES:
            assert f"]({run}/tables/{name}.csv)" in text
    for title, _ in TABLES.values():
        assert text.count(f"**{title}.**") == 2
    # generated sentences carry the numbers
    assert "points after debate" in text and "McNemar p=" in text
    assert "No debate reached a third response" in text  # the "agree" run


def test_figures_are_png_and_pdf_unless_asked(tmp_path, monkeypatch, cli):
    run = _two_response_run(tmp_path / "agree", n=6)
    monkeypatch.delenv("CRAWDAD_FIGURES")
    text = write_report([run], tmp_path / "both", workers=1).read_text()
    assert "](agree/figures/accuracy.pdf)" in text or "](figures/accuracy.pdf)" in text
    assert len(list((tmp_path / "both").rglob("*.pdf"))) == len(
        list((tmp_path / "both").rglob("*.png"))
    )
    monkeypatch.setenv("CRAWDAD_FIGURES", "png")
    text = write_report([run], tmp_path / "png", workers=1).read_text()
    assert "[PDF]" not in text and not list((tmp_path / "png").rglob("*.pdf"))
    assert list((tmp_path / "png").rglob("*.png"))
    code, _, err = cli("analyze", str(run), "--out", str(tmp_path / "x"), "--figures", "svg")
    assert code == 1 and "--figures is 'svg': use png,pdf" in err
    monkeypatch.setenv("CRAWDAD_FIGURES", "pdf")  # PNG is what report.md shows: never left out
    code, _, err = cli("analyze", str(run), "--out", str(tmp_path / "x"))
    assert code == 1 and "CRAWDAD_FIGURES is 'pdf'" in err and not (tmp_path / "x").exists()
    code, _, err = cli("demo", "--limit", "2", "--out", str(tmp_path / "demo"))  # before a debate
    assert code == 1 and "CRAWDAD_FIGURES is 'pdf'" in err and not (tmp_path / "demo").exists()


def test_errored_and_unextracted_are_counted(report):
    _, out = report
    import pandas as pd

    summary = pd.read_csv(out / "big" / "tables" / "summary.csv").iloc[0]
    assert summary["debates"] == 253
    assert summary["errored"] == 3
    errored = pd.read_csv(out / "big" / "tables" / "errored_debates.csv")
    assert sorted(errored["question_id"]) == [1000, 1001, 1002]
    t1 = pd.read_csv(out / "big" / "tables" / "table1.csv")
    overall = t1[(t1["group"] == "Overall") & (t1["agent"] == "all")].set_index("stage")
    assert overall.loc["final", "n"] == 253  # errored debates stay in the denominator
    assert overall.loc["final", "n_errored"] == 3
    assert overall.loc["final", "n_unanswered"] >= 3


def test_no_data_figure_for_empty_persuasion(tmp_path):
    run = load_run(_two_response_run(tmp_path / "r", 5))
    p = M.persuasion(run.debates)
    assert p.empty
    fig = F.persuasion_figure(p)
    texts = " ".join(t.get_text() for t in fig.findobj(Text))
    assert "no data" in texts


def _figures_of(run):
    d, t = run.debates, run.turns
    colors = F.agent_colors(d["first_agent"])
    ch = M.challenged_turns(t)
    return colors, {
        "accuracy": F.accuracy_figure(M.table1(d), colors),
        "persuasion": F.persuasion_figure(M.persuasion(d), colors),
        "confidence": F.confidence_figure(M.confidence_points(d)),
        "change": F.change_figure(M.change_vs_opponent_confidence(ch), colors, min_n=1),
        "conf_change": F.confidence_change_figure(ch, colors),
        "rounds": F.rounds_figure(M.rounds_to_finish(d), M.consensus_by_round(d), colors),
        "lengths": F.lengths_figure(M.length_points(t), M.short_debate_turns(t), colors),
        "timing": F.timing_figure(M.timing(t), colors),
        "reliability": F.reliability_figure(M.reliability(d), M.calibration_summary(d), colors),
    }


def test_figure_hygiene(tmp_path):
    run = load_run(write_synthetic_run(tmp_path / "r", 120, seed=2))
    colors, figs = _figures_of(run)
    for name, fig in figs.items():
        assert fig.get_size_inches()[0] == pytest.approx(3.5), name
        canvas = FigureCanvasAgg(fig)
        canvas.draw()  # runs the constrained layout
        # nothing drawn outside the figure (it would be cut off: no bbox="tight" on save)
        tight = fig.get_tightbbox(canvas.get_renderer())
        w, h = fig.get_size_inches()
        assert tight.x0 >= -0.02 and tight.y0 >= -0.02, (name, tight.bounds)
        assert tight.x1 <= w + 0.02 and tight.y1 <= h + 0.02, (name, tight.bounds)
        sizes = [t.get_fontsize() for t in fig.findobj(Text) if t.get_text().strip()]
        assert sizes and min(sizes) >= 8, (name, min(sizes))
        titles = [t.get_text() for t in fig.findobj(Text) if t.get_text()]
        assert any(titles), name
    # one colour per model, the same in every figure where models are lines
    for name in ("timing", "change"):
        for ax in figs[name].axes:
            for line in ax.get_lines():
                label = line.get_label()
                if label in colors:
                    assert line.get_color() == colors[label], (name, label)
    assert F.agent_colors(["b", "a"]) == F.agent_colors(["a", "b", "a"])


def test_a_saved_figure_is_the_one_matplotlib_lays_out_and_saves(tmp_path):
    """`save` solves the constrained layout once and drops the engine before saving (a draw
    saved per figure): the PNG must be what matplotlib's own savefig writes, layout and all."""
    import io

    import matplotlib as mpl
    from crawdad.analysis.figures._style import DPI, RC

    run = load_run(write_synthetic_run(tmp_path / "r", 60, seed=5))
    points, short = M.length_points(run.turns), M.short_debate_turns(run.turns)
    fig, twin = (F.lengths_figure(points, short) for _ in range(2))  # log axes, notes, legend
    plain = io.BytesIO()
    with mpl.rc_context(RC):
        twin.savefig(plain, format="png", dpi=DPI)  # its layout engine solves the layout here
    (png,) = F.save(fig, tmp_path, "out", "lengths", ("png",))
    assert fig.get_layout_engine() is None
    assert png.read_bytes() == plain.getvalue()


def _pyplot_figures() -> set[int]:
    plt = sys.modules.get("matplotlib.pyplot")
    return set(plt.get_fignums()) if plt is not None else set()


def test_figures_do_not_touch_pyplot(tmp_path):
    run = load_run(write_synthetic_run(tmp_path / "r", 40, seed=4))
    # what another test of this worker left open is its own: only the report's figures count
    before = _pyplot_figures()
    _figures_of(run)
    assert _pyplot_figures() == before


def _markdown_tables(text: str) -> list[list[list[str]]]:
    """Each Markdown table in `text`: its rows (header, separator, body) as lists of cells."""
    tables: list[list[list[str]]] = []
    rows: list[list[str]] = []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            rows.append([c.strip() for c in line.strip().strip("|").split("|")])
        elif rows:
            tables.append(rows)
            rows = []
    return tables


def test_every_tables_headers_are_words_and_its_numbers_right_aligned(report):
    import re

    path, out = report
    snake = re.compile(r"^[a-z]+(_[a-z]+)+$")
    number = re.compile(r"^-?\d+(\.\d+)?$")
    labels = ("rung", "round", "responses", "bin", "question id")  # numbers naming a group
    tables = _markdown_tables(path.read_text())
    assert len(tables) > 20
    numeric_columns = 0
    for header, separator, *body in tables:
        assert not [c for c in header if snake.match(c)], header
        for i, (name, align) in enumerate(zip(header, separator, strict=True)):
            cells = [row[i] for row in body if row[i] not in ("", "-")]
            if cells and all(number.match(c) for c in cells) and name not in labels:
                numeric_columns += 1
                assert align.endswith(":") and not align.startswith(":"), (header, name)
            elif cells and not any(re.search(r"\d", c) for c in cells):
                assert align.startswith(":"), (header, name)  # words stay left
    assert numeric_columns > 50
    # the CSV files keep their column names: they are a data interface
    assert (
        "n_correct" in (out / "big" / "tables" / "accuracy_by_cap.csv").read_text().splitlines()[0]
    )


def test_header_words_and_the_alignment_of_mixed_and_label_columns() -> None:
    import pandas as pd
    from crawdad.analysis.formatting import header_words, to_markdown

    assert header_words("n_correct") == "n correct"
    assert header_words("acc %") == "accuracy (%)"
    assert header_words("median_wall_s") == "median wall (s)"
    assert header_words("questions run") == "questions run"  # already words
    frame = pd.DataFrame(
        {
            "rung": ["1", "2"],
            "95% CI": ["59.5 to 90.8", "13.7 to 69.4"],
            "paper": ["0.45", "server-reported"],
            "tokens_per_q": ["1,204", "-"],
            "note": ["a", "b"],
        }
    )
    separator = to_markdown(frame, formatted=True).splitlines()[1].strip("|").split("|")
    assert [s.startswith(":") for s in separator] == [True, False, True, False, True]
    assert "tokens per question" in to_markdown(frame, formatted=True)
