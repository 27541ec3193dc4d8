"""One home per task: the analysis of each task in `crawdad/tasks/`, found through the task as
the run machinery finds it. A task names the modules of its report sections
(`Task.report_sections`, import paths); each such module has

    run_sections(runs) -> list[Section]                      # the run report
    experiment_sections(variants, baseline) -> list[Section] # the experiment report (optional)

Each is given every run of the report (a section may compare its task's runs with others: a run
over CLadder's own questions joins the questions-from-data comparison) and returns nothing when
there is nothing to show. A new task adds its analysis here and names it; `report.py` does not
change.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from importlib import import_module
from types import ModuleType
from typing import Any

from crawdad.analysis.load import Run
from crawdad.analysis.section import Section

from crawdad.tasks import TASKS


def task_name(run: Run) -> str:
    config = run.manifest.config if run.manifest is not None else {}
    return str(config.get("task") or "cladder")


def _modules(tasks: Iterable[str]) -> list[ModuleType]:
    """The report-section modules the tasks name, each once, in the order first named. A task
    this crawdad does not know (a run made with a task of one's own) names none."""
    names: dict[str, None] = {}
    for t in tasks:
        task = TASKS.get(t)
        for m in getattr(task, "report_sections", ()) if task is not None else ():
            names[m] = None
    return [import_module(m) for m in names]


def task_sections(runs: Sequence[Run]) -> list[Section]:
    """The sections of every task among `runs`."""
    return [s for m in _modules(task_name(r) for r in runs) for s in m.run_sections(runs)]


def experiment_task_sections(variants: Sequence[Any], baseline: str | None) -> list[Section]:
    """The experiment report's sections of every task among its variants."""
    modules = _modules(task_name(v.run) for v in variants)
    return [
        s
        for m in modules
        if hasattr(m, "experiment_sections")
        for s in m.experiment_sections(variants, baseline)
    ]


__all__ = ["experiment_task_sections", "task_name", "task_sections"]
