"""LLM4Causal's pipeline (Jiang et al., paper 002) over a question answered from data: three
steps, each scored apart, as the paper evaluates them.

1. The model turns the question into a structured task (`pipeline_task.txt`, a JSON schema as
   the judge's, in LLM4Causal's keys: causal_problem, dataset, nodes, treatment, response,
   mediator, condition; crawdad's edges). Scored key by key against the question's own task,
   read from its meta, as the paper's section 4.3 does (`crawdad.tools.llm4causal`: the causal
   task and the dataset exactly, the rest by soft match; exact match recorded beside).
2. crawdad runs the data tool that answers that task over the question's table (MA: two calls,
   the direct and the indirect effect), through the tools' boundary (limits, a worker, errors
   kept), with no model involved. Scored: whether its results hold the result of the
   question's own query (the tool result).
3. The model reads the task, the tool and its result beside the question and answers
   (`pipeline_answer.txt`); the extractor reads the answer as any answer. Scored, where the
   tool's result was right: whether the answer is the one that result implies under CLadder's
   rules (the interpretation).

Every agent runs the pipeline on its own; the final answer is the majority of their answers
(one agent: its answer). The steps go to the record's `pipeline`, the two model turns to its
turns (roles "task" and "interpretation"), the tool call to `PipelineRun.call` (mode
"pipeline"). The prompt set needs both templates (`prompts/data-tools/` has them), the task
needs tables (cladder-data), and the agents have no tools of their own.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from crawdad.errors import ConfigError
from crawdad.protocols.base import (
    DebateSetup,
    ask,
    check_runaway,
    majority,
    request_seed,
    respond,
)
from crawdad.records import DebateRecord, PipelineRun, ToolCall, Turn
from crawdad.tasks.base import Item, tool_context
from crawdad.tools import boundary
from crawdad.tools.data_tasks import call_for, gold_query, implied_answer, implied_value
from crawdad.tools.llm4causal import TASK_SCHEMA, extraction_scores, gold_task, queries
from crawdad.tools.registry import tools_for

CLOSE = 1e-6  # two results of one quantity are the same result within this


class TaskReply(BaseModel):
    """Step 1's JSON in LLM4Causal's keys, read leniently in its values (a name alone reads as a
    list of one; the scores say what is wrong)."""

    model_config = ConfigDict(extra="ignore")

    causal_problem: list[str]
    dataset: list[str] = Field(default_factory=list)
    nodes: list[str] = Field(default_factory=list)
    treatment: list[str] = Field(default_factory=list)
    response: list[str] = Field(default_factory=list)
    mediator: list[str] = Field(default_factory=list)
    condition: Any = Field(default_factory=list)
    edges: list[str] = Field(default_factory=list)

    @field_validator(
        "causal_problem",
        "dataset",
        "nodes",
        "treatment",
        "response",
        "mediator",
        "edges",
        mode="before",
    )
    @classmethod
    def _as_list(cls, value: Any) -> Any:
        if value is None:
            return []
        return [value] if isinstance(value, str | int | float) else value


_OBJECT = re.compile(r"\{.*\}", re.DOTALL)


def read_task(text: str) -> tuple[dict[str, Any] | None, str | None]:
    """The task in step 1's reply (the JSON, or the first JSON object in the text), or None
    and why not."""
    candidates = [text.strip()]
    if m := _OBJECT.search(text):
        candidates.append(m.group())
    error = "the reply holds no JSON object"
    for candidate in candidates:
        try:
            reply = TaskReply.model_validate_json(candidate)
        except ValidationError as e:
            first = e.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            error = (
                "the reply is not JSON"
                if first["type"] == "json_invalid"
                else f"the task's {where or 'JSON'}: {first['msg']}"
            )
            continue
        return reply.model_dump(), None
    return None, error


def _meta(item: Item) -> dict[str, Any]:
    """The question's meta (a data-backed question keeps it); a bare question gives its type."""
    meta = getattr(item, "meta", None)
    return dict(meta) if meta else {"query_type": str(getattr(item, "query_type", ""))}


def _names(item: Item) -> dict[str, str]:
    return dict(_meta(item).get("names") or {})


def _dataset(item: Item) -> str | None:
    """The table's file as the question shows it (the task's `dataset`)."""
    return getattr(getattr(item, "data", None), "table", None)


async def run_tools(setup: DebateSetup, item: Item, task: dict[str, Any]) -> list[ToolCall]:
    """Step 2: the data tool calls for the task, over the item's table, through the boundary."""
    names = _names(item)
    return [await run_tool(setup, item, query) for query in queries(task, names)]


async def run_tool(setup: DebateSetup, item: Item, query: dict[str, Any]) -> ToolCall:
    """One data tool call for a CLadder query, over the item's table, through the boundary."""
    name, arguments = call_for(query, _names(item))
    tools = tools_for(["data"], table=tool_context(setup.task, item).get("table"))
    start = time.monotonic()
    outcome = await boundary.call(tools, name, arguments, setup.tool_limits)
    return ToolCall(
        name=name,
        mode="pipeline",
        raw=outcome.raw,
        arguments=outcome.arguments,
        result=outcome.value,
        error=outcome.error,
        malformed=outcome.malformed,
        seconds=time.monotonic() - start,
    )


def gold_result(setup: DebateSetup, item: Item) -> tuple[dict[str, Any], Any]:
    """The question's own query and its tool's result (in process: exact counting is cheap);
    the result is None when the tool cannot answer it."""
    from crawdad.tools import data_tools

    gold = gold_query(_meta(item))
    table = tool_context(setup.task, item).get("table")
    if table is None:
        return gold, None
    name, arguments = call_for(gold, _names(item))
    try:
        return gold, data_tools.compute(table, data_tools.parse_call(name, arguments))
    except (ValueError, KeyError):  # ToolError is a ValueError: the data cannot answer it
        return gold, None


def score_tool(
    item: Item, gold: dict[str, Any], expected: Any, calls: list[ToolCall]
) -> bool | None:
    """Whether the tools' results hold the result of the question's own query (MA's two calls:
    one of them)."""
    if not calls:
        return None
    results = [c.result for c in calls if c.result is not None]
    if not results:
        return False
    if expected is None:
        return None
    meta, names = _meta(item), _names(item)
    want = implied_value(gold, expected, meta, names)
    if want is None:  # answered from the graph, not a number: the same result or not
        return any(r == expected for r in results)
    got = [implied_value(gold, r, meta, names) for r in results]
    return any(g is not None and abs(g - want) <= CLOSE for g in got)


def _shown_calls(calls: list[ToolCall]) -> tuple[str, str]:
    """The tool line and the result line the interpretation prompt shows."""
    tool = "; ".join(f"{c.name} {_text(c.arguments or c.raw)}" for c in calls)
    results = [_text(c.result) if c.error is None else f"error: {c.error}" for c in calls]
    return tool, "; ".join(results)


def _text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


async def one_agent(setup: DebateSetup, item: Item, name: str) -> tuple[list[Turn], PipelineRun]:
    who = setup.agents[name]
    shown = setup.task.show(item)
    template = setup.prompts["pipeline_task"]
    first, result = await respond(
        setup,
        who,
        agent=name,
        round_=0,
        role="task",
        prompt=template.fill(question=shown),
        version=template.version,
        seen=[],
        seed=request_seed(setup.seed, item.question_id, 0, setup.occurrence(name)),
        json_schema=TASK_SCHEMA,
        item=item,
    )
    task, why = read_task(result.text)
    run = PipelineRun(agent=name, task=task, task_error=why)
    query, expected = gold_result(setup, item)
    meta, names = _meta(item), _names(item)
    run.implied_answer = implied_answer(query, expected, meta, names)
    if task is not None:
        gold = gold_task(meta, _dataset(item))
        run.extraction = extraction_scores(task, gold, names)
        run.extraction_exact = extraction_scores(task, gold, names, soft=False)
        calls = await run_tools(setup, item, task)
        run.call, run.more_calls = calls[0], calls[1:]
        run.tool_correct = score_tool(item, query, expected, calls)
        tool, outcome = _shown_calls(calls)
    else:
        tool, outcome = "none", f"the task could not be read ({why}), so no tool was run"
    answer_template = setup.prompts["pipeline_answer"]
    prompt = answer_template.fill(
        question=shown,
        task=_text(task) if task is not None else "(not readable)",
        tool=tool,
        result=outcome,
    )
    second = await ask(
        setup,
        item,
        agent=name,
        round_=1,
        role="interpretation",
        prompt=prompt,
        version=answer_template.version,
        seen=[],
        seed_index=setup.occurrence(name),
    )
    run.answer = second.answer
    if run.tool_correct and run.implied_answer is not None:
        run.interpretation_correct = second.answer == run.implied_answer
    return [first, second], run


def check(setup: DebateSetup) -> None:
    """What the pipeline needs of a run, checked before it starts: tables, and its prompts."""
    if not hasattr(setup.task, "tool_context"):
        raise ConfigError(
            "the pipeline protocol runs a data tool over the question's table: set "
            f'task = "cladder-data" (the {setup.task.name} task has no tables)'
        )
    for name in ("pipeline_task", "pipeline_answer"):
        if name not in setup.prompts.templates:
            raise ConfigError(
                f"the pipeline protocol needs the template {name}.txt, which the prompt set "
                f'{setup.prompts.name!r} lacks: use prompt_set = "data-tools" (or a set that '
                "inherits it)"
            )


async def play(setup: DebateSetup, question: Item, record: DebateRecord) -> None:
    names = list(setup.agents)
    record.speaking_order = names
    results = await together_runs(setup, question, names)
    for turns, run in results:
        record.turns.extend(turns)
        record.pipeline.append(run)
    for turn in record.turns:
        check_runaway(setup, turn)
    answers = [t for t in record.turns if t.role == "interpretation"]
    record.agent_answers = {t.agent: t.answer for t in answers}
    vote = majority(answers)
    record.final_answer, record.final_confidence, record.tie = (
        vote.answer,
        vote.confidence,
        vote.tie,
    )
    record.consensus = setup.task.agree([t.answer for t in answers])
    record.end = "steps"


async def together_runs(
    setup: DebateSetup, item: Item, names: list[str]
) -> list[tuple[list[Turn], PipelineRun]]:
    """Each agent's pipeline, in flight at once (they see nothing of each other)."""
    try:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(one_agent(setup, item, n)) for n in names]
    except BaseExceptionGroup as eg:
        raise eg.exceptions[0] from None
    return [t.result() for t in tasks]
