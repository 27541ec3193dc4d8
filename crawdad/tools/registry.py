"""The tools agents may call, by the name a config gives them (`tools = ["causal"]`), each as a
`boundary.Tool`: its spec, its argument parser and its compute function.

`algorithm(table)` is the algorithm runner over one item's data, the executor of the coding
protocol's plans (crawdad/protocols/coding.py): built per item, so not a name a config gives."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from crawdad.config import ToolLimits
from crawdad.tools.boundary import Tool, ToolError
from crawdad.tools.calculator import Calculator
from crawdad.tools.causal import TOOL_NAME, CausalQuery, parse_arguments, tool_spec
from crawdad.tools.engine_backed import default as default_calculator

if TYPE_CHECKING:
    import pandas as pd

    from crawdad.tools.algorithms import AlgorithmLimits


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


# config name -> the tool (given the run's calculator, which tools other than "causal" ignore)
FACTORIES: dict[str, Callable[[Calculator | None], Tool]] = {"causal": causal}


def tools_for(names: list[str], calculator: Calculator | None = None) -> dict[str, Tool]:
    """The tools of these config names, by the name the model calls them."""
    built = [FACTORIES[n](calculator) for n in names]
    return {t.name: t for t in built}
