"""The graphs one system gave, read from its run folder, to show another as prior knowledge
(`protocol.prior_from`, MAC's hybrids; crawdad/tasks/discovery/prior.py shows them).

Any discovery run folder serves: whole-graph records (a coding-agents run, a whole-graph debate,
a `crawdad discover-baseline` folder) give their final edge text; pair records (the Meta Agents'
discovery-pairs run) give the graph their final answers assemble (yes = the edge), once every
ordered pair of the graph has a record. A record that errored or gave no graph is a prior of
"no graph"; a graph with pairs missing is not in the result (the run refuses to start on it).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from crawdad.causal.edge_text import format_edges
from crawdad.errors import ConfigError, StoreError
from crawdad.records import DebateRecord
from crawdad.run.store import RunStore, require_run_folder
from crawdad.tasks.discovery.prior import PriorGraph

PAIRS, GRAPH = "discovery-pairs", "discovery-graph"


def system_of(config: dict[str, Any]) -> str:
    """How a prompt names the system of a run folder's manifest config."""
    kind = (config.get("protocol") or {}).get("kind", "crawdad")
    models = sorted({str(a.get("model")) for a in config.get("agents") or [] if a.get("model")})
    if kind == "algorithm":
        return f"the {config.get('algorithm', 'a discovery')} algorithm run on the data"
    if kind == "coding":
        return "coding agents who chose a causal discovery algorithm and ran it on the data"
    who = f" between {', '.join(models)}" if models else ""
    if config.get("task") == PAIRS:
        return f"a {kind} debate{who} on each pair of variables"
    return f"a {kind} debate{who} on the whole graph"


def load_priors(folder: Path) -> dict[str, PriorGraph]:
    """graph id -> the graph the run in `folder` gave for it."""
    folder = Path(folder)
    try:
        require_run_folder(folder)
        manifest = RunStore(folder).read_manifest()
    except StoreError as e:
        raise ConfigError(f"protocol.prior_from: {e}") from None
    config = manifest.config
    task = config.get("task")
    if task not in (PAIRS, GRAPH):
        raise ConfigError(
            f"protocol.prior_from: {folder} is a run of the {task or 'cladder'} task; give the "
            "folder of a causal discovery run (discovery-graph, discovery-pairs or "
            "`crawdad discover-baseline`)"
        )
    system = system_of(config)
    records = [r for r in RunStore(folder).records() if r.task == task]
    if task == GRAPH:
        return {_graph(r): PriorGraph(_answer(r), system) for r in records}
    return _assembled(records, system)


def _graph(record: DebateRecord) -> str:
    return str(record.item.get("graph") or record.question_id)


def _answer(record: DebateRecord) -> str | None:
    return record.final_answer if record.error is None else None


def _assembled(records: list[DebateRecord], system: str) -> dict[str, PriorGraph]:
    by_graph: dict[str, list[DebateRecord]] = defaultdict(list)
    for r in records:
        by_graph[_graph(r)].append(r)
    out = {}
    for graph, rs in by_graph.items():
        n = len(rs[0].item.get("variables") or ())
        if len({(r.item.get("cause"), r.item.get("effect")) for r in rs}) < n * (n - 1):
            continue  # pairs not yet answered: no graph yet
        edges = [(r.item["cause"], r.item["effect"]) for r in rs if _answer(r) == "yes"]
        out[graph] = PriorGraph(format_edges(edges), system)
    return out
