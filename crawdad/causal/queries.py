"""The exact quantity behind each CLadder query type, in the orientation its question asks about.

Each function takes the model and the question's `meta` and returns the number CLadder stores as
`meta.groundtruth` (with the same sign conventions), computed exactly from the model's tables.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from crawdad.causal.model import BinaryModel, Number, Ref
from crawdad.errors import DataError

X, Y = "X", "Y"


def _flag(meta: Mapping[str, Any], key: str) -> int:
    """CLadder's booleans (treated, result, baseline, polarity...): absent means true."""
    return int(bool(meta.get(key, True)))


def _sign(meta: Mapping[str, Any], *keys: str) -> int:
    """-1 for each of the named flags that is false: the question asks about the other value."""
    s = 1
    for k in keys:
        s *= 1 if _flag(meta, k) else -1
    return s


def _tx(meta: Mapping[str, Any]) -> tuple[str, str]:
    return str(meta.get("treatment") or X), str(meta.get("outcome") or Y)


def marginal(m: BinaryModel, meta: Mapping[str, Any]) -> Number:
    """P(Y=1)."""
    return m.prob({_tx(meta)[1]: 1})


def correlation(m: BinaryModel, meta: Mapping[str, Any]) -> Number:
    """P(Y=1 | X=1) - P(Y=1 | X=0) (negated for a question about X=0 or Y=0)."""
    x, y = _tx(meta)
    diff = m.prob({y: 1}, {x: 1}) - m.prob({y: 1}, {x: 0})
    return _sign(meta, "treated", "result") * diff


def exp_away(m: BinaryModel, meta: Mapping[str, Any]) -> Number:
    """P(Y=r | X=t, C=b) - P(Y=r | C=b), C the collider."""
    x, y = _tx(meta)
    c = str(meta.get("collider") or "V3")
    r, t, b = _flag(meta, "result"), _flag(meta, "treated"), _flag(meta, "baseline")
    return m.prob({y: r}, {x: t, c: b}) - m.prob({y: r}, {c: b})


def ate(m: BinaryModel, meta: Mapping[str, Any]) -> Number:
    """E[Y | do(X=t)] - E[Y | do(X=1-t)]."""
    x, y = _tx(meta)
    t = _flag(meta, "treated")
    diff = m.prob({y: 1}, do={x: t}) - m.prob({y: 1}, do={x: 1 - t})
    return _sign(meta, "result") * diff


def ett(m: BinaryModel, meta: Mapping[str, Any]) -> Number:
    """E[Y_{X=t} - Y_{X=1-t} | X=t]: the effect on those who got t (CLadder's stored sign)."""
    x, y = _tx(meta)
    t = _flag(meta, "treated")
    factual = m.prob({y: 1}, {x: t})  # Y_{X=t} = Y where X=t (consistency)
    other = m.counterfactual([{}, {x: 1 - t}], event=[(1, y, 1)], evidence=[(0, x, t)])
    return _sign(meta, "result") * (factual - other)


def _mediators(m: BinaryModel, meta: Mapping[str, Any]) -> list[str]:
    x, y = _tx(meta)
    given = meta.get("mediators")
    if given:
        return [str(v) for v in given]
    return sorted(m.descendants(x) & ({v for v in m.variables if y in m.descendants(v)}))


def nde(m: BinaryModel, meta: Mapping[str, Any]) -> Number:
    """E[Y_{X=1, M=M_{X=0}}] - E[Y_{X=0}]: the natural direct effect."""
    x, y = _tx(meta)
    meds = _mediators(m, meta)
    worlds: list[dict[str, int | Ref]] = [{x: 0}, {x: 1, **{v: Ref(0, v) for v in meds}}]
    return m.counterfactual(worlds, event=[(1, y, 1)]) - m.prob({y: 1}, do={x: 0})


def nie(m: BinaryModel, meta: Mapping[str, Any]) -> Number:
    """E[Y_{X=0, M=M_{X=1}}] - E[Y_{X=0}]: the natural indirect effect."""
    x, y = _tx(meta)
    meds = _mediators(m, meta)
    worlds: list[dict[str, int | Ref]] = [{x: 1}, {x: 0, **{v: Ref(0, v) for v in meds}}]
    return m.counterfactual(worlds, event=[(1, y, 1)]) - m.prob({y: 1}, do={x: 0})


def collider_bias(m: BinaryModel, meta: Mapping[str, Any]) -> Number:
    """The causal effect the question asks about: E[Y | do(X=1)] - E[Y | do(X=0)] (0 when X
    does not cause Y, whatever selecting on the collider shows)."""
    x, y = _tx(meta)
    return m.prob({y: 1}, do={x: 1}) - m.prob({y: 1}, do={x: 0})


def collider_shown(m: BinaryModel, meta: Mapping[str, Any]) -> tuple[Number, Number]:
    """What a collider_bias question shows: (difference, Pearson correlation) of X and Y among
    the selected (C=b), each with the question's sign."""
    x, y = _tx(meta)
    c = str(meta.get("collider") or "V3")
    b = _flag(meta, "baseline")
    s = 1 if _flag(meta, "treated") == _flag(meta, "result") else -1
    p11 = m.prob({x: 1, y: 1}, {c: b})
    px, py = m.prob({x: 1}, {c: b}), m.prob({y: 1}, {c: b})
    diff = m.prob({y: 1}, {x: 1, c: b}) - m.prob({y: 1}, {x: 0, c: b})
    cov = p11 - px * py
    var = px * (1 - px) * py * (1 - py)
    corr = cov / var**0.5 if var else 0.0
    return s * diff, s * corr


def backdoor_valid(m: BinaryModel, adjust: Sequence[str], x: str = X, y: str = Y) -> bool:
    """Pearl's backdoor criterion: no descendant of X in the set, and every path from X to Y that
    starts with an arrow into X is blocked given the set."""
    z = set(adjust)
    if z & m.descendants(x):
        return False
    return not any(_open(m, path, z) for path in _paths(m, x, y) if path[1] in m.parents[x])


def _paths(m: BinaryModel, a: str, b: str) -> list[list[str]]:
    nbrs = {v: set(m.parents[v]) | set(m.children(v)) for v in m.variables}
    out: list[list[str]] = []

    def walk(path: list[str]) -> None:
        if path[-1] == b:
            out.append(path)
            return
        for n in sorted(nbrs[path[-1]]):
            if n not in path:
                walk([*path, n])

    walk([a])
    return out


def _open(m: BinaryModel, path: list[str], z: set[str]) -> bool:
    for prev, mid, nxt in zip(path, path[1:], path[2:], strict=False):
        collider = prev in m.parents[mid] and nxt in m.parents[mid]
        if collider and not ({mid} | m.descendants(mid)) & z:
            return False
        if not collider and mid in z:
            return False
    return True


def backadj(m: BinaryModel, meta: Mapping[str, Any]) -> tuple[bool, bool]:
    """Whether Method 1's and Method 2's adjustment sets (meta.given_info) are valid."""
    x, y = _tx(meta)
    sets = meta.get("given_info")
    if not (isinstance(sets, list) and len(sets) == 2):
        raise DataError("a backadj question needs meta.given_info = [method 1 set, method 2 set]")
    return backdoor_valid(m, sets[0], x, y), backdoor_valid(m, sets[1], x, y)


def det_counterfactual(m: BinaryModel, meta: Mapping[str, Any]) -> Number:
    """P(Y_{X=a} = polarity | evidence): 1 or 0 when the structural equations decide it."""
    x, y = _tx(meta)
    action, want = int(meta.get("action", 1)), int(meta.get("polarity", 1))
    evidence = [(0, v, int(val)) for v, val in (meta.get("given_info") or {}).items()]
    return m.counterfactual([{}, {x: action}], event=[(1, y, want)], evidence=evidence)


QUANTITY: dict[str, Callable[[BinaryModel, Mapping[str, Any]], Any]] = {
    "marginal": marginal,
    "correlation": correlation,
    "exp_away": exp_away,
    "ate": ate,
    "backadj": backadj,
    "collider_bias": collider_bias,
    "ett": ett,
    "nde": nde,
    "nie": nie,
    "det-counterfactual": det_counterfactual,
}
