"""Step scoring's error taxonomy (runs made with `[scoring] steps = true`).

Each scored response's CausalCoT steps are right or wrong against the causal engine (see
crawdad.scoring.step_scores); the first wrong step names its error: a graph error, an estimand error
(the wrong query type), a numbers error (a probability misread from the question) or an
arithmetic error (the result more than 0.01 from the exact value).

- `step_errors`: per model, rung and round, how many responses were scored, how many had every
  shown step right, and which step went wrong first.
- `step_repairs`: per model, rung and step, over the debates where a model's later response was
  scored after an earlier one of its own: how often a wrong step was repaired, and how often a
  right one was broken.
"""

from __future__ import annotations

import itertools

import pandas as pd
from crawdad.analysis.metrics.accuracy import rung_label
from crawdad.analysis.section import Section, Table

STEPS = ("graph", "query_type", "numbers", "value")
ERROR_NAMES = {
    "graph": "graph",
    "query_type": "estimand",
    "numbers": "numbers",
    "value": "arithmetic",
}
ERROR_COLUMNS = ["run", "agent", "rung", "round", "n_scored", "n_all_right"] + [
    f"first_wrong_{ERROR_NAMES[s]}" for s in STEPS
]
REPAIR_COLUMNS = ["run", "agent", "rung", "error", "n_wrong_before", "repaired", "repair_rate"]
REPAIR_COLUMNS += ["n_right_before", "broken", "break_rate"]


def _scored(turns: pd.DataFrame) -> pd.DataFrame:
    if turns.empty or "steps" not in turns:
        return pd.DataFrame()
    shown = turns["steps"].map(lambda s: s is not None and any(x is not None for x in s[:4]))
    t = turns[shown].copy()  # a response that shows no step is not scored
    if t.empty:
        return t
    for i, step in enumerate(STEPS):
        t[step] = t["steps"].map(lambda s, i=i: s[i])
    t["first_wrong"] = t["steps"].map(lambda s: s[4])
    t["rung"] = t["rung"].map(rung_label)
    return t


def step_errors(turns: pd.DataFrame) -> pd.DataFrame:
    t = _scored(turns)
    if t.empty:
        return pd.DataFrame(columns=ERROR_COLUMNS)
    rows = []
    for (run, agent, rung, round_), g in t.groupby(["run", "agent", "rung", "round"], sort=True):
        first = g["first_wrong"].value_counts()
        rows.append(
            [run, agent, rung, int(round_), len(g), int(g["first_wrong"].isna().sum())]
            + [int(first.get(s, 0)) for s in STEPS]
        )
    return pd.DataFrame(rows, columns=ERROR_COLUMNS)


def step_repairs(turns: pd.DataFrame) -> pd.DataFrame:
    t = _scored(turns)
    if t.empty:
        return pd.DataFrame(columns=REPAIR_COLUMNS)
    t = t.sort_values(["run", "question_id", "agent", "turn_index"])
    counts: dict[tuple[str, str, str, str], list[int]] = {}
    for (run, _, agent), g in t.groupby(["run", "question_id", "agent"], sort=False):
        rows = g.to_dict("records")
        for before, after in itertools.pairwise(rows):
            for step in STEPS:
                a, b = before[step], after[step]
                if a is None or b is None or pd.isna(a) or pd.isna(b):
                    continue
                c = counts.setdefault((run, agent, before["rung"], ERROR_NAMES[step]), [0] * 4)
                if not a:
                    c[0] += 1
                    c[1] += bool(b)
                else:
                    c[2] += 1
                    c[3] += not b
    rows_out = []
    for (run, agent, rung, error), (wrong, repaired, right, broken) in sorted(counts.items()):
        repair_rate = repaired / wrong if wrong else None
        break_rate = broken / right if right else None
        rows_out.append(
            [run, agent, rung, error, wrong, repaired, repair_rate, right, broken, break_rate]
        )
    return pd.DataFrame(rows_out, columns=REPAIR_COLUMNS)


def steps_section(turns: pd.DataFrame) -> list[Section]:
    """The report's section (none when no turn was scored)."""
    errors = step_errors(turns)
    if errors.empty:
        return []
    repairs = step_repairs(turns)
    return [
        Section(
            "Step scoring: which CausalCoT step goes wrong first",
            [
                Table(
                    "step_errors",
                    errors,
                    line="Each debater response's steps read by the extractor and scored against "
                    "the causal engine: graph (the edges), estimand (the query type), numbers "
                    "(the probabilities read from the question), arithmetic (the result within "
                    "0.01 of the exact value). `first_wrong_*`: responses whose first wrong step "
                    "is that one; `n_all_right`: every step shown was right.",
                    hide=(),
                    fold="never",
                ),
                Table(
                    "step_repairs",
                    repairs,
                    line="How often a model's later response repairs a step its earlier response "
                    "got wrong, and breaks one it got right (only where both responses show that "
                    "step).",
                    shown=None
                    if not repairs.empty
                    else "_No model showed a step in two of its responses to one question._",
                    hide=(),
                    fold="never",
                ),
            ],
            folder="steps",
        )
    ]
