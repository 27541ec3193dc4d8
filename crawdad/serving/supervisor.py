"""The servers crawdad starts itself: start each of a plan's servers as a child in its own
process group, wait for its health with a bound, keep it alive (a server that exits or stops
answering is restarted, within `serving.max_restarts` per `serving.restart_window`), and stop
every one of them (the whole process group: an engine's own workers too).

The run talks to it through `urls()` and a `Listener` (told when a server goes down, comes
back, or is given up); `watch()` is the task that keeps them alive while the run goes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
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
from crawdad.serving.causes import failure_text, log_tail
from crawdad.serving.processes import (
    check_installed,
    forget,
    health_url,
    port_free,
    spawn,
    stop_group,
)
from crawdad.serving.served_by import started_record

STOP_GRACE = 10.0  # seconds a server has to exit after SIGTERM before its group is SIGKILLed
START_POLL = 0.25  # seconds between health checks while a server loads

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
    proc: subprocess.Popen[bytes] | None = None
    state: State = "stopped"
    since: float = 0.0  # when the state began (monotonic)
    failing_since: float | None = None  # its health checks have failed since then
    restarts: deque[float] = field(default_factory=deque)  # when, within the window
    restart_count: int = 0
    downtime: float = 0.0
    started_at: datetime | None = None


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
    ) -> None:
        """`outlive`: the servers may outlive crawdad (`--keep-servers`: `detach` at the end);
        otherwise each dies with crawdad, even a SIGKILLed crawdad (setpriv --pdeathsig)."""
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

    def restart_counts(self) -> dict[str, tuple[int, float]]:
        """Server key -> (restarts, seconds down) in this session."""
        return {k: (m.restart_count, m.downtime) for k, m in self.servers.items()}

    # --- start ----------------------------------------------------------------------------------

    async def start(self) -> None:
        """Start every server and wait until each answers its health check; on a failure every
        server is stopped again and the error names the cause and shows the log's end."""
        check_installed(self.plan)
        taken = [s for s in self.plan.servers if not port_free(s.host, s.port)]
        if taken:
            raise ServerStartError(
                "port taken: "
                + ", ".join(f"{s.key} needs {s.host}:{s.port}" for s in taken)
                + ", and another program listens there. Stop it, or set serving.first_port "
                "to a free range (no server was started)"
            )
        self._client = httpx.AsyncClient(trust_env=False)
        try:
            for m in self.servers.values():
                self._spawn(m)
            await self._wait_all(list(self.servers.values()))
            await self._pull_tags()
            assert self._client is not None
            self._records = [
                await started_record(m.plan, self.plan.gpus, self._client, m.started_at)
                for m in self.servers.values()
            ]
            self._write_status()
        except BaseException:
            await self.stop()
            raise

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
            fd = folder.open_fd(self._log_name(m), os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            stamp = datetime.now(UTC).isoformat(timespec="seconds")
            os.write(fd, f"--- crawdad {stamp}: {' '.join(server.command)}\n".encode())
            m.proc = spawn(server, fd, dies_with_us=not self.outlive)
        except OSError as e:
            raise ServerStartError(f"server {server.key}: {server.command[0]}: {e}") from None
        finally:
            os.close(fd)
        m.state, m.since = "starting", time.monotonic()
        m.started_at = datetime.now(UTC)

    async def _healthy(self, m: Managed, within: float) -> bool:
        assert self._client is not None
        try:
            r = await self._client.get(m.health, timeout=within)
        except httpx.HTTPError:
            return False
        return r.status_code == 200

    async def _wait_up(self, m: Managed, bar: tqdm[Any] | None = None) -> str | None:
        """Wait until `m` answers its health check: None, or why it will not."""
        deadline = time.monotonic() + self.serving.startup_timeout
        while True:
            assert m.proc is not None
            if (code := m.proc.poll()) is not None:
                return f"exited with code {code} while starting"
            if await self._healthy(m, min(5.0, self.serving.startup_timeout)):
                now = time.monotonic()
                m.state, m.since, m.failing_since = "up", now, None
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
            unit="server",
            disable=not self.progress,
            leave=False,
        ) as bar:
            tasks = {asyncio.create_task(self._wait_up(m, bar)): m for m in servers}
            failed: list[str] = []
            try:
                pending = set(tasks)
                while pending and not failed:
                    done, pending = await asyncio.wait(pending, return_when="FIRST_COMPLETED")
                    failed += [self._failure(tasks[t], why) for t in done if (why := t.result())]
            finally:
                for task in tasks:
                    task.cancel()
        if failed:
            raise ServerStartError("\n\n".join(failed))

    def _failure(self, m: Managed, what: str) -> str:
        tail = log_tail(self.folder, self._log_name(m))
        return failure_text(m.plan.key, what, tail, self.folder / self._log_name(m))

    # --- keep alive -----------------------------------------------------------------------------

    @property
    def every(self) -> float:
        """Seconds between health checks: often enough to see a freeze within a quarter of
        serving.freeze_timeout (at most each second)."""
        return min(1.0, self.serving.freeze_timeout / 4)

    async def watch(self) -> None:
        """Until cancelled: restart each server that exits or stops answering."""
        await asyncio.gather(*(self._keep(m) for m in self.servers.values()))

    async def _keep(self, m: Managed) -> None:
        m.failing_since = None  # a freeze is counted from the first check that fails
        while True:
            await asyncio.sleep(self.every)
            if m.state != "up":
                continue  # stopped, or given up
            if reason := await self._check(m):
                m.state, m.since = "restarting", time.monotonic()
                await self._restart_or_give_up(m, reason)
                m.failing_since = None

    async def _check(self, m: Managed) -> str | None:
        """Why `m` is down, or None while it serves. A server is frozen when its health checks
        have failed for `serving.freeze_timeout` seconds while it sent nothing on any request of
        the run (a busy llama-cpp-python answers its health only between generations)."""
        assert m.proc is not None
        within = min(30.0, self.serving.freeze_timeout / 2)
        asked = time.monotonic()
        probe = asyncio.create_task(self._healthy(m, within))
        try:
            while not probe.done():  # an exit is seen at once, not after the probe's timeout
                await asyncio.wait({probe}, timeout=self.every)
                if (code := m.proc.poll()) is not None:
                    return f"exited with code {code}"
        finally:
            probe.cancel()
        now = time.monotonic()
        if probe.result():
            m.failing_since = None
            return None
        if m.failing_since is None:
            m.failing_since = asked
        silent = now - m.failing_since
        answering = getattr(self.listener, "answering", None)
        if silent >= self.serving.freeze_timeout and not (
            answering is not None and answering(m.plan, self.serving.freeze_timeout)
        ):
            return f"no health answer for {silent:.0f} s (frozen)"
        return None

    async def _restart_or_give_up(self, m: Managed, reason: str) -> None:
        """A restart that fails in crawdad itself (a full disk for the log) gives the server up:
        the run must never wait for a server that nobody is bringing back."""
        try:
            await self._restart(m, reason)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            m.state, m.since = "failed", time.monotonic()
            if self.listener is not None:
                self.listener.gave_up(
                    f"server {m.plan.key} {reason}, and restarting it failed: "
                    f"{type(e).__name__}: {e}.\n{self.give_up_hint}"
                )

    async def _restart(self, m: Managed, reason: str) -> None:
        down_at, at = time.monotonic(), datetime.now(UTC)
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
            why = await self._wait_up(m)
            if why is None:
                break
            reason, tail = why, log_tail(self.folder, self._log_name(m))
            await self._stop_one(m, STOP_GRACE)
        m.downtime += time.monotonic() - down_at
        self._append(m, reason, at, time.monotonic() - down_at, tail, back=True)
        self._write_status()
        self.say(f"server {m.plan.key} is back after {time.monotonic() - down_at:.0f} s")
        if self.listener is not None:
            self.listener.server_up(m.plan)

    def _give_up(
        self, m: Managed, reason: str, at: datetime, down_at: float, tail: list[str]
    ) -> None:
        m.state, m.since = "failed", time.monotonic()
        m.downtime += time.monotonic() - down_at
        self._append(m, reason, at, time.monotonic() - down_at, tail, back=False)
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
        from crawdad.serving.causes import likely_cause

        cause = likely_cause("\n".join(tail))
        line = ServerRestart(
            key=m.plan.key,
            at=at,
            reason=reason,
            cause=cause[0] if cause else None,
            downtime=round(down, 3),
            back=back,
        )
        with Folder(self.root, *self.parts) as folder, folder.open_append("restarts.jsonl") as f:
            f.write(line.model_dump_json().encode() + b"\n")

    def _write_status(self) -> None:
        """`status.json`: each server's state, for the live view (view/live.py)."""
        import json

        now, wall = time.monotonic(), time.time()
        status = {
            key: {
                "state": m.state,
                "since": wall - (now - m.since),
                "restarts": m.restart_count,
                "downtime": round(m.downtime, 3),
                "url": m.plan.base_url,
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

    async def stop(self) -> None:
        """Stop every server (shielded: a Ctrl-C while stopping still stops them all)."""
        await asyncio.shield(self._stop_all())

    async def _stop_all(self) -> None:
        await asyncio.gather(*(self._stop_one(m) for m in self.servers.values()))
        self._write_status()
        if self._client is not None:
            await self._client.aclose()
            self._client = None
