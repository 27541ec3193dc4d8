"""Issue 39's misses, each with the test that would have caught it (the first hour of a new
user, from the documentation word for word)."""

from __future__ import annotations

import io
import re
import sys
from pathlib import Path

import pytest

from crawdad.config import load_config
from crawdad.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]

# --- 3: the config how-to's TOML, and errors that blame only what changed the outcome ---------


def test_the_config_how_tos_toml_is_a_valid_config(tmp_path: Path) -> None:
    page = (ROOT / "docs" / "how-to" / "config.md").read_text()
    block = re.search(r"```toml\n(.*?)```", page, flags=re.S)
    assert block is not None
    path = tmp_path / "cfg.toml"
    path.write_text(block.group(1))
    cfg = load_config(path, {"selection": {"limit": 4}}, {("selection", "limit"): "--limit 4"})
    assert len(cfg.agents) >= 2 and cfg.selection.limit == 4


def test_a_flag_that_does_not_change_the_outcome_is_not_blamed(tmp_path: Path) -> None:
    path = tmp_path / "cfg.toml"
    path.write_text('[[agents]]\nname = "a"\nmodel = "m"\n')
    with pytest.raises(ConfigError) as e:
        load_config(path, {"selection": {"limit": 4}}, {("selection", "limit"): "--limit 4"})
    assert f"{path} is not a valid crawdad config" in str(e.value)
    assert "--limit" not in str(e.value) and "together" not in str(e.value)


def test_a_flag_that_makes_the_settings_invalid_is_named(tmp_path: Path) -> None:
    path = tmp_path / "cfg.toml"
    path.write_text('[protocol]\nkind = "solo"\n[[agents]]\nname = "a"\nmodel = "m"\n')
    load_config(path)  # one agent is enough for solo
    with pytest.raises(ConfigError, match=re.escape("--set protocol.kind=crawdad")):
        load_config(
            path,
            {"protocol": {"kind": "crawdad"}},
            {("protocol", "kind"): "--set protocol.kind=crawdad"},
        )


# --- 2: the notebook API names the servers and the overrides, as the command line does --------


async def test_a_notebook_run_takes_overrides_and_a_server(tmp_path: Path, monkeypatch) -> None:
    import json

    import crawdad
    from crawdad.data.demo_questions import EXAMPLES
    from crawdad.data.questions import load_cladder
    from crawdad.demo import answer_key
    from crawdad.fake import FakeServer, paper_models

    monkeypatch.delenv("OLLAMA_HOST", raising=False)
    key = answer_key(load_cladder(EXAMPLES).questions)
    async with FakeServer("ollama", paper_models(key)) as server:
        summary = await crawdad.run_async(
            "examples",
            tmp_path / "r",
            "paper-ollama",
            limit=2,
            overrides={"protocol.max_turns": 2, "agents.1.temperature": 0.5},
            server=server.url,
        )
    assert summary.done_total == 2
    manifest = json.loads((tmp_path / "r" / "manifest.json").read_text())
    assert manifest["config"]["protocol"]["max_turns"] == 2
    assert manifest["config"]["agents"][1]["temperature"] == 0.5
    # 9: a fake server says it is one; the manifest and every record say simulated
    records = [json.loads(line) for line in (tmp_path / "r" / "debates.jsonl").open()]
    assert manifest["simulated"] and records and all(r["simulated"] for r in records)


async def test_servers_that_do_not_answer_name_what_python_passes(
    tmp_path: Path, unused_tcp_port: int
) -> None:
    import crawdad
    from crawdad.errors import ServersNotReady

    with pytest.raises(ServersNotReady, match=r"(?s)server=URL.*OLLAMA_HOST.*fake_server"):
        await crawdad.run_async(
            "examples", tmp_path / "r", limit=1, server=f"http://127.0.0.1:{unused_tcp_port}"
        )


def test_notebook_overrides_are_checked_like_set() -> None:
    from crawdad.config import with_overrides

    cfg = load_config(Path("paper-ollama"))
    assert with_overrides(cfg, ["agents.0.model=qwen3:8b"]).agents[0].model == "qwen3:8b"
    with pytest.raises(ConfigError, match=r"agents has 2 entries, numbered 0\.\.1"):
        with_overrides(cfg, {"agents.2.model": "x"})
    with pytest.raises(ConfigError, match="did you mean 'agents'"):
        with_overrides(cfg, {"agnets.0.model": "x"})


# --- 7: `crawdad show` prints the question, and no None --------------------------------------


def test_show_of_a_question_of_ones_own_table_prints_no_none() -> None:
    from crawdad.records import DebateRecord
    from crawdad.show import format_debate

    record = DebateRecord(
        task="cladder-data",
        question_id="q1",
        gold=None,
        rung=2,
        query_type="ate",
        alignment=None,
        protocol="solo",
        agents={"a": "m"},
        consensus=True,
        final_answer="no",
    )
    text = format_debate(record, question="Does smoking raise cancer?\n\nQuestion: Is it so?")
    head = text.split("\n\n")[0]
    assert "rung 2, ate;" in head and "None" not in text
    assert "consensus" not in head  # one agent agrees with no one
    assert "  Question: Is it so?" in text
    assert "--data" in format_debate(record)  # no text at hand: says where to get it


def test_the_tutorials_experiment_runs_on_a_public_fake_server(tmp_path: Path, monkeypatch) -> None:
    import crawdad

    monkeypatch.delenv("OLLAMA_HOST", raising=False)
    fakes = crawdad.fake_server("experiments/paper-ablations")
    try:
        summaries = crawdad.experiment_sync(
            "experiments/paper-ablations",
            "examples",
            tmp_path / "abl",
            limit=2,
            server=fakes.url,
            overrides={"selection.rungs": [1]},
        )
    finally:
        fakes.stop()
    assert summaries and all(s.done_total == 2 and s.errored == 0 for s in summaries)
    frames = crawdad.load_frames(tmp_path / "abl")
    assert set(frames.debates["rung"]) == {1}  # the selection override chose the questions


# --- 4: one agent reports no consensus --------------------------------------------------------


async def test_a_one_agent_run_reports_no_consensus(tmp_path: Path) -> None:
    import crawdad
    from crawdad.run.runner import Progress

    fakes = crawdad.fake_server("protocols/solo")
    try:
        summary = await crawdad.run_async(  # as the solo variants of paper-ablations
            "examples",
            tmp_path / "solo",
            "protocols/solo",
            limit=2,
            server=fakes.url,
            overrides={"agents": [{"name": "qwen3", "model": "qwen3:32b"}]},
        )
    finally:
        fakes.stop()
    text = "\n".join(summary.lines())
    assert summary.agents == 1 and "consensus rate" not in text
    assert "consensus n/a (one agent)" in text
    from crawdad.config import RunConfig
    from crawdad.run.runner import Job, build_setup
    from crawdad.run.store import RunStore

    setup, _ = build_setup(RunConfig.model_validate({}))
    line = Progress([Job(setup, RunStore(tmp_path / "solo"), [], summary)], False).postfix(0.0)
    assert "acc " in line and "cons" not in line


async def test_a_solo_run_of_two_agents_prints_no_consensus_rate(tmp_path: Path) -> None:
    """Agents answering alone never saw each other's answers: they cannot reach consensus, so
    the summary and the progress line print no consensus rate (the report says "answers agree")."""
    import crawdad
    from crawdad.run.runner import Progress

    fakes = crawdad.fake_server("protocols/solo")
    try:
        summary = await crawdad.run_async(
            "examples", tmp_path / "solo", "protocols/solo", limit=2, server=fakes.url
        )
    finally:
        fakes.stop()
    text = "\n".join(summary.lines())
    assert summary.agents == 2 and summary.alone
    assert (
        "consensus rate" not in text and "no consensus to report (the agents answer alone)" in text
    )
    from crawdad.config import RunConfig
    from crawdad.run.runner import Job, build_setup
    from crawdad.run.store import RunStore

    setup, _ = build_setup(RunConfig.model_validate({}))
    line = Progress([Job(setup, RunStore(tmp_path / "solo"), [], summary)], False).postfix(0.0)
    assert "acc " in line and "cons" not in line


# --- 5: the report's sentences and the experiment figure ---------------------------------------


def test_an_accuracy_that_does_not_change_is_said_so() -> None:
    import pandas as pd
    from crawdad.analysis.metrics.accuracy import ALL
    from crawdad.analysis.narrative import accuracy_lines

    row = dict(n=10, gain=0.0, initial_acc=0.5, final_acc=0.5, gain_ci_lo=-0.1, gain_ci_hi=0.1)
    row |= dict(p_value=1.0, i_to_c=1, c_to_i=1)
    mcnemar = pd.DataFrame([{"agent": "deepseek-r1", **row}, {"agent": ALL, **row}])
    lines = accuracy_lines(mcnemar, pd.DataFrame(columns=["dimension", "agent"]))
    assert lines[0].startswith("**deepseek-r1** does not change after debate (50")
    assert lines[1].startswith("All first speakers together do not change after debate")
    assert not any("bys" in line or "change by" in line for line in lines)
    gained = accuracy_lines(mcnemar.assign(gain=0.1), pd.DataFrame(columns=["dimension", "agent"]))
    assert gained[0].startswith("**deepseek-r1** gains 10.0 points after debate")


def test_the_experiment_figures_labels_do_not_overlap_and_its_markers_are_keyed() -> None:
    import itertools

    import pandas as pd
    from crawdad.analysis.figures.experiment import compute_figure
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.text import Text

    names = ["paper", "no-be-confident", "judge", "self-consistency-5", "solo-a", "three"]
    kinds = ["crawdad", "crawdad", "judge", "solo", "solo", "crawdad"]
    points = pd.DataFrame(
        {
            "variant": names,
            "protocol": kinds,
            "tokens": [1600, 1610, 1590, 1650, 1000, 2600],  # crowded, as the fakes' runs are
            "acc": [0.9, 0.9, 0.85, 0.9, 0.85, 0.9],
            "ci_lo": [0.75, 0.75, 0.7, 0.75, 0.7, 0.75],
            "ci_hi": [1.0, 1.0, 0.95, 1.0, 0.95, 1.0],
            "baseline": [True, False, False, False, False, False],
        }
    )
    curves = pd.DataFrame(columns=["variant", "agent", "model", "k", "tokens", "acc"])
    fig = compute_figure(points, curves)
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    numbers = [t for t in fig.axes[0].texts if t.get_text().isdigit()]
    assert sorted(int(t.get_text()) for t in numbers) == list(range(1, len(names) + 1))
    boxes = [Text.get_window_extent(t, renderer) for t in numbers]  # the text, not its leader
    assert not any(a.overlaps(b) for a, b in itertools.combinations(boxes, 2))
    key = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "1 paper (crawdad, baseline)" in key and "3 judge (judge)" in key
    assert "4 self-consistency-5 (solo)" in key


# --- 8: the notebook's frames and figures ------------------------------------------------------


@pytest.mark.timeout(300)
async def test_frames_print_short_and_figures_of_two_runs_name_the_run(tmp_path: Path) -> None:
    from matplotlib.figure import Figure

    import crawdad
    from crawdad.errors import CrawdadError

    fakes = crawdad.fake_server()
    try:
        for name in ("a", "b"):
            await crawdad.run_async(
                "examples", tmp_path / name, limit=3, server=fakes.url, overrides={"seed": 1}
            )
    finally:
        fakes.stop()
    frames = crawdad.load_frames(tmp_path / "a", tmp_path / "b", compare=True)
    text = repr(frames)
    assert text.startswith("Frames(2 runs: ") and "6 debates" in text and len(text) < 400
    assert "manifest" not in text.lower()
    with pytest.raises(CrawdadError, match=r"run=") as e:
        crawdad.report_figures(frames)
    assert all(label in str(e.value) for label in frames.labels)
    figs = crawdad.report_figures(frames, run=frames.labels[1])
    assert isinstance(figs["protocol_accuracy"], Figure) and "accuracy" in figs


# --- 9: smaller misleads -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "meant"),
    [
        ("protocols/jduge", "protocols/judge"),
        ("jduge", "protocols/judge"),
        ("paper-vlm", "paper-vllm"),
    ],
)
def test_a_mistyped_ready_config_gets_a_suggestion(given: str, meant: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(f"did you mean {meant!r}?")):
        load_config(Path(given))


def test_doctor_suggests_each_models_own_reasoning_parser(unused_tcp_port: int) -> None:
    from crawdad.cli import build_config
    from crawdad.doctor import fix_command

    url = f"http://127.0.0.1:{unused_tcp_port}/v1"
    sets = [f'{role}.base_urls=["{url}"]' for role in ("agents.0", "agents.1", "extractor")]
    cfg = build_config(Path("paper-vllm"), sets)
    qwen, deepseek = (fix_command(a) for a in cfg.agents)
    assert qwen.endswith("--reasoning-parser qwen3") and "Qwen/Qwen3-32B" in qwen
    assert deepseek.endswith("--reasoning-parser deepseek_r1")
    assert "--reasoning-parser" not in fix_command(cfg.extractor)  # Granite needs none
    from crawdad.backends.openai_compat import translate_error

    refused = translate_error(ConnectionRefusedError(111, "refused"), url, "")
    assert "nothing answers" in str(refused) and "deepseek_r1" not in str(refused)  # no guess


def test_a_fake_server_without_data_says_it_answers_other_questions_at_chance(
    tmp_path: Path,
) -> None:
    from crawdad.demo import server_banner
    from crawdad.fake import FakeServer, LatencyModel, paper_models

    with FakeServer("ollama", paper_models()) as server:
        bare = server_banner(server, None, LatencyModel())
        told = server_banner(server, None, LatencyModel(), data=tmp_path / "tables")
    assert "at chance" in bare and "--data DATA" in bare
    assert f"knows the answers of {tmp_path / 'tables'}" in told and "at chance" not in told


def test_the_fake_data_agent_answers_a_question_without_answer_as_its_result_says(
    tmp_path: Path,
) -> None:
    """The own-table how-to's kidney stones: the adjusted effect of open surgery is +0.054, so
    the agents that computed it answer yes (they answered a coin's no before)."""
    import csv
    import json
    import subprocess
    import sys

    import crawdad

    groups = [("open", "small", 81, 87), ("open", "large", 192, 263)]
    groups += [("PCNL", "small", 234, 270), ("PCNL", "large", 55, 80)]
    with (tmp_path / "kidney.csv").open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["treatment", "stone size", "success"])
        for treatment, size, successes, patients in groups:
            for i in range(patients):
                writer.writerow([treatment, size, "yes" if i < successes else "no"])
    folder = tmp_path / "kidney"
    own = [sys.executable, "-m", "crawdad", "data", "own", str(tmp_path / "kidney.csv")]
    own += ["--out", str(folder), "--treatment", "treatment", "--outcome", "success"]
    own += ["--graph", "stone_size->treatment, stone_size->success, treatment->success"]
    own += ["--code", "treatment=open", "--code", "stone_size=large"]
    subprocess.run(own, check=True, capture_output=True)
    for config in ("protocols/data-agent", "ablations/data-tools"):
        fakes = crawdad.fake_server(config, folder)
        out = tmp_path / config.replace("/", "-")
        try:
            crawdad.run_sync(folder, out, config, server=fakes.url)
        finally:
            fakes.stop()
        record = json.loads((out / "debates.jsonl").read_text().splitlines()[0])
        values = [c["result"]["value"] for t in record["turns"] for c in t["tool_calls"]]
        assert values and all(abs(v - 0.0537) < 1e-3 for v in values)
        assert set(record["agent_answers"].values()) == {"yes"}, record["agent_answers"]


def test_the_slowest_responses_table_says_seconds_in_its_name() -> None:
    from crawdad.analysis.report import TABLES, WALL_CLOCK_TABLES

    assert "slowest_seconds" in TABLES and "slowest_seconds" in WALL_CLOCK_TABLES
    assert "slowest" not in TABLES


# --- 6: progress on the report's waits ---------------------------------------------------------


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_report_shows_its_phases_on_a_terminal_and_as_lines_in_a_log(
    tmp_path: Path, monkeypatch
) -> None:
    from crawdad.analysis.report import write_report
    from crawdad.analysis.report_progress import ReportProgress

    from crawdad.demo import run_demo

    run = tmp_path / "run"
    run_demo(run, limit=2, progress=False)
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    write_report([run], tmp_path / "report", workers=1, progress=True)
    shown = terminal.getvalue()
    for phase in ("loading 1 run folder", "computing tables", "writing tables", "drawing figures"):
        assert phase in shown, shown[-500:]
    log = io.StringIO()  # not a terminal: no bar, even when asked for
    monkeypatch.setattr(sys, "stderr", log)
    with ReportProgress(True) as bar:
        bar.phase("drawing figures", 3)
        bar.step()
    assert log.getvalue() == ""
    with ReportProgress("lines") as bar:  # the demo piped: a line per phase
        bar.phase("drawing figures", 3)
    assert log.getvalue() == "report [0:00]: drawing figures\n"
