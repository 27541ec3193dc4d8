"""Bootstrap CIs, exact McNemar, side-by-side tables, rendering."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from crawdad.analysis import metrics as M
from crawdad.analysis.formatting import fmt_p, table1_latex, table1_wide, to_markdown


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
    assert wide.loc[0, "Overall"] == "70.00 [60.0, 80.0]"
    tex = table1_latex(t1)
    assert r"\toprule" in tex and "90.00" in tex and r"\textit{10}" in tex
    assert "| m (x:1) (Final)" in to_markdown(wide, formatted=True)
