"""MAC's hybrids (section 3): one system's graph given to another as prior knowledge.

`WithPrior(task, priors, folder)` is the discovery task `task` whose items are shown with the
graph another system gave for the same graph (`priors`: graph id -> `PriorGraph`, read from that
system's run folder by `crawdad.run.priors`): after the question, a paragraph "Prior knowledge
from another system (...): A -> B; C -> D. It may be wrong: ...", and for a variable pair what
that graph says of the pair. Every protocol shows items through its task, so the prior reaches
every prompt the question does: a whole-graph debate's or the Meta Agents' (Coding-Debating: the
coding agents' graph as prior) and the coding agents' plan debate (Debating-Coding: the debate's
graph as prior). A record keeps the prior it was shown (`item.prior`, `item.prior_from`,
`item.prior_system`).

Only the prompt changes: the key a fake server finds a question by (the paragraph before the
question line, and that line) does not, and neither do the answers or the scoring.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from crawdad.causal.edge_text import NO_EDGES, parse_edges
from crawdad.tasks.base import Task

HEADING = "Prior knowledge from another system"


@dataclass(frozen=True)
class PriorGraph:
    edges: str | None  # the other system's edge text; None: it gave no graph for these variables
    system: str  # what gave it, as the prompt names it ("coding agents choosing ...")


def graph_of(item: Any) -> str:
    """The graph id of a discovery item (a whole graph, or a pair of its variables)."""
    return str(item.graph.graph_id)


def render(prior: PriorGraph, item: Any) -> str:
    """The paragraph a prompt shows after its question."""
    if prior.edges is None:
        return f"{HEADING} ({prior.system}): it gave no graph for these variables."
    edges = prior.edges if prior.edges.strip() else NO_EDGES
    text = (
        f"{HEADING} ({prior.system}): {edges}. It may be wrong: weigh it against your own "
        "reasoning."
    )
    cause, effect = getattr(item, "cause", None), getattr(item, "effect", None)
    if cause is not None and effect is not None:
        said = {(a.casefold(), b.casefold()) for a, b in parse_edges(edges)}
        has = (cause.casefold(), effect.casefold()) in said
        text += (
            f" By that graph, there is {'a' if has else 'no'} direct causal relationship from "
            f"{cause} to {effect}."
        )
    return text


class WithPrior:
    """`task`, its items shown with another system's graph (see the module doc)."""

    def __init__(self, task: Task, priors: Mapping[str, PriorGraph], folder: str) -> None:
        self.task = task
        self.priors = dict(priors)
        self.folder = folder
        self.name = task.name
        self.answers = task.answers
        self.prompt_set = task.prompt_set

    def __getattr__(self, name: str) -> Any:  # load, select, read, agree, score_turn, ...
        return getattr(self.task, name)

    def missing(self, items: Iterable[Any]) -> list[str]:
        """The graphs of `items` the other system's folder has no record of."""
        return sorted({graph_of(i) for i in items} - set(self.priors))

    def show(self, item: Any) -> str:
        shown = self.task.show(item)
        prior = self.priors.get(graph_of(item))
        return shown if prior is None else f"{shown}\n\n{render(prior, item)}"

    def record_fields(self, item: Any) -> dict[str, Any]:
        fields = self.task.record_fields(item)
        prior = self.priors.get(graph_of(item))
        if prior is not None:
            fields["item"] = {
                **fields["item"],
                "prior": prior.edges,
                "prior_from": self.folder,
                "prior_system": prior.system,
            }
        return fields


def prior_gaps(task: Any, items: Iterable[Any]) -> list[str]:
    """Graphs a run with a prior cannot show it for (none without a prior)."""
    return task.missing(items) if isinstance(task, WithPrior) else []
