"""A CLadder causal model as a binary structural causal model, computed by enumeration.

Every variable is binary. A model is its graph (variables in a topological order, each with its
parents in the order of its probability table) and one table per variable: P(V=1 | parents).
Probabilities are plain Python numbers: floats from a CLadder file, or `fractions.Fraction` in
tests, where every result is then exact. Nothing here rounds.

Counterfactuals use the canonical independent-response SCM: a variable that is not intervened on
takes the same value in every world where its parents take the same values (one shared noise
draw), and independent draws where its parents differ. For the counterfactuals CLadder asks
(ETT, NDE, NIE, deterministic counterfactuals) in Markovian models this coupling gives the
identified value; deterministic tables (0/1) make it the structural equations themselves.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from functools import cached_property
from typing import Any

from crawdad.errors import DataError

Number = Any  # float or fractions.Fraction: anything with + - * /
Assignment = Mapping[str, int]

_KEY = re.compile(r"^\s*p\(\s*(\w+)\s*(?:\|\s*([\w\s,]+))?\)\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class Ref:
    """An intervention that sets a variable to its value in another world (nested counterfactuals)."""

    world: int
    var: str


@dataclass(frozen=True)
class BinaryModel:
    """Variables in topological order, each one's parents, and P(V=1 | parent values)."""

    parents: dict[str, tuple[str, ...]]
    tables: dict[str, dict[tuple[int, ...], Number]]
    order: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        if not self.order:
            object.__setattr__(self, "order", _topological(self.parents))

    # --- building ---------------------------------------------------------------------------

    @classmethod
    def from_tables(
        cls, tables: Mapping[str, tuple[Sequence[str], Any]], where: str = "model"
    ) -> BinaryModel:
        """{var: (parents, nested table)}; the table is nested in the order of the parents."""
        parents = {v: tuple(ps) for v, (ps, _) in tables.items()}
        for v, ps in parents.items():
            if missing := [p for p in ps if p not in parents]:
                raise DataError(f"{where}: {v} has parent(s) {missing} without a table")
        flat = {v: _flatten(t, len(parents[v]), f"{where}, p({v})") for v, (_, t) in tables.items()}
        return cls(parents=parents, tables=flat)

    @classmethod
    def from_meta(cls, raw: Mapping[str, Any]) -> BinaryModel:
        """From a CLadder meta-model: `params` keys like "p(Y | X, V2)", checked against `structure`."""
        where = f"causal model {raw.get('model_id')}"
        params = raw.get("params")
        if not isinstance(params, dict) or not params:
            raise DataError(
                f"{where}: `params` is missing or empty; it must map p(V | ...) to tables"
            )
        tables: dict[str, tuple[tuple[str, ...], Any]] = {}
        for key, table in params.items():
            m = _KEY.match(key)
            if not m:
                raise DataError(f"{where}: params key {key!r} is not of the form p(V | A, B)")
            ps = tuple(p.strip() for p in (m.group(2) or "").split(",") if p.strip())
            tables[m.group(1)] = (ps, table)
        model = cls.from_tables(tables, where)
        structure = raw.get("structure")
        if isinstance(structure, str):
            edges = {tuple(e.split("->")) for e in structure.replace(" ", "").split(",") if e}
            mine = {(p, v) for v, ps in model.parents.items() for p in ps}
            if edges != mine:
                raise DataError(
                    f"{where}: `structure` {structure!r} and the parents in `params` disagree "
                    f"(edges only in structure: {sorted(edges - mine)}, only in params: "
                    f"{sorted(mine - edges)})"
                )
        return model

    # --- basic facts ------------------------------------------------------------------------

    @property
    def variables(self) -> tuple[str, ...]:
        return self.order

    def children(self, var: str) -> list[str]:
        return [v for v in self.order if var in self.parents[v]]

    def descendants(self, var: str) -> set[str]:
        out: set[str] = set()
        todo = [var]
        while todo:
            for c in self.children(todo.pop()):
                if c not in out:
                    out.add(c)
                    todo.append(c)
        return out

    def p1(self, var: str, values: Assignment) -> Number:
        """P(var=1 | its parents as in `values`)."""
        return self.tables[var][tuple(values[p] for p in self.parents[var])]

    @property
    def is_deterministic(self) -> bool:
        """Every non-root table is 0/1 (the roots may be uncertain)."""
        return all(
            p in (0, 1) for v in self.order if self.parents[v] for p in self.tables[v].values()
        )

    # --- observational and interventional ---------------------------------------------------

    @cached_property
    def joint(self) -> list[tuple[dict[str, int], Number]]:
        return self._joint({})

    def _joint(self, do: Assignment) -> list[tuple[dict[str, int], Number]]:
        out = []
        for bits in itertools.product((0, 1), repeat=len(self.order)):
            values = dict(zip(self.order, bits, strict=True))
            if any(values[v] != x for v, x in do.items()):
                continue
            p: Number = 1
            for v in self.order:
                if v in do:
                    continue
                q = self.p1(v, values)
                p = p * (q if values[v] else 1 - q)
            out.append((values, p))
        return out

    def prob(
        self, event: Assignment, given: Assignment | None = None, do: Assignment | None = None
    ) -> Number:
        """P(event | given) in the model, or in the model under do(...)."""
        rows = self.joint if not do else self._joint(do)
        given = given or {}
        num: Number = 0
        den: Number = 0
        for values, p in rows:
            if all(values[v] == x for v, x in given.items()):
                den = den + p
                if all(values[v] == x for v, x in event.items()):
                    num = num + p
        if den == 0:
            raise ZeroDivisionError(f"P({dict(given)}) is 0 in this model")
        return num / den

    # --- counterfactual ---------------------------------------------------------------------

    def counterfactual(
        self,
        worlds: Sequence[Mapping[str, int | Ref]],
        event: Sequence[tuple[int, str, int]],
        evidence: Sequence[tuple[int, str, int]] = (),
    ) -> Number:
        """P(event | evidence) over several worlds of one unit (world i under its interventions).

        `event` and `evidence` are (world, variable, value) triples. A `Ref` intervention takes a
        variable's value from an earlier world (Y_{X=1, M=M_{X=0}}).
        """
        num: Number = 0
        den: Number = 0
        for states, p in self._worlds(worlds):
            if all(states[w][v] == x for w, v, x in evidence):
                den = den + p
                if all(states[w][v] == x for w, v, x in event):
                    num = num + p
        if den == 0:
            raise ZeroDivisionError(f"the evidence {list(evidence)} has probability 0")
        return num / den

    def _worlds(
        self, worlds: Sequence[Mapping[str, int | Ref]]
    ) -> list[tuple[list[dict[str, int]], Number]]:
        partial: list[tuple[list[dict[str, int]], Number]] = [([{} for _ in worlds], 1)]
        for v in self.order:
            grown = []
            for states, p in partial:
                groups: dict[tuple[int, ...], list[int]] = {}
                for w, spec in enumerate(worlds):
                    if v not in spec:
                        groups.setdefault(tuple(states[w][q] for q in self.parents[v]), []).append(
                            w
                        )
                keys = list(groups)
                for bits in itertools.product((0, 1), repeat=len(keys)):
                    q: Number = p
                    new = [dict(s) for s in states]
                    for key, bit in zip(keys, bits, strict=True):
                        one = self.tables[v][key]
                        q = q * (one if bit else 1 - one)
                        for w in groups[key]:
                            new[w][v] = bit
                    for w, spec in enumerate(
                        worlds
                    ):  # in world order: a Ref names an earlier world
                        if v in spec:
                            act = spec[v]
                            new[w][v] = (
                                new[act.world][act.var] if isinstance(act, Ref) else int(act)
                            )
                    if q != 0:
                        grown.append((new, q))
            partial = grown
        return partial


def _topological(parents: Mapping[str, Sequence[str]]) -> tuple[str, ...]:
    order: list[str] = []
    left = dict(parents)
    while left:
        ready = [v for v, ps in left.items() if all(p in order for p in ps)]
        if not ready:
            raise DataError(f"the graph has a cycle among {sorted(left)}")
        order += ready
        for v in ready:
            del left[v]
    return tuple(order)


def _flatten(table: Any, n_parents: int, where: str) -> dict[tuple[int, ...], Number]:
    """A nested table (depth = number of parents) -> {parent values: P(V=1 | them)}."""
    if n_parents == 0 and isinstance(table, list) and len(table) == 1:
        table = table[0]
    out = {}
    for key in itertools.product((0, 1), repeat=n_parents):
        cell = table
        try:
            for k in key:
                cell = cell[k]
        except (IndexError, KeyError, TypeError):
            raise DataError(
                f"{where}: the table must be nested {n_parents} deep, 2 per level"
            ) from None
        if isinstance(cell, bool) or not isinstance(cell, int | float | Fraction):
            raise DataError(
                f"{where}: table entry {list(key)} is {cell!r}; it must be a probability"
            )
        if not 0 <= cell <= 1:
            raise DataError(f"{where}: table entry {list(key)} is {cell}; it must lie in [0, 1]")
        out[key] = cell
    return out
