"""Causal discovery of a whole graph at once: "list every direct causal edge among these
variables". An item is one graph (a CLadder model, Sachs, Auto MPG); an answer is its edge list
as text (`crawdad.causal.edge_text`: `A -> B; C -> D`, or `no edges`), so a record carries the
whole predicted graph and the analysis rebuilds it with `graph_from_text` over the item's
variables. The gold answer is the true graph's edge text, or "" where no true graph is known
(Auto MPG): such a graph can be learned and shown, not scored.

Answers are open (`answers = None`): the crawdad, simultaneous and solo protocols run on it (two
answers agree when they name the same edges, whatever their case or order; a majority counts
identical edge texts); the judge protocol, whose verdict is yes or no, does not. The
plain-algorithm baselines (`crawdad.run.baseline`) write records of this task too.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from crawdad.backends.base import ChatResult
from crawdad.causal.edge_text import format_edges, parse_edges, same_edges
from crawdad.config import SelectionConfig, TableLimits
from crawdad.data.discovery_public import load_graphs
from crawdad.data.discovery_sets import DiscoveryGraph, GraphSet
from crawdad.data.questions import parse_ranges
from crawdad.errors import DataError
from crawdad.records import DatasetInfo, Turn
from crawdad.scoring.extract import normalize_confidence
from crawdad.tasks.base import Ask, Reading


@dataclass(frozen=True)
class GraphItem:
    """One graph to discover whole."""

    graph: DiscoveryGraph

    @property
    def question_id(self) -> str:
        return self.graph.graph_id

    @property
    def gold(self) -> str:
        return format_edges(self.graph.truth.edges) if self.graph.truth is not None else ""


@dataclass(frozen=True)
class GraphDataset:
    questions: list[GraphItem]
    graphs: list[DiscoveryGraph]
    info: DatasetInfo


def select_graphs(
    graphs: list[DiscoveryGraph], selection: SelectionConfig, seed: int
) -> list[DiscoveryGraph]:
    """Whole graphs: `ranges` index them, `alignments` filter them, `sample` draws N (seeded),
    `limit` keeps the first N. Rungs and query types are CLadder questions' and are refused."""
    if selection.rungs or selection.query_types:
        raise DataError(
            "selection: rungs and query_types are CLadder questions' descriptors; a discovery "
            "run selects graphs with ranges, alignments, sample and limit"
        )
    chosen = graphs
    if selection.ranges:
        chosen = [chosen[i] for i in parse_ranges(selection.ranges, len(chosen))]
    if selection.alignments:
        chosen = [g for g in chosen if g.alignment in selection.alignments]
    if selection.sample and selection.sample < len(chosen):
        picked = set(random.Random(f"sample:{seed}").sample(range(len(chosen)), selection.sample))
        chosen = [g for i, g in enumerate(chosen) if i in picked]
    if selection.limit:
        chosen = chosen[: selection.limit]
    if not chosen:
        raise DataError(
            f"the selection {selection.model_dump(exclude_defaults=True)} leaves no graphs "
            f"out of {len(graphs)}; loosen the filters"
        )
    return chosen


class EdgeOut(BaseModel):
    model_config = ConfigDict(extra="forbid")

    cause: str
    effect: str


class GraphReply(BaseModel):
    """What the extractor fills: the response's final edges (null: it gives no final graph)."""

    model_config = ConfigDict(extra="forbid")

    edges: list[EdgeOut] | None
    confidence: float | None = Field(default=None, ge=0.0, le=1.0)


class GraphOnlyReply(BaseModel):
    model_config = ConfigDict(extra="forbid")

    edges: list[EdgeOut] | None


class DiscoveryGraphTask:
    name = "discovery-graph"
    answers: tuple[str, ...] | None = None  # open answers: a graph (the Task protocol's type)
    prompt_set = "mac-graph"
    report_sections = ("crawdad.analysis.tasks.discovery",)

    def load(
        self, path: Path, questions_file: str | None = None, *, limits: TableLimits | None = None
    ) -> GraphDataset:
        found = load_graphs(path, questions_file)
        return _dataset(found.graphs, _info(found, questions_file))

    def select(self, dataset: GraphDataset, selection: SelectionConfig, seed: int) -> GraphDataset:
        graphs = select_graphs(dataset.graphs, selection, seed)
        info = dataset.info.model_copy(
            update={"selection": selection.model_dump(exclude_defaults=True)}
        )
        return _dataset(graphs, info)

    def show(self, item: GraphItem) -> str:
        return (
            f"{item.graph.described()}\n\n"
            "Question: Which direct causal relationships hold among these variables? List every "
            "direct causal edge as `A -> B` (A directly causes B), using the variable names "
            "exactly as given."
        )

    def record_fields(self, item: GraphItem) -> dict[str, Any]:
        graph = item.graph
        return {
            "gold": item.gold,
            "alignment": graph.alignment,
            "story_id": graph.story_id,
            "graph_id": graph.structure,
            "item": {
                "graph": graph.graph_id,
                "source": graph.source,
                "variables": list(graph.names),
                "truth_known": graph.truth is not None,
            },
        }

    def extractor_schema(self, confidence: bool, uncertain: bool = False) -> dict[str, Any]:
        return (GraphReply if confidence else GraphOnlyReply).model_json_schema()

    def read(self, reply: str, confidence: bool, uncertain: bool = False) -> Reading:
        return read_graph_reply(reply, confidence)

    def agree(self, answers: Sequence[str | None]) -> bool:
        if not answers or any(a is None for a in answers):
            return False
        first = answers[0]
        assert first is not None
        return all(same_edges(first, a) for a in answers[1:] if a is not None)

    async def score_turn(
        self, ask: Ask, model: str, item: GraphItem, turn: Turn, result: ChatResult
    ) -> None:
        return None


def read_graph_reply(reply: str, confidence: bool) -> Reading:
    """The extractor's JSON (strictly, then the first JSON object in its text, then `A -> B`
    lines) -> the edge text; null with the reason when no final graph is given."""
    model = GraphReply if confidence else GraphOnlyReply
    try:
        parsed = model.model_validate_json(reply.strip())
    except ValidationError:
        return _tolerant(reply, confidence)
    conf = getattr(parsed, "confidence", None)
    if parsed.edges is None:
        return Reading(None, conf, "strict", "the response gives no final graph")
    answer = format_edges((e.cause, e.effect) for e in parsed.edges)
    reason = "the response states no confidence" if confidence and conf is None else None
    return Reading(answer, conf, "strict", reason)


def _tolerant(reply: str, confidence: bool) -> Reading:
    obj = _first_object(reply)
    if obj is not None and "edges" in obj:
        edges = _edges_of(obj["edges"])
        conf, why = normalize_confidence(obj.get("confidence")) if confidence else (None, None)
        if edges is None:
            return Reading(None, conf, "none", "the response gives no final graph")
        return Reading(format_edges(edges), conf, "tolerant", why)
    found = parse_edges(reply)
    if found:
        why = "read from `A -> B` lines of the extractor's reply"
        return Reading(format_edges(found), None, "tolerant", why)
    return Reading(None, None, "none", f"the extractor's reply holds no edges: {reply[:80]!r}")


def _first_object(text: str) -> dict[str, Any] | None:
    decoder = json.JSONDecoder()
    for start in (i for i, ch in enumerate(text) if ch == "{"):
        try:
            value, _ = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            return {str(k).lower(): v for k, v in value.items()}
    return None


def _edges_of(value: Any) -> list[tuple[str, str]] | None:
    """[{cause, effect}], [[a, b]] or ["a -> b"] -> edges; None for null."""
    if value is None:
        return None
    if isinstance(value, str):
        return parse_edges(value)
    out: list[tuple[str, str]] = []
    for e in value if isinstance(value, list) else []:
        if (
            isinstance(e, dict)
            and isinstance(e.get("cause"), str)
            and isinstance(e.get("effect"), str)
        ):
            out.append((e["cause"], e["effect"]))
        elif isinstance(e, list | tuple) and len(e) == 2 and all(isinstance(x, str) for x in e):
            out.append((e[0], e[1]))
        elif isinstance(e, str):
            out += parse_edges(e)
    return out


def _dataset(graphs: list[DiscoveryGraph], info: DatasetInfo) -> GraphDataset:
    items = [GraphItem(g) for g in graphs]
    return GraphDataset(
        items,
        graphs,
        info.model_copy(
            update={"n_selected": len(items), "selected_ids": [i.question_id for i in items]}
        ),
    )


def _info(found: GraphSet, questions_file: str | None) -> DatasetInfo:
    return DatasetInfo(
        source=found.source,
        questions_file=questions_file or "",
        models_file=found.source,
        sha256=found.sha256,
        n_total=len(found.graphs),
        n_selected=0,
    )
