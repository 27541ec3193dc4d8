"""The learn_graph data tool: the algorithm runner on a question's table, behind the boundary."""

from __future__ import annotations

import numpy as np
from causallearn.search.ConstraintBased.PC import pc

from crawdad.causal import BinaryModel
from crawdad.causal.sample import sample_rows
from crawdad.config import ToolLimits
from crawdad.tools import boundary
from crawdad.tools.data_tools import Table
from crawdad.tools.registry import table_frame, tools_for

CHAIN = BinaryModel.from_tables(
    {"X": ((), 0.5), "M": (("X",), [0.1, 0.9]), "Y": (("M",), [0.2, 0.8])}
)


def _table() -> Table:
    return Table.from_rows(sample_rows(CHAIN, 3000, seed=4))


def test_the_tables_rows_are_rebuilt_from_its_counts() -> None:
    rows = sample_rows(CHAIN, 500, seed=1)
    frame = table_frame(Table.from_rows(rows))
    assert list(frame.columns) == ["X", "M", "Y"] and len(frame) == 500
    for c in frame.columns:
        assert frame[c].sum() == rows[c].sum()


async def test_learn_graph_gives_what_causal_learn_gives_on_the_same_rows() -> None:
    table = _table()
    tools = tools_for(["learn_graph"], table=table)
    plan = '{"algorithm": "pc", "params": {"indep_test": "chisq", "alpha": 0.01}}'
    outcome = await boundary.call(tools, "learn_graph", plan, ToolLimits())
    assert outcome.error is None, outcome.error
    frame = table_frame(table)
    direct = pc(frame.to_numpy(dtype=float), 0.01, "chisq", show_progress=False)
    skeleton = {
        frozenset((frame.columns[i], frame.columns[j]))
        for i in range(3)
        for j in range(3)
        if i != j and direct.G.graph[i, j] != 0
    }
    names = outcome.value["variables"]
    matrix = np.array(outcome.value["adjacency"])
    learned = {frozenset((names[i], names[j])) for i in range(3) for j in range(3) if matrix[i, j]}
    assert learned == skeleton == {frozenset("XM"), frozenset("MY")}


async def test_a_bad_plan_is_a_tool_error_naming_the_fix() -> None:
    tools = tools_for(["data"], table=_table())
    assert "learn_graph" in tools and "estimate_effect" in tools
    outcome = await boundary.call(tools, "learn_graph", '{"algorithm": "magic"}', ToolLimits())
    assert outcome.value is None and "magic" in outcome.error
