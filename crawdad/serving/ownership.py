"""Whether the server that answers on a port is the one crawdad started, never assumed from the
port alone.

Two proofs, each used where it applies:

- **the API key**: every start hands the server a fresh random secret (`new_secret`, passed as
  the engine reads it: `engines/*.py`, `api_key`). The server is ours when an endpoint that
  needs the key answers 200 with our secret *and* refuses (401/403) a wrong one (a stranger
  without a key accepts any), and lists the served model name;
- **the socket** (Linux, a local address): every process that listens on host:port
  (`/proc/net/tcp`, `tcp6`) belongs to the server's process tree (the child crawdad started,
  its descendants, its session): its `/proc/PID/fd` holds the listening socket's inode. This is
  the only proof for Ollama, which takes no key.

`prove` runs both (the socket first: a stranger found by it is never sent the secret) and
returns a `Proof`; `who_listens` names what holds a port (pid and command line where /proc
shows them), for the messages of a port taken. The SLURM script's per-node supervisor uses the
same functions.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import secrets
import sys
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from crawdad.safe_files import Folder
from crawdad.serving.base import ServerPlan

PROC = Path("/proc")
LISTEN = "0A"  # the TCP state LISTEN in /proc/net/tcp
MAX_SCAN = 100_000  # /proc/net lines or /proc entries read at most (a bound on a busy host)


def new_secret() -> str:
    """A fresh secret for one server start (256 bits, URL-safe)."""
    return secrets.token_urlsafe(32)


@dataclass(frozen=True)
class Socket:
    """One listening TCP socket of this machine (as /proc/net/tcp shows it)."""

    address: str  # "127.0.0.1", "::", ...
    port: int
    uid: int
    inode: int


@dataclass
class Proof:
    """What `prove` found: `by` the proofs that passed ("api key", "socket"); `refused`: why the
    server that answers is not ours (None: it is, or nothing decided yet); `undecided`: why no
    proof could be made yet (the server is not ready: try again)."""

    by: list[str] = field(default_factory=list)
    refused: str | None = None
    undecided: str | None = None


# --- the listening sockets and their processes ------------------------------------------------


def _address(hex_text: str) -> str:
    """/proc/net/tcp's address (host byte order per 32-bit word) as text."""
    raw = bytes.fromhex(hex_text)
    if sys.byteorder == "little":
        raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    return str(ipaddress.ip_address(raw))


def listening(port: int) -> list[Socket] | None:
    """Every socket listening on TCP `port` of this machine (any address); None where this
    cannot be read (not Linux, /proc not mounted)."""
    found: list[Socket] = []
    read_any = False
    for name in ("tcp", "tcp6"):
        try:
            with open(PROC / "net" / name, encoding="ascii", errors="replace") as f:
                read_any = True
                for i, line in enumerate(f):
                    if i > MAX_SCAN:
                        break
                    fields = line.split()
                    if len(fields) < 10 or fields[3] != LISTEN or ":" not in fields[1]:
                        continue
                    address, _, hex_port = fields[1].rpartition(":")
                    with contextlib.suppress(ValueError):
                        if int(hex_port, 16) == port:
                            found.append(
                                Socket(_address(address), port, int(fields[7]), int(fields[9]))
                            )
        except OSError:
            continue
    return found if read_any else None


def _covers(socket_address: str, host: str) -> bool:
    """A socket bound to `socket_address` takes connections to `host`."""
    try:
        bound, wanted = ipaddress.ip_address(socket_address), ipaddress.ip_address(host)
    except ValueError:
        return True  # a host name: every listener on the port counts
    if bound.is_unspecified or wanted.is_unspecified:
        return True
    mapped = getattr(bound, "ipv4_mapped", None)
    return bound == wanted or (mapped is not None and mapped == wanted)


def listeners(host: str, port: int) -> list[Socket] | None:
    """The sockets that take connections to host:port on this machine (None: cannot tell)."""
    found = listening(port)
    return None if found is None else [s for s in found if _covers(s.address, host)]


def _pids() -> list[int]:
    try:
        names = os.listdir(PROC)
    except OSError:
        return []
    return [int(n) for n in names[:MAX_SCAN] if n.isdigit()]


def holders(inodes: set[int], among: Collection[int] | None = None) -> dict[int, int]:
    """Socket inode -> a pid whose open files hold it, of the processes `among` (None: all that
    crawdad may inspect, its user's)."""
    wanted = {f"socket:[{i}]": i for i in inodes}
    out: dict[int, int] = {}
    for pid in _pids() if among is None else among:
        try:
            fds = os.listdir(PROC / str(pid) / "fd")
        except OSError:
            continue
        for fd in fds:
            with contextlib.suppress(OSError):
                inode = wanted.get(os.readlink(PROC / str(pid) / "fd" / fd))
                if inode is not None:
                    out.setdefault(inode, pid)
        if len(out) == len(wanted):
            break
    return out


def _stat(pid: int) -> tuple[int, int] | None:
    """(parent pid, session id) of a process."""
    try:
        text = (PROC / str(pid) / "stat").read_text(errors="replace")
    except OSError:
        return None
    rest = text.rpartition(")")[2].split()  # the name may hold spaces and brackets
    try:
        return int(rest[1]), int(rest[3])
    except (IndexError, ValueError):
        return None


def tree_pids(root: int) -> set[int]:
    """The process `root` (a server crawdad started), its descendants and every process of its
    session (a server starts in a session of its own)."""
    parents: dict[int, list[int]] = {}
    out = {root}
    for pid in _pids():
        found = _stat(pid)
        if found is None:
            continue
        parent, session = found
        parents.setdefault(parent, []).append(pid)
        if session == root:
            out.add(pid)
    todo = list(out)
    while todo:
        for child in parents.get(todo.pop(), []):
            if child not in out:
                out.add(child)
                todo.append(child)
    return out


def command_line(pid: int, limit: int = 300) -> str | None:
    try:
        raw = (PROC / str(pid) / "cmdline").read_bytes()[: limit * 4]
    except OSError:
        return None
    text = " ".join(part.decode("utf-8", "replace") for part in raw.split(b"\0") if part)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _user(uid: int) -> str:
    with contextlib.suppress(KeyError, ImportError):
        import pwd

        return f"user {pwd.getpwuid(uid).pw_name} (uid {uid})"
    return f"uid {uid}"


def who_listens(host: str, port: int) -> str | None:
    """What listens on host:port in words ("pid 4242: python -m http.server 8100"), None where
    nothing does or this machine cannot tell."""
    found = listeners(host, port)
    if not found:
        return None
    held = holders({s.inode for s in found})
    said = []
    for s in found:
        pid = held.get(s.inode)
        if pid is None:
            said.append(f"a process of {_user(s.uid)} that crawdad may not inspect")
        else:
            line = command_line(pid)
            said.append(f"pid {pid}" + (f": {line}" if line else ""))
    return "; ".join(dict.fromkeys(said))


def socket_owned(host: str, port: int, pids: set[int]) -> bool | str | None:
    """True: every listener on host:port is held by a process of `pids`; a string: one is not
    (what holds it); None: cannot tell (not Linux, not this machine's address, nothing found)."""
    if not _local(host):
        return None
    found = listeners(host, port)
    if not found:
        return None
    held = holders({s.inode for s in found}, among=pids)  # the tree's own files: quick
    if all(s.inode in held for s in found):
        return True
    return who_listens(host, port) or "another process"


def _local(host: str) -> bool:
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host == "localhost"
    if address.is_loopback or address.is_unspecified:
        return True
    import socket

    try:  # an address of this machine's own interfaces: binding to it works
        family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.bind((host, 0))
        return True
    except OSError:
        return False


# --- the API key ------------------------------------------------------------------------------


def _key_url(server: ServerPlan, path: str) -> str:
    return f"http://{server.host}:{server.port}{path}"


def _served_names(body: object) -> set[str]:
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list):
        return set()
    return {str(m.get("id")) for m in data[:1000] if isinstance(m, dict)}


async def key_proof(
    server: ServerPlan, secret: str, key_path: str, client: httpx.AsyncClient, within: float
) -> Proof:
    """The server at server's port answers `key_path` with our secret and refuses a wrong one,
    and /v1/models lists its served name."""
    url = _key_url(server, key_path)
    try:
        wrong = await client.get(url, headers=_bearer(new_secret()), timeout=within)
        if wrong.status_code == 200:
            return Proof(
                refused=f"it answers GET {key_path} with any API key: it is not the server "
                "crawdad started with a key of its own"
            )
        if wrong.status_code not in (401, 403):
            return Proof(undecided=f"GET {key_path} with a wrong key answered {wrong.status_code}")
        ours = await client.get(url, headers=_bearer(secret), timeout=within)
        if ours.status_code in (401, 403):
            return Proof(
                refused=f"it refuses the API key crawdad gave its server ({ours.status_code}): "
                "another server listens there"
            )
        if ours.status_code != 200:
            return Proof(undecided=f"GET {key_path} answered {ours.status_code}")
        models = await client.get(_key_url(server, "/v1/models"), headers=_bearer(secret))
        names = _served_names(models.json()) if models.status_code == 200 else set()
    except (httpx.HTTPError, ValueError) as e:
        return Proof(undecided=f"GET {key_path}: {type(e).__name__}")
    if server.served_name not in names:
        shown = ", ".join(sorted(names)[:5]) or "nothing"
        return Proof(refused=f"it serves {shown}, not {server.served_name!r}")
    return Proof(by=["api key"])


def _bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


async def prove(
    server: ServerPlan,
    secret: str | None,
    key_path: str | None,
    pids: set[int],
    client: httpx.AsyncClient,
    within: float = 5.0,
) -> Proof:
    """Whether the server answering at server's host:port is ours: the one whose process tree is
    `pids` and that was given `secret` (None: an engine without a key, as Ollama). The socket is
    checked first, so that a stranger it finds is never sent the secret."""
    by: list[str] = []
    owned = socket_owned(server.host, server.port, pids)
    if isinstance(owned, str):
        return Proof(refused=f"another process listens on {server.host}:{server.port}: {owned}")
    if owned is True:
        by.append("socket")
    if secret is not None and key_path is not None:
        found = await key_proof(server, secret, key_path, client, within)
        if found.refused or found.undecided:
            return found
        by = found.by + by
    if not by:
        return Proof(by=["port free at start"])  # neither proof applies (not Linux, Ollama)
    return Proof(by=by)


# --- the keys handed to a later run -----------------------------------------------------------


def write_keys(folder: Folder, name: str, keys: dict[str, str]) -> None:
    """`name` in `folder`: a JSON object of base URL -> key, readable by this user alone (0600),
    replaced atomically, never through a link."""
    with folder.replacing(name, mode=0o600) as f:
        json.dump(keys, f, indent=1)
