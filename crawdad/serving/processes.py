"""The processes of the servers crawdad starts: each engine's program found (or named with its
install line), ports checked, each server started under a keeper of its own
(crawdad/serving/keeper.py: a child subreaper that stops every process of the server when
crawdad ends, however it ends, and caps the server's log), and whole trees stopped (SIGTERM,
then SIGKILL after a bounded wait).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import errno
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping

from crawdad.errors import ConfigError
from crawdad.serving.base import Engine, Plan, ServerPlan
from crawdad.serving.keeper import KILL_BOUND, LOG_HEAD, LOG_TAIL, alive


def engine_of(server: ServerPlan) -> Engine | None:
    """The engine module's object for this server, running its command's program."""
    from crawdad.serving.engines import engine

    try:
        return engine(server.engine, server.command[0])
    except ValueError:
        return None


def health_url(server: ServerPlan) -> str:
    engine = engine_of(server)
    path = engine.health_path() if engine is not None else "/health"
    return f"http://{server.host}:{server.port}{path}"


def check_installed(plan: Plan) -> None:
    """Every server's program is there, before anything starts; a missing one is named with the
    line that installs it."""
    missing = []
    for server in plan.servers:
        program = server.command[0]
        engine = engine_of(server)
        if engine is not None:
            there = engine.installed()  # a Python must also have the engine's package
        else:
            there = shutil.which(program) is not None or (
                os.path.isfile(program) and os.access(program, os.X_OK)
            )
        if not there:
            hint = engine.install_hint() if engine is not None else f"install {server.engine}"
            missing.append(f"{server.key}: {program!r} ({server.engine}) is not installed: {hint}")
    if missing:
        raise ConfigError(
            "the plan's engines are not all installed, so no server was started:\n  "
            + "\n  ".join(missing)
            + "\n(or set the model's serve.executable to where the program is)"
        )


def port_free(host: str, port: int) -> bool:
    """Nothing listens on host:port (a socket left in TIME_WAIT does not count)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as e:
            if e.errno in (errno.EADDRINUSE, errno.EACCES):
                return False
            raise
    return True


def _kill_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


ORPHAN_GRACE = 5.0  # seconds a server has after SIGTERM once crawdad is gone (then SIGKILL)
REPLY_TIMEOUT = 60.0  # seconds for a keeper to say that its server started


class Started:
    """A server started under its keeper (crawdad/serving/keeper.py). `pid` is the server's
    own process and process group; `poll` is the keeper's exit, which comes once every process
    of the server is gone, with the server's own exit status."""

    def __init__(self, keeper: subprocess.Popen[bytes], pid: int, control: int, mark: str):
        self.keeper, self.pid, self.control, self.mark = keeper, pid, control, mark
        self.start: int | None = None  # the server's start time (/proc), to tell its pid apart

    def poll(self) -> int | None:
        return self.keeper.poll()

    def tell(self, line: str) -> bool:
        """Send the keeper a command; False when it is gone (or no longer listens)."""
        if self.control < 0:
            return False
        try:
            os.write(self.control, line.encode() + b"\n")
        except OSError:
            return False
        return True

    def close(self) -> None:
        """Close crawdad's end of the control pipe: a keeper that does not outlive crawdad then
        stops its server, as when crawdad dies."""
        if self.control >= 0:
            with contextlib.suppress(OSError):
                os.close(self.control)
            self.control = -1


_LIVE: dict[int, Started] = {}  # every server started and not yet stopped, by keeper pid


@atexit.register
def _close_leftovers() -> None:
    """The last guard: an interpreter that exits with servers still running has their keepers
    stop them (they would see the pipe close at its exit anyway)."""
    for started in list(_LIVE.values()):
        started.close()


def _reply(proc: subprocess.Popen[bytes], timeout: float) -> str:
    """The keeper's one reply line ("" when it exited without one, or said nothing in time)."""
    assert proc.stdout is not None
    fd, data = proc.stdout.fileno(), b""
    deadline = time.monotonic() + timeout
    while not data.endswith(b"\n") and (left := deadline - time.monotonic()) > 0:
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            break
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        data += chunk
    return data.decode("utf-8", "replace").strip()


def spawn(
    server: ServerPlan,
    log_fd: int,
    dies_with_us: bool = True,
    *,
    env: Mapping[str, str] | None = None,
    grace: float = ORPHAN_GRACE,
    log_cap: tuple[int, int] = (LOG_HEAD, LOG_TAIL),
) -> Started:
    """Start `server.command` under a keeper of its own, in a new session (its own process
    group), its output written by the keeper to `log_fd` (opened for reading and writing, not
    appending) within `log_cap` (bytes kept from the start, newest bytes kept). `env` is added
    to the server's environment after `server.env`. `dies_with_us`: the keeper stops the server
    when crawdad exits, however it ends; otherwise the server outlives crawdad (its keeper is
    recorded as kept, and a later crawdad leaves it alone)."""
    from crawdad.serving import keeper

    control_r, control = os.pipe()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-I", keeper.__file__],
            stdin=control_r,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=(log_fd,),
            start_new_session=True,  # Ctrl-C in crawdad's terminal reaches crawdad alone
            close_fds=True,
        )
    except BaseException:
        os.close(control)
        raise
    finally:
        os.close(control_r)
    registry = keeper.registry_dir()
    spec = {
        "key": server.key,
        "command": list(server.command),
        "env": {**server.env, **(env or {})},
        "scratch_env": list(engine.scratch_env) if (engine := engine_of(server)) else [],
        "log_fd": log_fd,
        "log": f"{server.key}.log",
        "log_head": log_cap[0],
        "log_tail": log_cap[1],
        "grace": grace,
        "outlive": not dies_with_us,
        "owner_pid": os.getpid(),
        "owner_start": keeper.start_time(os.getpid()),
        "registry": str(registry) if registry is not None else None,
    }
    started = Started(proc, 0, control, "")
    try:
        started.tell(json.dumps(spec))
        reply = _reply(proc, REPLY_TIMEOUT)
        word, _, rest = reply.partition(" ")
        if word != "started":
            raise OSError(rest or _keeper_failure(proc))
        pid, _, mark = rest.partition(" ")
        started.pid, started.mark = int(pid), mark
        started.start = keeper.start_time(started.pid)
    except BaseException:
        started.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(REPLY_TIMEOUT)
        raise
    finally:
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
    _LIVE[proc.pid] = started
    return started


def _keeper_failure(proc: subprocess.Popen[bytes]) -> str:
    try:
        code = proc.wait(5.0)
    except subprocess.TimeoutExpired:
        proc.kill()
        return f"its keeper did not answer within {REPLY_TIMEOUT:.0f} s"
    assert proc.stderr is not None
    said = proc.stderr.read(4096).decode("utf-8", "replace").strip().splitlines()
    return f"its keeper exited with code {code}" + (f": {said[-1]}" if said else "")


def forget(proc: Started) -> None:
    """Leave this server running when crawdad exits (`--keep-servers`): its keeper is told to
    outlive crawdad, and recorded so."""
    proc.tell("detach")
    proc.close()
    _LIVE.pop(proc.keeper.pid, None)


async def stop_group(proc: Started, grace: float) -> None:
    """Stop every process of the server: SIGTERM (and SIGCONT), SIGKILL after `grace` seconds
    (at once for 0), by its keeper, which exits once none is left. A keeper that does not (it
    was itself killed) is killed, and the server's process group with it."""
    if proc.poll() is None:
        proc.tell(f"stop {grace}")
    with contextlib.suppress(subprocess.TimeoutExpired):
        await asyncio.to_thread(proc.keeper.wait, grace + KILL_BOUND + 5.0)
    if proc.keeper.poll() is None:
        proc.keeper.kill()
    if proc.start is not None and alive(proc.pid, proc.start):
        _kill_group(proc.pid, signal.SIGKILL)  # the floor, where the keeper could not do it
    with contextlib.suppress(subprocess.TimeoutExpired):
        await asyncio.to_thread(proc.keeper.wait, 5.0)
    proc.close()
    _LIVE.pop(proc.keeper.pid, None)
