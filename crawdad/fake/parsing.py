"""Reading answers and confidences out of debater text, as the fakes need to.

Debaters end with lines like `Answer: yes (Confidence: 0.85)`, `**Answer: no** (confidence 1.0)`
or `Final Answer: no (confidence: 90%)`. The fake debaters read their opponent's stance this way
and the fake extractor reads the debater response it is asked about.
"""

from __future__ import annotations

import re
from typing import Literal, cast

Answer = Literal["yes", "no"]

# "answer" then optional markdown, a colon, optional markdown, then yes/no. A JSON key such as
# `"answer": "yes"` in an instruction does not match: the quote sits between "answer" and ":".
_ANSWER = re.compile(r"answer[*_ ]*:[*_ ]*(yes|no)\b", re.IGNORECASE)
# "confidence", up to 15 characters that are not digits ("Confidence: ", "confidence level of "),
# then the number, maybe a percent sign.
_CONFIDENCE = re.compile(r"confidence[^0-9\n]{0,15}?(\d+(?:\.\d+)?|\.\d+)\s*(%?)", re.IGNORECASE)
_THINK_BLOCK = re.compile(r"<think>.*?(</think>|$)", re.DOTALL)
# A short line that names the other side: a history label such as "Your opponent's response:".
_OPPONENT_LABEL = re.compile(
    r"^[^\n]{0,50}\b(?:opponent|other (?:agent|llm|model|debater))\b[^\n]{0,50}$",
    re.IGNORECASE | re.MULTILINE,
)


def strip_think(text: str) -> str:
    """Drop `<think>...</think>` blocks (and an unclosed one) from a response."""
    return _THINK_BLOCK.sub("", text) if "<think>" in text else text


def to_confidence(number: str, percent: str = "") -> float | None:
    try:
        value = float(number)
    except ValueError:
        return None
    if percent or value > 1.0:
        value /= 100.0
    return value if 0.0 <= value <= 1.0 else None


_ANSWER_OR_UNCERTAIN = re.compile(r"answer[*_ ]*:[*_ ]*(yes|no|uncertain)\b", re.IGNORECASE)


def last_stance(text: str, uncertain: bool = False) -> tuple[Answer | None, float | None]:
    """The last answer in `text` and the confidence stated with it (or the last one at all);
    `uncertain`: "Answer: uncertain" is an answer too (the extractor reads it, a debater not)."""
    answers = list((_ANSWER_OR_UNCERTAIN if uncertain else _ANSWER).finditer(text))
    if not answers:
        confidences = list(_CONFIDENCE.finditer(text))
        if not confidences:
            return None, None
        return None, to_confidence(*confidences[-1].groups())
    last = answers[-1]
    answer = cast(Answer, last.group(1).lower())  # or "uncertain", when it was asked for
    near = _CONFIDENCE.search(text, last.end(), last.end() + 80)
    if near is None:
        confidences = list(_CONFIDENCE.finditer(text))
        near = confidences[-1] if confidences else None
    return answer, (to_confidence(*near.groups()) if near else None)


def opponent_stance(prompt: str, after: int = 0) -> tuple[Answer | None, float | None]:
    """The opponent's last stated answer and confidence in a debate prompt.

    Looks at the text after `after` (the end of the question line). When the history labels the
    opponent's responses, only the last such section counts; otherwise the last answer does,
    which in an alternating two-agent debate is the opponent's.
    """
    text = prompt[after:]
    labels = list(_OPPONENT_LABEL.finditer(text))
    if labels:
        section = text[labels[-1].end() :]
        answer, confidence = last_stance(_until_own_label(section))
        if answer is not None:
            return answer, confidence
    return last_stance(text)


def opponent_section(prompt: str, after: int = 0) -> str | None:
    """The text of the opponent's last response in a debate prompt's history (after `after`):
    from the last label naming the other side to the reader's own next label, and, where the
    entry is set between `==========` lines, only what they enclose. None without such a label."""
    text = prompt[after:]
    labels = list(_OPPONENT_LABEL.finditer(text))
    if not labels:
        return None
    section = _until_own_label(text[labels[-1].end() :])
    parts = section.split("==========")
    return parts[1] if len(parts) >= 3 else section


def _until_own_label(section: str) -> str:
    """Cut a history section at the next label of the reader's own response ("Your answer:")."""
    offset = 0
    for line in section.splitlines(keepends=True):
        body = line.strip().lower()
        if offset and len(body) <= 100 and body.endswith(":") and "your" in body:
            return section[:offset]
        offset += len(line)
    return section


_TAGGED = re.compile(
    r"<(response|text|answer|input|debater_response|agent_response)>(.*?)</\1>",
    re.DOTALL | re.IGNORECASE,
)
_QUOTED = re.compile(r'"""(.*?)"""|```(?:\w*\n)?(.*?)```', re.DOTALL)
_LABELLED = re.compile(
    r"^[ \t*#]*(?:the |debater'?s? |model'?s? )?(?:response|text)[ \t*]*:[ \t]*",
    re.IGNORECASE | re.MULTILINE,
)


def find_response(prompt: str) -> str:
    """The debater response quoted in an extractor prompt (the whole prompt if unmarked)."""
    tagged = _TAGGED.findall(prompt)
    if tagged:
        return tagged[-1][1]
    quoted = [a or b for a, b in _QUOTED.findall(prompt)]
    quoted = [q for q in quoted if q.strip()]
    if quoted:
        return max(quoted, key=len)
    labelled = list(_LABELLED.finditer(prompt))
    if labelled:
        return prompt[labelled[-1].end() :]
    return prompt
