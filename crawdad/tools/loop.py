"""A turn with tools: generate; if the reply holds tool calls, run them and append their
results to this agent's own conversation; generate again, up to `max_tool_calls` calls.

Two modes. "native": the server's tool calling (the calls come as structured `tool_calls`,
results go back as `tool` messages). "text": for servers or models without tool calling, the
prompt describes the tool and the model writes a JSON call in its answer; crawdad answers in a
follow-up user message (paper 004's protocol). The results enter only this conversation, never
another agent's: the history of a debate shows final texts only.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from crawdad.backends.base import ChatRequest, ChatResult, ToolCallOut
from crawdad.config import ToolLimits
from crawdad.errors import BackendError
from crawdad.records import ToolCall, ToolMode
from crawdad.tools import boundary
from crawdad.tools.calculator import Calculator
from crawdad.tools.causal import SCHEMA, TOOL_NAME
from crawdad.tools.registry import tools_for

if TYPE_CHECKING:
    from crawdad.tools.data_tools import Table

# What servers answer when a model or server cannot take `tools` (then "auto" goes to text):
# Ollama: "... does not support tools"; vLLM without --enable-auto-tool-choice: "\"auto\" tool
# choice requires --enable-auto-tool-choice and --tool-call-parser to be set".
REFUSAL = re.compile(
    r"does not support tools|tool choice requires|tool-call-parser|tools? (?:is|are) not supported",
    re.IGNORECASE,
)

TEXT_INSTRUCTIONS = """

You may use a causal calculator before you answer. To call it, write a JSON object of this form, alone in a ```json block, and stop:
{{"tool": "{name}", "arguments": {{...}}}}
The arguments follow this JSON schema:
{schema}
The result comes in the next message. You may call it again, {limit} calls at most. When you do not need it (any more), write your answer as asked above, without a call."""

TEXT_RESULT = "Result of {name}: {result}\n\nCall the calculator again if you need to, or write your answer as asked."
TEXT_ERROR = (
    "Your {name} call failed: {error}\n\nFix the call and try again, or write your answer as asked."
)
LAST_CALL = "You have used all {limit} calculator calls. Write your answer now, without a call."

# The same protocol for any other set of tools (the data tools, or the calculator among others).
TOOLS_INSTRUCTIONS = """

You may use these tools before you answer: {names}. To call one, write a JSON object of this form, alone in a ```json block, and stop:
{{"tool": "<tool name>", "arguments": {{...}}}}
The tools, and the JSON schema of each one's arguments:
{listing}
The result comes in the next message. You may call tools again, {limit} calls at most. When you do not need them (any more), write your answer as asked above, without a call."""

TOOLS_RESULT = (
    "Result of {name}: {result}\n\nCall a tool again if you need to, or write your answer as asked."
)
TOOLS_LAST = "You have used all {limit} tool calls. Write your answer now, without a call."


def specs(tools: list[str]) -> list[dict[str, Any]]:
    return [t.spec() for t in tools_for(tools).values()]


def calculator_only(tools: list[str]) -> bool:
    return all(t == "causal" for t in tools)


def text_instructions(limit: int, tools: list[str] | None = None) -> str:
    """What the text protocol adds to the prompt: the calculator's own wording when it is the
    only tool, else every tool with its description and schema."""
    if tools is None or calculator_only(tools):
        return TEXT_INSTRUCTIONS.format(name=TOOL_NAME, schema=json.dumps(SCHEMA), limit=limit)
    listing = []
    for spec in specs(tools):
        f = spec["function"]
        listing.append(
            f"- {f['name']}: {f['description']}\n  arguments: {json.dumps(f['parameters'])}"
        )
    names = ", ".join(spec["function"]["name"] for spec in specs(tools))
    return TOOLS_INSTRUCTIONS.format(names=names, listing="\n".join(listing), limit=limit)


def is_refusal(e: BackendError) -> bool:
    """The server refused `tools` (the model or the server cannot take them)."""
    return not e.transient and bool(REFUSAL.search(str(e)))


@dataclass
class ToolTrace:
    """What a turn with tools did: its mode, its calls, and the prompt it actually sent."""

    mode: ToolMode | None = None
    calls: list[ToolCall] = field(default_factory=list)
    prompt: str | None = None
    generations: int = 0


Send = Callable[[ChatRequest], Awaitable[ChatResult]]


@dataclass
class ToolLoop:
    """One turn's loop. `send` generates (retries included); `base` is the turn's request
    without tools, as the agent would send it without them."""

    base: ChatRequest
    mode: ToolMode
    tools: list[str]
    limit: int
    calculator: Calculator
    send: Send
    trace: ToolTrace
    context: Callable[[str], int | None] = lambda text: None  # num_ctx for a conversation
    limits: ToolLimits = field(default_factory=ToolLimits)  # what one call may take
    table: Table | None = None  # the item's table, for the data tools

    async def run(self) -> tuple[ChatResult, ChatRequest]:
        self._toolbox = tools_for(self.tools, self.calculator, table=self.table)
        extra = text_instructions(self.limit, self.tools) if self.mode == "text" else ""
        prompt = self.base.prompt + extra
        self.trace.mode, self.trace.prompt = self.mode, prompt
        messages: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
        results: list[ChatResult] = []
        while True:
            open_calls = len(self.trace.calls) < self.limit
            request = self._request(prompt, messages, offer=open_calls)
            result = await self.send(request)
            results.append(result)
            self.trace.generations += 1
            calls = self._calls(result) if open_calls else []
            if not calls:
                return _combined(results), request
            messages.append(self._assistant(result, calls))
            for call in calls:
                if len(self.trace.calls) >= self.limit:
                    break
                record = await self._run(call)
                self.trace.calls.append(record)
                messages.append(self._answer(call, record))
            if len(self.trace.calls) >= self.limit:
                last = LAST_CALL if calculator_only(self.tools) else TOOLS_LAST
                messages.append({"role": "user", "content": last.format(limit=self.limit)})

    def _request(self, prompt: str, messages: list[dict[str, Any]], offer: bool) -> ChatRequest:
        update: dict[str, Any] = {"prompt": prompt}
        if len(messages) > 1:  # a first request is the prompt alone, as without tools
            update["messages"] = [dict(m) for m in messages]
        if self.mode == "native" and offer:
            update["tools"] = specs(self.tools)
        if self.mode == "text" and offer:
            update["json_schema"] = None  # a schema would leave no room for a call
        if self.base.num_ctx is not None:  # Ollama: room for the whole conversation
            text = "".join(f"{m.get('content') or ''}{m.get('tool_calls') or ''}" for m in messages)
            update["num_ctx"] = self.context(text)
        return self.base.model_copy(update=update)

    def _calls(self, result: ChatResult) -> list[ToolCallOut]:
        if self.mode == "native":
            return list(result.tool_calls)
        found = find_text_call(result.text, tuple(self._toolbox))
        return [found] if found is not None else []

    async def _run(self, call: ToolCallOut) -> ToolCall:
        """The call through the tools' boundary: a value, or an error the model is told and the
        record keeps, whatever the arguments hold."""
        start = time.monotonic()
        outcome = await boundary.call(self._toolbox, call.name, call.arguments, self.limits)
        return ToolCall(
            name=call.name,
            mode=self.mode,
            id=call.id,
            generation=self.trace.generations - 1,
            raw=outcome.raw,
            arguments=outcome.arguments,
            result=outcome.value,
            error=outcome.error,
            malformed=outcome.malformed,
            seconds=time.monotonic() - start,
        )

    def _assistant(self, result: ChatResult, calls: list[ToolCallOut]) -> dict[str, Any]:
        """The model's reply as it goes back to its server: native calls whose arguments are
        past the limits go back without them (they would not survive being sent)."""
        if self.mode == "text":
            return {"role": "assistant", "content": result.text}
        echoed = [
            c
            if boundary.echo_safe(c.arguments, self.limits)
            else c.model_copy(update={"arguments": {} if isinstance(c.arguments, dict) else ""})
            for c in calls
        ]
        return {
            "role": "assistant",
            "content": result.text,
            "tool_calls": [c.model_dump() for c in echoed],
        }

    def _answer(self, call: ToolCallOut, record: ToolCall) -> dict[str, Any]:
        body = (
            json.dumps({"error": record.error})
            if record.error
            else json.dumps({"value": record.result})
        )
        if self.mode == "native":
            return {"role": "tool", "content": body, "tool_call_id": call.id, "name": call.name}
        if calculator_only(self.tools):
            text = (
                TEXT_ERROR.format(name=TOOL_NAME, error=record.error)
                if record.error
                else TEXT_RESULT.format(name=TOOL_NAME, result=body)
            )
        else:
            name = call.name or "tool"
            text = (
                TEXT_ERROR.format(name=name, error=record.error)
                if record.error
                else TOOLS_RESULT.format(name=name, result=body)
            )
        return {"role": "user", "content": text}


_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)


def find_text_call(text: str, names: tuple[str, ...] = (TOOL_NAME,)) -> ToolCallOut | None:
    """The first JSON call of a tool written in a text, or a malformed call when the text
    means to call one of `names` but holds no readable JSON (its raw text is then what lay
    between the first '{' and the last '}', as paper 004 cut it); None when the text calls
    nothing. Arguments that are not an object, in a call naming no tool, go to the first of
    `names` (the boundary then says what is wrong with them)."""
    default = names[0] if names else TOOL_NAME
    decoder = json.JSONDecoder()
    for start in (m.start() for m in re.finditer(r"\{", text)):
        try:
            value, _ = decoder.raw_decode(text, start)
        except (ValueError, RecursionError):  # not JSON here, or nested too deep to read
            continue
        if isinstance(value, dict) and ("tool" in value or "arguments" in value):
            name = str(value.get("tool") or value.get("name") or "")
            arguments = value.get("arguments")
            if not isinstance(arguments, dict):
                try:
                    raw = json.dumps(arguments)
                except (ValueError, RecursionError):
                    raw = text[start:]  # the boundary says what is wrong with it
                return ToolCallOut(name=name or default, arguments=raw)
            return ToolCallOut(name=name, arguments=arguments)
    meant = next((n for n in names if n in text), None)
    if meant is not None and "{" in text:
        first, last = text.index("{"), text.rfind("}")
        return ToolCallOut(name=meant, arguments=text[first : last + 1] if last > first else "")
    return None


def _combined(results: list[ChatResult]) -> ChatResult:
    """The turn's result: the last reply's text, every reply's thinking, tokens and time."""
    last = results[-1]
    if len(results) == 1:
        return last

    def total(name: str) -> int | None:
        values = [getattr(r, name) for r in results]
        return None if all(v is None for v in values) else sum(v or 0 for v in values)

    return last.model_copy(
        update={
            "thinking": "\n\n".join(r.thinking for r in results if r.thinking),
            "prompt_tokens": total("prompt_tokens"),
            "completion_tokens": total("completion_tokens"),
            "seconds": sum(r.seconds for r in results),
            "server_seconds": sum(r.server_seconds or 0 for r in results) or None,
            "shared": all(r.shared for r in results),
            "tool_calls": [],
        }
    )
