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
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlparse

import aiohttp

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


@dataclass
class Reading:
    """One moment of one server, as it said. None: it does not serve that figure.

    `kv_cache` is a fraction (0-1) of the KV cache in use; `prefix_queries`/`prefix_hits`,
    `prompt_tokens` and `generation_tokens` are counters since the server started (tokens);
    `prefix_hit_rate` is the server's own rate (0-1) where it gives a rate, not counters;
    `slots`: requests it serves at once, where it says (llama.cpp's /slots)."""

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

    def as_dict(self) -> dict[str, Any]:
        """The figures it has (None left out), for a line of the series."""
        out = {k: v for k, v in self.__dict__.items() if v is not None and v != {}}
        return out


@dataclass(frozen=True)
class NoMetrics:
    """The server serves no metrics crawdad can read: why, in a sentence."""

    reason: str


def server_root(url: str) -> str:
    """The server's root from a base URL: `http://h:8000/v1` -> `http://h:8000`."""
    parsed = urlparse(url)
    path = parsed.path.rstrip("/")
    if path.endswith("/v1"):
        path = path[: -len("/v1")]
    return f"{parsed.scheme}://{parsed.netloc}{path}"


def wanted_lines(text: str) -> str:
    """Only the lines of the metrics crawdad reads (vLLM's page is mostly histograms): parsing
    stays cheap however much else the server exports."""
    keep = []
    for line in text.splitlines():
        if line.startswith("# "):
            parts = line.split(" ", 3)
            if len(parts) > 2 and parts[2] in _WANTED:
                keep.append(line)
        else:
            name = line.split("{", 1)[0].split(" ", 1)[0]
            if name in _WANTED:
                keep.append(line)
    return "\n".join(keep) + "\n"


def parse_prometheus(text: str) -> Reading | None:
    """A Reading from Prometheus text (the server's kind told by its metric prefixes), or None
    when no family crawdad knows is in it."""
    from prometheus_client.parser import text_string_to_metric_families

    values: dict[str, list[float]] = {}
    for family in text_string_to_metric_families(wanted_lines(text)):
        samples = [s for s in family.samples if not s.name.endswith(("_created", "_bucket"))]
        if samples:
            values[family.name] = [float(s.value) for s in samples]
    for kind, table in FAMILIES.items():
        if not any(name.startswith(f"{kind}:") for name in values):
            continue
        reading = Reading(kind=kind, source="GET /metrics")  # type: ignore[arg-type]
        for field_name, (names, how) in table.items():
            found = next((values[n] for n in names if n in values), None)
            if found is not None:
                setattr(reading, field_name, sum(found) if how == "sum" else max(found))
        return reading
    return None


def parse_slots(body: Any) -> Reading | None:
    """llama.cpp's /slots: a list of slots, each with `is_processing` (older: `state` 1 busy)."""
    if not isinstance(body, list) or not all(isinstance(s, dict) for s in body):
        return None
    busy = sum(bool(s.get("is_processing", s.get("state") == 1)) for s in body)
    return Reading(kind="llamacpp", source="GET /slots", running=busy, slots=len(body))


def parse_ps(body: Any) -> Reading | None:
    """Ollama's /api/ps: the models loaded, each with `size_vram` (bytes) and, in newer versions,
    `context_length`."""
    if not isinstance(body, dict) or not isinstance(body.get("models"), list):
        return None
    models: dict[str, dict[str, Any]] = {}
    for m in body["models"]:
        if not isinstance(m, dict):
            continue
        keep = {k: m[k] for k in ("size_vram", "size", "context_length") if k in m}
        models[str(m.get("name") or m.get("model"))] = keep
    return Reading(kind="ollama", source="GET /api/ps", models=models)


class MetricsReader:
    """Reads one server each time it is asked; after a reading fails to find metrics it says
    so (`NoMetrics`) and is not asked again. Timeouts are short: a sample late is a sample lost."""

    def __init__(self, url: str, backend: str, session: aiohttp.ClientSession, timeout: float):
        self.url = url
        self.root = server_root(url)
        self.backend = backend
        self.session = session
        self.timeout = aiohttp.ClientTimeout(total=timeout)
        self._slots: bool | None = None  # llama.cpp: /slots answers (None: not tried yet)
        self.none: NoMetrics | None = None

    async def _get(self, path: str) -> tuple[int, str]:
        async with self.session.get(self.root + path, timeout=self.timeout) as r:
            return r.status, await r.text()

    async def read(self) -> Reading | NoMetrics | None:
        """A reading; `NoMetrics` once it is clear the server has none; None when this one
        failed (unreachable, late): the next may do better."""
        if self.none is not None:
            return self.none
        try:
            if self.backend == "ollama":
                status, text = await self._get("/api/ps")
                found = parse_ps(json.loads(text)) if status == 200 else None
                if found is None:
                    self.none = NoMetrics(f"GET /api/ps answered {status}")
                    return self.none
                return found
            return await self._read_openai()
        except (TimeoutError, aiohttp.ClientError, OSError):
            return None
        except ValueError as e:  # not JSON, not Prometheus text
            self.none = NoMetrics(f"its answer could not be read ({type(e).__name__})")
            return self.none

    async def _read_openai(self) -> Reading | NoMetrics:
        status, text = await self._get("/metrics")
        reading = parse_prometheus(text) if status == 200 else None
        if self._slots is not False:
            slots = await self._read_slots()
            if slots is not None:
                if reading is None:
                    return slots
                reading.slots = slots.slots
                reading.running = reading.running if reading.running is not None else slots.running
        if reading is not None:
            return reading
        said = f"GET /metrics answered {status}" if status != 200 else "/metrics has none"
        self.none = NoMetrics(f"{said} (of vLLM's, SGLang's or llama.cpp's metrics)")
        return self.none

    async def _read_slots(self) -> Reading | None:
        status, text = await self._get("/slots")
        try:
            found = parse_slots(json.loads(text)) if status == 200 else None
        except ValueError:
            found = None
        self._slots = found is not None
        return found
