"""What a server says of its own load: one reading of its metrics, from the source its kind has.

- vLLM: Prometheus text at `/metrics` (`vllm:num_requests_running`, `vllm:num_requests_waiting`,
  `vllm:kv_cache_usage_perc` or the older `vllm:gpu_cache_usage_perc`, the counters
  `vllm:prefix_cache_queries`/`vllm:prefix_cache_hits` or the older `vllm:gpu_prefix_cache_*`,
  `vllm:prompt_tokens`, `vllm:generation_tokens`);
- SGLang: `/metrics` (`sglang:num_running_reqs`, `sglang:num_queue_reqs`, `sglang:token_usage`,
  `sglang:cache_hit_rate`, the token counters);
- llama.cpp's server: `/metrics` when started with `--metrics` (`llamacpp:requests_processing`,
  `llamacpp:requests_deferred`, `llamacpp:kv_cache_usage_ratio`, the token counters) and
  `/slots` (its slots: how many, how many busy);
- Ollama: `/api/ps` (the models loaded, their size in VRAM, their context length).

Metrics are read by name from a table of the names each version used (newest first); a metric
the server does not serve is left out (None), never guessed. A server that serves none of them
gives a `NoMetrics` with the reason, once: the caller stops asking it.

A server's answer is untrusted, as a scraper like Prometheus's treats it. Every read is bounded
(`Limits`): the bytes as sent (`max_bytes`, read in chunks and cut there: an endless stream
costs no more), the bytes after gzip or deflate (`max_decoded`, decompressed chunk by chunk with
a bound: a gzip bomb costs no more), the time (`seconds`, the whole answer), the lines of the
families crawdad reads (`max_series`: a million label values are not parsed one by one) and
their length, and JSON's nesting and size (`max_depth`, `max_models`). An answer larger than
`INLINE_BYTES` is parsed in a worker thread, off the event loop; a smaller one costs well under
a millisecond. What exceeds a bound loses that sample as a `Lost` (with why, in a
sentence); the next sample is tried again.

Figures are checked by meaning before they are kept: counts and counters finite and >= 0,
fractions in [0, 1], and what that server can have (`check_for_server`: no more requests running
than its slots, or than the maximum crawdad planned for a server it started; no more prefix-cache
hits than queries). An impossible figure (NaN, infinity, a negative count, a KV cache at 150%,
50 requests running on 4 slots) is left out of the reading and named in `Reading.rejected`,
never kept. Answers come from the server alone: a redirect is never followed (the sample is
lost, said once).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import re
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar
from urllib.parse import urlparse

import aiohttp

from crawdad.backends import server_keys

ServerKind = Literal["vllm", "sglang", "llamacpp", "ollama"]

# field -> the metric family names that carry it, newest first (counters without `_total`).
# "sum": added over label sets (engines, models); "max": the fullest one.
FAMILIES: dict[str, dict[str, tuple[tuple[str, ...], Literal["sum", "max"]]]] = {
    "vllm": {
        "running": (("vllm:num_requests_running",), "sum"),
        "waiting": (("vllm:num_requests_waiting",), "sum"),
        "kv_cache": (("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"), "max"),
        "prefix_queries": (("vllm:prefix_cache_queries", "vllm:gpu_prefix_cache_queries"), "sum"),
        "prefix_hits": (("vllm:prefix_cache_hits", "vllm:gpu_prefix_cache_hits"), "sum"),
        "prefix_hit_rate": (("vllm:gpu_prefix_cache_hit_rate",), "max"),  # vLLM < 0.8, a gauge
        "prompt_tokens": (("vllm:prompt_tokens",), "sum"),
        "generation_tokens": (("vllm:generation_tokens",), "sum"),
    },
    "sglang": {
        "running": (("sglang:num_running_reqs",), "sum"),
        "waiting": (("sglang:num_queue_reqs",), "sum"),
        "kv_cache": (("sglang:token_usage",), "max"),
        "prefix_hit_rate": (("sglang:cache_hit_rate",), "max"),
        "prompt_tokens": (("sglang:prompt_tokens",), "sum"),
        "generation_tokens": (("sglang:generation_tokens",), "sum"),
    },
    "llamacpp": {
        "running": (("llamacpp:requests_processing",), "sum"),
        "waiting": (("llamacpp:requests_deferred",), "sum"),
        "kv_cache": (("llamacpp:kv_cache_usage_ratio",), "max"),
        "prompt_tokens": (("llamacpp:prompt_tokens",), "sum"),
        "generation_tokens": (("llamacpp:tokens_predicted",), "sum"),
    },
}
# The names of the lines crawdad reads: each family's, and a counter's with `_total`.
_WANTED = frozenset(
    name + suffix
    for table in FAMILIES.values()
    for names, _ in table.values()
    for name in names
    for suffix in ("", "_total")
)
# The names crawdad looks for on a page of each kind (a counter's also with `_total`).
_NAMES = {
    f"{kind}:".encode(): tuple(sorted({n.encode() for ns, _ in t.values() for n in ns}))
    for kind, t in FAMILIES.items()
}
_AFTER_NAME = frozenset(b"{ \t")
FRACTIONS = frozenset({"kv_cache", "prefix_hit_rate"})  # 0-1
COUNTERS = ("prefix_queries", "prefix_hits", "prompt_tokens", "generation_tokens")


@dataclass(frozen=True)
class Limits:
    """The bounds of one read of one server (see the module's docstring)."""

    seconds: float = 2.0  # the whole answer, headers to last byte
    max_bytes: int = 4_000_000  # as sent (vLLM's page with its histograms: ~0.1-0.5 MB)
    max_decoded: int = 16_000_000  # after gzip or deflate
    max_series: int = 2_000  # sample lines of the families crawdad reads, all together
    max_line: int = 4_096  # bytes of one such line
    max_depth: int = 16  # JSON nesting (/slots, /api/ps)
    max_models: int = 64  # models of /api/ps kept (a model's name: at most 200 characters)


LIMITS = Limits()
# Answers read once per session (a version, Ollama's list of models): larger, never parsed deep.
ANSWER_LIMITS = Limits(seconds=10.0, max_bytes=16_000_000, max_decoded=64_000_000, max_depth=64)


class Lost(ValueError):
    """This sample of the server is lost (an answer past a bound, late or unreadable): why, in a
    sentence. `cause` is a short key (one note per server and cause). A ValueError: a caller
    that reads other answers (a version, a list of models) takes it as a garbled answer."""

    def __init__(self, cause: str, reason: str) -> None:
        super().__init__(reason)
        self.cause = cause
        self.reason = reason


@dataclass
class Reading:
    """One moment of one server, as it said. None: it does not serve that figure.

    `kv_cache` is a fraction (0-1) of the KV cache in use; `prefix_queries`/`prefix_hits`,
    `prompt_tokens` and `generation_tokens` are counters since the server started (tokens);
    `prefix_hit_rate` is the server's own rate (0-1) where it gives a rate, not counters;
    `slots`: requests it serves at once, where it says (llama.cpp's /slots). `rejected`: the
    figures it gave that cannot be (field -> the value as text), left out."""

    kind: ServerKind
    source: str  # what was read: "GET /metrics", "GET /slots", "GET /api/ps"
    running: float | None = None
    waiting: float | None = None
    kv_cache: float | None = None
    prefix_queries: float | None = None
    prefix_hits: float | None = None
    prefix_hit_rate: float | None = None
    prompt_tokens: float | None = None
    generation_tokens: float | None = None
    slots: int | None = None
    models: dict[str, dict[str, Any]] = field(default_factory=dict)  # Ollama: loaded models
    rejected: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """The figures it has (None left out), for a line of the series."""
        return {
            k: v for k, v in self.__dict__.items() if v is not None and v != {} and k != "rejected"
        }


@dataclass(frozen=True)
class NoMetrics:
    """The server serves no metrics crawdad can read: why, in a sentence."""

    reason: str


def possible(name: str, value: float) -> bool:
    """Whether a figure can be: finite, >= 0, and a fraction at most 1."""
    return math.isfinite(value) and value >= 0 and (name not in FRACTIONS or value <= 1)


def check_for_server(reading: Reading, most_running: int | None = None) -> Reading:
    """Leave out figures that are possible in general but not for this server (named in
    `rejected`): more requests running than it can serve at once (its slots, as it says, or
    `most_running`, the planned maximum of a server crawdad started), and more prefix-cache
    hits than queries. Returns `reading`."""
    caps = [c for c in (reading.slots, most_running) if c]
    if reading.running is not None and caps and reading.running > min(caps):
        reading.rejected["running"] = (
            f"{reading.running:g} (more than the {min(caps)} it serves at once)"
        )
        reading.running = None
    hits, queries = reading.prefix_hits, reading.prefix_queries
    if hits is not None and queries is not None and hits > queries:
        reading.rejected["prefix_hits"] = f"{hits:g} (more than its {queries:g} queries)"
        reading.prefix_hits = None
    return reading


def server_root(url: str) -> str:
    """The server's root from a base URL: `http://h:8000/v1` -> `http://h:8000`."""
    parsed = urlparse(url)
    path = parsed.path.rstrip("/")
    if path.endswith("/v1"):
        path = path[: -len("/v1")]
    return f"{parsed.scheme}://{parsed.netloc}{path}"


def wanted_values(page: bytes | str, limits: Limits = LIMITS) -> dict[str, list[float]]:
    """The values of each family crawdad reads (name without `_total`) on a Prometheus page.
    More than `max_series` such lines, or one longer than `max_line`, loses the sample (`Lost`);
    a value that is not a number loses it too."""
    data = page.encode("utf-8", "replace") if isinstance(page, str) else page
    values: dict[str, list[float]] = {}
    for n, (name, rest) in enumerate(_wanted_lines(data, limits), 1):
        if n > limits.max_series:
            raise Lost(
                "series",
                f"/metrics has more than {limits.max_series:,} series of the metrics crawdad "
                "reads (label values without end?)",
            )
        if len(rest) > limits.max_line:
            raise Lost("line", f"a line of /metrics is longer than {limits.max_line:,} bytes")
        if rest.startswith(b"{"):
            close = rest.rfind(b"}")
            if close < 0:
                raise Lost("garbage", "a line of /metrics has labels without their end")
            rest = rest[close + 1 :]
        fields = rest.split()
        try:
            value = float(fields[0])
        except (IndexError, ValueError):
            raise Lost("garbage", "a line of /metrics has no number for its value") from None
        values.setdefault(name, []).append(value)
    return values


def _wanted_lines(data: bytes, limits: Limits) -> Iterator[tuple[str, bytes]]:
    """(family name, the rest of its line) of each sample line of the families crawdad reads.
    Each name is found by `bytes.find` (a scan in C: a few ms over the largest page allowed,
    whatever else is on it); more than `20 * max_series` lines starting with one of the names
    (a real vLLM page: about 20) loses the sample."""
    most = 20 * limits.max_series
    seen = 0
    names = [n for prefix, ns in _NAMES.items() if prefix in data for n in ns]
    for name in names:
        at = data.find(name)
        while at >= 0:
            end = at + len(name)
            if at == 0 or data[at - 1] == 10:  # at a line's start
                seen += 1
                if seen > most:
                    raise Lost("series", f"/metrics has more than {most:,} lines of its metrics")
                if data.startswith(b"_total", end):
                    end += len(b"_total")
                if end < len(data) and data[end] in _AFTER_NAME:
                    stop = data.find(b"\n", end)
                    yield name.decode(), data[end : stop if stop >= 0 else len(data)]
            at = data.find(name, at + len(name))


def parse_prometheus(page: bytes | str, limits: Limits = LIMITS) -> Reading | None:
    """A Reading from Prometheus text (the server's kind told by its metric prefixes), or None
    when no family crawdad knows is in it. An impossible value of a family leaves that figure
    out (named in `rejected`); more than the limits allow loses the sample (`Lost`)."""
    values = wanted_values(page, limits)
    for kind, table in FAMILIES.items():
        if not any(name.startswith(f"{kind}:") for name in values):
            continue
        reading = Reading(kind=kind, source="GET /metrics")  # type: ignore[arg-type]
        for field_name, (names, how) in table.items():
            found = next((values[n] for n in names if n in values), None)
            if found is None:
                continue
            bad = [x for x in found if not possible(field_name, x)]
            if bad:
                reading.rejected[field_name] = repr(bad[0])
                continue
            setattr(reading, field_name, sum(found) if how == "sum" else max(found))
        return reading
    return None


def _count(value: Any) -> int | None:
    """A whole count >= 0 from JSON (a bool is no count), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if not math.isfinite(value) or value < 0 or value != int(value):
        return None
    return int(value)


def parse_slots(body: Any) -> Reading | None:
    """llama.cpp's /slots: a list of slots, each with `is_processing` (older: `state` 1 busy)."""
    if not isinstance(body, list) or not all(isinstance(s, dict) for s in body):
        return None
    busy = sum(bool(s.get("is_processing", s.get("state") == 1)) for s in body)
    return Reading(kind="llamacpp", source="GET /slots", running=busy, slots=len(body))


def parse_ps(body: Any, limits: Limits = LIMITS) -> Reading | None:
    """Ollama's /api/ps: the models loaded, each with `size_vram` (bytes) and, in newer versions,
    `context_length`. At most `max_models` are kept (their names cut at 200 characters); a size
    that is not a whole number >= 0 is left out."""
    if not isinstance(body, dict) or not isinstance(body.get("models"), list):
        return None
    models: dict[str, dict[str, Any]] = {}
    reading = Reading(kind="ollama", source="GET /api/ps", models=models)
    for m in body["models"]:
        if not isinstance(m, dict):
            continue
        if len(models) >= limits.max_models:
            reading.rejected["models"] = f"more than {limits.max_models}"
            break
        keep = {}
        for k in ("size_vram", "size", "context_length"):
            if k in m:
                n = _count(m[k])
                if n is None:
                    reading.rejected[k] = repr(m[k])[:40]
                else:
                    keep[k] = n
        models[str(m.get("name") or m.get("model"))[:200]] = keep
    return reading


def json_within(data: bytes, limits: Limits = LIMITS) -> Any:
    """JSON from `data`, refused (`Lost`) when nested deeper than `max_depth`: counted over the
    bytes before parsing (brackets outside strings), so a deep answer never reaches the
    parser's recursion."""
    depth = 0
    in_string = escaped = False
    # A scan in C where it can be: only brackets, quotes and backslashes matter.
    for m in re.finditer(rb'[\[\]{}"\\]', data):
        c = m[0]
        if in_string:
            if escaped:
                escaped = False
            elif c == b"\\":
                escaped = True
            elif c == b'"':
                in_string = False
            continue
        if c == b'"':
            in_string = True
        elif c in (b"[", b"{"):
            depth += 1
            if depth > limits.max_depth:
                raise Lost("depth", f"its JSON is nested deeper than {limits.max_depth} levels")
        elif c in (b"]", b"}"):
            depth -= 1
    try:
        return json.loads(data)
    except ValueError:
        raise Lost("garbage", "its answer is not JSON") from None


async def read_body(resp: aiohttp.ClientResponse, limits: Limits = LIMITS) -> bytes:
    """The body of `resp` (read with `auto_decompress=False`), at most `max_bytes` as sent and
    `max_decoded` after gzip or deflate; more, or another encoding: `Lost`. Never holds more
    than the limits in memory."""
    declared = resp.content_length
    if declared is not None and declared > limits.max_bytes:
        raise Lost("bytes", f"it announced {declared:,} bytes, more than {limits.max_bytes:,}")
    coding = resp.headers.get("Content-Encoding", "").strip().lower()
    if coding in ("", "identity"):
        inflate = None
    elif coding in ("gzip", "x-gzip", "deflate"):
        inflate = zlib.decompressobj(zlib.MAX_WBITS | 32)  # gzip or zlib, told by the header
    else:
        raise Lost("encoding", f"it answered in an encoding crawdad does not read ({coding[:20]})")
    raw = 0
    out = bytearray()
    async for chunk in resp.content.iter_chunked(65_536):
        raw += len(chunk)
        if raw > limits.max_bytes:
            raise Lost("bytes", f"its answer is longer than {limits.max_bytes:,} bytes")
        if inflate is None:
            out += chunk
            continue
        try:
            out += inflate.decompress(chunk, limits.max_decoded + 1 - len(out))
        except zlib.error:
            raise Lost("garbage", f"its {coding} answer does not decompress") from None
        if len(out) > limits.max_decoded or inflate.unconsumed_tail:
            raise Lost(
                "decoded", f"its answer is more than {limits.max_decoded:,} bytes decompressed"
            )
    return bytes(out)


INLINE_BYTES = 64_000  # an answer this small is parsed at once (well under a millisecond)

T = TypeVar("T")


async def _off_loop(parse: Callable[[bytes, Limits], T], body: bytes, limits: Limits) -> T:
    """`parse(body, limits)`: in a worker thread when the body is larger than `INLINE_BYTES`, so
    that the event loop (the run's requests) never waits on it; at once when it is smaller (a
    real vLLM page is ~55 KB: ~0.5 ms), which saves the thread's hop."""
    if len(body) <= INLINE_BYTES:
        return parse(body, limits)
    return await asyncio.to_thread(parse, body, limits)


class MetricsReader:
    """Reads one server each time it is asked, within `limits`; after a reading finds no metrics
    it says so (`NoMetrics`) and is not asked again. A sample late or too large is lost (`Lost`).

    The session should be made with `auto_decompress=False` (`read_body` decompresses within its
    bound); one that decompresses itself works too, with no bound on decompressed bytes."""

    def __init__(
        self,
        url: str,
        backend: str,
        session: aiohttp.ClientSession,
        timeout: float,
        limits: Limits = LIMITS,
    ):
        self.url = url
        self.root = server_root(url)
        self.backend = backend
        self.session = session
        self.limits = dataclasses.replace(limits, seconds=timeout)
        self._slots: bool | None = None  # llama.cpp: /slots answers (None: not tried yet)
        self.none: NoMetrics | None = None

    async def _get(self, path: str) -> tuple[int, bytes]:
        # llama-server's /metrics and /slots need the key of crawdad's own server
        headers = {"Accept-Encoding": "gzip, deflate", **server_keys.headers_for(self.root)}
        # A redirect is not followed: figures come from the server itself, never from a page it
        # points at (a 3xx is an answer without metrics).
        async with self.session.get(
            self.root + path, headers=headers, auto_decompress=False, allow_redirects=False
        ) as r:
            if 300 <= r.status < 400:
                raise Lost(
                    "redirect",
                    f"GET {path} answered with a redirect ({r.status}), which crawdad does not "
                    "follow: a server's figures come from the server itself",
                )
            return r.status, await read_body(r, self.limits)

    async def read(self) -> Reading | NoMetrics | None:
        """A reading; `NoMetrics` once it is clear the server has none; None when this one
        could not reach it (the next may do better). Raises `Lost` when the answer broke a
        bound, took too long or could not be read."""
        if self.none is not None:
            return self.none
        try:
            async with asyncio.timeout(self.limits.seconds):
                if self.backend == "ollama":
                    return await self._read_ps()
                return await self._read_openai()
        except TimeoutError:
            raise Lost(
                "time", f"it did not answer in full within {self.limits.seconds:g} s"
            ) from None
        except (aiohttp.ClientError, OSError):
            return None

    async def _read_ps(self) -> Reading | NoMetrics:
        status, body = await self._get("/api/ps")
        if status != 200:
            self.none = NoMetrics(f"GET /api/ps answered {status}")
            return self.none
        found = parse_ps(await _off_loop(json_within, body, self.limits), self.limits)
        if found is None:
            self.none = NoMetrics("GET /api/ps answered without a list of models")
            return self.none
        return found

    async def _read_openai(self) -> Reading | NoMetrics:
        status, page = await self._get("/metrics")
        reading = None
        if status == 200:
            reading = await _off_loop(parse_prometheus, page, self.limits)
        if self._slots is not False:
            slots = await self._read_slots()
            if slots is not None:
                if reading is None:
                    return slots
                reading.slots = slots.slots
                reading.running = reading.running if reading.running is not None else slots.running
        if reading is not None:
            return check_for_server(reading)
        said = f"GET /metrics answered {status}" if status != 200 else "/metrics has none"
        self.none = NoMetrics(f"{said} (of vLLM's, SGLang's or llama.cpp's metrics)")
        return self.none

    async def _read_slots(self) -> Reading | None:
        status, body = await self._get("/slots")
        found = None
        if status == 200:
            try:
                found = parse_slots(await _off_loop(json_within, body, self.limits))
            except Lost:
                if self._slots is None:
                    found = None  # never read: a server without /slots
                else:
                    raise
        if self._slots is None:
            self._slots = found is not None
        return found
