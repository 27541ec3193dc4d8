"""Questions without an exact answer (issue 33: a table of one's own): they load, run, are
recorded with a null label (schema 7), and are reported as answered but never scored; the
report says which scores need an exact answer. A table's size limits come from the config."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from crawdad.analysis.report import write_report
from pydantic import ValidationError

from crawdad.config import SelectionConfig, TableLimits, load_config
from crawdad.data.questions import load_cladder
from crawdad.data.tables import make_tables, write_tables
from crawdad.demo import run_demo
from crawdad.errors import DataError
from crawdad.records import SCHEMA_VERSION, DebateRecord
from crawdad.resources import examples, find_config
from crawdad.run.store import RunStore
from crawdad.tasks.cladder_data import load_data_questions
from crawdad.view.index import outcome_of


@pytest.fixture(scope="module")
def answered(tmp_path_factory) -> Path:
    """A data-question folder from crawdad's examples, every question with its exact answer."""
    out = tmp_path_factory.mktemp("data") / "tables"
    result = make_tables(
        examples(), seed=5, rows=300, selection=SelectionConfig(sample=6), draw_params=True
    )
    write_tables(result, out, examples(), 5, 300)
    return out


def _without_answers(src: Path, dst: Path, keep: int = 0) -> Path:
    """A copy of `src` whose questions after the first `keep` have no exact answer (and no
    exact or perfect estimate), and whose models state no alignment: a table of one's own."""
    shutil.copytree(src, dst)
    qfile = next(dst.glob("*-q.json"))
    questions = json.loads(qfile.read_text())
    for q in questions[keep:]:
        q["answer"] = None
        for key in ("exact", "perfect"):
            q["meta"]["data"].pop(key, None)
    qfile.write_text(json.dumps(questions))
    mfile = next(dst.glob("*meta-models.json"))
    models = json.loads(mfile.read_text())
    for m in models:
        m["alignment"] = None
    mfile.write_text(json.dumps(models))
    return dst


def _data_tools() -> object:
    return load_config(find_config(Path("ablations/data-tools")))


def test_a_question_without_an_answer_loads_as_data_and_is_refused_as_cladder(
    answered: Path, tmp_path: Path
) -> None:
    own = _without_answers(answered, tmp_path / "own")
    items = load_data_questions(own).questions
    assert items and all(q.answer is None and q.alignment is None for q in items)
    with pytest.raises(DataError, match=r"answer is null; it must be \"yes\" or \"no\""):
        load_cladder(own)


def test_a_record_without_a_label_is_a_data_question_only() -> None:
    base = {"question_id": 1, "gold": None, "rung": 2, "query_type": "ate", "agents": {"a": "m"}}
    record = DebateRecord.model_validate({**base, "task": "cladder-data"})
    assert record.gold is None and record.alignment is None
    with pytest.raises(ValidationError, match="a CLadder label is yes or no"):
        DebateRecord.model_validate({**base, "task": "cladder", "alignment": "commonsense"})


def test_a_run_over_a_table_of_ones_own_is_answered_and_reported_unscored(
    answered: Path, tmp_path: Path
) -> None:
    own = _without_answers(answered, tmp_path / "own")
    summary = run_demo(tmp_path / "run", config=_data_tools(), data=own, progress=False)
    said = "\n".join(summary.lines())
    assert "no exact answers to score these" in said and "accuracy over" not in said
    records = list(RunStore(tmp_path / "run").records())
    assert records and all(r.gold is None and r.schema_version == SCHEMA_VERSION for r in records)

    md = write_report([tmp_path / "run"], tmp_path / "report").read_text()
    assert "### Questions without an exact answer" in md
    assert "### Accuracy (Table 1)" not in md and "calibration (ECE" in md  # named, not shown
    folder = tmp_path / "report" / "run" / "tables"
    counts = pd.read_csv(folder / "unscored_answers.csv", keep_default_na=False)
    finals = pd.Series([r.final_answer or "unread" for r in records]).value_counts()
    assert dict(zip(counts["final_answer"], counts["debates"], strict=True)) == finals.to_dict()
    each = pd.read_csv(folder / "unscored_debates.csv")
    assert sorted(each["question_id"].astype(str)) == sorted(str(r.question_id) for r in records)
    values = [
        c.result["value"]
        for r in records
        for t in r.turns
        for c in t.tool_calls
        if isinstance(c.result, dict) and "value" in c.result
    ]
    assert values  # the fake agents estimate from the tables: what they got is shown
    shown = " ".join(each["tool_values"].fillna(""))
    assert all(f"{v:.4g}" in shown for v in values)


def test_scores_count_only_the_questions_with_an_exact_answer(
    answered: Path, tmp_path: Path
) -> None:
    own = _without_answers(answered, tmp_path / "own", keep=2)
    summary = run_demo(tmp_path / "run", config=_data_tools(), data=own, progress=False)
    n = summary.done_total
    assert f"final accuracy over the 2 of these {n} with an exact answer" in "\n".join(
        summary.lines()
    )
    write_report([tmp_path / "run"], tmp_path / "report")
    tables = tmp_path / "report" / "run" / "tables"
    scored = pd.read_csv(tables / "summary.csv")
    assert scored["debates"].tolist() == [2]  # every score is over the two answered questions
    unscored = pd.read_csv(tables / "unscored_debates.csv")
    assert len(unscored) == n - 2
    md = (tmp_path / "report" / "report.md").read_text()
    assert f"{n - 2} of this run's debates are over questions without an exact answer" in md


def test_the_viewer_names_an_unscored_debate() -> None:
    assert outcome_of("yes", "no", None, errored=False) == "unscored"
    assert outcome_of("yes", "no", "no", errored=False) == "I->C"


def test_table_limits_are_the_configs(answered: Path) -> None:
    rows = load_data_questions(answered).questions[0].data.rows
    with pytest.raises(DataError, match=r"rows; a table has at most 10 \(table_limits.max_rows\)"):
        load_data_questions(answered, limits=TableLimits(max_rows=10))
    with pytest.raises(DataError, match=r"at most 2 \(table_limits.max_columns\)"):
        load_data_questions(answered, limits=TableLimits(max_columns=2))
    assert load_data_questions(answered, limits=TableLimits(max_rows=rows)).questions


def test_data_info_checks_a_folder_of_ones_own(answered: Path, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from crawdad.cli import app

    own = _without_answers(answered, tmp_path / "own")
    result = CliRunner().invoke(app, ["data", "info", str(own)])
    assert result.exit_code == 0, result.output
    assert "answer: no exact answer=" in result.output and "read from their files" in result.output
