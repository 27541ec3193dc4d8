"""`crawdad data tables`: CLadder questions answered from data. Each question keeps its story
and its wording, but instead of the probabilities it states it points to a table of
observations sampled from its own causal model.

- One table per causal model: `rows` draws by ancestral sampling (crawdad.causal.sample), seeded
  by (seed, model id, attempt), so a question's table does not depend on the selection. A
  variable the story calls unobserved ("Gender is unobserved.") is drawn but not written.
- The question's `given_info` becomes a pointer to the table, with a legend of its columns and,
  unless `counts_in_text` is off, the compact table: the rows per combination of the columns
  (binary columns: at most 2^k lines), enough for an agent without tools.
- Its label is the engine's exact answer (a question whose stored label the engine does not
  reproduce is left out). Beside it, `meta.data.perfect` is what an ideal estimator answers
  from this finite sample: the same query and answer rules over the plug-in model, every table
  replaced by the sample's conditional frequencies (crawdad.causal.estimate). An agent's answer
  can then be wrong because the sample misleads (perfect != label) or because its reasoning
  does (perfect == label).
- A sample where a needed conditional frequency has no rows is drawn again (up to
  MAX_ATTEMPTS); a query the observed columns cannot identify (the IV graph's ATE, the
  arrowhead's natural effects, its confounder hidden) is left out, with the reason counted.

The folder is CLadder-format (questions file, meta-models file) plus `tables/*.csv` and
TABLES.md: `crawdad data info` and `crawdad run --data` read it like any CLadder folder.
"""

from __future__ import annotations

import copy
import csv
import hashlib
import io
import json
import random
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crawdad.causal.answers import verdict
from crawdad.causal.estimate import Counts, EmptyCell, NotIdentified, observed_model
from crawdad.causal.model import BinaryModel
from crawdad.causal.queries import QUANTITY
from crawdad.causal.sample import sample_rows
from crawdad.config import SelectionConfig
from crawdad.data.questions import load_cladder, read_raw, select
from crawdad.errors import CrawdadError, DataError
from crawdad.safe_files import write_file

QUESTIONS_FILE = "cladder-tables-q.json"
MODELS_FILE = "cladder-tables-meta-models.json"
TABLES_DIR = "tables"
DEFAULT_ROWS = 1000
MAX_ATTEMPTS = 20  # samples drawn per model before its questions are left out
DATA_ONLY = ("backadj",)  # answered from the graph: the table does not change the answer


# --- what a model's table holds ------------------------------------------------------------------


def hidden_variables(raw: Mapping[str, Any]) -> set[str]:
    """The variables the story calls unobserved ("Gender is unobserved.")."""
    mapping = raw.get("variable_mapping") or {}
    background = str(raw.get("background") or "")
    out = set()
    for key, name in mapping.items():
        if not (key.endswith("name") and isinstance(name, str) and name.strip()):
            continue
        if re.search(rf"\b{re.escape(name.strip())} is unobserved\b", background, re.I):
            out.add(key[: -len("name")])
    return out


def legend(raw: Mapping[str, Any], columns: Sequence[str]) -> list[str]:
    """One line per column: its name in the story and what 1 and 0 mean."""
    mapping = raw.get("variable_mapping") or {}
    lines = []
    for c in columns:
        name, one, zero = (mapping.get(f"{c}{k}") for k in ("name", "1", "0"))
        if name and one and zero:
            lines.append(f"{c} = {name} (1: {one}; 0: {zero})")
        else:
            lines.append(c)
    return lines


def counts_text(counts: Counts) -> str:
    head = " ".join(counts.columns) + " count"
    return "\n".join([head, *(" ".join(map(str, row)) for row in counts.rows())])


def pointer_text(raw: Mapping[str, Any], counts: Counts, table: str, with_counts: bool) -> str:
    """The question's new `given_info`: where the data is, its columns, and the counts."""
    text = (
        f"Data: a table of {counts.n} observations is attached ({table}), one row per "
        "observation, with the columns " + "; ".join(legend(raw, counts.columns)) + "."
    )
    if with_counts:
        text += " The number of observations of each combination:\n" + counts_text(counts)
    return text


def _sample_seed(seed: int, model_id: Any, attempt: int) -> int:
    text = f"crawdad-tables:{seed}:{model_id}:{attempt}"
    return int.from_bytes(
        hashlib.sha256(text.encode()).digest()[:6], "big"
    )  # exact in JSON readers


# --- one model, one table --------------------------------------------------------------------------


@dataclass
class ModelTable:
    model_id: str
    columns: list[str]
    hidden: list[str]
    rows: dict[str, Any]  # column -> int8 array
    counts: Counts
    sample_seed: int
    attempt: int
    file: str


def draw_table(
    raw: Mapping[str, Any],
    model: BinaryModel,
    questions: Sequence[Mapping[str, Any]],
    seed: int,
    n_rows: int,
) -> ModelTable:
    """A sample of the model where every conditional frequency its questions need has rows;
    EmptyCell (naming the empty cell) after MAX_ATTEMPTS samples."""
    hidden = hidden_variables(raw)
    columns = [v for v in model.order if v not in hidden]
    mid = str(raw["model_id"])
    problem: EmptyCell | None = None
    for attempt in range(MAX_ATTEMPTS):
        sample_seed = _sample_seed(seed, mid, attempt)
        rows = sample_rows(model, n_rows, sample_seed)
        counts = Counts.from_rows(rows, columns)
        try:
            for q in questions:
                qt = str(q["meta"]["query_type"])
                if qt not in DATA_ONLY:
                    try:
                        observed_model(model, hidden, counts, qt, q["meta"])
                    except NotIdentified:
                        continue  # left out later, whatever the sample
        except EmptyCell as e:
            problem = problem or e
            continue
        name = re.sub(r"[^\w.-]", "_", mid)
        return ModelTable(
            mid,
            columns,
            sorted(hidden),
            rows,
            counts,
            sample_seed,
            attempt,
            f"{TABLES_DIR}/model-{name}.csv",
        )
    raise EmptyCell(
        f"causal model {mid}: {problem} in {MAX_ATTEMPTS} samples of {n_rows} rows; "
        "draw more rows (--rows)"
    )


def csv_text(table: ModelTable) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(table.columns)
    writer.writerows(zip(*(table.rows[c].tolist() for c in table.columns), strict=True))
    return out.getvalue()


# --- one question ----------------------------------------------------------------------------------


def _plain(value: Any) -> Any:
    if isinstance(value, tuple):
        return [bool(v) for v in value]
    return float(value)


def data_question(
    q: Mapping[str, Any],
    raw: Mapping[str, Any],
    model: BinaryModel,
    table: ModelTable,
    counts_in_text: bool,
) -> dict[str, Any]:
    """The data-backed question, or NotIdentified / DataError saying why it is left out."""
    meta = q["meta"]
    qt = str(meta["query_type"])
    if qt not in QUANTITY:
        raise DataError(f"query type {qt!r} is not one the engine computes")
    exact = QUANTITY[qt](model, meta)
    exact_v = verdict(qt, exact, meta)
    if exact_v.answer != q["answer"]:
        raise DataError("its label is not the engine's exact answer")
    if qt in DATA_ONLY:
        perfect, perfect_v = exact, exact_v
        note: str | None = "answered from the graph: the data does not change it"
    else:
        fitted = observed_model(model, set(table.hidden), table.counts, qt, meta)
        perfect = QUANTITY[qt](fitted, meta)
        perfect_v = verdict(qt, perfect, meta)
        note = perfect_v.note
    out = copy.deepcopy(dict(q))
    out["given_info"] = pointer_text(raw, table.counts, table.file, counts_in_text)
    if out.get("desc_id"):
        out["desc_id"] = f"{out['desc_id']}-data"
    reasoning = out.get("reasoning")
    if isinstance(reasoning, dict):  # steps 4-5 read the stated numbers: not this question's
        out["reasoning"] = {
            k: v for k, v in reasoning.items() if k in ("step0", "step1", "step2", "step3")
        }
    out["meta"]["data"] = {
        "table": table.file,
        "rows": table.counts.n,
        "columns": table.columns,
        "hidden": table.hidden,
        "seed": table.sample_seed,
        "attempt": table.attempt,
        "counts": table.counts.cells.tolist(),  # per combination of columns: 0..0, 0..1, ...
        "exact": {"value": _plain(exact), "answer": exact_v.answer},
        "perfect": {
            "value": _plain(perfect),
            "answer": perfect_v.answer,
            "note": note,
            "agrees": perfect_v.answer == exact_v.answer,
        },
    }
    return out


# --- the dataset -----------------------------------------------------------------------------------


@dataclass
class TablesResult:
    questions: list[dict[str, Any]]
    models: list[dict[str, Any]]
    tables: dict[str, ModelTable]
    skipped: Counter[str] = field(default_factory=Counter)
    resampled: int = 0  # models whose first sample had an empty cell

    @property
    def perfect_agrees(self) -> int:
        return sum(q["meta"]["data"]["perfect"]["agrees"] for q in self.questions)


def drawn_params(raw: Mapping[str, Any], seed: int) -> dict[str, Any]:
    """Seeded random probability tables over a model's `structure` (each probability in
    [0.1, 0.9]), in CLadder's `params` form: for questions whose model has none (crawdad's
    examples), so that a table can be sampled and the engine can give the exact answer."""
    edges = [e.split("->") for e in str(raw.get("structure", "")).replace(" ", "").split(",") if e]
    variables = sorted({v for edge in edges for v in edge})
    rng = random.Random(f"drawn-params:{seed}:{raw.get('model_id')}")

    def table(depth: int) -> Any:
        return round(rng.uniform(0.1, 0.9), 4) if depth == 0 else [table(depth - 1) for _ in "01"]

    params = {}
    for v in variables:
        parents = [a for a, b in edges if b == v]
        key = f"p({v} | {', '.join(parents)})" if parents else f"p({v})"
        params[key] = table(len(parents))
    return params


def with_drawn_params(
    q: Mapping[str, Any], raw: Mapping[str, Any], model: BinaryModel
) -> dict[str, Any]:
    """A question over drawn tables: its label is the engine's answer on them, and the numbers
    it stated (about the model it was written for) are dropped."""
    meta = q["meta"]
    qt = str(meta["query_type"])
    if qt not in QUANTITY:
        raise DataError(f"query type {qt!r} is not one the engine computes")
    out = copy.deepcopy(dict(q))
    out["answer"] = verdict(qt, QUANTITY[qt](model, meta), meta).answer
    out["meta"]["drawn_params"] = True
    return out


def make_tables(
    path: Path,
    seed: int = 0,
    rows: int = DEFAULT_ROWS,
    selection: SelectionConfig | None = None,
    counts_in_text: bool = True,
    draw_params: bool = False,
) -> TablesResult:
    """Data-backed twins of the selected questions of the CLadder dataset at `path`. With
    `draw_params`, a model without `params` gets seeded random ones (`drawn_params`) and its
    questions the engine's answers on them."""
    dataset = load_cladder(path)  # validates every field the loader reads
    chosen = select(dataset, selection or SelectionConfig.model_validate({}), seed)
    keep = {str(q.question_id) for q in chosen.questions}
    questions, model_list, _ = read_raw(path)
    raw_models = {str(m["model_id"]): m for m in model_list}
    picked = [q for q in questions if str(q["question_id"]) in keep]
    by_model: dict[str, list[dict[str, Any]]] = {}
    for q in picked:
        by_model.setdefault(str(q["meta"]["model_id"]), []).append(q)
    skipped: Counter[str] = Counter()
    tables: dict[str, ModelTable] = {}
    built: dict[str, BinaryModel] = {}
    redrawn: dict[str, dict[str, Any]] = {}  # questions relabelled over drawn params
    failed: set[str] = set()  # questions whose query the engine cannot compute over them
    for mid, group in by_model.items():
        raw = raw_models[mid]
        if "params" not in raw and draw_params:
            raw = raw_models[mid] = {**raw, "params": drawn_params(raw, seed)}
            model = BinaryModel.from_meta(raw)
            for q in group:
                try:
                    redrawn[str(q["question_id"])] = with_drawn_params(q, raw, model)
                except (DataError, ZeroDivisionError, ValueError, NotIdentified, KeyError):
                    skipped["the engine cannot compute its query over the drawn tables"] += 1
                    failed.add(str(q["question_id"]))
        if "params" not in raw:
            skipped["its causal model has no params (tables) to sample from"] += len(group)
            continue
        built[mid] = BinaryModel.from_meta(raw)
        try:
            tables[mid] = draw_table(raw, built[mid], group, seed, rows)
        except EmptyCell as e:
            skipped[f"no sample without an empty cell ({e})"] += len(group)
    ids = [str(q["question_id"]) for q in picked]
    picked = [redrawn.get(i, q) for i, q in zip(ids, picked, strict=True) if i not in failed]
    out_q: list[dict[str, Any]] = []
    for q in picked:
        mid = str(q["meta"]["model_id"])
        if mid not in tables:
            continue
        try:
            out_q.append(data_question(q, raw_models[mid], built[mid], tables[mid], counts_in_text))
        except NotIdentified:
            skipped[f"{q['meta']['query_type']} not identified from the observed columns"] += 1
        except (DataError, ZeroDivisionError, ValueError) as e:
            skipped[str(e)] += 1
    if not out_q:
        raise DataError(
            f"{path}: no question could be backed by data ({dict(skipped) or 'none selected'}); "
            "data-backed questions need CLadder models with their `params` (for crawdad's"
            " examples, which have none, pass --draw-params)"
        )
    used = {str(q["meta"]["model_id"]) for q in out_q}
    models = []
    for mid in used:
        t = tables[mid]
        m = copy.deepcopy(raw_models[mid])
        m["data"] = {"table": t.file, "rows": rows, "columns": t.columns, "hidden": t.hidden}
        m["data"].update(seed=t.sample_seed, attempt=t.attempt)
        models.append(m)
    return TablesResult(
        questions=out_q,
        models=sorted(models, key=lambda m: str(m["model_id"])),
        tables={mid: tables[mid] for mid in used},
        skipped=skipped,
        resampled=sum(1 for mid in used if tables[mid].attempt),
    )


def write_tables(result: TablesResult, out: Path, source: Path, seed: int, rows: int) -> Path:
    """The CLadder folder: questions, meta-models, tables/*.csv and TABLES.md."""
    out.mkdir(parents=True, exist_ok=True)
    clash = [p.name for p in out.glob("*.json") if p.name not in (QUESTIONS_FILE, MODELS_FILE)]
    if clash:
        raise CrawdadError(
            f"{out} already holds other JSON files ({', '.join(sorted(clash))}); the loader would "
            "not know which questions file to read: choose an empty folder"
        )
    for t in result.tables.values():
        write_file(out, t.file, csv_text(t))
    write_file(out, QUESTIONS_FILE, json.dumps(result.questions, indent=1, ensure_ascii=False))
    write_file(out, MODELS_FILE, json.dumps(result.models, indent=1, ensure_ascii=False))
    answers = Counter(q["answer"] for q in result.questions)
    n = len(result.questions)
    lines = [
        "# CLadder questions answered from data (crawdad data tables)",
        "",
        f"From `{source}`, seed {seed}: {n} questions ({answers['yes']} yes, {answers['no']} no) "
        f"over {len(result.tables)} tables of {rows} observations each ({TABLES_DIR}/).",
        f"The perfect estimator's answer equals the exact one for {result.perfect_agrees} of {n} "
        "(the rest: the sample itself points the other way).",
        f"Models sampled again because a needed cell had no rows: {result.resampled}.",
        "",
        "Each question's `meta.data` holds its table, rows, seed, the counts per combination of "
        "the columns, the exact value and answer, and the perfect estimator's (`perfect`).",
    ]
    if result.skipped:
        lines += ["", "Questions left out:", ""]
        lines += [f"- {why}: {k}" for why, k in sorted(result.skipped.items())]
    write_file(out, "TABLES.md", "\n".join(lines) + "\n")
    return out
