"""The contamination check: accuracy on CLadder's original questions against their fresh twins
(`crawdad data variants`: the same wording and story, new numbers, the answer computed anew),
paired by twin, per model, rung and stage.

A model that learned CLadder's questions (or their answers) from its training data does better on
the originals than on twins it cannot have seen. A fresh question's id is "fresh<seed>-<original
id>" (`crawdad.data.variants.twin_of`); a pair counts when both questions are in the run.

Stages: "independent" is each model's first answer in a debate given before it saw any other
answer (round 0, a simultaneous first round, a solo sample); "final" is the debate's answer
(agent "debate": twins may have different first speakers). As everywhere in the report, an
unanswered or errored question counts as wrong. The difference is fresh minus original (negative: better on the
originals), with Newcombe's paired score CI and the exact McNemar p-value of the discordant pairs.
"""

from __future__ import annotations

import pandas as pd
from crawdad.analysis.metrics._stats import mcnemar_exact, newcombe_paired_difference
from crawdad.analysis.metrics.accuracy import rung_label
from crawdad.analysis.section import Section, Table

from crawdad.data.variants import twin_of

DEBATE = "debate"  # the agent value of the debate's own answer
COLUMNS = [
    "run",
    "agent",
    "stage",
    "rung",
    "n_pairs",
    "acc_original",
    "acc_fresh",
    "diff",
    "diff_ci_lo",
    "diff_ci_hi",
    "only_original",
    "only_fresh",
    "mcnemar_p",
]


def pairs(question_ids: pd.Series) -> dict[str, str]:
    """fresh id -> original id, for the fresh questions whose original is present too."""
    ids = set(question_ids.astype(str))
    out = {}
    for q in ids:
        original = twin_of(q)
        if original is not None and original in ids:
            out[q] = original
    return out


def _answers(debates: pd.DataFrame, turns: pd.DataFrame) -> pd.DataFrame:
    """One row per (run, question, agent, stage): whether that answer was right."""
    independent = turns[turns["seen"].map(lambda s: s is not None and len(s) == 0)]
    independent = independent.sort_values("turn_index").drop_duplicates(
        ["run", "question_id", "agent"]
    )
    first = pd.DataFrame(
        {
            "run": independent["run"],
            "question_id": independent["question_id"].astype(str),
            "agent": independent["agent"],
            "stage": "independent",
            "rung": independent["rung"],
            "correct": (independent["answer"] == independent["gold"]) & ~independent["errored"],
        }
    )
    final = pd.DataFrame(
        {
            "run": debates["run"],
            "question_id": debates["question_id"].astype(str),
            "agent": DEBATE,
            "stage": "final",
            "rung": debates["rung"],
            "correct": (debates["final_answer"] == debates["gold"]) & ~debates["errored"],
        }
    )
    return pd.concat([first, final], ignore_index=True)


def _row(keys: tuple, both: int, only_o: int, only_f: int, neither: int) -> dict:
    n = both + only_o + only_f + neither
    lo, hi = newcombe_paired_difference(both, only_o, only_f, neither)
    return dict(
        zip(["run", "agent", "stage", "rung"], keys, strict=True),
        n_pairs=n,
        acc_original=(both + only_o) / n,
        acc_fresh=(both + only_f) / n,
        diff=(only_f - only_o) / n,
        diff_ci_lo=lo,
        diff_ci_hi=hi,
        only_original=only_o,
        only_fresh=only_f,
        mcnemar_p=mcnemar_exact(only_o, only_f),
    )


def contamination_table(debates: pd.DataFrame, turns: pd.DataFrame) -> pd.DataFrame:
    """Paired accuracy, originals vs fresh twins; empty when no run holds both of a pair."""
    if debates.empty or "question_id" not in debates:
        return pd.DataFrame(columns=COLUMNS)
    twins = pairs(debates["question_id"])
    if not twins:
        return pd.DataFrame(columns=COLUMNS)
    answers = _answers(debates, turns)
    fresh = answers[answers["question_id"].isin(twins.keys())].copy()
    fresh["original"] = fresh["question_id"].map(twins)
    paired = fresh.merge(
        answers,
        left_on=["run", "agent", "stage", "original"],
        right_on=["run", "agent", "stage", "question_id"],
        suffixes=("_f", "_o"),
    )
    if paired.empty:
        return pd.DataFrame(columns=COLUMNS)
    paired["rung"] = paired["rung_o"].map(rung_label)
    rows = []
    for rung_all in (False, True):
        keys = ["run", "agent", "stage"] + ([] if rung_all else ["rung"])
        for key, g in paired.groupby(keys, sort=True):
            o, f = g["correct_o"].astype(bool), g["correct_f"].astype(bool)
            cells = [int((o & f).sum()), int((o & ~f).sum()), int((~o & f).sum())]
            cells.append(len(g) - sum(cells))
            full = (*key, "all") if rung_all else key
            rows.append(_row(full, *cells))
    out = pd.DataFrame(rows, columns=COLUMNS)
    return out.sort_values(["run", "stage", "agent", "rung"]).reset_index(drop=True)


def contamination_section(debates: pd.DataFrame, turns: pd.DataFrame) -> list[Section]:
    """The report's section (none when the runs hold no original-fresh pairs)."""
    table = contamination_table(debates, turns)
    if table.empty:
        return []
    line = (
        "Pairs of a CLadder question and its fresh twin (`crawdad data variants`: the same "
        "wording, new numbers, the answer computed exactly). `independent`: each model's first "
        "answer before it saw another; `final`: the debate's answer (agent `debate`). `diff` = "
        "fresh - original accuracy with its 95% CI (Newcombe's paired score interval); `mcnemar_p`: exact McNemar "
        "test on the pairs answered right only once. Much better accuracy on the originals "
        "suggests the model has seen CLadder."
    )
    return [
        Section(
            "Contamination check: original questions against their fresh twins",
            [Table("contamination", table, line=line, hide=(), fold="never")],
            folder="contamination",
        )
    ]
