"""Run folders of record schema 1 (crawdad 0.1) still load, resume and analyse.

tests/golden/v1-run was written by crawdad 0.1 (`crawdad demo --limit 6`, commit 177f8b9), with
the example data it ran on beside it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from crawdad.config import RunConfig, SelectionConfig
from crawdad.data.questions import load_cladder, select
from crawdad.demo import answer_key
from crawdad.errors import StoreError
from crawdad.fake import FakeServer, paper_models
from crawdad.records import SCHEMA_VERSION
from crawdad.run.runner import run
from crawdad.run.store import RunStore, selection_for

V1 = Path(__file__).parent / "golden" / "v1-run"


@pytest.fixture
def v1_run(tmp_path: Path) -> Path:
    folder = tmp_path / "v1-run"
    shutil.copytree(V1, folder, ignore=shutil.ignore_patterns("data"))
    return folder


def test_schema_1_records_load_as_paper_protocol_debates(v1_run: Path) -> None:
    records = RunStore(v1_run).records()
    assert len(records) == 6 and {r.schema_version for r in records} == {1}
    assert {r.protocol for r in records} == {"crawdad"} and {r.prompt_set for r in records} == {
        None
    }
    assert all(t.seen is None for r in records for t in r.turns)
    assert all(r.first_speaker in r.agents for r in records)


def test_schema_1_run_is_analysed(v1_run: Path, tmp_path: Path) -> None:
    from crawdad.analysis.report import write_report

    report = write_report([v1_run], tmp_path / "report")
    assert "6" in report.read_text() and (tmp_path / "report").is_dir()


async def resume(folder: Path, prompt_set: str, limit: int):  # type: ignore[no-untyped-def]
    # a folder of schema 1 resumes in file order: its `--limit` took the first of the file
    selection = selection_for(SelectionConfig(limit=limit), folder)
    dataset = select(load_cladder(V1 / "data"), selection, 0)
    models = paper_models(answer_key(dataset.questions))
    async with FakeServer("ollama", models) as server:
        cfg = RunConfig(seed=0, concurrency=16, prompt_set=prompt_set).serve_all_from(server.url)
        summary = await run(cfg, dataset, folder, progress=False, simulated=True)
        return summary, server.requests


async def test_schema_1_run_resumes_with_its_own_prompts(v1_run: Path) -> None:
    summary, requests = await resume(v1_run, "crawdad-v1", limit=8)
    assert summary.already_done == 6 and summary.finished == 2 and summary.done_total == 8
    debater_prompts = [
        r["messages"][0]["content"] for r in requests if r["model"] != "granite3.3:2b"
    ]
    later = [p for p in debater_prompts if "history" in p]
    assert later and all("--- Your opponent's response (round " in p for p in later)
    records = RunStore(v1_run).records()
    new = [r for r in records if r.schema_version == SCHEMA_VERSION]
    assert len(new) == 2 and {r.prompt_set for r in new} == {"crawdad-v1"}


async def test_schema_1_run_refuses_other_prompts_and_says_which_to_use(v1_run: Path) -> None:
    with pytest.raises(StoreError, match="--set prompt_set=crawdad-v1"):
        await resume(v1_run, "paper", limit=8)


def test_schema_3_lines_load_under_schema_4() -> None:
    """Schema 4 added the pipeline protocol (its steps in `pipeline`, roles task and
    interpretation, tool mode pipeline) and the data-backed tasks: a schema 3 line loads with
    no pipeline steps, and a data-backed record keeps CLadder's strictness."""
    from crawdad.records import DebateRecord

    line = (
        '{"schema_version": 3, "task": "cladder", "question_id": 7, "gold": "yes", "rung": 1, '
        '"query_type": "marginal", "alignment": "commonsense", "agents": {"a": "m"}, '
        '"turns": [{"round": 0, "agent": "a", "model": "m", "role": "sample", "template": "t", '
        '"prompt_sha256": "0", "answer": "yes", "tool_mode": "native", "tool_calls": '
        '[{"name": "causal_calculator", "mode": "native", "result": 0.5}]}], '
        '"final_answer": "yes", "end": "samples"}'
    )
    record = DebateRecord.model_validate_json(line)
    assert record.schema_version == 3 and record.pipeline == [] and SCHEMA_VERSION >= 4
    data = record.model_copy(update={"task": "cladder-data", "item": {"perfect_answer": "no"}})
    DebateRecord.model_validate(data.model_dump())
    with pytest.raises(ValueError, match="yes or no"):
        DebateRecord.model_validate({**data.model_dump(), "final_answer": "maybe"})


def test_schema_5_pipeline_lines_load_under_schema_6() -> None:
    """Schema 6 wrote the pipeline's task in LLM4Causal's keys, soft and exact scores and MA's
    second call: a schema 5 pipeline step (CLadder's keys, one exact score) loads unchanged."""
    from crawdad.records import DebateRecord

    line = (
        '{"schema_version": 5, "task": "cladder-data", "question_id": 7, "gold": "yes", '
        '"rung": 2, "query_type": "ate", "alignment": "commonsense", "agents": {"a": "m"}, '
        '"item": {"perfect_answer": "yes"}, "protocol": "pipeline", "final_answer": "yes", '
        '"end": "steps", "pipeline": [{"agent": "a", "task": {"task_type": "ate", '
        '"treatment": "X", "outcome": "Y", "conditions": {}, "mediators": [], "edges": []}, '
        '"extraction": {"task_type": true, "all": true}, "call": {"name": "estimate_effect", '
        '"mode": "pipeline", "result": {"value": 0.2}}, "tool_correct": true, '
        '"implied_answer": "yes", "answer": "yes", "interpretation_correct": true}]}'
    )
    record = DebateRecord.model_validate_json(line)
    step = record.pipeline[0]
    assert record.schema_version == 5 and SCHEMA_VERSION >= 6
    assert step.extraction == {"task_type": True, "all": True}
    assert step.extraction_exact == {} and step.more_calls == []


def test_schema_5_judge_lines_load_under_schema_6() -> None:
    """Schema 6 added the judge protocol's sides and who a follow-up question is for: a schema 5
    judge debate loads with neither, and its question was for every debater (the history a
    resumed prompt shows labels it as before)."""
    from crawdad.prompts import load_prompts
    from crawdad.protocols.base import _followup_label
    from crawdad.records import DebateRecord

    turn = '"model": "m", "template": "t", "prompt_sha256": "0"'
    line = (
        '{"schema_version": 5, "task": "cladder", "question_id": 7, "gold": "yes", "rung": 1, '
        '"query_type": "marginal", "alignment": "commonsense", "agents": {"a": "m", "b": "m"}, '
        '"protocol": "judge", "speaking_order": ["a", "b"], "turns": ['
        f'{{"round": 0, "agent": "a", "role": "initial", "stance": "yes", {turn}}}, '
        f'{{"round": 1, "agent": "b", "role": "argument", "stance": "no", {turn}}}, '
        f'{{"round": 0, "agent": "judge", "role": "verdict", "followup": "Why?", {turn}}}], '
        '"end": "cap"}'
    )
    record = DebateRecord.model_validate_json(line)
    assert record.schema_version == 5 and SCHEMA_VERSION >= 6
    assert [t.side for t in record.turns] == [None, None, None]
    assert record.turns[2].followup_to is None
    label = _followup_label(load_prompts("paper"), record.turns[2], "a", ["a", "b"])
    assert label == "The judge's follow-up question:"
