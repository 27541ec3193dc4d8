"""CLadder's yes/no rules: from a query's exact quantity and the question's wording to its answer.

Worked out from CLadder's generator (causalNLP/cladder, causalbenchmark/queries/) and checked on
its data:

- The question's flags flip the direction asked: `polarity` false asks "less / decrease /
  negatively" instead of "more / increase / positively"; `treated` false asks about X=0, `result`
  false about Y=0. The stored quantity is already oriented by `treated` and `result`; `polarity`
  is applied here.
- marginal: "Is Y=1 more likely than Y=0 overall?" yes iff P(Y=1) > 1/2 (polarity flips). No band
  around 1/2; CLadder answers "no" when P(Y=1) < 0.005 whatever the polarity (a slip: its band
  test looks at P(Y=1) instead of P(Y=1) - 1/2; it never fires on CLadder's data).
- correlation, ate, nde, nie: |quantity| < 0.005 (the band) answers "no"; otherwise yes iff the
  sign matches the polarity.
- ett: as ate, but the question asks about switching to the other treatment (E[Y_{1-t} - Y_t |
  X=t]), so the stored quantity's sign is reversed.
- exp_away: no band; yes iff the sign matches the polarity.
- collider_bias: X does not cause Y in the collision graph, so "does it mean that X affects Y?"
  is "no" (and "does not affect" is "yes"); the correlation among the selected does not count.
- backadj: yes iff the method the question favours uses a valid backdoor adjustment set and the
  other does not. When both sets are valid (V2 in the fork), CLadder's table of valid sets holds
  only the minimal one, so its labels favour the smaller set: the engine follows that convention
  and says so in the verdict's note (the audit lists these questions apart).
- det-counterfactual: yes iff the structural equations make Y_{X=a} equal the asked value.

A quantity of exactly 0 (1/2 for marginal) answers "no": neither more nor less. An answer is None
when no answer is uniquely right: a quantity on the band's edge, two backadj methods equally
valid (or both invalid), a counterfactual the evidence leaves undecided.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

BAND = 0.005  # CLadder's |quantity| < 0.005 counts as no effect
EPS = 1e-9  # float noise allowed around a boundary (exact fractions need none)

Answer = Literal["yes", "no"]


CONVENTION = (
    "both methods are valid adjustments by the backdoor criterion; CLadder's convention favours "
    "the minimal set"
)


@dataclass(frozen=True)
class Verdict:
    answer: Answer | None
    note: str | None = None  # why there is no unique answer, or which convention decided it


def _yes(flag: bool) -> Answer:
    return "yes" if flag else "no"


def _polar(meta: Mapping[str, Any]) -> bool:
    return bool(meta.get("polarity", True))


def _signed(value: float, positive_means_yes: bool, band: bool, name: str) -> Verdict:
    if abs(value) <= EPS:
        return Verdict("no", f"{name} is 0: neither more nor less")
    if band and abs(abs(value) - BAND) <= EPS:
        return Verdict(None, f"|{name}| is on the band's edge ({BAND})")
    if band and abs(value) < BAND:
        return Verdict("no", f"|{name}| < {BAND}: CLadder's band answers no")
    return Verdict(_yes((value > 0) == positive_means_yes))


def verdict(query_type: str, value: Any, meta: Mapping[str, Any]) -> Verdict:
    """The yes/no answer to a question whose exact quantity is `value`."""
    pol = _polar(meta)
    if query_type == "marginal":
        if abs(value - 0.5) <= EPS:
            return Verdict("no", "P(Y=1) is 1/2: neither outcome is more likely")
        if value < BAND:
            return Verdict("no", f"P(Y=1) < {BAND}: CLadder answers no")
        treated = bool(meta.get("treated", True))
        return Verdict(_yes((value > 0.5) == (pol == treated)))
    if query_type in ("correlation", "ate", "nde", "nie"):
        return _signed(value, pol, True, query_type)
    if query_type == "ett":
        return _signed(value, not pol, True, query_type)
    if query_type == "exp_away":
        return _signed(value, pol, False, query_type)
    if query_type == "collider_bias":
        if abs(abs(value) - BAND) <= EPS:
            return Verdict(None, "the causal effect is on the band's edge")
        return Verdict(_yes((abs(value) >= BAND) == pol))
    if query_type == "backadj":
        first, second = value
        if first and second:  # CLadder's convention: the minimal valid set is the right one
            sizes = [len(s) for s in meta.get("given_info") or [[], []]]
            if sizes[0] == sizes[1]:
                return Verdict(None, "both methods are valid adjustments of the same size")
            favoured_smaller = (sizes[0] < sizes[1]) == pol
            return Verdict(_yes(favoured_smaller), CONVENTION)
        if first == second:
            return Verdict(None, "neither method is valid adjustment")
        favoured_valid = first if pol else second
        return Verdict(_yes(favoured_valid))
    if query_type == "det-counterfactual":
        if abs(value - 1) <= EPS:
            return Verdict("yes")
        if abs(value) <= EPS:
            return Verdict("no")
        return Verdict(None, f"the evidence leaves the outcome undecided (P = {float(value):.3f})")
    raise ValueError(f"unknown query type {query_type!r}")
