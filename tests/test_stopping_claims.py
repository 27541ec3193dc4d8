"""Claims the size of the evidence (issue 52): every decision names the pool of questions it is
about and the level it holds at (alpha shared among comparisons said so), no text claims more
("questions like these", "what a paper claims"), and the caveats are printed only where true."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pandas as pd
import pytest

from crawdad.run.scheduler import BudgetSpent, describe
from crawdad.stopping.claims import level_words, pool_words
from crawdad.stopping.decide import Decision, target_words

ROOT = Path(__file__).resolve().parents[1]
POOL = "the 360 questions of rung 3 selected from data/x.json (the first 360 of the seeded order)"


def test_a_pool_is_named_by_its_size_its_filters_and_its_file() -> None:
    assert pool_words(10112, "cladder-v1-q-balanced.json") == (
        "the 10,112 questions of cladder-v1-q-balanced.json"
    )
    assert pool_words(360, "data/x.json", {"rungs": [3], "limit": 360}) == POOL
    many = pool_words(40, "f.json", {"rungs": [1, 2], "query_types": ["ate"], "sample": 50})
    assert many == (
        "the 40 questions of rungs 1, 2, query type ate selected from f.json (a seeded sample "
        "of 50 stratified by rung and alignment)"
    )


def test_the_level_says_when_alpha_is_shared() -> None:
    assert level_words(0.05) == "95% confidence"
    assert level_words(0.05, 4) == (
        "95% confidence, alpha 5% shared by 4 comparisons (each sequence at 98.75%)"
    )


@pytest.mark.parametrize("target", ["models", "run"])
@pytest.mark.parametrize("outcome", ["better", "worse", "equivalent", "undecided"])
def test_every_decision_line_names_its_pool_and_level(target: str, outcome: str) -> None:
    d = Decision(
        outcome=outcome,  # type: ignore[arg-type]
        questions=29,
        estimate=-0.1,
        lower=-0.2,
        upper=-0.01,
        alpha=0.05 / 4,
        target=target,  # type: ignore[arg-type]
    )
    line = describe("v", d, "base", POOL, comparisons=4)
    assert POOL in line and "at 95% confidence, alpha 5% shared by 4 comparisons" in line
    assert "like these" not in line and "paper claims" not in line and "sampling" not in line
    one = d.model_copy(update={"alpha": 0.05})  # a single run: its accuracy, one comparison
    alone = describe("", one, None, POOL)
    assert POOL in alone and "at 95% confidence)" in alone and "shared" not in alone


def test_a_decision_of_the_tests_says_so_and_shows_the_sequence_for_the_size() -> None:
    d = Decision(
        outcome="better", questions=40, estimate=0.2, lower=-0.01, upper=0.4, alpha=0.05 / 3,
        target="models", method="test", e_value=130.0,
    )  # fmt: skip
    line = describe("v", d, "base", POOL, comparisons=3)
    assert "decided by its sequential test, at 95% confidence, alpha 5% shared by 3" in line
    assert "its confidence sequence at the stop: \u22121.0 to +40.0 points" in line
    assert POOL in line and "lies in" not in line
    # an interval that still holds 0 says why it may, beside a decision of the test
    assert "+40.0 points, wider than the test: it may still hold 0)" in line
    clear = describe("v", d.model_copy(update={"lower": 0.01}), "base", POOL, comparisons=3)
    assert "+1.0 to +40.0 points); it starts" in clear and "may still hold 0" not in clear


def test_the_models_target_is_worded_for_fixed_answers_too() -> None:
    """At temperature 0 or with crawdad's fixed seeds there is no sampling of responses: the
    claim is about the models' answers to the pool under the run's settings."""
    words = target_words("models", "difference", POOL)
    assert f"their answers to {POOL}" in words and "under this run's settings" in words
    assert "sampling" not in words and "like these" not in words
    assert POOL in target_words("run", "accuracy", POOL)


def test_a_budget_spent_or_contradicted_line_claims_nothing() -> None:
    line = describe("v", BudgetSpent(12.0, 10.0, 40), "base", POOL)
    assert "undecided" in line and "lies in" not in line
    broken = Decision(
        outcome="contradicted",
        questions=9,
        estimate=math.nan,
        lower=math.nan,
        upper=math.nan,
        alpha=0.05,
        target="models",
    )
    assert "no claim" in describe("v", broken, "base", POOL)


def test_no_text_of_crawdad_or_its_docs_claims_questions_like_these() -> None:
    pattern = re.compile(r"like these|paper claims|models' sampling", re.IGNORECASE)
    found = [
        f"{path.relative_to(ROOT)}:{n}"
        for folder in ("crawdad", "analysis", "docs")
        for path in (ROOT / folder).rglob("*")
        if path.suffix in (".py", ".md", ".js", ".html") and path.is_file()
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if pattern.search(line)
    ]
    assert found == []


def _guarantee(target: str, unscored: int) -> str:
    from crawdad.analysis.experiment_report import stopping_guarantee

    from crawdad.run.experiment import stop_rule

    return stopping_guarantee(stop_rule({"target": target}), "base", 4, POOL, unscored)


def test_the_guarantee_names_pool_and_shared_level_and_leaves_the_population_only_when_true() -> (
    None
):
    for target in ("models", "run"):
        text = _guarantee(target, 0)
        assert POOL in text and "95% confidence, alpha 5% shared by 4 comparisons" in text
        assert "population" not in text.split("A decision uses only")[1]
    assert "and out of the population" in _guarantee("run", 3)
    models = _guarantee("models", 3)
    assert "left out of every sequence." in models and "out of the population" not in models
    assert "other temperatures or other seeds may differ" in _guarantee("models", 0)


def _paired(variant: str) -> pd.DataFrame:
    from crawdad.analysis.metrics import experiment as X

    row = dict.fromkeys(X.PAIRED_COLUMNS, 0)
    row.update(
        variant=variant, baseline="base", group="all", n=40, left_out=0, left_out_note="",
        diff=0.1, ci_lo=0.01, ci_hi=0.2, p_value=0.03, variant_acc=0.7, baseline_acc=0.6,
        only_variant=6, only_baseline=2,
    )  # fmt: skip
    return pd.DataFrame([row], columns=X.PAIRED_COLUMNS)


def _decisions(variant: str, decision: str) -> pd.DataFrame:
    from crawdad.analysis.metrics.stopping import DECISION_COLUMNS

    row = dict(
        variant=variant, decision=decision, questions=40, estimate=0.1, lower=0.01, upper=0.2,
        settled=40, unscored=0, target="models", about="", reason="",
    )  # fmt: skip
    return pd.DataFrame([row], columns=DECISION_COLUMNS)


@pytest.mark.parametrize(
    ("decision", "narrow"), [("better", True), ("budget spent", False), ("contradicted", False)]
)
def test_too_narrow_is_said_only_of_a_variant_its_sequence_stopped(
    decision: str, narrow: bool
) -> None:
    from crawdad.analysis.experiment_report import _paired_section

    section = _paired_section(
        _paired("v"), "base", _decisions("v", decision), 0, frozenset({"v"}), (POOL, 0.05)
    )
    text = str(section.blocks[0])
    assert ("too narrow after it" in text) is narrow
    assert "ignore" in text  # every stopped variant's fixed-sample figures carry a caveat
    if decision == "better":
        assert POOL in text and "at 95% confidence" in text
        assert "the difference at the stop; stopping early overstates it" in text
    # a variant decided at its last question was not cut short: no caveat at all
    full = _paired_section(
        _paired("v"), "base", _decisions("v", decision), 0, frozenset(), (POOL, 0.05)
    )
    assert "ignore" not in str(full.blocks[0])


def test_the_reports_sentence_says_why_an_interval_of_a_decided_variant_may_hold_0() -> None:
    import pandas as pd
    from crawdad.analysis.experiment_report import stopped_sentence

    row = {"variant": "v", "decision": "better", "questions": 45, "estimate": 0.24}
    row |= {"lower": -0.009, "upper": 0.488, "target": "models"}
    said = stopped_sentence(pd.Series(row), "base", POOL, 0.05, 3)
    assert "(the interval to quote; it still holds 0: its sequential test decided" in said
    clear = stopped_sentence(pd.Series(row | {"lower": 0.006}), "base", POOL, 0.05, 3)
    assert "(the interval to quote);" in clear and "holds 0" not in clear
