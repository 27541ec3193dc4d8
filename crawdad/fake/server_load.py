"""What a fake server tells of its own load, in its real counterpart's format, following what the
fake is doing: vLLM's Prometheus `/metrics` (new names, or vLLM 0.8's `gpu_*` ones), llama.cpp's
`/metrics` (`--metrics`) and `/slots`. Ollama's `/api/ps` is in ollama_app.py.

- running / waiting: requests in a slot and requests queued for one (`LatencyModel.capacity`
  slots per model);
- KV cache: the context tokens (prompt plus reply) of the running requests over
  `LatencyModel.kv_cache_tokens` (default 4,096 per slot), at most 1;
- prefix cache: each prompt is cut into blocks of `BLOCK_CHARS` characters, each block keyed by
  the whole text up to its end (a hash chain, as vLLM keys its blocks); a query counts the
  prompt's tokens, a hit the tokens of its leading blocks already seen (the last
  `PREFIX_BLOCKS` blocks are kept);
- token counters: prompt and generated tokens of every request admitted.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from crawdad.fake.latency import Scheduler

MetricsStyle = Literal["vllm", "vllm-0.8", "llamacpp", "none"]
BLOCK_CHARS = 64
PREFIX_BLOCKS = 200_000
DEFAULT_KV_PER_SLOT = 4096


@dataclass
class _ModelLoad:
    kv_tokens: int = 0
    prompt_tokens: int = 0
    generation_tokens: int = 0
    prefix_queries: int = 0
    prefix_hits: int = 0
    tasks: int = 0


@dataclass
class ServerLoad:
    """The fake's counters and simulated caches, per model."""

    scheduler: Scheduler
    models: dict[str, _ModelLoad] = field(default_factory=dict)
    _blocks: OrderedDict[bytes, None] = field(default_factory=OrderedDict)

    @property
    def kv_capacity(self) -> int:
        m = self.scheduler.model
        return m.kv_cache_tokens or m.capacity * DEFAULT_KV_PER_SLOT

    def of(self, model: str) -> _ModelLoad:
        return self.models.setdefault(model, _ModelLoad())

    def admit(
        self, model: str, prompt: str, prompt_tokens: int, reply_tokens: int
    ) -> tuple[int, int]:
        """A request took a slot: count it, look its prompt up in the prefix cache; (the tokens
        it holds in the KV cache (give them back with `release`), the tokens of its prompt the
        prefix cache holds: a real server does not process those again)."""
        load = self.of(model)
        load.tasks += 1
        load.prompt_tokens += prompt_tokens
        load.generation_tokens += reply_tokens
        load.prefix_queries += prompt_tokens
        cached = self._lookup(model, prompt, prompt_tokens)
        load.prefix_hits += cached
        held = prompt_tokens + reply_tokens
        load.kv_tokens += held
        return held, cached

    def release(self, model: str, held: int) -> None:
        self.of(model).kv_tokens -= held

    def _lookup(self, model: str, prompt: str, prompt_tokens: int) -> int:
        chain = hashlib.blake2b(model.encode(), digest_size=16)
        matched, leading = 0, True
        for start in range(0, len(prompt) - BLOCK_CHARS + 1, BLOCK_CHARS):
            chain.update(prompt[start : start + BLOCK_CHARS].encode())
            key = chain.digest()
            if leading and key in self._blocks:
                matched += BLOCK_CHARS
                self._blocks.move_to_end(key)
                continue
            leading = False
            self._blocks[key] = None
            if len(self._blocks) > PREFIX_BLOCKS:
                self._blocks.popitem(last=False)
        return prompt_tokens * matched // max(1, len(prompt))

    def running(self, model: str) -> int:
        return self.scheduler.active(model)

    def waiting(self, model: str) -> int:
        return self.scheduler.waiting(model)

    def kv_usage(self, model: str) -> float:
        return min(1.0, self.of(model).kv_tokens / self.kv_capacity)


class _Collector:
    def __init__(self, load: ServerLoad, names: list[str], style: MetricsStyle) -> None:
        self.load, self.names, self.style = load, names, style

    def collect(self) -> Iterator[Metric]:
        if self.style == "llamacpp":
            yield from self._llamacpp()
        else:
            yield from self._vllm(old=self.style == "vllm-0.8")

    def _vllm(self, old: bool) -> Iterator[Metric]:
        labels = ["model_name", "engine"]
        load = self.load

        def gauge(name: str, doc: str, value: Any) -> GaugeMetricFamily:
            family = GaugeMetricFamily(name, doc, labels=labels)
            for model in self.names:
                family.add_metric([model, "0"], float(value(model)))
            return family

        def counter(name: str, doc: str, value: Any) -> CounterMetricFamily:
            family = CounterMetricFamily(name, doc, labels=labels)
            for model in self.names:
                family.add_metric([model, "0"], float(value(model)))
            return family

        yield gauge(
            "vllm:num_requests_running",
            "Number of requests in model execution batches.",
            load.running,
        )
        yield gauge(
            "vllm:num_requests_waiting", "Number of requests waiting to be processed.", load.waiting
        )
        if old:
            yield gauge(
                "vllm:gpu_cache_usage_perc",
                "GPU KV-cache usage. 1 means 100 percent usage.",
                load.kv_usage,
            )
        else:
            yield gauge(
                "vllm:kv_cache_usage_perc",
                "KV-cache usage. 1 means 100 percent usage.",
                load.kv_usage,
            )
        prefix = "vllm:gpu_prefix_cache" if old else "vllm:prefix_cache"
        yield counter(
            f"{prefix}_queries",
            "Prefix cache queries, in terms of number of queried tokens.",
            lambda m: load.of(m).prefix_queries,
        )
        yield counter(
            f"{prefix}_hits",
            "Prefix cache hits, in terms of number of cached tokens.",
            lambda m: load.of(m).prefix_hits,
        )
        yield counter(
            "vllm:prompt_tokens",
            "Number of prefill tokens processed.",
            lambda m: load.of(m).prompt_tokens,
        )
        yield counter(
            "vllm:generation_tokens",
            "Number of generation tokens processed.",
            lambda m: load.of(m).generation_tokens,
        )

    def _llamacpp(self) -> Iterator[Metric]:
        load = self.load
        total = {k: sum(getattr(load.of(m), k) for m in self.names) for k in _COUNTERS}
        yield CounterMetricFamily(
            "llamacpp:prompt_tokens", "Number of prompt tokens processed.", total["prompt_tokens"]
        )
        yield CounterMetricFamily(
            "llamacpp:tokens_predicted",
            "Number of generation tokens processed.",
            total["generation_tokens"],
        )
        yield GaugeMetricFamily(
            "llamacpp:kv_cache_usage_ratio",
            "KV-cache usage. 1 means 100 percent usage.",
            max((load.kv_usage(m) for m in self.names), default=0.0),
        )
        yield GaugeMetricFamily(
            "llamacpp:kv_cache_tokens",
            "KV-cache tokens.",
            sum(load.of(m).kv_tokens for m in self.names),
        )
        yield GaugeMetricFamily(
            "llamacpp:requests_processing",
            "Number of requests processing.",
            sum(load.running(m) for m in self.names),
        )
        yield GaugeMetricFamily(
            "llamacpp:requests_deferred",
            "Number of requests deferred.",
            sum(load.waiting(m) for m in self.names),
        )


_COUNTERS = ("prompt_tokens", "generation_tokens")


def metrics_text(load: ServerLoad, names: list[str], style: MetricsStyle) -> bytes:
    """The page a real server of `style` serves at /metrics (Prometheus text format 0.0.4)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(load, names, style))  # type: ignore[arg-type]
    return generate_latest(registry)


def slots_json(load: ServerLoad, names: list[str], n_ctx: int) -> list[dict[str, Any]]:
    """llama.cpp's /slots: one entry per slot, the first ones busy with the running requests."""
    busy = sum(load.running(m) for m in names)
    slots = load.scheduler.model.capacity
    return [
        {
            "id": i,
            "id_task": -1 if i >= busy else i,
            "n_ctx": n_ctx,
            "speculative": False,
            "is_processing": i < busy,
            "params": {"n_predict": -1, "temperature": 0.8, "top_k": 40, "top_p": 0.95},
            "next_token": {"has_next_token": i < busy, "n_remain": -1, "n_decoded": 0},
        }
        for i in range(slots)
    ]
