"""Issue 37's acceptance test, on the fakes over the whole CLadder sample (3,652 questions): three
variants against the baseline (12 points better, 12 points worse, the baseline's accuracy with
other responses) at alpha 0.05 and a 3-point margin. Better and worse are decided correctly on at
most a quarter of the questions, the null variant is not decided better or worse, the report's
projected full pass equals the requests the same experiment counts run in full, and a run killed
mid-way and resumed reaches the decisions the full run's records give.

Slow (some minutes on a small shared machine: the full run alone is 14,608 debates); it needs the
sample beside the checkout (../shared/data/cladder-sample) and crawdad.stopping's statistics."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

import pytest

from crawdad.run.response_store import RESPONSES
from tests.conftest import SHARED_SAMPLE

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(3600),
    pytest.mark.skipif(
        not (SHARED_SAMPLE / "cladder-sample-q.json").exists(), reason="no CLadder sample here"
    ),
]

ACCURACIES = {"base:1b": 0.70, "better:1b": 0.82, "worse:1b": 0.58, "null:1b": 0.70}


def experiment_text(url: str, stop: bool) -> str:
    head = 'baseline = "base"\n'
    if stop:
        head += "[stop]\nalpha = 0.05\nmargin = 0.03\n"
    head += (
        '[base]\nseed = 0\nconcurrency = 32\nprotocol = { kind = "solo", samples = 1 }\n'
        f'extractor = {{ base_urls = ["{url}"] }}\n'
    )
    return head + "".join(
        f'[variants.{m.split(":")[0]}]\nagents = [{{ name = "a", model = "{m}", '
        f'base_urls = ["{url}"] }}]\n'
        for m in ACCURACIES
    )


async def test_stopping_decides_the_known_effects_on_a_quarter_of_the_cladder_sample(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("crawdad.stopping.decide")
    from crawdad.analysis.experiment_folder import load_experiment as load_folder
    from crawdad.analysis.metrics.stopping import outcomes_of, spending_table

    from crawdad.config import SelectionConfig
    from crawdad.data.questions import load_cladder, select
    from crawdad.demo import answer_key
    from crawdad.fake import FakeServer, LatencyModel
    from crawdad.fake.setups import models_for
    from crawdad.notebook import decisions
    from crawdad.run import experiment as E
    from crawdad.run.scheduler import decisions_of, rule_judge

    dataset = select(load_cladder(SHARED_SAMPLE), SelectionConfig(), 0)
    assert len(dataset.questions) == 3652
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

    async with FakeServer("ollama", models, latency=LatencyModel(capacity=128)) as server:

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
        # the stopped run's store (as a second experiment in one folder would): the records, and
        # the requests they count, are the same as sent afresh, for half the time
        (tmp_path / "full").mkdir()
        shutil.copy(tmp_path / "stopped" / RESPONSES, tmp_path / "full" / RESPONSES)
        await run("full", False)

    table = decisions(tmp_path / "stopped").set_index("variant")
    n = len(dataset.questions)
    assert table.loc["better", "decision"] == "better"
    assert table.loc["worse", "decision"] == "worse"
    assert table.loc["better", "questions"] <= n / 4 and table.loc["worse", "questions"] <= n / 4
    assert table.loc["null", "decision"] not in ("better", "worse")

    # the same decisions as the full run's records give, in the same order
    full = load_folder(tmp_path / "full")
    order, outcomes = outcomes_of(full)
    rule = E.stop_rule({"alpha": 0.05, "margin": 0.03})
    again = decisions_of(order, outcomes, "base", rule_judge(rule, comparisons=3))
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
