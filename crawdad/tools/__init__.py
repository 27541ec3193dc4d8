"""Tools the debaters (and the judge) may call: the causal calculator.

- `causal`: the tool's JSON schema, argument parsing and checks (`CausalQuery`).
- `calculator`: the `Calculator` protocol and `GivenNumbers`, exact from the caller's numbers;
  `calculator.default()` is where the engine-backed calculator plugs in.
- `graph`: d-separation and backdoor sets on a given DAG.
- `boundary`: one boundary for every tool's calls: size and nesting checked before parsing,
  parse and compute in a worker process (`workers`) within `[tool_limits]`, every failure a
  tool error the model reads; `registry`: the tools by config name, each a `boundary.Tool`.
- `loop`: a turn with tools, native or text mode.
- `cladder`: a CLadder question as the correct call (tests, fakes, step scoring).
"""

from crawdad.tools.calculator import CalcResult, Calculator, GivenNumbers
from crawdad.tools.causal import TOOL_NAME, CausalQuery, MalformedCall, ToolError, parse_arguments

__all__ = [
    "TOOL_NAME",
    "CalcResult",
    "Calculator",
    "CausalQuery",
    "GivenNumbers",
    "MalformedCall",
    "ToolError",
    "parse_arguments",
]
