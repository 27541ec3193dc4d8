"""Every ready config in configs/ runs end to end on the fake servers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crawdad.config import RunConfig, SelectionConfig, load_config
from crawdad.data.demo_questions import EXAMPLES
from crawdad.data.questions import load_cladder
from crawdad.demo import answer_key, with_sampled_models
from crawdad.fake import AnswerKey, FakeModel, FakeServer, models_for
from crawdad.run.runner import run
from crawdad.run.store import RunStore
from crawdad.tasks import task_named

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
READY = sorted(p for p in CONFIGS.rglob("*.toml") if "experiments" not in p.parts)


def models_of(cfg: RunConfig, key: AnswerKey) -> dict[str, FakeModel]:
    return models_for(
        cfg.model_names(), cfg.extractor.model, key, tool_models=cfg.tool_model_names()
    )


@pytest.mark.parametrize("path", READY, ids=lambda p: str(p.relative_to(CONFIGS)))
async def test_ready_config_runs_on_the_fakes(path: Path, tiny_cladder: Path) -> None:
    cfg = load_config(path)
    task = task_named(cfg.task)
    dataset = load_cladder(tiny_cladder)
    if task.name != "cladder":  # discovery: one example graph (6 ordered pairs, or 1 graph)
        dataset = task.select(task.load(EXAMPLES), SelectionConfig(limit=1), 0)
        if task.answers is None:  # data to run algorithms on (the examples have no tables)
            dataset = with_sampled_models(dataset, 0)
    backend = cfg.agents[0].backend
    key = answer_key(dataset.questions, task)
    async with FakeServer(backend, models_of(cfg, key)) as server:  # type: ignore[arg-type]
        cfg = cfg.serve_all_from(server.url, backend)
        cfg.concurrency = min(cfg.concurrency, 8)
        cfg.retry.initial_wait = cfg.retry.max_wait = 0
        summary = await run(cfg, dataset, Path("out"), progress=False, simulated=True)
    items = 1 if task.name == "discovery-graph" else 6
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
    if cfg.tool_model_names():  # the calculator was called, and the report says how often
        assert any(t.tool_calls for r in records for t in r.turns)
        from analysis.report import write_report

        report = write_report([Path("out")], Path("report"), workers=1).read_text()
        assert "### Tool use (causal calculator)" in report
    if not cfg.agents[0].think:  # the standard-LLM ablation sends thinking off
        assert all(not t.thinking for r in records for t in r.turns)


EXPERIMENTS = sorted((CONFIGS / "experiments").glob("*.toml"))


@pytest.mark.parametrize("path", EXPERIMENTS, ids=lambda p: p.name)
async def test_ready_experiment_runs_on_the_fakes(path: Path, tiny_cladder: Path) -> None:
    from crawdad.run.experiment import (
        experiment_manifest,
        load_experiment,
        run_experiment,
        variant_configs,
    )

    spec, sha = load_experiment(path)
    configs = variant_configs(spec, str(path))
    task = task_named(next(iter(configs.values())).task)
    datasets, key = {}, AnswerKey()
    for name, cfg in configs.items():  # MAC's experiment holds variants of two tasks
        own = task_named(cfg.task)
        if own.name == "cladder":
            datasets[name] = load_cladder(tiny_cladder)
        else:  # discovery: two of crawdad's example graphs (the tiny models have no variables)
            datasets[name] = own.select(own.load(EXAMPLES), SelectionConfig(limit=2), 0)
            if own.answers is None:  # data to run algorithms on
                datasets[name] = with_sampled_models(datasets[name], 0)
        answer_key(datasets[name].questions, own, key)
    models: dict[str, FakeModel] = {}
    for cfg in configs.values():
        models |= models_of(cfg, key)
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
    from analysis.report import write_report

    report = write_report([Path("exp")], Path("exp-report"), workers=1).read_text()
    assert "self-consistency" in report.lower() and all(name in report for name in configs)
    if task.name != "cladder":  # the graphs are assembled and scored per variant
        assert "## Causal discovery" in report
