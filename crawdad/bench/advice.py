"""What a bench's figures mean, and what to change: the verdict and concrete settings.

The rules, in order, for the crawdad run that generated the most tokens per second:

- the server's own metrics over the run say it was saturated (requests waiting in at least half
  of the samples, or its KV cache full in at least half): the server is the bottleneck, whatever
  the figures below say. More concurrency would only lengthen its queue, so none is suggested;
  `max_in_flight` about the requests it ran at once keeps the rest waiting in crawdad, where
  the debates furthest behind go first;
- the server's ceiling is the best tokens/s of the sweep; its knee is the smallest P that gets
  0.9 of that. A ceiling still rising at the largest P means the server can take more at once.
- crawdad within 0.9 of the ceiling (the same-work ceiling where the bench measured one, else
  the first-turn sweep's): the server is the bottleneck (server flags, replicas).
- crawdad below that with its process near one core busy (0.8 or more; its event loop runs on
  one): crawdad is the bottleneck (streaming off for the agents, or several processes).
- crawdad below that with fewer requests in flight than the knee on average: too few debates
  in flight (a higher concurrency, a cap per server).
- otherwise: the debates' own structure (turns one after another, extractor calls between
  them); more concurrency with a cap lets the debates end together.

The suggested concurrency puts about 1.25 x the knee in flight, from the requests in flight per
debate crawdad was seen to keep; `max_in_flight` is about 1.25 x the knee per server.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from crawdad.bench.meter import CrawdadResult, LoadResult
from crawdad.config import RunConfig
from crawdad.run.server_series import KIND_LABEL, MIN_SAMPLES, WAITING_BOUND, ServerFigures

SERVER_BOUND = 0.9  # of the ceiling
BUSY_CORE = 0.8  # cores of crawdad's process that count as "one core, full"
KNEE = 0.9  # of the best ceiling


@dataclass
class Advice:
    verdict: str
    suggestions: list[str] = field(default_factory=list)
    bottleneck: str = "unknown"  # "server", "crawdad", "concurrency", "structure", "unknown"
    knee: int | None = None
    concurrency: int | None = None
    max_in_flight: int | None = None
    fraction: float | None = None  # crawdad's best tokens/s over the ceiling
    same_load: float | None = None  # ... over the ceiling with as many requests in flight
    same_work: float | None = None  # ... over the load generator replaying its own requests


def knee_of(ceiling: list[LoadResult]) -> tuple[int | None, bool]:
    """(the smallest P within KNEE of the best tokens/s, whether it was still rising at the
    largest P of the sweep)."""
    rates = [(c.parallel, c.window.tokens_per_second) for c in ceiling]
    best = max((r for _, r in rates), default=0.0)
    if best <= 0:
        return None, False
    knee = min(p for p, r in rates if r >= KNEE * best)
    rising = len(rates) == 1 or (rates[-1][1] == best and rates[-1][1] >= 1.1 * rates[-2][1])
    return knee, rising


def best_ceiling(ceiling: list[LoadResult]) -> float:
    return max((c.window.tokens_per_second for c in ceiling), default=0.0)


def ceiling_at(ceiling: list[LoadResult], in_flight: float) -> float:
    """The ceiling with `in_flight` requests in flight on average: the sweep's points joined by
    straight lines (through zero below the first, flat past the last)."""
    points = sorted((c.window.in_flight, c.window.tokens_per_second) for c in ceiling)
    points = [(x, y) for x, y in points if x > 0]
    if not points:
        return 0.0
    x0, y0 = 0.0, 0.0
    for x1, y1 in points:
        if in_flight <= x1:
            return y0 + (y1 - y0) * (in_flight - x0) / (x1 - x0) if x1 > x0 else y1
        x0, y0 = x1, y1
    return points[-1][1]


def same_work_ceiling(run: CrawdadResult) -> float:
    """The tokens/s of the load generator replaying `run`'s own requests, at the mean number
    in flight crawdad kept while it sent them. The replay keeps a whole number in flight (the
    mean rounded up), less at its tail, so its mean differs from crawdad's by about a request:
    its rate is scaled by the ratio of the two means (the server's rate per request in flight
    barely moves over one request); 0: not measured."""
    if run.same_work is None or run.work_window is None:
        return 0.0
    replay = run.same_work.window
    if replay.in_flight <= 0:
        return 0.0
    return replay.tokens_per_second * run.work_window.in_flight / replay.in_flight


def same_work_share(run: CrawdadResult) -> float | None:
    """crawdad's tokens/s over the same requests (`work_window`) over its same-work ceiling's
    (None: not measured, or no tokens)."""
    work = same_work_ceiling(run)
    if work <= 0 or run.work_window is None:
        return None
    return run.work_window.tokens_per_second / work


def _nice(n: float) -> int:
    """Up to a round number: 1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128, ..."""
    n = max(1, math.ceil(n))
    steps = [1, 2, 4, 8, 12, 16, 24]
    for s in steps:
        if n <= s:
            return s
    power = 32
    while True:
        if n <= power:
            return power
        if n <= power * 3 // 2:
            return power * 3 // 2
        power *= 2


def server_flags(config: RunConfig, slots: int) -> str:
    backends = {a.backend for a in config.agents}
    flags = []
    if "ollama" in backends:
        flags.append(f"Ollama: OLLAMA_NUM_PARALLEL={slots}")
    if "openai" in backends:
        flags.append(
            f"llama.cpp: --parallel {slots} (and --ctx-size {slots} x the context one request "
            f"needs); vLLM: --max-num-seqs {slots}"
        )
    return "; ".join(flags)


KV_FULL_BOUND = 0.5  # share of the samples with the KV cache full: the server was saturated


def saturated(servers: list[ServerFigures]) -> list[ServerFigures]:
    """The servers whose own metrics say they were saturated over a phase: requests waiting in
    at least WAITING_BOUND of the samples, or the KV cache full in at least KV_FULL_BOUND."""
    return [
        s
        for s in servers
        if s.samples >= MIN_SAMPLES
        and (
            (s.waiting_share is not None and s.waiting_share >= WAITING_BOUND)
            or (s.kv_full_share is not None and s.kv_full_share >= KV_FULL_BOUND)
        )
    ]


def _saturation_words(s: ServerFigures) -> str:
    label = f"the {KIND_LABEL.get(s.kind, s.kind)} server at {s.url}"
    said = []
    if s.waiting_share is not None and s.waiting_share >= WAITING_BOUND:
        said.append(f"requests waiting in {s.waiting_share:.0%} of the samples")
    if s.kv_full_share is not None and s.kv_full_share >= KV_FULL_BOUND:
        said.append(f"its KV cache full in {s.kv_full_share:.0%} of them")
    return f"{label} had {' and '.join(said)} ({s.running_mean:.1f} running on average)"


def usable(ceiling: list[LoadResult]) -> list[LoadResult]:
    """The sweep's rows whose every request was counted (none cut after the drain), or all of
    them when none was."""
    return [c for c in ceiling if c.complete] or ceiling


def advise(config: RunConfig, ceiling: list[LoadResult], runs: list[CrawdadResult]) -> Advice:
    errors = [e for c in ceiling for e in c.errors][:1]
    ceiling = usable(ceiling)
    knee, rising = knee_of(ceiling)
    if knee is None:
        return Advice(
            "no figures: the load generator got no generated tokens from the servers"
            + (f" ({errors[0]})" if errors else ""),
            ["check the servers with `crawdad doctor` and their logs, then run the bench again"],
        )
    best = best_ceiling(ceiling)
    top = max(ceiling, key=lambda c: c.parallel)
    endpoints = len({u for a in config.agents for u in a.base_urls})
    cap = math.ceil(1.25 * knee / endpoints)
    suggestions: list[str] = []
    if rising:
        suggestions.append(
            f"The server's ceiling still rose at P={top.parallel} (the largest of the sweep): "
            f"it can take more at once. Measure again with a larger --parallel, and check that "
            f"the server lets that many run together ({server_flags(config, 2 * top.parallel)})."
        )
    else:
        suggestions.append(
            f"The server gains little past P={knee} requests in flight "
            f"({best:,.0f} tok/s at best): it needs no more slots than that "
            f"({server_flags(config, _nice(knee))}); each slot costs KV-cache memory."
        )
    if not runs:
        return Advice(
            f"the servers' ceiling is {best:,.0f} generated tokens/s, reached from P={knee}; "
            "no crawdad run was measured",
            suggestions,
            knee=knee,
        )
    run = max(runs, key=lambda r: r.window.tokens_per_second)
    fraction = run.window.tokens_per_second / best
    same = ceiling_at(ceiling, run.window.in_flight)
    same_load = run.window.tokens_per_second / same if same > 0 else None
    same_work = same_work_share(run)
    per_debate = run.window.in_flight / run.concurrency if run.concurrency else 0.0
    wanted = _nice(1.25 * knee / per_debate) if per_debate > 0 else _nice(4 * knee)
    concurrency = max(wanted, _nice(2 * knee))
    share = same_work if same_work is not None else fraction
    of = "the same-work ceiling" if same_work is not None else "the first-turn ceiling"
    at = f"crawdad at concurrency {run.concurrency} reached {share:.2f} of {of}"
    full = saturated(run.servers)
    if full:
        bottleneck = "server"
        verdict = (
            "the model server is the bottleneck: by its own metrics, "
            + "; ".join(_saturation_words(s) for s in full)
            + f", with crawdad at concurrency {run.concurrency} ({share:.2f} of {of}, "
            f"{run.cores:.2f} of a core busy)."
        )
        running = max(s.running_mean for s in full)
        cap = max(1, min(cap, math.ceil(running)))
        concurrency = run.concurrency
        suggestions.append(
            "More concurrency would only lengthen the server's queue: keep concurrency = "
            f"{run.concurrency} or less, and set max_in_flight = {cap} on each agent and the "
            "extractor (about what the server ran at once): the requests beyond it then wait "
            "in crawdad, where the debates furthest behind go first. For more throughput the "
            "server must do more: more replicas (list each in base_urls), more KV cache, or a "
            "smaller or quantized model."
        )
    elif share >= SERVER_BOUND:
        bottleneck = "server"
        verdict = f"the model server is the bottleneck: {at}."
        suggestions.append(
            "For more throughput, the server must do more: more slots if its ceiling still "
            "rose, more replicas (list each in base_urls), or a smaller or quantized model."
        )
    elif run.cores >= BUSY_CORE:
        bottleneck = "crawdad"
        verdict = (
            f"crawdad is the bottleneck: {at}, with its process {run.cores:.2f} cores busy "
            f"({run.cpu_ms_per_token:.3f} ms of CPU per generated token)."
        )
        suggestions += [
            "Set stream = false on the agents: a streamed token costs crawdad about ten times "
            "the CPU of a whole answer (the loop guard and turn budget then no longer watch "
            "the stream: max_tokens bounds a looping answer).",
            "Or split the questions over several crawdad processes, each with its own --out "
            "and --range (0-4999, 5000-), against the same servers.",
        ]
    elif run.window.in_flight < 0.8 * knee:
        bottleneck = "concurrency"
        verdict = (
            f"too few requests in flight: {at}, keeping {run.window.in_flight:.1f} requests in "
            f"flight on average where the server needs about {knee}"
            + (
                f" (with as many in flight, the load generator got {same:,.0f} tok/s with "
                f"first-turn prompts: crawdad {same_load:.2f} of that)."
                if same_load is not None
                else "."
            )
        )
    else:
        bottleneck = "structure"
        verdict = (
            f"neither is saturated: {at} with {run.window.in_flight:.1f} requests in flight; "
            "the gap is the debates' structure (each waits for its turns and extractions)."
        )
    if not full:
        suggestions.append(
            f"Use concurrency = {concurrency} (about {per_debate:.2f} requests in flight per "
            f"debate were seen) and max_in_flight = {cap} on each agent and the extractor"
            + (f" ({endpoints} servers)" if endpoints > 1 else "")
            + ": the requests beyond the server's slots then wait in crawdad, where the debates "
            "furthest behind go first."
        )
    suggestions += _server_metrics_advice(run, share)
    if run.finished_all:
        suggestions.append(
            f"The crawdad run at concurrency {run.concurrency} finished its questions before "
            "its window closed, so its figure includes the run's tail: use more --questions."
        )
    return Advice(
        verdict,
        suggestions,
        bottleneck=bottleneck,
        knee=knee,
        concurrency=concurrency,
        max_in_flight=cap,
        fraction=fraction,
        same_load=same_load,
        same_work=same_work,
    )


def _server_metrics_advice(run: CrawdadResult, fraction: float) -> list[str]:
    """What the servers' own metrics say of the best crawdad phase: a KV cache full, or a queue
    empty at the ceiling."""
    out = []
    full = saturated(run.servers)  # already said in the verdict
    for s in run.servers:
        if s.samples < 3:
            continue
        label = f"the {KIND_LABEL.get(s.kind, s.kind)} server at {s.url}"
        if s.kv_full_share is not None and s.kv_full_share >= 0.5:
            out.append(
                f"By its own metrics, {label} had its KV cache full in {s.kv_full_share:.0%} of "
                f"the samples at concurrency {run.concurrency}: more requests cannot run "
                "together there. Give it more KV cache (vLLM: a higher --gpu-memory-utilization "
                "or a shorter --max-model-len) for more to run at once."
            )
        elif fraction >= SERVER_BOUND and s.waiting_share is not None and s.waiting_share <= 0.1:
            room = f", its KV cache at most {s.kv_max:.0%} full" if s.kv_max is not None else ""
            out.append(
                f"By its own metrics, {label} had an empty queue at the ceiling ({s.running_mean:.1f} "
                f"running on average{room}): what bounds it is how many it runs at once (vLLM: "
                "--max-num-seqs; llama.cpp: -np), which the KV cache "
                + (
                    "leaves room to raise."
                    if s.kv_max is not None and s.kv_max < 0.8
                    else "may not allow raising."
                )
            )
        elif s.waiting_share is not None and s.waiting_share >= WAITING_BOUND and s not in full:
            out.append(
                f"By its own metrics, {label} had requests waiting in {s.waiting_share:.0%} of "
                f"the samples at concurrency {run.concurrency}: it was busy with all it could run."
            )
    return out
