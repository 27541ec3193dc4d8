"""A run made in shards, analysed as one run.

Users who outgrow one machine run one crawdad process per node or per SLURM array task, each over
a `--range` of the same questions with the same settings, into its own folder. Folders whose
result-changing settings are identical (the models and their sampling, prompts, protocol, seed,
task and dataset: what a resume compares, `crawdad.run.store.manifest_differences`) and whose
questions are disjoint are shards of one run: they are pooled into one `Run`, named after them.
Folders of identical settings over overlapping questions are refused with the overlap named,
unless the caller asks to compare them; folders of different settings stay runs of their own,
compared side by side.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
from crawdad.analysis.load import Run

from crawdad.errors import StoreError
from crawdad.run.store import manifest_differences


def same_settings(a: Run, b: Run) -> bool:
    """Whether two runs were made with the same result-changing settings (selection aside)."""
    if a.manifest is None or b.manifest is None:
        return False
    return not manifest_differences(a.manifest, b.manifest)


def _ids(run: Run) -> set[str]:
    return set(run.debates["question_id"].astype(str)) if len(run.debates) else set()


def _label(group: Sequence[Run]) -> str:
    """The pooled run's name: the shards' common folder, else their names joined."""
    parents = {r.path.resolve().parent for r in group}
    common = os.path.commonpath([str(r.path.resolve()) for r in group])
    if len(parents) == 1 and Path(common).name:
        return Path(common).name
    return "+".join(r.label for r in group)


def pooled(group: Sequence[Run]) -> Run:
    """One run of the shards' records: frames concatenated, counts added, shards named."""
    label = _label(group)
    debates = pd.concat([r.debates for r in group], ignore_index=True)
    turns = pd.concat([r.turns for r in group], ignore_index=True)
    debates["run"] = label
    turns["run"] = label
    first = group[0]
    named = ", ".join(f"`{r.path}` ({len(r.debates)} debates)" for r in group)
    return Run(
        label=label,
        path=first.path,
        manifest=first.manifest,
        debates=debates,
        turns=turns,
        n_lines=sum(r.n_lines for r in group),
        n_invalid_lines=sum(r.n_invalid_lines for r in group),
        n_superseded=sum(r.n_superseded for r in group),
        n_other_settings=sum(r.n_other_settings for r in group),
        n_outside_selection=sum(r.n_outside_selection for r in group),
        live=any(r.live for r in group),
        warnings=[f"one run pooled from {len(group)} shards: {named}"]
        + [w for r in group for w in r.warnings],
        shards=[r.path for r in group],
    )


def pool_shards(runs: Sequence[Run], *, compare: bool = False) -> list[Run]:
    """The runs to analyse: shards of one run pooled, other runs as they are, in the order
    given. With `compare`, nothing is pooled and overlapping shards are compared side by side.
    Raises StoreError for folders of one run's settings whose questions overlap."""
    if compare or len(runs) < 2:
        return list(runs)
    groups: list[list[Run]] = []
    for run in runs:
        group = next((g for g in groups if same_settings(g[0], run)), None)
        if group is None:
            groups.append([run])
            continue
        for other in group:
            shared = _ids(other) & _ids(run)
            if shared:
                some = ", ".join(sorted(shared)[:5]) + (" ..." if len(shared) > 5 else "")
                raise StoreError(
                    f"{other.path} and {run.path} were made with the same settings and share "
                    f"{len(shared)} questions ({some}): they are not shards of one run (each "
                    "shard takes its own --range). To compare them side by side, pass --compare"
                )
        group.append(run)
    return [pooled(g) if len(g) > 1 else g[0] for g in groups]
