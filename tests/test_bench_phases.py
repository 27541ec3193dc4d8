"""`crawdad bench`'s phases against the fakes: each starts on an idle server (and would not without
the wait), the same-work ceiling matches crawdad when crawdad is not the limit; the advice on a
server its own metrics call saturated (the GPU run of issue 45)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from crawdad.bench import advise, run_bench
from crawdad.bench.advice import same_work_share
from crawdad.bench.meter import CrawdadResult, LoadResult, Window
from crawdad.config import RunConfig
from crawdad.data.demo_questions import write_cladder
from crawdad.data.questions import load_cladder
from crawdad.demo import answer_key
from crawdad.fake import FakeServer, LatencyModel, paper_models
from crawdad.run.server_series import ServerFigures


def llamacpp_like(ds, per_token: float, capacity: int = 64) -> FakeServer:
    """A fake llama-server: its /metrics and /slots, and a request that is not streamed goes on
    being generated after its client has gone."""
    return FakeServer(
        "openai",
        paper_models(answer_key(ds.questions)),
        latency=LatencyModel(base_seconds=0.02, per_token_seconds=per_token, capacity=capacity),
        metrics="llamacpp",
        finish_unstreamed=True,
    )


def unstreamed(url: str) -> RunConfig:
    cfg = RunConfig().serve_all_from(url, "openai")
    cfg.retry.initial_wait = cfg.retry.max_wait = 0
    for agent in cfg.agents:
        agent.stream = False
    return cfg


@pytest.mark.parametrize("wait", [True, False])
async def test_back_to_back_phases_start_on_an_idle_server(tmp_path: Path, wait: bool) -> None:
    ds = load_cladder(write_cladder(tmp_path / "data", 16))
    # ~850-token answers at 1 ms a token: each request outlives the 0.4 s window, so the first
    # phase is cut with requests in flight (drain 0), which the server goes on generating.
    async with llamacpp_like(ds, per_token=0.001) as server:
        result = await run_bench(
            unstreamed(server.url), ds, tmp_path / "b", parallel=[], concurrencies=[4, 6],
            seconds=0.4, drain=0.0, same_work=False, wait_idle=wait, progress=False,
            say=lambda _: None,
        )  # fmt: skip
        disconnects = server.stats.disconnects
    first, second = result.crawdad
    assert first.cut > 0 and disconnects > 0  # cut, with its connections closed
    (busy,) = second.at_start.values()  # what the server's /metrics said as the phase began
    if wait:
        assert busy == {"running": 0.0, "waiting": 0.0}
        assert result.final_idle
        assert "waited s" in "\n".join(bench_text(tmp_path))
    else:
        assert busy["running"] > 0  # still busy with the first phase's cut requests
        assert second.waited == 0.0


def bench_text(tmp_path: Path) -> list[str]:
    return (tmp_path / "b" / "bench.txt").read_text().splitlines()


async def test_the_same_work_ceiling_matches_crawdad_when_crawdad_is_not_the_limit(
    tmp_path: Path,
) -> None:
    ds = load_cladder(write_cladder(tmp_path / "data", 40))
    # Slots to spare and ~0.9 s a request: the server's time per request sets the pace, and
    # crawdad's CPU between requests is small beside it. The server runs in its own thread.
    with llamacpp_like(ds, per_token=0.001, capacity=256) as server:
        result = await run_bench(
            unstreamed(server.url), ds, tmp_path / "b", parallel=[], concurrencies=[8],
            seconds=3.0, progress=False, say=lambda _: None,
        )  # fmt: skip
    (run,) = result.crawdad
    assert run.same_work is not None and run.same_work.work == "same-work"
    assert run.work_window is not None and run.same_work.parallel >= run.work_window.in_flight
    # The same requests, once each; their prompts tagged (`loadgen.unseen`), so that the answers
    # differ as another seed's would: the rates compare, not the token counts.
    assert run.same_work.sent == run.work_window.requests > 10
    assert run.same_work.tokens == pytest.approx(run.work_window.tokens, rel=0.25)
    # Near 1 (benchmarks/bench_same_work.py measures it within 0.1 on longer windows; here the
    # server shares crawdad's process and CPU, so the band is wider).
    share = same_work_share(run)
    assert share == pytest.approx(1.0, abs=0.25)
    assert f"{share:.2f}" in "\n".join(bench_text(tmp_path))


# --- the advice on the servers' own metrics -------------------------------------------------------


def gpu_run_of_issue_45() -> tuple[list[LoadResult], list[CrawdadResult]]:
    """The H100 run of issue 45, in the bench's figures: a sweep that rose to 3,103 tok/s at
    P=256; crawdad at concurrency 256 with 0.68 of that, 0.1 of a core busy, while llama-server
    had requests waiting in 97% of the samples and 64 running (its slots)."""
    sweep = [
        LoadResult(p, Window(30, tps * 30, 1, p), 1, 1, 0, 1, 1, 30, 0.1)
        for p, tps in ((64, 2038.0), (128, 2700.0), (256, 3103.0))
    ]
    run = CrawdadResult(
        concurrency=256,
        window=Window(30, 2110 * 30, 300, 180.0),
        sent=300, answered=300, failed=0, tokens=63300, seconds=30, cpu_seconds=3.0,
        debates=40, cut=0, finished_all=False, folder="f",
        servers=[ServerFigures("http://gpu:8080/v1", "llamacpp", 60, 63.8, 0.97, 0.4, 0.0)],
    )  # fmt: skip
    return sweep, [run]


def test_advice_names_the_server_when_its_metrics_say_it_was_saturated() -> None:
    cfg = RunConfig().serve_all_from("http://gpu:8080/v1", "openai")
    cfg.concurrency = 256
    sweep, runs = gpu_run_of_issue_45()
    advice = advise(cfg, sweep, runs)
    assert advice.bottleneck == "server"
    assert "model server is the bottleneck" in advice.verdict
    assert "requests waiting in 97% of the samples" in advice.verdict
    assert "llama.cpp server at http://gpu:8080/v1" in advice.verdict
    words = " ".join([advice.verdict, *advice.suggestions])
    assert "neither is saturated" not in words and "structure" not in words
    # No more concurrency, and no cap above what the server ran at once.
    assert advice.concurrency is not None and advice.concurrency <= 256
    assert advice.max_in_flight is not None and advice.max_in_flight <= 64
    assert "keep concurrency = 256 or less" in words and "Use concurrency" not in words
    assert all(int(n) <= 256 for n in re.findall(r"concurrency (?:= |to )?(\d+)", words))
    assert all(int(n) <= 64 for n in re.findall(r"max_in_flight (?:= |to )?(\d+)", words))
    # A KV cache full most of the time is saturation too.
    runs[0].servers = [ServerFigures("http://gpu:8000/v1", "vllm", 60, 40.0, 0.2, 1.0, 0.8)]
    full = advise(cfg, sweep, runs)
    assert full.bottleneck == "server" and "KV cache full in 80%" in full.verdict
