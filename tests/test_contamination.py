"""The contamination check's table on hand-made debates with known pairs."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from crawdad.analysis.report_files import ReportWriter
from crawdad.analysis.tasks.cladder.contamination import contamination_section, contamination_table

from crawdad.data.variants import twin_of


def _frames(outcomes: list[tuple[str, bool, bool]]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(original id, original right, fresh right) per pair; model "m" answers alone, round 0;
    the debate's final answer is the same."""
    debates, turns = [], []
    for qid, right_o, right_f in outcomes:
        for q, right in ((qid, right_o), (f"fresh3-{qid}", right_f)):
            answer = "yes" if right else "no"
            debates.append(
                dict(run="r", question_id=q, rung=1, gold="yes", final_answer=answer,
                     errored=False, first_agent="m")
            )  # fmt: skip
            turns.append(
                dict(run="r", question_id=q, agent="m", answer=answer, gold="yes", rung=1,
                     errored=False, seen=(), turn_index=0)
            )  # fmt: skip
            turns.append(  # a later turn that saw the first: not an independent answer
                dict(run="r", question_id=q, agent="m", answer="yes", gold="yes", rung=1,
                     errored=False, seen=(0,), turn_index=1)
            )  # fmt: skip
    return pd.DataFrame(debates), pd.DataFrame(turns)


def test_pairs_counted_and_compared():
    # 6 right on both, 4 right only on the original, 0 only on the fresh twin, 2 neither
    outcomes = [(str(i), True, True) for i in range(6)]
    outcomes += [(str(i), True, False) for i in range(6, 10)]
    outcomes += [(str(i), False, False) for i in range(10, 12)]
    debates, turns = _frames(outcomes)
    table = contamination_table(debates, turns)
    row = table[(table["stage"] == "independent") & (table["rung"] == "all")].iloc[0]
    assert row["agent"] == "m" and row["n_pairs"] == 12
    assert row["acc_original"] == 10 / 12 and row["acc_fresh"] == 6 / 12
    assert row["only_original"] == 4 and row["only_fresh"] == 0
    assert abs(row["diff"] + 4 / 12) < 1e-12 and row["diff_ci_hi"] <= 0
    assert abs(row["mcnemar_p"] - 0.125) < 1e-9  # two-sided exact: 2 * 0.5**4
    final = table[(table["stage"] == "final") & (table["rung"] == "all")].iloc[0]
    assert final["agent"] == "debate" and final["n_pairs"] == 12


def test_no_pairs_no_section(tmp_path: Path):
    debates, turns = _frames([("1", True, True)])
    alone = debates[~debates["question_id"].str.startswith("fresh")]
    assert contamination_table(alone, turns).empty
    assert contamination_section(alone, turns) == []
    md = ReportWriter(tmp_path).markdown(contamination_section(debates, turns))
    assert md[0].startswith("## Contamination")
    assert (tmp_path / "contamination" / "tables" / "contamination.csv").is_file()


def test_twin_of():
    assert twin_of("fresh7-12") == "12" and twin_of("fresh0-a-b") == "a-b"
    assert twin_of(12) is None and twin_of("freshly-1") is None
