"""Statistical causal discovery on a table: the algorithms MAC's coding agents choose among,
run by causal-learn, every parameter checked against an allow-list first.

`run_algorithm(table, algorithm, params, limits)` -> `AlgorithmRun` (the graph, the parameters
as run with their defaults filled in, the library's own matrix). It is a pure, module-level
function of picklable arguments, so the tool boundary (crawdad/tools/boundary.py) can run it in a
worker process that it kills past `limits.max_seconds`; the sizes are checked here, before any
work. A parameter or a table it cannot take is a `ToolError` whose message names the fix.

The algorithms (names are read case-insensitively, without "-", "_" or spaces):

| name | causal-learn | parameters (default) |
| --- | --- | --- |
| `pc` | `search.ConstraintBased.PC.pc` | `alpha` in (0, 0.5] (0.05); `indep_test` fisherz, chisq, gsq (fisherz for continuous data, chisq for discrete); `stable` (true); `uc_rule` 0-2 (0); `uc_priority` -1-4 (2); `max_depth` conditioning sets up to this size (none) |
| `ges` | `search.ScoreBased.GES.ges` | `score` bic (continuous) or bdeu (discrete); `max_parents` (none) |
| `direct-lingam` | `search.FCMBased.lingam.DirectLiNGAM` | `threshold`: an edge where the coefficient's magnitude exceeds it (0) |
| `ica-lingam` | `search.FCMBased.lingam.ICALiNGAM` | `random_state` (0); `max_iter` (1000); `threshold` (0) |
| `exact` | `search.ScoreBased.ExactSearch.bic_exact_search` | `search_method` astar or dp (astar); `max_parents` (none); at most `limits.max_exact_variables` variables |
| `fci` | `search.ConstraintBased.FCI.fci` | `alpha` (0.05); `indep_test` as pc's; `depth` of the adjacency search, -1 unlimited (-1); `max_path_length` of a discriminating path, -1 unlimited (-1) |
| `cdnod` | `search.ConstraintBased.CDNOD.cdnod` | pc's `alpha`, `indep_test`, `stable`, `uc_rule`, `uc_priority`; `context` (row) |

Left out on purpose: kernel tests and scores (kci, the generalized scores: cubic in the rows),
and background knowledge (a later hybrid step can add it).

**Orientation.** PC and GES return an equivalence class (a CPDAG): some edges are undirected, and
PC may return a bidirected edge where collider orientations conflict. In the `Graph` an
undirected or a bidirected edge is **both directions** (a->b and b->a), the state
`crawdad.causal.structure` already scores: against a true a->b it is one SHD error (like a
reversed edge), it earns the skeleton's credit, and in orientation precision/recall it is one
hit and one false positive. `AlgorithmRun.undirected` and `.bidirected` list those pairs, so a
report may score them another way. LiNGAM and exact search return DAGs.

**FCI** returns a PAG (endpoints: tail, arrowhead, circle), allowing latent confounders. Its
edges map onto the `Graph` as the structure metrics need a directed graph: a directed edge a->b
is a->b; a partially directed a o-> b (b is no ancestor of a; a causes b, or a latent confounds
them) is a->b, listed in `AlgorithmRun.partial`; a bidirected a <-> b (a latent confounder) is
both directions, in `.bidirected`; every other edge (a o-o b, a --- b, a --o b: no orientation)
is both directions, in `.undirected`. So every adjacency FCI finds stays in the skeleton.

**CD-NOD** needs a context index c (a time or domain index that captures the changing factors):
`context = "row"` (the default) is the row's position, the data taken as a time series in the
table's order (as a pooled table is, one condition after another: Sachs's cells); a column's
name makes that column the domain index (a data set's own domain or condition column). CD-NOD
adds c as a node: with "row" its edges are dropped (c is no variable), with a column they are
that column's edges (c -> x: x's mechanism changes across the domains). crawdad's data sets
have no domain column (CLadder's sampled rows are independent, so there c finds nothing and
CD-NOD comes down to PC).
"""

from __future__ import annotations

import contextlib
import io
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from crawdad.causal.structure import Graph
from crawdad.extras import require
from crawdad.tools.causal import ToolError

ALGORITHMS = ("pc", "ges", "direct-lingam", "ica-lingam", "exact", "fci", "cdnod")
_ALIASES = {a.replace("-", ""): a for a in ALGORITHMS} | {
    "directlingam": "direct-lingam",
    "icalingam": "ica-lingam",
    "lingam": "direct-lingam",
    "exactsearch": "exact",
    "fastcausalinference": "fci",
}
ROW_CONTEXT = "row"
TAIL, ARROW, CIRCLE = -1, 1, 2  # causal-learn's endpoint marks (G[i,j]: the mark at i)
DISCRETE_TESTS = ("chisq", "gsq")
INDEP_TESTS = ("fisherz", *DISCRETE_TESTS)
SCORES = {"bic": "local_score_BIC", "bdeu": "local_score_BDeu"}


# What a planner is told of the algorithms: when each fits, and its parameters (MAC's plan
# debaters are "pre-prompted with 3-5 statistical causal algorithms", appendix A.3.2).
ALGORITHM_GUIDE = """\
- pc: constraint-based (conditional independence tests); returns an equivalence class, so some
  edges may stay undirected. Parameters: alpha, the test's significance level (0 < alpha <= 0.5,
  default 0.05); indep_test: "fisherz" (continuous, roughly linear-Gaussian data), "chisq" or
  "gsq" (discrete data); default fisherz for continuous data, chisq for discrete; stable (true);
  uc_rule 0-2 (0); uc_priority -1-4 (2); max_depth, the largest conditioning set (none).
- ges: score-based greedy equivalence search; returns an equivalence class. Parameters: score,
  "bic" (continuous, linear-Gaussian) or "bdeu" (discrete); max_parents (none).
- direct-lingam: linear non-Gaussian acyclic model; returns a DAG with every edge oriented, if
  the data are continuous, linear and non-Gaussian. Parameters: threshold, the smallest
  coefficient magnitude that counts as an edge (0).
- ica-lingam: the ICA-based LiNGAM; the same assumptions. Parameters: random_state (0), max_iter
  (1000), threshold (0).
- exact: exact score-based search (BIC, linear-Gaussian) for the best-scoring DAG; small graphs
  only. Parameters: search_method "astar" or "dp" ("astar"); max_parents (none).
- fci: Fast Causal Inference, constraint-based like pc but allowing latent confounders and
  selection bias; returns a PAG (a o-> b is read as a -> b; edges it cannot orient count both
  ways). Parameters: alpha (0.05); indep_test as pc's; depth, the adjacency search's depth, -1
  unlimited (-1); max_path_length, of a discriminating path, -1 unlimited (-1).
- cdnod: causal discovery from nonstationary or heterogeneous data (pc with a context index
  whose changes help orient edges). Parameters: pc's alpha, indep_test, stable, uc_rule,
  uc_priority; context: "row" (the row's position, the data as a time series; default) or the
  name of a column that indexes the domain or condition.\
"""


class AlgorithmLimits(BaseModel):
    """How big a table an algorithm may be given. `max_seconds` is enforced by the caller (the
    tool boundary's worker process); the sizes are checked before any work."""

    model_config = ConfigDict(extra="forbid")

    max_variables: int = Field(30, ge=2)
    max_rows: int = Field(100_000, ge=10)
    max_seconds: float = Field(60.0, gt=0)
    # Exact search is exponential in the variables: Sachs's 11 take ~17 s on a laptop core.
    max_exact_variables: int = Field(11, ge=2)
    # A column is discrete (chisq, gsq, bdeu) when its values are integers, this many at most.
    max_levels: int = Field(20, ge=2)


@dataclass(frozen=True)
class AlgorithmRun:
    """What one run of an algorithm found, and exactly what was run."""

    algorithm: str
    params: dict[str, Any]  # every parameter as run, defaults filled in
    graph: Graph  # an undirected or bidirected edge is both directions (see the module doc)
    undirected: tuple[tuple[str, str], ...] = ()
    bidirected: tuple[tuple[str, str], ...] = ()
    partial: tuple[tuple[str, str], ...] = ()  # FCI's a o-> b, kept as a -> b
    # The library's own output over the variables in order: causal-learn's endpoint matrix
    # (pc, ges: G[j,i]=1 and G[i,j]=-1 mean i->j), the weighted matrix B of LiNGAM (B[i,j] != 0
    # means j->i) or exact search's 0/1 DAG (D[i,j]=1 means i->j).
    raw: tuple[tuple[float, ...], ...] = ()
    rows: int = 0
    seconds: float = 0.0
    notes: tuple[str, ...] = field(default=())  # the library's warnings, first few

    def edge_list(self) -> list[str]:
        """Directed edges as "A -> B" (FCI's partially directed "A o-> B"), undirected pairs once
        as "A -- B", bidirected "A <-> B"."""
        both = {frozenset(p) for p in (*self.undirected, *self.bidirected)}
        partial = set(self.partial)
        out = [
            f"{a} o-> {b}" if (a, b) in partial else f"{a} -> {b}"
            for a, b in sorted(self.graph.edges)
            if frozenset((a, b)) not in both
        ]
        out += [f"{a} -- {b}" for a, b in self.undirected]
        out += [f"{a} <-> {b}" for a, b in self.bidirected]
        return out

    def for_model(self) -> dict[str, Any]:
        """What an agent (or the executor of a plan) is told: JSON-ready."""
        return {
            "algorithm": self.algorithm,
            "params": self.params,
            "variables": list(self.graph.variables),
            "adjacency": self.graph.adjacency(),  # row cause, column effect
            "edges": self.edge_list(),
            "rows": self.rows,
        }


def algorithm_named(name: object) -> str:
    if not isinstance(name, str) or not name.strip():
        raise ToolError(f"algorithm: give one of {', '.join(ALGORITHMS)}, not {name!r}")
    key = name.strip().lower().replace("-", "").replace("_", "").replace(" ", "")
    if key not in _ALIASES:
        raise ToolError(
            f"algorithm {name!r} is not offered; the algorithms are {', '.join(ALGORITHMS)}"
        )
    return _ALIASES[key]


def run_algorithm(
    table: pd.DataFrame,
    algorithm: str,
    params: dict[str, Any] | None = None,
    limits: AlgorithmLimits | None = None,
) -> AlgorithmRun:
    """Run one allow-listed algorithm on a numeric table (columns are the variables)."""
    limits = limits or AlgorithmLimits()
    require("causallearn", what=f"the {algorithm!r} algorithm (causal-learn)")
    name, names, data, checked = _checked(table, algorithm, params, limits)
    start = time.monotonic()
    # FCI prints its orientations and CD-NOD its progress whatever it is told: kept out of the
    # worker's (and the command line's) output.
    quiet = io.StringIO()
    with (
        warnings.catch_warnings(record=True) as caught,
        contextlib.redirect_stdout(quiet),
        contextlib.redirect_stderr(quiet),
    ):
        warnings.simplefilter("always")
        try:
            found = _RUN[name](data, names, checked)
        except (ValueError, ArithmeticError, np.linalg.LinAlgError) as e:
            raise ToolError(f"{name} failed on this table: {type(e).__name__}: {e}") from None
    return AlgorithmRun(
        algorithm=name,
        params=checked,
        graph=Graph.of(names, found.edges, where=name),
        undirected=tuple(found.undirected),
        bidirected=tuple(found.bidirected),
        partial=tuple(found.partial),
        raw=tuple(tuple(float(v) for v in row) for row in found.raw),
        rows=len(data),
        seconds=time.monotonic() - start,
        notes=tuple(dict.fromkeys(str(w.message) for w in caught))[:5],
    )


def check_params(
    table: pd.DataFrame,
    algorithm: str,
    params: dict[str, Any] | None = None,
    limits: AlgorithmLimits | None = None,
) -> dict[str, Any]:
    """What `run_algorithm` checks before any work, without running: the parameters as they
    would run (defaults filled in), or the ToolError it would raise."""
    return _checked(table, algorithm, params, limits or AlgorithmLimits())[3]


def _checked(
    table: pd.DataFrame, algorithm: str, params: dict[str, Any] | None, limits: AlgorithmLimits
) -> tuple[str, list[str], np.ndarray, dict[str, Any]]:
    name = algorithm_named(algorithm)
    names, data = _matrix(table, limits)
    if name == "exact" and len(names) > limits.max_exact_variables:
        raise ToolError(
            f"exact search takes at most {limits.max_exact_variables} variables (it is "
            f"exponential in them); this table has {len(names)}: use pc or ges"
        )
    if params is not None and not isinstance(params, dict):
        raise ToolError(f"params: give an object of parameter values, not {params!r}")
    discrete = _discrete(data, limits.max_levels)
    return name, names, data, _PARAMS[name](dict(params or {}), discrete, names, data, limits)


# --- the table -----------------------------------------------------------------------------


def _matrix(table: Any, limits: AlgorithmLimits) -> tuple[list[str], np.ndarray]:
    if not isinstance(table, pd.DataFrame):
        raise ToolError(
            f"the data must be a table (a pandas DataFrame), not {type(table).__name__}"
        )
    rows, columns = table.shape
    if columns > limits.max_variables:
        raise ToolError(
            f"the table has {columns} variables; at most {limits.max_variables} are allowed "
            "(limits.max_variables)"
        )
    if rows > limits.max_rows:
        raise ToolError(
            f"the table has {rows:,} rows; at most {limits.max_rows:,} are allowed "
            "(limits.max_rows): sample fewer"
        )
    if columns < 2:
        raise ToolError(f"the table has {columns} variable(s); discovery needs 2 at least")
    if rows < 10:
        raise ToolError(f"the table has {rows} row(s); discovery needs 10 at least")
    names = [str(c) for c in table.columns]
    if len(set(names)) != len(names):
        raise ToolError(f"the table's column names repeat: {names}")
    for name, column in zip(names, table.columns, strict=True):
        if not (pd.api.types.is_numeric_dtype(table[column]) or table[column].dtype == bool):
            raise ToolError(f"column {name!r} is not numeric ({table[column].dtype})")
    data = table.to_numpy(dtype=float, copy=True)
    finite = np.isfinite(data)
    if not finite.all():
        r, c = np.argwhere(~finite)[0]
        raise ToolError(f"column {names[c]!r} row {r + 1} is {data[r, c]}, not a finite number")
    constant = [n for n, sd in zip(names, data.std(axis=0), strict=True) if sd == 0]
    if constant:
        raise ToolError(
            f"column(s) {', '.join(map(repr, constant))} never vary: drop them (nothing can be "
            "learned of a constant)"
        )
    return names, data


def _discrete(data: np.ndarray, max_levels: int) -> bool:
    if not np.all(data == np.round(data)):
        return False
    return all(len(np.unique(data[:, i])) <= max_levels for i in range(data.shape[1]))


# --- parameters ----------------------------------------------------------------------------


def _only(raw: dict[str, Any], name: str, allowed: tuple[str, ...]) -> None:
    unknown = [k for k in raw if k not in allowed]
    if unknown:
        raise ToolError(
            f"{name} has no parameter {unknown[0]!r}; its parameters are {', '.join(allowed)}"
        )


def _number(raw: dict[str, Any], key: str, default: float, low: float, high: float) -> float:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        raise ToolError(f"{key} must be a number, not {value!r}")
    if not low < value <= high:
        raise ToolError(f"{key} = {value} is out of range: give {low} < {key} <= {high}")
    return float(value)


def _int(raw: dict[str, Any], key: str, default: int | None, low: int, high: int) -> int | None:
    value = raw.get(key, default)
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ToolError(f"{key} must be a whole number, not {value!r}")
    if not low <= value <= high:
        raise ToolError(f"{key} = {value} is out of range: give {low} <= {key} <= {high}")
    return value


def _choice(raw: dict[str, Any], key: str, default: str, choices: tuple[str, ...]) -> str:
    value = raw.get(key, default)
    if not isinstance(value, str) or value.strip().lower() not in choices:
        raise ToolError(f"{key} = {value!r} is not offered: choose one of {', '.join(choices)}")
    return value.strip().lower()


def _flag(raw: dict[str, Any], key: str, default: bool) -> bool:
    value = raw.get(key, default)
    if not isinstance(value, bool):
        raise ToolError(f"{key} must be true or false, not {value!r}")
    return value


def _needs_discrete(what: str, discrete: bool, names: list[str], data: np.ndarray) -> None:
    if discrete:
        return
    levels = {n: len(np.unique(data[:, i])) for i, n in enumerate(names)}
    worst = max(levels, key=lambda n: levels[n])
    raise ToolError(
        f"{what} needs discrete data (whole numbers, few values per column); column {worst!r} "
        f"has {levels[worst]} distinct values: use a test or score for continuous data"
    )


def _pc_params(raw, discrete, names, data, limits) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    _only(raw, "pc", ("alpha", "indep_test", "stable", "uc_rule", "uc_priority", "max_depth"))
    test = _test(raw, discrete, names, data)
    return {
        "alpha": _number(raw, "alpha", 0.05, 0.0, 0.5),
        "indep_test": test,
        "stable": _flag(raw, "stable", True),
        "uc_rule": _int(raw, "uc_rule", 0, 0, 2),
        "uc_priority": _int(raw, "uc_priority", 2, -1, 4),
        "max_depth": _int(raw, "max_depth", None, 0, limits.max_variables),
    }


def _ges_params(raw, discrete, names, data, limits) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    _only(raw, "ges", ("score", "max_parents"))
    score = _choice(raw, "score", "bdeu" if discrete else "bic", tuple(SCORES))
    if score == "bdeu":
        _needs_discrete("score bdeu", discrete, names, data)
    return {"score": score, "max_parents": _int(raw, "max_parents", None, 1, limits.max_variables)}


def _direct_params(raw, discrete, names, data, limits) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    _only(raw, "direct-lingam", ("threshold",))
    return {"threshold": _threshold(raw)}


def _ica_params(raw, discrete, names, data, limits) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    _only(raw, "ica-lingam", ("random_state", "max_iter", "threshold"))
    return {
        "random_state": _int(raw, "random_state", 0, 0, 2**32 - 1),
        "max_iter": _int(raw, "max_iter", 1000, 1, 100_000),
        "threshold": _threshold(raw),
    }


def _exact_params(raw, discrete, names, data, limits) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    _only(raw, "exact", ("search_method", "max_parents"))
    return {
        "search_method": _choice(raw, "search_method", "astar", ("astar", "dp")),
        "max_parents": _int(raw, "max_parents", None, 1, limits.max_variables),
    }


def _fci_params(raw, discrete, names, data, limits) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    _only(raw, "fci", ("alpha", "indep_test", "depth", "max_path_length"))
    return {
        "alpha": _number(raw, "alpha", 0.05, 0.0, 0.5),
        "indep_test": _test(raw, discrete, names, data),
        "depth": _int(raw, "depth", -1, -1, limits.max_variables),
        "max_path_length": _int(raw, "max_path_length", -1, -1, limits.max_variables),
    }


def _cdnod_params(raw, discrete, names, data, limits) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    _only(raw, "cdnod", ("alpha", "indep_test", "stable", "uc_rule", "uc_priority", "context"))
    context = raw.get("context", ROW_CONTEXT)
    if not isinstance(context, str) or (context != ROW_CONTEXT and context not in names):
        raise ToolError(
            f"context = {context!r}: give {ROW_CONTEXT!r} (the row's position, the data as a "
            f"time series) or the name of the column that indexes the domain, one of "
            f"{', '.join(names)}"
        )
    if context != ROW_CONTEXT and len(names) < 3:
        raise ToolError(f"context {context!r} leaves one variable: discovery needs 2 at least")
    return {
        "alpha": _number(raw, "alpha", 0.05, 0.0, 0.5),
        "indep_test": _test(raw, discrete, names, data),
        "stable": _flag(raw, "stable", True),
        "uc_rule": _int(raw, "uc_rule", 0, 0, 2),
        "uc_priority": _int(raw, "uc_priority", 2, -1, 4),
        "context": context,
    }


def _test(raw: dict[str, Any], discrete: bool, names: list[str], data: np.ndarray) -> str:
    """`indep_test` as pc takes it (fisherz for continuous data, chisq for discrete)."""
    test = _choice(raw, "indep_test", "chisq" if discrete else "fisherz", INDEP_TESTS)
    if test in DISCRETE_TESTS:
        _needs_discrete(f"indep_test {test}", discrete, names, data)
    return test


def _threshold(raw: dict[str, Any]) -> float:
    value = raw.get("threshold", 0.0)
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 1e6:
        raise ToolError(f"threshold must be a number >= 0, not {value!r}")
    return float(value)


_PARAMS: dict[str, Callable[..., dict[str, Any]]] = {
    "pc": _pc_params,
    "ges": _ges_params,
    "direct-lingam": _direct_params,
    "ica-lingam": _ica_params,
    "exact": _exact_params,
    "fci": _fci_params,
    "cdnod": _cdnod_params,
}


# --- running -------------------------------------------------------------------------------

Pairs = list[tuple[str, str]]


@dataclass
class Found:
    """An algorithm's graph as directed edges (an undirected or bidirected pair both ways), the
    pairs of each kind, and the library's own matrix."""

    edges: Pairs
    undirected: Pairs
    bidirected: Pairs
    raw: np.ndarray
    partial: Pairs = field(default_factory=list)


def _run_pc(data: np.ndarray, names: list[str], p: dict[str, Any]) -> Found:
    from causallearn.search.ConstraintBased.PC import pc

    cg = pc(
        data,
        alpha=p["alpha"],
        indep_test=p["indep_test"],
        stable=p["stable"],
        uc_rule=p["uc_rule"],
        uc_priority=p["uc_priority"],
        show_progress=False,
        max_k=p["max_depth"],
    )
    return endpoint_edges(cg.G.graph, names)


def _run_ges(data: np.ndarray, names: list[str], p: dict[str, Any]) -> Found:
    from causallearn.search.ScoreBased.GES import ges

    record = ges(data, score_func=SCORES[p["score"]], maxP=p["max_parents"])
    return endpoint_edges(record["G"].graph, names)


def _run_direct(data: np.ndarray, names: list[str], p: dict[str, Any]) -> Found:
    from causallearn.search.FCMBased.lingam import DirectLiNGAM

    model = DirectLiNGAM()
    model.fit(data)
    return weighted_edges(model.adjacency_matrix_, names, p["threshold"])


def _run_ica(data: np.ndarray, names: list[str], p: dict[str, Any]) -> Found:
    from causallearn.search.FCMBased.lingam import ICALiNGAM

    model = ICALiNGAM(random_state=p["random_state"], max_iter=p["max_iter"])
    model.fit(data)
    return weighted_edges(model.adjacency_matrix_, names, p["threshold"])


def _run_exact(data: np.ndarray, names: list[str], p: dict[str, Any]) -> Found:
    from causallearn.search.ScoreBased.ExactSearch import bic_exact_search

    dag, _ = bic_exact_search(data, search_method=p["search_method"], max_parents=p["max_parents"])
    n = len(names)
    edges = [(names[i], names[j]) for i in range(n) for j in range(n) if dag[i, j]]
    return Found(edges, [], [], dag)


def _run_fci(data: np.ndarray, names: list[str], p: dict[str, Any]) -> Found:
    from causallearn.search.ConstraintBased.FCI import fci

    graph, _ = fci(
        data,
        independence_test_method=p["indep_test"],
        alpha=p["alpha"],
        depth=p["depth"],
        max_path_length=p["max_path_length"],
        show_progress=False,
    )
    return pag_edges(graph.graph, names)


def _run_cdnod(data: np.ndarray, names: list[str], p: dict[str, Any]) -> Found:
    """CD-NOD with the context as its last node; see the module doc for the context."""
    from causallearn.search.ConstraintBased.CDNOD import cdnod

    if p["context"] == ROW_CONTEXT:
        variables, c = names, np.arange(len(data), dtype=float)
        x = data
    else:
        k = names.index(p["context"])
        variables, c = [n for n in names if n != p["context"]], data[:, k]
        x = np.delete(data, k, axis=1)
    cg = cdnod(
        x,
        c.reshape(-1, 1),
        alpha=p["alpha"],
        indep_test=p["indep_test"],
        stable=p["stable"],
        uc_rule=p["uc_rule"],
        uc_priority=p["uc_priority"],
        show_progress=False,
    )
    matrix = cg.G.graph
    if p["context"] == ROW_CONTEXT:
        return endpoint_edges(matrix[:-1, :-1], names)
    labels = [*variables, p["context"]]
    order = [labels.index(n) for n in names]
    return endpoint_edges(matrix[np.ix_(order, order)], names)


_RUN: dict[str, Callable[[np.ndarray, list[str], dict[str, Any]], Found]] = {
    "pc": _run_pc,
    "ges": _run_ges,
    "direct-lingam": _run_direct,
    "ica-lingam": _run_ica,
    "exact": _run_exact,
    "fci": _run_fci,
    "cdnod": _run_cdnod,
}


def endpoint_edges(matrix: np.ndarray, names: list[str]) -> Found:
    """causal-learn's endpoint matrix (G[j,i]=1 and G[i,j]=-1: i->j; both -1: undirected;
    both 1: bidirected) -> directed edges, an undirected or bidirected pair in both directions."""
    edges: list[tuple[str, str]] = []
    undirected: list[tuple[str, str]] = []
    bidirected: list[tuple[str, str]] = []
    n = len(names)
    for i in range(n):
        for j in range(i + 1, n):
            a, b = matrix[i, j], matrix[j, i]
            pair = (names[i], names[j])
            if (a, b) == (-1, 1):
                edges.append(pair)
            elif (a, b) == (1, -1):
                edges.append((names[j], names[i]))
            elif (a, b) == (-1, -1):
                undirected.append(pair)
                edges += [pair, (names[j], names[i])]
            elif (a, b) == (1, 1):
                bidirected.append(pair)
                edges += [pair, (names[j], names[i])]
            elif (a, b) != (0, 0):
                raise ValueError(f"an edge mark ({a}, {b}) between {pair} that is not a CPDAG's")
    return Found(edges, undirected, bidirected, matrix)


def pag_edges(matrix: np.ndarray, names: list[str]) -> Found:
    """FCI's PAG (G[i,j]: the mark at i; tail -1, arrowhead 1, circle 2) -> the `Graph`'s
    edges, as the module doc says: a->b and a o-> b are a->b; a <-> b and the edges without an
    orientation (o-o, ---, --o) are both directions."""
    found = Found([], [], [], matrix)
    n = len(names)
    for i in range(n):
        for j in range(i + 1, n):
            marks = (int(matrix[i, j]), int(matrix[j, i]))
            if marks == (0, 0):
                continue
            pair, back = (names[i], names[j]), (names[j], names[i])
            if marks in ((TAIL, ARROW), (CIRCLE, ARROW)):
                found.edges.append(pair)
                if marks[0] == CIRCLE:
                    found.partial.append(pair)
            elif marks in ((ARROW, TAIL), (ARROW, CIRCLE)):
                found.edges.append(back)
                if marks[1] == CIRCLE:
                    found.partial.append(back)
            elif marks == (ARROW, ARROW):
                found.bidirected.append(pair)
                found.edges += [pair, back]
            elif set(marks) <= {TAIL, CIRCLE}:
                found.undirected.append(pair)
                found.edges += [pair, back]
            else:
                raise ValueError(f"an edge mark {marks} between {pair} that is not a PAG's")
    return found


def weighted_edges(b: np.ndarray, names: list[str], threshold: float) -> Found:
    """LiNGAM's B (x_i = sum_j B[i,j] x_j + e_i): j->i where |B[i,j]| > threshold."""
    n = len(names)
    edges = [
        (names[j], names[i])
        for i in range(n)
        for j in range(n)
        if i != j and abs(b[i, j]) > threshold
    ]
    return Found(edges, [], [], b)
