"""The tools agents may call, by the name a config gives them (`tools = ["causal"]`,
`tools = ["data"]` or single data tools by name), each as a `boundary.Tool`: its spec, its
argument parser and its compute function.

Some tools compute over something of the item in hand: the data tools over the question's table.
A `ToolContext` carries it (with the run's calculator); a factory builds its tools for one
context, binding what they compute over with `functools.partial`, so one turn's tools see its
own item only, and everything bound pickles to the worker that computes the call.

`algorithm(table)` is the algorithm runner over one item's data, the executor of the coding
protocol's plans (crawdad/protocols/coding.py): built per item, so not a name a config gives."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from crawdad.config import DATA_SET, DATA_TOOLS, ToolLimits
from crawdad.tools.boundary import Tool, ToolError
from crawdad.tools.calculator import Calculator
from crawdad.tools.causal import TOOL_NAME, CausalQuery, parse_arguments, tool_spec
from crawdad.tools.engine_backed import default as default_calculator

if TYPE_CHECKING:
    import pandas as pd

    from crawdad.tools import data_tools
    from crawdad.tools.algorithms import AlgorithmLimits
    from crawdad.tools.data_tools import Table


@dataclass(frozen=True)
class ToolContext:
    """What one item's tools compute over: the run's calculator (None: the engine-backed one)
    and, for a question answered from data, its table."""

    calculator: Calculator | None = None
    table: Table | None = None


def compute_causal(calculator: Calculator, query: CausalQuery, limits: ToolLimits) -> Any:
    """The calculator's value, or its error as a ToolError."""
    result = calculator.compute(query, limits)
    if result.error is not None:
        raise ToolError(result.error)
    return result.value


def causal(calculator: Calculator | None = None) -> Tool:
    """The causal calculator, over `calculator` (the engine-backed one by default)."""
    return Tool(
        name=TOOL_NAME,
        spec=tool_spec,
        parse=parse_arguments,
        compute=partial(compute_causal, calculator or default_calculator()),
        label="the calculator",
    )


def algorithm(table: pd.DataFrame, limits: AlgorithmLimits | None = None) -> Tool:
    """The algorithm runner over `table`: a call is a plan {"algorithm", "params"}, its value
    the graph learned (crawdad/tools/algorithm_tool.py). Imports causal-learn."""
    from crawdad.tools import algorithm_tool
    from crawdad.tools.algorithms import AlgorithmLimits

    return Tool(
        name=algorithm_tool.TOOL_NAME,
        spec=algorithm_tool.tool_spec,
        parse=algorithm_tool.parse_plan,
        compute=partial(algorithm_tool.compute_plan, table, limits or AlgorithmLimits()),
        label="the algorithm runner",
        timeout_advice=algorithm_tool.TIMEOUT_ADVICE,
    )


NO_TABLE = (
    "there is no table for this question: the data tools answer questions over a table "
    '(task = "cladder-data" on a folder that `crawdad data tables` wrote)'
)


def compute_data(table: Table | None, call: data_tools.Call, limits: ToolLimits) -> Any:
    """A data tool's answer over the item's table."""
    from crawdad.tools import data_tools

    if table is None:
        raise ToolError(NO_TABLE)
    return data_tools.compute(table, call, limits)


# Each data tool's argument reader in crawdad.tools.data_tools (imported when a run uses them).
DATA_PARSERS = {
    "describe_data": "parse_describe",
    "conditional_probability": "parse_conditional",
    "estimate_effect": "parse_estimate",
    "identify_effect": "parse_identify",
}


def table_frame(table: Table) -> pd.DataFrame:
    """The table's rows, rebuilt from its counts (the rows' order is not kept: no algorithm the
    runner allows depends on it)."""
    import numpy as np
    import pandas as pd

    counts = table.counts
    rows = np.repeat(np.array([r[:-1] for r in counts.rows()], dtype=np.int64), counts.cells, 0)
    return pd.DataFrame(rows, columns=list(counts.columns))


def compute_learn_graph(
    table: Table | None, plan: tuple[str, dict[str, Any]], limits: ToolLimits
) -> Any:
    """The algorithm runner on the question's table (causal-learn, imported in the worker)."""
    from crawdad.tools import algorithm_tool
    from crawdad.tools.algorithms import AlgorithmLimits

    if table is None:
        raise ToolError(NO_TABLE)
    return algorithm_tool.compute_plan(table_frame(table), AlgorithmLimits(), plan, limits)


def learn_graph_spec() -> dict[str, Any]:
    from crawdad.tools.algorithms import ALGORITHMS

    return {
        "type": "function",
        "function": {
            "name": "learn_graph",
            "description": (
                "Learn a causal graph from the table with a statistical causal discovery "
                "algorithm (causal-learn): pc or ges suit 0/1 data (pc with indep_test chisq "
                "or gsq); returns the learned graph's adjacency matrix (row cause, column "
                "effect) and the pairs it left undirected."
            ),
            "parameters": {
                "type": "object",
                "properties": {
                    "algorithm": {"type": "string", "enum": list(ALGORITHMS)},
                    "params": {"type": "object", "description": "the algorithm's parameters"},
                },
                "required": ["algorithm"],
            },
        },
    }


def parse_learn_graph(arguments: dict[str, Any], limits: ToolLimits) -> Any:
    from crawdad.tools.algorithm_tool import parse_plan

    return parse_plan(arguments, limits)


def compute_independence(table: Table | None, call: Any, limits: ToolLimits) -> Any:
    """The Causal Agent's independence test over the item's table (causal-learn's Fisher-z)."""
    from crawdad.tools import independence

    if table is None:
        raise ToolError(NO_TABLE)
    return independence.compute(table, call, limits)


def data_tool(name: str, table: Table | None = None) -> Tool:
    """One data tool over `table`."""
    if name == "independence_test":
        from crawdad.tools import independence

        return Tool(
            name=name,
            spec=independence.tool_spec,
            parse=independence.parse_call,
            compute=partial(compute_independence, table),
            label="the data tool independence_test",
        )
    if name == "learn_graph":
        return Tool(
            name=name,
            spec=learn_graph_spec,
            parse=parse_learn_graph,
            compute=partial(compute_learn_graph, table),
            label="the data tool learn_graph",
        )
    from crawdad.tools import data_tools

    return Tool(
        name=name,
        spec=partial(data_tools.tool_spec, name),
        parse=getattr(data_tools, DATA_PARSERS[name]),
        compute=partial(compute_data, table),
        label=f"the data tool {name}",
    )


def _data(names: tuple[str, ...]) -> Callable[[ToolContext], list[Tool]]:
    return lambda context: [data_tool(n, context.table) for n in names]


# config name -> the tools it stands for, built over one item's context
FACTORIES: dict[str, Callable[[ToolContext], list[Tool]]] = {
    "causal": lambda context: [causal(context.calculator)],
    "data": _data(DATA_SET),
    **{name: _data((name,)) for name in DATA_TOOLS},
}


def tools_for(
    names: list[str], calculator: Calculator | None = None, *, table: Table | None = None
) -> dict[str, Tool]:
    """The tools of these config names, by the name the model calls them, over the run's
    calculator and the item's table."""
    context = ToolContext(calculator, table)
    return {t.name: t for n in names for t in FACTORIES[n](context)}


def is_data(names: list[str]) -> bool:
    """Whether these config names give any data tool (which needs an item with a table)."""
    return any(n == "data" or n in DATA_TOOLS for n in names)
