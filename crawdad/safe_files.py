"""Files written inside their folder, and input files read with a bound.

A run folder, a report folder or a data folder may come from someone else (a cluster's shards, a
colleague's runs), with links in it. Everything crawdad writes goes through `Folder`: the folder
the user named is opened as given, every folder below it is entered without following a link,
and every file is opened without following one either. A whole file is rewritten atomically (a
temporary file beside it, fsynced, then renamed over it); a file that is a link, a FIFO or a
device is refused with a message naming it, so nothing outside the folder is ever written, and a
file is never left half-written for a reader.

`read_input` reads a file the user names (a dataset, a config, a CSV, an audit) only when it is
a regular file no larger than a limit from the config (`input_limits.max_file_mb`): a FIFO, a
device or a folder is refused before it is opened for reading, and no more than the limit is
read even from a file that grows.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import secrets
import stat
from collections.abc import Iterator
from contextvars import ContextVar
from pathlib import Path, PurePath
from typing import IO, Any

from crawdad.errors import UnsafePathError

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_NOFOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK

SEPARATORS = ("/", "\\", "\0")
LIMIT_KEY = "input_limits.max_file_mb"
DEFAULT_MAX_FILE_MB = 1024  # the default of input_limits.max_file_mb (crawdad.config)
# The run's limit on one input file, in bytes: the config's (`use_input_limit`) once it is read,
# the default before (the config file itself) and for commands that take no config.
_LIMIT: ContextVar[int] = ContextVar("input_limit", default=DEFAULT_MAX_FILE_MB * 1_000_000)

__all__ = [
    "Folder",
    "UnsafePathError",
    "check_input",
    "input_limit",
    "open_input",
    "plain_name_problem",
    "read_input",
    "read_inside",
    "use_input_limit",
]


def plain_name_problem(name: str) -> str | None:
    """Why `name` cannot name a file or folder inside another (None: it can): not empty, not `.`
    or `..`, no separator."""
    if name in ("", ".", ".."):
        return f"{name!r} names no folder of its own" if name else "it is empty"
    if any(s in name for s in SEPARATORS):
        return f"{name!r} holds a path separator"
    return None


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a link"
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _link_error(path: Path, inside: Path) -> UnsafePathError:
    try:
        target = f" to {os.readlink(path)}"
    except OSError:
        target = ""
    return UnsafePathError(
        f"{path} is a link{target}: crawdad does not write or read through links inside "
        f"{inside}, so that nothing outside it is touched; remove the link (or replace it with "
        "the folder or file itself), or choose another folder"
    )


def _kind_error(path: Path, mode: int, expected: str = "a regular file") -> UnsafePathError:
    return UnsafePathError(
        f"{path} is {_kind(mode)}, not {expected}; crawdad refuses it. Remove it, or choose "
        "another folder"
    )


class Folder:
    """A folder crawdad writes in: `root` as the user gave it, then `parts` below it, each a real
    folder (never a link). Files are opened relative to the folder, never through a link.

    Use it as a context manager, or call `close`.
    """

    def __init__(self, root: Path | str, *parts: str, create: bool = True) -> None:
        self.root = Path(root)
        self.path = self.root.joinpath(*parts)
        if create:
            self.root.mkdir(parents=True, exist_ok=True)
        self.fd = os.open(self.root, _DIR)
        self._descend(self.root, parts, create)

    def _descend(self, base: Path, parts: tuple[str, ...], create: bool) -> None:
        """Enter `parts` below the open folder `base`, one by one, never through a link."""
        try:
            for i, part in enumerate(parts):
                if problem := plain_name_problem(part):
                    raise UnsafePathError(f"{base.joinpath(*parts)}: {problem}")
                self.fd = self._enter(part, base.joinpath(*parts[: i + 1]), create)
        except BaseException:
            os.close(self.fd)
            self.fd = -1
            raise

    def _enter(self, part: str, path: Path, create: bool) -> int:
        for _ in range(2):
            try:
                fd = os.open(part, _DIR | os.O_NOFOLLOW, dir_fd=self.fd)
            except FileNotFoundError:
                if not create:
                    raise
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, dir_fd=self.fd)
                continue
            except OSError as e:
                if e.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                mode = os.stat(part, dir_fd=self.fd, follow_symlinks=False).st_mode
                if stat.S_ISLNK(mode):
                    raise _link_error(path, self.root) from None
                raise _kind_error(path, mode, "a folder") from None
            os.close(self.fd)
            return fd
        raise FileNotFoundError(errno.ENOENT, "cannot be made", str(path))

    def __enter__(self) -> Folder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    @classmethod
    def inside(cls, root: Path | str, path: Path | str) -> Folder:
        """The existing folder `path`, entered from `root` (the folder it must stay inside:
        `path` itself, or a folder above it) without following a link below `root`: a folder
        between them that is a link is refused with a message naming it."""
        root, path = Path(root), Path(path)
        return cls(root, *path.relative_to(root).parts, create=False)

    def sub(self, *parts: str, create: bool = True) -> Folder:
        """A folder below this one, entered the same way."""
        child = Folder.__new__(Folder)
        child.root, child.path = self.root, self.path.joinpath(*parts)
        child.fd = os.dup(self.fd)
        child._descend(self.path, parts, create)
        return child

    # --- what is there -----------------------------------------------------------------------

    def lstat(self, name: str) -> os.stat_result | None:
        """The entry `name` itself (a link is not followed); None when there is none."""
        try:
            return os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    def is_file(self, name: str) -> bool:
        """True for a regular file; False when there is none; a link or anything else: refused."""
        st = self.lstat(name)
        if st is None:
            return False
        self._check_regular(name, st.st_mode)
        return True

    def _check_regular(self, name: str, mode: int) -> None:
        if stat.S_ISLNK(mode):
            raise _link_error(self.path / name, self.root)
        if not stat.S_ISREG(mode):
            raise _kind_error(self.path / name, mode)

    # --- opening -----------------------------------------------------------------------------

    def open_fd(self, name: str, flags: int, mode: int = 0o666) -> int:
        """os.open of the regular file `name` in this folder: a link, a FIFO, a device or a
        folder is refused (a FIFO is never waited on)."""
        if problem := plain_name_problem(name):
            raise UnsafePathError(f"{self.path}: file name {problem}")
        if (st := self.lstat(name)) is not None:
            self._check_regular(name, st.st_mode)
        try:
            fd = os.open(name, flags | _NOFOLLOW, mode, dir_fd=self.fd)
        except OSError as e:
            if e.errno in (errno.ELOOP, errno.ENXIO, errno.EISDIR) and (st := self.lstat(name)):
                self._check_regular(name, st.st_mode)
            raise
        try:
            self._check_regular(name, os.fstat(fd).st_mode)
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def open_append(self, name: str, buffering: int = -1) -> IO[bytes]:
        """`name` for appending (created if missing)."""
        fd = self.open_fd(name, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        return os.fdopen(fd, "ab", buffering=buffering)

    def open_read(self, name: str) -> IO[bytes]:
        return os.fdopen(self.open_fd(name, os.O_RDONLY), "rb")

    def open_update(self, name: str) -> IO[bytes]:
        """`name` for reading and writing in place (never created, never truncated here)."""
        return os.fdopen(self.open_fd(name, os.O_RDWR), "rb+")

    def lock(self, name: str = ".lock", *, wait: bool) -> IO[bytes] | None:
        """Take an exclusive flock on the file `name` (created, never truncated). `wait`: block
        until it is free; otherwise None when another process holds it. Closing the file (or
        `unlock`) frees it."""
        handle = os.fdopen(self.open_fd(name, os.O_RDWR | os.O_CREAT), "rb+", buffering=0)
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            handle.close()
            return None
        except BaseException:
            handle.close()
            raise
        return handle

    @contextlib.contextmanager
    def locked(self, name: str = ".lock") -> Iterator[None]:
        """Hold the folder's lock file `name` (waiting for another process to free it)."""
        handle = self.lock(name, wait=True)
        try:
            yield
        finally:
            if handle is not None:
                handle.close()

    def read_bytes(self, name: str, limit: int | None = None) -> bytes:
        """The whole regular file `name`; past `limit` bytes: refused."""
        with self.open_read(name) as f:
            data = f.read() if limit is None else read_upto(f, limit + 1)
        if limit is not None and len(data) > limit:
            raise _too_large(self.path / name, limit)
        return data

    def read_text(self, name: str, limit: int | None = None) -> str:
        return self.read_bytes(name, limit).decode("utf-8")

    # --- writing -----------------------------------------------------------------------------

    def replacing(
        self, name: str, binary: bool = False, mode: int | None = None
    ) -> contextlib.AbstractContextManager[IO[Any]]:
        """A file to write `name`'s new content into: written beside it, fsynced and renamed over
        it when the block ends without an error (a link or a FIFO named `name` is refused, never
        followed); on an error the old file stays as it was. `mode`: the new file's permissions
        exactly (0o600: this user's alone), whatever the umask; None: the umask's."""
        return self._replacing(name, binary, mode)

    @contextlib.contextmanager
    def _replacing(self, name: str, binary: bool, mode: int | None = None) -> Iterator[IO[Any]]:
        if problem := plain_name_problem(name):
            raise UnsafePathError(f"{self.path}: file name {problem}")
        if (st := self.lstat(name)) is not None:
            self._check_regular(name, st.st_mode)
        tmp = f".{name}.{secrets.token_hex(4)}.tmp"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW
        fd = os.open(tmp, flags, 0o666 if mode is None else mode, dir_fd=self.fd)
        try:
            with os.fdopen(fd, "wb" if binary else "w", encoding=None if binary else "utf-8") as f:
                if mode is not None:
                    os.fchmod(f.fileno(), mode)
                yield f
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=self.fd)
            raise

    def write_bytes(self, name: str, data: bytes) -> Path:
        """Replace `name` with `data`, atomically; return its path."""
        with self.replacing(name, binary=True) as f:
            f.write(data)
        return self.path / name

    def write_text(self, name: str, text: str) -> Path:
        with self.replacing(name) as f:
            f.write(text)
        return self.path / name

    def rename(self, old: str, new: str) -> None:
        """Rename an entry inside this folder (a link is moved, never followed)."""
        for n in (old, new):
            if problem := plain_name_problem(n):
                raise UnsafePathError(f"{self.path}: file name {problem}")
        os.replace(old, new, src_dir_fd=self.fd, dst_dir_fd=self.fd)

    def unlink(self, name: str) -> None:
        os.unlink(name, dir_fd=self.fd)

    def check_writable(self) -> None:
        """Write and remove a file: a folder that cannot take files fails here (OSError)."""
        self.write_text(".write-test", "ok")
        self.unlink(".write-test")


def write_file(folder: Path | str, rel: str | PurePath, data: str | bytes) -> Path:
    """Write `folder`/`rel` atomically, every folder below `folder` entered without following a
    link (and made if missing); return its path."""
    *parts, name = PurePath(rel).parts
    with Folder(folder, *parts) as f:
        return f.write_bytes(name, data) if isinstance(data, bytes) else f.write_text(name, data)


def read_inside(
    folder: Path | str, name: str, *, root: Path | str | None = None, limit: int | None = None
) -> bytes | None:
    """The regular file `name` of `folder` (None when there is none), read without following a
    link: `folder` is entered from `root` (default: `folder` itself) as `Folder.inside` does,
    and `name` itself must not be a link, a FIFO or a device (refused before it is opened, with
    a message naming it). For the files of a run folder someone else may have made."""
    with Folder.inside(root if root is not None else folder, folder) as f:
        if not f.is_file(name):
            return None
        return f.read_bytes(name, limit)


def refuse_link(path: Path | str) -> None:
    """Refuse a folder crawdad is to write in that is itself a link (a report folder inside a run
    folder, say): the link may lead anywhere."""
    path = Path(path)
    if path.is_symlink():
        raise _link_error(path, path.parent)


# --- input files ------------------------------------------------------------------------------


def _too_large(path: Path, limit: int) -> UnsafePathError:
    return UnsafePathError(
        f"{path} is larger than {limit / 1e6:,.0f} MB, the most crawdad reads of one input file; "
        f"if it is really the file meant, raise {LIMIT_KEY} (--set {LIMIT_KEY}=N, or in the "
        "config)"
    )


def input_limit() -> int:
    """The most bytes crawdad reads of one input file now (`input_limits.max_file_mb`)."""
    return _LIMIT.get()


def use_input_limit(max_file_mb: float) -> None:
    """Read inputs under the config's `input_limits.max_file_mb` from here on."""
    _LIMIT.set(int(max_file_mb * 1_000_000))


def check_input(path: Path | str, limit: int | None, what: str = "file") -> os.stat_result:
    """Refuse, before opening it, an input that is not a regular file (a FIFO, a device, a
    folder) or that is larger than `limit` bytes. Links the user gave are followed: the user
    named the file."""
    path = Path(path)
    st = os.stat(path)  # FileNotFoundError for a missing file: the caller names it
    if not stat.S_ISREG(st.st_mode):
        raise UnsafePathError(
            f"{path} is {_kind(st.st_mode)}, not a regular file: give the {what} itself"
        )
    if limit is not None and st.st_size > limit:
        raise _too_large(path, limit)
    return st


def read_input(path: Path | str, what: str = "file", limit: int | None = None) -> bytes:
    """The bytes of the regular file `path`, at most `limit` (default: `input_limit()`; more:
    refused). A FIFO or a device is refused before it is opened for reading; a file that grows is
    never read past the limit."""
    path = Path(path)
    limit = input_limit() if limit is None else limit
    check_input(path, limit, what)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):  # swapped between the stat and the open
            raise UnsafePathError(f"{path} is {_kind(mode)}, not a regular file: give the {what}")
        data = f.read() if limit is None else read_upto(f, limit + 1)
    if limit is not None and len(data) > limit:
        raise _too_large(path, limit)
    return data


def read_upto(f: IO[bytes], n: int) -> bytes:
    """At most `n` bytes of `f`, read in pieces: memory grows with what the file holds, never
    with the limit (a `read(n)` of a large `n` sets aside `n` bytes at once)."""
    pieces: list[bytes] = []
    left = n
    while left > 0 and (piece := f.read(min(left, 1 << 20))):
        pieces.append(piece)
        left -= len(piece)
    return b"".join(pieces)


def open_input(path: Path | str, what: str = "file") -> IO[bytes]:
    """The regular file `path` opened for reading a part of it (a checkpoint's header, say):
    a FIFO, a device or a folder is refused before it is opened for reading, never waited on.
    Links the user gave are followed, as by `read_input`."""
    path = Path(path)
    check_input(path, None, what)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):  # swapped between the stat and the open
            raise UnsafePathError(f"{path} is {_kind(mode)}, not a regular file: give the {what}")
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")
