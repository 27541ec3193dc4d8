"""Are the servers up and do they have the models? And what to run when they don't."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from crawdad.backends import make_backend
from crawdad.backends.base import ServerInfo
from crawdad.backends.serve_hints import vllm_serve
from crawdad.config import ModelSpec, RunConfig
from crawdad.errors import BackendError, CrawdadError, ServersNotReady, ServerUnavailable
from crawdad.records import ServedBy

# Seconds a server has to list its models during a readiness check (`crawdad doctor`, the start
# of `crawdad run`), however long a response may take.
READY_TIMEOUT = 10.0


def fix_command(spec: ModelSpec) -> str:
    if spec.backend == "ollama":
        return f"ollama pull {spec.model}"
    port = (
        spec.base_urls[0].rsplit(":", 1)[-1].split("/")[0] if ":" in spec.base_urls[0] else "8000"
    )
    return vllm_serve(spec.model, port)


@dataclass
class ServerCheck:
    url: str
    backend: str
    info: ServerInfo | None = None  # what the server said of itself and its models' builds
    error: str | None = None
    hung: bool = False  # took connections but did not answer in time
    refused: bool = False  # nothing answers: not up yet, or not running (the error says both)

    @property
    def version(self) -> str | None:
        return self.info.version if self.info is not None else None

    @property
    def models(self) -> list[str]:
        return list(self.info.models) if self.info is not None else []


@dataclass
class DoctorReport:
    servers: dict[str, ServerCheck]
    problems: list[str]  # a model no endpoint can serve: the run cannot start
    warnings: list[str] = field(default_factory=list)  # some replicas are down
    tool_modes: dict[str, str] = field(default_factory=dict)  # role -> "native (why)"

    @property
    def ok(self) -> bool:
        return not self.problems

    def versions(self) -> dict[str, str | None]:
        return {url: s.version for url, s in self.servers.items()}

    @property
    def simulated(self) -> bool:
        """Every server that answered is crawdad's fake."""
        infos = [s.info for s in self.servers.values() if s.info is not None]
        return bool(infos) and all(i.simulated for i in infos)

    def served(self, config: RunConfig) -> dict[str, list[ServedBy]]:
        """Role -> what serves it, one entry per base URL (for the run's manifest)."""
        now = datetime.now(UTC)
        out: dict[str, list[ServedBy]] = {}
        for role, spec in _specs(config):
            for url in spec.base_urls:
                info = self.servers[url].info if url in self.servers else None
                build = info.models.get(spec.model) if info is not None else None
                out.setdefault(role, []).append(
                    ServedBy(
                        url=url,
                        model=spec.model,
                        software=info.software if info else None,
                        version=info.version if info else None,
                        simulated=info.simulated if info else False,
                        asked_at=now,
                        **(build.model_dump() if build else {}),
                    )
                )
        return out


def _specs(config: RunConfig) -> list[tuple[str, ModelSpec]]:
    specs: list[tuple[str, ModelSpec]] = [(f"agent {a.name}", a) for a in config.agents]
    if config.judge is not None:
        specs.append(("judge", config.judge))
    specs.append(("extractor", config.extractor))
    if config.grader is not None:
        specs.append(("grader", config.grader))
    return specs


def _without_served(config: RunConfig) -> RunConfig:
    """A copy whose models with a `serve` table have no URL to check."""
    out = config.model_copy(deep=True)
    for spec in [*out.agents, out.extractor, *out.readers()]:
        if spec.serve is not None:
            object.__setattr__(spec, "base_urls", [])
    return out


async def _check_server(spec: ModelSpec, url: str, limit: float) -> ServerCheck:
    # Its own short timeout: a server that takes connections and never answers must not keep
    # the check waiting for as long as a response may take.
    # (The client's own, longer, is a backstop: this one names the problem better.)
    backend = make_backend(spec.model_copy(update={"timeout": 2 * limit}), url)
    check = ServerCheck(url=url, backend=spec.backend)
    try:
        async with asyncio.timeout(limit):
            check.info = await backend.describe()
    except TimeoutError:
        check.hung = True
        check.error = (
            f"{url} did not answer within {limit:g} s: is it overloaded or hung? Look at its "
            "log, or restart it"
        )
    except ServerUnavailable as e:
        check.error, check.refused = str(e), True
    except BackendError as e:
        check.error = str(e)
    finally:
        await backend.aclose()
    return check


async def diagnose_all(configs: list[RunConfig], limit: float | None = None) -> DoctorReport:
    """`diagnose` of several configs (an experiment's variants), as one report; models crawdad
    serves itself are left out (`crawdad.serving.commands.check_served` checks them)."""
    reports = [await diagnose(c, limit, skip_served=True) for c in configs]
    return DoctorReport(
        servers={u: c for r in reports for u, c in r.servers.items()},
        problems=list(dict.fromkeys(p for r in reports for p in r.problems)),
        warnings=list(dict.fromkeys(w for r in reports for w in r.warnings)),
        tool_modes={k: v for r in reports for k, v in r.tool_modes.items()},
    )


async def diagnose(
    config: RunConfig, limit: float | None = None, skip_served: bool = False
) -> DoctorReport:
    """Check every server (all at once), each within `limit` seconds (READY_TIMEOUT);
    `skip_served`: not the models crawdad serves itself (no server of theirs is up yet)."""
    limit = limit or READY_TIMEOUT
    if skip_served:
        config = _without_served(config)
    targets = {url: spec for _, spec in _specs(config) for url in spec.base_urls}
    checks = await asyncio.gather(
        *(_check_server(spec, url, limit) for url, spec in targets.items())
    )
    servers = {c.url: c for c in checks}
    problems: list[str] = []
    warnings: list[str] = []
    for role, spec in _specs(config):
        found = []
        for url in spec.base_urls:
            check = servers[url]
            if check.hung or check.refused:  # the message names the fix itself
                found.append(f"{role}: {check.error}")
            elif check.error:
                start = "ollama serve" if spec.backend == "ollama" else fix_command(spec)
                found.append(f"{role}: {check.error}\n      fix: {start}")
            elif spec.model not in check.models:
                have = ", ".join(check.models[:8]) or "none"
                found.append(
                    f"{role}: model {spec.model!r} is not on {url} (it has: {have})\n      fix: {fix_command(spec)}"
                )
        # A model that some replica serves can run; the others are set aside and retried.
        (problems if len(found) == len(spec.base_urls) else warnings).extend(found)
    tool_modes = await _tool_modes(config, servers, limit, problems)
    return DoctorReport(
        servers=servers,
        problems=list(dict.fromkeys(problems)),
        warnings=list(dict.fromkeys(warnings)),
        tool_modes=tool_modes,
    )


async def _tool_modes(
    config: RunConfig, servers: dict[str, ServerCheck], limit: float, problems: list[str]
) -> dict[str, str]:
    """Which tool mode each agent with tools will use, from its first reachable server."""
    from crawdad.tools.probe import check_tool_mode

    out: dict[str, str] = {}
    for role, spec in _specs(config):
        url = next((u for u in spec.base_urls if not servers[u].error), None)
        if not spec.tools or url is None:
            continue
        check = await check_tool_mode(spec, url, limit)
        out[role] = f"{check.mode} ({check.why})"
        if check.problem:
            problems.append(f"{role}: {check.problem}")
    return out


def require_ready(report: DoctorReport) -> None:
    if not report.ok:
        raise ServersNotReady(
            "the model servers are not ready:\n  - "
            + "\n  - ".join(report.problems)
            + "\nRun `crawdad doctor` after fixing, or `crawdad demo` to try crawdad on simulated servers."
        )


# --- waiting for servers to come up -----------------------------------------------------------


def answers(url: str, limit: float = 2.0) -> bool:
    """Does a server answer HTTP at `url`? Any status but 503 counts (a server that says 404 to
    the path is up); 503 is llama-server's "loading model": not up yet."""
    import http.client
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    conn = kind(parts.hostname or "127.0.0.1", parts.port, timeout=limit)
    try:
        conn.request("GET", parts.path or "/")
        reply = conn.getresponse()
        reply.read()
        return reply.status != 503
    except (OSError, http.client.HTTPException):
        return False
    finally:
        conn.close()


def wait_for(
    urls: list[str],
    timeout: float,
    *,
    probe: Callable[[str], bool] = answers,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    every: float = 0.2,
) -> dict[str, float]:
    """Wait until every URL answers, at most `timeout` seconds in all; the seconds each took.
    Raises a `CrawdadError` naming those that never answered."""
    start = clock()
    waiting = list(urls)
    took: dict[str, float] = {}
    while True:
        for url in list(waiting):
            if probe(url):
                took[url] = clock() - start
                waiting.remove(url)
        if not waiting:
            return took
        if clock() - start >= timeout:
            raise CrawdadError(
                f"nothing answers at {', '.join(waiting)} after {timeout:g} s (or only 503, a "
                "model still loading): is the server still starting (a large model loads for "
                "minutes: give --timeout more), or did it fail? Look at its log; check the "
                "address and the port"
            )
        sleep(every)
