"""The causal discovery analysis (analysis/tasks/discovery/):
pairs' answers assembled into graphs and scored, worked out by hand on a tiny run folder; the
report's "Causal discovery" section on runs and experiments made on the fakes; a discovery run
killed and resumed.

The hand-made run: two 3-variable graphs, every ordered pair a record of the crawdad protocol,
agents "qa" (model m1) and "rb" (model m2); each record has qa's turn then rb's, the final answer
is rb's.

  g1: variables A, B, C; truth A->B, B->C.
      final answers  A->B yes, B->A no, B->C no, C->B yes, A->C yes, C->A (not extracted)
      -> predicted A->B, C->B, A->C. SHD: {A,B} same, {B,C} reversed (1), {A,C} extra (1) = 2.
         NHD: edges differing C->B, B->C, A->C = 3 of 9 = 1/3. Skeleton: predicted {AB, BC, AC}
         against {AB, BC}: precision 2/3, recall 1, F1 0.8. Orientation: 1 of 3 predicted
         edges is true, 1 of 2 true edges found: F1 = 2 (1/3)(1/2) / (5/6) = 0.4.
         Pair accuracy 2/6 (the unanswered pair counts as wrong, its edge as absent).
      qa's first answers: all "no" -> the empty graph: SHD 2, NHD 2/9, F1 0 (not undefined),
         pair accuracy 4/6.
  g2: variables X, Y, Z; truth X->Y, Z->Y (a collider).
      every final answer right, but the X->Y debate errored (final None) -> predicted Z->Y:
         SHD 1, NHD 1/9, edge F1 2 (1)(1/2) / (3/2) = 2/3, pair accuracy 5/6, 1 errored pair.
      qa's first answers: right on every pair (its turn came before the error).
  mean SHD of the final answers over the two graphs: 1.5; of qa's first answers: 1.0.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
import warnings
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
import pytest
from crawdad.analysis.load import load_run
from crawdad.analysis.metrics._stats import bootstrap_mean
from crawdad.analysis.report import write_report
from crawdad.analysis.tasks.discovery import metrics as D
from crawdad.analysis.tasks.discovery.sections import discovery_frames, is_discovery_run, score

from crawdad.config import SelectionConfig
from crawdad.data.demo_questions import EXAMPLES
from crawdad.demo import answer_key
from crawdad.fake import FakeServer, LatencyModel, paper_models
from crawdad.records import DatasetInfo, DebateRecord, RunManifest, Turn
from crawdad.run.store import read_jsonl_ids
from crawdad.tasks import task_named
from tests.conftest import paper_toml

AGENTS = {"qa": "m1", "rb": "m2"}
QA, RB = "qa (m1)", "rb (m2)"
GRAPHS = {
    "g1": (("A", "B", "C"), {("A", "B"), ("B", "C")}, "commonsense", "chain"),
    "g2": (("X", "Y", "Z"), {("X", "Y"), ("Z", "Y")}, "nonsense", "collision"),
}
# (graph, cause, effect) -> (qa's first answer, the final answer); "error": the debate errored
ANSWERS = {
    ("g1", "A", "B"): ("no", "yes"),
    ("g1", "B", "A"): ("no", "no"),
    ("g1", "B", "C"): ("no", "no"),
    ("g1", "C", "B"): ("no", "yes"),
    ("g1", "A", "C"): ("no", "yes"),
    ("g1", "C", "A"): ("no", None),
    ("g2", "X", "Y"): ("yes", "error"),
    ("g2", "Y", "X"): ("no", "no"),
    ("g2", "Y", "Z"): ("no", "no"),
    ("g2", "Z", "Y"): ("yes", "yes"),
    ("g2", "X", "Z"): ("no", "no"),
    ("g2", "Z", "X"): ("no", "no"),
}


def _turn(i: int, agent: str, answer: str | None, tokens: int) -> Turn:
    return Turn(
        round=i,
        agent=agent,
        model=AGENTS[agent],
        role="initial" if i == 0 else "critique",
        template="t@000000000000",
        prompt_sha256="0" * 64,
        text="text",
        answer=answer,
        completion_tokens=tokens,
        seconds=1.0,
        server_seconds=0.5 if agent == "qa" else None,
    )


def handmade_records() -> list[DebateRecord]:
    out = []
    for (graph, cause, effect), (first, final) in ANSWERS.items():
        names, truth, alignment, kind = GRAPHS[graph]
        errored = final == "error"
        turns = [_turn(0, "qa", first, 100)]
        if not errored:
            turns.append(_turn(1, "rb", final, 50))
        out.append(
            DebateRecord(
                task="discovery-pairs",
                question_id=f"{graph}:{cause}->{effect}",
                gold="yes" if (cause, effect) in truth else "no",
                alignment=alignment,  # type: ignore[arg-type]
                graph_id=kind,
                item={
                    "graph": graph,
                    "source": "cladder",
                    "cause": cause,
                    "effect": effect,
                    "variables": list(names),
                },
                agents=AGENTS,
                speaking_order=["qa", "rb"],
                first_speaker="qa",
                second_speaker="rb",
                turns=turns,
                final_answer=None if errored else final,
                error="ServerUnavailable: gone" if errored else None,
                end="error" if errored else "cap",
                prompt_set="mac-pairs",
            )
        )
    return out


def write_handmade_run(path: Path, records: list[DebateRecord]) -> Path:
    path.mkdir(parents=True)
    manifest = RunManifest(
        crawdad_version="0.0.0",
        created_at=datetime(2026, 1, 1, tzinfo=UTC),
        config={"task": "discovery-pairs", "seed": 0, "agents": AGENTS},
        prompts={},
        dataset=DatasetInfo(
            source="handmade",
            questions_file="",
            models_file="",
            sha256="0" * 64,
            n_total=12,
            n_selected=12,
        ),
    )
    (path / "manifest.json").write_text(manifest.model_dump_json())
    (path / "debates.jsonl").write_text("".join(r.model_dump_json() + "\n" for r in records))
    return path


def scored(path: Path):  # type: ignore[no-untyped-def]
    with pytest.warns(UserWarning):
        run = load_run(path)
    assert is_discovery_run(run)
    return score(discovery_frames(run))


def _row(scores: pd.DataFrame, who: str, graph: str) -> pd.Series:
    rows = scores[(scores["who"] == who) & (scores["graph"] == graph)]
    assert len(rows) == 1
    return rows.iloc[0]


def test_graphs_assembled_from_the_pairs_score_as_worked_out_by_hand(tmp_path: Path) -> None:
    sc = scored(write_handmade_run(tmp_path / "hand", handmade_records()))
    g1 = _row(sc.scores, D.FINAL, "g1")
    assert (g1["shd"], g1["nhd"]) == (2, pytest.approx(1 / 3))
    assert g1["edge_precision"] == pytest.approx(2 / 3) and g1["edge_recall"] == 1.0
    assert g1["edge_f1"] == pytest.approx(0.8) and g1["orientation_f1"] == pytest.approx(0.4)
    assert g1["pair_acc"] == pytest.approx(2 / 6)
    assert (g1["n_unanswered"], g1["n_errored"], g1["predicted_edges"]) == (1, 0, 3)
    g2 = _row(sc.scores, D.FINAL, "g2")
    assert (g2["shd"], g2["nhd"]) == (1, pytest.approx(1 / 9))
    assert g2["edge_f1"] == pytest.approx(2 / 3) and g2["pair_acc"] == pytest.approx(5 / 6)
    assert (g2["n_unanswered"], g2["n_errored"]) == (0, 1)
    # qa's first answers: the empty graph on g1 (F1 0, not undefined), all right on g2.
    q1, q2 = _row(sc.scores, QA, "g1"), _row(sc.scores, QA, "g2")
    assert (q1["shd"], q1["nhd"], q1["edge_f1"], q1["predicted_edges"]) == (
        2,
        pytest.approx(2 / 9),
        0.0,
        0,
    )
    assert (q2["shd"], q2["edge_f1"], q2["n_errored"]) == (0, 1.0, 0)
    # rb never answered X->Y first (the debate errored before its turn): unanswered... as an
    # errored pair, and no edge.
    r2 = _row(sc.scores, RB, "g2")
    assert (r2["n_errored"], r2["shd"]) == (1, 1)
    # Cost per graph: the final answer costs every turn of the graph's records, a first answer
    # its own turn; requests count the turns (no extractor calls here).
    assert g1["tokens"] == 6 * 150 and g2["tokens"] == 6 * 100 + 5 * 50
    assert q1["tokens"] == 600 and q1["requests"] == 6
    assert g1["gpu_seconds"] == pytest.approx(6 * (0.5 + 1.0))


def test_the_summary_gives_means_over_graphs_with_cis_that_bracket_them(tmp_path: Path) -> None:
    sc = scored(write_handmade_run(tmp_path / "hand", handmade_records()))
    s = sc.summary
    overall = s[(s["dimension"] == "overall")].set_index("who")
    final = overall.loc[D.FINAL]
    assert (final["graphs"], final["pairs"], final["n_unanswered"], final["n_errored"]) == (
        2,
        12,
        1,
        1,
    )
    assert final["shd"] == pytest.approx(1.5) and overall.loc[QA, "shd"] == pytest.approx(1.0)
    assert final["tokens_per_graph"] == pytest.approx((900 + 850) / 2)
    assert final["requests_per_pair"] == pytest.approx(23 / 12)
    for m in D.METRICS:
        assert final[f"{m}_lo"] <= final[m] <= final[f"{m}_hi"], m
    assert (final["shd_lo"], final["shd_hi"]) == (1.0, 2.0)  # two graphs: SHD 1 and 2
    by = s[s["dimension"] == "alignment"].set_index(["who", "group"])
    assert by.loc[(D.FINAL, "Comm."), "shd"] == 2 and by.loc[(D.FINAL, "Nonsens."), "shd"] == 1
    kinds = set(s.loc[s["dimension"] == "kind", "group"])
    assert kinds == {"chain", "collision"}
    # The debate against qa's first answers, paired by graph: SHD 2 - 2 on g1, 1 - 0 on g2.
    paired = D.debate_vs_first(sc.scores).set_index("against_who")
    assert paired.loc[QA, "graphs"] == 2 and paired.loc[QA, "d_shd"] == pytest.approx(0.5)
    assert paired.loc[QA, "d_shd_lo"] == 0.0 and paired.loc[QA, "d_shd_hi"] == 1.0


def test_a_graph_with_pairs_not_yet_recorded_is_left_out_and_counted(tmp_path: Path) -> None:
    records = [r for r in handmade_records() if r.question_id != "g2:Z->X"]
    sc = scored(write_handmade_run(tmp_path / "hand", records))
    final = sc.summary[(sc.summary["dimension"] == "overall") & (sc.summary["who"] == D.FINAL)]
    r = final.iloc[0]
    assert (r["graphs"], r["graphs_incomplete"], r["pairs"]) == (1, 1, 6)
    assert r["shd"] == 2  # g1 alone
    g2 = _row(sc.scores, D.FINAL, "g2")
    assert not g2["complete"] and pd.isna(g2["shd"]) and g2["pairs"] == 5


def test_bootstrap_mean_is_seeded_and_brackets_the_mean() -> None:
    values = [0.0, 1.0, 3.0, 2.0, 2.0, 5.0]
    lo, hi = bootstrap_mean(values)
    assert lo < sum(values) / len(values) < hi
    assert bootstrap_mean(values) == (lo, hi)
    assert bootstrap_mean([2.0, 2.0]) == (2.0, 2.0)
    nan = bootstrap_mean([])
    assert all(x != x for x in nan)
    with pytest.raises(ValueError, match="NaN"):
        bootstrap_mean([1.0, float("nan")])


# --- the report, on runs made on the fakes ------------------------------------------------------

PAIRS = 'task = "discovery-pairs"\nprompt_set = "mac-pairs"\n'
JUDGE = '[protocol]\nkind = "judge"\nrounds = 2\nstances = true\n[judge]\nmodel = "qwen3:32b"\n'


def test_a_discovery_demo_report_has_the_section_and_a_cladder_one_does_not(
    cli, tmp_path: Path
) -> None:
    config = tmp_path / "pairs.toml"
    config.write_text(PAIRS + JUDGE)
    with pytest.MonkeyPatch.context() as env:  # the PDFs too (the suite's default is PNG)
        env.setenv("CRAWDAD_FIGURES", "png,pdf")
        code, printed, _ = cli("demo", "--config", str(config), "--limit", "2", "--out", "pairs")
    assert code == 0, printed
    report = (tmp_path / "pairs" / "report" / "report.md").read_text()
    assert "## Causal discovery (MAC's Meta Agents Model)" in report
    assert "Causal Agent Debate" in report  # which of MAC's table cells this is
    assert "mean nothing about any model" in report  # the fakes' numbers
    summary = pd.read_csv(tmp_path / "pairs" / "report" / "discovery" / "tables" / "summary.csv")
    final = summary[(summary["dimension"] == "overall") & (summary["stage"] == "final")]
    assert final.iloc[0]["graphs"] == 2 and final.iloc[0]["protocol"] == "judge (stances)"
    # Under stances an opening is the side drawn: no first-answer graphs.
    assert set(summary["stage"]) == {"final"}
    figures = tmp_path / "pairs" / "report" / "discovery" / "figures"
    assert (figures / "graphs_vs_tokens.png").stat().st_size > 0
    assert (figures / "shd_by_alignment.pdf").stat().st_size > 0

    code, printed, said = cli("demo", "--limit", "2", "--out", "cladder")
    assert code == 0, printed
    # piped, the demo says what it does while it writes its report (a line per phase)
    phases = re.findall(r"^report \[\d+:\d\d\]: (.*)$", said, re.MULTILINE)
    assert phases[0] == "loading 1 run folder" and "drawing figures" in phases, said
    report = (tmp_path / "cladder" / "report" / "report.md").read_text()
    assert "Causal discovery" not in report
    assert not (tmp_path / "cladder" / "report" / "discovery").exists()


def test_an_experiment_on_the_fakes_reports_its_variants_graphs(cli, tmp_path: Path) -> None:
    from crawdad.run.experiment import (
        experiment_manifest,
        load_experiment,
        run_experiment,
        variant_configs,
    )

    task = task_named("discovery-pairs")
    dataset = task.select(task.load(EXAMPLES), SelectionConfig(limit=2), 0)
    with FakeServer("ollama", paper_models(answer_key(dataset.questions, task))) as server:
        path = tmp_path / "exp.toml"
        path.write_text(
            f'baseline = "meta-agents"\n[base]\n{PAIRS}'
            '[variants.meta-agents]\nprotocol = { kind = "judge", rounds = 2, stances = true }\n'
            'judge = { model = "qwen3:32b" }\n'
            '[variants.single-agent]\nprotocol = { kind = "solo", samples = 1 }\n'
            'agents = [{ name = "qwen3", model = "qwen3:32b" }]\n'
        )
        spec, sha = load_experiment(path)
        configs = variant_configs(spec, str(path))
        for cfg in configs.values():
            cfg.serve_all_from(server.url)
        manifest = experiment_manifest(spec, str(path), sha, list(configs))
        asyncio.run(
            run_experiment(
                configs, manifest, dataset, tmp_path / "exp", progress=False, simulated=True
            )
        )
    rep = str(tmp_path / "rep")
    code, printed, _ = cli("analyze", str(tmp_path / "exp"), "--out", rep, "--figures", "png,pdf")
    assert code == 0, printed
    report = (tmp_path / "rep" / "report.md").read_text()
    section = report.split("## Causal discovery")[1]
    assert "Every variant is scored on the 2 graphs each completed" in section
    summary = pd.read_csv(tmp_path / "rep" / "discovery" / "tables" / "summary.csv")
    finals = summary[(summary["dimension"] == "overall") & (summary["stage"] == "final")]
    assert list(finals["run"]) == ["meta-agents", "single-agent"]
    assert list(finals["graphs"]) == [2, 2]
    # The single agent's one sample is its final answer: no second row for it.
    assert (
        len(summary[(summary["run"] == "single-agent") & (summary["dimension"] == "overall")]) == 1
    )
    paired = pd.read_csv(tmp_path / "rep" / "discovery" / "tables" / "versus_baseline.csv")
    assert list(paired["run"]) == ["single-agent"] and list(paired["graphs"]) == [2]
    assert (tmp_path / "rep" / "discovery" / "figures" / "graphs_vs_tokens.pdf").exists()


# --- killed and resumed -----------------------------------------------------------------------


def test_a_discovery_run_killed_then_resumed_records_every_pair_once(tmp_path: Path) -> None:
    task = task_named("discovery-pairs")
    graphs = 8
    dataset = task.select(task.load(EXAMPLES), SelectionConfig(limit=graphs), 0)
    latency = LatencyModel(base_seconds=0.01, per_token_seconds=0.00001, capacity=4)
    models = paper_models(answer_key(dataset.questions, task))
    with FakeServer("ollama", models, latency=latency) as server:
        head = PAIRS + "seed = 3\nconcurrency = 4\n[retry]\ninitial_wait = 0\n"
        config = paper_toml(server.url, tmp_path / "pairs.toml", head)
        out = tmp_path / "run"
        debates = out / "debates.jsonl"
        cmd = [
            sys.executable, "-m", "crawdad", "run", "--data", str(EXAMPLES), "--limit",
            str(graphs), "--out", str(out), "--config", str(config), "--no-progress",
        ]  # fmt: skip
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
        for target in (5, 17):  # two kills, each once the run has written some pairs
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
            deadline = time.monotonic() + 60
            while _lines(debates) < target and proc.poll() is None:
                assert time.monotonic() < deadline, "the run made no progress"
                time.sleep(0.005)
            assert proc.poll() is None, "the run finished before the kill; make it longer"
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        # A killed run is analysed as it stands: unfinished graphs are left out and counted.
        with warnings.catch_warnings():  # a torn last line, said by the loader
            warnings.simplefilter("ignore")
            partial = score(discovery_frames(load_run(out)))
        final = partial.summary[
            (partial.summary["dimension"] == "overall") & (partial.summary["stage"] == "final")
        ].iloc[0]
        assert final["graphs"] + final["graphs_incomplete"] <= graphs
        assert final["pairs"] == 6 * final["graphs"] <= len(read_jsonl_ids(debates))
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    ids = read_jsonl_ids(debates)
    assert sorted(ids) == sorted(p.question_id for p in dataset.questions)  # each pair once
    assert all(json.loads(line)["error"] is None for line in debates.read_text().splitlines())
    whole = score(discovery_frames(load_run(out))).summary
    final = whole[(whole["dimension"] == "overall") & (whole["stage"] == "final")].iloc[0]
    assert (final["graphs"], final["graphs_incomplete"], final["pairs"]) == (graphs, 0, 6 * graphs)


def _lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def test_the_run_report_skips_cladder_only_tables_for_pairs(tmp_path: Path) -> None:
    path = write_handmade_run(tmp_path / "hand", handmade_records())
    with pytest.warns(UserWarning):
        report = write_report([path], tmp_path / "report", workers=1).read_text()
    assert "## Causal discovery" in report and "## Run `hand` (crawdad protocol)" in report
    run_part = report.split("## Run `hand`")[1]
    assert "**Accuracy by gold answer" in run_part
    assert "**Accuracy by query type" not in run_part  # pairs have no query type
