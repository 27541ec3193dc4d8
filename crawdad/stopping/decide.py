"""The stopping rule and its decision: one pure function of the outcomes (`decision`), through
the confidence sequence and, for the models, the sequential tests (`sequence`, `decide`).

A rule names its **target**, what its decisions are about:

- `models` (the default): the expected accuracy of the models' answers (or a variant's expected
  difference from the baseline) over the pool the run's questions were drawn from (CLadder's
  file, or the selection: `crawdad.stopping.claims.pool_words`), under the run's settings: an
  i.i.d. betting sequence over questions drawn in a random order; it never closes, so it needs
  more questions. At temperature 0 or with crawdad's fixed seeds the answers are fixed, and the
  claim is about those answers to that pool; other questions, temperatures or seeds are outside
  it (docs/explanation/metrics.md, "What a decision generalises to").
- `run`: what a full pass over this run's selected questions, with these responses, would
  report: a sequence over a finite population sampled without replacement, which closes on the
  exact figure at the last question. A claim about one run, not about the models.

For the models (`method="test"`, the default) a variant's paired difference from the baseline is
**better** once a sequential test by betting rejects "the difference is at most 0"
(`crawdad.stopping.betting`), **worse** once one rejects "at least 0", **equivalent** once two
reject "at most -margin" and "at least +margin"; the interval shown beside it is the confidence
sequence's (the test decides; the sequence shows the size). With `method="cs"` (crawdad before
issue 52), and always for the run's target, the sequence's edges decide: better when it lies
above 0, worse when below, equivalent when inside +-margin. A single run's accuracy is
**precise** when its half-width is at most the rule's `half_width`. Nothing is decided before
`min_questions`; past `max_questions` (or the end of the sequence) it stays **undecided**, which
never means equivalent. `max_gpu_seconds` is read by the run's scheduler, not here: a variant
whose records count that many GPU seconds starts nothing new and stays undecided ("budget
spent"); `decide` is a function of the sequence alone. Several comparisons share alpha by Bonferroni: each sequence is computed
at `corrected_alpha(rule, comparisons)`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, model_validator

from crawdad.stopping.betting import CLAIMS, evidence, threshold
from crawdad.stopping.claims import UNKNOWN_POOL
from crawdad.stopping.sequences import (
    THETA,
    TRUNCATION,
    Population,
    accuracy_sequence,
    difference_sequence,
    iid_bets,
    to_unit,
)

Outcome = Literal["better", "worse", "equivalent", "precise", "undecided", "contradicted"]
Kind = Literal["accuracy", "difference"]
Target = Literal["models", "run"]
TARGETS: tuple[Target, ...] = ("models", "run")


def target_words(target: str, kind: Kind = "difference", pool: str = UNKNOWN_POOL) -> str:
    """What a decision of `target` is about, in words (every place that shows one says it):
    `pool` names the questions (`crawdad.stopping.claims.pool_words`)."""
    what = "difference from the baseline" if kind == "difference" else "accuracy"
    if target == "run":
        return (
            f"this run: the {what} a full pass over {pool}, with these responses, would report "
            "(not a claim about the models)"
        )
    return (
        f"the models: the expected {what} of their answers to {pool}, under this run's "
        "settings (its prompts, temperatures and seeds)"
    )


def target_name(target: str) -> str:
    """The target in two words: "the models" or "this run"."""
    return "this run" if target == "run" else "the models"


MINUS = "\u2212"


def points(x: float, signed: bool = True) -> str:
    """A share in points, one decimal, with a true minus sign (as the reports print them)."""
    return (f"{100 * x:+.1f}" if signed else f"{100 * x:.1f}").replace("-", MINUS)


def interval_words(lower: float, upper: float, kind: Kind = "difference") -> str:
    """An interval as every decision prints it: "+0.4 to +47.7 points" (a difference),
    "61.2 to 70.3 points" (an accuracy); a NaN bound (a contradicted sequence): no interval."""
    if math.isnan(lower) or math.isnan(upper):
        return "no interval (the sequence contradicted itself)"
    signed = kind == "difference"
    return f"{points(lower, signed)} to {points(upper, signed)} points"


CONTRADICTED = (
    "the sequence contradicted itself (its running intersection ran empty): a miss, which a "
    "sequence at this alpha makes with probability at most alpha; it supports no claim, and the "
    "variant stops undecided"
)


class Rule(BaseModel):
    """When a run or a comparison may stop. Differences and half-widths are absolute shares
    (0.03 is 3 points)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    target: Target = Field(
        default="models",
        description=(
            "what decisions are about: 'models' (the expected accuracy of the models' answers "
            "to the run's pool of questions under its settings: an i.i.d. sequence) or 'run' "
            "(what a full pass over this run's selected questions would report: closes at its "
            "last question)"
        ),
    )
    alpha: float = Field(
        default=0.05, gt=0, lt=1, description="error rate shared by all comparisons"
    )
    margin: float = Field(
        default=0.03,
        ge=0,
        le=1,
        description="the smallest difference that matters (absolute share)",
    )
    min_questions: int = Field(
        default=50, ge=1, description="no decision before this many questions"
    )
    max_questions: int | None = Field(
        default=None,
        ge=1,
        description="stop undecided after this many questions (None: run them all)",
    )
    half_width: float | None = Field(
        default=None,
        gt=0,
        le=1,
        description="a single run stops when its interval's half-width is this",
    )
    method: Literal["test", "cs"] = Field(
        default="test",
        description=(
            "what decides a difference about the models: 'test' (sequential tests by betting, "
            "tuned to the pool's size: more power at the same alpha) or 'cs' (the confidence "
            "sequence's edges, as crawdad decided before); the run's target always uses 'cs'"
        ),
    )
    max_gpu_seconds: float | None = Field(
        default=None,
        gt=0,
        description=(
            "stop a variant undecided ('budget spent') once its debates count this many GPU "
            "seconds (None: no budget); a scheduling rule, not a statistical one"
        ),
    )

    @model_validator(mode="after")
    def _order(self) -> Rule:
        if self.max_questions is not None and self.max_questions < self.min_questions:
            raise ValueError(
                f"max_questions ({self.max_questions}) is below min_questions "
                f"({self.min_questions})"
            )
        return self


class Decision(BaseModel):
    """What the rule says of one sequence: the outcome, the questions it used (where it stopped,
    or the last one looked at when undecided) and the interval there."""

    model_config = ConfigDict(frozen=True)

    outcome: Outcome
    questions: int
    estimate: float
    lower: float
    upper: float
    alpha: float  # the level the sequence was computed at (after the correction)
    target: Target = "run"  # what it is about (a Decision of crawdad before targets: this run)
    method: Literal["test", "cs"] = "cs"  # what decided: the tests, or the sequence's edges
    e_value: float | None = None  # the deciding test's e-value at the stop (method "test")

    @property
    def decided(self) -> bool:
        """A claim the rule supports (not undecided, and not a contradicted sequence)."""
        return self.outcome not in ("undecided", "contradicted")


def corrected_alpha(rule: Rule, comparisons: int = 1) -> float:
    """The level each of `comparisons` sequences is computed at (Bonferroni: alpha / comparisons),
    so that with probability at least 1 - alpha every one of them holds at once."""
    if comparisons < 1:
        raise ValueError(f"comparisons must be at least 1, got {comparisons}")
    return rule.alpha / comparisons


def _kind(seq: pd.DataFrame, kind: Kind | None) -> Kind:
    if kind is not None:
        return kind
    found = seq.attrs.get("kind")
    if found not in ("accuracy", "difference"):
        raise ValueError("say which sequence this is: decide(..., kind='accuracy'|'difference')")
    return found  # type: ignore[no-any-return]


TESTS_DECIDE = (
    "**The tests decide; the sequence shows the size.** Better, worse and equivalent are decided "
    "by sequential tests by betting (an e-process for each one-sided hypothesis, rejected at "
    "2 / alpha): each wrong call (better or worse of the wrong sign, equivalent beyond the "
    "margin) has probability at most the alpha shown, at every moment at once. The interval "
    "beside a decision is the confidence sequence's: it needs more evidence to leave 0 than a "
    "test does, so a decided variant's interval may still reach past 0."
)
EVIDENCE = {claim: f"e_{claim}" for claim in CLAIMS}  # the sequence frame's test columns


def tested(rule: Rule, kind: Kind) -> bool:
    """Do the rule's tests decide this sequence (a difference about the models, method "test"),
    rather than its edges?"""
    return kind == "difference" and rule.target == "models" and rule.method == "test"


def sequence(
    a: Sequence[float] | np.ndarray,
    b: Sequence[float] | np.ndarray | None,
    rule: Rule,
    comparisons: int = 1,
    *,
    pool: int | None = None,
    populations: Sequence[int] | np.ndarray | None = None,
) -> pd.DataFrame:
    """What the rule decides on, over the first n outcomes: the confidence sequence
    (`accuracy_sequence` of `a` when `b` is None, else `difference_sequence` of a - b) at
    `corrected_alpha(rule, comparisons)` about the rule's target, and, where the tests decide
    (`tested`), each test's running log e-value (`crawdad.stopping.betting.evidence`) in columns
    `e_better`, `e_worse`, `e_above`, `e_below`.

    `pool`: the most questions the run can see (its selected questions), fixed before the first
    one: the tests' bets are tuned to it (None: `populations[0]`, else len(a): right when `a`
    and `b` are the whole pool, as in a simulation). `populations`: the run's population when
    each outcome came (the run's target; None: `pool` throughout)."""
    level = corrected_alpha(rule, comparisons)
    n = len(a)
    if pool is None:
        pool = int(populations[0]) if populations is not None and len(populations) else n
    population: Population = None
    if rule.target == "run":
        population = list(populations) if populations is not None else max(pool, n)
    if b is None:
        return accuracy_sequence(a, population, level)
    seq = difference_sequence(a, b, population, level)
    if tested(rule, "difference"):
        found = evidence(np.asarray(a), np.asarray(b), level, max(1, pool), rule.margin)
        for claim, column in EVIDENCE.items():
            seq[column] = found[claim]
        seq.attrs["pool"] = pool
    return seq


def decision(
    a: Sequence[float] | np.ndarray,
    b: Sequence[float] | np.ndarray | None,
    rule: Rule,
    comparisons: int = 1,
    *,
    pool: int | None = None,
    populations: Sequence[int] | np.ndarray | None = None,
) -> Decision:
    """crawdad's decision on the outcomes `a` of a variant (1 right, 0 wrong, in the run's random
    order) paired with the baseline's `b` on the same questions (None: a single run's accuracy),
    by `rule`, with alpha shared among `comparisons`: `decide(sequence(...))`. The one function
    the run, the report, the live view, the notebook and the benchmark decide with; call it to
    simulate crawdad's rule (`many_decisions` does many experiments at once). `pool` and
    `populations` as for `sequence`."""
    seq = sequence(a, b, rule, comparisons, pool=pool, populations=populations)
    return decide(seq, rule, comparisons)


def decide(
    seq: pd.DataFrame, rule: Rule, comparisons: int = 1, *, kind: Kind | None = None
) -> Decision:
    """The first decision the rule reaches on `seq` (a frame of questions, estimate, lower,
    upper, as `sequence` / `accuracy_sequence` / `difference_sequence` return; rows in question
    order, any stretch of them). `kind` defaults to `seq.attrs["kind"]`.

    A difference about the models, by a rule of method "test", is decided by its tests (the
    frame's `e_*` columns, which `sequence` adds): better once "at most 0" is rejected (its log
    e-value reaches `betting.threshold(alpha)`), worse once "at least 0" is, equivalent once
    both "at most -margin" and "at least +margin" are. Otherwise by the sequence's edges: better
    (lower > 0) or worse (upper < 0) before equivalent (inside +-margin). Either way a difference
    that is certainly not 0 is reported as such, however small. A single run's accuracy is
    precise when (upper - lower) / 2 <= rule.half_width (never, without a half_width). A
    sequence that contradicted itself (its running intersection ran empty) before any of these
    is **contradicted** there: no claim. The sequence must have been computed at
    `corrected_alpha(rule, comparisons)` for the rule's target: a frame whose attrs say another
    alpha or target is refused.
    """
    which = _kind(seq, kind)
    level = corrected_alpha(rule, comparisons)
    seq_alpha = seq.attrs.get("alpha")
    if seq_alpha is not None and not math.isclose(float(seq_alpha), level, rel_tol=1e-9):
        raise ValueError(
            f"the sequence was computed at alpha = {seq_alpha}, the rule over {comparisons} "
            f"comparison(s) needs alpha = {level}: compute it at corrected_alpha(rule, comparisons)"
        )
    target = seq.attrs.get("target", rule.target)
    if target != rule.target:
        raise ValueError(
            f"the sequence is about {target_name(target)}, the rule's target is "
            f"{target_name(rule.target)}: compute it with population=None for the models, N for "
            "the run"
        )
    q = seq["questions"].to_numpy()
    lo = seq["lower"].to_numpy()
    hi = seq["upper"].to_numpy()
    broken = seq["contradicted"].to_numpy(dtype=bool) if "contradicted" in seq else np.isnan(lo)
    allowed = np.ones(len(q), dtype=bool)
    if rule.max_questions is not None:
        allowed = q <= rule.max_questions
    usable = allowed & (q >= rule.min_questions) & ~broken
    by_test = tested(rule, which)
    if by_test and any(c not in seq for c in EVIDENCE.values()):
        raise ValueError(
            "the rule's tests decide a difference about the models: compute the frame with "
            "crawdad.stopping.decide.sequence (it adds the tests' e_* columns)"
        )
    with np.errstate(invalid="ignore"):
        if which == "difference":
            if by_test:
                made = {c: seq[col].to_numpy() >= threshold(level) for c, col in EVIDENCE.items()}
                better, worse = usable & made["better"], usable & made["worse"]
                both = made["above"] & made["below"]
            else:
                better = usable & (lo > 0)
                worse = usable & (hi < 0)
                both = (lo >= -rule.margin) & (hi <= rule.margin)
            inside = usable & both & ~better & ~worse
            hits = {"better": better, "worse": worse, "equivalent": inside}
        else:
            precise = (
                usable & ((hi - lo) / 2 <= rule.half_width)
                if rule.half_width is not None
                else usable & False
            )
            hits = {"precise": precise}
    contradiction = allowed & broken
    if contradiction.any():
        hits["contradicted"] = contradiction
    first = {name: int(mask.argmax()) for name, mask in hits.items() if mask.any()}
    if first:
        outcome, i = min(first.items(), key=lambda kv: kv[1])
    else:
        outcome = "undecided"
        looked = allowed & ~broken
        i = int(looked.nonzero()[0][-1]) if looked.any() else len(q) - 1
        if i < 0:  # an empty sequence
            return Decision(
                outcome="undecided",
                questions=0,
                estimate=math.nan,
                lower=-1.0 if which == "difference" else 0.0,
                upper=1.0,
                alpha=level,
                target=target,
                method="test" if by_test else "cs",
            )
    row = seq.iloc[i]
    e_value = None
    if by_test and outcome in ("better", "worse", "equivalent"):
        logs = [row[EVIDENCE[outcome]]] if outcome != "equivalent" else []
        logs = logs or [min(row[EVIDENCE["above"]], row[EVIDENCE["below"]])]
        e_value = float(math.exp(min(float(logs[0]), 700.0)))
    return Decision(
        outcome=outcome,  # type: ignore[arg-type]
        questions=int(row["questions"]),
        estimate=float(row["estimate"]),
        lower=float(row["lower"]),
        upper=float(row["upper"]),
        alpha=level,
        target=target,
        method="test" if by_test else "cs",
        e_value=e_value,
    )


def many_decisions(
    a: np.ndarray,
    b: np.ndarray,
    rule: Rule,
    comparisons: int = 1,
    *,
    pool: int | None = None,
    breaks: int = 5000,
) -> tuple[np.ndarray, np.ndarray]:
    """`decision` for many simulated experiments at once, the models' target only: rows of
    paired 0/1 outcomes `a` (the variant) and `b` (the baseline), shape (experiments,
    questions), each row the whole of one experiment in its order (`pool`: the questions per
    experiment; None: the rows' length). Returns each row's outcome ("better", "worse",
    "equivalent" or "undecided") and the questions it used (the last one looked at when
    undecided), equal to `decision` row by row (tests/test_stopping_stats.py) except where a
    scalar sequence contradicts itself (probability at most alpha), which this does not look
    for. `method="cs"` (the sequence's edges) is computed from the capital against the grid
    candidates nearest 0 and +-margin (as `iid_log_capital`), which the sequence excludes exactly
    when that capital crosses."""
    if rule.target != "models":
        raise ValueError("many_decisions simulates the models' target (i.i.d. pairs) only")
    xa = np.atleast_2d(np.asarray(a, dtype=np.float64))
    xb = np.atleast_2d(np.asarray(b, dtype=np.float64))
    if xa.shape != xb.shape:
        raise ValueError(f"a and b must pair up: shapes {xa.shape} and {xb.shape}")
    level = corrected_alpha(rule, comparisons)
    rows, n = xa.shape
    if rule.method == "test":
        found = evidence(xa, xb, level, pool or n, rule.margin)
        made = {c: found[c] >= threshold(level) for c in CLAIMS}
    else:
        made = _edges(to_unit(xa, xb), level, rule.margin, breaks)
    q = np.arange(1, n + 1)
    usable = q >= rule.min_questions
    if rule.max_questions is not None:
        usable &= q <= rule.max_questions
    never = n + 1
    firsts = []
    for hit in (made["better"], made["worse"], made["above"] & made["below"]):
        mask = hit & usable[None, :]
        firsts.append(np.where(mask.any(axis=1), mask.argmax(axis=1), never))
    first = np.stack(firsts)  # (3, rows): better, worse, equivalent (ties in that order)
    which = first.argmin(axis=0)
    at = first[which, np.arange(rows)]
    names = np.array(["better", "worse", "equivalent"])
    outcome = np.where(at < never, names[which], "undecided")
    last = n if rule.max_questions is None else min(n, rule.max_questions)
    return outcome, np.where(at < never, at + 1, last)


def _edges(unit: np.ndarray, alpha: float, margin: float, breaks: int) -> dict[str, np.ndarray]:
    """When the i.i.d. sequence of `unit` (a - b mapped into [0, 1]) first lies above 0, below
    0, above -margin and below +margin, as running masks: its lower bound passes a value once
    the upward capital at the first grid candidate at or beyond it crosses, its upper bound the
    same from the other side (`ConfidenceSequence` reports the last candidate excluded)."""
    grid = np.linspace(0.0, 1.0, breaks + 1)
    diff = 2 * grid - 1
    thr = math.log(1 / alpha)
    lam = iid_bets(unit, alpha)

    def crossed(k: int, sign: int) -> np.ndarray:
        m = float(grid[k])
        cap = TRUNCATION / (m if sign > 0 else 1 - m)
        log_k = np.cumsum(np.log1p(sign * np.minimum(lam, cap) * (unit - m)), axis=1)
        return np.maximum.accumulate(log_k + math.log(THETA) >= thr, axis=1)

    return {
        "better": crossed(int(np.argmax(diff > 0)), 1),
        "worse": crossed(int(np.nonzero(diff < 0)[0][-1]), -1),
        "above": crossed(int(np.argmax(diff >= -margin)), 1),
        "below": crossed(int(np.nonzero(diff <= margin)[0][-1]), -1),
    }
