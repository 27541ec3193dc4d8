"""The report's section on questions answered from data, on hand-made records whose numbers are
known: accuracy against the label and the perfect answer, the ceiling and the gap, a
stated-numbers run paired by id (and kept to the questions with a table), the pipeline's
steps, tool calls by tool with parse failures apart from wrong calls, and cost."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from crawdad.analysis.report_files import ReportWriter
from crawdad.analysis.tasks.cladder_data.pipeline_scores import (
    end_to_end_table,
    step1_table,
    steps_table,
)
from crawdad.analysis.tasks.cladder_data.ways import (
    accuracy_table,
    cost_table,
    data_section,
    paired_table,
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


def pipe_run(ok_task: bool, tool: bool | None, interp: bool | None, answer: str) -> PipelineRun:
    keys = ("dataset", "treatment", "response", "edges")
    return PipelineRun(
        agent="a",
        task={"causal_problem": ["CEL", "ATE"]},
        extraction={"causal_problem": ok_task} | dict.fromkeys(keys, True),
        extraction_exact={"causal_problem": ok_task}
        | dict.fromkeys(keys, True)
        | {"treatment": False},
        call=ToolCall(name="estimate_effect", mode="pipeline", result={"value": 0.1}),
        tool_correct=tool,
        implied_answer="yes",
        answer=answer,
        interpretation_correct=interp,
    )


def pipeline_records() -> list[DebateRecord]:
    unread = PipelineRun(agent="a", task_error="the reply is not JSON", answer="no")
    return [
        record(1, "yes", protocol="pipeline", pipeline=[pipe_run(True, True, True, "yes")]),
        record(2, "yes", protocol="pipeline", pipeline=[pipe_run(True, True, False, "no")]),
        record(3, "no", protocol="pipeline", pipeline=[pipe_run(False, False, None, "no")]),
        record(4, "no", protocol="pipeline", pipeline=[unread]),
    ]


def test_the_pipelines_step1_is_the_papers_table_3() -> None:
    rows = step1_table({"pipe": pipeline_records()}).set_index("match")
    soft, exact = rows.loc["soft (paper)"], rows.loc["exact"]
    assert soft["n"] == 4 and soft["task_read"] == 0.75
    # ATE questions: causal task, dataset, treatment, response (edges is crawdad's, not in All)
    assert soft["Causal Task"] == 0.5 and soft["Treatment"] == 0.75  # unread: every key wrong
    assert pd.isna(soft["Nodes"]) and pd.isna(soft["Mediator"])  # no question has them
    assert soft["All"] == (2 + 3 + 3 + 3) / 16  # pooled over every key value
    assert exact["Treatment"] == 0.0 and exact["All"] == (2 + 3 + 0 + 3) / 16


def test_the_pipelines_end_to_end_rates_are_the_papers_table_2() -> None:
    rows = end_to_end_table({"pipe": pipeline_records()}).set_index("task")
    assert set(rows.index) == {"all", "ATE"}
    row = rows.loc["all"]
    # q1-q3 passed (task read, tool ran, answered); q3 with the wrong task; q1 won (q2's
    # answer is not the one its right result implies; q3's tool result was wrong)
    assert row["n"] == 4 and row["Pass Rate"] == 0.75
    assert row["Relevance Rate"] == 0.5 and row["Win Rate"] == 0.25


def test_the_pipelines_steps_are_rates_over_its_runs() -> None:
    records = pipeline_records()
    row = steps_table({"pipe": records}).iloc[0]
    assert row["n"] == 4 and row["tool_ran"] == 0.75 and row["tool_correct"] == pytest.approx(2 / 3)
    assert row["n_interpreted"] == 2 and row["interpretation"] == 0.5
    assert row["answer_acc"] == 0.75  # q1 yes (right), q2 no (right), q3 no (wrong), q4 no (right)
    tools = calls_by_tool({"pipe": records}).iloc[0]
    assert tools["tool"] == "estimate_effect" and tools["pipeline_calls"] == 3


def test_the_report_names_the_papers_metrics(tmp_path: Path) -> None:
    sections = data_section([("pipe", pipeline_records())])
    text = "\n".join(ReportWriter(tmp_path).markdown(sections))
    headers = {c.strip() for line in text.splitlines() if "| run" in line for c in line.split("|")}
    table_3 = ("Causal Task", "Dataset", "Nodes", "Treatment", "Response", "Mediator", "Condition")
    table_2 = ("Pass Rate % (CI)", "Relevance Rate % (CI)", "Win Rate % (CI)")
    assert {*table_3, "All", *table_2} <= headers
    assert "soft (paper)" in text and "| exact " in text
    assert (tmp_path / "data" / "tables" / "data_pipeline_step1.csv").exists()
    assert (tmp_path / "data" / "tables" / "data_pipeline_end_to_end.csv").exists()


def test_schema_5_pipeline_steps_are_read_as_exact_matches() -> None:
    """Before schema 6 the pipeline scored CLadder's fields exactly (unused ones right): those
    runs show in the exact rows under the paper's names, and in no soft row."""
    old = PipelineRun(
        agent="a",
        task={"task_type": "ate", "treatment": "X", "outcome": "Y"},
        extraction=dict.fromkeys(
            ("task_type", "treatment", "outcome", "conditions", "mediators", "edges", "all"), True
        ),
        call=ToolCall(name="estimate_effect", mode="pipeline", result={"value": 0.1}),
        tool_correct=True,
        implied_answer="yes",
        answer="yes",
    )
    records = [record(1, "yes", protocol="pipeline", pipeline=[old], schema_version=5)]
    rows = step1_table({"old": records}).set_index("match")
    assert rows.loc["soft (paper)", "n"] == 0 and pd.isna(rows.loc["soft (paper)", "All"])
    assert rows.loc["exact", "Causal Task"] == 1.0 and rows.loc["exact", "Response"] == 1.0
    e2e = end_to_end_table({"old": records}).set_index("task").loc["all"]
    assert e2e["Pass Rate"] == e2e["Relevance Rate"] == e2e["Win Rate"] == 1.0


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
