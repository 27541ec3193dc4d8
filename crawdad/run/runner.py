"""Many debates at once: concurrency, streaming records to disk, progress, clean interrupts."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import sys
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from crawdad import __version__
from crawdad.backends import ModelPool, make_backend
from crawdad.backends.schedule import ModelGate
from crawdad.config import ModelSpec, RunConfig, public_dump
from crawdad.data.questions import Dataset, Question
from crawdad.doctor import DoctorReport, diagnose, require_ready
from crawdad.errors import ConfigError, CrawdadError, StoreWriteError
from crawdad.prompts import load_prompts
from crawdad.protocols import DebateSetup, Participant, run_debate
from crawdad.records import ALONE, DebateRecord, RunManifest, StartedServer
from crawdad.run.progress_line import (
    BAR_MAX,
    LineState,
    ServerState,
    bar_room,
    legend,
    progress_line,
    uses_short_names,
)
from crawdad.run.progress_line import clock as clock_text
from crawdad.run.response_store import ResponseStore, SharedPool
from crawdad.run.scheduler import Scheduler, check_random_order, pool_of
from crawdad.run.server_series import ServerSampler
from crawdad.run.store import RunStore, Scan
from crawdad.run.watch import Watchdog, host_of, stall_note, stalls
from crawdad.scoring.scored import Accuracy, outcome
from crawdad.tasks import task_named
from crawdad.tools.registry import is_data

log = logging.getLogger("crawdad")


@dataclass
class RunSummary:
    """What a run did. Every figure is over the selected questions only: lines the folder holds
    for other questions (an earlier run with another selection) are counted in `outside`."""

    out: Path
    selected: int
    already_done: int
    finished: int = 0  # this session
    errored: int = 0  # this session
    correct: int = 0  # over the selected questions whose debate is finished
    unscored: int = 0  # of those, questions without an exact answer (a table of one's own)
    consensus: int = 0
    done_total: int = 0
    outside: int = 0  # questions with lines in the folder that are not in this selection
    outside_ids: list[str] = field(default_factory=list)  # those questions' ids
    unknown_ids: list[str] = field(default_factory=list)  # of those, the ones in no dataset
    tool_agents: list[str] = field(default_factory=list)  # the agents (and judge) given tools
    tool_calls: int = 0  # calls made in this session's debates
    errors: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0
    interrupted: bool = False
    switches: int = 0
    graphs: bool = False  # the answers are graphs: "correct" means the same edges as the truth
    decision: str | None = None  # a stopping rule's decision, in words: the rest is not run
    undecided: str | None = None  # a stopping rule that decided nothing: why, in words
    agents: int = 2  # debaters: with one, there is no consensus to report
    alone: bool = False  # agents that answer alone (`records.ALONE`): they never reach consensus
    servers: list[str] = field(default_factory=list)  # the servers' verdicts (server_series.py)

    @property
    def remaining(self) -> int:
        return self.selected - self.done_total

    def lines(self) -> list[str]:
        done = self.done_total
        out = [
            f"{done}/{self.selected} selected debates finished in {self.out} "
            f"({self.finished} this session in {self.seconds:.1f} s; {self.already_done} were already done)",
            self._score_line(),
        ]
        out += self._outside_lines()
        if self.tool_agents and self.finished and not self.tool_calls:
            one = len(self.tool_agents) == 1
            out.append(
                f"{', '.join(self.tool_agents)} {'has' if one else 'have'} tools, but no tool "
                f"call was made in the {self.finished} debates of this session. Against "
                "`crawdad fake-server`, start it with --tools (or --config FILE) so its models "
                "call them; with a real server, `crawdad doctor` says each agent's tool mode"
            )
        if self.errored:
            out.append(
                f"{self.errored} debates failed (recorded with their error; a resume retries them):"
            )
            out += [f"  {n} x {reason}" for reason, n in self.errors.most_common(5)]
        out += [f"servers: {line}" for line in self.servers]
        if self.undecided:
            out.append(self.undecided)
        if self.decision:
            left = f" ({self.remaining} questions not run)" if self.remaining else ""
            out.append(f"{self.decision}{left}")
        elif self.interrupted or self.remaining:
            out.append(f"{self.remaining} questions left: run the same command again to resume.")
        return out

    def _score_line(self) -> str:
        done, scored = self.done_total, self.done_total - self.unscored
        if not done:
            return "no debate of this selection is finished yet: no accuracy to report"
        if self.agents < 2:
            consensus = "consensus n/a (one agent)"
        elif self.alone:  # agents that never saw each other's answers cannot agree on one
            consensus = "no consensus to report (the agents answer alone)"
        else:
            consensus = f"consensus rate {self.consensus / done:.1%}"

        if self.graphs:
            return (
                f"graphs exactly right (the same edges as the truth) over these {done}: "
                f"{self.correct / done:.1%}, {consensus}; pair accuracy, SHD and NHD are in the "
                "report (crawdad analyze)"
            )
        if not scored:
            return (
                f"no exact answers to score these {done} against (questions of one's own): "
                f"{consensus}; the answers are in the report (crawdad analyze)"
            )
        if self.unscored:
            return (
                f"final accuracy over the {scored} of these {done} with an exact answer: "
                f"{self.correct / scored:.1%}; {consensus} over all {done}"
            )
        return f"final accuracy over these {done}: {self.correct / done:.1%}, {consensus}"

    def _outside_lines(self) -> list[str]:
        """The folder's lines for other questions: outside this selection, or in no question
        of the dataset (another dataset's, or the file changed), a few ids of each named."""
        unknown = set(self.unknown_ids)
        others = [i for i in self.outside_ids if i not in unknown]
        groups = [
            (self.outside - len(unknown), others, "outside this selection"),
            (len(unknown), sorted(unknown, key=_id_order), "the dataset does not have"),
        ]
        lines = []
        for n, ids, where in groups:
            if n <= 0:
                continue
            one = n == 1
            named = f" ({'id' if len(ids) == 1 else 'ids'} {_few(ids)})" if ids else ""
            lines.append(
                f"{n} {'debate' if one else 'debates'} in the folder {'is' if one else 'are'} "
                f"for {'a question' if one else 'questions'} {where}{named}; not counted"
            )
        return lines


def _roles(setup: DebateSetup) -> dict[str, Any]:
    return {**setup.agents, **({"judge": setup.judge} if setup.judge is not None else {})}


def _id_order(question_id: str) -> tuple[int, int | str]:
    return (0, int(question_id)) if question_id.isdigit() else (1, question_id)


def _few(ids: list[str], shown: int = 5) -> str:
    ordered = sorted(ids, key=_id_order)
    text = ", ".join(ordered[:shown])
    return text + (f" and {len(ordered) - shown} more" if len(ordered) > shown else "")


ServerKey = tuple[str, str, tuple[str, ...]]


def _specs(config: RunConfig) -> dict[str, ModelSpec]:
    specs: dict[str, ModelSpec] = {a.name: a for a in config.agents}
    specs["extractor"] = config.extractor
    if config.judge is not None:
        specs["judge"] = config.judge
    if config.grader is not None:
        specs["grader"] = config.grader
    return specs


def _server_key(spec: ModelSpec) -> ServerKey:
    return (spec.backend, spec.model, tuple(spec.base_urls))


def server_pools(configs: list[RunConfig], gate: ModelGate | None) -> dict[ServerKey, ModelPool]:
    """One pool per model and set of servers: roles that name the same model on the same base
    URLs (a model debating itself, the extractor on a debater's model, the variants of an
    experiment) share its pool, so its cap and in-flight counts are those of the server."""
    specs = [s for c in configs for s in _specs(c).values()]
    pools: dict[ServerKey, ModelPool] = {}
    for spec in specs:
        key = _server_key(spec)
        if key in pools:
            continue
        same = [s for s in specs if _server_key(s) == key]
        caps = [s.max_in_flight for s in same if s.max_in_flight]
        # The client's timeout is the longest; each request keeps its own (pool.py).
        pool_spec = spec.model_copy(
            update={
                "max_in_flight": min(caps) if caps else None,
                "timeout": max(s.timeout for s in same),
            }
        )
        pools[key] = ModelPool(
            pool_spec, functools.partial(make_backend, pool_spec), configs[0].retry, gate
        )
    return pools


def _guard_settings(config: RunConfig) -> str:
    """What of the protocol can end a response early: part of a shared response's key."""
    p = config.protocol
    return f"loop={p.loop_detection}:{p.loop_min_chars} budget={p.turn_time_budget}"


def _tool_specs(config: RunConfig) -> list[ModelSpec]:
    return [*config.agents, *([config.judge] if config.judge else [])]


def build_setup(
    config: RunConfig,
    simulated: bool = False,
    pools: dict[ServerKey, ModelPool] | None = None,
    responses: ResponseStore | None = None,
) -> tuple[DebateSetup, ModelGate | None]:
    """The participants of a run. An experiment passes the pools all its variants share, and
    its response store, through which every request of this variant goes."""
    gate = None
    task = task_named(config.task)
    prompts = load_prompts(config.prompt_source)
    if prompts.task not in getattr(task, "prompt_tasks", (task.name,)):
        raise ConfigError(
            f"prompt_set {prompts.name!r} is written for the {prompts.task} task, not for "
            f"{task.name}: use prompt_set = {task.prompt_set!r}, or a set whose set.toml says "
            f'task = "{task.name}"'
        )
    if config.protocol.kind == "judge" and task.answers is None:
        raise ConfigError(
            f"the judge protocol gives a yes/no verdict, and the {task.name} task's answers are "
            "open: use the crawdad, simultaneous or solo protocol"
        )
    if config.protocol.kind == "coding" and task.name != "discovery-graph":
        raise ConfigError(
            "the coding protocol runs discovery algorithms on a graph's data: use "
            f'task = "discovery-graph" (and prompt_set = "mac-coding"), not {task.name}'
        )
    data_agents = [s.model for s in _tool_specs(config) if is_data(list(s.tools))]
    if data_agents and not hasattr(task, "tool_context"):
        raise ConfigError(
            f"{', '.join(data_agents)}: the data tools compute over the question's table, and "
            f'{task.name} questions have none: set task = "cladder-data" (or '
            '"cladder-data-no-counts") and run on a folder that `crawdad data tables` wrote'
        )
    if config.protocol.prior_from is not None:  # MAC's hybrids: another system's graphs shown
        if task.name not in ("discovery-pairs", "discovery-graph"):
            raise ConfigError(
                f"protocol.prior_from gives a discovery task another system's graphs; the "
                f"{task.name} task has none"
            )
        folder = config.protocol.prior_from
        from crawdad.run.priors import load_priors
        from crawdad.tasks.discovery.prior import WithPrior

        task = WithPrior(task, load_priors(Path(folder)), folder)  # type: ignore[assignment]
    if pools is None:
        gate = ModelGate() if config.schedule == "grouped" else None
        pools = server_pools([config], gate)

    def participant(spec: ModelSpec) -> Participant:
        pool: Any = pools[_server_key(spec)]
        if responses is not None:
            pool = SharedPool(pool, responses, spec.backend, _guard_settings(config))
        return Participant(spec, pool)  # type: ignore[arg-type]

    setup = DebateSetup(
        agents={a.name: participant(a) for a in config.agents},
        extractor=participant(config.extractor),
        prompts=prompts,
        protocol=config.protocol,
        seed=config.seed,
        simulated=simulated,
        judge=participant(config.judge) if config.judge is not None else None,
        grader=participant(config.grader) if config.grader is not None else None,
        grader_template=config.grader.template if config.grader is not None else "grader",
        steps=config.scoring.steps,
        task=task,
        tool_limits=config.tool_limits,
    )
    if config.protocol.kind == "pipeline":
        from crawdad.protocols import pipeline

        pipeline.check(setup)
    if config.grader is not None:  # a missing or wrong grader template: refused before a request
        from crawdad.protocols.grading import grading_template

        grading_template(setup.prompts, config.grader.template)
    return setup, gate


def manifest_for(
    config: RunConfig,
    dataset: Dataset,
    setup: DebateSetup,
    servers: DoctorReport | None,
    simulated: bool,
    started: list[StartedServer] | None = None,
) -> RunManifest:
    """`servers`: the readiness check's report (None when the servers were not checked);
    `started`: the servers crawdad started for the run (their supervisor's records)."""
    return RunManifest(
        crawdad_version=__version__,
        created_at=datetime.now(UTC),
        config=public_dump(config),
        prompts=setup.prompts.versions()
        | (
            {config.grader.template: setup.prompts[config.grader.template].version}
            if config.grader
            else {}
        ),
        dataset=dataset.info,
        servers=servers.versions() if servers else {},
        served=servers.served(config) if servers else {},
        simulated=simulated or (servers is not None and servers.simulated),
        started=started or [],
    )


def pools_of(*setups: DebateSetup) -> list[ModelPool]:
    """Each server pool once (roles and experiment variants may share one)."""
    pools = []
    for setup in setups:
        pools += [p.pool for p in setup.agents.values()] + [setup.extractor.pool]
        pools += [p.pool for p in (setup.judge, setup.grader) if p is not None]
    # A variant's view through the response store is its server's pool.
    unwrapped = [p.pool if isinstance(p, SharedPool) else p for p in pools]
    return list({id(p): p for p in unwrapped}.values())


@dataclass
class Job:
    """One run folder's share of the work: a plain run has one, an experiment one per variant."""

    setup: DebateSetup
    store: RunStore
    todo: list[Question]
    summary: RunSummary
    name: str = ""  # the variant's name in an experiment
    order: list[str] = field(default_factory=list)  # every selected question's id, in run order


def make_job(
    setup: DebateSetup,
    store: RunStore,
    scan: Scan,
    questions: list[Question],
    name: str = "",
    known: frozenset[str] | None = None,
) -> Job:
    """`known`: every question id of the dataset, to tell the folder's lines for questions
    outside the selection from those for questions the dataset does not have."""
    missing = getattr(setup.task, "missing", None)  # a task shown a prior (WithPrior) has it
    gaps = missing(questions) if missing is not None else []
    if gaps:
        shown = ", ".join(gaps[:10]) + (f" ... ({len(gaps)} in all)" if len(gaps) > 10 else "")
        raise ConfigError(
            f"protocol.prior_from: {getattr(setup.task, 'folder', '')} has no graph for {shown}: "
            "run that system on the same graphs first (the same data and selection)"
        )
    selected_ids = {str(q.question_id) for q in questions}
    done_here = scan.finished & selected_ids
    outside = scan.questions() - selected_ids
    summary = RunSummary(
        out=store.path,
        selected=len(questions),
        already_done=len(done_here),
        done_total=len(done_here),
        correct=len(scan.correct_ids & selected_ids),
        unscored=len(scan.unscored_ids & selected_ids),
        consensus=len(scan.consensus_ids & selected_ids),
        tool_agents=[n for n, p in _roles(setup).items() if p.spec.tools],
        outside=len(outside),
        outside_ids=sorted(outside, key=_id_order),
        unknown_ids=sorted(outside - known, key=_id_order) if known is not None else [],
        graphs=setup.task.answers is None,
        agents=len(setup.agents),
        alone=setup.protocol.kind in ALONE,
    )
    todo = [q for q in questions if str(q.question_id) not in scan.finished]
    return Job(setup, store, todo, summary, name, [str(q.question_id) for q in questions])


class Progress:
    """The run's progress: one line per job that fits the terminal (`progress_line`): debates
    done of those selected, the rate and time left, the accuracy and consensus, tokens/s, and
    each server's requests (its own running and waiting counts where it publishes them, else
    crawdad's in flight; "full" when a 503 lowered its cap, "down" when set aside). One line per
    experiment variant; the last one carries the servers. Without a bar (`enabled` False), the
    same line is written every `heartbeat` seconds, so that a long run is never silent."""

    WINDOW = 30.0  # seconds of history behind the tokens/s and debates/s figures
    HEARTBEAT = 30.0  # seconds between lines without a bar

    def __init__(
        self,
        jobs: list[Job],
        enabled: bool,
        *,
        clock: Callable[[], float] = time.monotonic,
        say: Callable[[str], None] | None = None,
        heartbeat: float = HEARTBEAT,
    ) -> None:
        self.jobs = jobs
        self.enabled = enabled
        self.clock = clock
        self.say = say or (lambda line: tqdm.write(line, file=sys.stderr))
        self.heartbeat = heartbeat
        width = max((len(j.name) for j in jobs), default=0)
        self.labels = {id(job): job.name.ljust(width) for job in jobs}
        self.bars = {
            id(job): tqdm(
                total=job.summary.selected,
                initial=job.summary.already_done,
                bar_format="{desc}",  # the whole line is progress_line's, made to fit
                mininterval=math.inf,  # drawn by refresh() alone, with its figures current
                position=i if len(jobs) > 1 else None,
                disable=not enabled,
                dynamic_ncols=True,
            )
            for i, job in enumerate(jobs)
        }
        now = clock()
        self.done = {id(job): job.summary.already_done for job in jobs}
        self._counts: dict[int, deque[tuple[float, float]]] = {
            id(job): deque([(now, job.summary.already_done)]) for job in jobs
        }
        self._samples: deque[tuple[float, float]] = deque([(now, self._tokens())])
        self._start = self._last = self._beat = now
        self._legend = False
        self.sampler: ServerSampler | None = None  # the servers' own running/waiting, if read
        self.supervisor: Any | None = None  # the servers crawdad started: "restarting: KEY"
        self.stopped: Callable[[str], bool] = lambda name: False  # by a stopping rule

    def _tokens(self) -> int:
        return sum(j.setup.tokens[0] for j in self.jobs)

    def update(self, job: Job) -> None:
        self.done[id(job)] += 1
        self.bars[id(job)].update(1)
        now = self.clock()
        if self.enabled and (now - self._last >= 0.5 or self.done[id(job)] >= job.summary.selected):
            self.refresh()

    @classmethod
    def _per_second(cls, samples: deque[tuple[float, float]], now: float, value: float) -> float:
        """The rate of `value` over the last WINDOW seconds (`samples`: its history)."""
        samples.append((now, value))
        while len(samples) > 2 and now - samples[1][0] >= cls.WINDOW:
            samples.popleft()
        (t0, n0), (t1, n1) = samples[0], samples[-1]
        return (n1 - n0) / (t1 - t0) if t1 > t0 else 0.0

    def tokens_per_second(self, now: float) -> float:
        return self._per_second(self._samples, now, self._tokens())

    def servers(self, now: float) -> list[ServerState]:
        pools = pools_of(*(j.setup for j in self.jobs))
        flights: dict[str, int] = {}
        notes: dict[str, str] = {}
        for pool in pools:
            for e in pool.endpoints:
                host = host_of(e.url)
                flights[host] = flights.get(host, 0) + e.in_flight
                if e.held:
                    notes[host] = "restarting"
                elif not e.healthy(now):
                    notes[host] = "down"
                elif e.limited and host not in notes:
                    notes[host] = "full"
        said = self.sampler.counts(host_of) if self.sampler is not None else {}
        return [
            ServerState(host, n, *said[host], notes.get(host, ""))
            if host in said
            else ServerState(host, n, note=notes.get(host, ""))
            for host, n in flights.items()
        ]

    def state(self, job: Job, now: float, servers: bool) -> LineState:
        """What `job`'s line shows at `now` (`servers`: the line that carries them)."""
        s = job.summary
        done = max(1, s.done_total)  # the selected debates finished: the bar counts the same
        scored = s.done_total - s.unscored
        rate = self._per_second(self._counts[id(job)], now, self.done[id(job)])
        pools = pools_of(*(j.setup for j in self.jobs))
        return LineState(
            done=self.done[id(job)],
            selected=s.selected,
            label=self.labels[id(job)] if len(self.jobs) > 1 else "",
            rate=rate if now - self._start >= 1 else None,
            accuracy=Accuracy(s.correct, scored, s.unscored).value,
            consensus=s.consensus / done if s.agents > 1 and not s.alone and s.done_total else None,
            errors=s.errored,
            tokens_per_s=self.tokens_per_second(now) if servers else None,
            servers=self.servers(now) if servers else [],
            stalled=self._server_notes(pools, now) if servers else "",
            stopped=self.stopped(job.name),
        )

    def _server_notes(self, pools: list[ModelPool], now: float) -> str:
        """Requests that stall, and servers crawdad is restarting ("restarting: KEY (12 s)")."""
        restarting = self.supervisor.note() if self.supervisor is not None else ""
        return "; ".join(x for x in (stall_note(stalls(pools, now)), restarting) if x)

    def lines(self, now: float, width: int, bar: bool = True) -> list[str]:
        """Each job's line at `now`, in `width` columns."""
        last = self.jobs[-1]
        states = [self.state(job, now, job is last) for job in self.jobs]
        if not bar or len(states) == 1:
            return [progress_line(state, width, bar) for state in states]
        # an experiment's bars line up: one width for all, where every line has room for it
        room = bar_room([progress_line(state, width, bar=False) for state in states], width)
        return [progress_line(state, width, bar=min(room, BAR_MAX)) for state in states]

    def postfix(self, now: float) -> str:
        """The line of a plain run, as wide as it may be (for logs and tests)."""
        return progress_line(self.state(self.jobs[0], now, True), 1000, bar=False)

    def _say_legend(self, now: float, lines: list[str]) -> None:
        """Which server is s1, s2, ...: said once, when a line first names them so."""
        if not self._legend and any(uses_short_names(line) for line in lines):
            self._legend = True
            self.say(legend(self.servers(now)))

    def refresh(self) -> None:
        now = self.clock()
        self._last = now
        bars = [self.bars[id(job)] for job in self.jobs]
        width = bars[-1].format_dict.get("ncols") or 80  # the terminal's, as it is now
        lines = self.lines(now, width)
        self._say_legend(now, lines)
        for bar, line in zip(bars, lines, strict=True):
            bar.set_description_str(line, refresh=True)

    def beat(self) -> None:
        """Without a bar: the line, when `heartbeat` seconds have passed since the last."""
        now = self.clock()
        if now - self._beat < self.heartbeat:
            return
        self._beat = now
        took = clock_text(now - self._start)
        for line in self.lines(now, HEARTBEAT_WIDTH, bar=False):
            self.say(f"[{took}] {line}")

    async def tick(self, every: float = 1.0) -> None:
        """Keep the figures live while long debates run (the bar moves only as they finish);
        without a bar, the heartbeat."""
        while True:
            await asyncio.sleep(every)
            if self.enabled:
                self.refresh()
            else:
                self.beat()

    def close(self) -> None:
        if self.enabled:
            self.refresh()
        for bar in self.bars.values():
            bar.close()


HEARTBEAT_WIDTH = 160  # a heartbeat line is a log line: room for every field


Written = tuple["Job", DebateRecord]


async def _writer(
    queue: asyncio.Queue[Written | None],
    on_written: Callable[[Job, DebateRecord], None],
    on_failure: Callable[[CrawdadError], None],
    responses: ResponseStore | None = None,
) -> None:
    """Group commit: everything finished since the last fsync goes down in one write per run
    folder. A write that fails (a full disk) stops the run: nothing after it could be kept."""
    while True:
        item = await queue.get()
        batch = [item]
        while not queue.empty():
            batch.append(queue.get_nowait())
        done = [w for w in batch if w is not None]
        by_job: dict[int, tuple[Job, list[DebateRecord]]] = {}
        for job, record in done:
            by_job.setdefault(id(job), (job, []))[1].append(record)
        try:
            if responses is not None and done:
                await asyncio.to_thread(responses.sync)
            for job, records in by_job.values():
                await asyncio.to_thread(job.store.append, records)
                for r in records:
                    on_written(job, r)
        except (StoreWriteError, OSError) as e:
            on_failure(e if isinstance(e, StoreWriteError) else StoreWriteError(str(e)))
            return
        if None in batch:
            return


async def _watch(dog: Watchdog, halt: Callable[[RunStopped], None], log_stalls: bool) -> None:
    """Stop the run when a role has no server left; without a bar, log stalls as they start."""
    while True:
        await asyncio.sleep(dog.every)
        now = time.monotonic()
        if verdict := dog.verdict(now):
            halt(ServersStuck(verdict))
            return
        if log_stalls and (note := dog.new_stalls(now)):
            log.warning("%s", note)


def _most_running(supervisor: Any | None) -> dict[str, int]:
    """Each server crawdad started -> the most requests it can run at once, where known."""
    if supervisor is None:
        return {}
    return {
        s.base_url: most for s in supervisor.plan.servers if (most := s.most_running()) is not None
    }


async def _sample(sampler: ServerSampler) -> None:
    """The servers' metrics, sampled until the run ends; a failure here never stops the run."""
    try:
        await sampler.run()
    except asyncio.CancelledError:
        raise
    except Exception as e:  # a bug or a full disk: the run is worth more than its gauges
        log.warning("sampling the servers' metrics stopped: %s: %s", type(e).__name__, e)


async def run_debates(
    config: RunConfig,
    dataset: Dataset,
    out: Path,
    *,
    force: bool = False,
    progress: bool = True,
    simulated: bool = False,
    check_servers: bool = True,
    on_summary: Callable[[RunSummary], None] | None = None,
    stop: Any | None = None,
    plan: Any | None = None,
    keep_servers: bool = False,
) -> RunSummary:
    """Run (or resume) every selected question's debate, appending records to `out`. `stop`: a
    stopping rule (`crawdad.stopping.decide.Rule`, its `half_width` how closely): the run stops
    starting debates once its accuracy's confidence sequence is that narrow. Models with a
    `serve` table are served by servers crawdad starts (`plan`: a `crawdad.serving.base.Plan`
    made already) and stops at the end (`keep_servers`: left running).

    Exported as `crawdad.run_debates` (before 0.x it was `crawdad.run`, a name that the
    subpackage `crawdad.run` takes over once any of its modules is imported)."""
    from crawdad.run.served import served_run

    async with served_run(
        config, out, plan=plan, progress=progress, keep=keep_servers, questions=dataset.questions
    ) as (
        config,
        supervisor,
    ):
        return await _run_debates(
            config,
            dataset,
            out,
            force=force,
            progress=progress,
            simulated=simulated,
            check_servers=check_servers,
            on_summary=on_summary,
            stop=stop,
            supervisor=supervisor,
        )


async def _run_debates(
    config: RunConfig,
    dataset: Dataset,
    out: Path,
    *,
    force: bool,
    progress: bool,
    simulated: bool,
    check_servers: bool,
    on_summary: Callable[[RunSummary], None] | None,
    stop: Any | None,
    supervisor: Any | None,
) -> RunSummary:
    setup, gate = build_setup(config, simulated)
    servers: DoctorReport | None = None
    try:
        if check_servers:
            servers = await check_servers_of(config)
            setup.simulated = setup.simulated or servers.simulated  # every record says so too
        store = RunStore(out)
        started = supervisor.records() if supervisor is not None else None
        manifest = manifest_for(config, dataset, setup, servers, simulated, started)
        if stop is not None:
            check_random_order(config.selection.order, "--stop")
            manifest = manifest.model_copy(update={"stop": stop.model_dump(mode="json")})
        scan = store.open(manifest, force=force)
        try:
            job = make_job(
                setup, store, scan, dataset.questions, known=getattr(dataset, "known_ids", None)
            )
            scheduler = None
            if stop is not None:
                from crawdad.run.scheduler import rule_judge

                scheduler = Scheduler.of_scans(
                    [job.name],
                    [scan],
                    config.concurrency,
                    order=job.order,
                    judge=rule_judge(stop, comparisons=1),
                    max_questions=stop.max_questions,
                    max_gpu_seconds=stop.max_gpu_seconds,
                    say=tqdm.write,
                    pool=pool_of(dataset.info),
                )

            def report(summaries: list[RunSummary]) -> None:
                if on_summary is not None:
                    on_summary(summaries[0])

            summaries = await run_jobs(
                [job],
                gate,
                progress,
                config.concurrency,
                report,
                metrics=(out, config.server_metrics),
                scheduler=scheduler,
                supervisor=supervisor,
            )
            return summaries[0]
        finally:
            store.close()
    finally:
        for pool in pools_of(setup):
            await pool.aclose()


run = run_debates  # the name crawdad's own modules and tests import


async def check_servers_of(config: RunConfig) -> DoctorReport:
    report = await diagnose(config)
    require_ready(report)
    for warning in report.warnings:
        log.warning("%s", warning)
    return report


async def run_jobs(
    jobs: list[Job],
    gate: ModelGate | None,
    progress: bool,
    concurrency: int,
    on_summary: Callable[[list[RunSummary]], None] | None,
    responses: ResponseStore | None = None,
    metrics: tuple[Path, float] | None = None,
    scheduler: Scheduler | None = None,
    supervisor: Any | None = None,
) -> list[RunSummary]:
    """`metrics`: the folder of servers.jsonl and the seconds between samples (0: none).
    `scheduler`: which debates may start (an experiment's stopping rule); without one each job
    runs every debate of its `todo`, `concurrency` at a time. `supervisor`: the servers crawdad
    started (crawdad/serving/supervisor.py): kept alive while the run goes."""
    bar = Progress(jobs, progress)
    bar.supervisor = supervisor
    names = [j.name for j in jobs]
    sched = scheduler or Scheduler(names, concurrency)
    bar.stopped = lambda name: sched.verdict(name) is not None
    summaries = [j.summary for j in jobs]
    stuck = _StuckServers(threshold=max(8, concurrency))

    def on_written(job: Job, record: DebateRecord) -> None:
        stuck.see(record)
        sched.record(job.name, record)
        summary = job.summary
        if record.ok:
            summary.finished += 1
            summary.done_total += 1
            got = outcome(record.gold, record.final_answer)  # the rule: crawdad.scoring.scored
            summary.correct += got == 1
            summary.unscored += got is None
            summary.consensus += record.consensus
            summary.tool_calls += sum(len(t.tool_calls) for t in record.turns)
        else:
            summary.errored += 1
            summary.errors[(record.error or "error")[:160]] += 1
        bar.update(job)

    # At most `concurrency` debates of each job exist at once: a debate is started only when one
    # of its job finishes, and each advances as soon as its last request is back. Memory does not
    # grow with the run. Each experiment variant has its own slots, so no variant waits for
    # another, and debates waiting on a request another variant has in flight do not take the
    # servers' share of the variants that sent it. A stopping rule's scheduler starts nothing
    # more for a decided variant and gives its slots to the others.
    tasks: set[asyncio.Task[None]] = set()
    crashed: list[BaseException] = []
    halted: list[RunStopped] = []

    def halt(error: RunStopped) -> None:
        """Stop at once: cancel the debates in flight (they run again on resume)."""
        if not halted:
            halted.append(error)
            for task in list(tasks):
                task.cancel()

    sampler = None
    if metrics is not None and metrics[1] > 0:
        sampler = ServerSampler(
            pools_of(*(j.setup for j in jobs)),
            metrics[1],
            metrics[0],
            lambda: sum(s.finished for s in summaries),
            concurrency,
            most_running=_most_running(supervisor),
        )
        sampler.open()  # a servers.jsonl that is a link: refused here, before any debate
    queue: asyncio.Queue[Written | None] = asyncio.Queue()
    writer = asyncio.create_task(
        _writer(queue, on_written, lambda e: halt(RunStopped(str(e))), responses)
    )
    ticker = asyncio.create_task(bar.tick())
    watcher = asyncio.create_task(_watch(Watchdog.of(*(j.setup for j in jobs)), halt, not progress))
    keeper = None
    if supervisor is not None:  # restarts hold the pools' requests; a server given up stops us
        supervisor.listener.attach(
            pools_of(*(j.setup for j in jobs)),
            lambda m: halt(RunStopped(m)),
            [s.base_url for s in supervisor.plan.servers],
        )
        keeper = asyncio.create_task(supervisor.watch())
    sampling = None
    if sampler is not None:
        bar.sampler = sampler
        sampling = asyncio.create_task(_sample(sampler))
    start = time.monotonic()

    async def one(job: Job, question: Question) -> None:
        try:
            queue.put_nowait((job, await run_debate(job.setup, question)))
        finally:
            sched.release(job.name)

    def finished(task: asyncio.Task[None]) -> None:
        tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            crashed.append(task.exception())  # type: ignore[arg-type]
            for other in list(tasks):  # a bug: stop the other debates too
                other.cancel()

    def stopping() -> bool:  # a bug, a failed write, or servers that will not come back
        return bool(crashed or stuck.verdict or halted)

    async def feed(job: Job) -> None:
        for question in job.todo:
            if not await sched.acquire(job.name, str(question.question_id)):
                return  # decided (a stopping rule): its debates in flight finish
            if stopping():
                sched.release(job.name)
                return
            task = asyncio.create_task(one(job, question))
            tasks.add(task)
            task.add_done_callback(finished)
            # Let this debate's first request leave before the next debate starts: started
            # all at once, hundreds of debates would render their prompts before any request
            # reached a server, and the servers would wait on crawdad at the start of the run.
            await asyncio.sleep(0)

    try:
        await asyncio.gather(*(feed(job) for job in jobs))
        while tasks:
            await asyncio.wait(list(tasks))
        if crashed:
            raise crashed[0]
    except BaseException:  # Ctrl-C, or a bug: stop the other debates, keep what is finished
        for summary in summaries:
            summary.interrupted = True
        for task in list(tasks):
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*tasks, return_exceptions=True)
        raise
    finally:
        for helper in (ticker, watcher, sampling, keeper):
            if helper is not None:
                helper.cancel()
        queue.put_nowait(None)
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.shield(writer)
        for job, summary in zip(jobs, summaries, strict=True):
            verdict = sched.verdict(job.name)
            # a baseline that ran every question stopped for nothing
            summary.decision = verdict if summary.remaining or job.name != sched.baseline else None
            summary.undecided = sched.undecided_line(job.name) if verdict is None else None
            summary.seconds = time.monotonic() - start
            summary.switches = gate.switches if gate else 0
            summary.interrupted = summary.interrupted or bool(halted)
        if sampler is not None:  # the servers are shared: said once, after the last variant
            summaries[-1].servers = sampler.summary_lines()
        bar.close()
        if on_summary is not None:
            on_summary(summaries)
    if halted:
        halted[0].summary = summaries[0]
        halted[0].summaries = summaries
        raise halted[0]
    if stuck.verdict:
        raise ServersStuck(stuck.verdict, summaries[0], summaries)
    return summaries


class RunStopped(CrawdadError):
    """The run stopped before its end for a reason the user must fix; `summary` says how far
    it got (the CLI prints it before the message); `summaries`, each variant's in an experiment."""

    def __init__(
        self,
        message: str,
        summary: RunSummary | None = None,
        summaries: list[RunSummary] | None = None,
    ) -> None:
        super().__init__(message)
        self.summary = summary
        self.summaries = summaries or ([summary] if summary else [])


class ServersStuck(RunStopped):
    """The servers of a role cannot be reached (or lack the model): the run stopped."""


@dataclass
class _StuckServers:
    """Watches finished debates: `threshold` in a row that failed because a server cannot be
    reached (after every retry) or lacks the model mean every later one would fail too."""

    threshold: int
    streak: int = 0
    verdict: str | None = None

    def see(self, record: DebateRecord) -> None:
        if record.error_kind not in ("ServerUnavailable", "ModelNotFound"):
            self.streak = 0
            return
        self.streak += 1
        if self.streak >= self.threshold and self.verdict is None:
            self.verdict = (
                f"stopped: the last {self.streak} debates all failed with: {record.error}\n"
                "Finished debates are kept. Fix that (start the server, pull the model, or "
                "correct base_urls), then run the same command again to resume."
            )
