"""A run whose model server crawdad starts itself (the stand-in engine): a server SIGKILLed
mid-run is restarted and every selected debate finishes; the manifest records the server; the
report counts the restart; Ctrl-C and SIGTERM of the run leave no server behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import psutil
import pytest

from crawdad.config import RetryConfig, RunConfig, SelectionConfig
from crawdad.data.demo_questions import EXAMPLES
from crawdad.data.questions import load_cladder, select
from crawdad.errors import ServersNotReady
from crawdad.records import ServerRestart
from crawdad.run.runner import run_debates
from crawdad.run.store import RunStore
from crawdad.serving.base import Plan
from tests.test_supervisor import free_port, standin, standin_program, standins


def served(tmp_path: Path, fault: str = "") -> tuple[RunConfig, Plan]:
    env = {"CRAWDAD_STANDIN_FAULT": fault, "CRAWDAD_STANDIN_ONCE": str(tmp_path / "once")}
    server = standin(
        "paper", env=env if fault else {}, models=["agents.0", "agents.1", "extractor"]
    )
    # Two tries a request: the restart may cost a request the try it was on when its server
    # died (before the supervisor saw it), never the ones that wait for the restart.
    config = RunConfig(seed=3, concurrency=4, retry=RetryConfig(initial_wait=0, attempts=2))
    return config.serve_all_from(server.base_url, "openai"), Plan(servers=[server])


async def test_a_server_killed_mid_run_is_restarted_and_every_debate_finishes(
    tmp_path: Path,
) -> None:
    config, plan = served(tmp_path, "die-after:12")  # SIGKILLed by itself mid-run, once
    dataset = select(load_cladder(EXAMPLES), SelectionConfig(limit=10), 3)
    out = tmp_path / "run"
    summary = await run_debates(config, dataset, out, plan=plan, progress=False)
    assert (tmp_path / "once").exists()  # it did die
    assert summary.done_total == summary.selected == 10 and summary.errored == 0
    assert standins() == []
    restarts = [
        ServerRestart.model_validate_json(x) for x in (out / "servers/restarts.jsonl").open()
    ]
    assert [(r.key, r.back) for r in restarts] == [("paper", True)]
    assert "exited with code -9" in restarts[0].reason
    started = RunStore(out).read_manifest().started
    assert [s.command for s in started] == [plan.servers[0].command]
    assert "die-after at generation request 12" in (out / "servers/paper.log").read_text()

    from crawdad.analysis.servers_section import servers_section

    section = servers_section(out, "run", None)
    assert section is not None
    table = next(b for b in section.blocks if getattr(b, "name", "") == "servers_started")
    row = table.df.iloc[0]  # type: ignore[union-attr]
    assert (row["server"], row["engine"], row["restarts"]) == ("paper", "vllm", 1)
    assert "1 restart," in table.line  # type: ignore[union-attr]
    why = next(b for b in section.blocks if getattr(b, "name", "") == "server_restarts")
    row = why.df.iloc[0]  # type: ignore[union-attr]
    assert row["reason"] == "exited with code -9" and row["outcome"] == "back"
    assert row["downtime_s"] >= row["silent_s"] >= 0


def served_toml(tmp_path: Path, env: dict[str, str]) -> Path:
    """A config whose three models are served by crawdad, as the stand-in engine (vLLM's
    command line), planned on this machine's CPU."""
    variables = ", ".join(f"{k} = {json.dumps(v)}" for k, v in env.items())

    def table(name: str) -> str:
        return (
            f'{{ engine = "vllm", weights = "stand-in/{name}", weights_gb = 0.1, '
            f'executable = "{standin_program()}", env = {{ {variables} }} }}'
        )

    path = tmp_path / "served.toml"
    path.write_text(
        "seed = 3\nconcurrency = 2\n[retry]\ninitial_wait = 0\n"
        # ports away from the default 8100 of other tests' plans (the suite runs in parallel)
        f"[serving]\nfirst_port = {free_port()}\n"
        + "".join(
            f'[[agents]]\nname = "{n}"\nmodel = "{m}"\nserve = {table(n)}\n'
            for n, m in (("qwen3", "qwen3:32b"), ("deepseek-r1", "deepseek-r1:32b"))
        )
        + f'[extractor]\nmodel = "granite3.3:2b"\nserve = {table("granite")}\n'
    )
    return path


def _in_the_background() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a shell starts `crawdad run ... &`


def run_until_a_server_freezes(
    tmp_path: Path, env: dict[str, str], background: bool = False
) -> tuple[subprocess.Popen[str], Path]:
    """`crawdad run` (a subprocess) of a config served by stand-ins with `env`, each frozen at
    its 2nd request; returned once one has frozen (the run is mid-way, waiting) or the run has
    ended: the process (its stderr piped) and its run folder. `background`: started as a shell
    starts `crawdad run ... &`."""
    once = tmp_path / "once"
    env = env | {"CRAWDAD_STANDIN_FAULT": "freeze-after:2", "CRAWDAD_STANDIN_ONCE": str(once)}
    config, out = served_toml(tmp_path, env), tmp_path / "run"
    argv = ["run", "--data", str(EXAMPLES), "--out", str(out), "--config", str(config)]
    run = subprocess.Popen(
        [sys.executable, "-m", "crawdad", *argv, "--no-progress"],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "CRAWDAD_GPUS": "none"},
        preexec_fn=_in_the_background if background else None,
    )
    try:
        while not once.exists() and run.poll() is None:
            psutil.wait_procs([psutil.Process(run.pid)], timeout=0.05)
    except BaseException:
        run.kill()
        raise
    return run, out


@pytest.mark.parametrize(
    ("sig", "background"),
    [(signal.SIGINT, False), (signal.SIGTERM, False), (signal.SIGTERM, True)],
    ids=["ctrl-c", "sigterm", "sigterm-in-the-background"],
)
def test_ctrl_c_or_sigterm_of_crawdad_run_leaves_no_server(
    tmp_path: Path, sig: signal.Signals, background: bool
) -> None:
    """Also where crawdad was started in the background by a script (`crawdad run ... &`, as
    a batch job may): the shell has it ignore SIGINT, and SIGTERM must still stop it."""
    # Each server freezes at its 2nd request: the run is mid-way, waiting, when signalled.
    run, out = run_until_a_server_freezes(tmp_path, {}, background)
    try:
        servers = psutil.Process(run.pid).children(recursive=True)
        assert len(servers) >= 3, run.stderr.read() if run.stderr else ""
        os.kill(run.pid, sig)
        code = run.wait(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
    assert code == 130, run.stderr.read() if run.stderr else ""
    _, alive = psutil.wait_procs(servers, timeout=5)
    assert alive == []
    status = json.loads((out / "servers/status.json").read_text())
    assert {s["state"] for s in status.values()} == {"stopped"}


def test_the_report_tells_apart_runs_whose_servers_differ() -> None:
    from types import SimpleNamespace

    from crawdad.analysis.report import _started_lines

    from crawdad.records import StartedServer

    def run(label: str, version: str, digest: str) -> SimpleNamespace:
        s = StartedServer(
            key="qwen3",
            engine="vllm",
            engine_version=version,
            command=["vllm", "serve", "Qwen/Qwen3-32B"],
            weights="Qwen/Qwen3-32B",
            weights_hash=f"revision:{digest}",
            served_name="qwen3:32b",
            base_url="http://127.0.0.1:8100/v1",
            gpus=["0: NVIDIA H100"],
            memory_fraction=0.45,
        )
        manifest = SimpleNamespace(started=[s])
        return SimpleNamespace(label=label, manifests=lambda: [manifest])

    same = _started_lines([run("a", "0.9.2", "abc"), run("b", "0.9.2", "abc")])  # type: ignore[list-item]
    assert "- qwen3: vllm 0.9.2 serving Qwen/Qwen3-32B (revision:abc) on 0: NVIDIA H100, 45% " in (
        "\n".join(same)
    )
    assert not any("served differently" in line for line in same)
    differ = "\n".join(_started_lines([run("a", "0.9.2", "abc"), run("b", "0.10.0", "abc")]))  # type: ignore[list-item]
    assert "> **`qwen3:32b` was served differently:** vllm 0.9.2" in differ
    assert "in `a`; vllm 0.10.0" in differ and "in `b`." in differ


async def test_keep_servers_leaves_them_running_and_says_how_to_use_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config, plan = served(tmp_path)
    dataset = select(load_cladder(EXAMPLES), SelectionConfig(limit=2), 3)
    await run_debates(
        config, dataset, tmp_path / "run", plan=plan, progress=False, keep_servers=True
    )
    (kept,) = standins()
    try:
        out = capsys.readouterr().out
        url = plan.servers[0].base_url
        assert (
            "--set serving.start=false" in out and f"--set 'agents.0.base_urls=[\"{url}\"]'" in out
        )
        assert f"kill -- -{kept.pid}" in out
        # the server's key, for the next run: a file of the user's alone, in no other file
        keys_file = tmp_path / "run/servers/keys.json"
        assert f"--set serving.keys_file={keys_file}" in out
        assert keys_file.stat().st_mode & 0o777 == 0o600
        (key,) = json.loads(keys_file.read_text()).values()
        written = [p for p in (tmp_path / "run").rglob("*") if p.is_file() and p != keys_file]
        assert written and not any(key in p.read_text(errors="replace") for p in written)
        assert key not in out and key not in " ".join(kept.cmdline())
        # the next run, pointed at them as told, starts nothing
        again = config.model_copy(deep=True)
        again.serving.start = False
        with pytest.raises(ServersNotReady, match="refused the API key"):  # without the key
            await run_debates(again, dataset, tmp_path / "run-nokey", progress=False)
        again.serving.keys_file = keys_file
        summary = await run_debates(again, dataset, tmp_path / "run2", progress=False)
        assert summary.done_total == 2 and [p.pid for p in standins()] == [kept.pid]
    finally:
        os.killpg(kept.pid, signal.SIGKILL)
        psutil.wait_procs([kept], timeout=5)


def test_a_manifest_of_an_older_schema_has_no_started_servers_and_loads() -> None:
    from crawdad.records import RunManifest

    manifest = json.loads(
        (Path(__file__).parent / "golden" / "v1-run" / "manifest.json").read_text()
    )
    assert "started" not in manifest
    assert RunManifest.model_validate(manifest).started == []


def test_an_experiment_serves_its_variants_from_one_set_of_servers(
    tmp_path: Path, cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CRAWDAD_GPUS", "none")  # planned on the CPU, whatever the machine

    def table(weights: str) -> str:
        return (
            f'{{ engine = "vllm", weights = "{weights}", weights_gb = 0.1, '
            f'executable = "{standin_program()}" }}'
        )

    experiment = tmp_path / "exp.toml"
    experiment.write_text(
        'baseline = "a"\n[base]\nconcurrency = 4\nagents = [\n'
        f'  {{ name = "qwen3", model = "qwen3:32b", serve = {table("stand-in/q")} }},\n'
        f'  {{ name = "deepseek-r1", model = "deepseek-r1:32b", serve = {table("stand-in/d")} }},\n'
        f']\nextractor = {{ model = "granite3.3:2b", serve = {table("stand-in/g")} }}\n'
        f"[base.serving]\nfirst_port = {free_port()}\n"
        "[variants.a]\n[variants.b]\nprotocol = { max_turns = 2 }\n"
    )
    out = tmp_path / "exp"
    code, _, err = cli(
        "experiment", str(experiment), "--data", str(EXAMPLES), "--out", str(out),
        "--limit", "3", "--no-progress",
    )  # fmt: skip
    assert code == 0, err
    assert standins() == []
    for variant in ("a", "b"):
        started = RunStore(out / variant).read_manifest().started
        assert sorted(s.served_name for s in started) == [
            "deepseek-r1:32b",
            "granite3.3:2b",
            "qwen3:32b",
        ]
        assert all(f"{variant}:" in " ".join(s.models) for s in started)
    assert len(list((out / "servers").glob("*.log"))) == 3  # one server per model, shared

    # the experiment report counts the shared servers' restarts (the supervisor writes them to
    # the experiment's servers/restarts.jsonl; one is written here, a restart itself is above)
    key = started[0].key
    went = ServerRestart(key=key, at=started[0].started_at, reason="exited with code -9")
    line = went.model_copy(update={"downtime": 4.0}).model_dump_json()
    (out / "servers/restarts.jsonl").write_text(line + "\n")
    from crawdad.analysis.experiment_report import write_experiment_report

    md = write_experiment_report(out, tmp_path / "report").read_text()
    assert "Servers crawdad started" in md and "1 restart, 4 s down in all." in md
    rows = pd.read_csv(tmp_path / "report/tables/servers_started.csv").set_index("server")
    assert len(rows) == 3 and rows.loc[key, "restarts"] == 1
    assert rows["restarts"].sum() == 1 and rows.loc[key, "downtime_s"] == 4.0
    # a variant's own report counts the same restarts, and says they are the experiment's
    from crawdad.analysis.report import write_report

    md = write_report([out / "b"], tmp_path / "report_b").read_text()
    assert "1 restart, 4 s down in all. The experiment's variants share" in md


def test_crawdad_serve_keeps_the_servers_until_ctrl_c_and_says_how_to_use_them(
    tmp_path: Path,
) -> None:
    config = served_toml(tmp_path, {})
    serve = subprocess.Popen(
        [sys.executable, "-m", "crawdad", "serve", str(config), "--no-progress",
         "--logs", str(tmp_path / "logs")],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "CRAWDAD_GPUS": "none"},
    )  # fmt: skip
    try:
        assert serve.stdout is not None
        said = []
        for line in serve.stdout:  # until the last --set line: the servers are up
            said.append(line)
            if "extractor.backend" in line:
                break
        servers = psutil.Process(serve.pid).children(recursive=True)
        assert len(standins()) == 3
        text = "".join(said)
        assert "--set serving.start=false" in text and "agents.1.base_urls" in text
        keys = tmp_path / "logs/keys.json"  # each server's key, for the runs that use them
        assert f"--set serving.keys_file={keys}" in text
        assert keys.stat().st_mode & 0o777 == 0o600 and len(json.loads(keys.read_text())) == 3
        os.kill(serve.pid, signal.SIGINT)
        assert serve.wait(timeout=60) == 0
    finally:
        if serve.poll() is None:
            serve.kill()
    _, alive = psutil.wait_procs(servers, timeout=5)
    assert alive == [] and len(list((tmp_path / "logs").glob("*.log"))) == 3
