"""The stopping scheduler: decisions on the settled prefix only (debates finish out of order), a
decided variant starts nothing new and gives its slots to the others, the baseline runs while a
variant needs it, and a resumed run reaches the same decisions from its records. The scheduler's
unit tests use a stand-in judge (a plain count), no timers and no servers; the last test runs an
experiment with [stop] on the fakes with crawdad.stopping's statistics."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from crawdad.run.scheduler import Scheduler, decisions_of, settled, settled_outcomes


@dataclass
class Verdict:
    outcome: str
    questions: int


class CountJudge:
    """Better at the first place where the variant leads the baseline by `lead` right answers;
    records every prefix it was shown."""

    def __init__(self, lead: int = 3) -> None:
        self.lead = lead
        self.seen: list[tuple[list[int], list[int] | None]] = []

    def __call__(
        self, a: Sequence[int], b: Sequence[int] | None, population: int
    ) -> Verdict | None:
        self.seen.append((list(a), None if b is None else list(b)))
        lead = 0
        for i, x in enumerate(a):
            lead += x - (b[i] if b is not None else 0)
            if lead >= self.lead:
                return Verdict("better", i + 1)
        return None


def record(qid: str, right: bool) -> SimpleNamespace:
    """What the scheduler reads of a DebateRecord."""
    return SimpleNamespace(
        ok=True, question_id=qid, gold="yes", final_answer="yes" if right else "no", turns=[]
    )


ORDER = [f"q{i}" for i in range(40)]
# the variant is right on every question, the baseline on every other one
TRUTH = {"base": {q: i % 2 for i, q in enumerate(ORDER)}, "v": {q: 1 for q in ORDER}}


def feed(sched: Scheduler, arrivals: list[tuple[str, str]]) -> None:
    for name, qid in arrivals:
        sched.record(name, record(qid, bool(TRUTH[name][qid])))  # type: ignore[arg-type]


def test_settled_prefix_waits_for_every_earlier_question_of_both() -> None:
    mine: dict[str, int | None] = {"q0": 1, "q1": 0, "q3": 1}
    base: dict[str, int | None] = {"q0": 0, "q1": 1, "q2": 1, "q3": 1}
    assert settled(ORDER, mine) == 2 and settled(ORDER, mine, base) == 2
    assert settled_outcomes(ORDER, mine, base) == ([1, 0], [0, 1])
    mine["q2"] = None  # no exact answer: settled, left out of the sums
    assert settled_outcomes(ORDER, mine, base) == ([1, 0, 1], [0, 1, 1])


@pytest.mark.parametrize("shuffle_seed", range(6))
def test_decisions_use_only_the_settled_prefix_whatever_order_debates_finish(
    shuffle_seed: int,
) -> None:
    judge = CountJudge()
    sched = Scheduler(
        ["base", "v"], 4, order=ORDER, baseline="base", judge=judge, say=lambda _: None
    )
    arrivals = [(n, q) for n in ("base", "v") for q in ORDER]
    random.Random(shuffle_seed).shuffle(arrivals)
    feed(sched, arrivals)
    for a, b in judge.seen:  # every look saw a prefix of the order, for both
        n = len(a)
        assert a == [TRUTH["v"][q] for q in ORDER[:n]]
        assert b == [TRUTH["base"][q] for q in ORDER[:n]]
    # the same decision however the debates finished: the first place the rule holds
    assert sched.decided["v"] == Verdict("better", 5)
    assert decisions_of(ORDER, TRUTH, "base", CountJudge()) == {"v": Verdict("better", 5)}


async def test_a_decided_variant_starts_nothing_new_and_its_slots_go_to_the_others() -> None:
    said: list[str] = []
    sched = Scheduler(
        ["base", "v", "w"], 2, order=ORDER, baseline="base", judge=CountJudge(), say=said.append
    )
    assert [sched.capacity(n) for n in ("base", "v", "w")] == [2, 2, 2]
    assert await sched.acquire("v", "q0") and await sched.acquire("v", "q1")
    waiting = asyncio.create_task(sched.acquire("v", "q2"))  # full: it waits
    await asyncio.sleep(0)
    assert not waiting.done()
    feed(sched, [(n, q) for q in ORDER[:8] for n in ("base", "v")])
    assert "v" in sched.decided and said and "better" in said[0] and "[v]" in said[0]
    assert await asyncio.wait_for(waiting, 1) is False  # woken, told to start nothing
    assert not sched.needs("v") and await sched.acquire("v", "q9") is False
    # v's two debates in flight still hold their slots; as they finish, w and base get them
    assert sched.capacity("w") == (6 - 2) // 2
    sched.release("v")
    sched.release("v")
    assert sched.capacity("w") == sched.capacity("base") == 3
    assert sched.needs("base")  # w is undecided: the baseline runs on
    assert sched.verdict("v") and sched.verdict("w") is None


def test_the_baseline_stops_when_every_variant_is_decided() -> None:
    sched = Scheduler(["base", "v"], 2, order=ORDER, baseline="base", judge=CountJudge())
    feed(sched, [(n, q) for q in ORDER[:10] for n in ("base", "v")])
    assert not sched.needs("base") and sched.capacity("base") == 0
    assert "every variant is decided" in (sched.verdict("base") or "")


def test_without_a_rule_every_job_runs_to_its_end_with_its_own_slots() -> None:
    sched = Scheduler(["a", "b"], 3)
    sched.record("a", record("q0", True))  # type: ignore[arg-type]
    assert sched.needs("a") and sched.capacity("a") == sched.capacity("b") == 3
    assert sched.verdict("a") is None


def test_max_questions_ends_a_variant_at_that_place_in_the_order() -> None:
    sched = Scheduler(
        ["base", "v"], 2, order=ORDER, baseline="base", judge=CountJudge(99), max_questions=5
    )
    assert sched.needs("v", "q4") and not sched.needs("v", "q5")


def test_a_resumed_run_reaches_its_decisions_from_its_records_silently() -> None:
    finished = set(ORDER[:12])
    scans = [
        SimpleNamespace(
            finished=finished,
            unscored_ids=set(),
            correct_ids={q for q in finished if TRUTH[name][q]},
        )
        for name in ("base", "v")
    ]
    said: list[str] = []
    sched = Scheduler.of_scans(
        ["base", "v"], scans, 2, order=ORDER, baseline="base", judge=CountJudge(), say=said.append
    )
    assert sched.decided == {"v": Verdict("better", 5)} and said == []
    assert not sched.needs("v")


# --- a GPU-time budget ---------------------------------------------------------------------------


def timed(qid: str, right: bool, seconds: float, ok: bool = True) -> SimpleNamespace:
    """A record whose one turn took `seconds` of the server's generation time."""
    r = record(qid, right)
    r.ok = ok
    r.turns = [SimpleNamespace(server_seconds=seconds, seconds=99.0, extraction=None)]
    return r


async def test_a_variant_whose_gpu_budget_is_spent_starts_nothing_new_and_stays_undecided() -> None:
    said: list[str] = []
    sched = Scheduler(
        ["base", "v", "w"],
        2,
        order=ORDER,
        baseline="base",
        judge=CountJudge(99),  # never decides: only the budget stops anything
        max_gpu_seconds=10.0,
        say=said.append,
    )
    assert await sched.acquire("v", "q0") and await sched.acquire("v", "q1")
    waiting = asyncio.create_task(sched.acquire("v", "q2"))  # full: it waits
    await asyncio.sleep(0)
    assert not waiting.done()
    sched.record("v", timed("q0", True, 4.0))  # type: ignore[arg-type]
    assert sched.needs("v", "q2") and said == []  # 4 of 10 GPU seconds: it runs on
    sched.record("v", timed("q1", True, 6.0, ok=False))  # a failed debate's GPU time counts
    assert await asyncio.wait_for(waiting, 1) is False  # woken, told to start nothing
    sched.release("v")
    sched.release("v")
    assert not sched.needs("v") and await sched.acquire("v", "q3") is False
    assert sched.spent("v") == 10.0 and "v" not in sched.decided  # undecided, never equivalent
    assert len(said) == 1 and said[0].startswith("[v] budget spent") and "undecided" in said[0]
    assert (sched.verdict("v") or "").startswith("budget spent")
    assert sched.needs("w") and sched.needs("base")  # w runs on, and the baseline with it
    sched.record("w", timed("q0", False, 12.5))  # type: ignore[arg-type]
    assert not sched.needs("w") and not sched.needs("base")
    assert "spent its budget" in (sched.verdict("base") or "")


def test_a_budget_spent_variant_is_still_decided_by_its_debates_in_flight() -> None:
    sched = Scheduler(
        ["base", "v"], 2, order=ORDER, baseline="base", judge=CountJudge(), max_gpu_seconds=4.0
    )
    feed(sched, [("base", q) for q in ORDER[:6]])
    for q in ORDER[:4]:  # lead 2 after four questions: undecided when the budget is spent
        sched.record("v", timed(q, True, 1.0))  # type: ignore[arg-type]
    assert "v" in sched.out_of_budget and "v" not in sched.decided
    sched.record("v", timed("q4", True, 1.0))  # one in flight finishes: lead 3, decided
    assert sched.decided["v"] == Verdict("better", 5)
    assert (sched.verdict("v") or "").startswith("decided: better")


def test_a_resumed_run_finds_the_budget_spent_from_its_records_silently() -> None:
    from crawdad.run.scheduler import BudgetSpent, budget_spent_of

    finished = set(ORDER[:6])
    scans = [
        SimpleNamespace(
            finished=finished,
            unscored_ids=set(),
            correct_ids={q for q in finished if TRUTH[name][q]},
            gpu_seconds={q: 2.0 for q in finished},
        )
        for name in ("base", "v")
    ]
    said: list[str] = []
    sched = Scheduler.of_scans(
        ["base", "v"],
        scans,
        2,
        order=ORDER,
        baseline="base",
        judge=CountJudge(99),
        max_gpu_seconds=12.0,
        say=said.append,
    )
    assert sched.out_of_budget == {"v": BudgetSpent(12.0, 12.0, 6)} and said == []
    assert not sched.needs("v") and not sched.needs("base")
    # what the report asks of the same records
    decided = decisions_of(ORDER, TRUTH, "base", CountJudge(99))
    assert budget_spent_of(decided["v"], 12.0, 12.0, 6) == sched.out_of_budget["v"]
    assert budget_spent_of(decided["v"], 11.9, 12.0, 6) is None


# --- an experiment with [stop] on the fakes ------------------------------------------------------

ACCURACIES = {"base:1b": 0.6, "better:1b": 0.95, "worse:1b": 0.25, "null:1b": 0.6}
STOP_EXPERIMENT = """
baseline = "base"
[stop]
alpha = 0.05
margin = 0.03
min_questions = 10
[base]
seed = 3
concurrency = 6
protocol = {{ kind = "solo", samples = 1 }}
extractor = {{ base_urls = ["{url}"] }}
""" + "".join(
    f'[variants.{m.split(":")[0]}]\nagents = [{{{{ name = "a", model = "{m}", base_urls = ["{{url}}"] }}}}]\n'
    for m in ACCURACIES
)


async def test_an_experiment_stops_its_decided_variants_and_resumes_to_the_same_decisions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from crawdad.analysis.experiment_report import write_experiment_report

    from crawdad.config import SelectionConfig
    from crawdad.data.questions import load_cladder, select
    from crawdad.demo import answer_key
    from crawdad.fake import FakeServer, LatencyModel
    from crawdad.fake.setups import models_for
    from crawdad.notebook import decisions, sequences
    from crawdad.resources import examples
    from crawdad.run.experiment import (
        experiment_manifest,
        load_experiment,
        run_experiment,
        variant_configs,
    )
    from crawdad.run.store import read_experiment

    dataset = select(load_cladder(examples()), SelectionConfig(limit=150), 3)
    models = models_for(ACCURACIES, answer_key=answer_key(dataset.questions), accuracies=ACCURACIES)
    out = tmp_path / "exp"
    async with FakeServer("ollama", models, latency=LatencyModel(capacity=32)) as server:
        path = tmp_path / "stop.toml"
        path.write_text(STOP_EXPERIMENT.format(url=server.url))
        spec, sha = load_experiment(path)
        configs = variant_configs(spec, str(path))
        manifest = experiment_manifest(spec, str(path), sha, list(configs))

        async def go() -> dict[str, Any]:
            summaries = await run_experiment(
                configs, manifest, dataset, out, progress=False, simulated=True
            )
            return dict(zip(configs, summaries, strict=True))

        first = await go()
        printed = capsys.readouterr().out
        again = await go()
    assert read_experiment(out).stop["margin"] == 0.03  # type: ignore[union-attr,index]
    table = decisions(out).set_index("variant")
    assert table.loc["better", "decision"] == "better" and table.loc["worse", "decision"] == "worse"
    assert table.loc["null", "decision"] not in ("better", "worse")
    assert "[better] decided: better" in printed and "[worse] decided: worse" in printed
    for name in ("better", "worse"):  # stopped early; the in-flight ones finished, no more
        s = first[name]
        assert s.decision and s.done_total < len(dataset.questions)
        assert s.done_total <= table.loc[name, "settled"] + 6 * 4
        assert again[name].finished == 0 and again[name].decision == s.decision
    assert first["base"].done_total == len(dataset.questions)  # null is undecided: base ran on
    # every printed decision names its pool and its level, alpha shared among the comparisons
    decided = [ln for ln in printed.splitlines() if "decided:" in ln]
    assert decided and all(
        "(a claim about the models: the expected difference" in ln for ln in decided
    )
    pool = "of their answers to the 150 questions selected from crawdad-example-q-balanced.json"
    assert all(pool in ln and "(the first 150 of the seeded order)" in ln for ln in decided)
    assert all("at 95% confidence, alpha 5% shared by 3 comparisons" in ln for ln in decided)
    assert not any("like these" in ln or "paper claims" in ln for ln in decided)
    seqs = sequences(out)
    assert set(seqs.columns) >= {"variant", "questions", "lower", "upper", "target", "about"}
    assert "base" not in set(seqs["variant"]) and set(seqs["target"]) == {"models"}
    from crawdad.notebook import baseline_sequence

    own = baseline_sequence(out)
    assert set(own["variant"]) == {"base"} and own["about"].str.contains("accuracy").all()
    report = write_experiment_report(out, tmp_path / "report").read_text()
    assert "## Decisions" in report and "Spent against a full pass" in report
    assert "**What these decisions are about: the models**" in report
    # the paired section: an early-stopped variant's sequence first, its fixed-sample figures
    # only with the caveat (every line of the section that shows one says so)
    paired = report.split("## Paired comparisons with the baseline")[1].split("\n## ")[0]
    for name in ("better", "worse"):
        line = next(ln for ln in paired.splitlines() if ln.startswith(f"- `{name}` stopped"))
        assert line.index("the interval to quote") < line.index("McNemar p =")
        assert "ignore the optional stopping" in line
    assert "[95% CI, ignores stopping]" in paired and "McNemar p (ignores stopping)" in paired
    assert "(points) [95% CI]" not in paired
    # claims the size of the evidence: the pool and the level named, nothing wider
    assert "like these" not in report and "paper claims" not in report
    decisions_part = report.split("## Decisions")[1].split("\n## ")[0]
    assert "over the 150 questions selected from crawdad-example-q-balanced.json" in decisions_part
    assert "95% confidence, alpha 5% shared by 3 comparisons" in decisions_part
    assert "stopping early overstates it" in decisions_part
    # the stopped variants' fixed-sample intervals: marked in Variants side by side, hollow
    # without a bar in the figure, a column in the notebook's tables, a caveat in their own report
    side = report.split("## Variants side by side")[1].split("\n## ")[0]
    assert "\u2020 `better`, `worse` stopped early" in side
    row = next(ln for ln in side.splitlines() if ln.startswith("| accuracy, all"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    names = [
        c.strip() for c in side.split("| accuracy, all")[0].splitlines()[-2].strip("|").split("|")
    ]
    marked = {n for n, c in zip(names, cells, strict=True) if c.endswith("\u2020")}
    assert marked == {"better", "worse"}
    assert "hollow without a bar: a variant stopped early" in report
    from crawdad.analysis.experiment_folder import load_experiment as load_folder
    from crawdad.analysis.experiment_report import stopped_before_end

    exp = load_folder(out)
    cut = stopped_before_end(exp, table.reset_index())
    assert cut == {"better", "worse"}
    import crawdad

    frames = crawdad.load_frames(out)
    noted = [t for t in crawdad.report_tables(frames).values() if "interval_note" in t]
    assert noted
    import pandas as pd

    notes = pd.concat([t[["run", "interval_note"]] for t in noted]).groupby("run")["interval_note"]
    notes = notes.first()
    assert notes["better"].startswith("stopped early") and notes["worse"].startswith(
        "stopped early"
    )
    assert notes["base"] == "" and notes["null"] == ""
    assert set(decisions(out).set_index("variant").loc[["better", "worse"], "estimate_note"]) == {
        "the difference at the stop; stopping early overstates it"
    }
    from crawdad.analysis.report import write_report

    own = write_report([out / "better"], tmp_path / "better_report").read_text()
    assert "Run `better` stopped early**: stopped early: its fixed-sample intervals" in own
    base_own = write_report([out / "base"], tmp_path / "base_report").read_text()
    assert "stopped early" not in base_own
    # the GPU seconds a budget counts (the run folder's scan) are the report's
    from crawdad.run.store import RunStore

    for v in exp.variants:
        scanned = sum(RunStore(out / v.name).scan().gpu_seconds.values())
        assert scanned == pytest.approx(float(v.questions["gpu_seconds"].sum()))


def test_a_single_run_stops_when_its_accuracy_is_known_closely_enough(
    tmp_path: Path, cli: Any
) -> None:
    from crawdad.fake import FakeServer
    from crawdad.fake.setups import paper_models
    from crawdad.run.store import RunStore
    from tests.conftest import paper_toml

    with FakeServer("ollama", paper_models()) as server:
        config = paper_toml(server.url, tmp_path / "paper.toml", head="concurrency = 4\n")
        code, out, err = cli(
            "run",
            "--data",
            "examples",
            "--config",
            str(config),
            "--out",
            str(tmp_path / "r"),
            "--no-progress",
            "--stop",
            "half_width=0.25",
            "--stop",
            "min_questions=10",
        )
    assert code == 0, err
    assert "decided: precise" in out and "questions not run" in out
    line = next(ln for ln in out.splitlines() if "decided: precise" in ln)
    assert "the 360 questions of crawdad-example-q-balanced.json" in line
    assert "at 95% confidence)" in line and "shared" not in line  # one comparison: no sharing
    manifest = RunStore(tmp_path / "r").read_manifest()
    assert manifest.stop is not None and manifest.stop["half_width"] == 0.25
    assert manifest.schema_version >= 10 and manifest.stop["target"] == "models"  # since 10


def test_a_run_too_short_for_min_questions_is_warned_about_before_it_starts(
    tmp_path: Path, cli: Any
) -> None:
    from crawdad.fake import FakeServer
    from crawdad.fake.setups import paper_models
    from tests.conftest import paper_toml

    with FakeServer("ollama", paper_models()) as server:
        config = paper_toml(server.url, tmp_path / "paper.toml", head="concurrency = 4\n")
        code, out, err = cli(
            "run", "--data", "examples", "--config", str(config), "--out", str(tmp_path / "r"),
            "--no-progress", "--limit", "6", "--stop", "half_width=0.25",
            "--stop", "min_questions=10",
        )  # fmt: skip
    assert code == 0, err
    assert "only 6 question(s) selected, fewer than the stopping rule's min_questions = 10" in err
    assert "undecided (which never means equivalent): its questions ran out first" in out


def test_a_run_without_a_target_is_told_to_give_one(tmp_path: Path, cli: Any) -> None:
    code, _, err = cli(
        "run", "--data", "examples", "--out", str(tmp_path / "r"), "--stop", "alpha=0.05"
    )
    assert code != 0 and "half_width" in err


def test_the_report_says_what_its_decisions_are_about() -> None:
    from crawdad.analysis.experiment_report import stopping_guarantee

    from crawdad.run.experiment import recorded_rule, stop_rule

    run = stopping_guarantee(stop_rule({"target": "run"}), "base", 2)
    assert "**What these decisions are about: this run**" in run
    assert "The claim is about this run, not about the models" in run
    models = stopping_guarantee(stop_rule({}), "base", 2)
    assert "about: the models**" in models
    assert "expected difference of the models' answers to the run's selected questions" in models
    assert "this run, not" not in models
    assert "The tests decide" in models and "The tests decide" not in run  # the run: its edges
    assert "The tests decide" not in stopping_guarantee(stop_rule({"method": "cs"}), "base", 2)
    # a folder of before targets was about the run, whatever the default is now: resumed under
    # today's default it is a changed rule (refused without --force), under target "run" not
    from crawdad.run.store import stop_differences

    assert recorded_rule({"alpha": 0.05}).target == "run"
    assert recorded_rule({"target": "models"}).target == "models"
    now = stop_rule({}).model_dump(mode="json")
    assert any("target" in d for d in stop_differences({"alpha": 0.05}, now))
    assert stop_differences({"alpha": 0.05}, {**now, "target": "run"}) == []
    # a folder of before the tests (issue 52) was decided by its sequence's edges: method "cs"
    assert recorded_rule({"target": "models"}).method == "cs" and stop_rule({}).method == "test"
    before_tests = {"target": "models", "alpha": 0.05}
    assert any("method" in d for d in stop_differences(before_tests, now))
    assert stop_differences(before_tests, {**now, "method": "cs"}) == []


# --- questions without an exact answer: one rule for the run and the report --------------------


def _unscored_case(
    target: str,
) -> tuple[list[str], dict[str, dict[str, Any]], Any, dict[str, Any]]:
    """60 questions, every fifth without an exact answer (gold None), the variant right more
    often than the baseline; the records as the run's scheduler reads them, and the same as the
    experiment's question frames the report reads."""
    import pandas as pd

    from crawdad.stopping.decide import Rule

    order = [f"q{i}" for i in range(60)]
    rng = np.random.default_rng(7)
    gold = {q: (None if i % 5 == 3 else "yes") for i, q in enumerate(order)}
    right = {"base": rng.random(60) < 0.4, "v": rng.random(60) < 0.95}
    records = {
        name: [
            SimpleNamespace(
                ok=True,
                question_id=q,
                gold=gold[q],
                final_answer="yes" if right[name][i] else "no",
                turns=[],
            )
            for i, q in enumerate(order)
        ]
        for name in right
    }
    rule = Rule(target=target, min_questions=5, margin=0.03)  # type: ignore[arg-type]
    variants = [
        SimpleNamespace(
            name=name,
            order=order,
            questions=pd.DataFrame(
                {
                    "question_id": [r.question_id for r in recs],
                    "gold": [r.gold for r in recs],
                    "final_answer": [r.final_answer for r in recs],
                    "errored": False,
                    "gpu_seconds": 1.0,
                }
            ),
        )
        for name, recs in records.items()
    ]
    exp = SimpleNamespace(
        variants=variants,
        baseline="base",
        manifest=SimpleNamespace(stop=rule.model_dump(mode="json")),
    )
    return order, records, rule, {"exp": exp}


@pytest.mark.parametrize("target", ["models", "run"])
def test_questions_without_an_answer_the_run_decides_as_the_report(target: str) -> None:
    """A table with unscorable questions: `crawdad run`'s scheduler, fed the records as they
    finish (out of order), reaches the decision the report's table recomputes, and a sequence
    about this run closes on the scored questions' exact difference."""
    from crawdad.analysis.metrics.stopping import decision_table, sequence_frame

    from crawdad.run.scheduler import rule_judge

    order, records, rule, made = _unscored_case(target)
    said: list[str] = []
    sched = Scheduler(
        ["base", "v"],
        4,
        order=order,
        baseline="base",
        judge=rule_judge(rule, 1),
        say=said.append,
    )
    arrivals = [(name, r) for name in ("base", "v") for r in records[name]]
    np.random.default_rng(1).shuffle(arrivals)  # type: ignore[arg-type]
    for name, r in arrivals:
        sched.record(name, r)  # type: ignore[arg-type]
    table = decision_table(made["exp"]).set_index("variant")
    run = sched.decided.get("v")
    assert table.loc["v", "unscored"] > 0
    if run is None:
        assert table.loc["v", "decision"] == "undecided"
    else:
        assert (table.loc["v", "decision"], table.loc["v", "questions"]) == (
            run.outcome,
            run.questions,
        )
        assert table.loc["v", "lower"] == run.lower and table.loc["v", "upper"] == run.upper
        assert f"about {'this run' if target == 'run' else 'the models'}" in said[0]
    assert table.loc["v", "target"] == target
    # the whole sequence, every question settled: about this run it closes on the scored ones
    rule_run = rule.model_copy(update={"target": "run", "min_questions": 10**6})
    made["exp"].manifest.stop = rule_run.model_dump(mode="json")
    seq = sequence_frame(made["exp"])
    scored = [i for i, q in enumerate(order) if i % 5 != 3]
    exact = float(
        np.mean([int(records["v"][i].final_answer == "yes") for i in scored])
        - np.mean([int(records["base"][i].final_answer == "yes") for i in scored])
    )
    last = seq.iloc[-1]
    assert last["questions"] == len(scored)
    assert last["lower"] == pytest.approx(exact) and last["upper"] == pytest.approx(exact)


def test_the_sequences_figure_is_in_points_with_its_lines_labelled() -> None:
    """The figure's axis is in points like every table, the margin and each stop are labelled on
    it, each band has its own hatching, and a contradicted sequence (NaN bounds) draws."""
    import pandas as pd
    from crawdad.analysis.figures.stopping import sequences_figure

    q = np.arange(1, 101)
    seqs = pd.concat(
        [
            pd.DataFrame(
                {
                    "variant": "a",
                    "questions": q,
                    "estimate": 0.2,
                    "lower": 0.2 - 1 / q,
                    "upper": 0.2 + 1 / q,
                    "contradicted": False,
                    "target": "run",
                    "about": "",
                }
            ),
            pd.DataFrame(
                {
                    "variant": "b",
                    "questions": q,
                    "estimate": 0.0,
                    "lower": np.where(q > 90, np.nan, -1 / q),
                    "upper": np.where(q > 90, np.nan, 1 / q),
                    "contradicted": q > 90,
                    "target": "run",
                    "about": "",
                }
            ),
        ]
    )
    decisions = pd.DataFrame(
        {"variant": ["a", "b"], "decision": ["better", "contradicted"], "questions": [40, 91]}
    )
    fig = sequences_figure(seqs, decisions, 0.03)
    ax = fig.axes[0]
    texts = [t.get_text() for t in ax.texts]
    assert "+margin (3 pts)" in texts and "−margin (−3 pts)" in texts
    assert any(t.startswith("a stops: better (40)") for t in texts)
    assert "points" in ax.get_ylabel() and "this run" in ax.get_title()
    hatches = {c.get_hatch() for c in ax.collections if c.get_hatch()}
    assert len(hatches) == 2
    assert ax.get_ylim()[1] > 20  # in points, not shares
