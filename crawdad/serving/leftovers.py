"""Servers left by a crawdad that is gone: found in the registry its keepers write
(crawdad/serving/keeper.py), stopped (every process of the server, SIGTERM then SIGKILL) at the
next start of a server on the machine, and named.

A keeper stops its server by itself when crawdad dies; what is left here is what a keeper could
not stop (it was killed too, by the OOM killer or a `kill -9` of the whole group), or a server
still being stopped when the next crawdad starts. A server kept on purpose (`--keep-servers`)
is left alone, and so is a server of a crawdad that still runs.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import stat
import tempfile
import time
from pathlib import Path
from typing import Any

from crawdad.serving.keeper import (
    SCRATCH_PREFIX,
    alive,
    boot_id,
    marked,
    read_entries,
    registry_dir,
    signal_all,
)

GRACE = 5.0  # seconds a left server has after SIGTERM
KEEPER_WAIT = 15.0  # seconds for a keeper still stopping its server to be done


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _processes(entry: dict[str, Any]) -> list[int]:
    """The live processes of the entry's server: those carrying its mark, and its own process
    while it is the one that started then."""
    found = set(marked(entry["mark"])) if isinstance(entry.get("mark"), str) else set()
    pid = _int(entry.get("server_pid"))
    if pid is not None and _int(entry.get("server_start")) and alive(pid, entry["server_start"]):
        found.add(pid)
    found.discard(os.getpid())
    return sorted(found)


def _wait_gone(pids: list[int], seconds: float) -> list[int]:
    deadline = time.monotonic() + seconds
    pause = 0.01
    while True:
        left = [p for p in pids if alive(p, None)]
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(pause)  # other processes' exits: nothing to wait on but /proc
        pause = min(pause * 2, 0.2)


def _stop(pids: list[int]) -> list[int]:
    """SIGTERM (and SIGCONT), SIGKILL after GRACE: the processes that could not be stopped."""
    signal_all(pids, signal.SIGTERM)
    signal_all(pids, signal.SIGCONT)
    left = _wait_gone(pids, GRACE)
    signal_all(left, signal.SIGKILL)
    return _wait_gone(left, 5.0)


def _describe(entry: dict[str, Any]) -> str:
    started = entry.get("started_at")
    when = f", started {started}" if isinstance(started, str) else ""
    return f"crawdad pid {entry.get('owner_pid')} (server {entry.get('key')}{when})"


def _clean(folder: Path, name: str, entry: dict[str, Any]) -> str | None:
    """Stop what one entry's gone crawdad left; the sentence saying so, or None (nothing)."""
    keeper = _int(entry.get("keeper_pid"))
    keeper_alive = keeper is not None and alive(keeper, entry.get("keeper_start"))
    stale_boot = entry.get("boot_id") not in (None, "", boot_id())
    if stale_boot:  # written before the machine restarted: nothing of it runs
        _remove(folder, name, entry)
        return None
    if entry.get("kept"):
        if not keeper_alive and not _processes(entry):
            _remove(folder, name, entry)
        return None
    owner = _int(entry.get("owner_pid"))
    if owner is not None and alive(owner, entry.get("owner_start")):
        return None  # a crawdad that runs: its own
    if keeper_alive and keeper is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(keeper, signal.SIGTERM)  # it stops its server (it may be doing so already)
        if not _wait_gone([keeper], KEEPER_WAIT):
            entry = _reread(folder, name) or entry
    pids = _processes(entry)
    by_keeper = _int(entry.get("stopped_by_keeper"))
    if not pids:
        _remove(folder, name, entry)
        if by_keeper is None:
            return None
        return (
            f"{by_keeper} process(es) left by {_describe(entry)} were stopped by its keeper "
            "when that crawdad ended"
        )
    left = _stop(pids)
    if keeper is not None and alive(keeper, entry.get("keeper_start")):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(keeper, signal.SIGKILL)  # a keeper that did not do its job in time
    if not left:
        _remove(folder, name, entry)
    stopped = len(pids) - len(left)
    text = f"stopped {stopped} process(es) left by {_describe(entry)}"
    if left:
        text += f"; could not stop pid(s) {', '.join(map(str, left))}: stop them yourself"
    return text


def _reread(folder: Path, name: str) -> dict[str, Any] | None:
    return next((e for n, e in read_entries(folder) if n == name), None)


def _remove(folder: Path, name: str, entry: dict[str, Any]) -> None:
    """Forget an entry whose server has no process left, with the temporary folder its keeper
    did not live to remove."""
    _drop_scratch(entry.get("scratch"))
    with contextlib.suppress(OSError):
        os.unlink(folder / name)


def _drop_scratch(path: Any) -> None:
    """Remove a server's temporary folder, only where it is one a keeper makes: a folder of ours
    named crawdad-server-* right in the temporary folder (an entry is a file, not a promise)."""
    if not isinstance(path, str):
        return
    folder = Path(path)
    if folder.parent != Path(tempfile.gettempdir()) or not folder.name.startswith(SCRATCH_PREFIX):
        return
    with contextlib.suppress(OSError):
        st = folder.lstat()
        if stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid():
            shutil.rmtree(folder)


def clean_leftovers() -> list[str]:
    """Stop the servers whose crawdad is gone; one sentence per server cleaned up."""
    folder = registry_dir()
    if folder is None:
        return []
    out = []
    for name, entry in read_entries(folder):
        if (said := _clean(folder, name, entry)) is not None:
            out.append(said)
    return out
