"""crawdad's OpenAI-compatible backend against REAL llama.cpp and vLLM servers (SmolLM2-135M).

Each test runs against both servers (the `real_server` fixture). Greedy decoding (temperature 0)
makes a server's answers repeatable, so crawdad's result can be compared with the server's own
reply to the same request, sent raw with httpx.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from crawdad.backends.base import ChatRequest
from crawdad.backends.openai_compat import OpenAIBackend
from crawdad.errors import BackendError, ModelNotFound
from crawdad.prompts import load_prompts
from crawdad.scoring.extract import EXTRACTOR_SCHEMA, parse_reply

from .realrun import raw_chat
from .servers import RealServer, missing_requirements

pytestmark = pytest.mark.real

SHORT = "Is the sky blue on a clear day? Answer yes or no in one short sentence."
LONG = "Write a long and detailed essay about the history of bridges, with many examples."
RESPONSE = (
    "Step 7) The treatment raises the chance of the outcome from 31% to 64%, so the answer is "
    "yes. Final answer: yes. My confidence in this answer is 0.9."
)


def request(server: RealServer, prompt: str, **kw: Any) -> ChatRequest:
    fields: dict[str, Any] = dict(
        model=server.model, prompt=prompt, temperature=0.0, top_p=1.0, max_tokens=48, timeout=120
    )
    fields.update(kw)
    return ChatRequest(**fields)


def settle(server: RealServer) -> None:
    """Put the server's prompt cache in the same state before each of two compared requests.

    llama.cpp's greedy output depends on what its KV cache holds: the same long prompt sent
    twice in a row (the second reusing the cached prefix) can give a different text. After the
    same short request, it is repeatable.
    """
    raw_chat(server, "Hi.", 1)


@pytest.fixture
async def backend(real_server: RealServer) -> AsyncIterator[OpenAIBackend]:
    b = OpenAIBackend(real_server.base_url, timeout=120)
    yield b
    await b.aclose()


def test_servers_installed() -> None:
    """Fails (never skips) when the real servers are missing, with the command to install them."""
    missing = {k: missing_requirements(k) for k in ("llamacpp", "vllm")}  # type: ignore[arg-type]
    assert not any(missing.values()), (
        f"real servers not installed: {missing}. Run `bash .ci/real_servers.sh` from the repo root."
    )


async def test_list_models_and_describe(real_server: RealServer, backend: OpenAIBackend) -> None:
    """What a run's manifest records of the server that answered it (issue 29)."""
    assert await backend.list_models() == [real_server.model]
    info = await backend.describe()
    assert list(info.models) == [real_server.model] and not info.simulated
    if real_server.kind == "vllm":
        assert (info.software, info.version) == ("vllm", "0.32.0")
        assert info.models[real_server.model].root  # the served folder's path
    else:  # llama-cpp-python: owned_by "me", no /version (404)
        assert info.software == "llama-cpp-python"


async def test_chat_not_streamed(real_server: RealServer, backend: OpenAIBackend) -> None:
    settle(real_server)
    raw = raw_chat(real_server, SHORT, 48)
    settle(real_server)
    result = await backend.chat(request(real_server, SHORT, stream=False))
    choice = raw["choices"][0]
    assert result.text == choice["message"]["content"].strip()
    assert result.text, "the model said nothing"
    assert result.thinking == ""
    assert result.prompt_tokens == raw["usage"]["prompt_tokens"] > 10
    assert result.completion_tokens == raw["usage"]["completion_tokens"]
    assert 1 <= result.completion_tokens <= 48
    assert result.raw_stop_reason == choice["finish_reason"]
    assert result.stop_reason == ("length" if choice["finish_reason"] == "length" else "stop")
    assert result.seconds > 0 and result.endpoint == real_server.base_url


async def test_chat_streamed(real_server: RealServer, backend: OpenAIBackend) -> None:
    settle(real_server)
    whole = await backend.chat(request(real_server, SHORT, stream=False))
    settle(real_server)
    result = await backend.chat(request(real_server, SHORT, stream=True))
    assert result.text == whole.text and result.text
    assert result.stop_reason == whole.stop_reason
    assert result.raw_stop_reason == whole.raw_stop_reason
    assert whole.completion_tokens is not None
    if real_server.kind == "vllm":  # usage comes in a last chunk (stream_options.include_usage)
        assert result.prompt_tokens == whole.prompt_tokens
        assert result.completion_tokens == whole.completion_tokens
    else:  # llama.cpp never sends usage in a stream: crawdad counts the content chunks
        assert result.prompt_tokens in (None, whole.prompt_tokens)
        assert result.completion_tokens is not None
        assert whole.completion_tokens - 2 <= result.completion_tokens <= whole.completion_tokens
    assert result.seconds > 0 and result.endpoint == real_server.base_url


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
async def test_output_budget_gives_length(
    real_server: RealServer, backend: OpenAIBackend, stream: bool
) -> None:
    result = await backend.chat(request(real_server, LONG, max_tokens=12, stream=stream))
    assert result.raw_stop_reason == "length"
    assert result.stop_reason == "length"
    assert result.text
    if stream and real_server.kind == "llamacpp":
        assert result.completion_tokens is not None and 10 <= result.completion_tokens <= 12
    else:
        assert result.completion_tokens == 12


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("prompt", ["extractor", "bare"])
async def test_structured_output_follows_the_schema(
    real_server: RealServer, backend: OpenAIBackend, stream: bool, prompt: str
) -> None:
    """The extractor's JSON schema is enforced by the server, whichever form it takes.

    The "bare" prompt asks for no JSON at all, so only an enforced constraint yields it.
    """
    text = (
        load_prompts(None)["extractor"].fill(response=RESPONSE)
        if prompt == "extractor"
        else "Tell me about cats."
    )
    result = await backend.chat(
        request(real_server, text, max_tokens=64, stream=stream, json_schema=EXTRACTOR_SCHEMA)
    )
    # llama-cpp-python refuses the OpenAI json_schema form (500) and enforces its own
    # {"type": "json_object", "schema": ...}; vLLM takes json_schema (it would accept the
    # llama.cpp form too, but ignore the schema in it).
    expected_form = "json_schema" if real_server.kind == "vllm" else "json_object"
    assert backend._structured_form == expected_form
    assert result.stop_reason == "stop", f"cut JSON: {result.text!r}"
    value = json.loads(result.text)
    assert isinstance(value, dict) and set(value) == {"answer", "confidence"}, value
    assert value["answer"] in ("yes", "no", "none")
    assert value["confidence"] is None or isinstance(value["confidence"], int | float)
    parsed = parse_reply(result.text)
    assert parsed.method in ("strict", "tolerant"), parsed
    assert parsed.answer == (None if value["answer"] == "none" else value["answer"])
    if prompt == "extractor":
        assert parsed.answer == "yes", f"the extractor misread a plain 'yes': {result.text!r}"


async def test_unknown_model(real_server: RealServer, backend: OpenAIBackend) -> None:
    req = request(real_server, SHORT, model="no-such-model", max_tokens=4, stream=False)
    if real_server.kind == "vllm":
        with pytest.raises(ModelNotFound):
            await backend.chat(req)
    else:  # llama-cpp-python serves its one model under any name
        assert (await backend.chat(req)).completion_tokens


async def test_llamacpp_default_flags_cut_concurrent_streams(
    llamacpp_default_flags: RealServer,
) -> None:
    """llama-cpp-python's default `--interrupt_requests true`: a request that arrives while a
    stream is being generated ends that stream with `data: [DONE]` and no finish_reason.
    crawdad must report the cut stream as a (transient) failure, never as a finished answer.
    Non-streamed requests are never cut."""
    server = llamacpp_default_flags
    b = OpenAIBackend(server.base_url, timeout=120)

    async def later(req: ChatRequest) -> Any:
        await asyncio.sleep(1.0)
        return await b.chat(req)

    try:
        first, second = await asyncio.gather(
            b.chat(request(server, LONG, max_tokens=300, stream=True)),
            later(request(server, SHORT, max_tokens=16, stream=True)),
            return_exceptions=True,
        )
        assert isinstance(first, BackendError), f"the first stream was not cut: {first!r}"
        assert first.transient and "ended before the response was done" in str(first)
        assert not isinstance(second, BaseException), second
        assert second.text

        whole = await asyncio.gather(
            b.chat(request(server, LONG, max_tokens=60, stream=False)),
            later(request(server, SHORT, max_tokens=16, stream=False)),
            return_exceptions=True,
        )
        assert not any(isinstance(r, BaseException) for r in whole), whole
    finally:
        await b.aclose()
