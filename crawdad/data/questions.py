"""CLadder files -> Question objects: load, validate, join, select.

Accepts a questions file (its meta-models file beside it), a folder holding both, or the official
zip (members found by name, wherever they sit). The question block shown to the models is the
causal model's `background`, the question's `given_info`, then the `question`.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import zipfile
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    StrictStr,
    StringConstraints,
    ValidationError,
)

from crawdad.config import SelectionConfig
from crawdad.errors import DataError
from crawdad.records import Alignment, Answer, DatasetInfo
from crawdad.resources import examples
from crawdad.safe_files import check_input, input_limit, read_input

RUNG_NAMES = {1: "association", 2: "intervention", 3: "counterfactual"}


class CausalSource:
    """What the causal engine needs of a question (step scoring): its raw `meta`, and the
    structure, tables and variable names of its model (one dict shared by that model's
    questions). Compared by content; hashed by identity (the dicts are not hashable)."""

    __slots__ = ("meta", "model")

    def __init__(self, meta: dict[str, Any], model: dict[str, Any]) -> None:
        self.meta, self.model = meta, model

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CausalSource) and (self.meta, self.model) == (
            other.meta,
            other.model,
        )

    def __hash__(self) -> int:
        return id(self)


ENGINE_KEYS = ("model_id", "structure", "params", "variable_mapping")


class Question(BaseModel):
    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    question_id: int | str
    desc_id: str | None
    background: str
    given_info: str
    question: str
    answer: Answer | None  # None: no exact answer (a data question over a table of one's own)
    rung: int
    query_type: str
    alignment: Alignment | None  # None: a model that states none (a table of one's own)
    story_id: str | None
    graph_id: str | None
    model_id: int | str
    causal: CausalSource | None = Field(default=None, exclude=True, repr=False)

    @property
    def block(self) -> str:
        """The question as the models see it (the prompts' $question)."""
        parts = [
            self.background.strip(),
            self.given_info.strip(),
            f"Question: {self.question.strip()}",
        ]
        return "\n\n".join(p for p in parts if p)


@dataclass(frozen=True)
class Dataset:
    questions: list[Question]
    info: DatasetInfo
    # Every question id of the file a selection was taken from; None: `questions` is all of it.
    universe: frozenset[str] | None = None

    @property
    def known_ids(self) -> frozenset[str]:
        """The ids of every question of the dataset, selected or not."""
        if self.universe is not None:
            return self.universe
        return frozenset(str(q.question_id) for q in self.questions)


# --- finding the files -------------------------------------------------------------------------


def _is_models_name(name: str) -> bool:
    return "meta-models" in name or "meta_models" in name


def _is_questions_name(name: str) -> bool:
    return name.endswith(".json") and not _is_models_name(name) and not name.startswith(".")


def _pick_questions(names: Sequence[str], wanted: str | None, where: str) -> str:
    candidates = sorted(n for n in names if _is_questions_name(Path(n).name))
    if wanted:
        hits = [n for n in candidates if Path(n).name == wanted or wanted in Path(n).name]
        if len(hits) != 1:
            raise DataError(
                f"{where}: questions file {wanted!r} "
                f"{'is ambiguous' if hits else 'not found'}; choose one of: "
                + ", ".join(Path(n).name for n in candidates)
            )
        return hits[0]
    if not candidates:
        raise DataError(f"{where}: no questions file (*.json) found")
    if len(candidates) == 1:
        return candidates[0]
    balanced = [n for n in candidates if "balanced" in Path(n).name and "rand" not in Path(n).name]
    if balanced:
        return balanced[0]
    raise DataError(
        f"{where} holds several questions files and none is the balanced one; pick one with "
        "--questions-file NAME: " + ", ".join(Path(n).name for n in candidates)
    )


def _pick_models(names: Sequence[str], where: str) -> str:
    hits = sorted(n for n in names if _is_models_name(Path(n).name) and n.endswith(".json"))
    if not hits:
        raise DataError(
            f"{where}: no meta-models file (*meta-models*.json) found; CLadder questions need it "
            "for their background text"
        )
    return hits[0]


def _parse_json(raw: bytes, name: str) -> Any:
    try:
        return json.loads(raw)
    except json.JSONDecodeError as e:
        hint = " (the file looks cut short: download it again)" if e.pos >= len(raw) - 2 else ""
        raise DataError(
            f"{name} is not valid JSON: {e.msg} at line {e.lineno}, column {e.colno}{hint}"
        ) from None
    except UnicodeDecodeError:
        raise DataError(f"{name} is not a UTF-8 JSON file") from None


EXAMPLES_NAME = "examples"


def data_path(path: Path) -> Path:
    """`--data` as given: a path, or `examples` for crawdad's own example questions (shipped in
    the package). A run folder is refused by name: it holds answers, not questions."""
    if not path.exists() and path.as_posix() == EXAMPLES_NAME:
        return examples()
    marks = {"manifest.json": "a run folder", "experiment.json": "an experiment folder"}
    kind = next((k for f, k in marks.items() if (path / f).is_file()), None)
    if path.is_dir() and kind:
        raise DataError(
            f"{path} is {kind} (crawdad's answers), not a dataset: pass the questions it was"
            " made from (its manifest names them under `dataset.source`), a CLadder folder, zip"
            " or questions file, or `examples` for crawdad's example questions; to read a run's"
            " results use `crawdad analyze` or `crawdad show`"
        )
    return path


def _read_sources(path: Path, wanted: str | None) -> tuple[str, bytes, str, bytes]:
    """(questions name, bytes, models name, bytes) from a file, a folder or a zip."""
    path = data_path(path)
    if not path.exists():
        raise DataError(
            f"dataset not found: {path}. Download CLadder with `crawdad data fetch`, or pass the "
            "official cladder-v1.zip, its folder, or a questions JSON file"
        )
    if not path.is_dir():  # a FIFO or a device is refused before it is opened
        check_input(path, None, "dataset file")
    if path.is_file() and zipfile.is_zipfile(path):
        try:
            with zipfile.ZipFile(path) as zf:
                names = [n for n in zf.namelist() if not n.endswith("/") and "__MACOSX" not in n]
                q, m = _pick_questions(names, wanted, str(path)), _pick_models(names, str(path))
                for member in (q, m):  # a member is never unpacked past the input limit
                    if zf.getinfo(member).file_size > input_limit():
                        check_input(path, 0, f"{member} of the zip")
                return f"{path}!{q}", zf.read(q), f"{path}!{m}", zf.read(m)
        except zipfile.BadZipFile as e:
            raise DataError(f"{path} is a damaged zip file ({e}); download it again") from None
    if path.is_dir():
        names = [str(p.relative_to(path)) for p in path.rglob("*.json")]
        q, m = _pick_questions(names, wanted, str(path)), _pick_models(names, str(path))
        return str(path / q), read_input(path / q), str(path / m), read_input(path / m)
    if path.suffix == ".zip":
        raise DataError(f"{path} is not a valid zip file (cut short?); download it again")
    siblings = [p.name for p in path.parent.glob("*.json")]
    m = _pick_models(siblings, f"the folder of {path}")
    return str(path), read_input(path), str(path.parent / m), read_input(path.parent / m)


# --- validating and joining --------------------------------------------------------------------


def alignment_of(model: dict[str, Any]) -> Alignment | None:
    """CLadder's story alignment; a model may state it, or state none (`"alignment": null`, as
    `crawdad data own` writes for a real table, which has no story alignment)."""
    if "alignment" in model:
        stated = model["alignment"]
        return stated if stated in ("commonsense", "anticommonsense", "nonsense") else None
    if model.get("anticommonsense") is not None:
        return "anticommonsense"
    if str(model.get("story_id") or "").startswith("nonsense"):
        return "nonsense"
    return "commonsense"


# The raw rows, as far as crawdad reads them. Strict: a number is not a string, true is not 1.
Text = Annotated[StrictStr, StringConstraints(pattern=r"\S")]  # not empty, not only spaces
Id = StrictInt | Text


class RawMeta(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow")

    rung: Annotated[StrictInt, Field(ge=1, le=3)]
    query_type: Text
    model_id: Id
    story_id: StrictStr | None = None
    graph_id: StrictStr | None = None


class RawQuestion(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow")

    question_id: Id
    desc_id: StrictStr | None = None
    given_info: StrictStr
    question: Text
    # None (or absent): no exact answer, which only a data question may lack (a table of the
    # user's own); `load_cladder(require_answers=True)` refuses it for CLadder's own questions.
    answer: Literal["yes", "no"] | None = None
    meta: RawMeta


class RawModel(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow")

    model_id: Id
    background: Text
    story_id: StrictStr | None = None
    graph_id: StrictStr | None = None
    # Its presence marks an anti-commonsense model; null is refused (ambiguous), not guessed.
    anticommonsense: dict[str, Any] = Field(default=None)  # type: ignore[arg-type]


# What each field must be, in the words of the messages.
RULES = {
    "question_id": "a whole number or a non-empty string",
    "desc_id": "a string or null",
    "given_info": "a string",
    "question": "a non-empty string",
    "answer": '"yes" or "no"',
    "meta": "an object",
    "meta.rung": "1, 2 or 3",
    "meta.query_type": "a non-empty string",
    "meta.model_id": "a whole number or a non-empty string",
    "meta.story_id": "a string or null",
    "meta.graph_id": "a string or null",
    "model_id": "a whole number or a non-empty string",
    "background": "a non-empty string",
    "story_id": "a string or null",
    "graph_id": "a string or null",
    "anticommonsense": "an object (the model is anti-commonsense), or absent",
}
MAX_SHOWN = 20  # problems listed in one error; the rest are counted


def _show(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def _field_problems(item: dict[str, Any], error: ValidationError) -> list[str]:
    """One "field is X; it must be Y" per field (a union reports each of its branches)."""
    out: dict[str, str] = {}
    for e in error.errors():
        parts = [str(p) for p in e["loc"]]
        while parts and ".".join(parts) not in RULES:  # drop union branch tags like "int"
            parts.pop()
        name = ".".join(parts) or str(e["loc"][0])
        if name in out:
            continue
        if e["type"] == "missing":
            out[name] = f"{name} is missing"
        else:
            value: Any = item
            for p in parts:
                value = value.get(p) if isinstance(value, dict) else None
            out[name] = f"{name} is {_show(value)}; it must be {RULES.get(name, 'valid')}"
    return list(out.values())


def _validate_rows(
    rows: list[Any], model: type[BaseModel], file: str, what: str, id_field: str
) -> tuple[dict[int, Any], list[str]]:
    """(valid rows by position, problems). Ids must be unique as text: 12 and "12" collide."""
    valid: dict[int, Any] = {}
    problems: list[str] = []
    seen: dict[str, tuple[int, Any]] = {}
    for i, item in enumerate(rows):
        if not isinstance(item, dict):
            problems.append(f"{file}, entry {i}: is {_show(item)}; it must be an object")
            continue
        raw_id = item.get(id_field)
        ok_id = isinstance(raw_id, int | str) and not isinstance(raw_id, bool) and str(raw_id)
        where = f"{file}, {what} {raw_id}" if ok_id else f"{file}, entry {i}"
        try:
            valid[i] = model.model_validate(item)
        except ValidationError as e:
            problems += [f"{where}: {p}" for p in _field_problems(item, e)]
        if ok_id:
            key = str(raw_id)
            if key in seen:
                j, other = seen[key]
                same = "is given twice" if other == raw_id else "collide as text"
                problems.append(
                    f"{file}: {what} ids {_show(other)} (entry {j}) and {_show(raw_id)} "
                    f"(entry {i}) {same}; each {what} needs its own {id_field}"
                )
                valid.pop(i, None)
            else:
                seen[key] = (i, raw_id)
    return valid, problems


def _join_problems(q: RawQuestion, model: RawModel | None, q_file: str, m_file: str) -> list[str]:
    where = f"{q_file}, question {q.question_id}"
    if model is None:
        return [
            f"{where}: meta.model_id is {_show(q.meta.model_id)}; {m_file} has no causal model "
            "with that model_id"
        ]
    out = []
    for name in ("story_id", "graph_id"):
        mine, theirs = getattr(q.meta, name), getattr(model, name)
        if mine is not None and theirs is not None and mine != theirs:
            out.append(
                f"{where}: meta.{name} is {_show(mine)} but its causal model "
                f"{_show(model.model_id)} has {name} {_show(theirs)}; the files do not belong "
                "together"
            )
    return out


def _raise_problems(problems: list[str]) -> None:
    shown = problems[:MAX_SHOWN]
    more = f"\n  - and {len(problems) - MAX_SHOWN} more" if len(problems) > MAX_SHOWN else ""
    raise DataError(
        f"the dataset has {len(problems)} problem(s):\n  - "
        + "\n  - ".join(shown)
        + more
        + "\nFix the files, or download CLadder again with `crawdad data fetch`."
    )


def _question(
    q: RawQuestion, model: RawModel, raw_model: dict[str, Any], causal: CausalSource | None
) -> Question:
    meta = q.meta
    return Question(
        causal=causal,
        question_id=q.question_id,
        desc_id=q.desc_id,
        background=model.background,
        given_info=q.given_info,
        question=q.question,
        answer=q.answer,
        rung=meta.rung,
        query_type=meta.query_type,
        alignment=alignment_of(raw_model),
        story_id=meta.story_id if meta.story_id is not None else model.story_id,
        graph_id=meta.graph_id if meta.graph_id is not None else model.graph_id,
        model_id=meta.model_id,
    )


def load_cladder(
    path: Path, questions_file: str | None = None, *, require_answers: bool = True
) -> Dataset:
    """Load and validate CLadder questions joined with their causal models. Every question
    needs its answer unless `require_answers` is False (data questions over a table of one's
    own may have none)."""
    q_name, q_raw, m_name, m_raw = _read_sources(Path(path), questions_file)
    items = _check_list(_parse_json(q_raw, q_name), q_name)
    model_list = _check_list(_parse_json(m_raw, m_name), m_name)
    q_file, m_file = _short(q_name), _short(m_name)
    models, problems = _validate_rows(model_list, RawModel, m_file, "causal model", "model_id")
    by_id = {str(m.model_id): (m, model_list[i]) for i, m in models.items()}
    rows, q_problems = _validate_rows(items, RawQuestion, q_file, "question", "question_id")
    problems += q_problems
    invalid_models = {
        str(m.get("model_id"))
        for i, m in enumerate(model_list)
        if isinstance(m, dict) and i not in models
    }  # reported already: their questions are not reported again
    for q in rows.values():
        key = str(q.meta.model_id)
        if key not in invalid_models:
            model = by_id[key][0] if key in by_id else None
            problems += _join_problems(q, model, q_file, m_file)
    if require_answers:
        problems += [
            f"{q_file}, question {q.question_id}: answer is "
            f'{"null" if "answer" in items[i] else "missing"}; it must be "yes" or "no" (a '
            "question without an exact answer is a data question: write it with `crawdad data "
            'own` and run it with task = "cladder-data")'
            for i, q in rows.items()
            if q.answer is None
        ]
    if problems:
        _raise_problems(problems)
    if not items:
        raise DataError(f"{q_name} holds no questions")
    engine = {k: {f: m[f] for f in ENGINE_KEYS if f in m} for k, (_, m) in by_id.items()}
    questions = []
    for i, q in rows.items():
        key = str(q.meta.model_id)
        causal = CausalSource(items[i]["meta"], engine[key]) if "params" in engine[key] else None
        questions.append(_question(q, *by_id[key], causal))
    info = DatasetInfo(
        source=str(path),
        questions_file=q_name,
        models_file=m_name,
        sha256=hashlib.sha256(q_raw + b"\0" + m_raw).hexdigest(),
        n_total=len(questions),
        n_selected=len(questions),
        selected_ids=[str(q.question_id) for q in questions],
    )
    return Dataset(questions=questions, info=info)


def read_raw(path: Path, questions_file: str | None = None) -> tuple[list[Any], list[Any], str]:
    """The questions and causal models as parsed JSON, every field kept (for the causal audit),
    with the questions file's name. Call `load_cladder` first to validate them."""
    q_name, q_raw, m_name, m_raw = _read_sources(Path(path), questions_file)
    questions = _check_list(_parse_json(q_raw, q_name), q_name)
    return questions, _check_list(_parse_json(m_raw, m_name), m_name), q_name


def _check_list(data: Any, name: str) -> list[Any]:
    if not isinstance(data, list):
        raise DataError(f"{name}: expected a JSON list of objects, got {type(data).__name__}")
    return data


def _short(name: str) -> str:
    """The file name a message shows: "cladder-v1-q-balanced.json", not the whole path."""
    return Path(name.split("!")[-1]).name


# --- selecting ---------------------------------------------------------------------------------


def parse_ranges(specs: Iterable[str], n: int) -> list[int]:
    """Index ranges like "0-99", "500-", "7" (inclusive; positions in the file) -> sorted indices."""
    keep: set[int] = set()
    for spec in specs:
        for part in str(spec).split(","):
            m = re.fullmatch(r"\s*(\d*)\s*(-?)\s*(\d*)\s*", part)
            if not m or not (m.group(1) or m.group(3)):
                raise DataError(f"bad index range {part!r}: use forms like 0-99, 500-, -20 or 7")
            lo = int(m.group(1)) if m.group(1) else 0
            hi = (int(m.group(3)) if m.group(3) else n - 1) if m.group(2) else lo
            keep.update(range(lo, min(hi, n - 1) + 1))
    return sorted(keep)


def stratified_sample(questions: list[Question], k: int, seed: int) -> list[Question]:
    """A seeded sample of k questions, proportional across (rung, alignment) strata."""
    if k >= len(questions):
        return list(questions)
    strata: dict[tuple[int, str], list[Question]] = defaultdict(list)
    for q in questions:
        strata[(q.rung, q.alignment or "")].append(q)
    rng = random.Random(f"sample:{seed}")
    quotas = {key: k * len(v) / len(questions) for key, v in strata.items()}
    counts = {key: int(q) for key, q in quotas.items()}
    # Largest remainders get the seats left over by rounding down.
    for key in sorted(quotas, key=lambda s: quotas[s] - counts[s], reverse=True)[
        : k - sum(counts.values())
    ]:
        counts[key] += 1
    chosen = {
        id(q) for key, group in sorted(strata.items()) for q in rng.sample(group, counts[key])
    }
    return [q for q in questions if id(q) in chosen]


def order_key(seed: int, item_id: object) -> bytes:
    """An item's place in the run's order: a hash of (seed, id). Sorting by it draws a random
    order from the seed in which every subset keeps its members' relative order, so that the
    first N of a filtered selection are a random sample of it and `--limit 100` extends
    `--limit 50`."""
    return hashlib.sha256(f"order:{seed}:{item_id}".encode()).digest()


def run_order(questions: Sequence[Question], seed: int) -> list[Question]:
    """The questions in the run's seeded order (the same for every variant of an experiment,
    and on resume)."""
    return sorted(questions, key=lambda q: order_key(seed, q.question_id))


def select(dataset: Dataset, sel: SelectionConfig, seed: int) -> Dataset:
    """The selected questions, in the run's order: `ranges` name positions in the file (a
    cluster's shards), the filters and `sample` narrow them, the seeded order (or the file's,
    `order = "file"`) sorts them, and `limit` takes the first N of that order."""
    qs = dataset.questions
    if sel.ranges:
        qs = [qs[i] for i in parse_ranges(sel.ranges, len(qs))]
    if sel.rungs:
        qs = [q for q in qs if q.rung in sel.rungs]
    if sel.query_types:
        known = {q.query_type for q in dataset.questions}
        if unknown := set(sel.query_types) - known:
            raise DataError(
                f"unknown query type(s) {sorted(unknown)}; the dataset has {sorted(known)}"
            )
        qs = [q for q in qs if q.query_type in sel.query_types]
    if sel.alignments:
        qs = [q for q in qs if q.alignment in sel.alignments]
    if sel.sample:
        qs = stratified_sample(qs, sel.sample, seed)
    if sel.order == "seeded":
        qs = run_order(qs, seed)
    if sel.limit:
        qs = qs[: sel.limit]
    if not qs:
        raise DataError(
            f"the selection {sel.model_dump(exclude_defaults=True)} leaves no questions out of "
            f"{len(dataset.questions)}; loosen the filters"
        )
    info = dataset.info.model_copy(
        update={
            "n_selected": len(qs),
            "selection": sel.model_dump(exclude_defaults=True),
            "selected_ids": [str(q.question_id) for q in qs],
        }
    )
    return Dataset(questions=qs, info=info, universe=dataset.known_ids)


def summary(questions: Sequence[Question]) -> dict[str, dict[str, int]]:
    """Counts per rung, alignment, query type and gold answer."""
    out: dict[str, dict[str, int]] = {"rung": {}, "alignment": {}, "query_type": {}, "answer": {}}
    for q in questions:
        for key, value in (
            ("rung", str(q.rung)),
            ("alignment", q.alignment or "none stated"),
            ("query_type", q.query_type),
            ("answer", q.answer or "no exact answer"),
        ):
            out[key][value] = out[key].get(value, 0) + 1
    return out
