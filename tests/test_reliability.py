"""Issue 15, runtime: the figures a run prints, a full disk, garbage replies, servers that hang
or die. Each class of failure stops or goes on with a message that names what to fix, and a
resume of the same command finishes the run with every question once and nothing lost."""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import os
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

import crawdad.run.store
from crawdad import cli
from crawdad.backends.base import ChatRequest
from crawdad.backends.guard import StreamGuard
from crawdad.backends.ollama import OllamaBackend
from crawdad.backends.openai_compat import OpenAIBackend
from crawdad.config import RunConfig, public_dump
from crawdad.data.demo_questions import write_cladder
from crawdad.data.questions import Dataset, load_cladder
from crawdad.demo import answer_key
from crawdad.doctor import diagnose
from crawdad.errors import CrawdadError, GarbledReply, StoreWriteError
from crawdad.fake import FakeServer, FaultPlan, LatencyModel, paper_models
from crawdad.fake.faults import GARBAGE_FAULTS
from crawdad.records import DatasetInfo, DebateRecord, RunManifest
from crawdad.run.runner import (
    Job,
    Progress,
    RunStopped,
    RunSummary,
    ServersStuck,
    build_setup,
    run,
)
from crawdad.run.store import RunStore, read_jsonl_ids
from crawdad.safe_files import Folder
from tests.conftest import paper_toml


def dataset(tmp_path: Path, n: int) -> Dataset:
    return load_cladder(write_cladder(tmp_path / "data", n))


def config(url: str, backend: str = "ollama", **top) -> RunConfig:
    cfg = RunConfig(**top).serve_all_from(url, backend)  # type: ignore[arg-type]
    cfg.retry.initial_wait = cfg.retry.max_wait = 0
    return cfg


def records(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "debates.jsonl").read_text().splitlines()]


def once_each(out: Path, n: int) -> None:
    ids = read_jsonl_ids(out / "debates.jsonl")
    assert sorted(ids, key=int) == [str(i) for i in range(n)]


def manifest() -> RunManifest:
    info = DatasetInfo(
        source="s", questions_file="q", models_file="m", sha256="0" * 64, n_total=3, n_selected=3
    )
    return RunManifest(
        crawdad_version="t",
        created_at=datetime(2026, 1, 1, tzinfo=UTC),
        config=public_dump(RunConfig()),
        prompts={},
        dataset=info,
    )


def record(qid: int) -> DebateRecord:
    return DebateRecord(
        question_id=qid,
        gold="yes",
        rung=1,
        query_type="ate",
        alignment="commonsense",
        agents={"a": "m", "b": "n"},
        first_speaker="a",
        second_speaker="b",
        final_answer="yes",
    )


# --- 1. figures over exactly the selected debates ----------------------------------------------


def run_cli(args: list[str], monkeypatch, capsys) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["crawdad", *args])
    with pytest.raises(SystemExit) as exit_:
        cli.main()
    out, err = capsys.readouterr()
    return int(exit_.value.code or 0), out, err


def toml_for(url: str, path: Path) -> Path:
    return paper_toml(url, path, "[retry]\ninitial_wait = 0\n")


def test_resume_with_a_smaller_selection_counts_only_that_selection(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    """The tester's case: --limit 20, then --limit 5 on the same folder printed accuracies
    above 1 (the whole folder's correct answers over the 5 selected). Here 10, then 4."""
    data = write_cladder(tmp_path / "data", 10)
    questions = load_cladder(data).questions
    with FakeServer("ollama", paper_models(answer_key(questions))) as server:
        cfg = toml_for(server.url, tmp_path / "c.toml")
        base = ["run", "--data", str(data), "--out", str(tmp_path / "run"), "--config", str(cfg)]
        base += ["--set", "selection.order=file"]  # --limit takes the file's first questions
        code, _, _ = run_cli([*base, "--limit", "10", "--no-progress"], monkeypatch, capsys)
        assert code == 0
        code, out, _ = run_cli([*base, "--limit", "4", "--no-progress"], monkeypatch, capsys)
    assert code == 0
    first = [r for r in records(tmp_path / "run") if r["question_id"] < 4]
    acc = sum(r["final_answer"] == r["gold"] for r in first) / 4
    cons = sum(r["consensus"] for r in first) / 4
    assert "4/4 selected debates finished" in out
    assert f"final accuracy over these 4: {acc:.1%}, consensus rate {cons:.1%}" in out
    assert (
        "6 debates in the folder are for questions outside this selection "
        "(ids 4, 5, 6, 7, 8 and 1 more); not counted"
    ) in out


async def test_summary_and_progress_line_never_count_lines_of_other_questions(
    tmp_path: Path,
) -> None:
    ds = dataset(tmp_path, 8)
    out = tmp_path / "run"
    async with FakeServer("ollama", paper_models(answer_key(ds.questions))) as server:
        cfg = config(server.url, concurrency=4)
        await run(cfg, replace(ds, questions=ds.questions[:6]), out, progress=False)
        # A later selection that overlaps: 2 already done, 2 new; 4 lines are for others.
        summary = await run(cfg, replace(ds, questions=ds.questions[4:]), out, progress=False)
        setup, _ = build_setup(cfg)
    assert (summary.selected, summary.done_total, summary.already_done) == (4, 4, 2)
    assert summary.outside == 4
    mine = [r for r in records(out) if r["question_id"] >= 4]
    assert summary.correct == sum(r["final_answer"] == r["gold"] for r in mine)
    assert summary.consensus == sum(r["consensus"] for r in mine)
    postfix = Progress([Job(setup, RunStore(out), [], summary)], enabled=False).postfix(
        time.monotonic()
    )
    assert f"acc {100 * summary.correct / 4:.1f}%" in postfix
    assert f"cons {100 * summary.consensus / 4:.0f}%" in postfix
    for pool in {id(p.pool): p.pool for p in [*setup.agents.values(), setup.extractor]}.values():
        await pool.aclose()


def test_summary_lines_state_what_they_are_about(tmp_path: Path) -> None:
    s = RunSummary(out=tmp_path, selected=5, already_done=5, done_total=5, correct=4, outside=15)
    s.consensus = 3
    lines = s.lines()
    assert lines[0].startswith(f"5/5 selected debates finished in {tmp_path}")
    assert lines[1] == "final accuracy over these 5: 80.0%, consensus rate 60.0%"
    empty = RunSummary(out=tmp_path, selected=5, already_done=0)
    assert "no debate of this selection is finished yet" in empty.lines()[1]


# --- 2. a full disk ----------------------------------------------------------------------------


def failing_writes(after: int, code: int = errno.ENOSPC) -> Callable[[int, bytes], None]:
    """`_write_all` that works `after` times, then writes half of what it is given and fails."""
    real = crawdad.run.store._write_all
    calls = [0]

    def write(fd: int, data: bytes) -> None:
        calls[0] += 1
        if calls[0] <= after:
            return real(fd, data)
        os.write(fd, data[: len(data) // 2])
        raise OSError(code, os.strerror(code))

    return write


async def test_full_disk_stops_at_once_and_resume_finishes(tmp_path: Path, monkeypatch) -> None:
    n = 20
    ds = dataset(tmp_path, n)
    out = tmp_path / "run"
    async with FakeServer("ollama", paper_models(answer_key(ds.questions))) as s:
        cfg = config(s.url, concurrency=4)
        monkeypatch.setattr(crawdad.run.store, "_write_all", failing_writes(after=2))
        with pytest.raises(RunStopped) as stopped:
            await run(cfg, ds, out, progress=False)
        message = str(stopped.value)
        assert str(out / "debates.jsonl") in message
        assert "No space left on device (ENOSPC)" in message
        assert f"free space on the disk that holds {out}" in message
        assert "run the same command again to resume" in message
        summary = stopped.value.summary
        assert summary is not None and summary.interrupted
        assert "questions left: run the same command again to resume." in summary.lines()[-1]
        # The half-written batch was cut off again: every line is whole, and counted.
        before = (out / "debates.jsonl").read_bytes()
        written = records(out)
        assert before.endswith(b"\n") and len(written) == summary.finished
        assert summary.finished < n  # stopped at once, not after generating everything
        monkeypatch.undo()
        again = await run(cfg, ds, out, progress=False)
    assert again.done_total == n and again.already_done == summary.finished
    assert (out / "debates.jsonl").read_bytes().startswith(before)
    once_each(out, n)


def test_full_disk_on_the_command_line_exits_1_with_the_fix(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    data = write_cladder(tmp_path / "data", 10)
    questions = load_cladder(data).questions
    with FakeServer("ollama", paper_models(answer_key(questions))) as server:
        cfg = toml_for(server.url, tmp_path / "c.toml")
        args = ["run", "--data", str(data), "--out", str(tmp_path / "run"), "--config", str(cfg)]
        monkeypatch.setattr(
            crawdad.run.store, "_write_all", failing_writes(after=0, code=errno.EIO)
        )
        code, out, err = run_cli([*args, "--no-progress"], monkeypatch, capsys)
    assert code == 1
    assert "0/10 selected debates finished" in out  # the summary comes first
    assert err.startswith("Error: could not write") and "Input/output error (EIO)" in err
    assert f"check the disk that holds {tmp_path / 'run'}" in err
    assert "Traceback" not in out + err


def test_a_torn_write_that_cannot_be_cut_off_is_set_aside_on_the_next_open(
    tmp_path: Path, monkeypatch
) -> None:
    """If even cutting the file back fails, the torn tail is set aside when the folder is next
    opened, and the lines before it are untouched."""
    store = RunStore(tmp_path / "run")
    store.open(manifest())
    store.append([record(1), record(2)])
    good = store.debates_path.read_bytes()
    monkeypatch.setattr(crawdad.run.store, "_write_all", failing_writes(after=0))
    monkeypatch.setattr(os, "ftruncate", lambda fd, size: (_ for _ in ()).throw(OSError(5, "x")))
    with pytest.raises(StoreWriteError, match="No space left on device"):
        store.append([record(3)])
    store.close()
    monkeypatch.undo()
    assert store.debates_path.read_bytes() != good  # a torn half line is left behind
    scan = RunStore(tmp_path / "run").open(manifest())
    assert scan.finished == {"1", "2"} and not scan.bad_lines
    assert store.debates_path.read_bytes() == good
    assert (tmp_path / "run" / "debates.torn.jsonl").exists()


def test_full_disk_when_opening_the_folder_names_the_manifest(tmp_path: Path, monkeypatch) -> None:
    real = Folder.write_text

    def no_space(folder: Folder, name: str, text: str) -> Path:
        if name != "manifest.json":  # the folder's write test passes; the manifest finds it full
            return real(folder, name, text)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(Folder, "write_text", no_space)
    with pytest.raises(StoreWriteError) as e:
        RunStore(tmp_path / "run").open(manifest())
    assert f"could not write {tmp_path / 'run' / 'manifest.json'}: No space left" in str(e.value)
    assert "run the same command again to resume" in str(e.value)


# --- 3. garbage replies ------------------------------------------------------------------------


@pytest.mark.parametrize("api", ["ollama", "openai"])
@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("kind", GARBAGE_FAULTS)
async def test_each_garbage_body_is_a_transient_error_naming_the_server(
    api: str, stream: bool, kind: str
) -> None:
    faults = FaultPlan(rate=1.0, kinds=[kind])  # type: ignore[list-item]
    async with FakeServer(api, paper_models(), faults=faults) as server:  # type: ignore[arg-type]
        backend = OllamaBackend(server.url) if api == "ollama" else OpenAIBackend(server.url)
        request = ChatRequest(
            model="qwen3:32b", prompt="hi", temperature=0.6, top_p=0.95, max_tokens=64
        )
        try:
            await backend.chat(request.model_copy(update={"stream": stream}))
        except GarbledReply as e:
            assert e.transient and e.endpoint == server.url
            assert str(e).startswith(f"{server.url} answered 200 with a body that is not ")
            assert len(str(e).split(": ", 1)[1]) <= 80 + 40
        else:  # an OpenAI stream may carry an empty `data: {}` event harmlessly
            assert (api, kind, stream) == ("openai", "empty_json", True)
        finally:
            await backend.aclose()
        assert server.stats.faults == {kind: 1}


@pytest.mark.parametrize("api", ["ollama", "openai"])
async def test_garbage_replies_are_retried_and_the_run_finishes(tmp_path: Path, api: str) -> None:
    ds = dataset(tmp_path, 16)
    faults = FaultPlan(rate=0.25, kinds=list(GARBAGE_FAULTS), seed=2)
    models = paper_models(answer_key(ds.questions))
    async with FakeServer(api, models, faults=faults) as server:  # type: ignore[arg-type]
        cfg = config(server.url, api, concurrency=8)
        cfg.agents[1].stream = False  # one debater streamed, one not (and the extractor not)
        summary = await run(cfg, ds, tmp_path / "run", progress=False)
        assert sum(server.stats.faults.values()) >= 5
    assert summary.errored == 0 and summary.finished == 16
    assert any(t["attempts"] > 1 for r in records(tmp_path / "run") for t in r["turns"])


@pytest.mark.parametrize("api", ["ollama", "openai"])
async def test_persistent_garbage_is_recorded_on_the_debate_and_the_run_goes_on(
    tmp_path: Path, api: str
) -> None:
    ds = dataset(tmp_path, 6)
    out = tmp_path / "run"
    models = paper_models(answer_key(ds.questions))
    faults = FaultPlan(rate=1.0, kinds=["garbled", "html"], models=["deepseek-r1:32b"])
    async with FakeServer(api, models, faults=faults) as server:  # type: ignore[arg-type]
        cfg = config(server.url, api, concurrency=3)
        cfg.retry.attempts = 2
        summary = await run(cfg, ds, out, progress=False)
    assert summary.errored == 6 and summary.finished == 0  # no traceback, every debate tried
    for r in records(out):
        assert r["error_kind"] == "GarbledReply" and r["end"] == "error"
        assert f"{server.url} answered 200 with a body that is not" in r["error"]
    assert "answered 200 with a body that is not" in "\n".join(summary.lines())
    async with FakeServer(api, models) as server:  # type: ignore[arg-type]
        again = await run(config(server.url, api), ds, out, progress=False)
    assert again.done_total == 6


# --- 4. servers that hang or die ---------------------------------------------------------------


async def silent_server() -> tuple[asyncio.Server, str]:
    """Takes connections, reads, never answers."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(65536)
        await asyncio.Event().wait()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"


async def test_readiness_check_gives_up_on_a_silent_server_soon_and_names_it(
    tmp_path: Path, monkeypatch
) -> None:
    server, url = await silent_server()
    try:
        start = time.monotonic()
        report = await diagnose(config(url), limit=0.3)
        assert time.monotonic() - start < 2
        assert not report.ok
        assert f"{url} did not answer within 0.3 s: is it overloaded or hung?" in report.problems[0]
        monkeypatch.setattr("crawdad.doctor.READY_TIMEOUT", 0.3)  # what `run` checks with
        with pytest.raises(CrawdadError, match=rf"{url} did not answer within 0.3 s"):
            await run(config(url), dataset(tmp_path, 2), tmp_path / "run", progress=False)
    finally:
        server.close()


def test_doctor_names_a_server_that_takes_connections_and_never_answers(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    with socket.socket() as sock:  # listening, never accepting: connections queue, unanswered
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        monkeypatch.setattr("crawdad.doctor.READY_TIMEOUT", 0.3)
        start = time.monotonic()
        code, out, err = run_cli(
            ["doctor", "--config", str(toml_for(url, tmp_path / "c.toml"))], monkeypatch, capsys
        )
        assert time.monotonic() - start < 3
    assert code == 1
    assert f"{url}: not answering" in out
    assert f"{url} did not answer within 0.3 s: is it overloaded or hung?" in err


def test_stalled_requests_show_on_the_progress_line(tmp_path: Path) -> None:
    summary = RunSummary(out=tmp_path, selected=1, already_done=0)
    setup, _ = build_setup(config("http://127.0.0.1:8001"))
    endpoint = setup.agents["qwen3"].pool.endpoints[0]
    now = time.monotonic()
    for age in (75, 70):
        guard = StreamGuard()
        guard.last_progress = now - age
        endpoint.active.add(guard)
    bar = Progress([Job(setup, RunStore(tmp_path), [], summary)], False)
    assert bar.postfix(now).endswith("  stalled: 127.0.0.1:8001 (2 requests, 75 s)")
    endpoint.active.add(StreamGuard())  # one that streams: the others queue behind it
    assert "stalled" not in bar.postfix(time.monotonic())


async def test_hung_server_stops_the_run_naming_role_and_url_then_resume_finishes(
    tmp_path: Path, caplog
) -> None:
    ds = dataset(tmp_path, 8)
    out = tmp_path / "run"
    models = paper_models(answer_key(ds.questions))
    hang = FaultPlan(rate=1.0, kinds=["hang"], models=["deepseek-r1:32b"])
    async with FakeServer("ollama", models, faults=hang) as server:
        cfg = config(server.url, concurrency=4)
        cfg.retry.stall_report, cfg.retry.hung_stop = 0.2, 0.6
        start = time.monotonic()
        with (
            caplog.at_level(logging.WARNING, logger="crawdad"),
            pytest.raises(ServersStuck) as stopped,
        ):
            await run(cfg, ds, out, progress=False)
        assert time.monotonic() - start < 3
    message = str(stopped.value)
    assert (
        "every server of agent deepseek-r1 has had requests in flight and sent nothing" in message
    )
    assert server.url in message and "run the same command again to resume" in message
    assert f"stalled: {server.url.removeprefix('http://')} (" in caplog.text
    async with FakeServer("ollama", models) as server:
        again = await run(config(server.url), ds, out, progress=False)
    assert again.done_total == 8
    once_each(out, 8)


async def test_server_that_dies_stops_the_run_within_down_stop_and_resume_finishes(
    tmp_path: Path,
) -> None:
    n = 30
    ds = dataset(tmp_path, n)
    out = tmp_path / "run"
    latency = LatencyModel(base_seconds=0.005, capacity=8)
    async with FakeServer("ollama", paper_models(answer_key(ds.questions)), latency=latency) as s:
        cfg = config(s.url, concurrency=4)
        # Many attempts: without the watch, debates would retry for a long time.
        cfg.retry.attempts, cfg.retry.initial_wait, cfg.retry.max_wait = 100, 0.02, 0.05
        cfg.retry.down_wait, cfg.retry.down_stop = 0.02, 0.5
        task = asyncio.create_task(run(cfg, ds, out, progress=False))
        debates = out / "debates.jsonl"
        while not debates.exists() or debates.read_bytes().count(b"\n") < 5:  # noqa: ASYNC110
            await asyncio.sleep(0.01)
        await s.astop()
        died = time.monotonic()
        with pytest.raises(ServersStuck) as stopped:
            await task
        assert time.monotonic() - died < 0.5 + 1.5
        message = str(stopped.value)
        assert "has been unreachable for" in message and f"nothing answers at {s.url}" in message
        assert "run the same command again to resume" in message
        before = debates.read_bytes()
        kept = records(out)
        assert all(r["error"] is None for r in kept)  # the debates in flight were not recorded
        await s.astart()
        again = await run(config(s.url), ds, out, progress=False)
    assert again.already_done == len(kept) and again.done_total == n
    assert debates.read_bytes().startswith(before)
    once_each(out, n)
