"""A question over a table as a CLadder query, the data tool call that answers one (LLM4Causal's
step 2, run by crawdad, no model), and the yes/no answer a tool's result implies under CLadder's
rules. The task the model writes is LLM4Causal's JSON (`crawdad.tools.llm4causal`), which reads
into these queries.

A query is {"task_type", "treatment", "outcome", "conditions", "mediators", "edges"}:
`task_type` one of CLadder's query types (or "cate", the effect within a stratum),
`conditions` the values a subgroup is fixed at (the treated group of an ETT question, the
collider's value of an explaining-away question), `mediators` those of a natural effect,
`edges` the graph the story states. Variables may be named by their column (X, V2, Y) or by
their name in the story; `call_for` maps names to columns. `gold_query(meta)` is the query a
question asks, read from its meta.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from crawdad.causal.answers import verdict
from crawdad.tools.correct_call import edges_of

TASK_TYPES = (
    "ate",
    "ett",
    "nde",
    "nie",
    "correlation",
    "marginal",
    "exp_away",
    "backadj",
    "collider_bias",
    "det-counterfactual",
)
EFFECTS = ("ate", "ett", "nde", "nie")


def _flag(meta: Mapping[str, Any], key: str) -> int:
    return int(bool(meta.get(key, True)))


def gold_query(meta: Mapping[str, Any]) -> dict[str, Any]:
    """The query a question asks, from its meta (and its model's `structure`)."""
    qt = str(meta["query_type"])
    x, y = str(meta.get("treatment") or "X"), str(meta.get("outcome") or "Y")
    conditions: dict[str, int] = {}
    if qt == "ett":
        conditions = {x: _flag(meta, "treated")}
    elif qt == "exp_away":
        conditions = {str(meta.get("collider") or "V3"): _flag(meta, "baseline")}
    mediators = [str(m) for m in meta.get("mediators") or []] if qt in ("nde", "nie") else []
    return {
        "task_type": qt,
        "treatment": x,
        "outcome": y,
        "conditions": conditions,
        "mediators": mediators,
        "edges": edges_of(str(meta.get("structure") or "")),
    }


# --- names ---------------------------------------------------------------------------------------


def _norm(name: Any) -> str:
    return " ".join(str(name).lower().replace("_", " ").split())


def column(name: Any, names: Mapping[str, str]) -> str:
    """A variable named by its column or its story name -> its column (unknown: as given)."""
    text = str(name).strip()
    if text in names:
        return text
    by_story = {_norm(story): col for col, story in names.items()}
    return by_story.get(_norm(text), text)


def _edge(edge: Any, names: Mapping[str, str]) -> str:
    text = str(edge)
    for arrow in ("->", "→"):
        if arrow in text:
            a, b = text.split(arrow, 1)
            return f"{column(a, names)}->{column(b, names)}"
    return text


def normalized(task: Mapping[str, Any], names: Mapping[str, str]) -> dict[str, Any]:
    """The task with every variable as a column and its fields in canonical form (sets sorted),
    so two tasks compare field by field; missing fields are empty."""
    conditions = task.get("conditions") or {}
    return {
        "task_type": str(task.get("task_type") or "").strip().lower(),
        "treatment": column(task.get("treatment") or "", names),
        "outcome": column(task.get("outcome") or "", names),
        "conditions": dict(sorted((column(k, names), v) for k, v in conditions.items()))
        if isinstance(conditions, Mapping)
        else {},
        "mediators": sorted({column(m, names) for m in task.get("mediators") or []}),
        "edges": sorted({_edge(e, names) for e in task.get("edges") or []}),
    }


# --- the call ------------------------------------------------------------------------------------


def call_for(task: Mapping[str, Any], names: Mapping[str, str]) -> tuple[str, dict[str, Any]]:
    """The data tool and its arguments that answer a task (the pipeline's step 2)."""
    t = normalized(task, names)
    kind, x, y = t["task_type"], t["treatment"], t["outcome"]
    edges = t["edges"] or None
    if kind in EFFECTS or kind == "cate":
        args: dict[str, Any] = {"effect": kind, "treatment": x, "outcome": y}
        if edges:
            args["edges"] = edges
        if kind in ("nde", "nie") and t["mediators"]:
            args["mediators"] = t["mediators"]
        if kind == "ett":
            args["group"] = int(t["conditions"].get(x, 1))
        if kind == "cate":
            args["condition"] = t["conditions"]
        return "estimate_effect", args
    if kind == "correlation":
        given = {k: v for k, v in t["conditions"].items() if k not in (x, y)}
        return "conditional_probability", {"outcome": y, "given": given, "by": [x]}
    if kind == "marginal":
        return "conditional_probability", {"outcome": y}
    if kind == "exp_away":
        given = {k: v for k, v in t["conditions"].items() if k not in (x, y)}
        return "conditional_probability", {"outcome": y, "given": given, "by": [x]}
    if kind in ("backadj", "collider_bias"):
        return "identify_effect", {"edges": edges or [], "treatment": x, "outcome": y}
    return "describe_data", {}


# --- what a result says --------------------------------------------------------------------------


def _cells(result: Mapping[str, Any], treatment: str) -> dict[int, dict[str, Any]]:
    """A `by [treatment]` table's cells by the treatment's value."""
    out = {}
    for cell in result.get("table") or []:
        event = str(cell.get("event") or "")
        for v in (0, 1):
            if f"{treatment}={v}" in event.split("|", 1)[-1]:
                out[v] = cell
    return out


def implied_value(
    task: Mapping[str, Any], result: Any, meta: Mapping[str, Any], names: Mapping[str, str]
) -> float | None:
    """The question's quantity, in its own orientation, read from the result of the gold
    task's call; None where the answer does not come from a number of the table (backadj,
    collider_bias, det-counterfactual) or the result lacks it."""
    if not isinstance(result, Mapping):
        return None
    t = normalized(task, names)
    kind, x = t["task_type"], t["treatment"]
    sign = (1 if _flag(meta, "treated") else -1) * (1 if _flag(meta, "result") else -1)
    try:
        if kind in ("ate", "ett", "nde", "nie"):
            value = float(result["value"])
            if kind == "ate":
                return sign * value
            if kind == "ett":  # E[Y_t - Y_{1-t} | X=t] from E[Y_1 - Y_0 | X=t]
                return sign * value
            return value
        if kind == "marginal":
            return float(result["probability"])
        cells = _cells(result, x)
        if kind == "correlation":
            return sign * (float(cells[1]["probability"]) - float(cells[0]["probability"]))
        if kind == "exp_away":
            t_value = _flag(meta, "treated")
            rows = sum(int(c["rows"]) for c in cells.values())
            hits = sum(int(c["count"]) for c in cells.values())
            diff = float(cells[t_value]["probability"]) - hits / rows
            return diff if _flag(meta, "result") else -diff
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return None
    return None


def implied_answer(
    task: Mapping[str, Any], result: Any, meta: Mapping[str, Any], names: Mapping[str, str]
) -> str | None:
    """The yes/no a correct reading of the result gives, under CLadder's rules."""
    value = implied_value(task, result, meta, names)
    if value is None:
        return None
    return verdict(str(meta["query_type"]), value, meta).answer
