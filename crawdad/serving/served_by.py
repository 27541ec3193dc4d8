"""What served a run, for the manifest: each started server's record (`StartedServer`) with the
engine's version and the weights' hash, read once the server answers."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import datetime

import httpx

from crawdad.errors import CrawdadError
from crawdad.records import StartedServer
from crawdad.serving import bounded
from crawdad.serving.base import GPU, ServerPlan
from crawdad.serving.processes import engine_of
from crawdad.serving.weights import Progress, weights_hash

_MAX_VERSION_ANSWER = 65_536  # bytes of a /version answer (real: under 100)


async def server_version(server: ServerPlan, client: httpx.AsyncClient) -> str | None:
    """The running server's own word on its version (vLLM's and SGLang's /version, Ollama's
    /api/version), else the engine module's (its package, or `--version`)."""
    path = "/api/version" if server.engine == "ollama" else "/version"
    with contextlib.suppress(httpx.HTTPError, CrawdadError, TimeoutError):
        said = await _answered_version(client, f"http://{server.host}:{server.port}{path}")
        if said:
            return said
    engine = engine_of(server)
    with contextlib.suppress(Exception):  # a version is nice to have, never a failure
        if engine is not None and (said := await asyncio.to_thread(engine.version)):
            return str(said)
    return None


async def _answered_version(client: httpx.AsyncClient, url: str) -> str | None:
    """The "version" of the server's JSON answer, read within bounds (bytes, time, depth; no
    redirect followed) and kept short and printable."""
    async with (
        asyncio.timeout(bounded.ANSWER_SECONDS),
        client.stream(
            "GET", url, timeout=5, follow_redirects=False, headers={"Accept-Encoding": "identity"}
        ) as r,
    ):
        if r.status_code != 200:
            return None
        data = bytearray()
        async for chunk in r.aiter_raw():
            data += chunk
            if len(data) > _MAX_VERSION_ANSWER:
                return None
    answer = bounded.loads(bytes(data), url, max_depth=16)
    return bounded.text(answer.get("version")) if isinstance(answer, dict) else None


async def started_record(
    server: ServerPlan,
    gpus: list[GPU],
    client: httpx.AsyncClient,
    started_at: datetime | None,
    hashing: Progress | None = None,
) -> StartedServer:
    """The manifest's entry for one server that answers (a large GGUF is hashed in a thread,
    once: the hash is cached by path, size and mtime; `hashing` is told of its progress)."""
    names = {g.index: g.name for g in gpus}
    return StartedServer(
        key=server.key,
        engine=server.engine,
        engine_version=await server_version(server, client),
        command=list(server.command),
        weights=server.weights,
        weights_hash=await asyncio.to_thread(weights_hash, server.engine, server.weights, hashing),
        served_name=server.served_name,
        models=list(server.models),
        base_url=server.base_url,
        gpus=[f"{i}: {names.get(i, '?')}" for i in server.gpus],
        memory_fraction=server.memory_fraction,
        memory_gib=server.memory_gib,
        tensor_parallel=server.tensor_parallel,
        context_length=server.context_length,
        reasoning_parser=server.reasoning_parser,
        started_at=started_at,
    )
