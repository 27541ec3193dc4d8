""" "uncertain" as an answer (the Causal Agent's yes / no / uncertain, paper 001): read by the
extractor only where the prompt set allows it, recorded apart from an unreadable answer (schema
6), and scored as the paper scores it, wrong against a yes/no label, with its own rate in the
report. End to end on the fakes with the data-agent config."""

from __future__ import annotations

from pathlib import Path

import pytest
from crawdad.analysis.report_files import ReportWriter
from crawdad.analysis.tasks.cladder_data.ways import accuracy_table, data_section

from crawdad.config import load_config
from crawdad.demo import answer_key, data_calls
from crawdad.fake import FakeExtractor, FakeServer
from crawdad.fake.data_agent import DataAgentModel
from crawdad.fake.setups import paper_models
from crawdad.prompts import load_prompts
from crawdad.protocols import run_debate
from crawdad.records import SCHEMA_VERSION, DebateRecord
from crawdad.resources import bundled
from crawdad.run.runner import build_setup, pools_of
from crawdad.scoring.extract import extractor_schema, parse_reply
from crawdad.tasks import task_named
from crawdad.tasks.cladder_data import DataQuestion
from tests.test_data_task import data_folder  # noqa: F401  (the module's fixture)

QWEN, GRANITE = "qwen3:32b", "granite3.3:2b"


def test_uncertain_is_read_only_where_the_prompt_set_allows_it() -> None:
    reply = '{"answer": "uncertain", "confidence": 0.5}'
    allowed = parse_reply(reply, uncertain=True)
    assert (allowed.answer, allowed.method, allowed.reason) == ("uncertain", "strict", None)
    refused = parse_reply(reply)
    assert refused.answer is None and refused.method == "none"
    assert "not yes or no" in (refused.reason or "")
    prose = parse_reply("The final Answer: Uncertain.", uncertain=True)
    assert prose.answer == "uncertain" and prose.method == "tolerant"
    none = parse_reply('{"answer": "none", "confidence": null}', uncertain=True)
    assert none.answer is None and none.reason  # no answer stays apart from "uncertain"
    only = parse_reply('{"answer": "uncertain"}', confidence=False, uncertain=True)
    assert only.answer == "uncertain" and only.confidence is None
    assert "uncertain" in str(extractor_schema(uncertain=True))
    assert "uncertain" not in str(extractor_schema()["properties"]["answer"])


def test_the_causal_agent_set_allows_it_and_the_others_keep_their_versions() -> None:
    assert load_prompts("causal-agent").uncertain and not load_prompts("data-tools").uncertain
    paper = load_prompts("paper").versions()["set"]
    assert "uncertain" not in repr(load_prompts("paper").fragments)
    assert paper == load_prompts("paper").versions()["set"]


def test_records_keep_uncertain_answers_but_not_uncertain_labels() -> None:
    fields = {
        "task": "cladder-data",
        "question_id": 1,
        "rung": 2,
        "query_type": "ate",
        "alignment": "commonsense",
        "agents": {"a": "m"},
    }
    r = DebateRecord(gold="yes", final_answer="uncertain", **fields)
    assert r.schema_version == SCHEMA_VERSION >= 6
    assert DebateRecord.model_validate_json(r.model_dump_json()).final_answer == "uncertain"
    with pytest.raises(ValueError, match="label is yes or no"):
        DebateRecord(gold="uncertain", **fields)
    with pytest.raises(ValueError, match="yes or no"):
        DebateRecord(gold="yes", final_answer="maybe", **fields)
    old = DebateRecord.model_validate_json(
        r.model_copy(update={"schema_version": 5, "final_answer": "no"}).model_dump_json()
    )
    assert old.schema_version == 5 and old.final_answer == "no"


async def _agent_debate(items: list[DataQuestion], item: DataQuestion, uncertain: float, **cfg):
    task = task_named("cladder-data")
    base = paper_models(answer_key(items, task))
    agent = DataAgentModel(base[QWEN], data_calls(items, task), uncertain=uncertain)  # type: ignore[arg-type]
    async with FakeServer("ollama", {QWEN: agent, GRANITE: FakeExtractor()}) as server:
        config = load_config(bundled("configs") / "protocols" / "data-agent.toml")
        config = config.model_copy(update={"task": "cladder-data", **cfg})
        config = config.serve_all_from(server.url)
        config.retry.initial_wait = config.retry.max_wait = 0
        setup, _ = build_setup(config)
        try:
            return await run_debate(setup, item), server
        finally:
            for pool in pools_of(setup):
                await pool.aclose()


async def test_an_agent_answering_uncertain_finishes_and_is_scored_wrong(
    data_folder: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    items: list[DataQuestion] = task_named("cladder-data").load(data_folder).questions  # type: ignore[assignment]
    item = next(q for q in items if q.query_type == "correlation")
    record, server = await _agent_debate(items, item, uncertain=1.0)
    assert record.ok and record.end == "samples" and record.prompt_set == "causal-agent"
    (turn,) = record.turns
    assert turn.answer == "uncertain" and turn.extraction and turn.extraction.method == "strict"
    assert record.final_answer == "uncertain" and record.agent_answers == {"qwen3": "uncertain"}
    offered = {t["function"]["name"] for b in server.requests for t in b.get("tools") or []}
    assert "independence_test" in offered and turn.tool_calls
    extractor_asked = [b for b in server.requests if b["model"] == GRANITE]
    assert "uncertain" in str(extractor_asked[0]["format"])
    # The paper's prompts do not allow it: the same fake then answers yes or no.
    plain, _ = await _agent_debate(items, item, uncertain=1.0, prompt_set="data-tools")
    assert plain.ok and plain.final_answer in ("yes", "no")
    unread = record.model_copy(update={"final_answer": None})
    ways = {"agent": [record, plain.model_copy(update={"question_id": "p"}), unread]}
    overall = accuracy_table(ways).query("dimension == 'overall'").iloc[0]
    right = plain.final_answer == plain.gold
    assert overall["n"] == 3 and overall["n_correct"] == int(right)  # uncertain: wrong
    assert overall["n_uncertain"] == 1 and overall["uncertain_rate"] == pytest.approx(1 / 3)
    assert overall["n_unreadable"] == 1
    text = "\n".join(ReportWriter(tmp_path).markdown(data_section([("agent", ways["agent"])])))
    header = next(line for line in text.splitlines() if "uncertain (%)" in line)
    row = next(line for line in text.splitlines() if line.startswith("| agent") and "all" in line)
    cells = dict(zip(header.split("|"), row.split("|"), strict=True))
    assert {k.strip(): v.strip() for k, v in cells.items()}["uncertain (%)"] == "33.3"
    assert {k.strip(): v.strip() for k, v in cells.items()}["no answer (%)"] == "33.3"
