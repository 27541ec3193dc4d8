"""Causal discovery one pair at a time (crawdad.tasks.discovery.pairs): items from CLadder's own
causal models, shown without the story's graph-giving background, run under the protocols."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from crawdad.config import SelectionConfig
from crawdad.data.demo_questions import EXAMPLES
from crawdad.data.discovery_sets import load_cladder_graphs
from crawdad.errors import DataError
from crawdad.tasks import task_named

SAMPLE = Path(__file__).resolve().parents[2] / "shared" / "data" / "cladder-sample"
TASK = task_named("discovery-pairs")


def test_every_ordered_pair_of_every_graph_is_an_item_with_its_truth() -> None:
    data = TASK.load(EXAMPLES)
    graphs = load_cladder_graphs(EXAMPLES).graphs
    n = len(data.questions)
    assert n == sum(len(g.variables) * (len(g.variables) - 1) for g in graphs)
    assert len({p.question_id for p in data.questions}) == n
    yes = Counter(p.gold for p in data.questions)["yes"]
    assert yes == sum(len(g.truth.edges) for g in graphs)
    first = data.questions[0]
    assert first.question_id == "cladder-0:X->M"
    assert (first.cause, first.effect, first.gold) == ("exercise", "blood pressure", "yes")


def test_the_item_shows_variables_and_question_but_never_the_graph() -> None:
    item = TASK.load(EXAMPLES).questions[0]
    shown = TASK.show(item)
    assert "- exercise: 1 = regular exercise; 0 = no exercise" in shown
    assert shown.endswith(
        "Question: Is there a direct causal relationship from exercise to blood pressure?"
    )
    assert "direct effect on" not in shown  # the story's background states the edges
    assert "diet" not in shown  # in the story's mapping, not in its graph
    fields = TASK.record_fields(item)
    assert fields["item"]["graph"] == "cladder-0" and fields["graph_id"] == "chain"


def test_selection_picks_whole_graphs() -> None:
    data = TASK.load(EXAMPLES)
    two = TASK.select(data, SelectionConfig(limit=2), seed=0)
    assert {p.graph.graph_id for p in two.questions} == {"cladder-0", "cladder-1"}
    assert two.info.n_selected == len(two.questions)
    sampled = TASK.select(data, SelectionConfig(sample=5, alignments=["nonsense"]), seed=1)
    assert len(sampled.graphs) == 5 and {g.alignment for g in sampled.graphs} == {"nonsense"}
    assert (
        sampled.graphs
        == TASK.select(data, SelectionConfig(sample=5, alignments=["nonsense"]), seed=1).graphs
    )
    with pytest.raises(DataError, match="rungs and query_types"):
        TASK.select(data, SelectionConfig(rungs=[1]), seed=0)


def test_a_structure_naming_an_unmapped_variable_is_named(tmp_path: Path) -> None:
    questions = json.loads((EXAMPLES / "crawdad-example-q-balanced.json").read_text())
    models = json.loads((EXAMPLES / "crawdad-example-meta-models.json").read_text())
    del models[0]["variable_mapping"]["Mname"]
    (tmp_path / "q.json").write_text(json.dumps(questions))
    (tmp_path / "x-meta-models.json").write_text(json.dumps(models))
    with pytest.raises(DataError, match="causal model 0: variable_mapping has no `Mname`"):
        TASK.load(tmp_path / "q.json")


@pytest.mark.skipif(not SAMPLE.exists(), reason="the CLadder sample is not beside the project")
def test_cladder_sample_graphs_carry_data_sampled_from_their_model() -> None:
    graphs = load_cladder_graphs(SAMPLE).graphs
    assert len(graphs) == 396 and all(g.model is not None for g in graphs)
    graph = graphs[0]
    table = graph.data(2000, seed=0)
    assert list(table.columns) == list(graph.names)
    assert table.equals(graph.data(2000, seed=0)) and not table.equals(graph.data(2000, seed=1))
    husband = float(graph.model.prob({"X": 1}))
    assert table["husband"].mean() == pytest.approx(husband, abs=0.05)


def _config(tmp_path: Path, protocol: str) -> Path:
    path = tmp_path / "pairs.toml"
    path.write_text(f'task = "discovery-pairs"\nprompt_set = "mac-pairs"\n{protocol}')
    return path


@pytest.mark.parametrize(
    "protocol",
    [
        "",  # the paper's protocol
        '[protocol]\nkind = "judge"\nrounds = 2\nstances = true\n[judge]\nmodel = "qwen3:32b"\n',
        '[protocol]\nkind = "solo"\nsamples = 3\n',
    ],
    ids=["crawdad", "judge-stances", "solo"],
)
def test_pairs_run_and_resume_under_the_protocols(cli, tmp_path: Path, protocol: str) -> None:
    config, out = _config(tmp_path, protocol), tmp_path / "run"
    code, printed, _ = cli("demo", "--config", str(config), "--limit", "2", "--out", str(out))
    assert code == 0, printed
    records = [json.loads(line) for line in (out / "debates.jsonl").read_text().splitlines()]
    assert len(records) == 12  # two 3-variable graphs, 6 ordered pairs each
    assert {r["task"] for r in records} == {"discovery-pairs"}
    assert all(r["error"] is None and r["final_answer"] in ("yes", "no") for r in records)
    if "judge" in protocol:  # MAC's sides: the affirmative opens every debate
        assert all(r["turns"][0]["side"] == "affirmative" for r in records)
        assert all(t["side"] == "negative" for r in records for t in r["turns"][1:2])
    code, printed, _ = cli("demo", "--config", str(config), "--limit", "2", "--out", str(out))
    assert code == 0 and "0 this session" in printed
    assert len((out / "debates.jsonl").read_text().splitlines()) == 12  # nothing sent again
