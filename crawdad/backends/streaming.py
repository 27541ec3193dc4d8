"""Streamed chat responses read straight off aiohttp: SSE (OpenAI-compatible) and NDJSON (Ollama).

Real servers send one token a chunk, spread out in time. Through the SDKs (`openai`, `ollama`)
each chunk cost an event-loop wake-up, an SSE or line decoder in Python, a pydantic object and
the stream guard's bookkeeping: 60-120 µs of crawdad's CPU per token (benchmarks/README.md).
Here one wake-up takes every byte that has arrived (`StreamReader.readany`), splits the lines
itself, decodes each chunk with orjson into plain dicts, and feeds the stream guard (loop check,
time budget, stall clock) once per batch instead of once per chunk. Between reads the connection
is left unread for a moment (`gather_seconds`, a fraction of the time the response has taken so
far, at most `MAX_GATHER`): the chunks that arrive meanwhile wait in the kernel and come in the
next read together, so a stream of a few hundred tokens a second costs a few reads a second.

The two readers turn chunks into a `ChatResult` exactly as the SDK paths did: reasoning from
`reasoning_content` / `reasoning` / `thinking`, streamed tool calls put together, usage from the
last chunk (or the count of chunks with text when a server sends none), a stream that ends
before its last chunk an error, an error event mid-stream an error.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import aiohttp
import orjson

from crawdad.backends.base import (
    GARBAGE_ERRORS,
    ChatResult,
    ToolCallOut,
    garbled,
    split_think,
    stop_reason_of,
)
from crawdad.backends.guard import StreamGuard, Verdict
from crawdad.errors import BackendError

REASONING_FIELDS = ("reasoning_content", "reasoning")
GATHER_SHARE = 0.05  # leave the connection unread for this share of the response's time so far
MAX_GATHER = 0.05  # seconds, at most; a stall or a budget is noticed this much later at worst
MIN_GATHER = 0.002  # shorter waits are not worth a pause and a resume
NS = 1e-9


def new_session(connect_timeout: float, read_timeout: float) -> aiohttp.ClientSession:
    """A session for streamed requests: no cap on connections (crawdad caps requests itself),
    `read_timeout` seconds at most between two reads of the body, as the SDKs had."""
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0),
        timeout=aiohttp.ClientTimeout(
            total=None, sock_connect=connect_timeout, sock_read=read_timeout
        ),
        json_serialize=lambda obj: orjson.dumps(obj).decode(),
    )


class Lines:
    """The complete lines of a response body, a batch per read."""

    def __init__(self, resp: aiohttp.ClientResponse, gather: bool = True) -> None:
        self._content = resp.content
        self._rest = b""
        self._protocol = resp.connection.protocol if gather and resp.connection else None
        self._started = time.monotonic()
        self._timer: asyncio.TimerHandle | None = None

    async def batch(self) -> list[bytes] | None:
        """Every complete line that has arrived (waiting for at least one); None at the end."""
        while True:
            data = await self._content.readany()
            if not data:
                rest, self._rest = self._rest, b""
                return [rest] if rest.strip() else None
            if self._rest:
                data = self._rest + data
            lines = data.split(b"\n")
            self._rest = lines.pop()
            if lines:
                self._gather()
                return lines

    def _gather(self) -> None:
        """Stop reading the socket for a moment: what arrives meanwhile comes in one read."""
        protocol = self._protocol
        if protocol is None or protocol.transport is None or self._content.is_eof():
            return  # at the end of the body the connection is back in the pool: not ours
        wait = min(MAX_GATHER, GATHER_SHARE * (time.monotonic() - self._started))
        if wait >= MIN_GATHER:
            protocol.pause_reading()
            self._timer = asyncio.get_running_loop().call_later(wait, self._resume)

    def _resume(self) -> None:
        self._timer = None
        transport = self._protocol.transport if self._protocol is not None else None
        if transport is not None and not transport.is_closing():
            self._protocol.resume_reading()  # type: ignore[union-attr]

    def close(self) -> None:
        """Resume reading now: a connection must not go back to the pool paused."""
        if self._timer is not None:
            self._timer.cancel()
            self._resume()


def _stopped(verdict: Verdict, content: list[str], thinking: list[str], tokens: int) -> ChatResult:
    text, trace = split_think("".join(content), "".join(thinking))
    return ChatResult(
        text=text,
        thinking=trace,
        completion_tokens=tokens,
        stop_reason=verdict,  # type: ignore[arg-type]
        raw_stop_reason=verdict,
    )


def _feed(guard: StreamGuard, thinking: list[str], content: list[str], t0: int, c0: int) -> Verdict:
    """Feed the guard what the batch added (the trace before the text, as a model writes)."""
    if len(thinking) > t0 + 1 or len(content) > c0 + 1:
        delta = "".join(thinking[t0:]) + "".join(content[c0:])
    else:
        delta = (thinking[t0] if len(thinking) > t0 else "") + (
            content[c0] if len(content) > c0 else ""
        )
    return guard.feed(delta)


class StreamError(Exception):
    """An error event in the middle of a stream (`data: {"error": ...}`); the backend words it."""

    def __init__(self, message: str, body: object) -> None:
        super().__init__(message)
        self.message = message
        self.body = body


async def read_sse(
    resp: aiohttp.ClientResponse, url: str, guard: StreamGuard | None, *, gather: bool = True
) -> ChatResult:
    """An OpenAI-compatible chat completion stream (`data: {...}` events, `data: [DONE]`)."""
    content: list[str] = []
    thinking: list[str] = []
    finish: str | None = None
    usage: Any = None
    chunks = 0  # chunks with text: the token count when a server sends no usage (llama.cpp)
    events = 0
    calls: dict[int, dict[str, Any]] = {}  # streamed tool calls by index: id, name, pieces
    lines = Lines(resp, gather)
    loads = orjson.loads
    line = b""
    try:
        while (batch := await lines.batch()) is not None:
            t0, c0, seen = len(thinking), len(content), events
            done = False
            try:
                for line in batch:
                    if line[:5] != b"data:":
                        continue  # blank lines, comments (`: ping`), other fields
                    data = line[5:].strip()
                    if data == b"[DONE]":
                        done = True
                        break
                    chunk = loads(data)
                    events += 1
                    if error := chunk.get("error"):
                        message = error.get("message") if isinstance(error, dict) else None
                        if not message or not isinstance(message, str):
                            message = "An error occurred during streaming"
                        raise StreamError(message, error)
                    usage = chunk.get("usage") or usage
                    choices = chunk.get("choices")
                    if not choices:
                        continue
                    choice = choices[0]
                    delta = choice["delta"]
                    text = delta.get("content") or ""
                    think = ""
                    for name in REASONING_FIELDS:
                        if value := delta.get(name):
                            think = str(value)
                            break
                    if text or think:
                        chunks += 1
                        if text:
                            content.append(text)
                        if think:
                            thinking.append(think)
                    if pieces := delta.get("tool_calls"):
                        _add_calls(calls, pieces)
                    finish = choice.get("finish_reason") or finish
            except GARBAGE_ERRORS as e:
                raise garbled(url, "a chat completion chunk", e, line) from e
            if guard is not None and events > seen:
                verdict = _feed(guard, thinking, content, t0, c0)
                if verdict:
                    resp.close()  # the server sees the client go, and stops
                    return _stopped(verdict, content, thinking, chunks)
            if done:
                while await resp.content.readany():  # the rest of the body: keep-alive
                    pass
                break
    finally:
        lines.close()
    kind = resp.headers.get("Content-Type", "")
    if not events and "event-stream" not in kind:  # e.g. a proxy's HTML error page
        raise garbled(url, "an event stream", ValueError(), f"Content-Type {kind!r}")
    if finish is None:
        raise BackendError(
            f"the stream from {url} ended before the response was done",
            transient=True,
            endpoint=url,
        )
    text, trace = split_think("".join(content), "".join(thinking))
    try:
        prompt_tokens = usage.get("prompt_tokens") if usage else None
        completion_tokens = usage.get("completion_tokens", chunks) if usage else chunks
        tool_calls = [
            ToolCallOut(id=c["id"], name=c["name"], arguments="".join(c["args"]))
            for _, c in sorted(calls.items())
        ]
        return ChatResult(
            tool_calls=tool_calls,
            text=text,
            thinking=trace,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            stop_reason=stop_reason_of(finish),
            raw_stop_reason=finish,
        )
    except GARBAGE_ERRORS as e:
        raise garbled(url, "a chat completion chunk", e, orjson.dumps(usage)) from e


def _add_calls(calls: dict[int, dict[str, Any]], pieces: list[dict[str, Any]]) -> None:
    for c in pieces:
        call = calls.setdefault(c.get("index", 0), {"id": None, "name": "", "args": []})
        call["id"] = c.get("id") or call["id"]
        function = c.get("function")
        if function is not None:
            # OpenAI and vLLM send the name once and the arguments in pieces; llama-cpp-python
            # repeats the whole name (and the arguments so far) in every chunk.
            call["name"] = function.get("name") or call["name"]
            piece, so_far = function.get("arguments") or "", "".join(call["args"])
            if so_far and piece.startswith(so_far):
                call["args"] = [piece]
            else:
                call["args"].append(piece)


async def read_ndjson(
    resp: aiohttp.ClientResponse,
    url: str,
    guard: StreamGuard | None,
    on_error: Callable[[str], Exception],
    *,
    gather: bool = True,
) -> ChatResult:
    """An Ollama /api/chat stream: one JSON object a line, the last with `done: true`."""
    content: list[str] = []
    thinking: list[str] = []
    calls: list[ToolCallOut] = []
    parts = 0  # chunks before the last: Ollama streams a token a chunk
    lines = Lines(resp, gather)
    loads = orjson.loads
    line = b""
    try:
        while (batch := await lines.batch()) is not None:
            t0, c0, seen = len(thinking), len(content), parts
            last: dict[str, Any] | None = None
            try:
                for line in batch:
                    if not line.strip():
                        continue
                    part = loads(line)
                    if error := part.get("error"):
                        raise on_error(error)
                    message = part["message"]
                    text = message.get("content") or ""
                    think = message.get("thinking") or ""
                    if text:
                        content.append(text)
                    if think:
                        thinking.append(think)
                    if message.get("tool_calls"):  # Ollama sends each call whole, in one chunk
                        calls += [
                            ToolCallOut(
                                name=c["function"]["name"],
                                arguments=dict(c["function"].get("arguments") or {}),
                            )
                            for c in message["tool_calls"]
                        ]
                    if part.get("done"):
                        last = part
                        break
                    parts += 1
            except GARBAGE_ERRORS as e:
                raise garbled(url, "an Ollama chat response", e, line) from e
            if guard is not None and parts > seen:
                verdict = _feed(guard, thinking, content, t0, c0)
                if verdict:
                    resp.close()  # the server sees the client go, and stops
                    return _stopped(verdict, content, thinking, parts)
            if last is not None:
                while await resp.content.readany():  # the rest of the body: keep-alive
                    pass
                try:
                    result = _ollama_result(last, "".join(content), "".join(thinking))
                except GARBAGE_ERRORS as e:
                    raise garbled(url, "an Ollama chat response", e, line) from e
                result.tool_calls = calls
                return result
    finally:
        lines.close()
    raise BackendError(
        f"the stream from Ollama at {url} ended before the response was done",
        transient=True,
        endpoint=url,
    )


def _ollama_result(last: dict[str, Any], content: str, thinking: str) -> ChatResult:
    text, trace = split_think(content, thinking)
    total = last.get("total_duration")
    reason = last.get("done_reason")
    return ChatResult(
        text=text,
        thinking=trace,
        prompt_tokens=last.get("prompt_eval_count"),
        completion_tokens=last.get("eval_count"),
        server_seconds=total * NS if total else None,
        stop_reason=stop_reason_of(reason),
        raw_stop_reason=reason,
    )
