"""Ports held from planning to listening, so that two crawdads on one machine never plan the same
one: a registry of lock files, one per port (`$XDG_RUNTIME_DIR/crawdad/ports/PORT.lock`, else
`/tmp/crawdad-UID/ports/`), each held with `flock` by the crawdad that reserved it for as long as
it runs (or until its supervisor stops). The kernel frees the lock of a crawdad that died, however
it died. A port is reserved only when its lock is free *and* nothing listens on it; a planned port
that is taken is moved to the next free one above it, and the reason is said (which crawdad, or
what program, holds it).

    held = reserve("127.0.0.1", 8100, avoid={8101})  # -> Reservation(port=8102, why="...")
    ...
    held.release()

The plan itself stays a pure function (`plan.py`); the supervisor reserves its ports when it
starts and rewrites the servers whose port moved (`with_port`).
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from crawdad.errors import CrawdadError
from crawdad.safe_files import Folder
from crawdad.serving.base import ServerPlan
from crawdad.serving.ownership import who_listens
from crawdad.serving.processes import port_free

LAST_PORT = 65535
MAX_TRIES = 2000  # ports tried above a taken one before giving up


class PortTaken(CrawdadError):
    """A planned port is taken and no other could be reserved (or moving it is not allowed)."""


@dataclass
class Reservation:
    """One port held for this process: `port` (the one to use), `wanted` (the planned one) and
    `why` the planned one was not taken (None: it was)."""

    port: int
    wanted: int
    why: str | None
    handle: IO[bytes] | None

    def release(self) -> None:
        """Free the port for other crawdads (closing the lock file frees its flock)."""
        if self.handle is not None:
            with contextlib.suppress(OSError):
                self.handle.close()
            self.handle = None


def _checked_base(base: Path) -> Path:
    """`base`, made if missing (mode 0700), refused unless it is this user's own folder."""
    with contextlib.suppress(FileExistsError):
        base.mkdir(mode=0o700, parents=False)
    st = os.lstat(base)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o022:
        raise CrawdadError(
            f"{base} (crawdad's registry of the ports it holds) is not a folder of yours that "
            "only you may write: remove it, or set XDG_RUNTIME_DIR to a private folder"
        )
    return base


def registry() -> Path:
    """The folder of the port lock files of this machine's crawdads (of this user)."""
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    if runtime and os.path.isdir(runtime) and os.stat(runtime).st_uid == os.getuid():
        base = _checked_base(Path(runtime) / "crawdad")
    else:
        base = _checked_base(Path(tempfile.gettempdir()) / f"crawdad-{os.getuid()}")
    return base / "ports"


def _lock(folder: Folder, port: int) -> IO[bytes] | None:
    """The lock of `port`, taken (None: another crawdad holds it)."""
    handle = folder.lock(f"{port}.lock", wait=False)
    if handle is not None:
        with contextlib.suppress(OSError):
            os.set_inheritable(handle.fileno(), False)
            handle.truncate(0)
            handle.write(f"crawdad pid {os.getpid()}\n".encode())
    return handle


def _holder(folder: Folder, port: int) -> str:
    """Which crawdad holds the lock of `port`, in words."""
    with contextlib.suppress(OSError, UnicodeDecodeError):
        said = folder.read_text(f"{port}.lock", limit=100).strip()
        if said.startswith("crawdad pid ") and said[12:].isdigit():
            return f"another crawdad (pid {said[12:]}) holds it"
    return "another crawdad holds it"


def taken_by(host: str, port: int) -> str:
    """What listens on host:port, in words (for a port found taken)."""
    found = who_listens(host, port)
    return f"{found} listens there" if found else "another program listens there"


def _try(folder: Folder, host: str, port: int) -> tuple[IO[bytes] | None, str | None]:
    """(the lock, None) when `port` is ours now; (None, why not) otherwise."""
    handle = _lock(folder, port)
    if handle is None:
        return None, _holder(folder, port)
    try:
        free = port_free(host, port)
    except OSError as e:  # an address this machine does not have: the server would fail too
        handle.close()
        raise PortTaken(f"{host}:{port} cannot be listened on here: {e}") from None
    if not free:
        handle.close()
        return None, taken_by(host, port)
    return handle, None


def reserve(
    host: str, wanted: int, *, avoid: Collection[int] = (), move: bool = True
) -> Reservation:
    """Hold `wanted` on `host`; where it is taken (another crawdad's, or something listens) and
    `move`, the next free port above it that is not in `avoid` (the plan's other ports). Raises
    PortTaken, naming what holds the port, when none can be held."""
    try:
        folder = Folder(registry())
    except OSError as e:
        raise PortTaken(
            f"crawdad's registry of the ports it holds cannot be used ({e}): set "
            "XDG_RUNTIME_DIR to a folder of yours"
        ) from None
    with folder:
        handle, why = _try(folder, host, wanted)
        if handle is not None:
            return Reservation(wanted, wanted, None, handle)
        assert why is not None
        if not move:
            raise PortTaken(f"port {wanted} on {host} is taken: {why}")
        port = wanted
        for _ in range(MAX_TRIES):
            port += 1
            if port > LAST_PORT:
                break
            if port in avoid:
                continue
            handle, _ = _try(folder, host, port)
            if handle is not None:
                return Reservation(port, wanted, why, handle)
    raise PortTaken(
        f"port {wanted} on {host} is taken ({why}), and no free port was found above it: set "
        "serving.first_port to a free range"
    )


def with_port(server: ServerPlan, port: int) -> ServerPlan:
    """`server` moved to `port`: the `--port` of its command line (every engine's flag) and the
    environment the engine derives from the port (Ollama's OLLAMA_HOST) follow; what the user
    set in `env` stays."""
    if port == server.port:
        return server
    from crawdad.serving.engines import engine

    old = str(server.port)
    command = [
        str(port) if i > 0 and part == old and server.command[i - 1] == "--port" else part
        for i, part in enumerate(server.command)
    ]
    moved = server.model_copy(update={"port": port})
    env = dict(server.env)
    with contextlib.suppress(ValueError):
        environment = getattr(engine(server.engine, server.executable), "environment", None)
        if environment is not None:
            before, after = environment(server), environment(moved)
            for name, value in after.items():
                if env.get(name) == before.get(name):  # the engine's value, not the user's
                    env[name] = value
    return moved.model_copy(update={"command": command, "env": env})
