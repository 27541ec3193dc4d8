"""The live view (`/live`, `/live.json`): figures that follow a folder as it grows, read from
the bytes appended since the last poll; model-written text kept as data."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from crawdad.analysis.synthetic_runs import write_synthetic_run
from scipy.stats import binomtest

import crawdad.view.index as index_module
from crawdad.records import ExperimentManifest
from crawdad.view import Viewer
from crawdad.view.live import HOUR_S, ServersTail, wilson

TOKEN = "live-view-token"
AUTH = {"Authorization": f"token {TOKEN}"}
HOSTILE = "<img src=x onerror=alert(1)></script><script>alert(2)</script>"
JS = Path(__file__).resolve().parents[1] / "crawdad" / "view" / "static" / "live.js"


def split_run(folder: Path, n: int, keep: int, **kw: Any) -> list[bytes]:
    """A run of n debates of which only the first `keep` lines are written yet (the manifest
    selects all n); the rest, to append later."""
    write_synthetic_run(folder, n, trace_chars=(10, 20), error_rate=0, **kw)
    lines = (folder / "debates.jsonl").read_bytes().splitlines(keepends=True)
    (folder / "debates.jsonl").write_bytes(b"".join(lines[:keep]))
    return lines[keep:]


def sample(at: float, running: int, waiting: int, kv: float, gen: int, tokens: int) -> str:
    fig = {
        "kind": "vllm",
        "source": "GET /metrics",
        "running": running,
        "waiting": waiting,
        "kv_cache": kv,
        "generation_tokens": gen,
        "in_flight": running + waiting,
        "responses": 0,
        "tokens": tokens,
    }
    line = {"at": at, "t": 0, "servers": {"http://127.0.0.1:8000/v1": fig}, "models": {}}
    return json.dumps(line) + "\n"


async def poll(client: TestClient) -> dict[str, Any]:
    async with client.get("/live.json", headers=AUTH) as r:
        assert r.status == 200
        assert r.content_type == "application/json"
        assert r.headers["Cache-Control"] == "no-store"
        return dict(await r.json())


@pytest.fixture
async def grown(tmp_path: Path) -> AsyncIterator[tuple[TestClient, Path, list[bytes]]]:
    run = tmp_path / "run"
    rest = split_run(run, 40, 20)
    async with TestClient(TestServer(Viewer.open([run]).app(TOKEN))) as c:
        yield c, run, rest


async def test_a_growing_run_changes_progress_between_two_polls(
    grown: tuple[TestClient, Path, list[bytes]],
) -> None:
    client, run, rest = grown
    first = await poll(client)
    (r,) = first["runs"]
    assert (r["done"], r["selected"], r["live"]) == (20, 40, False)
    assert r["debates_per_min"] > 0 and r["tokens_per_s"] > 0
    assert len(first["newest"]) == 12 and first["newest"][0]["qid"] == "19"
    with (run / "debates.jsonl").open("ab") as f:
        f.write(b"".join(rest[:10]))
    second = await poll(client)
    (r,) = second["runs"]
    assert r["done"] == 30 and second["newest"][0]["qid"] == "29"
    lo, hi = r["interval"]
    assert lo <= r["accuracy"] <= hi and r["scored"] == 30


async def test_a_poll_reads_only_the_lines_appended_since_the_last(
    grown: tuple[TestClient, Path, list[bytes]], monkeypatch: pytest.MonkeyPatch
) -> None:
    client, run, rest = grown
    await poll(client)
    read: list[int] = []
    real = index_module.read_line

    def counted(line: bytes, n: int) -> Any:
        read.append(n)
        return real(line, n)

    monkeypatch.setattr(index_module, "read_line", counted)
    await poll(client)
    assert read == []  # nothing appended: nothing read
    with (run / "debates.jsonl").open("ab") as f:
        f.write(b"".join(rest[:5]) + rest[5][:40])  # and half a line, still being written
    assert (await poll(client))["runs"][0]["done"] == 25
    assert read == [21, 22, 23, 24, 25]


async def test_counts_follow_a_retried_question(tmp_path: Path) -> None:
    """A question's later line replaces its earlier one in the counts (a resumed run's retry)."""
    run = tmp_path / "run"
    write_synthetic_run(run, 10, trace_chars=(10, 20), error_rate=0)
    lines = (run / "debates.jsonl").read_bytes().splitlines(keepends=True)
    broken = json.loads(lines[3])
    broken.update(error="ConnectError: went away", final_answer=None)
    broken["turns"][0]["attempts"] = 3
    (run / "debates.jsonl").write_bytes(
        b"".join(lines[:3] + lines[4:]) + json.dumps(broken).encode() + b"\n"
    )
    async with TestClient(TestServer(Viewer.open([run]).app(TOKEN))) as client:
        r = (await poll(client))["runs"][0]
        assert (r["done"], r["errors"], r["retries"], r["scored"]) == (10, 1, 2, 9)
        with (run / "debates.jsonl").open("ab") as f:
            f.write(lines[3])  # the retry succeeded
        r = (await poll(client))["runs"][0]
        assert (r["done"], r["errors"], r["retries"], r["scored"]) == (10, 0, 0, 10)


async def test_servers_series_grows_and_gives_rates(
    grown: tuple[TestClient, Path, list[bytes]],
) -> None:
    client, run, _ = grown
    series = run / "servers.jsonl"
    t0 = 1_800_000_000.0
    series.write_text(
        json.dumps({"session": t0, "every": 5})
        + "\n"
        + sample(t0 + 5, 8, 0, 0.2, 1000, 900)
        + sample(t0 + 10, 16, 4, 0.5, 2000, 1800)
    )
    (s,) = (await poll(client))["servers"]
    assert s["kind"] == "vLLM" and s["source"] == "GET /metrics" and s["folder"] == "run"
    assert s["latest"]["running"] == 16 and s["latest"]["kv_cache"] == 50.0
    assert s["latest"]["generated_per_s"] == 200.0 and s["latest"]["received_per_s"] == 180.0
    assert s["series"]["running"] == [8, 16] and s["series"]["generated_per_s"] == [None, 200.0]
    with series.open("a") as f:
        f.write(json.dumps({"session": t0 + 20, "every": 5}) + "\n")  # a resume: counters anew
        f.write(sample(t0 + 25, 30, 12, 0.97, 50, 40))
        f.write(json.dumps({"note": "no metrics", "server": "http://other:1/v1", "at": t0}) + "\n")
    servers = (await poll(client))["servers"]
    assert servers[0]["series"]["running"] == [8, 16, 30]
    assert servers[0]["latest"]["generated_per_s"] is None  # not a rate across two sessions
    assert servers[1] == {
        "folder": "run",
        "url": "http://other:1/v1",
        "kind": "server",
        "source": "",
        "note": "no metrics",
    }


def test_the_servers_series_keeps_the_last_hour_and_rereads_a_rewritten_file(
    tmp_path: Path,
) -> None:
    path = tmp_path / "servers.jsonl"
    t0 = 1_800_000_000.0
    path.write_text("".join(sample(t0 + 60 * i, i, 0, 0.1, i, i) for i in range(120)))
    tail = ServersTail(tmp_path)
    tail.refresh()
    (track,) = tail.tracks.values()
    ats = [float(p["at"] or 0) for p in track.points]
    assert ats[-1] == t0 + 60 * 119 and ats[0] >= ats[-1] - HOUR_S and len(ats) == 61
    path.write_text(sample(t0, 1, 0, 0.1, 1, 1))  # compacted: shorter, another file
    tail.refresh()
    assert [p["running"] for p in tail.tracks["http://127.0.0.1:8000/v1"].points] == [1]


def test_wilson_is_scipys() -> None:
    for k, n in ((0, 5), (7, 10), (95, 100), (3000, 3300)):
        lo, hi = binomtest(k, n).proportion_ci(0.95, method="wilson")
        assert wilson(k, n) == pytest.approx((lo, hi), abs=1e-9)
    assert wilson(0, 0) is None


async def test_hostile_model_names_stay_data(tmp_path: Path) -> None:
    run = tmp_path / "<b>run"
    write_synthetic_run(run, 5, trace_chars=(10, 20), agents={"a": HOSTILE, "b": "plain"})
    async with TestClient(TestServer(Viewer.open([run]).app(TOKEN))) as client:
        data = await poll(client)
        assert data["runs"][0]["models"] == {"a": HOSTILE, "b": "plain"}
        assert data["runs"][0]["label"] == "<b>run"
        async with client.get("/live", headers=AUTH) as r:
            page = await r.text()
            assert r.status == 200 and "script-src 'self';" in r.headers["Content-Security-Policy"]
    assert "&lt;b&gt;run" in page and "<b>run" not in page
    assert "<img" not in page and "alert(" not in page
    scripts = re.findall(r"<script[^>]*>(.*?)</script>", page, re.S)
    assert scripts and all(s == "" for s in scripts)  # no inline script: only src=
    assert '<script src="/static/live.js" defer>' in page


def test_the_live_script_never_parses_data_as_html() -> None:
    code = JS.read_text()
    for sink in (
        "innerHTML",
        "outerHTML",
        "insertAdjacentHTML",
        "document.write",
        "eval(",
        "new Function",
        "DOMParser",
        "createContextualFragment",
    ):
        assert sink not in code, sink
    assert "textContent" in code


async def test_a_variant_that_starts_later_joins_the_live_view(tmp_path: Path) -> None:
    exp = tmp_path / "exp"
    exp.mkdir()
    manifest = ExperimentManifest(
        crawdad_version="0",
        created_at=datetime(2026, 1, 1, tzinfo=UTC),
        file="exp.toml",
        file_sha256="0" * 64,
        baseline="a",
        variants={"a": {}, "b": {}},
    )
    (exp / "experiment.json").write_text(manifest.model_dump_json())
    write_synthetic_run(exp / "a", 6, trace_chars=(10, 20), error_rate=0)
    async with TestClient(TestServer(Viewer.open([exp]).app(TOKEN))) as client:
        assert [r["label"] for r in (await poll(client))["runs"]] == ["a"]
        write_synthetic_run(exp / "b", 4, trace_chars=(10, 20), error_rate=0)
        runs = (await poll(client))["runs"]
        assert [(r["label"], r["done"]) for r in runs] == [("a", 6), ("b", 4)]


async def test_the_live_page_opens_from_its_tokened_url(tmp_path: Path) -> None:
    """`crawdad view` on a run being written prints /live?token=...: the token goes to the
    cookie and the page stays the live one."""
    run = write_synthetic_run(tmp_path / "run", 3, trace_chars=(10, 20))
    async with TestClient(TestServer(Viewer.open([run]).app(TOKEN))) as client:
        async with client.get(f"/live?token={TOKEN}", allow_redirects=False) as r:
            assert r.status == 303 and r.headers["Location"] == "/live"
        async with client.get("/live") as r:
            assert r.status == 200 and 'id="live-runs"' in await r.text()


def stop_experiment(
    folder: Path, rights: dict[str, Any], n: int, stop: dict[str, Any] | None
) -> Path:
    """An experiment folder whose variants answer `n` questions, variant v right on question i
    when `rights[v](i)`, its manifest holding the stopping rule `stop` (None: no rule)."""
    folder.mkdir()
    manifest = ExperimentManifest(
        crawdad_version="0",
        created_at=datetime(2026, 1, 1, tzinfo=UTC),
        file="exp.toml",
        file_sha256="0" * 64,
        baseline="base",
        variants={name: {} for name in rights},
        stop=stop,
    )
    (folder / "experiment.json").write_text(manifest.model_dump_json())
    order = [str(i) for i in range(n)][::-1]  # the run's order is the ids file's, not the ids'
    for name, right in rights.items():
        run = write_synthetic_run(folder / name, n, trace_chars=(10, 20), error_rate=0)
        data = json.loads((run / "manifest.json").read_text())
        data["dataset"]["ids_file"] = "selected_ids.txt"
        (run / "manifest.json").write_text(json.dumps(data))
        (run / "selected_ids.txt").write_text("\n".join(order) + "\n")
        lines = []
        for raw in (run / "debates.jsonl").read_text().splitlines():
            d = json.loads(raw)
            gold = d["gold"]
            d["final_answer"] = gold if right(int(d["question_id"])) else _flip(gold)
            lines.append(json.dumps(d) + "\n")
        (run / "debates.jsonl").write_text("".join(lines))
    return folder


def _flip(gold: str) -> str:
    return "no" if gold == "yes" else "yes"


async def test_a_variant_decided_by_the_stopping_rule_shows_its_decision_and_sequence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from crawdad.run.scheduler import decisions_of, rule_judge

    rights = {
        "base": lambda i: i % 2 == 0,  # right on half
        "good": lambda i: True,  # right on every one: better
        "same": lambda i: i % 2 == 0,  # the baseline's answers: never better nor worse
    }
    stop = {"alpha": 0.05, "margin": 0.03, "min_questions": 10}
    exp = stop_experiment(tmp_path / "exp", rights, 300, stop)
    async with TestClient(TestServer(Viewer.open([exp]).app(TOKEN))) as client:
        data = await poll(client)
        by = {d["variant"]: d for d in data["decisions"]}
        assert set(by) == {"good", "same"}
        good = by["good"]
        assert good["decision"] == "better" and good["baseline"] == "base"
        assert 10 <= good["questions"] < 300 and good["settled"] == 300
        assert 0 < good["lower"] <= good["upper"] and good["margin"] == 0.03
        seq = good["sequence"]
        assert 0 < len(seq["questions"]) <= 200 and seq["questions"][-1] == 300
        assert all(lo <= hi for lo, hi in zip(seq["lower"], seq["upper"], strict=True))
        assert by["same"]["decision"] not in ("better", "worse")
        # the run's own judge reaches the same decision from the same records
        order = [str(i) for i in range(300)][::-1]
        outcomes = {n: {q: int(f(int(q))) for q in order} for n, f in rights.items()}
        from crawdad.run.experiment import recorded_rule

        # a manifest's rule without a target (one of before targets) is about the run
        assert good["target"] == "run" and "this run" in good["about"]
        judged = decisions_of(order, outcomes, "base", rule_judge(recorded_rule(stop), 2))
        assert judged["good"].questions == good["questions"]
        assert (judged["good"].lower, judged["good"].upper) == (good["lower"], good["upper"])

        # a poll with nothing new computes nothing
        import crawdad.view.live as live_module

        calls: list[int] = []
        real = live_module.prefix_decision

        def counted(*args: Any) -> Any:
            calls.append(1)
            return real(*args)

        monkeypatch.setattr(live_module, "prefix_decision", counted)
        assert (await poll(client))["decisions"] == data["decisions"]
        assert calls == []
        same = exp / "same" / "debates.jsonl"
        first = json.loads(same.read_text().splitlines()[0])
        with same.open("a") as f:  # the same answer again: new lines, the same outcomes
            f.write(json.dumps(first) + "\n")
        await poll(client)
        assert calls == []
        first["final_answer"] = _flip(first["final_answer"])  # a retry that answered otherwise
        with same.open("a") as f:
            f.write(json.dumps(first) + "\n")
        await poll(client)
        assert len(calls) == 1  # only that variant's sequence is computed again


async def test_a_variant_stopped_early_shows_no_fixed_sample_interval(tmp_path: Path) -> None:
    """Issue 52: a variant its rule stopped before its last question shows its accuracy without
    the Wilson interval, which ignores the stopping; its decision names its pool and level."""
    rights = {"base": lambda i: i % 2 == 0, "good": lambda i: True}
    exp = stop_experiment(tmp_path / "exp", rights, 200, {"alpha": 0.05, "target": "models"})
    manifest = exp / "good" / "manifest.json"
    data = json.loads(manifest.read_text())
    data["dataset"]["n_selected"] = 300  # 100 of its questions never run: stopped early
    manifest.write_text(json.dumps(data))
    async with TestClient(TestServer(Viewer.open([exp]).app(TOKEN))) as client:
        data = await poll(client)
        runs = {r["label"]: r for r in data["runs"]}
        assert runs["good"]["interval"] is None and runs["good"]["accuracy"] == 1.0
        assert runs["good"]["interval_note"].startswith("stopped early")
        assert runs["base"]["interval"] is not None and runs["base"]["interval_note"] == ""
        (good,) = data["decisions"]
        assert good["decision"] == "better" and good["level"] == "95% confidence"
        assert "the models: the expected difference" in good["about"]
        assert "questions of" in good["about"] and "like these" not in good["about"]
        assert good["estimate_note"] == "the difference at the stop; stopping early overstates it"


async def test_without_a_stopping_rule_there_are_no_decisions(tmp_path: Path) -> None:
    rights = {"base": lambda i: i % 2 == 0, "good": lambda i: True}
    exp = stop_experiment(tmp_path / "exp", rights, 40, None)
    async with TestClient(TestServer(Viewer.open([exp]).app(TOKEN))) as client:
        assert (await poll(client))["decisions"] == []


async def test_a_server_crawdad_is_restarting_is_said_on_its_card(
    grown: tuple[TestClient, Path, list[bytes]],
) -> None:
    client, run, _ = grown
    t0 = 1_800_000_000.0
    (run / "servers.jsonl").write_text(
        json.dumps({"session": t0, "every": 5}) + "\n" + sample(t0 + 5, 8, 0, 0.2, 1000, 900)
    )
    (run / "servers").mkdir()
    status = {"state": "restarting", "since": t0, "restarts": 1, "url": "http://127.0.0.1:8000/v1"}
    (run / "servers" / "status.json").write_text(json.dumps({"paper": status}))
    (s,) = (await poll(client))["servers"]
    assert "crawdad's server paper: restarting for " in s["note"]
    assert "restarts so far: 1" in s["note"]
    (run / "servers" / "status.json").write_text(json.dumps({"paper": status | {"state": "up"}}))
    (s,) = (await poll(client))["servers"]
    assert s["note"] is None


async def test_a_decided_variant_says_decided_in_the_poll_and_the_header(tmp_path: Path) -> None:
    """Issue 46: a variant the rule decided starts no new debate though its process still holds
    the folder; its state is `decided: better`, not `writing`, in /live.json and in the header's
    chip of every page."""
    import fcntl

    from crawdad.run.store import LOCK

    rights = {"base": lambda i: i % 2 == 0, "good": lambda i: True}
    exp = stop_experiment(tmp_path / "exp", rights, 200, {"alpha": 0.05, "margin": 0.03})
    locks = [(exp / name / LOCK).open("a") for name in rights]
    for lock in locks:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
    try:
        async with TestClient(TestServer(Viewer.open([exp]).app(TOKEN))) as client:
            states = {r["label"]: r["state"] for r in (await poll(client))["runs"]}
            assert states == {"base": "writing", "good": "decided: better"}
            runs = {r["label"]: r for r in (await poll(client))["runs"]}
            # it ran every question: its interval holds as it is
            assert runs["good"]["interval"] is not None and runs["good"]["interval_note"] == ""
            async with client.get("/", headers=AUTH) as r:
                page = await r.text()
            chip = re.search(r'data-run="good">.*?</b>', page, re.S)
            assert chip and "decided: better" in chip[0] and "writing" not in chip[0]
    finally:
        for lock in locks:
            lock.close()
