"""Sampled observational data (crawdad.causal.sample) against the exact engine."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest

from crawdad.causal import BinaryModel
from crawdad.causal.sample import sample_rows
from crawdad.errors import DataError

SAMPLE = Path(__file__).resolve().parents[2] / "shared" / "data" / "cladder-sample"

CONFOUNDED = BinaryModel.from_tables(
    {
        "V1": ((), 0.3),
        "X": (("V1",), [0.2, 0.7]),
        "Y": (("X", "V1"), [[0.1, 0.5], [0.6, 0.9]]),
    }
)


def _empirical(rows: dict[str, np.ndarray], values: dict[str, int]) -> float:
    mask = np.ones(len(next(iter(rows.values()))), dtype=bool)
    for var, x in values.items():
        mask &= rows[var] == x
    return float(mask.mean())


def test_sampled_joint_matches_the_engine() -> None:
    rows = sample_rows(CONFOUNDED, 200_000, seed=1)
    for bits in itertools.product((0, 1), repeat=3):
        values = dict(zip(CONFOUNDED.order, bits, strict=True))
        exact = float(CONFOUNDED.prob(values))
        # 5 standard errors of a proportion from 200k draws
        assert _empirical(rows, values) == pytest.approx(exact, abs=5 * (0.25 / 200_000) ** 0.5)


def test_same_seed_same_table_other_seed_other_table() -> None:
    a, b, c = (sample_rows(CONFOUNDED, 1000, seed=s) for s in (7, 7, 8))
    assert all(np.array_equal(a[v], b[v]) for v in a)
    assert any(not np.array_equal(a[v], c[v]) for v in a)
    assert list(a) == ["V1", "X", "Y"] and a["Y"].dtype == np.int8


def test_deterministic_tables_give_their_structural_values() -> None:
    model = BinaryModel.from_tables({"X": ((), 0.5), "Y": (("X",), [1, 0])})
    rows = sample_rows(model, 500, seed=3)
    assert np.array_equal(rows["Y"], 1 - rows["X"])


@pytest.mark.parametrize("rows", [0, -5, 10**9])
def test_bad_row_counts_are_named(rows: int) -> None:
    with pytest.raises(DataError, match="rows"):
        sample_rows(CONFOUNDED, rows, seed=0)


@pytest.mark.skipif(not SAMPLE.exists(), reason="the CLadder sample is not beside the project")
def test_cladder_models_sample_their_marginals() -> None:
    models = json.loads((SAMPLE / "cladder-sample-meta-models.json").read_text())
    for raw in models[:40]:
        model = BinaryModel.from_meta(raw)
        rows = sample_rows(model, 50_000, seed=int(raw["model_id"]))
        for var in model.order:
            exact = float(model.prob({var: 1}))
            assert rows[var].mean() == pytest.approx(exact, abs=5 * (0.25 / 50_000) ** 0.5)
