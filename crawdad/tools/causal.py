"""The causal calculator tool: its JSON schema (what the model fills in), the parsing and
checking of a call's arguments, and the query the `Calculator` computes.

The caller passes a graph, a query and the probabilities it read from the question; the tool
uses exactly those and nothing else (it never sees the dataset's model). Every failure is a
`ToolError` whose message names what is missing or wrong, written for the model to act on.
"""

from __future__ import annotations

import re
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

from crawdad.config import ToolLimits
from crawdad.tools.boundary import LimitExceeded, MalformedCall, ToolError, read_arguments

TOOL_NAME = "causal_calculator"

QueryKind = Literal[
    "marginal",
    "correlation",
    "ate",
    "ett",
    "nde",
    "nie",
    "collider_bias",
    "exp_away",
    "det_counterfactual",
    "d_separation",
    "backdoor",
]
QUERY_KINDS: tuple[str, ...] = get_args(QueryKind)

DESCRIPTION = (
    "Exact causal calculator for binary variables. Give the causal graph as edges, the query, "
    "and the probabilities stated in the question; it computes the query from exactly those "
    "numbers, or says which probabilities are missing or inconsistent. Query kinds: marginal "
    "P(outcome=1); correlation P(Y=1|X=1)-P(Y=1|X=0); ate E[Y|do(X=1)]-E[Y|do(X=0)] (backdoor "
    "adjustment over `conditioning`, or a set found from the graph); ett; nde and nie (over "
    "`mediators`); collider_bias; d_separation (are treatment and outcome d-separated given "
    "`conditioning`?); backdoor (is `conditioning` a valid backdoor adjustment set, and which "
    "minimal sets are)."
)

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "enum": list(QUERY_KINDS), "description": "what to compute"},
        "edges": {
            "type": "array",
            "items": {"type": "string"},
            "description": 'directed edges of the causal graph, e.g. ["X->Y", "Z->X", "Z->Y"]',
        },
        "treatment": {"type": "string", "description": "the treatment variable, e.g. X"},
        "outcome": {"type": "string", "description": "the outcome variable, e.g. Y"},
        "conditioning": {
            "type": "array",
            "items": {"type": "string"},
            "description": "adjustment set (ate, ett, backdoor), conditioning set "
            "(d_separation) or collider (exp_away)",
        },
        "mediators": {
            "type": "array",
            "items": {"type": "string"},
            "description": "mediators (nde, nie); found from the graph when omitted",
        },
        "probabilities": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "event": {"type": "string", "description": 'e.g. "P(Y=1|X=0,Z=1)"'},
                    "value": {"type": "number"},
                },
                "required": ["event", "value"],
            },
            "description": "the probabilities stated in the question, 0..1",
        },
    },
    "required": ["query", "edges", "treatment", "outcome"],
}


def tool_spec() -> dict[str, Any]:
    """The tool as both Ollama's and OpenAI's `tools` take it."""
    return {
        "type": "function",
        "function": {"name": TOOL_NAME, "description": DESCRIPTION, "parameters": SCHEMA},
    }


__all__ = ["LimitExceeded", "MalformedCall", "ToolError"]  # the boundary's, used here

Assignment = frozenset[tuple[str, int]]


class CausalQuery(BaseModel):
    """A parsed, checked call: what a `Calculator` computes."""

    model_config = ConfigDict(frozen=True)

    kind: QueryKind
    edges: tuple[tuple[str, str], ...]
    treatment: str
    outcome: str
    conditioning: tuple[str, ...] = ()
    mediators: tuple[str, ...] = ()
    # (event assignment, given assignment) -> probability
    probabilities: dict[tuple[Assignment, Assignment], float] = Field(default_factory=dict)


_EDGE = re.compile(r"^\s*([A-Za-z_][\w]*)\s*(?:->|→)\s*([A-Za-z_][\w]*)\s*$")
_EVENT = re.compile(r"^\s*[Pp]\s*\((.*)\)\s*$", re.DOTALL)
_NAME = re.compile(r"^\s*[A-Za-z_]\w*\s*$")
_TERM = re.compile(r"^\s*([A-Za-z_]\w*)\s*(?:=\s*([01]))?\s*$")


def parse_arguments(raw: str | dict[str, Any], limits: ToolLimits | None = None) -> CausalQuery:
    """A call's arguments (JSON text or an object) -> CausalQuery, or MalformedCall / ToolError
    (LimitExceeded past one of `limits`)."""
    limits = limits or ToolLimits()
    args = _as_object(raw, limits)
    missing = [k for k in SCHEMA["required"] if k not in args or args[k] in (None, "")]
    if missing:
        raise MalformedCall(f"missing argument(s): {', '.join(missing)}")
    unknown = sorted(str(k) for k in set(args) - set(SCHEMA["properties"]))
    if unknown:
        raise MalformedCall(
            f"unknown argument(s): {', '.join(unknown)}; known: {', '.join(SCHEMA['properties'])}"
        )
    kind = args["query"]
    if not isinstance(kind, str) or kind not in QUERY_KINDS:
        raise MalformedCall(f"query {kind!r} is not one of: {', '.join(QUERY_KINDS)}")
    for name in ("treatment", "outcome"):
        if not isinstance(args[name], str) or not _TERM.match(args[name]):
            raise MalformedCall(f"{name} must be a variable name such as X, got {args[name]!r}")
    _check_sizes(args, limits)
    query = CausalQuery(
        kind=kind,
        edges=tuple(_edge(e) for e in _list(args, "edges")),
        treatment=args["treatment"].strip(),
        outcome=args["outcome"].strip(),
        conditioning=tuple(_names(args, "conditioning")),
        mediators=tuple(_names(args, "mediators")),
        probabilities=_probabilities(_list(args, "probabilities")),
    )
    names = {v for edge in query.edges for v in edge} | {query.treatment, query.outcome}
    names |= set(query.conditioning) | set(query.mediators)
    names |= {v for t, g in query.probabilities for v, _ in t | g}
    if len(names) > limits.max_variables:
        raise LimitExceeded(
            f"the call names {len(names):,} variables",
            limits.max_variables,
            "max_variables",
            "give the question's graph only",
        )
    return query


def _check_sizes(args: dict[str, Any], limits: ToolLimits) -> None:
    """The lists within the limits, before any of them is read."""
    for key, limit, setting in (
        ("edges", limits.max_edges, "max_edges"),
        ("probabilities", limits.max_probabilities, "max_probabilities"),
        ("conditioning", limits.max_variables, "max_variables"),
        ("mediators", limits.max_variables, "max_variables"),
    ):
        value = args.get(key)
        if isinstance(value, list) and len(value) > limit:
            raise LimitExceeded(
                f"{key} has {len(value):,} entries",
                limit,
                setting,
                f"give the question's {key} only",
            )


def _as_object(raw: str | dict[str, Any], limits: ToolLimits) -> dict[str, Any]:
    if isinstance(raw, dict):
        return raw
    if not isinstance(raw, str):
        raise MalformedCall("the arguments must be a JSON object")
    return read_arguments(raw, limits)


def _list(args: dict[str, Any], key: str) -> list[Any]:
    value = args.get(key) or []
    if not isinstance(value, list):
        raise MalformedCall(f"{key} must be a list, got {type(value).__name__}")
    return value


def _names(args: dict[str, Any], key: str) -> list[str]:
    out = []
    for v in _list(args, key):
        if not isinstance(v, str) or not _TERM.match(v) or "=" in v:
            raise MalformedCall(f"{key} must list variable names, got {v!r}")
        out.append(v.strip())
    return out


def _edge(e: Any) -> tuple[str, str]:
    if (
        isinstance(e, list | tuple)
        and len(e) == 2
        and all(isinstance(v, str) and _NAME.match(v) for v in e)
    ):
        return (e[0].strip(), e[1].strip())
    if isinstance(e, str) and (m := _EDGE.match(e)):
        return (m.group(1), m.group(2))
    raise MalformedCall(f'edge {e!r} is not of the form "X->Y"')


def parse_event(text: str) -> tuple[Assignment, Assignment]:
    """'P(Y=1|X=0, Z=1)' -> ({Y:1}, {X:0, Z:1}); a variable without a value means =1."""
    m = _EVENT.match(text)
    if not m:
        raise MalformedCall(f'event {text!r} is not of the form "P(Y=1|X=0)"')
    inner = m.group(1)
    if "do(" in inner.replace(" ", ""):
        raise ToolError(
            f"event {text!r}: the calculator takes observed probabilities only, not do()"
        )
    target, _, given = inner.partition("|")
    return _assignment(target, text), _assignment(given, text)


def _assignment(part: str, text: str) -> Assignment:
    out: dict[str, int] = {}
    for term in filter(str.strip, part.split(",")):
        m = _TERM.match(term)
        if not m:
            raise MalformedCall(f"event {text!r}: {term.strip()!r} is not of the form X=1")
        out[m.group(1)] = int(m.group(2) or 1)
    return frozenset(out.items())


def _probabilities(items: list[Any]) -> dict[tuple[Assignment, Assignment], float]:
    out: dict[tuple[Assignment, Assignment], float] = {}
    for item in items:
        if not isinstance(item, dict) or "event" not in item or "value" not in item:
            raise MalformedCall(f'probability {item!r} is not {{"event": ..., "value": ...}}')
        value = item["value"]
        if isinstance(value, str):
            value = value.strip().rstrip("%")
            try:
                value = float(value) / (100 if item["value"].strip().endswith("%") else 1)
            except ValueError:
                raise MalformedCall(f"value {item['value']!r} is not a number") from None
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise MalformedCall(f"value {value!r} of {item['event']} is not a number")
        if not 0.0 <= value <= 1.0:
            raise ToolError(f"{item['event']} = {value} is not a probability (0..1)")
        target, given = parse_event(str(item["event"]))
        if not target:
            raise MalformedCall(f"event {item['event']!r} names no variable")
        out[(target, given)] = float(value)
    return out


def show_event(target: Assignment, given: Assignment = frozenset()) -> str:
    t = ", ".join(f"{v}={x}" for v, x in sorted(target))
    g = ", ".join(f"{v}={x}" for v, x in sorted(given))
    return f"P({t}|{g})" if g else f"P({t})"
