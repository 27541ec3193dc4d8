"""The report's section on questions answered from data, on hand-made records whose numbers are
known: accuracy against the label and the perfect answer, the ceiling and the gap, a
stated-numbers run paired by id (and kept to the questions with a table), the pipeline's
steps, tool calls by tool with parse failures apart from wrong calls, and cost."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from crawdad.analysis.tasks.cladder_data import (
    accuracy_table,
    cost_table,
    data_section,
    paired_table,
    pipeline_table,
    way_of_answering,
)
from crawdad.analysis.tool_use import calls_by_tool

from crawdad.records import DebateRecord, PipelineRun, ToolCall, Turn

# question id -> (gold, perfect answer): the sample points away from the label on q3
QUESTIONS = {1: ("yes", "yes"), 2: ("no", "no"), 3: ("yes", "no"), 4: ("no", "no")}


def record(qid: int, answer: str | None, *, data: bool = True, **fields: Any) -> DebateRecord:
    gold, perfect = QUESTIONS[qid]
    item = {"perfect_answer": perfect, "perfect_agrees": perfect == gold, "counts_in_text": True}
    return DebateRecord(
        task="cladder-data" if data else "cladder",
        question_id=qid,
        gold=gold,
        rung=1 + qid % 2,
        query_type="ate",
        alignment="commonsense",
        item=item if data else {},
        agents={"a": "m"},
        final_answer=answer,
        **fields,
    )


def turn(calls: list[ToolCall], **fields: Any) -> Turn:
    return Turn(
        round=0,
        agent="a",
        model="m",
        role="sample",
        template="t",
        prompt_sha256="0",
        tool_mode="native",
        tool_calls=calls,
        prompt_tokens=100,
        completion_tokens=50,
        server_seconds=2.0,
        **fields,
    )


def call(name: str, *, error: str | None = None, malformed: bool = False) -> ToolCall:
    return ToolCall(name=name, mode="native", error=error, malformed=malformed)


def test_accuracy_against_the_label_and_the_perfect_answer() -> None:
    # Answers the perfect estimator on every question: 3/4 against the label, 4/4 against it.
    ways = {"tools": [record(q, QUESTIONS[q][1]) for q in QUESTIONS]}
    acc = accuracy_table(ways)
    overall = acc[acc["dimension"] == "overall"].iloc[0]
    assert (overall["n"], overall["n_correct"], overall["n_agree_perfect"]) == (4, 3, 4)
    assert overall["acc"] == 0.75 and overall["acc_perfect"] == 1.0
    assert overall["perfect_acc"] == 0.75 and overall["gap"] == 0.0
    assert overall["ci_lo"] <= 0.75 <= overall["ci_hi"]
    split = acc[acc["dimension"] == "sample vs label"].set_index("group")
    assert split.loc["disagrees", "n"] == 1 and split.loc["disagrees", "acc"] == 0.0
    assert set(acc[acc["dimension"] == "rung"]["group"]) == {"1", "2"}


def test_a_stated_numbers_run_pairs_by_id_and_keeps_the_questions_with_a_table(
    tmp_path: Path,
) -> None:
    stated = [record(q, QUESTIONS[q][0], data=False) for q in QUESTIONS]  # always the label
    stated.append(
        DebateRecord(
            question_id=99,
            gold="yes",
            rung=1,
            query_type="ate",
            alignment="commonsense",
            agents={"a": "m"},
            final_answer="no",
        )
    )  # a question with no table: left out of the comparison
    data = [record(q, QUESTIONS[q][1]) for q in QUESTIONS]
    assert way_of_answering(stated).startswith("stated numbers")
    assert way_of_answering(data).startswith("data in context")
    from crawdad.analysis.report_files import ReportWriter

    text = "\n".join(
        ReportWriter(tmp_path).markdown(data_section([("stated", stated), ("data", data)]))
    )
    assert "## Questions answered from data" in text and "Each way against `stated`" in text
    import pandas as pd

    acc = pd.read_csv(tmp_path / "data" / "tables" / "data_accuracy.csv")
    stated_overall = acc[(acc["run"] == "stated") & (acc["dimension"] == "overall")].iloc[0]
    assert stated_overall["n"] == 4 and stated_overall["acc"] == 1.0  # q99 left out
    assert stated_overall["acc_perfect"] == 0.75  # the perfect answers came from the data run
    paired = paired_table({"stated": stated[:4], "data": data}, "stated").set_index("against")
    assert paired.loc["label", "diff"] == -0.25 and paired.loc["perfect", "diff"] == 0.25
    assert paired.loc["label", "n"] == 4


def test_nothing_without_data_backed_records(tmp_path: Path) -> None:
    assert data_section([("stated", [record(1, "yes", data=False)])]) == []


def test_the_pipelines_steps_are_rates_over_its_runs() -> None:
    def run(ok_task: bool, tool: bool | None, interp: bool | None, answer: str) -> PipelineRun:
        extraction = {f: ok_task for f in ("task_type", "treatment", "outcome")} | {
            "conditions": True,
            "mediators": True,
            "edges": True,
            "all": ok_task,
        }
        return PipelineRun(
            agent="a",
            task={"task_type": "ate"},
            extraction=extraction,
            call=ToolCall(name="estimate_effect", mode="pipeline", result={"value": 0.1}),
            tool_correct=tool,
            implied_answer="yes",
            answer=answer,
            interpretation_correct=interp,
        )

    unread = PipelineRun(agent="a", task_error="the reply is not JSON", answer="no")
    records = [
        record(1, "yes", protocol="pipeline", pipeline=[run(True, True, True, "yes")]),
        record(2, "yes", protocol="pipeline", pipeline=[run(True, True, False, "yes")]),
        record(3, "no", protocol="pipeline", pipeline=[run(False, False, None, "no")]),
        record(4, "no", protocol="pipeline", pipeline=[unread]),
    ]
    row = pipeline_table({"pipe": records}).iloc[0]
    assert row["n"] == 4 and row["task_read"] == 0.75
    assert row["extraction_task_type"] == 0.5 and row["extraction_all"] == 0.5
    assert row["extraction_edges"] == 0.75  # right where read, never where unread
    assert row["tool_ran"] == 0.75 and row["tool_correct"] == pytest.approx(2 / 3)
    assert row["n_interpreted"] == 2 and row["interpretation"] == 0.5
    assert row["answer_acc"] == 0.5  # q1 yes (right), q2 yes (wrong), q3 no (wrong), q4 no (right)
    tools = calls_by_tool({"pipe": records}).iloc[0]
    assert tools["tool"] == "estimate_effect" and tools["pipeline_calls"] == 3


def test_tool_calls_by_tool_count_parse_failures_apart_from_wrong_calls() -> None:
    records = [
        record(1, "yes", turns=[turn([call("estimate_effect"), call("describe_data")])]),
        record(2, "no", turns=[turn([call("estimate_effect", error="Z9 not among the columns")])]),
        record(3, "no", turns=[turn([call("estimate_effect", error="bad", malformed=True)])]),
        record(4, "no", turns=[turn([])]),
    ]
    table = calls_by_tool({"tools": records}).set_index("tool")
    e = table.loc["estimate_effect"]
    assert (e["calls"], e["malformed"], e["wrong"], e["answered"]) == (3, 1, 1, 1)
    assert e["questions_calling"] == 3 and e["calls_per_question"] == 0.75
    assert table.loc["describe_data", "calls"] == 1
    cost = cost_table({"tools": records}).iloc[0]
    assert cost["tokens_per_q"] == 150 and cost["gpu_seconds_per_q"] == 2.0
    assert cost["tool_calls_per_q"] == 1.0
    assert way_of_answering(records) == "data in context + tools (one agent, crawdad)"
