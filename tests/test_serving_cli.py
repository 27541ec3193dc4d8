"""`crawdad serve --plan`, `crawdad serve --slurm` and `crawdad doctor` on served models (issue
43), on simulated GPU inventories; the SLURM script is checked by bash and shellcheck, and run
on this machine against stand-in vLLM servers (crawdad's fake)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from crawdad.config import RunConfig

CLI = Callable[..., tuple[int, str, str]]
TWO_H100 = json.dumps([{"index": i, "name": "H100", "memory_mib": 81559} for i in range(2)])
ONE_H100 = json.dumps([{"index": 0, "name": "H100", "memory_mib": 81559}])


def served_toml(path: Path, executable: str | None = None, extra: str = "") -> Path:
    """The paper's pair and extractor served by vLLM, their sizes stated (nothing downloaded)."""
    exe = f', executable = "{executable}"' if executable else ""
    rows = (
        ("qwen3", "qwen3:32b", "Qwen/Qwen3-32B", 65.5),
        ("deepseek-r1", "deepseek-r1:32b", "deepseek-ai/DeepSeek-R1-Distill-Qwen-32B", 65.5),
    )
    text = extra + "".join(
        f'[[agents]]\nname = "{n}"\nmodel = "{m}"\nbackend = "openai"\n'
        f'serve = {{ engine = "vllm", weights = "{w}", weights_gb = {gb}{exe} }}\n'
        for n, m, w, gb in rows
    )
    text += (
        '[extractor]\nmodel = "granite3.3:2b"\nbackend = "openai"\n'
        f'serve = {{ engine = "vllm", weights = "granite", weights_gb = 5.07{exe} }}\n'
    )
    path.write_text(text)
    return path


def test_serve_plan_prints_each_server_and_starts_nothing(
    cli: CLI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CRAWDAD_GPUS", TWO_H100)
    code, out, err = cli("serve", "--plan", str(served_toml(tmp_path / "c.toml")))
    assert code == 0, err
    assert "GPU  server" in out and "memory" in out and "port" in out
    rows = [line.split() for line in out.splitlines() if line.split()[:1] in (["0"], ["1"])]
    assert sorted(r[0] for r in rows) == ["0", "0", "1"]  # one GPU each, the extractor beside
    line = next(ln for ln in out.splitlines() if "vllm serve deepseek-ai/" in ln)
    assert "CUDA_VISIBLE_DEVICES=1 " in line
    assert "--reasoning-parser deepseek_r1" in out


def test_serve_plan_refuses_what_does_not_fit_and_says_what_would(
    cli: CLI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CRAWDAD_GPUS", ONE_H100)
    code, _out, err = cli("serve", "--plan", str(served_toml(tmp_path / "c.toml")))
    assert code == 1
    assert "do not fit" in err and "quantized checkpoint" in err and "another GPU" in err
    code, _out, err = cli("serve", "--plan", str(tmp_path / "c.toml"), "--gpus", "2")
    assert code == 0, err  # planned for a node elsewhere


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--gpus", "100000"], "--gpus"),
        (["--gpus", "-1"], "--gpus"),
        (["--gpus", "2", "--gpu-memory", "nan"], "--gpu-memory"),
        (["--gpus", "2", "--gpu-memory", "inf"], "--gpu-memory"),
        (["--gpus", "2", "--gpu-memory", "1e300"], "--gpu-memory"),
        (["--set", "agents.0.serve.replicas=0"], "replicas"),
        (["--set", "agents.0.serve.replicas=-1"], "replicas"),
        (["--set", "serving.first_port=70000"], "first_port"),
        (["--set", "agents.0.serve.context_length=-100"], "context_length"),
    ],
)
def test_serve_plan_refuses_absurd_flags_by_name(
    cli: CLI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flags: list[str], says: str
) -> None:
    monkeypatch.setenv("CRAWDAD_GPUS", TWO_H100)
    code, out, err = cli("serve", "--plan", str(served_toml(tmp_path / "c.toml")), *flags)
    assert code in (1, 2), out  # a usage error (2) or a refused setting (1), never a traceback
    assert says in err and "Traceback" not in err


def test_serve_needs_a_served_model(cli: CLI, tmp_path: Path) -> None:
    plain = tmp_path / "plain.toml"
    plain.write_text("seed = 1\n")
    code, _out, err = cli("serve", "--plan", str(plain))
    assert code == 1 and "no model of this config has a `serve` table" in err


def _script(cli: CLI, config: Path, *extra: str) -> str:
    code, out, err = cli("serve", "--slurm", str(config), "--gpus", "2", *extra)
    assert code == 0, err
    return out


def _check_shell(script: Path) -> None:
    subprocess.run(["bash", "-n", str(script)], check=True)
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck is not installed: bash -n passed")
    done = subprocess.run(["shellcheck", str(script)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout


def _job(text: str) -> dict[str, Any]:
    """The plan the script hands to each node's crawdad (job.json, a quoted here-document)."""
    data = text.split("<<'CRAWDAD_JOB_JSON'\n", 1)[1].split("\nCRAWDAD_JOB_JSON\n", 1)[0]
    return dict(json.loads(data))


def _job_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "CRAWDAD_"))}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["CRAWDAD_JOB_DIR"] = str(tmp_path / "job")
    return env


@pytest.mark.parametrize("nodes", ["1", "4"])
def test_the_slurm_script_pins_gpus_bounds_every_wait_and_passes_shellcheck(
    cli: CLI, tmp_path: Path, nodes: str
) -> None:
    text = _script(
        cli,
        served_toml(tmp_path / "c.toml"),
        "--nodes",
        nodes,
        "--sbatch",
        "--array=0-3",
        "--driver",
        "crawdad run --config c.toml --data d.zip --out runs/x",
    )
    script = tmp_path / "job.sh"
    script.write_text(text)
    _check_shell(script)
    assert "#SBATCH --gres=gpu:2" in text and "#SBATCH --array=0-3" in text
    job = _job(text)
    gpus = {s["weights"]: s["gpus"] for s in job["plan"]["servers"]}
    assert gpus["deepseek-ai/DeepSeek-R1-Distill-Qwen-32B"] == [1]  # the node maps it to its own
    assert "trap stop_all EXIT" in text and "wait -n" in text
    for line in text.splitlines():  # every wait has an end
        if line.strip().startswith(("while ", "until ")):
            assert "deadline" in line, line
    assert text.rstrip().endswith('exit "$status"')
    assert "--kill-on-bad-exit=1 crawdad serve --node" in text
    assert job["bind"] == ("node" if nodes == "4" else "loopback") and job["nodes"] == int(nodes)


def test_the_slurm_script_serves_and_stops_on_this_machine(
    cli: CLI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not shutil.which("setsid"):
        pytest.skip("the script needs setsid")
    standin = tmp_path / "fake-vllm"  # `vllm serve W --port N ...` -> the stand-in engine
    standin.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m crawdad.fake.standin "$@"\n')
    standin.chmod(0o755)
    config = served_toml(tmp_path / "c.toml", str(standin), "serving = { first_port = 18431 }\n")
    # The driver sees where the servers are (docs/tutorials/clusters.md runs a whole run so).
    text = _script(cli, config, "--driver", 'echo "$CRAWDAD_SERVED_URLS" > served.json')
    script = tmp_path / "job.sh"
    script.write_text(text)
    env = _job_env(tmp_path) | {"CUDA_VISIBLE_DEVICES": "0,1"}
    done = subprocess.run(
        ["bash", str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "every server is up" in done.stdout
    served = json.loads((tmp_path / "served.json").read_text())
    assert set(served) == {"qwen3:32b", "deepseek-r1:32b", "granite3.3:2b"}
    for urls in served.values():  # from serving.first_port up (a port in use is skipped)
        assert len(urls) == 1 and re.fullmatch(r"http://127\.0\.0\.1:184\d\d/v1", urls[0])
    (node,) = (tmp_path / "job" / "nodes").glob("*.json")
    for server in json.loads(node.read_text())["servers"].values():  # every group is gone
        with pytest.raises(ProcessLookupError):
            os.killpg(server["pid"], 0)


def test_served_urls_from_the_environment_point_served_models_at_running_servers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(
        "CRAWDAD_SERVED_URLS",
        '{"qwen3:32b": ["http://n1:8100/v1", "http://n2:8100/v1"], "granite3.3:2b": ["http://n1:8102"]}',
    )
    monkeypatch.setenv("CRAWDAD_SERVED_KEYS", "/job/keys.json")  # each server's own key
    config = RunConfig.model_validate(
        {
            "agents": [
                {"name": "a", "model": "qwen3:32b", "serve": {"engine": "vllm", "weights": "Q"}},
                {"name": "b", "model": "qwen3:32b"},  # no serve table: left alone
            ],
            "extractor": {"serve": {"engine": "ollama", "weights": "granite3.3:2b"}},
        }
    )
    assert config.agents[0].base_urls == ["http://n1:8100/v1", "http://n2:8100/v1"]
    assert config.agents[0].backend == "openai" and config.agents[0].serve is None
    assert config.agents[1].base_urls == ["http://localhost:11434"]
    assert config.extractor.backend == "ollama" and config.extractor.serve is None
    assert config.serving.keys_file == Path("/job/keys.json")


def test_doctor_checks_served_models_engine_weights_and_plan(
    cli: CLI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CRAWDAD_GPUS", TWO_H100)
    config = served_toml(tmp_path / "c.toml", str(tmp_path / "no" / "vllm"))
    code, out, err = cli("doctor", "--config", str(config))
    assert code == 1
    assert "vllm is not installed" in err and "fix: pip install vllm" in err
    assert "weights Qwen/Qwen3-32B: 61.0 GiB" in out
    assert "down" not in out  # no server is expected up before crawdad starts it
    standin = tmp_path / "vllm"
    standin.write_text("#!/bin/sh\necho 0.0-standin\n")
    standin.chmod(0o755)
    served_toml(config, str(standin))
    monkeypatch.setenv("CRAWDAD_GPUS", ONE_H100)
    code, _out, err = cli("doctor", "--config", str(config))
    assert code == 1 and "the plan does not fit" in err and "another GPU" in err


def test_doctor_accepts_an_experiment_file(
    cli: CLI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CRAWDAD_GPUS", TWO_H100)
    standin = tmp_path / "vllm"
    standin.write_text("#!/bin/sh\necho 0.0-standin\n")
    standin.chmod(0o755)
    served = (
        f'serve = {{ engine = "vllm", weights = "W", weights_gb = 5, executable = "{standin}" }}'
    )
    experiment = tmp_path / "e.toml"
    experiment.write_text(
        "[base]\n"
        f'agents = [{{ name = "a", model = "m1", backend = "openai", {served} }},'
        f' {{ name = "b", model = "m1", backend = "openai", {served} }}]\n'
        f'extractor = {{ model = "m1", backend = "openai", {served} }}\n'
        "[variants.short]\nprotocol = { max_turns = 2 }\n[variants.long]\n"
    )
    code, out, err = cli("doctor", "--config", str(experiment))
    assert code == 0, err
    assert "plan    1 server(s) fit on 2 GPU(s)" in out
    code, out, err = cli("serve", "--plan", str(experiment))
    assert code == 0, err
    assert "short:agents.0" in out and "long:extractor" in out


@pytest.mark.parametrize(
    ("body", "said"),
    [
        ('echo "torch.OutOfMemoryError: CUDA out of memory" >&2; exit 1', "exited with code 1"),
        ("exec sleep 300", "did not answer"),  # a server that never answers: the deadline
    ],
)
def test_the_slurm_script_ends_on_a_server_that_fails_or_never_answers(
    cli: CLI, tmp_path: Path, body: str, said: str
) -> None:
    standin = tmp_path / "bad-vllm"
    standin.write_text(f"#!/bin/sh\n{body}\n")
    standin.chmod(0o755)
    timeout = "5" if "sleep" in body else "600"  # 5 s: the shortest a config may set
    serving = f"serving = {{ first_port = 18441, startup_timeout = {timeout} }}\n"
    config = served_toml(tmp_path / "c.toml", str(standin), serving)
    script = tmp_path / "job.sh"
    script.write_text(_script(cli, config, "--driver", "touch driver-ran"))
    done = subprocess.run(
        ["bash", str(script)],
        cwd=tmp_path,
        env=_job_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1 and said in done.stderr
    if "exit 1" in body:
        assert "CUDA out of memory" in done.stderr  # the end of its log
    assert not (tmp_path / "driver-ran").exists()


def test_an_ollama_script_on_the_cpu_serves_each_tag(
    cli: CLI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CRAWDAD_GPUS", "none")
    code, text, err = cli("serve", "--slurm", "paper-ollama-served")
    assert code == 0, err
    script = tmp_path / "job.sh"
    script.write_text(text)
    _check_shell(script)
    assert "--gres" not in text and "CUDA_VISIBLE_DEVICES" not in text
    (server,) = _job(text)["plan"]["servers"]  # its node pulls what it lacks as it starts
    assert server["tags"] == ["qwen3:32b", "deepseek-r1:32b", "granite3.3:2b"]
    assert server["env"]["OLLAMA_MAX_LOADED_MODELS"] == "3"
