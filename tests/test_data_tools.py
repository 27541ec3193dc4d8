"""The data tools (crawdad.tools.data_tools): against the exact engine on samples large enough
to agree, against pgmpy (an independent implementation: maximum likelihood fit and do-query,
its backdoor and front-door checks), exact counts against pandas, and bad calls named."""

from __future__ import annotations

import itertools
import json
import pickle
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from crawdad.causal.model import BinaryModel
from crawdad.causal.queries import QUANTITY
from crawdad.causal.sample import sample_rows
from crawdad.errors import DataError
from crawdad.tools.causal import MalformedCall, ToolError
from crawdad.tools.data_tools import (
    TOOLS,
    Table,
    compute,
    parse_call,
    parse_estimate,
    tool_spec,
    tool_specs,
)
from tests.conftest import SHARED_SAMPLE

HIDDEN = {"IV": {"V1"}, "arrowhead": {"V2"}, "frontdoor": {"V1"}}
CONFOUNDED = BinaryModel.from_tables(
    {
        "V1": ((), 0.3),
        "X": (("V1",), [0.2, 0.7]),
        "Y": (("X", "V1"), [[0.1, 0.5], [0.6, 0.9]]),
    }
)
EDGES = ["V1->X", "V1->Y", "X->Y"]


def call(table: Table, tool: str, **args):
    return compute(table, parse_call(tool, args))


@pytest.fixture(scope="module")
def one_model_per_graph():
    path = SHARED_SAMPLE / "cladder-sample-meta-models.json"
    if not path.exists():
        pytest.skip(f"the CLadder sample is not at {SHARED_SAMPLE}")
    out = {}
    for raw in json.loads(path.read_text()):
        if raw.get("builder") == "difficulty" and raw["graph_id"] not in out:
            out[raw["graph_id"]] = raw
    assert len(out) == 10
    return out


def _observed(raw: dict, rows: int, seed: int) -> tuple[BinaryModel, Table, list[str]]:
    model = BinaryModel.from_meta(raw)
    drawn = sample_rows(model, rows, seed)
    for h in HIDDEN.get(raw["graph_id"], ()):
        del drawn[h]
    return model, Table.from_rows(drawn), raw["structure"].split(",")


def test_effects_agree_with_the_exact_engine_on_large_samples(one_model_per_graph):
    """400k rows: every identified effect within 0.015 of the model's exact value (several
    standard errors); the unidentified ones refused with the reason."""
    compared = 0
    for graph, raw in sorted(one_model_per_graph.items()):
        model, table, edges = _observed(raw, 400_000, seed=5)
        meds = sorted(
            model.descendants("X") & {v for v in model.order if "Y" in model.descendants(v)}
        )
        for effect in ("ate", "ett", "nde", "nie"):
            if effect in ("nde", "nie") and not meds:
                continue
            args = {"effect": effect, "treatment": "X", "outcome": "Y", "edges": edges}
            not_identified = (graph, effect) in {
                ("IV", "ate"),
                ("IV", "ett"),
                ("IV", "nde"),
                ("IV", "nie"),
                ("arrowhead", "nde"),
                ("arrowhead", "nie"),
            }
            if not_identified:
                with pytest.raises(ToolError, match="not identified"):
                    call(table, "estimate_effect", **args)
                continue
            got = call(table, "estimate_effect", **args)
            exact = float(QUANTITY[effect](model, {"treatment": "X", "outcome": "Y"}))
            assert got["value"] == pytest.approx(exact, abs=0.015), (graph, effect, got)
            compared += 1
    assert compared >= 20


def test_a_conditional_effect_agrees_with_the_engine_within_its_stratum():
    table = Table.from_rows(sample_rows(CONFOUNDED, 300_000, seed=2))
    for v1 in (0, 1):
        got = call(
            table,
            "estimate_effect",
            effect="cate",
            treatment="X",
            outcome="Y",
            edges=EDGES,
            condition={"V1": v1},
        )
        exact = CONFOUNDED.tables["Y"][(1, v1)] - CONFOUNDED.tables["Y"][(0, v1)]
        assert got["value"] == pytest.approx(exact, abs=0.01)
        assert got["estimand"] == f"P(Y=1|X=1,V1={v1}) - P(Y=1|X=0,V1={v1})"


def test_adjustment_equals_pgmpy_do_query_on_the_fitted_network():
    """Where the graph is complete, pgmpy's maximum-likelihood network and its do-query are the
    backdoor formula over the sample: the two agree to float precision."""
    from pgmpy.inference import CausalInference
    from pgmpy.models import DiscreteBayesianNetwork

    rows = sample_rows(CONFOUNDED, 5_000, seed=9)
    table = Table.from_rows(rows)
    df = pd.DataFrame({k: v.astype(int) for k, v in rows.items()})
    bn = DiscreteBayesianNetwork([tuple(e.split("->")) for e in EDGES])
    bn = bn.fit(df)  # maximum likelihood (pgmpy's DiscreteMLE) by default
    infer = CausalInference(bn)
    do = [infer.query(["Y"], do={"X": x}, show_progress=False).get_value(Y=1) for x in (0, 1)]
    got = call(table, "estimate_effect", effect="ate", treatment="X", outcome="Y", edges=EDGES)
    assert got["value"] == pytest.approx(do[1] - do[0], abs=1e-6)
    assert got["adjustment"] == ["V1"] and got["method"] == "backdoor"


def test_identification_agrees_with_pgmpy_on_every_cladder_graph(one_model_per_graph):
    from pgmpy.base import DAG as PgmpyDAG
    from pgmpy.inference import CausalInference

    for graph, raw in sorted(one_model_per_graph.items()):
        model, table, edges = _observed(raw, 1000, seed=1)
        ours = call(table, "identify_effect", treatment="X", outcome="Y", edges=edges)
        dag = PgmpyDAG([tuple(e.split("->")) for e in edges])
        dag.add_nodes_from(model.order)
        infer = CausalInference(dag)
        # pgmpy's check leaves out Pearl's first condition (no descendant of X in the set)
        others = sorted(set(model.order) - {"X", "Y"} - model.descendants("X"))
        for s in ours["backdoor"]["minimal_sets"]:
            assert infer.is_valid_backdoor_adjustment_set("X", "Y", Z=set(s)), (graph, s)
        for size in range(len(others) + 1):
            for combo in itertools.combinations(others, size):
                mine = call(
                    table,
                    "identify_effect",
                    treatment="X",
                    outcome="Y",
                    edges=edges,
                    adjustment=list(combo),
                )["backdoor"]["valid"]
                assert mine == infer.is_valid_backdoor_adjustment_set("X", "Y", Z=set(combo))
        for d in model.descendants("X") - {"Y"}:
            assert not call(
                table, "identify_effect", treatment="X", outcome="Y", edges=edges, adjustment=[d]
            )["backdoor"]["valid"]
        fronts = {frozenset(s) for s in infer.get_all_frontdoor_adjustment_sets("X", "Y")}
        mine = ours["frontdoor"]["valid"]
        assert mine == (frozenset(ours["frontdoor"]["mediators"]) in fronts), graph
        assert ours["unobserved"] == sorted(HIDDEN.get(graph, ()))
        expected = {"IV": None, "frontdoor": "frontdoor"}.get(graph, "backdoor")
        assert ours["identified_by"] == expected, graph


def test_conditional_probability_and_describe_count_exactly():
    rows = sample_rows(CONFOUNDED, 2_000, seed=4)
    table = Table.from_rows(rows)
    df = pd.DataFrame(rows)
    got = call(table, "conditional_probability", outcome="Y", given={"X": 1, "V1": 0})
    sub = df[(df.X == 1) & (df.V1 == 0)]
    assert got["rows"] == len(sub) and got["count"] == int(sub.Y.sum())
    assert got["probability"] == pytest.approx(sub.Y.mean(), abs=1e-6)
    assert got["event"] == "P(Y=1 | X=1, V1=0)"
    whole = call(table, "conditional_probability", outcome="Y", value=0, by=["X"])
    for cell, x in zip(whole["table"], (0, 1), strict=True):
        assert cell["rows"] == int((x == df.X).sum())
        assert cell["count"] == int(((x == df.X) & (df.Y == 0)).sum())
    desc = call(table, "describe_data")
    assert desc["rows"] == 2000 and desc["columns"] == ["V1", "X", "Y"]
    assert desc["variables"]["X"]["ones"] == int(df.X.sum())


def test_the_table_reads_a_csv_as_written_and_refuses_bad_ones(tmp_path: Path):
    rows = sample_rows(CONFOUNDED, 300, seed=1)
    path = tmp_path / "t.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    assert Table.from_csv(path).counts.cells.tolist() == Table.from_rows(rows).counts.cells.tolist()
    (tmp_path / "bad.csv").write_text("X,Y\n0,1\n2,0\n")
    with pytest.raises(DataError, match="values other than 0 and 1"):
        Table.from_csv(tmp_path / "bad.csv")
    (tmp_path / "short.csv").write_text("X,Y\n0\n")
    with pytest.raises(DataError, match="1 values for 2 columns"):
        Table.from_csv(tmp_path / "short.csv")
    with pytest.raises(DataError, match="cannot read the table"):
        Table.from_csv(tmp_path / "missing.csv")
    with pytest.raises(DataError, match="not plain names"):
        Table.from_rows({"a b": np.zeros(3)})


def test_tools_pickle_for_the_worker_process():
    table = Table.from_rows(sample_rows(CONFOUNDED, 500, seed=1))
    work = pickle.loads(pickle.dumps(partial(compute, table)))
    parsed = pickle.loads(
        pickle.dumps(
            parse_estimate(
                {"effect": "ate", "treatment": "X", "outcome": "Y", "adjustment": ["V1"]}
            )
        )
    )
    assert work(parsed) == compute(table, parsed)


def test_schemas_are_function_tools_whose_required_arguments_exist():
    specs = tool_specs()
    assert [s["function"]["name"] for s in specs] == list(TOOLS)
    for s in specs:
        params = s["function"]["parameters"]
        assert set(params.get("required", [])) <= set(params["properties"])
        assert s["type"] == "function" and s["function"]["description"]
    assert tool_spec("estimate_effect")["function"]["parameters"]["properties"]["effect"]["enum"]


BAD = [
    ("conditional_probability", {}, MalformedCall, "missing argument.*outcome"),
    ("conditional_probability", {"outcome": "Y", "color": 1}, MalformedCall, "unknown argument"),
    ("conditional_probability", {"outcome": "Z"}, ToolError, "Z not among the table's columns"),
    ("conditional_probability", {"outcome": "Y", "given": {"X": 2}}, MalformedCall, "0 or 1"),
    ("conditional_probability", {"outcome": "Y", "given": {"Y": 1}}, ToolError, "appears twice"),
    ("conditional_probability", {"outcome": "Y", "value": "yes"}, MalformedCall, "0 or 1"),
    (
        "estimate_effect",
        {"effect": "ace", "treatment": "X", "outcome": "Y"},
        MalformedCall,
        "effect 'ace' is not one of",
    ),
    (
        "estimate_effect",
        {"effect": "cate", "treatment": "X", "outcome": "Y"},
        MalformedCall,
        "cate needs the subgroup",
    ),
    (
        "estimate_effect",
        {"effect": "ate", "treatment": "X", "outcome": "Y", "edges": EDGES, "adjustment": []},
        ToolError,
        r"\{\} is not a valid backdoor adjustment set.*\[\['V1'\]\]",
    ),
    (
        "estimate_effect",
        {"effect": "ate", "treatment": "X", "outcome": "Y", "edges": ["X->Y", "Y->X"]},
        ToolError,
        "cycle",
    ),
    (
        "estimate_effect",
        {"effect": "ate", "treatment": "X", "outcome": "Y", "edges": ["X=>Y"]},
        MalformedCall,
        "not of the form",
    ),
    (
        "estimate_effect",
        {"effect": "ate", "treatment": "X", "outcome": "X"},
        ToolError,
        "must differ",
    ),
    (
        "estimate_effect",
        {"effect": "nde", "treatment": "X", "outcome": "Y"},
        ToolError,
        "needs `mediators`",
    ),
    (
        "estimate_effect",
        {"effect": "ate", "treatment": "X", "outcome": "Y", "adjustment": ["W"]},
        ToolError,
        "W not among the table's columns",
    ),
    (
        "identify_effect",
        {"treatment": "X", "outcome": "Y", "edges": ["X->Y"], "adjustment": ["Q"]},
        ToolError,
        "Q not in the graph",
    ),
    ("describe_data", {"variables": "X"}, MalformedCall, "list of variable names"),
    ("describe_data", [], MalformedCall, "must be a JSON object"),
    (
        "estimate_effect",
        {
            "effect": "ate",
            "treatment": "X",
            "outcome": "Y",
            "adjustment": [f"V{i}" for i in range(11)],
        },
        ToolError,
        "at most 10",
    ),
]


@pytest.mark.parametrize(("tool", "args", "error", "message"), BAD)
def test_bad_calls_are_named(tool, args, error, message):
    table = Table.from_rows(sample_rows(CONFOUNDED, 500, seed=1))
    with pytest.raises(error, match=message):
        compute(table, parse_call(tool, args))


def test_an_empty_stratum_is_named_not_divided_by():
    """No treated row among V1=1: adjustment over V1 has no data there, and says so."""
    x = np.array([0, 1, 0, 0, 1, 0])
    v1 = np.array([0, 0, 1, 1, 0, 0])
    y = np.array([0, 1, 1, 0, 1, 0])
    table = Table.from_rows({"V1": v1, "X": x, "Y": y})
    with pytest.raises(ToolError, match=r"no row has V1=1, X=1"):
        call(table, "estimate_effect", effect="ate", treatment="X", outcome="Y", edges=EDGES)
    with pytest.raises(ToolError, match="no row has X=1, V1=1"):
        call(table, "conditional_probability", outcome="Y", given={"X": 1, "V1": 1})
    empty_ok = call(table, "conditional_probability", outcome="Y", by=["X", "V1"])
    assert empty_ok["table"][3] == {
        "event": "P(Y=1 | X=1, V1=1)",
        "probability": None,
        "count": 0,
        "rows": 0,
    }
    with pytest.raises(MalformedCall, match="no data tool"):
        parse_call("sql", {})
