"""Wilson and Newcombe intervals (the report's), bootstrap CIs, exact McNemar, side-by-side
tables, rendering."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from crawdad.analysis import metrics as M
from crawdad.analysis.formatting import fmt_p, table1_latex, table1_wide, to_markdown


@pytest.mark.parametrize(
    ("k", "n", "lo", "hi"),
    [
        # Wilson's score interval, 95%: values as scipy's binomtest(...).proportion_ci("wilson")
        # and Newcombe (1998, Stat Med 17:857, table I) give them
        (2, 2, 0.3424, 1.0),
        (0, 2, 0.0, 0.6576),
        (81, 263, 0.2553, 0.3662),  # Newcombe's example: 0.2553 to 0.3662
        (15, 148, 0.0624, 0.1605),  # 0.0624 to 0.1605
        (0, 20, 0.0, 0.1611),  # 0.0000 to 0.1611
        (1, 29, 0.0061, 0.1718),  # 0.0061 to 0.1718
    ],
)
def test_wilson_known_values(k, n, lo, hi):
    from scipy.stats import binomtest

    got = M.wilson_proportion(k, n)
    assert got == pytest.approx((lo, hi), abs=5e-5)
    ref = binomtest(k, n).proportion_ci(method="wilson")
    assert got == pytest.approx((ref.low, ref.high), abs=1e-12)


def test_wilson_never_a_point_and_vectorised():
    lo, hi = M.wilson_interval([2, 0, 3, 0], [2, 2, 7, 0])
    assert lo[0] == pytest.approx(0.3424, abs=1e-4) and hi[0] == 1.0  # 2 of 2: 34.2 to 100
    assert lo[1] == 0.0 and hi[1] == pytest.approx(0.6576, abs=1e-4)
    assert (lo[:3] < hi[:3]).all() and math.isnan(lo[3]) and math.isnan(hi[3])
    assert all(math.isnan(x) for x in M.wilson_proportion(0, 0))
    assert M.wilson_mean([1.0, 1.0]) == M.wilson_proportion(2, 2)  # shares of a vote's samples
    from crawdad.analysis.metrics._stats import add_proportion_ci

    with_ci = add_proportion_ci(pd.DataFrame({"n_correct": [2, 1], "n": [2, 4]}))
    assert (with_ci["ci_hi"] - with_ci["ci_lo"] > 0.3).all()


def test_newcombe_paired_known_values():
    """Newcombe (1998, Stat Med 17:2635), method 10, his examples (e, f, g, h): the order here
    is (both, only a, only b, neither) and the difference P(b) - P(a)."""
    assert M.newcombe_paired_difference(36, 2, 12, 0) == pytest.approx((0.0569, 0.3404), abs=5e-5)
    assert M.newcombe_paired_difference(5, 0, 0, 0) == pytest.approx((-0.4345, 0.4345), abs=5e-5)
    # no discordant pair: an interval around 0, not the point 0
    lo, hi = M.newcombe_paired_difference(2, 0, 0, 0)
    assert lo == pytest.approx(-0.6576, abs=1e-4) and hi == pytest.approx(0.6576, abs=1e-4)
    lo, hi = M.newcombe_paired_difference(50, 5, 25, 20)  # gain 0.2, clearly positive
    assert 0.05 < lo < 0.2 < hi
    assert all(math.isnan(x) for x in M.newcombe_paired_difference(0, 0, 0, 0))
    # the same construction on per-question shares reduces to a wide interval at small n
    lo, hi = M.paired_mean_difference([1.0, 1.0], [1.0, 1.0])
    assert lo < 0 < hi


@pytest.mark.filterwarnings("ignore:.*does not list the run's selected questions")
def test_a_30_question_table1_has_no_point_intervals(tmp_path):
    """Issue 37: a small run's Table 1 showed 100.00 [100.0, 100.0]; Wilson's intervals never
    have zero width."""
    from crawdad.analysis.load import load_run
    from crawdad.analysis.synthetic_runs import write_synthetic_run

    run = load_run(write_synthetic_run(tmp_path / "r", 30, seed=3))
    t1 = M.table1(run.debates)
    assert len(t1) > 10 and (t1["n"] <= 30).all()
    small = t1[t1["n"] > 0]
    assert (small["ci_hi"] - small["ci_lo"] > 0).all(), small[["group", "n", "n_correct"]]
    assert (small["ci_lo"] <= small["acc"]).all() and (small["acc"] <= small["ci_hi"]).all()


def test_bootstrap_proportion_is_seeded_and_sane():
    lo, hi = M.bootstrap_proportion(80, 100)
    assert (lo, hi) == M.bootstrap_proportion(80, 100)  # deterministic
    assert lo < 0.8 < hi
    # close to the normal approximation: 0.8 +- 1.96 * 0.04
    assert lo == pytest.approx(0.8 - 0.0784, abs=0.012)
    assert hi == pytest.approx(0.8 + 0.0784, abs=0.012)
    assert M.bootstrap_proportion(5, 5) == (1.0, 1.0)
    assert all(math.isnan(x) for x in M.bootstrap_proportion(0, 0))


def test_bootstrap_matches_row_resampling():
    # The binomial shortcut has the distribution of resampling rows: compare to the slow way.
    rng = np.random.default_rng(1)
    data = np.r_[np.ones(30), np.zeros(20)]
    slow = rng.choice(data, size=(20_000, data.size)).mean(axis=1)
    lo, hi = M.bootstrap_proportion(30, 50, n_boot=20_000)
    assert lo == pytest.approx(np.quantile(slow, 0.025), abs=0.021)
    assert hi == pytest.approx(np.quantile(slow, 0.975), abs=0.021)


def test_paired_difference_ci():
    lo, hi = M.bootstrap_paired_difference(50, 5, 25, 20)  # gain 0.2
    assert lo < 0.2 < hi
    assert lo > 0.05  # 25 vs 5 discordant pairs: clearly positive


@pytest.mark.parametrize(
    ("b", "c", "p"),
    [(0, 0, 1.0), (2, 0, 0.5), (1, 2, 1.0), (10, 0, 2 / 1024), (3, 9, 0.14599609375)],
)
def test_mcnemar_exact(b, c, p):
    assert M.mcnemar_exact(b, c) == pytest.approx(p)


def test_side_by_side_keeps_row_order_and_runs():
    df = pd.DataFrame({"run": ["a", "a", "b"], "metric": ["z", "y", "z"], "value": [1.0, 2.0, 3.0]})
    wide = M.side_by_side(df, ["metric"], "value", ["b", "a"])
    assert list(wide.columns) == ["metric", "b", "a"]
    assert list(wide["metric"]) == ["z", "y"]
    assert wide.loc[0, "b"] == 3.0 and math.isnan(wide.loc[1, "b"])


def test_fmt_p():
    assert fmt_p(0.0004) == "<0.001"
    assert fmt_p(0.01234) == "0.0123"
    assert fmt_p(float("nan")) == "-"


def test_table1_renderings():
    t1 = pd.DataFrame(
        [
            {
                "run": "r",
                "agent": a,
                "stage": s,
                "dimension": "overall",
                "group": "Overall",
                "n": 10,
                "n_correct": k,
                "n_unanswered": 0,
                "n_errored": 0,
                "acc": k / 10,
                "ci_lo": k / 10 - 0.1,
                "ci_hi": k / 10 + 0.1,
            }
            for a, s, k in [("m (x:1)", "initial", 7), ("m (x:1)", "final", 9)]
        ]
    )
    wide = table1_wide(t1)
    assert list(wide[""]) == ["m (x:1) (Initial)", "m (x:1) (Final)", "m (x:1): n"]
    assert wide.loc[0, "Overall"] == "70.0% [60.0, 80.0]"
    tex = table1_latex(t1)
    assert r"\toprule" in tex and "90.00" in tex and r"\textit{10}" in tex
    assert "| m (x:1) (Final)" in to_markdown(wide, formatted=True)
