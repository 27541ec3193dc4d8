"""Step scoring's second extraction: the extractor model reads a response's CausalCoT steps
(causal graph, query type, estimand, the probabilities it read, its result) as JSON, and the
causal engine scores them (crawdad.scoring.step_scores). On with `[scoring] steps = true`; it costs one
more extractor call per debater response.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from crawdad.backends.base import ChatResult
from crawdad.causal.model import BinaryModel
from crawdad.errors import CrawdadError
from crawdad.records import StepExtraction, StepNumber
from crawdad.scoring.step_scores import QUERY_NAMES, score_steps

if TYPE_CHECKING:
    from crawdad.data.questions import CausalSource, Question

# The extractor, asked one question with a JSON schema enforced (protocols.base.Participant.ask).
Ask = Callable[[str, dict[str, Any]], Awaitable[ChatResult]]
RUNAWAY = ("loop", "length", "timeout")  # as crawdad.protocols.base: not extracted
MARKER = "CAUSAL STEPS"  # the fake extractor knows a step request by it
PROMPT = f"""{MARKER}: read the response below to a causal-inference question and report the \
steps of its reasoning as JSON.

Variables of the question; write every variable with its symbol: $legend.

Report:
- "edges": the causal graph the response uses, each edge as "A->B" with the symbols above;
- "query_type": the kind of quantity the response computes, one of: $query_types;
- "estimand": the formula the response computes, as it writes it;
- "numbers": each probability the response reads from the question, as {{"event": \
"P(Y=1 | X=0)", "value": 0.26}} with the symbols above;
- "result": the final number the response computes.
Use null (or []) for a step the response does not show. Reply with the JSON object only.

<response>
$response
</response>"""
TEMPLATE = "steps@" + hashlib.sha256(PROMPT.encode()).hexdigest()[:12]

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "edges": {"type": "array", "items": {"type": "string"}},
        "query_type": {"type": ["string", "null"], "enum": [*QUERY_NAMES, None]},
        "estimand": {"type": ["string", "null"]},
        "numbers": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"event": {"type": "string"}, "value": {"type": "number"}},
                "required": ["event", "value"],
            },
        },
        "result": {"type": ["number", "null"]},
    },
    "required": ["edges", "query_type", "estimand", "numbers", "result"],
}


def legend(source: CausalSource) -> str:
    """ "X = husband; V2 = wife; Y = alarm clock" from the model's variable names."""
    names = source.model.get("variable_mapping") or {}
    out = []
    for key, value in names.items():
        if key.endswith("name"):
            out.append(f"{key[: -len('name')]} = {value}")
    return "; ".join(out) or "X = the treatment; Y = the outcome"


def step_prompt(source: CausalSource, response: str) -> str:
    return (
        PROMPT.replace("$legend", legend(source))
        .replace("$query_types", ", ".join(QUERY_NAMES))
        .replace("$response", response)
    )


_OBJECT = re.compile(r"\{.*\}", re.DOTALL)


def parse_steps(text: str) -> tuple[dict[str, Any] | None, str]:
    """(the steps, "strict" or "tolerant"), or (None, why) when the reply holds no JSON object."""
    try:
        value = json.loads(text)
        method = "strict"
    except json.JSONDecodeError:
        match = _OBJECT.search(text)
        if not match:
            return None, "the extractor's reply holds no JSON object"
        try:
            value = json.loads(match.group(0))
        except json.JSONDecodeError:
            return None, "the extractor's reply is not valid JSON"
        method = "tolerant"
    if not isinstance(value, dict):
        return None, "the extractor's reply is not a JSON object"
    return value, method


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip().rstrip("%")) / (100 if value.strip().endswith("%") else 1)
        except ValueError:
            return None
    return None


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def steps_from(value: dict[str, Any]) -> dict[str, Any]:
    """The fields of a StepExtraction from a parsed reply, whatever a small model got wrong."""
    edges = _list(value.get("edges"))
    numbers = []
    for n in _list(value.get("numbers")):
        if isinstance(n, dict) and (v := _number(n.get("value"))) is not None:
            numbers.append(StepNumber(event=str(n.get("event", "")), value=v))
    qt, est = value.get("query_type"), value.get("estimand")
    return {
        "edges": [str(e) for e in edges if isinstance(e, str | int)],
        "query_type": str(qt) if qt else None,
        "estimand": str(est) if est else None,
        "numbers": numbers,
        "result": _number(value.get("result")),
    }


def score(source: CausalSource, fields: dict[str, Any]) -> Any:
    try:
        model = BinaryModel.from_meta(source.model)
    except CrawdadError:
        return None
    try:
        return score_steps(model, source.meta, **fields)
    except (CrawdadError, ZeroDivisionError, KeyError, TypeError, ValueError):
        return None


async def extract_steps(
    ask: Ask, model: str, question: Question, result: ChatResult
) -> StepExtraction | None:
    """The steps of one response, scored; None when the question has no causal model or the
    response no final text."""
    source = question.causal
    if source is None or not result.text.strip() or result.stop_reason in RUNAWAY:
        return None
    prompt = step_prompt(source, result.text)
    reply = await ask(prompt, SCHEMA)
    parsed, method = parse_steps(reply.text)
    read: dict[str, Any] = {
        "model": model,
        "raw": reply.text,
        "prompt_tokens": reply.prompt_tokens,
        "completion_tokens": reply.completion_tokens,
        "seconds": reply.seconds,
    }
    if parsed is None:
        return StepExtraction.model_validate({**read, "method": "none", "reason": method})
    fields = steps_from(parsed)
    scores = score(source, {k: v for k, v in fields.items() if k != "estimand"})
    return StepExtraction.model_validate({**read, "method": method, **fields, "scores": scores})


def score_call(source: CausalSource, arguments: dict[str, Any], value: Any) -> Any:
    """A calculator call scored as the steps are: its graph, query, the numbers it passed, and
    the value it got back (None when there is nothing to score)."""
    fields = steps_from(
        {
            "edges": arguments.get("edges"),
            "query_type": arguments.get("query"),
            "numbers": arguments.get("probabilities"),
            "result": value
            if isinstance(value, int | float) and not isinstance(value, bool)
            else None,
        }
    )
    fields.pop("estimand", None)
    return score(source, fields)
