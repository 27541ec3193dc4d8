"""Causal discovery datasets: sets of variables with descriptions, optional observational data,
and (where one is known) the true graph.

CLadder's own causal models are the first source: every model of a CLadder file is one graph,
its variables named and described as the story names them, its truth the model's exact
structure, and its data sampled from the model's own probability tables (seeded). The story's
background sentence is never shown: it states the graph.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from crawdad.causal import BinaryModel
from crawdad.causal.sample import sample_rows
from crawdad.causal.structure import Graph
from crawdad.data.questions import alignment_of, load_cladder, read_raw
from crawdad.errors import DataError

# What every CLadder graph is introduced with (CLadder's own framing, without the graph).
CLADDER_CONTEXT = (
    "Imagine a self-contained, hypothetical world with only the following variables, and "
    "without any unmentioned factors or causal relationships."
)


@dataclass(frozen=True)
class Variable:
    name: str
    description: str


@dataclass(frozen=True)
class DiscoveryGraph:
    """One discovery problem: variables to relate, maybe data, maybe the true graph."""

    graph_id: str
    source: str  # "cladder", "sachs", "auto-mpg", ...
    context: str
    variables: tuple[Variable, ...]
    truth: Graph | None
    alignment: str | None = None  # CLadder's commonsense / anticommonsense / nonsense
    story_id: str | None = None
    structure: str | None = None  # CLadder's graph kind (chain, fork, ...)
    # CLadder's symbols (X, V2, Y) of the variables, in the same order, and its model
    symbols: tuple[str, ...] = ()
    model: BinaryModel | None = field(default=None, compare=False, repr=False)
    table: pd.DataFrame | None = field(default=None, compare=False, repr=False)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(v.name for v in self.variables)

    def described(self) -> str:
        """The context and the variables with their descriptions: how every discovery prompt
        opens, before its question."""
        listed = "\n".join(f"- {v.name}: {v.description}" for v in self.variables)
        return f"{self.context}\n\nThe variables:\n{listed}"

    def data(self, rows: int, seed: int) -> pd.DataFrame:
        """Observational data: the dataset's own table, or `rows` rows sampled from the model
        with a seed derived from (seed, graph id), so every resume draws the same table."""
        if self.table is not None:
            return self.table
        if self.model is None:
            raise DataError(f"graph {self.graph_id}: no data and no probability tables to sample")
        draws = sample_rows(self.model, rows, _seed(seed, self.graph_id))
        return pd.DataFrame(
            {v.name: draws[s] for s, v in zip(self.symbols, self.variables, strict=True)}
        )


def _seed(seed: int, graph_id: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}:{graph_id}".encode()).digest()[:8], "big")


@dataclass(frozen=True)
class GraphSet:
    graphs: list[DiscoveryGraph]
    source: str
    sha256: str


def load_cladder_graphs(path: Path, questions_file: str | None = None) -> GraphSet:
    """Every causal model of a CLadder file (validated by the question loader first) as a graph."""
    load_cladder(path, questions_file)
    _, models, _ = read_raw(path, questions_file)
    graphs = [_cladder_graph(m) for m in models]
    if not graphs:
        raise DataError(f"{path}: the models file holds no causal models")
    digest = hashlib.sha256(repr(sorted(str(m.get("model_id")) for m in models)).encode())
    for m in models:
        digest.update(str(m.get("structure")).encode() + str(m.get("params")).encode())
    return GraphSet(graphs, str(path), digest.hexdigest())


def _cladder_graph(raw: dict[str, Any]) -> DiscoveryGraph:
    where = f"causal model {raw.get('model_id')}"
    structure = raw.get("structure")
    if not isinstance(structure, str) or not structure.strip():
        raise DataError(f"{where}: no `structure` string (edges like X->Y,V2->Y)")
    edges = [tuple(e.split("->")) for e in structure.replace(" ", "").split(",") if e]
    if any(len(e) != 2 for e in edges):
        raise DataError(f"{where}: `structure` {structure!r} is not a list of A->B edges")
    model = BinaryModel.from_meta(raw) if raw.get("params") else None
    symbols = list(model.order) if model else _in_order(edges)
    mapping = raw.get("variable_mapping") or {}
    variables = tuple(_cladder_variable(s, mapping, where) for s in symbols)
    name = {s: v.name for s, v in zip(symbols, variables, strict=True)}
    truth = Graph.of(
        [v.name for v in variables], [(name[a], name[b]) for a, b in edges], where=where
    )
    return DiscoveryGraph(
        graph_id=f"cladder-{raw.get('model_id')}",
        source="cladder",
        context=CLADDER_CONTEXT,
        variables=variables,
        truth=truth,
        alignment=alignment_of(raw),
        story_id=raw.get("story_id"),
        structure=raw.get("graph_id"),
        symbols=tuple(symbols),
        model=model,
    )


def _in_order(edges: Sequence[tuple[str, ...]]) -> list[str]:
    out: list[str] = []
    for e in edges:
        out += [v for v in e if v not in out]
    return out


def _cladder_variable(symbol: str, mapping: dict[str, Any], where: str) -> Variable:
    name = mapping.get(f"{symbol}name")
    one, zero = mapping.get(f"{symbol}1"), mapping.get(f"{symbol}0")
    if not isinstance(name, str) or not name.strip():
        raise DataError(f"{where}: variable_mapping has no `{symbol}name` for variable {symbol}")
    if isinstance(one, str) and isinstance(zero, str):
        return Variable(name.strip(), f"1 = {one.strip()}; 0 = {zero.strip()}")
    return Variable(name.strip(), "binary (1 or 0)")
