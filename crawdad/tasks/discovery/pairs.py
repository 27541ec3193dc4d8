"""Causal discovery one ordered variable pair at a time (MAC's Meta Agents Model): "is there a
direct causal relationship from A to B?", answered yes or no, for every ordered pair of a graph's
variables. The graph an agent (or a protocol) implies is assembled back from its pairs' answers
by the analysis and scored against the true graph (`crawdad.causal.structure`).

Every protocol runs on it unchanged: the answers are labels, so agreement, votes, the judge's
verdict and the sides of a judge debate (MAC's affirmative opens with its own answer, the negative
argues against it) work as for CLadder.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crawdad.backends.base import ChatResult
from crawdad.config import SelectionConfig, TableLimits
from crawdad.data.discovery_public import load_graphs
from crawdad.data.discovery_sets import DiscoveryGraph, GraphSet
from crawdad.errors import DataError
from crawdad.records import DatasetInfo, Turn
from crawdad.tasks.base import Ask
from crawdad.tasks.discovery.whole_graph import select_graphs
from crawdad.tasks.yes_no import YesNoAnswers


@dataclass(frozen=True)
class PairItem:
    """One ordered pair of one graph's variables."""

    graph: DiscoveryGraph
    cause: str
    effect: str

    @property
    def question_id(self) -> str:
        return f"{self.graph.graph_id}:{self._key(self.cause)}->{self._key(self.effect)}"

    def _key(self, name: str) -> str:
        """CLadder's symbol (X, V2) where there is one: short, and free of spaces."""
        if self.graph.symbols:
            return self.graph.symbols[self.graph.names.index(name)]
        return name

    @property
    def gold(self) -> str:
        assert self.graph.truth is not None
        return "yes" if (self.cause, self.effect) in self.graph.truth.edges else "no"


@dataclass(frozen=True)
class PairDataset:
    questions: list[PairItem]
    graphs: list[DiscoveryGraph]
    info: DatasetInfo


def pairs_of(graph: DiscoveryGraph) -> list[PairItem]:
    return [PairItem(graph, a, b) for a, b in itertools.permutations(graph.names, 2)]


def _dataset(graphs: list[DiscoveryGraph], info: DatasetInfo) -> PairDataset:
    pairs = [p for g in graphs for p in pairs_of(g)]
    return PairDataset(
        pairs,
        graphs,
        info.model_copy(
            update={"n_selected": len(pairs), "selected_ids": [p.question_id for p in pairs]}
        ),
    )


class DiscoveryPairsTask(YesNoAnswers):
    name = "discovery-pairs"
    prompt_set = "mac-pairs"
    report_sections = ("crawdad.analysis.tasks.discovery",)

    def load(
        self, path: Path, questions_file: str | None = None, *, limits: TableLimits | None = None
    ) -> PairDataset:
        found = load_graphs(path, questions_file)
        return _dataset(_with_truth(found), _info(found, questions_file))

    def select(self, dataset: PairDataset, selection: SelectionConfig, seed: int) -> PairDataset:
        """Whole graphs: `ranges` index the graphs, `alignments` filter them, `sample` draws N
        graphs (seeded), `limit` keeps the first N; every ordered pair of each is an item."""
        graphs = select_graphs(dataset.graphs, selection, seed)
        info = dataset.info.model_copy(
            update={"selection": selection.model_dump(exclude_defaults=True)}
        )
        return _dataset(graphs, info)

    def show(self, item: PairItem) -> str:
        return (
            f"{item.graph.described()}\n\n"
            f"Question: Is there a direct causal relationship from {item.cause} to {item.effect}?"
        )

    def record_fields(self, item: PairItem) -> dict[str, Any]:
        graph = item.graph
        return {
            "gold": item.gold,
            "alignment": graph.alignment,
            "story_id": graph.story_id,
            "graph_id": graph.structure,
            "item": {
                "graph": graph.graph_id,
                "source": graph.source,
                "cause": item.cause,
                "effect": item.effect,
                "variables": list(graph.names),
            },
        }

    async def score_turn(
        self, ask: Ask, model: str, item: PairItem, turn: Turn, result: ChatResult
    ) -> None:
        return None


def _with_truth(found: GraphSet) -> list[DiscoveryGraph]:
    missing = [g.graph_id for g in found.graphs if g.truth is None]
    if missing:
        raise DataError(
            f"{found.source}: {len(missing)} graph(s) have no known true graph "
            f"({', '.join(missing[:3])}); pairwise answers cannot be scored without one"
        )
    return found.graphs


def _info(found: GraphSet, questions_file: str | None) -> DatasetInfo:
    return DatasetInfo(
        source=found.source,
        questions_file=questions_file or "",
        models_file=found.source,
        sha256=found.sha256,
        n_total=sum(len(g.names) * (len(g.names) - 1) for g in found.graphs),
        n_selected=0,
    )
