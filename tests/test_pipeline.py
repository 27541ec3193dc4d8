"""The pipeline protocol (LLM4Causal's three steps) on the fakes: the task a model writes is read
and scored field by field against the question's, crawdad runs the data tool for it, and the
answer is scored against what the question's own result implies; a wrong task is caught at the
step it goes wrong; the run resumes; bad setups are refused before any request."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from crawdad.config import RunConfig
from crawdad.data.questions import Dataset
from crawdad.demo import answer_key, data_calls
from crawdad.errors import ConfigError, CrawdadError
from crawdad.fake import FakeServer
from crawdad.fake.setups import models_for
from crawdad.protocols.pipeline import read_task
from crawdad.records import SCHEMA_VERSION, DebateRecord
from crawdad.run.runner import build_setup, run
from crawdad.run.store import RunStore
from crawdad.tasks import task_named
from crawdad.tasks.cladder_data import DataQuestion
from crawdad.tools import data_tools
from crawdad.tools.data_tasks import call_for, gold_query, implied_answer
from crawdad.tools.llm4causal import extraction_scores, gold_task, queries
from tests.test_data_task import data_folder  # noqa: F401  (the module's fixture)
from tests.test_data_tools_debate import _info

QWEN, R1, GRANITE = "qwen3:32b", "deepseek-r1:32b", "granite3.3:2b"


@pytest.fixture(scope="module")
def items(data_folder: Path) -> list[DataQuestion]:  # noqa: F811
    return task_named("cladder-data").load(data_folder).questions  # type: ignore[return-value]


def test_the_task_is_read_from_json_or_a_json_object_in_text() -> None:
    good = (
        '{"causal_problem": ["CEL", "ATE"], "dataset": "employment.csv", "treatment": ["X"], '
        '"response": "Y", "edges": ["X->Y"]}'
    )
    assert read_task(good)[0] == {
        "causal_problem": ["CEL", "ATE"],
        "dataset": ["employment.csv"],  # a name alone reads as a list of one
        "nodes": [],
        "treatment": ["X"],
        "response": ["Y"],
        "mediator": [],
        "condition": [],
        "edges": ["X->Y"],
    }
    task, why = read_task(f"Here it is:\n```json\n{good}\n```")
    assert task is not None and why is None
    assert read_task("no idea") == (None, "the reply is not JSON")
    task, why = read_task('{"treatment": ["X"]}')
    assert task is None and why and "causal_problem" in why


def test_the_questions_own_task_scores_right_and_implies_the_perfect_answer(
    items: list[DataQuestion],
) -> None:
    agree = scored = 0
    for q in items:
        gold, names = gold_task(q.meta, q.data.table), q.meta["names"]
        for soft in (True, False):
            assert all(extraction_scores(gold, gold, names, soft=soft).values())
        named = {**gold, "treatment": [names["X"].upper()], "response": [f" {names['Y']} "]}
        assert all(extraction_scores(named, gold, names).values())  # story names count too
        assert not extraction_scores({**gold, "response": ["V2"]}, gold, names)["response"]
        query = gold_query(q.meta)
        assert call_for(query, names) in [call_for(x, names) for x in queries(gold, names)]
        name, arguments = call_for(query, names)
        result = data_tools.compute(q.table, data_tools.parse_call(name, arguments))
        answer = implied_answer(query, result, q.meta, names)
        if q.query_type in ("backadj", "collider_bias", "det-counterfactual"):
            assert answer is None
            continue
        scored += 1
        agree += answer == q.data.perfect_answer
    # The tools count the table directly; the perfect estimator fits the graph's factorization,
    # so a few sparse strata (or a collider's marginal independence) can tip the answer.
    assert scored >= 20 and agree >= 0.85 * scored


async def pipeline_run(
    items: list[DataQuestion], out: Path, n: int, kind: str = "ollama", **fake: Any
) -> tuple[Any, list[DebateRecord]]:
    task = task_named("cladder-data")
    models = models_for(
        [QWEN, R1], GRANITE, answer_key(items, task), data_calls=data_calls(items, task)
    )
    for name in (QWEN, R1):
        for k, v in fake.items():
            setattr(models[name], k, v)
    dataset = Dataset(questions=items[:n], info=_info(items, n))  # type: ignore[arg-type]
    async with FakeServer(kind, models) as server:  # type: ignore[arg-type]
        cfg = RunConfig(
            task="cladder-data", prompt_set="data-tools", protocol={"kind": "pipeline"}, seed=2
        ).serve_all_from(server.url, kind)  # type: ignore[arg-type]
        cfg.retry.initial_wait = cfg.retry.max_wait = 0
        summary = await run(cfg, dataset, out, progress=False, simulated=True)
    return summary, RunStore(out).records()


@pytest.mark.parametrize("kind", ["ollama", "openai"])
async def test_three_steps_scored_apart(
    items: list[DataQuestion], tmp_path: Path, kind: str
) -> None:
    summary, records = await pipeline_run(items, tmp_path / "run", 16, kind)
    assert summary.done_total == 16 and summary.errored == 0
    for r in records:
        assert r.ok and r.protocol == "pipeline" and r.end == "steps"
        assert r.schema_version == SCHEMA_VERSION >= 4
        assert [t.role for t in r.turns] == ["task", "interpretation"] * 2
        assert {p.agent for p in r.pipeline} == {"qwen3", "deepseek-r1"}
        for p in r.pipeline:
            assert p.task is not None and all(p.extraction.values())  # the fakes know the task
            assert p.extraction["dataset"] and all(p.extraction_exact.values())
            assert p.call is not None and p.call.mode == "pipeline" and p.call.error is None
            assert p.tool_correct is True
            turn = next(t for t in r.turns if t.agent == p.agent and t.role == "interpretation")
            assert p.answer == turn.answer and turn.answer in ("yes", "no")
            if p.implied_answer is None:
                assert p.interpretation_correct is None
            else:
                assert p.interpretation_correct == (p.answer == p.implied_answer)
        assert r.final_answer in ("yes", "no", None)
        assert "perfect_answer" in r.item
    interpreted = [p for r in records for p in r.pipeline if p.interpretation_correct is not None]
    assert interpreted  # ate, correlation, marginal... in 16 questions


async def test_a_wrong_task_is_caught_where_it_goes_wrong(
    items: list[DataQuestion], tmp_path: Path
) -> None:
    _, records = await pipeline_run(items, tmp_path / "run", 12, task_errors=1.0)
    runs = [p for r in records for p in r.pipeline]
    assert runs and all(p.task is not None for p in runs)
    assert all(p.extraction["causal_problem"] is False for p in runs)
    # The tool ran (or named what it could not do), and its result is mostly not the
    # question's: a wrong task type can still compute the same number (ETT is the ATE when
    # nothing confounds the treatment), and the result is what is scored at step 2.
    assert all(p.call is not None for p in runs)
    scored = [p for p in runs if p.implied_answer is not None]
    assert scored and sum(p.tool_correct is True for p in scored) <= len(scored) / 4
    assert all(p.interpretation_correct is None for p in runs if not p.tool_correct)


async def test_a_pipeline_run_resumes(items: list[DataQuestion], tmp_path: Path) -> None:
    out = tmp_path / "run"
    await pipeline_run(items, out, 5)
    summary, records = await pipeline_run(items, out, 9)
    assert summary.already_done == 5 and summary.done_total == 9
    assert len(records) == 9 and len({r.question_id for r in records}) == 9


def test_bad_pipeline_setups_are_refused_before_any_request() -> None:
    with pytest.raises(ConfigError, match="data-tools"):
        build_setup(RunConfig(task="cladder-data", protocol={"kind": "pipeline"}))
    with pytest.raises(ConfigError, match='task = "cladder-data"'):
        build_setup(RunConfig(prompt_set="data-tools", protocol={"kind": "pipeline"}))
    with pytest.raises((ConfigError, CrawdadError, ValueError), match="no tools"):
        RunConfig(
            task="cladder-data",
            protocol={"kind": "pipeline"},
            agents=[{"name": "a", "model": "m", "tools": ["data"]}],
        )
    one = RunConfig(protocol={"kind": "pipeline"}, agents=[{"name": "a", "model": "m"}])
    assert len(one.agents) == 1  # one agent is enough
