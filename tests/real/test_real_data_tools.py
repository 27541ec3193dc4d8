"""One debate with the data tools against the REAL llama.cpp server (SmolLM2-135M).

The question is CLadder's own (a confounded treatment and recovery, model 54 of the sample:
MIT licence, causalNLP/cladder), written to a CLadder folder here and turned into a question
answered from data by `crawdad data tables`: the counts are not in the text, the agents reach
the table through the data tools only (native calls: the server is started with
`--chat_format chatml-function-calling`). A 135M model calls no tool unasked, so each turn's
first request forces an estimate_effect call (`tool_choice`), and its arguments are the
model's own: the checks are on the run (it completes) and the records (every call recorded,
whole, with a value or an error), not on the answer. One question, small budgets: CI time is
tight (about a minute here, the server's start included).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from crawdad.config import RunConfig
from crawdad.data.tables import make_tables, write_tables
from crawdad.protocols import run_debate
from crawdad.run.runner import build_setup, pools_of
from crawdad.tasks import task_named

from .conftest import _log, _start, require
from .servers import RealServer, llamacpp_server

pytestmark = pytest.mark.real

MODEL = {
    "model_id": 54,
    "story_id": "simpson_drug",
    "graph_id": "confounding",
    "background": "Imagine a self-contained, hypothetical world with only the following "
    "conditions, and without any unmentioned factors or causal relationships: Gender has a "
    "direct effect on treatment and recovery. Treatment has a direct effect on recovery.",
    "variable_mapping": {
        "V1name": "gender",
        "V11": "male gender",
        "V10": "non-male gender",
        "Xname": "treatment",
        "X1": "receives treatment",
        "X0": "receives no treatment",
        "Yname": "recovery",
        "Y1": "recovery",
        "Y0": "non-recovery",
    },
    "structure": "V1->X,V1->Y,X->Y",
    "params": {
        "p(V1)": 0.47188241528675534,
        "p(X | V1)": [0.9163475859435619, 0.23905678765268776],
        "p(Y | V1, X)": [
            [0.03602472743362692, 0.23666470640291037],
            [0.7512259712885051, 0.9606492856933714],
        ],
    },
}
QUESTION = {
    "question_id": 628,
    "desc_id": "simpson_drug-confounding-ate-model54-spec0-q0",
    "given_info": "For patients who are not male and not receiving treatment, the probability "
    "of recovery is 4%. For patients who are not male and receiving treatment, the probability "
    "of recovery is 24%. For patients who are male and not receiving treatment, the "
    "probability of recovery is 75%. For patients who are male and receiving treatment, the "
    "probability of recovery is 96%. The overall probability of male gender is 47%.",
    "question": "Will receives treatment increase the chance of recovery?",
    "answer": "yes",
    "meta": {
        "story_id": "simpson_drug",
        "graph_id": "confounding",
        "treated": True,
        "result": True,
        "polarity": True,
        "groundtruth": 0.20478468050889986,
        "query_type": "ate",
        "rung": 2,
        "formal_form": "E[Y | do(X = 1)] - E[Y | do(X = 0)]",
        "given_info": {
            "p(Y | V1, X)": [
                [0.03602472743362712, 0.23666470640291046],
                [0.7512259712885051, 0.9606492856933712],
            ],
            "p(V1)": [0.47188241528675534],
        },
        "estimand": "\\sum_{V1=v} P(V1=v)*[P(Y=1|V1=v,X=1) - P(Y=1|V1=v, X=0)]",
        "treatment": "X",
        "outcome": "Y",
        "model_id": 54,
    },
}
FORCED = {"tool_choice": {"type": "function", "function": {"name": "estimate_effect"}}}


@pytest.fixture(scope="module")
def llamacpp_tools() -> Iterator[RealServer]:
    require("llamacpp")
    server = _start(
        llamacpp_server(
            interrupt_requests=False,
            extra_args=["--chat_format", "chatml-function-calling"],
            log_path=_log("llamacpp-data-tools"),
        )
    )
    yield server
    server.stop()


def data_question(tmp_path: Path) -> Any:
    source = tmp_path / "cladder"
    source.mkdir()
    (source / "cladder-q.json").write_text(json.dumps([QUESTION]))
    (source / "cladder-meta-models.json").write_text(json.dumps([MODEL]))
    out = tmp_path / "tables"
    write_tables(make_tables(source, seed=0, rows=500, counts_in_text=False), out, source, 0, 500)
    (item,) = task_named("cladder-data-no-counts").load(out).questions
    return item


async def test_a_data_tools_debate_on_llamacpp(llamacpp_tools: RealServer, tmp_path: Path) -> None:
    item = data_question(tmp_path)
    server = llamacpp_tools
    cfg = RunConfig(task="cladder-data-no-counts", prompt_set="data-tools", seed=0)
    cfg.serve_all_from(server.base_url, "openai")
    cfg.protocol.max_turns = 2
    cfg.retry.initial_wait, cfg.retry.max_wait = 0.2, 2.0
    for agent in cfg.agents:
        agent.model = server.model
        agent.tools = ["data"]  # type: ignore[list-item]
        agent.tool_mode = "native"
        # The tiny model calls no tool of its own accord: its first request forces one (the
        # follow-up, past the one call allowed, offers no tool and the model answers).
        agent.options = FORCED
        agent.max_tool_calls = 1
        agent.max_tokens = 96
        agent.timeout = 180.0
        agent.stream = False
    cfg.extractor.model = server.model
    cfg.extractor.max_tokens = 48
    setup, _ = build_setup(cfg)
    try:
        record = await run_debate(setup, item)
    finally:
        for pool in pools_of(setup):
            await pool.aclose()
    assert record.ok, record.error
    assert record.task == "cladder-data-no-counts" and record.gold == "yes"
    assert record.item["perfect_answer"] in ("yes", "no") and not record.item["counts_in_text"]
    assert 1 <= len(record.turns) <= 2
    calls = [c for t in record.turns for c in t.tool_calls]
    if not calls and all(t.stop_reason == "length" for t in record.turns):
        pytest.skip("the model ran out of tokens inside its calls (a cut call is not parsed)")
    for turn in record.turns:
        assert turn.tool_mode == "native" and len(turn.tool_calls) <= 1
    assert calls, "the forced call was not made"
    for call in calls:  # whatever the model wrote, the call is recorded whole
        assert call.name == "estimate_effect" and call.mode == "native"
        assert (call.result is None) != (call.error is None)
        if call.result is not None:  # the table answered: the effect and the rows it used
            assert not call.malformed and call.result["rows"] == 500
        else:  # a 135M model's arguments: not a column, or not the schema (malformed)
            assert call.error and len(call.error) <= 1000
        json.loads(call.model_dump_json())
    json.loads(record.model_dump_json())
