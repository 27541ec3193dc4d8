"""Tools over an observational table of binary variables: what agents answering a question from
data may call (issue 22). Each is a JSON schema, a parser of a call's arguments and a pure,
bounded compute over the table, with no tool-loop wiring: the tool boundary wraps them
(`parse(arguments, limits)`, then `compute(parsed, limits)` with the table bound by
`functools.partial(compute_x, table)`; every function here is module-level and picklable).

- `describe_data`: rows, columns, and each column's count of 1s and P(V=1).
- `conditional_probability`: P(Y=y | given) with the counts it rests on, or a whole table of it
  over the values of `by`.
- `estimate_effect`: ATE, ETT, a conditional effect (`cate`), NDE or NIE by exact counting
  (crawdad.tools.data_estimators), over an adjustment set the caller names or one found from
  the graph the caller gives (backdoor, else front-door over observed mediators).
- `identify_effect`: given a graph, which adjustment sets are valid backdoor sets (and which of
  them the table can use), whether the mediators satisfy the front-door criterion.

A call that cannot be answered raises the tools' `ToolError` (`MalformedCall` when it does not
fit the schema) with a message naming what to fix.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from crawdad.causal.estimate import Counts
from crawdad.errors import DataError
from crawdad.tools.causal import MalformedCall, ToolError
from crawdad.tools.data_estimators import (
    Estimator,
    backdoor,
    formula,
    frontdoor,
    natural,
    values,
)
from crawdad.tools.graph import DAG, GraphError

MAX_COLUMNS = 16  # a table's binary columns: 2^16 combinations at most
MAX_GRAPH_VARIABLES = 32
MAX_EDGES = 256
MAX_SET = 10  # variables in a conditioning, adjustment or mediator set (2^10 strata)
EFFECTS = ("ate", "ett", "cate", "nde", "nie")
METHODS = ("auto", "backdoor", "frontdoor")

_NAME = re.compile(r"^[A-Za-z_]\w*$")
_EDGE = re.compile(r"^\s*([A-Za-z_]\w*)\s*(?:->|→)\s*([A-Za-z_]\w*)\s*$")


# --- the table -----------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Table:
    """An observational table of 0/1 columns, kept as its counts per combination."""

    counts: Counts
    name: str = "the table"

    @property
    def columns(self) -> tuple[str, ...]:
        return self.counts.columns

    @classmethod
    def from_rows(cls, rows: Mapping[str, Any], name: str = "the table") -> Table:
        columns = list(rows)
        if not 1 <= len(columns) <= MAX_COLUMNS:
            raise DataError(f"{name}: {len(columns)} columns; a table has 1 to {MAX_COLUMNS}")
        if bad := [c for c in columns if not _NAME.match(c)]:
            raise DataError(f"{name}: column names {bad} are not plain names like X or V2")
        arrays = {c: np.asarray(v) for c, v in rows.items()}
        if len({a.shape for a in arrays.values()}) != 1:
            raise DataError(f"{name}: the columns have different lengths")
        return cls(Counts.from_rows(arrays, columns), name)

    @classmethod
    def from_csv(cls, path: Path) -> Table:
        """A CSV of 0/1 values with a header row (as `crawdad data tables` writes)."""
        try:
            with open(path, newline="") as f:
                reader = csv.reader(f)
                header = next(reader, None)
                body = list(reader)
        except OSError as e:
            raise DataError(f"cannot read the table {path}: {e.strerror or e}") from None
        if not header:
            raise DataError(f"{path}: empty; a table needs a header row of column names")
        header = [h.strip() for h in header]
        try:
            data = np.array([[int(v) for v in row] for row in body if row], dtype=np.int64)
        except ValueError:
            raise DataError(f"{path}: every value must be 0 or 1") from None
        if data.size and data.shape[1] != len(header):
            raise DataError(f"{path}: rows have {data.shape[1]} values for {len(header)} columns")
        data = data.reshape(-1, len(header))
        return cls.from_rows({h: data[:, i] for i, h in enumerate(header)}, str(path))


# --- schemas -------------------------------------------------------------------------------------

_NAMES = {"type": "array", "items": {"type": "string"}}
_VALUES = {
    "type": "object",
    "additionalProperties": {"type": "integer", "enum": [0, 1]},
}
_GRAPH = {
    "type": "array",
    "items": {"type": "string"},
    "description": 'directed edges of the causal graph, e.g. ["Z->X", "Z->Y", "X->Y"]; '
    "variables the table lacks are unobserved",
}

TOOLS: dict[str, tuple[str, dict[str, Any]]] = {
    "describe_data": (
        "Describe the observational table: its number of rows, its columns (binary, 0/1) and "
        "for each column the number of rows with value 1 and P(V=1).",
        {
            "type": "object",
            "properties": {"variables": {**_NAMES, "description": "only these columns"}},
        },
    ),
    "conditional_probability": (
        "P(outcome=value | given) estimated from the table, with the counts it rests on. "
        "With `by`, the whole table of it over every combination of those variables.",
        {
            "type": "object",
            "properties": {
                "outcome": {"type": "string", "description": "the variable, e.g. Y"},
                "value": {"type": "integer", "enum": [0, 1], "description": "default 1"},
                "given": {**_VALUES, "description": 'fixed values, e.g. {"X": 1, "Z": 0}'},
                "by": {**_NAMES, "description": 'variables to tabulate over, e.g. ["X"]'},
            },
            "required": ["outcome"],
        },
    ),
    "estimate_effect": (
        "Estimate a causal effect of treatment=1 versus 0 on P(outcome=1) from the table by "
        "exact counting. effect: ate E[Y|do(X=1)]-E[Y|do(X=0)]; ett E[Y_1-Y_0|X=group]; "
        "cate the ate within `condition`; nde, nie natural direct and indirect effects over "
        "`mediators`. Give `adjustment` (a backdoor set) or the graph as `edges` (a valid set "
        "is then found, or the front-door formula over observed mediators is used).",
        {
            "type": "object",
            "properties": {
                "effect": {"type": "string", "enum": list(EFFECTS)},
                "treatment": {"type": "string"},
                "outcome": {"type": "string"},
                "edges": _GRAPH,
                "adjustment": {
                    **_NAMES,
                    "description": "backdoor adjustment set (covariates for nde, nie)",
                },
                "mediators": {**_NAMES, "description": "mediators (nde, nie, front-door)"},
                "condition": {**_VALUES, "description": 'subgroup of cate, e.g. {"Z": 1}'},
                "group": {"type": "integer", "enum": [0, 1], "description": "ett: X=group"},
                "method": {"type": "string", "enum": list(METHODS), "description": "default auto"},
            },
            "required": ["effect", "treatment", "outcome"],
        },
    ),
    "identify_effect": (
        "Identification of the effect of treatment on outcome in a causal graph: whether "
        "`adjustment` is a valid backdoor set, the minimal valid sets (and those the table's "
        "columns allow), and whether `mediators` (or those of the graph) satisfy the "
        "front-door criterion.",
        {
            "type": "object",
            "properties": {
                "edges": _GRAPH,
                "treatment": {"type": "string"},
                "outcome": {"type": "string"},
                "adjustment": _NAMES,
                "mediators": _NAMES,
            },
            "required": ["edges", "treatment", "outcome"],
        },
    ),
}


def tool_spec(name: str) -> dict[str, Any]:
    """One tool as both Ollama's and OpenAI's `tools` take it."""
    description, schema = TOOLS[name]
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": schema},
    }


def tool_specs() -> list[dict[str, Any]]:
    return [tool_spec(n) for n in TOOLS]


# --- parsing -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Call:
    """A parsed call of one of the data tools."""

    tool: str
    outcome: str = ""
    value: int = 1
    given: dict[str, int] = field(default_factory=dict)
    by: tuple[str, ...] = ()
    variables: tuple[str, ...] = ()
    effect: str = ""
    treatment: str = ""
    edges: tuple[tuple[str, str], ...] | None = None
    adjustment: tuple[str, ...] | None = None
    mediators: tuple[str, ...] | None = None
    group: int = 1
    method: str = "auto"


def _object(args: Any, tool: str, schema: dict[str, Any] | None = None) -> dict[str, Any]:
    """The arguments as an object of `tool`'s schema (one of TOOLS unless `schema` is given)."""
    if not isinstance(args, dict):
        raise MalformedCall(f"the arguments of {tool} must be a JSON object")
    schema = schema or TOOLS[tool][1]
    known = schema["properties"]
    if unknown := sorted(set(args) - set(known)):
        raise MalformedCall(f"unknown argument(s) {unknown}; {tool} takes: {', '.join(known)}")
    if missing := [k for k in schema.get("required", []) if args.get(k) in (None, "")]:
        raise MalformedCall(f"missing argument(s) of {tool}: {', '.join(missing)}")
    return args


def _name(args: dict[str, Any], key: str) -> str:
    v = args.get(key)
    if not isinstance(v, str) or not _NAME.match(v.strip()):
        raise MalformedCall(f"{key} must be a variable name such as X, got {v!r}")
    return v.strip()


def _names(args: dict[str, Any], key: str) -> tuple[str, ...] | None:
    v = args.get(key)
    if v is None:
        return None
    if not isinstance(v, list) or not all(isinstance(n, str) and _NAME.match(n.strip()) for n in v):
        raise MalformedCall(f'{key} must be a list of variable names such as ["Z"], got {v!r}')
    if len(v) > MAX_SET:
        raise ToolError(f"{key} names {len(v)} variables; at most {MAX_SET}")
    return tuple(dict.fromkeys(n.strip() for n in v))


def _values(args: dict[str, Any], key: str) -> dict[str, int]:
    v = args.get(key) or {}
    if not isinstance(v, dict):
        raise MalformedCall(f'{key} must be an object of values such as {{"X": 1}}, got {v!r}')
    out = {}
    for name, x in v.items():
        if not _NAME.match(str(name).strip()) or isinstance(x, bool) or x not in (0, 1):
            raise MalformedCall(f"{key}: {name!r}: {x!r} is not a variable set to 0 or 1")
        out[str(name).strip()] = int(x)
    if len(out) > MAX_SET:
        raise ToolError(f"{key} fixes {len(out)} variables; at most {MAX_SET}")
    return out


def _bit(args: dict[str, Any], key: str, default: int) -> int:
    v = args.get(key, default)
    if isinstance(v, bool) or v not in (0, 1):
        raise MalformedCall(f"{key} must be 0 or 1, got {v!r}")
    return int(v)


def _edges(args: dict[str, Any]) -> tuple[tuple[str, str], ...] | None:
    v = args.get("edges")
    if v is None:
        return None
    if not isinstance(v, list):
        raise MalformedCall(f'edges must be a list such as ["X->Y"], got {type(v).__name__}')
    if len(v) > MAX_EDGES:
        raise ToolError(f"the graph has {len(v)} edges; at most {MAX_EDGES}")
    out = []
    for e in v:
        m = _EDGE.match(e) if isinstance(e, str) else None
        if not m:
            raise MalformedCall(f'edge {e!r} is not of the form "X->Y"')
        out.append((m.group(1), m.group(2)))
    if len({n for e in out for n in e}) > MAX_GRAPH_VARIABLES:
        raise ToolError(f"the graph has more than {MAX_GRAPH_VARIABLES} variables")
    return tuple(out)


def parse_call(tool: str, args: Any, limits: Any = None) -> Call:
    """A call's arguments (a JSON object) -> Call, or MalformedCall / ToolError."""
    if tool not in TOOLS:
        raise MalformedCall(f"there is no data tool {tool!r}; the tools: {', '.join(TOOLS)}")
    a = _object(args, tool)
    if tool == "describe_data":
        return Call(tool, variables=_names(a, "variables") or ())
    if tool == "conditional_probability":
        return Call(
            tool,
            outcome=_name(a, "outcome"),
            value=_bit(a, "value", 1),
            given=_values(a, "given"),
            by=_names(a, "by") or (),
        )
    x, y = _name(a, "treatment"), _name(a, "outcome")
    if tool == "identify_effect":
        return Call(
            tool,
            edges=_edges(a),
            adjustment=_names(a, "adjustment"),
            mediators=_names(a, "mediators"),
            treatment=x,
            outcome=y,
        )
    effect, method = a.get("effect"), a.get("method", "auto")
    if effect not in EFFECTS:
        raise MalformedCall(f"effect {effect!r} is not one of: {', '.join(EFFECTS)}")
    if method not in METHODS:
        raise MalformedCall(f"method {method!r} is not one of: {', '.join(METHODS)}")
    condition = _values(a, "condition")
    if effect == "cate" and not condition:
        raise MalformedCall('cate needs the subgroup as `condition`, e.g. {"Z": 1}')
    return Call(
        tool,
        effect=effect,
        method=method,
        edges=_edges(a),
        adjustment=_names(a, "adjustment"),
        mediators=_names(a, "mediators"),
        given=condition,
        group=_bit(a, "group", 1),
        treatment=x,
        outcome=y,
    )


def parse_describe(args: Any, limits: Any = None) -> Call:
    return parse_call("describe_data", args, limits)


def parse_conditional(args: Any, limits: Any = None) -> Call:
    return parse_call("conditional_probability", args, limits)


def parse_estimate(args: Any, limits: Any = None) -> Call:
    return parse_call("estimate_effect", args, limits)


def parse_identify(args: Any, limits: Any = None) -> Call:
    return parse_call("identify_effect", args, limits)


# --- computing -----------------------------------------------------------------------------------


def _require(table: Table, names: Sequence[str], what: str) -> None:
    if missing := [n for n in names if n not in table.columns]:
        raise ToolError(
            f"{', '.join(missing)} not among the table's columns ({', '.join(table.columns)}): "
            f"{what} can only use observed columns"
        )


def _prob(x: Any) -> float:
    return round(float(x), 6)


def compute(table: Table, call: Call, limits: Any = None) -> dict[str, Any]:
    """The answer to a parsed call, as a JSON object."""
    if call.tool == "describe_data":
        return describe(table, call)
    if call.tool == "conditional_probability":
        return conditional_probability(table, call)
    if call.tool == "identify_effect":
        return identify(table, call)
    return estimate(table, call)


def describe(table: Table, call: Call) -> dict[str, Any]:
    names = list(call.variables) or list(table.columns)
    _require(table, names, "describe_data")
    n = table.counts.n
    out: dict[str, Any] = {"rows": n, "columns": list(table.columns), "variables": {}}
    for v in names:
        ones = table.counts.count({v: 1})
        out["variables"][v] = {
            "ones": ones,
            "zeros": n - ones,
            f"P({v}=1)": _prob(ones / n) if n else None,
        }
    return out


def _event(y: str, value: int, given: Mapping[str, int]) -> str:
    cond = ", ".join(f"{v}={x}" for v, x in given.items())
    return f"P({y}={value} | {cond})" if cond else f"P({y}={value})"


def conditional_probability(table: Table, call: Call) -> dict[str, Any]:
    y, value = call.outcome, call.value
    if overlap := ({y} | set(call.by)) & set(call.given) or {y} & set(call.by):
        raise ToolError(f"{', '.join(sorted(overlap))} appears twice: name each variable once")
    _require(table, [y, *call.given, *call.by], "conditional_probability")
    cells = []
    for combo in values(call.by):
        given = {**call.given, **combo}
        rows = table.counts.count(given)
        hits = table.counts.count({**given, y: value})
        cells.append(
            {
                "event": _event(y, value, given),
                "probability": _prob(hits / rows) if rows else None,
                "count": hits,
                "rows": rows,
            }
        )
    if not call.by:
        if cells[0]["rows"] == 0:
            raise ToolError(
                f"no row has {', '.join(f'{v}={x}' for v, x in call.given.items())}: "
                f"{cells[0]['event']} cannot be estimated from this table"
            )
        return cells[0]
    return {"outcome": f"{y}={value}", "table": cells}


# --- identification ------------------------------------------------------------------------------


def _dag(call: Call) -> DAG:
    try:
        dag = DAG.from_edges(call.edges or ())
        dag.require(call.treatment, call.outcome, *(call.adjustment or ()), *(call.mediators or ()))
    except GraphError as e:
        raise ToolError(f"the graph: {e}") from None
    return dag


def frontdoor_valid(dag: DAG, x: str, y: str, m: set[str]) -> bool:
    """Pearl's front-door criterion: m intercepts every directed path x -> y, no backdoor path
    from x to m is open, and x blocks every backdoor path from m to y."""
    if not m or x in m or y in m:
        return False
    # (i) every directed path from x to y passes through m
    blocked = DAG({v: {p for p in ps if p not in m} for v, ps in dag.parents.items()})
    if y in blocked.descendants(x):
        return False
    # (ii) x and m d-separated once x's out-edges are removed
    if not dag.without_out_edges(x).d_separated({x}, m, set()):
        return False
    # (iii) m and y d-separated given x once m's out-edges are removed
    g = dag
    for v in m:
        g = g.without_out_edges(v)
    return g.d_separated(m, {y}, {x})


def identify(table: Table, call: Call) -> dict[str, Any]:
    dag = _dag(call)
    x, y = call.treatment, call.outcome
    observed = set(table.columns)
    sets = dag.backdoor_sets(x, y)
    usable = [s for s in sets if set(s) <= observed]
    meds = list(call.mediators) if call.mediators is not None else dag.mediators(x, y)
    out: dict[str, Any] = {
        "unobserved": sorted(set(dag.variables) - observed),
        "backdoor": {"minimal_sets": sets, "observed_sets": usable},
        "frontdoor": {"mediators": meds, "valid": frontdoor_valid(dag, x, y, set(meds))},
    }
    if call.adjustment is not None:
        z = set(call.adjustment)
        out["backdoor"]["adjustment"] = sorted(z)
        out["backdoor"]["valid"] = dag.backdoor_valid(x, y, z)
        out["backdoor"]["observed"] = z <= observed
    if usable:
        out["identified_by"] = "backdoor"
    elif out["frontdoor"]["valid"] and set(meds) <= observed:
        out["identified_by"] = "frontdoor"
    else:
        out["identified_by"] = None
    return out


# --- estimation ----------------------------------------------------------------------------------


def _plan(table: Table, call: Call) -> tuple[str, list[str], list[str]]:
    """(method, adjustment set, mediators) for an estimate, checked against the graph if any."""
    x, y = call.treatment, call.outcome
    meds = list(call.mediators or ())
    adjust = list(call.adjustment or ())
    if call.edges is None:
        if call.method == "frontdoor" and not meds:
            raise ToolError("the front-door formula needs `mediators` (or the graph as `edges`)")
        if call.effect in ("nde", "nie") and not meds:
            raise ToolError(f"{call.effect} needs `mediators` (or the graph as `edges`)")
        return ("frontdoor" if call.method == "frontdoor" else "backdoor"), adjust, meds
    dag = _dag(call)
    observed = set(table.columns)
    if call.effect in ("nde", "nie") and not meds:
        meds = dag.mediators(x, y)
        if not meds:
            raise ToolError(f"no mediator between {x} and {y} in this graph")
    if call.method != "frontdoor":
        if call.adjustment is not None:
            given_set = set(adjust) | set(call.given)
            if not dag.backdoor_valid(x, y, given_set):
                valid = [s for s in dag.backdoor_sets(x, y) if set(s) <= observed]
                raise ToolError(
                    f"{{{', '.join(sorted(given_set))}}} is not a valid backdoor adjustment set for "
                    f"{x} -> {y} in this graph; valid minimal sets the table allows: "
                    f"{valid or 'none'}"
                )
            return "backdoor", _mediation_checked(dag, call, adjust, meds), meds
        usable = [s for s in dag.backdoor_sets(x, y) if set(s) <= observed]
        for s in usable:
            if dag.backdoor_valid(x, y, set(s) | set(call.given)):
                found = [v for v in s if v not in call.given]
                return "backdoor", _mediation_checked(dag, call, found, meds), meds
        if call.method == "backdoor":
            raise ToolError(
                f"no backdoor set of observed columns identifies the effect of {x} on {y} "
                f"(unobserved: {', '.join(sorted(set(dag.variables) - observed)) or 'none'})"
            )
    fd = meds or dag.mediators(x, y)
    if call.effect != "cate" and set(fd) <= observed and frontdoor_valid(dag, x, y, set(fd)):
        return "frontdoor", [], fd
    raise ToolError(
        f"the effect of {x} on {y} is not identified from the observed columns by backdoor "
        "adjustment or the front-door formula in this graph"
    )


def _mediation_checked(dag: DAG, call: Call, w: list[str], meds: list[str]) -> list[str]:
    """For natural effects: the covariates w and the treatment must also block every backdoor
    path from the mediators to the outcome, none of w affected by the treatment."""
    if call.effect not in ("nde", "nie"):
        return w
    x, y = call.treatment, call.outcome
    g = dag
    for m in meds:
        g = g.without_out_edges(m)
    if set(w) & dag.descendants(x) or not g.d_separated(set(meds), {y}, {x, *w}):
        raise ToolError(
            f"{call.effect} is not identified with covariates {w or '[]'}: a backdoor path from "
            f"the mediators {meds} to {y} stays open (a mediator-outcome confounder must be "
            "an observed column and adjusted for)"
        )
    return w


def estimate(table: Table, call: Call) -> dict[str, Any]:
    x, y = call.treatment, call.outcome
    if x == y:
        raise ToolError("treatment and outcome must differ")
    method, adjust, meds = _plan(table, call)
    _require(table, [x, y, *adjust, *meds, *call.given], "estimate_effect")
    if {x, y} & (set(adjust) | set(meds) | set(call.given)):
        raise ToolError("the treatment and the outcome cannot be adjusted for or be mediators")
    e = Estimator(table.counts)
    kind = call.effect
    direct_zero = False
    if method == "frontdoor":
        if kind in ("nde", "nie"):  # every path goes through the mediators
            direct_zero = kind == "nde"
            value = frontdoor(e, x, y, meds) if kind == "nie" else 0
        else:
            value = frontdoor(e, x, y, meds, call.group if kind == "ett" else None)
    elif kind in ("nde", "nie"):
        value = natural(e, kind, x, y, meds, adjust)
    elif kind == "ett":
        value = backdoor(e, x, y, adjust, group=call.group)
    else:
        value = backdoor(e, x, y, adjust, given=call.given if kind == "cate" else None)
    sets = {"adjustment": adjust, "mediators": meds, "given": call.given, "group": call.group}
    out: dict[str, Any] = {
        "effect": kind,
        "value": _prob(value),
        "method": method,
        "estimand": "0: no direct path" if direct_zero else formula(kind, method, x, y, sets),
        "rows": table.counts.n,
        "smallest_stratum_rows": e.smallest,
    }
    if method == "backdoor":
        out["adjustment"] = adjust
    if kind in ("nde", "nie") or method == "frontdoor":
        out["mediators"] = meds
    if kind == "cate":
        out["condition"] = call.given
    return out
