"""The replication scorecard (issue 29): CRAwDAD's published Table 1 beside a run's, with the
run's CI, and the run labelled a replication only when its setup is the paper's."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from crawdad.analysis import metrics as M
from crawdad.analysis import scorecard as SC
from crawdad.analysis.load import load_run

from crawdad.demo import run_demo


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sc") / "demo"
    run_demo(out, limit=24, progress=False)
    return out


def test_every_published_value_has_its_source_and_group() -> None:
    (block,) = [b for b in SC.published() if b["metric"] == "table1"]
    assert "Table 1" in block["source"] and "CRAwDAD" in block["paper"]
    assert all(len(v) == len(block["groups"]) for v in block["rows"].values())
    assert block["rows"]["qwen3:32b final"][0] == 89.41  # as printed in the paper
    assert set(block["groups"]) == set(SC._TABLE1_GROUPS)


def test_the_demo_shows_the_paper_beside_it_and_says_it_is_simulated(demo: Path) -> None:
    run = load_run(demo)
    card = SC.table1_scorecard(run, M.table1(run.debates))
    assert set(card["model"]) == {"qwen3:32b", "deepseek-r1:32b"}
    assert set(card["stage"]) == {"initial", "final"}
    assert card["setup"].str.startswith("simulated").all()
    row = card[(card["model"] == "qwen3:32b") & (card["stage"] == "final")]
    overall = row[row["group"] == "Overall"].iloc[0]
    assert overall["published"] == pytest.approx(0.8941)
    assert overall["inside_ci"] == (overall["ci_lo"] <= 0.8941 <= overall["ci_hi"])
    assert "published values lie inside this run's 95% CI" in SC.scorecard_lines(card)


def test_a_real_run_of_another_setup_is_a_comparison_not_a_replication(
    demo: Path, tmp_path: Path
) -> None:
    manifest = json.loads((demo / "manifest.json").read_text())
    manifest["simulated"] = False
    manifest["config"]["prompt_set"] = "no-confidence"
    folder = tmp_path / "real"
    folder.mkdir()
    (folder / "manifest.json").write_text(json.dumps(manifest))
    lines = [json.loads(line) for line in (demo / "debates.jsonl").read_text().splitlines()]
    (folder / "debates.jsonl").write_text(
        "".join(json.dumps({**r, "simulated": False}) + "\n" for r in lines)
    )
    run = load_run(folder)
    (block,) = [b for b in SC.published() if b["metric"] == "table1"]
    diffs = SC.setup_differences(run, block["setup"])
    assert "prompt_set no-confidence (the paper: paper)" in diffs
    assert any("24 questions (the paper: 10,112)" in d for d in diffs)
    card = SC.table1_scorecard(run, M.table1(run.debates))
    assert card["setup"].str.startswith("comparison, not a replication").all()


def test_macs_sachs_figures_sit_beside_each_kind_of_system() -> None:
    scores = pd.DataFrame(
        [
            {"run": "pc", "stage": "final", "truth_known": True, "source": "sachs", "shd": 22.0, "nhd": 0.19},
            {"run": "meta-agents", "stage": "final", "truth_known": True, "source": "sachs", "shd": 30.0, "nhd": 0.3},
            {"run": "meta-agents", "stage": "first", "truth_known": True, "source": "sachs", "shd": 9.0, "nhd": 0.1},
            {"run": "mine", "stage": "final", "truth_known": True, "source": "cladder", "shd": 1.0, "nhd": 0.1},
        ]
    )  # fmt: skip
    protocols = {"pc": "algorithm", "meta-agents": "judge (stances)", "mine": "judge (stances)"}
    card = SC.discovery_scorecard(scores, protocols, simulated=set())
    pc = card[card["run"] == "pc"]
    assert pc[["paper_model", "paper_shd", "paper_nhd", "shd"]].values.tolist() == [
        ["PC", 24.0, 0.206, 22.0]
    ]
    assert pc["setup"].iloc[0].startswith("the same algorithm on the same data set")
    debate = card[card["run"] == "meta-agents"]
    assert len(debate) == 6 and set(debate["shd"]) == {30.0}  # the final graphs only
    assert debate["setup"].str.startswith("comparison, not a replication").all()
    assert "mine" not in set(card["run"])  # MAC published nothing on CLadder's graphs


def test_the_papers_stated_figures_and_drawn_findings_beside_the_demo(demo: Path) -> None:
    from crawdad.analysis.report import compute_tables

    run = load_run(demo)
    t = compute_tables(run.debates, run.turns)
    stated = SC.text_scorecard(run, t)
    sentiment = stated[stated["figure"].str.startswith("mean sentiment")]
    assert dict(zip(sentiment["model"], sentiment["published"], strict=True)) == {
        "qwen3:32b": -0.239,
        "deepseek-r1:32b": 0.015,
    }
    short = stated[stated["figure"].str.contains("100 characters")].set_index("model")
    assert short.loc["deepseek-r1:32b", "published"] == pytest.approx(0.226)
    row = t["short_debate_turns"]
    mine = row[row["agent"].str.endswith("(deepseek-r1:32b)")].iloc[0]
    assert short.loc["deepseek-r1:32b", "run_value"] == mine["n_short"] / mine["n_with_text"]
    assert (
        short["ci_lo"].le(short["run_value"]).all() and short["ci_hi"].ge(short["run_value"]).all()
    )
    medians = stated[stated["figure"].str.startswith("median")]
    assert len(medians) == 4 and medians["inside_ci"].isna().all()  # a median has no CI here
    assert stated["source"].str.startswith("Section 4").all()
    claims = SC.claims_scorecard(run, t)
    assert len(claims) == 6 and claims["source"].str.startswith("Fig.").all()
    assert claims["setup"].str.startswith("simulated").all()


def _persuasion(rows: list[tuple[str, int, int]]) -> dict[str, pd.DataFrame]:
    return {
        "persuasion": pd.DataFrame(
            [{"agent": a, "rung": "all", "I->C": ic, "C->I": ci} for a, ic, ci in rows]
        )
    }


def test_a_finding_holds_only_when_it_holds_for_every_model() -> None:
    check = SC._check
    holds, evidence = check(
        "persuasion_net_positive", None, _persuasion([("a (m1)", 5, 1), ("b (m2)", 2, 1)])
    )
    assert holds is True and "a (m1): I->C 5, C->I 1" in evidence
    holds, _ = check(
        "persuasion_net_positive", None, _persuasion([("a (m1)", 5, 1), ("b (m2)", 1, 1)])
    )
    assert holds is False
    holds, evidence = check("persuasion_net_positive", None, _persuasion([("all", 3, 1)]))
    assert holds is None and evidence == "no data in this run"  # the pooled row is no model
    change = pd.DataFrame(
        [
            {"agent": "a (m1)", "outcome": "persuaded", "n_with_confidence": 4, "mean_delta": 0.1},
            {"agent": "a (m1)", "outcome": "defended", "n_with_confidence": 3, "mean_delta": -0.05},
        ]
    )
    assert check("persuaded_gain_confidence", None, {"confidence_change": change})[0] is True
    assert check("defenders_keep_confidence", None, {"confidence_change": change})[0] is False


def test_a_pooled_runs_questions_are_its_shards_together(tmp_path: Path) -> None:
    from crawdad.analysis.synthetic_runs import write_synthetic_run

    a, b = write_synthetic_run(tmp_path / "a", 6), write_synthetic_run(tmp_path / "b", 4)
    run = load_run(a)
    run.shards = [a, b]
    assert run.n_selected() == 10
    diffs = SC.setup_differences(run, {"questions": 10112})
    assert "10 questions (the paper: 10,112)" in diffs
