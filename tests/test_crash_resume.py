"""`crawdad run` as a user runs it, killed with SIGKILL or stopped with Ctrl-C, then resumed."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from crawdad.data.demo_questions import write_cladder
from crawdad.data.questions import load_cladder
from crawdad.demo import answer_key
from crawdad.fake import FakeServer, FaultPlan, LatencyModel, paper_models
from crawdad.fake.behaviour import FakeModel, FakeReply, FakeRequest, as_models
from crawdad.fake.faults import GARBAGE_FAULTS
from crawdad.protocols import first_speaker
from crawdad.run.store import read_jsonl_ids
from tests.conftest import paper_toml

N = 40


def _config(tmp_path: Path, url: str) -> Path:
    head = "seed = 11\nconcurrency = 6\n[retry]\ninitial_wait = 0\n"
    return paper_toml(url, tmp_path / "crawdad.toml", head)


def crawdad(data: Path, config: Path, out: Path) -> subprocess.Popen[str]:
    cmd = [
        sys.executable,
        "-m",
        "crawdad",
        "run",
        "--data",
        str(data),
        "--out",
        str(out),
        "--config",
        str(config),
        "--no-progress",
    ]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def lines_in(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def wait_until(proc: subprocess.Popen[str], ready: Callable[[], bool], limit: float = 60.0) -> None:
    """Poll until `ready()` while the run goes on: signals land mid-run, not by timer."""
    deadline = time.monotonic() + limit
    while not ready():
        assert proc.poll() is None, "the run ended before it was interrupted"
        assert time.monotonic() < deadline, "the run made no progress"
        time.sleep(0.005)


class RequestBudget:
    """Wraps a server's models: once `left` requests have been answered, every further one
    hangs (until the server stops). A run can then write at most `left` records, however fast
    the machine; `held` says when it is stuck waiting."""

    def __init__(self, models: dict[str, Any]) -> None:
        self.left = 0
        self.held = 0
        self._lock = threading.Lock()
        self.models = {name: self._wrap(as_models({name: m})[name]) for name, m in models.items()}

    def _wrap(self, model: FakeModel) -> Callable[[FakeRequest], FakeReply]:
        def reply(request: FakeRequest) -> FakeReply:
            with self._lock:
                if self.left <= 0:
                    self.held += 1
                    return FakeReply(fault="hang")
                self.left -= 1
            return model.reply(request)

        return reply


def test_sigkill_ten_times_then_resume_records_every_question_once(tmp_path: Path) -> None:
    data = write_cladder(tmp_path / "data", N)
    budget = RequestBudget(paper_models(answer_key(load_cladder(data).questions)))
    out = tmp_path / "run"
    debates = out / "debates.jsonl"
    rng = random.Random(5)
    with FakeServer("ollama", budget.models, latency=LatencyModel(capacity=8)) as server:
        config = _config(tmp_path, server.url)
        for _ in range(10):
            # A record needs at least two answers (a debater's and the extractor's): with at
            # most 6 answers per process, ten kills leave most of the 40 questions undone.
            held, budget.left = budget.held, rng.randint(0, 6)
            proc = crawdad(data, config, out)
            deadline = time.monotonic() + 60
            while budget.held == held:  # killed once it waits on a held request
                assert proc.poll() is None, "the run ended before it was killed"
                assert time.monotonic() < deadline, "the run made no progress"
                time.sleep(0.005)
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        assert lines_in(debates) < N
        budget.left = 10**9
        before = debates.read_bytes()
        proc = crawdad(data, config, out)
        _stdout, stderr = proc.communicate(timeout=120)
        assert proc.returncode == 0, stderr
        after = debates.read_bytes()
        # Nothing written before was lost or altered (a torn tail is moved aside, never rewritten).
        torn = out / "debates.torn.jsonl"
        kept = before if not torn.exists() else before[: before.rfind(b"\n") + 1]
        assert after.startswith(kept)
        ids = read_jsonl_ids(debates)
        assert sorted(ids, key=int) == [str(i) for i in range(N)]  # every question exactly once
        # The same first speakers as an uninterrupted run with the same seed.
        names = ["qwen3", "deepseek-r1"]
        for line in debates.read_text().splitlines():
            record = json.loads(line)
            assert record["first_speaker"] == first_speaker(11, record["question_id"], names)
            assert record["error"] is None


def test_ctrl_c_stops_cleanly_and_says_how_to_resume(tmp_path: Path) -> None:
    data = write_cladder(tmp_path / "data", N)
    budget = RequestBudget(paper_models(answer_key(load_cladder(data).questions)))
    # A debate takes 2 to 8 requests (2 to 4 responses, each read by the extractor) and at most
    # 6 run at once: 72 answers finish at least 3 debates and at most 36 of the 40, so the run
    # is always stuck, mid-run, when the signal comes, however fast or busy the machine.
    budget.left = 72
    out = tmp_path / "run"
    with FakeServer("ollama", budget.models, latency=LatencyModel(capacity=8)) as server:
        config = _config(tmp_path, server.url)
        proc = crawdad(data, config, out)
        wait_until(proc, lambda: budget.held > 0 and lines_in(out / "debates.jsonl") >= 3)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=30)
        assert proc.returncode == 130, stderr
        assert "run the same command again to resume" in stderr
        done = read_jsonl_ids(out / "debates.jsonl")
        assert 3 <= len(done) < N and len(done) == len(set(done))
        assert "debates finished" in stdout
        budget.left = 10**9
        proc = crawdad(data, config, out)
        stdout, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0
    assert (
        f"{N}/{N} selected debates finished" in stdout
        and f"{len(done)} were already done" in stdout
    )
    assert sorted(read_jsonl_ids(out / "debates.jsonl"), key=int) == [str(i) for i in range(N)]


def test_sigkill_amid_garbage_and_hanging_replies_then_resume(tmp_path: Path) -> None:
    """Kills land while garbled replies are retried and hung requests wait for their timeout:
    the debates on disk stay byte for byte, and the same command finishes the run."""
    n = 20
    data = write_cladder(tmp_path / "data", n)
    questions = load_cladder(data).questions
    faults = FaultPlan(rate=0.15, kinds=[*GARBAGE_FAULTS, "hang"], seed=4)
    latency = LatencyModel(base_seconds=0.01, per_token_seconds=0.00001, capacity=8)
    budget = RequestBudget(paper_models(answer_key(questions)))
    budget.left = 36  # at most 18 of the 20 debates can finish (each takes 2 answers or more)
    with FakeServer("ollama", budget.models, latency=latency, faults=faults) as server:
        config = tmp_path / "crawdad.toml"
        config.write_text(
            "seed = 11\nconcurrency = 6\n[retry]\ninitial_wait = 0\nattempts = 10\n"
            + "".join(
                f'[[agents]]\nname = "{a}"\nmodel = "{m}"\nbase_urls = ["{server.url}"]\n'
                "timeout = 0.5\n"
                for a, m in (("qwen3", "qwen3:32b"), ("deepseek-r1", "deepseek-r1:32b"))
            )
            + f'[extractor]\nbase_urls = ["{server.url}"]\ntimeout = 0.5\n'
        )
        out = tmp_path / "run"
        debates = out / "debates.jsonl"
        proc = crawdad(data, config, out)  # one kill: the test above kills ten times
        wait_until(proc, lambda: lines_in(debates) >= 4 or budget.held > 0)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        before = debates.read_bytes()
        budget.left = 10**9
        proc = crawdad(data, config, out)
        _stdout, stderr = proc.communicate(timeout=120)
        assert sum(server.stats.faults.values()) > 3
    assert proc.returncode == 0, stderr
    assert "Traceback" not in stderr
    kept = before[: before.rfind(b"\n") + 1]
    assert debates.read_bytes().startswith(kept)
    assert sorted(read_jsonl_ids(debates), key=int) == [str(i) for i in range(n)]
