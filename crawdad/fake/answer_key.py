"""The gold answers a seeded fake debater needs, found again from the prompt it is sent.

crawdad's prompts contain the question block `{background}\\n\\n{given_info}\\n\\nQuestion: {question}`.
The key of a question is the paragraph right before the first line starting with "Question: "
(the given info) plus that line, whitespace-normalised, so a lookup is one scan of the prompt and
one dict access.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from crawdad.fake.parsing import Answer

_PARAGRAPH_BREAK = re.compile(r"\n[ \t\r]*\n")
_QUESTION = "Question: "


@dataclass(frozen=True, slots=True)
class KeyEntry:
    gold: Answer | None  # None: two questions share the key with different answers
    rung: int | None = None
    question_id: int | str | None = None
    alignment: str | None = None  # "commonsense", "anticommonsense" or "nonsense"
    # A whole-graph item (discovery-graph): the true graph's edge text ("" when unknown) and the
    # graph's variables; `gold` is then None.
    graph: str | None = None
    variables: tuple[str, ...] = ()


def _normalise(text: str) -> str:
    return " ".join(text.split())


def _last_paragraph(text: str) -> str:
    text = text.strip()
    return _PARAGRAPH_BREAK.split(text)[-1] if "\n" in text else text


def question_line_span(prompt: str) -> tuple[int, int] | None:
    """Start and end of the first line that starts with "Question: ", or None."""
    if prompt.startswith(_QUESTION):
        start = 0
    else:
        start = prompt.find("\n" + _QUESTION)
        if start < 0:
            return None
        start += 1
    end = prompt.find("\n", start)
    return start, (len(prompt) if end < 0 else end)


def prompt_key(prompt: str) -> tuple[str, str] | None:
    """(context paragraph, question line) of a prompt, normalised; None without a question."""
    span = question_line_span(prompt)
    if span is None:
        return None
    start, end = span
    return _normalise(_last_paragraph(prompt[:start])), _normalise(prompt[start:end])


class AnswerKey:
    """Maps questions to gold answers (and rungs and alignments) for `ProfileModel`."""

    def __init__(self) -> None:
        self._entries: dict[tuple[str, str], KeyEntry] = {}
        self.conflicts = 0

    def __len__(self) -> int:
        return len(self._entries)

    def add(
        self,
        context: str,
        question: str,
        gold: Answer | None,
        *,
        rung: int | None = None,
        question_id: int | str | None = None,
        alignment: str | None = None,
    ) -> None:
        """Add a question: `context` is the given info (or any text ending with it); a None
        `gold` is a question without an exact answer (the fake answers it by its belief)."""
        if gold not in ("yes", "no", None):
            raise ValueError(f"gold must be 'yes' or 'no', not {gold!r}")
        line = question if question.lstrip().startswith(_QUESTION) else _QUESTION + question
        key = (_normalise(_last_paragraph(context)), _normalise(line))
        old = self._entries.get(key)
        if old is not None and old.gold != gold:
            # Same text, different answers: the prompt cannot tell them apart, so answer 50/50.
            self.conflicts += 1
            self._entries[key] = KeyEntry(None, rung, None, alignment)
            return
        self._entries[key] = KeyEntry(gold, rung, question_id, alignment)

    def add_block(self, block: str, gold: Answer | None, **kwargs: int | str | None) -> None:
        """Add a question from its whole question block (or a whole prompt containing it)."""
        key = prompt_key(block)
        if key is None:
            raise ValueError("no line starting with 'Question: ' in the block")
        self.add(key[0], key[1], gold, **kwargs)  # type: ignore[arg-type]

    def add_graph(
        self,
        block: str,
        edges: str,
        variables: Iterable[str],
        *,
        question_id: int | str | None = None,
        alignment: str | None = None,
    ) -> None:
        """Add a whole-graph item from its question block: `edges` the true graph's edge text
        ("" when no truth is known). Two graphs shown alike with different truths are kept as
        one graph of unknown truth."""
        key = prompt_key(block)
        if key is None:
            raise ValueError("no line starting with 'Question: ' in the block")
        names = tuple(variables)
        old = self._entries.get(key)
        if old is not None and (old.graph != edges or old.variables != names):
            self.conflicts += 1
            edges = ""
        self._entries[key] = KeyEntry(
            None, None, question_id, alignment, graph=edges, variables=names
        )

    @classmethod
    def from_questions(
        cls, questions: Iterable[tuple[str, str, Answer] | tuple[str, str, Answer, int]]
    ) -> AnswerKey:
        """Build from (given_info, question, gold) or (given_info, question, gold, rung)."""
        key = cls()
        for item in questions:
            key.add(item[0], item[1], item[2], rung=item[3] if len(item) > 3 else None)  # type: ignore[misc]
        return key

    def items(self) -> list[tuple[tuple[str, str], KeyEntry]]:
        """(key, entry) pairs, in the order the questions were added."""
        return list(self._entries.items())

    def get(self, key: tuple[str, str]) -> KeyEntry | None:
        """Entry of a key made by `prompt_key`."""
        return self._entries.get(key)

    def entry(self, prompt: str) -> KeyEntry | None:
        key = prompt_key(prompt)
        return None if key is None else self._entries.get(key)

    def lookup(self, prompt: str) -> Answer | None:
        """Gold answer of the question in `prompt`, or None if unknown."""
        entry = self.entry(prompt)
        return None if entry is None else entry.gold
