"""One rule for questions without an exact answer (issue 44): an experiment over a table of one's
own whose questions are partly unscorable; the experiment report's side-by-side accuracy, the
live view's accuracy so far, the notebook's tables and the stopping decisions all leave them out
(numerator and denominator) and say how many they left out."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from crawdad import notebook as nb
from crawdad.config import SelectionConfig
from crawdad.data.tables import make_tables, write_tables
from crawdad.records import DebateRecord
from crawdad.resources import examples
from crawdad.scoring.scored import Accuracy, accuracy, outcome

EXPERIMENT = (
    'baseline = "solo"\n[base]\ntask = "cladder-data"\nprompt_set = "data-context"\n'
    '[variants.solo]\nprotocol = { kind = "solo", samples = 1 }\n'
    'agents = [{ name = "qwen3", model = "qwen3:32b" }]\n'
    "[variants.debate]\n"
    "[stop]\nmin_questions = 2\n"
)


@pytest.fixture(scope="module")
def experiment(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every third question of a small data folder without an exact answer, run as a two-variant
    experiment on the fake server."""
    root = tmp_path_factory.mktemp("scored")
    tables = root / "tables"
    made = make_tables(
        examples(), seed=5, rows=300, selection=SelectionConfig(sample=12), draw_params=True
    )
    write_tables(made, tables, examples(), 5, 300)
    qfile = next(tables.glob("*-q.json"))
    questions = json.loads(qfile.read_text())
    for q in questions[1::3]:
        q["answer"] = None
        for key in ("exact", "perfect"):
            q["meta"]["data"].pop(key, None)
    qfile.write_text(json.dumps(questions))
    spec = root / "exp.toml"
    spec.write_text(EXPERIMENT)
    server = nb.fake_server(str(spec), tables)
    try:
        nb.experiment_sync(spec, tables, root / "exp", server=server.url)
    finally:
        server.stop()
    return root / "exp"


def _records(folder: Path) -> list[DebateRecord]:
    return [DebateRecord.model_validate_json(x) for x in (folder / "debates.jsonl").open()]


def _scored_only(folder: Path) -> Accuracy:
    """The figure by hand: right answers over the questions with an exact answer."""
    records = [r for r in _records(folder) if r.ok]
    scored = [r for r in records if r.gold is not None]
    right = sum(r.final_answer == r.gold for r in scored)
    return Accuracy(right, len(scored), len(records) - len(scored))


def test_the_rule_counts_right_over_scored_and_says_what_it_left_out() -> None:
    acc = accuracy([outcome("yes", "yes"), outcome(None, "yes"), outcome("no", "yes")])
    assert (acc.correct, acc.scored, acc.unscored, acc.value) == (1, 2, 1, 0.5)
    assert acc.of() == "of 2 scored (1 without an exact answer left out)"
    assert accuracy([]).value is None and Accuracy(3, 4).of() == "of 4 scored"
    assert outcome(float("nan"), None) is None  # a frame's missing gold is no answer either


def test_the_experiment_reports_side_by_side_accuracy_is_over_the_scored(
    experiment: Path, tmp_path: Path
) -> None:
    from crawdad.analysis.experiment_report import write_experiment_report

    with pytest.warns(UserWarning):
        md = write_experiment_report(experiment, tmp_path / "report").read_text()
    rows = pd.read_csv(tmp_path / "report/tables/variants.csv")
    overall = rows[rows["dimension"] == "overall"].set_index("variant")
    for variant in ("solo", "debate"):
        want = _scored_only(experiment / variant)
        assert want.unscored > 0 and want.scored > 0
        got = overall.loc[variant]
        assert (got["n"], got["n_correct"], got["unscored"]) == (
            want.scored,
            want.correct,
            want.unscored,
        )
        assert got["acc"] == pytest.approx(want.value)
    left = _scored_only(experiment / "solo").unscored
    # the unscored ones are finished, not "unfinished", and the figure says what it is over
    assert "unfinished" not in md.split("## Variants side by side")[1].split("##")[0]
    assert f"({left} without an exact answer left out)" in md


def test_the_live_views_accuracy_so_far_is_over_the_scored(experiment: Path) -> None:
    from crawdad.view.index import open_sources
    from crawdad.view.live import Live

    sources = open_sources([experiment])
    runs = {r.label: r for s in sources for r in s.runs}
    for run in runs.values():
        run.refresh()
    shown = {r["label"]: r for r in Live(sources).payload(runs)["runs"]}
    for label, run in runs.items():
        want = _scored_only(run.path)
        got = shown[label]
        assert (got["scored"], got["correct"], got["unscored"]) == (
            want.scored,
            want.correct,
            want.unscored,
        )
        assert got["accuracy"] == pytest.approx(want.value)
        assert got["accuracy_of"] == want.of()


def test_the_notebooks_accuracy_and_decisions_leave_them_out(experiment: Path) -> None:
    frames = nb.load_frames(experiment)
    t1 = nb.report_tables(frames)["table1"]
    final = t1[(t1["stage"] == "final") & (t1["agent"] == "all") & (t1["group"] == "Overall")]
    for _, row in final.iterrows():
        want = _scored_only(experiment / str(row["run"]))
        assert (row["n"], row["n_correct"]) == (want.scored, want.correct)
    # the decisions read the unscored questions as settled (as the run does), not as missing
    with pytest.warns(UserWarning):
        decided = nb.decisions(experiment).set_index("variant")
    want = _scored_only(experiment / "debate")
    assert (decided.loc["debate", "settled"], decided.loc["debate", "unscored"]) == (
        want.scored,
        want.unscored,
    )
