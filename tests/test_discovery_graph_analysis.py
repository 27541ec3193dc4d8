"""The causal discovery analysis of whole-graph records (the discovery-graph task: whole-graph
debates, coding agents, plain-algorithm baselines): one predicted graph per record and system,
read from its edge text, scored against the gold edge text, worked out by hand; a graph without
truth counted, never scored; a single graph (Sachs) shown without a CI.

The hand-made run: coding-protocol records, agents "qa" (model m1) and "rb" (model m2).

  g1: A, B, C; truth A->B, B->C. Final answer "A -> B; C -> B; A -> C; A -> Bogus" (Bogus is no
      variable: that edge is dropped) -> SHD 2 ({B,C} reversed, {A,C} extra), NHD 3/9, edge F1
      0.8 (precision 2/3, recall 1), orientation F1 0.4, pair accuracy 3/6 (A->B, B->A, C->A
      right). qa's first answer "no edges": SHD 2, NHD 2/9, F1 0, pair accuracy 4/6.
  g2: X, Y, Z; truth X->Y, Z->Y. The debate errored after qa's turn: the final graph is the
      empty one (SHD 2, NHD 2/9, F1 0, one errored graph); qa's first answer "X -> Y; Z -> Y"
      is right (SHD 0, F1 1).
  g3: P, Q; gold "" (no truth known, like Auto MPG): counted as unscored, never scored.
  Means over the scored graphs: final SHD 2.0, qa's first SHD 1.0.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from crawdad.analysis.load import load_run
from crawdad.analysis.report import write_report
from crawdad.analysis.tasks.discovery import metrics as D
from crawdad.analysis.tasks.discovery.sections import discovery_frames, is_discovery_run, score

from crawdad.data.discovery_public import SACHS_VARIABLES
from crawdad.records import DatasetInfo, DebateRecord, RunManifest, Turn
from crawdad.run.baseline import run_baseline

AGENTS = {"qa": "m1", "rb": "m2"}
QA = "qa (m1)"
# graph -> (variables, gold, alignment, qa's first answer, final answer or "error")
GRAPHS = {
    "g1": (
        ("A", "B", "C"),
        "A -> B; B -> C",
        "commonsense",
        "no edges",
        "A -> B; C -> B; A -> C; A -> Bogus",
    ),
    "g2": (("X", "Y", "Z"), "X -> Y; Z -> Y", "nonsense", "X -> Y; Z -> Y", "error"),
    "g3": (("P", "Q"), "", None, "P -> Q", "P -> Q"),
}


def _turn(i: int, agent: str, answer: str | None, tokens: int) -> Turn:
    return Turn(
        round=i,
        agent=agent,
        model=AGENTS[agent],
        role="initial" if i == 0 else "critique",
        template="t@000000000000",
        prompt_sha256="0" * 64,
        text="text",
        answer=answer,
        completion_tokens=tokens,
        seconds=1.0,
    )


def handmade_graph_run(path: Path) -> Path:
    records = []
    for graph, (names, gold, alignment, first, final) in GRAPHS.items():
        errored = final == "error"
        turns = [_turn(0, "qa", first, 100)]
        if not errored:
            turns.append(_turn(1, "rb", final, 50))
        records.append(
            DebateRecord(
                task="discovery-graph",
                question_id=graph,
                gold=gold,
                alignment=alignment,  # type: ignore[arg-type]
                graph_id="chain",
                item={
                    "graph": graph,
                    "source": "cladder",
                    "variables": list(names),
                    "truth_known": bool(gold),
                },
                protocol="coding",
                agents=AGENTS,
                speaking_order=["qa", "rb"],
                first_speaker="qa",
                second_speaker="rb",
                turns=turns,
                final_answer=None if errored else final,
                error="ServerUnavailable: gone" if errored else None,
                end="error" if errored else "cap",
                prompt_set="mac-coding",
            )
        )
    path.mkdir(parents=True)
    manifest = RunManifest(
        crawdad_version="0.0.0",
        created_at=datetime(2026, 1, 1, tzinfo=UTC),
        config={"task": "discovery-graph", "seed": 0, "agents": AGENTS},
        prompts={},
        dataset=DatasetInfo(
            source="handmade",
            questions_file="",
            models_file="",
            sha256="0" * 64,
            n_total=3,
            n_selected=3,
        ),
    )
    (path / "manifest.json").write_text(manifest.model_dump_json())
    (path / "debates.jsonl").write_text("".join(r.model_dump_json() + "\n" for r in records))
    return path


def scored(path: Path):  # type: ignore[no-untyped-def]
    with pytest.warns(UserWarning):
        run = load_run(path)
    assert is_discovery_run(run)
    return score(discovery_frames(run))


def _row(scores: pd.DataFrame, who: str, graph: str) -> pd.Series:
    rows = scores[(scores["who"] == who) & (scores["graph"] == graph)]
    assert len(rows) == 1
    return rows.iloc[0]


def test_whole_graph_answers_score_as_worked_out_by_hand(tmp_path: Path) -> None:
    sc = scored(handmade_graph_run(tmp_path / "hand"))
    g1 = _row(sc.scores, D.FINAL, "g1")
    assert (g1["shd"], g1["pair_acc"], g1["predicted_edges"]) == (2, 0.5, 3)
    assert g1["nhd"] == pytest.approx(3 / 9) and g1["edge_f1"] == pytest.approx(0.8)
    assert g1["orientation_f1"] == pytest.approx(0.4)
    first = _row(sc.scores, QA, "g1")
    assert (first["shd"], first["edge_f1"]) == (2, 0.0) and first["pair_acc"] == pytest.approx(
        4 / 6
    )
    g2 = _row(sc.scores, D.FINAL, "g2")
    assert (g2["shd"], g2["edge_f1"], g2["n_errored"]) == (2, 0.0, 1)
    assert _row(sc.scores, QA, "g2")["shd"] == 0
    g3 = _row(sc.scores, D.FINAL, "g3")
    assert not g3["truth_known"] and math.isnan(g3["shd"]) and g3["predicted_edges"] == 1
    overall = sc.summary[sc.summary["dimension"] == "overall"].set_index("who")
    final = overall.loc[D.FINAL]
    assert (final["graphs"], final["graphs_unscored"], final["n_errored"]) == (2, 1, 1)
    assert final["shd"] == 2.0 and overall.loc[QA, "shd"] == 1.0
    assert final["edge_f1_lo"] <= final["edge_f1"] <= final["edge_f1_hi"]
    # rb spoke second: its first answer is g1's final one; in g2 it never spoke (errored).
    rb = overall.loc["rb (m2)"]
    assert (rb["graphs"], rb["n_errored"], rb["shd"]) == (2, 1, 2.0)


def sachs_like(folder: Path, rows: int = 300) -> Path:
    """Sachs's 11 names over a linear non-Gaussian chain praf -> pmek -> p44/42; its "consensus
    graph" is that chain."""
    rng = np.random.default_rng(0)
    table = pd.DataFrame({n: rng.exponential(1.0, rows) for n in SACHS_VARIABLES})
    table["pmek"] += 2 * table["praf"]
    table["p44/42"] += 2 * table["pmek"]
    folder.mkdir(parents=True)
    table.to_csv(folder / "cyto_full_data.csv", index=False)
    (folder / "cyto_full_target.csv").write_text(
        '"Cause","Effect"\n"praf","pmek"\n"pmek","p44/42"\n'
    )
    return folder


def test_one_graph_has_no_ci_and_every_system_shares_the_table(tmp_path: Path) -> None:
    """A plain-algorithm baseline on a Sachs-format set (one graph) beside a hand-made run: one
    table, the baseline's scores without CIs, the hand-made run's with them, the unscored graph
    counted."""
    sachs = sachs_like(tmp_path / "sachs")
    run_baseline(sachs, tmp_path / "lingam-sachs", "direct-lingam", {"threshold": 0.5})
    hand = handmade_graph_run(tmp_path / "hand")
    with pytest.warns(UserWarning):
        report = write_report(
            [hand, tmp_path / "lingam-sachs"], tmp_path / "report", workers=1
        ).read_text()
    section = report.split("## Causal discovery (MAC)")[1].split("**Protocols side by side.**")[0]
    assert "no CI over graphs" in section and "Whole graphs." in section
    scores = section.split("**GPU seconds per graph")[0]  # the scores, not the clock's table
    rows = {
        line.split("|")[1].strip(): line
        for line in scores.splitlines()
        if line.startswith("| ") and "final answer" in line
    }
    assert set(rows) == {"hand", "lingam-sachs"}
    cells = [c.strip() for c in rows["lingam-sachs"].split("|")]
    assert "0.00" in cells and not any("[" in c for c in cells)  # SHD 0, one graph: no CI
    assert "2.00 [2.00, 2.00]" in rows["hand"]  # two graphs, both SHD 2
    assert "over 2 graphs: SHD +1.00" in section  # final against qa's first answers
    header = next(line for line in section.splitlines() if line.startswith("| run"))
    assert "no truth" in header
    summary = pd.read_csv(tmp_path / "report" / "discovery" / "tables" / "summary.csv")
    lingam = summary[(summary["run"] == "lingam-sachs") & (summary["dimension"] == "overall")]
    assert lingam["graphs"].tolist() == [1] and lingam["shd_lo"].isna().all()
    assert set(summary["protocol"]) >= {"algorithm", "coding, whole graph"}
