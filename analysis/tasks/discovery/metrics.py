"""Causal discovery one pair at a time (the discovery-pairs task, MAC's Meta Agents Model): the
graph each system's pairwise answers imply, scored against the true graph, per graph, and summed
up over graphs with bootstrap CIs.

A *system* is what answered every ordered pair of a graph: the protocol's final answer (`stage`
"final"), each agent's first answer in the debate ("first"; solo: its first sample), and for solo
runs with several samples each agent's majority ("majority"), for simultaneous runs each agent's
last answer ("last"). Its predicted graph holds the edge A->B when it answered "yes" to "is there
a direct causal relationship from A to B?"; an unanswered pair (the extractor read nothing, a
tied vote) and an errored debate are **no edge**, and counted. A graph some of whose pairs have
no record yet (a run still going) is incomplete: left out of the scores, and counted.

Scores are `crawdad.causal.structure.score_graph`'s: SHD over unordered pairs (a reversed edge
counts once), NHD over the n x n adjacency matrix (a reversed edge counts twice), edge (skeleton)
and orientation precision, recall and F1. One convention is added here: the F1 of an empty
predicted graph against a non-empty true graph is 0 (its recall is 0, so the harmonic mean is 0
whatever precision is taken to be); only with both graphs empty is F1 undefined, and such graphs
are left out of the F1 means and counted (`n_f1`).

Whole graphs at once (the discovery-graph task: whole-graph debates, MAC's Coding Agents, the
hybrids, the plain-algorithm baselines) carry one predicted graph per record and system: its
edge text (`crawdad.causal.edge_text`), read over the graph's variables with `graph_from_text`
(a name that is not a variable drops its edge); no answer, or an errored debate, is the empty
graph, and counted. The truth is the record's gold edge text; "" means no truth is known (Auto
MPG): the graph is counted as unscored, never scored. `graph_answer_scores` gives such rows the
same SCORE_COLUMNS as the pairs' (pair accuracy over the ordered pairs; `pairs` the n(n-1)
ordered pairs; `n_unanswered` / `n_errored` count graphs, not pairs).

Frames in (built from the records by `analysis.tasks.discovery.sections`):
- pairs: PAIR_COLUMNS, one row per pair record;
- answers: ANSWER_COLUMNS, one row per (pair record, system), with what that system's answer
  cost (completion tokens of its turns plus the extractor's, GPU seconds, requests);
- graphs: GRAPH_ANSWER_COLUMNS, one row per (whole-graph record, system).

A system scored on one graph (Sachs, Auto MPG) has no CI over graphs: its mean is that graph's
score and its CI bounds are NaN (shown as the value alone).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
from crawdad.analysis.metrics._stats import bootstrap_mean
from crawdad.analysis.metrics.accuracy import ALIGNMENT_LABELS

from crawdad.causal.edge_text import graph_from_text
from crawdad.causal.structure import Graph, GraphScore, score_graph

__all__ = [
    "ANSWER_COLUMNS",
    "FINAL",
    "GRAPH_ANSWER_COLUMNS",
    "METRICS",
    "PAIR_COLUMNS",
    "SCORE_COLUMNS",
    "SUMMARY_COLUMNS",
    "common_graphs",
    "debate_vs_first",
    "discovery_summary",
    "graph_answer_scores",
    "graph_scores",
    "paired_difference",
    "versus_baseline",
]

FINAL = "final answer"
PAIR_COLUMNS = [
    "run",
    "question_id",
    "graph",  # the graph's id ("cladder-12")
    "source",  # the dataset ("cladder")
    "alignment",  # CLadder's commonsense / anticommonsense / nonsense
    "kind",  # CLadder's graph kind (chain, fork, ...)
    "variables",  # tuple of the graph's variable names
    "cause",
    "effect",
    "gold",  # "yes": the true graph has cause -> effect
    "protocol",
    "stances",  # debaters argued assigned sides (judge protocol)
]
GRAPH_ANSWER_COLUMNS = [
    "run",
    "question_id",
    "graph",
    "source",
    "alignment",
    "kind",
    "variables",
    "gold",  # the true graph's edge text; "" when no truth is known
    "protocol",  # crawdad / simultaneous / solo / coding / algorithm (a plain baseline)
    "who",
    "stage",
    "answer",  # the system's edge text, or None
    "errored",
    "tokens",
    "gpu_seconds",
    "requests",
]
ANSWER_COLUMNS = [
    "run",
    "question_id",
    "who",  # FINAL, or an agent's label
    "stage",  # final | first | majority | last
    "answer",  # "yes" / "no" / None
    "errored",  # the debate errored before this system answered (its answer is None)
    "tokens",  # completion tokens of the system's turns and of their extractions
    "gpu_seconds",  # server-reported generation time where there is one, else wall time
    "requests",  # generations plus extractor calls
]
SCORE_COLUMNS = [
    "run",
    "who",
    "stage",
    "graph",
    "source",
    "alignment",
    "kind",
    "n_variables",
    "pairs_expected",
    "pairs",
    "complete",
    "truth_known",  # False: no true graph (Auto MPG): counted, never scored
    "n_correct",
    "n_unanswered",
    "n_errored",
    "pair_acc",
    "shd",
    "nhd",
    "edge_precision",
    "edge_recall",
    "edge_f1",
    "orientation_precision",
    "orientation_recall",
    "orientation_f1",
    "true_edges",
    "predicted_edges",
    "tokens",
    "gpu_seconds",
    "requests",
]
# The per-graph scores summed up with a bootstrap CI: column -> what it is called.
METRICS = {
    "pair_acc": "pair accuracy",
    "shd": "SHD",
    "nhd": "NHD",
    "edge_f1": "edge F1",
    "orientation_f1": "orientation F1",
}
SUMMARY_COLUMNS = [
    "run",
    "protocol",
    "who",
    "stage",
    "dimension",  # overall | alignment | source | kind
    "group",
    "graphs",
    "graphs_incomplete",
    "graphs_unscored",  # complete, but no true graph to score them against
    "pairs",
    "n_unanswered",
    "n_errored",
    *[c for m in METRICS for c in (m, f"{m}_lo", f"{m}_hi")],
    "n_f1",  # graphs whose edge F1 is defined
    "tokens_per_graph",
    "gpu_seconds_per_graph",
    "requests_per_graph",
    "requests_per_pair",
]
_STAGE_ORDER = {"final": 0, "first": 1, "majority": 2, "last": 2}
_DIM_ORDER = {"overall": 0, "alignment": 1, "source": 2, "kind": 3}


def _f1(f1: float | None, recall: float | None) -> float:
    """score_graph's F1, with an empty prediction against a non-empty truth scored 0."""
    if f1 is not None:
        return f1
    return 0.0 if recall is not None else float("nan")


def graph_scores(pairs: pd.DataFrame, answers: pd.DataFrame) -> pd.DataFrame:
    """One row per (run, system, graph): the predicted graph scored against the truth.

    `complete` is False when some ordered pair of the graph has no record; such a row carries
    its counts but no scores (NaN)."""
    if pairs.empty or answers.empty:
        return pd.DataFrame(columns=SCORE_COLUMNS)
    a = answers.merge(pairs, on=["run", "question_id"], how="inner", validate="many_to_one")
    rows = []
    for (run, who, stage, graph), g in a.groupby(["run", "who", "stage", "graph"], sort=False):
        first = g.iloc[0]
        names = tuple(first["variables"])
        n = len(names)
        expected = n * (n - 1)
        present = {(c, e) for c, e in zip(g["cause"], g["effect"], strict=True)}
        complete = len(present) == expected
        said = g["answer"].where(~g["errored"].astype(bool))
        correct = (said == g["gold"]).to_numpy(dtype=bool)
        row = {
            "run": run,
            "who": who,
            "stage": stage,
            "graph": graph,
            "source": first["source"],
            "alignment": first["alignment"],
            "kind": first["kind"],
            "n_variables": n,
            "pairs_expected": expected,
            "pairs": len(present),
            "complete": complete,
            "truth_known": True,
            "n_correct": int(correct.sum()),
            "n_unanswered": int((said.isna() & ~g["errored"].astype(bool)).sum()),
            "n_errored": int(g["errored"].astype(bool).sum()),
            "tokens": float(g["tokens"].sum()),
            "gpu_seconds": float(g["gpu_seconds"].sum()),
            "requests": float(g["requests"].sum()),
        }
        if complete:
            truth = Graph.of(names, [(c, e) for c, e, y in _edges(g, g["gold"]) if y])
            predicted = Graph.of(names, [(c, e) for c, e, y in _edges(g, said) if y])
            s = score_graph(predicted, truth)
            row |= {"pair_acc": float(correct.mean()), **_scored(s)}
            row["predicted_edges"] = s.predicted_edges
        rows.append(row)
    return _score_frame(rows)


def _scored(s: GraphScore) -> dict[str, Any]:
    """The structure scores of one graph, as the scores table names them."""
    return {
        "shd": float(s.shd),
        "nhd": s.nhd,
        "edge_precision": s.edge_precision,
        "edge_recall": s.edge_recall,
        "edge_f1": _f1(s.edge_f1, s.edge_recall),
        "orientation_precision": s.orientation_precision,
        "orientation_recall": s.orientation_recall,
        "orientation_f1": _f1(s.orientation_f1, s.orientation_recall),
        "true_edges": s.true_edges,
    }


def _score_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    out = pd.DataFrame(rows).reindex(columns=SCORE_COLUMNS)
    for c in ("edge_precision", "edge_recall", "orientation_precision", "orientation_recall"):
        out[c] = out[c].astype("float64")
    return out


def _edges(g: pd.DataFrame, said: pd.Series) -> list[tuple[str, str, bool]]:
    return [
        (c, e, s == "yes")
        for c, e, s in zip(g["cause"], g["effect"], said.astype(object), strict=True)
    ]


def graph_answer_scores(graphs: pd.DataFrame) -> pd.DataFrame:
    """One row per (run, system, graph) of whole-graph records: the system's edge text read
    over the graph's variables and scored against the gold edge text (none when gold is "")."""
    if graphs.empty:
        return pd.DataFrame(columns=SCORE_COLUMNS)
    rows = []
    for r in graphs.itertuples(index=False):
        names = tuple(r.variables)
        n = len(names)
        errored = bool(r.errored)
        said = None if errored or r.answer is None or pd.isna(r.answer) else str(r.answer)
        predicted, _ = graph_from_text(said or "", names)
        known = isinstance(r.gold, str) and bool(r.gold.strip())
        row = {
            "run": r.run,
            "who": r.who,
            "stage": r.stage,
            "graph": r.graph,
            "source": r.source,
            "alignment": r.alignment,
            "kind": r.kind,
            "n_variables": n,
            "pairs_expected": n * (n - 1),
            "pairs": n * (n - 1),
            "complete": True,
            "truth_known": known,
            "n_unanswered": int(said is None and not errored),
            "n_errored": int(errored),
            "predicted_edges": len(predicted.edges),
            "tokens": float(r.tokens),
            "gpu_seconds": float(r.gpu_seconds),
            "requests": float(r.requests),
        }
        if known:
            truth, _ = graph_from_text(r.gold, names)
            s = score_graph(predicted, truth)
            ordered = [(a, b) for a in names for b in names if a != b]
            correct = sum(
                ((a, b) in predicted.edges) == ((a, b) in truth.edges) for a, b in ordered
            )
            row |= {
                "n_correct": correct,
                "pair_acc": correct / len(ordered) if ordered else float("nan"),
                **_scored(s),
            }
        rows.append(row)
    return _score_frame(rows)


def _ci(values: pd.Series) -> tuple[float, float, float]:
    """Mean and 95% bootstrap CI; one value has no CI (NaN bounds)."""
    x = values.dropna().to_numpy(dtype=np.float64)
    if len(x) == 0:
        return float("nan"), float("nan"), float("nan")
    if len(x) == 1:
        return float(x[0]), float("nan"), float("nan")
    lo, hi = bootstrap_mean(x)
    return float(x.mean()), lo, hi


def _summary_row(g: pd.DataFrame) -> dict[str, object]:
    complete = g["complete"].astype(bool)
    known = g["truth_known"].fillna(True).astype(bool)
    done = g[complete & known]
    row: dict[str, object] = {
        "graphs": len(done),
        "graphs_incomplete": int((~complete).sum()),
        "graphs_unscored": int((complete & ~known).sum()),
        "pairs": int(done["pairs"].sum()),
        "n_unanswered": int(done["n_unanswered"].sum()),
        "n_errored": int(done["n_errored"].sum()),
    }
    for m in METRICS:
        mean, lo, hi = _ci(done[m])
        row |= {m: mean, f"{m}_lo": lo, f"{m}_hi": hi}
    # Cost over every complete graph, scored or not (a graph without truth cost as much).
    paid = g[complete]
    graphs = len(paid) or float("nan")
    pairs = int(paid["pairs"].sum()) or float("nan")
    row |= {
        "n_f1": int(done["edge_f1"].notna().sum()),
        "tokens_per_graph": float(paid["tokens"].sum()) / graphs,  # type: ignore[operator]
        "gpu_seconds_per_graph": float(paid["gpu_seconds"].sum()) / graphs,  # type: ignore[operator]
        "requests_per_graph": float(paid["requests"].sum()) / graphs,  # type: ignore[operator]
        "requests_per_pair": float(paid["requests"].sum()) / pairs,  # type: ignore[operator]
    }
    return row


def discovery_summary(
    scores: pd.DataFrame,
    protocols: dict[str, str] | None = None,
    dimensions: Sequence[str] = ("overall", "alignment", "source", "kind"),
) -> pd.DataFrame:
    """Per (run, system) and per group of graphs (overall, by alignment, source dataset and
    CLadder graph kind): graphs scored, pair accuracy, SHD, NHD, edge and orientation F1 as
    means over the graphs with 95% percentile bootstrap CIs (10,000 resamples of the graphs,
    seeded), and the cost per graph (tokens, GPU seconds, requests) of that system's answers."""
    if scores.empty:
        return pd.DataFrame(columns=SUMMARY_COLUMNS)
    rows = []
    for dim in dimensions:
        if dim == "overall":
            group = pd.Series("Overall", index=scores.index)
        elif dim == "alignment":
            group = scores["alignment"].map(lambda a: ALIGNMENT_LABELS.get(a, a) if a else "-")
        else:
            group = scores[dim].fillna("-").astype(str)
        s = scores.assign(_group=group)
        for (run, who, stage, grp), g in s.groupby(["run", "who", "stage", "_group"], sort=False):
            rows.append(
                {
                    "run": run,
                    "who": who,
                    "stage": stage,
                    "dimension": dim,
                    "group": grp,
                    **_summary_row(g),
                }
            )
    out = pd.DataFrame(rows)
    out.insert(1, "protocol", out["run"].map(protocols or {}).fillna("-"))
    out["_w"] = (out["who"] != FINAL).astype(int)
    out["_s"] = out["stage"].map(_STAGE_ORDER)
    out["_d"] = out["dimension"].map(_DIM_ORDER)
    runs = {r: i for i, r in enumerate(dict.fromkeys(scores["run"]))}
    out["_r"] = out["run"].map(runs)
    out = out.sort_values(["_r", "_d", "group", "_w", "_s", "who"], kind="stable")
    return out[SUMMARY_COLUMNS].reset_index(drop=True)


# --- paired differences over graphs ----------------------------------------------------------

PAIRED_COLUMNS = [
    "run",
    "who",
    "stage",
    "against_run",
    "against_who",
    "against_stage",
    "graphs",
    *[c for m in METRICS for c in (f"d_{m}", f"d_{m}_lo", f"d_{m}_hi")],
]


def paired_difference(
    scores: pd.DataFrame, system: tuple[str, str, str], against: tuple[str, str, str]
) -> dict[str, object]:
    """Mean per-graph difference `system` - `against` of each score, over the graphs both
    scored, with a bootstrap CI of the mean difference (graphs resampled, both scores together)."""
    keys = ["run", "who", "stage"]
    ok = scores[scores["complete"].astype(bool) & scores["truth_known"].fillna(True).astype(bool)]
    mine = ok[(ok[keys] == pd.Series(system, index=keys)).all(axis=1)].set_index("graph")
    theirs = ok[(ok[keys] == pd.Series(against, index=keys)).all(axis=1)].set_index("graph")
    both = mine.index.intersection(theirs.index)
    row: dict[str, object] = dict(zip(keys, system, strict=True))
    row |= {f"against_{k}": v for k, v in zip(keys, against, strict=True)}
    row["graphs"] = len(both)
    for m in METRICS:
        d = (mine.loc[both, m] - theirs.loc[both, m]).astype("float64")
        mean, lo, hi = _ci(d)
        row |= {f"d_{m}": mean, f"d_{m}_lo": lo, f"d_{m}_hi": hi}
    return row


def debate_vs_first(scores: pd.DataFrame) -> pd.DataFrame:
    """Within each run: the final answers' graph against each agent's first-answer graph, per
    graph, paired (did the debate improve on the first answer?)."""
    rows = []
    for run, g in scores.groupby("run", sort=False):
        for who in g.loc[g["stage"] == "first", "who"].unique():
            rows.append(paired_difference(scores, (run, FINAL, "final"), (run, who, "first")))
    return pd.DataFrame(rows, columns=PAIRED_COLUMNS)


def versus_baseline(scores: pd.DataFrame, baseline: str) -> pd.DataFrame:
    """Each run's (variant's) final-answer graphs against the baseline run's, paired by graph."""
    rows = [
        paired_difference(scores, (run, FINAL, "final"), (baseline, FINAL, "final"))
        for run in dict.fromkeys(scores["run"])
        if run != baseline
    ]
    return pd.DataFrame(rows, columns=PAIRED_COLUMNS)


def common_graphs(scores: pd.DataFrame, runs: Sequence[str]) -> set[str]:
    """The graphs every run's final answers scored (complete in each)."""
    final = scores[(scores["stage"] == "final") & scores["complete"].astype(bool)]
    sets = [set(final.loc[final["run"] == r, "graph"]) for r in runs]
    return set.intersection(*sets) if sets else set()
