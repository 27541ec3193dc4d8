"""The fake of a grader model (`[grader]`, paper 004's model-graded evaluation): the fake
extractor plays it when its prompt holds the closed_qa template's `[Ideal]:` section. It reads
the submission's last "Answer: ..." and compares it with the ideal answer, reasons in a line,
then writes "Y" or "N" on its own line and again, as the template asks; with probability `flip`
(seeded by the request) it gets the verdict wrong, as the paper notes its grader sometimes did.
"""

from __future__ import annotations

import re

from crawdad.fake.behaviour import FakeRequest, seeded_rng
from crawdad.fake.parsing import last_stance, strip_think

IDEAL_MARK = "[Ideal]:"
_SECTION = r"\[{name}\]:(.*?)(?:\n\*\*\*|\Z)"


def is_grading(text: str) -> bool:
    return IDEAL_MARK in text


def _section(text: str, name: str) -> str:
    m = re.search(_SECTION.format(name=name), text, flags=re.DOTALL)
    return m.group(1).strip() if m else ""


def grade(request: FakeRequest, flip: float = 0.0) -> str:
    """The grader's reply to the grading prompt in `request`."""
    text = request.last_user_text()
    answer, _ = last_stance(strip_think(_section(text, "Submission")), uncertain=True)
    ideal = _section(text, "Ideal").lower()
    match = answer is not None and answer == ideal
    if seeded_rng("fake-grader-flip", request.digest).random() < flip:
        match = not match
    letter = "Y" if match else "N"
    return (
        f"The submission's final answer is {answer or 'not stated'}; the ideal answer is "
        f"{ideal}. They {'match' if match else 'do not match'}.\n{letter}\n{letter}"
    )
