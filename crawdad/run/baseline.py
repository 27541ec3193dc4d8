"""Plain-algorithm baselines (MAC's "other methods": PC, DirectLiNGAM, ...): no model is asked;
each selected graph's observational data goes to one causal discovery algorithm
(`crawdad.tools.algorithms`) and its graph is written as a record of the discovery-graph task,
into an ordinary run folder (manifest.json, debates.jsonl, selected-ids.txt) that the analysis
reads beside the debates'.

A record's `final_answer` is the learned graph's edge text (an undirected CPDAG edge in both
directions, as the runner's convention says), `agents` is {algorithm: "causal-learn <version>"},
`protocol` is "algorithm" and `end` "computed"; `item` keeps the algorithm, its parameters as
run, the rows, the pairs left undirected or bidirected, the variables dropped as constant and the
seconds. The data: a set's own table (Sachs, Auto MPG), or `rows` rows sampled from a CLadder
model with a seed derived from (seed, graph id), the rows every resume draws again.

A variable that never varies in the data (a sampled CLadder variable whose probability is 0 or
1, or that few rows did not move) cannot be tested: it is left out of the algorithm's table and
kept in the graph with no edge. A graph the algorithm cannot take is recorded with its error.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from crawdad import __version__
from crawdad.causal.edge_text import format_edges
from crawdad.causal.structure import Graph
from crawdad.config import SelectionConfig
from crawdad.errors import ConfigError, DataError
from crawdad.records import DebateRecord, RunManifest
from crawdad.run.store import RunStore
from crawdad.tasks.discovery.whole_graph import DiscoveryGraphTask, GraphItem
from crawdad.tools.algorithms import (
    AlgorithmLimits,
    algorithm_named,
    check_params,
    run_algorithm,
)
from crawdad.tools.causal import ToolError

DEFAULT_ROWS = 1000


@dataclass
class BaselineSummary:
    out: Path
    selected: int
    done_before: int
    computed: int = 0
    failed: int = 0
    seconds: float = 0.0


def library_version() -> str:
    try:
        return f"causal-learn {version('causal-learn')}"
    except PackageNotFoundError:
        return "causal-learn"


def baseline_config(
    algorithm: str, params: dict[str, Any], rows: int, seed: int, limits: AlgorithmLimits
) -> dict[str, Any]:
    """What the manifest keeps of the baseline's settings (not a RunConfig: no model runs)."""
    return {
        "task": "discovery-graph",
        "protocol": {"kind": "algorithm"},
        "algorithm": algorithm,
        "params": params,
        "rows": rows,
        "seed": seed,
        "limits": limits.model_dump(),
        # A list of {name, model}, as a RunConfig dump has it (the store and the analysis read it).
        "agents": [{"name": algorithm, "model": library_version()}],
    }


def run_baseline(
    data: Path,
    out: Path,
    algorithm: str,
    params: dict[str, Any] | None = None,
    rows: int = DEFAULT_ROWS,
    seed: int = 0,
    selection: SelectionConfig | None = None,
    limits: AlgorithmLimits | None = None,
    force: bool = False,
) -> BaselineSummary:
    """Run one algorithm on every selected graph not yet done in `out`; resumable."""
    try:
        name = algorithm_named(algorithm)
    except ToolError as e:
        raise ConfigError(f"--algorithm: {e}") from None
    params = dict(params or {})
    limits = limits or AlgorithmLimits()
    task = DiscoveryGraphTask()
    dataset = task.select(task.load(data), selection or SelectionConfig(), seed)
    _check_params(dataset.questions[0], name, params, rows, seed, limits)
    config = baseline_config(name, params, rows, seed, limits)
    manifest = RunManifest(
        crawdad_version=__version__,
        created_at=datetime.now(UTC),
        config=config,
        prompts={},
        dataset=dataset.info,
    )
    store = RunStore(out)
    scan = store.open(manifest, force=force)
    todo = [i for i in dataset.questions if str(i.question_id) not in scan.finished]
    summary = BaselineSummary(out, len(dataset.questions), len(dataset.questions) - len(todo))
    start = time.monotonic()
    try:
        for item in todo:
            record = baseline_record(item, name, params, rows, seed, limits)
            store.append([record])
            summary.computed += record.error is None
            summary.failed += record.error is not None
    finally:
        store.close()
    summary.seconds = time.monotonic() - start
    return summary


def _check_params(
    item: GraphItem,
    algorithm: str,
    params: dict[str, Any],
    rows: int,
    seed: int,
    limits: AlgorithmLimits,
) -> None:
    """Parameters the algorithm refuses fail the command before any record is written (checked
    on the first graph's data: a discrete test needs discrete data)."""
    try:
        table = item.graph.data(rows, seed)
        varying = table[[c for c in table.columns if table[c].nunique() > 1]]
        check_params(varying if varying.shape[1] >= 2 else table, algorithm, params, limits)
    except ToolError as e:
        if "never vary" not in str(e):
            raise ConfigError(f"{algorithm} on {item.question_id}: {e}") from None


def baseline_record(
    item: GraphItem,
    algorithm: str,
    params: dict[str, Any],
    rows: int,
    seed: int,
    limits: AlgorithmLimits,
) -> DebateRecord:
    """One graph through the algorithm -> its record (with the error, if it could not run)."""
    task = DiscoveryGraphTask()
    fields = task.record_fields(item)
    record = DebateRecord(
        task=task.name,
        question_id=item.question_id,
        **fields,
        protocol="algorithm",
        prompt_set=None,
        agents={algorithm: library_version()},
        seed=seed,
        started_at=datetime.now(UTC),
        end="computed",
    )
    start = time.monotonic()
    graph = item.graph
    run = None
    try:
        table = graph.data(rows, seed)
        constant = [str(c) for c in table.columns if table[c].nunique() <= 1]
        varying = table.drop(columns=constant)
        if varying.shape[1] >= 2:  # fewer: nothing to relate, a graph without edges
            run = run_algorithm(varying, algorithm, params, limits)
    except (ToolError, DataError) as e:
        record.error, record.error_kind, record.end = str(e), type(e).__name__, "error"
    else:
        learned = Graph.of(graph.names, run.graph.edges if run else ())  # dropped: no edge
        record.final_answer = format_edges(learned.edges)
        record.agent_answers = {algorithm: record.final_answer}
        record.item.update(
            {
                "algorithm": algorithm,
                "params": run.params if run else params,
                "rows": len(table),
                "undirected": [list(p) for p in run.undirected] if run else [],
                "bidirected": [list(p) for p in run.bidirected] if run else [],
                "partial": [list(p) for p in run.partial] if run else [],  # FCI's a o-> b
                "dropped_constant": constant,
                "notes": list(run.notes) if run else [],
            }
        )
    record.seconds = time.monotonic() - start
    record.finished_at = datetime.now(UTC)
    return record
