"""Which debates may start: the one place a run's stopping rule meets the run machinery.

The runner asks `Scheduler.acquire(job)` before each debate and tells `Scheduler.record(job, r)`
each finished one. Without a stopping rule it is the runner's old per-job semaphore: each job (a
plain run, or an experiment's variant) has `concurrency` slots. With one (`[stop]` in an experiment
file, `--stop` on the command line):

- **The prefix rule.** A decision uses only outcomes whose place in the run's order is settled:
  every earlier question finished for the variant and for the baseline. Debates finish out of
  order, and the long ones (disagreements, loops) finish last and are more often wrong: deciding
  on whatever has finished would favour the quick, right ones. A failed debate is not finished:
  it holds the prefix until a resume retries it.
- A decided variant starts no new debate; its debates in flight finish and are recorded.
- The baseline runs while any variant is undecided.
- The slots a decided variant frees go to the undecided ones.
- A decision is a function of the records in order (`decisions_of`), so a run killed and resumed
  reaches the same ones, and the analysis recomputes them from the run folders.
- **A GPU-time budget** (`max_gpu_seconds`): a variant whose records count that many GPU seconds
  (`crawdad.records.gpu_seconds`, the figure the reports' cost tables count) starts nothing new
  and is **budget spent**: undecided, never equivalent. Its debates in flight finish, and may
  still settle a decision (`budget_spent_of` says which it is, from the records).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from crawdad.errors import ConfigError
from crawdad.records import DebateRecord, gpu_seconds
from crawdad.scoring.scored import Outcome, outcome

# (the variant's settled outcomes, the baseline's over the same questions or None for a plain
# run, the run's population when each came: `Prefix.populations`) -> a decision
# (`crawdad.stopping.decide.Decision`: its `outcome`, `questions`, `lower`, `upper`), or None
# while undecided
Judge = Callable[[Sequence[int], Sequence[int] | None, Sequence[int]], Any]

DECIDED = ("better", "worse", "equivalent", "precise")  # a variant stops on these
STOPS = (*DECIDED, "contradicted")  # and on a sequence that contradicted itself: it never decides
BUDGET_SPENT = "budget spent"  # a variant stopped undecided by max_gpu_seconds


@dataclass(frozen=True)
class BudgetSpent:
    """A variant stopped undecided: its records count its GPU-seconds budget (`max_gpu_seconds`)
    before its rule decided anything. Never equivalent."""

    seconds: float  # the GPU seconds its records counted when it stopped
    budget: float  # max_gpu_seconds
    questions: int  # its settled questions then
    outcome: str = BUDGET_SPENT


def pool_of(dataset: Any) -> str:
    """The pool a run's questions were drawn from, in words, from its `DatasetInfo`
    (`crawdad.stopping.claims.pool_words`)."""
    from pathlib import PurePath

    from crawdad.resources import examples
    from crawdad.stopping.claims import pool_words

    name = PurePath(dataset.questions_file).name
    source = str(dataset.source)
    if source in ("examples", str(examples())):  # `--data examples`: the package's own
        source = "crawdad's examples"
    where = source if PurePath(source).name == name else f"{name} in {source}"
    return pool_words(dataset.n_selected, where, dataset.selection)


def check_random_order(order: str, source: str) -> None:
    """A stopping rule needs questions in a random order: the sequences are valid for a pool
    whose questions come in an order drawn at random, and the file's order is no random sample
    (CLadder's file runs story by story). Refused before any work."""
    if order != "seeded":
        raise ConfigError(
            f"{source}: [stop] with selection.order = {order!r}: a stopping rule decides on the "
            "first questions of the run's order, and its guarantee holds only where that order "
            "is drawn at random; the file's order is no random sample. Set selection.order = "
            '"seeded" (the default), or leave [stop] out to run every question in file order'
        )


def budget_spent_of(decision: Any, seconds: float, budget: float | None, questions: int) -> Any:
    """A variant's final word from its records: its rule's decision where there is one, else
    `BudgetSpent` where its records count `budget` GPU seconds (`seconds`), else None (it ran
    on). The run and the report both ask this."""
    if decision is not None or budget is None or seconds < budget:
        return decision
    return BudgetSpent(seconds=seconds, budget=budget, questions=questions)


class Scored(Protocol):
    """What an outcome is read from: a DebateRecord, or the viewer's index entry of one."""

    @property
    def gold(self) -> str | None: ...
    @property
    def final_answer(self) -> str | None: ...


def outcome_of(record: Scored) -> Outcome:
    """A finished record's outcome, as the store's scan counts it (the one rule:
    `crawdad.scoring.scored`)."""
    return outcome(record.gold, record.final_answer)


def settled(order: Sequence[str], *outcomes: Mapping[str, Outcome]) -> int:
    """How many questions of `order`, from its start, every one of `outcomes` has."""
    for i, qid in enumerate(order):
        if any(qid not in o for o in outcomes):
            return i
    return len(order)


@dataclass(frozen=True)
class Prefix:
    """A variant's settled prefix of the run's order: its scored outcomes, the baseline's on the
    same questions (None for a plain run), and the run's population when each came.

    **Questions without an exact answer** (a table of one's own: gold None) are left out of both,
    and the population (the selected questions) shrinks by one for each as it is met, so that a
    sequence about this run closes on the scored questions: once the whole order is settled the
    last population is the number scored. Everything here is a function of the records in order,
    so the run, the report, the live view and the notebook reach the same decisions."""

    a: list[int]
    b: list[int] | None
    populations: list[int]  # the population when each scored outcome came
    settled: int  # questions of the order settled, scored or not
    unscored: int  # of them, those without an exact answer
    selected: int  # the run's selected questions (its order)

    @property
    def complete(self) -> bool:
        return self.settled == self.selected


def settled_prefix(
    order: Sequence[str], mine: Mapping[str, Outcome], baseline: Mapping[str, Outcome] | None
) -> Prefix:
    """The settled prefix (`settled`) of `mine`, paired with the baseline's, as a `Prefix`."""
    n = settled(order, mine, *([baseline] if baseline is not None else []))
    a: list[int] = []
    b: list[int] = []
    pops: list[int] = []
    unscored = 0
    for qid in order[:n]:
        x = mine[qid]
        y = baseline[qid] if baseline is not None else 0
        if x is None or y is None:
            unscored += 1
            continue
        a.append(x)
        b.append(y)
        pops.append(len(order) - unscored)
    if n == len(order) and pops:  # every question settled: unscored ones after the last too
        pops[-1] = len(order) - unscored
    return Prefix(a, b if baseline is not None else None, pops, n, unscored, len(order))


def settled_outcomes(
    order: Sequence[str], mine: Mapping[str, Outcome], baseline: Mapping[str, Outcome] | None
) -> tuple[list[int], list[int] | None]:
    """The outcomes over the settled prefix, in order, paired with the baseline's (questions
    without an exact answer left out of both)."""
    p = settled_prefix(order, mine, baseline)
    return p.a, p.b


def variant_sequence(
    a: Sequence[int],
    b: Sequence[int] | None,
    populations: Sequence[int],
    rule: Any,
    comparisons: int,
) -> Any:
    """What a stopping rule decides on (`crawdad.stopping.decide.sequence`): the confidence
    sequence of the paired difference `a - b` from the baseline (the accuracy of `a` for a plain
    run), at alpha shared among `comparisons`, about the rule's target (the models: i.i.d.; this
    run: a population shrinking as `populations` says), with the tests' evidence where they
    decide. The tests' bets are tuned to the run's population when its first outcome came
    (`populations[0]`: fixed from the start)."""
    from crawdad.stopping.decide import sequence

    return sequence(
        list(a), None if b is None else list(b), rule, comparisons, populations=list(populations)
    )


def variant_decision(
    a: Sequence[int],
    b: Sequence[int] | None,
    populations: Sequence[int],
    rule: Any,
    comparisons: int,
) -> tuple[Any, Any]:
    """A variant's sequence (`variant_sequence`) and what the rule says of it
    (`crawdad.stopping.decide.decide`: undecided too, with the interval where it looked last):
    what the run's judge decides on, and what the live view shows."""
    from crawdad.stopping.decide import decide

    seq = variant_sequence(a, b, populations, rule, comparisons)
    return seq, decide(seq, rule, comparisons=comparisons)


def prefix_decision(prefix: Prefix, rule: Any, comparisons: int) -> tuple[Any, Any]:
    """`variant_decision` over a settled prefix: the one function the run, the report, the live
    view and the notebook decide with."""
    return variant_decision(prefix.a, prefix.b, prefix.populations, rule, comparisons)


def rule_judge(rule: Any, comparisons: int) -> Judge:
    """The judge of a stopping rule (`crawdad.stopping.decide.Rule`): `variant_decision`, None
    while undecided."""

    def judge(a: Sequence[int], b: Sequence[int] | None, populations: Sequence[int]) -> Any:
        if not a:
            return None
        _, decision = variant_decision(a, b, populations, rule, comparisons)
        return decision if decision.outcome in STOPS else None

    return judge


def decisions_of(
    order: Sequence[str],
    outcomes: Mapping[str, Mapping[str, Outcome]],
    baseline: str | None,
    judge: Judge,
) -> dict[str, Any]:
    """Each variant's decision (None: undecided) from its records in the run's order: what the
    run reaches, killed and resumed or not, and what the report shows."""
    base = outcomes.get(baseline) if baseline is not None else None
    out = {}
    for name, mine in outcomes.items():
        if name == baseline:
            continue
        p = settled_prefix(order, mine, base)
        out[name] = judge(p.a, p.b, p.populations)
    return out


def undecided_reason(prefix: Prefix, max_questions: int | None, running: bool = False) -> str:
    """Why a variant is undecided, from its prefix: its questions ran out (every one settled),
    max_questions reached, or the run still going (or stopped before its end). A spent budget
    is `BudgetSpent`'s own."""
    if max_questions is not None and prefix.selected > max_questions <= prefix.settled:
        return f"max_questions = {max_questions} reached first"
    if prefix.complete:
        return "its questions ran out first"
    if running:
        return "still running"
    return (
        f"the run has settled {prefix.settled} of its {prefix.selected} questions (still "
        "running, or stopped before its end)"
    )


@dataclass
class Scheduler:
    """Slots and decisions for the jobs of one run (`names`: their names, one per job)."""

    names: list[str]
    concurrency: int
    order: list[str] = field(default_factory=list)  # the run's question ids, in its order
    baseline: str | None = None  # the job the others are compared with (None: a plain run)
    judge: Judge | None = None  # None: no stopping rule, every job runs to its end
    max_questions: int | None = None  # no job starts a question past this place in the order
    # No compared job (every job but the baseline) starts a debate once its records count this
    # many GPU seconds (`crawdad.records.gpu_seconds`; None: no budget).
    max_gpu_seconds: float | None = None
    say: Callable[[str], None] = print  # a decision, as it happens
    # The questions the run's order was drawn from, in words (`crawdad.stopping.claims.
    # pool_words`): every decision printed names it.
    pool: str = ""
    outcomes: dict[str, dict[str, Outcome]] = field(default_factory=dict)
    decided: dict[str, Any] = field(default_factory=dict)  # job -> its decision
    # job -> question id -> the GPU seconds of its latest record, finished or failed (kept only
    # with a budget); and the jobs whose budget is spent (undecided when they stopped).
    gpu: dict[str, dict[str, float]] = field(default_factory=dict)
    out_of_budget: dict[str, BudgetSpent] = field(default_factory=dict)
    # Settled questions at the last look, per job: a look costs a sequence over the whole prefix,
    # so the next one waits for the prefix to grow (by 2%, at least 1): when a decision is seen,
    # never which one it is (the judge takes the first place the rule holds).
    _looked: dict[str, int] = field(default_factory=dict)
    _settled: dict[str, int] = field(default_factory=dict)  # job -> its settled prefix so far
    _in_use: dict[str, int] = field(default_factory=dict)
    _place: dict[str, int] = field(default_factory=dict)
    _changed: asyncio.Condition | None = None
    _wakers: set[asyncio.Task[None]] = field(default_factory=set)

    def __post_init__(self) -> None:
        if self.judge is not None and not self.order:
            raise ConfigError("a stopping rule needs the run's order of questions")
        if self.baseline is not None and self.baseline not in self.names:
            raise ConfigError(f"the baseline {self.baseline!r} is not one of the variants")
        self._place = {qid: i for i, qid in enumerate(self.order)}
        for name in self.names:
            self.outcomes.setdefault(name, {})
            self.gpu.setdefault(name, {})
            self._in_use[name] = 0
        if self.judge is not None:  # a resumed run: the decisions its records already reach
            for name in self.names:
                self._look(name, force=True, announce=False)
                self._check_budget(name, announce=False)

    @classmethod
    def of_scans(
        cls,
        names: list[str],
        scans: Iterable[Any],
        concurrency: int,
        **kwargs: Any,
    ) -> Scheduler:
        """A scheduler that knows what each job's folder already holds (`Scan`s, in job order)."""
        order = kwargs.get("order") or []
        wanted = set(order)
        scans = list(scans)
        outcomes = {
            name: {
                qid: (None if qid in scan.unscored_ids else int(qid in scan.correct_ids))
                for qid in scan.finished
                if qid in wanted
            }
            for name, scan in zip(names, scans, strict=True)
        }
        gpu = {
            name: dict(getattr(scan, "gpu_seconds", {}))
            for name, scan in zip(names, scans, strict=True)
        }
        return cls(names, concurrency, outcomes=outcomes, gpu=gpu, **kwargs)

    # --- what may start ------------------------------------------------------------------

    def needs(self, name: str, qid: str | None = None) -> bool:
        """May the job start (another) debate, on question `qid`?"""
        if self.stopped(name):
            return False
        if self.judge is not None and name == self.baseline:
            others = [n for n in self.names if n != self.baseline]
            if others and all(self.stopped(n) for n in others):
                return False
        past = self.max_questions is not None and qid is not None
        return not (past and self._place.get(qid or "", 0) >= (self.max_questions or 0))

    def stopped(self, name: str) -> bool:
        """Is the job to start nothing more: decided, or its GPU budget spent?"""
        return name in self.decided or name in self.out_of_budget

    def spent(self, name: str) -> float:
        """The GPU seconds the job's records count (kept only with a budget)."""
        return sum(self.gpu.get(name, {}).values())

    def capacity(self, name: str) -> int:
        """The job's slots: `concurrency` each, and the slots of decided jobs (once their debates
        in flight finish) shared among the jobs still running."""
        if self.judge is None:
            return self.concurrency
        running = [n for n in self.names if self.needs(n)]
        if name not in running:
            return 0
        total = self.concurrency * len(self.names)
        busy = sum(self._in_use[n] for n in self.names if n not in running)
        return max(1, (total - busy) // len(running))

    def _condition(self) -> asyncio.Condition:
        if self._changed is None:
            self._changed = asyncio.Condition()
        return self._changed

    async def acquire(self, name: str, qid: str | None = None) -> bool:
        """Wait for a slot of the job; False (and no slot) when it is to start nothing more."""
        changed = self._condition()
        async with changed:
            while self.needs(name, qid) and self._in_use[name] >= self.capacity(name):
                await changed.wait()
            if not self.needs(name, qid):
                return False
            self._in_use[name] += 1
            return True

    def release(self, name: str) -> None:
        self._in_use[name] -= 1
        self._notify()

    def _notify(self) -> None:
        changed = self._condition()

        async def wake() -> None:
            async with changed:
                changed.notify_all()

        with contextlib.suppress(RuntimeError):  # no loop: nobody waits
            task = asyncio.get_running_loop().create_task(wake())
            self._wakers.add(task)  # kept until done (a loop keeps only weak references)
            task.add_done_callback(self._wakers.discard)

    # --- what finished -------------------------------------------------------------------

    def record(self, name: str, record: DebateRecord) -> None:
        """A job's debate is written: its outcome counts, and decisions may follow."""
        if self.judge is None:
            return
        qid = str(record.question_id)
        if self.max_gpu_seconds is not None:  # a failed debate's GPU time counts too
            self.gpu[name][qid] = gpu_seconds(record)
        looks: list[str] = []
        if record.ok:
            self.outcomes[name][qid] = outcome_of(record)
            looks = (
                [n for n in self.names if n != self.baseline] if name == self.baseline else [name]
            )
        before = len(self.decided) + len(self.out_of_budget)
        for n in looks:
            self._look(n)
        self._check_budget(name)
        if len(self.decided) + len(self.out_of_budget) != before:
            self._notify()

    def _check_budget(self, name: str, announce: bool = True) -> None:
        """Stop the job undecided once its records count its GPU budget: after one last look
        at its whole settled prefix, so that a decision its records reach is never missed."""
        budget = self.max_gpu_seconds
        if budget is None or name == self.baseline or self.stopped(name):
            return
        if (seconds := self.spent(name)) < budget:
            return
        self._look(name, force=True, announce=announce)
        if name in self.decided:
            return
        self.out_of_budget[name] = BudgetSpent(seconds, budget, self._settled.get(name, 0))
        if announce:
            self.say(self._describe(name, self.out_of_budget[name]))

    def _look(self, name: str, force: bool = False, announce: bool = True) -> None:
        if self.judge is None or name in self.decided or name == self.baseline:
            return
        base = self.outcomes[self.baseline] if self.baseline is not None else None
        n = self._advance(name, base)
        last = self._looked.get(name, 0)
        if name in self.out_of_budget:  # its last debates: each look that can see more
            if not force and n == last:
                return
        elif not force and n < len(self.order) and n < last + max(1, math.ceil(0.02 * last)):
            return
        self._looked[name] = n
        p = settled_prefix(self.order, self.outcomes[name], base)
        decision = self.judge(p.a, p.b, p.populations)
        if decision is not None:
            self.decided[name] = decision
            if announce:
                self.say(self._describe(name, decision))

    def _advance(self, name: str, base: Mapping[str, Outcome] | None) -> int:
        """The job's settled prefix, moved on from where it was (outcomes are only ever added,
        so it never moves back): each record costs what it settles, not the whole order."""
        mine, n = self.outcomes[name], self._settled.get(name, 0)
        while (
            n < len(self.order)
            and self.order[n] in mine
            and (base is None or self.order[n] in base)
        ):
            n += 1
        self._settled[name] = n
        return n

    def verdict(self, name: str) -> str | None:
        """A stopped job's reason, in words (None: it ran on)."""
        if name in self.decided:
            return self._describe(name, self.decided[name]).removeprefix(f"[{name}] ")
        if name in self.out_of_budget:
            return self._describe(name, self.out_of_budget[name]).removeprefix(f"[{name}] ")
        if self.judge is not None and name == self.baseline and not self.needs(name):
            if self.out_of_budget:
                return "the baseline stopped: every variant is decided or has spent its budget"
            return "the baseline stopped: every variant is decided"
        return None

    def undecided_line(self, name: str) -> str | None:
        """An undecided compared job, in words: why it is (None without a rule, or for the
        baseline, or once decided)."""
        if self.judge is None or name == self.baseline or self.stopped(name):
            return None
        base = self.outcomes[self.baseline] if self.baseline is not None else None
        prefix = settled_prefix(self.order, self.outcomes[name], base)
        why = undecided_reason(prefix, self.max_questions)
        return f"undecided (which never means equivalent): {why}"

    def _describe(self, name: str, decision: Any) -> str:
        comparisons = max(1, len(self.names) - 1) if self.baseline is not None else 1
        return describe(name, decision, self.baseline, self.pool, comparisons)

    def undecided(self) -> list[str]:
        return [n for n in self.names if n != self.baseline and n not in self.decided]


def describe(
    name: str,
    decision: Any,
    baseline: str | None,
    pool: str = "",
    comparisons: int = 1,
) -> str:
    """A decision in one line, as the run prints it: what it is about (its target, over `pool`,
    the questions its order was drawn from: `crawdad.stopping.claims.pool_words`), the questions
    it used, its interval in points and the level it holds at (alpha shared among `comparisons`
    said so)."""
    from crawdad.stopping.claims import UNKNOWN_POOL, level_words
    from crawdad.stopping.decide import Kind, interval_words, target_name, target_words

    label = f"[{name}] " if name else ""
    if isinstance(decision, BudgetSpent):
        return (
            f"{label}{BUDGET_SPENT}: its debates count {decision.seconds:.1f} GPU seconds of its "
            f"max_gpu_seconds = {decision.budget:g}, after {decision.questions} settled "
            "questions; undecided (not equivalent), it starts no new debate"
        )
    what = getattr(decision, "outcome", str(decision))
    used = getattr(decision, "questions", None)
    target = getattr(decision, "target", "run")
    after = f" after {used} questions" if used is not None else ""
    alpha = getattr(decision, "alpha", None)
    level = (
        f", at {level_words(alpha * comparisons, comparisons)}" if isinstance(alpha, float) else ""
    )
    if what == "contradicted":
        at = f" = {alpha:g}" if isinstance(alpha, float) else ""
        return (
            f"{label}contradicted{after}: its sequence about {target_name(target)} ran empty, a "
            f"miss (one a sequence at alpha{at} makes with probability at most alpha); no claim "
            "either way, and it starts no new debate"
        )
    lo, hi = getattr(decision, "lower", None), getattr(decision, "upper", None)
    against = f" than {baseline}" if baseline and what in ("better", "worse") else ""
    against = f" to {baseline}" if baseline and what == "equivalent" else against
    kind: Kind = "difference" if baseline else "accuracy"
    about = target_words(target, kind, pool or UNKNOWN_POOL)
    bounds = isinstance(lo, float | int) and isinstance(hi, float | int)
    interval = interval_words(float(lo or 0), float(hi or 0), kind) if bounds else ""
    if getattr(decision, "method", "cs") == "test" and what in ("better", "worse", "equivalent"):
        # the test decides; the sequence, which needs more evidence to leave 0, shows the size
        holds_zero = bounds and float(lo or 0) <= 0 <= float(hi or 0)
        wider = ", wider than the test: it may still hold 0" if holds_zero else ""
        claim = f" (a claim about {about}, decided by its sequential test{level}" + (
            f"; its confidence sequence at the stop: {interval}{wider})" if bounds else ")"
        )
    elif bounds:
        claim = f" (a claim about {about}: it lies in {interval}{level})"
    else:
        claim = f" (a claim about {about}{level})"
    return f"{label}decided: {what}{against}{after}{claim}; it starts no new debate"
