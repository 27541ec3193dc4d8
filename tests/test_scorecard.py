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
