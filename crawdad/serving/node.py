"""A SLURM job's servers, run by crawdad itself on each node (`crawdad serve --node JOB`), and
the driver's wait for them (`crawdad serve --await JOB`).

The job folder (shared by the nodes, 0700) holds what the batch script wrote, `job.json` (the
plan and the serving settings, data only), and what the nodes write: `nodes/<node>/` (each
server's log, `status.json`, `restarts.jsonl`), then `nodes/<node>.json` once this node's servers
answer (their URLs), or `nodes/<node>.failed` (why they will not), and `keys.json` (every node's
servers' current keys, 0600). Each node's Supervisor reserves the plan's ports on the node when
the job starts (`ports.reserve`: a port in use, or held by another crawdad of this user, moves to
a free one), gives each server start a key of its own, and starts, keeps (restarts) and stops
the servers. A node whose server is given up exits 1, which ends the job step and so the job
(the script waits on it beside the driver).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ipaddress
import json
import os
import re
import signal
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from crawdad.config import ServingConfig
from crawdad.errors import CrawdadError
from crawdad.serving.base import Plan, ServerPlan
from crawdad.serving.processes import engine_of
from crawdad.serving.supervisor import Supervisor

JOB_FILE = "job.json"
KEYS_FILE = "keys.json"  # every node's servers: base URL -> key (0600), for the driver
NODES = "nodes"
POLL = 0.5  # seconds between looks at the job folder while the driver waits
MAX_JOB_FILE = 16 * 2**20  # bytes: a plan is a few kB
PARENT_POLL = 1.0  # seconds between looks at whether the job's step is still there
AWAIT_MARGIN = 120  # seconds beyond startup_timeout for crawdad's own start on each node


class JobSpec(BaseModel):
    """`job.json`: what every node serves and how (written by `crawdad serve --slurm`)."""

    model_config = ConfigDict(extra="forbid")

    plan: Plan
    serving: ServingConfig
    nodes: int = Field(1, ge=1)
    # "loopback": one node, the servers on 127.0.0.1; "node": the node's own address, reached
    # by the driver from the first node (each start's key required where the engine takes one).
    bind: Literal["loopback", "node"] = "loopback"


# --- what a node serves ------------------------------------------------------------------------


def keyless(server: ServerPlan) -> bool:
    """Engines that take no API key (Ollama): the Supervisor gives their starts none, so they
    are served on one node only, where nothing but loopback reaches them."""
    engine = engine_of(server)
    return engine is None or engine.api_key("key") == ({}, [])


def placed(server: ServerPlan, host: str) -> ServerPlan:
    """`server` listening on `host` (its command line, and Ollama's OLLAMA_HOST); its port is
    the plan's until the Supervisor reserves it on the node."""
    from crawdad.serving.engines import engine

    env = dict(server.env)
    if "OLLAMA_HOST" in env:
        env["OLLAMA_HOST"] = f"{host}:{server.port}"
    moved = server.model_copy(update={"host": host, "env": env})
    command = engine(server.engine, server.executable).command(moved)
    return moved.model_copy(update={"command": command})


def pinned(server: ServerPlan, visible: str | None) -> ServerPlan:
    """The plan's GPU i is the i-th of this node's CUDA_VISIBLE_DEVICES (SLURM's GPUs)."""
    if not server.gpus or not visible:
        return server
    devices = [d.strip() for d in visible.split(",") if d.strip()]
    if max(server.gpus) >= len(devices):
        raise CrawdadError(
            f"server {server.key} needs the plan's GPUs {server.gpus}, but this node has "
            f"{len(devices)} (CUDA_VISIBLE_DEVICES={visible}): ask for more with "
            "--sbatch '--gres=gpu:N'"
        )
    env = {**server.env, "CUDA_VISIBLE_DEVICES": ",".join(devices[i] for i in server.gpus)}
    return server.model_copy(update={"env": env})


ADDRESS_ENV = "CRAWDAD_NODE_ADDRESS"  # the address a node's servers listen on (several nodes)


def bind_address(bind: str) -> str:
    """127.0.0.1, or this node's address as the other nodes reach it: CRAWDAD_NODE_ADDRESS
    where set (a node of several networks), else the address of the node's name."""
    if bind == "loopback":
        return "127.0.0.1"
    if given := os.environ.get(ADDRESS_ENV, "").strip():
        try:
            return str(ipaddress.ip_address(given))
        except ValueError:
            raise CrawdadError(f"{ADDRESS_ENV}={given!r} is not an IP address") from None
    name = socket.gethostname()
    try:
        found = {info[4][0] for info in socket.getaddrinfo(name, None, socket.AF_INET)}
    except OSError as e:
        raise CrawdadError(f"this node's name {name!r} does not resolve ({e})") from None
    usable = sorted(str(a) for a in found if not str(a).startswith("127."))
    if not usable:
        raise CrawdadError(
            f"this node's name {name!r} resolves only to loopback, so the other nodes cannot "
            f"reach its servers: set {ADDRESS_ENV} to the node's address (--setup "
            f"'export {ADDRESS_ENV}=...'), or run the job on one node"
        )
    return usable[0]


def node_name() -> str:
    """This node in the job folder: SLURM's node index and the host's short name."""
    host = re.sub(r"[^A-Za-z0-9_.-]", "_", socket.gethostname().split(".")[0]) or "host"
    index = os.environ.get("SLURM_NODEID", "0")
    return f"{index if index.isdigit() else 0}-{host}"


def read_job(job: Path) -> JobSpec:
    path = job / JOB_FILE
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_JOB_FILE + 1)
    except OSError as e:
        raise CrawdadError(f"{path}: cannot read the job's plan ({e.strerror})") from None
    if len(raw) > MAX_JOB_FILE:
        raise CrawdadError(f"{path}: larger than {MAX_JOB_FILE} bytes, not a job's plan")
    try:
        return JobSpec.model_validate_json(raw)
    except ValueError as e:
        raise CrawdadError(
            f"{path}: not a job's plan written by crawdad serve --slurm: {e}"
        ) from None


def _write_new(path: Path, text: str) -> None:
    """Whole or not at all: written beside, then renamed (the driver polls for it)."""
    part = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(part, path)


def served_urls(plan: Plan) -> dict[str, list[str]]:
    """Each served model name (an Ollama tag) -> its servers' base URLs."""
    out: dict[str, list[str]] = {}
    for server in plan.servers:
        for name in server.tags or [server.served_name]:
            out.setdefault(name, []).append(server.base_url)
    return out


# --- the node ------------------------------------------------------------------------------


class _NodeListener:
    def __init__(self, given_up: asyncio.Event) -> None:
        self.given_up = given_up
        self.message = ""
        self.back: Callable[[], None] = lambda: None  # a restarted server may have a new key

    def server_down(self, server: ServerPlan, reason: str) -> None:
        pass

    def server_up(self, server: ServerPlan) -> None:
        self.back()

    def gave_up(self, message: str) -> None:
        self.message = message
        self.given_up.set()


def serve_node(job: Path) -> int:
    """This node's share of the job: every server of the plan, on ports reserved here."""
    name = node_name()
    nodes = job / NODES
    nodes.mkdir(mode=0o700, exist_ok=True)
    try:
        return asyncio.run(_serve_node(job, name))
    except CrawdadError as e:
        with contextlib.suppress(OSError):
            _write_new(nodes / f"{name}.failed", f"node {name}: {e}\n")
        print(f"crawdad: node {name}: {e}", file=sys.stderr, flush=True)
        return 1


async def _serve_node(job: Path, name: str) -> int:
    spec = read_job(job)
    host = bind_address(spec.bind)
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    servers = [pinned(placed(s, host), visible) for s in spec.plan.servers]
    plan = spec.plan.model_copy(update={"servers": servers})
    # The plan's ports were chosen where the script was written: on the node, a taken one
    # always moves (the driver learns the final URLs), whatever serving.replan_ports says.
    serving = spec.serving.model_copy(update={"replan_ports": True})
    given_up = asyncio.Event()
    listener = _NodeListener(given_up)
    say = _say(name)
    supervisor = Supervisor(
        plan, serving, job / NODES, sub=name, listener=listener, progress=False, say=say
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    # The job's end (SIGTERM, or its step gone) ends the node at once, even mid-start.
    ended: set[asyncio.Task[Any]] = {
        asyncio.create_task(stop.wait()),
        asyncio.create_task(_parent_gone(os.getppid())),
    }
    try:
        if not await _started(supervisor, ended):
            return 0
        running = supervisor.plan  # its ports as reserved on this node
        share = functools.partial(share_keys, job, supervisor)
        share()
        listener.back = share
        _write_new(job / NODES / f"{name}.json", _node_record(name, running, supervisor))
        say(f"up: {', '.join(s.base_url for s in running.servers)}")
        watch: asyncio.Task[Any] = asyncio.create_task(supervisor.watch())
        lost: asyncio.Task[Any] = asyncio.create_task(given_up.wait())
        await asyncio.wait([watch, lost, *ended], return_when=asyncio.FIRST_COMPLETED)
        for task in (watch, lost):
            task.cancel()
        if given_up.is_set():
            raise CrawdadError(listener.message)
        if not stop.is_set():
            say("the job's step is gone: stopping the servers")
        return 0
    finally:
        for task in ended:
            task.cancel()
        await supervisor.stop()  # and its ports released


async def _started(supervisor: Supervisor, ended: set[asyncio.Task[Any]]) -> bool:
    """Start the servers: True once they answer, False where the job ended first (the start
    is cancelled, which stops what it started); a failed start raises its error."""
    starting = asyncio.create_task(supervisor.start())
    await asyncio.wait({starting, *ended}, return_when=asyncio.FIRST_COMPLETED)
    if not starting.done():
        starting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await starting
        return False
    starting.result()
    return True


def share_keys(job: Path, supervisor: Supervisor) -> None:
    """This node's servers' current keys (`Supervisor.keys`) into the job's `keys.json` (0600, a
    JSON object of base URL -> key, as `serving.keys_file` reads it), beside the other nodes'
    (under a lock)."""
    import fcntl

    mine = supervisor.keys()
    urls = {s.base_url for s in supervisor.plan.servers}
    fd = os.open(job / "keys.lock", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            known = json.loads((job / KEYS_FILE).read_text(encoding="utf-8")[:MAX_JOB_FILE])
        except (OSError, ValueError):
            known = {}
        if not isinstance(known, dict):
            known = {}
        merged = {u: k for u, k in known.items() if u not in urls} | mine
        _write_new(job / KEYS_FILE, json.dumps(merged))
    finally:
        os.close(fd)  # and the lock with it


async def _parent_gone(parent: int) -> None:
    """Returns once the process that started this one (srun's step, or the script) is gone:
    a node's crawdad never outlives its job."""
    while os.getppid() == parent:  # noqa: ASYNC110 - no event tells of a parent's end
        await asyncio.sleep(PARENT_POLL)


def _say(name: str) -> Callable[[str], None]:
    def say(text: str) -> None:
        print(f"crawdad: node {name}: {text}", file=sys.stderr, flush=True)

    return say


def _node_record(name: str, plan: Plan, supervisor: Supervisor) -> str:
    pids = supervisor.pids()
    return json.dumps(
        {
            "node": name,
            "pid": os.getpid(),
            "urls": served_urls(plan),
            "servers": {s.key: {"url": s.base_url, "pid": pids.get(s.key)} for s in plan.servers},
        }
    )


# --- the driver's wait ---------------------------------------------------------------------------


def _alive(pid: int) -> bool:
    """The process runs (a zombie, ended but not yet reaped by its parent, does not count)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with contextlib.suppress(OSError):
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    return True


def await_nodes(job: Path, timeout: float, watch: int | None = None) -> dict[str, list[str]]:
    """Every node's servers' URLs, merged, once each node has written them; an error naming the
    node once one fails, the servers' step ends, or `timeout` seconds pass."""
    spec = read_job(job)
    folder = job / NODES
    deadline = time.monotonic() + timeout
    while True:
        failed = sorted(folder.glob("*.failed")) if folder.is_dir() else []
        if failed:
            text = failed[0].read_text(encoding="utf-8", errors="replace")[:20_000]
            raise CrawdadError(f"{text.strip()} (its servers' logs: {folder})")
        ready = sorted(folder.glob("*.json")) if folder.is_dir() else []
        if len(ready) >= spec.nodes:
            return _merged(ready)
        if watch is not None and not _alive(watch):
            raise CrawdadError(
                f"the servers' job step ended before every node's servers were up "
                f"({len(ready)} of {spec.nodes} nodes); their logs: {folder}"
            )
        if time.monotonic() >= deadline:
            raise CrawdadError(
                f"{len(ready)} of {spec.nodes} nodes had their servers up within "
                f"{timeout:.0f} s (CRAWDAD_STARTUP_TIMEOUT); their logs: {folder}"
            )
        time.sleep(POLL)


def _merged(files: list[Path]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for path in files:
        try:
            record = json.loads(path.read_text(encoding="utf-8")[:MAX_JOB_FILE])
            urls = record["urls"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise CrawdadError(f"{path}: not a node's record ({e})") from None
        for name, found in urls.items():
            out.setdefault(str(name), []).extend(str(u) for u in found)
    return out
