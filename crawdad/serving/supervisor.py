"""The servers crawdad starts itself: start each of a plan's servers as a child in its own
process group, wait for its health with a bound, keep it alive (a server that exits or stops
answering is restarted, within `serving.max_restarts` per `serving.restart_window`), and stop
every one of them (the whole process group: an engine's own workers too).

The run talks to it through `urls()` and a `Listener` (told when a server goes down, comes
back, or is given up); `watch()` is the task that keeps them alive while the run goes.

Ownership: the plan's ports are reserved first (`ports.reserve`: a port another crawdad holds,
or that something listens on, is moved to a free one, and the note says so); each start gets a
fresh secret as its API key (`secret_of`); a health answer counts only once `_prove` has shown
that the server answering is the one started (`ownership.prove`: the key, the socket).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, Protocol

import httpx
from tqdm.auto import tqdm

from crawdad.config import ServingConfig
from crawdad.errors import CrawdadError
from crawdad.records import ServerRestart, StartedServer
from crawdad.safe_files import Folder
from crawdad.serving.base import Plan, ServerPlan
from crawdad.serving.causes import failure_text, last_line, log_tail
from crawdad.serving.ownership import new_secret, prove, tree_pids, who_listens
from crawdad.serving.ports import PortTaken, Reservation, reserve, with_port
from crawdad.serving.processes import (
    Started,
    check_installed,
    engine_of,
    forget,
    health_url,
    spawn,
    stop_group,
)
from crawdad.serving.served_by import started_record
from crawdad.serving.waits import STILL_EVERY, BytesProgress

STOP_GRACE = 10.0  # seconds a server has to exit after SIGTERM before its group is SIGKILLed
START_POLL = 0.25  # seconds between health checks while a server loads
PROBE_MAX = 30.0  # seconds a health check of a running server may take (a late answer counts)
TICK = 1.0  # seconds between refreshes of the start bar's elapsed time and log lines
PROVE_WAIT = 30.0  # seconds a healthy server has to answer the ownership proof's requests
KEYS_FILE = "keys.json"  # the servers' keys for a later run (`crawdad serve`, --keep-servers)

# What a run's user reads after a server was given up (`crawdad serve` says its own).
RESUME_HINT = "Finished debates are kept: fix the cause, then run the same command again to resume."

State = Literal["starting", "up", "restarting", "failed", "stopped"]


class ServerStartError(CrawdadError):
    """A server did not come up: its log's end and the likely cause are in the message."""


class Listener(Protocol):
    """What the run is told (run/served.py connects it to the request pools)."""

    def server_down(self, server: ServerPlan, reason: str) -> None: ...

    def server_up(self, server: ServerPlan) -> None: ...

    def gave_up(self, message: str) -> None: ...


@dataclass
class Managed:
    """One server of the plan and its process."""

    plan: ServerPlan
    health: str
    proc: Started | None = None  # its keeper, and the server's pid
    state: State = "stopped"
    since: float = 0.0  # when the state began (monotonic)
    restarts: deque[float] = field(default_factory=deque)  # when, within the window
    restart_count: int = 0
    downtime: float = 0.0
    started_at: datetime | None = None
    alive_at: float = 0.0  # its last health answer (monotonic)
    probe: asyncio.Task[None] | None = None  # the health check in flight, if any
    silent_since: float = 0.0  # of the restart going on: its last sign of life (monotonic)
    silent_for: float = 0.0  # and for how long it had been silent when it was seen down
    secret: str | None = None  # this start's API key (None: the engine takes none)
    proven_by: list[str] = field(default_factory=list)  # how it was shown to be ours
    answered: int | None = None  # the status of its last health answer


class Supervisor:
    """Starts, watches, restarts and stops the servers of `plan`. The logs go into `folder`
    (`<key>.log`, `restarts.jsonl`, `status.json`), or into its `sub` folder (a run folder's
    `servers/`, entered without following a link)."""

    def __init__(
        self,
        plan: Plan,
        serving: ServingConfig,
        folder: Path,
        *,
        sub: str | None = None,
        listener: Listener | None = None,
        progress: bool = True,
        say: Callable[[str], None] = tqdm.write,
        outlive: bool = False,
        give_up_hint: str = RESUME_HINT,
        share_keys: bool = False,
    ) -> None:
        """`outlive`: the servers may outlive crawdad (`--keep-servers`: `detach` at the end);
        otherwise every process of each dies with crawdad, even a SIGKILLed crawdad (its
        keeper stops them: crawdad/serving/keeper.py). `share_keys` (and `outlive`): the
        servers' keys are written to `keys.json` in the folder (mode 0600) for later runs
        (`serving.keys_file`)."""
        self.plan = plan
        self.serving = serving
        self.root = Path(folder)
        self.parts = (sub,) if sub else ()
        self.folder = self.root.joinpath(*self.parts)
        self.listener = listener
        self.progress = progress
        self.say = say
        self.outlive = outlive
        self.give_up_hint = give_up_hint  # the last line of a given-up server's message
        self.servers = {s.key: Managed(s, health_url(s)) for s in plan.servers}
        self._client: httpx.AsyncClient | None = None
        self._records: list[StartedServer] = []
        # a bar on a terminal (elapsed time, each server's last log line); else a line every
        # `still_every` seconds while servers start
        self.terminal = progress and bool(getattr(sys.stderr, "isatty", lambda: False)())
        self.still_every = STILL_EVERY
        self._held: list[Reservation] = []  # the ports reserved for this plan's servers
        self.share_keys = share_keys or outlive

    # --- what the run asks --------------------------------------------------------------------

    def urls(self) -> dict[str, list[str]]:
        """Each config place ("agents.0", "extractor", ...) -> its servers' base URLs."""
        return self.plan.urls()

    def records(self) -> list[StartedServer]:
        """What served the run, for the manifest (known once `start` has returned)."""
        return list(self._records)

    def note(self) -> str:
        """The progress line's word on servers that are not up: "restarting: KEY (12 s)"."""
        now = time.monotonic()
        return "; ".join(
            f"{m.state}: {key} ({now - m.since:.0f} s)"
            for key, m in self.servers.items()
            if m.state in ("restarting", "failed")
        )

    def secret_of(self, server: ServerPlan) -> str | None:
        """The API key of the server's current start (None: none, or not started). Held in
        memory: never written to a manifest, a log or a command line crawdad records."""
        m = self.servers.get(server.key)
        return m.secret if m is not None else None

    def keys(self) -> dict[str, str]:
        """Each started server's base URL -> its current key."""
        return {m.plan.base_url: m.secret for m in self.servers.values() if m.secret}

    def restart_counts(self) -> dict[str, tuple[int, float]]:
        """Server key -> (restarts, seconds down) in this session."""
        return {k: (m.restart_count, m.downtime) for k, m in self.servers.items()}

    # --- start ----------------------------------------------------------------------------------

    async def start(self) -> None:
        """Start every server and wait until each answers its health check; on a failure every
        server is stopped again and the error names the cause and shows the log's end."""
        check_installed(self.plan)
        from crawdad.serving.leftovers import clean_leftovers

        for line in await asyncio.to_thread(clean_leftovers):
            self.say(line)
        self._reserve()
        self._client = httpx.AsyncClient(trust_env=False)
        try:
            for m in self.servers.values():
                self._spawn(m)
            await self._wait_all(list(self.servers.values()))
            await self._pull_tags()
            assert self._client is not None
            self._records = [
                (await self._started_record(m)).model_copy(update=self._answered(m))
                for m in self.servers.values()
            ]
            self._write_status()
            self._write_keys()
        except BaseException:
            await self.stop()
            raise

    async def _started_record(self, m: Managed) -> StartedServer:
        """Its manifest entry; a weights file hashed for it shows its progress."""
        assert self._client is not None
        hashing = BytesProgress(
            f"hashing {m.plan.key}'s weights for the manifest",
            terminal=self.terminal,
            say=self.say,
            every=self.still_every,
        )
        try:
            return await started_record(m.plan, self.plan.gpus, self._client, m.started_at, hashing)
        finally:
            hashing.close()

    def _reserve(self) -> None:
        """Hold every planned port (`ports.reserve`); a taken one moves to a free port, the plan
        (its command lines and URLs) follows, and the note says why."""
        planned = {s.port for s in self.plan.servers}
        servers, notes = [], []
        try:
            for s in self.plan.servers:
                held = reserve(
                    s.host, s.port, avoid=planned - {s.port}, move=self.serving.replan_ports
                )
                self._held.append(held)
                planned.add(held.port)
                if held.why is not None:
                    notes.append(
                        f"server {s.key}: port {held.wanted} is taken ({held.why}): it serves "
                        f"on port {held.port} instead"
                    )
                servers.append(with_port(s, held.port))
        except BaseException as e:
            self._release()
            if isinstance(e, PortTaken):
                raise ServerStartError(f"{e} (no server was started)") from None
            raise
        if notes:
            self.plan = self.plan.model_copy(
                update={"servers": servers, "notes": [*self.plan.notes, *notes]}
            )
            self.servers = {s.key: Managed(s, health_url(s)) for s in servers}
            for line in notes:
                self.say(line)

    def _release(self) -> None:
        for held in self._held:
            held.release()
        self._held = []

    def _answered(self, m: Managed) -> dict[str, Any]:
        """The manifest's word on the server that answered: its process, port, proof."""
        pid = m.proc.pid if m.proc is not None else None
        return {"pid": pid, "port": m.plan.port, "proven_by": list(m.proven_by)}

    def _write_keys(self) -> None:
        """`keys.json` (0600): each server's URL and key, for a later run (`crawdad serve`,
        `--keep-servers`) to read through `serving.keys_file`."""
        if self.share_keys:
            from crawdad.serving.ownership import write_keys

            with Folder(self.root, *self.parts) as folder:
                write_keys(folder, KEYS_FILE, self.keys())

    @property
    def keys_path(self) -> Path | None:
        """Where `keys.json` is written (None: not written)."""
        return self.folder / KEYS_FILE if self.share_keys else None

    async def _pull_tags(self) -> None:
        """Ollama servers get their tags pulled now, with progress, not at the first request."""
        from crawdad.serving.ollama_pull import PullError, pull_missing

        for m in self.servers.values():
            if m.plan.engine == "ollama":
                try:
                    await pull_missing(m.plan, self.progress)
                except PullError as e:
                    raise ServerStartError(str(e)) from None

    def _log_name(self, m: Managed) -> str:
        return f"{m.plan.key}.log"

    def _spawn(self, m: Managed) -> None:
        server = m.plan
        with Folder(self.root, *self.parts) as folder:
            fd = folder.open_fd(self._log_name(m), os.O_RDWR | os.O_CREAT)  # the keeper caps it
        try:
            stamp = datetime.now(UTC).isoformat(timespec="seconds")
            os.lseek(fd, 0, os.SEEK_END)
            os.write(fd, f"--- crawdad {stamp}: {' '.join(server.command)}\n".encode())
            m.proc = spawn(self._keyed(m), fd, dies_with_us=not self.outlive)
        except OSError as e:
            raise ServerStartError(f"server {server.key}: {server.command[0]}: {e}") from None
        finally:
            os.close(fd)
        m.state, m.since = "starting", time.monotonic()
        m.started_at = datetime.now(UTC)

    def _keyed(self, m: Managed) -> ServerPlan:
        """The server to spawn: with a fresh secret as its API key, in the environment where
        the engine reads one (else on its command line); the plan itself never holds it."""
        m.secret, m.proven_by = None, []
        engine = engine_of(m.plan)
        if engine is None:
            return m.plan
        secret = new_secret()
        env, args = engine.api_key(secret)
        if not (env or args):
            return m.plan
        m.secret = secret
        return m.plan.model_copy(
            update={"env": {**m.plan.env, **env}, "command": [*m.plan.command, *args]}
        )

    async def _healthy(self, m: Managed, within: float) -> bool:
        assert self._client is not None
        # llama-cpp-python's health is /v1/models, behind the key
        headers = (
            {"Authorization": f"Bearer {m.secret}"} if m.secret and "/v1/" in m.health else None
        )
        try:
            r = await self._client.get(m.health, timeout=within, headers=headers)
        except httpx.HTTPError:
            m.answered = None
            return False
        m.answered = r.status_code
        return r.status_code == 200

    async def _prove(self, m: Managed) -> str | None:
        """None once the server answering at `m`'s port is shown to be the one crawdad started
        (`m.proven_by` says how); else why it is not (its start fails)."""
        assert m.proc is not None and self._client is not None
        engine = engine_of(m.plan)
        key_path = engine.key_path() if engine is not None and m.secret else None
        deadline = time.monotonic() + PROVE_WAIT
        while True:
            pids = await asyncio.to_thread(tree_pids, m.proc.pid)
            found = await prove(m.plan, m.secret, key_path, pids, self._client)
            if found.refused is not None:
                return f"answered, but is not the server crawdad started: {found.refused}"
            if found.undecided is None:
                m.proven_by = found.by
                return None
            if time.monotonic() >= deadline or m.proc.poll() is not None:
                return f"answered its health check, but could not be proven ours: {found.undecided}"
            await asyncio.sleep(START_POLL)

    def _port_note(self, m: Managed) -> str:
        """What holds the server's port, where something else does (a start that failed)."""
        found = who_listens(m.plan.host, m.plan.port)
        return f" ({m.plan.host}:{m.plan.port} is held by {found})" if found else ""

    async def _wait_up(self, m: Managed, bar: tqdm[Any] | None = None) -> str | None:
        """Wait until `m` answers its health check: None, or why it will not."""
        deadline = time.monotonic() + self.serving.startup_timeout
        while True:
            assert m.proc is not None
            if (code := m.proc.poll()) is not None:
                return f"exited with code {code} while starting" + self._port_note(m)
            within = max(0.1, min(5.0, deadline - time.monotonic()))
            healthy = await self._healthy(m, within)
            if healthy or m.answered in (401, 403):  # an answer: is it our server's?
                if (refused := await self._prove(m)) is not None:
                    return refused
                now = time.monotonic()
                m.state, m.since, m.alive_at = "up", now, now
                if bar is not None:
                    bar.update(1)
                return None
            if time.monotonic() >= deadline:
                return (
                    f"did not answer {m.health} within serving.startup_timeout "
                    f"({self.serving.startup_timeout:.0f} s)"
                )
            await asyncio.sleep(START_POLL)

    async def _wait_all(self, servers: list[Managed]) -> None:
        """Wait for every server; the first that fails ends the wait (the others are stopped
        by the caller), with every failure seen by then."""
        names = ", ".join(m.plan.key for m in servers)
        with tqdm(
            total=len(servers),
            desc=f"starting {names}",
            bar_format="{desc}: {n_fmt}/{total_fmt} up{postfix}",  # a rate would mean nothing
            disable=not self.terminal,
            leave=False,
        ) as bar:
            tasks = {asyncio.create_task(self._wait_up(m, bar)): m for m in servers}
            shown = asyncio.create_task(self._show_wait(servers, bar, "starting"))
            failed: list[str] = []
            try:
                pending = set(tasks)
                while pending and not failed:
                    done, pending = await asyncio.wait(pending, return_when="FIRST_COMPLETED")
                    failed += [self._failure(tasks[t], why) for t in done if (why := t.result())]
            finally:
                shown.cancel()
                for task in tasks:
                    task.cancel()
        if failed:
            raise ServerStartError("\n\n".join(failed))

    def _last_log_line(self, m: Managed) -> str:
        """Its log's last line; "" while the server has written nothing (only crawdad's own
        line with its command)."""
        line = last_line(self.folder, self._log_name(m))
        return "" if line.startswith("--- crawdad ") else line

    async def _show_wait(self, servers: list[Managed], bar: tqdm[Any] | None, verb: str) -> None:
        """Until cancelled, what the servers that are not up yet are doing: on a terminal the
        bar's time waited and each one's last log line (vLLM's "Loading weights"), refreshed
        every second; otherwise (or with no bar: a restart) a line every `still_every` seconds."""
        began = said = time.monotonic()
        drawn = self.terminal and bar is not None and not bar.disable
        while True:
            due = said + self.still_every - time.monotonic()  # the next line: never late
            await asyncio.sleep(TICK if drawn else max(0.05, min(TICK, due)))
            now = time.monotonic()
            waiting = [m for m in servers if m.state in ("starting", "restarting")]
            if drawn and bar is not None:
                lines = "; ".join(
                    f"{m.plan.key}: {self._last_log_line(m)[:60] or '(no log line yet)'}"
                    for m in waiting
                )
                bar.set_postfix_str(f"{now - began:.0f} s" + (f"; {lines}" if lines else ""))
            elif now - said >= self.still_every:
                said = now
                for m in waiting:
                    line = self._last_log_line(m) or "(none yet)"
                    self.say(
                        f"still {verb} {m.plan.key}: {now - m.since:.0f} s, last log line: {line}"
                    )

    def _failure(self, m: Managed, what: str) -> str:
        tail = log_tail(self.folder, self._log_name(m))
        return failure_text(m.plan.key, what, tail, self.folder / self._log_name(m))

    # --- keep alive -----------------------------------------------------------------------------

    @property
    def every(self) -> float:
        """Seconds between checks of a running server (serving.check_interval)."""
        return self.serving.check_interval

    @property
    def probe_timeout(self) -> float:
        """How long a health check may take: an answer within it is a sign of life; none is
        not yet a freeze (a busy server answers late, its tokens show that it works)."""
        return min(PROBE_MAX, self.serving.freeze_timeout)

    async def watch(self) -> None:
        """Until cancelled: restart each server that exits or freezes."""
        await asyncio.gather(*(self._keep(m) for m in self.servers.values()))

    async def _keep(self, m: Managed) -> None:
        try:
            while True:
                await asyncio.sleep(self.every)
                if m.state != "up":
                    continue  # stopped, or given up
                if reason := self._check(m, time.monotonic()):
                    self._cancel_probe(m)
                    await self._restart_or_give_up(m, reason, self._last_sign(m))
        finally:
            self._cancel_probe(m)

    def _check(self, m: Managed, now: float) -> str | None:
        """Why `m` is down, or None while it serves. It has exited; or it is frozen: neither a
        health answer nor a chunk or answer of any request of the run for
        `serving.freeze_timeout` seconds (a busy llama-cpp-python answers its health late, but
        its tokens keep coming). The health check runs beside this one, bounded, so that a check
        that hangs never delays the decision: a freeze is acted on within freeze_timeout plus
        one check interval of the last sign of life."""
        assert m.proc is not None
        if (code := m.proc.poll()) is not None:
            return f"exited with code {code}"
        if m.probe is None or m.probe.done():
            m.probe = asyncio.create_task(self._probe(m))
        silent = now - self._last_sign(m)
        if silent >= self.serving.freeze_timeout:
            return f"frozen: no health answer and no tokens for {silent:.0f} s"
        return None

    async def _probe(self, m: Managed) -> None:
        with contextlib.suppress(RuntimeError):  # the client closed: crawdad is stopping
            if await self._healthy(m, self.probe_timeout):
                m.alive_at = max(m.alive_at, time.monotonic())

    def _cancel_probe(self, m: Managed) -> None:
        if m.probe is not None:
            m.probe.cancel()
            m.probe = None

    def _last_sign(self, m: Managed) -> float:
        """When `m` last showed that it lives (monotonic): its last health answer, or the last
        chunk or answer a request of the run got from it (the listener's `last_progress`)."""
        progress = getattr(self.listener, "last_progress", None)
        tokens = float(progress(m.plan)) if progress is not None else 0.0
        return max(m.alive_at, tokens)

    async def _restart_or_give_up(
        self, m: Managed, reason: str, since: float | None = None
    ) -> None:
        """A restart that fails in crawdad itself (a full disk for the log) gives the server up:
        the run must never wait for a server that nobody is bringing back."""
        try:
            await self._restart(m, reason, since)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            m.state, m.since = "failed", time.monotonic()
            if self.listener is not None:
                self.listener.gave_up(
                    f"server {m.plan.key} {reason}, and restarting it failed: "
                    f"{type(e).__name__}: {e}.\n{self.give_up_hint}"
                )

    async def _restart(self, m: Managed, reason: str, since: float | None = None) -> None:
        """Stop `m` and start it again (within the bound of restarts). Its downtime counts from
        `since`, its last sign of life (now, if not known), to its health answer again."""
        down_at, at = time.monotonic(), datetime.now(UTC)
        m.silent_since = down_at if since is None else min(since, down_at)
        m.silent_for = down_at - m.silent_since
        m.state, m.since = "restarting", down_at
        self._write_status()
        self.say(f"server {m.plan.key} {reason}: restarting it")
        if self.listener is not None:
            self.listener.server_down(m.plan, reason)
        tail = log_tail(self.folder, self._log_name(m))
        await self._stop_one(m, grace=0.0 if "frozen" in reason else STOP_GRACE)
        while True:
            window = self.serving.restart_window
            while m.restarts and down_at - m.restarts[0] > window:
                m.restarts.popleft()
            if len(m.restarts) >= self.serving.max_restarts:
                return self._give_up(m, reason, at, down_at, tail)
            m.restarts.append(time.monotonic())
            m.restart_count += 1
            self._spawn(m)
            m.state = "restarting"  # _spawn says "starting"; the run sees a restart
            shown = asyncio.create_task(self._show_wait([m], None, "restarting"))
            try:
                why = await self._wait_up(m)
            finally:
                shown.cancel()
            if why is None:
                break
            reason, tail = why, log_tail(self.folder, self._log_name(m))
            await self._stop_one(m, STOP_GRACE)
        down = time.monotonic() - m.silent_since
        m.downtime += down
        self._append(m, reason, at, down, tail, back=True)
        self._write_status()
        self._write_keys()
        self.say(f"server {m.plan.key} is back after {down:.0f} s")
        if self.listener is not None:
            self.listener.server_up(m.plan)

    def _give_up(
        self, m: Managed, reason: str, at: datetime, down_at: float, tail: list[str]
    ) -> None:
        m.state, m.since = "failed", time.monotonic()
        down = time.monotonic() - min(m.silent_since or down_at, down_at)
        m.downtime += down
        self._append(m, reason, at, down, tail, back=False)
        self._write_status()
        window = self.serving.restart_window
        what = (
            f"{reason}, after {len(m.restarts)} restart(s) within {window:.0f} s "
            f"(serving.max_restarts = {self.serving.max_restarts}): not restarted again"
        )
        message = (
            failure_text(m.plan.key, what, tail, self.folder / self._log_name(m))
            + f"\n{self.give_up_hint}"
        )
        if self.listener is not None:
            self.listener.gave_up(message)
        else:
            self.say(message)

    def _append(
        self, m: Managed, reason: str, at: datetime, down: float, tail: list[str], back: bool
    ) -> None:
        """`down`: seconds from its last sign of life (`silent_since`) to back, or to now."""
        from crawdad.serving.causes import likely_cause

        cause = likely_cause("\n".join(tail))
        line = ServerRestart(
            key=m.plan.key,
            at=at,
            reason=reason,
            cause=cause[0] if cause else None,
            downtime=round(down, 3),
            silent_for=round(min(down, m.silent_for), 3),
            back=back,
        )
        with Folder(self.root, *self.parts) as folder, folder.open_append("restarts.jsonl") as f:
            f.write(line.model_dump_json().encode() + b"\n")

    def _write_status(self) -> None:
        """`status.json`: each server's state, for the live view (view/live.py)."""
        import json

        now, wall = time.monotonic(), time.time()
        from crawdad.serving.keeper import owner_fields

        owner = owner_fields()
        status = {
            key: {
                "state": m.state,
                "since": wall - (now - m.since),
                "restarts": m.restart_count,
                "downtime": round(m.downtime, 3),
                "url": m.plan.base_url,
                **owner,  # a reader tells a crawdad that is gone (view/live.py)
                "kept": self.outlive,
            }
            for key, m in self.servers.items()
        }
        with contextlib.suppress(OSError), Folder(self.root, *self.parts) as folder:
            folder.write_text("status.json", json.dumps(status, indent=1))

    # --- stop -----------------------------------------------------------------------------------

    async def _stop_one(self, m: Managed, grace: float = STOP_GRACE) -> None:
        """SIGTERM to its process group, SIGKILL after `grace` seconds (or at once)."""
        proc = m.proc
        if proc is None:
            return
        await stop_group(proc, grace)
        m.proc = None
        m.state, m.since = "stopped", time.monotonic()

    def pids(self) -> dict[str, int]:
        """Server key -> the process (and process group) id of each server running."""
        return {k: m.proc.pid for k, m in self.servers.items() if m.proc is not None}

    def detach(self) -> None:
        """Leave the servers running when crawdad exits (they are no longer watched)."""
        for m in self.servers.values():
            if m.proc is not None:
                forget(m.proc)
        self.outlive = True
        self._write_status()

    async def stop(self) -> None:
        """Stop every server (shielded: a Ctrl-C while stopping still stops them all)."""
        await asyncio.shield(self._stop_all())

    async def _stop_all(self) -> None:
        await asyncio.gather(*(self._stop_one(m) for m in self.servers.values()))
        self._release()
        self._write_status()
        if self._client is not None:
            await self._client.aclose()
            self._client = None
