"""The command line as a user meets it: messages, exit codes, output."""

from __future__ import annotations

import fcntl
import functools
import http.server
import json
import os
import socket
import subprocess
import sys
import threading
import zipfile
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner, Result

from crawdad.cli import app
from crawdad.data.questions import load_cladder
from crawdad.demo import answer_key
from crawdad.errors import ConfigError
from crawdad.fake import FakeServer, FaultPlan, paper_models
from tests.conftest import paper_toml


def crawdad(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "crawdad", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def toml_for(url: str, path: Path, extra: str = "") -> Path:
    return paper_toml(url, path, extra)


def test_bad_config_key_exits_1_with_the_key(tiny_cladder: Path, tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text("[protocol]\nmax_turn = 4\n")
    result = crawdad(
        "run", "--data", str(tiny_cladder), "--out", str(tmp_path / "r"), "--config", str(cfg)
    )
    assert result.returncode == 1
    assert "protocol.max_turn: unknown key (did you mean 'max_turns'?)" in result.stderr
    assert "Traceback" not in result.stderr


def test_bad_dataset_exits_1_naming_the_question(tiny_cladder: Path, tmp_path: Path) -> None:
    path = tiny_cladder / "tiny-q-balanced.json"
    qs = json.loads(path.read_text())
    qs[2]["meta"]["model_id"] = 42
    path.write_text(json.dumps(qs))
    result = crawdad("run", "--data", str(tiny_cladder), "--out", str(tmp_path / "r"))
    assert result.returncode == 1
    assert (
        "tiny-q-balanced.json, question 2: meta.model_id is 42; tiny-meta-models.json has no"
        in result.stderr
    )


def test_server_down_exits_1_with_fix(tiny_cladder: Path, tmp_path: Path) -> None:
    cfg = toml_for("http://127.0.0.1:9", tmp_path / "c.toml")
    result = crawdad(
        "run", "--data", str(tiny_cladder), "--out", str(tmp_path / "r"), "--config", str(cfg)
    )
    assert result.returncode == 1
    # not up yet, or not running: the message says both, and how to wait (not "install it")
    said = " ".join(result.stderr.split())
    assert "nothing answers at http://127.0.0.1:9 (connection refused)" in said
    assert "is the server still starting? Wait for it: `crawdad wait-for" in said
    assert "If none is running, start one: `ollama serve`" in said
    assert "fix: ollama serve" not in said


def test_usage_error_is_not_a_traceback(tmp_path: Path) -> None:
    result = crawdad("run", "--out", str(tmp_path))
    assert result.returncode == 2 and "--data" in result.stderr and "Traceback" not in result.stderr


def test_run_show_doctor_and_set_override(tiny_cladder: Path, tmp_path: Path) -> None:
    questions = load_cladder(tiny_cladder).questions
    with FakeServer("ollama", paper_models(answer_key(questions))) as server:
        cfg = toml_for(server.url, tmp_path / "c.toml")
        doctor = crawdad("doctor", "--config", str(cfg))
        assert doctor.returncode == 0 and "All servers and models are ready." in doctor.stdout
        assert f"ollama  {server.url}: up (version 0.12.6" in doctor.stdout
        bad = crawdad("doctor", "--config", str(cfg), "--set", "agents.1.model=nope:1b")
        assert bad.returncode == 1 and "ollama pull nope:1b" in bad.stderr
        out = tmp_path / "run"
        result = crawdad(
            "run",
            "--data",
            str(tiny_cladder),
            "--out",
            str(out),
            "--config",
            str(cfg),
            "--rung",
            "1",
            "--no-progress",
        )
        assert result.returncode == 0, result.stderr
        assert "2/2 selected debates finished" in result.stdout
    shown = crawdad("show", str(out), "0")
    assert shown.returncode == 0
    asked = next(q for q in questions if str(q.question_id) == "0").question.strip()
    assert f"Question: {asked}" in shown.stdout and "None" not in shown.stdout.split("Round")[0]
    assert (
        "gold answer: yes" in shown.stdout
        and "— Round 0 by " in shown.stdout
        and "Reasoning:" in shown.stdout
    )
    assert "Thinking:" not in shown.stdout
    assert "Thinking:" in crawdad("show", str(out), "0", "--thinking").stdout
    missing = crawdad("show", str(out), "5")
    assert missing.returncode == 1 and "question 5 is not in" in missing.stderr
    assert "its question ids are: " in missing.stderr and "3" in missing.stderr.split("ids are")[1]


def test_failed_debates_exit_3_and_a_resume_retries_them(
    tiny_cladder: Path, tmp_path: Path
) -> None:
    """A server error on every request of one model: the run finishes what it can, lists the
    failures and exits 3 (a script notices); with the server fixed, the same command retries."""
    questions = load_cladder(tiny_cladder).questions
    models = paper_models(answer_key(questions))
    broken = FaultPlan(rate=1.0, kinds=["http_500"], models=["granite3.3:2b"])
    out = tmp_path / "run"
    retry = "[retry]\nattempts = 1\ninitial_wait = 0\n"
    args = ["run", "--data", str(tiny_cladder), "--out", str(out), "--rung", "1", "--no-progress"]
    with FakeServer("ollama", models, faults=broken) as server:
        cfg = toml_for(server.url, tmp_path / "c.toml", retry)
        failed = crawdad(*args, "--config", str(cfg))
    assert failed.returncode == 3, failed.stderr
    assert "0/2 selected debates finished" in failed.stdout and "2 debates failed" in failed.stdout
    assert "answered 500" in failed.stdout
    with FakeServer("ollama", models) as server:
        cfg = toml_for(server.url, tmp_path / "c.toml", retry)
        fixed = crawdad(*args, "--config", str(cfg))
    assert fixed.returncode == 0, fixed.stderr
    assert "2/2 selected debates finished" in fixed.stdout


def test_data_info_counts(tiny_cladder: Path) -> None:
    result = crawdad("data", "info", str(tiny_cladder))
    assert result.returncode == 0
    assert (
        "6 questions" in result.stdout
        and "alignment: anticommonsense=2, commonsense=2, nonsense=2" in result.stdout
    )


@pytest.fixture
def http_folder(tmp_path: Path):
    folder = tmp_path / "www"
    folder.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield folder, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_data_fetch_downloads_and_checks(tiny_cladder: Path, tmp_path: Path, http_folder) -> None:
    folder, base = http_folder
    with zipfile.ZipFile(folder / "cladder-v1.zip", "w") as zf:
        for p in tiny_cladder.iterdir():
            zf.write(p, f"cladder-v1/{p.name}")
    result = crawdad(
        "data", "fetch", "--dest", str(tmp_path / "data"), "--url", f"{base}/cladder-v1.zip"
    )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "data" / "cladder-v1.zip").exists() and "6 questions" in result.stdout


def test_data_fetch_without_network_explains(tmp_path: Path, http_folder) -> None:
    _, base = http_folder
    result = crawdad(
        "data", "fetch", "--dest", str(tmp_path / "data"), "--url", f"{base}/missing.zip"
    )
    assert result.returncode == 1
    assert "could not download CLadder" in result.stderr and "--data PATH" in result.stderr
    assert not list((tmp_path / "data").glob("*"))


def _analyze_cases(tmp_path: Path) -> dict[str, tuple[list[str], str]]:
    from crawdad.analysis.synthetic_runs import write_synthetic_run

    (tmp_path / "empty").mkdir()
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("x")
    write_synthetic_run(tmp_path / "nodebates", 0)
    (tmp_path / "nodebates" / "debates.jsonl").unlink()
    write_synthetic_run(tmp_path / "damaged", 2)
    (tmp_path / "damaged" / "manifest.json").write_text('{"crawdad_version": ')
    good = write_synthetic_run(tmp_path / "good", 2)
    (tmp_path / "afile").write_text("x")
    return {
        "missing": ([str(tmp_path / "nope")], "does not exist"),
        "empty": ([str(tmp_path / "empty")], "is empty: it is not a crawdad run folder"),
        "not a run": ([str(tmp_path / "other")], "has no manifest.json and no debates.jsonl"),
        "no debates": ([str(tmp_path / "nodebates")], "has no debates yet"),
        "damaged": ([str(tmp_path / "damaged")], "manifest.json cannot be read"),
        "out is a file": (
            [str(good), "--out", str(tmp_path / "afile")],
            "is a file: give a folder",
        ),
        "out under a file": (
            [str(good), "--out", str(tmp_path / "afile" / "report")],
            "choose another --out folder",
        ),
    }


def test_analyze_failures_are_messages(tmp_path: Path, cli) -> None:
    for name, (args, message) in _analyze_cases(tmp_path).items():
        code, _, err = cli("analyze", *args)
        assert code == 1, name
        assert err.startswith("Error: ") and message in err, (name, err)
    assert not (tmp_path / "nope").exists()  # no report folder made for a wrong run folder


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write to read-only folders")
def test_analyze_read_only_out(tmp_path: Path, cli) -> None:
    from crawdad.analysis.synthetic_runs import write_synthetic_run

    good = write_synthetic_run(tmp_path / "good", 2)
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    code, _, err = cli("analyze", str(good), "--out", str(ro))
    assert code == 1 and "cannot write the report to" in err


def test_analyze_a_run_still_being_written(tmp_path: Path, monkeypatch, cli) -> None:
    import crawdad.analysis.report_files
    from crawdad.analysis.synthetic_runs import write_synthetic_run

    monkeypatch.setattr(
        crawdad.analysis.report_files.ReportWriter,
        "draw",
        lambda self, workers=1, progress=None: None,
    )  # speed only
    run = write_synthetic_run(tmp_path / "r", 3, retry_errors=False)
    with (run / ".lock").open("w") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)  # as a `crawdad run` holds it
        code, out, err = cli("analyze", str(run), "--out", str(tmp_path / "o"))
    assert code == 0 and "report written" in out
    said = "this run was still being written when analysed: 3 debates so far"
    assert f"warning: {said}" in err
    assert said in (tmp_path / "o" / "report.md").read_text()


def test_show_on_a_folder_that_is_not_a_run(tmp_path: Path, cli) -> None:
    code, _, err = cli("show", str(tmp_path / "nope"), "1")
    assert code == 1 and "nope does not exist" in err
    (tmp_path / "other").mkdir()
    code, _, err = cli("show", str(tmp_path / "other"), "1")
    assert code == 1 and "is empty: it is not a crawdad run folder" in err


def test_run_refuses_records_without_manifest_until_force(
    tiny_cladder: Path, tmp_path: Path, cli
) -> None:
    questions = load_cladder(tiny_cladder).questions
    out = tmp_path / "run"
    with FakeServer("ollama", paper_models(answer_key(questions))) as server:
        cfg = toml_for(server.url, tmp_path / "c.toml")
        args = ["run", "--data", str(tiny_cladder), "--out", str(out), "--config", str(cfg)]
        args += ["--rung", "1", "--no-progress"]
        assert cli(*args)[0] == 0
        (out / "manifest.json").unlink()
        code, _, err = cli(*args, "--seed", "5")
        assert code == 1
        assert f"{out} has 2 debate line(s) in debates.jsonl but no manifest.json" in err
        assert "use another --out folder, or pass --force" in err
        code, out_text, _ = cli(*args, "--seed", "5", "--force")
    assert code == 0 and "2/2 selected debates finished" in out_text
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["config"]["seed"] == 5 and "was missing" in manifest["notes"][0]
    # the two seed-0 debates ran again under seed 5; analysis sees one run
    seeds = [json.loads(line)["seed"] for line in (out / "debates.jsonl").read_text().splitlines()]
    assert seeds == [0, 0, 5, 5]


# ---- every expected failure: a message naming what to fix, the right exit code, no traceback

cli_runner = CliRunner()


def invoke(*args: str) -> Result:
    result = cli_runner.invoke(app, list(args))
    assert "Traceback" not in result.output
    # an expected failure ends in SystemExit (typer.Exit); anything else escaped as a bug
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result


def flat(result: Result) -> str:
    """The output with rich's error box and line wrapping removed."""
    return " ".join(result.output.replace("│", " ").replace("╭", " ").replace("╰", " ").split())


def run_args(tmp_path: Path, *args: str) -> list[str]:
    return ["run", "--data", str(tmp_path / "nodata"), "--out", str(tmp_path / "r"), *args]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "is a folder, not a file"),
        (b"x = \n", "is not valid TOML"),
        (b"\xff\xfe seed = 1\n", "is not a UTF-8 text file"),
    ],
    ids=["folder", "toml", "utf8"],
)
def test_bad_config_file_is_named(tmp_path: Path, content: bytes | None, message: str) -> None:
    path = tmp_path / "c.toml"
    if content is None:
        path.mkdir()
    else:
        path.write_bytes(content)
    result = invoke(*run_args(tmp_path, "--config", str(path)))
    assert result.exit_code == 1 and message in result.output and str(path) in result.output
    missing = invoke(*run_args(tmp_path, "--config", str(tmp_path / "nope.toml")))
    assert missing.exit_code == 1 and "config file not found" in missing.output


@pytest.mark.parametrize(
    ("sets", "both"),
    [
        (["seed=1", "seed=2"], ("--set seed=1", "--set seed=2")),
        (["agents=x", "agents.0.model=y"], ("--set agents=x", "--set agents.0.model=y")),
        (
            ["protocol.max_turns=3", "protocol=5"],
            ("--set protocol.max_turns=3", "--set protocol=5"),
        ),
    ],
)
def test_clashing_sets_name_both(tmp_path: Path, sets: list[str], both: tuple[str, str]) -> None:
    result = invoke(*run_args(tmp_path, *[a for s in sets for a in ("--set", s)]))
    assert result.exit_code == 2
    assert all(b in result.output for b in both) and "give each setting once" in result.output


def test_set_clashing_with_a_flag(tmp_path: Path) -> None:
    result = invoke(*run_args(tmp_path, "--seed", "1", "--set", "seed=2"))
    assert result.exit_code == 2 and "--seed 1 and --set seed=2 both set seed" in result.output


@pytest.mark.parametrize(
    ("item", "code", "message"),
    [
        ("protocl.max_turns=3", 1, "protocl: unknown key (did you mean 'protocol'?)"),
        ("agents.0.temprature=0.2", 1, "agents.0.temprature: unknown key"),
        ("agents.2.model=x", 2, "--set agents.2.model=x: agents are numbered 0..1"),
        ("agents.0=x", 2, "--set agents.0=x: set one field of an agent"),
        ("novalue", 2, "--set needs KEY=VALUE"),
    ],
)
def test_bad_set_names_the_key(tmp_path: Path, item: str, code: int, message: str) -> None:
    result = invoke(*run_args(tmp_path, "--set", item))
    assert result.exit_code == code and message in result.output


def test_bad_values_name_their_origin_not_the_file(tmp_path: Path) -> None:
    """A bad flag value is not blamed on the config file; the file's own errors are."""
    cfg = tmp_path / "c.toml"
    cfg.write_text("concurrency = 4\n[retry]\nattempts = 0\n")
    result = invoke(
        *run_args(
            tmp_path,
            "--config",
            str(cfg),
            "--set",
            "protocol.max_turns=0",
            "--schedule",
            "random",
            "--concurrency",
            "5000",
        )
    )
    assert result.exit_code == 1
    out = result.output
    assert "--set protocol.max_turns=0 is not a valid setting:\n  - protocol.max_turns:" in out
    assert "--schedule random is not a valid setting:\n  - schedule:" in out
    assert "--concurrency 5000 is not a valid setting:\n  - concurrency:" in out
    assert f"{cfg} is not a valid crawdad config:\n  - retry.attempts:" in out
    zero = invoke(*run_args(tmp_path, "--config", str(cfg), "--concurrency", "0"))
    assert zero.exit_code == 2 and "--concurrency" in flat(zero) and str(cfg) not in zero.output


def test_bad_url_in_set_names_key_and_fix(tmp_path: Path) -> None:
    result = invoke(*run_args(tmp_path, "--set", 'extractor.base_urls=["localhost:11434"]'))
    assert result.exit_code == 1
    assert "extractor.base_urls.0: 'localhost:11434' has no scheme" in result.output
    assert "write 'http://localhost:11434'" in result.output


def test_openai_url_without_v1_warns(tmp_path: Path) -> None:
    result = invoke(
        *run_args(
            tmp_path,
            "--set",
            "extractor.backend=openai",
            "--set",
            'extractor.base_urls=["http://h:8000"]',
        )
    )
    assert "did you mean 'http://h:8000/v1'?" in result.output
    assert result.exit_code == 1 and "dataset not found" in result.output


def test_debug_shows_the_traceback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    args = run_args(tmp_path, "--config", str(tmp_path))
    result = cli_runner.invoke(app, ["--debug", *args])
    assert isinstance(result.exception, ConfigError)
    monkeypatch.setenv("CRAWDAD_DEBUG", "1")
    assert isinstance(cli_runner.invoke(app, args).exception, ConfigError)
    monkeypatch.setenv("CRAWDAD_DEBUG", "")
    assert invoke(*args).exit_code == 1


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--limit", "0"], "--limit"),
        (["--limit", "-3"], "--limit"),
        (["--concurrency", "0"], "--concurrency"),
    ],
)
def test_demo_bad_numbers_are_usage_errors(tmp_path: Path, args: list[str], flag: str) -> None:
    result = invoke("demo", "--out", str(tmp_path / "d"), *args)
    assert result.exit_code == 2 and flag in flat(result)
    assert not (tmp_path / "d").exists()


def test_out_that_is_a_file(tmp_path: Path) -> None:
    file = tmp_path / "f.txt"
    file.write_text("x")
    for args in (
        ["demo", "--out", str(file)],
        ["run", "--data", str(tmp_path), "--out", str(file)],
        ["data", "fetch", "--dest", str(file)],
    ):
        result = invoke(*args)
        assert result.exit_code == 1 and f"{file} is a file: give a folder" in result.output


def test_run_data_problems_are_named(tiny_cladder: Path, tmp_path: Path) -> None:
    out = str(tmp_path / "r")
    missing = invoke("run", "--data", str(tmp_path / "nope"), "--out", out)
    assert missing.exit_code == 1 and "dataset not found" in missing.output
    empty = tmp_path / "empty"
    empty.mkdir()
    folder = invoke("run", "--data", str(empty), "--out", out)
    assert folder.exit_code == 1 and f"{empty}: no questions file" in folder.output
    archive = tmp_path / "x.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("readme.txt", "hi")
    zipped = invoke("run", "--data", str(archive), "--out", out)
    assert zipped.exit_code == 1 and str(archive) in zipped.output
    info = invoke("data", "info", str(empty))
    assert info.exit_code == 1 and f"{empty}: no questions file" in info.output
    member = invoke(
        "run", "--data", str(tiny_cladder), "--out", out, "--questions-file", "nope.json"
    )
    assert member.exit_code == 1 and "'nope.json' not found" in member.output


def test_show_and_analyze_name_the_folder(tmp_path: Path) -> None:
    missing = invoke("show", str(tmp_path / "nope"), "3")
    assert missing.exit_code == 1 and "nope does not exist" in missing.output
    not_run = invoke("show", str(tmp_path), "3")
    assert not_run.exit_code == 1 and "it is not a crawdad run folder" in not_run.output
    analyzed = invoke("analyze", str(tmp_path / "nope"))
    assert analyzed.exit_code == 1 and "nope does not exist" in analyzed.output
    assert not (tmp_path / "nope").exists()  # nothing written for a run that is not there
    not_run = invoke("analyze", str(tmp_path))
    assert not_run.exit_code == 1 and "it is not a crawdad run folder" in not_run.output
    assert not (tmp_path / "report").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--port", "70000"], "--port"),
        (["--kind", "vllm"], "use ollama or openai"),
        (["--latency", "-1"], "--latency"),
        (["--capacity", "0"], "--capacity"),
        (["--fail-rate", "1.5"], "--fail-rate"),
        (["--fail-rate", "0.1", "--faults", "bogus"], "unknown fault kind bogus; the kinds are"),
        (["--faults", "hang"], "set --fail-rate too"),
    ],
)
def test_fake_server_bad_options(args: list[str], message: str) -> None:
    result = invoke("fake-server", "--port", "0", *args)
    assert result.exit_code == 2 and message in flat(result)


def test_fake_server_port_in_use() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = invoke("fake-server", "--port", str(port))
    assert result.exit_code == 1
    assert f"port {port} on 127.0.0.1 is already in use" in result.output
    assert "--port 0" in result.output
    unknown = invoke("fake-server", "--port", "0", "--fail-rate", "0.5", "--fail-model", "x:1b")
    assert unknown.exit_code == 1 and "--fail-model x:1b" in unknown.output


def test_fake_server_injects_the_faults_it_announces() -> None:
    """`crawdad fake-server` with faults: the banner says what it serves and how to use it,
    every request fails as asked, and `kill` stops it cleanly."""
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "crawdad", "fake-server", "--port", "0", "--latency", "0"),
            *("--fail-rate", "1", "--faults", "http_500", "--seed", "3"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline() for _ in range(4)]
        url = lines[0].split(" server at ")[1].split()[0]
        assert "qwen3:32b, deepseek-r1:32b, granite3.3:2b" in lines[1]
        assert "100% of generation requests fail with http_500 (fault seed 3)" in lines[3]
        body = {"model": "qwen3:32b", "messages": [{"role": "user", "content": "hi"}]}
        reply = httpx.post(f"{url}/api/chat", json={**body, "stream": False}, timeout=10)
        assert reply.status_code == 500
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=10)
    assert proc.returncode == 0 and "Traceback" not in err


def test_every_command_has_clean_help() -> None:
    for args in (
        [],
        ["run"],
        ["doctor"],
        ["show"],
        ["analyze"],
        ["demo"],
        ["fake-server"],
        ["data", "fetch"],
        ["data", "info"],
    ):
        result = invoke(*args, "--help")
        assert result.exit_code == 0 and "--help" in result.output


def test_wait_for_waits_for_a_starting_server_and_says_when_none_came(tmp_path: Path) -> None:
    from crawdad.doctor import wait_for
    from crawdad.errors import CrawdadError

    now = [0.0]
    answered_at = {"http://a:1": 2.0, "http://b:2": 5.0}  # when each starts answering
    slept: list[float] = []

    def sleep(s: float) -> None:
        slept.append(s)
        now[0] += s

    took = wait_for(
        list(answered_at),
        60,
        probe=lambda url: now[0] >= answered_at[url],
        clock=lambda: now[0],
        sleep=sleep,
    )
    assert took == pytest.approx({"http://a:1": 2.0, "http://b:2": 5.0}, abs=0.2)
    assert max(slept) <= 0.2  # a short poll, not a long sleep
    now[0] = 0.0
    with pytest.raises(
        CrawdadError, match=r"nothing answers at http://b:2 after 3 s \(or only 503"
    ):
        wait_for(["http://b:2"], 3, probe=lambda url: False, clock=lambda: now[0], sleep=sleep)


def test_wait_for_from_the_command_line(unused_tcp_port: int) -> None:
    with FakeServer("ollama", {}) as server:  # up: said at once, with its address
        host = server.url.removeprefix("http://")
        result = CliRunner().invoke(app, ["wait-for", host, "--timeout", "10"])
        assert result.exit_code == 0, result.output
        assert f"{server.url} answers (after " in result.output
    result = crawdad("wait-for", f"127.0.0.1:{unused_tcp_port}", "--timeout", "0.3")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    said = " ".join(result.stderr.split())
    assert f"nothing answers at http://127.0.0.1:{unused_tcp_port} after 0.3 s" in said


def test_a_server_loading_its_model_is_not_up_yet() -> None:
    """llama-server answers 503 while it loads the model: wait-for waits on."""
    from crawdad.doctor import answers

    class Loading(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(503 if self.path == "/" else 404)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Loading)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        assert not answers(url)  # 503: loading
        assert answers(url + "/v1")  # 404: up, the path is not its
    finally:
        server.shutdown()
        server.server_close()
