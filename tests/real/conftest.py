"""Fixtures for the real-server suite: llama.cpp and vLLM (CPU) serving SmolLM2-135M.

Each server is started once per session on a free loopback port (vLLM takes ~35 s) and stopped
at the end. Servers that are not installed make the tests FAIL (never skip) with the command
that installs them. Every server of the session logs to its own file under
``$CRAWDAD_REAL_LOG_DIR/pytest-<time>-<pid>/``; a failed test gets the tail of each log in its
report, and the folder is kept (and named at the end) when anything failed.

Nothing here runs at import time beyond cheap definitions: the fast suite (``-m 'not real'``)
loads this file too.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from .servers import (
    RealServer,
    ServerKind,
    ServerStartError,
    ensure_think_model,
    llamacpp_server,
    log_dir,
    missing_requirements,
    vllm_server,
)

INSTALL = "bash .ci/real_servers.sh"
REAL_TIMEOUT = 480  # seconds per test, fixture set-up included (vLLM start-up is ~35 s)
REASONING_MODEL_NAME = "smollm2-135m-think"

_SESSION_LOGS = log_dir() / f"pytest-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
_STARTED: list[RealServer] = []  # every server this session started, for failure reports
_PRESTARTED: dict[str, RealServer] = {}  # started early (without waiting), picked up later
_WANTED: set[str] = set()  # fixtures the collected real tests use


def _in_real_dir(item: pytest.Item) -> bool:
    return Path(str(item.fspath)).resolve().parent == Path(__file__).resolve().parent


@pytest.hookimpl(trylast=True)  # after -m / -k deselection
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if not _in_real_dir(item):
            continue
        if item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(REAL_TIMEOUT))
        if item.get_closest_marker("real") is not None:
            _WANTED.update(getattr(item, "fixturenames", ()))


def require(kind: ServerKind) -> None:
    """Fail (never skip) when a server is not installed, naming the command that installs it."""
    missing = missing_requirements(kind)
    if missing:
        pytest.fail(
            f"the real {kind} server is not installed (missing: {'; '.join(missing[:-1])}). "
            f"Install it with `{INSTALL}` from the repo root, then run the real suite again.",
            pytrace=False,
        )


def _start(server: RealServer, *, wait: bool = True) -> RealServer:
    _STARTED.append(server)
    try:
        if server.is_running():
            server.wait_ready()
        else:
            server.start(wait=wait)
    except ServerStartError as e:
        server.stop()
        pytest.fail(f"{server.kind} did not start: {e}\n(full log: {server.log_path})", False)
    return server


def _log(name: str) -> Path:
    return _SESSION_LOGS / f"{name}.log"


def _reasoning_server() -> RealServer:
    return vllm_server(
        model=REASONING_MODEL_NAME,
        model_dir=ensure_think_model(),
        reasoning_parser="deepseek_r1",
        log_path=_log("vllm-deepseek_r1-think"),
    )


@pytest.fixture(scope="session")
def llamacpp() -> Iterator[RealServer]:
    """llama-cpp-python's server, with ``--interrupt_requests false``.

    Its default (true) cuts a streamed response short whenever another request arrives, which
    makes any concurrent streaming client fail (see test_real_backend's interrupt test).
    """
    require("llamacpp")
    server = _start(llamacpp_server(interrupt_requests=False, log_path=_log("llamacpp")))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def vllm() -> Iterator[RealServer]:
    """vLLM on the CPU, no reasoning parser (the plain SmolLM2 folder)."""
    require("vllm")
    # The reasoning server starts at the same time when the session needs it: two start-ups
    # overlap well (each spends much of its ~35 s importing and waiting).
    if "vllm_reasoning" in _WANTED and "reasoning" not in _PRESTARTED:
        try:
            _PRESTARTED["reasoning"] = _start(_reasoning_server(), wait=False)
        except Exception:  # the reasoning fixture will start it (and report) on its own
            _PRESTARTED.pop("reasoning", None)
    # Tool calling on, so that the tool tests can force a tool choice (vLLM 0.32 refuses a named
    # tool_choice without a tool parser); requests without tools are not affected.
    tools = ["--enable-auto-tool-choice", "--tool-call-parser", "hermes"]
    server = _start(vllm_server(log_path=_log("vllm"), extra_args=tools))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def vllm_reasoning() -> Iterator[RealServer]:
    """vLLM with ``--reasoning-parser deepseek_r1`` on the SmolLM2 copy that has think tokens."""
    require("vllm")
    server = _PRESTARTED.pop("reasoning", None) or _reasoning_server()
    _start(server)
    yield server
    server.stop()


@pytest.fixture
def llamacpp_default_flags() -> Iterator[RealServer]:
    """A second llama.cpp server, with llama-cpp-python's default flags, for one test."""
    require("llamacpp")
    server = _start(llamacpp_server(log_path=_log("llamacpp-default-flags")))
    yield server
    server.stop()


@pytest.fixture(params=["llamacpp", "vllm"])
def real_server(request: pytest.FixtureRequest) -> RealServer:
    """Each test that takes this runs once against each server."""
    server: RealServer = request.getfixturevalue(request.param)
    if not server.is_running() or not server.ready():
        # A test before this one killed it (or it died): bring it back for the rest.
        server.restart()
    return server


# --- reports ------------------------------------------------------------------------------------


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    outcome = yield
    report = outcome.get_result()
    if not report.failed or not _in_real_dir(item):
        return
    for server in dict.fromkeys(_STARTED):
        report.sections.append(
            (
                f"{server.kind} server log {server.log_path} (last 60 lines)",
                server.log_tail(60),
            )
        )


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    for server in list(_PRESTARTED.values()):
        server.stop()
    if not _SESSION_LOGS.exists():
        return
    if exitstatus == 0 and not session.testsfailed:
        shutil.rmtree(_SESSION_LOGS, ignore_errors=True)


def pytest_terminal_summary(terminalreporter, exitstatus: int) -> None:  # type: ignore[no-untyped-def]
    if _SESSION_LOGS.exists() and (exitstatus != 0 or terminalreporter.stats.get("failed")):
        terminalreporter.write_line(f"real-server logs kept in {_SESSION_LOGS}")
