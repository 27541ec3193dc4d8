"""`FakeServer`: a fake Ollama or OpenAI-compatible server on a free loopback port.

Use it as a sync context manager (it runs its own event loop in a background thread: CLI demo,
benchmarks, sync tests) or as an async context manager inside a running loop (async tests).
`stop()` then `start()` brings it back on the same port, with its counters and scripts kept.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Mapping
from types import TracebackType
from typing import Any, Literal

from aiohttp import web

from crawdad.fake.behaviour import Behaviour, FakeModel
from crawdad.fake.engine import Engine
from crawdad.fake.faults import FaultPlan
from crawdad.fake.latency import LatencyModel
from crawdad.fake.ollama_app import OllamaSettings, build_ollama_app
from crawdad.fake.openai_app import OpenAISettings, build_openai_app
from crawdad.fake.protocol import CallRecord, ServerStats

Kind = Literal["ollama", "openai"]


class FakeServer:
    """A fake inference server speaking Ollama's or vLLM's wire format over real HTTP.

    `models` maps served model names to behaviours (`ScriptedModel`, `ProfileModel`,
    `FakeExtractor`, or a function `FakeRequest -> FakeReply | str`). Keyword `overrides` set
    fields of the kind's settings (`OllamaSettings` / `OpenAISettings`), e.g.
    `FakeServer("openai", models, reasoning_style="reasoning_content", api_key="k")`.
    """

    def __init__(
        self,
        kind: Kind = "ollama",
        models: Mapping[str, Behaviour] | None = None,
        *,
        latency: LatencyModel | None = None,
        faults: FaultPlan | None = None,
        settings: OllamaSettings | OpenAISettings | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        **overrides: Any,
    ) -> None:
        if kind not in ("ollama", "openai"):
            raise ValueError(f"kind must be 'ollama' or 'openai', not {kind!r}")
        settings_type = OllamaSettings if kind == "ollama" else OpenAISettings
        if settings is not None and not isinstance(settings, settings_type):
            raise TypeError(f"a {kind} server takes {settings_type.__name__}")
        base = settings.model_dump() if settings is not None else {}
        self.kind: Kind = kind
        self.settings = settings_type.model_validate({**base, **overrides})
        # Ollama serves one request per model at a time by default; vLLM batches many.
        latency = latency or LatencyModel(capacity=1 if kind == "ollama" else 256)
        self.engine = Engine(models or {}, latency, faults, self.settings)
        self.host = host
        self._port = port
        self._runner: web.AppRunner | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    # ---- what tests and callers read

    @property
    def port(self) -> int:
        return self._port

    @property
    def root_url(self) -> str:
        return f"http://{self.host}:{self._port}"

    @property
    def url(self) -> str:
        """Base URL for the client: `http://127.0.0.1:N` (Ollama) or `.../v1` (OpenAI)."""
        return self.root_url if self.kind == "ollama" else f"{self.root_url}/v1"

    @property
    def running(self) -> bool:
        return self._runner is not None

    @property
    def stats(self) -> ServerStats:
        return self.engine.stats

    @property
    def latency(self) -> LatencyModel:
        return self.engine.scheduler.model

    @property
    def models(self) -> dict[str, FakeModel]:
        return self.engine.models

    @property
    def requests(self) -> list[dict[str, Any]]:
        """JSON bodies received (the last `max_recorded_requests`), oldest first."""
        return _snapshot(self.engine.requests)

    @property
    def calls(self) -> list[CallRecord]:
        """What each generation request asked for and got, oldest first."""
        return _snapshot(self.engine.calls)

    # ---- in a running event loop

    async def astart(self) -> FakeServer:
        if self.running:
            raise RuntimeError("the fake server is already running")
        await self._start()
        return self

    async def astop(self) -> None:
        if self._thread is not None:
            await asyncio.to_thread(self.stop)
        elif self._runner is not None:
            await self._stop()

    def drop_connections(self) -> None:
        """The client's connections open now fail their next request, as after a restart
        (deterministically: no race with the client noticing them closed)."""
        self.engine.drop_connections()

    async def arestart(self) -> None:
        await self.astop()
        await self.astart()

    async def __aenter__(self) -> FakeServer:
        return await self.astart()

    async def __aexit__(self, *exc: object) -> None:
        await self.astop()

    # ---- in a background thread with its own loop

    def start(self) -> FakeServer:
        if self.running:
            raise RuntimeError("the fake server is already running")
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, name="crawdad-fake-server", daemon=True)
        thread.start()
        try:
            asyncio.run_coroutine_threadsafe(self._start(), loop).result(timeout=30)
        except BaseException:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=5)
            loop.close()
            raise
        self._loop, self._thread = loop, thread
        return self

    def stop(self) -> None:
        """Stop serving; hanging and in-flight requests are cut. The port stays reserved."""
        if self._thread is None:
            if self._runner is not None:
                raise RuntimeError("started with astart(): stop it with `await server.astop()`")
            return
        assert self._loop is not None
        loop, thread = self._loop, self._thread
        try:
            asyncio.run_coroutine_threadsafe(self._stop(), loop).result(timeout=30)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=10)
            loop.close()
            self._loop = self._thread = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def __enter__(self) -> FakeServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # ---- both

    async def _start(self) -> None:
        if self.kind == "ollama":
            assert isinstance(self.settings, OllamaSettings)
            app = build_ollama_app(self.engine, self.settings)
        else:
            assert isinstance(self.settings, OpenAISettings)
            app = build_openai_app(self.engine, self.settings)
        runner = web.AppRunner(
            app, access_log=None, handler_cancellation=True, shutdown_timeout=1.0
        )
        await runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.host, self._port))
        except OSError:
            sock.close()
            await runner.cleanup()
            raise
        self._port = sock.getsockname()[1]
        self.engine.on_start()
        await web.SockSite(runner, sock, backlog=1024).start()
        self._runner = runner

    async def _stop(self) -> None:
        runner, self._runner = self._runner, None
        self.engine.on_stop()
        if runner is not None:
            await runner.cleanup()

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"<FakeServer {self.kind} {self.url} {state} models={list(self.models)}>"


def _snapshot(items: Any) -> list[Any]:
    # The server thread may append while another thread copies: retry the copy.
    for _ in range(100):
        try:
            return list(items)
        except RuntimeError:
            continue
    return list(items)
