"""The coding agents' plans pass the tool boundary (crawdad/tools/algorithm_tool.py through
crawdad/tools/boundary.py): a hostile plan is refused, or killed past its seconds, with a message
naming what to fix, recorded as the turn's tool error, and the debate goes on."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pandas as pd

from crawdad.causal.structure import Graph
from crawdad.config import AgentConfig, RunConfig, ToolLimits
from crawdad.data.discovery_sets import DiscoveryGraph, Variable
from crawdad.fake import FakeReply, FakeRequest, FakeServer, FunctionModel
from crawdad.protocols import run_debate
from crawdad.records import DebateRecord, ToolCall
from crawdad.run.runner import build_setup, pools_of
from crawdad.tasks.discovery.whole_graph import GraphItem
from crawdad.tools import boundary
from crawdad.tools.registry import algorithm

NAMES = [f"v{i}" for i in range(13)]  # more than exact search takes (11)


def wide_item(columns: int = 13, rows: int = 300) -> GraphItem:
    """A linear non-Gaussian chain v0 -> v1 -> v2 among `columns` variables, the rest noise."""
    rng = np.random.default_rng(0)
    names = NAMES[:columns]
    table = pd.DataFrame({n: rng.exponential(1.0, rows) for n in names})
    table["v1"] += 2 * table["v0"]
    table["v2"] += 2 * table["v1"]
    return GraphItem(
        DiscoveryGraph(
            graph_id="wide",
            source="test",
            context="Measurements of a made-up system.",
            variables=tuple(Variable(n, f"quantity {n}") for n in names),
            truth=Graph.of(names, [("v0", "v1"), ("v1", "v2")]),
            table=table,
        )
    )


def planner(plans: list[str]) -> FunctionModel:
    """A debater whose k-th response ends with the k-th plan of its list (raw text)."""
    asked = {"n": 0}

    def reply(request: FakeRequest) -> FakeReply:
        plan = plans[min(asked["n"], len(plans) - 1)]
        asked["n"] += 1
        return FakeReply(text=f"My choice.\n```json\n{plan}\n```")

    return FunctionModel(reply)


async def debate(
    item: GraphItem, models: dict[str, FunctionModel], max_turns: int, limits: ToolLimits
) -> DebateRecord:
    async with FakeServer("ollama", models) as server:
        config = RunConfig(
            task="discovery-graph",
            prompt_set="mac-coding",
            agents=[AgentConfig(name=n, model=n) for n in models],
            protocol={"kind": "coding", "max_turns": max_turns},
            tool_limits=limits,
        ).serve_all_from(server.url)
        setup, _ = build_setup(config)
        try:
            return await run_debate(setup, item)
        finally:
            for pool in pools_of(setup):
                await pool.aclose()


HOSTILE = [
    ('{"algorithm": "pc", "params": {"alpha": 1e308}}', "alpha = 1e+308 is out of range"),
    ('{"algorithm": "pc", "params": {"max_depth": 1000000000000}}', "max_depth = "),
    ('{"algorithm": "pc", "params": {"alpha": NaN}}', "not a JSON number"),
    ("{\"algorithm\": \"__import__('os').system('id')\"}", "is not offered; the algorithms are"),
    ('{"algorithm": "ges", "params": {"score": "local_score_CV_general"}}', "is not offered"),
    ('{"algorithm": "pc", "params": {"kernel": "kci"}}', "pc has no parameter 'kernel'"),
    ('{"algorithm": "exact"}', "exact search takes at most 11 variables"),
    ('{"algorithm": "pc", "params": [0.05]}', '"params" must be an object'),
    (
        json.dumps({"algorithm": "pc", "params": {"alpha": 0.05, "note": "x" * 150_000}}),
        "(tool_limits.max_argument_chars)",
    ),
    ('{"algorithm": "pc", "params": ' + "[" * 40 + "]" * 40 + "}", "nested more than 32"),
]


def calls_of(record: DebateRecord, agent: str) -> list[ToolCall]:
    return [c for t in record.turns if t.agent == agent for c in t.tool_calls]


async def test_hostile_plans_are_refused_by_name_and_the_debate_goes_on() -> None:
    good = '{"algorithm": "direct-lingam", "params": {"threshold": 0.5}}'
    models = {"hostile": planner([p for p, _ in HOSTILE]), "good": planner([good])}
    record = await debate(wide_item(), models, 2 * len(HOSTILE), ToolLimits())
    assert record.error is None and record.end == "cap"
    calls = calls_of(record, "hostile")
    assert len(calls) == len(HOSTILE)
    for call, (_, message) in zip(calls, HOSTILE, strict=True):
        assert call.name == "run_algorithm" and call.result is None
        assert call.error is not None and message in call.error, (message, call.error)
        assert len(call.error) <= boundary.MAX_MESSAGE_CHARS
    turns = [t for t in record.turns if t.agent == "hostile"]
    assert all(t.answer is None and "the plan could not run" in t.extraction.reason for t in turns)  # type: ignore[union-attr]
    malformed = [c.malformed for c in calls]
    assert malformed[2] and malformed[7] and malformed[9] and not malformed[0]
    assert len(calls[8].raw) < 110_000  # the record keeps at most max_argument_chars of it
    # The good debater's plan ran every time, and its graph is the final answer.
    (ran, *_) = calls_of(record, "good")
    assert ran.error is None and ran.result["algorithm"] == "direct-lingam"
    assert "v0 -> v1" in (record.final_answer or "") and "v1 -> v2" in (record.final_answer or "")


async def test_a_plan_past_its_seconds_is_killed_and_the_next_plan_still_runs() -> None:
    """Exact search over 11 variables takes seconds; the bound is 0.2 s. The worker is killed,
    the turn records the limit it hit, and the next call gets a fresh worker."""
    slow = '{"algorithm": "exact", "params": {"search_method": "dp"}}'
    models = {
        "slow": planner([slow, '{"algorithm": "pc", "params": {"alpha": 2}}']),
        "idle": planner(["no plan"]),
    }
    record = await debate(wide_item(11), models, 4, ToolLimits(seconds=0.2))
    assert record.error is None and len(record.turns) == 4
    killed, refused = calls_of(record, "slow")
    assert killed.error is not None and killed.result is None
    assert "did not finish this call within 0.2 s" in killed.error
    assert "(tool_limits.seconds)" in killed.error and "pc or ges" in killed.error
    assert refused.error is not None and "alpha = 2 is out of range" in refused.error
    assert record.final_answer is None  # no plan ran: the debate still ended normally


def test_the_algorithm_tool_answers_like_the_runner() -> None:
    """Through the boundary, a plan's value is the runner's graph (adjacency, edges)."""
    tool = algorithm(wide_item(4).graph.table)  # type: ignore[arg-type]
    plan = {"algorithm": "direct-lingam", "params": {"threshold": 0.5}}
    outcome = asyncio.run(boundary.call({tool.name: tool}, tool.name, plan, ToolLimits()))
    assert outcome.error is None, outcome.error
    assert outcome.value["edges"] == ["v0 -> v1", "v1 -> v2"]
    assert outcome.value["params"] == {"threshold": 0.5}


def test_fci_and_cdnod_plans_run_in_the_boundary_and_are_checked_there() -> None:
    tool = algorithm(wide_item(4).graph.table)  # type: ignore[arg-type]
    tools, limits = {tool.name: tool}, ToolLimits()
    for plan in ({"algorithm": "fci", "params": {"alpha": 0.01}}, {"algorithm": "CD-NOD"}):
        outcome = asyncio.run(boundary.call(tools, tool.name, plan, limits))
        assert outcome.error is None, outcome.error
        assert outcome.value["variables"] == ["v0", "v1", "v2", "v3"]
        assert "partial" in outcome.value and outcome.value["edges"]
    assert outcome.value["params"]["context"] == "row"
    bad = {"algorithm": "cdnod", "params": {"context": "__import__('os')"}}
    outcome = asyncio.run(boundary.call(tools, tool.name, bad, limits))
    assert outcome.value is None and "give 'row'" in (outcome.error or "")
