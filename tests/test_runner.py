"""Whole runs against the fake servers: faults, loops, servers down, secrets, resume."""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from pathlib import Path

import pytest

from crawdad.config import RunConfig
from crawdad.data.demo_questions import write_cladder
from crawdad.data.questions import Dataset, load_cladder
from crawdad.demo import answer_key
from crawdad.errors import CrawdadError
from crawdad.fake import FakeReply, FakeServer, FaultPlan, LatencyModel, ScriptedModel, paper_models
from crawdad.prompts import load_prompts
from crawdad.run.runner import run
from crawdad.run.store import read_jsonl_ids


def dataset(tmp_path: Path, n: int) -> Dataset:
    return load_cladder(write_cladder(tmp_path / "data", n))


def config(url: str, backend: str = "ollama", **top) -> RunConfig:
    cfg = RunConfig(**top).serve_all_from(url, backend)  # type: ignore[arg-type]
    cfg.retry.initial_wait = cfg.retry.max_wait = 0
    return cfg


def lines(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "debates.jsonl").read_text().splitlines()]


async def test_run_writes_complete_records_and_resume_skips_them(tmp_path: Path) -> None:
    ds = dataset(tmp_path, 30)
    async with FakeServer("ollama", paper_models(answer_key(ds.questions))) as server:
        out = tmp_path / "run"
        summary = await run(
            config(server.url, concurrency=8), ds, out, progress=False, simulated=True
        )
        assert (summary.finished, summary.errored, summary.done_total) == (30, 0, 30)
        again = await run(
            config(server.url, concurrency=8), ds, out, progress=False, simulated=True
        )
        assert again.finished == 0 and again.already_done == 30
    records = lines(out)
    assert sorted(r["question_id"] for r in records) == list(range(30))
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["simulated"] and manifest["dataset"]["n_selected"] == 30
    assert manifest["servers"] == {server.url: "0.12.6"}
    # Every template of the prompt set, and the set's own small parts, by version.
    assert manifest["prompts"] == load_prompts("paper").versions()
    assert {"initial", "critique", "defence", "history_entry", "extractor", "set"} <= set(
        manifest["prompts"]
    )
    for r in records:
        assert r["simulated"] and r["error"] is None and r["gold"] in ("yes", "no")
        assert r["alignment"] in ("commonsense", "anticommonsense", "nonsense") and r["rung"] in (
            1,
            2,
            3,
        )
        assert 1 <= len(r["turns"]) <= 4
        for t in r["turns"]:
            for key in (
                "thinking",
                "text",
                "answer",
                "confidence",
                "extraction",
                "prompt_tokens",
                "completion_tokens",
                "seconds",
                "stop_reason",
            ):
                assert key in t
            assert t["thinking"] and t["text"] and t["completion_tokens"] > 0


async def test_resume_does_not_resend_finished_debates(tmp_path: Path) -> None:
    ds = dataset(tmp_path, 12)
    async with FakeServer("ollama", paper_models(answer_key(ds.questions))) as server:
        out = tmp_path / "run"
        await run(config(server.url), ds, out, progress=False)
        sent = len(server.calls)
        await run(config(server.url), ds, out, progress=False)
        assert len(server.calls) == sent  # nothing re-run
    assert sorted(read_jsonl_ids(out / "debates.jsonl")) == sorted(str(i) for i in range(12))


async def test_ten_percent_mixed_faults_then_resume_finishes(tmp_path: Path) -> None:
    ds = dataset(tmp_path, 200)
    faults = FaultPlan(rate=0.1, kinds=["http_500", "http_503", "reset", "hang", "cut"], seed=3)
    models = paper_models(answer_key(ds.questions))
    out = tmp_path / "run"
    async with FakeServer(
        "ollama", models, faults=faults, latency=LatencyModel(capacity=64)
    ) as server:
        cfg = config(server.url, concurrency=64)
        cfg.retry.attempts = 2
        for spec in [*cfg.agents, cfg.extractor]:
            spec.timeout = 0.5  # a hung request is given up after half a second
        first = await run(cfg, ds, out, progress=False)
        assert server.stats.faults  # faults really happened
    assert first.finished + first.errored == 200
    assert first.errored > 0  # with only two attempts some debates fail...
    records = lines(out)
    errored = [r for r in records if r["error"]]
    assert len(errored) == first.errored
    assert all(r["final_answer"] is None for r in errored)  # ...and no answer is made up for them
    assert all(r["end"] == "error" for r in errored)
    async with FakeServer("ollama", models, latency=LatencyModel(capacity=64)) as server:
        second = await run(config(server.url, concurrency=64), ds, out, progress=False)
    assert second.finished == first.errored and second.errored == 0 and second.done_total == 200


async def test_retries_recover_from_faults(tmp_path: Path) -> None:
    ds = dataset(tmp_path, 40)
    faults = FaultPlan(rate=0.2, kinds=["http_500", "http_503", "reset", "cut"], seed=1)
    async with FakeServer(
        "ollama", paper_models(answer_key(ds.questions)), faults=faults
    ) as server:
        summary = await run(
            config(server.url, concurrency=16), ds, tmp_path / "run", progress=False
        )
        assert sum(server.stats.faults.values()) > 5
    assert summary.errored == 0 and summary.finished == 40
    retried = [t for r in lines(tmp_path / "run") for t in r["turns"] if t["attempts"] > 1]
    assert retried


async def test_looping_model_is_stopped_and_the_run_goes_on(tmp_path: Path) -> None:
    ds = dataset(tmp_path, 6)
    models = paper_models(answer_key(ds.questions))
    looping = paper_models(answer_key(ds.questions), loop_rate=1.0)["deepseek-r1:32b"]
    models["deepseek-r1:32b"] = looping
    # Streamed at 10,000 tokens/s: the 200,000-token budget would take 20 s per turn.
    async with FakeServer(
        "ollama", models, latency=LatencyModel(per_token_seconds=0.0001, capacity=8)
    ) as server:
        cfg = config(server.url)
        cfg.agents[1].max_tokens = 200_000  # a budget it would take long to exhaust
        summary = await run(cfg, ds, tmp_path / "run", progress=False)
        looped = [c for c in server.calls if c.model == "deepseek-r1:32b"]
        assert looped and all(c.disconnected for c in looped)  # stopped before the server finished
    assert summary.errored == 0 and summary.finished == 6
    turns = [t for r in lines(tmp_path / "run") for t in r["turns"] if t["agent"] == "deepseek-r1"]
    assert turns and all(t["stop_reason"] == "loop" for t in turns)
    assert all(t["answer"] is None and "loop" in t["extraction"]["reason"] for t in turns)


async def test_runaway_can_fail_the_debate_instead(tmp_path: Path) -> None:
    ds = dataset(tmp_path, 2)
    script = [FakeReply(thinking="x" * 50, text="", done_reason="length")] * 8
    models = {
        "qwen3:32b": ScriptedModel(script),
        "deepseek-r1:32b": ScriptedModel(script),
        **{k: v for k, v in paper_models().items() if k == "granite3.3:2b"},
    }
    async with FakeServer("ollama", models) as server:
        cfg = config(server.url)
        cfg.protocol.on_runaway = "error"
        summary = await run(cfg, ds, tmp_path / "run", progress=False)
    assert summary.errored == 2
    assert all("stopped: length" in r["error"] for r in lines(tmp_path / "run"))


async def test_length_capped_turn_is_unextracted_by_default(tmp_path: Path) -> None:
    ds = dataset(tmp_path, 1)
    cut = FakeReply(thinking="thinking until the budget ran out", text="", done_reason="length")
    ok = FakeReply(thinking="t", text="Answer: yes (Confidence: 0.9)")
    models = {
        "qwen3:32b": ScriptedModel([cut, ok, cut, ok]),
        "deepseek-r1:32b": ScriptedModel([cut, ok, cut, ok]),
        "granite3.3:2b": paper_models()["granite3.3:2b"],
    }
    async with FakeServer("ollama", models) as server:
        await run(config(server.url), ds, tmp_path / "run", progress=False)
    (record,) = lines(tmp_path / "run")
    assert record["turns"][0]["stop_reason"] == "length" and record["turns"][0]["answer"] is None
    assert "length" in record["turns"][0]["extraction"]["reason"]
    assert record["error"] is None


async def test_server_down_at_start_names_url_and_fix(tmp_path: Path) -> None:
    ds = dataset(tmp_path, 2)
    async with FakeServer("ollama", {}) as server:
        url = server.url
    with pytest.raises(CrawdadError, match=rf"(?s)nothing answers at {url}.*ollama serve"):
        await run(config(url), ds, tmp_path / "run", progress=False)
    assert not (tmp_path / "run" / "debates.jsonl").exists()


async def test_server_that_stays_down_stops_the_run_and_keeps_what_finished(
    tmp_path: Path,
) -> None:
    """The server dies mid-run and stays down: after a streak of debates that failed to reach
    it the run stops starting new ones (instead of writing an error line for every question
    left), says what to fix, and the debates finished before are kept for the resume."""
    ds = dataset(tmp_path, 60)
    out = tmp_path / "run"
    async with FakeServer("ollama", paper_models(answer_key(ds.questions))) as server:
        url = server.url
        cfg = config(url, concurrency=2)
        cfg.retry.attempts, cfg.retry.down_wait = 1, 0.01
        kept = ds.questions[:6]
        await run(cfg, replace(ds, questions=kept), out, progress=False, simulated=True)
    with pytest.raises(CrawdadError, match=rf"(?s)stopped: the last 8 debates .*{url}.*resume"):
        await run(cfg, ds, out, progress=False, simulated=True, check_servers=False)
    records = lines(out)
    assert [r["question_id"] for r in records[:6]] == list(range(6))
    assert all(r["error"] is None for r in records[:6])
    failed = records[6:]
    assert 8 <= len(failed) < 54  # stopped well before the end
    assert {r["error_kind"] for r in failed} == {"ServerUnavailable"}


async def test_missing_model_names_the_pull_command(tmp_path: Path) -> None:
    ds = dataset(tmp_path, 2)
    models = paper_models()
    del models["deepseek-r1:32b"]
    async with FakeServer("ollama", models) as server:
        with pytest.raises(
            CrawdadError,
            match=r"(?s)model 'deepseek-r1:32b' is not on .*fix: ollama pull deepseek-r1:32b",
        ):
            await run(config(server.url), ds, tmp_path / "run", progress=False)


async def test_missing_model_on_vllm_names_the_serve_command(tmp_path: Path) -> None:
    ds = dataset(tmp_path, 2)
    models = paper_models()
    del models["qwen3:32b"]
    async with FakeServer("openai", models) as server:
        with pytest.raises(
            CrawdadError,
            match=r"(?s)vllm serve Qwen/Qwen3-32B --served-model-name qwen3:32b .*--reasoning-parser qwen3",
        ):
            await run(config(server.url, "openai"), ds, tmp_path / "run", progress=False)


async def test_api_key_never_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    ds = dataset(tmp_path, 4)
    key = "sk-test-very-secret-4242"
    monkeypatch.setenv("VLLM_KEY", key)
    caplog.set_level(logging.DEBUG)
    async with FakeServer("openai", paper_models(answer_key(ds.questions)), api_key=key) as server:
        cfg = config(server.url, "openai")
        cfg.agents[0].api_key_env = "VLLM_KEY"
        cfg.agents[1].api_key = key  # type: ignore[assignment]
        cfg.extractor.api_key_env = "VLLM_KEY"
        summary = await run(cfg, ds, tmp_path / "run", progress=False)
    assert summary.finished == 4
    for path in (tmp_path / "run").iterdir():
        if path.is_file():
            assert key not in path.read_text(errors="ignore"), path
    assert key not in caplog.text


async def test_wrong_api_key_is_a_clear_error(tmp_path: Path) -> None:
    ds = dataset(tmp_path, 1)
    async with FakeServer(
        "openai", paper_models(answer_key(ds.questions)), api_key="right"
    ) as server:
        cfg = config(server.url, "openai")
        with pytest.raises(CrawdadError, match="refused the API key"):
            await run(cfg, ds, tmp_path / "run", progress=False)


async def test_different_settings_refused_on_resume(tmp_path: Path) -> None:
    ds = dataset(tmp_path, 3)
    async with FakeServer("ollama", paper_models(answer_key(ds.questions))) as server:
        await run(config(server.url), ds, tmp_path / "run", progress=False)
        cfg = config(server.url)
        cfg.agents[0].temperature = 0.0
        with pytest.raises(CrawdadError, match=r"config.agents\[0\].temperature: 0.6 -> 0.0"):
            await run(cfg, ds, tmp_path / "run", progress=False)
