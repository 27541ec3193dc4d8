"""The keeper of one server: a small process between crawdad and the server it starts, so that
no process of a server outlives crawdad, however crawdad ends (SIGKILL included), and so that
the server's log stays bounded.

crawdad starts it as `python -I .../crawdad/serving/keeper.py` (stdlib only: it starts fast and
no environment variable meant for the server changes how it runs), in a session of its own:

- stdin: the control pipe. crawdad alone holds its write end. The first line is the spec (JSON:
  `key`, `command`, `env` added to the server's, `scratch_env`, `log_fd`, `grace`, `outlive`,
  `owner_pid`, `owner_start`, `log_head`, `log_tail`, `registry`, `log`); then `stop SECONDS`
  (SIGTERM to every process of the server, SIGKILL after SECONDS) or `detach` (outlive crawdad
  from now on).
  EOF means crawdad is gone, even a SIGKILLed one: the keeper stops the server (after `grace`
  seconds, SIGKILL), unless it outlives crawdad (`outlive`, `--keep-servers`). The parent-death
  signal (SIGTERM) is the backup.
- stdout: one reply line, `started PID MARK` or `failed WHY`.
- exit status: the server's own (a server killed by signal N: the keeper ends by signal N too).

The keeper makes itself a child subreaper (`prctl PR_SET_CHILD_SUBREAPER`): every process the
server starts, including ones in new sessions or that daemonize, stays below the keeper when its
parent exits. Stopping the server stops every descendant (found by walking /proc), reaps them,
and only then exits. When the server's own process exits, what it left behind is stopped too.

The server's stdout and stderr go through a pipe to the keeper, which writes its log (`log_fd`,
opened by crawdad) with a cap: the first `log_head` bytes are kept as written, then the newest
`log_tail` to 2 x `log_tail` bytes, with one line between them saying how much was left out.
A reader thread empties the pipe into memory at once and a writer thread writes the log, so the
server never waits on the disk (past 2 x `log_tail` bytes not yet written, the oldest are
dropped and the log says so).

The variables named in `scratch_env` point the server at a folder of the keeper's own (made in
the system's temporary folder, mode 0700), removed once every process of the server is gone:
what an engine leaves in the temporary folder when its processes are stopped by signal (vLLM's
ZeroMQ sockets, `VLLM_RPC_BASE_PATH`) goes with the server. A keeper killed before it could
remove the folder leaves it to the next crawdad, which finds it in the registry entry.

Each keeper writes a registry entry (`<registry>/<pid>-<start>.json`): crawdad's pid and start
time, its own, the server's, the mark in the server's environment (`CRAWDAD_SERVER_MARK`, which
every process of the server inherits), so that the next crawdad on the machine finds what a
crawdad and its keeper both left (crawdad/serving/leftovers.py). The keeper removes it at exit.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import resource
import secrets
import select
import shutil
import signal
import socket
import tempfile
import threading
import time
from collections import deque
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

MARK_ENV = "CRAWDAD_SERVER_MARK"  # every process of a server carries it: found after a crash
RUNTIME_ENV = "CRAWDAD_RUNTIME_DIR"  # where the registry is (tests; a machine without /run/user)
LOG_HEAD = 1 << 20  # bytes of a server's log kept from its start
LOG_TAIL = 4 << 20  # at least this many of its newest bytes are kept (at most twice as many)
KILL_BOUND = 10.0  # seconds to wait for SIGKILLed processes to be gone
SCRATCH_PREFIX = "crawdad-server-"  # a server's temporary folder, in the system's (`scratch_env`)
PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
ENTRY_LIMIT = 1 << 16  # bytes of one registry entry read


# --- processes, from /proc ----------------------------------------------------------------------


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (state is [0], ppid [1])."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read(4096).decode("ascii", "replace")
    except OSError:
        return None
    return text.rpartition(")")[2].split()


def start_time(pid: int) -> int | None:
    """When `pid` started (clock ticks after boot), to tell it from a later process of its pid."""
    fields = _stat(pid)
    try:
        return int(fields[19]) if fields else None
    except (IndexError, ValueError):
        return None


def alive(pid: int, start: int | None) -> bool:
    """`pid` runs and is the process that started at `start` (None: any), not a zombie."""
    fields = _stat(pid)
    if not fields or fields[0] in ("Z", "X"):
        return False
    return start is None or start_time(pid) == start


def boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read(64).strip()
    except OSError:
        return ""


def _pids() -> list[int]:
    try:
        return [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return []


def descendants(root: int) -> list[int]:
    """Every live process below `root` (zombies left out: they are reaped, not killed)."""
    children: dict[int, list[int]] = {}
    for pid in _pids():
        fields = _stat(pid)
        if fields and len(fields) > 1 and fields[0] not in ("Z", "X"):
            with contextlib.suppress(ValueError):
                children.setdefault(int(fields[1]), []).append(pid)
    out, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def marked(mark: str) -> list[int]:
    """Live processes whose environment carries `CRAWDAD_SERVER_MARK=mark` (this user's alone
    can be read)."""
    needle = f"{MARK_ENV}={mark}".encode()
    out = []
    for pid in _pids():
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read(1 << 20)
        except OSError:
            continue
        if needle in env.split(b"\0") and alive(pid, None):
            out.append(pid)
    return out


def signal_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def owner_fields() -> dict[str, Any]:
    """This crawdad as status.json names it: pid, start time and host, so that a reader tells a
    server whose crawdad is gone from one that runs (`owner_gone`)."""
    pid = os.getpid()
    return {"owner_pid": pid, "owner_start": start_time(pid), "owner_host": socket.gethostname()}


def owner_gone(entry: dict[str, Any]) -> bool:
    """True when a status.json entry's crawdad is known to be gone: written on this host by a
    process that no longer runs (or whose pid another process has now). A server kept on
    purpose (`kept`), an entry of another host or of an older crawdad: not known gone."""
    pid, start = entry.get("owner_pid"), entry.get("owner_start")
    if entry.get("kept") or not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    if entry.get("owner_host") != socket.gethostname():
        return False
    return not alive(pid, start if isinstance(start, int) else None)


# --- the registry of running servers ------------------------------------------------------------


def registry_dir() -> Path | None:
    """This user's folder of running servers: $CRAWDAD_RUNTIME_DIR/servers, else
    $XDG_RUNTIME_DIR/crawdad/servers, else /tmp/crawdad-UID/servers. None when it cannot be
    made, or is not this user's alone (another user could plant entries there)."""
    if root := os.environ.get(RUNTIME_ENV):
        base = Path(root)
    elif (xdg := os.environ.get("XDG_RUNTIME_DIR")) and os.path.isdir(xdg):
        base = Path(xdg) / "crawdad"
    else:
        base = Path("/tmp") / f"crawdad-{os.getuid()}"
    folder = base / "servers"
    try:
        for part in (base, folder):
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, 0o700)
            st = os.lstat(part)
            if not os.path.isdir(part) or os.path.islink(part):
                return None
            if st.st_uid != os.getuid() or st.st_mode & 0o022:
                return None
    except OSError:
        return None
    return folder


def write_entry(folder: Path, name: str, entry: dict[str, Any]) -> None:
    tmp = folder / f".{name}.{secrets.token_hex(4)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(entry, f)
    os.replace(tmp, folder / name)


def read_entries(folder: Path) -> list[tuple[str, dict[str, Any]]]:
    """(file name, entry) of each well-formed entry; others are skipped."""
    out = []
    try:
        names = sorted(n for n in os.listdir(folder) if n.endswith(".json"))
    except OSError:
        return []
    for name in names:
        try:
            fd = os.open(folder / name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            with os.fdopen(fd, "rb") as f:
                if not os.path.isfile(f"/proc/self/fd/{fd}"):
                    continue
                entry = json.loads(f.read(ENTRY_LIMIT))
        except (OSError, ValueError):
            continue
        if isinstance(entry, dict) and isinstance(entry.get("keeper_pid"), int):
            out.append((name, entry))
    return out


# --- the capped log -------------------------------------------------------------------------------


class LogFile:
    """A log written at its end that keeps its first `head` bytes and its newest `tail` to
    2 x `tail` bytes: past head + 2 x tail, the newest tail bytes are moved up to just after
    the head (cut at line ends), behind a line saying how much was left out. The file's end
    is the newest output at every moment, for a reader of its last lines."""

    def __init__(self, fd: int, head: int = LOG_HEAD, tail: int = LOG_TAIL) -> None:
        self.fd, self.head, self.tail = fd, max(0, head), max(4096, tail)
        self.size = os.fstat(fd).st_size
        self.cut: int | None = None  # where the kept head ends
        self.mark = 0  # length of the line after the head (0: none yet)
        self.left_out = 0

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            n = os.pwrite(self.fd, view, self.size)
            self.size += n
            view = view[n:]
        if self.size > self.head + 2 * self.tail + 4096:
            self._compact()

    def _compact(self) -> None:
        if self.cut is None:
            first = os.pread(self.fd, self.head, 0)
            end = first.rfind(b"\n") + 1
            self.cut = end if end > 0 else len(first)
        start = self._line_start(self.size - self.tail)
        self.left_out += start - self.cut - self.mark
        mark = (
            f"\n--- crawdad: {self.left_out} bytes of this log left out here (it keeps its first "
            f"{self.head >> 10} KiB and its newest {self.tail >> 10} KiB) ---\n"
        ).encode()
        at = self.cut + len(mark)
        for offset in range(start, self.size, 1 << 20):  # ascending: never over unread bytes
            chunk = os.pread(self.fd, min(1 << 20, self.size - offset), offset)
            os.pwrite(self.fd, chunk, at + offset - start)
        os.pwrite(self.fd, mark, self.cut)
        self.size = at + self.size - start
        os.ftruncate(self.fd, self.size)
        self.mark = len(mark)

    def _line_start(self, at: int) -> int:
        """The first line start at or after `at` (within 64 KiB; else `at`)."""
        data = os.pread(self.fd, 65536, at - 1)
        end = data.find(b"\n")
        return at - 1 + end + 1 if end >= 0 else at


class LogPump:
    """Empties the server's output pipe at once (a reader thread) and writes it to the log (a
    writer thread); what the disk cannot take in time is dropped, oldest first, and noted."""

    def __init__(self, read_fd: int, log: LogFile, limit: int) -> None:
        self.fd, self.log, self.limit = read_fd, log, limit
        self.chunks: deque[bytes] = deque()
        self.queued = self.dropped = 0
        self.done = False
        self.cond = threading.Condition()
        self.threads = [
            threading.Thread(target=self._read, daemon=True),
            threading.Thread(target=self._write, daemon=True),
        ]
        for t in self.threads:
            t.start()

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self.fd, 1 << 20)
            except InterruptedError:
                continue
            except OSError:
                data = b""
            with self.cond:
                if not data:
                    self.done = True
                else:
                    self.chunks.append(data)
                    self.queued += len(data)
                    while self.queued > self.limit and len(self.chunks) > 1:
                        lost = self.chunks.popleft()
                        self.queued -= len(lost)
                        self.dropped += len(lost)
                self.cond.notify()
            if not data:
                return

    def _write(self) -> None:
        while True:
            with self.cond:
                self.cond.wait_for(lambda: self.chunks or self.done)
                chunks, self.chunks, self.queued = list(self.chunks), deque(), 0
                dropped, self.dropped, done = self.dropped, 0, self.done
            if dropped:
                chunks.insert(0, f"\n--- crawdad: {dropped} bytes dropped here ---\n".encode())
            with contextlib.suppress(OSError):  # a full disk: the output is lost, not waited on
                self.log.write(b"".join(chunks))
            if done and not chunks:
                return

    def join(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for t in self.threads:
            t.join(max(0.0, deadline - time.monotonic()))


# --- the keeper ---------------------------------------------------------------------------------


def _prctl(option: int, value: int) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(option, value, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


class Keeper:
    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.key = str(spec["key"])
        self.grace = float(spec.get("grace", 5.0))
        self.outlive = bool(spec.get("outlive", False))
        self.owner = int(spec["owner_pid"])
        self.control: int | None = 0
        self.pid = 0  # the server's process
        self.status: int | None = None  # its wait status, once reaped
        self.stop_grace: float | None = None  # asked to stop, with this grace
        self.stopped: set[int] = set()  # every process a stop signalled
        self.entry_name = f"{os.getpid()}-{start_time(os.getpid())}.json"
        self.registry: Path | None = Path(spec["registry"]) if spec.get("registry") else None
        self.mark = secrets.token_hex(12)
        self.scratch: str | None = None  # the server's own temporary folder (`scratch_env`)
        self.wake_r, wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.signal(signal.SIGTERM, self._asked_to_stop)
        signal.signal(signal.SIGHUP, self._asked_to_stop)
        signal.signal(signal.SIGINT, signal.SIG_IGN)

    def _asked_to_stop(self, *_: Any) -> None:
        if self.stop_grace is None:
            self.stop_grace = self.grace

    def note(self, text: str) -> None:
        """A line in the server's log (the keeper's stderr is the log pipe)."""
        with contextlib.suppress(OSError):
            os.write(2, f"--- crawdad keeper: {text}\n".encode())

    # start

    def start(self) -> None:
        _prctl(PR_SET_CHILD_SUBREAPER, 1)
        if not self.outlive:
            _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
            if os.getppid() != self.owner:
                raise RuntimeError("crawdad exited before its server started")
        os.set_inheritable(int(self.spec["log_fd"]), False)  # the keeper's alone
        out_r, out_w = os.pipe()
        head, tail = self.spec.get("log_head", LOG_HEAD), self.spec.get("log_tail", LOG_TAIL)
        log = LogFile(int(self.spec["log_fd"]), int(head), int(tail))
        self.pump = LogPump(out_r, log, 2 * log.tail)
        env = {**os.environ, **{str(k): str(v) for k, v in self.spec.get("env", {}).items()}}
        env[MARK_ENV] = self.mark
        if names := [str(n) for n in self.spec.get("scratch_env") or []]:
            self.scratch = tempfile.mkdtemp(prefix=SCRATCH_PREFIX)
            env |= dict.fromkeys(names, self.scratch)
        command = [str(c) for c in self.spec["command"]]
        null = os.open(os.devnull, os.O_RDONLY)
        try:
            self.pid = os.posix_spawnp(
                command[0],
                command,
                env,
                file_actions=[
                    (os.POSIX_SPAWN_DUP2, null, 0),
                    (os.POSIX_SPAWN_DUP2, out_w, 1),
                    (os.POSIX_SPAWN_DUP2, out_w, 2),
                ],
                setsid=True,  # its own session and process group, the floor of a stop
            )
        finally:
            os.close(null)
        os.dup2(out_w, 2)  # the keeper's own notes (and a traceback) go to the log too
        os.close(out_w)
        self._register()

    def _entry(self) -> dict[str, Any]:
        return {
            "version": 1,
            "key": self.key,
            "command": self.spec["command"],
            "log": self.spec.get("log"),
            "host": socket.gethostname(),
            "boot_id": boot_id(),
            "owner_pid": self.owner,
            "owner_start": self.spec.get("owner_start"),
            "keeper_pid": os.getpid(),
            "keeper_start": start_time(os.getpid()),
            "server_pid": self.pid,
            "server_start": start_time(self.pid),
            "mark": self.mark,
            "scratch": self.scratch,
            "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "kept": self.outlive,
        }

    def _register(self) -> None:
        self.entry = getattr(self, "entry", None) or self._entry()
        self.entry["kept"] = self.outlive
        if self.registry is not None:
            try:
                write_entry(self.registry, self.entry_name, self.entry)
            except OSError as e:
                self.note(
                    f"no registry entry ({e}): a crash of crawdad and this keeper together "
                    "would leave this server unnamed"
                )
                self.registry = None

    def _unregister(self) -> None:
        if self.registry is not None:
            with contextlib.suppress(OSError):
                os.unlink(self.registry / self.entry_name)

    # run

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid == self.pid:
                self.status = status

    def _drain_wake(self) -> None:
        with contextlib.suppress(OSError):
            while os.read(self.wake_r, 512):
                pass

    def _command(self) -> None:
        assert self.control is not None
        try:
            data = os.read(self.control, 4096)
        except OSError:
            data = b""
        if not data:  # crawdad is gone (or closed the pipe: the same)
            os.close(self.control)
            self.control = None
            if not self.outlive and self.stop_grace is None:
                self.note(f"crawdad (pid {self.owner}) is gone: stopping the server")
                self.stop_grace = self.grace
            return
        for line in data.decode("utf-8", "replace").splitlines():
            word, _, arg = line.strip().partition(" ")
            if word == "stop" and self.stop_grace is None:
                try:
                    self.stop_grace = max(0.0, float(arg))
                except ValueError:
                    self.stop_grace = self.grace
            elif word == "detach":
                self.outlive = True
                _prctl(PR_SET_PDEATHSIG, 0)
                self._register()

    def run(self) -> None:
        while self.status is None and self.stop_grace is None:
            watch = [self.wake_r] + ([self.control] if self.control is not None else [])
            with contextlib.suppress(InterruptedError):
                ready, _, _ = select.select(watch, [], [])
                if self.wake_r in ready:
                    self._drain_wake()
                if self.control is not None and self.control in ready:
                    self._command()
            self._reap()
        if self.status is not None:
            left = descendants(os.getpid())
            if left:
                code = os.waitstatus_to_exitcode(self.status)
                self.note(
                    f"the server exited ({code}): stopping the {len(left)} process(es) it left"
                )
            self.stop(self.grace)
        else:
            self.stop(self.stop_grace or 0.0)

    def _wait_gone(self, deadline: float, sig: int | None) -> bool:
        """Until no descendant is left (True) or `deadline`; new ones get `sig` too."""
        told: set[int] = set()
        pause = 0.01
        while True:
            self._reap()
            left = descendants(os.getpid())
            if self.status is None and self.pid not in left:
                left.append(self.pid)  # not reaped yet (or no /proc to see it in)
            if not left:
                return True
            self.stopped.update(left)
            if sig is not None and (new := [p for p in left if p not in told]):
                if self.status is None and self.pid in new:  # the floor: its process group
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(self.pid, sig)
                signal_all(new, sig)
                if sig == signal.SIGTERM:
                    signal_all(new, signal.SIGCONT)  # a stopped process acts on it too
                told.update(new)
            now = time.monotonic()
            if now >= deadline:
                return False
            with contextlib.suppress(InterruptedError):
                select.select([self.wake_r], [], [], min(pause, deadline - now))
            self._drain_wake()
            pause = min(pause * 2, 0.25)

    def stop(self, grace: float) -> None:
        """SIGTERM (and SIGCONT) to every process below the keeper, SIGKILL to what is left
        after `grace` seconds (at once for 0), until none is left."""
        if grace > 0 and self._wait_gone(time.monotonic() + grace, signal.SIGTERM):
            return
        if not self._wait_gone(time.monotonic() + KILL_BOUND, signal.SIGKILL):
            self.note(f"processes still there after SIGKILL: {descendants(os.getpid())}")

    def drop_scratch(self) -> None:
        """Remove the server's temporary folder, once no process of it is left to use it."""
        if self.scratch is not None and not descendants(os.getpid()):
            shutil.rmtree(self.scratch, ignore_errors=True)
            self.scratch = None

    def finish(self) -> int:
        self._reap()
        self.drop_scratch()
        if (
            self.registry is not None
            and not self.outlive
            and not alive(self.owner, self.spec.get("owner_start"))
        ):  # crawdad is gone: the next one says what was stopped (crawdad/serving/leftovers.py)
            entry = self.entry | {"stopped_by_keeper": len(self.stopped)}
            with contextlib.suppress(OSError):
                write_entry(self.registry, self.entry_name, entry)
        else:
            self._unregister()
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 2)  # the pump's pipe then ends: no process of the server is left
        os.close(null)
        self.pump.join(10.0)
        return self.status if self.status is not None else 0


def _reply(text: str) -> None:
    with contextlib.suppress(OSError):
        os.write(1, (text + "\n").encode())
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.close(null)


def _read_spec() -> dict[str, Any]:
    data = b""
    while not data.endswith(b"\n"):
        chunk = os.read(0, 1 << 16)
        if not chunk:
            raise RuntimeError("crawdad exited before sending the server's spec")
        data += chunk
        if len(data) > 1 << 24:
            raise RuntimeError("spec too long")
    spec = json.loads(data)
    if not isinstance(spec, dict) or not isinstance(spec.get("command"), list):
        raise RuntimeError("spec without a command")
    return spec


def _end_like(status: int) -> None:
    """Exit as the server did: with its code, or killed by its signal."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        with contextlib.suppress(OSError, ValueError):  # SIGKILL has no handler to reset
            signal.signal(sig, signal.SIG_DFL)
        with contextlib.suppress(OSError, ValueError):
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {sig})
            os.kill(os.getpid(), sig)
        os._exit(128 + sig)
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1)


def main() -> None:
    keeper = None
    try:
        keeper = Keeper(_read_spec())
        keeper.start()
    except Exception as e:
        _reply(f"failed {type(e).__name__}: {e}".replace("\n", " "))
        if keeper is not None:
            if keeper.pid:
                keeper.stop(0.0)
            keeper.drop_scratch()
        os._exit(127)
    _reply(f"started {keeper.pid} {keeper.mark}")
    keeper.run()
    _end_like(keeper.finish())


if __name__ == "__main__":
    main()
