"""The stopping rule and its decision: a small function of a confidence sequence.

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

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, model_validator

Outcome = Literal["better", "worse", "equivalent", "precise", "undecided"]
Kind = Literal["accuracy", "difference"]


class Rule(BaseModel):
    """When a run or a comparison may stop. Differences and half-widths are absolute shares
    (0.03 is 3 points)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

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

    @property
    def decided(self) -> bool:
        return self.outcome != "undecided"


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
    half_width). The sequence must have been computed at `corrected_alpha(rule, comparisons)`:
    a frame whose attrs say another alpha is refused.
    """
    which = _kind(seq, kind)
    level = corrected_alpha(rule, comparisons)
    seq_alpha = seq.attrs.get("alpha")
    if seq_alpha is not None and not math.isclose(float(seq_alpha), level, rel_tol=1e-9):
        raise ValueError(
            f"the sequence was computed at alpha = {seq_alpha}, the rule over {comparisons} "
            f"comparison(s) needs alpha = {level}: compute it at corrected_alpha(rule, comparisons)"
        )
    q = seq["questions"].to_numpy()
    lo = seq["lower"].to_numpy()
    hi = seq["upper"].to_numpy()
    usable = q >= rule.min_questions
    if rule.max_questions is not None:
        usable &= q <= rule.max_questions
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
    first = {name: int(mask.argmax()) for name, mask in hits.items() if mask.any()}
    if first:
        outcome, i = min(first.items(), key=lambda kv: kv[1])
    else:
        outcome = "undecided"
        i = int(usable.nonzero()[0][-1]) if usable.any() else len(q) - 1
        if i < 0:  # an empty sequence
            return Decision(
                outcome="undecided",
                questions=0,
                estimate=math.nan,
                lower=-1.0 if which == "difference" else 0.0,
                upper=1.0,
                alpha=level,
            )
    row = seq.iloc[i]
    return Decision(
        outcome=outcome,  # type: ignore[arg-type]
        questions=int(row["questions"]),
        estimate=float(row["estimate"]),
        lower=float(row["lower"]),
        upper=float(row["upper"]),
        alpha=level,
    )
