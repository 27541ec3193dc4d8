"""The calculator behind the tool: a one-method `Calculator` protocol, and `GivenNumbers`, an
exact implementation from the caller's numbers for the queries that need no full model.

The causal engine (crawdad.causal, issue 12) plugs in as another `Calculator`; `default()` is
the one place that chooses. Whatever the implementation, it computes from the `CausalQuery`
alone: the graph and the numbers the agent gave, never the dataset's model.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import product
from typing import Any, Protocol

from pydantic import BaseModel

from crawdad.config import ToolLimits
from crawdad.tools.causal import Assignment, CausalQuery, LimitExceeded, ToolError, show_event
from crawdad.tools.graph import DAG, GraphError

CONSISTENCY_TOLERANCE = 0.02  # numbers read from a question are rounded to whole percents


class CalcResult(BaseModel):
    """What the tool answers: a value (number, yes/no, or sets) and how it was got, or an error."""

    query: str
    value: float | bool | dict[str, Any] | None = None
    estimand: str | None = None
    error: str | None = None

    def for_model(self) -> str:
        """The JSON text the calling model reads."""
        return self.model_dump_json(exclude_none=True)


class Calculator(Protocol):
    def compute(self, query: CausalQuery, limits: ToolLimits | None = None) -> CalcResult: ...


class Missing(ToolError):
    def __init__(self, events: Sequence[str]) -> None:
        self.events = list(dict.fromkeys(events))
        super().__init__(
            "missing probabilities: "
            + ", ".join(self.events)
            + " (give them in `probabilities`, read from the question)"
        )


class Numbers:
    """The caller's probabilities, with the derivations every reader of a question makes:
    complements, Bayes' rule, the chain rule. Lookups that fail are collected, so one error
    names everything that is missing."""

    def __init__(self, given: dict[tuple[Assignment, Assignment], float]) -> None:
        self.given = dict(given)
        self.missing: list[str] = []
        self._check_complements()

    def p(self, target: dict[str, int], given: dict[str, int] | None = None) -> float:
        t, g = frozenset(target.items()), frozenset((given or {}).items())
        value = self._find(t, g, depth=3)
        if value is None:
            self.missing.append(show_event(t, g))
            return 0.0
        return value

    def done(self) -> None:
        if self.missing:
            raise Missing(self.missing)

    def _find(self, t: Assignment, g: Assignment, depth: int) -> float | None:
        if t & g:  # P(X=1|X=1): a value fixed by the condition
            return 1.0 if all((v, 1 - x) not in g for v, x in t) else 0.0
        if (t, g) in self.given:
            return self.given[(t, g)]
        if len(t) == 1:
            ((v, x),) = t
            flip = (frozenset({(v, 1 - x)}), g)
            if flip in self.given:
                return 1.0 - self.given[flip]
        if depth == 0:
            return None
        if g:  # Bayes: P(T|G) = P(T,G) / P(G)
            joint, base = self._find(t | g, frozenset(), depth - 1), None
            if joint is not None:
                base = self._find(g, frozenset(), depth - 1)
            if joint is not None and base:
                return joint / base
            return None
        if len(t) == 1:  # total probability over one variable A is given conditioned on
            ((v, x),) = t
            for b in sorted(self._single_conditions(v)):
                total = 0.0
                for k in (0, 1):
                    a = self._find(t, frozenset({(b, k)}), 0)
                    w = self._find(frozenset({(b, k)}), g, 0)
                    if a is None or w is None:
                        break
                    total += a * w
                else:
                    return total
        if len(t) >= 2:  # chain rule, each variable in turn last
            for v, x in sorted(t):
                rest = t - {(v, x)}
                cond = self._find(frozenset({(v, x)}), rest, depth - 1)
                if cond is not None and (marg := self._find(rest, frozenset(), depth - 1)):
                    return cond * marg
                # P(V=0, R) = P(R) - P(V=1, R)
                other = self.given.get((frozenset({(v, 1 - x)} | rest), frozenset()))
                if other is not None and (marg := self._find(rest, frozenset(), depth - 1)):
                    return marg - other
        return None

    def _single_conditions(self, var: str) -> set[str]:
        return {
            next(iter(g))[0]
            for t, g in self.given
            if len(g) == 1 and len(t) == 1 and next(iter(t))[0] == var
        }

    def _check_complements(self) -> None:
        for (t, g), value in self.given.items():
            if len(t) == 1:
                ((v, x),) = t
                other = self.given.get((frozenset({(v, 1 - x)}), g))
                if other is not None and abs(value + other - 1) > CONSISTENCY_TOLERANCE:
                    raise ToolError(
                        f"inconsistent probabilities: {show_event(t, g)} = {value} and "
                        f"{show_event(frozenset({(v, 1 - x)}), g)} = {other} do not add up to 1"
                    )


def _values(names: Sequence[str], limits: ToolLimits) -> list[dict[str, int]]:
    """Every assignment of the names: a sum over them has 2^n terms, each needing given numbers,
    so n is bounded by the probabilities a call may give."""
    if 2 ** len(names) > limits.max_probabilities:
        raise LimitExceeded(
            f"a sum over {', '.join(names)} has 2^{len(names)} terms, each needing probabilities",
            limits.max_probabilities,
            "max_probabilities",
            "use a smaller adjustment set or fewer mediators",
        )
    return [dict(zip(names, combo, strict=True)) for combo in product((0, 1), repeat=len(names))]


class GivenNumbers:
    """Exact answers from the caller's graph and numbers, by the textbook identification
    formulas: total probability (marginal), backdoor adjustment (ate, ett), the mediation
    formula (nde, nie, when no confounder is involved), and the graph algorithms. Queries
    that need a full model (det_counterfactual, front-door and IV graphs) answer "not yet
    supported"."""

    def __init__(self, limits: ToolLimits | None = None) -> None:
        self.limits = limits or ToolLimits()

    def compute(self, query: CausalQuery, limits: ToolLimits | None = None) -> CalcResult:
        if limits is not None and limits != self.limits:
            return GivenNumbers(limits).compute(query)
        try:
            dag = DAG.from_edges(query.edges)
            dag.require(query.treatment, query.outcome, *query.conditioning, *query.mediators)
            method = getattr(self, f"_{query.kind}", None)
            if method is None:
                raise ToolError(
                    f"query {query.kind!r} is not yet supported by this calculator; "
                    "work it out from the other queries"
                )
            value, estimand = method(dag, query)
        except (ToolError, GraphError) as e:
            return CalcResult(query=query.kind, error=str(e))
        if isinstance(value, float):
            value = round(value, 6)
        return CalcResult(query=query.kind, value=value, estimand=estimand)

    # --- rung 1 ---------------------------------------------------------------------------

    def _marginal(self, dag: DAG, q: CausalQuery) -> tuple[float, str]:
        n = Numbers(q.probabilities)
        x, y = q.treatment, q.outcome
        direct = n._find(frozenset({(y, 1)}), frozenset(), 0)
        if direct is not None:
            return direct, f"P({y}=1)"
        value = sum(n.p({y: 1}, {x: v}) * n.p({x: v}) for v in (0, 1))
        n.done()
        return value, f"P({y}=1|{x}=1)P({x}=1) + P({y}=1|{x}=0)P({x}=0)"

    def _correlation(self, dag: DAG, q: CausalQuery) -> tuple[float, str]:
        n = Numbers(q.probabilities)
        x, y = q.treatment, q.outcome
        value = n.p({y: 1}, {x: 1}) - n.p({y: 1}, {x: 0})
        n.done()
        return value, f"P({y}=1|{x}=1) - P({y}=1|{x}=0)"

    # --- rung 2 ---------------------------------------------------------------------------

    def _adjustment(self, dag: DAG, q: CausalQuery) -> list[str]:
        x, y = q.treatment, q.outcome
        if q.conditioning:
            z = set(q.conditioning)
            if not dag.backdoor_valid(x, y, z):
                raise ToolError(
                    f"{{{', '.join(sorted(z))}}} is not a valid backdoor adjustment set for "
                    f"{x} -> {y} on this graph; valid minimal sets: "
                    f"{dag.backdoor_sets(x, y) or 'none'}"
                )
            return sorted(z)
        sets = dag.backdoor_sets(x, y)
        if not sets:
            raise ToolError(
                f"no backdoor adjustment set identifies the effect of {x} on {y} in this graph; "
                "front-door and instrumental-variable identification are not yet supported"
            )
        return sets[0]

    def _adjusted(self, dag: DAG, q: CausalQuery, on_treated: bool) -> tuple[float, list[str]]:
        """Backdoor adjustment over the given set, or over the first minimal set whose numbers
        were given (the error names what the first set needs)."""
        x, y = q.treatment, q.outcome
        sets = [self._adjustment(dag, q)] if q.conditioning else dag.backdoor_sets(x, y)
        if not sets:
            self._adjustment(dag, q)  # raises: no backdoor set
        first: Missing | None = None
        for z in sets:
            n = Numbers(q.probabilities)
            value = sum(
                (n.p({y: 1}, {x: 1, **zz}) - n.p({y: 1}, {x: 0, **zz}))
                * ((n.p(zz, {x: 1}) if on_treated else n.p(zz)) if z else 1.0)
                for zz in _values(z, self.limits)
            )
            try:
                n.done()
            except Missing as e:
                first = first or e
                continue
            return value, z
        assert first is not None
        raise first

    def _ate(self, dag: DAG, q: CausalQuery) -> tuple[float, str]:
        return self._effect(dag, q, on_treated=False)

    def _effect(self, dag: DAG, q: CausalQuery, on_treated: bool) -> tuple[float, str]:
        """The ATE, or the ETT `on_treated`: adjusted over a backdoor set when one is needed,
        the adjustment weighted by P(z) or, on the treated, P(z|x=1)."""
        x, y = q.treatment, q.outcome
        if y not in dag.descendants(x):
            return 0.0, f"0: no directed path from {x} to {y}"
        value, z = self._adjusted(dag, q, on_treated=on_treated)
        if not z:
            return value, f"P({y}=1|{x}=1) - P({y}=1|{x}=0)"
        zs = ",".join(z)
        weight = f"P({zs}|{x}=1)" if on_treated else f"P({zs})"
        return value, f"sum_{zs} [P({y}=1|{x}=1,{zs}) - P({y}=1|{x}=0,{zs})] {weight}"

    def _collider_bias(self, dag: DAG, q: CausalQuery) -> tuple[float, str]:
        return self._ate(dag, q)

    def _backdoor(self, dag: DAG, q: CausalQuery) -> tuple[dict[str, Any], str]:
        x, y = q.treatment, q.outcome
        z = set(q.conditioning)
        return {
            "adjustment_set": sorted(z),
            "valid": dag.backdoor_valid(x, y, z),
            "minimal_sets": dag.backdoor_sets(x, y),
        }, f"backdoor criterion for {x} -> {y}"

    def _d_separation(self, dag: DAG, q: CausalQuery) -> tuple[bool, str]:
        x, y, z = q.treatment, q.outcome, set(q.conditioning)
        given = f" | {', '.join(sorted(z))}" if z else ""
        return dag.d_separated({x}, {y}, z), f"{x} d-separated from {y}{given}"

    # --- rung 3 ---------------------------------------------------------------------------

    def _ett(self, dag: DAG, q: CausalQuery) -> tuple[float, str]:
        return self._effect(dag, q, on_treated=True)

    def _mediation(self, dag: DAG, q: CausalQuery) -> list[str]:
        x, y = q.treatment, q.outcome
        meds = list(q.mediators) or dag.mediators(x, y)
        if not meds:
            raise ToolError(f"no mediator between {x} and {y} in this graph")
        if dag.backdoor_sets(x, y) != [[]] or any(
            not dag.backdoor_valid(m, y, {x, *meds} - {m}) for m in meds
        ):
            raise ToolError(
                "natural effects with confounded treatment or mediators are not yet supported "
                "by this calculator"
            )
        return sorted(meds)

    def _nde(self, dag: DAG, q: CausalQuery) -> tuple[float, str]:
        x, y = q.treatment, q.outcome
        meds = self._mediation(dag, q)
        if x not in dag.parents[y] and set(meds) == set(dag.mediators(x, y)):
            return 0.0, f"0: every path from {x} to {y} goes through the mediators"
        n = Numbers(q.probabilities)
        value = sum(
            n.p(m, {x: 0}) * (n.p({y: 1}, {x: 1, **m}) - n.p({y: 1}, {x: 0, **m}))
            for m in _values(meds, self.limits)
        )
        n.done()
        ms = ",".join(meds)
        return value, f"sum_{ms} P({ms}|{x}=0) [P({y}=1|{x}=1,{ms}) - P({y}=1|{x}=0,{ms})]"

    def _nie(self, dag: DAG, q: CausalQuery) -> tuple[float, str]:
        x, y = q.treatment, q.outcome
        meds = self._mediation(dag, q)
        if x not in dag.parents[y] and set(meds) == set(dag.mediators(x, y)):
            value, estimand = self._ate(dag, q.model_copy(update={"conditioning": ()}))
            return value, f"{estimand} (no direct edge: the whole effect is indirect)"
        n = Numbers(q.probabilities)
        value = sum(
            n.p({y: 1}, {x: 0, **m}) * (n.p(m, {x: 1}) - n.p(m, {x: 0}))
            for m in _values(meds, self.limits)
        )
        n.done()
        ms = ",".join(meds)
        return value, f"sum_{ms} P({y}=1|{x}=0,{ms}) [P({ms}|{x}=1) - P({ms}|{x}=0)]"
