"""The servers' own metrics over a run: sampled every few seconds into `servers.jsonl`, beside
crawdad's own figures at the same moments, and the verdict drawn from them.

Every `server_metrics` seconds (config; 0: off) each server the run uses is read once
(`crawdad.backends.server_metrics`), all at once, with a timeout of at most 2 s: a slow answer
loses that sample, never delays a request. A server with no metrics is noted once (a warning and
a `note` line) and not asked again.

`servers.jsonl` holds lines of three kinds:
- `{"session": START, "every": S}`: a session of the run began (START: Unix time);
- `{"note": TEXT, "server": URL, "at": T}`: what could not be read, once per server and session;
- a sample: `{"at": T, "t": seconds since this session began, "servers": {URL: {"kind",
  "source", "running", "waiting", "kv_cache", ..., "in_flight": crawdad's requests there,
  "responses": answered there so far, "tokens": completion tokens received from there}},
  "models": {MODEL: {"in_flight", "waiting" (in crawdad, for room), "responses", "tokens"}},
  "debates": finished this session}`. Counters (the server's and crawdad's) are cumulative.

The file is bounded in samples and bytes, and written and read under the run folder's rules
(`crawdad.run.series_file`).

Each read of a server is bounded in bytes, time and what is parsed (`server_metrics.Limits`);
what breaks a bound loses that sample, counted in the server's `lost` and noted once per server
and cause. Figures are checked by meaning: an impossible one (NaN, infinity, a negative count, a
fraction above 1) is left out and noted, never kept; a counter that goes down tells a restart
of the server, noted. One server's failure is its own: the others are sampled as ever.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crawdad.backends.server_metrics import (
    COUNTERS,
    LIMITS,
    Limits,
    Lost,
    MetricsReader,
    NoMetrics,
    Reading,
    check_for_server,
)
from crawdad.run.series_file import MAX_SAMPLES, SERIES, SeriesFile, load_series, read_series

log = logging.getLogger("crawdad")

__all__ = ["SERIES", "SeriesFile", "ServerSampler", "load_series", "read_series", "verdict"]
KIND_LABEL = {"vllm": "vLLM", "sglang": "SGLang", "llamacpp": "llama.cpp", "ollama": "Ollama"}


@dataclass
class _Track:
    """The last samples of one server, for the progress line and the end summary."""

    kind: str = ""
    running: deque[float] = field(default_factory=lambda: deque(maxlen=MAX_SAMPLES))
    waiting: deque[float] = field(default_factory=lambda: deque(maxlen=MAX_SAMPLES))
    kv: deque[float] = field(default_factory=lambda: deque(maxlen=MAX_SAMPLES))
    slots: int | None = None
    latest: Reading | None = None


class ServerSampler:
    """Samples the servers of `pools` every `every` seconds into `folder`/servers.jsonl."""

    def __init__(
        self,
        pools: Sequence[Any],  # crawdad.backends.ModelPool
        every: float,
        folder: Path,
        debates: Callable[[], int] = lambda: 0,
        concurrency: int | None = None,
        limits: Limits = LIMITS,
        most_running: dict[str, int] | None = None,
    ) -> None:
        """`most_running`: server base URL -> the most requests it can run at once, where
        crawdad started it and knows (a running count above it is left out as impossible)."""
        self.pools = list(pools)
        self.most_running = {u.rstrip("/"): n for u, n in (most_running or {}).items()}
        self.limits = limits
        self.every = every
        self.folder = Path(folder)
        self.debates = debates
        self.concurrency = concurrency
        self.tracks: dict[str, _Track] = {}
        self.notes: dict[str, str] = {}  # server URL -> why it has no metrics
        self.samples = 0
        self.lost: dict[str, int] = {}  # server URL -> samples lost this session
        self.restarts: dict[str, int] = {}  # server URL -> restarts seen (counters went down)
        self._noted: set[tuple[str, str]] = set()  # (server URL, cause) noted this session
        self._counters: dict[str, dict[str, float]] = {}
        self._file: SeriesFile | None = None
        self._readers: dict[str, MetricsReader] = {}
        self._start = time.time()

    def servers(self) -> dict[str, str]:
        """Each server's base URL once -> its backend ("ollama" or "openai")."""
        found: dict[str, str] = {}
        for pool in self.pools:
            for e in pool.endpoints:
                found.setdefault(e.url, pool.spec.backend)
        return found

    def open(self) -> None:
        """Open the folder's series (a servers.jsonl that is a link is refused here, with a
        message naming it, before the run starts) and mark the session's start."""
        self._file = SeriesFile(self.folder)
        self._file.append({"session": round(self._start, 3), "every": self.every})

    async def run(self) -> None:
        """Sample until cancelled. The first sample comes `every` seconds in."""
        import aiohttp

        from crawdad.backends.transport import connector

        if self._file is None:
            self.open()
        # Bodies are decompressed by server_metrics.read_body, within its bound.
        async with aiohttp.ClientSession(connector=connector(), auto_decompress=False) as session:
            self.start(session)
            loop = asyncio.get_running_loop()
            due = loop.time()
            while True:
                due += self.every
                await asyncio.sleep(max(0.0, due - loop.time()))
                await self.sample()
                due = max(due, loop.time() - self.every)  # fell behind: do not catch up in a burst

    def start(self, session: Any) -> None:
        """A reader of each server over `session` (an aiohttp session made with
        `auto_decompress=False`), each read within `limits` and a timeout of at most 2 s."""
        timeout = min(self.limits.seconds, max(0.05, self.every / 2))
        self._readers = {
            url: MetricsReader(url, backend, session, timeout, self.limits)
            for url, backend in self.servers().items()
        }

    def _note(self, url: str, cause: str, text: str, now: float) -> None:
        """Write `text` once per server and cause this session."""
        if (url, cause) in self._noted:
            return
        self._noted.add((url, cause))
        log.warning("%s", text)
        assert self._file is not None
        self._file.append({"note": text, "server": url, "at": round(now, 3)})

    async def _read(self, url: str) -> Reading | NoMetrics | Lost | None:
        """One server's reading; whatever goes wrong is that server's alone (a `Lost`)."""
        try:
            return await self._readers[url].read()
        except Lost as e:
            return e
        except Exception as e:  # an answer no rule foresaw: this sample of this server is lost
            log.debug("reading %s failed", url, exc_info=True)
            return Lost("error", f"reading its answer failed ({type(e).__name__})")

    def _checked(self, url: str, reading: Reading, now: float) -> None:
        """Note what the reading left out as impossible, and a counter that went down."""
        track = self.tracks.get(url)
        slots = [n for n in (track.slots if track else None, self.most_running.get(url)) if n]
        check_for_server(reading, min(slots) if slots else None)
        if reading.rejected:
            said = ", ".join(f"{k} = {v}" for k, v in sorted(reading.rejected.items()))
            self._note(
                url,
                "impossible",
                f"the server at {url} gave figures that cannot be ({said}): left out of its "
                "samples, never averaged",
                now,
            )
        last = self._counters.get(url, {})
        now_counters = {k: getattr(reading, k) for k in COUNTERS if getattr(reading, k) is not None}
        if any(k in last and v < last[k] for k, v in now_counters.items()):
            self.restarts[url] = self.restarts.get(url, 0) + 1
            self._note(
                url,
                "restart",
                f"the server at {url} restarted (its counters went down): rates start again "
                "from its next sample",
                now,
            )
        self._counters[url] = now_counters

    async def sample(self) -> None:
        urls = list(self._readers)
        readings = await asyncio.gather(*(self._read(u) for u in urls))
        now = time.time()
        assert self._file is not None
        servers: dict[str, dict[str, Any]] = {url: {} for url in urls}
        for url, reading in zip(urls, readings, strict=True):
            if isinstance(reading, NoMetrics):
                if url not in self.notes:
                    self.notes[url] = reading.reason
                    text = f"the server at {url} serves no metrics crawdad reads: {reading.reason}"
                    self._note(url, "none", f"{text}; the run goes on without its figures", now)
            elif isinstance(reading, Lost):
                self.lost[url] = self.lost.get(url, 0) + 1
                self._note(
                    url,
                    reading.cause,
                    f"a sample of the server at {url} was lost: {reading.reason}; its samples "
                    "are tried again, and those lost are counted",
                    now,
                )
            elif reading is not None:
                self._checked(url, reading, now)
                servers[url] = reading.as_dict()
                self._track(url, reading)
            if self.lost.get(url):
                servers[url]["lost"] = self.lost[url]
        models: dict[str, dict[str, int]] = {}
        for pool in self.pools:
            mine = models.setdefault(
                pool.spec.model, {"in_flight": 0, "waiting": 0, "responses": 0, "tokens": 0}
            )
            mine["waiting"] += pool.waiting
            for e in pool.endpoints:
                mine["in_flight"] += e.in_flight
                mine["responses"] += e.served
                mine["tokens"] += e.completion_tokens
                own = servers.setdefault(e.url, {})
                own["in_flight"] = own.get("in_flight", 0) + e.in_flight
                own["responses"] = own.get("responses", 0) + e.served
                own["tokens"] = own.get("tokens", 0) + e.completion_tokens
        line = {
            "at": round(now, 3),
            "t": round(now - self._start, 3),
            "servers": servers,
            "models": models,
            "debates": self.debates(),
        }
        self._file.append(line)
        self.samples += 1

    def _track(self, url: str, reading: Reading) -> None:
        track = self.tracks.setdefault(url, _Track())
        track.kind, track.latest = reading.kind, reading
        track.slots = reading.slots if reading.slots is not None else track.slots
        if reading.running is not None:
            track.running.append(reading.running)
        if reading.waiting is not None:
            track.waiting.append(reading.waiting)
        if reading.kv_cache is not None:
            track.kv.append(reading.kv_cache)

    def counts(self, host_of: Callable[[str], str]) -> dict[str, tuple[int, int | None]]:
        """Server host -> (running, waiting) from its latest reading, where it says."""
        out: dict[str, tuple[int, int | None]] = {}
        for url, track in self.tracks.items():
            r = track.latest
            if r is None or r.running is None:
                continue
            out[host_of(url)] = (
                round(r.running),
                round(r.waiting) if r.waiting is not None else None,
            )
        return out

    def summary_lines(self) -> list[str]:
        """The verdict on each server with metrics."""
        lines = []
        for url, track in self.tracks.items():
            said = verdict(
                url,
                track.kind,
                list(track.running),
                list(track.waiting) if track.waiting else None,
                list(track.kv) if track.kv else None,
                self.concurrency,
                track.slots,
            )
            if said:
                lines.append(said)
        return lines  # a server without metrics was told once, when it was found out


def _mean(xs: Iterable[float]) -> float:
    xs = list(xs)
    return sum(xs) / len(xs) if xs else 0.0


MIN_SAMPLES = 3
WAITING_BOUND = 0.5  # share of samples with requests waiting: the server was the bound
IDLE_BOUND = 0.1  # at most this share: the server had room
KV_FULL = 0.9  # KV cache this full counts as full


def verdict(
    url: str,
    kind: str,
    running: list[float],
    waiting: list[float] | None,
    kv: list[float] | None,
    concurrency: int | None = None,
    slots: int | None = None,
) -> str:
    """In plain words: was the server the bottleneck, or did it have room (raise
    `concurrency`)? "" when its figures cannot say (too few samples, no running count)."""
    label = f"the {KIND_LABEL.get(kind, kind)} server at {url}"
    if len(running) < MIN_SAMPLES:
        if not running:
            return ""
        return f"{label}: {len(running)} samples of its metrics, too few for a verdict"
    mean_run, peak = _mean(running), max(running)
    of = f" of the {slots} it serves at once" if slots else ""
    kv_max = max(kv) if kv else None
    kv_full = _mean(x >= KV_FULL for x in kv) if kv else 0.0
    was = f" (it was {concurrency})" if concurrency else ""
    if waiting is None:  # llama.cpp's /slots alone: busy slots, no queue
        if not slots:
            return ""
        if mean_run >= 0.9 * slots:
            return (
                f"{label} had {mean_run:.1f}{of} slots busy on average: the server was the "
                "bottleneck"
            )
        if mean_run < 0.5 * slots:
            return (
                f"requests running on {label} averaged {mean_run:.1f}{of}: the server had "
                f"room: raise `concurrency`{was}"
            )
        return f"{label} had {mean_run:.1f}{of} slots busy on average: it was kept busy"
    waited = _mean(x > 0 for x in waiting)
    if waited >= WAITING_BOUND:
        cache = ""
        if kv_max is not None:
            cache = (
                " with the KV cache full"
                if kv_full >= 0.5
                else f" with the KV cache at most {kv_max:.0%} full"
            )
        why = (
            ": its KV cache held no more contexts (a larger cache, or shorter contexts, lets it "
            "run more at once)"
            if kv_full >= 0.5
            else "; more `concurrency` would only lengthen its queue"
        )
        return (
            f"{label} had requests waiting {waited:.0%} of the time ({_mean(waiting):.1f} "
            f"waiting and {mean_run:.1f} running on average){cache}: the server was the "
            f"bottleneck{why}"
        )
    if waited <= IDLE_BOUND and (kv_max is None or kv_max < 0.8):
        cache = f", the KV cache at most {kv_max:.0%} full" if kv_max is not None else ""
        return (
            f"requests running on {label} averaged {mean_run:.1f}{of} (at most {peak:.0f}), "
            f"with requests waiting {waited:.0%} of the time{cache}: the server had room: "
            f"raise `concurrency`{was}"
        )
    return (
        f"{label} was kept busy: requests waiting {waited:.0%} of the time, {mean_run:.1f} "
        "running on average: `concurrency` suits it"
    )


@dataclass
class ServerFigures:
    """One server over a folder's series, in plain numbers (the bench's advice reads these)."""

    url: str
    kind: str
    samples: int
    running_mean: float
    waiting_share: float | None  # of the samples with requests waiting (None: not counted)
    kv_max: float | None  # 0-1
    kv_full_share: float | None  # of the samples with the KV cache at KV_FULL or more


def figures_of(folder: Path) -> list[ServerFigures]:
    """Each server with metrics in the folder's series, summed up."""
    tracks: dict[str, _Track] = {}
    for line in read_series(folder):
        for url, s in (line.get("servers") or {}).items():
            if not s.get("kind") or s.get("running") is None:
                continue
            track = tracks.setdefault(url, _Track(kind=s["kind"]))
            track.running.append(float(s["running"]))
            if s.get("waiting") is not None:
                track.waiting.append(float(s["waiting"]))
            if s.get("kv_cache") is not None:
                track.kv.append(float(s["kv_cache"]))
    return [
        ServerFigures(
            url,
            t.kind,
            len(t.running),
            _mean(t.running),
            _mean(x > 0 for x in t.waiting) if t.waiting else None,
            max(t.kv) if t.kv else None,
            _mean(x >= KV_FULL for x in t.kv) if t.kv else None,
        )
        for url, t in tracks.items()
    ]
