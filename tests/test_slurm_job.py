"""`crawdad serve --slurm` (issue 51): a script nothing in a config can inject into, and a job
that runs on a real cluster. The scripts are run here by bash with stand-in engines
(crawdad/fake/standin.py), through a fake `srun` that runs its command on this machine: each
node's crawdad chooses its ports when the job starts, keeps its servers (restarts), and a node
that dies ends the job with a message."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
from pydantic import ValidationError

from crawdad.config import RunConfig
from crawdad.errors import CrawdadError
from crawdad.serving.base import Plan, ServerPlan
from crawdad.serving.node import await_nodes, keyless, pinned, placed
from crawdad.serving.slurm import slurm_script
from tests.test_server_trees import gone
from tests.test_supervisor import free_port, standin_program

CLI = Callable[..., tuple[int, str, str]]
HOSTILE = '$(touch {m}/name1)`touch {m}/name2`"; touch {m}/name3; #'
JOB_LIMIT = 100  # seconds a whole job may take here (under the suite's 120 s per test)


def served_toml(
    path: Path, names: list[str], env: str = "", first: int | None = None, serving: str = ""
) -> Path:
    """Two debaters and the extractor served by the stand-in engine (as vLLM) on the CPU."""
    exe = json.dumps(standin_program())
    rows = []
    for i, (role, name) in enumerate(zip(("a", "b", "x"), names, strict=True)):
        serve = (
            f'{{ engine = "vllm", weights = {json.dumps(f"stand-in/{role}")}, weights_gb = 0.1, '
            f"executable = {exe}, env = {{ {env} }} }}"
        )
        table = "[extractor]" if role == "x" else "[[agents]]"
        agent = "" if role == "x" else f'name = "{role}{i}"\n'
        rows.append(f"{table}\n{agent}model = {json.dumps(name)}\nbackend = 'openai'\n")
        rows[-1] += f"serve = {serve}\n"
    path.write_text(
        f"seed = 1\n[serving]\nfirst_port = {first or free_port()}\nstartup_timeout = 90\n"
        f"freeze_timeout = 30\n{serving}" + "".join(rows)
    )
    return path


def write_script(cli: CLI, config: Path, driver: str, *extra: str) -> Path:
    code, _out, err = cli(
        "serve",
        "--slurm",
        str(config),
        "--out",
        str(config.parent / "job.sh"),
        "--driver",
        driver,
        *extra,
    )
    assert code == 0, err
    return config.parent / "job.sh"


def fake_srun(folder: Path) -> None:
    """`srun OPTIONS... COMMAND...` runs COMMAND here (one node)."""
    folder.mkdir(exist_ok=True)
    srun = folder / "srun"
    srun.write_text(
        '#!/bin/sh\nwhile [ $# -gt 0 ]; do case "$1" in --*) shift ;; *) break ;; esac; done\n'
        'exec "$@"\n'
    )
    srun.chmod(0o755)


def job_env(tmp_path: Path, slurm: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "CRAWDAD_"))}
    bins = [str(Path(sys.executable).parent)]
    if slurm:
        fake_srun(tmp_path / "bin")
        bins.insert(0, str(tmp_path / "bin"))
        env |= {"SLURM_JOB_ID": "4242", "SLURM_JOB_NUM_NODES": "1", "SLURM_NODEID": "0"}
    env["PATH"] = os.pathsep.join([*bins, env.get("PATH", "")])
    env["CRAWDAD_JOB_DIR"] = str(tmp_path / "job")
    env["PYTHONPATH"] = str(Path(__file__).resolve().parent.parent)
    return env


def run_job(script: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(script)],
        cwd=script.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=JOB_LIMIT,
    )


def check_shell(script: Path) -> None:
    subprocess.run(["bash", "-n", str(script)], check=True)
    if shutil.which("shellcheck") is not None:
        done = subprocess.run(["shellcheck", str(script)], capture_output=True, text=True)
        assert done.returncode == 0, done.stdout


@pytest.fixture(autouse=True)
def _on_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRAWDAD_GPUS", "none")
    monkeypatch.delenv("CRAWDAD_SERVED_URLS", raising=False)


# --- the config refuses what would become code ---------------------------------------------


@pytest.mark.parametrize(
    ("serve", "model", "said"),
    [
        ({"weights": "Qwen/Q\ntouch /tmp/x"}, "m", "serve.weights"),
        ({"weights": "q", "executable": "/bin/vllm\r"}, "m", "serve.executable"),
        ({"weights": "q", "args": ["--x", "1\n2"]}, "m", "serve.args item"),
        ({"weights": "q", "env": {"$(touch /tmp/x)": "1"}}, "m", "serve.env key '$(touch"),
        ({"weights": "q", "env": {"1ABC": "1"}}, "m", "serve.env key '1ABC'"),
        ({"weights": "q", "env": {"A": "1\nreboot"}}, "m", "serve.env.A"),
        ({"weights": "q"}, "qwen3\ntouch /tmp/x", "model 'qwen3"),
        ({"engine": "ollama", "weights": "qwen3:8b\n$(id)"}, "m", "serve.weights"),
    ],
)
def test_the_config_refuses_control_characters_and_env_keys_that_are_not_names(
    serve: dict[str, object], model: str, said: str
) -> None:
    table = {"engine": "vllm", **serve}
    with pytest.raises(ValidationError) as e:
        RunConfig.model_validate({"extractor": {"model": model, "serve": table}})
    assert said in str(e.value)


def test_quoting_survives_what_validation_lets_through(tmp_path: Path) -> None:
    """Names with $(...), backticks, quotes and ; pass the config (they are a server's names),
    and reach the script only quoted: in comments, in the JSON, in the default driver."""
    marks = tmp_path / "m"
    hostile = HOSTILE.format(m=marks)
    config = RunConfig.model_validate(
        {
            "extractor": {
                "model": hostile,
                "backend": "openai",
                "serve": {"engine": "vllm", "weights": hostile, "env": {"V": hostile}},
            }
        }
    )
    assert config.extractor.serve is not None
    server = ServerPlan(
        key="x",
        engine="vllm",
        weights=hostile,
        served_name=hostile,
        models=["extractor"],
        port=8100,
        context_length=4096,
        env={"V": hostile},
        command=["vllm", "serve", hostile],
    )
    path = tmp_path / f"c {hostile}.toml"
    driver = f"crawdad run --config {shlex.quote(str(path))} --out runs/x"
    text = slurm_script(Plan(servers=[server]), driver, source=str(path))
    line = next(ln for ln in text.splitlines() if ln.startswith("DRIVER_LINE="))
    (value,) = shlex.split(line.removeprefix("DRIVER_LINE="))
    assert shlex.split(value)[3] == str(path)  # one word, as written
    data = text.split("<<'CRAWDAD_JOB_JSON'\n", 1)[1].split("\nCRAWDAD_JOB_JSON\n", 1)[0]
    assert json.loads(data)["plan"]["servers"][0]["served_name"] == hostile
    script = tmp_path / "job.sh"
    script.write_text(text)
    check_shell(script)


def test_the_driver_placeholder_quotes_the_config_path(cli: CLI, tmp_path: Path) -> None:
    config = served_toml(tmp_path / "c $(touch x).toml", ["m1", "m2", "m3"])
    code, text, err = cli("serve", "--slurm", str(config))
    assert code == 0, err
    line = next(ln for ln in text.splitlines() if ln.startswith("DRIVER_LINE="))
    (driver,) = shlex.split(line.removeprefix("DRIVER_LINE="))
    words = shlex.split(driver)
    assert words[words.index("--config") + 1] == str(config)
    assert words[-1] == "runs/c $(touch x)"


# --- hostile values, run ------------------------------------------------------------------------


def test_a_script_of_hostile_values_runs_nothing_it_should_not(cli: CLI, tmp_path: Path) -> None:
    marks = tmp_path / "m"
    marks.mkdir()
    names = [HOSTILE.format(m=marks) + f"{i}" for i in range(3)]
    env_value = json.dumps(f"$(touch {marks}/env)`touch {marks}/env2`'\"")
    config = served_toml(tmp_path / "c.toml", names, env=f"V = {env_value}")
    script = write_script(cli, config, "printenv CRAWDAD_SERVED_URLS > served.json")
    check_shell(script)
    done = run_job(script, job_env(tmp_path, slurm=True))
    assert done.returncode == 0, done.stdout + done.stderr
    assert list(marks.iterdir()) == []  # nothing ran
    served = json.loads((tmp_path / "served.json").read_text())
    assert set(served) == set(names)  # each name as written, a URL each
    assert all(len(urls) == 1 for urls in served.values())


# --- the node's crawdad: ports at run time, keys, restarts, its death -------------------------


def test_the_nodes_choose_free_ports_when_the_job_starts_and_require_the_key(
    cli: CLI, tmp_path: Path
) -> None:
    """Two jobs of one plan on one node (array tasks) and a stranger on the first port: three
    different sets of ports (a node moves a taken port even where replan_ports is false: the
    plan's were chosen elsewhere); the servers answer only with the job's key."""
    check = (
        f"{shlex.quote(sys.executable)} -c 'import json, os, httpx; "
        'urls = json.loads(os.environ["CRAWDAD_SERVED_URLS"]); '
        'url = next(iter(urls.values()))[0] + "/models"; '
        'key = json.load(open(os.environ["CRAWDAD_SERVED_KEYS"]))[url.removesuffix("/models")]; '
        "codes = [httpx.get(url, headers=h, trust_env=False).status_code "
        'for h in ({}, {"Authorization": "Bearer " + key})]; '
        'json.dump({"urls": urls, "codes": codes}, open("seen.json", "w"))\''
    )
    jobs = []
    first = free_port()
    for name in ("t0", "t1"):  # the same plan, the same first port
        folder = tmp_path / name
        folder.mkdir()
        fixed = "replan_ports = false\n" if name == "t1" else ""
        config = served_toml(folder / "c.toml", ["m1", "m2", "m3"], first=first, serving=fixed)
        jobs.append((folder, write_script(cli, config, check)))
    stranger = socket.socket()
    stranger.bind(("127.0.0.1", first))
    stranger.listen()
    try:
        running = [
            subprocess.Popen(
                ["bash", str(script)],
                cwd=folder,
                env=job_env(folder, slurm=False),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            for folder, script in jobs
        ]
        outs = [p.communicate(timeout=JOB_LIMIT)[0] for p in running]
    finally:
        stranger.close()
    ports = []
    for (folder, _), proc, out in zip(jobs, running, outs, strict=True):
        assert proc.returncode == 0, out
        seen = json.loads((folder / "seen.json").read_text())
        assert seen["codes"] == [401, 200]  # the key is required, and the job has it
        ports += [int(u.rsplit(":", 1)[1].split("/")[0]) for v in seen["urls"].values() for u in v]
    assert len(set(ports)) == 6 and first not in ports


def test_a_server_killed_mid_job_is_restarted_by_the_nodes_supervisor(
    cli: CLI, tmp_path: Path
) -> None:
    driver = tmp_path / "driver.py"
    driver.write_text(
        "import glob, json, os, signal, time\n"
        "(node,) = glob.glob(os.environ['JOB'] + '/nodes/*.json')\n"
        "record = json.load(open(node))\n"
        "key, server = sorted(record['servers'].items())[0]\n"
        "os.kill(server['pid'], signal.SIGKILL)\n"
        "status = node[: -len('.json')] + '/status.json'\n"
        "deadline = time.monotonic() + 120\n"
        "while time.monotonic() < deadline:\n"
        "    seen = json.load(open(status))[key]\n"
        "    if seen['restarts'] == 1 and seen['state'] == 'up':\n"
        "        open('restarted', 'w').write(key)\n"
        "        break\n"
        "    time.sleep(0.2)\n"
    )
    config = served_toml(tmp_path / "c.toml", ["m1", "m2", "m3"])
    script = write_script(cli, config, f"{shlex.quote(sys.executable)} driver.py")
    done = run_job(script, job_env(tmp_path, slurm=True))
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "restarted").exists(), done.stderr
    assert "restarting it" in done.stderr and "is back" in done.stderr


def test_a_node_whose_crawdad_dies_ends_the_job_with_a_message(cli: CLI, tmp_path: Path) -> None:
    driver = tmp_path / "driver.py"
    driver.write_text(
        "import glob, json, os, signal, time\n"
        "(node,) = glob.glob(os.environ['JOB'] + '/nodes/*.json')\n"
        "record = json.load(open(node))\n"
        "json.dump(record, open('node.json', 'w'))\n"
        "os.kill(record['pid'], signal.SIGKILL)\n"
        "time.sleep(600)\n"  # a driver that would wait on dead servers
        "open('driver-ended', 'w').close()\n"
    )
    config = served_toml(tmp_path / "c.toml", ["m1", "m2", "m3"])
    script = write_script(cli, config, f"{shlex.quote(sys.executable)} driver.py")
    done = run_job(script, job_env(tmp_path, slurm=True))  # ends well before the driver would
    assert done.returncode == 1
    assert "the servers ended" in done.stderr and "stopping the job" in done.stderr
    assert not (tmp_path / "driver-ended").exists()  # the driver was stopped, not waited for
    if shutil.which("setpriv"):  # the node's servers died with their crawdad
        pids = [
            s["pid"] for s in json.loads((tmp_path / "node.json").read_text())["servers"].values()
        ]
        assert gone(_processes(pids), 30.0) == []


def test_a_server_that_cannot_start_ends_the_job_before_the_driver(
    cli: CLI, tmp_path: Path
) -> None:
    config = served_toml(
        tmp_path / "c.toml", ["m1", "m2", "m3"], env='CRAWDAD_STANDIN_FAULT = "fail-start:oom"'
    )
    script = write_script(cli, config, "touch driver-ran")
    done = run_job(script, job_env(tmp_path, slurm=True))
    assert done.returncode == 1
    assert "CUDA out of memory" in done.stderr  # the cause, from the end of its log
    assert not (tmp_path / "driver-ran").exists()


def _processes(pids: list[int]) -> list[psutil.Process]:
    """The processes of `pids` still there (one already gone is not waited for)."""
    procs = []
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess):
            procs.append(psutil.Process(pid))
    return procs


# --- the node's parts ---------------------------------------------------------------------------


def _server(**kw: object) -> ServerPlan:
    fields: dict[str, object] = {
        "key": "s",
        "engine": "vllm",
        "weights": "W",
        "served_name": "m",
        "models": ["agents.0"],
        "port": 8100,
        "context_length": 4096,
        "command": ["vllm", "serve", "W"],
    }
    return ServerPlan.model_validate(fields | kw)


def test_a_node_maps_the_plans_gpus_to_its_own_and_says_when_it_has_too_few() -> None:
    server = _server(gpus=[1], env={"CUDA_VISIBLE_DEVICES": "1"})
    assert pinned(server, "4,6").env["CUDA_VISIBLE_DEVICES"] == "6"
    with pytest.raises(CrawdadError, match="this node has 1"):
        pinned(server, "3")


def test_a_node_places_each_server_on_its_address_and_only_ollama_goes_without_a_key() -> None:
    vllm = placed(_server(), "10.0.0.5")
    assert vllm.command[vllm.command.index("--host") + 1] == "10.0.0.5"
    assert vllm.command[vllm.command.index("--port") + 1] == "8100"  # reserved at its start
    assert vllm.base_url == "http://10.0.0.5:8100/v1"
    assert not vllm.env and "--api-key" not in vllm.command  # each start's key: the Supervisor's
    ollama = _server(engine="ollama", command=["ollama", "serve"], env={"OLLAMA_HOST": "x"})
    assert placed(ollama, "h").env == {"OLLAMA_HOST": "h:8100"}
    assert keyless(ollama)
    python = _server(engine="llamacpp", command=[sys.executable])  # llama-cpp-python: API_KEY
    assert not keyless(python) and not keyless(_server(engine="sglang", command=["python"]))


def test_the_driver_wait_ends_on_a_dead_step_or_a_failed_node(tmp_path: Path) -> None:
    server = _server()
    (tmp_path / "job.json").write_text(
        json.dumps(
            {"plan": Plan(servers=[server]).model_dump(mode="json"), "serving": {}, "nodes": 2}
        )
    )
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    with pytest.raises(CrawdadError, match="step ended before every node"):
        await_nodes(tmp_path, 60, watch=int(gone.stdout))
    (tmp_path / "nodes").mkdir()
    (tmp_path / "nodes" / "1-n2.failed").write_text("node 1-n2: server s: exited")
    with pytest.raises(CrawdadError, match="node 1-n2: server s: exited"):
        await_nodes(tmp_path, 60)


# --- cluster readiness --------------------------------------------------------------------------


def test_the_header_requests_cpus_and_memory_shows_the_setup_and_user_lines_win(
    cli: CLI, tmp_path: Path
) -> None:
    config = served_toml(tmp_path / "c.toml", ["m1", "m2", "m3"])
    setup = "source ~/venvs/crawdad/bin/activate"
    code, text, err = cli("serve", "--slurm", str(config), "--setup", setup, "--gpus", "2")
    assert code == 0, err
    header = text.split("set -euo pipefail")[0]
    assert "#SBATCH --cpus-per-task=" in header and "#SBATCH --mem=" in header
    assert f"#   {setup}" in header  # shown
    assert text.split("set -euo pipefail", 1)[1].count(f"\n{setup}\n") == 1  # and run
    code, text, err = cli(
        "serve", "--slurm", str(config), "--sbatch", "--mem=900G", "--sbatch", "-c 3"
    )
    assert code == 0, err
    assert "#SBATCH --mem=900G" in text and "#SBATCH -c 3" in text
    assert "--cpus-per-task" not in text
    assert text.count("#SBATCH --mem") == 1
    code, _text, err = cli("serve", "--slurm", str(config), "--sbatch", "--mem=1G\nrm -rf ~")
    assert code == 1 and "--sbatch" in err


def test_keyless_servers_are_refused_on_several_nodes(cli: CLI, tmp_path: Path) -> None:
    code, _text, err = cli("serve", "--slurm", "paper-ollama-served", "--nodes", "2")
    assert code == 1 and "take no API key" in err
    code, _text, err = cli("serve", "--slurm", "paper-ollama-served")
    assert code == 0, err


def test_fetch_downloads_hugging_face_ids_pulls_tags_and_checks_files(
    cli: CLI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[str] = []

    def snapshot_download(repo_id: str) -> str:
        asked.append(repo_id)
        return f"/cache/{repo_id}"

    monkeypatch.setattr("crawdad.serving.prefetch._snapshot_download", lambda: snapshot_download)
    ollama = tmp_path / "ollama"
    ollama.write_text(f'#!/bin/sh\necho "$@" >> {tmp_path}/pulled\n')
    ollama.chmod(0o755)
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    config = tmp_path / "c.toml"
    config.write_text(
        '[[agents]]\nname = "a"\nmodel = "m1"\nbackend = "openai"\n'
        'serve = { engine = "vllm", weights = "Org/Model-1" }\n'
        '[[agents]]\nname = "b"\nmodel = "qwen3:8b"\n'
        f'serve = {{ engine = "ollama", weights = "qwen3:8b", executable = "{ollama}" }}\n'
        '[extractor]\nmodel = "g"\nbackend = "openai"\n'
        f'serve = {{ engine = "llamacpp", weights = "{gguf}" }}\n'
    )
    code, _out, err = cli("serve", "--fetch", str(config))
    assert code == 0, err
    assert asked == ["Org/Model-1"]
    assert (tmp_path / "pulled").read_text() == "pull qwen3:8b\n"
    gguf.unlink()
    code, _out, err = cli("serve", "--fetch", str(config))
    assert code == 1 and f"{gguf}: not found" in err


def test_fetch_without_huggingface_hub_names_the_install(
    cli: CLI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # an import that fails
    config = tmp_path / "c.toml"
    config.write_text(
        '[extractor]\nmodel = "g"\nbackend = "openai"\n'
        'serve = { engine = "vllm", weights = "Org/Model-1" }\n'
    )
    code, _out, err = cli("serve", "--fetch", str(config))
    assert code == 1 and "pip install huggingface_hub" in err


def test_the_driver_runs_debates_on_the_jobs_keyed_servers(cli: CLI, tmp_path: Path) -> None:
    """A whole `crawdad run` as the driver: its served models go to the job's servers, with the
    keys they require."""
    from crawdad.run.store import RunStore

    config = served_toml(tmp_path / "c.toml", ["m1", "m2", "m3"])
    driver = "crawdad run --config c.toml --data examples --range 0-1 --out runs/x --no-progress"
    script = write_script(cli, config, driver)
    done = run_job(script, job_env(tmp_path, slurm=True))
    assert done.returncode == 0, done.stdout + done.stderr
    valid, invalid = RunStore(tmp_path / "runs" / "x").read_records()
    assert len(valid) == 2 and not invalid
    assert all(r.error is None for r in valid)


def test_a_two_node_job_merges_every_nodes_servers_and_each_requires_the_key(
    cli: CLI, tmp_path: Path
) -> None:
    """Two nodes played on this machine (a fake srun starts the node's crawdad twice, as nodes
    0 and 1; CRAWDAD_NODE_ADDRESS keeps them on loopback): the driver gets both nodes' servers
    of each model, and none answers without its key (in the job's keys file)."""
    check = (
        f"{shlex.quote(sys.executable)} -c 'import json, os, httpx; "
        'urls = json.loads(os.environ["CRAWDAD_SERVED_URLS"]); '
        'keys = json.load(open(os.environ["CRAWDAD_SERVED_KEYS"])); '
        'codes = [httpx.get(u + "/models", headers=h, trust_env=False).status_code '
        'for v in urls.values() for u in v for h in ({}, {"Authorization": "Bearer " + keys[u]})]; '
        'json.dump({"urls": urls, "codes": codes}, open("seen.json", "w"))\''
    )
    config = served_toml(tmp_path / "c.toml", ["m1", "m2", "m3"])
    script = write_script(cli, config, check, "--nodes", "2")
    env = job_env(tmp_path, slurm=True) | {"SLURM_JOB_NUM_NODES": "2"}
    env["CRAWDAD_NODE_ADDRESS"] = "127.0.0.1"
    (tmp_path / "bin" / "srun").write_text(
        '#!/bin/bash\nwhile [ $# -gt 0 ]; do case "$1" in --*) shift ;; *) break ;; esac; done\n'
        'SLURM_NODEID=0 "$@" &\none=$!\nSLURM_NODEID=1 "$@" &\ntwo=$!\n'
        "trap 'kill -TERM $one $two' TERM\n"  # srun passes SIGTERM on to its tasks
        "wait\nwait\n"
    )
    done = run_job(script, env)
    assert done.returncode == 0, done.stdout + done.stderr
    seen = json.loads((tmp_path / "seen.json").read_text())
    assert sorted(seen["urls"]) == ["m1", "m2", "m3"]
    every = [u for v in seen["urls"].values() for u in v]
    assert all(len(v) == 2 for v in seen["urls"].values()) and len(set(every)) == 6
    assert seen["codes"] == [401, 200] * 6
    nodes = sorted(p.name.split("-")[0] for p in (tmp_path / "job" / "nodes").glob("*.json"))
    assert nodes == ["0", "1"]


def test_a_nodes_crawdad_never_outlives_its_job(cli: CLI, tmp_path: Path) -> None:
    """The batch script SIGKILLed (no trap runs): the node's crawdad sees its step gone and
    stops its servers."""
    config = served_toml(tmp_path / "c.toml", ["m1", "m2", "m3"])
    script = write_script(cli, config, "echo $$ > driver.pid; exec sleep 600")
    job = subprocess.Popen(
        ["bash", str(script)],
        cwd=tmp_path,
        env=job_env(tmp_path, slurm=False),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    driver = tmp_path / "driver.pid"
    try:
        deadline = time.monotonic() + JOB_LIMIT
        while not driver.exists() and job.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert driver.exists(), "the driver never started"
        (node,) = (tmp_path / "job" / "nodes").glob("*.json")
        record = json.loads(node.read_text())
        job.kill()
        job.wait()
        pids = [record["pid"], *(s["pid"] for s in record["servers"].values())]
        assert gone(_processes(pids), 30.0) == []
    finally:
        if driver.exists():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(driver.read_text()), 9)
        if job.poll() is None:
            job.kill()


def test_a_server_given_up_ends_the_job_with_its_reason(cli: CLI, tmp_path: Path) -> None:
    driver = tmp_path / "driver.py"
    driver.write_text(
        "import glob, json, os, signal, time\n"
        "(node,) = glob.glob(os.environ['JOB'] + '/nodes/*.json')\n"
        "server = sorted(json.load(open(node))['servers'].values(), key=str)[0]\n"
        "os.kill(server['pid'], signal.SIGKILL)\n"
        "time.sleep(600)\n"
        "open('driver-ended', 'w').close()\n"
    )
    config = served_toml(tmp_path / "c.toml", ["m1", "m2", "m3"], serving="max_restarts = 0\n")
    script = write_script(cli, config, f"{shlex.quote(sys.executable)} driver.py")
    done = run_job(script, job_env(tmp_path, slurm=True))
    assert done.returncode == 1
    assert "exited with code -9" in done.stderr and "the servers ended" in done.stderr
    assert not (tmp_path / "driver-ended").exists()


def test_a_job_cancelled_while_its_servers_load_stops_them_at_once(
    cli: CLI, tmp_path: Path
) -> None:
    """scancel's SIGTERM mid-start: the node's crawdad does not wait for the start to end."""
    import psutil

    config = served_toml(
        tmp_path / "c.toml", ["m1", "m2", "m3"], env='CRAWDAD_STANDIN_FAULT = "fail-start:hang"'
    )
    script = write_script(cli, config, "touch driver-ran")
    env = job_env(tmp_path, slurm=False)
    job = subprocess.Popen(
        ["bash", str(script)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    logs = tmp_path / "job" / "nodes"
    deadline = time.monotonic() + JOB_LIMIT
    while len(list(logs.glob("*/*.log"))) < 3 and time.monotonic() < deadline:
        time.sleep(0.1)  # every server spawned, none answering
    job.send_signal(signal.SIGTERM)
    _, err = job.communicate(timeout=60)  # well before serving.startup_timeout (90 s)
    assert job.returncode == 143, err
    assert not (tmp_path / "driver-ran").exists()
    left = []
    for p in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if p.environ().get("CRAWDAD_JOB_DIR") == env["CRAWDAD_JOB_DIR"]:
                left.append(p.cmdline())
    assert left == []
