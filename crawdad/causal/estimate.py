"""Estimates from data: the counts of a binary table, and the plug-in model an ideal estimator
fits to them, so the engine's own query functions give the estimate a finite sample supports.

- `Counts`: how many rows show each combination of the columns (the sufficient statistic of
  binary data), with exact counting over any assignment.
- `plugin_model`: a graph's tables replaced by the sample's conditional frequencies
  P^(V=1 | parents), as exact fractions: the maximum-likelihood model of the graph.
- `observed_model`: the plug-in model for one query when the story hides variables (CLadder's
  IV, arrowhead and front-door graphs say "V is unobserved"), or `NotIdentified`:
  - every hidden variable is replaced by edges among its observed children (each child
    conditioned on the earlier members of its district and their parents), which represents the
    observed joint exactly; associational queries use this model;
  - an effect of X is read from it when no hidden variable touches X (and, for natural effects,
    neither the mediators nor Y): adjusting for X's own parents is then valid;
  - otherwise, when the observed variables are X, mediators M and Y with X <- H -> Y hidden and
    X -> M -> Y (the front-door graph), X's confounder is played by a copy U of X itself:
    P(y | do(x)) = sum_m P(m|x) sum_u P(u) P(y | X=u, m), which is the front-door formula
    (and the engine's ETT and NIE over it are the front-door ETT and NIE);
  - anything else is not identified from the observed columns.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property
from typing import Any

import numpy as np

from crawdad.causal.model import BinaryModel
from crawdad.errors import DataError

RUNG1 = ("marginal", "correlation", "exp_away", "backadj")
EFFECTS = ("ate", "ett", "collider_bias")
NATURAL = ("nde", "nie")


class EmptyCell(DataError):
    """A conditional frequency has no rows to be estimated from."""


class NotIdentified(DataError):
    """The query cannot be computed from the observed columns alone."""


@dataclass(frozen=True, eq=False)
class Counts:
    """Rows per combination of `columns` (cell i: the columns' bits read as a binary number,
    the first column most significant)."""

    columns: tuple[str, ...]
    cells: np.ndarray  # int64, length 2 ** len(columns)

    @classmethod
    def from_rows(cls, rows: Mapping[str, np.ndarray], columns: Sequence[str]) -> Counts:
        if not columns:
            raise DataError("a table needs at least one column")
        index = np.zeros(len(rows[columns[0]]), dtype=np.int64)
        for c in columns:
            values = np.asarray(rows[c])
            if values.size and not np.isin(values, (0, 1)).all():
                raise DataError(f"column {c} holds values other than 0 and 1")
            index = index * 2 + values.astype(np.int64)
        cells = np.bincount(index, minlength=2 ** len(columns)).astype(np.int64)
        return cls(tuple(columns), cells)

    @classmethod
    def from_cells(cls, columns: Sequence[str], cells: Sequence[int]) -> Counts:
        if len(cells) != 2 ** len(columns):
            raise DataError(f"{len(columns)} columns need {2 ** len(columns)} counts")
        return cls(tuple(columns), np.asarray(cells, dtype=np.int64))

    @property
    def n(self) -> int:
        return int(self.cells.sum())

    @cached_property
    def _bits(self) -> np.ndarray:
        k = len(self.columns)
        i = np.arange(2**k)
        return np.stack([(i >> (k - 1 - j)) & 1 for j in range(k)], axis=1)

    def count(self, assignment: Mapping[str, int]) -> int:
        """Rows where every named column takes its value."""
        if unknown := [v for v in assignment if v not in self.columns]:
            raise DataError(f"{', '.join(unknown)} not among the columns {list(self.columns)}")
        mask = np.ones(len(self.cells), dtype=bool)
        bits = self._bits
        for v, x in assignment.items():
            mask &= bits[:, self.columns.index(v)] == int(x)
        return int(self.cells[mask].sum())

    def rows(self) -> list[list[int]]:
        """[bit, bit, ..., count] per combination, in cell order (the compact table)."""
        return [[*map(int, b), int(c)] for b, c in zip(self._bits, self.cells, strict=True)]


def _show(assignment: Mapping[str, int]) -> str:
    return ", ".join(f"{v}={x}" for v, x in assignment.items())


def conditional(counts: Counts, var: str, parents: Sequence[str]) -> dict[tuple[int, ...], Any]:
    """{parent values: P^(var=1 | them)} as exact fractions; EmptyCell names a parent
    combination no row shows."""
    table: dict[tuple[int, ...], Any] = {}
    for values in itertools.product((0, 1), repeat=len(parents)):
        given = dict(zip(parents, values, strict=True))
        den = counts.count(given)
        if den == 0:
            raise EmptyCell(
                f"no row has {_show(given)}: P({var}=1 | {_show(given)}) cannot be estimated"
            )
        table[values] = Fraction(counts.count({**given, var: 1}), den)
    return table


def plugin_model(parents: Mapping[str, Sequence[str]], counts: Counts) -> BinaryModel:
    """The graph with every table replaced by the sample's conditional frequencies."""
    return BinaryModel(
        parents={v: tuple(ps) for v, ps in parents.items()},
        tables={v: conditional(counts, v, ps) for v, ps in parents.items()},
    )


# --- hidden variables ----------------------------------------------------------------------------


def districts(model: BinaryModel, hidden: set[str]) -> list[set[str]]:
    """Observed variables joined by a shared hidden parent (CLadder's hidden ones are roots)."""
    for h in hidden:
        if model.parents[h]:
            raise NotIdentified(f"the hidden variable {h} has parents; only hidden roots are read")
    groups: list[set[str]] = []
    for h in sorted(hidden):
        kids = set(model.children(h)) - hidden
        merged = [g for g in groups if g & kids]
        for g in merged:
            groups.remove(g)
            kids |= g
        groups.append(kids)
    return [g for g in groups if len(g) > 1]


def projected_parents(model: BinaryModel, hidden: set[str]) -> dict[str, tuple[str, ...]]:
    """A graph over the observed variables that represents their joint: each variable's
    observed parents, plus the earlier members of its district and their parents."""
    groups = districts(model, hidden)
    order = [v for v in model.order if v not in hidden]
    out: dict[str, tuple[str, ...]] = {}
    for i, v in enumerate(order):
        ps = {p for p in model.parents[v] if p not in hidden}
        for g in groups:
            if v in g:
                for u in order[:i]:
                    if u in g:
                        ps |= {u} | {p for p in model.parents[u] if p not in hidden}
        out[v] = tuple(u for u in order if u in ps)
    return out


def _front_door(model: BinaryModel, hidden: set[str], x: str, y: str) -> list[str] | None:
    """The mediators M when the observed variables are X, M, Y with X <- H -> Y hidden and
    every path X -> Y through M (and M unconfounded); else None."""
    observed = [v for v in model.order if v not in hidden]
    meds = [v for v in observed if v not in (x, y)]
    if not meds or x in model.parents[y]:
        return None
    if any(set(model.children(h)) - {x, y} for h in hidden):
        return None
    if any(p not in hidden for p in model.parents[x]):
        return None
    if any(set(model.parents[m]) - {x, *meds} for m in meds):
        return None
    if set(model.parents[y]) - {*meds, *hidden} or not set(model.parents[y]) & set(meds):
        return None
    return meds


def _copy_model(counts: Counts, x: str, meds: list[str], y: str) -> BinaryModel:
    u = f"{x}~"  # stands for X's hidden confounder: X's own value, drawn once
    parents: dict[str, tuple[str, ...]] = {u: (), x: (u,)}
    tables: dict[str, dict[tuple[int, ...], Any]] = {
        u: conditional(counts, x, ()),
        x: {(0,): 0, (1,): 1},
    }
    for i, m in enumerate(meds):  # saturated among the mediators: P^(m | x) exactly
        parents[m] = (x, *meds[:i])
        tables[m] = conditional(counts, m, parents[m])
    parents[y] = (u, *meds)
    tables[y] = conditional(counts, y, (x, *meds))  # P^(y | X=u, m)
    return BinaryModel(parents=parents, tables=tables)


def observed_model(
    model: BinaryModel, hidden: set[str], counts: Counts, query_type: str, meta: Mapping[str, Any]
) -> BinaryModel:
    """The plug-in model whose `QUANTITY[query_type]` is the estimate of the query from the
    observed columns (see the module's doc), or NotIdentified saying why."""
    if not hidden:
        return plugin_model(model.parents, counts)
    projected = projected_parents(model, hidden)
    if query_type in RUNG1:
        return plugin_model(projected, counts)
    x, y = str(meta.get("treatment") or "X"), str(meta.get("outcome") or "Y")
    touched = {v for g in districts(model, hidden) for v in g}
    meds = model.descendants(x) & {v for v in model.variables if y in model.descendants(v)}
    if query_type in EFFECTS and x not in touched:
        return plugin_model(projected, counts)
    if query_type in NATURAL and not ({x, y} | meds) & touched:
        return plugin_model(projected, counts)
    if query_type in EFFECTS + NATURAL and (fd := _front_door(model, hidden, x, y)):
        return _copy_model(counts, x, fd, y)
    shown = ", ".join(sorted(hidden))
    raise NotIdentified(
        f"{query_type} of {x} on {y} is not identified from the observed variables: the hidden "
        f"{shown} confounds {', '.join(sorted(touched))}, and neither adjustment nor the "
        "front-door formula applies"
    )
