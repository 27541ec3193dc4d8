"""Step scoring: hand-written CausalCoT responses with known errors of each kind, read by the
fake extractor and scored against the engine; a run with `[scoring] steps = true` on the fakes;
the error taxonomy of the analysis."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from crawdad.analysis.tasks.cladder.steps import step_errors, step_repairs, steps_section

from crawdad.causal.model import BinaryModel
from crawdad.data.questions import CausalSource, load_cladder
from crawdad.fake.extractor_steps import read_steps
from crawdad.records import StepNumber
from crawdad.scoring.step_reading import SCHEMA, parse_steps, score, step_prompt, steps_from
from crawdad.scoring.step_scores import query_key, score_steps, term_value

# X = husband -> V2 = wife -> Y = alarm clock, and X -> Y. ATE = 0.81 - 0.22 = 0.59 (no confounder).
MODEL = {
    "model_id": 0,
    "structure": "X->V2,X->Y,V2->Y",
    "params": {"p(X)": 0.8, "p(V2 | X)": [0.3, 0.7], "p(Y | X, V2)": [[0.1, 0.5], [0.6, 0.9]]},
    "variable_mapping": {"Xname": "husband", "V2name": "wife", "Yname": "alarm clock"},
}
META = {
    "query_type": "ate",
    "rung": 2,
    "model_id": 0,
    "treated": True,
    "result": True,
    "polarity": True,
    "given_info": {"p(Y | X)": [0.22, 0.81]},
    "treatment": "X",
    "outcome": "Y",
}
SOURCE = CausalSource(META, MODEL)
RIGHT = {
    1: "H -> W, H -> A, W -> A",
    2: '"average treatment effect"',
    3: "E[A | do(H=1)] - E[A | do(H=0)]",
    4: "P(A=1 | H=0)=0.22; P(A=1 | H=1)=0.81",
    5: "Nothing confounds husband and alarm clock, so E[A | do(H)] = P(A | H).",
    6: "0.81 - 0.22 = 0.59",
    7: "**yes**",
}


def response(**wrong: str) -> str:
    steps = {**RIGHT, **{int(k[1:]): v for k, v in wrong.items()}}
    return "\n\n".join(f"Step {n}) Some step: {body}" for n, body in sorted(steps.items()))


def scored(text: str):
    reply = json.dumps(read_steps(step_prompt(SOURCE, text)))
    parsed, method = parse_steps(reply)
    assert method == "strict"
    fields = steps_from(parsed)
    return fields, score(SOURCE, {k: v for k, v in fields.items() if k != "estimand"})


def test_a_right_response_scores_right_on_every_step():
    fields, s = scored(response())
    assert fields["edges"] == ["X->V2", "X->Y", "V2->Y"] and fields["query_type"] == "ate"
    assert [n.event for n in fields["numbers"]] == ["P(Y=1 | X=0)", "P(Y=1 | X=1)"]
    assert (s.graph, s.query_type, s.numbers, s.value, s.first_wrong) == (
        True,
        True,
        True,
        True,
        None,
    )


@pytest.mark.parametrize(
    ("wrong", "first"),
    [
        ({"s1": "H -> A, W -> A"}, "graph"),  # the edge husband -> wife is missing
        ({"s2": '"natural direct effect"'}, "query_type"),  # the wrong estimand
        ({"s4": "P(A=1 | H=0)=0.32; P(A=1 | H=1)=0.81"}, "numbers"),  # 22% misread
        ({"s6": "0.81 - 0.22 = 0.49"}, "value"),  # an arithmetic slip
        ({"s1": "A -> H", "s6": "0.81 - 0.22 = 0.49"}, "graph"),  # the first wrong step counts
    ],
)
def test_each_kind_of_error_is_found_first(wrong, first):
    _, s = scored(response(**wrong))
    assert s.first_wrong == first
    assert getattr(s, first) is False


def test_steps_not_shown_are_not_scored():
    _, s = scored("The answer is yes, because husbands set alarms.")
    assert (s.graph, s.query_type, s.numbers, s.value, s.first_wrong) == (None,) * 5


def test_numbers_without_labels_and_in_percent():
    m = BinaryModel.from_meta(MODEL)
    right = score_steps(m, META, numbers=[StepNumber(event="?", value=22)], result=0.595)
    assert right.numbers is True and right.value is True
    wrong = score_steps(m, META, numbers=[StepNumber(event="?", value=0.5)], result=0.61)
    assert wrong.numbers is False and wrong.first_wrong == "numbers"
    assert abs(term_value(m, "P(Y=1, X=0)") - 0.2 * 0.22) < 1e-12
    assert term_value(m, "P(Z=1)") is None
    assert query_key("Average Treatment Effect") == "ate" and query_key("nonsense") is None


def test_schema_names_every_query_type():
    assert set(SCHEMA["properties"]["query_type"]["enum"]) - {None} == {
        "marginal",
        "correlation",
        "exp_away",
        "ate",
        "backadj",
        "collider_bias",
        "ett",
        "nde",
        "nie",
        "det-counterfactual",
    }


def test_a_reply_without_json_is_no_extraction():
    assert parse_steps("I cannot tell.") == (None, "the extractor's reply holds no JSON object")
    parsed, method = parse_steps('Here: {"edges": ["X->Y"], "result": "59%"} done')
    assert method == "tolerant" and steps_from(parsed)["result"] == 0.59


def _tiny_with_model(folder: Path) -> Path:
    folder.mkdir()
    background = (
        "Imagine a self-contained, hypothetical world with only the following conditions: "
        "Husband has a direct effect on wife and alarm clock. Wife has a direct effect on "
        "alarm clock."
    )
    (folder / "t-meta-models.json").write_text(
        json.dumps([{**MODEL, "background": background, "graph_id": "mediation"}])
    )
    text = (
        "For husbands that don't set the alarm, the probability of ringing alarm is 22%. "
        "For husbands that set the alarm, the probability of ringing alarm is 81%."
    )
    questions = [
        {
            "question_id": i,
            "given_info": text,
            "question": f"Will alarm set by husband {word} the chance of ringing alarm?",
            "answer": answer,
            "meta": {**META, "polarity": i == 0},
        }
        for i, (word, answer) in enumerate([("increase", "yes"), ("decrease", "no")])
    ]
    (folder / "t.json").write_text(json.dumps(questions))
    return folder


def test_questions_keep_what_the_engine_needs(tmp_path: Path, tiny_cladder: Path):
    dataset = load_cladder(_tiny_with_model(tmp_path / "m"))
    q = dataset.questions[0]
    assert q.causal is not None and q.causal.model["params"] == MODEL["params"]
    assert q.causal.model is dataset.questions[1].causal.model  # shared per model
    assert "causal" not in q.model_dump()
    assert all(q.causal is None for q in load_cladder(tiny_cladder).questions)  # no params


async def test_a_run_with_step_scoring_on_the_fakes(tmp_path: Path):
    from crawdad.analysis.load import load_run

    from crawdad.config import RunConfig
    from crawdad.demo import answer_key
    from crawdad.fake import FakeServer
    from crawdad.fake.setups import paper_models
    from crawdad.run.runner import run
    from crawdad.run.store import RunStore

    dataset = load_cladder(_tiny_with_model(tmp_path / "m"))
    cfg = RunConfig.model_validate({"scoring": {"steps": True}})
    short = {"thinking_words": (20, 40), "debate_thinking_words": (10, 30)}
    models = paper_models(answer_key(dataset.questions), **short)
    async with FakeServer("ollama", models) as server:
        cfg = cfg.serve_all_from(server.url, "ollama")
        cfg.retry.initial_wait = cfg.retry.max_wait = 0
        summary = await run(cfg, dataset, Path("out"), progress=False, simulated=True)
        extractor_calls = sum(1 for r in server.requests if r["model"] == "granite3.3:2b")
    assert summary.done_total == 2 and summary.errored == 0
    records = RunStore(Path("out")).records()
    turns = [t for r in records for t in r.turns]
    assert extractor_calls == 2 * len(turns)  # the answer, then the steps
    initial = [t for t in turns if t.role == "initial"]
    assert initial and all(t.steps and t.steps.scores for t in initial)
    assert all(t.steps.scores.graph is True for t in initial)  # the fakes read the background
    manifest = json.loads((Path("out") / "manifest.json").read_text())
    assert manifest["config"]["scoring"] == {"steps": True}
    loaded = load_run(Path("out"))
    assert step_errors(loaded.turns)["n_scored"].sum() >= len(initial)
    (section,) = steps_section(loaded.turns)
    assert section.heading.startswith("Step scoring")
    assert section.tables()["step_errors"]["n_scored"].sum() >= len(initial)


def test_repairs_and_breaks_are_counted():
    def turn(i, graph, value):
        first = "graph" if graph is False else "value" if value is False else None
        return dict(run="r", question_id="1", agent="m", rung=1, round=i, turn_index=i,
                    steps=(graph, True, True, value, first))  # fmt: skip

    nothing = dict(turn(6, None, None), steps=(None, None, None, None, None))
    turns = pd.DataFrame([turn(0, False, True), turn(2, True, False), turn(4, True, None), nothing])
    errors = step_errors(turns)  # the last response shows no step: not scored
    assert errors["n_scored"].tolist() == [1, 1, 1]
    assert errors["first_wrong_graph"].tolist() == [1, 0, 0]
    repairs = step_repairs(turns).set_index("error")
    assert repairs.loc["graph", "repaired"] == 1 and repairs.loc["graph", "n_wrong_before"] == 1
    assert repairs.loc["arithmetic", "broken"] == 1  # right at turn 0, wrong at turn 2
    assert repairs.loc["arithmetic", "n_right_before"] == 1  # turn 4 shows no result
    assert step_errors(pd.DataFrame({"steps": [None]})).empty


def test_calculator_calls_are_scored_as_the_steps_are():
    """With step scoring on, each call of the causal calculator is scored by the engine: did it
    carry the question's graph and numbers, and did it get the exact value (ATE 0.59 here)."""
    from crawdad.analysis.tool_use import tool_use

    from crawdad.records import DebateRecord, ToolCall, Turn
    from crawdad.scoring.step_reading import score_call

    right = {
        "query": "ate",
        "edges": ["X->V2", "X->Y", "V2->Y"],
        "treatment": "X",
        "outcome": "Y",
        "probabilities": [
            {"event": "P(Y=1|X=0)", "value": 0.22},
            {"event": "P(Y=1|X=1)", "value": 0.81},
        ],
    }
    good = score_call(SOURCE, right, 0.59)
    assert good.graph and good.numbers and good.value and good.first_wrong is None
    wrong = {**right, "edges": ["X->Y"], "probabilities": [{"event": "P(Y=1|X=0)", "value": 0.32}]}
    bad = score_call(SOURCE, wrong, 0.49)
    assert (bad.graph, bad.numbers, bad.value, bad.first_wrong) == (False, False, False, "graph")
    calls = [
        ToolCall(name="causal_calculator", mode="native", arguments=a, scores=s)
        for a, s in ((right, good), (wrong, bad))
    ]
    turn = Turn(round=0, agent="a", model="m", role="initial", template="t", prompt_sha256="x",
                tool_mode="native", tool_calls=calls)  # fmt: skip
    record = DebateRecord(question_id=1, gold="yes", rung=2, query_type="ate",
                          alignment="commonsense", agents={"a": "m"}, turns=[turn])  # fmt: skip
    row = tool_use([record]).iloc[0]
    assert (row["scored_calls"], row["right_graph"], row["right_numbers"]) == (2, 1, 1)
