"""Sequential tests by betting (e-processes) for a paired difference: what decides better, worse
and equivalent for the models' target.

A variant and the baseline answer the same questions; per question D = a - b is +1 (only the
variant right), -1 (only the baseline right) or 0 (both right or both wrong: concordant). The
models' expected difference is d = E[D] = P(+1) - P(-1). Four one-sided nulls, each tested by a
gambler who bets, before each pair, a predictable fraction lambda >= 0 of its wealth on a
statistic Z whose expectation is at most 0 under its null:

| the claim | its null | Z |
| --- | --- | --- |
| better | d <= 0 | D |
| worse | d >= 0 | -D |
| above -margin | d <= -margin | D + margin |
| below +margin | d >= +margin | margin - D |

The wealth K_t = prod_{i <= t} (1 + lambda_i Z_i) stays positive (lambda_i < 1 / |min Z|) and,
under the null, E[1 + lambda_i Z_i | the pairs before i] = 1 + lambda_i E[Z_i] <= 1: a nonnegative
supermartingale in the filtration of all pairs, so by Ville's inequality it ever reaches 1 / a
with probability at most a, however the looks and the stop are chosen (Shafer 2021, "Testing by
betting"; Ramdas, Grunwald, Vovk and Shafer 2023, "Game-theoretic statistics and safe
anytime-valid inference"; Waudby-Smith and Ramdas 2023, "Estimating means of bounded random
variables by betting", JRSS-B). For better and worse only the discordant pairs move the wealth
(Z = 0 on a concordant pair multiplies it by 1): the test is a sequential sign test (McNemar's)
by betting, and conditioning on discordance costs nothing in validity because the wealth is a
supermartingale in the filtration of every pair, concordant ones included.

**The bets.** A mixture of gamblers (each an e-process; their weighted mean is one too, Vovk and
Wang 2021). The main gambler (weight 1/2) is tuned to the horizon: crawdad knows the most pairs
it can see (the pool's size, N), and a constant bet lambda makes log K_N about lambda S_N -
lambda^2 V_N / 2 (S the sum of Z, V of Z^2), which reaches the threshold c with the least S_N at
lambda = sqrt(2 c / V_N). V_N is not known in advance; its predictable estimate N v_{t-1} (v the
regularised running mean of Z^2 over the pairs before t) stands in. The others (weight 1/8 each)
bet 2, 4, 8 and 16 times as much: they stop early when the effect is large. Every bet uses only
the pairs before it and the fixed N, so every gambler is an e-process, at every t <= N and
beyond. The horizon only tunes the bets (the most power at N); it never enters the guarantee.
"""

from __future__ import annotations

import math

import numpy as np

CLAIMS = ("better", "worse", "above", "below")  # above -margin, below +margin
HORIZON_WEIGHT = 0.5  # the main gambler's share of the initial wealth
MULTIPLES = (2.0, 4.0, 8.0, 16.0)  # the other gamblers' bets, in multiples of the main one's
_CAP = 0.8  # the largest fraction of the wealth a gambler stakes (of 1 / |min Z|)
_PRIOR_PAIRS = 4.0  # pseudo-pairs in the running mean of Z^2 ...
_PRIOR_SQUARE = 0.25  # ... at this value (a pool with a quarter of its pairs discordant)


def threshold(alpha: float) -> float:
    """log(2 / alpha): each side of a comparison at alpha spends alpha / 2 (better or worse at a
    true difference of 0; worse or equivalent beyond the margin), as the hedged sequence does."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha}")
    return math.log(2 / alpha)


def log_wealth(z: np.ndarray, zmin: float, alpha: float, horizon: int) -> np.ndarray:
    """The log of the mixture gamblers' wealth after each step, against "E[z] <= 0", for each row
    of `z` (shape (sequences, steps); every value at least `zmin` < 0)."""
    z = np.atleast_2d(np.asarray(z, dtype=np.float64))
    if horizon < 1:
        raise ValueError(f"horizon must be at least 1, got {horizon}")
    c = threshold(alpha) + math.log(1 / HORIZON_WEIGHT)
    t = np.arange(z.shape[1], dtype=np.float64)  # pairs before each step
    squares = np.cumsum(z**2, axis=1) - z**2  # sum of Z^2 before each step
    v = (_PRIOR_PAIRS * _PRIOR_SQUARE + squares) / (_PRIOR_PAIRS + t)
    base = np.sqrt(2 * c / (horizon * v))
    cap = _CAP / -zmin if zmin < 0 else math.inf  # z >= 0 (a margin of 1): no stake is lost
    rest = (1 - HORIZON_WEIGHT) / len(MULTIPLES)
    logs = []
    for weight, multiple in ((HORIZON_WEIGHT, 1.0), *((rest, m) for m in MULTIPLES)):
        lam = np.minimum(multiple * base, cap)
        logs.append(math.log(weight) + np.cumsum(np.log1p(lam * z), axis=1))
    top = logs[0].copy()  # the log of the weighted mean, without overflow
    for x in logs[1:]:
        np.maximum(top, x, out=top)
    total = np.zeros_like(top)
    for x in logs:
        total += np.exp(x - top)
    return top + np.log(total)


def statistics(d: np.ndarray, margin: float) -> dict[str, tuple[np.ndarray, float]]:
    """Each claim's Z from the paired differences `d` (in [-1, 1]: -1, 0 or 1 for 0/1 outcomes),
    with its least value."""
    return {
        "better": (d, -1.0),
        "worse": (-d, -1.0),
        "above": (d + margin, margin - 1.0),
        "below": (margin - d, margin - 1.0),
    }


def evidence(
    a: np.ndarray, b: np.ndarray, alpha: float, horizon: int, margin: float
) -> dict[str, np.ndarray]:
    """The running maximum of each claim's log wealth (`CLAIMS`) after each pair, for rows of
    paired 0/1 outcomes `a` (the variant) and `b` (the baseline), of shape (sequences, steps) or
    (steps,). A claim is made once its entry reaches `threshold(alpha)`; the claims that are
    never made (margin 0: no equivalence) are -inf."""
    xa = np.asarray(a, dtype=np.float64)
    xb = np.asarray(b, dtype=np.float64)
    if xa.shape != xb.shape:
        raise ValueError(f"a and b must pair up: shapes {xa.shape} and {xb.shape}")
    one = xa.ndim == 1
    d = np.atleast_2d(xa - xb)
    out: dict[str, np.ndarray] = {}
    for claim, (z, zmin) in statistics(d, margin).items():
        if claim in ("above", "below") and margin <= 0:
            out[claim] = np.full(d.shape, -np.inf)
        else:
            out[claim] = np.maximum.accumulate(log_wealth(z, zmin, alpha, horizon), axis=1)
    return {k: v[0] for k, v in out.items()} if one else out
