"""`crawdad data audit` and `analyze --audit`: on the CLadder sample and on a tiny hand-made set."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pytest
from crawdad.analysis.contradicted_labels import apply_audit
from crawdad.analysis.load import Run
from typer.testing import CliRunner

from crawdad.cli import app
from crawdad.data.label_audit import audit_dataset, read_audit
from crawdad.errors import DataError
from tests.conftest import SHARED_SAMPLE

# From a worktree the repo-relative path misses the shared folder: CRAWDAD_SAMPLE points at it.
SAMPLE = Path(os.environ.get("CRAWDAD_SAMPLE", SHARED_SAMPLE))


@pytest.fixture(scope="module")
def sample_audit():
    if not (SAMPLE / "cladder-sample-q.json").exists():
        pytest.skip(f"the CLadder sample is not at {SAMPLE}")
    return audit_dataset(SAMPLE)


def test_sample_labels_reproduced_and_every_other_question_listed(sample_audit):
    rows = sample_audit.rows
    reproduced = [r for r in rows if r.label_status in ("agrees", "convention")]
    assert len(rows) == 3652 and not [r for r in rows if r.label_status == "error"]
    assert len(reproduced) / len(rows) >= 0.99  # CLadder's own rules reproduce its labels
    for r in rows:
        if r.label_status != "agrees":
            assert r.reason, r  # every other question is listed with its reason
    # Reproduced only by CLadder's convention: fork backadj, where both adjustment sets are
    # valid by the backdoor criterion and CLadder takes the minimal one.
    assert {(r.query_type, r.graph_id) for r in rows if r.label_status == "convention"} == {
        ("backadj", "fork")
    }
    assert not [r for r in rows if r.label_status == "ambiguous"]
    # Contradicted labels come from inexact stored values, never from the answer rules.
    for r in rows:
        if r.label_status == "contradicted":
            assert r.value_status in ("off", "close") and "inexact" in r.reason


def test_sample_exactness_by_graph(sample_audit):
    """Polytrees are computed exactly by CLadder; loopy graphs' marginals are not (belief
    propagation); correlations (joint enumeration) are exact everywhere."""
    by = {}
    for r in sample_audit.rows:
        by.setdefault((r.query_type, r.graph_id), set()).add(r.value_status)
    for g in ("chain", "fork", "collision"):
        assert by[("marginal", g)] == {"exact"}
    assert "off" in by[("marginal", "mediation")] and "off" in by[("nie", "arrowhead")]
    assert all(by[("correlation", g)] == {"exact"} for (qt, g) in by if qt == "correlation")


def _tiny(tmp_path: Path) -> Path:
    model = {
        "model_id": 0,
        "story_id": "s",
        "graph_id": "mediation",
        "background": "X has a direct effect on V2 and Y. V2 has a direct effect on Y.",
        "structure": "X->V2,X->Y,V2->Y",
        "params": {"p(X)": 0.5, "p(V2 | X)": [0.25, 0.75], "p(Y | X, V2)": [[0, 0.5], [0.5, 1]]},
    }
    base = {"story_id": "s", "graph_id": "mediation", "model_id": 0, "rung": 2, "treatment": "X",
            "outcome": "Y", "treated": True, "result": True}  # fmt: skip
    text = "For X=0, the probability of Y is 12%. For X=1, the probability of Y is 88%."
    qs = [  # ATE = 7/8 - 1/8 = 3/4
        {"question_id": 0, "desc_id": "a", "given_info": text, "question": "Q?", "answer": "yes",
         "meta": {**base, "query_type": "ate", "polarity": True, "groundtruth": 0.75,
                  "given_info": {"p(Y | X)": [0.125, 0.875]}}},
        {"question_id": 1, "desc_id": "b", "given_info": text, "question": "Q?", "answer": "yes",
         "meta": {**base, "query_type": "ate", "polarity": False, "groundtruth": -0.2,
                  "given_info": {"p(Y | X)": [0.125, 0.875]}}},
        {"question_id": 2, "desc_id": "c", "given_info": "P(Y) text 50%.", "question": "Q?",
         "answer": "no", "meta": {**base, "rung": 1, "query_type": "marginal", "polarity": True,
                                  "groundtruth": 0.5, "given_info": {"P(X)": 0.5}}},
    ]  # fmt: skip
    (tmp_path / "tiny-q.json").write_text(json.dumps(qs))
    (tmp_path / "tiny-meta-models.json").write_text(json.dumps([model]))
    return tmp_path / "tiny-q.json"


def test_cli_audit_on_a_tiny_dataset(tmp_path):
    data = _tiny(tmp_path)
    result = CliRunner().invoke(
        app, ["data", "audit", str(data), "--out", "a/r.md", "--json", "a/r.json"]
    )
    assert result.exit_code == 0, result.output
    assert "Contradicted (the exact answer is the other one): 1." in result.output
    audit = read_audit(Path("a/r.json"))
    by = {r.question_id: r for r in audit.rows}
    assert by["0"].label_status == "agrees" and by["0"].value_status == "exact"
    assert by["0"].text_ok is True  # 12% and 88% are 1/8 and 7/8 rounded
    bad = by["1"]  # stored -0.2 for a "decrease" question: the exact ATE 0.75 says "no"
    assert (bad.label_status, bad.exact_answer, bad.exact_value) == ("contradicted", "no", 0.75)
    assert "inexact" in bad.reason and "-0.2" in bad.reason
    assert by["2"].label_status == "agrees" and by["2"].note  # P(Y) = 1/2 exactly: "no"
    report = Path("a/r.md").read_text()
    assert "| 1 | ate | mediation | yes | no | 0.7500 | -0.2000 | contradicted |" in report


def test_cli_audit_on_the_sample(sample_audit, tmp_path):
    result = CliRunner().invoke(app, ["data", "audit", str(SAMPLE), "--json", "s.json"])
    assert result.exit_code == 0, result.output
    assert "3652 questions" in result.output
    assert read_audit(Path("s.json")).n_contradicted == sample_audit.n_contradicted


def test_audit_file_errors_are_messages(tmp_path):
    with pytest.raises(DataError, match="audit file not found"):
        read_audit(tmp_path / "none.json")
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(DataError, match="is not an audit file"):
        read_audit(tmp_path / "bad.json")


def _run(ids: list[str], finals: list[str]) -> Run:
    debates = pd.DataFrame({"question_id": ids, "gold": ["yes"] * len(ids), "final_answer": finals})
    turns = pd.DataFrame({"question_id": ids * 2, "round": [0] * len(ids) + [1] * len(ids)})
    return Run(label="r", path=Path("r"), manifest=None, debates=debates, turns=turns)


def test_analysis_leaves_out_or_marks_contradicted_debates(tmp_path):
    data = _tiny(tmp_path)
    audit = audit_dataset(data)
    run = _run(["0", "1", "2"], ["yes", "no", "no"])
    (left,) = apply_audit([run], audit, "leave-out")
    assert list(left.debates["question_id"]) == ["0", "2"]
    assert set(left.turns["question_id"]) == {"0", "2"}
    assert "1 debate(s)" in left.warnings[-1] and "left out" in left.warnings[-1]
    (marked,) = apply_audit([run], audit, "mark")
    assert list(marked.debates["label_contradicted"]) == [False, True, False]
    assert (
        "stored label in 0%" in marked.warnings[-1]
        and "exact answer in 100%" in marked.warnings[-1]
    )
