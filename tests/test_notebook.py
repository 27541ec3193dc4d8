"""crawdad from a notebook (issue 32): inside an already running event loop (as in Jupyter,
where `asyncio.run` fails), an experiment runs on the fakes and loads into pandas frames whose
accuracy per question is the report's; runs are awaited too; every public name is in `crawdad`'s
namespace."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from crawdad.analysis.report import FIGURES, write_report
from matplotlib.figure import Figure

import crawdad
from crawdad.data.demo_questions import EXAMPLES
from crawdad.data.questions import load_cladder
from crawdad.demo import answer_key
from crawdad.fake import FakeServer, paper_models
from crawdad.run.experiment import load_experiment, variant_configs


@pytest.mark.timeout(300)
async def test_an_experiment_runs_and_loads_inside_a_running_loop(
    tmp_path: Path, monkeypatch
) -> None:
    spec, _ = load_experiment(Path("experiments/paper-ablations"))
    names = {
        n
        for c in variant_configs(spec, "x").values()
        for n in [*c.model_names(), c.extractor.model]
    }
    key = answer_key(load_cladder(EXAMPLES).questions)
    models = paper_models(key)
    models |= {n: models["qwen3:32b"] for n in names if n not in models}
    server = FakeServer("ollama", models).start()  # its own thread: this loop stays free
    try:
        monkeypatch.delenv("OLLAMA_HOST", raising=False)  # the servers are named in Python
        summaries = crawdad.experiment_sync(  # a plain asyncio.run would fail in this loop
            "experiments/paper-ablations", "examples", tmp_path / "exp", limit=6, server=server.url
        )
    finally:
        server.stop()
    assert summaries and all(s.done_total == 6 and s.errored == 0 for s in summaries)
    frames = crawdad.load_frames(tmp_path / "exp")
    assert isinstance(frames.debates, pd.DataFrame) and len(frames.runs) == len(summaries)
    assert set(frames.debates["run"]) == {r.label for r in frames.runs}
    by_folder = {s.out.name: s for s in summaries}
    for run in frames.runs:
        d = frames.debates[frames.debates["run"] == run.label]
        summary = by_folder[run.path.name]  # what the run printed: right answers over its questions
        assert (d["final_answer"] == d["gold"]).sum() == summary.correct and len(d) == 6
        if run.label not in ("paper", "judge"):  # the tables of two protocols: enough, and fast
            continue
        # every table the report writes is the notebook's table of the same name
        report = write_report([run.path], tmp_path / f"report-{run.label}", workers=1)
        mine = crawdad.report_tables(crawdad.load_frames(run.path))
        written = sorted(report.parent.rglob("tables/*.csv"))
        assert written
        for csv in written:
            if csv.stem not in mine:
                continue  # a table of another section (discovery, data questions)
            assert mine[csv.stem].to_csv(index=False) == csv.read_text(), csv.stem
        # and every figure the report drew is a notebook figure of the same name
        figs = crawdad.report_figures(crawdad.load_frames(run.path))
        drawn = {p.stem for p in report.parent.rglob("figures/*.png")} & set(FIGURES)
        assert drawn and drawn <= set(figs)
        assert all(isinstance(f, Figure) for f in figs.values())


async def test_a_run_is_awaited_and_its_tool_calls_are_a_frame(tmp_path: Path) -> None:
    key = answer_key(load_cladder(EXAMPLES).questions)
    async with FakeServer("ollama", paper_models(key)) as server:
        config = crawdad.load_config(None).serve_all_from(server.url)
        summary = await crawdad.run_async("examples", tmp_path / "r", config, limit=5)
    assert summary.done_total == 5
    frames = crawdad.load_frames(tmp_path / "r")
    assert len(frames.debates) == 5 and len(frames.turns) >= 5
    assert list(frames.tool_calls.columns)[:3] == ["run", "question_id", "round"]
    assert frames.tool_calls.empty  # the paper's setup gives no tools
    table1 = crawdad.report_tables(frames)["table1"]  # fractions, as documented
    assert table1["acc"].between(0, 1).all() and (table1["ci_hi"] <= 1).all()


def test_the_notebook_names_are_in_crawdads_namespace() -> None:
    for name in ("run_sync", "run_async", "experiment_sync", "experiment_async", "load_frames"):
        assert callable(getattr(crawdad, name)) and name in crawdad.__all__


def test_the_frames_say_the_unit_of_their_accuracies_and_differences() -> None:
    """One convention, stated where a notebook reader looks: fractions in frames, percent and
    points in what crawdad prints (issue 46)."""
    import inspect

    from crawdad.notebook import Frames, decisions, report_tables, sequences

    for documented in (Frames, report_tables, sequences, decisions):
        doc = " ".join((inspect.getdoc(documented) or "").split())
        assert "fraction" in doc and ("points" in doc or "%" in doc), documented
    for documented in (sequences, decisions):
        assert "0.032" in inspect.getdoc(documented) and "3.2 points" in " ".join(
            (inspect.getdoc(documented) or "").split()
        )
    page = " ".join((Path(__file__).parents[1] / "docs/tutorials/notebook.md").read_text().split())
    assert "a fraction from 0 to 1" in page and "differences in percentage points" in page
