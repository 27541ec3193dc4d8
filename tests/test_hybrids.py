"""MAC's hybrids (crawdad/tasks/discovery/prior.py, crawdad/run/priors.py), on the fakes: the
coding agents' graphs shown to the Meta Agents and to whole-graph debaters (Coding-Debating),
the Meta Agents' assembled graphs shown to the coding agents (Debating-Coding); a prior folder
that lacks a graph, or is not a discovery run, is refused before any debate."""

from __future__ import annotations

from pathlib import Path

import pytest

from crawdad.causal.edge_text import format_edges, parse_edges
from crawdad.config import RunConfig, SelectionConfig, load_config
from crawdad.data.demo_questions import EXAMPLES
from crawdad.demo import answer_key, with_sampled_models
from crawdad.errors import ConfigError
from crawdad.fake import AnswerKey, FakeServer, models_for
from crawdad.run.runner import run
from crawdad.run.store import RunStore
from crawdad.tasks import task_named
from crawdad.tasks.discovery.prior import HEADING

CONFIGS = Path(__file__).resolve().parents[1] / "configs" / "discovery"


def dataset(task_name: str, n: int = 2):  # type: ignore[no-untyped-def]
    task = task_named(task_name)
    chosen = task.select(task.load(EXAMPLES), SelectionConfig(limit=n), 0)
    return with_sampled_models(chosen, 0) if task.answers is None else chosen


def fake_key(n: int = 2) -> AnswerKey:
    key = AnswerKey()
    for name in ("discovery-pairs", "discovery-graph"):
        answer_key(dataset(name, n).questions, task_named(name), key)
    return key


async def run_config(cfg: RunConfig, out: Path, n: int = 2) -> list:  # type: ignore[type-arg]
    data = dataset(cfg.task, n)
    models = models_for(cfg.model_names(), cfg.extractor.model, fake_key(n))
    async with FakeServer("ollama", models) as server:
        cfg = cfg.serve_all_from(server.url)
        cfg.retry.initial_wait = cfg.retry.max_wait = 0
        summary = await run(cfg, data, out, progress=False, simulated=True)
        prompts = [r["messages"][0]["content"] for r in server.requests if "messages" in r]
    assert summary.errored == 0 and summary.done_total == len(data.questions)
    return prompts


def with_prior(path: Path, folder: Path) -> RunConfig:
    cfg = load_config(path)
    cfg.protocol.prior_from = str(folder)
    return cfg


async def test_coding_debating_shows_the_coding_agents_graphs(tmp_path: Path) -> None:
    coding = tmp_path / "coding-agents"
    await run_config(load_config(CONFIGS / "coding-agents.toml"), coding)
    graphs = {r.item["graph"]: r.final_answer for r in RunStore(coding).records()}
    assert len(graphs) == 2 and all(graphs.values())

    # MAC's Coding-Debating hybrid: the Meta Agents (pairs, judge with stances) with the prior.
    meta = tmp_path / "coding-debating"
    prompts = await run_config(with_prior(CONFIGS / "meta-agents.toml", coding), meta)
    debater = [p for p in prompts if "Question: Is there a direct causal" in p]
    assert debater and all(f"{HEADING} (coding agents who chose" in p for p in debater)
    records = RunStore(meta).records()
    assert len(records) == 12  # 2 graphs of 3 variables, 6 ordered pairs each
    for r in records:
        assert r.item["prior"] == graphs[r.item["graph"]]
        assert r.item["prior_from"] == str(coding)
        has = (r.item["cause"], r.item["effect"]) in set(parse_edges(r.item["prior"]))
        line = f"there is {'a' if has else 'no'} direct causal relationship from {r.item['cause']}"
        assert any(line in p and r.item["prior"] in p for p in debater)

    # The same prior for whole-graph debaters.
    whole = tmp_path / "coding-whole-graph"
    prompts = await run_config(with_prior(CONFIGS / "whole-graph.toml", coding), whole)
    assert all(
        any(f"{HEADING} (coding agents" in p and graphs[r.item["graph"]] in p for p in prompts)
        for r in RunStore(whole).records()
    )

    from crawdad.analysis.report import write_report

    report = write_report([coding, meta, whole], tmp_path / "report", workers=1).read_text()
    section = report.split("## Causal discovery (MAC)")[1]
    assert "coding-debating" in section and "coding-whole-graph" in section
    summary = (tmp_path / "report" / "discovery" / "tables" / "summary.csv").read_text()
    assert "judge (stances) + prior" in summary and "crawdad + prior, whole graph" in summary


async def test_debating_coding_shows_the_meta_agents_graph_to_the_coding_agents(
    tmp_path: Path,
) -> None:
    meta = tmp_path / "meta-agents"
    await run_config(load_config(CONFIGS / "meta-agents.toml"), meta)
    assembled: dict[str, list[tuple[str, str]]] = {}
    for r in RunStore(meta).records():
        edges = assembled.setdefault(r.item["graph"], [])
        if r.final_answer == "yes":
            edges.append((r.item["cause"], r.item["effect"]))
    hybrid = tmp_path / "debating-coding"
    prompts = await run_config(with_prior(CONFIGS / "coding-agents.toml", meta), hybrid)
    records = RunStore(hybrid).records()
    assert len(records) == 2
    for r in records:
        expected = format_edges(assembled[r.item["graph"]])
        assert r.item["prior"] == expected
        assert r.item["prior_system"].startswith("a judge debate between qwen3:32b")
        assert any(f"{HEADING} (a judge debate" in p and expected in p for p in prompts)
        assert any(c.name == "run_algorithm" for t in r.turns for c in t.tool_calls)


async def test_a_prior_folder_without_the_graphs_is_refused_before_any_debate(
    tmp_path: Path,
) -> None:
    coding = tmp_path / "coding-one"
    await run_config(load_config(CONFIGS / "coding-agents.toml"), coding, n=1)
    with pytest.raises(ConfigError, match=r"has no graph for cladder-\d+: run that system on the"):
        await run_config(with_prior(CONFIGS / "whole-graph.toml", coding), tmp_path / "h", n=2)
    assert not RunStore(tmp_path / "h").records()
    with pytest.raises(ConfigError, match=r"protocol.prior_from: .* does not exist"):
        await run_config(
            with_prior(CONFIGS / "whole-graph.toml", tmp_path / "nowhere"), tmp_path / "x"
        )
    cladder_run = tmp_path / "cladder"
    cladder_run.mkdir()
    (cladder_run / "manifest.json").write_text(
        (coding / "manifest.json").read_text().replace('"discovery-graph"', '"cladder"')
    )
    with pytest.raises(ConfigError, match="is a run of the cladder task"):
        await run_config(with_prior(CONFIGS / "whole-graph.toml", cladder_run), tmp_path / "y")
    with pytest.raises(ConfigError, match="the cladder task has none"):
        from crawdad.run.runner import build_setup

        build_setup(RunConfig(protocol={"prior_from": str(coding)}))
