"""The fakes on whole graphs (crawdad/fake/graphs.py): graph debaters answer with an edge list at
the profile's accuracy per pair of variables and take an opponent's edges as they take answers,
the fake extractor reads edge lists back, coding agents propose plans (sometimes bad ones), and
`crawdad demo` runs a whole-graph and a coding config."""

from __future__ import annotations

import json
from pathlib import Path

from crawdad.causal.edge_text import NO_EDGES, graph_from_text, parse_edges
from crawdad.causal.structure import score_graph
from crawdad.config import SelectionConfig
from crawdad.data.demo_questions import EXAMPLES
from crawdad.demo import answer_key, with_sampled_models
from crawdad.fake import FakeExtractor, FakeRequest, ProfileModel
from crawdad.fake.graphs import BAD_PLAN_RATE, read_final_graph
from crawdad.run.store import RunStore
from crawdad.tasks import task_named

TASK = task_named("discovery-graph")
CODING = Path(__file__).resolve().parents[1] / "configs" / "discovery" / "coding-agents.toml"
WHOLE = Path(__file__).resolve().parents[1] / "configs" / "discovery" / "whole-graph.toml"


def items(n: int):  # type: ignore[no-untyped-def]
    return TASK.select(TASK.load(EXAMPLES), SelectionConfig(limit=n), 0).questions


def ask(model: ProfileModel, prompt: str, name: str = "qwen3:32b", seed: int | None = None):  # type: ignore[no-untyped-def]
    request = FakeRequest("ollama", name, [{"role": "user", "content": prompt}], seed=seed)
    return model.reply(request).text


def shd(text: str, item) -> int:  # type: ignore[no-untyped-def]
    edges, _ = read_final_graph(text)
    assert edges is not None, text
    predicted, unknown = graph_from_text(
        "; ".join(f"{a} -> {b}" for a, b in edges), item.graph.names
    )
    assert not unknown
    return score_graph(predicted, item.graph.truth).shd


def test_a_graph_debater_answers_an_edge_list_at_its_accuracy_per_pair() -> None:
    chosen = items(40)
    key = answer_key(chosen, TASK)
    perfect = ProfileModel(key, accuracy=1.0)
    hopeless = ProfileModel(key, accuracy=0.0)
    usual = ProfileModel(key, "qwen3")
    pairs = wrong = 0
    for item in chosen:
        prompt = TASK.show(item)
        text = ask(perfect, prompt)
        assert "Final graph:" in text and "Confidence:" in text
        assert shd(text, item) == 0
        n = len(item.graph.names)
        assert shd(ask(hopeless, prompt), item) == n * (n - 1) // 2  # every pair wrong
        pairs += n * (n - 1) // 2
        wrong += shd(ask(usual, prompt), item)
        assert ask(usual, prompt) == ask(usual, prompt)  # the same request, the same reply
    assert 0.05 < wrong / pairs < 0.3  # qwen3's accuracy 0.84 per pair, roughly


def test_a_graph_debater_takes_a_confident_opponents_edges_pair_by_pair() -> None:
    (item,) = items(1)
    key = answer_key([item], TASK)
    truth = item.gold
    stubborn = ProfileModel(key, accuracy=0.0, switch_per_confidence=0.0)
    easy = ProfileModel(key, accuracy=0.0, switch_per_confidence=5.0, switch_threshold=0.0)
    history = (
        f"{TASK.show(item)}\n\nOpponent's response:\n\n==========\n\nMy view.\nFinal graph:\n"
        + "\n".join(truth.split("; "))
        + "\nConfidence: 0.95\n\n==========\n\nCarefully consider your opponent's response, "
        "then end with your final graph: every edge as `A -> B`."
    )
    assert shd(ask(stubborn, history), item) > 0
    assert shd(ask(easy, history), item) == 0  # persuaded on every pair it had wrong


def test_the_fake_extractor_reads_edge_lists_back() -> None:
    extractor = FakeExtractor(unstructured_garbage_rate=0.0)
    instructions = 'Reply with "edges" and "confidence".\n\nResponse:\n"""\n{}\n"""'

    def extract(response: str) -> dict:
        request = FakeRequest(
            "ollama",
            "granite3.3:2b",
            [{"role": "user", "content": instructions.format(response)}],
            schema={"properties": {"edges": {}, "confidence": {}}},
        )
        return json.loads(extractor.reply(request).text)

    got = extract("Thinking.\nFinal graph:\nA -> B\nB -> C\n\nConfidence: 0.7")
    assert got == {
        "edges": [{"cause": "A", "effect": "B"}, {"cause": "B", "effect": "C"}],
        "confidence": 0.7,
    }
    assert extract(f"Final graph:\n{NO_EDGES}\nConfidence: 90%") == {
        "edges": [],
        "confidence": 0.9,
    }
    assert extract("I cannot tell.")["edges"] is None
    # Without structured output it sometimes fences or wraps its JSON; the task reads it anyway.
    sloppy = FakeExtractor(unstructured_garbage_rate=1.0)
    request = FakeRequest(
        "ollama",
        "granite3.3:2b",
        [{"role": "user", "content": instructions.format("Final graph:\nA -> B\nConfidence: 1")}],
    )
    reading = TASK.read(sloppy.reply(request).text, True)
    assert reading.answer == "A -> B" and reading.method == "tolerant"


def test_coding_agents_propose_plans_that_suit_the_data_and_sometimes_bad_ones() -> None:
    from crawdad.protocols.coding import describe, read_plan

    chosen = with_sampled_models(
        TASK.select(TASK.load(EXAMPLES), SelectionConfig(limit=60), 0), 0
    ).questions
    key = answer_key(chosen, TASK)
    model = ProfileModel(key, "qwen3")
    plans = []
    for item in chosen:
        data = describe(item.graph.data(200, 0))
        prompt = (
            f"{TASK.show(item)}\n\nThe data:\n{data}\n\nEnd with your plan: "
            '{"algorithm": "<one of the algorithms above>", "params": {...}}'
        )
        plan, why = read_plan(ask(model, prompt))
        assert plan is not None, why
        plans.append(plan)
    discrete_ok = {"pc", "ges"}
    bad = [
        p
        for p in plans
        if p["algorithm"] not in discrete_ok
        or p["params"].get("alpha", 0.05) > 0.5
        or p["params"].get("indep_test") == "kci"
    ]
    assert all(p["params"].get("indep_test") != "fisherz" for p in plans)  # binary data
    assert 0 < len(bad) < len(plans) * (BAD_PLAN_RATE + 0.15)


def test_the_demo_runs_whole_graph_and_coding_configs(cli, tmp_path: Path) -> None:
    for config, name in ((WHOLE, "whole"), (CODING, "coding")):
        out = tmp_path / name
        code, printed, err = cli(
            "demo", "--config", str(config), "--limit", "2", "--out", str(out), "--no-progress"
        )
        assert code == 0, printed + err
        records = RunStore(out).records()
        assert len(records) == 2 and all(r.error is None for r in records)
        assert all(r.final_answer is None or parse_edges(r.final_answer) for r in records)
        assert (out / "report" / "report.md").exists()
    coding = RunStore(tmp_path / "coding").records()
    assert all(c.name == "run_algorithm" for r in coding for t in r.turns for c in t.tool_calls)
    assert any(t.answer for r in coding for t in r.turns)
    assert "random ones" in (tmp_path / "coding" / "simulation.txt").read_text()
