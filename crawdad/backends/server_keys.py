"""The API keys of the servers crawdad started itself, by server (scheme, host and port), held in
memory only: never in a config dump, a manifest, a log or a command line.

A run that starts its servers is told each start's secret (`run/served.py`: at the start and
after each restart, which brings a new one). A run that uses servers started by `crawdad serve`
or by an earlier `--keep-servers` (`serving.start = false`) reads them from the keys file those
wrote (`serving.keys_file`, mode 0600): the file is read again whenever it changes, so a server
that `crawdad serve` restarted with a new key is asked with it.

A model's own `api_key` / `api_key_env` comes first; these keys are for crawdad's own servers.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from urllib.parse import urlsplit

from crawdad.errors import ConfigError

MAX_KEYS_BYTES = 1_000_000

_KEYS: dict[str, str] = {}  # server root -> key
_FILES: dict[Path, tuple[tuple[int, int, int], dict[str, str]]] = {}  # path -> (stat, keys)


def server_of(url: str) -> str:
    """The server a URL names: "http://127.0.0.1:8100" for ".../v1/chat/completions"."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return f"{parts.scheme}://{(parts.hostname or '').lower()}:{port}"


def remember(url: str, key: str | None) -> None:
    """The server at `url` takes `key` from now on (None: no key of crawdad's)."""
    if key is None:
        _KEYS.pop(server_of(url), None)
    else:
        _KEYS[server_of(url)] = key


def forget(urls: list[str]) -> None:
    for url in urls:
        _KEYS.pop(server_of(url), None)


def key_for(url: str) -> str | None:
    """The key crawdad holds for the server at `url` (None: none)."""
    root = server_of(url)
    if (found := _KEYS.get(root)) is not None:
        return found
    for path in list(_FILES):
        found = _refreshed(path).get(root)
        if found is not None:
            return found
    return None


def headers_for(url: str) -> dict[str, str]:
    """The Authorization header for crawdad's own server at `url` ({} for none)."""
    key = key_for(url)
    return {"Authorization": f"Bearer {key}"} if key else {}


def _read(path: Path) -> tuple[tuple[int, int, int], dict[str, str]]:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise ConfigError(f"serving.keys_file {path}: {e.strerror or e}") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ConfigError(f"serving.keys_file {path} is not a regular file")
        if st.st_uid != os.getuid() or st.st_mode & 0o077:
            raise ConfigError(
                f"serving.keys_file {path} may be read by others or is not yours: it holds "
                "servers' keys, so it must be yours with mode 0600 (chmod 600)"
            )
        data = f.read(MAX_KEYS_BYTES + 1)
    try:
        keys = json.loads(data) if len(data) <= MAX_KEYS_BYTES else None
    except ValueError:
        keys = None
    if not isinstance(keys, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in keys.items()
    ):
        raise ConfigError(
            f"serving.keys_file {path} is not a keys file of crawdad's (a JSON object of server "
            "URL -> key, as `crawdad serve` writes)"
        )
    return (st.st_ino, st.st_mtime_ns, st.st_size), {server_of(u): k for u, k in keys.items()}


def use_file(path: Path | str) -> None:
    """Read the keys of `path` now (a ConfigError names what is wrong with it) and again
    whenever it changes."""
    path = Path(path).expanduser().absolute()
    _FILES[path] = _read(path)


def drop_file(path: Path | str) -> None:
    _FILES.pop(Path(path).expanduser().absolute(), None)


def _refreshed(path: Path) -> dict[str, str]:
    """The keys of `path`, read again if the file changed (kept as they were where it cannot be
    read now: a `crawdad serve` replacing it)."""
    seen, keys = _FILES[path]
    try:
        st = os.stat(path, follow_symlinks=False)
        if (st.st_ino, st.st_mtime_ns, st.st_size) != seen:
            _FILES[path] = _read(path)
            keys = _FILES[path][1]
    except (OSError, ConfigError):
        pass
    return keys
