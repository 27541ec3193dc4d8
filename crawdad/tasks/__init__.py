"""Tasks: what an item is, how it is shown, what an answer is and how it is scored
(`base.Task`). A new kind is a module or package here and one line in TASKS."""

from __future__ import annotations

import inspect
from collections.abc import Iterator, MutableMapping
from importlib import import_module
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crawdad.errors import ConfigError
from crawdad.tasks.base import Task

if TYPE_CHECKING:
    from crawdad.config import TableLimits
    from crawdad.data.questions import Dataset
    from crawdad.tasks.cladder import CladderTask
    from crawdad.tasks.cladder_data import CladderDataTask
    from crawdad.tasks.discovery.pairs import DiscoveryPairsTask, PairDataset
    from crawdad.tasks.discovery.whole_graph import DiscoveryGraphTask, GraphDataset

    def _conforms() -> None:
        """For mypy alone: each task in _WHERE is a Task of its dataset type (the registry
        imports them by name, so nothing else checks them against the protocol)."""
        cladder: Task[Dataset] = CladderTask()
        data: Task[Dataset] = CladderDataTask()
        pairs: Task[PairDataset] = DiscoveryPairsTask()
        graph: Task[GraphDataset] = DiscoveryGraphTask()
        del cladder, data, pairs, graph


# name -> (module, class, arguments). A task's module is imported when a run uses it: the
# discovery tasks read data with pandas, the data tasks estimate with numpy, and a CLadder run
# needs neither.
_WHERE: dict[str, tuple[str, str, tuple[Any, ...], dict[str, Any]]] = {
    "cladder": ("crawdad.tasks.cladder", "CladderTask", (), {}),
    "cladder-data": ("crawdad.tasks.cladder_data", "CladderDataTask", (), {}),
    "cladder-data-no-counts": (
        "crawdad.tasks.cladder_data",
        "CladderDataTask",
        ("cladder-data-no-counts",),
        {"counts": False},
    ),
    "discovery-pairs": ("crawdad.tasks.discovery", "DiscoveryPairsTask", (), {}),
    "discovery-graph": ("crawdad.tasks.discovery", "DiscoveryGraphTask", (), {}),
}


class _Tasks(MutableMapping[str, Task]):
    """The tasks by name, each made on first use. A task of one's own is registered by
    assignment: `TASKS["colours"] = ColourTask()`."""

    def __init__(self) -> None:
        self._made: dict[str, Task] = {}

    def __getitem__(self, name: str) -> Task:
        if name not in self._made:
            module, cls, args, kwargs = _WHERE[name]
            self._made[name] = getattr(import_module(module), cls)(*args, **kwargs)
        return self._made[name]

    def __setitem__(self, name: str, task: Task) -> None:
        self._made[name] = task

    def __delitem__(self, name: str) -> None:
        if name not in self._made and name not in _WHERE:
            raise KeyError(name)
        self._made.pop(name, None)
        _WHERE.pop(name, None)

    def _names(self) -> list[str]:
        return [*_WHERE, *(n for n in self._made if n not in _WHERE)]

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __len__(self) -> int:
        return len(self._names())


TASKS: MutableMapping[str, Task] = _Tasks()


def task_named(name: str) -> Task:
    try:
        return TASKS[name]
    except KeyError:
        raise ConfigError(f"task: no task {name!r}; the tasks are {', '.join(TASKS)}") from None


def load_items(
    task: Task, path: Path, questions_file: str | None, limits: TableLimits | None = None
) -> Any:
    """`task.load`, given the table limits where it takes them (a task of one's own written
    before they existed takes no `limits` and is called as it was)."""
    if "limits" in inspect.signature(task.load).parameters:
        return task.load(path, questions_file, limits=limits)
    return task.load(path, questions_file)


__all__ = ["TASKS", "Task", "load_items", "task_named"]
