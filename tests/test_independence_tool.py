"""The independence_test data tool (the Causal Agent's Fisher-z test, paper 001): on tables
sampled from known models it finds the dependence and the (conditional) independence the
models imply, its p-value is Fisher-z's as written out by hand, and bad calls are tool errors
(malformed when they do not fit the schema) behind the boundary."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy.stats import norm

from crawdad.causal import BinaryModel
from crawdad.causal.sample import sample_rows
from crawdad.config import ToolLimits
from crawdad.tools import boundary
from crawdad.tools.data_tools import Table
from crawdad.tools.independence import ALPHA
from crawdad.tools.registry import tools_for

# X -> M -> Y: X and Y dependent, independent given M; W is an independent coin.
CHAIN = BinaryModel.from_tables(
    {
        "X": ((), 0.5),
        "M": (("X",), [0.15, 0.85]),
        "Y": (("M",), [0.2, 0.8]),
        "W": ((), 0.4),
    }
)


@pytest.fixture(scope="module")
def table() -> Table:
    return Table.from_rows(sample_rows(CHAIN, 4000, seed=11))


async def _test(table: Table, arguments: str) -> boundary.Outcome:
    return await boundary.call(
        tools_for(["independence_test"], table=table), "independence_test", arguments, ToolLimits()
    )


def _fisher_z(table: Table, x: str, y: str, z: list[str]) -> float:
    """Fisher's z of the partial correlation, written out (not causal-learn's code)."""
    counts = table.counts
    rows = np.repeat(np.array([r[:-1] for r in counts.rows()], dtype=float), counts.cells, 0)
    cols = [counts.columns.index(v) for v in (x, y, *z)]
    precision = np.linalg.inv(np.corrcoef(rows[:, cols].T))
    r = -precision[0, 1] / math.sqrt(precision[0, 0] * precision[1, 1])
    stat = math.sqrt(counts.n - len(z) - 3) * abs(0.5 * math.log((1 + r) / (1 - r)))
    return float(2 * (1 - norm.cdf(stat)))


@pytest.mark.parametrize(
    ("x", "y", "condition", "independent"),
    [
        ("X", "Y", [], False),  # the chain's ends are dependent
        ("X", "M", ["Y"], False),
        ("X", "Y", ["M"], True),  # ... independent given the middle
        ("X", "W", [], True),  # an independent coin
        ("Y", "W", ["X", "M"], True),
    ],
)
async def test_the_test_finds_what_the_model_implies(
    table: Table, x: str, y: str, condition: list[str], independent: bool
) -> None:
    outcome = await _test(table, json.dumps({"variables": [x, y], "condition": condition}))
    assert outcome.error is None, outcome.error
    v = outcome.value
    assert v["independent"] is independent and v["test"] == "fisherz" and v["alpha"] == ALPHA
    assert (v["p_value"] >= ALPHA) is independent
    assert v["p_value"] == pytest.approx(_fisher_z(table, x, y, condition), abs=1e-6)
    assert v["variables"] == [x, y] and v["condition"] == condition and v["rows"] == 4000
    assert ("not independent" in v["conclusion"]) is not independent


@pytest.mark.parametrize(
    ("arguments", "malformed", "says"),
    [
        ("{}", True, "missing argument"),
        ('{"variables": ["X"]}', True, "two different variables"),
        ('{"variables": ["X", "X"]}', True, "two different variables"),
        ('{"variables": "X,Y"}', True, "list of variable names"),
        ('{"variables": ["X", "Y"], "alpha": 0.1}', True, "unknown argument"),
        ('{"variables": ["X", "Y"], "condition": ["X"]}', False, "both tested and conditioned"),
        ('{"variables": ["X", "Q"]}', False, "not among the table's columns"),
    ],
)
async def test_bad_calls_are_tool_errors(
    table: Table, arguments: str, malformed: bool, says: str
) -> None:
    outcome = await _test(table, arguments)
    assert outcome.value is None and outcome.malformed is malformed
    assert says in (outcome.error or "")


async def test_a_constant_column_is_named_not_a_crash() -> None:
    rows = sample_rows(CHAIN, 200, seed=1)
    rows["W"] = np.zeros_like(rows["W"])
    outcome = await _test(Table.from_rows(rows), '{"variables": ["X", "W"]}')
    assert outcome.error and "W takes one value" in outcome.error and not outcome.malformed


def test_data_names_the_five_tools_and_the_test_is_named_apart(table: Table) -> None:
    assert "independence_test" not in tools_for(["data"], table=table)
    both = tools_for(["data", "independence_test"], table=table)
    assert len(both) == 6 and both["independence_test"].spec()["function"]["name"] == (
        "independence_test"
    )
