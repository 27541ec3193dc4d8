"""`crawdad bench`: is the GPU server or crawdad the bottleneck, and what concurrency to use.

Against the servers of a config it measures, one phase after another, each for a window of
`seconds`: (a) the servers' first-turn ceiling, with the load generator sending first-turn
prompts at each P of a sweep (`loadgen.py`), (b) a short crawdad run at each concurrency asked
for (the normal runner, the config's protocol, prompts and streaming, into the bench folder),
with crawdad's own CPU per generated token, and (c) after each crawdad run, its same-work
ceiling: the load generator replaying that run's own requests (prompts, streaming, max_tokens,
structured output) with as many in flight as the run kept on average. "Of ceiling" is crawdad
over (c): a minimal client doing exactly its work.

Every phase starts on idle servers: before it, and before the bench ends, the bench waits
(at most `drain` seconds) until the servers' own metrics say nothing runs or waits
(`idle.py`); each row says how long that took. The figures go to BENCH/bench.json and
BENCH/bench.txt, and the suggestion comes from `advice.py`. Nothing is written outside the
bench folder.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import json
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from crawdad import __version__
from crawdad.backends import ChatRequest, ModelPool
from crawdad.bench.advice import Advice, advise, ceiling_at, same_work_share, usable
from crawdad.bench.idle import Idle, wait_for_idle
from crawdad.bench.loadgen import (
    cpu_seconds,
    generate_load,
    load_pools,
    load_targets,
    replay_targets,
)
from crawdad.bench.meter import CrawdadResult, LoadResult, RequestLog, meter_pools, work_window
from crawdad.config import RunConfig
from crawdad.data.questions import Dataset
from crawdad.doctor import DoctorReport
from crawdad.errors import ConfigError, CrawdadError
from crawdad.run.runner import (
    build_setup,
    check_servers_of,
    make_job,
    manifest_for,
    pools_of,
    run_jobs,
)
from crawdad.run.server_series import figures_of
from crawdad.run.store import RunStore, make_writable_folder
from crawdad.safe_files import write_file

RESULT_FILE = "bench.json"
TICK_SECONDS = 0.5  # the progress line's refresh
DRAIN_POLL_SECONDS = 0.1  # after the window: how often the phase looks for its last answers
TEXT_FILE = "bench.txt"


@dataclass
class BenchResult:
    servers: list[str]  # "backend model url", one per agent server
    questions: int  # the crawdad runs'
    load_questions: int  # the load generator's
    seconds: float
    max_tokens: list[int]
    ceiling: list[LoadResult]
    crawdad: list[CrawdadResult]
    advice: Advice
    out: str
    final_wait: float = 0.0  # seconds waited at the end for the servers to drain
    final_idle: bool = True  # ... and whether they did within the bound
    created_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat())
    crawdad_version: str = __version__

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        rows: list[LoadResult | CrawdadResult] = [*self.ceiling, *self.crawdad]
        dumps = data["ceiling"] + data["crawdad"]
        for run, dumped in zip(self.crawdad, data["crawdad"], strict=True):
            if run.same_work is not None:
                rows.append(run.same_work)
                dumps.append(dumped["same_work"])
        for row, dumped in zip(rows, dumps, strict=True):
            dumped["tokens_per_second"] = row.window.tokens_per_second
            dumped["requests_per_second"] = row.window.requests_per_second
            dumped["cpu_ms_per_token"] = row.cpu_ms_per_token
            if isinstance(row, CrawdadResult):
                dumped["cores"] = row.cores
        return data


def parse_levels(text: str, flag: str) -> list[int]:
    """'8,32,64' -> [8, 32, 64]: whole numbers from 1 to 4096, each once, in order."""
    try:
        levels = [int(p) for p in text.replace(" ", "").split(",") if p]
    except ValueError:
        levels = []
    if not levels or any(not 1 <= n <= 4096 for n in levels):
        raise ConfigError(
            f"{flag} {text!r}: give whole numbers from 1 to 4096, separated by commas, as in "
            f"{flag} 8,32,64"
        )
    return sorted(set(levels))


def split_items(dataset: Dataset) -> tuple[Dataset, Dataset]:
    """(the crawdad runs' questions, the load generator's): the first half and the rest."""
    qs = dataset.questions
    if len(qs) < 2:
        return dataset, dataset
    half = (len(qs) + 1) // 2

    def part(items: list[Any]) -> Dataset:
        info = dataset.info.model_copy(
            update={"n_selected": len(items), "selected_ids": [str(q.question_id) for q in items]}
        )
        return Dataset(questions=items, info=info)

    return part(qs[:half]), part(qs[half:])


def rotated(dataset: Dataset, k: int, n: int) -> Dataset:
    """The questions of the k-th of n crawdad phases: the list begun at its k-th n-th, so that
    each phase opens on questions the phases before it did not start with (their first prompts
    would be in the server's prompt cache, and their first turns cheap)."""
    qs = dataset.questions
    cut = k * len(qs) // n
    if not cut:
        return dataset
    items = qs[cut:] + qs[:cut]
    info = dataset.info.model_copy(update={"selected_ids": [str(q.question_id) for q in items]})
    return Dataset(questions=items, info=info)


def default_levels(concurrency: int) -> list[int]:
    """The sweep when none is given: a quarter of the config's concurrency up to twice it."""
    return sorted(
        {max(1, concurrency // 4), max(1, concurrency // 2), concurrency, 2 * concurrency}
    )


def default_out(now: datetime | None = None) -> Path:
    return Path("runs") / f"bench-{(now or datetime.now()).strftime('%Y%m%d-%H%M%S')}"


def check_out(out: Path) -> None:
    """A new folder, or an empty one: the bench's runs must start from nothing (a run folder
    resumed would skip its finished debates and measure nothing)."""
    if out.exists() and not out.is_dir():
        raise CrawdadError(f"--out {out} is a file: give a new folder")
    if out.is_dir() and any(out.iterdir()):
        raise CrawdadError(
            f"--out {out} is not empty: give a new folder (each bench starts its runs afresh)"
        )


class PhaseBar:
    """One tqdm bar per phase over its window's seconds, with the figures so far."""

    def __init__(self, label: str, seconds: float, enabled: bool) -> None:
        self.bar = tqdm(
            total=round(seconds),
            desc=label,
            unit="s",
            disable=not enabled,
            dynamic_ncols=True,
            bar_format="{desc}: {percentage:3.0f}%|{bar}| {n:.0f}/{total} s{postfix}",
        )
        self.seconds = seconds

    def __call__(self, elapsed: float, log: RequestLog) -> None:
        first = log.first_start
        if first is None or self.bar.disable:
            return
        now = time.monotonic()
        w = log.window(first, min(now, first + self.seconds))
        note = f"{w.tokens_per_second:,.0f} tok/s, {len(log.running)} in flight"
        if elapsed > self.seconds:
            note += ", draining"
        self.bar.n = min(self.bar.total, round(elapsed))
        self.bar.set_postfix_str(note, refresh=True)

    def close(self) -> None:
        self.bar.n = self.bar.total
        self.bar.close()


async def crawdad_phase(
    config: RunConfig,
    dataset: Dataset,
    folder: Path,
    concurrency: int,
    seconds: float,
    servers: DoctorReport,
    *,
    drain: float = 60.0,
    tick: Callable[[float, RequestLog], None] | None = None,
) -> tuple[CrawdadResult, list[tuple[ModelPool, ChatRequest]]]:
    """A crawdad run at `concurrency` into `folder`, stopped once the window has closed and the
    requests it had in flight then are answered (or `drain` seconds have passed); and the
    requests it sent in the window, in order (the same-work ceiling replays them). The requests
    still in flight when it stops are cancelled: their connections closed, so that a server
    aborts the streamed ones (one that is not streamed may go on: the next phase waits)."""
    config = config.model_copy(update={"concurrency": concurrency})
    setup, gate = build_setup(config)
    log = RequestLog(record=True)
    meter_pools(pools_of(setup), log)
    store = RunStore(folder)
    try:
        scan = store.open(manifest_for(config, dataset, setup, servers, False))
        job = make_job(setup, store, scan, dataset.questions)
        cpu0 = cpu_seconds()
        start = time.monotonic()
        close = start + seconds
        # the servers' metrics, often enough for a phase of seconds (servers.jsonl in `folder`)
        every = min(config.server_metrics, max(0.2, seconds / 20))
        run = asyncio.create_task(
            run_jobs([job], gate, False, concurrency, None, metrics=(folder, every))
        )
        finished_all = False
        cut = 0
        ticked = start
        while not run.done():
            now = time.monotonic()
            if tick is not None and now - ticked >= TICK_SECONDS:
                ticked = now
                tick(now - start, log)
            if now >= close and (log.in_flight_since(close) == 0 or now >= close + drain):
                break
            # Woken at the close, for the progress line, and while draining often enough to see
            # the last answer: a wake-up costs crawdad's process CPU, which this phase measures.
            wait = close - now if now < close else DRAIN_POLL_SECONDS
            if tick is not None:
                wait = min(wait, TICK_SECONDS)
            await asyncio.wait([run], timeout=max(0.01, wait))
        in_window = bisect.bisect_left([s.start for s in log.spans], close)  # in start order
        if run.done():
            run.result()  # a run that stopped (servers gone, a full disk) says why
            finished_all = time.monotonic() < close
        else:
            cut = len(log.running)
            run.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await run
        end = time.monotonic()
        first = log.first_start or start
        result = CrawdadResult(
            concurrency=concurrency,
            window=log.window(first, min(close, end)),
            sent=log.sent,
            answered=log.answered,
            failed=log.failed,
            tokens=log.tokens,
            seconds=end - first,
            cpu_seconds=cpu_seconds() - cpu0,
            debates=job.summary.finished,
            cut=cut,
            errors=log.errors(),
            finished_all=finished_all,
            folder=str(folder),
            servers=figures_of(folder),
            longest=log.longest,
        )
        # The work the same-work ceiling replays: the requests sent in the window and answered,
        # timed from the first one's start to the last one's end.
        kept = [i for i in range(in_window) if log.spans[i].ok]
        result.work_window = work_window([log.spans[i] for i in kept])
        return result, [log.requests[i] for i in kept]
    finally:
        store.close()
        for pool in pools_of(setup):
            await pool.aclose()


class Settle:
    """The wait for idle servers before each phase (`idle.wait_for_idle`), with a progress bar
    or a line; off (`wait` False) it only reads what the servers are doing as the phase starts."""

    def __init__(
        self,
        config: RunConfig,
        bound: float,
        wait: bool,
        progress: bool,
        say: Callable[[str], None],
    ) -> None:
        self.config, self.bound, self.wait = config, bound, wait
        self.progress, self.say = progress, say
        # the wait for servers without metrics: the longest request so far, when the last phase
        # cut requests (a phase that cut none left nothing running)
        self.longest = self.due = 0.0

    async def __call__(self, before: str) -> Idle:
        if not self.wait:
            idle = await wait_for_idle(self.config, 0.0)
            idle.waited = 0.0  # one reading of what the servers were doing: no wait
            return idle
        bar: tqdm[Any] | None = None

        def tick(elapsed: float, load: dict[str, dict[str, float] | None]) -> None:
            nonlocal bar
            if not self.progress:
                return
            if bar is None:
                bar = tqdm(desc=f"servers draining before {before}", unit="s",
                           bar_format="{desc}: {elapsed}{postfix}", dynamic_ncols=True)  # fmt: skip
            busy = ", ".join(
                f"{url}: run {x['running']:.0f}"
                + (f" wait {x['waiting']:.0f}" if "waiting" in x else "")
                for url, x in load.items()
                if x is not None
            )
            bar.set_postfix_str(busy or "no metrics: waiting for the longest request's time")

        try:
            idle = await wait_for_idle(self.config, self.bound, self.due, tick)
        finally:
            if bar is not None:
                bar.close()
        if not self.progress and idle.waited >= 0.5:
            self.say(f"  waited {idle.waited:.1f} s for the servers to drain before {before}")
        if not idle.idle:
            self.say(
                f"  the servers were still busy after {idle.waited:.0f} s (the bound) before "
                f"{before}: {idle.servers}; that phase starts on a busy server"
            )
        return idle

    def note(self, row: LoadResult | CrawdadResult, idle: Idle) -> None:
        row.waited, row.at_start = idle.waited, idle.servers
        self.longest = max(self.longest, row.longest)
        self.due = self.longest if row.cut else 0.0


async def run_bench(
    config: RunConfig,
    dataset: Dataset,
    out: Path,
    *,
    parallel: list[int],
    concurrencies: list[int],
    seconds: float,
    progress: bool = True,
    drain: float | None = None,
    same_work: bool = True,
    wait_idle: bool = True,
    say: Callable[[str], None] = print,
) -> BenchResult:
    """The first-turn ceiling at each P of `parallel`, then crawdad at each of `concurrencies`,
    each followed by its same-work ceiling (`same_work`), in the new folder `out`. Each phase
    starts on idle servers (`wait_idle`; off only to show what it prevents). The crawdad runs
    take the first half of the questions and the load generator the second (all of them when
    there is one), so that no crawdad request finds its prompt in the server's cache because
    the load generator sent it; each crawdad run begins at another point of its half
    (`rotated`), and the load generator tags its prompts (`loadgen.unseen`) for the same
    reason."""
    check_out(out)
    servers = await check_servers_of(config)
    make_writable_folder(out)
    drain = drain if drain is not None else max(60.0, 2 * seconds)
    settle = Settle(config, max(60.0, 2 * seconds, drain), wait_idle, progress, say)
    own, generated = split_items(dataset)
    ceiling: list[LoadResult] = []
    pools = load_pools(config)
    try:
        targets = load_targets(config, generated.questions, pools)
        for p in parallel:
            idle = await settle(f"the first-turn ceiling at P={p}")
            bar = PhaseBar(f"ceiling P={p}", seconds, progress)
            try:
                ceiling.append(
                    await generate_load(
                        targets, p, seconds, seed=config.seed, drain=drain, tick=bar
                    )
                )
            finally:
                bar.close()
            settle.note(ceiling[-1], idle)
            if not progress:
                say(ceiling_line(ceiling[-1]))
    finally:
        for pool in pools:
            await pool.aclose()
    runs: list[CrawdadResult] = []
    for k, c in enumerate(concurrencies):
        idle = await settle(f"crawdad at C={c}")
        bar = PhaseBar(f"crawdad C={c}", seconds, progress)
        mine = rotated(own, k, len(concurrencies))
        try:
            run, sent = await crawdad_phase(
                config, mine, out / f"run-c{c}", c, seconds, servers, drain=drain, tick=bar
            )
        finally:
            bar.close()
        settle.note(run, idle)
        runs.append(run)
        if same_work and sent:
            run.same_work = await same_work_phase(config, run, sent, seconds, drain, settle)
        if not progress:
            say(crawdad_line(run, ceiling))
    last = await settle("the end of the bench")
    specs = {(a.backend, a.model, tuple(a.base_urls)) for a in config.agents}
    result = BenchResult(
        servers=[f"{b} {m} {' '.join(u)}" for b, m, u in sorted(specs)],
        questions=len(own.questions),
        load_questions=len(generated.questions),
        seconds=seconds,
        max_tokens=sorted({a.max_tokens for a in config.agents}),
        ceiling=ceiling,
        crawdad=runs,
        advice=advise(config, ceiling, runs),
        out=str(out),
        final_wait=last.waited,
        final_idle=last.idle,
    )
    write_file(out, RESULT_FILE, json.dumps(result.to_json(), indent=1, default=str))
    write_file(out, TEXT_FILE, "\n".join(report_lines(result)) + "\n")
    return result


async def same_work_phase(
    config: RunConfig,
    run: CrawdadResult,
    sent: list[tuple[ModelPool, ChatRequest]],
    seconds: float,
    drain: float,
    settle: Settle,
) -> LoadResult:
    """The load generator sending the crawdad phase's own requests (those of its window that were
    answered) once each, in their order, with as many in flight as crawdad kept while it sent
    them (rounded up: `advice.same_work_ceiling` brings it down to crawdad's mean); timed, as
    crawdad's `work_window`, from the first request's start to the last one's end."""
    assert run.work_window is not None
    parallel = max(1, math.ceil(run.work_window.in_flight - 0.05))
    idle = await settle(f"the same-work ceiling of C={run.concurrency}")
    targets, pools = replay_targets(sent, config)
    bar = PhaseBar(f"same work C={run.concurrency} (P={parallel})", seconds, settle.progress)
    try:
        result = await generate_load(
            targets, parallel, seconds + drain, seed=config.seed, tick=bar, once=True
        )
    finally:
        bar.close()
        for pool in pools:
            await pool.aclose()
    result.work = "same-work"
    settle.note(result, idle)
    return result


# --- the printout ---------------------------------------------------------------------------------


def _ms(value: float | None) -> str:
    return f"{value:.3f}" if value is not None else "-"


CEILING_HEAD = f"{'P':>6} {'tok/s':>9} {'req/s':>8} {'in flight':>9} {'answered':>8} {'failed':>6} {'CPU ms/tok':>10} {'waited s':>8}"
CRAWDAD_HEAD = f"{'C':>6} {'tok/s':>9} {'req/s':>8} {'in flight':>9} {'of ceiling':>10} {'1st-turn':>8} {'CPU cores':>9} {'CPU ms/tok':>10} {'debates':>7} {'waited s':>8}"


def ceiling_line(r: LoadResult) -> str:
    w = r.window
    return (
        f"{r.parallel:>6} {w.tokens_per_second:>9,.1f} {w.requests_per_second:>8.2f} "
        f"{w.in_flight:>9.1f} {r.answered:>8} {r.failed:>6} {_ms(r.cpu_ms_per_token):>10} "
        f"{r.waited:>8.1f}"
    )


def of_ceiling(r: CrawdadResult) -> float | None:
    """crawdad's tokens/s over its same-work ceiling's (None: not measured, or no tokens)."""
    return same_work_share(r)


def crawdad_line(r: CrawdadResult, ceiling: list[LoadResult]) -> str:
    w = r.window
    same = ceiling_at(usable(ceiling), w.in_flight)
    share = of_ceiling(r)
    first = f"{w.tokens_per_second / same:.2f}" if same > 0 else "-"
    return (
        f"{r.concurrency:>6} {w.tokens_per_second:>9,.1f} {w.requests_per_second:>8.2f} "
        f"{w.in_flight:>9.1f} {f'{share:.2f}' if share is not None else '-':>10} {first:>8} "
        f"{r.cores:>9.3f} {_ms(r.cpu_ms_per_token):>10} {r.debates:>7} {r.waited:>8.1f}"
    )


def report_lines(result: BenchResult) -> list[str]:
    lines = [
        f"crawdad bench {result.created_at[:19]}: {result.questions} questions for crawdad, "
        f"{result.load_questions} others for the load generator, windows of {result.seconds:g} s, "
        f"max_tokens {', '.join(map(str, result.max_tokens))}",
        *(f"  server: {s}" for s in result.servers),
        "",
        "First-turn ceiling (load generator: first-turn prompts only, not streamed, no",
        "extraction, P always in flight; 'waited s': for the servers to drain before it):",
        CEILING_HEAD,
        *(ceiling_line(r) for r in result.ceiling),
    ]
    for r in result.ceiling:
        if not r.complete:
            lines.append(
                f"  P={r.parallel}: {r.cut} requests were still unanswered after the drain and "
                "were cut: this row counts none of their tokens and is left out of the verdict "
                "(raise --seconds, or lower --parallel)"
            )
        lines += [f"  P={r.parallel} failed: {e}" for e in r.errors[:2]]
    if result.crawdad:
        lines += [
            "",
            "crawdad (the config's protocol, prompts and streaming; extractor requests included;",
            "'of ceiling': of its same-work ceiling below; '1st-turn': of the first-turn ceiling",
            "with as many requests in flight as crawdad kept):",
            CRAWDAD_HEAD,
            *(crawdad_line(r, result.ceiling) for r in result.crawdad),
        ]
        for c in result.crawdad:
            lines += [f"  C={c.concurrency} failed: {e}" for e in c.errors[:2]]
        replays = [(c, c.same_work) for c in result.crawdad if c.same_work is not None]
        if replays:
            lines += [
                "",
                "Same-work ceiling (load generator: each crawdad run's own requests, replayed in "
                "order,",
                "streamed as they were, P = the run's mean in flight):",
                f"{'C':>6} " + CEILING_HEAD,
                *(f"{c.concurrency:>6} " + ceiling_line(r) for c, r in replays),
            ]
            lines += [
                f"  C={c.concurrency}: {r.cut} replayed requests were cut after the drain"
                for c, r in replays
                if not r.complete
            ]
    lines += ["", f"Verdict: {result.advice.verdict}", "Suggestions:"]
    lines += [f"  - {s}" for s in result.advice.suggestions]
    end = f"waited {result.final_wait:.1f} s at the end for the servers to drain"
    if not result.final_idle:
        end += " (they were still busy when the bound ran out)"
    lines += ["", end]
    lines += [f"written: {Path(result.out) / RESULT_FILE}, {Path(result.out) / TEXT_FILE}"]
    return lines
