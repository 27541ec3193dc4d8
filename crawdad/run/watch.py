"""Watching the servers while a run goes: requests that stall, and roles whose servers are gone.

A request that gets no chunk or answer for `retry.stall_report` seconds is shown as stalled. When
every server of an agent (or of the extractor) has been unreachable for `retry.down_stop` seconds,
or has had requests in flight and sent nothing for `retry.hung_stop` seconds, no debate can end
any more: the run stops and says which role and servers, instead of retrying for hours.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import urlparse

from crawdad.backends import ModelPool
from crawdad.config import RetryConfig
from crawdad.protocols import DebateSetup


def host_of(url: str) -> str:
    return urlparse(url).netloc or url


def stalls(pools: list[ModelPool], now: float) -> dict[str, tuple[int, float]]:
    """Server host -> (requests stalled there, the longest wait), for servers with any."""
    found: dict[str, tuple[int, float]] = {}
    for pool in pools:
        for e in pool.endpoints:
            n, wait = e.stalled(now, pool.retry.stall_report)
            if n:
                host = host_of(e.url)
                had, longest = found.get(host, (0, 0.0))
                found[host] = (had + n, max(longest, wait))
    return found


def stall_note(found: dict[str, tuple[int, float]]) -> str:
    """ "stalled: HOST (N requests, S s)" for each server in `found`."""
    return "; ".join(
        f"stalled: {host} ({n} request{'s' * (n > 1)}, {wait:.0f} s)"
        for host, (n, wait) in found.items()
    )


@dataclass
class Watchdog:
    """Checks every `every` seconds (see `_watch` in runner.py) whether the run can go on."""

    roles: dict[str, ModelPool]  # role label ("agent qwen3", "the extractor") -> its pool
    retry: RetryConfig
    _reported: set[str] = field(default_factory=set, init=False)

    @classmethod
    def of(cls, *setups: DebateSetup) -> Watchdog:
        """Over every role of the setups (an experiment's variants share their servers)."""
        roles: dict[str, ModelPool] = {}
        for setup in setups:
            roles |= {f"agent {name}": p.pool for name, p in setup.agents.items()}
            if setup.judge is not None:
                roles["the judge"] = setup.judge.pool
            roles["the extractor"] = setup.extractor.pool
            if setup.grader is not None:
                roles["the grader"] = setup.grader.pool
        return cls(roles, setups[0].extractor.pool.retry)

    @property
    def every(self) -> float:
        """Often enough to stop within a tenth of the shortest threshold (at most each second)."""
        r = self.retry
        return min(1.0, r.down_stop / 10, r.hung_stop / 10, r.stall_report / 10)

    def verdict(self, now: float) -> str | None:
        """Why the run cannot go on, or None."""
        for role, pool in self.roles.items():
            endpoints = pool.endpoints
            if all(e.unreachable_for(now) >= self.retry.down_stop for e in endpoints):
                longest = min(e.unreachable_for(now) for e in endpoints)
                errors = "\n  ".join(f"{e.url}: {e.last_error}" for e in endpoints)
                return (
                    f"stopped: every server of {role} has been unreachable for {longest:.0f} s:"
                    f"\n  {errors}\nFinished debates are kept and the ones in flight will run "
                    "again. Start the server (or correct base_urls), then run the same command "
                    "again to resume."
                )
            down = [
                e
                for e in endpoints
                if e.unreachable_for(now) >= self.retry.down_stop
                or e.silent_for(now) >= self.retry.hung_stop
            ]
            if len(down) == len(endpoints):
                urls = ", ".join(e.url for e in endpoints)
                return (
                    f"stopped: every server of {role} has had requests in flight and sent "
                    f"nothing for {self.retry.hung_stop:.0f} s or more: {urls}. Is it overloaded "
                    "or hung? Check its log or restart it. Finished debates are kept and the "
                    "ones in flight will run again: run the same command again to resume."
                )
        return None

    def new_stalls(self, now: float) -> str:
        """The stall note when it names a server it did not name the last time, else ""."""
        found = stalls(list({id(p): p for p in self.roles.values()}.values()), now)
        fresh = set(found) - self._reported
        self._reported = set(found)
        return stall_note(found) if fresh else ""
