"""The processes of the servers crawdad starts: each engine's program found (or named with its
install line), ports checked, each server spawned in a process group of its own, and whole
groups stopped (SIGTERM, then SIGKILL after a bounded wait). No server outlives crawdad: an
exit handler kills any group still running, and `setpriv --pdeathsig` (util-linux, where
present) kills a server whose crawdad was itself SIGKILLed.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import errno
import os
import shutil
import signal
import socket
import subprocess

from crawdad.errors import ConfigError
from crawdad.serving.base import Engine, Plan, ServerPlan


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


_LIVE: dict[int, subprocess.Popen[bytes]] = {}  # every group started and not yet stopped


@atexit.register
def _kill_leftovers() -> None:
    """The last guard: an interpreter that exits with servers still running takes them along."""
    for pid in list(_LIVE):
        _kill_group(pid, signal.SIGKILL)


def spawn(server: ServerPlan, log_fd: int, dies_with_us: bool = True) -> subprocess.Popen[bytes]:
    """Start `server.command` in a new session (its own process group), writing to `log_fd`."""
    command = list(server.command)
    if dies_with_us and shutil.which("setpriv"):  # dies with crawdad, even a SIGKILLed one
        command = ["setpriv", "--pdeathsig", "KILL", "--", *command]
    proc = subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        stdout=log_fd,
        stderr=subprocess.STDOUT,
        env={**os.environ, **server.env},
        start_new_session=True,  # its own process group: stopped whole
        close_fds=True,
    )
    _LIVE[proc.pid] = proc
    return proc


def forget(proc: subprocess.Popen[bytes]) -> None:
    """Leave this server running when crawdad exits (`--keep-servers`)."""
    _LIVE.pop(proc.pid, None)


async def stop_group(proc: subprocess.Popen[bytes], grace: float) -> None:
    """SIGTERM to the process group, SIGKILL after `grace` seconds (at once for 0), then reap."""
    if proc.poll() is None and grace > 0:
        _kill_group(proc.pid, signal.SIGTERM)
        _kill_group(proc.pid, signal.SIGCONT)  # a stopped (SIGSTOP) process acts on it too
        with contextlib.suppress(subprocess.TimeoutExpired):
            await asyncio.to_thread(proc.wait, grace)
    _kill_group(proc.pid, signal.SIGKILL)  # the leader, and any worker it left behind
    with contextlib.suppress(subprocess.TimeoutExpired):
        await asyncio.to_thread(proc.wait, 5.0)
    forget(proc)
