"""Grading by a grader model against the ideal answer (`[grader]`, paper 004), an option off by
default: on the fakes (the fake extractor plays the grader) every finished debate gets a
verdict recorded beside the exact scoring, the report shows the grader's accuracy beside the
exact one with their agreement, and a bad template is refused before any request."""

from __future__ import annotations

from pathlib import Path

import pytest
from crawdad.analysis.grader_agreement import grading_table
from crawdad.analysis.report import write_report

from crawdad.config import GraderConfig, RunConfig
from crawdad.demo import run_demo
from crawdad.errors import PromptError
from crawdad.prompts import load_prompts, placeholders
from crawdad.run.runner import build_setup
from crawdad.run.store import RunStore
from crawdad.scoring.verdict import read_verdict


@pytest.mark.parametrize(
    ("reply", "verdict"),
    [
        ("They match.\nY\nY", True),
        ("The answers differ.\n**N**\n", False),
        ("Reasoning: yes matches yes\nY.", True),
        ("I think they match.", None),
        ("", None),
    ],
)
def test_the_verdict_is_the_last_line_that_is_a_letter(reply: str, verdict: bool | None) -> None:
    got, reason = read_verdict(reply)
    assert got is verdict and (reason is None) == (verdict is not None)


def test_off_by_default_and_the_paper_set_has_the_template() -> None:
    assert RunConfig().grader is None
    paper = load_prompts("paper")
    assert placeholders(paper["grader"].text) == {"input", "submission", "ideal"}
    assert "grader" not in paper.versions()  # listed only in runs that grade


def test_a_template_without_the_ideal_answer_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "set"
    folder.mkdir()
    (folder / "set.toml").write_text('inherit = "paper"\n')
    (folder / "mine.txt").write_text("Grade $submission for $input.\n")
    cfg = RunConfig(prompt_set=str(folder), grader=GraderConfig(model="m", template="mine"))
    with pytest.raises(PromptError, match=r"\$ideal"):
        build_setup(cfg)
    cfg = RunConfig(grader=GraderConfig(model="m", template="nothing"))
    with pytest.raises(PromptError, match=r"no template nothing\.txt"):
        build_setup(cfg)


def test_the_grader_records_verdicts_and_the_report_shows_them(tmp_path: Path) -> None:
    cfg = RunConfig(seed=2, grader=GraderConfig(model="grader-model"))
    summary = run_demo(tmp_path / "run", limit=6, progress=False, config=cfg)
    assert summary.done_total == 6 and summary.errored == 0
    store = RunStore(tmp_path / "run")
    records = store.records()
    for r in records:
        g = r.grading
        assert g is not None and g.model == "grader-model" and g.ideal == r.gold
        assert g.template.startswith("grader@") and g.turn == len(r.turns) - 1
        assert g.verdict is not None and g.raw.endswith("Y" if g.verdict else "N")
        # the fake grader is right: its verdict is the exact scoring's
        assert g.verdict == (r.final_answer == r.gold)
    assert store.read_manifest().prompts["grader"] == records[0].grading.template  # type: ignore[union-attr]
    row = grading_table([("run", records)]).iloc[0]
    assert row["n"] == row["n_verdict"] == 6 and row["agreement"] == 1.0
    assert row["exact_acc"] == row["grader_acc"]
    md = write_report([tmp_path / "run"], tmp_path / "report").read_text()
    assert "## Grader model against exact scoring" in md and "agreement (%)" in md
    assert (tmp_path / "report" / "grading" / "tables" / "grading.csv").exists()
    # A grader that disagrees on one debate, and one reply it could not read.
    wrong = records[0].grading.model_copy(update={"verdict": not records[0].grading.verdict})  # type: ignore[union-attr]
    lost = records[1].grading.model_copy(update={"verdict": None, "reason": "no letter"})  # type: ignore[union-attr]
    changed = [
        records[0].model_copy(update={"grading": wrong}),
        records[1].model_copy(update={"grading": lost}),
        *records[2:],
    ]
    row = grading_table([("run", changed)]).iloc[0]
    assert (row["n"], row["n_verdict"], row["no_verdict"]) == (6, 5, 1)
    assert row["agreement"] == pytest.approx(4 / 5) and row["kappa"] < 1


def test_without_a_grader_nothing_is_graded(tmp_path: Path) -> None:
    run_demo(tmp_path / "run", limit=2, progress=False, config=RunConfig(seed=2))
    assert all(r.grading is None for r in RunStore(tmp_path / "run").records())
    assert grading_table([("run", RunStore(tmp_path / "run").records())]).empty
