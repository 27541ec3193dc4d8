"""LLM4Causal's evaluation (paper 002) of the pipeline protocol's runs, under the paper's names.

- Step 1, causal entity extraction (its Table 3): per key, the share of the agent's runs whose
  gold task has the key in which the model retrieved it; the causal task and the dataset by
  exact match, the other keys by the paper's soft match (the gold a subset of the output),
  and every key by exact match beside; `All` pools every key value of the paper's keys over
  the runs (the paper's All column is this pooled share: it is the key accuracies weighted by
  how many questions have each key). A task that could not be read counts every key wrong.
- End to end (its Table 2), by the question's task: Pass Rate, the share of runs that gave an
  output (the task read, every step-2 call ran without an error, step 3 answered yes or no);
  Relevance Rate, those that passed with the right causal task; Win Rate, those that passed,
  whose tool results hold the question's own quantity and whose answer is the one that
  quantity implies (the label for questions answered from the graph).
- Steps 2 and 3 as crawdad scores them: the tool's result right, the interpretation right where
  it was, the answer against the label.

Pure functions over records; `pipeline_section` writes the report's part.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd
from crawdad.analysis.formatting import fmt_pct, fmt_pct_ci
from crawdad.analysis.metrics._stats import wilson_proportion
from crawdad.analysis.section import Block, Table

from crawdad.records import DebateRecord, PipelineRun
from crawdad.tools.llm4causal import KEYS, TASK_KEYS, category

Ways = Mapping[str, list[DebateRecord]]

# The paper's column names for its keys (Table 3), and crawdad's edges.
KEY_NAMES = {
    "causal_problem": "Causal Task",
    "dataset": "Dataset",
    "nodes": "Nodes",
    "treatment": "Treatment",
    "response": "Response",
    "mediator": "Mediator",
    "condition": "Condition",
    "edges": "edges (crawdad)",
}
# Schema 4 and 5 records scored CLadder's fields exactly; their names in the paper's keys.
OLD_FIELDS = {
    "task_type": "causal_problem",
    "treatment": "treatment",
    "outcome": "response",
    "conditions": "condition",
    "mediators": "mediator",
    "edges": "edges",
}
RATES = ("Pass Rate", "Relevance Rate", "Win Rate")


def _old(p: PipelineRun) -> bool:
    return bool(p.extraction) and "task_type" in p.extraction


def expected_keys(record: DebateRecord) -> tuple[str, ...]:
    """The keys the question's own task has (Table 1; crawdad's edges where the tool needs it)."""
    return ("causal_problem", *TASK_KEYS.get(category(str(record.query_type))[1], ()))


def key_scores(record: DebateRecord, p: PipelineRun, soft: bool) -> dict[str, bool] | None:
    """Whether each key of the question's task was retrieved (soft: the paper's match); None
    where the record did not score it this way (soft match before schema 6)."""
    if _old(p):
        if soft:
            return None
        return {OLD_FIELDS[k]: v for k, v in p.extraction.items() if k in OLD_FIELDS}
    if p.task is None:
        return dict.fromkeys(expected_keys(record), False)
    return dict(p.extraction if soft else p.extraction_exact)


def _runs(records: Sequence[DebateRecord]) -> dict[str, list[tuple[DebateRecord, PipelineRun]]]:
    by_agent: dict[str, list[tuple[DebateRecord, PipelineRun]]] = {}
    for r in records:
        for p in r.pipeline:
            by_agent.setdefault(p.agent, []).append((r, p))
    return dict(sorted(by_agent.items()))


def step1_table(ways: Ways) -> pd.DataFrame:
    """Table 3 per run and agent, once by the paper's match (soft) and once by exact match."""
    rows = []
    for label, records in ways.items():
        for agent, mine in _runs(records).items():
            for match, soft in (("soft (paper)", True), ("exact", False)):
                scored = [s for r, p in mine if (s := key_scores(r, p, soft)) is not None]
                row: dict[str, Any] = {"run": label, "agent": agent, "match": match}
                row["n"] = len(scored)
                row["task_read"] = (
                    sum(p.task is not None for _, p in mine) / len(mine) if mine else float("nan")
                )
                for key, name in KEY_NAMES.items():
                    have = [s[key] for s in scored if key in s]
                    row[name] = sum(have) / len(have) if have else float("nan")
                pooled = [v for s in scored for k, v in s.items() if k in KEYS]
                row["All"] = sum(pooled) / len(pooled) if pooled else float("nan")
                rows.append(row)
    return pd.DataFrame(rows)


def passed(p: PipelineRun) -> bool:
    """The pipeline gave an output: task read, its calls ran, step 3 answered."""
    calls = [c for c in (p.call, *p.more_calls) if c is not None]
    ran = bool(calls) and all(c.error is None for c in calls)
    return p.task is not None and ran and p.answer is not None


def relevant(record: DebateRecord, p: PipelineRun) -> bool:
    """Passed, with the question's causal task."""
    right = p.extraction.get("task_type" if _old(p) else "causal_problem")
    return passed(p) and bool(right)


def won(record: DebateRecord, p: PipelineRun) -> bool:
    """Passed, with the question's quantity among the results and the answer it implies."""
    want = p.implied_answer if p.implied_answer is not None else record.gold
    return passed(p) and p.tool_correct is True and p.answer == want


def _rate(k: int, n: int) -> tuple[float, float, float]:
    lo, hi = wilson_proportion(k, n)
    return (k / n if n else float("nan"), lo, hi)


def end_to_end_table(ways: Ways) -> pd.DataFrame:
    """Table 2 per run, agent and the question's task (LLM4Causal's ATE, HTE, MA; CLadder's
    other types by name), and over all questions: the three rates with Wilson CIs."""
    rows = []
    for label, records in ways.items():
        for agent, mine in _runs(records).items():
            groups: dict[str, list[tuple[DebateRecord, PipelineRun]]] = {"all": mine}
            for r, p in mine:
                groups.setdefault(category(str(r.query_type))[1], []).append((r, p))
            for task, rps in groups.items():
                n = len(rps)
                row: dict[str, Any] = {"run": label, "agent": agent, "task": task, "n": n}
                for name, ok in zip(
                    RATES,
                    (lambda r, p: passed(p), relevant, won),
                    strict=True,
                ):
                    k = sum(ok(r, p) for r, p in rps)
                    row[name], row[f"{name} lo"], row[f"{name} hi"] = _rate(k, n)
                rows.append(row)
    return pd.DataFrame(rows)


def steps_table(ways: Ways) -> pd.DataFrame:
    """Steps 2 and 3 as crawdad scores them, per run and agent: the tool run and its result
    right, the answer read right where the result was right (interpretation), and the final
    answer against the label."""
    rows = []
    for label, records in ways.items():
        for agent, mine in _runs(records).items():
            n = len(mine)
            readable = [p for _, p in mine if p.task is not None]
            calls = [c for p in readable for c in (p.call, *p.more_calls) if c is not None]
            scored_tool = [p for p in readable if p.tool_correct is not None]
            scored_interp = [p for _, p in mine if p.interpretation_correct is not None]
            row: dict[str, Any] = {"run": label, "agent": agent, "n": n}
            row["tool_ran"] = (
                sum(p.call is not None and p.call.error is None for p in readable) / n
                if n
                else float("nan")
            )
            row["tool_malformed"] = sum(c.malformed for c in calls)
            row["tool_errors"] = sum(bool(c.error) and not c.malformed for c in calls)
            k = sum(bool(p.tool_correct) for p in scored_tool)
            row["tool_correct"], row["tool_ci_lo"], row["tool_ci_hi"] = _rate(k, len(scored_tool))
            row["n_interpreted"] = len(scored_interp)
            k = sum(bool(p.interpretation_correct) for p in scored_interp)
            row["interpretation"], row["interp_ci_lo"], row["interp_ci_hi"] = _rate(
                k, len(scored_interp)
            )
            k = sum(p.answer == r.gold for r, p in mine)
            row["answer_acc"], row["answer_ci_lo"], row["answer_ci_hi"] = _rate(k, n)
            rows.append(row)
    return pd.DataFrame(rows)


# --- the report's part ---------------------------------------------------------------------------


def _share(x: float) -> str:
    return "-" if pd.isna(x) else f"{x:.2f}"


def pipeline_blocks(ways: Ways) -> list[Block]:
    """The pipeline's tables (none when no run has pipeline steps)."""
    step1 = step1_table(ways)
    if step1.empty:
        return []
    shown1 = pd.DataFrame(
        {
            "run": step1["run"],
            "agent": step1["agent"],
            "match": step1["match"],
            "n": step1["n"],
            **{name: [_share(x) for x in step1[name]] for name in KEY_NAMES.values()},
            "All": [_share(x) for x in step1["All"]],
        }
    )
    e2e = end_to_end_table(ways)
    shown2 = pd.DataFrame(
        {
            "run": e2e["run"],
            "agent": e2e["agent"],
            "task": e2e["task"],
            "n": e2e["n"],
            **{
                f"{name} % (CI)": [
                    fmt_pct_ci(*v)
                    for v in zip(e2e[name], e2e[f"{name} lo"], e2e[f"{name} hi"], strict=True)
                ]
                for name in RATES
            },
        }
    )
    steps = steps_table(ways)
    shown3 = pd.DataFrame(
        {
            "run": steps["run"],
            "agent": steps["agent"],
            "n": steps["n"],
            "tool ran %": [fmt_pct(x) for x in steps["tool_ran"]],
            "tool result right % (CI)": [
                fmt_pct_ci(*v)
                for v in zip(
                    steps["tool_correct"], steps["tool_ci_lo"], steps["tool_ci_hi"], strict=True
                )
            ],
            "interpretation right % (CI)": [
                fmt_pct_ci(*v)
                for v in zip(
                    steps["interpretation"],
                    steps["interp_ci_lo"],
                    steps["interp_ci_hi"],
                    strict=True,
                )
            ],
            "answer vs label % (CI)": [
                fmt_pct_ci(*v)
                for v in zip(
                    steps["answer_acc"], steps["answer_ci_lo"], steps["answer_ci_hi"], strict=True
                )
            ],
        }
    )
    return [
        Table(
            "data_pipeline_step1",
            step1,
            "LLM4Causal's pipeline, step 1: causal entity extraction (the paper's Table 3)",
            "Per key, the share of runs whose question's task has the key in which the model "
            "retrieved it: the causal task and the dataset by exact match; Nodes, Treatment, "
            "Response, Mediator and Condition by the paper's soft match (the true value a subset "
            "of the output: its words among one output entity's, as a column or by its name in "
            "the story) in the `soft (paper)` rows, by exact match in the `exact` rows. `All` "
            "pools every key value of the paper's keys. A task that could not be read counts "
            "every key wrong. Nodes: no CLadder question asks for a graph. `edges` is crawdad's "
            "key (the graph the story states), not in All.",
            shown=shown1,
            fold="never",
        ),
        Table(
            "data_pipeline_end_to_end",
            e2e,
            "End to end (the paper's Table 2)",
            "By the question's task (LLM4Causal's ATE, HTE, MA; CLadder's other query types by "
            "name). Pass Rate: the task was read, step 2's calls ran without an error and step 3 "
            "answered yes or no. Relevance Rate: passed with the right causal task. Win Rate: "
            "passed, the tool's results hold the question's own quantity, and the answer is the "
            "one it implies (the label for questions answered from the graph). The paper judged "
            "these on its own outputs; no human raters here. 95% Wilson CIs.",
            shown=shown2,
            fold="never",
        ),
        Table(
            "data_pipeline",
            steps,
            "Steps 2 and 3 as crawdad scores them",
            "The tool crawdad ran on the task: whether its result is the result of the "
            "question's own query. Interpretation: where that result was right, whether the "
            "answer is the one it implies under CLadder's rules (questions answered from the "
            "graph, such as backadj, are not scored here); the paper's human grading of "
            "interpretations (hallucination, incompleteness, non-fluency, its Table 4) has no "
            "counterpart.",
            shown=shown3,
            fold="never",
        ),
    ]
