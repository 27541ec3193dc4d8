"""One rule for questions without an exact answer (a table of one's own: `gold` None, or NaN in a
frame): they are left out of every accuracy, numerator and denominator, and the number left out
is said where the figure stands ("of 340 scored (2 without an exact answer left out)").

The run's stopping decisions (`crawdad.run.scheduler`), its progress line and end summary, the
experiment report, the live view and the notebook all count through here, so that no figure
counts such a question as wrong while another leaves it out. An errored debate is not this
rule's: each caller says how it counts those (the experiment leaves them out as unfinished).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

Outcome = int | None  # 1 right, 0 wrong, None: no exact answer to score (left out of the sums)


def has_answer(gold: object) -> bool:
    """Whether `gold` is an exact answer to score against (not None, not a frame's NaN)."""
    return gold is not None and not (isinstance(gold, float) and math.isnan(gold))


def outcome(gold: object, answer: object) -> Outcome:
    """1 when `answer` is the exact answer `gold`, 0 when not (an unread answer too), None when
    there is no exact answer."""
    return int(answer == gold) if has_answer(gold) else None


def left_out(unscored: int) -> str:
    """The words for the questions a figure leaves out: "2 without an exact answer left out"."""
    return f"{unscored} without an exact answer left out" if unscored else ""


@dataclass(frozen=True)
class Accuracy:
    """An accuracy under the rule: `correct` of `scored`, with `unscored` questions left out."""

    correct: int
    scored: int
    unscored: int = 0

    @property
    def value(self) -> float | None:
        """correct / scored; None with nothing scored."""
        return self.correct / self.scored if self.scored else None

    def of(self) -> str:
        """What the figure is over: "of 340 scored (2 without an exact answer left out)"."""
        said = left_out(self.unscored)
        return f"of {self.scored} scored" + (f" ({said})" if said else "")


def accuracy(outcomes: Iterable[Outcome]) -> Accuracy:
    """The accuracy of `outcomes` (`outcome`'s), the None ones left out and counted."""
    correct = scored = unscored = 0
    for o in outcomes:
        if o is None:
            unscored += 1
        else:
            scored += 1
            correct += int(o)
    return Accuracy(correct, scored, unscored)


__all__ = ["Accuracy", "Outcome", "accuracy", "has_answer", "left_out", "outcome"]
