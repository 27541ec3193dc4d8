"""Every protocol, checked from the server side against the fakes: who speaks when, what each
request contained (final texts only, never a trace; a judge sees only final texts; a simultaneous
round r request holds exactly the round r-1 texts; solo samples see nothing of each other), stop
rules, aggregation and ties."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from crawdad.config import AgentConfig, JudgeConfig, RunConfig
from crawdad.data.questions import Question, load_cladder
from crawdad.fake import FakeExtractor, FakeReply, FakeRequest, FakeServer, FunctionModel
from crawdad.protocols import request_seed, run_debate, speaking_order
from crawdad.records import DebateRecord
from crawdad.run.runner import build_setup, pools_of

TRACE = "HIDDEN-TRACE"
JUDGE = "judge-model"
EXTRACTOR = "granite3.3:2b"


@pytest.fixture
def question(tiny_cladder: Path) -> Question:
    return load_cladder(tiny_cladder).questions[0]


def said(text: str, answer: str | None, conf: float = 0.8) -> FakeReply:
    final = f"Answer: {answer} (Confidence: {conf})" if answer else "I cannot decide."
    return FakeReply(thinking=f"{TRACE} of {text}", text=f"{text}. {final}")


def debater(name: str, answers: Callable[[int], str | None], conf: float = 0.8) -> FunctionModel:
    """Replies "<name> #k" where k counts the earlier responses the prompt shows."""

    def reply(request: FakeRequest) -> FakeReply:
        k = request.prompt.count("==========") // 2
        return said(f"{name} #{k}", answers(k), conf)

    return FunctionModel(reply)


def config(url: str, kind: str, agents: list[tuple[str, str]], **protocol: Any) -> RunConfig:
    cfg = RunConfig(
        seed=3,
        agents=[AgentConfig(name=n, model=m) for n, m in agents],
        protocol={"kind": kind, **protocol},
        judge=JudgeConfig(model=JUDGE) if kind == "judge" else None,
    ).serve_all_from(url)
    cfg.retry.initial_wait = cfg.retry.max_wait = 0
    return cfg


async def play(
    kind: str,
    models: dict[str, Any],
    q: Question,
    agents: list[tuple[str, str]],
    **protocol: Any,
) -> tuple[DebateRecord, list[dict[str, Any]]]:
    models = {**models, EXTRACTOR: FakeExtractor()}
    async with FakeServer("ollama", models) as server:
        cfg = config(server.url, kind, agents, **protocol)
        setup, _ = build_setup(cfg)
        try:
            record = await run_debate(setup, q)
        finally:
            for pool in pools_of(setup):
                await pool.aclose()
        assert record.error is None, record.error
        return record, [r for r in server.requests if r.get("model") != EXTRACTOR]


def prompt(body: dict[str, Any]) -> str:
    return body["messages"][0]["content"]


def shown_texts(p: str) -> list[str]:
    """The texts between the '==========' rules of a prompt, in order."""
    return [s.strip() for s in p.split("==========")[1::2]]


THREE = [("a", "model-a"), ("b", "model-b"), ("c", "model-c")]


# --- crawdad, N debaters --------------------------------------------------------------------


async def test_three_debaters_speak_in_the_drawn_order_and_see_every_earlier_text(
    question: Question,
) -> None:
    models = {m: debater(n, lambda k, n=n: "yes" if n == "a" else "no") for n, m in THREE}
    record, requests = await play("crawdad", models, question, THREE, max_turns=6)
    order = speaking_order(3, question.question_id, ["a", "b", "c"])
    assert record.speaking_order == order and record.first_speaker == order[0]
    assert [t.agent for t in record.turns] == [order[i % 3] for i in range(6)]
    # A debater who has not spoken critiques; one who has, defends.
    assert [t.role for t in record.turns] == [
        "initial",
        "critique",
        "critique",
        "defence",
        "defence",
        "defence",
    ]
    assert [t.seen for t in record.turns] == [list(range(i)) for i in range(6)]
    for i, body in enumerate(requests):
        p = prompt(body)
        assert TRACE not in p
        assert shown_texts(p) == [t.text for t in record.turns[:i]]
        assert body["model"] == dict(THREE)[record.turns[i].agent]
    # Each other debater is numbered from the reader's side, in speaking order.
    reader = order[0]
    others = [n for n in order if n != reader]
    p3 = prompt(requests[3])
    assert f"Opponent 1's response:\n\n==========\n\n{others[0]} #" in p3
    assert f"Opponent 2's response:\n\n==========\n\n{others[1]} #" in p3
    assert "Your original answer:" in p3
    assert record.end == "cap" and not record.consensus


async def test_three_debaters_stop_when_all_latest_answers_agree(question: Question) -> None:
    order = speaking_order(3, question.question_id, ["a", "b", "c"])

    # The first speaker says no, the others yes; the first speaker gives in at its second turn.
    def answers(name: str) -> Callable[[int], str]:
        return lambda k: ("no" if k == 0 else "yes") if name == order[0] else "yes"

    models = {m: debater(n, answers(n)) for n, m in THREE}
    record, _ = await play("crawdad", models, question, THREE, max_turns=8)
    assert [t.answer for t in record.turns] == ["no", "yes", "yes", "yes"]
    assert record.end == "consensus" and record.consensus and record.final_answer == "yes"
    assert record.agent_answers == {order[0]: "yes", order[1]: "yes", order[2]: "yes"}


# --- judge ----------------------------------------------------------------------------------


def judge_model(decisions: list[dict[str, Any]], seen: list[FakeRequest]) -> FunctionModel:
    def reply(request: FakeRequest) -> FakeReply:
        seen.append(request)
        return FakeReply(thinking=f"{TRACE} judge", text=json.dumps(decisions[len(seen) - 1]))

    return FunctionModel(reply)


TWO = [("a", "model-a"), ("b", "model-b")]


async def test_judge_asks_a_follow_up_that_the_next_round_carries_then_decides(
    question: Question,
) -> None:
    judged: list[FakeRequest] = []
    decisions = [
        {"decision": "question", "answer": "yes", "confidence": 0.5, "question": "What is P(Y)?"},
        {"decision": "verdict", "answer": "no", "confidence": 0.9, "question": ""},
    ]
    models = {
        "model-a": debater("a", lambda k: "yes"),
        "model-b": debater("b", lambda k: "no"),
        JUDGE: judge_model(decisions, judged),
    }
    record, requests = await play("judge", models, question, TWO, rounds=3)
    order = record.speaking_order
    agents = [t.agent for t in record.turns]
    assert agents == [order[0], order[1], "judge", order[0], order[1], "judge"]
    assert [t.role for t in record.turns] == [
        "initial",
        "argument",
        "verdict",
        "argument",
        "argument",
        "verdict",
    ]
    assert record.final_answer == "no" and record.final_confidence == 0.9
    assert record.end == "verdict" and record.judge == JUDGE
    assert record.turns[2].followup == "What is P(Y)?" and record.turns[5].followup is None
    # The judge reads the debaters' final texts only, numbered in speaking order.
    first_judging = judged[0].prompt
    assert TRACE not in first_judging
    assert shown_texts(first_judging) == [record.turns[0].text, record.turns[1].text]
    assert f"Debater 1's response:\n\n==========\n\n{order[0]} #" in first_judging
    # Round 2's debaters see the question (not the judge's leaning) and every earlier text.
    round2 = [prompt(b) for b in requests if b["model"] != JUDGE][2:]
    for p in round2:
        assert "The judge's follow-up question:\n\n==========\n\nWhat is P(Y)?" in p
        assert '"answer"' not in p and TRACE not in p
    assert record.turns[3].seen == [0, 1, 2]
    # Only the last round's schema forbids a follow-up question.
    schemas = [b["format"]["properties"]["decision"] for b in requests if b["model"] == JUDGE]
    assert schemas[0]["enum"] == ["verdict", "question"] and len(schemas) == 2


async def test_judge_must_decide_in_the_last_round(question: Question) -> None:
    judged: list[FakeRequest] = []
    asks = {"decision": "question", "answer": "yes", "confidence": 0.6, "question": "Why?"}
    models = {
        "model-a": debater("a", lambda k: "yes"),
        "model-b": debater("b", lambda k: "no"),
        JUDGE: judge_model([asks, asks], judged),
    }
    record, requests = await play("judge", models, question, TWO, rounds=2)
    last_schema = [b for b in requests if b["model"] == JUDGE][-1]["format"]
    assert last_schema["properties"]["decision"]["enum"] == ["verdict"]
    # A question where a verdict was due is taken as the verdict it carries.
    assert record.end == "cap" and record.final_answer == "yes"
    assert len([t for t in record.turns if t.agent == "judge"]) == 2


async def test_an_unreadable_verdict_is_read_by_the_extractor_or_left_null(
    question: Question,
) -> None:
    for text, expected in [("I rule: Answer: no (Confidence: 0.7)", "no"), ("Hmm.", None)]:
        models = {
            "model-a": debater("a", lambda k: "yes"),
            "model-b": debater("b", lambda k: "no"),
            JUDGE: FunctionModel(lambda r, text=text: FakeReply(text=text)),
        }
        record, _ = await play("judge", models, question, TWO, rounds=1)
        verdict = record.turns[-1]
        assert verdict.answer == expected and record.final_answer == expected
        assert verdict.extraction is not None
        assert "not the schema's JSON" in (verdict.extraction.reason or "")


async def test_a_judge_with_the_text_tool_protocol_records_the_prompt_it_sent(
    question: Question,
) -> None:
    """In text mode the tool's instructions are appended to the prompt: the judge's turn keeps
    (and hashes) the prompt as sent, as a debater's does."""
    verdict = {"decision": "verdict", "answer": "yes", "confidence": 0.8, "question": ""}
    models = {
        "model-a": debater("a", lambda k: "yes"),
        "model-b": debater("b", lambda k: "no"),
        JUDGE: judge_model([verdict], []),
        EXTRACTOR: FakeExtractor(),
    }
    async with FakeServer("ollama", models) as server:
        cfg = config(server.url, "judge", TWO, rounds=1, store_prompts=True)
        assert cfg.judge is not None
        cfg.judge.tools, cfg.judge.tool_mode = ["causal"], "text"
        setup, _ = build_setup(cfg)
        try:
            record = await run_debate(setup, question)
        finally:
            for pool in pools_of(setup):
                await pool.aclose()
        sent = [prompt(b) for b in server.requests if b.get("model") == JUDGE]
    judge_turn = record.turns[-1]
    assert record.ok and judge_turn.agent == "judge" and judge_turn.tool_mode == "text"
    assert len(sent) == 1 and "causal calculator" in sent[0]
    assert judge_turn.prompt == sent[0]
    assert judge_turn.prompt_sha256 == hashlib.sha256(sent[0].encode()).hexdigest()


async def test_fixed_stances_alternate_and_reach_the_prompts(question: Question) -> None:
    decisions = [{"decision": "verdict", "answer": "yes", "confidence": 0.8, "question": ""}]
    models = {
        "model-a": debater("a", lambda k: "yes"),
        "model-b": debater("b", lambda k: "no"),
        JUDGE: judge_model(decisions, []),
    }
    record, requests = await play(
        "judge", models, question, TWO, rounds=1, stances=True, stance_mode="fixed"
    )
    first, second = record.turns[0], record.turns[1]
    assert {first.stance, second.stance} == {"yes", "no"}
    side = {"yes": "affirmative", "no": "negative"}
    assert first.side == side[first.stance] and second.side == side[second.stance]
    assert f"you are on the {side[first.stance]} side" in prompt(requests[0])
    assert f"you are on the {side[second.stance]} side" in prompt(requests[1])
    assert "argue that the answer to the question is" in prompt(requests[0])
    # Without stances the first debater's prompt is the paper's initial prompt, unchanged.
    record, requests = await play(
        "judge", models | {JUDGE: judge_model(decisions, [])}, question, TWO, rounds=1
    )
    assert "side" not in prompt(requests[0]) and record.turns[0].stance is None


async def test_mac_sides_the_affirmative_opens_with_its_own_answer(question: Question) -> None:
    """MAC's sides (the default): the first speaker is the affirmative and gives its own answer
    (here "no"); the negative is told that answer and to argue against it."""
    decisions = [{"decision": "verdict", "answer": "no", "confidence": 0.8, "question": ""}]
    models = {
        "model-a": debater("a", lambda k: "no"),
        "model-b": debater("b", lambda k: "yes"),
        JUDGE: judge_model(decisions, []),
    }
    record, requests = await play("judge", models, question, TWO, rounds=1, stances=True)
    affirmative, negative = record.turns[0], record.turns[1]
    assert affirmative.agent == record.speaking_order[0] and negative.agent != affirmative.agent
    assert (affirmative.side, affirmative.stance, affirmative.role) == (
        "affirmative",
        None,
        "initial",
    )
    own = {"a": "no", "b": "yes"}[affirmative.agent]
    assert affirmative.answer == own  # its own answer, not an assigned "yes"
    first, second = prompt(requests[0]), prompt(requests[1])
    assert "you are on the affirmative side: you give your own answer" in first
    assert "argue that the answer to the question is" not in first + second
    # The negative sees the affirmative's response and is told its answer, to argue against it.
    assert (negative.side, negative.stance) == ("negative", {"yes": "no", "no": "yes"}[own])
    assert f"the affirmative side answered {own}. Always disagree" in second
    assert shown_texts(second) == [affirmative.text] and negative.seen == [0]


async def test_mac_sides_the_affirmative_opens_every_debate(tiny_cladder: Path) -> None:
    """Over many questions (speaking orders drawn both ways), the affirmative speaks first."""
    questions = load_cladder(tiny_cladder).questions
    reply = {"decision": "verdict", "answer": "yes", "confidence": 0.8, "question": ""}
    models = {
        "model-a": debater("a", lambda k: "yes"),
        "model-b": debater("b", lambda k: "no"),
        JUDGE: FunctionModel(lambda r: FakeReply(text=json.dumps(reply))),
        EXTRACTOR: FakeExtractor(),
    }
    async with FakeServer("ollama", models) as server:
        cfg = config(server.url, "judge", TWO, rounds=1, stances=True)
        setup, _ = build_setup(cfg)
        try:
            records = [await run_debate(setup, q) for q in questions]
        finally:
            for pool in pools_of(setup):
                await pool.aclose()
    assert len({r.first_speaker for r in records}) == 2  # both agents open some debates
    assert all(r.turns[0].side == "affirmative" for r in records)
    assert all(r.turns[1].side == "negative" for r in records)


async def test_a_follow_up_to_one_side_is_answered_by_that_side_only(question: Question) -> None:
    judged: list[FakeRequest] = []
    decisions = [
        {
            "decision": "question",
            "answer": "yes",
            "confidence": 0.5,
            "question": "Which mechanism?",
            "to": "debater 2",
        },
        {"decision": "question", "answer": "yes", "confidence": 0.5, "question": "Both?"},
        {"decision": "verdict", "answer": "no", "confidence": 0.9, "question": "", "to": "all"},
    ]
    models = {
        "model-a": debater("a", lambda k: "yes"),
        "model-b": debater("b", lambda k: "no"),
        JUDGE: judge_model(decisions, judged),
    }
    record, requests = await play("judge", models, question, TWO, rounds=3, stances=True)
    first, second = record.speaking_order
    agents = [t.agent for t in record.turns]
    # Debater 2 (the second speaker) alone answers the first question; a question without `to`
    # is for every debater, in speaking order.
    assert agents == [first, second, "judge", second, "judge", first, second, "judge"]
    assert record.turns[2].followup_to == [second] and record.turns[4].followup_to == [
        first,
        second,
    ]
    assert record.turns[3].side == "negative" and record.final_answer == "no"
    # The addressed side is told the question is for it; the judge, whom it asked.
    debater_prompts = [prompt(b) for b in requests if b["model"] != JUDGE]
    assert (
        "The judge's follow-up question, to you:\n\n==========\n\nWhich mechanism?"
        in (debater_prompts[2])
    )
    assert (
        "to the other side (you need not answer it):\n\n==========\n\nWhich mechanism?"
        in (debater_prompts[3])
    )
    assert "Your follow-up question, to Debater 2:" in judged[1].prompt
    schema = next(b for b in requests if b["model"] == JUDGE)["format"]
    assert schema["properties"]["to"]["enum"] == ["all", "debater 1", "debater 2"]
    assert "to" in schema["required"]


async def test_the_mac_judge_is_told_to_accept_an_answer_both_sides_reached(
    question: Question,
) -> None:
    from crawdad.prompts import load_prompts

    rule = "If both sides have reached a similar final answer, accept the answer of both sides"
    assert rule in load_prompts("mac-pairs")["judge"].text
    judged: list[FakeRequest] = []
    decisions = [{"decision": "verdict", "answer": "no", "confidence": 0.9, "question": ""}]
    models = {
        "model-a": debater("a", lambda k: "no"),
        "model-b": debater("b", lambda k: "no"),
        JUDGE: judge_model(decisions, judged),
    }
    record, _ = await play("judge", models, question, TWO, rounds=2, stances=True)
    # The judge accepts the agreed answer in round 0: the debate ends with it.
    assert record.consensus and record.end == "verdict" and record.final_answer == "no"
    assert len(judged) == 1


# --- simultaneous ---------------------------------------------------------------------------


async def test_simultaneous_rounds_show_exactly_the_previous_round(question: Question) -> None:
    models = {m: debater(n, lambda k, n=n: "yes" if n != "c" else "no") for n, m in THREE}
    record, requests = await play("simultaneous", models, question, THREE, rounds=2)
    assert [t.round for t in record.turns] == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert [t.role for t in record.turns[:3]] == ["initial"] * 3
    assert {t.role for t in record.turns[3:]} == {"revision"}
    for turn in record.turns:
        previous = [i for i, t in enumerate(record.turns) if t.round == turn.round - 1]
        assert turn.seen == previous
    # From the server's side: each round-r request holds the round r-1 texts, nothing older.
    round_texts = {r: {t.text for t in record.turns if t.round == r} for r in (0, 1, 2)}
    for body in requests:
        texts = shown_texts(prompt(body))
        if not texts:
            continue
        assert TRACE not in prompt(body)
        assert set(texts) in (round_texts[0], round_texts[1])
    assert record.final_answer == "yes" and not record.tie and record.end == "cap"
    assert record.agent_answers == {"a": "yes", "b": "yes", "c": "no"}


async def test_simultaneous_early_stop_is_optional(question: Question) -> None:
    models = {m: debater(n, lambda k: "yes") for n, m in THREE}
    record, _ = await play("simultaneous", models, question, THREE, rounds=3)
    assert len(record.turns) == 12 and record.end == "cap"  # off by default, as Du et al.
    record, _ = await play("simultaneous", models, question, THREE, rounds=3, early_stop=True)
    assert len(record.turns) == 3 and record.end == "consensus" and record.consensus


async def test_a_tied_majority_goes_to_the_larger_summed_confidence(question: Question) -> None:
    four = [*THREE, ("d", "model-d")]
    confs = {"a": 0.9, "b": 0.9, "c": 0.6, "d": 0.6}
    models = {m: debater(n, lambda k, n=n: "yes" if n in "ab" else "no", confs[n]) for n, m in four}
    record, _ = await play("simultaneous", models, question, four, rounds=1)
    assert record.tie and record.final_answer == "yes"
    assert record.final_confidence == pytest.approx(0.9)
    even = {m: debater(n, lambda k, n=n: "yes" if n in "ab" else "no", 0.7) for n, m in four}
    record, _ = await play("simultaneous", even, question, four, rounds=1)
    assert record.tie and record.final_answer is None  # an exact tie has no answer


# --- solo -----------------------------------------------------------------------------------


async def test_solo_samples_are_independent_and_voted(question: Question) -> None:
    answers = iter(["yes", "no", "yes", "yes", "no"])
    models = {"model-a": FunctionModel(lambda r: said("sample", next(answers)))}
    record, requests = await play("solo", models, question, [("a", "model-a")], samples=5)
    assert len(requests) == 5 and [t.sample for t in record.turns] == [0, 1, 2, 3, 4]
    prompts = {prompt(b) for b in requests}
    assert len(prompts) == 1 and "==========" not in prompts.pop()  # nothing of the others
    seeds = [b["options"]["seed"] for b in requests]
    assert len(set(seeds)) == 5
    # Sample 0 is the request a debate's round 0 sends: an experiment may share it.
    assert seeds[0] == request_seed(3, question.question_id, 0)
    assert record.final_answer == "yes" and record.agent_answers == {"a": "yes"}
    assert all(t.seen == [] and t.role == "sample" for t in record.turns)


async def test_two_agents_on_one_model_never_send_the_same_request(question: Question) -> None:
    models = {"model-a": FunctionModel(lambda r: said("s", "yes"))}
    same = [("a", "model-a"), ("b", "model-a")]
    _, requests = await play("solo", models, question, same, samples=2)
    assert len({b["options"]["seed"] for b in requests}) == 4
    _, requests = await play("simultaneous", models, question, same, rounds=1)
    round0 = [b for b in requests if "==========" not in prompt(b)]
    assert len({b["options"]["seed"] for b in round0}) == 2


def test_solo_needs_one_agent_and_debates_need_two() -> None:
    RunConfig(agents=[AgentConfig(name="a", model="m")], protocol={"kind": "solo"})
    with pytest.raises(ValueError, match="at least 2 agents"):
        RunConfig(agents=[AgentConfig(name="a", model="m")])
    judge = RunConfig(protocol={"kind": "judge"}).judge
    assert judge is not None and judge.model == "qwen3:32b"  # the judge has a default model
    # A [judge] in a config of another kind is not used, so it is not kept (nor checked).
    assert RunConfig(judge=JudgeConfig(model="x")).judge is None


async def test_show_prints_every_protocol_s_transcript(question: Question) -> None:
    from crawdad.show import format_debate

    decisions = [
        {"decision": "question", "answer": "yes", "confidence": 0.5, "question": "What is P(Y)?"},
        {"decision": "verdict", "answer": "no", "confidence": 0.9, "question": ""},
    ]
    models = {
        "model-a": debater("a", lambda k: "yes"),
        "model-b": debater("b", lambda k: "no"),
        JUDGE: judge_model(decisions, []),
    }
    record, _ = await play("judge", models, question, TWO, rounds=2, stances=True)
    text = format_debate(record)
    assert "Protocol judge" in text and f"judge: {JUDGE}" in text
    assert "the JUDGE" in text and "Follow-up question (to " in text and "What is P(Y)?" in text
    assert "affirmative, its own answer" in text and "negative, arguing " in text
    assert "shown turns [0, 1, 2]" in text  # what each agent saw, by index
    answers = iter(["yes", "no", "no"])
    solo = {"model-a": FunctionModel(lambda r: said("sample", next(answers)))}
    record, _ = await play("solo", solo, question, [("a", "model-a")], samples=3)
    text = format_debate(record)
    assert "Sample 2 by A (model-a)" in text and "Each agent's majority: a=no" in text
