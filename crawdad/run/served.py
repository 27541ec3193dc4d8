"""A run whose models crawdad serves itself: the plan, its servers started before the run's
readiness check and stopped after it (also on Ctrl-C and SIGTERM), the run's `base_urls` taken
from the supervisor, and the request pools told when a server is being restarted.

The runner stays a runner: it calls `served_run` around its work and hands the pools to
`PoolListener`; planning lives in `crawdad.serving.plan`, processes in the supervisor.

Each server start has a secret of its own as its API key: the run's clients are told it in
memory (`backends.server_keys`), at the start and after each restart (`PoolListener.server_up`).
Servers kept for later runs (`crawdad serve`, `--keep-servers`) write theirs to `keys.json`
(0600) beside their logs, and a run with `serving.start = false` reads it from
`serving.keys_file`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import signal
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crawdad.config import RunConfig, ServingConfig
from crawdad.errors import CrawdadError

if TYPE_CHECKING:
    from crawdad.backends.pool import ModelPool
    from crawdad.serving.base import Plan, ServerPlan
    from crawdad.serving.supervisor import Supervisor

SERVERS = "servers"  # the run folder's folder of server logs, restarts and states


def places(config: RunConfig) -> dict[str, Any]:
    """Each model of the config by its place: "agents.0", "extractor", "judge", "grader"."""
    out: dict[str, Any] = {f"agents.{i}": a for i, a in enumerate(config.agents)}
    out["extractor"] = config.extractor
    for name in ("judge", "grader"):
        if (spec := getattr(config, name)) is not None:
            out[name] = spec
    return out


def serves_any(config: RunConfig) -> bool:
    """A model of the config has a `serve` table: crawdad starts its server."""
    return any(spec.serve is not None for spec in places(config).values())


def make_plan(config: RunConfig, questions: list[Any] | None = None) -> Plan:
    """The plan of the config's served models (crawdad.serving.plan); its contexts sized for
    the longest of `questions` where they are given."""
    from crawdad.serving.plan import plan_config, question_tokens_of

    tokens = question_tokens_of(config, questions) if questions else None
    return plan_config(config, question_tokens=tokens)


def apply_urls(config: RunConfig, plan: Plan) -> RunConfig:
    """`config` with each served place's `base_urls` (and backend) set to its servers'."""
    from crawdad.serving.plan import apply_plan

    return apply_plan(config, plan)


def overrides(plan: Plan, keys: Path | None = None) -> list[str]:
    """The `--set` options that point a run at the plan's servers (kept running), and at the
    file of their keys."""
    out = ["--set serving.start=false"]
    if keys is not None:
        out.append(f"--set {shlex.quote(f'serving.keys_file={keys.absolute()}')}")
    engines = {place: s.engine for s in plan.servers for place in s.models}
    for place, urls in plan.urls().items():
        listed = ", ".join(f'"{u}"' for u in urls)
        out.append(f"--set '{place}.base_urls=[{listed}]'")
        out.append(f"--set {place}.backend={'ollama' if engines[place] == 'ollama' else 'openai'}")
    return out


def variant_plan(plan: Plan, name: str) -> Plan:
    """The servers of one experiment variant, its places without the "VARIANT:" prefix that
    `plan_configs` gives them."""
    servers = []
    for server in plan.servers:
        mine = [p.split(":", 1)[1] for p in server.models if p.startswith(f"{name}:")]
        if mine:
            servers.append(server.model_copy(update={"models": mine}))
    return plan.model_copy(update={"servers": servers})


@contextlib.asynccontextmanager
async def served_experiment(
    configs: dict[str, RunConfig],
    out: Path,
    *,
    progress: bool = True,
    questions: dict[str, list[Any]] | None = None,
) -> AsyncIterator[tuple[dict[str, RunConfig], Supervisor | None]]:
    """`served_run` for an experiment: one plan for every variant (a model several variants
    serve is served once), each variant pointed at its servers; the logs in DIR/servers. Its
    contexts are sized for the longest of each variant's `questions` where they are given."""
    if not any(serves_any(c) and c.serving.start for c in configs.values()):
        with _keys_file(next(iter(configs.values())).serving):
            yield configs, None
        return
    from crawdad.serving.plan import plan_configs, question_tokens_of
    from crawdad.serving.supervisor import Supervisor

    # variants that share a task and a dataset are measured once
    shown = {
        (c.task, id(questions[name])): (c, questions[name])
        for name, c in configs.items()
        if questions and questions.get(name)
    }
    sizes = [question_tokens_of(c, items) for c, items in shown.values()]
    longest = max((t for t in sizes if t is not None), default=None)
    plan = plan_configs(configs, question_tokens=longest)
    first = next(iter(configs.values()))
    supervisor = Supervisor(
        plan, first.serving, out, sub=SERVERS, listener=PoolListener(), progress=progress
    )
    with _sigterm_as_ctrl_c():
        await supervisor.start()
        plan = supervisor.plan  # its ports as reserved
        try:
            with _told_keys(supervisor):
                yield (
                    {n: apply_urls(c, variant_plan(plan, n)) for n, c in configs.items()},
                    supervisor,
                )
        finally:
            await supervisor.stop()


@contextlib.contextmanager
def _told_keys(supervisor: Supervisor) -> Any:
    """The run's clients hold each server's key (in memory) while the block runs."""
    from crawdad.backends import server_keys

    listener = supervisor.listener
    if isinstance(listener, PoolListener):
        listener.secret = supervisor.secret_of
    keys = supervisor.keys()
    for url, key in keys.items():
        server_keys.remember(url, key)
    try:
        yield
    finally:
        server_keys.forget([s.base_url for s in supervisor.plan.servers])


@contextlib.contextmanager
def _keys_file(serving: ServingConfig) -> Any:
    """With `serving.keys_file` (servers that run already): their keys read while the block
    runs."""
    if serving.keys_file is None:
        yield
        return
    from crawdad.backends import server_keys

    server_keys.use_file(serving.keys_file)
    try:
        yield
    finally:
        server_keys.drop_file(serving.keys_file)


def kept_text(plan: Plan, how: str, keys: Path | None = None) -> str:
    """The servers left running, and the options that point a run at them (and at `keys`,
    the file of their keys)."""
    lines = [f"servers {how}:"]
    lines += [f"  {s.key}: {s.base_url} ({s.engine}, {s.weights})" for s in plan.servers]
    lines.append("point a run at them with:")
    lines += [f"  {line}" for line in overrides(plan, keys)]
    return "\n".join(lines)


async def keep_serving(
    plan: Plan, serving: ServingConfig, logs: Path, progress: bool = True
) -> None:
    """`crawdad serve CONFIG`: start the plan's servers and keep them (restarted when they
    die) until Ctrl-C or SIGTERM, then stop them."""
    from crawdad.serving.supervisor import Supervisor

    listener = _ServeListener()
    supervisor = Supervisor(
        plan,
        serving,
        logs,
        listener=listener,
        progress=progress,
        share_keys=True,
        give_up_hint="crawdad serve stopped every server it started: fix the cause, then start "
        "it again.",
    )
    with _sigterm_as_ctrl_c():
        await supervisor.start()
        try:
            how = f"running (logs in {logs}); Ctrl-C stops them"
            print(kept_text(supervisor.plan, how, supervisor.keys_path), flush=True)
            watch = asyncio.create_task(supervisor.watch())
            given_up = asyncio.create_task(listener.given_up.wait())
            try:
                done, _ = await asyncio.wait({watch, given_up}, return_when="FIRST_COMPLETED")
            finally:
                for task in (watch, given_up):
                    task.cancel()
            if watch in done:
                watch.result()  # the watch's own error, if it failed
        finally:
            await supervisor.stop()
    raise ServeStopped(listener.message)


class ServeStopped(CrawdadError):
    """`crawdad serve` stopped because a server was given up (its restarts spent)."""


class _ServeListener:
    """`crawdad serve`'s: a server given up ends the command (every server stopped, exit 1)."""

    def __init__(self) -> None:
        self.given_up = asyncio.Event()
        self.message = ""

    def server_down(self, server: ServerPlan, reason: str) -> None:
        pass

    def server_up(self, server: ServerPlan) -> None:
        pass

    def gave_up(self, message: str) -> None:
        self.message = message
        self.given_up.set()


class PoolListener:
    """Tells the request pools that a server is being restarted and when it is back, and stops
    the run once a server is given up."""

    def __init__(self) -> None:
        self.pools: list[ModelPool] = []
        self.halt: Callable[[str], None] | None = None
        self.given_up: str | None = None
        # the key of a server's current start (`Supervisor.secret_of`): a restart brings a new one
        self.secret: Callable[[ServerPlan], str | None] | None = None

    def attach(self, pools: list[ModelPool], halt: Callable[[str], None], urls: list[str]) -> None:
        self.pools, self.halt = pools, halt
        for pool in pools:
            for url in urls:
                pool.supervise(url)
        if self.given_up is not None:
            halt(self.given_up)

    def server_down(self, server: ServerPlan, reason: str) -> None:
        for pool in self.pools:
            pool.hold(server.base_url)

    def server_up(self, server: ServerPlan) -> None:
        if self.secret is not None:
            from crawdad.backends import server_keys

            server_keys.remember(server.base_url, self.secret(server))
        for pool in self.pools:
            pool.release(server.base_url)

    def last_progress(self, server: ServerPlan) -> float:
        """When a request of the run there last got a chunk or a whole answer (monotonic; 0.0:
        never): the server works, whatever its health check says (a busy llama-cpp-python
        answers it late)."""
        url = server.base_url.rstrip("/")
        return max(
            (e.last_progress() for pool in self.pools for e in pool.endpoints if e.url == url),
            default=0.0,
        )

    def gave_up(self, message: str) -> None:
        self.given_up = message
        if self.halt is not None:
            self.halt(message)


def _interrupt() -> None:
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        # Started in the background by a shell (`crawdad run ... &`), which has SIGINT ignored:
        # asyncio.run installed no Ctrl-C handler to send it to. Raised from the loop, this
        # stops the run the same way (its tasks are cancelled, the servers stopped).
        raise KeyboardInterrupt
    os.kill(os.getpid(), signal.SIGINT)


@contextlib.contextmanager
def _sigterm_as_ctrl_c() -> Any:
    """SIGTERM stops the run as Ctrl-C does (asyncio.run cancels it, the servers are stopped)."""
    loop = asyncio.get_running_loop()
    try:
        loop.add_signal_handler(signal.SIGTERM, _interrupt)
    except (RuntimeError, ValueError):  # not the main thread (a notebook's loop)
        yield
        return
    try:
        yield
    finally:
        loop.remove_signal_handler(signal.SIGTERM)


@contextlib.asynccontextmanager
async def served_run(
    config: RunConfig,
    out: Path,
    *,
    plan: Plan | None = None,
    progress: bool = True,
    keep: bool = False,
    questions: list[Any] | None = None,
) -> AsyncIterator[tuple[RunConfig, Supervisor | None]]:
    """(the config pointed at the servers, their supervisor); (config, None) when no model of
    the config is served by crawdad. `keep`: the servers outlive the run (`--keep-servers`).
    A plan made here sizes its contexts for the longest of `questions`."""
    if plan is None:
        if not serves_any(config) or not config.serving.start:
            with _keys_file(config.serving):
                yield config, None
            return
        plan = make_plan(config, questions)
    from crawdad.serving.supervisor import Supervisor

    supervisor = Supervisor(
        plan,
        config.serving,
        out,
        sub=SERVERS,
        listener=PoolListener(),
        progress=progress,
        outlive=keep,
    )
    with _sigterm_as_ctrl_c():
        await supervisor.start()
        plan = supervisor.plan  # its ports as reserved
        try:
            with _told_keys(supervisor):
                yield apply_urls(config, plan), supervisor
        finally:
            if keep:
                supervisor.detach()
                from tqdm.auto import tqdm

                groups = " ".join(f"-{pid}" for pid in supervisor.pids().values())
                how = f"kept running (stop them with `kill -- {groups}`)"
                tqdm.write(kept_text(plan, how, supervisor.keys_path))
            else:
                await supervisor.stop()
