"""The native tool-call round trip against REAL llama.cpp and vLLM (SmolLM2-135M).

A forced tool choice makes even the tiny model call the calculator, so this checks the wire
format both ways, not the model's judgement: crawdad sends `tools`, reads the server's
`tool_calls` (streamed and whole), and sends the call and a `tool` result back in a follow-up
request that the server accepts.

- vLLM: a named `tool_choice` needs tool calling on (vLLM 0.32 answers 400 without a parser;
  the arguments are then decoded under the tool's JSON schema): the suite's session server is
  started with `--enable-auto-tool-choice --tool-call-parser hermes`.
- llama-cpp-python: tool calls need `--chat_format chatml-function-calling`; this file starts
  its own server with that flag (about 2 s).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from crawdad.backends.base import ChatRequest
from crawdad.backends.openai_compat import OpenAIBackend
from crawdad.tools.causal import TOOL_NAME
from crawdad.tools.loop import specs

from .conftest import _log, _start, require
from .servers import RealServer, llamacpp_server

pytestmark = pytest.mark.real

PROMPT = (
    "Smoking causes tar, tar causes cancer. P(cancer | smoking) = 0.6, P(cancer | no smoking) "
    "= 0.2. Use the causal calculator to compute the correlation of smoking and cancer."
)
FORCED = {"tool_choice": {"type": "function", "function": {"name": TOOL_NAME}}}


@pytest.fixture(scope="module")
def llamacpp_tools() -> Iterator[RealServer]:
    require("llamacpp")
    server = _start(
        llamacpp_server(
            interrupt_requests=False,
            extra_args=["--chat_format", "chatml-function-calling"],
            log_path=_log("llamacpp-tools"),
        )
    )
    yield server
    server.stop()


@pytest.fixture(params=["llamacpp_tools", "vllm"])
def tool_server(request: pytest.FixtureRequest) -> RealServer:
    server: RealServer = request.getfixturevalue(request.param)
    if not server.is_running() or not server.ready():
        server.restart()
    return server


def _request(server: RealServer, stream: bool, **kw: Any) -> ChatRequest:
    return ChatRequest(
        model=server.model,
        prompt=PROMPT,
        temperature=0.0,
        top_p=1.0,
        max_tokens=160,
        timeout=180,
        stream=stream,
        tools=specs(["causal"]),
        options=FORCED,
        **kw,
    )


@pytest.mark.parametrize("stream", [False, True])
async def test_forced_tool_call_round_trip(tool_server: RealServer, stream: bool) -> None:
    backend = OpenAIBackend(tool_server.base_url, timeout=180)
    try:
        first = await backend.chat(_request(tool_server, stream))
        if not first.tool_calls and first.stop_reason == "length":
            # The 135M model can ramble inside its call until the budget cuts it, and a cut call
            # is not parsed; the model's failing, not the wire's (the other cases check it).
            pytest.skip(f"the model ran out of tokens inside its call: {first.text[:80]!r}")
        assert first.tool_calls, f"no tool call; text: {first.text[:200]!r}"
        call = first.tool_calls[0]
        assert call.name == TOOL_NAME
        assert isinstance(call.arguments, str)  # OpenAI servers send JSON text
        # A tiny model may put a raw newline inside a JSON string (crawdad reads it leniently),
        # or ramble inside one until the token budget cuts the call: only a whole call parses.
        if call.arguments.rstrip().endswith("}"):
            arguments = json.loads(call.arguments, strict=False)
            assert isinstance(arguments, dict)
        messages = [
            {"role": "user", "content": PROMPT},
            {"role": "assistant", "content": first.text, "tool_calls": [call.model_dump()]},
            {
                "role": "tool",
                "content": json.dumps({"value": 0.4}),
                "tool_call_id": call.id,
                "name": TOOL_NAME,
            },
        ]
        # The follow-up: the call and its result go back; no tool is forced any more.
        follow = _request(tool_server, stream, messages=messages).model_copy(
            update={"options": {}, "tools": None, "max_tokens": 32}
        )
        second = await backend.chat(follow)
        assert second.stop_reason in ("stop", "length") and not second.tool_calls
    finally:
        await backend.aclose()
