"""MAC's Coding Agents Model (Le et al., section 3.1.2 and Algorithm 2), kept small: debaters
argue, in turn, which statistical discovery algorithm fits the data and with which parameters,
each ending with a plan, a JSON object {"algorithm": ..., "params": {...}}; an executor runs
each plan on the data (`crawdad.tools.algorithms.run_algorithm`, through the tool boundary: a
worker process killed past `tool_limits.seconds`) and the graph it gives is that turn's
answer. The debate stops when the latest graphs of all debaters agree (early stop, as the crawdad
protocol) or at `max_turns`; the final answer is the last executed plan's graph.

For the discovery-graph task (an item is a graph with data: a set's own table, or
`protocol.rows` rows sampled from a CLadder model, seeded by (seed, graph id)). What a debater
sees: the variables, a summary of the data and its first rows (MAC's "description and structure
of the data"), the algorithms on offer, and the earlier debaters' texts. It never sees an
executed graph: the executor's results enter only the record (as the turn's tool call).

The judge (`protocol.plan_judge`, on by default, as MAC's judge "evaluates which plan and
algorithm are superior", appendix A.2.2): once the debate has stopped, a judge model reads the
debaters' final texts (never an executed graph, as MAC's judge decides before the executor runs)
and each debater's latest plan that ran, and picks one through a JSON schema ({"plan": "debater
N", "confidence"}); its graph is the final answer, and the judge's turn (role "verdict") records
the pick. With one candidate graph (the debaters agree, or one plan alone ran) there is nothing
to pick and no judge request. An unreadable pick falls back to the last plan that ran, with the
reason. `plan_judge = false`: no judge, the last plan that ran is the final answer.

Differences from MAC, on purpose: no code is written: the executor is `run_algorithm`'s
allow-list, so a plan is parameters, not a program (MAC's executor wrote and debugged
causal-learn code; its plan prompts offer the same library's algorithms); the judge asks no
follow-up questions (one pick at the end). A plan that cannot be read or run (an unknown
algorithm, a parameter off the allow-list, exact search past its variables, a run past its
seconds, a crash) is that turn's null answer with the reason, recorded as the turn's tool error;
the debate goes on, and such a plan is no candidate for the judge.
"""

from __future__ import annotations

import json
import time
from string import Template
from typing import Any

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from crawdad.causal.edge_text import format_edges
from crawdad.config import ToolLimits
from crawdad.errors import DataError
from crawdad.protocols.base import DebateSetup, check_runaway, history, respond, speaking_order
from crawdad.protocols.base import request_seed as seed_of
from crawdad.records import DebateRecord, Extraction, Role, ToolCall, Turn
from crawdad.tasks.base import Item
from crawdad.tools import boundary
from crawdad.tools.algorithm_tool import edges_of
from crawdad.tools.algorithms import ALGORITHM_GUIDE, AlgorithmLimits
from crawdad.tools.boundary import Outcome, Tool
from crawdad.tools.registry import algorithm as algorithm_tool

EXECUTOR = "run_algorithm"
SHOWN_ROWS = 5


def table_of(setup: DebateSetup, item: Item) -> pd.DataFrame:
    graph = getattr(item, "graph", None)
    if graph is None or not hasattr(graph, "data"):
        raise DataError(
            "the coding protocol needs items with data (the discovery-graph task): "
            f"{type(item).__name__} has none"
        )
    return graph.data(setup.protocol.rows, setup.seed)


def describe(table: pd.DataFrame) -> str:
    """What a planner is told of the data: its size, each column's spread, its first rows."""
    lines = [f"{len(table):,} rows, {table.shape[1]} columns."]
    for name in table.columns:
        col = table[name]
        values = col.nunique()
        if values <= 10 and (col == col.round()).all():
            counts = ", ".join(f"{v:g}: {n}" for v, n in col.value_counts().sort_index().items())
            lines.append(f"- {name}: discrete, {values} values ({counts})")
        else:
            lines.append(
                f"- {name}: continuous, mean {col.mean():.4g}, sd {col.std():.4g}, "
                f"min {col.min():.4g}, max {col.max():.4g}, skewness {col.skew():.2f}"
            )
    lines.append(f"\nThe first {SHOWN_ROWS} rows (CSV):")
    lines.append(table.head(SHOWN_ROWS).to_csv(index=False).strip())
    return "\n".join(lines)


def read_plan(text: str) -> tuple[dict[str, Any] | None, str | None]:
    """The last JSON object with an "algorithm" key in a text; None with the reason if none."""
    decoder = json.JSONDecoder()
    found = None
    for start in (i for i, ch in enumerate(text) if ch == "{"):
        try:
            value, _ = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict) and "algorithm" in value:
            found = value
    if found is None:
        return None, 'the response gives no plan (a JSON object with an "algorithm" key)'
    params = found.get("params", found.get("parameters", {}))
    return {"algorithm": found["algorithm"], "params": params if params is not None else {}}, None


async def execute(tool: Tool, plan: dict[str, Any], limits: ToolLimits) -> Outcome:
    """Run a plan through the tool boundary: in a worker process killed past
    `limits.seconds`; whatever the plan holds or the runner raises is the outcome's error."""
    return await boundary.call({tool.name: tool}, tool.name, plan, limits)


def role_of(speaker: str, order: list[str], turns: list[Turn]) -> Role:
    if not turns:
        return "initial"
    if len(order) == 2:
        return "defence" if speaker == order[0] else "critique"
    return "defence" if any(t.agent == speaker for t in turns) else "critique"


async def play(setup: DebateSetup, question: Item, record: DebateRecord) -> None:
    table = table_of(setup, question)
    limits = setup.tool_limits  # a plan is a tool call: its seconds, its worker's memory
    tool = algorithm_tool(table, AlgorithmLimits(max_seconds=limits.seconds))
    order = speaking_order(setup.seed, question.question_id, list(setup.agents))
    record.speaking_order = order
    record.first_speaker, record.second_speaker = order[0], order[1]
    values = {
        "question": setup.task.show(question),
        "data": describe(table),
        "algorithms": ALGORITHM_GUIDE,
    }
    protocol = setup.protocol
    for round_ in range(protocol.max_turns):
        speaker = order[round_ % len(order)]
        role = role_of(speaker, order, record.turns)
        template = setup.prompts[f"plan_{role}"]
        seen: list[int] = []
        version = template.version
        if role == "initial":
            prompt = template.fill(**values)
        else:
            seen = list(range(len(record.turns)))
            block, entry = history(setup, record.turns, seen, speaker, order)
            prompt = template.fill(**values, history=block)
            version = f"{template.version}+{entry}"
        turn, _ = await respond(
            setup,
            setup.agents[speaker],
            agent=speaker,
            round_=round_,
            role=role,
            prompt=prompt,
            version=version,
            seen=seen,
            seed=seed_of(setup.seed, question.question_id, round_),
        )
        await _execute_turn(turn, tool, limits)
        record.turns.append(turn)
        check_runaway(setup, turn)
        latest = {t.agent: t.answer for t in record.turns}
        record.agent_answers = {n: latest[n] for n in order if n in latest}
        record.consensus = len(record.agent_answers) == len(order) and setup.task.agree(
            list(record.agent_answers.values())
        )
        if record.consensus and protocol.early_stop:
            record.end = "consensus"
            break
    else:
        record.end = "cap"
    ran = [t for t in record.turns if t.answer is not None]
    if ran:
        record.final_answer = ran[-1].answer
    candidates = latest_plans(record, order)
    if setup.judge is not None and protocol.plan_judge and len(set(candidates.values())) > 1:
        record.judge = setup.judge.spec.model
        verdict = await judge_plans(setup, question, record, values, candidates)
        record.turns.append(verdict)
        check_runaway(setup, verdict)
        if verdict.answer is not None:
            record.final_answer, record.final_confidence = verdict.answer, verdict.confidence


def latest_plans(record: DebateRecord, order: list[str]) -> dict[int, str]:
    """Debater number (1.., speaking order) -> the graph of its latest plan that ran."""
    out = {}
    for n, name in enumerate(order, start=1):
        ran = [t for t in record.turns if t.agent == name and t.answer is not None]
        if ran:
            out[n] = ran[-1].answer
    return out  # type: ignore[return-value]


class PlanPick(BaseModel):
    model_config = ConfigDict(extra="forbid")

    plan: str
    confidence: float = Field(ge=0.0, le=1.0)


def plan_schema(numbers: list[int]) -> dict[str, Any]:
    schema = PlanPick.model_json_schema()
    schema["properties"]["plan"] = {"enum": [f"debater {n}" for n in numbers], "type": "string"}
    schema["required"] = ["plan", "confidence"]
    return schema


async def judge_plans(
    setup: DebateSetup,
    question: Item,
    record: DebateRecord,
    values: dict[str, str],
    candidates: dict[int, str],
) -> Turn:
    """The judge's pick among the debaters' latest plans that ran (see the module doc)."""
    assert setup.judge is not None
    order = record.speaking_order
    seen = [i for i, t in enumerate(record.turns) if t.agent != "judge"]
    block, entry = history(setup, record.turns, seen, "judge", order)
    label = setup.prompts.fragments.get("plan_label", "Debater $n's plan:")
    plans = "\n".join(
        f"{Template(label).safe_substitute(n=n)} {json.dumps(_plan_of(record, order[n - 1]))}"
        for n in candidates
    )
    template = setup.prompts["plan_judge"]
    turn, _ = await respond(
        setup,
        setup.judge,
        agent="judge",
        round_=len(record.turns),
        role="verdict",
        prompt=template.fill(**values, history=block, plans=plans),
        version=f"{template.version}+{entry}",
        seen=seen,
        seed=seed_of(setup.seed, question.question_id, len(record.turns)),
        json_schema=plan_schema(list(candidates)),
        item=question,
    )
    model = setup.judge.spec.model
    try:
        pick = PlanPick.model_validate_json(turn.text.strip())
        number = int(pick.plan.strip().lower().removeprefix("debater").strip())
        turn.answer, turn.confidence = candidates[number], pick.confidence
    except (ValidationError, ValueError, KeyError):
        reason = (
            f"the judge's reply is not a pick of {', '.join(f'debater {n}' for n in candidates)}"
            "; the last plan that ran is the final answer"
        )
        turn.extraction = Extraction(method="none", model=model, raw=turn.text, reason=reason)
        return turn
    turn.extraction = Extraction(method="strict", model=model, raw=turn.text)
    return turn


def _plan_of(record: DebateRecord, name: str) -> dict[str, Any] | None:
    """The plan (as read) of a debater's latest turn that ran."""
    ran = [t for t in record.turns if t.agent == name and t.answer is not None]
    calls = ran[-1].tool_calls if ran else []
    return calls[-1].arguments if calls else None


async def _execute_turn(turn: Turn, tool: Tool, limits: ToolLimits) -> None:
    """Read the turn's plan and run it: the graph is the turn's answer; the plan and what the
    executor returned (or the error it gave) are its tool call (never shown to another
    debater)."""
    plan, why = read_plan(turn.text)
    if plan is None:
        turn.extraction = Extraction(method="none", model=EXECUTOR, reason=why)
        return
    start = time.monotonic()
    outcome = await execute(tool, plan, limits)
    call = ToolCall(
        name=EXECUTOR,
        mode="text",
        raw=outcome.raw,
        arguments=outcome.arguments,
        result=outcome.value,
        error=outcome.error,
        malformed=outcome.malformed,
        seconds=time.monotonic() - start,
    )
    turn.tool_calls.append(call)
    if outcome.error is not None or outcome.value is None:
        reason = f"the plan could not run: {outcome.error}"
        turn.extraction = Extraction(method="none", model=EXECUTOR, raw=call.raw, reason=reason)
        return
    turn.answer = format_edges(edges_of(outcome.value))
    turn.extraction = Extraction(method="strict", model=EXECUTOR, raw=call.raw)
