"""MAC's whole set on the fakes, as the README's commands run it: configs/experiments/mac.toml (the
Meta Agents, single agents, crawdad, self-consistency, the Coding Agents), the plain algorithms
(`crawdad discover-baseline`) and both hybrids (`crawdad run ... --set protocol.prior_from=...`),
on two CLadder graphs (killed once mid-experiment, then resumed) and on a Sachs-format set; one
report each, every system's SHD / NHD / F1 in one table, with CIs over the two CLadder graphs
and none on Sachs's one graph."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from crawdad.config import SelectionConfig
from crawdad.data.discovery_public import SACHS_VARIABLES
from crawdad.data.questions import read_raw
from crawdad.demo import answer_key
from crawdad.fake import AnswerKey, FakeServer, LatencyModel, models_for
from crawdad.run.experiment import load_experiment, variant_configs
from crawdad.run.store import read_jsonl_ids
from crawdad.tasks import task_named

ROOT = Path(__file__).resolve().parents[1]
MAC = ROOT / "configs" / "experiments" / "mac.toml"
META = ROOT / "configs" / "discovery" / "meta-agents.toml"
CODING = ROOT / "configs" / "discovery" / "coding-agents.toml"
EXAMPLES = ROOT / "crawdad" / "examples"
ALGORITHMS = ("pc", "ges", "direct-lingam", "ica-lingam", "exact")
PAIR_VARIANTS = ("meta-agents", "single-agent-qwen3", "single-agent-deepseek-r1", "crawdad")
SYSTEMS = (
    *PAIR_VARIANTS,
    "self-consistency-5",
    "coding-agents",
    *ALGORITHMS,
    "coding-debating",
    "debating-coding",
)


def cladder_with_tables(folder: Path) -> Path:
    """crawdad's example questions, their causal models given seeded random probability tables
    (the examples have none), so that each graph's data can be sampled."""
    folder.mkdir()
    questions, models, _ = read_raw(EXAMPLES)
    rng = random.Random(0)

    def table(depth: int) -> object:
        return round(rng.uniform(0.1, 0.9), 3) if depth == 0 else [table(depth - 1) for _ in "01"]

    for m in models:
        edges = [e.split("->") for e in m["structure"].split(",")]
        order = list(dict.fromkeys(v for e in edges for v in e))
        params = {}
        for v in order:
            parents = [a for a, b in edges if b == v]
            key = f"p({v} | {', '.join(parents)})" if parents else f"p({v})"
            params[key] = table(len(parents))
        m["params"] = params
    (folder / "cladder-tables-q-balanced.json").write_text(json.dumps(questions))
    (folder / "cladder-tables-meta-models.json").write_text(json.dumps(models))
    return folder


def sachs_like(folder: Path, rows: int = 200) -> Path:
    rng = np.random.default_rng(0)
    table = pd.DataFrame({n: rng.exponential(1.0, rows) for n in SACHS_VARIABLES})
    table["pmek"] += 2 * table["praf"]
    table["p44/42"] += 2 * table["pmek"]
    folder.mkdir()
    table.to_csv(folder / "cyto_full_data.csv", index=False)
    (folder / "cyto_full_target.csv").write_text(
        '"Cause","Effect"\n"praf","pmek"\n"pmek","p44/42"\n'
    )
    return folder


def fake_key(data: Path, limit: int | None) -> AnswerKey:
    key = AnswerKey()
    for name in ("discovery-pairs", "discovery-graph"):
        task = task_named(name)
        chosen = task.select(task.load(data), SelectionConfig(limit=limit), 0)
        answer_key(chosen.questions, task, key)
    return key


def served(key: AnswerKey) -> dict:  # type: ignore[type-arg]
    spec, _ = load_experiment(MAC)
    names = {n for cfg in variant_configs(spec, str(MAC)).values() for n in cfg.model_names()}
    return models_for(sorted(names), "granite3.3:2b", key)


def _lines(folder: Path) -> int:
    return sum(p.read_bytes().count(b"\n") for p in folder.glob("*/debates.jsonl"))


def run_everything(cli, data: Path, out: Path, limit: list[str], kill: bool) -> list[Path]:  # type: ignore[no-untyped-def]
    """The experiment (killed once when asked), the baselines and the hybrids; their folders."""
    exp = out / "mac"
    cmd = [
        sys.executable, "-m", "crawdad", "experiment", str(MAC), "--data", str(data),
        "--out", str(exp), "--no-progress", *limit,
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if kill:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        deadline = time.monotonic() + 120
        while _lines(exp) < 12 and proc.poll() is None:
            assert time.monotonic() < deadline, "the experiment made no progress"
            time.sleep(0.005)
        assert proc.poll() is None, "the experiment finished before the kill; make it longer"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    else:  # no process boundary to test: in this process (a Python start-up and imports saved)
        code, printed, err = cli(*cmd[3:])
        assert code == 0, printed + err
    folders = [exp / name for name in (*PAIR_VARIANTS, "self-consistency-5", "coding-agents")]
    for algorithm in ALGORITHMS:
        if algorithm == "exact" and "--limit" not in limit:
            continue  # Sachs's 11 variables: exact search takes minutes
        folder = out / "baselines" / algorithm
        code, printed, err = cli(
            "discover-baseline", str(data), "--algorithm", algorithm, "--rows", "500",
            *limit, "--out", str(folder),
        )  # fmt: skip
        assert code == 0, printed + err
        folders.append(folder)
    for name, config, prior in (
        ("coding-debating", META, exp / "coding-agents"),
        ("debating-coding", CODING, exp / "meta-agents"),
    ):
        folder = out / "hybrids" / name
        code, printed, err = cli(
            "run", "--config", str(config), "--data", str(data), *limit, "--no-progress",
            "--set", f"protocol.prior_from={prior}", "--out", str(folder),
        )  # fmt: skip
        assert code == 0, printed + err
        folders.append(folder)
    return folders


def summary_of(cli, folders: list[Path], report: Path) -> pd.DataFrame:  # type: ignore[no-untyped-def]
    code, printed, err = cli("analyze", *map(str, folders), "--out", str(report))
    assert code == 0, printed + err
    text = (report / "report.md").read_text()
    assert "## Causal discovery (MAC)" in text
    summary = pd.read_csv(report / "discovery" / "tables" / "summary.csv")
    return summary[(summary["dimension"] == "overall") & (summary["stage"] == "final")].set_index(
        "run"
    )


@pytest.fixture
def fake_servers(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    started: list[FakeServer] = []

    def start(key: AnswerKey) -> None:
        latency = LatencyModel(base_seconds=0.005, per_token_seconds=0.000005, capacity=8)
        server = FakeServer("ollama", served(key), latency=latency).start()
        started.append(server)
        monkeypatch.setenv("OLLAMA_HOST", f"{server.host}:{server.port}")

    yield start
    for server in started:
        server.stop()


# The whole of MAC's set: an experiment, five baselines, two hybrids and a report (15-20 s
# alone; minutes on a loaded 2-core machine).
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_macs_whole_set_runs_resumes_and_reports_on_cladder_graphs(
    cli, tmp_path: Path, fake_servers
) -> None:  # type: ignore[no-untyped-def]
    data = cladder_with_tables(tmp_path / "cladder")
    fake_servers(fake_key(data, 2))
    folders = run_everything(cli, data, tmp_path, ["--limit", "2"], kill=True)
    for folder in folders[:6]:  # every item once, none errored, after the kill and the resume
        ids = read_jsonl_ids(folder / "debates.jsonl")
        assert len(ids) == len(set(ids)) == (2 if folder.name == "coding-agents" else 12)
    finals = summary_of(cli, folders, tmp_path / "report")
    assert set(finals.index) == set(SYSTEMS)
    for system in SYSTEMS:
        row = finals.loc[system]
        assert row["graphs"] == 2 and row["graphs_incomplete"] == 0, system
        for m in ("shd", "nhd", "edge_f1"):
            assert row[f"{m}_lo"] <= row[m] <= row[f"{m}_hi"], (system, m)
    assert finals.loc["coding-debating", "protocol"] == "judge (stances) + prior"
    assert finals.loc["debating-coding", "protocol"] == "coding + prior, whole graph"
    assert finals.loc["pc", "protocol"] == "algorithm"
    # The experiment's own report: the pair variants compared question by question, every
    # variant's graphs (the coding agents' too) in its Causal discovery section.
    code, printed, err = cli("analyze", str(tmp_path / "mac"), "--out", str(tmp_path / "exp"))
    assert code == 0, printed + err
    text = (tmp_path / "exp" / "report.md").read_text()
    assert "Variants of another task than the baseline's (discovery-pairs): `coding-agents`" in text
    versus = pd.read_csv(tmp_path / "exp" / "discovery" / "tables" / "versus_baseline.csv")
    assert "coding-agents" in set(versus["run"]) and set(versus["graphs"]) == {2}


# The whole of MAC's set: an experiment, five baselines, two hybrids and a report (15-20 s
# alone; minutes on a loaded 2-core machine).
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_macs_whole_set_runs_and_reports_on_a_sachs_format_set(
    cli, tmp_path: Path, fake_servers
) -> None:  # type: ignore[no-untyped-def]
    data = sachs_like(tmp_path / "sachs")
    fake_servers(fake_key(data, None))
    folders = run_everything(cli, data, tmp_path, [], kill=False)
    finals = summary_of(cli, folders, tmp_path / "report")
    assert set(finals.index) == set(SYSTEMS) - {"exact"}
    for system, row in finals.iterrows():
        assert row["graphs"] == 1 and not pd.isna(row["shd"]), system
        assert pd.isna(row["shd_lo"]) and pd.isna(row["edge_f1_hi"]), system  # one graph: no CI
    text = (tmp_path / "report" / "report.md").read_text()
    assert "no CI over graphs" in text
    # An algorithm run has no responses: a note, not empty length and timing figures
    drawn = {p.name for p in (tmp_path / "report" / "pc" / "figures").glob("*.png")}
    assert drawn == {"protocol_accuracy.png"}
    assert "Not shown for this algorithm run (short_debate_turns, lengths, fig7_lengths)" in text
    # MAC's published SHD and NHD on Sachs beside each kind of system (issue 29)
    assert "Against the published figures (MAC" in text and "Table 2" in text
    card = pd.read_csv(tmp_path / "report" / "discovery" / "tables" / "published_mac.csv")
    pc = card[card["run"] == "pc"].iloc[0]
    assert (pc["paper_model"], pc["paper_shd"], pc["paper_nhd"]) == ("PC", 24, 0.206)
    assert pc["shd"] == finals.loc["pc", "shd"]
    debate = card[card["run"] == "meta-agents"]
    assert set(debate["paper_system"]) == {"Causal Agent Debate"} and len(debate) == 6
    assert debate["setup"].str.startswith("simulated").all()


def test_macs_configs_sample_at_temperature_0_and_one_setting_changes_it(
    cli, tmp_path: Path
) -> None:
    """MAC ran at temperature 0: its configs' debaters and judge do (the manifest shows it);
    `--set temperature=0.6` changes all of them; a debater's own temperature beside it is named."""
    out = tmp_path / "meta"
    code, printed, _ = cli("demo", "--config", str(META), "--limit", "1", "--out", str(out))
    assert code == 0, printed
    config = json.loads((out / "manifest.json").read_text())["config"]
    assert config["temperature"] == 0.0 and config["judge"]["temperature"] == 0.0
    assert [a["temperature"] for a in config["agents"]] == [0.0, 0.0]
    from crawdad.config import load_config

    assert {a.temperature for a in load_config(CODING).agents} == {0.0}
    warm = load_config(META, {"temperature": 0.6})
    assert warm.judge is not None and warm.judge.temperature == 0.6
    assert {a.temperature for a in warm.agents} == {0.6}
    from crawdad.cli import build_config
    from crawdad.errors import ConfigError

    assert {a.temperature for a in build_config(META, ["temperature=0.6"]).agents} == {0.6}
    with pytest.raises(ConfigError, match=r"change temperature itself \(--set temperature=0.6\)"):
        build_config(META, ["agents.0.temperature=0.6"])
    spec, _ = load_experiment(MAC)
    temps = {
        n: {a.temperature for a in c.agents} for n, c in variant_configs(spec, str(MAC)).items()
    }
    assert all(temps[v] == {0.0} for v in ("meta-agents", "single-agent-qwen3", "coding-agents"))
    assert temps["crawdad"] == temps["self-consistency-5"] == {0.6}  # crawdad's own: the paper's


@pytest.mark.parametrize("algorithm", ["fci", "cdnod"])
def test_discover_baseline_runs_fci_and_cdnod(cli, tmp_path: Path, algorithm: str) -> None:
    data = cladder_with_tables(tmp_path / "cladder")
    out = tmp_path / algorithm
    code, printed, _ = cli(
        "discover-baseline", str(data), "--algorithm", algorithm, "--rows", "500",
        "--limit", "2", "--out", str(out),
    )  # fmt: skip
    assert code == 0 and "2 graph(s) computed, 0 failed" in printed, printed
    records = [json.loads(x) for x in (out / "debates.jsonl").read_text().splitlines()]
    assert {r["item"]["algorithm"] for r in records} == {algorithm}
    assert all(
        r["end"] == "computed" and r["item"]["params"]["indep_test"] == "chisq" for r in records
    )
    assert all("partial" in r["item"] for r in records)  # FCI's o-> edges, listed
    if algorithm == "cdnod":
        assert {r["item"]["params"]["context"] for r in records} == {"row"}
    code, printed, err = cli(
        "discover-baseline", str(data), "--algorithm", algorithm, "--param", "context=zz",
        "--limit", "1", "--out", str(tmp_path / "bad"),
    )  # fmt: skip
    expected = "context = 'zz'" if algorithm == "cdnod" else "fci has no parameter 'context'"
    assert code == 1 and expected in printed + err
