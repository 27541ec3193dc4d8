"""The servers' ceiling: crawdad's own first prompts for the selected items, P requests always
in flight, no debate structure; or, for the same-work ceiling, the very requests a crawdad phase
sent (`replay_targets`: its prompts with their history, streaming, max_tokens and structured
output as they were), replayed in the order they were sent at as many in flight.

Each agent's first-turn request for each item is sent as crawdad sends it (the same prompt,
sampling settings, seed, output budget and, on Ollama, context window), but not streamed: the
load generator must cost as little CPU as it can, so that what it measures is the servers. Once
every item has been sent, the items go round again with other seeds. P workers each send their
next request the moment their last one is answered, until the window closes; the requests then
in flight are drained (so that their tokens are known) and counted for the share of their life
inside the window (`meter.py`).

Every prompt the load generator sends opens with a tag of its phase (and round): servers keep
the prompts they have processed (vLLM's prefix caching, llama.cpp's prompt cache, SGLang's
radix tree) and would otherwise serve a replayed request, or an item's second round, from what
an earlier phase left, where crawdad's own requests found nothing. Requests of one tag still
share their prefixes with each other, as a debate's turns do (`unseen`). The tag costs a few
prompt tokens.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import resource
import secrets
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from crawdad.backends import ChatRequest, ModelPool, make_backend
from crawdad.bench.meter import LoadResult, RequestLog, meter_pools, work_window
from crawdad.config import RunConfig
from crawdad.errors import BackendError
from crawdad.prompts import load_prompts
from crawdad.protocols.base import Participant, request_seed
from crawdad.tasks import task_named


def cpu_seconds() -> float:
    """CPU time of this process so far (user and system)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


@dataclass(frozen=True)
class Target:
    """One request the load generator sends: an agent's first turn on one item."""

    pool: ModelPool
    request: ChatRequest
    item_id: int | str


def load_pools(config: RunConfig) -> list[ModelPool]:
    """One pool per model and set of servers of the agents, with no cap on requests in flight
    (the load generator decides how many are in flight)."""
    pools: dict[tuple[str, str, tuple[str, ...]], ModelPool] = {}
    for agent in config.agents:
        key = (agent.backend, agent.model, tuple(agent.base_urls))
        if key not in pools:
            spec = agent.model_copy(update={"max_in_flight": None})
            pools[key] = ModelPool(spec, functools.partial(make_backend, spec), config.retry)
    return list(pools.values())


def load_targets(config: RunConfig, items: Sequence[Any], pools: list[ModelPool]) -> list[Target]:
    """Every agent's first request for every item, in item order, not streamed."""
    task = task_named(config.task)
    template = load_prompts(config.prompt_source)["initial"]
    by_key = {(p.spec.backend, p.spec.model, tuple(p.spec.base_urls)): p for p in pools}
    targets = []
    for item in items:
        prompt = template.fill(question=task.show(item))
        seed = request_seed(config.seed, item.question_id, 0)
        for agent in config.agents:
            pool = by_key[(agent.backend, agent.model, tuple(agent.base_urls))]
            request = Participant(agent, pool).request(prompt, seed=seed)
            targets.append(
                Target(pool, request.model_copy(update={"stream": False}), item.question_id)
            )
    return targets


def replay_targets(
    recorded: Sequence[tuple[ModelPool, ChatRequest]], config: RunConfig
) -> tuple[list[Target], list[ModelPool]]:
    """A crawdad phase's requests (`RequestLog.requests`) as targets, each on a fresh pool for
    its model and servers with no cap on requests in flight (the phase's pools are closed by
    then, and capped); and those pools, to close."""
    pools: dict[tuple[str, str, tuple[str, ...]], ModelPool] = {}
    targets = []
    for i, (old, request) in enumerate(recorded):
        spec = old.spec
        key = (spec.backend, spec.model, tuple(spec.base_urls))
        if key not in pools:
            free = spec.model_copy(update={"max_in_flight": None})
            pools[key] = ModelPool(free, functools.partial(make_backend, free), config.retry)
        targets.append(Target(pools[key], request, i))
    return targets, list(pools.values())


def unseen(request: ChatRequest, tag: str) -> ChatRequest:
    """The request with its prompt opened by `tag`, which no server has seen before (module
    docstring): nothing of it is served from an earlier phase's cached prompts."""
    head = f"[{tag}]\n"
    update: dict[str, Any] = {"prompt": head + request.prompt}
    if request.messages:  # a conversation with tools: the prompt's user message first
        first, *rest = request.messages
        update["messages"] = [{**first, "content": head + str(first.get("content") or "")}, *rest]
    return request.model_copy(update=update)


def rounds(targets: list[Target], seed: int, salt: str = "") -> Iterator[Target]:
    """The targets over and over, each round's prompts tagged anew (`unseen`: `salt`.round);
    each round after the first with new seeds."""
    for n in itertools.count():
        for t in targets:
            request = t.request
            if n:
                request = request.model_copy(
                    update={"seed": request_seed(seed, t.item_id, 0, sample=n)}
                )
            yield Target(t.pool, unseen(request, f"{salt}.{n}"), t.item_id)


Tick = Callable[[float, RequestLog], None]


async def generate_load(
    targets: list[Target],
    parallel: int,
    seconds: float,
    *,
    seed: int = 0,
    drain: float = 60.0,
    tick: Tick | None = None,
    once: bool = False,
    salt: str | None = None,
) -> LoadResult:
    """Keep `parallel` requests in flight for `seconds`, then drain them (at most `drain`
    seconds). `tick(elapsed, log)` is called about twice a second (the progress bar). Once
    every target is sent, they go round again with new seeds; with `once`, each is sent once
    (within `seconds`) and the window is the first request's start to the last one's end.
    Each prompt opens with this phase's tag (`salt`, else a random one; `unseen`)."""
    log = RequestLog()
    meter_pools({id(t.pool): t.pool for t in targets}.values(), log)
    salt = salt or secrets.token_hex(4)
    if once:
        source: Iterator[Target] = (
            Target(t.pool, unseen(t.request, salt), t.item_id) for t in targets
        )
    else:
        source = rounds(targets, seed, salt)
    cpu0 = cpu_seconds()
    start = time.monotonic()
    close = start + seconds

    async def worker() -> None:
        while time.monotonic() < close:
            target = next(source, None)
            if target is None:
                return
            with contextlib.suppress(BackendError):  # noted in the log, with the reason
                await target.pool.chat(target.request)

    async def ticker() -> None:
        while True:
            await asyncio.sleep(0.5)
            if tick is not None:
                tick(time.monotonic() - start, log)

    workers = [asyncio.create_task(worker()) for _ in range(parallel)]
    clock = asyncio.create_task(ticker())
    try:
        _, pending = await asyncio.wait(workers, timeout=seconds + drain)
        cut = len(log.running)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
    finally:
        for task in workers:
            task.cancel()
        clock.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await clock
    ends = [s.end for s in log.spans if s.end is not None]
    first = log.first_start or start
    window = (work_window(log.spans) if once else None) or log.window(first, close)
    return LoadResult(
        parallel=parallel,
        window=window,
        sent=log.sent,
        answered=log.answered,
        failed=log.failed,
        tokens=log.tokens,
        prompt_tokens=log.prompt_tokens,
        seconds=(max(ends) if ends else time.monotonic()) - first,
        cpu_seconds=cpu_seconds() - cpu0,
        cut=cut,
        errors=log.errors(),
        longest=log.longest,
    )
