"""The tools' boundary: a tool call's arguments are the model's, so nothing in them may end the
turn. A graph of 1,000 edges, arguments nested thousands deep, megabytes of them, NaN, lone
surrogates, a tool stuck in C code or in a Python loop, one that crashes or kills its worker:
each is answered with a tool error that names the limit or the failure, and the next call
works. Then the same calls sent by a fake model in a debate, over HTTP, in every mode."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from itertools import pairwise
from typing import Any

import pytest

from crawdad.config import RunConfig, ToolLimits
from crawdad.data.questions import Question, load_cladder
from crawdad.fake import FakeExtractor, FakeReply, FakeServer, FunctionModel
from crawdad.fake.tools import ToolCallingModel
from crawdad.protocols import run_debate
from crawdad.run.runner import build_setup, pools_of
from crawdad.tools import boundary
from crawdad.tools.boundary import MalformedCall, Tool
from crawdad.tools.calculator import GivenNumbers
from crawdad.tools.causal import TOOL_NAME, parse_arguments
from crawdad.tools.graph import DAG
from crawdad.tools.registry import tools_for

TOOLS = tools_for(["causal"])
CHAIN = [f"V{i}->V{i + 1}" for i in range(1000)]
CHAIN_CALL = {"query": "ate", "edges": CHAIN, "treatment": "V0", "outcome": "V1000"}
DEEP_TEXT = '{"query": "ate", "edges": ' + "[" * 5000 + "]" * 5000 + "}"
WIDE = ToolLimits(max_edges=2000, max_variables=2000)  # room for the chain


def nested(depth: int) -> dict[str, Any]:
    top: dict[str, Any] = {}
    node = top
    for _ in range(depth):
        node["a"] = {}
        node = node["a"]
    return top


def call(raw: Any, limits: ToolLimits | None = None, tools: Any = None) -> boundary.Outcome:
    return asyncio.run(boundary.call(tools or TOOLS, TOOL_NAME, raw, limits or ToolLimits()))


# --- the calls ---------------------------------------------------------------------


def test_a_chain_of_1000_edges_is_refused_by_its_limit_and_computed_within_a_wider_one() -> None:
    refused = call(json.dumps(CHAIN_CALL))
    assert refused.value is None and not refused.malformed
    assert "1,000 entries" in (refused.error or "") and "tool_limits.max_edges" in (
        refused.error or ""
    )
    assert refused.arguments == CHAIN_CALL  # what the model sent is in the record
    # Within wider limits every query computes: no recursion depth tied to the graph.
    ate = call(json.dumps(CHAIN_CALL), WIDE)
    assert "missing probabilities: P(V1000=1|V0=1)" in (ate.error or "")
    backdoor = call(json.dumps({**CHAIN_CALL, "query": "backdoor"}), WIDE)
    assert backdoor.error is None and backdoor.value["minimal_sets"] == [[]]
    dsep = call(json.dumps({**CHAIN_CALL, "query": "d_separation", "conditioning": ["V500"]}), WIDE)
    assert dsep.error is None and dsep.value is True
    # The calculator itself, outside the boundary, as the issue ran it.
    query = parse_arguments({**CHAIN_CALL, "query": "backdoor"}, WIDE)
    assert GivenNumbers(WIDE).compute(query).value["valid"] is True  # V0 has no parents
    cycle = [*CHAIN, "V1000->V0"]
    assert "cycle" in (call(json.dumps({**CHAIN_CALL, "edges": cycle}), WIDE).error or "")


def test_deep_nesting_is_malformed_before_any_parser_recurses() -> None:
    for raw in (DEEP_TEXT, nested(3000), "[" * 100_000):
        out = call(raw)
        assert out.malformed and "tool_limits.max_nesting" in (out.error or ""), out.error
        assert out.arguments is None
    cyclic: dict[str, Any] = {}
    cyclic["self"] = cyclic
    assert "max_nesting" in (call(cyclic).error or "")
    with pytest.raises(MalformedCall, match="nested more than"):
        parse_arguments(DEEP_TEXT)
    # Brackets inside strings are not nesting.
    assert boundary.nesting('{"a": "[[[[[[[[", "b": [1, {"c": "]]]"}]}') == 3


def test_every_size_limit_is_named() -> None:
    base = {"query": "correlation", "edges": ["X->Y"], "treatment": "X", "outcome": "Y"}
    huge = json.dumps({**base, "edges": [f"V{i}->V{i + 1}" for i in range(200_000)]})
    out = call(huge)
    assert "tool_limits.max_argument_chars" in (out.error or "")
    assert len(out.raw) < 101_000 and "more characters not kept" in out.raw
    many = [f"A{i}->B{i}" for i in range(40)]  # 80 variables, 40 edges
    assert "tool_limits.max_variables" in (call({**base, "edges": many}).error or "")
    probs = [{"event": f"P(Y=1|X={i % 2})", "value": 0.5} for i in range(2000)]
    assert "tool_limits.max_probabilities" in (call({**base, "probabilities": probs}).error or "")
    # An adjustment over 12 variables sums 4,096 terms: more than the probabilities a call has.
    confounders = [f"Z{i}" for i in range(12)]
    edges = ["X->Y", *(f"{z}->X" for z in confounders), *(f"{z}->Y" for z in confounders)]
    ate = call({**base, "query": "ate", "edges": edges, "conditioning": confounders})
    assert "2^12 terms" in (ate.error or "") and "max_probabilities" in (ate.error or "")


def test_odd_json_is_malformed_and_records_stay_writable() -> None:
    base = '{"query": "ate", "edges": ["X->Y"], "treatment": "X", "outcome": "Y"'
    cases = {
        base + ', "probabilities": [{"event": "P(Y=1)", "value": NaN}]}': "NaN",
        base + ', "probabilities": [{"event": "P(Y=1)", "value": ' + "9" * 5000 + "}]}": "digits",
        "[1, 2]": "must be a JSON object",
        '"just text"': "must be a JSON object",
        base: "not valid JSON",
    }
    for raw, words in cases.items():
        out = call(raw)
        assert out.malformed and words in (out.error or ""), (raw[:40], out.error)
    out = call({"query": "ate", "edges": ["X->Y"], "treatment": "X", "outcome": float("inf")})
    assert out.malformed and "inf" in (out.error or "")
    # A "\ud800" escape decodes to a lone surrogate; the record must still be UTF-8.
    out = call('{"query": "ate", "edges": ["X->Y"], "treatment": "X\\ud800", "outcome": "Y"}')
    assert out.malformed
    json.dumps(out.arguments, ensure_ascii=False).encode("utf-8")
    unknown = asyncio.run(boundary.call(TOOLS, "rm -rf", "{}", ToolLimits()))
    assert unknown.malformed and "there is no tool" in (unknown.error or "")


# --- the worker: time, crashes, memory ------------------------------------------------------


def _seconds(arguments: dict[str, Any], limits: ToolLimits) -> float:
    return float(arguments.get("seconds", 0))


def stuck_in_c(seconds: float, limits: ToolLimits) -> str:
    time.sleep(seconds)  # C code: no Python-level interrupt reaches it
    return "woke"


def python_loop(seconds: float, limits: ToolLimits) -> int:
    n = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        n += 1
    return n


def crashes(seconds: float, limits: ToolLimits) -> Any:
    return {}["missing"]


def kills_its_worker(seconds: float, limits: ToolLimits) -> Any:
    os.kill(os.getpid(), signal.SIGKILL)


def hoards(seconds: float, limits: ToolLimits) -> int:
    return len(bytearray(2**31))  # more than the worker's address space


def not_json(seconds: float, limits: ToolLimits) -> float:
    return float("nan")


def tool(compute: Any) -> dict[str, Tool]:
    t = Tool(name="slow", spec=dict, parse=_seconds, compute=compute, label="the slow tool")
    return {"slow": t}


async def test_seconds_are_enforced_on_code_stuck_in_c_or_looping_and_the_next_call_works() -> None:
    limits = ToolLimits(seconds=0.5)
    for compute in (stuck_in_c, python_loop):
        start = time.monotonic()
        out = await boundary.call(tool(compute), "slow", {"seconds": 60}, limits)
        assert time.monotonic() - start < 30  # killed, not waited for (a bound, not a speed)
        assert "did not finish this call within 0.5 s" in (out.error or "")
        assert "tool_limits.seconds" in (out.error or "") and not out.malformed
        quick = await boundary.call(tool(compute), "slow", {"seconds": 0}, limits)
        assert quick.error is None and quick.value is not None
    # Calls at once share the pool's workers; each is timed from its own start.
    outs = await asyncio.gather(
        *(boundary.call(tool(stuck_in_c), "slow", {"seconds": 0.05}, limits) for _ in range(5))
    )
    assert all(o.value == "woke" for o in outs)


async def test_a_crash_a_killed_worker_memory_and_a_non_json_value_are_tool_errors() -> None:
    limits = ToolLimits(seconds=20, memory_mb=512)
    crashed = await boundary.call(tool(crashes), "slow", {}, limits)
    assert "could not compute this call (KeyError: 'missing')" in (crashed.error or "")
    killed = await boundary.call(tool(kills_its_worker), "slow", {}, limits)
    assert "worker process died (exit code -9)" in (killed.error or "")
    hoarded = await boundary.call(tool(hoards), "slow", {}, limits)
    assert "tool_limits.memory_mb" in (hoarded.error or "")
    nan = await boundary.call(tool(not_json), "slow", {}, limits)
    assert "not a JSON value" in (nan.error or "")
    unpicklable = await boundary.call(tool(lambda s, limits: s), "slow", {}, limits)
    assert "cannot go to a worker" in (unpicklable.error or "")
    fine = await boundary.call(tool(stuck_in_c), "slow", {"seconds": 0}, limits)
    assert fine.value == "woke"


def test_backdoor_sets_past_the_exhaustive_search_are_one_greedy_minimal_set() -> None:
    zs = [f"Z{i:02d}" for i in range(20)]
    dag = DAG.from_edges(
        [("X", "Y"), *((z, "X") for z in zs), *((z, "Y") for z in zs), ("W", "Z00")]
    )
    (found,) = dag.backdoor_sets("X", "Y")
    assert found == zs and dag.backdoor_valid("X", "Y", set(found))
    assert all(not dag.backdoor_valid("X", "Y", set(found) - {z}) for z in found)


# --- in a debate, over HTTP ------------------------------------------------------------------

QWEN, R1, GRANITE = "qwen3:32b", "deepseek-r1:32b", "granite3.3:2b"


def answering(answer: str) -> FunctionModel:
    return FunctionModel(
        lambda r: FakeReply(thinking="hm", text=f"So {answer}. Answer: {answer} (Confidence: 0.7)")
    )


@pytest.mark.parametrize(
    ("kind", "mode"), [("ollama", "native"), ("openai", "native"), ("openai", "text")]
)
async def test_a_debate_with_hostile_calls_finishes_and_records_them_as_tool_errors(
    tiny_cladder: Any, kind: str, mode: str
) -> None:
    question: Question = load_cladder(tiny_cladder).questions[0]
    calls = [lambda r: CHAIN_CALL, lambda r: DEEP_TEXT if kind != "ollama" else nested(200)]
    models = {
        QWEN: ToolCallingModel(answering("yes"), call=calls[0]),
        R1: ToolCallingModel(answering("no"), call=calls[1]),
        GRANITE: FakeExtractor(),
    }
    async with FakeServer(kind, models) as server:  # type: ignore[arg-type]
        cfg = RunConfig(seed=3).serve_all_from(server.url, kind)  # type: ignore[arg-type]
        cfg.retry.initial_wait = cfg.retry.max_wait = 0
        for agent in cfg.agents:
            agent.tools, agent.tool_mode = ["causal"], mode  # type: ignore[assignment]
        setup, _ = build_setup(cfg)
        try:
            record = await run_debate(setup, question)
        finally:
            for pool in pools_of(setup):
                await pool.aclose()
    assert record.ok and len(record.turns) == 4, record.error
    for turn in record.turns:
        (made,) = turn.tool_calls
        assert made.result is None and made.error and turn.answer is not None
        if turn.model == QWEN:
            assert "tool_limits.max_edges" in made.error and not made.malformed
            assert made.arguments == CHAIN_CALL
        else:
            assert "tool_limits.max_nesting" in made.error and made.malformed
            assert made.arguments is None
    json.loads(record.model_dump_json())  # the whole record is writable
    # The model was told: the error is in its next request, and only in its own.
    for turn in record.turns:
        error = json.dumps(turn.tool_calls[0].error)[1:-1]
        holders = {b.get("model") for b in server.requests if error in json.dumps(b)}
        assert holders == {turn.model}


def test_a_whole_model_past_the_engines_limit_says_so_when_the_formulas_cannot_answer() -> None:
    names = [f"V{i}" for i in range(20)]
    edges = [f"{a}->{b}" for a, b in pairwise(names)]
    tables = [{"event": f"P({names[0]}=1)", "value": 0.5}] + [
        {"event": f"P({b}=1|{a}={k})", "value": 0.3 + 0.4 * k}
        for a, b in pairwise(names)
        for k in (0, 1)
    ]
    args = {"query": "exp_away", "edges": edges, "treatment": "V0", "outcome": "V19"}
    out = call({**args, "conditioning": ["V10"], "probabilities": tables})
    assert "tool_limits.max_exact_variables; this one has 20" in (out.error or "")
    # Let the engine take it: 2^20 states run past a call's seconds, and the worker is killed.
    slow = call(
        {**args, "conditioning": ["V10"], "probabilities": tables},
        ToolLimits(max_exact_variables=20, seconds=1),
    )
    assert "did not finish this call within 1 s" in (slow.error or "")
