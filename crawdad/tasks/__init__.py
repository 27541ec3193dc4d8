"""Tasks: what an item is, how it is shown, what an answer is and how it is scored
(`base.Task`). A new kind is a module or package here and one line in TASKS."""

from __future__ import annotations

from crawdad.errors import ConfigError
from crawdad.tasks.base import Task
from crawdad.tasks.cladder import CladderTask
from crawdad.tasks.cladder_data import CladderDataTask
from crawdad.tasks.discovery import DiscoveryGraphTask, DiscoveryPairsTask

TASKS: dict[str, Task] = {
    "cladder": CladderTask(),
    "cladder-data": CladderDataTask(),
    "cladder-data-no-counts": CladderDataTask("cladder-data-no-counts", counts=False),
    "discovery-pairs": DiscoveryPairsTask(),
    "discovery-graph": DiscoveryGraphTask(),
}


def task_named(name: str) -> Task:
    try:
        return TASKS[name]
    except KeyError:
        raise ConfigError(f"task: no task {name!r}; the tasks are {', '.join(TASKS)}") from None


__all__ = ["TASKS", "Task", "task_named"]
