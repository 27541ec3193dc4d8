"""Streamed chat responses read straight off aiohttp: SSE (OpenAI-compatible) and NDJSON (Ollama).

Real servers send one token a chunk, spread out in time. Through the SDKs (`openai`, `ollama`)
each chunk cost an event-loop wake-up, an SSE or line decoder in Python, a pydantic object and
the stream guard's bookkeeping: 60-120 µs of crawdad's CPU per token (benchmarks/README.md).
Here a wake-up takes every byte that has arrived at once, the batch of events (or lines) is
decoded by msgspec in one call, as one JSON array, into structs that hold only the fields
crawdad reads, and the stream guard (loop check, time budget, stall clock) is fed once a batch.

Between reads the connection is left unread for a while (its transport paused): the chunks that
arrive meanwhile wait in the kernel and come in the next read together. The wait is about
`GATHER_CHUNKS` chunks at the stream's pace so far, but at most `GATHER_SHARE` of the time the
response has taken so far (a short answer is not held up: its end is seen at most that share
later) and at most `MAX_GATHER` (a stall, a budget or a loop is noticed at most that much later).

The readers turn chunks into a `ChatResult` as the SDK paths did: reasoning from
`reasoning_content` / `reasoning` / `thinking`, streamed tool calls put together, usage from the
last chunk (or the count of chunks with text when a server sends none), a stream that ends
before its last chunk an error, an error event mid-stream an error, a chunk that is not the
API's a `GarbledReply` quoting it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import aiohttp
import msgspec

from crawdad.backends.base import (
    GARBAGE_ERRORS,
    ChatResult,
    ToolCallOut,
    garbled,
    split_think,
    stop_reason_of,
)
from crawdad.backends.guard import StreamGuard, Verdict
from crawdad.backends.transport import connector
from crawdad.errors import BackendError

log = logging.getLogger(__name__)

REASONING_FIELDS = ("reasoning_content", "reasoning")  # read in this order
# After each read, the connection is left unread for GATHER_CHUNKS chunks' time, at most
# GATHER_SHARE of the response's time so far and at most MAX_GATHER seconds (see above).
GATHER_CHUNKS = 32
GATHER_SHARE = 0.1
MAX_GATHER = 0.5
MIN_GATHER = 0.002  # shorter is not worth a pause and a resume
NS = 1e-9


def new_session(
    connect_timeout: float, read_timeout: float, *, force_close: bool = False
) -> aiohttp.ClientSession:
    """A session for streamed requests: no cap on connections (crawdad caps requests itself).
    No timeout between two reads (aiohttp re-arms it on every packet, a timer each): the
    backends bound the whole request by `read_timeout` instead, which the SDKs' read timeout
    (the same number) never came before anyway."""
    trace = aiohttp.TraceConfig()
    trace.on_connection_reuseconn.append(_saw_reuse)
    return aiohttp.ClientSession(
        connector=connector(force_close=force_close),
        trace_configs=[trace],
        timeout=aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout, sock_read=None),
        json_serialize=lambda obj: msgspec.json.encode(obj).decode(),
    )


# A pooled connection the server has closed fails the next request sent on it before any byte
# of an answer comes back: the request never reached the model, so it is safe to send again.
STALE_ERRORS = (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError)
STALE_TO_STOP_POOLING = 2  # stale connections seen before a server counts as closing them all
_SAID_CLOSING: set[str] = set()  # servers the log has named as closing their connections


async def _saw_reuse(session: Any, trace: Any, params: Any) -> None:
    # Only the streamed requests ask to be told (their trace_request_ctx); a plain GET on the
    # same session (model list, version) has none.
    if trace.trace_request_ctx is not None:
        trace.trace_request_ctx.reused = True


class StreamConnections:
    """The streamed requests to one server: over pooled keep-alive connections while the server
    keeps them, each request resent at once on a fresh connection when it fails on a reused one
    before any byte of its answer (not a retry: no wait, no attempt counted). A server seen to
    close its connections after every reply (llama-server does, while announcing keep-alive)
    gets a fresh connection per request from then on, said once in the log.

    A restart closes every connection open at once, so that many requests fail on a reused one
    in a row: that is one event, not evidence. So a stale connection retires the pool (its
    connections were all opened before the failure; those in flight finish in it) and only a
    connection of the pool made since can add evidence: a server counts as closing after every
    reply when connections opened after one stale failure go stale in turn,
    `STALE_TO_STOP_POOLING` times with no reuse that worked in between."""

    def __init__(self, url: str, connect_timeout: float, read_timeout: float) -> None:
        self.url = url
        self._timeouts = (connect_timeout, read_timeout)
        self._pooled: aiohttp.ClientSession | None = None
        self._fresh: aiohttp.ClientSession | None = None
        self._retired: list[aiohttp.ClientSession] = []  # pools a stale connection ended
        self.stale = 0  # requests resent after a stale pooled connection
        self.evidence = 0  # stale pools in a row, each opened after the last one went stale
        self.closes_connections = False

    def _session(self, fresh: bool) -> aiohttp.ClientSession:
        if fresh:
            if self._fresh is None:
                self._fresh = new_session(*self._timeouts, force_close=True)
            return self._fresh
        if self._pooled is None:
            self._pooled = new_session(*self._timeouts)
        return self._pooled

    async def post(self, url: str, **kwargs: Any) -> aiohttp.ClientResponse:
        """The response (its headers read); use it as `async with`. A redirect is never
        followed: the answer is the server's own (a 3xx is an error like any other)."""
        kwargs.setdefault("allow_redirects", False)
        if self.closes_connections:
            return await self._session(fresh=True).post(url, **kwargs)
        sent = SimpleNamespace(reused=False)
        pool = self._session(fresh=False)
        try:
            response = await pool.post(url, trace_request_ctx=sent, **kwargs)
        except STALE_ERRORS:
            if not sent.reused:
                raise
        else:
            if sent.reused and pool is self._pooled:
                self.evidence = (
                    0  # the server kept a connection: whatever went stale, it was not that
                )
            return response
        self.stale += 1
        if pool is self._pooled:  # the first stale connection of this pool: retire it
            self.evidence += 1
            self._retired.append(pool)
            self._pooled = None
        if self.evidence >= STALE_TO_STOP_POOLING and not self.closes_connections:
            self.closes_connections = True
            if self.url not in _SAID_CLOSING:  # several models on one server: said once
                _SAID_CLOSING.add(self.url)
                log.warning(
                    "%s closes its connections after every reply: crawdad now opens a new one"
                    " per request to it",
                    self.url,
                )
        return await self._session(fresh=True).post(url, **kwargs)

    async def get(self, url: str, **kwargs: Any) -> aiohttp.ClientResponse:
        kwargs.setdefault("allow_redirects", False)
        return await self._session(fresh=self.closes_connections).get(url, **kwargs)

    async def close(self) -> None:
        for session in (self._pooled, self._fresh, *self._retired):
            if session is not None:
                await session.close()
        self._pooled = self._fresh = None
        self._retired = []


# aiohttp's StreamReader fields that `Lines._take` reads and keeps in step.
_READER_FIELDS: tuple[str, ...] = ("_buffer", "_buffer_offset", "_size", "_cursor", "_eof")
_READER_FIELDS += ("_http_chunk_splits", "_exception", "_wait")


class Lines:
    """The complete lines of a response body, a batch per read."""

    def __init__(self, resp: aiohttp.ClientResponse, per_chunk: int, gather: bool = True) -> None:
        self._content = content = resp.content
        self._rest = b""
        self._per_chunk = per_chunk  # lines a chunk: 2 for SSE (an event, a blank line)
        self._lines = 0
        self._protocol = resp.connection.protocol if resp.connection else None
        self._gather_on = gather
        self._started = time.monotonic()
        self._timer: asyncio.TimerHandle | None = None
        self._paused: asyncio.Transport | None = None
        # aiohttp's StreamReader resumes the connection after every HTTP chunk it hands out
        # (several µs each, with one-token chunks most of the cost); once a read is enough.
        self._flow = self._protocol is not None and hasattr(content, "_low_water_chunks")
        if self._flow:
            content._low_water_chunks = 0
        # And `readany` hands out its buffer an HTTP chunk at a time (with bookkeeping for each);
        # where the buffer is as this module knows it, it is taken whole.
        self._whole = self._flow and all(hasattr(content, a) for a in _READER_FIELDS)

    async def batch(self) -> bytes | None:
        """Every complete line that has arrived, newlines kept (waiting for at least one);
        None at the end of the body."""
        while True:
            data = await (self._take() if self._whole else self._content.readany())
            if self._flow and getattr(self._protocol, "_reading_paused", False):
                self._protocol.resume_reading()  # type: ignore[union-attr]
            if not data:
                rest, self._rest = self._rest, b""
                return rest + b"\n" if rest.strip() else None
            if self._rest:
                data = self._rest + data
            end = data.rfind(b"\n") + 1
            if end:
                self._rest = data[end:]
                self._lines += data.count(b"\n", 0, end)
                self._gather()
                return data[:end]
            self._rest = data

    async def _take(self) -> bytes:
        """`readany()`, with what has arrived taken in one piece."""
        content: Any = self._content
        if content._exception is None and not content._buffer and not content._eof:
            await content._wait("readany")
        buffer = content._buffer
        if content._exception is not None or not buffer or content._buffer_offset:
            return await self._content.readany()
        data = b"".join(buffer) if len(buffer) > 1 else buffer[0]
        buffer.clear()
        content._size -= len(data)
        content._cursor += len(data)
        if content._http_chunk_splits:
            content._http_chunk_splits.clear()  # offsets for readchunk(), never called here
        return data  # type: ignore[no-any-return]

    def _gather(self) -> None:
        """Stop reading the socket for a moment: what arrives meanwhile comes in one read.

        The transport is paused, not aiohttp's protocol: pausing the protocol pauses its parser
        too, which then hands out one chunk per resume."""
        transport = self._protocol.transport if self._protocol is not None else None
        if not self._gather_on or transport is None or not transport.is_reading():
            return
        if self._content.is_eof():
            return  # at the end of the body the connection is back in the pool: not ours
        elapsed = time.monotonic() - self._started
        pace = elapsed * self._per_chunk / self._lines  # seconds a chunk so far
        wait = min(MAX_GATHER, GATHER_SHARE * elapsed, GATHER_CHUNKS * pace)
        if wait >= MIN_GATHER:
            transport.pause_reading()
            self._paused = transport
            self._timer = asyncio.get_running_loop().call_later(wait, self._resume)

    def _resume(self) -> None:
        self._timer = None
        transport, self._paused = self._paused, None
        if transport is not None and not transport.is_closing():
            transport.resume_reading()

    def close(self) -> None:
        """Resume reading now: a connection must not go back to the pool paused."""
        if self._timer is not None:
            self._timer.cancel()
            self._resume()


async def _drain(resp: aiohttp.ClientResponse) -> None:
    """Read the body to its end after the last chunk, so the connection can serve again. A body
    that ends badly there (llama-cpp-python, when it cuts a stream) only costs the connection:
    the answer is judged by the chunks."""
    with contextlib.suppress(aiohttp.ClientError):
        while await resp.content.readany():
            pass


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


# Decoded from JSON, these hold no cycles: not tracked by the garbage collector (fewer
# collections with thousands of chunks a second).
class _Delta(msgspec.Struct, gc=False):
    content: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None
    tool_calls: list[Any] | None = None


class _Choice(msgspec.Struct, gc=False):
    delta: _Delta
    finish_reason: str | None = None


class _Chunk(msgspec.Struct, gc=False):
    """What crawdad reads of a chat completion chunk; the rest is skipped, never built."""

    choices: list[_Choice] | None = None
    usage: dict[str, Any] | None = None
    error: Any = None


class _Message(msgspec.Struct, gc=False):
    content: str | None = None
    thinking: str | None = None
    tool_calls: list[Any] | None = None


class _Part(msgspec.Struct, gc=False):
    """What crawdad reads of a line of an Ollama chat stream."""

    message: _Message | None = None
    done: bool = False
    error: Any = None
    done_reason: str | None = None
    total_duration: int | None = None
    prompt_eval_count: int | None = None
    eval_count: int | None = None


_DECODERS: dict[type, tuple[msgspec.json.Decoder[Any], msgspec.json.Decoder[Any]]] = {
    kind: (msgspec.json.Decoder(kind), msgspec.json.Decoder(list[kind]))  # type: ignore[valid-type]
    for kind in (_Chunk, _Part)
}


def _decode(kind: type, payloads: list[bytes], url: str, expected: str, prefix: bytes) -> list[Any]:
    """Every payload decoded; on an error, the payload at fault is named."""
    one, many = _DECODERS[kind]
    if len(payloads) > 1:
        found = _decode_array(many, b",".join(payloads), len(payloads))
        if found is not None:
            return found
    out = []
    for payload in payloads:  # one at a time, to say which
        try:
            out.append(one.decode(payload))
        except msgspec.DecodeError as e:
            raise garbled(url, expected, ValueError(str(e)), prefix + payload) from e
    return out


def _decode_array(decoder: msgspec.json.Decoder[Any], joined: bytes, count: int) -> Any:
    """`count` payloads joined by commas, decoded in one call as a JSON array (None: not so)."""
    try:
        found = decoder.decode(b"[" + joined + b"]")
    except msgspec.DecodeError:
        return None
    return found if len(found) == count else None


_DONE = b"data: [DONE]\n\n"


def _sse_payloads(raw: bytes) -> tuple[list[bytes], bool]:
    """The `data:` payloads of complete lines of an event stream, and whether `[DONE]` came."""
    payloads: list[bytes] = []
    for line in raw.split(b"\n"):
        if line[:5] != b"data:":
            continue  # blank lines, comments (`: ping`), other fields
        data = line[6:] if line[5:6] == b" " else line[5:].strip()
        if data[:6] == b"[DONE]":
            return payloads, True
        payloads.append(data)
    return payloads, False


def _sse_chunks(raw: bytes, url: str, expected: str) -> tuple[list[_Chunk], bool]:
    """The chunks of complete lines of an event stream, and whether `[DONE]` came. The usual
    batch (`data: {...}` events only, as vLLM and llama.cpp send) becomes one JSON array
    without splitting it into lines: a JSON text holds no raw newline."""
    done = raw.endswith(_DONE)
    body = raw[: -len(_DONE)] if done else raw
    if not body:
        return [], done
    if body[:7] == b"data: {" and body[-3:] == b"}\n\n" and b"[DONE]" not in body:
        inner = body[6:-2]
        joined = inner.replace(b"\n\ndata: ", b",")
        if b"\n" not in joined:
            found = _decode_array(_DECODERS[_Chunk][1], joined, inner.count(b"\n\n") + 1)
            if found is not None:
                return found, done  # type: ignore[no-any-return]
    payloads, done = _sse_payloads(raw)
    return _decode(_Chunk, payloads, url, expected, b"data: "), done


def _ndjson_parts(raw: bytes, url: str, expected: str) -> list[_Part]:
    """The objects of complete lines of an NDJSON stream (one JSON array when no line is
    blank)."""
    inner = raw[:-1]
    if inner and b"\n\n" not in inner and inner[:1] != b"\n":
        found = _decode_array(
            _DECODERS[_Part][1], inner.replace(b"\n", b","), inner.count(b"\n") + 1
        )
        if found is not None:
            return found  # type: ignore[no-any-return]
    payloads = [line for line in raw.split(b"\n") if line.strip()]
    return _decode(_Part, payloads, url, expected, b"")


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
    lines = Lines(resp, 2, gather)
    expected = "a chat completion chunk"
    try:
        while (raw := await lines.batch()) is not None:
            t0, c0 = len(thinking), len(content)
            parsed, done = _sse_chunks(raw, url, expected)
            if parsed:
                events += len(parsed)
                try:
                    for chunk in parsed:
                        if chunk.error:
                            error = chunk.error
                            message = error.get("message") if isinstance(error, dict) else None
                            if not message or not isinstance(message, str):
                                message = "An error occurred during streaming"
                            raise StreamError(message, error)
                        if chunk.usage:
                            usage = chunk.usage
                        if not chunk.choices:
                            continue
                        choice = chunk.choices[0]
                        delta = choice.delta
                        text = delta.content
                        think = delta.reasoning_content or delta.reasoning
                        if text:
                            content.append(text)
                            chunks += 1
                            if think:
                                thinking.append(think)
                        elif think:
                            thinking.append(think)
                            chunks += 1
                        if delta.tool_calls:
                            _add_calls(calls, delta.tool_calls)
                        if choice.finish_reason:
                            finish = choice.finish_reason
                except GARBAGE_ERRORS as e:
                    payload = _sse_payloads(raw)[0][parsed.index(chunk)]
                    raise garbled(url, expected, e, b"data: " + payload) from e
                if guard is not None:
                    verdict = _feed(guard, thinking, content, t0, c0)
                    if verdict:
                        resp.close()  # the server sees the client go, and stops
                        return _stopped(verdict, content, thinking, chunks)
            if done:
                await _drain(resp)
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
        raise garbled(url, expected, e, msgspec.json.encode(usage)) from e


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
    lines = Lines(resp, 1, gather)
    expected = "an Ollama chat response"
    try:
        while (raw := await lines.batch()) is not None:
            t0, c0 = len(thinking), len(content)
            decoded = _ndjson_parts(raw, url, expected)
            if not decoded:
                continue
            last: _Part | None = None
            try:
                for part in decoded:
                    if part.error:
                        raise on_error(part.error)
                    message = part.message
                    if message is None:
                        raise KeyError("message")
                    if message.content:
                        content.append(message.content)
                    if message.thinking:
                        thinking.append(message.thinking)
                    if message.tool_calls:  # Ollama sends each call whole, in one chunk
                        calls += [
                            ToolCallOut(
                                name=c["function"]["name"],
                                arguments=dict(c["function"].get("arguments") or {}),
                            )
                            for c in message.tool_calls
                        ]
                    if part.done:
                        last = part
                        break
                    parts += 1
            except GARBAGE_ERRORS as e:
                payloads = [line for line in raw.split(b"\n") if line.strip()]
                raise garbled(url, expected, e, payloads[decoded.index(part)]) from e
            if guard is not None:
                verdict = _feed(guard, thinking, content, t0, c0)
                if verdict:
                    resp.close()  # the server sees the client go, and stops
                    return _stopped(verdict, content, thinking, parts)
            if last is not None:
                await _drain(resp)
                result = ollama_result(last, "".join(content), "".join(thinking))
                result.tool_calls = calls
                return result
    finally:
        lines.close()
    raise BackendError(
        f"the stream from Ollama at {url} ended before the response was done",
        transient=True,
        endpoint=url,
    )


def ollama_result(last: Any, content: str, thinking: str) -> ChatResult:
    """An Ollama answer's result from its last part: a streamed chunk, or the `ollama` client's
    whole `ChatResponse` (the same fields: counts, durations, done reason)."""
    text, trace = split_think(content, thinking)
    total = last.total_duration
    return ChatResult(
        text=text,
        thinking=trace,
        prompt_tokens=last.prompt_eval_count,
        completion_tokens=last.eval_count,
        server_seconds=total * NS if total else None,
        stop_reason=stop_reason_of(last.done_reason),
        raw_stop_reason=last.done_reason,
    )
