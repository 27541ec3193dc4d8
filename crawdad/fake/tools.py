"""A fake model that calls a tool (the causal calculator by default), in either mode, then answers.

Wraps any fake debater. Given `tools` in the request (native mode) it answers with a native
tool call, which each fake server writes in its own wire format; given the text-mode
instructions in the prompt it writes the call as JSON in its text. Once it has seen as many
tool results as it means to call (`calls`), it answers as the wrapped model would answer the
original prompt. `malformed` is the share of calls written broken (seeded by the request).
A call maker may return the arguments as JSON text instead of an object: the text is written
as it is (a hostile model's call: nested thousands deep, megabytes long), in both modes; and it
may name the tool, returning (name, arguments) (the data tools: `fake/data_agent.py`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any

from crawdad.fake.behaviour import FakeModel, FakeReply, FakeRequest, seeded_rng
from crawdad.tools.causal import TOOL_NAME
from crawdad.tools.loop import LAST_CALL, TEXT_INSTRUCTIONS, TOOLS_INSTRUCTIONS

Arguments = dict[str, Any] | str
CallMaker = Callable[[FakeRequest], Arguments | tuple[str, Arguments]]
_LAST = LAST_CALL.split("{", 1)[0]
# Where the text protocol's instructions begin ("\n\nYou may use a causal calculator", ...).
_TEXT_MARKS = tuple(t.split(" before", 1)[0] for t in (TEXT_INSTRUCTIONS, TOOLS_INSTRUCTIONS))


def default_call(request: FakeRequest) -> dict[str, Any]:
    """A correlation query with numbers drawn from the request (so each result differs)."""
    rng = seeded_rng("fake-tool-call", request.digest)
    a, b = round(rng.uniform(0.05, 0.95), 2), round(rng.uniform(0.05, 0.95), 2)
    return {
        "query": "correlation",
        "edges": ["X->Y"],
        "treatment": "X",
        "outcome": "Y",
        "probabilities": [
            {"event": "P(Y=1|X=1)", "value": a},
            {"event": "P(Y=1|X=0)", "value": b},
        ],
    }


class ToolCallingModel(FakeModel):
    def __init__(
        self,
        inner: FakeModel,
        *,
        call: CallMaker = default_call,
        calls: int = 1,
        malformed: float = 0.0,
        supports_tools: bool = True,
    ) -> None:
        self.inner = inner
        self.call = call
        self.calls = calls
        self.malformed = malformed
        self.supports_tools = supports_tools
        self.thinks = inner.thinks
        self.family = inner.family
        self.seen: list[FakeRequest] = []

    def reply(self, request: FakeRequest) -> FakeReply:
        self.seen.append(request)
        first = request.messages[0] if request.messages else {}
        prompt = str(first.get("content") or "")
        text_mode = request.tools is None and any(m in prompt for m in _TEXT_MARKS)
        results = sum(1 for m in request.messages if _is_result(m))
        done = any(_LAST in str(m.get("content") or "") for m in request.messages[1:])
        if (request.tools or text_mode) and results < self.calls and not done:
            return self._call(request, text_mode)
        original = dict(first, content=without_instructions(prompt))
        return self.inner.reply(dataclasses.replace(request, messages=[original], tools=None))

    def _call(self, request: FakeRequest, text_mode: bool) -> FakeReply:
        made = self.call(request)
        name, arguments = made if isinstance(made, tuple) else (TOOL_NAME, made)
        broken = seeded_rng("fake-tool-malformed", request.digest).random() < self.malformed
        if text_mode:
            body = (
                f'{{"tool": "{name}", "arguments": {arguments}}}'
                if isinstance(arguments, str)
                else json.dumps({"tool": name, "arguments": arguments})
            )
            if broken:
                body = body[: len(body) // 2] + "}"  # cut short: not JSON any more
            return FakeReply(
                thinking=f"I will check the numbers with {name}.",
                text=f"Let me use {name}.\n```json\n{body}\n```",
            )
        if broken:  # native: arguments that do not fit the schema, or not JSON at all
            query = arguments.get("query") if isinstance(arguments, dict) else None
            args: Any = {"query": query} if request.api == "ollama" else "{oops"
            return FakeReply(
                thinking="A quick call.", tool_calls=[{"name": name, "arguments": args}]
            )
        return FakeReply(
            thinking=f"I will check the numbers with {name}.",
            tool_calls=[{"name": name, "arguments": arguments}],
        )


def without_instructions(prompt: str) -> str:
    """The prompt as it was before the text protocol's instructions were added."""
    for mark in _TEXT_MARKS:
        prompt = prompt.split(mark, 1)[0]
    return prompt


def _is_result(message: dict[str, Any]) -> bool:
    if message.get("role") == "tool":
        return True
    content = message.get("content")
    if message.get("role") != "user" or not isinstance(content, str):
        return False
    first = content.split("\n", 1)[0]
    return first.startswith("Result of ") or (
        first.startswith("Your ") and " call failed:" in first
    )
