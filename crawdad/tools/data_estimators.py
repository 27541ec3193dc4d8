"""Effects estimated from a binary table by exact counting: the textbook identification
formulas with every probability a ratio of row counts (fractions until the end).

Every effect is of treatment value 1 against 0 on outcome value 1:

- backdoor (ATE, and conditional on `given` for a conditional effect):
  sum_z P(z | given) [P(y | X=1, z, given) - P(y | X=0, z, given)];
- ETT on the group X=t: the same with weights P(z | X=t) (E[Y_1 - Y_0 | X=t]);
- front-door: sum_m [P(m | X=1) - P(m | X=0)] sum_x' P(y | x', m) P(x'), and for the group X=t
  sum_m [P(m | X=1) - P(m | X=0)] P(y | X=t, m);
- natural effects over covariates W (mediation formula):
  NDE = sum_w P(w) sum_m P(m | X=0, w) [P(y | X=1, m, w) - P(y | X=0, m, w)],
  NIE = sum_w P(w) sum_m P(y | X=0, m, w) [P(m | X=1, w) - P(m | X=0, w)].

A stratum the weights need but the table lacks (rows with z, none with X=1, say) is a
`ToolError` naming it: the estimate would rest on no data.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any

from crawdad.causal.estimate import Counts
from crawdad.tools.causal import ToolError


def _show(a: Mapping[str, int]) -> str:
    return ", ".join(f"{v}={x}" for v, x in a.items()) or "(all rows)"


class Estimator:
    """Counting over one table; `smallest` is the fewest rows any ratio used rested on."""

    def __init__(self, counts: Counts) -> None:
        self.counts = counts
        self.smallest: int | None = None

    def p(self, event: Mapping[str, int], given: Mapping[str, int]) -> Fraction:
        den = self.counts.count(given)
        if den == 0:
            raise ToolError(
                f"no row has {_show(given)}, so P({_show(event)} | {_show(given)}) cannot be "
                "estimated from this table (no data in that stratum): adjust for fewer "
                "variables, or use another identification"
            )
        self.smallest = den if self.smallest is None else min(self.smallest, den)
        return Fraction(self.counts.count({**given, **event}), den)

    def weight(self, event: Mapping[str, int], given: Mapping[str, int]) -> Fraction:
        """A weight may rest on no rows only if its stratum is empty too (then it is 0)."""
        if not event or self.counts.count({**given, **event}) == 0:
            return Fraction(1) if not event else Fraction(0)
        return self.p(event, given)


def values(names: Sequence[str]) -> list[dict[str, int]]:
    return [
        dict(zip(names, bits, strict=True)) for bits in itertools.product((0, 1), repeat=len(names))
    ]


def backdoor(
    e: Estimator,
    x: str,
    y: str,
    z: Sequence[str],
    given: Mapping[str, int] | None = None,
    group: int | None = None,
) -> Fraction:
    """The adjusted difference over `z`, within `given`; weights P(z | X=group) for the ETT."""
    given = dict(given or {})
    total = Fraction(0)
    for zz in values(z):
        w = e.weight(zz, {**given, x: group} if group is not None else given)
        if w == 0:
            continue
        cell = {**zz, **given}
        total += w * (e.p({y: 1}, {**cell, x: 1}) - e.p({y: 1}, {**cell, x: 0}))
    return total


def frontdoor(e: Estimator, x: str, y: str, m: Sequence[str], group: int | None = None) -> Fraction:
    total = Fraction(0)
    for mm in values(m):
        shift = e.weight(mm, {x: 1}) - e.weight(mm, {x: 0})
        if shift == 0:
            continue
        if group is not None:
            total += shift * e.p({y: 1}, {x: group, **mm})
        else:
            total += shift * sum(
                (
                    e.p({y: 1}, {x: h, **mm}) * e.weight({x: h}, {})
                    for h in (0, 1)
                    if e.weight({x: h}, {})
                ),
                Fraction(0),
            )
    return total


def natural(
    e: Estimator, kind: str, x: str, y: str, m: Sequence[str], w: Sequence[str]
) -> Fraction:
    """The natural direct (`nde`) or indirect (`nie`) effect over covariates `w`."""
    total = Fraction(0)
    for ww in values(w):
        pw = e.weight(ww, {})
        if pw == 0:
            continue
        inner = Fraction(0)
        for mm in values(m):
            if kind == "nde":
                pm = e.weight(mm, {x: 0, **ww})
                if pm:
                    inner += pm * (
                        e.p({y: 1}, {x: 1, **mm, **ww}) - e.p({y: 1}, {x: 0, **mm, **ww})
                    )
            else:
                shift = e.weight(mm, {x: 1, **ww}) - e.weight(mm, {x: 0, **ww})
                if shift:
                    inner += shift * e.p({y: 1}, {x: 0, **mm, **ww})
        total += pw * inner
    return total


def formula(kind: str, method: str, x: str, y: str, sets: Mapping[str, Any]) -> str:
    """The estimand as text, for the agent to read what was computed."""
    z = ",".join(sets.get("adjustment") or [])
    m = ",".join(sets.get("mediators") or [])
    g = sets.get("given") or {}
    cond = "".join(f",{v}={k}" for v, k in g.items())
    if method == "frontdoor":
        if kind == "ett":
            t = sets.get("group", 1)
            return f"sum_{m} [P({m}|{x}=1) - P({m}|{x}=0)] P({y}=1|{x}={t},{m})"
        return f"sum_{m} [P({m}|{x}=1) - P({m}|{x}=0)] sum_x' P({y}=1|{x}=x',{m}) P({x}=x')"
    if kind in ("nde", "nie"):
        wz = f"sum_{z} P({z}) " if z else ""
        c = f",{z}" if z else ""
        if kind == "nde":
            return f"{wz}sum_{m} P({m}|{x}=0{c}) [P({y}=1|{x}=1,{m}{c}) - P({y}=1|{x}=0,{m}{c})]"
        return f"{wz}sum_{m} P({y}=1|{x}=0,{m}{c}) [P({m}|{x}=1{c}) - P({m}|{x}=0{c})]"
    diff = (
        f"[P({y}=1|{x}=1,{z}{cond}) - P({y}=1|{x}=0,{z}{cond})]"
        if z
        else (f"P({y}=1|{x}=1{cond}) - P({y}=1|{x}=0{cond})")
    )
    if not z:
        return diff
    if kind == "ett":
        return f"sum_{z} P({z}|{x}={sets.get('group', 1)}) {diff}"
    weight = f"P({z}|{cond[1:]})" if g else f"P({z})"
    return f"sum_{z} {weight} {diff}"
