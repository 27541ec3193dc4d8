"""A run made in shards, analysed as one run.

Users who outgrow one machine run one crawdad process per node or per SLURM array task, each over
a `--range` of the same questions with the same settings, into its own folder. Folders whose
result-changing settings are identical (the models and their sampling, prompts, protocol, seed,
task and dataset: what a resume compares, `crawdad.run.store.manifest_differences`) and whose
questions are disjoint are shards of one run: they are pooled into one `Run`, named after them
(the common beginning of the shards' folder names, `seed0` for `seed0-a` and `seed0-b`; else the
first shard's name and their count), never after the folder they lie in: two runs sharded into
one parent folder keep two names, made unique where they would collide.
Folders of identical settings over overlapping questions are refused with the overlap named,
unless the caller asks to compare them; folders of different settings stay runs of their own,
compared side by side.
"""

from __future__ import annotations

from collections.abc import Sequence

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
    """The pooled run's name, from its shards' own names (never their parent folder's): their
    common beginning (`seed0` of `seed0-a`, `seed0-b`), else the first name and the number of
    shards (`x+2 shards`)."""
    names = [r.label for r in group]
    low, high = min(names), max(names)  # the common start of all is theirs
    n = next((i for i, (a, b) in enumerate(zip(low, high, strict=False)) if a != b), len(low))
    prefix = low[:n].rstrip("-_.~+/ ")
    return prefix or f"{names[0]}+{len(names) - 1} shard{'s' if len(names) > 2 else ''}"


def _unique(label: str, taken: set[str]) -> str:
    out, n = label, 2
    while out in taken:
        out, n = f"{label}~{n}", n + 1
    return out


def pooled(group: Sequence[Run], label: str | None = None) -> Run:
    """One run of the shards' records: frames concatenated, counts added, shards named."""
    label = label or _label(group)
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
    # Every run keeps a name of its own: a pooled run's name never takes another run's.
    taken = {g[0].label for g in groups if len(g) == 1}
    out = []
    for g in groups:
        if len(g) == 1:
            out.append(g[0])
            continue
        label = _unique(_label(g), taken)
        taken.add(label)
        out.append(pooled(g, label))
    return out
