"""Whole-graph causal discovery (crawdad.tasks.discovery.whole_graph): an edge list as the answer, read
from the extractor and compared as a set; a whole-graph debate under the existing protocols; the
plain-algorithm baselines (crawdad.run.baseline) writing records of the same task."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from crawdad.causal.edge_text import NO_EDGES, format_edges, graph_from_text, parse_edges
from crawdad.causal.structure import score_graph
from crawdad.config import AgentConfig, RunConfig, SelectionConfig
from crawdad.data.demo_questions import EXAMPLES
from crawdad.data.discovery_public import SACHS_VARIABLES
from crawdad.data.discovery_sets import DiscoveryGraph, Variable
from crawdad.errors import ConfigError
from crawdad.fake import FakeReply, FakeRequest, FakeServer, FunctionModel
from crawdad.protocols import run_debate
from crawdad.records import DebateRecord
from crawdad.run.baseline import baseline_record, run_baseline
from crawdad.run.runner import build_setup, pools_of
from crawdad.run.store import RunStore
from crawdad.tasks import task_named
from crawdad.tasks.discovery.whole_graph import GraphItem
from crawdad.tools.algorithms import AlgorithmLimits

TASK = task_named("discovery-graph")
SHARED_SAMPLE = Path(__file__).resolve().parents[2] / "shared" / "data" / "cladder-sample"
EXTRACTOR = "granite3.3:2b"


def test_edge_text_round_trips_and_reads_what_models_write() -> None:
    text = format_edges([("b", "c"), ("A", "b"), ("A", "b"), ("x", "x")])
    assert text == "A -> b; b -> c" and parse_edges(text) == [("A", "b"), ("b", "c")]
    assert format_edges([]) == NO_EDGES and parse_edges(NO_EDGES) == []
    written = "Final graph:\n1. `smoking -> tar`\n- tar → cancer\n* **age => cancer**\nx -- y"
    assert parse_edges(written) == [("smoking", "tar"), ("tar", "cancer"), ("age", "cancer")]
    assert parse_edges("a -> b, c -> d") == [("a", "b"), ("c", "d")]
    # with `;` between edges, a comma belongs to a name
    assert parse_edges("rain, wind -> roof; roof -> leak") == [
        ("rain, wind", "roof"),
        ("roof", "leak"),
    ]
    graph, unknown = graph_from_text(
        "PIP2 -> pkc; erk -> PKC; Pip2 -> PIP3", ["PIP2", "PIP3", "PKC"]
    )
    assert graph.edges == {("PIP2", "PKC"), ("PIP2", "PIP3")} and unknown == ["erk"]


def test_a_graph_is_one_item_shown_without_its_edges() -> None:
    data = TASK.load(EXAMPLES)
    assert len(data.questions) == len(data.graphs) and data.info.n_selected == len(data.graphs)
    item = data.questions[0]
    assert item.question_id == "cladder-0"
    assert item.gold == "blood pressure -> heart health; exercise -> blood pressure"
    truth = item.graph.truth
    assert truth is not None and graph_from_text(item.gold, item.graph.names)[0] == truth
    shown = TASK.show(item)
    assert "- exercise: 1 = regular exercise; 0 = no exercise" in shown
    assert "direct effect on" not in shown and "List every direct causal edge as `A -> B`" in shown
    fields = TASK.record_fields(item)
    assert fields["gold"] == item.gold and fields["item"]["truth_known"] is True
    assert fields["item"]["variables"] == list(item.graph.names)
    two = TASK.select(data, SelectionConfig(limit=2), seed=0)
    assert [i.question_id for i in two.questions] == ["cladder-0", "cladder-1"]
    unknown = GraphItem(DiscoveryGraph("g", "auto-mpg", "", (Variable("a", ""),), truth=None))
    assert unknown.gold == "" and TASK.record_fields(unknown)["item"]["truth_known"] is False


def test_the_extractors_reply_is_read_strictly_then_tolerantly() -> None:
    strict = '{"edges": [{"cause": "b", "effect": "c"}, {"cause": "a", "effect": "b"}], "confidence": 0.7}'
    reading = TASK.read(strict, confidence=True)
    assert (reading.answer, reading.confidence, reading.method) == ("a -> b; b -> c", 0.7, "strict")
    none = TASK.read('{"edges": null, "confidence": null}', confidence=True)
    assert none.answer is None and none.reason == "the response gives no final graph"
    assert TASK.read('{"edges": [], "confidence": 0.9}', confidence=True).answer == NO_EDGES
    fenced = TASK.read('```json\n{"edges": [["a", "b"], "c -> d"], "confidence": "80%"}\n```', True)
    assert (fenced.answer, fenced.confidence, fenced.method) == ("a -> b; c -> d", 0.8, "tolerant")
    lines = TASK.read("The edges are:\na -> b\nb -> c", confidence=True)
    assert lines.answer == "a -> b; b -> c" and lines.method == "tolerant"
    nothing = TASK.read("I cannot tell.", confidence=True)
    assert nothing.answer is None and nothing.method == "none"
    assert TASK.extractor_schema(False)["required"] == ["edges"]
    assert TASK.agree(["A -> b; b -> C", "b -> c; a -> B"]) and not TASK.agree(["a -> b", "b -> a"])
    assert not TASK.agree(["a -> b", None])


# --- a whole-graph debate under the existing protocols --------------------------------------


def drawer(graphs: list[str]) -> FunctionModel:
    """A debater that proposes the k-th graph of its list on its k-th request."""
    asked = {"n": 0}

    def reply(request: FakeRequest) -> FakeReply:
        edges = graphs[min(asked["n"], len(graphs) - 1)]
        asked["n"] += 1
        body = "\n".join(edges.split("; "))
        return FakeReply(text=f"My reasoning.\nFinal graph:\n{body}\nConfidence: 0.8")

    return FunctionModel(reply)


def reads_graph(request: FakeRequest) -> str:
    """The extractor: the last `Final graph:` block of the response in its prompt."""
    prompt = request.messages[-1]["content"]
    block = prompt.rsplit("Final graph:\n", 1)[1].split("\nConfidence")[0]
    edges = [{"cause": a, "effect": b} for a, b in parse_edges(block)]
    return json.dumps({"edges": edges, "confidence": 0.8})


async def play(tmp_path: Path, models: dict[str, FunctionModel], **protocol) -> DebateRecord:  # type: ignore[no-untyped-def]
    item = TASK.load(EXAMPLES).questions[0]
    async with FakeServer("ollama", {**models, EXTRACTOR: FunctionModel(reads_graph)}) as server:
        config = RunConfig(
            task="discovery-graph",
            prompt_set="mac-graph",
            seed=1,
            agents=[AgentConfig(name=n, model=n) for n in models],
            protocol=protocol,
        ).serve_all_from(server.url)
        setup, _ = build_setup(config)
        try:
            record = await run_debate(setup, item)
        finally:
            for pool in pools_of(setup):
                await pool.aclose()
    assert record.error is None, record.error
    assert "List every direct causal edge" in server.requests[0]["messages"][0]["content"]
    return record


async def test_a_whole_graph_debate_reaches_consensus_on_an_edge_set(tmp_path: Path) -> None:
    truth = TASK.load(EXAMPLES).questions[0].gold
    wrong = "blood pressure -> exercise"
    models = {"a": drawer([wrong, truth]), "b": drawer([truth.upper()])}
    record = await play(tmp_path, models, kind="crawdad")
    assert record.task == "discovery-graph" and record.gold == truth
    # agreement is the same edge set, whatever the case: the last two answers agree
    assert {t.answer for t in record.turns[-2:]} == {truth.upper(), truth}
    assert wrong in [t.answer for t in record.turns]
    assert record.consensus and record.end == "consensus"
    assert record.final_answer is not None and record.final_answer.casefold() == truth.casefold()
    assert DebateRecord.model_validate_json(record.model_dump_json()) == record


async def test_solo_samples_vote_on_whole_graphs(tmp_path: Path) -> None:
    models = {"a": drawer(["x -> y", "exercise -> blood pressure", "exercise -> blood pressure"])}
    record = await play(tmp_path, models, kind="solo", samples=3)
    assert record.final_answer == "exercise -> blood pressure" and not record.tie


def test_the_judge_protocol_is_refused_for_open_answers() -> None:
    config = RunConfig(
        task="discovery-graph",
        prompt_set="mac-graph",
        protocol={"kind": "judge"},
        judge={"model": "j"},
    )
    with pytest.raises(ConfigError, match="judge protocol gives a yes/no verdict"):
        build_setup(config)


# --- the plain-algorithm baselines -----------------------------------------------------------


def sachs_like(folder: Path, rows: int = 300) -> Path:
    """Sachs's 11 names over a linear non-Gaussian chain praf -> pmek -> p44/42, the rest noise;
    its "consensus graph" is that chain."""
    rng = np.random.default_rng(0)
    table = pd.DataFrame({n: rng.exponential(1.0, rows) for n in SACHS_VARIABLES})
    table["pmek"] += 2 * table["praf"]
    table["p44/42"] += 2 * table["pmek"]
    folder.mkdir(parents=True)
    table.to_csv(folder / "cyto_full_data.csv", index=False)
    (folder / "cyto_full_target.csv").write_text(
        '"Cause","Effect"\n"praf","pmek"\n"pmek","p44/42"\n'
    )
    return folder


def test_a_baseline_writes_a_run_folder_of_graph_records_and_resumes(tmp_path: Path) -> None:
    data, out = sachs_like(tmp_path / "sachs"), tmp_path / "runs" / "lingam"
    summary = run_baseline(data, out, "DirectLiNGAM", {"threshold": 0.5})
    assert (summary.computed, summary.failed, summary.selected) == (1, 0, 1)
    (record,) = [
        DebateRecord.model_validate_json(x)
        for x in (out / "debates.jsonl").read_text().splitlines()
    ]
    assert (
        record.protocol == "algorithm"
        and record.end == "computed"
        and record.task == "discovery-graph"
    )
    assert record.item["algorithm"] == "direct-lingam" and record.item["params"] == {
        "threshold": 0.5
    }
    assert record.item["rows"] == 300 and list(record.agents) == ["direct-lingam"]
    predicted, unknown = graph_from_text(record.final_answer or "", record.item["variables"])
    truth, _ = graph_from_text(record.gold, record.item["variables"])
    assert unknown == [] and score_graph(predicted, truth).shd == 0
    manifest = RunStore(out).read_manifest()
    assert manifest.config["algorithm"] == "direct-lingam" and manifest.dataset.ids_file
    again = run_baseline(data, out, "direct-lingam", {"threshold": 0.5})
    assert (again.computed, again.done_before) == (0, 1)
    with pytest.raises(Exception, match="other settings"):
        run_baseline(data, out, "pc")


def test_a_baseline_refuses_bad_parameters_before_writing(tmp_path: Path) -> None:
    data, out = sachs_like(tmp_path / "sachs"), tmp_path / "runs" / "bad"
    with pytest.raises(ConfigError, match="pc on sachs: alpha = 2 is out of range"):
        run_baseline(data, out, "pc", {"alpha": 2})
    with pytest.raises(ConfigError, match="--algorithm: algorithm 'notears' is not offered"):
        run_baseline(data, out, "notears")
    assert not (out / "debates.jsonl").exists()


def test_a_constant_variable_is_kept_without_edges_and_a_refusal_is_recorded() -> None:
    rng = np.random.default_rng(1)
    a = rng.exponential(1.0, 100)
    b = 3 * a + rng.exponential(1.0, 100)
    table = pd.DataFrame({"a": a, "b": b, "c": b + rng.exponential(1.0, 100), "k": 1.0})
    graph = DiscoveryGraph(
        "toy", "toy", "", tuple(Variable(n, "") for n in "abck"), truth=None, table=table
    )
    record = baseline_record(GraphItem(graph), "pc", {}, 100, 0, AlgorithmLimits())
    assert record.error is None and record.item["dropped_constant"] == ["k"]
    assert "k" not in (record.final_answer or "") and record.final_answer != NO_EDGES
    refused = baseline_record(
        GraphItem(graph), "exact", {}, 100, 0, AlgorithmLimits(max_exact_variables=2)
    )
    assert refused.end == "error" and refused.error_kind == "ToolError"
    assert "exact search takes at most 2 variables" in (refused.error or "")


@pytest.mark.skipif(
    not SHARED_SAMPLE.exists(), reason="the CLadder sample is not beside the project"
)
def test_baselines_on_cladder_graphs_use_seeded_sampled_rows(cli, tmp_path: Path) -> None:
    out = tmp_path / "pc"
    code, printed, _ = cli(
        "discover-baseline", str(SHARED_SAMPLE), "--algorithm", "pc", "--param", "alpha=0.01",
        "--rows", "500", "--limit", "3", "--seed", "4", "--out", str(out),
    )  # fmt: skip
    assert code == 0 and "3 graph(s) computed, 0 failed" in printed, printed
    records = [json.loads(x) for x in (out / "debates.jsonl").read_text().splitlines()]
    assert all(r["item"]["rows"] == 500 and r["seed"] == 4 for r in records)
    assert all(r["item"]["params"]["indep_test"] == "chisq" for r in records)  # binary data
    code, printed, _ = cli(
        "discover-baseline", str(SHARED_SAMPLE), "--param", "alpha", "--out", str(out)
    )
    assert code == 2 and re.search("write name=value", printed + _)


# --- MAC's coding agents ----------------------------------------------------------------------


def planner(plans: list[str]) -> FunctionModel:
    """A debater whose k-th response ends with the k-th plan of its list (raw text)."""
    asked = {"n": 0}

    def reply(request: FakeRequest) -> FakeReply:
        plan = plans[min(asked["n"], len(plans) - 1)]
        asked["n"] += 1
        return FakeReply(text=f"The data are continuous and skewed.\n```json\n{plan}\n```")

    return FunctionModel(reply)


async def coding_debate(
    tmp_path: Path,
    models: dict[str, FunctionModel],
    max_turns: int = 4,
    judge: FunctionModel | None = None,
    plan_judge: bool = True,
) -> tuple[DebateRecord, list[dict]]:
    item = TASK.load(sachs_like(tmp_path / "sachs")).questions[0]
    served = {**models, EXTRACTOR: FunctionModel(reads_graph)}
    if judge is not None:
        served[JUDGE] = judge
    async with FakeServer("ollama", served) as server:
        config = RunConfig(
            task="discovery-graph",
            prompt_set="mac-coding",
            seed=1,
            agents=[AgentConfig(name=n, model=n) for n in models],
            protocol={"kind": "coding", "max_turns": max_turns, "plan_judge": plan_judge},
            judge={"model": JUDGE} if plan_judge else None,
        ).serve_all_from(server.url)
        setup, _ = build_setup(config)
        try:
            record = await run_debate(setup, item)
        finally:
            for pool in pools_of(setup):
                await pool.aclose()
    assert record.error is None, record.error
    return record, server.requests


async def test_coding_agents_debate_plans_and_each_plan_is_run(tmp_path: Path) -> None:
    lingam = '{"algorithm": "DirectLiNGAM", "params": {"threshold": 0.5}}'
    models = {
        "a": planner(['{"algorithm": "pc", "params": {"indep_test": "chisq"}}', lingam]),
        "b": planner([lingam]),
    }
    record, requests = await coding_debate(tmp_path, models)
    assert record.protocol == "coding" and record.consensus and record.end == "consensus"
    refused = next(t for t in record.turns if t.answer is None)
    assert refused.extraction is not None and "chisq needs discrete data" in (
        refused.extraction.reason or ""
    )
    ran = [t for t in record.turns if t.answer is not None]
    (call,) = ran[-1].tool_calls
    assert call.name == "run_algorithm" and call.arguments == json.loads(lingam)
    assert call.result["algorithm"] == "direct-lingam" and call.error is None
    truth, _ = graph_from_text(record.gold, record.item["variables"])
    predicted, _ = graph_from_text(record.final_answer or "", record.item["variables"])
    assert score_graph(predicted, truth).shd == 0
    assert not [r for r in requests if r["model"] == EXTRACTOR]  # plans are read, not extracted
    first = requests[0]["messages"][0]["content"]
    assert "300 rows, 11 columns." in first and "- direct-lingam:" in first
    later = [r["messages"][0]["content"] for r in requests[1:]]
    assert later and all('"adjacency"' not in p for p in later)  # no executed graph is shown


async def test_a_response_without_a_plan_is_a_null_answer(tmp_path: Path) -> None:
    models = {"a": planner(["no plan here"]), "b": planner(['{"algorithm": "ges"}'])}
    record, _ = await coding_debate(tmp_path, models, max_turns=2)
    empty = next(t for t in record.turns if t.agent == "a")
    assert empty.answer is None and empty.tool_calls == []
    assert "gives no plan" in (empty.extraction.reason or "")  # type: ignore[union-attr]
    assert record.end == "cap" and record.final_answer is not None  # b's plan ran


JUDGE = "judge-model"
PC = '{"algorithm": "pc", "params": {"alpha": 0.05}}'
LINGAM = '{"algorithm": "direct-lingam", "params": {"threshold": 0.5}}'


def picks(reply: str, asked: list[FakeRequest]) -> FunctionModel:
    def answer(request: FakeRequest) -> FakeReply:
        asked.append(request)
        return FakeReply(thinking="weighing the plans", text=reply)

    return FunctionModel(answer)


async def test_a_judge_picks_the_final_plan_between_the_debaters(tmp_path: Path) -> None:
    """MAC's judge (the default): the debaters never agree, and the judge picks debater 1's plan,
    not the last one that ran; it sees both plans and the debate, never an executed graph."""
    asked: list[FakeRequest] = []
    judge = picks('{"plan": "debater 1", "confidence": 0.85}', asked)
    models = {"a": planner([PC]), "b": planner([LINGAM])}
    record, requests = await coding_debate(tmp_path, models, max_turns=2, judge=judge)
    first, second = record.speaking_order
    debaters = [t for t in record.turns if t.agent != "judge"]
    assert [t.agent for t in debaters] == [first, second] and record.end == "cap"
    assert debaters[0].answer != debaters[1].answer  # two candidate graphs
    (verdict,) = [t for t in record.turns if t.agent == "judge"]
    assert verdict.role == "verdict" and verdict.seen == [0, 1] and record.judge == JUDGE
    assert record.final_answer == debaters[0].answer == verdict.answer
    assert record.final_confidence == 0.85
    (request,) = asked
    plan = {"a": PC, "b": LINGAM}
    assert f"Debater 1's plan: {json.dumps(json.loads(plan[first]))}" in request.prompt
    assert f"Debater 2's plan: {json.dumps(json.loads(plan[second]))}" in request.prompt
    assert "Debater 1's response:" in request.prompt and '"adjacency"' not in request.prompt
    schema = next(r for r in requests if r["model"] == JUDGE)["format"]
    assert schema["properties"]["plan"]["enum"] == ["debater 1", "debater 2"]


async def test_without_the_judge_the_last_plan_that_ran_is_final(tmp_path: Path) -> None:
    models = {"a": planner([PC]), "b": planner([LINGAM])}
    record, requests = await coding_debate(tmp_path, models, max_turns=2, plan_judge=False)
    assert record.judge is None and all(t.agent != "judge" for t in record.turns)
    assert record.final_answer == record.turns[-1].answer and len(requests) == 2
    assert RunConfig(protocol={"kind": "coding", "plan_judge": False}).judge is None
    assert RunConfig(protocol={"kind": "coding"}).judge is not None  # on by default


async def test_an_unreadable_pick_falls_back_to_the_last_plan(tmp_path: Path) -> None:
    judge = picks("Both plans have merit.", [])
    models = {"a": planner([PC]), "b": planner([LINGAM])}
    record, _ = await coding_debate(tmp_path, models, max_turns=2, judge=judge)
    verdict = record.turns[-1]
    assert verdict.agent == "judge" and verdict.answer is None
    assert "the last plan that ran is the final answer" in (verdict.extraction.reason or "")  # type: ignore[union-attr]
    assert record.final_answer == record.turns[-2].answer


def test_the_coding_protocol_needs_the_graph_task() -> None:
    with pytest.raises(
        ConfigError,
        match=r'coding protocol runs discovery algorithms .* use task = "discovery-graph"',
    ):
        build_setup(RunConfig(task="cladder", protocol={"kind": "coding"}))


def test_the_demo_simulates_whole_graph_answers(cli, tmp_path: Path) -> None:
    """The fakes answer a whole graph with an edge list (crawdad/fake/graphs.py)."""
    config = tmp_path / "g.toml"
    config.write_text('task = "discovery-graph"\nprompt_set = "mac-graph"\n')
    code, out, err = cli(
        "demo", "--config", str(config), "--limit", "1", "--out", str(tmp_path / "r")
    )
    assert code == 0, out + err
    (record,) = RunStore(tmp_path / "r").records()
    assert record.task == "discovery-graph" and record.final_answer
    assert parse_edges(record.final_answer) or record.final_answer == NO_EDGES
