"""The statistics of stopping: confidence sequences over a finite population sampled without
replacement (crawdad/stopping/sequences.py) and the rule's decision (crawdad/stopping/decide.py).

Small seeded simulations; the whole file runs in a few seconds."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from pydantic import ValidationError

from crawdad.stopping.decide import Rule, corrected_alpha, decide
from crawdad.stopping.sequences import (
    ConfidenceSequence,
    accuracy_sequence,
    difference_sequence,
    iid_log_capital,
    to_unit,
)


def _population(rng: np.random.Generator, n: int, p: float) -> np.ndarray:
    return (rng.random(n) < p).astype(float)


def _reference(x: np.ndarray, N: int, alpha: float, breaks: int) -> tuple[np.ndarray, np.ndarray]:
    """The hedged WoR betting sequence written out plainly: every candidate, every step, no
    pruning (the paper's construction, to check the fast one against)."""
    grid = np.linspace(0, 1, breaks + 1)
    n = len(x)
    lower, upper = np.zeros(n), np.ones(n)
    log_up = np.zeros(len(grid))
    log_down = np.zeros(len(grid))
    out_lo = np.zeros(len(grid), dtype=bool)  # excluded for good (running intersection)
    out_hi = np.zeros(len(grid), dtype=bool)
    s = 0.0
    ss = 0.25
    for i in range(n):
        t = i + 1
        lam = math.sqrt(2 * math.log(2 / alpha) / ((ss / t) * t * math.log(1 + t)))
        with np.errstate(divide="ignore", invalid="ignore"):
            mu = (N * grid - s) / (N - t + 1)
            log_up += np.log1p(np.minimum(lam, 0.5 / mu) * (x[i] - mu))
            log_down += np.log1p(-np.minimum(lam, 0.5 / (1 - mu)) * (x[i] - mu))
        s += x[i]
        ss += (x[i] - (0.5 + s) / (t + 1)) ** 2
        possible_lo = grid >= s / N
        possible_hi = grid <= (s + N - t) / N
        feasible = possible_lo & possible_hi
        rej_lo = ~possible_lo | (feasible & (math.log(0.5) + log_up >= math.log(1 / alpha)))
        rej_hi = ~possible_hi | (feasible & (math.log(0.5) + log_down >= math.log(1 / alpha)))
        # leading run of rejections from the left, trailing from the right
        lead = len(grid) if rej_lo.all() else int(np.argmin(rej_lo))
        trail = len(grid) if rej_hi.all() else int(np.argmin(rej_hi[::-1]))
        out_lo[:lead] = True
        out_hi[len(grid) - trail :] = True
        k_lo = int(out_lo.sum())
        k_hi = int(out_hi.sum())
        lo = grid[k_lo - 1] if k_lo else 0.0
        hi = grid[len(grid) - k_hi] if k_hi else 1.0
        lower[i] = max(lo, s / N, lower[i - 1] if i else 0.0)
        upper[i] = min(hi, (s + N - t) / N, upper[i - 1] if i else 1.0)
    if n == N:
        lower[-1] = upper[-1] = s / N
    return lower, upper


def test_matches_the_plain_construction() -> None:
    rng = np.random.default_rng(1)
    for N, n, p in [(300, 300, 0.7), (500, 260, 0.2), (200, 200, 1.0), (150, 90, 0.5)]:
        x = _population(rng, N, p)[:n]
        seq = accuracy_sequence(x, N, 0.05, breaks=400)
        lo, hi = _reference(x, N, 0.05, breaks=400)
        np.testing.assert_allclose(seq["lower"], lo, atol=1e-12)
        np.testing.assert_allclose(seq["upper"], hi, atol=1e-12)


def test_frame_shape_and_attrs() -> None:
    seq = accuracy_sequence([1, 0, 1], 10, 0.05)
    assert list(seq.columns) == ["questions", "estimate", "lower", "upper", "contradicted"]
    assert seq["questions"].tolist() == [1, 2, 3]
    assert seq["estimate"].tolist() == pytest.approx([1, 0.5, 2 / 3])
    assert seq.attrs == {"alpha": 0.05, "population": 10, "target": "run", "kind": "accuracy"}
    iid = accuracy_sequence([1, 0, 1], None, 0.05)
    assert iid.attrs == {"alpha": 0.05, "population": None, "target": "models", "kind": "accuracy"}
    empty = accuracy_sequence([], 10, 0.05)
    assert len(empty) == 0 and list(empty.columns) == list(seq.columns)


@pytest.mark.parametrize(
    "bad",
    [
        {"outcomes": [0.5, 1.2], "population": 5, "alpha": 0.05},
        {"outcomes": [1, 0, 1], "population": 2, "alpha": 0.05},
        {"outcomes": [1, 0], "population": 5, "alpha": 0.0},
        {"outcomes": [float("nan")], "population": 5, "alpha": 0.05},
    ],
)
def test_bad_input_is_refused(bad: dict) -> None:
    with pytest.raises(ValueError):
        accuracy_sequence(**bad)


def test_coverage_of_the_finite_population_mean() -> None:
    """In 200 seeded runs the sequence holds the true finite-population mean at EVERY step in at
    least 1 - alpha of them (the betting sequence is conservative: usually all of them)."""
    alpha = 0.1
    rng = np.random.default_rng(7)
    missed = 0
    for run in range(200):
        N = 200
        pop = _population(rng, N, [0.1, 0.5, 0.75, 0.95][run % 4])
        mean = pop.mean()
        x = rng.permutation(pop)[:150]
        seq = accuracy_sequence(x, N, alpha, breaks=500)
        missed += bool(((seq["lower"] > mean + 1e-12) | (seq["upper"] < mean - 1e-12)).any())
    assert missed <= alpha * 200


def test_coverage_of_a_paired_difference() -> None:
    alpha = 0.1
    rng = np.random.default_rng(8)
    missed = 0
    for _ in range(150):
        N = 240
        a = _population(rng, N, 0.7)
        b = a.copy()
        flip = rng.random(N) < 0.3
        b[flip] = 1 - b[flip]
        truth = a.mean() - b.mean()
        order = rng.permutation(N)[:180]
        seq = difference_sequence(a[order], b[order], N, alpha, breaks=500)
        missed += bool(((seq["lower"] > truth + 1e-12) | (seq["upper"] < truth - 1e-12)).any())
    assert missed <= alpha * 150


@pytest.mark.parametrize("values", ["binary", "continuous"])
def test_closes_on_the_exact_mean(values: str) -> None:
    rng = np.random.default_rng(3)
    N = 437
    pop = _population(rng, N, 0.63) if values == "binary" else rng.beta(2, 5, N)
    seq = accuracy_sequence(pop, N, 0.05)
    last = seq.iloc[-1]
    assert last["lower"] == last["upper"] == pytest.approx(pop.mean(), abs=1e-12)
    assert last["estimate"] == pytest.approx(pop.mean())
    a, b = _population(rng, N, 0.6), _population(rng, N, 0.5)
    d = difference_sequence(a, b, N, 0.05).iloc[-1]
    assert d["lower"] == pytest.approx(a.mean() - b.mean(), abs=1e-12)
    assert d["upper"] == pytest.approx(a.mean() - b.mean(), abs=1e-12)


def test_nested_and_narrowing() -> None:
    rng = np.random.default_rng(4)
    N = 2000
    x = _population(rng, N, 0.8)
    seq = accuracy_sequence(x, N, 0.05)
    lo, hi = seq["lower"].to_numpy(), seq["upper"].to_numpy()
    assert (np.diff(lo) >= 0).all() and (np.diff(hi) <= 0).all()
    assert (lo <= hi).all() and lo.min() >= 0 and hi.max() <= 1
    assert hi[0] - lo[0] > 0.9  # one question says almost nothing
    assert hi[999] - lo[999] < 0.1
    # a stricter alpha gives a wider sequence at every step (Bonferroni's price)
    strict = accuracy_sequence(x, N, 0.05 / 4)
    assert (strict["lower"] <= seq["lower"] + 1e-12).all()
    assert (strict["upper"] >= seq["upper"] - 1e-12).all()


def test_wider_than_a_fixed_sample_interval_but_not_absurdly() -> None:
    """At n = 500 of 10,112 the anytime-valid interval is wider than Wilson's fixed-n interval
    (the price of looking all along), and within a small factor of it."""
    from scipy.stats import binomtest

    rng = np.random.default_rng(5)
    N = 10_112
    x = _population(rng, N, 0.7)
    seq = accuracy_sequence(x[:500], N, 0.05)
    ci = binomtest(int(x[:500].sum()), 500).proportion_ci(method="wilson")
    cs_width = seq["upper"].iloc[-1] - seq["lower"].iloc[-1]
    ci_width = ci.high - ci.low
    assert ci_width < cs_width < 3 * ci_width


def test_fed_in_pieces_equals_fed_at_once() -> None:
    rng = np.random.default_rng(6)
    N = 1000
    x = _population(rng, N, 0.4)
    whole = accuracy_sequence(x, N, 0.05)
    cs = ConfidenceSequence(N, 0.05)
    parts = [cs.extend(x[a:b]) for a, b in [(0, 37), (37, 300), (300, 301), (301, 1000)]]
    np.testing.assert_allclose(np.concatenate([p[0] for p in parts]), whole["lower"], atol=1e-12)
    np.testing.assert_allclose(np.concatenate([p[1] for p in parts]), whole["upper"], atol=1e-12)
    with pytest.raises(ValueError):
        cs.extend([1.0])  # the population is used up


def test_difference_maps_back_onto_minus_one_to_one() -> None:
    a = np.array([1, 1, 0, 1, 0, 1, 1, 1])
    b = np.array([0, 1, 0, 0, 1, 1, 0, 1])
    seq = difference_sequence(a, b, 20, 0.05)
    assert seq.attrs["kind"] == "difference"
    assert seq["estimate"].iloc[-1] == pytest.approx((a - b).mean())
    assert seq["lower"].min() >= -1 and seq["upper"].max() <= 1
    with pytest.raises(ValueError):
        difference_sequence(a, b[:-1], 20, 0.05)


# ---- decide ----------------------------------------------------------------------------------


def _frame(rows: list[tuple[int, float, float]], kind: str, alpha: float = 0.05) -> pd.DataFrame:
    seq = pd.DataFrame(
        [(q, (lo + hi) / 2, lo, hi) for q, lo, hi in rows],
        columns=["questions", "estimate", "lower", "upper"],
    )
    seq.attrs.update({"alpha": alpha, "kind": kind})
    return seq


def test_decide_better_worse_equivalent_undecided() -> None:
    rule = Rule(target="run", margin=0.03, min_questions=10)
    better = _frame(
        [(5, 0.01, 0.2), (10, -0.01, 0.1), (20, 0.005, 0.09), (30, 0.02, 0.08)], "difference"
    )
    d = decide(better, rule)
    assert (d.outcome, d.questions, d.lower, d.upper) == ("better", 20, 0.005, 0.09)
    assert d.decided and d.alpha == 0.05
    worse = _frame([(10, -0.2, 0.05), (11, -0.15, -0.001)], "difference")
    assert decide(worse, rule).outcome == "worse"
    same = _frame([(10, -0.05, 0.05), (12, -0.03, 0.029)], "difference")
    assert (decide(same, rule).outcome, decide(same, rule).questions) == ("equivalent", 12)
    wide = _frame([(10, -0.05, 0.05), (12, -0.04, 0.02)], "difference")
    d = decide(wide, rule)
    assert (d.outcome, d.questions, d.decided) == ("undecided", 12, False)  # never equivalent


def test_decide_waits_for_min_questions_and_stops_at_max() -> None:
    seq = _frame([(5, 0.1, 0.3), (49, 0.1, 0.3), (50, -0.1, 0.3), (60, 0.01, 0.2)], "difference")
    assert decide(seq, Rule(target="run", min_questions=50)).questions == 60
    assert decide(seq, Rule(target="run", min_questions=1)).questions == 5
    capped = decide(seq, Rule(target="run", min_questions=50, max_questions=55))
    assert (capped.outcome, capped.questions) == ("undecided", 50)
    with pytest.raises(ValidationError):
        Rule(target="run", min_questions=100, max_questions=50)


def test_decide_a_small_true_difference_is_better_not_equivalent() -> None:
    """Excluding 0 is reported, however small the difference; inside the margin only when 0 is
    not excluded."""
    seq = _frame([(100, 0.004, 0.02)], "difference")
    assert decide(seq, Rule(target="run", margin=0.03, min_questions=1)).outcome == "better"


def test_decide_a_single_run_is_precise_at_its_half_width() -> None:
    seq = _frame([(50, 0.5, 0.9), (100, 0.61, 0.79), (200, 0.66, 0.74)], "accuracy")
    assert decide(seq, Rule(target="run", half_width=0.1, min_questions=1)).questions == 100
    assert decide(seq, Rule(target="run", half_width=0.1, min_questions=1)).outcome == "precise"
    assert (
        decide(seq, Rule(target="run", min_questions=1)).outcome == "undecided"
    )  # no target, no stop
    assert decide(
        seq.assign(upper=1.0), Rule(target="run", half_width=0.01), kind="accuracy"
    ).outcome == ("undecided")
    unlabelled = seq.copy()
    unlabelled.attrs = {}
    with pytest.raises(ValueError, match="kind"):
        decide(unlabelled, Rule(target="run"))


def test_bonferroni_alpha_is_split_and_checked() -> None:
    rule = Rule(target="run", alpha=0.05)
    assert corrected_alpha(rule, 1) == 0.05
    assert corrected_alpha(rule, 4) == pytest.approx(0.0125)
    with pytest.raises(ValueError):
        corrected_alpha(rule, 0)
    seq = difference_sequence([1, 0, 1], [0, 0, 1], 50, corrected_alpha(rule, 4))
    assert decide(seq, rule, comparisons=4).alpha == pytest.approx(0.0125)
    with pytest.raises(ValueError, match="corrected_alpha"):
        decide(seq, rule)  # computed at 0.0125, the rule over 1 comparison needs 0.05


def test_decide_on_an_empty_sequence() -> None:
    d = decide(difference_sequence([], [], 10, 0.05), Rule(target="run"))
    assert (d.outcome, d.questions) == ("undecided", 0)


def test_no_wrong_decisions_at_effect_zero() -> None:
    """A null variant (same accuracy as the baseline, 30% of pairs discordant) is decided better
    or worse in at most alpha of 100 seeded experiments, looked at after every question; a
    variant 20 points better is decided better every time."""
    rng = np.random.default_rng(11)
    N = 400
    rule = Rule(target="run", alpha=0.05, margin=0.03, min_questions=20)
    wrong = 0
    for effect, runs in ((0.0, 100), (0.2, 20)):
        for _ in range(runs):
            only_v = round(N * (0.3 + effect) / 2)
            only_b = round(N * (0.3 - effect) / 2)
            rest = N - only_v - only_b
            v = np.r_[
                np.ones(only_v), np.zeros(only_b), np.ones(rest // 2), np.zeros(rest - rest // 2)
            ]
            b = np.r_[
                np.zeros(only_v), np.ones(only_b), np.ones(rest // 2), np.zeros(rest - rest // 2)
            ]
            order = rng.permutation(N)
            d = decide(difference_sequence(v[order], b[order], N, rule.alpha, breaks=500), rule)
            if effect == 0:
                wrong += d.outcome in ("better", "worse")
            else:
                assert d.outcome == "better" and d.questions < N
    assert wrong <= 0.05 * 100


def test_the_statistics_stand_alone() -> None:
    """crawdad/stopping imports nothing of crawdad but errors, so the run machinery and the
    analysis can both use it."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent / "crawdad" / "stopping"
    for path in root.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            for name in names:
                if name.startswith("crawdad"):
                    assert name.startswith(("crawdad.stopping", "crawdad.errors")), (path, name)


# --- the two targets ------------------------------------------------------------------------


def test_the_models_target_calls_equal_models_different_in_at_most_alpha() -> None:
    """Two variants equal in expected accuracy (60% and 60%, independent), 360 questions,
    target "models": called better or worse in at most alpha of 500 repetitions. Computed in one
    numpy pass (`iid_log_capital` at the null, which bounds the sequence's own calls: see the
    next test). Against the same data, the run's target (whose claim is about each run's own
    difference, not the models') calls most of them."""
    rng = np.random.default_rng(44)
    a = rng.random((500, 360)) < 0.6
    b = rng.random((500, 360)) < 0.6
    threshold = math.log(1 / 0.05)
    up, down = iid_log_capital(to_unit(a, b), 0.5, 0.05)
    called = (up >= threshold).any(axis=1) | (down >= threshold).any(axis=1)
    assert called.sum() <= 0.05 * 500
    rule = Rule(target="run", min_questions=20)
    run_calls = sum(
        decide(difference_sequence(a[i], b[i], 360, 0.05, breaks=500), rule).outcome
        in ("better", "worse")
        for i in range(20)
    )
    assert run_calls >= 5  # a claim about the models read from it would be wrong this often


def test_the_default_rule_calls_equal_models_different_in_at_most_alpha() -> None:
    """The same setting with the default rule (the tests, tuned to the 360 questions): called
    better or worse in at most alpha of 1,000 repetitions (the slow acceptance test holds it
    there at 2,000 and 10,112 questions too), and still decides a real 30-point difference."""
    from crawdad.stopping.decide import many_decisions

    rng = np.random.default_rng(45)
    a = (rng.random((1000, 360)) < 0.6).astype(float)
    b = (rng.random((1000, 360)) < 0.6).astype(float)
    outcome, _ = many_decisions(a, b, Rule(min_questions=20), pool=360)
    assert np.isin(outcome, ("better", "worse")).sum() <= 0.05 * 1000
    better = (rng.random((50, 360)) < 0.9).astype(float)
    outcome, _ = many_decisions(better, b[:50], Rule(min_questions=20), pool=360)
    assert (outcome == "better").all()


def test_the_vectorised_capital_is_the_sequences_own() -> None:
    """The models' sequence lies above 0 at step t exactly when the capital against the first
    candidate of its grid above 0 has crossed by then (and below, the same from the other
    side): the fast simulation counts what the sequence decides."""
    rng = np.random.default_rng(5)
    threshold = math.log(1 / 0.05)
    step = 1 / 5000
    for p in (0.6, 0.75, 0.45):
        a = rng.random((6, 300)) < p
        b = rng.random((6, 300)) < 0.6
        unit = to_unit(a, b)
        up, _ = iid_log_capital(unit, 0.5 + step, 0.05)
        _, down = iid_log_capital(unit, 0.5 - step, 0.05)
        for i in range(len(a)):
            seq = difference_sequence(a[i], b[i], None, 0.05)
            above = np.maximum.accumulate(up[i] >= threshold)
            below = np.maximum.accumulate(down[i] >= threshold)
            assert ((seq["lower"] > 0).to_numpy() == above).all()
            assert ((seq["upper"] < 0).to_numpy() == below).all()


def test_the_models_sequence_never_closes_and_covers_the_expected_mean() -> None:
    rng = np.random.default_rng(8)
    misses = 0
    for _ in range(40):
        x = (rng.random(300) < 0.7).astype(float)
        seq = accuracy_sequence(x, None, 0.05, breaks=1000)
        misses += bool(((seq["lower"] > 0.7) | (seq["upper"] < 0.7)).any())
        assert seq["upper"].iloc[-1] - seq["lower"].iloc[-1] > 0.05  # no finite population
    assert misses <= 4
    with pytest.raises(ValueError, match="population"):
        ConfidenceSequence(None, 0.05).extend([1.0], [5])


def test_a_shrinking_population_closes_on_the_scored_questions() -> None:
    """Questions found to have no exact answer leave the population: with the last population
    the number scored, the sequence ends on their exact mean."""
    x = np.array([1, 0, 1, 1, 0, 1, 1, 1], dtype=float)
    pops = [10, 10, 9, 9, 9, 8, 8, 8]  # two of ten unscored, met along the way
    seq = accuracy_sequence(x, pops, 0.05)
    assert seq["lower"].iloc[-1] == seq["upper"].iloc[-1] == pytest.approx(x.mean())
    assert seq.attrs["population"] == 8 and seq.attrs["target"] == "run"
    open_end = accuracy_sequence(x, 10, 0.05)  # the unscored still counted: never closes
    assert open_end["upper"].iloc[-1] - open_end["lower"].iloc[-1] > 0.1
    with pytest.raises(ValueError, match="shrink"):
        accuracy_sequence(x, [8, 9, 9, 9, 9, 9, 9, 9], 0.05)
    with pytest.raises(ValueError, match="already seen"):
        accuracy_sequence(x, [10, 10, 9, 9, 9, 8, 7, 7], 0.05)


def test_an_empty_intersection_is_a_contradiction_never_a_point() -> None:
    """At alpha = 0.9 both gamblers win fast and the running intersection runs empty: the
    bounds are NaN from there on, the decision is "contradicted", and its words say so."""
    from crawdad.run.scheduler import describe

    x = np.r_[np.ones(40), np.zeros(40)]
    seq = accuracy_sequence(x, None, 0.9, breaks=500)
    assert seq["contradicted"].any()
    first = int(seq["contradicted"].to_numpy().argmax())
    assert seq["contradicted"].iloc[first:].all()
    assert seq["lower"].iloc[first:].isna().all() and seq["upper"].iloc[first:].isna().all()
    assert (seq["lower"].iloc[:first] <= seq["upper"].iloc[:first]).all()
    rule = Rule(alpha=0.9, min_questions=1)  # no half_width: never precise
    d = decide(seq, rule)
    assert (d.outcome, d.questions, d.decided) == ("contradicted", first + 1, False)
    said = describe("v", d, None)
    assert "contradicted" in said and "a miss" in said and "lies in" not in said


def test_a_rule_decides_only_sequences_about_its_target() -> None:
    seq = difference_sequence([1, 0, 1], [0, 0, 1], 10, 0.05)
    with pytest.raises(ValueError, match="this run"):
        decide(seq, Rule())  # the default target is the models
    assert Rule().target == "models"
    assert decide(seq, Rule(target="run")).target == "run"
    assert decide(difference_sequence([1], [0], None, 0.05), Rule(method="cs")).target == "models"
    with pytest.raises(ValueError, match=r"decide\.sequence"):  # the tests decide: no e_* columns
        decide(difference_sequence([1], [0], None, 0.05), Rule())


# --- the tests that decide (issue 52) --------------------------------------------------------


def _pairs(rng: np.random.Generator, rows: int, n: int, p: float, flip: float) -> tuple:
    """Rows of paired 0/1 outcomes: the baseline right with probability p, the variant its
    answers with a share `flip` of them turned over (the discordant pairs, all in one direction
    when `flip` is negative: turned right only where the baseline was wrong)."""
    b = (rng.random((rows, n)) < p).astype(float)
    turn = rng.random((rows, n)) < abs(flip)
    a = np.where(turn, 1 - b, b) if flip >= 0 else np.where(turn & (b == 0), 1.0, b)
    return a, b


def test_the_vectorised_decisions_are_the_scalar_decision() -> None:
    """`many_decisions` (many experiments at once, what the bench and the acceptance test count) gives
    each row exactly what `decision` gives it, for both methods, every outcome, and a
    max_questions."""
    from crawdad.stopping.decide import decision, many_decisions

    rng = np.random.default_rng(21)
    seen = set()
    for method in ("test", "cs"):
        for rule in (
            Rule(method=method, min_questions=20, margin=0.05),
            Rule(method=method, min_questions=20, margin=0.05, max_questions=150),
        ):
            for p, flip in ((0.6, 0.3), (0.6, 0.04), (0.6, -0.12), (0.3, -0.12)):
                a, b = _pairs(rng, 3, 300, p, flip)
                if p == 0.3:
                    a, b = b, a  # the variant worse
                outcome, used = many_decisions(a, b, rule, pool=300)
                for i in range(len(a)):
                    d = decision(a[i], b[i], rule)
                    assert (d.outcome, d.questions) == (outcome[i], used[i]), (method, p, i)
                    assert d.method == method
                seen |= {(method, str(o)) for o in outcome}
    for method in ("test", "cs"):
        assert {(method, o) for o in ("better", "worse", "equivalent", "undecided")} <= seen
    with pytest.raises(ValueError, match="models"):
        many_decisions(a, b, Rule(target="run"))


def test_the_tests_bets_use_only_the_past_and_the_pool() -> None:
    """The evidence over a prefix is the prefix of the evidence over the whole (every bet is fixed
    before its pair: the e-process looked at after every question is the same one), concordant
    pairs leave the better and worse wealth where it was, and the pool, fixed in advance, tunes
    the bets."""
    from crawdad.stopping.betting import evidence, log_wealth

    rng = np.random.default_rng(3)
    a, b = _pairs(rng, 1, 800, 0.6, 0.3)
    whole = evidence(a[0], b[0], 0.05, 2000, 0.03)
    part = evidence(a[0, :300], b[0, :300], 0.05, 2000, 0.03)
    for claim, values in part.items():
        np.testing.assert_array_equal(values, whole[claim][:300])
    d = a[0] - b[0]
    steps = np.diff(np.r_[0.0, log_wealth(d, -1.0, 0.05, 2000)[0]])
    assert (steps[d == 0] == 0).all() and (steps[d != 0] != 0).all()
    other = evidence(a[0], b[0], 0.05, 10_112, 0.03)
    assert not np.array_equal(other["better"], whole["better"])
    assert (evidence(a[0], b[0], 0.05, 2000, 0.0)["above"] == -np.inf).all()  # no margin
    everything = evidence(a[0], b[0], 0.05, 2000, 1.0)  # a margin of 1: equivalent at once
    assert np.isfinite(everything["above"]).all() and everything["below"][-1] > 3


def test_the_test_decides_and_the_sequence_shows_the_size() -> None:
    """Decided by the tests: the Decision says so and carries the deciding e-value (past 2 /
    alpha), and its interval is the confidence sequence's at the stop, which may still hold 0:
    the tests spend alpha on the question asked, the sequence on every value at once. +5 points,
    30% discordant pairs, 2,000 questions."""
    from crawdad.stopping.decide import decision, sequence

    rng = np.random.default_rng(52)
    rule = Rule()
    decided = held_zero = 0
    for _ in range(8):
        u = rng.random(2000)
        a = ((u < 0.175) | ((u >= 0.3) & (u < 0.72))).astype(float)  # only a: 17.5%
        b = (((u >= 0.175) & (u < 0.3)) | ((u >= 0.3) & (u < 0.72))).astype(float)  # only b: 12.5%
        seq = sequence(a, b, rule, pool=2000)
        assert {"e_better", "e_worse", "e_above", "e_below"} <= set(seq.columns)
        d = decision(a, b, rule)
        if d.outcome != "better":
            continue
        decided += 1
        assert d.method == "test" and d.e_value is not None and d.e_value >= 2 / rule.alpha
        at = seq.iloc[d.questions - 1]
        assert (d.lower, d.upper) == (at["lower"], at["upper"])
        held_zero += d.lower <= 0
    assert decided >= 6 and held_zero > 0
    cs = decision(a, b, Rule(method="cs"))
    assert cs.method == "cs" and cs.e_value is None
