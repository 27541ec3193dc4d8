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
from typing import Any

from pydantic import BaseModel, ConfigDict

from crawdad.config import SelectionConfig
from crawdad.errors import DataError
from crawdad.records import Alignment, Answer, DatasetInfo

RUNG_NAMES = {1: "association", 2: "intervention", 3: "counterfactual"}
QUESTION_FIELDS = ("question_id", "given_info", "question", "answer", "meta")
META_FIELDS = ("rung", "query_type", "model_id")


class Question(BaseModel):
    model_config = ConfigDict(frozen=True)

    question_id: int | str
    desc_id: str | None
    background: str
    given_info: str
    question: str
    answer: Answer
    rung: int
    query_type: str
    alignment: Alignment
    story_id: str | None
    graph_id: str | None
    model_id: int | str

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


def _read_sources(path: Path, wanted: str | None) -> tuple[str, bytes, str, bytes]:
    """(questions name, bytes, models name, bytes) from a file, a folder or a zip."""
    if not path.exists():
        raise DataError(
            f"dataset not found: {path}. Download CLadder with `crawdad data fetch`, or pass the "
            "official cladder-v1.zip, its folder, or a questions JSON file"
        )
    if path.is_file() and zipfile.is_zipfile(path):
        try:
            with zipfile.ZipFile(path) as zf:
                names = [n for n in zf.namelist() if not n.endswith("/") and "__MACOSX" not in n]
                q, m = _pick_questions(names, wanted, str(path)), _pick_models(names, str(path))
                return f"{path}!{q}", zf.read(q), f"{path}!{m}", zf.read(m)
        except zipfile.BadZipFile as e:
            raise DataError(f"{path} is a damaged zip file ({e}); download it again") from None
    if path.is_dir():
        names = [str(p.relative_to(path)) for p in path.rglob("*.json")]
        q, m = _pick_questions(names, wanted, str(path)), _pick_models(names, str(path))
        return str(path / q), (path / q).read_bytes(), str(path / m), (path / m).read_bytes()
    if path.suffix == ".zip":
        raise DataError(f"{path} is not a valid zip file (cut short?); download it again")
    siblings = [p.name for p in path.parent.glob("*.json")]
    m = _pick_models(siblings, f"the folder of {path}")
    return str(path), path.read_bytes(), str(path.parent / m), (path.parent / m).read_bytes()


# --- validating and joining --------------------------------------------------------------------


def alignment_of(model: dict[str, Any]) -> Alignment:
    if "anticommonsense" in model:
        return "anticommonsense"
    if str(model.get("story_id", "")).startswith("nonsense"):
        return "nonsense"
    return "commonsense"


def _check_list(data: Any, name: str) -> list[dict[str, Any]]:
    if not isinstance(data, list) or not all(isinstance(x, dict) for x in data):
        raise DataError(f"{name}: expected a JSON list of objects, got {type(data).__name__}")
    return data


def _missing(item: dict[str, Any]) -> list[str]:
    missing = [f for f in QUESTION_FIELDS if f not in item]
    meta = item.get("meta")
    if isinstance(meta, dict):
        missing += [f"meta.{f}" for f in META_FIELDS if f not in meta]
    return missing


def _validate(items: list[dict[str, Any]], models: dict[Any, dict[str, Any]], name: str) -> None:
    problems: list[str] = []
    seen: set[Any] = set()
    for i, item in enumerate(items):
        qid = item.get("question_id", f"#{i}")
        if missing := _missing(item):
            problems.append(f"question {qid} (entry {i}): missing {', '.join(missing)}")
            continue
        if qid in seen:
            problems.append(f"question {qid}: duplicate question_id")
        seen.add(qid)
        if item["answer"] not in ("yes", "no"):
            problems.append(f"question {qid}: answer must be 'yes' or 'no', got {item['answer']!r}")
        if item["meta"]["model_id"] not in models:
            problems.append(f"question {qid}: unknown meta.model_id {item['meta']['model_id']!r}")
        if len(problems) >= 20:
            break
    if problems:
        more = " (showing the first 20)" if len(problems) >= 20 else ""
        raise DataError(f"{name} has problems{more}:\n  - " + "\n  - ".join(problems))


def _question(item: dict[str, Any], model: dict[str, Any]) -> Question:
    meta = item["meta"]
    return Question(
        question_id=item["question_id"],
        desc_id=item.get("desc_id"),
        background=str(model.get("background", "")),
        given_info=str(item["given_info"]),
        question=str(item["question"]),
        answer=item["answer"],
        rung=int(meta["rung"]),
        query_type=str(meta["query_type"]),
        alignment=alignment_of(model),
        story_id=meta.get("story_id", model.get("story_id")),
        graph_id=meta.get("graph_id", model.get("graph_id")),
        model_id=meta["model_id"],
    )


def load_cladder(path: Path, questions_file: str | None = None) -> Dataset:
    """Load and validate CLadder questions joined with their causal models."""
    q_name, q_raw, m_name, m_raw = _read_sources(Path(path), questions_file)
    items = _check_list(_parse_json(q_raw, q_name), q_name)
    model_list = _check_list(_parse_json(m_raw, m_name), m_name)
    models: dict[Any, dict[str, Any]] = {}
    for i, m in enumerate(model_list):
        if "model_id" not in m or "background" not in m:
            raise DataError(f"{m_name}: causal model entry {i} lacks 'model_id' or 'background'")
        models[m["model_id"]] = m
    _validate(items, models, q_name)
    if not items:
        raise DataError(f"{q_name} holds no questions")
    questions = [_question(item, models[item["meta"]["model_id"]]) for item in items]
    info = DatasetInfo(
        source=str(path),
        questions_file=q_name,
        models_file=m_name,
        sha256=hashlib.sha256(q_raw + b"\0" + m_raw).hexdigest(),
        n_total=len(questions),
        n_selected=len(questions),
    )
    return Dataset(questions=questions, info=info)


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
        strata[(q.rung, q.alignment)].append(q)
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


def select(dataset: Dataset, sel: SelectionConfig, seed: int) -> Dataset:
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
    if sel.limit:
        qs = qs[: sel.limit]
    if not qs:
        raise DataError(
            f"the selection {sel.model_dump(exclude_defaults=True)} leaves no questions out of "
            f"{len(dataset.questions)}; loosen the filters"
        )
    info = dataset.info.model_copy(
        update={"n_selected": len(qs), "selection": sel.model_dump(exclude_defaults=True)}
    )
    return Dataset(questions=qs, info=info)


def summary(questions: Sequence[Question]) -> dict[str, dict[str, int]]:
    """Counts per rung, alignment, query type and gold answer."""
    out: dict[str, dict[str, int]] = {"rung": {}, "alignment": {}, "query_type": {}, "answer": {}}
    for q in questions:
        for key, value in (
            ("rung", str(q.rung)),
            ("alignment", q.alignment),
            ("query_type", q.query_type),
            ("answer", q.answer),
        ):
            out[key][value] = out[key].get(value, 0) + 1
    return out
