"""The independence test over a question's table: the Causal Agent's variable-level tool (paper
001, "condition independent test", appendix A.2 Table A3).

As the paper builds it: causal-learn's conditional independence test class (`CIT`) with the
Fisher-z test, X and Y independent given the condition set when the p-value is at least the
significance level. The paper names no level; 0.05 is causal-learn's own default (its PC's
`alpha`). The paper uses Fisher-z on all its data, so it does here too on CLadder's 0/1 tables
(a partial correlation test: on binary data an approximation, but the paper's choice); the
agent cannot pick another test or level, as it could not in the paper. The arguments are the
paper's less the file name (the table is the question's): `variables` [X, Y] and `condition`
([] for a plain independence test).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from crawdad.extras import require
from crawdad.tools.causal import MalformedCall, ToolError
from crawdad.tools.data_tools import Table, _names, _object, _require

TOOL_NAME = "independence_test"
TEST = "fisherz"  # the paper's test (causal-learn's name for it)
ALPHA = 0.05  # the paper names none: causal-learn's default significance level

DESCRIPTION = (
    "Test whether two variables of the table are independent, or independent given a "
    "condition set (d-separated), with the Fisher-z conditional independence test at "
    f"significance level {ALPHA}. `variables` is the pair [X, Y]; `condition` the variables "
    'to condition on, e.g. ["Z", "W"], or [] for no condition. Returns the p-value and '
    "whether the variables are independent."
)
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "variables": {
            "type": "array",
            "items": {"type": "string"},
            "description": 'the two variables to test, e.g. ["X", "Y"]',
        },
        "condition": {
            "type": "array",
            "items": {"type": "string"},
            "description": 'the condition set, e.g. ["Z"]; [] for none',
        },
    },
    "required": ["variables"],
}


@dataclass(frozen=True)
class IndependenceCall:
    x: str
    y: str
    condition: tuple[str, ...] = ()


def tool_spec() -> dict[str, Any]:
    return {
        "type": "function",
        "function": {"name": TOOL_NAME, "description": DESCRIPTION, "parameters": SCHEMA},
    }


def parse_call(args: Any, limits: Any = None) -> IndependenceCall:
    """The call's arguments -> IndependenceCall, or MalformedCall / ToolError."""
    a = _object(args, TOOL_NAME, SCHEMA)
    pair = _names(a, "variables")
    if pair is None or len(pair) != 2:
        raise MalformedCall(
            f'variables must name two different variables, e.g. ["X", "Y"], got {a["variables"]!r}'
        )
    condition = _names(a, "condition") or ()
    if overlap := set(pair) & set(condition):
        raise ToolError(
            f"{', '.join(sorted(overlap))} is both tested and conditioned on: name it once"
        )
    return IndependenceCall(pair[0], pair[1], condition)


def compute(table: Table, call: IndependenceCall, limits: Any = None) -> dict[str, Any]:
    """The test's p-value and verdict over the table (causal-learn's CIT, imported here: the
    compute runs in a worker)."""
    CIT = require("causallearn.utils.cit", what="the independence test (causal-learn)").CIT

    names = [call.x, call.y, *call.condition]
    _require(table, names, TOOL_NAME)
    counts = table.counts
    if counts.n <= len(call.condition) + 3:
        raise ToolError(
            f"the table has {counts.n} rows: Fisher-z needs more than {len(call.condition) + 3} "
            "with this condition set"
        )
    if constant := [v for v in names if counts.count({v: 1}) in (0, counts.n)]:
        raise ToolError(
            f"{', '.join(constant)} takes one value in every row of the table: no test of "
            "independence can be made on a constant variable"
        )
    rows = np.repeat(np.array([r[:-1] for r in counts.rows()], dtype=float), counts.cells, axis=0)
    index = {c: i for i, c in enumerate(counts.columns)}
    try:
        p = float(CIT(rows, TEST)(index[call.x], index[call.y], [index[v] for v in call.condition]))
    except ValueError as e:  # a singular correlation matrix: one variable fixed by others
        raise ToolError(
            f"the Fisher-z test cannot be made here ({e}): some variable is determined by "
            "the others in this table; condition on fewer variables"
        ) from None
    independent = bool(p >= ALPHA)
    given = f" given {', '.join(call.condition)}" if call.condition else ""
    verdict = "independent" if independent else "not independent (dependent)"
    return {
        "variables": [call.x, call.y],
        "condition": list(call.condition),
        "test": TEST,
        "alpha": ALPHA,
        "p_value": round(p, 6),
        "independent": independent,
        "conclusion": f"{call.x} and {call.y} are {verdict}{given}",
        "rows": counts.n,
    }
