"""Observational data sampled from a binary model: rows drawn by ancestral sampling.

Every variable is drawn in topological order from P(V=1 | its parents' drawn values), so a sample
of N rows is N independent draws from the model's joint distribution. The generator is seeded, so
the same (model, rows, seed) gives the same table on every machine and every resume.
"""

from __future__ import annotations

import numpy as np

from crawdad.causal.model import BinaryModel
from crawdad.errors import DataError

MAX_ROWS = 10_000_000


def sample_rows(model: BinaryModel, rows: int, seed: int) -> dict[str, np.ndarray]:
    """{variable: an int8 array of `rows` draws}, in the model's topological order."""
    if not 1 <= rows <= MAX_ROWS:
        raise DataError(f"rows: {rows} is not between 1 and {MAX_ROWS:,}")
    rng = np.random.default_rng(seed)
    drawn: dict[str, np.ndarray] = {}
    for var in model.order:
        parents = model.parents[var]
        table = model.tables[var]
        # The row index into the flattened table: the parents' bits read as a binary number, the
        # first parent most significant (the order of CLadder's nested tables).
        index = np.zeros(rows, dtype=np.int64)
        for p in parents:
            index = index * 2 + drawn[p]
        probs = np.array(
            [float(table[_bits(i, len(parents))]) for i in range(2 ** len(parents))],
            dtype=np.float64,
        )
        drawn[var] = (rng.random(rows) < probs[index]).astype(np.int8)
    return drawn


def _bits(i: int, n: int) -> tuple[int, ...]:
    return tuple((i >> (n - 1 - k)) & 1 for k in range(n))
