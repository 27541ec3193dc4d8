"""A fake of the small extractor model (paper: Granite 3.3 2B).

It finds the debater response inside its prompt, reads the last `Answer:` and `Confidence:`
there, and replies with `{"answer": ..., "confidence": ...}`. It also plays the grader model
(crawdad/fake/grader.py) when asked with a grading prompt. At a configurable rate it replies
the kinds of malformed output a 2B model produces, to test tolerant parsing.
"""

from __future__ import annotations

import json
import random
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from crawdad.fake.behaviour import FakeModel, FakeReply, FakeRequest, seeded_rng
from crawdad.fake.extractor_steps import STEPS_MARKER, read_steps
from crawdad.fake.grader import grade, is_grading
from crawdad.fake.graphs import read_final_graph
from crawdad.fake.parsing import find_response, last_stance, strip_think

GarbageMode = Literal[
    "prose",  # no JSON at all
    "fenced",  # JSON inside a ```json code fence
    "wrapped",  # JSON inside a sentence
    "percent",  # "confidence": "85%"
    "word",  # "confidence": "high"
    "out_of_range",  # "confidence": 85 or 1.5
    "missing",  # no confidence key
    "truncated",  # JSON cut off mid-way
    "capitalized",  # "answer": "Yes"
]
GARBAGE_MODES: tuple[GarbageMode, ...] = (
    "prose",
    "fenced",
    "wrapped",
    "percent",
    "word",
    "out_of_range",
    "missing",
    "truncated",
    "capitalized",
)

_UNSTRUCTURED: tuple[GarbageMode, ...] = ("fenced", "wrapped", "prose")
# What a 2B model says when there is nothing to extract.
_NOTHING = (
    {"answer": None, "confidence": None},
    {"answer": "unknown", "confidence": 0.0},
    {"answer": "", "confidence": None},
)


class ExtractorParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    garbage_rate: float = Field(default=0.0, ge=0, le=1)
    garbage_modes: list[GarbageMode] = Field(default_factory=lambda: list(GARBAGE_MODES))
    # Rate when no structured output is enforced (not asked, or asked in a form the server
    # ignores): a small model then often wraps or fences its JSON.
    unstructured_garbage_rate: float = Field(default=0.5, ge=0, le=1)
    unstructured_modes: list[GarbageMode] = Field(default_factory=lambda: list(_UNSTRUCTURED))
    seed: int = 0
    # Playing the grader model: the rate of verdicts it gets wrong.
    grader_flip_rate: float = Field(default=0.0, ge=0, le=1)


class FakeExtractor(FakeModel):
    """Replies JSON with the answer and confidence of the debater response in its prompt."""

    thinks = False
    family = "granite"
    parameter_size = "2.5B"
    context_length = 131072

    def __init__(self, params: ExtractorParams | None = None, **overrides: Any) -> None:
        base = params or ExtractorParams()
        self.params = ExtractorParams.model_validate({**base.model_dump(), **overrides})

    def extract(self, prompt: str, uncertain: bool = False) -> dict[str, Any]:
        """`uncertain`: the extractor may answer "uncertain" (else such a response has none)."""
        answer, confidence = last_stance(strip_think(find_response(prompt)), uncertain=True)
        if answer == "uncertain" and not uncertain:
            answer = None
        return {"answer": answer, "confidence": confidence}

    def extract_graph(self, request: FakeRequest, rng: random.Random) -> str:
        """{"edges": [{cause, effect}] or null, "confidence"} of the response in the prompt;
        without structured output, sometimes fenced or wrapped in a sentence."""
        edges, confidence = read_final_graph(strip_think(find_response(request.last_user_text())))
        value = {
            "edges": None if edges is None else [{"cause": a, "effect": b} for a, b in edges],
            "confidence": confidence,
        }
        if not request.structured and rng.random() < self.params.unstructured_garbage_rate:
            text = json.dumps(value)
            if rng.random() < 0.5:
                return f"```json\n{json.dumps(value, indent=2)}\n```"
            return f"Here is the extracted information: {text} I hope this helps!"
        return json.dumps(value)

    def reply(self, request: FakeRequest) -> FakeReply:
        p = self.params
        rng = seeded_rng(p.seed, request.model, request.digest)
        if is_grading(request.last_user_text()):  # playing the grader model ([grader])
            return FakeReply(text=grade(request, p.grader_flip_rate))
        if STEPS_MARKER in request.last_user_text()[:200]:  # step scoring's second extraction
            return FakeReply(text=json.dumps(read_steps(request.last_user_text())))
        if is_graph_extraction(request):  # a whole-graph answer: its edge list
            return FakeReply(text=self.extract_graph(request, rng))
        value = self.extract(request.last_user_text(), allows_uncertain(request))
        if value["answer"] is None:
            return FakeReply(text=json.dumps(rng.choice(_NOTHING)))
        modes, rate = p.garbage_modes, p.garbage_rate
        if not request.structured and rng.random() < p.unstructured_garbage_rate:
            modes, rate = p.unstructured_modes, 1.0
        if modes and rng.random() < rate:
            return FakeReply(text=garble(value, rng.choice(modes), rng.random()))
        return FakeReply(text=json.dumps(value))


def allows_uncertain(request: FakeRequest) -> bool:
    """Whether "uncertain" is an answer here: in the schema asked for, or, without one, in
    the extractor's instructions (a prompt set with `uncertain = true`)."""
    if request.schema:
        return "uncertain" in json.dumps(request.schema)
    return '"uncertain"' in request.last_user_text().split("Response:", 1)[0]


def is_graph_extraction(request: FakeRequest) -> bool:
    """An extraction of a whole graph: its schema, or its instructions, ask for "edges"."""
    properties = (request.schema or {}).get("properties") or {}
    return "edges" in properties or '"edges"' in request.last_user_text()[:3000]


def garble(value: dict[str, Any], mode: GarbageMode, u: float = 0.0) -> str:
    """`value` rendered the way a small model gets it wrong."""
    answer, confidence = value["answer"], value["confidence"]
    c = 0.9 if confidence is None else confidence
    if mode == "prose":
        return f"The answer is {answer}, with a confidence of {c}."
    if mode == "fenced":
        return f"```json\n{json.dumps(value, indent=2)}\n```"
    if mode == "wrapped":
        return f"Here is the extracted information: {json.dumps(value)} I hope this helps!"
    if mode == "percent":
        return json.dumps({"answer": answer, "confidence": f"{round(c * 100)}%"})
    if mode == "word":
        word = "high" if c >= 0.8 else "medium" if c >= 0.5 else "low"
        return json.dumps({"answer": answer, "confidence": word})
    if mode == "out_of_range":
        return json.dumps({"answer": answer, "confidence": round(c * 100) if u < 0.5 else 1.5})
    if mode == "missing":
        return json.dumps({"answer": answer})
    if mode == "truncated":
        text = json.dumps(value)
        return text[: max(1, len(text) * 2 // 3)]
    return json.dumps({"answer": str(answer).capitalize(), "confidence": confidence})
