"""Every ready config in configs/ runs end to end on the fake servers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from crawdad.config import RunConfig, SelectionConfig, load_config
from crawdad.data.demo_questions import EXAMPLES
from crawdad.data.questions import load_cladder
from crawdad.demo import answer_key, with_sampled_models
from crawdad.fake import AnswerKey, FakeModel, FakeServer, models_for
from crawdad.run.runner import run
from crawdad.run.store import RunStore
from crawdad.tasks import task_named
from tests.test_data_task import data_folder  # noqa: F401  (data-backed configs' questions)

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
READY = sorted(p for p in CONFIGS.rglob("*.toml") if "experiments" not in p.parts)


def models_of(cfg: RunConfig, key: AnswerKey, calls: Any = None) -> dict[str, FakeModel]:
    return models_for(
        cfg.model_names(),
        cfg.extractor.model,
        key,
        tool_models=cfg.tool_model_names(),
        data_calls=calls,
    )


def dataset_of(
    cfg: RunConfig, tiny_cladder: Path, request: Any, graphs: int = 1, key: AnswerKey | None = None
) -> tuple[Any, AnswerKey, Any]:
    """The questions a config runs on (six, or `graphs` of crawdad's example graphs for
    discovery), its fakes' answer key (added to `key`) and, for questions answered from data,
    what the fake data agents know."""
    key = key if key is not None else AnswerKey()
    task = task_named(cfg.task)
    if cfg.task == "cladder":
        dataset = load_cladder(tiny_cladder)
        return dataset, answer_key(dataset.questions, None, key), None
    if not cfg.task.startswith("cladder-data"):  # discovery (the tiny models have no variables)
        dataset = task.select(task.load(EXAMPLES), SelectionConfig(limit=graphs), 0)
        if task.answers is None:  # data to run algorithms on (the examples have no tables)
            dataset = with_sampled_models(dataset, 0)
        return dataset, answer_key(dataset.questions, task, key), None
    from crawdad.data.questions import select
    from crawdad.demo import data_calls

    folder = request.getfixturevalue("data_folder")
    dataset = select(task.load(folder), SelectionConfig(limit=6), 0)
    return dataset, answer_key(dataset.questions, task, key), data_calls(dataset.questions, task)


@pytest.mark.parametrize("path", READY, ids=lambda p: str(p.relative_to(CONFIGS)))
async def test_ready_config_runs_on_the_fakes(path: Path, tiny_cladder: Path, request) -> None:
    cfg = load_config(path)
    dataset, key, calls = dataset_of(cfg, tiny_cladder, request, graphs=1)
    backend = cfg.agents[0].backend
    async with FakeServer(backend, models_of(cfg, key, calls)) as server:  # type: ignore[arg-type]
        cfg = cfg.serve_all_from(server.url, backend)
        cfg.concurrency = min(cfg.concurrency, 8)
        cfg.retry.initial_wait = cfg.retry.max_wait = 0
        summary = await run(cfg, dataset, Path("out"), progress=False, simulated=True)
    items = 1 if cfg.task == "discovery-graph" else 6
    assert summary.done_total == len(dataset.questions) == items and summary.errored == 0
    records = RunStore(Path("out")).records()
    assert {r.protocol for r in records} == {cfg.protocol.kind}
    assert {r.prompt_set for r in records} == {cfg.prompt_set}
    assert all(r.final_answer is not None or r.tie or not r.turns[-1].answer for r in records)
    if cfg.protocol.kind == "solo":
        assert all(len(r.turns) == cfg.protocol.samples * len(cfg.agents) for r in records)
    if cfg.prompt_set == "no-confidence":  # none asked for, none read
        assert all(t.confidence is None for r in records for t in r.turns)
        assert all(t.answer is not None for r in records for t in r.turns)
    if cfg.tool_model_names():  # the tool was called, and the report says how often
        assert any(t.tool_calls for r in records for t in r.turns)
        from crawdad.analysis.report import write_report

        report = write_report([Path("out")], Path("report"), workers=1).read_text()
        data = cfg.task.startswith("cladder-data")
        assert f"### Tool use ({'data tools' if data else 'causal calculator'})" in report
    if cfg.task.startswith("cladder-data"):  # scored against the label and the perfect answer
        assert all("perfect_answer" in r.item for r in records)
        from crawdad.analysis.report import write_report

        report = write_report([Path("out")], Path("report"), workers=1).read_text()
        assert "## Questions answered from data" in report
        if cfg.protocol.kind == "pipeline":
            assert all(len(r.pipeline) == len(cfg.agents) for r in records)
            assert "step 1: causal entity extraction" in report and "Win Rate" in report
    if not cfg.agents[0].think:  # the standard-LLM ablation sends thinking off
        assert all(not t.thinking for r in records for t in r.turns)


EXPERIMENTS = sorted((CONFIGS / "experiments").glob("*.toml"))


@pytest.mark.parametrize("path", EXPERIMENTS, ids=lambda p: p.name)
async def test_ready_experiment_runs_on_the_fakes(path: Path, tiny_cladder: Path, request) -> None:
    from crawdad.run.experiment import (
        experiment_manifest,
        load_experiment,
        run_experiment,
        variant_configs,
    )

    spec, sha = load_experiment(path)
    configs = variant_configs(spec, str(path))
    first = next(iter(configs.values()))
    task = task_named(first.task)
    datasets, key, calls = {}, AnswerKey(), None
    for name, cfg in configs.items():  # MAC's experiment holds variants of two tasks
        datasets[name], key, own = dataset_of(cfg, tiny_cladder, request, graphs=2, key=key)
        calls = calls or own
    models: dict[str, FakeModel] = {}
    for cfg in configs.values():
        models |= models_of(cfg, key, calls)
    async with FakeServer("ollama", models) as server:
        for cfg in configs.values():
            cfg.serve_all_from(server.url)
            cfg.retry.initial_wait = cfg.retry.max_wait = 0
        manifest = experiment_manifest(spec, str(path), sha, list(configs))
        summaries = await run_experiment(
            configs, manifest, datasets, Path("exp"), progress=False, simulated=True
        )
        sent = [r for r in server.requests if r["model"] != "granite3.3:2b"]
    assert [s.done_total for s in summaries] == [len(d.questions) for d in datasets.values()]
    assert all(s.errored == 0 for s in summaries)
    records = [r for name in configs for r in RunStore(Path("exp") / name).records()]
    # Some turns were answered from the store (another variant had made the same request)...
    assert any(t.shared for r in records for t in r.turns)
    # ... and no answered request reached the server twice (a request the server refused, as
    # Ollama refuses native tools for the R1 distills, is asked again by each variant).
    answered = [
        b for b in sent if "messages" in b and not ("tools" in b and "deepseek" in b["model"])
    ]
    keys = [
        json.dumps({k: v for k, v in b.items() if k != "stream"}, sort_keys=True) for b in answered
    ]
    assert len(keys) == len(set(keys))
    from crawdad.analysis.report import write_report

    report = write_report([Path("exp")], Path("exp-report"), workers=1).read_text()
    assert "self-consistency" in report.lower() and all(name in report for name in configs)
    if task.name.startswith("discovery"):  # the graphs are assembled and scored per variant
        assert "## Causal discovery" in report
    if first.task.startswith("cladder-data"):
        assert "## Questions answered from data" in report
        assert "step 1: causal entity extraction" in report and "Win Rate" in report
