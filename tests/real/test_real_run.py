"""`crawdad run` and `crawdad doctor` (the CLI, in a subprocess) against REAL servers.

Both agents and the extractor are SmolLM2-135M on one server, backend "openai". A 135M model
debates badly: the checks are on the records (complete, real, honest), not on the answers.
The server-killed test is last in this file: it kills the session's llama.cpp server and restarts
it. It runs on llama.cpp only: a SIGKILLed server looks the same to the client whichever it is (a
reset connection, mid-stream for the request being served, before the headers for the queued
one), and llama.cpp restarts in ~2 s where vLLM takes ~40 s.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from .realrun import (
    all_lines,
    check_records,
    cli_argv,
    cli_env,
    crawdad,
    describe_records,
    latest,
    manifest,
    run_args,
    write_config,
    write_data,
)
from .servers import RealServer, free_port

pytestmark = pytest.mark.real

MAX_TOKENS = 128


def test_run_writes_complete_records(real_server: RealServer, tmp_path: Path) -> None:
    agents = {"smol-a": real_server, "smol-b": real_server}
    config = write_config(
        tmp_path / "run.toml",
        agents=list(agents.items()),
        extractor=real_server,
        max_tokens=MAX_TOKENS,
        max_turns=4,
        concurrency=3,
    )
    data = write_data(tmp_path / "data", 2)
    out = tmp_path / "run"
    result = crawdad(*run_args(data, out, config), cwd=tmp_path)
    records = latest(out)
    detail = f"{result.describe()}\n{describe_records(records)}"
    assert result.returncode == 0, detail
    assert "2/2 selected debates finished" in result.stdout, detail
    assert len(all_lines(out)) == 2, detail  # no failed attempt was written
    problems = check_records(
        records,
        question_ids=["0", "1"],
        agents=agents,
        extractor=real_server,
        max_tokens=MAX_TOKENS,
        max_turns=4,
    )
    assert not problems, "\n".join(problems) + "\n" + detail
    # The extractor really ran on some turn (a 128-token budget cuts many answers short).
    extracted = [t for r in records.values() for t in r.turns if t.extraction.raw]
    assert extracted, f"no turn ended within {MAX_TOKENS} tokens: nothing was extracted\n{detail}"
    m = manifest(out)
    assert not m.simulated
    expected_version = "0.32.0" if real_server.kind == "vllm" else None
    assert m.servers == {real_server.base_url: expected_version}


def test_doctor_sees_both_servers_up(
    llamacpp: RealServer, vllm: RealServer, tmp_path: Path
) -> None:
    config = write_config(
        tmp_path / "both.toml", agents=[("a", llamacpp), ("b", vllm)], extractor=vllm
    )
    result = crawdad("doctor", "--config", str(config), cwd=tmp_path, timeout=120)
    assert result.returncode == 0, result.describe()
    out = result.stdout
    assert f"openai  {llamacpp.base_url}: up (version ?, 1 models)" in out, result.describe()
    assert f"openai  {vllm.base_url}: up (version 0.32.0, 1 models)" in out, result.describe()
    assert "All servers and models are ready." in out, result.describe()

    # And what it says when one is down and the other lacks the model.
    down = f"http://127.0.0.1:{free_port()}/v1"
    config.write_text(
        config.read_text()
        .replace(vllm.base_url, down, 1)  # agent b
        .replace(f'model = "{vllm.model}"', 'model = "no-such-model"')  # the extractor
    )
    bad = crawdad("doctor", "--config", str(config), cwd=tmp_path, timeout=120)
    assert bad.returncode == 1, bad.describe()
    assert f"{down}: down" in bad.stdout, bad.describe()
    assert f"{llamacpp.base_url}: up" in bad.stdout, bad.describe()
    assert "problem: agent b: nothing answers at" in bad.stderr, bad.describe()
    assert "problem: extractor: model 'no-such-model' is not on" in bad.stderr, bad.describe()


def _wait_for_lines(out: Path, n: int, proc: subprocess.Popen[str], timeout: float) -> None:
    t0 = time.monotonic()
    path = out / "debates.jsonl"
    while time.monotonic() - t0 < timeout:
        if path.exists() and len(path.read_bytes().splitlines()) >= n:
            return
        if proc.poll() is not None:
            return
        time.sleep(0.2)
    raise AssertionError(f"no debate finished within {timeout} s")


def test_judge_protocol_on_llamacpp(llamacpp: RealServer, tmp_path: Path) -> None:
    """The judge's verdict comes through the server's structured output (the judge schema, with
    only "verdict" allowed in the last round), and every debate ends with the judge's answer."""
    from crawdad.protocols.judge import JudgeReply

    agents = {"smol-a": llamacpp, "smol-b": llamacpp}
    config = write_config(
        tmp_path / "judge.toml",
        agents=list(agents.items()),
        extractor=llamacpp,
        judge=llamacpp,
        max_tokens=MAX_TOKENS,
        protocol={"kind": "judge", "rounds": 1, "stances": True},
        concurrency=2,
        store_prompts=True,
    )
    data = write_data(tmp_path / "data", 2)
    out = tmp_path / "judge-run"
    result = crawdad(*run_args(data, out, config), cwd=tmp_path)
    records = latest(out)
    detail = f"{result.describe()}\n{describe_records(records)}"
    assert result.returncode == 0, detail
    assert sorted(records) == ["0", "1"], detail
    for record in records.values():
        assert record.protocol == "judge" and record.error is None, detail
        roles = [t.role for t in record.turns]
        assert roles == ["initial", "argument", "verdict"], detail
        # MAC's sides: the opener argues its own answer, the other argues against it, and its
        # prompt names the answer it argues against.
        opening, reply = record.turns[:2]
        assert (opening.side, reply.side, opening.stance) == ("affirmative", "negative", None)
        assert reply.stance == {"yes": "no", "no": "yes"}.get(opening.answer or ""), detail
        if opening.answer is not None:
            told = f"the affirmative side answered {opening.answer}."
            assert told in (reply.prompt or ""), detail
        verdict = record.turns[-1]
        assert verdict.agent == "judge" and verdict.seen == [0, 1], detail
        assert all(t.text.strip() in (verdict.prompt or "") for t in record.turns[:2]), detail
        if verdict.stop_reason == "stop":  # a whole reply: the grammar made it the schema's JSON
            reply = JudgeReply.model_validate_json(verdict.text)
            assert reply.decision == "verdict", detail  # the last round allows nothing else
            assert record.final_answer == reply.answer == verdict.answer, detail
            assert verdict.extraction is not None and verdict.extraction.method == "strict"
        else:  # cut at the token budget: read by the extractor, or null with the reason
            assert verdict.extraction is not None and verdict.extraction.reason, detail


def test_server_killed_mid_run_then_resumed(llamacpp: RealServer, tmp_path: Path) -> None:
    """SIGKILL the server while debates are in flight: the run records what failed (honestly,
    with the error) and stops; after a restart the same command finishes the rest, and every
    question ends up recorded exactly once as finished."""
    real_server = llamacpp
    # Two in flight (concurrency 2): one finished when the kill lands, one cut by it, and one
    # more left to the resume.
    questions = ["0", "1", "2"]
    agents = {"smol-a": real_server, "smol-b": real_server}
    config = write_config(
        tmp_path / "kill.toml",
        agents=list(agents.items()),
        extractor=real_server,
        max_tokens=96,
        max_turns=2,
        concurrency=2,
        attempts=2,  # give up quickly while the server is down
        initial_wait=0.2,
        max_wait=1.0,
    )
    data = write_data(tmp_path / "data", len(questions))
    out = tmp_path / "run"
    argv = cli_argv(*run_args(data, out, config))

    proc = subprocess.Popen(
        argv, cwd=tmp_path, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        _wait_for_lines(out, 1, proc, timeout=240)
        finished_early = proc.poll() is not None
        real_server.kill()
        stdout, stderr = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    first = f"first run (exit {proc.returncode}):\n{stdout[-3000:]}\n{stderr[-5000:]}"
    assert not finished_early, f"the run ended before the kill: {first}"
    before = all_lines(out)
    ok_before = {str(r.question_id) for r in before if r.ok}
    failed_before = [r for r in before if not r.ok]
    assert ok_before, first
    assert len(ok_before) < len(questions), f"nothing was left to resume: {first}"
    for r in failed_before:  # failed debates say why, and make up no answer
        assert r.end == "error" and r.error and r.final_answer is None, r
    assert "questions left: run the same command again to resume" in stdout, first
    kept = {  # the lines of the debates finished before the kill, byte for byte
        line
        for line, record in zip(
            (out / "debates.jsonl").read_text().splitlines(), before, strict=True
        )
        if record.ok
    }

    real_server.restart()
    resumed = crawdad(*run_args(data, out, config), cwd=tmp_path)
    records = latest(out)
    detail = f"{first}\n{resumed.describe()}\n{describe_records(records)}"
    assert resumed.returncode == 0, detail
    assert f"{len(questions)}/{len(questions)} selected debates finished" in resumed.stdout, detail
    assert f"{len(ok_before)} were already done" in resumed.stdout, detail

    lines = all_lines(out)
    ok_ids = [str(r.question_id) for r in lines if r.ok]
    assert sorted(ok_ids) == questions, f"finished lines per question: {ok_ids}\n{detail}"
    after = set((out / "debates.jsonl").read_text().splitlines())
    assert kept <= after, "a debate finished before the kill was rewritten"
    for r in lines[len(before) :]:
        assert str(r.question_id) not in ok_before, f"question {r.question_id} ran twice"
    problems = check_records(
        records,
        question_ids=questions,
        agents=agents,
        extractor=real_server,
        max_tokens=96,
        max_turns=2,
    )
    assert not problems, "\n".join(problems) + "\n" + detail
