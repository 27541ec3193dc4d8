"""`crawdad bench` against the fake servers: the load generator's counts are the server's, the
printed figures are those of bench.json and agree with each other, nothing is written outside
the bench folder, bad input is a message. The rules of the advice on made-up figures."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import pytest

from crawdad.backends import ChatRequest
from crawdad.bench import advise, run_bench
from crawdad.bench.advice import ceiling_at
from crawdad.bench.loadgen import (
    Target,
    generate_load,
    load_pools,
    load_targets,
    replay_targets,
    rounds,
)
from crawdad.bench.meter import CrawdadResult, LoadResult, RequestLog, Span, Window
from crawdad.config import RunConfig
from crawdad.data.demo_questions import write_cladder
from crawdad.data.questions import load_cladder
from crawdad.demo import answer_key
from crawdad.fake import FakeServer, LatencyModel, paper_models
from crawdad.protocols.base import request_seed
from tests.conftest import paper_toml

EXTRACTOR = "granite3.3:2b"


def latency() -> LatencyModel:
    # Slow enough that P requests are in flight together, fast enough for a short test.
    return LatencyModel(base_seconds=0.05, per_token_seconds=0.00002, capacity=64)


def config(url: str, backend: str, **top: object) -> RunConfig:
    cfg = RunConfig(**top).serve_all_from(url, backend)  # type: ignore[arg-type]
    cfg.retry.initial_wait = cfg.retry.max_wait = 0
    return cfg


def toml_for(url: str, backend: str, path: Path) -> Path:
    return paper_toml(url, path, backend=backend)


def loadgen_calls(server: FakeServer) -> list:
    """The generation requests the load generator sent: not streamed, to a debater model (the
    crawdad runs stream the debaters and send the extractor's requests)."""
    return [c for c in server.calls if not c.stream and c.model != EXTRACTOR]


@pytest.mark.parametrize("backend", ["ollama", "openai"])
async def test_the_load_generators_counts_are_the_servers(tmp_path: Path, backend: str) -> None:
    ds = load_cladder(write_cladder(tmp_path / "data", 12))
    models = paper_models(answer_key(ds.questions))
    async with FakeServer(backend, models, latency=latency()) as server:  # type: ignore[arg-type]
        result = await run_bench(
            config(server.url, backend),
            ds,
            tmp_path / "bench",
            parallel=[2, 5],
            concurrencies=[],
            seconds=0.4,
            progress=False,
        )
        calls = list(server.calls)
        stats = server.stats.latency
    assert calls and all(not c.stream for c in calls)  # only the load generator ran
    assert sum(r.sent for r in result.ceiling) == len(calls)
    assert sum(r.answered for r in result.ceiling) == sum(c.status == 200 for c in calls)
    assert sum(r.tokens for r in result.ceiling) == sum(c.eval_count for c in calls)
    assert sum(r.prompt_tokens for r in result.ceiling) == sum(c.prompt_tokens for c in calls)
    assert all(r.failed == 0 and r.cut == 0 for r in result.ceiling)
    # P requests in flight, never more: the server saw the largest P at once.
    assert stats.max_concurrent == 5
    for r in result.ceiling:
        assert r.window.in_flight <= r.parallel + 1e-9
        assert 0 < r.window.tokens <= r.tokens and 0 < r.window.requests <= r.answered
    # The first prompts crawdad sends, with its sampling settings and seeds, for both agents.
    assert {c.model for c in calls} == {"qwen3:32b", "deepseek-r1:32b"}
    first = {request_seed(0, q.question_id, 0) for q in ds.questions}
    later = {request_seed(0, q.question_id, 0, n) for q in ds.questions for n in range(1, 100)}
    assert first & {c.seed for c in calls} and {c.seed for c in calls} <= first | later
    assert all(c.temperature == 0.6 and c.max_tokens == 8192 for c in calls)


def test_cli_bench_figures_agree_and_stay_in_the_bench_folder(
    tmp_path: Path, tiny_cladder: Path, cli
) -> None:
    questions = load_cladder(tiny_cladder).questions
    cfg = toml_for("URL", "openai", tmp_path / "c.toml")
    before = sorted(p for p in tmp_path.rglob("*"))
    with FakeServer("openai", paper_models(answer_key(questions)), latency=latency()) as server:
        cfg.write_text(cfg.read_text().replace("URL", server.url))
        code, out, err = cli(
            "bench", "--data", str(tiny_cladder), "--config", str(cfg), "--parallel", "2,4",
            "--concurrency", "3", "--seconds", "0.5", "--out", str(tmp_path / "b"),
            "--no-progress",
        )  # fmt: skip
        calls = list(server.calls)
    assert code == 0, err
    after = sorted(p for p in tmp_path.rglob("*"))
    assert [p for p in after if p not in before and tmp_path / "b" not in p.parents] == [
        tmp_path / "b"
    ]
    assert {p.name for p in (tmp_path / "b").iterdir()} == {"bench.json", "bench.txt", "run-c3"}
    assert (tmp_path / "b" / "run-c3" / "debates.jsonl").exists()
    data = json.loads((tmp_path / "b" / "bench.json").read_text())
    # The load generator's requests and tokens are what the server counted.
    ours = loadgen_calls(server)
    assert sum(r["sent"] for r in data["ceiling"]) == len(ours)
    assert sum(r["tokens"] for r in data["ceiling"]) == sum(c.eval_count for c in ours)
    # Every request of the bench reached the server, but some of those the crawdad run had in
    # flight when it was stopped: they were cancelled, perhaps before they were sent.
    # (and the same-work ceiling replayed the crawdad run's requests: streamed debaters and
    # the extractor's, none of them counted in `ours`).
    replay = data["crawdad"][0]["same_work"]
    assert replay["work"] == "same-work" and replay["sent"] > 0
    sent = sum(r["sent"] for r in [*data["ceiling"], *data["crawdad"], replay])
    assert sent - data["crawdad"][0]["cut"] <= len(calls) <= sent
    # The figures agree: rates are window figures over window seconds, the share of the
    # ceiling is crawdad's rate over the best of the sweep, CPU per token is CPU over tokens.
    best = max(r["tokens_per_second"] for r in data["ceiling"])
    for r in data["ceiling"] + data["crawdad"]:
        w = r["window"]
        assert r["tokens_per_second"] == pytest.approx(w["tokens"] / w["seconds"])
        assert r["requests_per_second"] == pytest.approx(w["requests"] / w["seconds"])
        assert r["cpu_ms_per_token"] == pytest.approx(1000 * r["cpu_seconds"] / r["tokens"])
    run = data["crawdad"][0]
    assert run["concurrency"] == 3
    lines = (tmp_path / "b" / "run-c3" / "debates.jsonl").read_text().splitlines()
    assert run["debates"] == len(lines)
    # crawdad ran the first half of the questions (in its seeded order), the load generator the
    # others.
    selected = (tmp_path / "b" / "run-c3" / "selected-ids.txt").read_text().split()
    assert sorted(selected) == ["0", "1", "2"]
    assert (data["questions"], data["load_questions"]) == (3, 3)
    assert {c.seed for c in ours} <= {
        request_seed(0, q, 0, n) for q in (3, 4, 5) for n in range(100)
    } | {request_seed(0, q, 0) for q in (3, 4, 5)}
    assert data["advice"]["fraction"] == pytest.approx(run["tokens_per_second"] / best)
    assert run["cores"] == pytest.approx(run["cpu_seconds"] / run["seconds"])
    # What is printed is what was written, and says what to do.
    text = (tmp_path / "b" / "bench.txt").read_text()
    assert text.strip() in out
    row = next(line for line in out.splitlines() if re.match(r"\s+3\s", line))
    assert f"{run['tokens_per_second']:,.1f}" in row
    # "of ceiling": of the same-work ceiling (the load generator replaying the run's requests)
    # (crawdad's rate over the same requests, from the first one's start to the last one's end,
    # over the replay's, scaled from its mean in flight to crawdad's)
    work = run["work_window"]
    scale = work["in_flight"] / replay["window"]["in_flight"]
    share = (work["tokens"] / work["seconds"]) / (replay["tokens_per_second"] * scale)
    assert data["advice"]["same_work"] == pytest.approx(share)
    assert f"{share:.2f}" in row
    assert "First-turn ceiling" in out and "Same-work ceiling" in out
    assert "Verdict: " in out and "Use concurrency = " in out


def test_bad_input_is_a_message(tmp_path: Path, tiny_cladder: Path, cli) -> None:
    cfg = toml_for("http://127.0.0.1:9", "ollama", tmp_path / "c.toml")
    args = ["bench", "--data", str(tiny_cladder), "--config", str(cfg), "--no-progress"]
    code, _, err = cli(*args, "--out", str(tmp_path / "b"))
    assert code == 1 and "the model servers are not ready" in err and "127.0.0.1:9" in err
    assert not (tmp_path / "b").exists()
    for bad in ("8,x", "0", ",", "5000"):
        code, _, err = cli(*args, "--parallel", bad)
        assert code == 1 and "--parallel" in err and "as in --parallel 8,32,64" in err
    code, _, err = cli(*args, "--concurrency", "-1")
    assert code == 1 and "--concurrency" in err
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    code, _, err = cli(*args, "--out", str(tmp_path / "full"))
    assert code == 1 and "is not empty" in err
    code, _, err = cli(*args, "--out", str(tmp_path / "full" / "x"))
    assert code == 1 and "is a file" in err


def test_the_items_go_round_again_with_new_seeds() -> None:
    request = ChatRequest(model="m", prompt="p", temperature=0.6, top_p=0.95, max_tokens=8)
    targets = [Target(None, request.model_copy(update={"seed": i}), i) for i in (7, 8)]  # type: ignore[arg-type]
    sent = list(itertools.islice(rounds(targets, seed=3, salt="s"), 6))
    assert [t.item_id for t in sent] == [7, 8, 7, 8, 7, 8]
    # each round's prompts open with a tag of their own: a server's prompt cache holds none
    assert [t.request.prompt for t in sent] == [f"[s.{n}]\np" for n in (0, 0, 1, 1, 2, 2)]
    assert [t.request.seed for t in sent[:2]] == [7, 8]  # the first round as crawdad sends it
    assert [t.request.seed for t in sent[2:]] == [
        request_seed(3, 7, 0, 1), request_seed(3, 8, 0, 1),
        request_seed(3, 7, 0, 2), request_seed(3, 8, 0, 2),
    ]  # fmt: skip


# --- the figures and the advice, on made-up numbers -------------------------------------------------


def test_a_window_counts_the_share_of_each_request_inside_it() -> None:
    log = RequestLog(
        spans=[
            Span(start=0.0, end=10.0, tokens=100, ok=True),  # half inside [5, 15]
            Span(start=5.0, end=15.0, tokens=40, ok=True),  # wholly inside
            Span(start=14.0, end=16.0, tokens=20, ok=True),  # half inside
            Span(start=6.0, end=7.0, tokens=0, ok=False, error="E"),  # failed: time, no tokens
            Span(start=14.0, end=15.0, tokens=0, cancelled=True),  # cut at the end of a phase
            Span(start=20.0, end=30.0, tokens=500, ok=True),  # outside
        ]
    )
    w = log.window(5.0, 15.0)
    assert w.tokens == pytest.approx(50 + 40 + 10)
    assert w.requests == pytest.approx(0.5 + 1 + 0.5)
    assert w.in_flight == pytest.approx((5 + 10 + 1 + 1 + 1) / 10)
    assert w.tokens_per_second == pytest.approx(10.0)
    assert (log.sent, log.answered, log.failed, log.tokens) == (6, 4, 1, 660)
    assert log.errors() == ["1 x E"]


def ceiling(*rates: tuple[int, float]) -> list[LoadResult]:
    return [LoadResult(p, Window(10, rate * 10, 1, p), 1, 1, 0, 1, 1, 10, 0.1) for p, rate in rates]


def crawdad(c: int, rate: float, in_flight: float, cores: float) -> CrawdadResult:
    return CrawdadResult(
        concurrency=c,
        window=Window(10, rate * 10, 10, in_flight),
        sent=10,
        answered=10,
        failed=0,
        tokens=int(rate * 10),
        seconds=10,
        cpu_seconds=10 * cores,
        debates=3,
        cut=0,
        finished_all=False,
        folder="f",
    )


SWEEP = ((8, 400.0), (32, 950.0), (64, 1000.0))  # the knee at 32


def test_the_ceiling_at_a_load_between_the_sweeps_points() -> None:
    sweep = ceiling(*SWEEP)  # in flight = P
    assert ceiling_at(sweep, 4) == pytest.approx(200.0)  # through zero below the first
    assert ceiling_at(sweep, 20) == pytest.approx(400 + 550 * 12 / 24)
    assert ceiling_at(sweep, 64) == ceiling_at(sweep, 500) == 1000.0
    assert ceiling_at([], 8) == 0.0


def test_advice_server_bound() -> None:
    cfg = RunConfig().serve_all_from("http://h:8000/v1", "openai")
    advice = advise(cfg, ceiling(*SWEEP), [crawdad(64, 930, 40, 0.3)])
    assert advice.bottleneck == "server" and advice.knee == 32
    assert advice.fraction == pytest.approx(0.93)
    assert "model server is the bottleneck" in advice.verdict
    text = " ".join(advice.suggestions)
    assert "gains little past P=32" in text and "--max-num-seqs 32" in text


def test_advice_crawdad_bound_and_too_few_in_flight() -> None:
    cfg = RunConfig().serve_all_from("http://h:11434", "ollama")
    busy = advise(cfg, ceiling(*SWEEP), [crawdad(64, 500, 40, 0.95)])
    assert busy.bottleneck == "crawdad" and "stream = false" in " ".join(busy.suggestions)
    few = advise(cfg, ceiling(*SWEEP), [crawdad(8, 300, 8, 0.2)])
    assert few.bottleneck == "concurrency" and "8.0 requests in flight" in few.verdict
    assert few.same_load == pytest.approx(300 / 400) and "got 400 tok/s" in few.verdict
    # 1 request in flight per debate: 1.25 x 32 = 40 -> 48 debates, but at least 2 x the knee.
    assert (few.concurrency, few.max_in_flight) == (64, 40)
    assert "OLLAMA_NUM_PARALLEL=32" in " ".join(few.suggestions)


def test_advice_leaves_out_sweep_rows_with_requests_cut() -> None:
    cfg = RunConfig().serve_all_from("http://h:8000/v1", "openai")
    sweep = ceiling(*SWEEP, (128, 50.0))  # P=128: its requests outlived the drain
    sweep[-1].cut = 100
    advice = advise(cfg, sweep, [crawdad(64, 930, 40, 0.3)])
    assert advice.bottleneck == "server" and advice.knee == 32
    assert advice.fraction == pytest.approx(0.93)


def test_advice_when_the_ceiling_still_rises_or_is_empty() -> None:
    cfg = RunConfig().serve_all_from("http://h:8000/v1", "openai")
    rising = advise(cfg, ceiling((8, 300.0), (16, 600.0)), [])
    assert rising.knee == 16 and "still rose at P=16" in rising.suggestions[0]
    assert "--parallel 32" in rising.suggestions[0]
    empty = advise(cfg, ceiling((8, 0.0)), [])
    assert empty.knee is None and "no figures" in empty.verdict


def test_advice_reads_the_servers_own_metrics() -> None:
    from crawdad.run.server_series import ServerFigures

    cfg = RunConfig().serve_all_from("http://h:8000/v1", "openai")
    full = crawdad(64, 930, 40, 0.3)
    full.servers = [ServerFigures("http://h:8000/v1", "vllm", 10, 30.0, 0.9, 0.97, 0.8)]
    text = " ".join(advise(cfg, ceiling(*SWEEP), [full]).suggestions)
    assert "KV cache full in 80% of the samples" in text and "--gpu-memory-utilization" in text
    idle = crawdad(64, 930, 40, 0.3)
    idle.servers = [ServerFigures("http://h:8000/v1", "vllm", 10, 32.0, 0.0, 0.3, 0.0)]
    text = " ".join(advise(cfg, ceiling(*SWEEP), [idle]).suggestions)
    assert "empty queue at the ceiling" in text and "--max-num-seqs" in text
    assert "leaves room to raise" in text
    few = crawdad(64, 930, 40, 0.3)
    few.servers = [ServerFigures("http://h:8000/v1", "vllm", 2, 32.0, 0.0, 0.3, 0.0)]
    assert "own metrics" not in " ".join(advise(cfg, ceiling(*SWEEP), [few]).suggestions)


async def test_a_replay_finds_none_of_its_prompts_in_the_servers_cache(tmp_path: Path) -> None:
    """Servers keep the prompts they processed (vLLM's prefix caching, llama.cpp's prompt
    cache), and so does the fake: a request sent again is mostly served from that cache. The
    load generator tags each phase's prompts, so a replay of crawdad's requests is processed in
    full, as crawdad's were; within one phase, shared prefixes are still found."""
    ds = load_cladder(write_cladder(tmp_path / "data", 6))
    models = paper_models(answer_key(ds.questions))
    async with FakeServer("openai", models, latency=latency(), metrics="llamacpp") as server:
        cfg = config(server.url, "openai")
        pools = load_pools(cfg)
        targets = load_targets(cfg, ds.questions, pools)
        recorded = [(t.pool, t.request) for t in targets]
        processed = server.stats.latency

        async def send(salt: str | None) -> int:
            before = processed.prefilled_tokens
            again, replay_pools = replay_targets(recorded, cfg)
            await generate_load(again, 4, 30.0, once=True, salt=salt)
            for pool in replay_pools:
                await pool.aclose()
            return processed.prefilled_tokens - before

        first = await send("a")  # as crawdad sent them: nothing cached
        assert await send("a") < first / 4  # the same prompts again: served from the cache
        assert await send(None) > 0.9 * first  # a phase of its own (a new tag): processed
        for pool in pools:
            await pool.aclose()


def test_each_crawdad_phase_opens_on_questions_the_ones_before_did_not(tmp_path: Path) -> None:
    """The first prompts of a phase would be in the server's prompt cache if an earlier phase
    had begun with the same questions: each begins at its own share of the list."""
    from crawdad.bench.measure import rotated

    ds = load_cladder(write_cladder(tmp_path / "data", 6))
    ids = [[q.question_id for q in rotated(ds, k, 3).questions] for k in range(3)]
    first = [q.question_id for q in ds.questions]
    assert ids[0] == first and ids[1] == first[2:] + first[:2] and ids[2] == first[4:] + first[:4]
    assert rotated(ds, 1, 3).info.selected_ids == [str(i) for i in ids[1]]
