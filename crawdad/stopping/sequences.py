"""Anytime-valid confidence sequences for the mean of a finite population sampled without
replacement: the hedged betting capital process of Waudby-Smith and Ramdas (2023), "Estimating
means of bounded random variables by betting" (JRSS-B), section 6 (sampling without replacement).

For a candidate population mean m, after t - 1 of the N values have been seen (their sum is
S_{t-1}), the mean of the values not yet seen would be

    mu_t(m) = (N m - S_{t-1}) / (N - t + 1),

and the next value's expectation, in a uniformly random order, is exactly that. Two gamblers bet
against m: one that the next value is above mu_t(m) (capital K+), one that it is below (K-):

    K+_t(m) = prod_{i <= t} (1 + l+_i (x_i - mu_i(m))),   K-_t(m) = prod (1 - l-_i (x_i - mu_i(m)))

with predictable bets l_i (the predictable plug-in, PrPl: sqrt(2 log(2/alpha) / (sigma^2_{i-1} i
log(1 + i))) from the regularised running variance) truncated at c / mu_i(m) and c / (1 - mu_i(m))
(c = 1/2), so that neither gambler can go bankrupt. If m is the true mean both are nonnegative
martingales; the hedged capital max(theta K+, (1 - theta) K-) reaches 1/alpha with probability at
most alpha (Ville's inequality), at any time at all. The confidence set at time t is every m whose
hedged capital has not reached 1/alpha; K+ falls and K- rises with m, so the set is an interval
[lower_t, upper_t], found here over a grid of candidate means. The sequence is intersected over
time (the running max of lower, min of upper), which keeps the guarantee, and with the logical
bounds of what is already known (the values seen plus 0 or 1 for every value not yet seen), so
that at t = N it is exactly the population mean.

The grid is pruned as it goes: a candidate excluded once is excluded for good, so only the
candidates still inside the interval are carried from one block of steps to the next. Each block
is one vectorised numpy pass over (steps x candidates).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

COLUMNS = ["questions", "estimate", "lower", "upper"]
# grid step 1/5000 of the range: 0.02 points of an accuracy, 0.04 of a difference (the bounds
# are conservative by up to one step; a coarser 1/2000 grid cost about 1.5 points of share used
# at effect 0 in bench_stopping.py)
DEFAULT_BREAKS = 5000
_BLOCK = 128  # steps per vectorised pass; the grid is pruned between passes
_TRUNCATION = 0.5  # c: bets are capped at c / mu and c / (1 - mu)
_THETA = 0.5  # weight of the upward gambler in the hedged capital


def _check(x: np.ndarray, population: int, alpha: float) -> None:
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha}")
    if population < 1:
        raise ValueError(f"population must be at least 1, got {population}")
    if x.ndim != 1:
        raise ValueError("outcomes must be one-dimensional")
    if len(x) > population:
        raise ValueError(f"{len(x)} outcomes from a population of {population}")
    if len(x) and (np.isnan(x).any() or x.min() < 0 or x.max() > 1):
        raise ValueError("outcomes must lie in [0, 1] (no NaN)")


class ConfidenceSequence:
    """A betting confidence sequence for the mean of `population` values in [0, 1], fed in the
    order they were sampled (uniformly at random, without replacement). `extend` takes the next
    values and returns the sequence at each of them; the state carried between calls is the
    capital of the candidates still inside the interval, so feeding the outcomes in pieces gives
    the same sequence as feeding them at once."""

    def __init__(self, population: int, alpha: float, *, breaks: int = DEFAULT_BREAKS) -> None:
        _check(np.zeros(0), population, alpha)
        self.population = int(population)
        self.alpha = float(alpha)
        self.grid = np.linspace(0.0, 1.0, breaks + 1)
        self._lo = 0  # first grid index still inside (all below are excluded for good)
        self._hi = breaks  # last grid index still inside
        self._log_up = np.zeros(breaks + 1)  # log K+ of the candidates lo..hi
        self._log_down = np.zeros(breaks + 1)  # log K- of the candidates lo..hi
        self._empty = False  # the running intersection ran empty (a miscoverage event)
        self.t = 0  # values seen
        self._sum = 0.0  # their sum
        self._mu_hat = 0.5  # regularised running mean: (1/2 + sum x) / (t + 1)
        self._ss = 0.25  # (1/4 + sum (x_i - mu_hat_i)^2): regularised running variance * (t + 1)
        self._lower = 0.0
        self._upper = 1.0

    def _bets(self, x: np.ndarray) -> np.ndarray:
        """The predictable plug-in bet of each step (before truncation), from the regularised
        running mean and variance of the values before it."""
        t0 = self.t
        n = len(x)
        t = np.arange(t0 + 1, t0 + n + 1, dtype=np.float64)
        mu_hat = (0.5 + self._sum + np.cumsum(x)) / (t + 1)  # after step t
        ss = self._ss + np.cumsum((x - mu_hat) ** 2)  # after step t
        var_before = np.concatenate(([self._ss], ss[:-1])) / t  # sigma^2_{t-1} = ss_{t-1} / t
        self._mu_hat = float(mu_hat[-1])
        self._ss = float(ss[-1])
        log_term = 2 * math.log(2 / self.alpha)
        return np.sqrt(log_term / (var_before * t * np.log1p(t)))

    def extend(self, outcomes: Sequence[float] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Feed the next outcomes; return (lower, upper) after each of them."""
        x = np.asarray(outcomes, dtype=np.float64).reshape(-1)
        _check(x, self.population - self.t, self.alpha)
        lowers = np.empty(len(x))
        uppers = np.empty(len(x))
        for start in range(0, len(x), _BLOCK):
            block = x[start : start + _BLOCK]
            lo, up = self._block(block)
            lowers[start : start + len(block)] = lo
            uppers[start : start + len(block)] = up
        return lowers, uppers

    def _block(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        N = self.population
        n = len(x)
        t0 = self.t
        t = np.arange(t0 + 1, t0 + n + 1, dtype=np.float64)
        s_after = self._sum + np.cumsum(x)  # S_t
        s_before = s_after - x  # S_{t-1}
        lam = self._bets(x)
        logical_lo = s_after / N
        logical_hi = (s_after + (N - t)) / N

        if self._empty or self._lo > self._hi:
            lo_idx = np.full(n, self._lo)
            hi_idx = np.full(n, self._hi)
        else:
            m = self.grid[self._lo : self._hi + 1]
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                mu = (N * m[None, :] - s_before[:, None]) / (N - t[:, None] + 1)
                dev = x[:, None] - mu
                lam_up = np.minimum(lam[:, None], _TRUNCATION / mu)
                lam_down = np.minimum(lam[:, None], _TRUNCATION / (1 - mu))
                log_up = self._log_up[None, self._lo : self._hi + 1] + np.cumsum(
                    np.log1p(lam_up * dev), axis=0
                )
                log_down = self._log_down[None, self._lo : self._hi + 1] + np.cumsum(
                    np.log1p(-lam_down * dev), axis=0
                )
            threshold = math.log(1 / self.alpha)
            below = m[None, :] < logical_lo[:, None]  # impossible: fewer ones than already seen
            above = m[None, :] > logical_hi[:, None]  # impossible: more than the rest could add
            # Outside the possible range mu leaves [0, 1] and the capitals mean nothing; inside
            # it, K+ falls and K- rises with m, so the rejected candidates are a prefix (K+) and
            # a suffix (K-) of the grid.
            rej_lo = below | (~above & (np.log(_THETA) + log_up >= threshold))
            rej_hi = above | (~below & (np.log(1 - _THETA) + log_down >= threshold))
            width = len(m)
            # leading rejected candidates from the left, trailing from the right
            first_in = np.where(rej_lo.all(axis=1), width, np.argmin(rej_lo, axis=1))
            last_in = np.where(
                rej_hi.all(axis=1), -1, width - 1 - np.argmin(rej_hi[:, ::-1], axis=1)
            )
            lo_idx = np.maximum.accumulate(self._lo + first_in)  # running intersection
            hi_idx = np.minimum.accumulate(self._hi - (width - 1 - last_in))
            new_lo, new_hi = int(lo_idx[-1]), int(hi_idx[-1])
            if new_lo <= new_hi:
                self._log_up[new_lo : new_hi + 1] = log_up[
                    -1, new_lo - self._lo : new_hi - self._lo + 1
                ]
                self._log_down[new_lo : new_hi + 1] = log_down[
                    -1, new_lo - self._lo : new_hi - self._lo + 1
                ]
            else:
                self._empty = True
            self._lo, self._hi = new_lo, new_hi

        grid = self.grid
        # A candidate excluded means the bound lies beyond it: report the last excluded one
        # (conservative by at most one grid step).
        lower = np.where(lo_idx > 0, grid[np.clip(lo_idx - 1, 0, len(grid) - 1)], 0.0)
        upper = np.where(hi_idx < len(grid) - 1, grid[np.clip(hi_idx + 1, 0, len(grid) - 1)], 1.0)
        lower = np.maximum.accumulate(np.maximum(np.maximum(lower, logical_lo), self._lower))
        upper = np.minimum.accumulate(np.minimum(np.minimum(upper, logical_hi), self._upper))
        crossed = lower > upper  # only when the intersection ran empty: hold the estimate
        if crossed.any():
            mid = s_after / t
            lower = np.where(crossed, np.minimum(mid, upper), lower)
            upper = np.where(crossed, lower, upper)
        self.t += n
        self._sum = float(s_after[-1])
        if self.t == N:  # every value known: the exact mean
            lower[-1] = upper[-1] = self._sum / N
        self._lower, self._upper = float(lower[-1]), float(upper[-1])
        return lower, upper


def accuracy_sequence(
    outcomes: Sequence[float] | np.ndarray,
    population: int,
    alpha: float,
    *,
    breaks: int = DEFAULT_BREAKS,
) -> pd.DataFrame:
    """The confidence sequence for the mean of a finite population of `population` values in
    [0, 1] (a run's accuracy over its selected questions), from the first n of them in a uniformly
    random order without replacement.

    Returns one row per outcome: `questions` (1..n), `estimate` (the running mean), `lower`,
    `upper`. With probability at least 1 - alpha, at every n at once, [lower, upper] holds the
    mean of all `population` values; at n = population it is exactly that mean. `attrs` holds
    `alpha`, `population` and `kind` ("accuracy").
    """
    x = np.asarray(outcomes, dtype=np.float64).reshape(-1)
    _check(x, population, alpha)
    cs = ConfidenceSequence(population, alpha, breaks=breaks)
    lower, upper = cs.extend(x)
    n = np.arange(1, len(x) + 1)
    frame = pd.DataFrame(
        {
            "questions": n,
            "estimate": np.cumsum(x) / n if len(x) else np.zeros(0),
            "lower": lower,
            "upper": upper,
        }
    )
    frame.attrs.update({"alpha": float(alpha), "population": int(population), "kind": "accuracy"})
    return frame


def to_unit(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Paired differences a - b in [-1, 1] mapped into [0, 1]: (a - b + 1) / 2."""
    return (np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64) + 1) / 2


def difference_sequence(
    a: Sequence[float] | np.ndarray,
    b: Sequence[float] | np.ndarray,
    population: int,
    alpha: float,
    *,
    breaks: int = DEFAULT_BREAKS,
) -> pd.DataFrame:
    """The confidence sequence for the mean paired difference a - b over a finite population of
    `population` pairs (a variant's accuracy minus the baseline's on the same questions), from
    the first n pairs in a uniformly random order. Outcomes lie in [0, 1] (0/1 for correct).

    The differences are mapped into [0, 1] as (a - b + 1) / 2, the accuracy sequence is run on
    them and mapped back into [-1, 1]. Same columns as `accuracy_sequence`; `kind` is
    "difference".
    """
    xa = np.asarray(a, dtype=np.float64).reshape(-1)
    xb = np.asarray(b, dtype=np.float64).reshape(-1)
    if xa.shape != xb.shape:
        raise ValueError(f"a and b must pair up: {len(xa)} and {len(xb)} outcomes")
    _check(xa, population, alpha)
    _check(xb, population, alpha)
    unit = accuracy_sequence(to_unit(xa, xb), population, alpha, breaks=breaks)
    frame = pd.DataFrame(
        {
            "questions": unit["questions"],
            "estimate": 2 * unit["estimate"] - 1,
            "lower": 2 * unit["lower"] - 1,
            "upper": 2 * unit["upper"] - 1,
        }
    )
    frame.attrs.update({"alpha": float(alpha), "population": int(population), "kind": "difference"})
    return frame
