"""Small statistics helpers: intervals on shares that keep their coverage at 0% and 100% and for
small n (Wilson's score interval for a proportion, Newcombe's interval for a paired difference,
their extensions to means of values in [0, 1]); seeded bootstrap CIs (vectorised over replicates)
of a proportion, a paired difference and a mean; exact McNemar.

The report's intervals on shares are Wilson / Newcombe: a percentile bootstrap of 2 questions
both right is [100, 100], which says the share is known exactly; Wilson's says [34.2, 100]."""

from __future__ import annotations

import hashlib
import math
from statistics import NormalDist
from typing import Any

import numpy as np
import pandas as pd

N_BOOT = 10_000
LEVEL = 0.95
SEED = 0


def _z(level: float) -> float:
    # the standard library's inverse normal (Wichura's AS241, to double precision): scipy.stats
    # would cost every report worker a second of imports
    return NormalDist().inv_cdf(0.5 + level / 2)


def wilson_interval(k: Any, n: Any, *, level: float = LEVEL) -> tuple[np.ndarray, np.ndarray]:
    """Wilson's score interval of k/n, vectorised over arrays of counts (NaN where n == 0).

    k may be fractional: for the mean of n values in [0, 1], k = their sum gives an interval at
    least as wide as the values need (their variance is at most that of 0/1 values of the same
    mean)."""
    kk = np.asarray(k, dtype=np.float64)
    nn = np.asarray(n, dtype=np.float64)
    z2 = _z(level) ** 2
    with np.errstate(divide="ignore", invalid="ignore"):
        p = kk / nn
        centre = (p + z2 / (2 * nn)) / (1 + z2 / nn)
        half = np.sqrt(z2) * np.sqrt(p * (1 - p) / nn + z2 / (4 * nn * nn)) / (1 + z2 / nn)
        lo = np.clip(centre - half, 0.0, 1.0)
        hi = np.clip(centre + half, 0.0, 1.0)
    bad = ~(nn > 0)
    # the formula's exact ends: no successes means a lower bound of 0, all of them an upper of 1
    lo = np.where(kk <= 0, 0.0, lo)
    hi = np.where(kk >= nn, 1.0, hi)
    return np.where(bad, np.nan, lo), np.where(bad, np.nan, hi)


def wilson_proportion(k: int, n: int, *, level: float = LEVEL) -> tuple[float, float]:
    """Wilson's score CI of a proportion k/n: (0.342, 1.0) for 2 of 2, never a point.
    Returns (nan, nan) when n == 0."""
    lo, hi = wilson_interval(k, n, level=level)
    return float(lo), float(hi)


def _square_and_add(
    p1: float, ci1: tuple[float, float], p2: float, ci2: tuple[float, float], phi: float
) -> tuple[float, float]:
    """Newcombe's square-and-add (MOVER) interval of p1 - p2 from the two intervals and the
    correlation phi of the paired estimates."""
    (l1, u1), (l2, u2) = ci1, ci2
    d = p1 - p2
    lo = d - math.sqrt(max(0.0, (p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2))
    hi = d + math.sqrt(max(0.0, (p2 - l2) ** 2 - 2 * phi * (p2 - l2) * (u1 - p1) + (u1 - p1) ** 2))
    return max(-1.0, lo), min(1.0, hi)


def newcombe_paired_difference(
    both: int, only_a: int, only_b: int, neither: int, *, level: float = LEVEL
) -> tuple[float, float]:
    """Newcombe's (1998, method 10) score interval of P(b correct) - P(a correct) for paired 0/1
    outcomes: Wilson intervals of both shares combined with the pairs' correlation. It does not
    collapse when no pair is discordant (2 pairs both right: [-0.66, 0.66]). Newcombe's example
    (36 both, 12 only b, 2 only a, 0 neither) gives 0.0569 to 0.3404. (nan, nan) when n == 0."""
    n = both + only_a + only_b + neither
    if n <= 0:
        return (float("nan"), float("nan"))
    # Newcombe's e, f, g, h with the first of the pair b: b right and a right, b only, a only
    e, f, g, h = both, only_b, only_a, neither
    p1, p2 = (e + f) / n, (e + g) / n
    margins = (e + f) * (g + h) * (e + g) * (f + h)
    cross = e * h - f * g
    # his correction of the correlation's numerator: cross - n/2 above n/2, 0 up to it
    num = cross - n / 2 if cross > n / 2 else (cross if cross < 0 else 0.0)
    phi = num / math.sqrt(margins) if margins > 0 else 0.0
    return _square_and_add(
        p1,
        wilson_proportion(e + f, n, level=level),
        p2,
        wilson_proportion(e + g, n, level=level),
        phi,
    )


def wilson_mean(values: Any, *, level: float = LEVEL) -> tuple[float, float]:
    """Wilson's interval of the mean of per-question values in [0, 1] (a share of a vote's
    samples, say), with their sum as the count: never a point, however alike the values."""
    x = np.asarray(values, dtype=np.float64)
    if len(x) == 0:
        return (float("nan"), float("nan"))
    return wilson_proportion(float(x.sum()), len(x), level=level)  # type: ignore[arg-type]


def paired_mean_difference(x: Any, y: Any, *, level: float = LEVEL) -> tuple[float, float]:
    """Interval of mean(x) - mean(y) for paired per-question values in [0, 1]: the square-and-add
    of the two `wilson_mean` intervals with the values' correlation (0 where it is undefined), as
    Newcombe's paired interval is for 0/1 outcomes."""
    a = np.asarray(x, dtype=np.float64)
    b = np.asarray(y, dtype=np.float64)
    if len(a) == 0:
        return (float("nan"), float("nan"))
    phi = 0.0
    if len(a) > 1 and a.std() > 0 and b.std() > 0:
        phi = float(np.corrcoef(a, b)[0, 1])
    return _square_and_add(
        float(a.mean()),
        wilson_mean(a, level=level),
        float(b.mean()),
        wilson_mean(b, level=level),
        phi,
    )


def _rng(seed: int, *key: int) -> np.random.Generator:
    # Seeded by the cell's own counts, so a CI does not depend on which other cells were computed.
    return np.random.default_rng([seed, *key])


def bootstrap_proportion(
    k: int, n: int, *, n_boot: int = N_BOOT, seed: int = SEED, level: float = LEVEL
) -> tuple[float, float]:
    """Percentile bootstrap CI of a proportion k/n (questions resampled with replacement).

    The number of successes in a resample of n 0/1 values with k ones is Binomial(n, k/n), so the
    replicates are drawn as binomial counts: the same distribution as resampling the rows, without
    materialising an n x n_boot matrix. Returns (nan, nan) when n == 0.
    """
    if n <= 0:
        return (float("nan"), float("nan"))
    reps = _rng(seed, k, n).binomial(n, k / n, size=n_boot) / n
    a = (1 - level) / 2
    lo, hi = np.quantile(reps, [a, 1 - a])
    return float(lo), float(hi)


def bootstrap_paired_difference(
    both: int,
    only_a: int,
    only_b: int,
    neither: int,
    *,
    n_boot: int = N_BOOT,
    seed: int = SEED,
    level: float = LEVEL,
) -> tuple[float, float]:
    """Percentile bootstrap CI of P(b correct) - P(a correct) for paired 0/1 outcomes.

    Resampling the pairs is a multinomial draw over the four cells (both, only a, only b, neither).
    """
    n = both + only_a + only_b + neither
    if n <= 0:
        return (float("nan"), float("nan"))
    p = np.array([both, only_a, only_b, neither], dtype=float) / n
    reps = _rng(seed, both, only_a, only_b, neither).multinomial(n, p, size=n_boot)
    diff = (reps[:, 2] - reps[:, 1]) / n
    a = (1 - level) / 2
    lo, hi = np.quantile(diff, [a, 1 - a])
    return float(lo), float(hi)


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value: binomial test of b successes in b + c discordant pairs."""
    n = b + c
    if n == 0:
        return 1.0
    # p = 1/2 makes the binomial symmetric: twice the smaller tail, in exact integers
    tail = sum(math.comb(n, i) for i in range(min(b, c) + 1))
    return min(1.0, 2 * tail / 2**n)


def add_proportion_ci(
    df: pd.DataFrame, k: str = "n_correct", n: str = "n", prefix: str = "", level: float = LEVEL
) -> pd.DataFrame:
    """Add `<prefix>ci_lo`, `<prefix>ci_hi` (Wilson's CI of k/n) to a copy of df."""
    out = df.copy()
    lo, hi = wilson_interval(out[k].to_numpy(float), out[n].to_numpy(float), level=level)
    out[f"{prefix}ci_lo"] = lo
    out[f"{prefix}ci_hi"] = hi
    return out


def bootstrap_mean(
    values: Any, *, n_boot: int = N_BOOT, seed: int = SEED, level: float = LEVEL
) -> tuple[float, float]:
    """Percentile bootstrap CI of the mean of `values` (units resampled with replacement).

    Any real values (a graph's SHD, its F1); NaN values are the caller's to leave out. Seeded by
    the values themselves, so a CI does not depend on which other cells were computed. Returns
    (nan, nan) when there are no values.
    """
    x = np.asarray(values, dtype=np.float64)
    n = len(x)
    if n == 0:
        return (float("nan"), float("nan"))
    if np.isnan(x).any():
        raise ValueError("bootstrap_mean: leave NaN values out before resampling")
    key = int.from_bytes(hashlib.sha256(x.tobytes()).digest()[:8], "big")
    rng = np.random.default_rng([seed, n, key])
    means = np.empty(n_boot)
    step = max(1, 2_000_000 // n)  # replicates per chunk, to bound memory
    for i in range(0, n_boot, step):
        m = min(step, n_boot - i)
        means[i : i + m] = x[rng.integers(0, n, size=(m, n))].mean(axis=1)
    a = (1 - level) / 2
    lo, hi = np.quantile(means, [a, 1 - a])
    return float(lo), float(hi)
