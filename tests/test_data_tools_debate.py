"""Debaters with the data tools, end to end over HTTP on the fake servers: the fake data agents
call the tool that answers their question (native Ollama and OpenAI calls, the text protocol,
the fall-back to text), every call is recorded, wrong calls are tool errors and unreadable ones
malformed, each turn's tools compute over its own question's table, results reach only their
caller, and a run resumes."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import pytest

from crawdad.config import RunConfig, ToolLimits
from crawdad.demo import answer_key, data_calls
from crawdad.errors import ConfigError
from crawdad.fake import FakeExtractor, FakeServer
from crawdad.fake.data_agent import WRONG_OUTCOME, DataAgentModel
from crawdad.fake.setups import models_for, paper_models
from crawdad.protocols import run_debate
from crawdad.records import DebateRecord
from crawdad.run.runner import build_setup, pools_of, run
from crawdad.run.store import RunStore
from crawdad.tasks import task_named
from crawdad.tasks.cladder_data import DataQuestion
from crawdad.tools import boundary
from crawdad.tools.loop import TEXT_INSTRUCTIONS, text_instructions
from crawdad.tools.registry import NO_TABLE, tools_for
from tests.test_data_task import data_folder  # noqa: F401  (the module's fixture)
from tests.test_tools_e2e import assert_results_stay_with_their_caller

QWEN, R1, GRANITE = "qwen3:32b", "deepseek-r1:32b", "granite3.3:2b"
DATA_TOOLS = {
    "describe_data",
    "conditional_probability",
    "estimate_effect",
    "identify_effect",
    "learn_graph",
}


@pytest.fixture(scope="module")
def items(data_folder: Path) -> list[DataQuestion]:  # noqa: F811
    return task_named("cladder-data").load(data_folder).questions  # type: ignore[return-value]


def agents(items: list[DataQuestion], **settings: Any) -> dict[str, DataAgentModel]:
    task = task_named("cladder-data")
    key, calls = answer_key(items, task), data_calls(items, task)
    assert calls is not None and len(calls) == 2 * len(items)  # with and without the counts
    base = paper_models(key, thinking_words=(10, 20), debate_thinking_words=(5, 10))
    return {
        QWEN: DataAgentModel(base[QWEN], calls, **settings),
        R1: DataAgentModel(base[R1], calls, supports_tools=False, **settings),
    }


async def debate(
    kind: str, models: dict[str, Any], item: DataQuestion, **agent: Any
) -> tuple[DebateRecord, FakeServer]:
    async with FakeServer(kind, {**models, GRANITE: FakeExtractor()}) as server:  # type: ignore[arg-type]
        cfg = RunConfig(seed=3, task="cladder-data").serve_all_from(server.url, kind)  # type: ignore[arg-type]
        cfg.retry.initial_wait = cfg.retry.max_wait = 0
        for a in cfg.agents:
            a.tools = ["data"]  # type: ignore[list-item]
            for k, v in agent.items():
                setattr(a, k, v)
        setup, _ = build_setup(cfg)
        try:
            record = await run_debate(setup, item)
        finally:
            for pool in pools_of(setup):
                await pool.aclose()
    return record, server


def _pick(items: list[DataQuestion], query_type: str) -> DataQuestion:
    return next(q for q in items if q.query_type == query_type)


@pytest.mark.parametrize(("kind", "mode"), [("ollama", "auto"), ("openai", "native")])
async def test_native_and_text_calls_over_the_questions_table(
    items: list[DataQuestion], kind: str, mode: str
) -> None:
    item = _pick(items, "ate")
    models = agents(items)
    if kind == "openai":
        models[R1] = DataAgentModel(models[R1].inner, models[R1].known)  # native there
    record, server = await debate(kind, models, item, tool_mode=mode)
    assert record.ok and record.task == "cladder-data" and record.turns
    assert record.item["perfect_answer"] == item.data.perfect_answer
    for turn in record.turns:
        (call,) = turn.tool_calls
        assert call.name == "estimate_effect" and call.error is None and not call.malformed
        assert call.arguments and call.arguments["treatment"] == "X"
        assert call.result["effect"] == "ate" and isinstance(call.result["value"], float)
        assert call.result["rows"] == item.data.rows
        assert turn.answer in ("yes", "no")
    if kind == "ollama":  # the R1-like model refused native tools once, then text
        assert {t.agent: t.tool_mode for t in record.turns} == {
            "qwen3": "native",
            "deepseek-r1": "text",
        }
        assert server.stats.statuses.get(400) == 1
    offered = [b for b in server.requests if b.get("tools")]
    assert offered and {t["function"]["name"] for t in offered[0]["tools"]} == DATA_TOOLS
    assert_results_stay_with_their_caller(record, server)


async def test_the_text_protocol_lists_every_data_tool(items: list[DataQuestion]) -> None:
    item = _pick(items, "correlation")
    record, server = await debate("openai", agents(items), item, tool_mode="text")
    assert record.ok
    for turn in record.turns:
        assert turn.tool_mode == "text"
        (call,) = turn.tool_calls
        assert call.name == "conditional_probability" and call.mode == "text"
        assert [c["event"] for c in call.result["table"]] == ["P(Y=1 | X=0)", "P(Y=1 | X=1)"]
    first = next(b for b in server.requests if b["model"] == QWEN)
    prompt = first["messages"][0]["content"]
    assert all(f"- {name}:" in prompt for name in DATA_TOOLS)
    followup = next(b for b in server.requests if b["model"] == QWEN and len(b["messages"]) == 3)
    assert followup["messages"][2]["content"].startswith("Result of conditional_probability:")
    assert "Call a tool again" in followup["messages"][2]["content"]
    assert_results_stay_with_their_caller(record, server)


@pytest.mark.parametrize(("kind", "mode"), [("ollama", "auto"), ("openai", "text")])
async def test_wrong_calls_are_tool_errors_and_broken_ones_malformed(
    items: list[DataQuestion], kind: str, mode: str
) -> None:
    item = _pick(items, "ate")
    record, _ = await debate(kind, agents(items, wrong=1.0), item, tool_mode=mode)
    calls = [c for t in record.turns for c in t.tool_calls]
    assert record.ok and calls
    for call in calls:
        assert call.error and not call.malformed and call.result is None
        assert WRONG_OUTCOME in call.error and "columns" in call.error
    record, _ = await debate(kind, agents(items, malformed=1.0), item, tool_mode=mode)
    calls = [c for t in record.turns for c in t.tool_calls]
    assert record.ok and calls and all(c.malformed and c.error for c in calls)
    assert all(t.answer is not None for t in record.turns)  # answered after the error


async def test_each_turn_computes_over_its_own_questions_table(
    items: list[DataQuestion],
) -> None:
    firsts: dict[str, DataQuestion] = {}
    for q in items:
        firsts.setdefault(q.data.table, q)
    two = list(firsts.values())[:2]
    assert len({q.data.table for q in two}) == 2
    for item in two:
        record, _ = await debate("openai", agents(items), _describe(item), tool_mode="native")
        for turn in record.turns:
            (call,) = turn.tool_calls
            assert call.name == "describe_data" and call.result["columns"] == item.data.columns
            ones = item.table.counts.count({"Y": 1})
            assert call.result["variables"]["Y"]["ones"] == ones


def _describe(item: DataQuestion) -> DataQuestion:
    """The question with a wording the fakes do not know: they then describe the data."""
    return item.model_copy(update={"question": item.question + " (rephrased)"})


def test_data_tools_need_questions_with_a_table() -> None:
    cfg = RunConfig()  # CLadder's own questions
    cfg.agents[0].tools = ["data"]  # type: ignore[list-item]
    with pytest.raises(ConfigError, match='task = "cladder-data"'):
        build_setup(cfg)
    cfg.agents[0].tools = ["estimate_effect"]  # type: ignore[list-item]
    with pytest.raises(ConfigError, match="crawdad data tables"):
        build_setup(cfg)


async def test_registry_binds_the_table_and_refuses_without_one(
    items: list[DataQuestion],
) -> None:
    item = items[0]
    tools = tools_for(["data"], table=item.table)
    assert set(tools) == DATA_TOOLS
    assert set(tools_for(["estimate_effect", "causal"])) == {"estimate_effect", "causal_calculator"}
    pickle.loads(pickle.dumps(tools["describe_data"].compute))  # goes to a worker
    limits = ToolLimits()
    outcome = await boundary.call(tools, "describe_data", "{}", limits)
    assert outcome.error is None and outcome.value["rows"] == item.data.rows
    outcome = await boundary.call(tools_for(["data"]), "describe_data", "{}", limits)
    assert outcome.error == NO_TABLE and not outcome.malformed
    outcome = await boundary.call(tools, "estimate_effect", '{"effect": "ate"}', limits)
    assert outcome.malformed and "missing argument" in (outcome.error or "")


def test_the_calculators_text_protocol_is_unchanged() -> None:
    assert text_instructions(4) == text_instructions(4, ["causal"])
    assert text_instructions(4).startswith(TEXT_INSTRUCTIONS.split("{", 1)[0])
    assert "estimate_effect" in text_instructions(4, ["data"])


async def test_a_data_tools_run_resumes(items: list[DataQuestion], tmp_path: Path) -> None:
    from crawdad.data.questions import Dataset

    task = task_named("cladder-data")
    dataset = Dataset(questions=items[:10], info=_info(items, 10))  # type: ignore[arg-type]
    models = models_for(
        [QWEN, R1], GRANITE, answer_key(items, task), data_calls=data_calls(items, task)
    )
    out = tmp_path / "run"
    async with FakeServer("ollama", models) as server:  # type: ignore[arg-type]
        cfg = RunConfig(task="cladder-data", seed=1).serve_all_from(server.url)
        cfg.retry.initial_wait = cfg.retry.max_wait = 0
        for a in cfg.agents:
            a.tools = ["data"]  # type: ignore[list-item]
        first = Dataset(questions=items[:6], info=_info(items, 6))  # type: ignore[arg-type]
        s1 = await run(cfg, first, out, progress=False, simulated=True)
        s2 = await run(cfg, dataset, out, progress=False, simulated=True)
    assert s1.done_total == 6 and s2.already_done == 6 and s2.done_total == 10
    records = RunStore(out).records()
    assert len(records) == 10 and len({r.question_id for r in records}) == 10
    for r in records:
        assert r.ok and r.task == "cladder-data" and "perfect_answer" in r.item
        calls = [c for t in r.turns for c in t.tool_calls]
        assert calls and all(c.name in DATA_TOOLS for c in calls)
        json.loads(r.model_dump_json())


def _info(items: list[DataQuestion], n: int) -> Any:
    from crawdad.records import DatasetInfo

    return DatasetInfo(
        source="data",
        questions_file="q.json",
        models_file="m.json",
        sha256="0" * 64,
        n_total=len(items),
        n_selected=n,
        selected_ids=[str(q.question_id) for q in items[:n]],
    )


def test_fake_server_and_demo_serve_data_agents(data_folder: Path, tmp_path: Path) -> None:  # noqa: F811
    from crawdad.demo import run_demo, served_models

    cfg = RunConfig(task="cladder-data")
    cfg.agents[0].tools = ["data"]  # type: ignore[list-item]
    models, calling = served_models(config=cfg, data=data_folder)
    assert isinstance(models[QWEN], DataAgentModel) and isinstance(models[R1], DataAgentModel)
    assert set(calling) == {QWEN, R1}
    summary = run_demo(tmp_path / "demo", limit=4, progress=False, config=cfg, data=data_folder)
    assert summary.done_total == 4 and summary.errored == 0
    records = RunStore(tmp_path / "demo").records()
    assert all(c.name in DATA_TOOLS for r in records for t in r.turns for c in t.tool_calls)
    assert any(t.tool_calls for r in records for t in r.turns)
