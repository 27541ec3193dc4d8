"""A grader model's reply -> its verdict (paper 004's evaluation: OpenAI evals' closed_qa
template asks for reasoning, then "Y" or "N" alone on a line, then the letter again).

The verdict is the last line that is only "Y" or "N" (markdown and punctuation around it
ignored); a reply with none is no verdict, with the reason: never guessed.
"""

from __future__ import annotations

import re

_LETTER = re.compile(r"^[\s*_`\"'(\[]*([YN])[\s*_`\"'.)\]]*$", re.IGNORECASE)


def read_verdict(raw: str) -> tuple[bool | None, str | None]:
    """(True for Y, False for N, or None) and the reason when None."""
    for line in reversed(raw.strip().splitlines()):
        m = _LETTER.match(line)
        if m:
            return m.group(1).upper() == "Y", None
    if not raw.strip():
        return None, "the grader's reply is empty"
    return None, f'no line of the grader\'s reply is "Y" or "N": {raw.strip()[-80:]!r}'
