"""Every ready config in configs/ runs end to end on the fake servers."""

from __future__ import annotations

from pathlib import Path

import pytest

from crawdad.config import RunConfig, load_config
from crawdad.data import load_cladder
from crawdad.demo import answer_key
from crawdad.fake import FakeExtractor, FakeServer, ProfileModel
from crawdad.runner import run
from crawdad.store import RunStore

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
READY = sorted(p for p in CONFIGS.rglob("*.toml") if "experiments" not in p.parts)


def models_of(cfg: RunConfig, key) -> dict:  # type: ignore[no-untyped-def]
    debaters = [a.model for a in cfg.agents] + ([cfg.judge.model] if cfg.judge else [])
    models = {m: ProfileModel(key, "deepseek-r1" if "deepseek" in m else "qwen3") for m in debaters}
    return models | {cfg.extractor.model: FakeExtractor()}


@pytest.mark.parametrize("path", READY, ids=lambda p: str(p.relative_to(CONFIGS)))
async def test_ready_config_runs_on_the_fakes(path: Path, tiny_cladder: Path) -> None:
    cfg = load_config(path)
    dataset = load_cladder(tiny_cladder)
    backend = cfg.agents[0].backend
    async with FakeServer(backend, models_of(cfg, answer_key(dataset.questions))) as server:  # type: ignore[arg-type]
        cfg = cfg.serve_all_from(server.url, backend)
        cfg.concurrency = min(cfg.concurrency, 8)
        cfg.retry.initial_wait = cfg.retry.max_wait = 0
        summary = await run(cfg, dataset, Path("out"), progress=False, simulated=True)
    assert summary.done_total == len(dataset.questions) == 6 and summary.errored == 0
    records = RunStore(Path("out")).records()
    assert {r.protocol for r in records} == {cfg.protocol.kind}
    assert {r.prompt_set for r in records} == {cfg.prompt_set}
    assert all(r.final_answer is not None or r.tie or not r.turns[-1].answer for r in records)
    if cfg.protocol.kind == "solo":
        assert all(len(r.turns) == cfg.protocol.samples * len(cfg.agents) for r in records)
    if cfg.prompt_set == "no-confidence":  # none asked for, none read
        assert all(t.confidence is None for r in records for t in r.turns)
        assert all(t.answer is not None for r in records for t in r.turns)
    if not cfg.agents[0].think:  # the standard-LLM ablation sends thinking off
        assert all(not t.thinking for r in records for t in r.turns)
