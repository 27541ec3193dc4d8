"""The loop detector stops a response that repeats itself and leaves real reasoning alone."""

import random

import pytest

from crawdad.backends.base import split_think
from crawdad.backends.guard import LoopDetector, StreamGuard

VARS = ["X", "Y", "Z", "V2", "V3"]
PHRASES = [
    "Let me compute the total effect by conditioning on the confounder {v}.",
    "P({a}=1 | {b}=1) = {p:.2f}, and P({a}=1 | {b}=0) = {q:.2f}, so the difference is {d:.2f}.",
    "Wait, I should double-check whether {v} is a collider on the path from {a} to {b}.",
    "Hmm, the question asks about the natural indirect effect, which goes through {v} only.",
    "Using the backdoor adjustment formula: sum over {v} of P({b} | {a}, {v}) P({v}).",
    "So the estimand is E[{b} | do({a} = 1)] - E[{b} | do({a} = 0)] = {d:.3f}.",
    "Alternatively, maybe the path {a} -> {v} -> {b} is blocked, let me re-read the background.",
    "Okay, {p:.2f} times {q:.2f} gives {r:.4f}, plus {d:.2f} times {p:.2f}, which is about {s:.3f}.",
    "But wait: does the story say that {v} is unobserved? If so, we cannot condition on it.",
    "Therefore the answer to whether {a} increases the chance of {b} is {yn}.",
]


def reasoning_trace(seed: int, sentences: int = 400) -> str:
    """A long, realistic reasoning trace: formulas, numbers, self-corrections, recurring phrases."""
    rng = random.Random(seed)
    out = []
    for _ in range(sentences):
        a, b, v = rng.sample(VARS, 3)
        p, q = rng.random(), rng.random()
        out.append(
            rng.choice(PHRASES).format(
                a=a,
                b=b,
                v=v,
                p=p,
                q=q,
                d=p - q,
                r=p * q,
                s=p * q + (p - q) * p,
                yn=rng.choice(["yes", "no"]),
            )
        )
        if rng.random() < 0.1:
            out.append("\n\n")
    return " ".join(out)


def feed_in_chunks(detector: LoopDetector, text: str, size: int = 7) -> int | None:
    for i in range(0, len(text), size):
        if detector.feed(text[i : i + size]):
            return i
    return None


@pytest.mark.parametrize("seed", range(8))
def test_varied_reasoning_is_not_a_loop(seed: int) -> None:
    text = reasoning_trace(seed)
    assert len(text) > 30_000
    assert feed_in_chunks(LoopDetector(), text) is None


def test_real_prompt_text_is_not_a_loop() -> None:
    from crawdad.prompts import load_prompts

    prompts = load_prompts()
    text = "\n".join(prompts[n].text for n in ("initial", "critique", "defence")) * 1
    assert feed_in_chunks(LoopDetector(min_chars=500), text) is None


@pytest.mark.parametrize(
    "span",
    [
        "Wait, let me recompute P(Y=1|X=1). ",
        "So the answer is yes. But wait, the answer might be no. Let me check again: the answer is yes. ",
        " ".join(f"step {i}: the effect of X on Y through V2 is {i * 0.01:.2f};" for i in range(30))
        + " ",
    ],
)
def test_repeated_span_is_a_loop(span: str) -> None:
    text = reasoning_trace(99, 20) + span * (20_000 // len(span) + 5)
    hit = feed_in_chunks(LoopDetector(), text)
    assert hit is not None
    assert hit < len(text) - 4000  # caught well before the end


def test_guard_time_budget() -> None:
    guard = StreamGuard(budget_seconds=0.0, started=0.0)
    assert guard.feed("x") == "timeout"
    assert StreamGuard(budget_seconds=3600).feed("x") is None


@pytest.mark.parametrize(
    ("content", "thinking", "text", "trace"),
    [
        ("<think>hmm</think>\n\nAnswer: yes", "", "Answer: yes", "hmm"),
        ("<think>still thinking when cut off", "", "", "still thinking when cut off"),
        ("reasoning here</think>Answer: no", "", "Answer: no", "reasoning here"),
        ("Answer: no", "field trace", "Answer: no", "field trace"),
    ],
)
def test_split_think(content: str, thinking: str, text: str, trace: str) -> None:
    assert split_think(content, thinking) == (text, trace)
