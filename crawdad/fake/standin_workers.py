"""The stand-in engine's worker processes, started as vLLM starts its own, so that tests see a
server's whole process tree stopped (crawdad/serving/keeper.py), not only its first process:

- `engine-core`: a child of the server (vLLM's EngineCore) that starts a `worker` of its own in
  a new session (setsid), as a GPU worker may, outside the server's process group; it listens
  on a Unix socket in `VLLM_RPC_BASE_PATH`, as vLLM's processes do for ZeroMQ, whose file a
  stop by signal leaves behind (only where the variable is set: vLLM itself falls back on the
  system's temporary folder, where a test must not leave files);
- `daemon`: a child that daemonizes (forks, the fork calls setsid and forks again, the middle
  process exits): the daemon's parent is gone, so it is adopted by the nearest subreaper.

Each prints `ready PID ROLE` on its stdout once it (and what it starts) runs, then waits for
SIGTERM or SIGINT and exits. Run as `python -I standin_workers.py ROLE` (stdlib only: a worker
starts in milliseconds).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid

ROLES = ("engine-core", "worker", "daemon")


def start(role: str, new_session: bool = False) -> list[str]:
    """Start a worker of `role` and wait until it is ready: its `ready PID ROLE` lines."""
    proc = subprocess.Popen(
        [sys.executable, "-I", __file__, role],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        start_new_session=new_session,
    )
    assert proc.stdout is not None
    lines = [line.decode().strip() for line in proc.stdout]  # until every writer is done
    proc.stdout.close()
    if role == "daemon":
        proc.wait()  # the middle of the double fork exits at once; the daemon goes on
    return lines


def _ready(lines: list[str] | None = None) -> None:
    out = [*(lines or []), f"ready {os.getpid()} {sys.argv[1]}"]
    os.write(1, ("\n".join(out) + "\n").encode())
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)  # the starter reads until every holder of the pipe closes it
    os.close(null)


def _wait() -> None:
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    signal.sigwait({signal.SIGTERM, signal.SIGINT})


def _listen() -> socket.socket | None:
    base = os.environ.get("VLLM_RPC_BASE_PATH")
    if not base:
        return None
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(os.path.join(base, str(uuid.uuid4())))  # vLLM's name: ipc://BASE/<uuid4>
    sock.listen()
    return sock


def main(role: str) -> None:
    if role == "engine-core":
        _sock = _listen()  # held open until the process ends
        _ready(start("worker", new_session=True))
    elif role == "daemon":
        if os.fork() > 0:
            os._exit(0)
        os.setsid()
        middle = os.getpid()
        if os.fork() > 0:
            os._exit(0)
        while os.getppid() == middle:  # ready once adopted: its parent is gone
            time.sleep(0.001)
        _ready()
    else:
        _ready()
    _wait()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 and sys.argv[1] in ROLES else "worker")
