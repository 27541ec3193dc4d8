"""The algorithm runner (`crawdad.tools.algorithms.run_algorithm`) as a boundary tool: a coding
agent's plan, the JSON object {"algorithm": ..., "params": {...}} it wrote, read and run on an
item's table in a worker process within `tool_limits.seconds` (crawdad/tools/boundary.py).
`crawdad.tools.registry.algorithm(table)` builds the `Tool`.

The plan is input from outside, like any tool call's arguments: the boundary checks its size and
nesting, `parse_plan` reads it (no "algorithm", params not an object: a malformed call), and
`compute_plan` runs it, `run_algorithm` checking every parameter against its allow-list and the
table against `AlgorithmLimits` before any work. An unknown algorithm, a parameter out of range,
exact search past its variables: a tool error naming the fix; a plan that runs past its seconds:
the worker is killed and the error says so.

causal-learn's search modules are imported with this module, so a worker loads them while it
unpickles a call (its start-up, not counted in the call's seconds), not inside the call's
compute; the fork server (which preloads `crawdad.tools.registry`) does not, so runs without
coding agents never import them.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from crawdad.config import ToolLimits
from crawdad.extras import require
from crawdad.tools.algorithms import ALGORITHMS, AlgorithmLimits, run_algorithm
from crawdad.tools.boundary import MalformedCall

TOOL_NAME = "run_algorithm"
LIBRARY_MODULES = (
    "causallearn.search.ConstraintBased.PC",
    "causallearn.search.ScoreBased.GES",
    "causallearn.search.FCMBased.lingam",
    "causallearn.search.ScoreBased.ExactSearch",
    "causallearn.search.ConstraintBased.FCI",
    "causallearn.search.ConstraintBased.CDNOD",
)
for _module in LIBRARY_MODULES:  # the `discovery` extra: a message naming it when missing
    require(_module, what="the coding agents' algorithm tool")

DESCRIPTION = (
    "Run one statistical causal discovery algorithm (causal-learn) on the data, with the "
    "parameters given; returns the graph it learns."
)
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "algorithm": {"type": "string", "enum": list(ALGORITHMS)},
        "params": {"type": "object", "description": "the algorithm's parameters, by name"},
    },
    "required": ["algorithm"],
}
TIMEOUT_ADVICE = (
    "choose a faster algorithm or parameters (pc or ges rather than exact search, a smaller "
    "max_depth or max_parents)"
)


def tool_spec() -> dict[str, Any]:
    return {
        "type": "function",
        "function": {"name": TOOL_NAME, "description": DESCRIPTION, "parameters": SCHEMA},
    }


def parse_plan(arguments: dict[str, Any], limits: ToolLimits) -> tuple[str, dict[str, Any]]:
    """A plan's JSON object -> (algorithm, params); `parameters` is read as `params`."""
    algorithm = arguments.get("algorithm")
    if not isinstance(algorithm, str) or not algorithm.strip():
        raise MalformedCall(
            f'a plan needs "algorithm", one of {", ".join(ALGORITHMS)}; it has {algorithm!r}'
        )
    params = arguments.get("params", arguments.get("parameters"))
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise MalformedCall(f'"params" must be an object of parameter values, not {params!r}')
    return algorithm, params


def compute_plan(
    table: pd.DataFrame,
    algorithm_limits: AlgorithmLimits,
    plan: tuple[str, dict[str, Any]],
    limits: ToolLimits,
) -> dict[str, Any]:
    """The plan run on `table`: what `AlgorithmRun.for_model` says, with the pairs left
    undirected or bidirected (FCI's partially directed), the library's warnings and the seconds
    it took."""
    run = run_algorithm(table, plan[0], plan[1], algorithm_limits)
    return run.for_model() | {
        "undirected": [list(p) for p in run.undirected],
        "bidirected": [list(p) for p in run.bidirected],
        "partial": [list(p) for p in run.partial],
        "notes": list(run.notes),
        "seconds": run.seconds,
    }


def edges_of(result: dict[str, Any]) -> list[tuple[str, str]]:
    """The directed edges of a computed plan (an undirected pair in both directions), from its
    adjacency matrix (row cause, column effect)."""
    names = [str(v) for v in result["variables"]]
    matrix = result["adjacency"]
    return [
        (a, b) for i, a in enumerate(names) for j, b in enumerate(names) if i != j and matrix[i][j]
    ]
