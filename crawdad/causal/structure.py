"""Causal graphs as edge sets, and how far a learned graph is from the true one.

The conventions (stated here once, used by every report):

- **SHD** (structural Hamming distance) counts the unordered variable pairs whose state differs,
  a state being: no edge, a->b, b->a, or both directions (a graph assembled from pairwise
  answers can hold both). So a missing or extra edge counts 1 and a **reversed edge counts once**.
- **NHD** (normalized Hamming distance, Kıcıman et al. 2023, as MAC reports it): the adjacency
  matrix entries that differ over n²; a reversed edge differs in two entries.
- **Edge (skeleton) precision/recall/F1** ignore direction; **orientation** precision/recall/F1
  count directed edges, so a reversed edge is both a false positive and a false negative.
Precision of an empty predicted graph and recall against an empty true graph are undefined
(None), never 0 or 1 by fiat.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from crawdad.errors import DataError

Edge = tuple[str, str]


@dataclass(frozen=True)
class Graph:
    """Variables in a fixed order and directed edges between them (cause, effect)."""

    variables: tuple[str, ...]
    edges: frozenset[Edge]

    @classmethod
    def of(cls, variables: Sequence[str], edges: Iterable[Edge], where: str = "graph") -> Graph:
        names = tuple(variables)
        if len(set(names)) != len(names):
            raise DataError(f"{where}: variable names repeat: {sorted(names)}")
        known = set(names)
        out = set()
        for a, b in edges:
            if a not in known or b not in known:
                raise DataError(f"{where}: edge {a}->{b} names a variable not in {list(names)}")
            if a == b:
                raise DataError(f"{where}: edge {a}->{b} is a self-loop")
            out.add((a, b))
        return cls(names, frozenset(out))

    def state(self, a: str, b: str) -> tuple[bool, bool]:
        return (a, b) in self.edges, (b, a) in self.edges

    def adjacency(self) -> list[list[int]]:
        """Row cause, column effect, in the order of `variables`."""
        return [[int((a, b) in self.edges) for b in self.variables] for a in self.variables]

    @property
    def skeleton(self) -> frozenset[frozenset[str]]:
        return frozenset(frozenset(e) for e in self.edges)

    def is_acyclic(self) -> bool:
        indegree = {v: 0 for v in self.variables}
        for _, b in self.edges:
            indegree[b] += 1
        ready = [v for v, d in indegree.items() if d == 0]
        seen = 0
        while ready:
            v = ready.pop()
            seen += 1
            for a, b in self.edges:
                if a == v:
                    indegree[b] -= 1
                    if indegree[b] == 0:
                        ready.append(b)
        return seen == len(self.variables)


@dataclass(frozen=True)
class GraphScore:
    shd: int
    nhd: float
    edge_precision: float | None
    edge_recall: float | None
    edge_f1: float | None
    orientation_precision: float | None
    orientation_recall: float | None
    orientation_f1: float | None
    true_edges: int
    predicted_edges: int


def score_graph(predicted: Graph, truth: Graph) -> GraphScore:
    """How far `predicted` is from `truth`, over the same variables."""
    if set(predicted.variables) != set(truth.variables):
        raise DataError(
            f"the graphs have different variables: predicted {sorted(predicted.variables)}, "
            f"true {sorted(truth.variables)}"
        )
    n = len(truth.variables)
    shd = sum(
        predicted.state(a, b) != truth.state(a, b)
        for a, b in itertools.combinations(truth.variables, 2)
    )
    nhd = len(predicted.edges ^ truth.edges) / n**2 if n else 0.0
    edge = _prf(predicted.skeleton, truth.skeleton)
    orientation = _prf(predicted.edges, truth.edges)
    return GraphScore(
        shd=shd,
        nhd=nhd,
        edge_precision=edge[0],
        edge_recall=edge[1],
        edge_f1=edge[2],
        orientation_precision=orientation[0],
        orientation_recall=orientation[1],
        orientation_f1=orientation[2],
        true_edges=len(truth.edges),
        predicted_edges=len(predicted.edges),
    )


def _prf(predicted: frozenset, truth: frozenset) -> tuple[float | None, float | None, float | None]:
    hits = len(predicted & truth)
    precision = hits / len(predicted) if predicted else None
    recall = hits / len(truth) if truth else None
    if precision is None or recall is None:
        return precision, recall, None
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return precision, recall, f1
