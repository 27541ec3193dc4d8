"""CLadder questions answered from data (`crawdad data tables`): the question's story and wording,
a table of observations sampled from its causal model in place of the numbers it stated.

An item is a `DataQuestion`: a CLadder `Question` (so everything that reads questions reads it)
with its `meta.data` (the exact answer, which is the label, and the perfect estimator's) and its
table, read from the CSV file `meta.data.table` names and checked (`crawdad.data.table_files`):
the file is the truth, and counts stored in `meta.data.counts` must agree with it. The data tools of a debate
(`tools = ["data"]`) compute over this table: the task hands it to the tool loop through
`tool_context`. A record keeps the perfect estimator's answer beside the label (`item`), so the
analysis can score an answer against both: a reasoning error against sampling noise.

Two ways of showing an item: `cladder-data` shows the question as the folder wrote it (with the
counts per combination unless the folder was written with `--no-counts-in-text`);
`cladder-data-no-counts` leaves the counts out, so that only the tools can see the data.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from crawdad.backends.base import ChatResult
from crawdad.causal.estimate import Counts
from crawdad.config import TableLimits
from crawdad.data.questions import Dataset, Question, load_cladder, read_raw
from crawdad.data.table_files import TableFile, counts_over, first_difference, read_tables
from crawdad.errors import DataError
from crawdad.records import Turn
from crawdad.scoring.step_reading import extract_steps, score_call
from crawdad.tasks.base import Ask
from crawdad.tasks.cladder import CladderTask
from crawdad.tools.causal import TOOL_NAME
from crawdad.tools.data_tools import Table

COUNTS_MARK = " The number of observations of each combination:"


class DataFacts(BaseModel):
    """What a data-backed question's record keeps of its `meta.data`."""

    model_config = ConfigDict(frozen=True)

    table: str  # the CSV, relative to the dataset folder
    rows: int
    columns: list[str]
    hidden: list[str] = Field(default_factory=list)  # drawn, not written (the story hides them)
    exact_value: float | None = None
    exact_answer: str | None = None  # the label
    perfect_value: float | None = None  # the perfect estimator (plug-in model of the sample)
    perfect_answer: str | None = None
    perfect_agrees: bool = True  # the sample points the same way as the exact model


class DataQuestion(Question):
    """A CLadder question over a table: the question, its data facts, and its counts."""

    data: DataFacts
    # The question's own meta (treatment, outcome, mediators, ...; its model's `structure`, and
    # `names`: column -> its name in the story): the pipeline protocol scores against it.
    meta: dict[str, Any] = Field(default_factory=dict, exclude=True, repr=False)
    table: Table = Field(exclude=True, repr=False)

    @property
    def has_counts(self) -> bool:
        return COUNTS_MARK in self.given_info


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def data_question(
    question: Question,
    meta: Mapping[str, Any],
    tables: dict[str, Table],
    files: Mapping[str, TableFile],
    model: Mapping[str, Any] | None = None,
) -> DataQuestion:
    """The question with its meta.data; DataError when it has none or it does not hold."""
    data = meta.get("data")
    where = f"question {question.question_id}"
    if not isinstance(data, dict):
        raise DataError(
            f"{where} has no `meta.data` (no table of observations): the cladder-data task takes "
            "the folders `crawdad data tables DATA --out DIR` writes; for CLadder's own questions "
            'use task = "cladder"'
        )
    try:
        columns = [str(c) for c in data["columns"]]
        key = f"{data['table']}:{','.join(columns)}"
        if key not in tables:
            file = files[str(data["table"])].counts
            assert file is not None  # load_data_questions refused the folder otherwise
            counts = counts_over(file, columns)
            if data.get("counts") is not None:
                stated = Counts.from_cells(columns, [int(c) for c in data["counts"]])
                if differs := first_difference(counts, stated):
                    raise DataError(
                        f"{where}: {data['table']} does not match the counts in its "
                        f"`meta.data` ({differs}); the file is what the tools read: write the "
                        "folder again with `crawdad data tables`, or delete `counts` from the "
                        "questions' `meta.data`"
                    )
            tables[key] = Table(counts, name=str(data["table"]))
        exact, perfect = data.get("exact") or {}, data.get("perfect") or {}
        facts = DataFacts(
            table=str(data["table"]),
            rows=int(data.get("rows", tables[key].counts.n)),
            columns=columns,
            hidden=[str(h) for h in data.get("hidden") or []],
            exact_value=_number(exact.get("value")),
            exact_answer=exact.get("answer"),
            perfect_value=_number(perfect.get("value")),
            perfect_answer=perfect.get("answer"),
            perfect_agrees=bool(perfect.get("agrees", True)),
        )
    except (KeyError, TypeError, ValueError) as e:
        raise DataError(
            f"{where}: its `meta.data` is not what `crawdad data tables` writes ({e}); write the "
            "folder again with `crawdad data tables`"
        ) from None
    fields = {k: getattr(question, k) for k in Question.model_fields}
    plain = {k: v for k, v in meta.items() if k != "data"}  # given_info: backadj's sets
    model = model or {}
    if "structure" not in plain and model.get("structure"):
        plain["structure"] = model["structure"]
    mapping = model.get("variable_mapping") or {}
    plain["names"] = {  # column -> its name in the story
        c: str(mapping[f"{c}name"]) for c in columns if isinstance(mapping.get(f"{c}name"), str)
    }
    return DataQuestion(**fields, data=facts, meta=plain, table=tables[key])


def load_data_questions(
    path: Path, questions_file: str | None = None, limits: TableLimits | None = None
) -> Dataset:
    """A `crawdad data tables` folder -> DataQuestions (one Table per table, shared by its
    questions); a DataError naming `crawdad data tables` for a folder without tables."""
    dataset = load_cladder(path, questions_file, require_answers=False)
    raw, raw_models, _ = read_raw(path, questions_file)
    models = {str(m.get("model_id")): m for m in raw_models if isinstance(m, dict)}
    metas = {str(q.get("question_id")): q.get("meta") or {} for q in raw if isinstance(q, dict)}
    tables: dict[str, Table] = {}
    bare = [
        q for q in dataset.questions if not isinstance(metas[str(q.question_id)].get("data"), dict)
    ]
    if bare:
        some = ", ".join(str(q.question_id) for q in bare[:5]) + (" ..." if len(bare) > 5 else "")
        raise DataError(
            f"{path}: {len(bare)} of {len(dataset.questions)} questions have no `meta.data` (no "
            f"table of observations; ids {some}): the cladder-data task takes the folders that "
            "`crawdad data tables DATA --out DIR` writes; for CLadder's own questions use "
            'task = "cladder"'
        )
    datas = [metas[str(q.question_id)]["data"] for q in dataset.questions]
    files = _checked_files(path, datas, limits)
    try:
        items = [
            data_question(q, metas[str(q.question_id)], tables, files, models.get(str(q.model_id)))
            for q in dataset.questions
        ]
    except DataError as e:
        raise DataError(f"{path}: {e}") from None
    return Dataset(questions=items, info=dataset.info, universe=dataset.universe)  # type: ignore[arg-type]


def _checked_files(
    folder: Path, datas: list[Any], limits: TableLimits | None = None
) -> dict[str, TableFile]:
    """Every table the questions name, read from its file and checked; one DataError listing
    every problem of every file (nothing runs on a folder that is not clean)."""
    wanted: dict[str, set[str]] = {}
    for data in datas:
        if isinstance(data, dict) and isinstance(data.get("table"), str):
            columns = data["columns"] if isinstance(data.get("columns"), list) else []
            wanted.setdefault(data["table"], set()).update(str(c) for c in columns)
    files = read_tables(folder, wanted, limits)
    bad = [f for f in files.values() if f.problems]
    if bad:
        lines = [f"  - {f.path}: {p}" for f in bad for p in f.problems]
        raise DataError(
            f"{folder}: {len(bad)} of {len(files)} tables cannot be used; fix them (or write the "
            "folder again with `crawdad data tables`) before anything runs:\n" + "\n".join(lines)
        )
    return files


class CladderDataTask(CladderTask):
    """CLadder's yes/no questions over a table; the tools of its debates see the table."""

    prompt_set = "data-context"
    # The prompt sets it takes: its own, and CLadder's (the question block is CLadder's).
    prompt_tasks = ("cladder-data", "cladder")
    report_sections = ("crawdad.analysis.tasks.cladder", "crawdad.analysis.tasks.cladder_data")

    def __init__(self, name: str = "cladder-data", counts: bool = True) -> None:
        self.name = name
        self.counts = counts  # False: the counts are left out of the question text

    def load(
        self, path: Path, questions_file: str | None = None, *, limits: TableLimits | None = None
    ) -> Dataset:
        return load_data_questions(path, questions_file, limits)

    def show(self, item: Question) -> str:
        if self.counts or COUNTS_MARK not in item.given_info:
            return item.block
        given = item.given_info.split(COUNTS_MARK, 1)[0]
        return item.model_copy(update={"given_info": given}).block

    def record_fields(self, item: Question) -> dict[str, Any]:
        fields = super().record_fields(item)
        if isinstance(item, DataQuestion):
            d = item.data
            fields["item"] = {
                "table": d.table,
                "rows": d.rows,
                "counts_in_text": self.counts and item.has_counts,
                "exact_value": d.exact_value,
                "perfect_value": d.perfect_value,
                "perfect_answer": d.perfect_answer,
                "perfect_agrees": d.perfect_agrees,
            }
        return fields

    def tool_context(self, item: Question) -> dict[str, Any]:
        """What the item's tools compute over (`crawdad.tools.registry.ToolContext`)."""
        return {"table": item.table} if isinstance(item, DataQuestion) else {}

    async def score_turn(
        self, ask: Ask, model: str, item: Question, turn: Turn, result: ChatResult
    ) -> None:
        turn.steps = await extract_steps(ask, model, item, result)
        if item.causal is not None:  # the calculator's calls only: the data tools take no numbers
            for call in turn.tool_calls:
                if call.arguments and call.name == TOOL_NAME:
                    call.scores = score_call(item.causal, call.arguments, call.result)
