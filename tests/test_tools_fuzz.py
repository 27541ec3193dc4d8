"""Fuzzing the tool-call path: whatever a model writes as a call (random and adversarial
arguments: deep nesting, huge lists, odd types, unicode, NaN and infinities, cyclic and
self-looping graphs, text that is not JSON), the turn's tool loop answers it with a value or a
tool error within its bound, records it completely, and goes on to the model's answer."""

from __future__ import annotations

import asyncio
import json
from itertools import product
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crawdad.backends.base import ChatRequest, ChatResult, ToolCallOut
from crawdad.config import ToolLimits
from crawdad.records import ToolCall, ToolMode
from crawdad.tools.boundary import MAX_MESSAGE_CHARS, nesting
from crawdad.tools.causal import QUERY_KINDS, TOOL_NAME
from crawdad.tools.engine_backed import default
from crawdad.tools.loop import ToolLoop, ToolTrace

LIMITS = ToolLimits(seconds=2.0)
BOUND = LIMITS.seconds + 10  # the compute bound, plus reading, a worker's start and a busy box
SETTINGS = settings(
    max_examples=200,
    deadline=None,
    database=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.function_scoped_fixture,
        HealthCheck.data_too_large,
    ],
)

names = st.sampled_from(["X", "Y", "Z", "M", "V1", "W"]) | st.text(max_size=8)
floats = st.floats(allow_nan=True, allow_infinity=True)
scalars = st.none() | st.booleans() | st.integers() | floats | st.text(max_size=20)
json_like = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner),
    max_leaves=20,
)
edges = st.lists(
    st.tuples(names, names).map(lambda e: f"{e[0]}->{e[1]}")  # self-loops and cycles too
    | st.lists(names, min_size=2, max_size=2)
    | json_like,
    max_size=12,
)
chain = st.integers(0, 3000).map(lambda n: [f"V{i}->V{i + 1}" for i in range(n)])
events = st.builds(
    lambda t, g: f"P({t}=1|{g}=0)" if g else f"P({t}=1)", names, st.none() | names
) | st.text(max_size=30)
probabilities = st.lists(
    st.fixed_dictionaries({"event": events, "value": floats | st.text(max_size=6) | scalars})
    | json_like,
    max_size=10,
)
arguments = st.fixed_dictionaries(
    {},
    optional={
        "query": st.sampled_from(QUERY_KINDS) | scalars,
        "edges": edges | chain | json_like,
        "treatment": names | scalars,
        "outcome": names | scalars,
        "conditioning": st.lists(names, max_size=5) | json_like,
        "mediators": st.lists(names, max_size=3) | json_like,
        "probabilities": probabilities | json_like,
        "extra": json_like,
    },
)
# Calls a model means well with: the schema's keys, a small graph (cycles and self-loops
# included), events over its variables, values mostly probabilities.
pool = st.sampled_from(["X", "Y", "Z", "M", "W", "V1", "V2"])
terms = st.lists(st.tuples(pool, st.sampled_from(["0", "1", ""])), min_size=1, max_size=4).map(
    lambda ts: ", ".join(f"{v}={x}" if x else v for v, x in ts)
)
ORDER = ["W", "Z", "X", "M", "V1", "Y", "V2"]
forward = st.tuples(st.integers(0, 6), st.integers(0, 6)).filter(lambda p: p[0] < p[1])
forward = forward.map(lambda p: f"{ORDER[p[0]]}->{ORDER[p[1]]}")  # a DAG
event = st.builds(lambda t, g: f"P({t}|{g})" if g else f"P({t})", terms, st.none() | terms)
plausible = st.fixed_dictionaries(
    {
        "query": st.sampled_from(QUERY_KINDS),
        "edges": st.lists(forward, min_size=1, max_size=10)
        | st.lists(st.tuples(pool, pool).map(lambda e: f"{e[0]}->{e[1]}"), max_size=10),
        "treatment": pool,
        "outcome": pool,
    },
    optional={
        "conditioning": st.lists(pool, max_size=4),
        "mediators": st.lists(pool, max_size=2),
        "probabilities": st.lists(
            st.fixed_dictionaries({"event": event, "value": st.floats(0, 1)})
            | st.fixed_dictionaries({"event": event, "value": st.floats(-1, 2) | floats}),
            max_size=24,
        ),
    },
)


@st.composite
def model_calls(draw: st.DrawFn) -> dict[str, Any]:
    """A DAG over a few variables, most of each table given (a whole model at times, for the
    engine), any query over it: the calls that reach the calculator's formulas and engine."""
    names = ORDER[: draw(st.integers(2, 6))]
    pairs = [(a, b) for i, a in enumerate(names) for b in names[i + 1 :]]
    edges = [p for p in pairs if draw(st.booleans())]
    x, y = draw(st.lists(st.sampled_from(names), min_size=2, max_size=2, unique=True))
    probabilities = []
    for v in names:
        parents = [a for a, b in edges if b == v]
        for values in product((0, 1), repeat=len(parents)):
            given = ",".join(f"{p}={k}" for p, k in zip(parents, values, strict=True))
            if draw(st.integers(0, 9)):  # nine in ten entries given
                event = f"P({v}=1|{given})" if given else f"P({v}=1)"
                probabilities.append({"event": event, "value": draw(st.floats(0, 1))})
    others = [v for v in names if v not in (x, y)]
    return {
        "query": draw(st.sampled_from(QUERY_KINDS)),
        "edges": [f"{a}->{b}" for a, b in edges],
        "treatment": x,
        "outcome": y,
        "conditioning": draw(st.lists(st.sampled_from(others), unique=True)) if others else [],
        "mediators": draw(st.lists(st.sampled_from(others), unique=True, max_size=2))
        if others and draw(st.booleans())
        else [],
        "probabilities": probabilities,
    }


deep = st.integers(20, 5000).map(lambda d: '{"query": "ate", "edges": ' + "[" * d + "]" * d + "}")
huge = st.integers(90_000, 300_000).map(lambda n: json.dumps({"query": "x" * n}))
texts = st.text(max_size=300) | deep | huge
raw_arguments = (
    model_calls()
    | model_calls().map(json.dumps)
    | plausible
    | plausible.map(json.dumps)
    | arguments
    | arguments.map(json.dumps)
    | texts
    | json_like
)
tool_names = st.just(TOOL_NAME) | st.text(max_size=20)


def base() -> ChatRequest:
    return ChatRequest(model="m", prompt="Is it so?", temperature=0, top_p=1, max_tokens=64)


async def one_turn(mode: ToolMode, name: str, raw: Any) -> tuple[ToolTrace, list[ChatRequest]]:
    """A turn whose model makes one call (natively, or as JSON in its text), then answers."""
    if mode == "native":
        first = ChatResult(tool_calls=[ToolCallOut(id="c1", name=name, arguments=raw)])
    else:
        text = raw if isinstance(raw, str) else json.dumps(raw)
        first = ChatResult(text=f'```json\n{{"tool": {json.dumps(name)}, "arguments": {text}}}```')
    replies = [first, ChatResult(text="Answer: yes (Confidence: 0.6)")]
    sent: list[ChatRequest] = []

    async def send(request: ChatRequest) -> ChatResult:
        sent.append(request)
        return replies[min(len(sent), 2) - 1]

    trace = ToolTrace()
    loop = ToolLoop(
        base=base(),
        mode=mode,
        tools=["causal"],
        limit=1,
        calculator=default(),
        send=send,
        trace=trace,
        limits=LIMITS,
    )
    result, _ = await loop.run()
    if trace.calls:  # a call was read: the model got its answer and went on to its own
        assert result.text.startswith("Answer: yes") and len(sent) == 2
    else:  # a text that calls nothing is the model's answer
        assert mode == "text" and result is first
    return trace, sent


def check(trace: ToolTrace, sent: list[ChatRequest]) -> None:
    calls = trace.calls
    assert len(calls) <= 1
    for call in calls:
        assert (call.result is None) != (call.error is None)  # a value, or what went wrong
        if call.error is not None:
            assert call.error.strip() and len(call.error) <= MAX_MESSAGE_CHARS
        assert call.malformed <= (call.error is not None)
        assert 0 <= call.seconds < BOUND
        assert len(call.raw) <= LIMITS.max_argument_chars + 100
        again = ToolCall.model_validate_json(call.model_dump_json())  # writable and readable
        assert again.error == call.error and again.malformed == call.malformed
    # What goes back to the server is JSON a server reads, as shallow as the limits allow.
    for request in sent:
        body = json.dumps(request.model_dump(mode="json"), allow_nan=False)
        assert nesting(body) <= LIMITS.max_nesting + 8


@SETTINGS
@given(name=tool_names, raw=raw_arguments)
def test_native_calls_only_ever_give_values_or_tool_errors(name: str, raw: Any) -> None:
    if not isinstance(raw, str | dict):
        raw = json.dumps(raw)  # servers send a JSON text or an object
    trace, sent = asyncio.run(one_turn("native", name, raw))
    assert len(trace.calls) == 1
    check(trace, sent)


@SETTINGS
@given(name=tool_names, raw=raw_arguments)
def test_text_calls_only_ever_give_values_or_tool_errors(name: str, raw: Any) -> None:
    trace, sent = asyncio.run(one_turn("text", name, raw))
    check(trace, sent)
