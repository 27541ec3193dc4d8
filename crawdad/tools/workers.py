"""Worker processes that compute tool calls, so that a call is bounded in time whatever it does.

A call's work is sent to a worker process and awaited at most its seconds; past them the worker
is killed, whether it was looping in Python or stuck in C code, and the next call starts a fresh
one. A worker that dies (a segfault, the memory bound, an out-of-memory kill) is an error of
that call only. Workers are forked from multiprocessing's fork server, which has imported the
tools once, so a replacement starts in milliseconds; each worker's address space is bounded
(`memory_mb`), so a call that would take the machine's memory fails with MemoryError instead.

The work is any picklable callable (a module-level function, or a bound method of a picklable
object) with picklable arguments; what it returns comes back, what it raises comes back as
`WorkFailed` with the exception's type and message.
"""

from __future__ import annotations

import asyncio
import atexit
import multiprocessing
import pickle
import threading
import weakref
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

PRELOAD = ["crawdad.tools.registry"]  # imported once by the fork server, inherited by workers


class WorkError(Exception):
    """A call's work did not give a result."""


class WorkTimeout(WorkError):
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        super().__init__(f"did not finish within {seconds:g} s")


class WorkerDied(WorkError):
    def __init__(self, exitcode: int | None) -> None:
        self.exitcode = exitcode
        super().__init__(f"the worker process died (exit code {exitcode})")


class WorkFailed(WorkError):
    """The work raised: its exception's type name and message."""

    def __init__(self, kind: str, message: str) -> None:
        self.kind = kind
        self.message = message
        super().__init__(f"{kind}: {message}" if message else kind)


def _context() -> Any:
    if "forkserver" in multiprocessing.get_all_start_methods():
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(PRELOAD)  # ignored once the fork server runs
        return ctx
    return multiprocessing.get_context("spawn")


def _serve(conn: Connection, memory_mb: int | None) -> None:
    """A worker's life: take (fn, args), answer ("ok", value) or ("raised", type, message)."""
    if memory_mb is not None:
        try:
            import resource

            limit = memory_mb * 2**20
            _, hard = resource.getrlimit(resource.RLIMIT_AS)
            if hard != resource.RLIM_INFINITY:
                limit = min(limit, hard)
            resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
        except (ImportError, ValueError, OSError):
            pass  # no such bound on this system
    conn.send(("ready",))
    while True:
        try:
            fn, args = conn.recv()
        except (EOFError, OSError):
            return
        except BaseException as e:  # the work could not be unpickled here
            conn.send(("raised", type(e).__name__, str(e)[:500]))
            continue
        conn.send(("started",))  # its modules are imported: the call's seconds start now
        try:
            answer: tuple[Any, ...] = ("ok", fn(*args))
        except BaseException as e:
            answer = ("raised", type(e).__name__, str(e)[:500])
        try:
            conn.send(answer)
        except Exception as e:  # the value does not pickle
            conn.send(("raised", type(e).__name__, str(e)[:500]))


STARTUP_SECONDS = 60.0  # for a worker to start and say it is ready (not counted in a call)


class _Worker:
    def __init__(self, ctx: Any, memory_mb: int | None) -> None:
        """Start a worker and wait until it is ready (blocking: call it in a thread)."""
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(
            target=_serve, args=(child, memory_mb), daemon=True, name="crawdad-tool-worker"
        )
        self.process.start()
        child.close()
        try:
            ready = self.conn.poll(STARTUP_SECONDS) and self.conn.recv() == ("ready",)
        except (EOFError, OSError):
            ready = False
        if not ready:
            self.kill()
            raise WorkerDied(self.process.exitcode)

    async def call(self, fn: Callable[..., Any], args: tuple[Any, ...], seconds: float) -> Any:
        try:
            self.conn.send((fn, args))
        except (BrokenPipeError, ConnectionError, EOFError):
            raise self._died() from None
        except (pickle.PicklingError, TypeError, AttributeError) as e:  # nothing was sent
            raise WorkFailed(type(e).__name__, f"the work cannot go to a worker: {e}") from None
        # Loading the work (importing its modules) is not the call's compute: timed apart.
        first = await self._answer(STARTUP_SECONDS)
        if first is None:
            raise WorkTimeout(STARTUP_SECONDS)
        if first[0] != "started":
            raise WorkFailed(first[1], first[2])
        answer = await self._answer(seconds)
        if answer is None:
            raise WorkTimeout(seconds)
        if answer[0] == "ok":
            return answer[1]
        raise WorkFailed(answer[1], answer[2])

    async def _answer(self, seconds: float) -> tuple[Any, ...] | None:
        """The worker's next message, or None when none came within `seconds`."""
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[None] = loop.create_future()
        fd = self.conn.fileno()

        def readable() -> None:
            if not ready.done():
                ready.set_result(None)

        loop.add_reader(fd, readable)
        try:
            await asyncio.wait_for(ready, seconds)
        except TimeoutError:
            return None
        finally:
            loop.remove_reader(fd)
        try:
            message: tuple[Any, ...] = self.conn.recv()
        except (EOFError, OSError):
            raise self._died() from None
        return message

    def _died(self) -> WorkerDied:
        self.process.join(1.0)
        return WorkerDied(self.process.exitcode)

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(1.0)
        self.conn.close()


class WorkerPool:
    """At most `size` calls computing at once per event loop; idle workers are kept for the
    next call, a worker whose call timed out, died or was cancelled is killed."""

    def __init__(self, size: int = 2, memory_mb: int | None = None) -> None:
        self.size = size
        self.memory_mb = memory_mb
        self._idle: list[_Worker] = []
        self._lock = threading.Lock()
        self._gates: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
            weakref.WeakKeyDictionary()
        )
        self._ctx: Any = None

    def _gate(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        with self._lock:
            gate = self._gates.get(loop)
            if gate is None:
                gate = self._gates[loop] = asyncio.Semaphore(self.size)
            return gate

    def _take(self) -> _Worker | None:
        with self._lock:
            while self._idle:
                worker = self._idle.pop()
                if worker.process.is_alive():
                    return worker
                worker.kill()
            return None

    def _start(self) -> _Worker:
        with self._lock:
            if self._ctx is None:
                self._ctx = _context()
            ctx = self._ctx
        return _Worker(ctx, self.memory_mb)

    async def run(self, fn: Callable[..., Any], *args: Any, seconds: float) -> Any:
        """fn(*args) in a worker, within `seconds` of compute (waiting for a free worker and
        starting one are not counted). Raises WorkTimeout, WorkerDied or WorkFailed."""
        async with self._gate():
            worker = self._take() or await self._started()
            try:
                value = await worker.call(fn, args, seconds)
            except WorkFailed:
                self._give_back(worker)
                raise
            except BaseException:  # timed out, died, or cancelled mid-call: never reused
                worker.kill()
                raise
            self._give_back(worker)
            return value

    async def _started(self) -> _Worker:
        """A new worker, started in a thread; if the caller is cancelled meanwhile, the
        worker joins the idle ones once it is up."""
        starting = asyncio.ensure_future(asyncio.to_thread(self._start))
        try:
            return await asyncio.shield(starting)
        except asyncio.CancelledError:
            starting.add_done_callback(self._keep)
            raise

    def _keep(self, started: asyncio.Future[_Worker]) -> None:
        if not started.cancelled() and started.exception() is None:
            self._give_back(started.result())

    def _give_back(self, worker: _Worker) -> None:
        with self._lock:
            self._idle.append(worker)

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for worker in idle:
            worker.kill()


_POOLS: dict[tuple[int, int | None], WorkerPool] = {}
_POOLS_LOCK = threading.Lock()


def pool(size: int, memory_mb: int | None) -> WorkerPool:
    """The process's pool of that size and memory bound (made on first use, closed at exit)."""
    with _POOLS_LOCK:
        key = (size, memory_mb)
        if key not in _POOLS:
            _POOLS[key] = WorkerPool(size, memory_mb)
        return _POOLS[key]


@atexit.register
def _close_all() -> None:
    for p in list(_POOLS.values()):
        p.close()
