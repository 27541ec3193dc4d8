"""SHD, NHD and edge scores on hand-made graphs (the conventions of crawdad.causal.structure)."""

from __future__ import annotations

import pytest

from crawdad.causal.structure import Graph, score_graph
from crawdad.errors import DataError

V = ("A", "B", "C", "D")
TRUTH = Graph.of(V, [("A", "B"), ("B", "C"), ("A", "C")])


def test_the_true_graph_scores_perfectly() -> None:
    s = score_graph(TRUTH, TRUTH)
    assert (s.shd, s.nhd, s.edge_f1, s.orientation_f1) == (0, 0.0, 1.0, 1.0)


def test_a_reversed_edge_counts_once_in_shd_twice_in_nhd() -> None:
    s = score_graph(Graph.of(V, [("B", "A"), ("B", "C"), ("A", "C")]), TRUTH)
    assert s.shd == 1
    assert s.nhd == pytest.approx(2 / 16)
    assert s.edge_f1 == 1.0  # the skeleton is right
    assert s.orientation_precision == pytest.approx(2 / 3)
    assert s.orientation_recall == pytest.approx(2 / 3)


def test_missing_and_extra_edges_count_one_each() -> None:
    predicted = Graph.of(V, [("A", "B"), ("C", "D")])  # misses B->C and A->C, adds C->D
    s = score_graph(predicted, TRUTH)
    assert s.shd == 3
    assert s.nhd == pytest.approx(3 / 16)
    assert s.edge_precision == pytest.approx(1 / 2)
    assert s.edge_recall == pytest.approx(1 / 3)
    assert s.edge_f1 == pytest.approx(2 * (1 / 2) * (1 / 3) / (1 / 2 + 1 / 3))


def test_both_directions_where_one_is_true_counts_once() -> None:
    predicted = Graph.of(V, [("A", "B"), ("B", "A"), ("B", "C"), ("A", "C")])
    s = score_graph(predicted, TRUTH)
    assert s.shd == 1 and s.nhd == pytest.approx(1 / 16)
    assert not predicted.is_acyclic() and TRUTH.is_acyclic()


def test_an_empty_prediction_has_no_precision_and_zero_recall() -> None:
    s = score_graph(Graph.of(V, []), TRUTH)
    assert (s.shd, s.edge_precision, s.edge_recall, s.edge_f1) == (3, None, 0.0, None)


def test_adjacency_rows_are_causes() -> None:
    assert Graph.of(("X", "Y"), [("X", "Y")]).adjacency() == [[0, 1], [0, 0]]


@pytest.mark.parametrize(
    ("variables", "edges", "match"),
    [
        (("A", "A"), [], "repeat"),
        (("A", "B"), [("A", "Z")], "not in"),
        (("A", "B"), [("A", "A")], "self-loop"),
    ],
)
def test_bad_graphs_are_named(variables, edges, match) -> None:
    with pytest.raises(DataError, match=match):
        Graph.of(variables, edges)


def test_graphs_over_other_variables_are_refused() -> None:
    with pytest.raises(DataError, match="different variables"):
        score_graph(Graph.of(("A", "B"), []), TRUTH)
