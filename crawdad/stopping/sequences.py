"""Anytime-valid confidence sequences for a mean, by betting: the hedged capital process of
Waudby-Smith and Ramdas (2023), "Estimating means of bounded random variables by betting"
(JRSS-B). Two targets:

- **the models** (`population=None`): the expected value of i.i.d. outcomes in [0, 1] (section 4:
  the expected accuracy of the models' answers to the run's pool of questions, drawn in a random
  order, under its settings: `crawdad.stopping.claims`). The next value's
  expectation under a candidate mean m is m itself; nothing closes the sequence, however many
  values it sees.
- **this run** (`population=N`): the mean of a finite population of N values sampled without
  replacement (section 6: what a full pass over the run's selected questions would report). The
  population may shrink as the values come (an array of N per value: a question found to have no
  exact answer leaves it), and at t = N the sequence is the exact mean.

For the finite population:

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

For the models the same, with mu_t(m) = m and no logical bounds but [0, 1].

When the running intersection runs empty (the candidates every step left are all excluded: a
miss, which happens with probability at most alpha) the sequence has contradicted itself: its
bounds are NaN from there on and `contradicted` is True. It never shows a point in its place.

The grid is pruned as it goes: a candidate excluded once is excluded for good, so only the
candidates still inside the interval are carried from one block of steps to the next. Each block
is one vectorised numpy pass over (steps x candidates).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

COLUMNS = ["questions", "estimate", "lower", "upper", "contradicted"]
# grid step 1/5000 of the range: 0.02 points of an accuracy, 0.04 of a difference (the bounds
# are conservative by up to one step; a coarser 1/2000 grid cost about 1.5 points of share used
# at effect 0 in bench_stopping.py)
DEFAULT_BREAKS = 5000
_BLOCK = 128  # steps per vectorised pass; the grid is pruned between passes
TRUNCATION = 0.5  # c: bets are capped at c / mu and c / (1 - mu)
THETA = 0.5  # weight of the upward gambler in the hedged capital


def _check(x: np.ndarray, population: int | None, alpha: float) -> None:
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha}")
    if population is not None and population < 1:
        raise ValueError(f"population must be at least 1, got {population}")
    if x.ndim != 1:
        raise ValueError("outcomes must be one-dimensional")
    if population is not None and len(x) > population:
        raise ValueError(f"{len(x)} outcomes from a population of {population}")
    if len(x) and (np.isnan(x).any() or x.min() < 0 or x.max() > 1):
        raise ValueError("outcomes must lie in [0, 1] (no NaN)")


class ConfidenceSequence:
    """A betting confidence sequence for the mean of `population` values in [0, 1], fed in the
    order they were sampled (uniformly at random, without replacement), or, with
    `population=None`, for the expected value of i.i.d. values in [0, 1]. `extend` takes the next
    values and returns the sequence at each of them; the state carried between calls is the
    capital of the candidates still inside the interval, so feeding the outcomes in pieces gives
    the same sequence as feeding them at once."""

    def __init__(
        self, population: int | None, alpha: float, *, breaks: int = DEFAULT_BREAKS
    ) -> None:
        _check(np.zeros(0), population, alpha)
        self.population = None if population is None else int(population)  # None: i.i.d.
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

    def extend(
        self,
        outcomes: Sequence[float] | np.ndarray,
        populations: Sequence[int] | np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Feed the next outcomes; return (lower, upper) after each of them (NaN where the
        running intersection has run empty: see `contradicted`). `populations`: the finite
        population when each outcome came (it may only shrink, never below the outcomes seen);
        None keeps the one it has. Refused for an i.i.d. sequence."""
        x = np.asarray(outcomes, dtype=np.float64).reshape(-1)
        pops = self._populations(x, populations)
        _check(x, None if pops is None or not len(x) else int(pops[0]) - self.t, self.alpha)
        lowers = np.empty(len(x))
        uppers = np.empty(len(x))
        for start in range(0, len(x), _BLOCK):
            block = x[start : start + _BLOCK]
            part = None if pops is None else pops[start : start + _BLOCK]
            lo, up = self._block(block, part)
            lowers[start : start + len(block)] = lo
            uppers[start : start + len(block)] = up
        return lowers, uppers

    @property
    def contradicted(self) -> bool:
        """Has the running intersection run empty (a miss: every candidate excluded)?"""
        return self._empty

    def _populations(
        self, x: np.ndarray, populations: Sequence[int] | np.ndarray | None
    ) -> np.ndarray | None:
        if self.population is None:
            if populations is not None:
                raise ValueError("an i.i.d. sequence (population=None) has no population to shrink")
            return None
        if populations is None:
            return np.full(len(x), self.population, dtype=np.float64)
        pops = np.asarray(populations, dtype=np.float64).reshape(-1)
        if len(pops) != len(x):
            raise ValueError(f"{len(pops)} populations for {len(x)} outcomes")
        if len(pops) and (pops[0] > self.population or (np.diff(pops) > 0).any()):
            raise ValueError("a population may only shrink")
        seen = self.t + np.arange(1, len(x) + 1)
        if (pops < seen).any():
            raise ValueError("a population smaller than the outcomes already seen")
        if len(pops):
            self.population = int(pops[-1])
        return pops

    def _block(self, x: np.ndarray, pops: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        n = len(x)
        t0 = self.t
        t = np.arange(t0 + 1, t0 + n + 1, dtype=np.float64)
        s_after = self._sum + np.cumsum(x)  # S_t
        s_before = s_after - x  # S_{t-1}
        lam = self._bets(x)
        if pops is None:  # i.i.d.: only [0, 1] is known
            logical_lo = np.zeros(n)
            logical_hi = np.ones(n)
        else:
            logical_lo = s_after / pops
            logical_hi = (s_after + (pops - t)) / pops

        if self._empty or self._lo > self._hi:
            lo_idx = np.full(n, self._lo)
            hi_idx = np.full(n, self._hi)
        else:
            m = self.grid[self._lo : self._hi + 1]
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                if pops is None:
                    mu = np.broadcast_to(m[None, :], (n, len(m)))
                else:
                    N = pops[:, None]
                    mu = (N * m[None, :] - s_before[:, None]) / (N - t[:, None] + 1)
                dev = x[:, None] - mu
                lam_up = np.minimum(lam[:, None], TRUNCATION / mu)
                lam_down = np.minimum(lam[:, None], TRUNCATION / (1 - mu))
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
            rej_lo = below | (~above & (np.log(THETA) + log_up >= threshold))
            rej_hi = above | (~below & (np.log(1 - THETA) + log_down >= threshold))
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
            self._lo, self._hi = new_lo, new_hi  # lo > hi: no candidate of the grid left

        grid = self.grid
        # A candidate excluded means the bound lies beyond it: report the last excluded one
        # (conservative by at most one grid step).
        lower = np.where(lo_idx > 0, grid[np.clip(lo_idx - 1, 0, len(grid) - 1)], 0.0)
        upper = np.where(hi_idx < len(grid) - 1, grid[np.clip(hi_idx + 1, 0, len(grid) - 1)], 1.0)
        lower = np.maximum.accumulate(np.maximum(np.maximum(lower, logical_lo), self._lower))
        upper = np.minimum.accumulate(np.minimum(np.minimum(upper, logical_hi), self._upper))
        # Empty: the bounds crossed (no candidate of the grid left between them is not enough:
        # near the end of a large population the logical bounds may fall between two of them).
        # From there on the sequence says nothing (NaN), never a point.
        empty = lower > upper
        if self._empty:
            empty[:] = True
        empty = np.logical_or.accumulate(empty)
        self.t += n
        self._sum = float(s_after[-1])
        if empty.any():
            self._empty = True
            first = int(empty.argmax())
            keep_lo, keep_hi = (lower[first - 1], upper[first - 1]) if first else (0.0, 1.0)
            lower = np.where(empty, np.nan, lower)
            upper = np.where(empty, np.nan, upper)
            # the state carried on: the last bounds before the contradiction (never shown)
            self._lower, self._upper = float(max(keep_lo, self._lower)), float(keep_hi)
            return lower, upper
        if pops is not None and self.t == int(pops[-1]):  # every value known: the exact mean
            lower[-1] = upper[-1] = self._sum / self.t
        self._lower, self._upper = float(lower[-1]), float(upper[-1])
        return lower, upper


Population = int | Sequence[int] | np.ndarray | None


def _start(population: Population, n: int) -> tuple[int | None, np.ndarray | None]:
    """The population a sequence starts with, and the one at each of its n values (None: i.i.d.)."""
    if population is None:
        return None, None
    if isinstance(population, int | np.integer):
        return int(population), None
    pops = np.asarray(population, dtype=np.float64).reshape(-1)
    if len(pops) != n:
        raise ValueError(f"{len(pops)} populations for {n} outcomes")
    return (int(pops[0]) if n else 1), pops


def accuracy_sequence(
    outcomes: Sequence[float] | np.ndarray,
    population: Population,
    alpha: float,
    *,
    breaks: int = DEFAULT_BREAKS,
) -> pd.DataFrame:
    """The confidence sequence for a mean of values in [0, 1] (a run's accuracy), from the first
    n of them.

    `population`: N, the number of selected questions (target "run": the mean of all N values, in
    a uniformly random order without replacement; at n = N it is exactly that mean); one N per
    outcome where the population shrinks as the outcomes come (questions found to have no exact
    answer); or None (target "models": the expected value of i.i.d. outcomes; it never closes).

    Returns one row per outcome: `questions` (1..n), `estimate` (the running mean), `lower`,
    `upper` (NaN once the sequence has contradicted itself), `contradicted`. With probability at
    least 1 - alpha, at every n at once, [lower, upper] holds the target, and the sequence never
    contradicts itself. `attrs` holds `alpha`, `population` (the last N, None for i.i.d.),
    `target` ("run" or "models") and `kind` ("accuracy").
    """
    x = np.asarray(outcomes, dtype=np.float64).reshape(-1)
    first, pops = _start(population, len(x))
    _check(x, first, alpha)
    cs = ConfidenceSequence(first, alpha, breaks=breaks)
    lower, upper = cs.extend(x, pops)
    n = np.arange(1, len(x) + 1)
    frame = pd.DataFrame(
        {
            "questions": n,
            "estimate": np.cumsum(x) / n if len(x) else np.zeros(0),
            "lower": lower,
            "upper": upper,
            "contradicted": np.isnan(lower),
        }
    )
    frame.attrs.update(
        {
            "alpha": float(alpha),
            "population": cs.population,
            "target": "models" if first is None else "run",
            "kind": "accuracy",
        }
    )
    return frame


def to_unit(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Paired differences a - b in [-1, 1] mapped into [0, 1]: (a - b + 1) / 2."""
    return (np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64) + 1) / 2


def difference_sequence(
    a: Sequence[float] | np.ndarray,
    b: Sequence[float] | np.ndarray,
    population: Population,
    alpha: float,
    *,
    breaks: int = DEFAULT_BREAKS,
) -> pd.DataFrame:
    """The confidence sequence for the mean paired difference a - b (a variant's accuracy minus
    the baseline's on the same questions), from the first n pairs. Outcomes lie in [0, 1] (0/1
    for correct); `population` as for `accuracy_sequence` (N pairs, or None for the models'
    expected difference).

    The differences are mapped into [0, 1] as (a - b + 1) / 2, the accuracy sequence is run on
    them and mapped back into [-1, 1]. Same columns as `accuracy_sequence`; `kind` is
    "difference".
    """
    xa = np.asarray(a, dtype=np.float64).reshape(-1)
    xb = np.asarray(b, dtype=np.float64).reshape(-1)
    if xa.shape != xb.shape:
        raise ValueError(f"a and b must pair up: {len(xa)} and {len(xb)} outcomes")
    first, _ = _start(population, len(xa))
    _check(xa, first, alpha)
    _check(xb, first, alpha)
    unit = accuracy_sequence(to_unit(xa, xb), population, alpha, breaks=breaks)
    frame = pd.DataFrame(
        {
            "questions": unit["questions"],
            "estimate": 2 * unit["estimate"] - 1,
            "lower": 2 * unit["lower"] - 1,
            "upper": 2 * unit["upper"] - 1,
            "contradicted": unit["contradicted"],
        }
    )
    frame.attrs.update({**unit.attrs, "kind": "difference"})
    return frame


def iid_log_capital(x: np.ndarray, m: float, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """The hedged i.i.d. betting capital against one candidate mean `m`, for many sequences at
    once (simulations): `x` of shape (sequences, steps), values in [0, 1]. Returns log(theta K+)
    and log((1 - theta) K-) after each step, the two halves of the hedged capital that
    `ConfidenceSequence(None, alpha)` computes for every candidate of its grid; the sequence
    excludes m for good once either reaches log(1 / alpha). For the models' target K+ falls with
    m, so a sequence's lower bound lies above m exactly when K+ reached the threshold at a
    candidate above m: counting the rows whose K+ at m crosses bounds the share of sequences
    whose lower bound ever exceeds m, in one numpy pass instead of one sequence at a time."""
    x = np.atleast_2d(np.asarray(x, dtype=np.float64))
    if not 0 < m < 1:
        raise ValueError(f"m must lie in (0, 1), got {m}")
    lam = iid_bets(x, alpha)
    dev = x - m
    up = np.cumsum(np.log1p(np.minimum(lam, TRUNCATION / m) * dev), axis=1)
    down = np.cumsum(np.log1p(-np.minimum(lam, TRUNCATION / (1 - m)) * dev), axis=1)
    return up + math.log(THETA), down + math.log(1 - THETA)


def iid_bets(x: np.ndarray, alpha: float) -> np.ndarray:
    """The predictable plug-in bets (before truncation) of the i.i.d. sequence, for rows of `x`
    (sequences, steps): what `ConfidenceSequence(None, alpha)` bets at each step."""
    x = np.atleast_2d(np.asarray(x, dtype=np.float64))
    n = x.shape[1]
    t = np.arange(1, n + 1, dtype=np.float64)
    mu_hat = (0.5 + np.cumsum(x, axis=1)) / (t + 1)  # after step t
    ss = 0.25 + np.cumsum((x - mu_hat) ** 2, axis=1)  # after step t
    var_before = np.concatenate([np.full((len(x), 1), 0.25), ss[:, :-1]], axis=1) / t
    return np.sqrt(2 * math.log(2 / alpha) / (var_before * t * np.log1p(t)))
