"""crawdad's backends on their aiohttp transport, over real loopback HTTP: every way a request
fails becomes the right crawdad error (retried or not) with a message that says what happened;
connections are kept alive; thinking off is said to the server."""

from __future__ import annotations

import socket

import pytest

from crawdad.backends import Backend, make_backend
from crawdad.backends.base import ChatRequest
from crawdad.config import ModelSpec
from crawdad.errors import BackendError, ModelNotFound, ServerUnavailable
from crawdad.fake import FakeReply, FakeServer, ScriptedModel

KINDS = ["ollama", "openai"]


def request(stream: bool) -> ChatRequest:
    return ChatRequest(model="m", prompt="hi", temperature=0, top_p=1, max_tokens=64, stream=stream)


def backend_for(kind: str, url: str, timeout: float = 30.0) -> Backend:
    return make_backend(ModelSpec(model="m", backend=kind, timeout=timeout), url)  # type: ignore[arg-type]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def faulty(kind: str) -> dict[str, ScriptedModel]:
    reply = FakeReply(thinking="thinking " * 20, text="text " * 40, fault=kind)  # type: ignore[arg-type]
    return {"m": ScriptedModel([reply], thinks=False)}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("stream", [False, True])
async def test_server_down_is_unavailable_and_says_how_to_start_it(kind: str, stream: bool) -> None:
    url = f"http://127.0.0.1:{closed_port()}" + ("/v1" if kind == "openai" else "")
    backend = backend_for(kind, url)
    try:
        with pytest.raises(ServerUnavailable) as error:
            await backend.chat(request(stream))
    finally:
        await backend.aclose()
    assert "nothing answers at" in str(error.value) and url in str(error.value)
    assert f"crawdad wait-for {url}" in str(error.value)
    assert ("ollama serve" if kind == "ollama" else "vllm serve") in str(error.value)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    ("fault", "stream"), [("reset", False), ("cut", False), ("cut", True), ("http_503", True)]
)
async def test_broken_connections_are_transient_not_timeouts(
    kind: str, fault: str, stream: bool
) -> None:
    async with FakeServer(kind, faulty(fault)) as server:  # type: ignore[arg-type]
        backend = backend_for(kind, server.url)
        try:
            with pytest.raises(BackendError) as error:
                await backend.chat(request(stream))
        finally:
            await backend.aclose()
    e = error.value
    assert e.transient and not isinstance(e, ServerUnavailable), e
    assert "did not answer in time" not in str(e), e
    if fault == "http_503":
        assert "503" in str(e)
    else:
        assert "failed" in str(e) or "ended before the response was done" in str(e), e


@pytest.mark.parametrize("kind", KINDS)
async def test_a_server_that_never_answers_times_out(kind: str) -> None:
    async with FakeServer(kind, faulty("hang")) as server:  # type: ignore[arg-type]
        backend = backend_for(kind, server.url, 0.3)
        try:
            with pytest.raises(BackendError, match="did not answer in time") as error:
                await backend.chat(request(stream=False))
        finally:
            await backend.aclose()
    assert error.value.transient


@pytest.mark.parametrize("kind", KINDS)
async def test_unknown_model_is_not_retried(kind: str) -> None:
    async with FakeServer(kind, faulty("not_found")) as server:  # type: ignore[arg-type]
        backend = backend_for(kind, server.url)
        try:
            with pytest.raises(ModelNotFound) as error:
                await backend.chat(request(stream=False))
        finally:
            await backend.aclose()
    assert not error.value.transient


@pytest.mark.parametrize("kind", KINDS)
async def test_connections_are_reused_across_streamed_requests(kind: str) -> None:
    replies = [FakeReply(text=f"reply {i}") for i in range(5)]
    async with FakeServer(kind, {"m": ScriptedModel(replies, thinks=False)}) as server:  # type: ignore[arg-type]
        backend = backend_for(kind, server.url)
        try:
            texts = [(await backend.chat(request(stream=True))).text for _ in replies]
        finally:
            await backend.aclose()
        assert texts == [f"reply {i}" for i in range(5)]
        assert server.stats.connections == 1


async def test_openai_think_false_tells_the_chat_template() -> None:
    reply = FakeReply(thinking="hmm " * 10, text="Answer: yes")
    async with FakeServer("openai", {"m": ScriptedModel([reply, reply])}) as server:
        backend = backend_for("openai", server.url)
        try:
            off = await backend.chat(request(stream=False).model_copy(update={"think": False}))
            on = await backend.chat(request(stream=False).model_copy(update={"think": True}))
        finally:
            await backend.aclose()
        sent = [r.get("chat_template_kwargs") for r in server.requests]
    assert sent == [{"enable_thinking": False}, None]
    assert (off.thinking, off.text) == ("", "Answer: yes")
    assert on.thinking and on.text == "Answer: yes"
