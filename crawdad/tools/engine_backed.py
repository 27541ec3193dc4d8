"""The calculator backed by the exact causal engine (crawdad.causal).

When the caller's numbers are a whole model, every variable's P(V=1 | its parents) for every
value of the parents in the caller's graph, the engine computes the query exactly over that
model (every query kind, exp_away included). Otherwise the caller gave what an identification
formula needs, not a model, and `GivenNumbers` derives the estimand from exactly those numbers.
Either way the tool sees only what the caller gave, never the dataset's model.
"""

from __future__ import annotations

from itertools import product
from typing import Any

from crawdad.causal import queries
from crawdad.causal.model import BinaryModel
from crawdad.config import ToolLimits
from crawdad.errors import DataError
from crawdad.tools.calculator import CalcResult, Calculator, GivenNumbers
from crawdad.tools.causal import CausalQuery
from crawdad.tools.graph import DAG, GraphError

# The tool's query kinds the engine computes over a whole model, and how each is written.
ENGINE_KINDS = {
    "marginal": (queries.marginal, "P(Y=1)"),
    "correlation": (queries.correlation, "P(Y=1|X=1) - P(Y=1|X=0)"),
    "ate": (queries.ate, "E[Y | do(X=1)] - E[Y | do(X=0)]"),
    "ett": (queries.ett, "E[Y_{X=1} - Y_{X=0} | X=1]"),
    "nde": (queries.nde, "E[Y_{X=1, M=M_{X=0}}] - E[Y_{X=0}]"),
    "nie": (queries.nie, "E[Y_{X=0, M=M_{X=1}}] - E[Y_{X=0}]"),
    "exp_away": (queries.exp_away, "P(Y=1 | X=1, C=1) - P(Y=1 | C=1)"),
}


def whole_model(q: CausalQuery, max_variables: int | None = None) -> BinaryModel | None:
    """The model the caller's numbers make, if they give every table of its graph (and it has
    at most `max_variables`: the engine enumerates every joint state)."""
    nodes = {v for edge in q.edges for v in edge} | {q.treatment, q.outcome}
    if max_variables is not None and len(nodes) > max_variables:
        return None
    parents = {v: tuple(sorted(a for a, b in q.edges if b == v)) for v in nodes}
    tables: dict[str, dict[tuple[int, ...], float]] = {}
    for v, ps in parents.items():
        table = {}
        for values in product((0, 1), repeat=len(ps)):
            given = frozenset(zip(ps, values, strict=True))
            one = q.probabilities.get((frozenset({(v, 1)}), given))
            zero = q.probabilities.get((frozenset({(v, 0)}), given))
            if one is None and zero is None:
                return None
            table[values] = one if one is not None else 1 - zero  # type: ignore[operator]
        tables[v] = table
    return BinaryModel(parents=parents, tables=tables)  # type: ignore[arg-type]


class EngineBacked:
    """The tool's calculator: the engine over a whole model, else `GivenNumbers`."""

    def __init__(self, fallback: Any = None) -> None:
        self.fallback = fallback or GivenNumbers()

    def compute(self, query: CausalQuery, limits: ToolLimits | None = None) -> CalcResult:
        """Over a whole model of at most `max_exact_variables` (the engine enumerates 2^n
        states), else by the fallback's formulas."""
        limits = limits or ToolLimits()
        exact = limits.max_exact_variables
        try:
            DAG.from_edges(query.edges)
        except GraphError as e:
            return CalcResult(query=query.kind, error=str(e))
        if query.kind in ENGINE_KINDS and (model := whole_model(query, exact)) is not None:
            fn, estimand = ENGINE_KINDS[query.kind]
            meta: dict[str, Any] = {"treatment": query.treatment, "outcome": query.outcome}
            if query.mediators:
                meta["mediators"] = list(query.mediators)
            if query.kind == "exp_away":
                if not query.conditioning:
                    return CalcResult(
                        query=query.kind,
                        error="exp_away needs the collider in `conditioning` (the variable "
                        "selected on)",
                    )
                meta["collider"] = query.conditioning[0]
            try:
                value = float(fn(model, meta))
            except (ValueError, ZeroDivisionError, KeyError, DataError) as e:
                return CalcResult(query=query.kind, error=f"cannot compute: {e}")
            return CalcResult(
                query=query.kind, value=value, estimand=f"{estimand} (exact, over the given model)"
            )
        result = self.fallback.compute(query, limits)
        if result.error and query.kind in ENGINE_KINDS and whole_model(query) is not None:
            n = len({v for edge in query.edges for v in edge} | {query.treatment, query.outcome})
            result.error += (
                f" (the exact engine takes whole models of at most {exact} variables, "
                f"tool_limits.max_exact_variables; this one has {n})"
            )
        return result


def default() -> Calculator:
    """The calculator the tool uses: the exact engine over a whole model the caller gave, else
    the identification formulas over the numbers given."""
    return EngineBacked()
