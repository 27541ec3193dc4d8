"""Issue 51, the parts around the supervisor: serving timings that make no sense are refused
when the config is read; a server log's last line read boundedly and made safe for a terminal;
long waits (a file hashed, doctor's slow checks) said on a terminal or in lines; the report's
table of restarts and why. The supervisor's own freeze and start tests are in
tests/test_supervisor.py."""

from __future__ import annotations

import asyncio
import io
import os
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
import pytest

from crawdad.backends.base import ChatRequest, ChatResult
from crawdad.backends.guard import StreamGuard
from crawdad.backends.pool import ModelPool
from crawdad.config import ModelSpec, RetryConfig, RunConfig, ServingConfig, load_config
from crawdad.errors import ConfigError
from crawdad.records import ServerRestart
from crawdad.serving.base import ServerPlan
from crawdad.serving.causes import last_line, printable
from crawdad.serving.waits import BytesProgress, heartbeat
from crawdad.serving.weights import file_sha256


@pytest.mark.parametrize(
    ("serving", "message"),
    [
        ({"freeze_timeout": 0.0001}, r"serving\.freeze_timeout = 0\.0001 s would restart servers"),
        ({"freeze_timeout": 4}, r"set it to 5 s or more"),
        ({"check_interval": 3, "freeze_timeout": 10}, r"set it to 12 s or more .*check_interval"),
        ({"check_interval": 0.001}, r"serving\.check_interval = 0\.001 s: set it between"),
        ({"startup_timeout": 0.5}, r"serving\.startup_timeout = 0\.5 s is too short"),
    ],
)
def test_serving_timings_that_make_no_sense_are_refused(
    serving: dict[str, float], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(None, {"serving": serving})


def test_sensible_serving_timings_pass() -> None:
    config = load_config(None, {"serving": {"freeze_timeout": 5, "check_interval": 0.5}})
    assert config.serving.freeze_timeout == 5
    assert RunConfig().serving == ServingConfig()  # the defaults pass their own checks
    with pytest.raises(ValueError, match="freeze_timeout"):
        RunConfig().serving.freeze_timeout = 1.0  # checked on assignment too


def test_a_log_line_reaches_the_terminal_without_its_escapes() -> None:
    coloured = "\x1b[32mINFO\x1b[0m Loading weights\x1b]0;title\x07 \x07done\x00"
    assert printable(coloured) == "INFO Loading weights done"
    assert printable("x" * 500, limit=10) == "x" * 9 + "…"


def test_the_last_log_line_is_read_from_the_end_only(tmp_path: Path) -> None:
    log = tmp_path / "s0.log"
    log.write_bytes(b"early line\n" * 100_000 + b"INFO loading\rshards 1/4\rshards 2/4\n\n")
    assert last_line(tmp_path, "s0.log") == "shards 2/4"  # a progress bar's last state
    log.write_bytes(b"x" * 10_000 + b"\n")  # one line longer than what is read: its end
    assert last_line(tmp_path, "s0.log", limit=100) == "x" * 99
    assert last_line(tmp_path, "missing.log") == ""
    (tmp_path / "link.log").symlink_to(log)
    assert last_line(tmp_path, "link.log") == ""  # no link is followed
    os.mkfifo(tmp_path / "fifo.log")
    assert last_line(tmp_path, "fifo.log") == ""  # returns at once: no writer is waited for


def test_a_long_check_says_so_every_interval() -> None:
    lines: list[str] = []
    said = threading.Event()

    def say(line: str) -> None:
        lines.append(line)
        if len(lines) == 2:
            said.set()

    with heartbeat("checking vllm", say, every=0.01):
        assert said.wait(30)  # the block lasts until two lines came
    count = len(lines)
    assert all(line.startswith("still checking vllm: ") for line in lines)
    assert said.wait(0.05) and len(lines) == count  # nothing after the block


def test_hashing_reports_its_progress_in_lines_or_on_a_bar(tmp_path: Path) -> None:
    data = tmp_path / "w.gguf"
    data.write_bytes(b"\1" * (17 * 1024 * 1024))
    now = [0.0]

    def clock() -> float:
        now[0] += 10.0
        return now[0]

    lines: list[str] = []
    progress = BytesProgress("hashing w", terminal=False, say=lines.append, every=15, clock=clock)
    file_sha256(data, cache=tmp_path / "cache.json", progress=progress)
    # 10 s a chunk of 8 MiB on the (fake) clock: 15 s have passed at the third and last one
    assert lines == ["still hashing w: 18 MB of 18 MB, 20 s"]
    bar = io.StringIO()
    shown = BytesProgress("hashing w", terminal=True, say=lines.append)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("sys.stderr", bar)
        file_sha256(data, cache=tmp_path / "other.json", progress=shown)
        shown.close()
    assert "hashing w:" in bar.getvalue() and "/17.8M [" in bar.getvalue()  # bytes, scaled
    assert len(lines) == 1  # a bar, no more lines


def test_doctor_says_what_it_checks_and_a_line_while_it_lasts(tmp_path: Path) -> None:
    from crawdad.serving.commands import check_served

    gate = tmp_path / "gate"
    vllm = tmp_path / "vllm"  # a `vllm --version` that lasts until told
    vllm.write_text(f'#!/bin/sh\nwhile [ ! -e "{gate}" ]; do sleep 0.05; done\necho 0.9.9\n')
    vllm.chmod(0o755)
    config = load_config(
        None,
        {
            "agents": [
                {
                    "name": n,
                    "model": m,
                    "backend": "openai",
                    "serve": {
                        "engine": "vllm",
                        "weights": w,
                        "weights_gb": 1,
                        "executable": str(vllm),
                    },
                }
                for n, m, w in (
                    ("a", "qwen3:32b", "Qwen/Qwen3-32B"),
                    ("b", "qwen3:8b", "Qwen/Qwen3-8B"),
                )
            ],
        },
    )
    lines: list[str] = []

    def say(line: str) -> None:
        lines.append(line)
        if line.startswith("still checking vllm"):
            gate.touch()

    check = check_served({"": config}, gpus=[], say=say, every=0.05)
    assert lines[0] == f"checking vllm ({vllm}): is it installed, which version"
    assert any(line.startswith(f"still checking vllm ({vllm}): ") for line in lines)
    assert f"vllm    {vllm}: 0.9.9" in check.lines


def test_the_report_gives_each_restart_and_why(tmp_path: Path) -> None:
    from crawdad.analysis.metrics.servers import server_restarts
    from crawdad.analysis.servers_section import _restarts_table

    (tmp_path / "servers").mkdir()
    at = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
    lines = [
        ServerRestart(key="s0", at=at, reason="exited with code -9", downtime=40.2, silent_for=0.4),
        ServerRestart(
            key="s0",
            at=at,
            reason="frozen: no health answer and no tokens for 61 s",
            cause="out of memory",
            downtime=95.0,
            silent_for=61.0,
            back=False,
        ),
    ]
    text = "".join(r.model_dump_json() + "\n" for r in lines) + '{"key": "cut sh'
    (tmp_path / "servers" / "restarts.jsonl").write_text(text)
    table = server_restarts(tmp_path)
    assert table.to_dict("records") == [
        {
            "server": "s0",
            "at": "2026-05-01 12:00:00",
            "reason": "exited with code -9",
            "cause": "",
            "silent_s": 0.4,
            "downtime_s": 40.2,
            "outcome": "back",
        },
        {
            "server": "s0",
            "at": "2026-05-01 12:00:00",
            "reason": "frozen: no health answer and no tokens for 61 s",
            "cause": "out of memory",
            "silent_s": 61.0,
            "downtime_s": 95.0,
            "outcome": "given up",
        },
    ]
    shown = _restarts_table(table).shown
    assert isinstance(shown, pd.DataFrame) and "likely cause (its log)" in shown.columns


class Streaming:
    """A backend whose request sends one chunk, then waits until told to answer."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.chunked = asyncio.Event()
        self.answer = asyncio.Event()

    async def chat(self, request: ChatRequest, guard: StreamGuard) -> ChatResult:
        guard.feed("token")
        self.chunked.set()
        await self.answer.wait()
        return ChatResult(text="ok", endpoint=self.url)


async def test_the_run_tells_the_supervisor_when_a_server_last_sent_a_token() -> None:
    from crawdad.run.served import PoolListener

    spec = ModelSpec(model="m", base_urls=["http://127.0.0.1:9/v1", "http://127.0.0.1:10/v1"])
    pool = ModelPool(spec, Streaming, RetryConfig(attempts=1, initial_wait=0))  # type: ignore[arg-type]
    listener = PoolListener()
    listener.attach([pool], halt=lambda message: None, urls=[])
    fields = {"key": "s", "engine": "vllm", "weights": "w", "served_name": "m", "port": 9}
    more = {"models": ["agents.0"], "context_length": 4096, "command": ["vllm"]}
    server = ServerPlan.model_validate(fields | more)
    assert listener.last_progress(server) == 0.0  # nothing yet
    backend: Streaming = pool.endpoints[0].backend  # type: ignore[assignment]
    sent = time.monotonic()
    call = asyncio.create_task(
        pool.chat(ChatRequest(model="m", prompt="p", temperature=0, top_p=1, max_tokens=8))
    )
    await asyncio.wait_for(backend.chunked.wait(), 10)
    chunk = listener.last_progress(server)
    assert chunk >= sent  # a chunk of a request in flight
    backend.answer.set()
    await asyncio.wait_for(call, 10)
    assert listener.last_progress(server) >= chunk  # the whole answer, once none is in flight
    other = server.model_copy(update={"port": 10})
    assert listener.last_progress(other) == 0.0  # the other replica sent nothing
