"""The request pipeline both fake APIs share: faults, the behaviour's reply, slots, pacing, stats.

The API modules parse their own request format into a `FakeRequest`, hand the engine a renderer
for their wire format, and the engine does the rest the same way for both.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import socket
import struct
import time
import weakref
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from aiohttp import web

from crawdad.backends.base import FAKE_HEADER
from crawdad.fake.behaviour import (
    Behaviour,
    FakeModel,
    FakeReply,
    FakeRequest,
    FaultKind,
    ScriptExhausted,
    as_models,
)
from crawdad.fake.faults import GARBAGE_FAULTS, FaultPlan
from crawdad.fake.generation import chunks
from crawdad.fake.latency import LatencyModel, QueueFull, Scheduler, Slot
from crawdad.fake.protocol import (
    CALL_KEY,
    ApiStyle,
    CallRecord,
    CommonSettings,
    FakeHTTPError,
    Job,
    Renderer,
    ServerStats,
    Timings,
)
from crawdad.fake.server_load import ServerLoad

# Faults that happen after the response started (so the reply is generated first).
STREAMED_FAULTS = ("cut", "stream_error", *GARBAGE_FAULTS)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
# What a watcher of the server reads (crawdad's sampler, Prometheus): not counted with the API.
METRICS_PATHS = frozenset({"/metrics", "/slots", "/api/ps"})


class Engine:
    """One fake server's state and request pipeline, shared by its API module's handlers."""

    def __init__(
        self,
        models: Mapping[str, Behaviour],
        latency: LatencyModel,
        faults: FaultPlan | None,
        settings: CommonSettings,
    ) -> None:
        self.models: dict[str, FakeModel] = as_models(models)
        self.settings = settings
        self.faults = faults or FaultPlan()
        self.stats = ServerStats()
        self.scheduler = Scheduler(latency, self.stats.latency)
        self.load = ServerLoad(self.scheduler)  # what /metrics, /slots tell
        self.requests: deque[dict[str, Any]] = deque(maxlen=settings.max_recorded_requests)
        self.calls: deque[CallRecord] = deque(maxlen=settings.max_recorded_requests)
        self._attempts: dict[tuple[str, str], int] = {}
        self._peers: set[Any] = set()  # client addresses seen, to count connections
        # Connections closed after a streamed reply (their transports: a new connection may get
        # the port of a closed one, and is not closed).
        self._closed: weakref.WeakSet[Any] = weakref.WeakSet()
        self._open: weakref.WeakSet[Any] = weakref.WeakSet()  # every connection's transport
        self._stopping: asyncio.Event | None = None
        self._tasks: set[asyncio.Task[Any]] = set()

    # ---- life cycle

    def on_start(self) -> None:
        self._stopping = asyncio.Event()
        self.scheduler.reset()

    def drop_connections(self) -> None:
        """As a restart does to the connections open before it, without its timing: the next
        request the client sends on each of them gets no byte of an answer (a client that has
        not yet seen a restart's closed connection sends on it, and gets "Server
        disconnected"). Connections made afterwards are kept as usual."""
        for transport in list(self._open):
            self._closed.add(transport)

    def on_stop(self) -> None:
        """Release hanging requests and end the ones in flight."""
        if self._stopping is not None:
            self._stopping.set()
        for task in list(self._tasks):
            task.cancel()

    def middleware(self, api: ApiStyle) -> Any:
        """Counts requests, renders errors in the API's style, tracks handlers to end on stop."""

        @web.middleware
        async def fake_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
            stats = self.stats
            if request.path in METRICS_PATHS:  # a watcher's reads: apart from the API's counts
                stats.metrics_requests += 1
                return await handler(request)
            stats.requests += 1
            route = f"{request.method} {request.path}"
            stats.by_route[route] = stats.by_route.get(route, 0) + 1
            peer = request.transport.get_extra_info("peername") if request.transport else None
            if peer not in self._peers:
                self._peers.add(peer)
                stats.connections += 1
            if request.transport is not None:
                self._open.add(request.transport)
            if request.transport is not None and request.transport in self._closed:
                stats.stale_requests += 1  # the client reused a connection closed on it
                request.transport.close()
                return web.Response(status=499)  # never sent: no byte reaches the client
            task = asyncio.current_task()
            if task is not None:
                self._tasks.add(task)
            try:
                response = await handler(request)
            except FakeHTTPError as error:
                response = (
                    api.render(error)
                    if error.body is None
                    else web.json_response(error.body, status=error.status)
                )
            except (_Aborted, ConnectionResetError):
                response = web.Response(status=499)  # never sent: the connection is gone
            finally:
                self._tasks.discard(task)  # type: ignore[arg-type]
            call = request.get(CALL_KEY)
            if call is not None and call.stream and self.settings.close_after_stream:
                self._closed.add(request.transport)
            if call is not None:
                call.status = response.status
            stats.statuses[response.status] = stats.statuses.get(response.status, 0) + 1
            return response

        return fake_middleware

    # ---- steps the API modules call

    async def read_json(self, request: web.Request) -> dict[str, Any]:
        raw = await request.read()
        try:
            body = json.loads(raw) if raw else {}
        except json.JSONDecodeError as error:
            raise FakeHTTPError(400, f"invalid JSON body: {error}", "BadRequestError") from None
        if not isinstance(body, dict):
            raise FakeHTTPError(400, "request body must be a JSON object", "BadRequestError")
        if self.requests.maxlen:
            self.requests.append(body)
        return body

    def resolve(self, name: Any) -> FakeModel | None:
        if not isinstance(name, str) or not name:
            return None
        found = self.models.get(name)
        if found is None and ":" not in name:
            found = self.models.get(f"{name}:latest")
        if found is None and name.endswith(":latest"):
            found = self.models.get(name.removesuffix(":latest"))
        return found

    def record(self, request: web.Request, call: CallRecord) -> None:
        request[CALL_KEY] = call
        if self.calls.maxlen:
            self.calls.append(call)

    async def reply(
        self,
        request: web.Request,
        fake: FakeRequest,
        model: FakeModel,
        call: CallRecord,
        api: ApiStyle,
    ) -> FakeReply:
        """The behaviour's reply, after any fault that ends the request before a response."""
        key = (fake.model, fake.digest)
        attempt = self._attempts.get(key, 0)
        self._attempts[key] = attempt + 1
        fault = self.faults.draw(fake.model, fake.digest, attempt)
        reply = FakeReply()
        if fault is None or fault in STREAMED_FAULTS:  # a cut reply needs something to cut
            try:
                reply = model.reply(fake)
            except ScriptExhausted as error:
                raise api.internal(str(error)) from None
            except Exception as error:  # a broken behaviour is a 500, visible to the client
                raise api.internal(f"fake model failed: {type(error).__name__}: {error}") from None
            fault = fault or reply.fault
        if fault is not None:
            call.fault = fault
            self.stats.faults[fault] = self.stats.faults.get(fault, 0) + 1
            if fault not in STREAMED_FAULTS:
                await self._fail_now(request, fault, fake.model, api)
        return reply

    async def _fail_now(
        self, request: web.Request, fault: FaultKind, model: str, api: ApiStyle
    ) -> None:
        if fault == "http_500":
            raise api.internal()
        if fault == "http_503":
            raise api.unavailable()
        if fault == "not_found":
            raise api.not_found(model)
        if fault == "hang":
            stopping = self._stopping
            assert stopping is not None
            try:
                await stopping.wait()
            finally:
                if stopping.is_set():
                    self.stats.hangs_released += 1
        _reset(request)
        raise _Aborted

    async def generate(
        self, request: web.Request, job: Job, render: Renderer, api: ApiStyle
    ) -> web.StreamResponse:
        try:
            slot = await self.scheduler.acquire(job.request.model, job.request.digest)
        except QueueFull:
            raise api.busy() from None
        model = job.request.model
        held, job.cached_tokens = self.load.admit(
            model, _prompt_text(job.request), job.prompt_tokens, job.plan.count
        )

        async def serve() -> web.StreamResponse:
            try:
                return await self._serve(request, job, render, slot)
            finally:
                self.scheduler.release(slot)
                self.load.release(model, held)

        if job.stream or not self.settings.finish_unstreamed:
            try:
                return await serve()
            except (ConnectionResetError, asyncio.CancelledError):
                self._disconnected(job)
                raise
        # Generated to its end even if the client goes: the handler's cancellation (the client
        # closed its connection) does not reach the generation.
        work = asyncio.ensure_future(serve())
        self._tasks.add(work)
        work.add_done_callback(self._finished)
        try:
            return await asyncio.shield(work)
        except (ConnectionResetError, asyncio.CancelledError):
            self._disconnected(job)
            raise

    def _finished(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: a client gone is no error of the server's

    def _disconnected(self, job: Job) -> None:
        job.call.disconnected = True
        self.stats.disconnects += 1

    async def _serve(
        self, request: web.Request, job: Job, render: Renderer, slot: Slot
    ) -> web.StreamResponse:
        admitted = time.monotonic()
        # as vLLM's prefix caching and llama.cpp's prompt cache: what is cached is not redone
        fresh = job.prompt_tokens - job.cached_tokens
        self.stats.latency.prefilled_tokens += fresh
        if job.reply.delay is None:
            await self.scheduler.prefill(slot, fresh)
        prefilled = time.monotonic()
        call, plan = job.call, job.plan
        fault = call.fault
        call.done_reason = plan.done_reason
        self.stats.latency.generated_tokens += plan.count
        if not job.stream:
            if job.reply.delay is not None:
                await asyncio.sleep(job.reply.delay * self.scheduler.model.time_scale)
            else:
                await self.scheduler.pace(slot, plan.count)
            call.eval_count = plan.count
            body = render.whole(plan, self._timings(job, slot, admitted, prefilled))
            if fault == "cut":
                return await _cut_body(request, body, render.content_type)
            if fault == "stream_error":
                raise FakeHTTPError(500, "model runner stopped unexpectedly", "InternalServerError")
            if fault in GARBAGE_FAULTS:
                return _garbage_body(render, fault)
            return web.Response(body=body, content_type=render.content_type)

        pieces = list(chunks(plan, *self._chunking(slot, job)))
        # With no time per token, every token is out of the model once the prompt is processed:
        # the slot is free for the next request, and the rest is the network (as in vLLM, whose
        # engine never waits for a client to read).
        untimed = job.reply.delay is None and (
            self.scheduler.instant or self.scheduler.model.per_token_seconds <= 0
        )
        if untimed:
            self.scheduler.release(slot)
        if untimed and fault is None:
            # The whole stream in one write (one GIL hand-over, not three).
            parts = [render.start()]
            parts += [render.chunk(channel, text) for channel, text, _ in pieces]
            parts.append(render.final(plan, self._timings(job, slot, admitted, prefilled)))
            call.eval_count = plan.count
            return web.Response(body=b"".join(parts), content_type=render.content_type)
        if fault == "html":  # a proxy's error page in place of the whole stream
            return _garbage_body(render, fault)
        rest: list[tuple[int, str, int]] = []
        if fault in STREAMED_FAULTS:
            half = max(1, len(pieces) // 2)
            pieces, rest = pieces[:half], pieces[half:]
        response = web.StreamResponse(headers={"Content-Type": render.content_type})
        await response.prepare(request)
        if untimed:
            parts = [render.start()]
            parts += [render.chunk(channel, text) for channel, text, _ in pieces]
            await response.write(b"".join(parts))
            call.eval_count = sum(count for _, _, count in pieces)
        else:
            await response.write(render.start())
            if job.reply.delay is not None:
                for i, (channel, text, count) in enumerate(pieces, 1):
                    await self._pace(slot, job, count, len(pieces))
                    if i == len(pieces):
                        self.scheduler.release(slot)
                    await response.write(render.chunk(channel, text))
                    call.eval_count += count  # what the client got, if it goes away mid-stream
            else:
                await self._stream_paced(response, render, slot, job, pieces)
        if fault == "cut":
            assert request.transport is not None
            request.transport.close()  # no final chunk, no end of the chunked body
            return response
        if fault == "stream_error":
            await response.write(render.error("model runner stopped unexpectedly"))
            return response
        if fault in GARBAGE_FAULTS:  # one bad chunk, then the rest of a good stream
            parts = [render.garbage(fault, True)]
            parts += [render.chunk(channel, text) for channel, text, _ in rest]
            await response.write(b"".join(parts))
            call.eval_count += sum(count for _, _, count in rest)
        await response.write(render.final(plan, self._timings(job, slot, admitted, prefilled)))
        return response

    async def _stream_paced(
        self,
        response: web.StreamResponse,
        render: Renderer,
        slot: Slot,
        job: Job,
        pieces: list[tuple[int, str, int]],
    ) -> None:
        """Each chunk written when its tokens are out of the model. Chunks already due (the
        server fell behind, as a busy one does) go out in one write: the same chunks, fewer
        system calls, so that the fake catches up instead of falling further behind."""
        pending: list[bytes] = []
        for i, (channel, text, count) in enumerate(pieces, 1):
            if (delay := self.scheduler.advance(slot, count)) > 0:
                if pending:
                    await response.write(b"".join(pending))
                    pending.clear()
                await asyncio.sleep(delay)
            if i == len(pieces):
                self.scheduler.release(slot)  # the last token is out of the model
            pending.append(render.chunk(channel, text))
            job.call.eval_count += count  # what the client got, if it goes away mid-stream
        if pending:
            await response.write(b"".join(pending))

    def _chunking(self, slot: Slot, job: Job) -> tuple[int, int]:
        """Tokens per chunk and most chunks: one token each with `chunking="token"`; else few big
        writes when nothing waits, otherwise chunks of about `min_chunk_seconds` each, so time
        to first token stays realistic."""
        s, m = self.settings, self.scheduler.model
        if s.chunking == "token":
            return 1, 1 << 30
        per_token = m.per_token_seconds * slot.speed * m.time_scale
        if job.reply.delay is not None or self.scheduler.instant or per_token <= 0:
            return s.chunk_tokens, s.max_chunks
        return max(s.chunk_tokens, math.ceil(s.min_chunk_seconds / per_token)), 1 << 30

    async def _pace(self, slot: Slot, job: Job, tokens: int, pieces: int) -> None:
        if job.reply.delay is not None:
            scale = self.scheduler.model.time_scale
            await asyncio.sleep(job.reply.delay * scale / max(1, pieces))
        else:
            await self.scheduler.pace(slot, tokens)

    def _timings(self, job: Job, slot: Slot, admitted: float, prefilled: float) -> Timings:
        now = time.monotonic()
        m = self.scheduler.model
        load = m.switch_seconds * m.time_scale if slot.load else 0.0
        return Timings(
            total_ns=max(1, int((now - job.arrived) * 1e9)),
            load_ns=max(1, int(load * 1e9)),
            prompt_ns=max(1, int((prefilled - admitted - load) * 1e9)),
            eval_ns=max(1, int((now - prefilled) * 1e9)),
            prompt_tokens=job.prompt_tokens,
            eval_tokens=job.plan.count,
        )


def _prompt_text(request: FakeRequest) -> str:
    """The conversation as one text, for the simulated prefix cache."""
    return "".join(f"<{m.get('role')}>{m.get('content')}" for m in request.messages or [])


class _Aborted(Exception):
    """The connection was dropped on purpose; there is no response to send."""


def _reset(request: web.Request) -> None:
    """Close the connection with a TCP reset, before any response."""
    transport = request.transport
    if transport is None:
        return
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.close()


def _garbage_body(render: Renderer, fault: FaultKind) -> web.Response:
    """A 200 whose whole body is not the API's."""
    content_type = "text/html" if fault == "html" else render.content_type
    return web.Response(body=render.garbage(fault, False), content_type=content_type)


async def announce_fake(request: web.Request, response: web.StreamResponse) -> None:
    """Every response says it came from crawdad's fake (one header the real servers never send),
    so that a run against `crawdad fake-server` is marked simulated."""
    response.headers[FAKE_HEADER] = "1"


async def _cut_body(request: web.Request, body: bytes, content_type: str) -> web.StreamResponse:
    """Send headers promising `body` and only part of it, then close the connection."""
    response = web.StreamResponse(headers={"Content-Type": content_type})
    response.content_length = len(body)
    await response.prepare(request)
    await response.write(body[: len(body) // 2])
    assert request.transport is not None
    request.transport.close()
    return response
