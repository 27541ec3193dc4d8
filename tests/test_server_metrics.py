"""The servers' own metrics: parsed from their real formats, served by the fakes as the fake's
load goes, sampled into servers.jsonl during a run, and told in the report and the summary."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

import aiohttp
import pytest

from crawdad.backends.server_metrics import (
    MetricsReader,
    NoMetrics,
    Reading,
    parse_prometheus,
    parse_ps,
    parse_slots,
    server_root,
)
from crawdad.config import RunConfig
from crawdad.data.demo_questions import write_cladder
from crawdad.data.questions import Dataset, load_cladder
from crawdad.demo import answer_key
from crawdad.fake import FakeServer, LatencyModel, paper_models
from crawdad.run.runner import run
from crawdad.run.server_series import SERIES, SeriesFile, read_series, verdict

# vLLM 0.11 (V1 engine), as prometheus_client writes it: counters end in _total, with _created.
VLLM_V1 = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="qwen3"} 3.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="qwen3"} 5.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="qwen3"} 0.42
# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="qwen3"} 1000.0
# HELP vllm:prefix_cache_queries_created Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_created gauge
vllm:prefix_cache_queries_created{engine="0",model_name="qwen3"} 1.7e+09
# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="qwen3"} 600.0
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="qwen3"} 1000.0
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="qwen3"} 250.0
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.001",model_name="qwen3"} 0.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="qwen3"} 9.0
# HELP vllm:some_future_gauge A metric crawdad does not know.
# TYPE vllm:some_future_gauge gauge
vllm:some_future_gauge{engine="0",model_name="qwen3"} 7.0
# HELP python_gc_objects_collected_total Objects collected during gc
# TYPE python_gc_objects_collected_total counter
python_gc_objects_collected_total{generation="0"} 13.0
"""

# vLLM 0.6 (V0 engine): the old names, a hit-rate gauge, two engines' worth of label sets.
VLLM_OLD = """\
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m"} 2.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="m"} 0.0
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="m"} 0.9
# TYPE vllm:gpu_prefix_cache_hit_rate gauge
vllm:gpu_prefix_cache_hit_rate{model_name="m"} 0.25
"""

SGLANG = """\
# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="qwen"} 12.0
# HELP sglang:num_queue_reqs The number of requests in the waiting queue.
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{model_name="qwen"} 4.0
# HELP sglang:token_usage The token usage.
# TYPE sglang:token_usage gauge
sglang:token_usage{model_name="qwen"} 0.83
# HELP sglang:cache_hit_rate The prefix cache hit rate.
# TYPE sglang:cache_hit_rate gauge
sglang:cache_hit_rate{model_name="qwen"} 0.61
# HELP sglang:generation_tokens_total Number of generation tokens processed.
# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{model_name="qwen"} 4096.0
"""

LLAMACPP = """\
# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 512
# HELP llamacpp:tokens_predicted_total Number of generation tokens processed.
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total 128
# HELP llamacpp:requests_processing Number of requests processing.
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 1
# HELP llamacpp:requests_deferred Number of requests deferred.
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 0
"""


def test_vllm_v1_page_is_read_by_name_and_unknown_metrics_are_left_out() -> None:
    r = parse_prometheus(VLLM_V1)
    assert r is not None and r.kind == "vllm" and r.source == "GET /metrics"
    assert (r.running, r.waiting, r.kv_cache) == (3.0, 5.0, 0.42)
    assert (r.prefix_queries, r.prefix_hits) == (1000.0, 600.0)  # not the _created timestamps
    assert (r.prompt_tokens, r.generation_tokens) == (1000.0, 250.0)
    assert r.prefix_hit_rate is None and r.slots is None
    assert "some_future_gauge" not in json.dumps(r.as_dict())


def test_older_vllm_names_sglang_and_llamacpp() -> None:
    old = parse_prometheus(VLLM_OLD)
    assert old is not None and (old.kv_cache, old.prefix_hit_rate) == (0.9, 0.25)
    assert old.prefix_queries is None and old.generation_tokens is None  # not served: not guessed
    sg = parse_prometheus(SGLANG)
    assert sg is not None and sg.kind == "sglang"
    assert (sg.running, sg.waiting, sg.kv_cache, sg.prefix_hit_rate) == (12, 4, 0.83, 0.61)
    assert sg.generation_tokens == 4096 and sg.prompt_tokens is None
    lc = parse_prometheus(LLAMACPP)
    assert lc is not None and lc.kind == "llamacpp" and lc.kv_cache is None
    assert (lc.running, lc.waiting, lc.prompt_tokens, lc.generation_tokens) == (1, 0, 512, 128)
    assert parse_prometheus("# TYPE go_threads gauge\ngo_threads 7\n") is None


def test_slots_and_ps() -> None:
    slots = [{"id": 0, "is_processing": True}, {"id": 1, "is_processing": False}]
    assert parse_slots(slots) == Reading(kind="llamacpp", source="GET /slots", running=1, slots=2)
    assert parse_slots({"error": "x"}) is None
    ps = {"models": [{"name": "qwen3:32b", "size": 10, "size_vram": 9, "context_length": 4096}]}
    r = parse_ps(ps)
    assert r is not None and r.models == {
        "qwen3:32b": {"size_vram": 9, "size": 10, "context_length": 4096}
    }
    assert server_root("http://h:8000/v1") == "http://h:8000"
    assert server_root("http://h:11434") == "http://h:11434"


def test_verdict_in_plain_words() -> None:
    url = "http://gpu:8000/v1"
    full = verdict(url, "vllm", [8.0] * 10, [20.0] * 9 + [0.0], [0.95] * 10, 256)
    assert "waiting 90% of the time" in full and "KV cache full" in full
    assert "the server was the bottleneck" in full
    idle = verdict(url, "vllm", [11.0] * 10, [0.0] * 10, [0.1] * 10, 12)
    assert "averaged 11.0" in idle and "raise `concurrency` (it was 12)" in idle
    slots = verdict(url, "llamacpp", [1.0] * 5, None, None, 4, slots=4)
    assert "of the 4 it serves at once" in slots and "raise `concurrency`" in slots
    assert "too few" in verdict(url, "vllm", [1.0], [0.0], None)


def test_series_file_stays_bounded_and_keeps_notes(tmp_path: Path) -> None:
    f = SeriesFile(tmp_path, cap=10)
    f.append({"session": 1.0, "every": 5})
    f.append({"note": "no metrics", "server": "u"})
    for i in range(100):
        f.append({"at": float(i), "servers": {}})
    lines = read_series(tmp_path)
    samples = [x["at"] for x in lines if "servers" in x]
    assert len(samples) < 10 and f.stride > 1
    assert samples[0] == 0.0 and samples[-1] >= 60  # spread over the whole run
    assert sum("note" in x for x in lines) == 1 and "session" in lines[0]
    again = SeriesFile(tmp_path, cap=4)  # a later session: the bound holds at once
    assert again.samples < 4


async def _poll_until(read: object, check: object) -> Reading:
    """Read until `check(reading)` holds: gated on the fake's counts, not on time."""
    while True:
        r = await read()  # type: ignore[operator]
        if isinstance(r, Reading) and check(r):  # type: ignore[operator]
            return r
        await asyncio.sleep(0.01)


async def test_fake_vllm_metrics_follow_its_slots_kv_cache_and_prefix_cache() -> None:
    latency = LatencyModel(capacity=2, base_seconds=3600.0)  # every request stays in its slot
    async with (
        FakeServer("openai", {"m": lambda r: "yes " * 50}, latency=latency) as server,
        aiohttp.ClientSession() as session,
    ):
        reader = MetricsReader(server.url, "openai", session, 5.0)
        idle = await reader.read()
        assert isinstance(idle, Reading)
        assert (idle.running, idle.waiting, idle.kv_cache, idle.prefix_hits) == (0, 0, 0, 0)
        body = {"model": "m", "messages": [{"role": "user", "content": "same prefix " * 40}]}
        url = f"{server.url}/chat/completions"
        sent = [asyncio.create_task(session.post(url, json=body)) for _ in range(3)]
        busy = await _poll_until(reader.read, lambda r: r.running == 2 and r.waiting == 1)
        assert busy.kv_cache is not None and 0 < busy.kv_cache < 1
        assert busy.prompt_tokens and busy.generation_tokens and busy.prefix_queries
        # the second request of the same prompt found its prefix in the cache, the first did not
        assert busy.prefix_hits is not None and 0 < busy.prefix_hits < busy.prefix_queries
        assert server.stats.metrics_requests >= 2 and "GET /metrics" not in server.stats.by_route
        await server.astop()  # ends the requests in their slots
        await asyncio.gather(*sent, return_exceptions=True)


async def test_fake_llamacpp_slots_and_ollama_ps() -> None:
    async with (
        FakeServer(
            "openai", {"m": lambda r: "yes"}, metrics="llamacpp", latency=LatencyModel(capacity=4)
        ) as llama,
        FakeServer("ollama", {"m": lambda r: "yes"}) as ollama,
        aiohttp.ClientSession() as session,
    ):
        r = await MetricsReader(llama.url, "openai", session, 5.0).read()
        assert isinstance(r, Reading) and r.kind == "llamacpp" and r.slots == 4
        async with session.post(
            f"{ollama.url}/api/chat",
            json={"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": False},
        ) as resp:
            assert resp.status == 200
        ps = await MetricsReader(ollama.url, "ollama", session, 5.0).read()
        assert isinstance(ps, Reading) and ps.kind == "ollama"
        assert set(ps.models) == {"m"} and ps.models["m"]["context_length"] > 0


# --- whole runs --------------------------------------------------------------------------------


def _dataset(tmp_path: Path, n: int) -> Dataset:
    return load_cladder(write_cladder(tmp_path / "data", n))


async def _run(tmp_path: Path, capacity: int, concurrency: int, n: int = 16, **fake: object):
    ds = _dataset(tmp_path, n)
    latency = LatencyModel(capacity=capacity, base_seconds=0.02)
    models = paper_models(answer_key(ds.questions))
    async with FakeServer("openai", models, latency=latency, **fake) as server:  # type: ignore[arg-type]
        cfg = RunConfig(concurrency=concurrency, server_metrics=0.005)
        cfg = cfg.serve_all_from(server.url, "openai")
        cfg.retry.initial_wait = cfg.retry.max_wait = 0
        summary = await run(cfg, ds, tmp_path / "run", progress=False, simulated=True)
    return summary, server


def _report(tmp_path: Path) -> str:
    from crawdad.analysis.report import write_report

    return write_report([tmp_path / "run"], tmp_path / "report", workers=1).read_text()


def _section_text(tmp_path: Path) -> str:
    """The servers section's text, computed (not written: the whole report is slow to draw)."""
    from crawdad.analysis.section import Plot
    from crawdad.analysis.servers_section import servers_section

    section = servers_section(tmp_path / "run", "run", {"concurrency": None})
    assert section is not None
    return (
        "\n".join(b if isinstance(b, str) else b.name for b in section.blocks)
        + "\n"
        + ("plot" if any(isinstance(b, Plot) for b in section.blocks) else "")
    )


async def test_timid_run_leaves_a_series_and_is_told_to_raise_concurrency(tmp_path: Path) -> None:
    summary, server = await _run(tmp_path, capacity=64, concurrency=2)
    assert summary.finished == 16
    samples = [x for x in read_series(tmp_path / "run") if "servers" in x]
    read = [x for x in samples if "kind" in x["servers"][server.url]]
    assert len(read) >= 3 and server.stats.metrics_requests >= len(read)
    one = samples[-1]
    assert (
        one["servers"][server.url]["kind"] == "vllm" and "in_flight" in one["servers"][server.url]
    )
    assert set(one["models"]) and all("waiting" in m for m in one["models"].values())
    assert any("raise `concurrency` (it was 2)" in s for s in summary.servers)
    md = _report(tmp_path)
    assert "### Servers during the run" in md and "figures/servers.png" in md
    part = md[md.index("Servers during the run") :]
    assert "raise `concurrency` (it was 2)" in part and "(source: GET /metrics)" in part
    assert (tmp_path / "report" / "run" / "figures" / "servers.png").is_file()


async def test_greedy_run_is_told_the_server_was_the_bottleneck(tmp_path: Path) -> None:
    summary, _ = await _run(tmp_path, capacity=1, concurrency=32, n=32)
    assert summary.finished == 32
    assert any("the server was the bottleneck" in s for s in summary.servers), summary.servers
    part = _section_text(tmp_path)
    assert "the server was the bottleneck" in part and "raise `concurrency`" not in part
    assert "servers_summary" in part and "plot" in part


async def test_server_without_metrics_is_noted_once_and_the_run_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="crawdad"):
        summary, server = await _run(tmp_path, capacity=64, concurrency=4, n=8, metrics="none")
    assert summary.finished == 8 and summary.errored == 0
    lines = read_series(tmp_path / "run")
    # (a sample late on a loaded machine is noted too: a note of its own)
    notes = [x for x in lines if "serves no metrics" in x.get("note", "")]
    assert len(notes) == 1
    assert sum("serves no metrics" in r.message for r in caplog.records) == 1
    # Asked until it answered (/metrics, then /slots: a read later than its timeout is asked
    # again at the next sample), then never again: no retry storm.
    before = sum("servers" in x for x in lines[: lines.index(notes[0])])
    after = sum("servers" in x for x in lines[lines.index(notes[0]) :])
    assert server.stats.metrics_requests <= 2 * (before + 1) and after >= 1
    part = _section_text(tmp_path)
    assert "served no metrics" in part and "cannot be shown" in part
    from crawdad.notebook import load_frames

    frames = load_frames(tmp_path / "run")
    assert frames.servers is not None and frames.servers["kind"].eq("").all()


async def test_no_sampling_when_turned_off(tmp_path: Path) -> None:
    ds = _dataset(tmp_path, 4)
    async with FakeServer("openai", paper_models(answer_key(ds.questions))) as server:
        cfg = RunConfig(concurrency=4, server_metrics=0).serve_all_from(server.url, "openai")
        await run(cfg, ds, tmp_path / "run", progress=False, simulated=True)
    assert not (tmp_path / "run" / SERIES).exists() and server.stats.metrics_requests == 0


def test_no_metrics_reason_is_a_sentence() -> None:
    assert "404" in NoMetrics("GET /metrics answered 404").reason


async def test_an_experiment_keeps_one_series_for_its_shared_servers(tmp_path: Path) -> None:
    from crawdad.analysis.metrics.servers import series_folder
    from crawdad.analysis.servers_section import servers_section

    from crawdad.run.experiment import (
        experiment_manifest,
        load_experiment,
        run_experiment,
        variant_configs,
    )

    ds = _dataset(tmp_path, 6)
    latency = LatencyModel(capacity=4, base_seconds=0.02)
    async with FakeServer("ollama", paper_models(answer_key(ds.questions)), latency=latency) as s:
        path = tmp_path / "exp.toml"
        path.write_text(
            "[base]\nserver_metrics = 0.005\nconcurrency = 4\n"
            f'agents = [{{ name = "qwen3", model = "qwen3:32b", base_urls = ["{s.url}"] }}, '
            f'{{ name = "deepseek-r1", model = "deepseek-r1:32b", base_urls = ["{s.url}"] }}]\n'
            f'extractor = {{ base_urls = ["{s.url}"] }}\n'
            "[variants.a]\nseed = 1\n[variants.b]\nseed = 2\n"
        )
        spec, sha = load_experiment(path)
        configs = variant_configs(spec, str(path))
        manifest = experiment_manifest(spec, str(path), sha, list(configs))
        out = tmp_path / "exp"
        await run_experiment(configs, manifest, ds, out, progress=False, simulated=True)
    samples = [x for x in read_series(out) if "servers" in x]
    assert samples and not (out / "a" / SERIES).exists()
    # a read later than its timeout (every / 2 here) is a sample without the server's figures
    assert {x["servers"][s.url].get("kind") for x in samples} - {None} == {"ollama"}
    assert series_folder(out / "a") == out  # a variant's report finds the experiment's series
    section = servers_section(out, "experiment", None)
    assert section is not None
    text = "\n".join(b for b in section.blocks if isinstance(b, str))
    assert "tells which models it has loaded (GET /api/ps), not its queue" in text


def test_a_real_vllm_page_is_read() -> None:
    """vLLM 0.32 (CPU) after two requests (tests/real/wire/vllm_metrics.txt, 629 lines)."""
    page = (Path(__file__).parent / "real" / "wire" / "vllm_metrics.txt").read_text()
    r = parse_prometheus(page)
    assert r is not None and r.kind == "vllm"
    assert (r.running, r.waiting, r.kv_cache) == (0.0, 0.0, 0.0)
    assert (r.prefix_queries, r.prefix_hits, r.prompt_tokens) == (182.0, 0.0, 182.0)
    assert r.generation_tokens == 24.0
