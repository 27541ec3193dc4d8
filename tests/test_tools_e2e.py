"""Debaters with the causal calculator, end to end over real HTTP on the fake servers: both
tool modes (native Ollama and OpenAI calls, streamed and not, and the text protocol), the
automatic fall-back to text, malformed and failing calls, the per-turn bound, and, from the
servers' request logs, that no agent's tool result reaches another agent."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from crawdad.config import RunConfig
from crawdad.data.questions import Question, load_cladder
from crawdad.fake import FakeExtractor, FakeReply, FakeRequest, FakeServer, FunctionModel
from crawdad.fake.tools import ToolCallingModel, default_call
from crawdad.protocols import run_debate
from crawdad.records import DebateRecord
from crawdad.run.runner import build_setup, pools_of
from crawdad.tools.loop import LAST_CALL

QWEN, R1, GRANITE = "qwen3:32b", "deepseek-r1:32b", "granite3.3:2b"


def answering(answer: str) -> FunctionModel:
    """Always the same answer, so that the debate runs to the cap (4 turns)."""
    return FunctionModel(
        lambda r: FakeReply(
            thinking="weighing it", text=f"So it is {answer}. Answer: {answer} (Confidence: 0.7)"
        )
    )


@pytest.fixture
def question(tiny_cladder: Path) -> Question:
    return load_cladder(tiny_cladder).questions[0]


async def debate(
    kind: str, models: dict[str, Any], question: Question, **agent_settings: dict[str, Any]
) -> tuple[DebateRecord, FakeServer]:
    async with FakeServer(kind, {**models, GRANITE: FakeExtractor()}) as server:  # type: ignore[arg-type]
        cfg = RunConfig(seed=3).serve_all_from(server.url, kind)  # type: ignore[arg-type]
        cfg.retry.initial_wait = cfg.retry.max_wait = 0
        for agent in cfg.agents:
            for key, value in agent_settings.get(agent.name, {}).items():
                setattr(agent, key, value)
        setup, _ = build_setup(cfg)
        try:
            record = await run_debate(setup, question)
        finally:
            for pool in pools_of(setup):
                await pool.aclose()
    return record, server


def assert_results_stay_with_their_caller(record: DebateRecord, server: FakeServer) -> None:
    """Every tool result (or error) is in requests of the caller's model, and in no request of
    a model that did not get that same answer to its own call."""
    bodies = [(b.get("model"), json.dumps(b)) for b in server.requests]
    producers: dict[str, set[str]] = {}
    for turn in record.turns:
        for call in turn.tool_calls:
            answer = call.error or json.dumps({"value": call.result})
            needle = json.dumps(answer)[1:-1]  # as it sits inside a request body
            producers.setdefault(needle, set()).add(turn.model)
    assert producers
    for needle, callers in producers.items():
        holders = {model for model, body in bodies if needle in body}
        assert holders and holders <= callers, (needle, holders, callers)


async def test_native_ollama_and_text_fallback_for_a_model_without_tools(
    question: Question,
) -> None:
    models = {
        QWEN: ToolCallingModel(answering("yes")),
        R1: ToolCallingModel(answering("no"), supports_tools=False),
    }
    tools = {"tools": ["causal"]}
    record, server = await debate("ollama", models, question, qwen3=tools, **{"deepseek-r1": tools})
    assert record.ok and len(record.turns) == 4
    modes = {t.agent: t.tool_mode for t in record.turns}
    assert modes == {"qwen3": "native", "deepseek-r1": "text"}
    for turn in record.turns:
        (call,) = turn.tool_calls
        assert call.name == "causal_calculator" and not call.malformed and call.error is None
        assert (
            isinstance(call.result, float)
            and call.arguments
            and call.arguments["query"] == "correlation"
        )
        assert call.mode == turn.tool_mode and call.seconds >= 0
        assert "Answer:" in turn.text and turn.answer is not None
    # Ollama refused `tools` for the R1 distill once; the agent then stayed in text mode.
    assert server.stats.statuses.get(400) == 1
    r1_bodies = [b for b in server.requests if b["model"] == R1]
    assert r1_bodies[0].get("tools") and not any(b.get("tools") for b in r1_bodies[1:])
    # The text-mode turn's prompt describes the tool; the native one's does not.
    r1_turn = next(t for t in record.turns if t.agent == "deepseek-r1")
    assert (
        r1_turn.prompt_sha256 != next(t for t in record.turns if t.agent == "qwen3").prompt_sha256
    )
    native = [b for b in server.requests if b["model"] == QWEN and b.get("tools")]
    assert native and native[0]["tools"][0]["function"]["name"] == "causal_calculator"
    followups = [b for b in server.requests if b["model"] == QWEN and len(b["messages"]) == 3]
    assert (
        followups and followups[0]["messages"][1]["tool_calls"][0]["function"]["arguments"]["query"]
    )
    assert followups[0]["messages"][2]["role"] == "tool"
    assert followups[0]["messages"][2]["tool_name"] == "causal_calculator"
    assert_results_stay_with_their_caller(record, server)


@pytest.mark.parametrize("stream", [True, False])
async def test_native_openai_calls_streamed_and_whole(question: Question, stream: bool) -> None:
    models = {QWEN: ToolCallingModel(answering("yes")), R1: ToolCallingModel(answering("no"))}
    tools = {"tools": ["causal"], "tool_mode": "native", "stream": stream}
    record, server = await debate("openai", models, question, qwen3=tools, **{"deepseek-r1": tools})
    assert record.ok
    for turn in record.turns:
        (call,) = turn.tool_calls
        assert call.mode == "native" and call.id and call.id.startswith("chatcmpl-tool-")
        assert call.error is None and isinstance(call.result, float)
    second = [b for b in server.requests if len(b["messages"]) == 3]
    assistant, tool = second[0]["messages"][1:]
    assert json.loads(assistant["tool_calls"][0]["function"]["arguments"])["query"] == "correlation"
    assert tool["role"] == "tool" and tool["tool_call_id"] == assistant["tool_calls"][0]["id"]
    assert_results_stay_with_their_caller(record, server)


@pytest.mark.parametrize(
    ("kind", "mode"), [("ollama", "native"), ("openai", "native"), ("openai", "text")]
)
async def test_malformed_calls_are_recorded_and_the_turn_goes_on(
    question: Question, kind: str, mode: str
) -> None:
    models = {QWEN: ToolCallingModel(answering("yes"), malformed=1.0), R1: answering("no")}
    record, server = await debate(
        kind, models, question, qwen3={"tools": ["causal"], "tool_mode": mode}
    )
    assert record.ok
    qwen = [t for t in record.turns if t.agent == "qwen3"]
    for turn in qwen:
        (call,) = turn.tool_calls
        assert call.malformed and call.error and call.result is None
        assert turn.answer == "yes"  # it answered after being told what was wrong
    assert all(not t.tool_calls and t.tool_mode is None for t in record.turns if t.agent != "qwen3")
    assert_results_stay_with_their_caller(record, server)


async def test_failing_calls_name_what_is_missing_and_are_not_malformed(question: Question) -> None:
    def incomplete(request: FakeRequest) -> dict[str, Any]:
        call = default_call(request)
        call.update(query="ate", edges=["Z->X", "Z->Y", "X->Y"])
        return call

    models = {QWEN: ToolCallingModel(answering("yes"), call=incomplete), R1: answering("no")}
    record, server = await debate(
        "openai", models, question, qwen3={"tools": ["causal"], "tool_mode": "text"}
    )
    calls = [c for t in record.turns for c in t.tool_calls]
    assert calls and all(not c.malformed and c.mode == "text" for c in calls)
    assert all(c.error and "missing probabilities" in c.error and "Z=0" in c.error for c in calls)
    followup = next(b for b in server.requests if len(b["messages"]) == 3)
    assert followup["messages"][2]["content"].startswith("Your causal_calculator call failed:")
    assert_results_stay_with_their_caller(record, server)


async def test_calls_stop_at_the_bound_and_the_model_is_told_to_answer(question: Question) -> None:
    models = {QWEN: ToolCallingModel(answering("yes"), calls=5), R1: answering("no")}
    settings = {"tools": ["causal"], "tool_mode": "native", "max_tool_calls": 2}
    record, server = await debate("ollama", models, question, qwen3=settings)
    qwen = [t for t in record.turns if t.agent == "qwen3"]
    assert qwen and all(len(t.tool_calls) == 2 for t in qwen)
    assert [c.generation for c in qwen[0].tool_calls] == [0, 1]
    last = [b for b in server.requests if b["model"] == QWEN and len(b["messages"]) == 6]
    assert last and not last[0].get("tools")
    assert last[0]["messages"][-1]["content"] == LAST_CALL.format(limit=2)
    assert qwen[0].answer == "yes"


async def test_vllm_without_tool_parser(question: Question) -> None:
    """auto falls back to text; native fails the debate with the server's own words."""
    models = {QWEN: ToolCallingModel(answering("yes")), R1: answering("no")}
    async with FakeServer(
        "openai", {**models, GRANITE: FakeExtractor()}, auto_tool_choice=False
    ) as server:
        for mode, ok in (("auto", True), ("native", False)):
            cfg = RunConfig(seed=3).serve_all_from(server.url, "openai")
            cfg.retry.initial_wait = cfg.retry.max_wait = 0
            cfg.agents[0].tools, cfg.agents[0].tool_mode = ["causal"], mode  # type: ignore[assignment]
            setup, _ = build_setup(cfg)
            try:
                record = await run_debate(setup, question)
            finally:
                for pool in pools_of(setup):
                    await pool.aclose()
            assert record.ok is ok
            if ok:
                assert {t.tool_mode for t in record.turns if t.agent == "qwen3"} == {"text"}
            else:
                assert "--enable-auto-tool-choice" in (record.error or "")


async def test_runs_without_tools_send_no_tool_fields(question: Question) -> None:
    record, server = await debate("openai", {QWEN: answering("yes"), R1: answering("no")}, question)
    assert record.ok and all(t.tool_mode is None and t.tool_calls == [] for t in record.turns)
    assert all("tools" not in b and len(b["messages"]) == 1 for b in server.requests)


async def test_tool_use_table_counts_calls_and_malformed_apart(question: Question) -> None:
    from crawdad.analysis.tool_use import accuracy_with_and_without, tool_use

    models = {QWEN: ToolCallingModel(answering("yes"), malformed=1.0), R1: answering("no")}
    record, _ = await debate("ollama", models, question, qwen3={"tools": ["causal"]})
    table = tool_use([record])
    (row,) = table.to_dict("records")
    assert row["model"] == QWEN and row["rung"] == question.rung
    assert row["turns"] == row["calling_turns"] == row["calls"] == row["malformed"] == 2
    assert row["refused"] == 0 and row["calls_per_turn"] == 1.0
    acc = accuracy_with_and_without({"tool": [record]}).to_dict("records")
    assert acc[0]["tool"] and acc[0]["called"] == 1.0 and acc[0]["debates"] == 1
