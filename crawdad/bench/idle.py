"""Before each phase of a bench, and before it ends: wait until the servers have nothing running
or waiting, by their own metrics.

A phase is cut at the end of its window. A cut stream is aborted by the server when crawdad
closes it (vLLM, llama.cpp), but a request that is not streamed goes on generating there
(llama.cpp): the next phase would be measured on a server still busy with the last one. So each
phase waits first, at most `bound` seconds, reading each server's `/metrics` (or llama.cpp's
`/slots`) through `crawdad.backends.server_metrics`. A server that serves no such figures
(Ollama, llama-cpp-python) cannot say when it is idle: the wait is then the longest request the
last phase saw (by then any request cut in it has ended), within the same bound.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from crawdad.backends.server_metrics import MetricsReader, NoMetrics, Reading
from crawdad.config import RunConfig

POLL_SECONDS = 0.1
READ_TIMEOUT = 2.0


@dataclass
class Idle:
    """What a wait for idle servers found."""

    waited: float = 0.0  # seconds
    idle: bool = True  # every server with metrics said nothing runs or waits (False: bound hit)
    # url -> {"running": n, "waiting": n} at the end of the wait, of the servers that say
    servers: dict[str, dict[str, float]] = field(default_factory=dict)
    blind: list[str] = field(default_factory=list)  # servers with no metrics: waited by time


def servers_of(config: RunConfig) -> dict[str, str]:
    """Each server of the config's agents once: base URL -> backend."""
    found: dict[str, str] = {}
    for agent in config.agents:
        for url in agent.base_urls:
            found.setdefault(url, agent.backend)
    return found


def _busy(reading: Reading) -> dict[str, float]:
    out = {"running": float(reading.running or 0)}
    if reading.waiting is not None:
        out["waiting"] = float(reading.waiting)
    return out


async def read_load(
    readers: dict[str, MetricsReader],
) -> tuple[dict[str, dict[str, float] | None], set[str]]:
    """(url -> running and waiting now, None where this reading failed; the servers that tell
    no running count: no metrics at all, or Ollama's /api/ps)."""
    urls = list(readers)
    readings = await asyncio.gather(*(readers[u].read() for u in urls))
    load: dict[str, dict[str, float] | None] = {}
    blind: set[str] = set()
    for url, reading in zip(urls, readings, strict=True):
        load[url] = None
        if isinstance(reading, NoMetrics) or (
            isinstance(reading, Reading) and reading.running is None
        ):
            blind.add(url)
        elif isinstance(reading, Reading):
            load[url] = _busy(reading)
    return load, blind


def _idle(load: dict[str, float] | None) -> bool:
    return load is not None and load["running"] == 0 and load.get("waiting", 0) == 0


async def wait_for_idle(
    config: RunConfig,
    bound: float,
    longest: float = 0.0,
    tick: Callable[[float, dict[str, dict[str, float] | None]], None] | None = None,
) -> Idle:
    """Wait until every server with metrics has nothing running or waiting, and servers without
    them `longest` seconds, at most `bound` seconds in all. `tick(elapsed, load)` is called
    after each reading (the progress line)."""
    import aiohttp

    from crawdad.backends.transport import connector

    start = time.monotonic()
    async with aiohttp.ClientSession(connector=connector()) as session:
        readers = {
            url: MetricsReader(url, backend, session, READ_TIMEOUT)
            for url, backend in servers_of(config).items()
        }
        load, blind = await read_load(readers)
        while True:
            now = time.monotonic()
            idle = all(_idle(x) for u, x in load.items() if u not in blind)
            if idle and (not blind or now - start >= min(bound, longest)):
                break
            if now - start >= bound:
                break
            if tick is not None:
                tick(now - start, load)
            await asyncio.sleep(POLL_SECONDS)
            load, blind = await read_load(readers)
    return Idle(
        waited=time.monotonic() - start,
        idle=all(_idle(x) for u, x in load.items() if u not in blind),
        servers={u: x for u, x in load.items() if x is not None},
        blind=sorted(blind),
    )
