"""Small statistics helpers: seeded bootstrap CIs (vectorised over replicates) of a proportion, a
paired difference and a mean; exact McNemar."""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import pandas as pd

N_BOOT = 10_000
LEVEL = 0.95
SEED = 0


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
    if b + c == 0:
        return 1.0
    from scipy.stats import binomtest  # slow to import; only needed here

    return float(binomtest(b, b + c, 0.5, alternative="two-sided").pvalue)


def add_proportion_ci(
    df: pd.DataFrame, k: str = "n_correct", n: str = "n", prefix: str = "", **kw: Any
) -> pd.DataFrame:
    """Add `<prefix>ci_lo`, `<prefix>ci_hi` (bootstrap CI of k/n) to a copy of df."""
    out = df.copy()
    cis = [
        bootstrap_proportion(int(kk), int(nn), **kw) for kk, nn in zip(out[k], out[n], strict=True)
    ]
    out[f"{prefix}ci_lo"] = [c[0] for c in cis]
    out[f"{prefix}ci_hi"] = [c[1] for c in cis]
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
