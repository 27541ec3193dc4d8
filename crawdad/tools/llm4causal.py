"""LLM4Causal's structured task (paper 002, section 3.1 and appendix C.1, Table 6) on CLadder's
questions: its JSON keys, its task categories, its step-1 scoring (section 4.3), and the
CLadder query a task asks, which the data tools answer (`crawdad.tools.data_tasks`).

A task is the paper's JSON: `causal_problem` ([category, task], e.g. ["CEL", "ATE"]), `dataset`,
`nodes`, `treatment`, `response`, `mediator` (lists of names) and `condition` (a list of
[name, value] pairs), plus crawdad's own `edges` (the graph the story states: the data tools need
it to identify an effect on CLadder's tables, where the paper's learners adjust without one).

CLadder's query types map onto the paper's five tasks where one fits: ate -> ATE; ett -> HTE
(the effect within the subgroup X = the treated value, E[Y1 - Y0 | X = t]); nde, nie -> MA (the
paper's mediation analysis reports the direct and the indirect effect together, so step 2 runs
both). The paper's CGL (learn a graph) and OPO (the best treatment level) have no CLadder
question; CLadder's other types (marginal, correlation, exp_away, backadj, collider_bias,
det-counterfactual) have no task in the paper and go under crawdad's category "CLadder".

Scoring (section 4.3): the causal task and the dataset by exact match, every other key by soft
match: a gold value counts as retrieved when it is a subset of the model's output (its words a
subset of the words of one output entity, e.g. "heart health" in "heart health score"). Exact
match of every key is recorded beside it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from crawdad.tools.data_tasks import column as _column
from crawdad.tools.data_tasks import gold_query, normalized

# CLadder query type -> LLM4Causal's [category, task] (crawdad's "CLadder" where the paper has none)
CATEGORIES: dict[str, tuple[str, str]] = {
    "ate": ("CEL", "ATE"),
    "ett": ("CEL", "HTE"),
    "nde": ("CEL", "MA"),
    "nie": ("CEL", "MA"),
    "marginal": ("CLadder", "marginal"),
    "correlation": ("CLadder", "correlation"),
    "exp_away": ("CLadder", "exp_away"),
    "backadj": ("CLadder", "backadj"),
    "collider_bias": ("CLadder", "collider_bias"),
    "det-counterfactual": ("CLadder", "det-counterfactual"),
}
PAPER_TASKS = {"CGL": "CSL", "ATE": "CEL", "HTE": "CEL", "MA": "CEL", "OPO": "CPL"}
# The paper's keys (Table 1 and Table 6), in its order; `edges` is crawdad's.
KEYS = ("causal_problem", "dataset", "nodes", "treatment", "response", "mediator", "condition")
ALL_KEYS = (*KEYS, "edges")
EXACT_KEYS = ("causal_problem", "dataset")  # matched exactly (section 4.3); the rest softly
# The keys each task uses (Table 1), and those of crawdad's CLadder tasks.
TASK_KEYS: dict[str, tuple[str, ...]] = {
    "CGL": ("dataset", "nodes"),
    "ATE": ("dataset", "treatment", "response", "edges"),
    "HTE": ("dataset", "treatment", "response", "condition", "edges"),
    "MA": ("dataset", "treatment", "response", "mediator", "edges"),
    "OPO": ("dataset", "treatment", "response", "condition"),
    "marginal": ("dataset", "response"),
    "correlation": ("dataset", "treatment", "response"),
    "exp_away": ("dataset", "treatment", "response", "condition"),
    "backadj": ("dataset", "treatment", "response", "edges"),
    "collider_bias": ("dataset", "treatment", "response", "edges"),
    "det-counterfactual": ("dataset", "treatment", "response", "edges"),
}
_NAMES = {"type": "array", "items": {"type": "string"}}
TASK_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "causal_problem": _NAMES,
        "dataset": _NAMES,
        "nodes": _NAMES,
        "treatment": _NAMES,
        "response": _NAMES,
        "mediator": _NAMES,
        "condition": {
            "type": "array",
            "items": {"type": "array", "items": {"type": ["string", "number"]}},
        },
        "edges": _NAMES,
    },
    "required": list(ALL_KEYS),
}


def category(query_type: str) -> tuple[str, str]:
    """A CLadder query type's [category, task] in LLM4Causal's terms."""
    return CATEGORIES.get(query_type, ("CLadder", query_type))


def gold_task(meta: Mapping[str, Any], dataset: str | None = None) -> dict[str, Any]:
    """The question's task in the paper's JSON, with only the keys its task uses (Table 6)."""
    q = gold_query(meta)
    cat, task = category(q["task_type"])
    out: dict[str, Any] = {"causal_problem": [cat, task]}
    values = {
        "dataset": [dataset or str(meta.get("dataset") or "")],
        "treatment": [q["treatment"]],
        "response": [q["outcome"]],
        "mediator": list(q["mediators"]),
        "condition": [[k, v] for k, v in q["conditions"].items()],
        "edges": list(q["edges"]),
    }
    for key in TASK_KEYS.get(task, ()):
        out[key] = values[key]
    return out


# --- reading a task ------------------------------------------------------------------------------


def _list(value: Any) -> list[Any]:
    if value is None or value == "":
        return []
    return list(value) if isinstance(value, list | tuple) else [value]


def _pairs(value: Any) -> list[tuple[str, Any]]:
    """A condition as (name, value) pairs: [[n, v], ...], one [n, v], {n: v} or ["n=v"]."""
    if isinstance(value, Mapping):
        return [(str(k), v) for k, v in value.items()]
    items = _list(value)
    flat = len(items) == 2 and isinstance(items[0], str) and "=" not in items[0]
    if flat and not isinstance(items[1], list | tuple | Mapping):
        items = [items]
    out = []
    for item in items:
        if isinstance(item, Mapping):
            out += [(str(k), v) for k, v in item.items()]
        elif isinstance(item, list | tuple) and len(item) == 2:
            out.append((str(item[0]), item[1]))
        elif isinstance(item, str) and "=" in item:
            name, v = item.split("=", 1)
            out.append((name.strip(), v.strip()))
    return out


def problem(task: Mapping[str, Any]) -> list[str]:
    """The task's causal_problem, upper-cased and stripped (crawdad's CLadder types lower)."""
    out = []
    for part in _list(task.get("causal_problem")):
        text = str(part).strip()
        out.append(text.upper() if text.upper() in {*PAPER_TASKS, "CSL", "CEL", "CPL"} else text)
    return out


def task_name(task: Mapping[str, Any]) -> str:
    """The task (ATE, HTE, ..., or a CLadder type) a causal_problem names: its last part."""
    parts = problem(task)
    return parts[-1] if parts else ""


# --- names ---------------------------------------------------------------------------------------

_ARTICLES = {"the", "a", "an"}


def words(text: Any) -> frozenset[str]:
    """An entity's words: lower case, split on anything not a letter or digit, articles out."""
    return frozenset(re.findall(r"[a-z0-9]+", str(text).lower())) - _ARTICLES


def _soft_entity(gold: str, got: Any, names: Mapping[str, str]) -> bool:
    """Whether a gold variable is a subset of one output entity: as its column, or by its name
    in the story (the words of either a subset of the output's words)."""
    if _column(got, names) == gold:
        return True
    have = words(got)
    return any(w and w <= have for w in (words(gold), words(names.get(gold, ""))))


def _same_value(a: Any, b: Any) -> bool:
    try:
        return float(a) == float(b)
    except (TypeError, ValueError):
        return str(a).strip().lower() == str(b).strip().lower()


def _dataset(name: Any) -> str:
    text = str(name).strip().lower()
    return text.rsplit("/", 1)[-1]  # the file as the question shows it, or its name alone


def _edges(values: Any, names: Mapping[str, str]) -> set[str]:
    return set(normalized({"edges": _list(values)}, names)["edges"])


def _key_right(
    key: str, got: Mapping[str, Any], gold: Mapping[str, Any], names: Mapping[str, str], soft: bool
) -> bool:
    want, have = gold.get(key), got.get(key)
    if key == "causal_problem":
        return problem(got) == problem(gold)
    if key == "dataset":
        return {_dataset(d) for d in _list(have)} == {_dataset(d) for d in _list(want)}
    if key == "edges":
        return _edges(have, names) == _edges(want, names)
    if key == "condition":
        return _conditions_right(_pairs(have), _pairs(want), names, soft)
    true, out = [str(x) for x in _list(want)], _list(have)
    if not soft:
        return bool(true) and {_column(x, names) for x in out} == set(true)
    return bool(true) and all(any(_soft_entity(x, y, names) for y in out) for x in true)


def _conditions_right(
    out: list[tuple[str, Any]], true: list[tuple[str, Any]], names: Mapping[str, str], soft: bool
) -> bool:
    """Every true (name, value) among the output's: the name softly or exactly, the value as a
    number (or text) exactly."""
    if not soft:
        mine = {(_column(n, names), _val(v)) for n, v in out}
        return len(out) == len(true) and mine == {(n, _val(v)) for n, v in true}
    return all(
        any(_soft_entity(n, m, names) and _same_value(v, w) for m, w in out) for n, v in true
    )


def _num(v: Any) -> bool:
    try:
        float(v)
    except (TypeError, ValueError):
        return False
    return True


def _val(v: Any) -> float | str:
    return float(v) if _num(v) else str(v)


def extraction_scores(
    task: Mapping[str, Any], gold: Mapping[str, Any], names: Mapping[str, str], *, soft: bool = True
) -> dict[str, bool]:
    """Key by key, whether the task retrieved the gold's value (section 4.3): only the keys the
    gold has are scored; the causal task and the dataset exactly, the rest softly (`soft`) or
    exactly. Variables may be named by column or by their name in the story."""
    return {
        key: _key_right(key, task, gold, names, soft and key not in EXACT_KEYS)
        for key in ALL_KEYS
        if key in gold
    }


# --- the query a task asks -----------------------------------------------------------------------


def _first(value: Any, names: Mapping[str, str]) -> str:
    items = _list(value)
    return _column(items[0], names) if items else ""


def queries(task: Mapping[str, Any], names: Mapping[str, str]) -> list[dict[str, Any]]:
    """The CLadder queries (data_tasks' form) whose results answer a task: one, or MA's two
    (the direct and the indirect effect, as the paper's mediation analysis reports both)."""
    kind = task_name(task)
    x, y = _first(task.get("treatment"), names), _first(task.get("response"), names)
    conditions = {_column(n, names): _bit(v) for n, v in _pairs(task.get("condition"))}
    base = {
        "treatment": x,
        "outcome": y,
        "conditions": conditions,
        "mediators": [_column(m, names) for m in _list(task.get("mediator"))],
        "edges": [str(e) for e in _list(task.get("edges"))],
    }
    if kind == "MA":
        return [{**base, "task_type": "nde"}, {**base, "task_type": "nie"}]
    if kind == "HTE":  # within the treated (or untreated) alone: the ETT; else the ATE of a stratum
        only_x = set(conditions) == {x}
        return [{**base, "task_type": "ett" if only_x or not conditions else "cate"}]
    reverse = {t: q for q, (_, t) in CATEGORIES.items() if t not in ("HTE", "MA")}
    return [{**base, "task_type": reverse.get(kind, kind.lower())}]


def _bit(value: Any) -> int:
    try:
        return int(float(value) >= 0.5)
    except (TypeError, ValueError):
        return int(str(value).strip().lower() in ("true", "yes"))
