"""One boundary for every tool: a tool call's arguments are written by the model, so they are
input from outside, and nothing a call holds may end the turn, the debate or the run.

A `Tool` is a name, its spec (the function tool servers take), an argument parser and a compute
function. `call` takes what the model wrote and always answers with an `Outcome`: the value, or
an error the model can act on, recorded as the call's error. In order:

1. size: the arguments as JSON text, at most `max_argument_chars`;
2. nesting: brackets at most `max_nesting` deep, counted before any JSON parser recurses;
3. JSON: an object, standard JSON (no NaN or Infinity), valid Unicode;
4. in a worker process (crawdad/tools/workers.py), within `seconds`: the tool's parser (which
   checks the tool's own limits: variables, edges, probabilities) and its compute function.

Whatever the parser or the compute function raises becomes a tool error: `MalformedCall` (the
call cannot be read: counted apart), `ToolError` (the call is read but cannot be answered, a
limit included), and anything else, a recursion limit, memory, a crash or a timeout of the
worker, with a message that names it. Only cancellation passes through.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from crawdad.config import ToolLimits
from crawdad.tools.workers import WorkerDied, WorkFailed, WorkTimeout, pool

MAX_MESSAGE_CHARS = 1000  # an error told to the model (and recorded) is cut to this length


class ToolError(ValueError):
    """A call that cannot be answered; the message tells the model what to fix."""


class MalformedCall(ToolError):
    """The call's arguments are not JSON or do not fit the schema (counted apart)."""


class LimitExceeded(ToolError):
    """The call is larger than a bound in `ToolLimits`; the message names the setting."""

    def __init__(self, what: str, limit: float, setting: str, advice: str = "") -> None:
        self.setting = setting
        super().__init__(
            f"{what}; a call may have at most {limit:,} (tool_limits.{setting})"
            + (f": {advice}" if advice else "")
        )


@dataclass(frozen=True)
class Tool:
    """A tool agents may call. `parse(arguments, limits)` turns the call's JSON object into
    what `compute(parsed, limits)` takes, raising MalformedCall or ToolError (LimitExceeded
    past a bound); `compute` returns a JSON value or raises ToolError. Both run in a worker
    process, so they must pickle: module-level functions, or partials and bound methods of
    picklable objects."""

    name: str
    spec: Callable[[], dict[str, Any]]
    parse: Callable[[dict[str, Any], ToolLimits], Any]
    compute: Callable[[Any, ToolLimits], Any]
    label: str = ""  # how messages name it ("the calculator"); the name by default
    timeout_advice: str = ""  # what a call past its seconds is told to do (a default if "")

    @property
    def called(self) -> str:
        return self.label or self.name


@dataclass
class Outcome:
    """What a call got: a value, or the error the model was told. `raw` is the arguments as
    recorded (cut past `max_argument_chars`); `arguments` the JSON object read from them, when
    they were one within the limits."""

    raw: str
    arguments: dict[str, Any] | None = None
    value: Any = None
    error: str | None = None
    malformed: bool = False


async def call(tools: Mapping[str, Tool], name: str, raw: str | Any, limits: ToolLimits) -> Outcome:
    """The answer to one call of `name` with the model's arguments `raw` (JSON text, or the
    object a server already decoded). Never raises but on cancellation."""
    outcome = Outcome(raw="")
    try:
        text = as_text(raw, limits)
        outcome.raw = _cut(text, limits.max_argument_chars)
        arguments = read_arguments(text, limits)
        outcome.arguments = arguments
        tool = tools.get(name)
        if tool is None:
            known = ", ".join(repr(t) for t in tools) or "none"
            raise MalformedCall(f"there is no tool {_short(repr(name), 100)}; the tools: {known}")
        kind, value = await _compute(tool, arguments, limits)
        if kind == "ok":
            outcome.value = value
        else:
            outcome.error, outcome.malformed = value, kind == "malformed"
    except MalformedCall as e:
        outcome.error, outcome.malformed = str(e), True
    except ToolError as e:
        outcome.error = str(e)
    except Exception as e:  # a bug on this side of the boundary: still the model's answer
        outcome.error = f"the call could not be handled ({type(e).__name__}: {e})"
    if outcome.error is not None:
        outcome.error = _short(outcome.error, MAX_MESSAGE_CHARS)
    return outcome


async def _compute(tool: Tool, arguments: dict[str, Any], limits: ToolLimits) -> tuple[str, Any]:
    workers = pool(limits.workers, limits.memory_mb or None)
    try:
        return await workers.run(
            work, tool.parse, tool.compute, arguments, limits, seconds=limits.seconds
        )
    except WorkTimeout:
        raise LimitExceeded(
            f"{tool.called} did not finish this call within {limits.seconds:g} s",
            limits.seconds,
            "seconds",
            tool.timeout_advice
            or "simplify the call (a smaller graph, fewer variables) or work it out without the tool",
        ) from None
    except WorkerDied as e:
        raise ToolError(
            f"{tool.called} failed on this call: {e} (a crash, or more memory than "
            f"tool_limits.memory_mb = {limits.memory_mb}); simplify the call or work it out "
            "without the tool"
        ) from None
    except WorkFailed as e:
        raise ToolError(
            f"{tool.called} could not compute this call ({_short(str(e), 300)}); check the "
            "arguments against the schema, or work it out without the tool"
        ) from None


def work(
    parse: Callable[[dict[str, Any], ToolLimits], Any],
    compute: Callable[[Any, ToolLimits], Any],
    arguments: dict[str, Any],
    limits: ToolLimits,
) -> tuple[str, Any]:
    """In the worker: ("ok", value), ("malformed", message) or ("error", message). Other
    exceptions leave as the worker's WorkFailed."""
    try:
        value = compute(parse(arguments, limits), limits)
        json.dumps(value, allow_nan=False)
    except MalformedCall as e:
        return "malformed", str(e)
    except ToolError as e:
        return "error", str(e)
    except RecursionError:
        return "error", "the call is too deeply nested to compute; simplify it"
    except MemoryError:
        return "error", (
            f"the call needs more memory than a tool call may take ({limits.memory_mb} MB, "
            "tool_limits.memory_mb); simplify it (fewer variables)"
        )
    except (TypeError, ValueError) as e:  # the value is not JSON (NaN, infinity, an object)
        return "error", f"the result is not a JSON value ({e}); work it out without the tool"
    return "ok", value


# --- reading the arguments ----------------------------------------------------------------


def as_text(raw: Any, limits: ToolLimits) -> str:
    """The arguments as JSON text: a string as it came, an object (Ollama decodes calls)
    written out once its depth and size are known to be within the limits."""
    if isinstance(raw, str):
        return _valid_unicode(raw)
    if raw is None:
        return ""
    _check_object(raw, limits)
    try:
        return _valid_unicode(json.dumps(raw, ensure_ascii=False))
    except (TypeError, ValueError) as e:
        raise MalformedCall(f"the arguments are not JSON ({e})") from None


def read_arguments(text: str, limits: ToolLimits) -> dict[str, Any]:
    """JSON text -> the arguments object, the size and nesting checked before parsing."""
    if len(text) > limits.max_argument_chars:
        raise LimitExceeded(
            f"the arguments are {len(text):,} characters",
            limits.max_argument_chars,
            "max_argument_chars",
            "send only the question's graph and numbers",
        )
    depth = nesting(text, limits.max_nesting)
    if depth > limits.max_nesting:
        raise MalformedCall(
            f"the arguments are nested more than {limits.max_nesting} deep "
            "(tool_limits.max_nesting); write them as the tool's schema shows"
        )
    if not text.strip():
        return {}
    try:
        value = json.loads(text, strict=False, parse_constant=_no_constant)
    except json.JSONDecodeError as e:
        raise MalformedCall(
            f"the arguments are not valid JSON ({e.msg} at character {e.pos})"
        ) from None
    except (ValueError, RecursionError) as e:  # NaN, a number of thousands of digits
        raise MalformedCall(f"the arguments are not valid JSON ({_short(str(e), 200)})") from None
    if not isinstance(value, dict):
        raise MalformedCall("the arguments must be a JSON object")
    # A "\ud800" escape decodes to a lone surrogate, which no UTF-8 record can hold.
    written = json.dumps(value, ensure_ascii=False)
    valid = _valid_unicode(written)
    return value if valid is written else json.loads(valid)


def echo_safe(raw: Any, limits: ToolLimits) -> bool:
    """Whether the arguments may be sent back to the server as they came: within the size and
    nesting limits (valid JSON or not)."""
    try:
        text = as_text(raw, limits)
    except ToolError:
        return False
    return len(text) <= limits.max_argument_chars and nesting(text, limits.max_nesting) <= (
        limits.max_nesting
    )


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_BRACKET = re.compile(r"[\[\]{}]")


def nesting(text: str, stop: int | None = None) -> int:
    """How deep brackets nest in JSON text, strings left out (an unclosed string's brackets
    count); counting stops past `stop`."""
    depth = deepest = 0
    for m in _BRACKET.finditer(_STRING.sub('""', text)):
        if m.group() in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if stop is not None and deepest > stop:
                    break
        else:
            depth = max(depth - 1, 0)
    return deepest


def _check_object(value: Any, limits: ToolLimits) -> None:
    """An object's depth and size, walked without recursion (a cycle is too deep)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    nodes = 0
    while stack:
        item, depth = stack.pop()
        nodes += 1
        if nodes > limits.max_argument_chars:
            raise LimitExceeded(
                f"the arguments hold more than {limits.max_argument_chars:,} values",
                limits.max_argument_chars,
                "max_argument_chars",
                "send only the question's graph and numbers",
            )
        if isinstance(item, float) and not math.isfinite(item):
            raise MalformedCall(f"the arguments hold {item}, which is not a JSON number")
        if isinstance(item, dict | list | tuple):
            if depth > limits.max_nesting:
                raise MalformedCall(
                    f"the arguments are nested more than {limits.max_nesting} deep "
                    "(tool_limits.max_nesting); write them as the tool's schema shows"
                )
            children = item.values() if isinstance(item, dict) else item
            stack.extend((c, depth + 1) for c in children)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _valid_unicode(text: str) -> str:
    """Lone surrogates (from a "\\ud800" escape) replaced: records are written as UTF-8."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode("utf-8")
    return text


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… [{len(text) - limit:,} more characters not kept]"


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
