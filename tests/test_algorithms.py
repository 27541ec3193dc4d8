"""The algorithm runner (crawdad.tools.algorithms): the same graph as causal-learn called directly,
every parameter checked against its allow-list, sizes refused before any work, the CPDAG
convention (an undirected edge is both directions) as structure.py scores it."""

from __future__ import annotations

import pickle

import numpy as np
import pandas as pd
import pytest

from crawdad.causal import BinaryModel
from crawdad.causal.sample import sample_rows
from crawdad.causal.structure import Graph, score_graph
from crawdad.tools import ToolError
from crawdad.tools.algorithms import (
    AlgorithmLimits,
    AlgorithmRun,
    endpoint_edges,
    pag_edges,
    run_algorithm,
    weighted_edges,
)


def continuous(rows: int = 600, seed: int = 0) -> pd.DataFrame:
    """A Sachs-like table: positive, skewed (non-Gaussian) values, a -> b -> c <- d."""
    rng = np.random.default_rng(seed)
    a = rng.exponential(2.0, rows)
    b = 1.5 * a + rng.exponential(1.0, rows)
    d = rng.uniform(0, 3, rows)
    c = 0.8 * b - 1.2 * d + rng.exponential(1.0, rows)
    return pd.DataFrame({"raf": a, "mek": b, "erk": c, "pka": d})


# A CLadder-style binary model: a collider X -> Y <- Z (orientable), and Y -> W.
COLLIDER = BinaryModel.from_tables(
    {
        "X": ((), 0.4),
        "Z": ((), 0.6),
        "Y": (("X", "Z"), [[0.1, 0.6], [0.7, 0.95]]),
        "W": (("Y",), [0.2, 0.8]),
    }
)


def cladder_table(rows: int = 3000) -> tuple[pd.DataFrame, Graph]:
    """Seeded rows sampled from the model (crawdad.causal.sample), as a discovery set has them."""
    table = pd.DataFrame(sample_rows(COLLIDER, rows, seed=7))
    truth = Graph.of(list(table.columns), [("X", "Y"), ("Z", "Y"), ("Y", "W")])
    return table, truth


def test_pc_and_ges_match_causal_learn_on_sampled_cladder_data() -> None:
    from causallearn.search.ConstraintBased.PC import pc
    from causallearn.search.ScoreBased.GES import ges

    table, truth = cladder_table()
    data = table.to_numpy(dtype=float)
    names = list(table.columns)
    run = run_algorithm(table, "pc")
    assert run.params["indep_test"] == "chisq"  # discrete data: chisq by default
    direct = pc(data, 0.05, "chisq", show_progress=False).G.graph
    assert np.array_equal(np.array(run.raw), direct)
    assert run.graph.edges == frozenset(endpoint_edges(direct, names).edges)
    assert {("X", "Y"), ("Z", "Y"), ("Y", "W")} <= run.graph.edges  # the collider, oriented
    assert set(run.graph.variables) == set(truth.variables)
    run = run_algorithm(table, "GES", {"score": "bdeu"})
    direct = ges(data, score_func="local_score_BDeu")["G"].graph
    assert np.array_equal(np.array(run.raw), direct)


@pytest.mark.parametrize(
    ("algorithm", "params"),
    [
        ("pc", {"alpha": 0.01}),
        ("ges", {}),
        ("DirectLiNGAM", {}),
        ("ica_lingam", {"random_state": 3}),
        ("exact", {"search_method": "dp"}),
    ],
)
def test_continuous_runs_match_causal_learn(algorithm: str, params: dict) -> None:
    from causallearn.search.ConstraintBased.PC import pc
    from causallearn.search.FCMBased.lingam import DirectLiNGAM, ICALiNGAM
    from causallearn.search.ScoreBased.ExactSearch import bic_exact_search
    from causallearn.search.ScoreBased.GES import ges

    table = continuous()
    data, names = table.to_numpy(), list(table.columns)
    run = run_algorithm(table, algorithm, params)
    if run.algorithm == "pc":
        direct = pc(data, 0.01, "fisherz", show_progress=False).G.graph
    elif run.algorithm == "ges":
        direct = ges(data, score_func="local_score_BIC")["G"].graph
    elif run.algorithm == "direct-lingam":
        direct = DirectLiNGAM().fit(data).adjacency_matrix_
    elif run.algorithm == "ica-lingam":
        direct = ICALiNGAM(random_state=3).fit(data).adjacency_matrix_
    else:
        direct = bic_exact_search(data, search_method="dp")[0]
    assert np.allclose(np.array(run.raw), direct)
    if run.algorithm in ("pc", "ges"):
        expected = endpoint_edges(direct, names).edges
    elif run.algorithm == "exact":
        expected = [(names[i], names[j]) for i in range(4) for j in range(4) if direct[i, j]]
    else:
        expected = [(names[j], names[i]) for i in range(4) for j in range(4) if direct[i, j]]
    assert run.graph.edges == frozenset(expected)
    assert run.rows == 600 and run.graph.variables == tuple(names)


def test_lingam_recovers_a_linear_non_gaussian_chain() -> None:
    run = run_algorithm(continuous(rows=2000), "direct-lingam", {"threshold": 0.3})
    assert run.graph.edges == {("raf", "mek"), ("mek", "erk"), ("pka", "erk")}
    assert run.edge_list() == ["mek -> erk", "pka -> erk", "raf -> mek"]


@pytest.mark.parametrize(
    ("algorithm", "params", "message"),
    [
        ("notears", {}, "algorithm 'notears' is not offered; the algorithms are pc, ges"),
        ("fci", {"depth": -2}, "depth = -2 is out of range: give -1 <= depth"),
        ("fci", {"stable": True}, "fci has no parameter 'stable'; its parameters are alpha"),
        ("fci", {"indep_test": "gsq"}, "gsq needs discrete data"),
        ("cdnod", {"context": "time"}, "context = 'time': give 'row' .* one of raf, mek, erk"),
        ("cdnod", {"context": 3}, "context = 3: give 'row'"),
        ("cdnod", {"max_depth": 2}, "cdnod has no parameter 'max_depth'"),
        ("pc", {"alpha": 0.7}, r"alpha = 0.7 is out of range: give 0.0 < alpha <= 0.5"),
        ("pc", {"alpha": 0}, "alpha = 0 is out of range"),
        ("pc", {"alpha": "0.05"}, "alpha must be a number, not '0.05'"),
        ("pc", {"alpha": True}, "alpha must be a number"),
        ("pc", {"indep_test": "kci"}, "indep_test = 'kci' is not offered: choose one of fisherz"),
        ("pc", {"indep_test": "chisq"}, "chisq needs discrete data .* column 'raf' has 600"),
        ("pc", {"depth": 2}, "pc has no parameter 'depth'; its parameters are alpha"),
        ("pc", {"uc_rule": 1.5}, "uc_rule must be a whole number"),
        (
            "ges",
            {"score": "local_score_CV_general"},
            "score = .* is not offered: choose one of bic",
        ),
        ("ges", {"score": "bdeu"}, "score bdeu needs discrete data"),
        ("ges", {"max_parents": 0}, "max_parents = 0 is out of range"),
        ("direct-lingam", {"measure": "kernel"}, "direct-lingam has no parameter 'measure'"),
        ("ica-lingam", {"threshold": -1}, "threshold must be a number >= 0"),
        ("exact", {"search_method": "bfs"}, "search_method = 'bfs' is not offered"),
        ("pc", ["alpha"], "params: give an object of parameter values"),
        ("", {}, "algorithm: give one of pc"),
    ],
)
def test_bad_parameters_are_refused_by_name(algorithm: str, params, message: str) -> None:
    with pytest.raises(ToolError, match=message):
        run_algorithm(continuous(), algorithm, params)


def test_tables_it_cannot_take_are_refused_before_any_work() -> None:
    limits = AlgorithmLimits()
    huge = pd.DataFrame(np.zeros((limits.max_rows + 1, 2)), columns=["a", "b"])
    with pytest.raises(ToolError, match=r"100,001 rows; at most 100,000 .*limits.max_rows"):
        run_algorithm(huge, "pc")
    wide = pd.DataFrame(np.zeros((20, 31)), columns=[f"v{i}" for i in range(31)])
    with pytest.raises(ToolError, match="31 variables; at most 30"):
        run_algorithm(wide, "pc")
    with pytest.raises(ToolError, match="exact search takes at most 3 variables"):
        run_algorithm(continuous(), "exact", limits=AlgorithmLimits(max_exact_variables=3))
    table = continuous()
    with pytest.raises(ToolError, match="discovery needs 10 at least"):
        run_algorithm(table.head(5), "pc")
    with pytest.raises(ToolError, match="'pka' never vary: drop them"):
        run_algorithm(table.assign(pka=1.0), "pc")
    with pytest.raises(ToolError, match="column 'mek' row 3 is nan"):
        run_algorithm(table.assign(mek=[1.0, 2.0, np.nan, *table["mek"][3:]]), "pc")
    with pytest.raises(ToolError, match="column 'raf' is not numeric"):
        run_algorithm(table.assign(raf="x"), "pc")
    with pytest.raises(ToolError, match="a pandas DataFrame"):
        run_algorithm(table.to_numpy(), "pc")  # type: ignore[arg-type]


def test_an_undirected_edge_is_both_directions_and_costs_one_shd() -> None:
    # causal-learn marks: G[j,i]=1, G[i,j]=-1 is i->j; both -1 is undirected
    g = np.array([[0, -1, 0], [-1, 0, -1], [0, 1, 0]])
    found = endpoint_edges(g, ["a", "b", "c"])
    assert sorted(found.edges) == [("a", "b"), ("b", "a"), ("b", "c")]
    assert found.undirected == [("a", "b")] and found.bidirected == []
    predicted = Graph.of(["a", "b", "c"], found.edges)
    truth = Graph.of(["a", "b", "c"], [("a", "b"), ("b", "c")])
    score = score_graph(predicted, truth)
    assert score.shd == 1 and score.edge_f1 == 1.0 and score.orientation_precision == 2 / 3
    with pytest.raises(ValueError, match="not a CPDAG's"):
        endpoint_edges(np.array([[0, 2], [1, 0]]), ["a", "b"])
    # LiNGAM: x_i = sum_j B[i,j] x_j, so B[1,0] = 0.9 is a -> b; below the threshold, nothing
    assert weighted_edges(np.array([[0, 0], [0.9, 0]]), ["a", "b"], 0.0).edges == [("a", "b")]
    assert weighted_edges(np.array([[0, 0], [0.9, 0]]), ["a", "b"], 1.0).edges == []


def test_the_runner_and_its_result_pickle_for_a_worker_process() -> None:
    run = run_algorithm(continuous(rows=200), "ges")
    again = pickle.loads(pickle.dumps(run))
    assert isinstance(again, AlgorithmRun) and again == run
    assert pickle.loads(pickle.dumps(run_algorithm)) is run_algorithm
    told = run.for_model()
    assert told["variables"] == ["raf", "mek", "erk", "pka"] and len(told["adjacency"]) == 4


def test_fci_runs_as_causal_learn_and_its_pag_maps_onto_the_graph() -> None:
    from causallearn.search.ConstraintBased.FCI import fci

    table, truth = cladder_table(1000)
    run = run_algorithm(table, "FCI", {"alpha": 0.01})
    direct, _ = fci(table.to_numpy(dtype=float), "chisq", 0.01, show_progress=False)
    assert np.array_equal(np.array(run.raw), direct.graph)
    assert run.params == {"alpha": 0.01, "indep_test": "chisq", "depth": -1, "max_path_length": -1}
    # The collider is found as X o-> Y <-o Z: kept as X -> Y and Z -> Y, marked partial.
    assert {("X", "Y"), ("Z", "Y"), ("Y", "W")} == run.graph.edges == truth.edges
    assert set(run.partial) == {("X", "Y"), ("Z", "Y")} and "X o-> Y" in run.edge_list()
    # Each PAG mark pair (G[i,j]: the mark at i; tail -1, arrowhead 1, circle 2).
    names = ["a", "b", "c", "d", "e"]
    pag = np.zeros((5, 5), dtype=int)
    for (i, j), (at_i, at_j) in {
        (0, 1): (-1, 1),  # a -> b
        (1, 2): (1, 2),  # b <-o c: c o-> b
        (2, 3): (1, 1),  # c <-> d
        (3, 4): (2, 2),  # d o-o e
    }.items():
        pag[i, j], pag[j, i] = at_i, at_j
    found = pag_edges(pag, names)
    assert sorted(found.edges) == [
        ("a", "b"), ("c", "b"), ("c", "d"), ("d", "c"), ("d", "e"), ("e", "d"),
    ]  # fmt: skip
    assert found.partial == [("c", "b")] and found.bidirected == [("c", "d")]
    assert found.undirected == [("d", "e")]
    with pytest.raises(ValueError, match="not a PAG's"):
        pag_edges(np.array([[0, 3], [1, 0]]), ["a", "b"])


def test_cdnod_takes_the_row_or_a_domain_column_as_its_context() -> None:
    from causallearn.search.ConstraintBased.CDNOD import cdnod

    table = continuous()
    run = run_algorithm(table, "cd-nod")
    assert run.params["context"] == "row" and run.algorithm == "cdnod"
    time_index = np.arange(len(table), dtype=float).reshape(-1, 1)
    direct = cdnod(table.to_numpy(), time_index, 0.05, "fisherz", show_progress=False).G.graph
    assert np.array_equal(np.array(run.raw), direct[:-1, :-1])  # the context node dropped
    assert run.graph.variables == tuple(table.columns)
    # A domain column: raf's mechanism shifts between two domains; the column stays a variable,
    # its edges CD-NOD's context edges.
    rng = np.random.default_rng(1)
    domain = np.repeat([0.0, 1.0], 300)
    raf = rng.normal(size=600) + 3 * domain
    shifted = pd.DataFrame(
        {"raf": raf, "mek": 1.5 * raf + rng.normal(size=600), "pka": rng.normal(size=600)}
    ).assign(domain=domain)
    run = run_algorithm(shifted, "cdnod", {"context": "domain"})
    assert run.graph.variables == ("raf", "mek", "pka", "domain")
    assert {("domain", "raf"), ("raf", "mek")} <= run.graph.edges
    assert not any("pka" in e for e in run.graph.edges)
