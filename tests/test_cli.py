"""The command line as a user meets it: messages, exit codes, output."""

from __future__ import annotations

import fcntl
import functools
import http.server
import json
import os
import subprocess
import sys
import threading
import zipfile
from pathlib import Path

import pytest

from crawdad.data import load_cladder
from crawdad.demo import answer_key
from crawdad.fake import FakeServer, FaultPlan, paper_models


def crawdad(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "crawdad", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def toml_for(url: str, path: Path, extra: str = "") -> Path:
    path.write_text(
        extra
        + "".join(
            f'[[agents]]\nname = "{n}"\nmodel = "{m}"\nbase_urls = ["{url}"]\n'
            for n, m in (("qwen3", "qwen3:32b"), ("deepseek-r1", "deepseek-r1:32b"))
        )
        + f'[extractor]\nbase_urls = ["{url}"]\n'
    )
    return path


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
    assert (
        "cannot connect to Ollama at http://127.0.0.1:9" in result.stderr
        and "ollama serve" in result.stderr
    )


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
    assert (
        "gold answer: yes" in shown.stdout
        and "— Round 0 by " in shown.stdout
        and "Reasoning:" in shown.stdout
    )
    assert "Thinking:" not in shown.stdout
    assert "Thinking:" in crawdad("show", str(out), "0", "--thinking").stdout
    missing = crawdad("show", str(out), "5")
    assert missing.returncode == 1 and "question 5 is not in" in missing.stderr


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


def cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str):
    """Run the command line in this process (as `crawdad ARGS` would): (exit code, out, err)."""
    from crawdad.cli import main

    monkeypatch.setattr(sys, "argv", ["crawdad", *args])
    try:
        main()
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


def _analyze_cases(tmp_path: Path) -> dict[str, tuple[list[str], str]]:
    from analysis.synthetic import write_synthetic_run

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
            "cannot write the report to",
        ),
        "out under a file": (
            [str(good), "--out", str(tmp_path / "afile" / "report")],
            "choose another --out folder",
        ),
    }


def test_analyze_failures_are_messages(tmp_path: Path, monkeypatch, capsys) -> None:
    for name, (args, message) in _analyze_cases(tmp_path).items():
        code, _, err = cli(monkeypatch, capsys, "analyze", *args)
        assert code == 1, name
        assert err.startswith("Error: ") and message in err, (name, err)
    assert not (tmp_path / "nope").exists()  # no report folder made for a wrong run folder


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write to read-only folders")
def test_analyze_read_only_out(tmp_path: Path, monkeypatch, capsys) -> None:
    from analysis.synthetic import write_synthetic_run

    good = write_synthetic_run(tmp_path / "good", 2)
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    code, _, err = cli(monkeypatch, capsys, "analyze", str(good), "--out", str(ro))
    assert code == 1 and "cannot write the report to" in err


def test_analyze_a_run_still_being_written(tmp_path: Path, monkeypatch, capsys) -> None:
    import analysis.report
    from analysis.synthetic import write_synthetic_run

    monkeypatch.setattr(analysis.report, "_draw_all", lambda jobs, workers: None)  # speed only
    run = write_synthetic_run(tmp_path / "r", 3, retry_errors=False)
    with (run / ".lock").open("w") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)  # as a `crawdad run` holds it
        code, out, err = cli(monkeypatch, capsys, "analyze", str(run), "--out", str(tmp_path / "o"))
    assert code == 0 and "report written" in out
    said = "this run was still being written when analysed: 3 debates so far"
    assert f"warning: {said}" in err
    assert said in (tmp_path / "o" / "report.md").read_text()


def test_show_on_a_folder_that_is_not_a_run(tmp_path: Path, monkeypatch, capsys) -> None:
    code, _, err = cli(monkeypatch, capsys, "show", str(tmp_path / "nope"), "1")
    assert code == 1 and "nope does not exist" in err
    (tmp_path / "other").mkdir()
    code, _, err = cli(monkeypatch, capsys, "show", str(tmp_path / "other"), "1")
    assert code == 1 and "is empty: it is not a crawdad run folder" in err


def test_run_refuses_records_without_manifest_until_force(
    tiny_cladder: Path, tmp_path: Path, monkeypatch, capsys
) -> None:
    questions = load_cladder(tiny_cladder).questions
    out = tmp_path / "run"
    with FakeServer("ollama", paper_models(answer_key(questions))) as server:
        cfg = toml_for(server.url, tmp_path / "c.toml")
        args = ["run", "--data", str(tiny_cladder), "--out", str(out), "--config", str(cfg)]
        args += ["--rung", "1", "--no-progress"]
        assert cli(monkeypatch, capsys, *args)[0] == 0
        (out / "manifest.json").unlink()
        code, _, err = cli(monkeypatch, capsys, *args, "--seed", "5")
        assert code == 1
        assert f"{out} has 2 debate line(s) in debates.jsonl but no manifest.json" in err
        assert "use another --out folder, or pass --force" in err
        code, out_text, _ = cli(monkeypatch, capsys, *args, "--seed", "5", "--force")
    assert code == 0 and "2/2 selected debates finished" in out_text
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["config"]["seed"] == 5 and "was missing" in manifest["notes"][0]
    # the two seed-0 debates ran again under seed 5; analysis sees one run
    seeds = [json.loads(line)["seed"] for line in (out / "debates.jsonl").read_text().splitlines()]
    assert seeds == [0, 0, 5, 5]
