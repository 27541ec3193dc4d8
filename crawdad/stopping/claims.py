"""What a decision is a claim about, in words no wider than the evidence: the pool its
questions were drawn from (`pool_words`) and the level it holds at (`level_words`).

A run's questions come from one pool, CLadder's file or the selection made of it, in an order
drawn at random from the run's seed. A decision is about that pool and the models' answers to
it under the run's settings, nothing wider: other questions (another benchmark, CLadder's
other stories), other temperatures or prompts, other seeds are outside it. Pure text over plain
values; nothing of crawdad is imported.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

UNKNOWN_POOL = "the run's selected questions"


def _listed(values: list[Any]) -> str:
    return ", ".join(str(v) for v in values)


def selection_words(selection: Mapping[str, Any]) -> tuple[str, str]:
    """A selection in words: its filters ("rung 3, query type ate") and how the run took its
    questions ("the first 360 of the seeded order"); "" for none. `selection`: a
    `SelectionConfig` dumped (defaults left out or not)."""
    parts = []
    rungs = list(selection.get("rungs") or [])
    if rungs:
        parts.append(f"{'rung' if len(rungs) == 1 else 'rungs'} {_listed(rungs)}")
    if types := list(selection.get("query_types") or []):
        parts.append(f"{'query type' if len(types) == 1 else 'query types'} {_listed(types)}")
    if aligned := list(selection.get("alignments") or []):
        parts.append(f"{_listed(aligned)} alignment")
    if ranges := list(selection.get("ranges") or []):
        parts.append(f"file positions {_listed(ranges)}")
    taken = []
    if sample := selection.get("sample"):
        taken.append(f"a seeded sample of {sample:,} stratified by rung and alignment")
    order = selection.get("order") or "seeded"
    if limit := selection.get("limit"):
        taken.append(f"the first {limit:,} of the {'file' if order == 'file' else 'seeded'} order")
    elif order == "file":
        taken.append("in file order")
    return ", ".join(parts), ", ".join(taken)


def pool_words(selected: int, source: str, selection: Mapping[str, Any] | None = None) -> str:
    """The pool a run's questions were drawn from, named where its figures stand: "the 10,112
    questions of cladder-v1-q-balanced.json", "the 360 questions of rung 3 selected from
    data/x.json (the first 360 of the seeded order)". `source`: the questions file as the
    manifest names it; `selected`: the questions the run selected."""
    filters, taken = selection_words(selection or {})
    noun = "question" if selected == 1 else "questions"
    if not filters and not taken:
        return f"the {selected:,} {noun} of {source}"
    of = f" of {filters}" if filters else ""
    how = f" ({taken})" if taken else ""
    return f"the {selected:,} {noun}{of} selected from {source}{how}"


def _percent(share: float) -> str:
    return f"{100 * share:.4g}%"


def level_words(alpha: float, comparisons: int = 1) -> str:
    """The level a decision holds at: "95% confidence", or, where alpha is shared among several
    comparisons (Bonferroni), "95% confidence, alpha 5% shared by 4 comparisons (each sequence
    at 98.75%)". `alpha`: the rule's, before it is shared."""
    head = f"{_percent(1 - alpha)} confidence"
    if comparisons <= 1:
        return head
    each = 1 - alpha / comparisons
    return (
        f"{head}, alpha {_percent(alpha)} shared by {comparisons} comparisons (each sequence "
        f"at {_percent(each)})"
    )


STOP_ESTIMATE = "the difference at the stop; stopping early overstates it"
FIXED_SAMPLE = (
    "stopped early: its fixed-sample intervals (Wilson, Newcombe, McNemar, by rung) ignore the "
    "optional stopping and do not hold at their stated level; quote its confidence sequence at "
    "the stop"
)
