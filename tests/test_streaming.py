"""crawdad's own stream reader (crawdad/backends/streaming.py) on the bodies real servers sent
(tests/real/wire), cut anywhere, and on the fakes' one-token streams: the same answer, reasoning,
counts and finish as reading them whole; the ways a stream goes wrong stay errors."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from crawdad.backends import make_backend
from crawdad.backends.base import ChatRequest, split_think
from crawdad.config import ModelSpec
from crawdad.errors import BackendError, GarbledReply
from crawdad.fake import FakeReply, FakeServer, LatencyModel, ScriptedModel

WIRE = Path(__file__).parent / "real" / "wire"
STREAMS = [
    "llamacpp_chat_stream.txt",
    "llamacpp_chat_stream_length.txt",
    "vllm_chat_stream_usage.txt",
    "vllm_qwen3_think_chat_stream.txt",
    "vllm_deepseek_r1_think_chat_stream.txt",
    "vllm_json_schema_stream.txt",
]


def request(**update: object) -> ChatRequest:
    base = ChatRequest(model="m", prompt="hi", temperature=0, top_p=1, max_tokens=400, think=True)
    return base.model_copy(update=update)


def expected(body: bytes) -> tuple[str, str, int, str]:
    """(content, reasoning, chunks with text, finish) read naively, event by event."""
    content, reasoning, chunks, finish = "", "", 0, ""
    for line in body.decode().splitlines():
        if not line.startswith("data: {"):
            continue
        for choice in json.loads(line[6:])["choices"]:
            delta = choice["delta"]
            text, think = delta.get("content") or "", delta.get("reasoning") or ""
            content, reasoning = content + text, reasoning + think
            chunks += bool(text or think)
            finish = choice.get("finish_reason") or finish
    return content, reasoning, chunks, finish


async def serve(body: bytes, cut: int) -> AsyncIterator[str]:
    """An OpenAI-compatible endpoint that sends `body` in pieces of `cut` bytes."""

    async def chat(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for i in range(0, len(body), cut):
            await response.write(body[i : i + cut])
        return response

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        await runner.cleanup()


async def read(body: bytes, cut: int):  # type: ignore[no-untyped-def]
    async for url in serve(body, cut):
        backend = make_backend(ModelSpec(model="m", backend="openai", timeout=30), url)
        try:
            return await backend.chat(request())
        finally:
            await backend.aclose()


@pytest.mark.parametrize("name", STREAMS)
async def test_real_servers_streams_read_in_any_pieces(name: str) -> None:
    body = (WIRE / name).read_bytes()
    content, reasoning, chunks, finish = expected(body)
    # a keep-alive comment, as llama.cpp sends every 15 s, between two events
    first = body.index(b"\n\n") + 2
    body = body[:first] + b": ping - 2025-01-01 00:00:00\n\n" + body[first:]
    results = [await read(body, cut) for cut in (len(body), 97, 7)]
    seen = [r.model_dump(exclude={"seconds", "endpoint"}) for r in results]
    assert seen[1] == seen[0] and seen[2] == seen[0]
    r = results[0]
    assert (r.text, r.thinking) == split_think(content, reasoning)  # qwen3 sends a late </think>
    assert r.raw_stop_reason == finish and (r.text or r.thinking)
    if b'"usage"' not in body:  # llama.cpp: counted from the chunks
        assert r.completion_tokens == chunks and r.prompt_tokens is None


async def test_done_without_a_finish_is_a_transient_error() -> None:
    # llama-cpp-python cuts a stream for a newcomer: [DONE] and no finish_reason
    body = (WIRE / "llamacpp_chat_stream.txt").read_bytes()
    events = body.split(b"\n\n")
    cut = b"\n\n".join([e for e in events if b'finish_reason": "length' not in e])
    with pytest.raises(BackendError, match="ended before the response was done") as error:
        await read(cut, 64)
    assert error.value.transient


async def test_error_event_mid_stream_and_a_bad_chunk() -> None:
    body = (WIRE / "vllm_chat_stream.txt").read_bytes()
    first = body.index(b"\n\n") + 2
    error = b'data: {"error": {"message": "engine died", "code": 500}}\n\n'
    with pytest.raises(BackendError, match="engine died"):
        await read(body[:first] + error + body[first:], 50)
    with pytest.raises(GarbledReply, match=r"not a chat completion chunk: data: \{nope"):
        await read(body[:first] + b"data: {nope\n\n" + body[first:], 50)


@pytest.mark.parametrize("kind", ["ollama", "openai"])
async def test_one_token_chunks_paced_read_as_the_whole_reply(kind: str) -> None:
    reply = FakeReply(thinking="Let me think it over. " * 12, text="The answer is yes. " * 8)
    model = ScriptedModel([reply, reply])
    latency = LatencyModel(per_token_seconds=0.0005, capacity=4)
    async with FakeServer(kind, {"m": model}, latency=latency, chunking="token") as server:  # type: ignore[arg-type]
        backend = make_backend(ModelSpec(model="m", backend=kind, timeout=30), server.url)  # type: ignore[arg-type]
        try:
            streamed = await backend.chat(request())
            whole = await backend.chat(request(stream=False))
        finally:
            await backend.aclose()
        calls = server.calls
    assert (streamed.text, streamed.thinking) == (whole.text, whole.thinking)
    assert streamed.text == reply.text.strip() and streamed.thinking == reply.thinking.strip()
    assert streamed.completion_tokens == whole.completion_tokens == 12 * 5 + 8 * 4
    assert calls[0].eval_count == 12 * 5 + 8 * 4
