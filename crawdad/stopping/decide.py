"""The stopping rule and its decision: a small function of a confidence sequence.

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

A variant's paired difference from the baseline is **better** when its sequence lies above 0,
**worse** when below, **equivalent** when it lies inside +-margin; a single run's accuracy is
**precise** when its half-width is at most the rule's `half_width`. Nothing is decided before
`min_questions`; past `max_questions` (or the end of the sequence) it stays **undecided**, which
never means equivalent. `max_gpu_seconds` is read by the run's scheduler, not here: a variant
whose records count that many GPU seconds starts nothing new and stays undecided ("budget
spent"); `decide` is a function of the sequence alone. Several comparisons share alpha by Bonferroni: each sequence is computed
at `corrected_alpha(rule, comparisons)`.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, model_validator

from crawdad.stopping.claims import UNKNOWN_POOL

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


def decide(
    seq: pd.DataFrame, rule: Rule, comparisons: int = 1, *, kind: Kind | None = None
) -> Decision:
    """The first decision the rule reaches on `seq` (a frame of questions, estimate, lower,
    upper, as `accuracy_sequence` / `difference_sequence` return; rows in question order, any
    stretch of them). `kind` defaults to `seq.attrs["kind"]`.

    A difference is better (lower > 0) or worse (upper < 0) before it is equivalent (inside
    +-margin): a difference that is certainly not 0 is reported as such, however small. A single
    run's accuracy is precise when (upper - lower) / 2 <= rule.half_width (never, without a
    half_width). A sequence that contradicted itself (its running intersection ran empty) before
    any of these is **contradicted** there: no claim. The sequence must have been computed at
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
    with np.errstate(invalid="ignore"):
        if which == "difference":
            better = usable & (lo > 0)
            worse = usable & (hi < 0)
            inside = usable & (lo >= -rule.margin) & (hi <= rule.margin) & ~better & ~worse
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
            )
    row = seq.iloc[i]
    return Decision(
        outcome=outcome,  # type: ignore[arg-type]
        questions=int(row["questions"]),
        estimate=float(row["estimate"]),
        lower=float(row["lower"]),
        upper=float(row["upper"]),
        alpha=level,
        target=target,
    )
