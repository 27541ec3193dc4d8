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

The file is bounded: at `MAX_SAMPLES` samples it is rewritten keeping every other one, and from
then on every other sample is written (the stride doubles each time). A run of days keeps
4,000 samples at most, spread over the whole run (at 5 s, two days are kept at 80 s).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crawdad.backends.server_metrics import MetricsReader, NoMetrics, Reading

log = logging.getLogger("crawdad")

SERIES = "servers.jsonl"
MAX_SAMPLES = 4000
KIND_LABEL = {"vllm": "vLLM", "sglang": "SGLang", "llamacpp": "llama.cpp", "ollama": "Ollama"}


class SeriesFile:
    """Appends samples, keeping at most `cap` of them (see the module's docstring)."""

    def __init__(self, path: Path, cap: int = MAX_SAMPLES) -> None:
        self.path = path
        self.cap = cap
        self.stride = 1
        self._seen = 0
        self.samples = 0
        if path.exists():
            lines = _lines(path)
            self.samples = sum(1 for x in lines if "servers" in x)
            while self.samples >= cap:  # a file of an earlier session already at the bound
                self._compact()

    def append(self, line: dict[str, Any]) -> None:
        sample = "servers" in line
        if sample:
            self._seen += 1
            if (self._seen - 1) % self.stride:
                return
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(line, separators=(",", ":")) + "\n")
        if sample:
            self.samples += 1
            if self.samples >= self.cap:
                self._compact()

    def _compact(self) -> None:
        kept, n = [], 0
        for line in _lines(self.path):
            if "servers" in line:
                n += 1
                if n % 2 == 0:
                    continue
            kept.append(line)
        tmp = self.path.with_suffix(".jsonl.tmp")
        tmp.write_text("".join(json.dumps(x, separators=(",", ":")) + "\n" for x in kept))
        os.replace(tmp, self.path)
        self.samples = sum(1 for x in kept if "servers" in x)
        self.stride *= 2


def _lines(path: Path) -> list[dict[str, Any]]:
    out = []
    for raw in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            line = json.loads(raw)
        except ValueError:
            continue  # a line cut by a crash
        if isinstance(line, dict):
            out.append(line)
    return out


def read_series(folder: Path) -> list[dict[str, Any]]:
    """Every line of a folder's servers.jsonl ([] when it has none)."""
    path = Path(folder) / SERIES
    return _lines(path) if path.is_file() else []


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
    ) -> None:
        self.pools = list(pools)
        self.every = every
        self.folder = Path(folder)
        self.debates = debates
        self.concurrency = concurrency
        self.tracks: dict[str, _Track] = {}
        self.notes: dict[str, str] = {}  # server URL -> why it has no metrics
        self.samples = 0
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

    async def run(self) -> None:
        """Sample until cancelled. The first sample comes `every` seconds in."""
        import aiohttp

        from crawdad.backends.transport import connector

        self.folder.mkdir(parents=True, exist_ok=True)
        self._file = SeriesFile(self.folder / SERIES)
        self._file.append({"session": round(self._start, 3), "every": self.every})
        timeout = min(2.0, max(0.05, self.every / 2))
        async with aiohttp.ClientSession(connector=connector()) as session:
            self._readers = {
                url: MetricsReader(url, backend, session, timeout)
                for url, backend in self.servers().items()
            }
            loop = asyncio.get_running_loop()
            due = loop.time()
            while True:
                due += self.every
                await asyncio.sleep(max(0.0, due - loop.time()))
                await self.sample()
                due = max(due, loop.time() - self.every)  # fell behind: do not catch up in a burst

    async def sample(self) -> None:
        urls = list(self._readers)
        readings = await asyncio.gather(*(self._readers[u].read() for u in urls))
        now = time.time()
        assert self._file is not None
        servers: dict[str, dict[str, Any]] = {url: {} for url in urls}
        for url, reading in zip(urls, readings, strict=True):
            if isinstance(reading, NoMetrics):
                if url not in self.notes:
                    self.notes[url] = reading.reason
                    text = f"the server at {url} serves no metrics crawdad reads: {reading.reason}"
                    log.warning("%s; the run goes on without its figures", text)
                    self._file.append({"note": text, "server": url, "at": round(now, 3)})
            elif reading is not None:
                servers[url] = reading.as_dict()
                self._track(url, reading)
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
