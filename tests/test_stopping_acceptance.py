"""The stopping rule's acceptance (issues 37 and 52).

Statistical (issue 52), vectorised over seeded repetitions with `crawdad.stopping.decide.many_decisions`
(tested equal to the scalar `decision` in tests/test_stopping_stats.py): with the default rule, a
+5-point difference with 30% discordant pairs is decided better in at least 80% of experiments of
2,000 questions, and a true difference of 0 is called better or worse in at most alpha of the
experiments at 360, 2,000 and 10,112 questions. Each bound is asserted with the repetitions'
sampling error on the side of the claim: power's lower 99.9% bound must clear 80%, and wrong calls
must stay under the 99.9% quantile of a binomial at alpha (a rule whose true error exceeds alpha by
half fails it at these counts almost surely).

End to end (issue 37), cheaper than it was (160 of the examples' questions, not the CLadder
sample's 3,652, and no null variant, which would hold the baseline to the end: a null variant
left undecided on the fakes is tests/test_stopping_run.py's
`test_an_experiment_stops_its_decided_variants_and_resumes_to_the_same_decisions`): two
variants against the baseline on the fakes (+35 points, -35 points); better and worse are
decided correctly on at most a quarter of the questions, a run killed at its first decision and
resumed reaches the decisions the full run's records give, and the report's projected full pass
equals the requests the full run counted.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy.stats import beta, binom

from crawdad.run.response_store import RESPONSES
from crawdad.stopping.decide import Rule, many_decisions

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

LEVEL = 0.001  # the chance that the repetitions' sampling error alone fails a true claim


def experiments(
    rows: int, n: int, effect: float, discordant: float, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """rows experiments of n i.i.d. pairs: discordant with probability `discordant`, in the
    variant's favour with probability (discordant + effect) / 2 (the expected difference is
    `effect`); the baseline right on 60% of the concordant pairs."""
    rng = np.random.default_rng(seed)
    u = rng.random((rows, n))
    p_v, p_b = (discordant + effect) / 2, (discordant - effect) / 2
    only_v = u < p_v
    only_b = (u >= p_v) & (u < p_v + p_b)
    both = (u >= p_v + p_b) & (rng.random((rows, n)) < 0.6)
    return (only_v | both).astype(float), (only_b | both).astype(float)


def test_the_default_rule_decides_five_points_at_two_thousand_questions() -> None:
    """+5 points, 30% discordant, 2,000 questions (the pool), 400 experiments: decided better in
    at least 80% (the lower 99.9% Clopper-Pearson bound), wrong (worse, or equivalent) in at
    most alpha, and the sequence's edges (the rule before issue 52, on the same experiments)
    decide fewer."""
    rows, n = 400, 2000
    a, b = experiments(rows, n, 0.05, 0.30, seed=52)
    outcome, used = many_decisions(a, b, Rule(), pool=n)
    better = int((outcome == "better").sum())
    assert beta.ppf(LEVEL, better, rows - better + 1) >= 0.80, better
    wrong = int(np.isin(outcome, ("worse", "equivalent")).sum())  # +5 is beyond the margin
    assert wrong <= binom.ppf(1 - LEVEL, rows, Rule().alpha), wrong
    assert used[outcome == "better"].mean() < 0.7 * n  # decided, on average, well before the end
    before, _ = many_decisions(a, b, Rule(method="cs"), pool=n)
    assert (before == "better").sum() < better


@pytest.mark.parametrize(
    ("n", "rows", "discordant"),
    [(360, 3000, 0.30), (2000, 1000, 0.30), (2000, 1000, 0.10), (10_112, 500, 0.30)],
)
def test_wrong_calls_at_no_difference_stay_under_alpha(
    n: int, rows: int, discordant: float
) -> None:
    """A true difference of 0 called better or worse in at most alpha of the experiments. The
    rule here has no equivalence margin: every better or worse the default rule makes, it makes
    too (the tests of better and worse do not depend on the margin; equivalence only stops an
    experiment before a later call), so its wrong calls bound the default rule's."""
    a, b = experiments(rows, n, 0.0, discordant, seed=n + round(100 * discordant))
    alpha = Rule().alpha
    outcome, _ = many_decisions(a, b, Rule(margin=0), pool=n)
    wrong = int(np.isin(outcome, ("better", "worse")).sum())
    assert wrong <= binom.ppf(1 - LEVEL, rows, alpha), (wrong, rows)
    assert wrong > 0  # the tests spend their alpha: not a rule that never decides


ACCURACIES = {"base:1b": 0.60, "better:1b": 0.95, "worse:1b": 0.25}


def experiment_text(url: str, stop: bool) -> str:
    head = 'baseline = "base"\n'
    if stop:
        head += "[stop]\nalpha = 0.05\nmargin = 0.03\nmin_questions = 20\n"
    head += (
        '[base]\nseed = 0\nconcurrency = 16\nprotocol = { kind = "solo", samples = 1 }\n'
        f'extractor = {{ base_urls = ["{url}"] }}\n'
    )
    return head + "".join(
        f'[variants.{m.split(":")[0]}]\nagents = [{{ name = "a", model = "{m}", '
        f'base_urls = ["{url}"] }}]\n'
        for m in ACCURACIES
    )


async def test_stopping_decides_the_known_effects_on_a_quarter_of_the_questions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from crawdad.analysis.experiment_folder import load_experiment as load_folder
    from crawdad.analysis.metrics.stopping import outcomes_of, spending_table

    from crawdad.config import SelectionConfig
    from crawdad.data.questions import load_cladder, select
    from crawdad.demo import answer_key
    from crawdad.fake import FakeServer, LatencyModel
    from crawdad.fake.setups import models_for
    from crawdad.notebook import decisions as decision_frame
    from crawdad.resources import examples
    from crawdad.run import experiment as E
    from crawdad.run.scheduler import decisions_of, rule_judge

    dataset = select(load_cladder(examples()), SelectionConfig(limit=160), 0)
    n = len(dataset.questions)
    models = models_for(ACCURACIES, answer_key=answer_key(dataset.questions), accuracies=ACCURACIES)
    first_decision = asyncio.Event()
    made = E.experiment_scheduler

    def noting(*args: Any, **kwargs: Any) -> Any:  # the run is killed at its first decision
        scheduler = made(*args, **kwargs)
        say = scheduler.say

        def said(line: str) -> None:
            say(line)
            first_decision.set()

        scheduler.say = said
        return scheduler

    monkeypatch.setattr(E, "experiment_scheduler", noting)

    async with FakeServer("ollama", models, latency=LatencyModel(capacity=64)) as server:

        async def run(name: str, stop: bool) -> Any:
            path = tmp_path / f"{name}.toml"
            path.write_text(experiment_text(server.url, stop))
            spec, sha = E.load_experiment(path)
            configs = E.variant_configs(spec, str(path))
            manifest = E.experiment_manifest(spec, str(path), sha, list(configs))
            return await E.run_experiment(
                configs, manifest, dataset, tmp_path / name, progress=False, simulated=True
            )

        task = asyncio.create_task(run("stopped", True))
        await first_decision.wait()
        task.cancel()  # as Ctrl-C or a kill: finished debates are on disk
        with pytest.raises(asyncio.CancelledError):
            await task
        await run("stopped", True)  # resumed
        # the same experiment in full, beside it; its requests already answered are taken from
        # the stopped run's store (as a second experiment in one folder would)
        (tmp_path / "full").mkdir()
        shutil.copy(tmp_path / "stopped" / RESPONSES, tmp_path / "full" / RESPONSES)
        await run("full", False)

    table = decision_frame(tmp_path / "stopped").set_index("variant")
    assert table.loc["better", "decision"] == "better"
    assert table.loc["worse", "decision"] == "worse"
    assert table.loc["better", "questions"] <= n / 4 and table.loc["worse", "questions"] <= n / 4

    # the same decisions as the full run's records give, in the same order
    full = load_folder(tmp_path / "full")
    order, outcomes = outcomes_of(full)
    rule = E.stop_rule({"alpha": 0.05, "margin": 0.03, "min_questions": 20})
    again = decisions_of(order, outcomes, "base", rule_judge(rule, comparisons=2))
    for name, decision in again.items():
        what = decision.outcome if decision is not None else "undecided"
        assert what == table.loc[name, "decision"]
        if decision is not None:
            assert decision.questions == table.loc[name, "questions"]

    # what the report projects for a full pass is what the full run counted
    spent = spending_table(load_folder(tmp_path / "stopped")).set_index("variant")
    counted = {v.name: float(v.questions["requests"].sum()) for v in full.variants}
    for name, requests in counted.items():
        assert spent.loc[name, "full_requests"] == pytest.approx(requests, rel=0.01)
        assert spent.loc[name, "saved_requests"] == pytest.approx(
            requests - spent.loc[name, "requests"], rel=0.01, abs=1
        )
    assert spent.loc["better", "saved_requests"] > 0.5 * counted["better"]
