"""Every process a server starts goes when crawdad goes (crawdad/serving/keeper.py), with the
stand-in engine's vLLM-like workers (an EngineCore child, a worker in a new session, a daemon):
a normal stop, a server that dies, a `kill -9` of crawdad; what a crawdad and its keepers both
left is stopped and named at the next start; the log stays under its cap with its last lines;
status.json of a crawdad that is gone reads "gone". Waits are on conditions, with bounds."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from crawdad.serving.base import Plan
from crawdad.serving.causes import log_tail
from crawdad.serving.keeper import (
    LOG_HEAD,
    LOG_TAIL,
    LogFile,
    read_entries,
    registry_dir,
    start_time,
    write_entry,
)
from crawdad.serving.leftovers import clean_leftovers
from crawdad.serving.supervisor import Supervisor
from crawdad.view.live import server_states
from tests.test_served_run import run_until_a_server_freezes, served_toml
from tests.test_supervisor import Events, chat, serving, standin

TREE = {"CRAWDAD_STANDIN_WORKERS": "vllm,daemon"}


def workers(log: Path) -> dict[str, int]:
    """Role -> pid of the stand-in's workers, from its log's `workers ready` line."""
    line = next(x for x in log.read_text().splitlines() if "workers ready" in x)
    pairs = [p.split() for p in line.split("workers ready ", 1)[1].split(", ")]
    return {role: int(pid) for pid, role in pairs}


def server_processes(root: int) -> list[psutil.Process]:
    """The keepers, stand-ins and their workers below `root`."""
    names = ("keeper.py", "crawdad.fake.standin", "standin_workers.py")
    out = []
    for p in psutil.Process(root).children(recursive=True):
        try:
            if any(n in " ".join(p.cmdline()) for n in names):
                out.append(p)
        except psutil.Error:
            continue
    return out


def scratch_of(pid: int) -> Path:
    """The temporary folder a vLLM-like server's keeper gave it, with the engine core's socket
    file in it (crawdad/fake/standin_workers.py)."""
    folder = Path(psutil.Process(pid).environ()["VLLM_RPC_BASE_PATH"])
    assert [p.is_socket() for p in folder.iterdir()] == [True]
    return folder


def scratches_of(procs: list[psutil.Process]) -> set[Path]:
    """The temporary folders of the servers whose engine cores are among `procs`."""
    return {scratch_of(p.pid) for p in procs if p.cmdline()[-1:] == ["engine-core"]}


def gone(procs: list[psutil.Process], within: float) -> list[psutil.Process]:
    """The processes still running after `within` seconds at most (zombies count as gone)."""
    deadline = time.monotonic() + within
    while True:
        left = []
        for p in procs:
            try:
                if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                    left.append(p)
            except psutil.Error:
                continue
        if not left or time.monotonic() >= deadline:
            return left
        psutil.wait_procs(left, timeout=0.1)


async def test_a_normal_stop_leaves_no_worker_nor_daemon(tmp_path: Path) -> None:
    server = standin("tree", env=TREE)
    sup = Supervisor(Plan(servers=[server]), serving(), tmp_path, progress=False)
    await sup.start()
    try:
        pids = workers(tmp_path / "tree.log")
        procs = [psutil.Process(p) for p in pids.values()]
        leader = sup.pids()["tree"]
        # they escaped the server's process group: a group kill alone would leave them
        assert os.getsid(pids["worker"]) != os.getsid(leader)
        assert os.getsid(pids["daemon"]) != os.getsid(leader)
        keeper = sup.servers["tree"].proc.keeper.pid  # type: ignore[union-attr]
        assert psutil.Process(pids["daemon"]).ppid() == keeper  # adopted: a subreaper
        (_, entry), *_ = read_entries(registry_dir())  # type: ignore[arg-type]
        assert entry["server_pid"] == leader and entry["owner_pid"] == os.getpid()
        assert not entry["kept"]
        scratch = scratch_of(pids["engine-core"])
        assert scratch.stat().st_mode & 0o777 == 0o700
    finally:
        await sup.stop()
    # the keeper exits only once every process is gone: nothing to wait for
    assert gone(procs, 0) == []
    assert read_entries(registry_dir()) == []  # type: ignore[arg-type]
    assert not scratch.exists()  # the socket file the stop left went with the folder


async def test_a_server_that_dies_takes_its_workers_along_before_the_restart(
    tmp_path: Path,
) -> None:
    env = TREE | {
        "CRAWDAD_STANDIN_FAULT": "die-after:1",
        "CRAWDAD_STANDIN_ONCE": str(tmp_path / "once"),
    }
    server = standin("s0", env=env)
    events = Events()
    sup = Supervisor(Plan(servers=[server]), serving(), tmp_path, listener=events, progress=False)
    await sup.start()
    watch = asyncio.create_task(sup.watch())
    try:
        first = [psutil.Process(p) for p in workers(tmp_path / "s0.log").values()]
        request = asyncio.create_task(chat(server, sup.secret_of(server)))
        assert (await events.next())[0] == "down"
        assert await events.next() == ("up", "s0")
        request.cancel()
        # the restart began only after the dead server's keeper had stopped what it left
        assert gone(first, 0) == []
        text = (tmp_path / "s0.log").read_text()
        assert "the server exited (-9): stopping the 3 process(es) it left" in text
    finally:
        watch.cancel()
        await sup.stop()


def test_kill_9_of_crawdad_leaves_no_process_of_any_server(tmp_path: Path) -> None:
    """A served run with vLLM-like trees, SIGKILLed mid-run: within 10 s nothing of any
    server runs, the registry is empty, and the live view says the servers are gone."""
    run, out = run_until_a_server_freezes(tmp_path, TREE)
    try:
        procs = server_processes(run.pid)
        # 3 servers: each a keeper, a stand-in, an EngineCore, its worker and a daemon
        assert len(procs) == 15, run.stderr.read() if run.stderr else ""
        scratches = scratches_of(procs)
        assert len(scratches) == 3  # one folder per server
        status = json.loads((out / "servers/status.json").read_text())
        assert {s["state"] for s in status.values()} == {"up"}
        assert server_states(out, time.time()) == {}
        run.kill()
        run.wait(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
    assert gone(procs, 10.0) == []
    assert [f for f in scratches if f.exists()] == []
    said = server_states(out, time.time())
    assert len(said) == 3 and all(s.endswith("gone (crawdad exited)") for s in said.values())
    # the next start says what the keepers stopped, and leaves the registry empty
    lines = clean_leftovers()
    assert len(lines) == 3, lines
    for line in lines:
        assert line.startswith(f"4 process(es) left by crawdad pid {run.pid} (server ")
        assert line.endswith("were stopped by its keeper when that crawdad ended")
    assert read_entries(registry_dir()) == []  # type: ignore[arg-type]


def test_the_next_start_stops_and_names_what_a_crawdad_and_its_keepers_left(
    tmp_path: Path,
) -> None:
    """`crawdad serve`, frozen, its keepers SIGKILLed, then itself: the servers' trees run on
    with nobody to stop them. The next start of a server stops them and says so."""
    config = served_toml(tmp_path, TREE)
    serve = subprocess.Popen(
        [sys.executable, "-m", "crawdad", "serve", str(config), "--no-progress",
         "--logs", str(tmp_path / "logs")],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "CRAWDAD_GPUS": "none"},
    )  # fmt: skip
    try:
        assert serve.stdout is not None
        for line in serve.stdout:  # until the last --set line: the servers are up
            if "extractor.backend" in line:
                break
        procs = server_processes(serve.pid)
        keepers = [p for p in procs if "keeper.py" in " ".join(p.cmdline())]
        assert len(keepers) == 3 and len(procs) == 15
        scratches = scratches_of(procs)
        os.kill(serve.pid, signal.SIGSTOP)  # it must not see its keepers die
        for k in keepers:
            k.kill()
        serve.kill()
        serve.wait(timeout=60)
    finally:
        if serve.poll() is None:
            serve.kill()
    left = [p for p in procs if p not in keepers]
    assert gone(keepers, 10.0) == [] and gone(left, 0) == left  # orphans, still running
    said: list[str] = []

    async def next_start() -> None:
        sup = Supervisor(Plan(servers=[standin("next")]), serving(), tmp_path, say=said.append)
        sup.progress = False
        await sup.start()
        await sup.stop()

    asyncio.run(next_start())
    assert gone(left, 0) == []
    assert [f for f in scratches if f.exists()] == []  # the keepers' folders, from their entries
    assert len(said) == 3, said
    for line in said:
        assert line.startswith(f"stopped 4 process(es) left by crawdad pid {serve.pid} (server ")
        assert ", started 20" in line
    assert read_entries(registry_dir()) == []  # type: ignore[arg-type]


def test_an_entry_gets_only_a_keepers_own_folder_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A registry entry is a file, not a promise: of the folders entries name as their server's
    temporary folder, the next start removes only a keeper's kind (crawdad-server-*, right in
    the temporary folder, ours, not a link)."""
    temp = tmp_path / "tmp"
    (other := temp / "results").mkdir(parents=True)
    (deeper := temp / "sub" / "crawdad-server-deeper").mkdir(parents=True)
    (link := temp / "crawdad-server-link").symlink_to(other)
    (own := temp / "crawdad-server-own").mkdir()
    (own / "socket-file").touch()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    folder = registry_dir()
    assert folder is not None
    named = [other, deeper, link, "crawdad-server-relative", 7, own]
    for i, path in enumerate(named):  # written before the last boot: nothing of them runs
        scratch = path if isinstance(path, int) else str(path)
        entry = {"keeper_pid": 10_000 + i, "boot_id": "an earlier boot", "scratch": scratch}
        write_entry(folder, f"{i}.json", entry)
    assert clean_leftovers() == []
    assert read_entries(folder) == []
    assert other.is_dir() and deeper.is_dir() and link.is_symlink()
    assert not own.exists()


def test_the_servers_of_a_running_crawdad_and_kept_servers_are_not_leftovers(
    tmp_path: Path,
) -> None:
    folder = registry_dir()
    assert folder is not None and str(folder).startswith(str(tmp_path))
    mark = "feedface"
    sleeper = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(600)"],
        env={**os.environ, "CRAWDAD_SERVER_MARK": mark},
    )
    try:
        me = {"owner_pid": os.getpid(), "owner_start": start_time(os.getpid())}
        base = {"keeper_pid": 2**22 - 7, "keeper_start": 1, "mark": mark, "key": "k"}
        ours = base | me
        kept = base | {"owner_pid": os.getpid(), "owner_start": -1, "kept": True}
        for name, entry in (("a.json", ours), ("b.json", kept)):
            (folder / name).write_text(json.dumps(entry))
        assert clean_leftovers() == []
        assert sleeper.poll() is None
        assert sorted(n for n, _ in read_entries(folder)) == ["a.json", "b.json"]
        # the same, its crawdad gone (its pid now another process's: another start time)
        (folder / "a.json").write_text(json.dumps(ours | {"owner_start": -1}))
        assert clean_leftovers() == [
            f"stopped 1 process(es) left by crawdad pid {os.getpid()} (server k)"
        ]
        assert sleeper.wait(timeout=10) == -signal.SIGTERM
        # and a kept server's entry goes once nothing of it runs
        assert read_entries(folder) == []
    finally:
        sleeper.kill()
        sleeper.wait()


async def test_a_flooded_log_stays_under_its_cap_and_keeps_its_last_lines(
    tmp_path: Path,
) -> None:
    server = standin("loud", env={"CRAWDAD_STANDIN_FLOOD": "48"})
    sup = Supervisor(Plan(servers=[server]), serving(), tmp_path, progress=False)
    await sup.start()
    await sup.stop()
    log = tmp_path / "loud.log"
    assert log.stat().st_size <= LOG_HEAD + 2 * LOG_TAIL + 4096 + 1024
    text = log.read_text()
    assert text.startswith("--- crawdad ") and "stand-in engine: serving w" in text[:200]
    assert " bytes of this log left out here " in text
    tail = log_tail(tmp_path, "loud.log")
    assert any("flood done" in x for x in tail) and any("Uvicorn running" in x for x in tail)


@pytest.mark.parametrize("chunk", [1, 7, 4096, 50_000])
def test_the_capped_log_keeps_its_head_and_its_newest_lines(tmp_path: Path, chunk: int) -> None:
    path = tmp_path / "x.log"
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    log = LogFile(fd, head=1000, tail=4096)
    lines = [f"line {i}\n".encode() for i in range(40_000)]
    data = b"".join(lines)
    for at in range(0, len(data), chunk * 37):
        log.write(data[at : at + chunk * 37])
    os.close(fd)
    kept = path.read_bytes()
    assert len(kept) <= 1000 + 2 * 4096 + 4096 + 200
    head, _, rest = kept.partition(b"\n--- crawdad: ")
    assert data.startswith(head) and len(head) <= 1000 and head.endswith(b"\n")
    mark, _, tail = rest.partition(b" ---\n")
    # the newest 4096 bytes, from the first whole line in them
    assert data.endswith(tail) and len(tail) > 4096 - len(b"line 39999\n")
    assert data[: -len(tail)].endswith(b"\n") and tail.startswith(b"line ")
    left_out = int(mark.split(b" ")[0])
    assert left_out == len(data) - len(head) - len(tail)


def test_status_of_a_crawdad_that_is_gone_reads_gone(tmp_path: Path) -> None:
    me = {"owner_pid": os.getpid(), "owner_start": start_time(os.getpid())}
    host = {"owner_host": os.uname().nodename}
    entry = {"state": "up", "since": time.time(), "restarts": 0, "url": "http://h:1/v1"}
    cases = {
        "alive": entry | me | host,
        "gone": entry | me | host | {"owner_start": -1} | {"url": "http://h:2/v1"},
        "kept": entry | me | host | {"owner_start": -1, "kept": True, "url": "http://h:3/v1"},
        "elsewhere": entry | me | {"owner_host": "not-this-host", "owner_start": -1},
        "older": entry | {"url": "http://h:5/v1"},
    }
    (tmp_path / "servers").mkdir()
    (tmp_path / "servers" / "status.json").write_text(json.dumps(cases))
    assert server_states(tmp_path, time.time()) == {
        "http://h:2/v1": "crawdad's server gone: gone (crawdad exited)"
    }


def test_a_program_that_cannot_start_is_named_and_leaves_no_keeper(tmp_path: Path) -> None:
    from crawdad.serving.processes import spawn

    server = standin("bad").model_copy(update={"command": [str(tmp_path / "no-such-engine")]})
    fd = os.open(tmp_path / "bad.log", os.O_RDWR | os.O_CREAT)
    before = {p.pid for p in psutil.Process().children()}
    try:
        with pytest.raises(OSError, match=r"No such file or directory: .*no-such-engine"):
            spawn(server, fd)
    finally:
        os.close(fd)
    keepers = [p for p in psutil.Process().children() if p.pid not in before]
    assert gone(keepers, 0) == []
    assert read_entries(registry_dir()) == []  # type: ignore[arg-type]
