"""The task seam: what an item is, how it is shown to a model, what an answer is and how it is
scored. A protocol (`crawdad.protocols`) says who speaks when and what each sees; it reaches the
item only through its task, so a new task touches no protocol and a new protocol no task.

A task kind is one module (or package) under `crawdad/tasks/` with a class that has the members
below, and one line in `crawdad.tasks.TASKS`. `crawdad/tasks/cladder.py` is the one to copy.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from crawdad.backends.base import ChatResult
from crawdad.records import ExtractionMethod

if TYPE_CHECKING:
    from crawdad.config import SelectionConfig, TableLimits
    from crawdad.records import DatasetInfo, Turn

# A model asked one structured question (the extractor): prompt and JSON schema in, reply out.
Ask = Callable[[str, dict[str, Any]], Awaitable[ChatResult]]


class Item(Protocol):
    """One thing a run answers: a CLadder question, a variable pair, a question over a table.
    Its id keys its record (the field keeps CLadder's name, `question_id`)."""

    @property
    def question_id(self) -> int | str: ...


class Items(Protocol):
    """A loaded, validated dataset of one task: its items and what the manifest records of it."""

    @property
    def questions(self) -> Sequence[Any]: ...

    @property
    def info(self) -> DatasetInfo: ...


# A task's own dataset type: what its `load` returns is what its `select` takes and gives back.
ItemsT = TypeVar("ItemsT", bound=Items)


@dataclass(frozen=True)
class Reading:
    """An answer read out of a response (by the extractor model and the task's parser): null with
    the reason when there is none, never guessed."""

    answer: str | None
    confidence: float | None
    method: ExtractionMethod
    reason: str | None = None


class Task(Protocol[ItemsT]):
    """What a protocol and the runner need of a task kind: `Task[D]`, whose items come in a
    `D` (an `Items`: CLadder's `Dataset`, say); a bare `Task` is a task of any dataset type.

    Three members are optional (read with getattr): `prompt_tasks`, the tasks whose prompt sets
    it takes (its own name alone by default); `tool_context(item)`, what the tools of the
    item's turns compute over (the keyword arguments of `crawdad.tools.registry.ToolContext`:
    a data-backed question's table), a task without it giving its items' tools nothing; and
    `report_sections`, the import paths of the modules with its report sections
    (`crawdad.analysis.tasks`), none by default: its runs get the yes/no sections alone."""

    name: str
    # The answers an agent may give, when they are a fixed set (a judge's verdict schema and the
    # stances of a judge debate need one); None when answers are open (a graph).
    answers: tuple[str, ...] | None
    # The prompt set written for it (`prompts/<set>/`, whose set.toml names this task).
    prompt_set: str

    def load(
        self, path: Path, questions_file: str | None = None, *, limits: TableLimits | None = None
    ) -> ItemsT:
        """A dataset file or folder -> validated items; a DataError naming what to fix.
        `limits`: the size bounds of the items' table files, for a task whose items have them."""
        ...

    def select(self, dataset: ItemsT, selection: SelectionConfig, seed: int) -> ItemsT:
        """The items a run's selection picks (ids, ranges, a seeded sample)."""
        ...

    def show(self, item: Any) -> str:
        """The item as every prompt shows it (the templates' `$question`)."""
        ...

    def record_fields(self, item: Any) -> dict[str, Any]:
        """What a debate record keeps of its item: the gold answer and the item's descriptors."""
        ...

    def extractor_schema(self, confidence: bool, uncertain: bool = False) -> dict[str, Any]:
        """The JSON schema the extractor answers in (`uncertain`: the prompt set allows the
        answer "uncertain", passed only when it does: a task may leave the argument out)."""
        ...

    def read(self, reply: str, confidence: bool, uncertain: bool = False) -> Reading:
        """The extractor's reply -> the answer (strictly, then tolerantly; null with a reason)."""
        ...

    def agree(self, answers: Sequence[str | None]) -> bool:
        """Whether these answers are the same answer (null answers never agree)."""
        ...

    async def score_turn(
        self, ask: Ask, model: str, item: Any, turn: Turn, result: ChatResult
    ) -> None:
        """Extra scoring of one debater turn when the run asks for it (`[scoring] steps`):
        fills the turn's task-specific fields; a task with none does nothing."""
        ...


def same_answer(answers: Sequence[str | None]) -> bool:
    """Every answer extracted and all equal: the agreement of tasks whose answers are labels."""
    return bool(answers) and None not in answers and len(set(answers)) == 1


def tool_context(task: Task, item: Any) -> dict[str, Any]:
    """What the item's tools compute over, when its task says (see `Task`)."""
    context = getattr(task, "tool_context", None)
    return dict(context(item)) if context is not None else {}
