"""`crawdad data own`: a data-question folder from a user's own CSV (CSV + spec -> folder).

The folder is the one `crawdad data tables` writes (a questions file, a meta-models file and
`tables/*.csv`), so the cladder-data tasks, the data tools and `crawdad analyze` read it as they
read those; but its questions need no exact answer: `answer` is null unless the user gives one,
and no `exact` or `perfect` values are stored. The CSV is read and coded 0/1 by
crawdad.data.own_csv; the table written is that 0/1 table, every column kept.

One causal model per table: its `background` (the context, then the graph in CLadder's words),
`structure` (the graph, or "" when none is given: the agents choose their own adjustment set)
and `variable_mapping` (each column's name in the story and what 1 and 0 mean). Another
question over the same table reuses its model; a table of the same name but other content is
refused, and a question asked already is not asked twice.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from crawdad.causal.edge_text import parse_edges
from crawdad.data.own_csv import Column, OwnTable, read_own_table
from crawdad.errors import ConfigError, DataError
from crawdad.safe_files import Folder

QUESTIONS_FILE = "own-q.json"
MODELS_FILE = "own-meta-models.json"
LOCK_FILE = ".own.lock"  # held while a process reads, adds to and writes the folder
STORY = "own"  # the story_id and graph_id of every own question and model
RUNGS = {"correlation": 1, "ate": 2, "ett": 3}  # the query types an own question may ask
_ARROW = re.compile(r"->|→")


class OwnSpec(BaseModel):
    """What the user says about the question (the flags of `crawdad data own`)."""

    model_config = ConfigDict(extra="forbid")

    treatment: str
    outcome: str
    query_type: Literal["ate", "ett", "correlation"] = "ate"
    question: str | None = None  # None: a CLadder-like wording from the names
    answer: Literal["yes", "no"] | None = None  # None: no exact answer
    graph: str | None = None  # "Z->X, Z->Y, X->Y"
    codes: dict[str, str] = Field(default_factory=dict)  # column -> its value coded 1
    names: dict[str, str] = Field(default_factory=dict)  # column -> its name in the story
    context: str | None = None  # the model's background; None: a neutral sentence
    counts_in_text: bool = False
    graph_in_text: bool = True


# --- the graph and the words ---------------------------------------------------------------------


def parse_graph(text: str, table: OwnTable) -> list[tuple[str, str]]:
    """'Z->X, Z->Y, X->Y' over the table's columns -> edges; ConfigError for an edge that is
    not one, an unknown column or a cycle."""
    from crawdad.tools.graph import DAG, GraphError

    edges: list[tuple[str, str]] = []
    for part in re.split(r"[,;\n]", text):
        if not part.strip():
            continue
        ends = _ARROW.split(part)
        if len(ends) != 2 or not all(e.strip() for e in ends):
            raise ConfigError(
                f'--graph: {part.strip()!r} is not an edge; write edges like "Z->X, Z->Y, X->Y"'
            )
        edges.append((table.column(ends[0], "--graph").name, table.column(ends[1], "--graph").name))
    if not edges:
        raise ConfigError('--graph holds no edge; write edges like "Z->X, Z->Y, X->Y"')
    try:
        DAG.from_edges(edges)
    except GraphError as e:
        raise ConfigError(f"--graph: {e}; a causal graph is acyclic") from None
    return list(dict.fromkeys(edges))


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]


def graph_text(edges: list[tuple[str, str]], names: Mapping[str, str]) -> str:
    """The graph in CLadder's words: "Stone size has a direct effect on treatment and success." """
    effects: dict[str, list[str]] = {}
    for a, b in edges:
        effects.setdefault(a, []).append(names[b])
    return " ".join(
        f"{_capital(names[a])} has a direct effect on {_and(bs)}." for a, bs in effects.items()
    )


def _phrase(c: Column, name: str, bit: int, long: bool) -> str:
    """A column at a value in words: "success", "no success", or for a named pair "treatment
    being open rather than PCNL" (long) or "treatment open"."""
    if c.yes_no:
        return name if bit else f"no {name}"
    value, other = (c.one, c.zero) if bit else (c.zero, c.one)
    return f"{name} being {value} rather than {other}" if long else f"{name} {value}"


def default_question(qt: str, x: Column, y: Column, names: Mapping[str, str]) -> str:
    xn, yn = names[x.name], names[y.name]
    y1 = yn if y.yes_no else f"{yn} being {y.one}"
    if qt == "correlation":
        return (
            f"Is the chance of {y1} larger among the observations with "
            f"{_phrase(x, xn, 1, False)} than among those with {_phrase(x, xn, 0, False)}?"
        )
    if qt == "ett":
        return (
            f"For the observations with {_phrase(x, xn, 1, False)}, would {y1} be more likely "
            f"with {_phrase(x, xn, 0, False)} instead?"
        )
    return f"Does {_phrase(x, xn, 1, long=True)} increase the chance of {y1}?"


def _formal(qt: str, x: str, y: str) -> str:
    return {
        "correlation": f"P({y} | {x})",
        "ate": f"E[{y} | do({x}=1)] - E[{y} | do({x}=0)]",
        "ett": f"E[{y}_{{{x}=0}} - {y}_{{{x}=1}} | {x}=1]",
    }[qt]


# --- the model and the question ------------------------------------------------------------------


def build_model(
    table: OwnTable,
    names: Mapping[str, str],
    edges: list[tuple[str, str]] | None,
    background: str,
    model_id: int,
) -> dict[str, Any]:
    """The table's causal model in CLadder's meta-models form."""
    mapping: dict[str, str] = {}
    for c in table.columns:
        mapping |= {
            f"{c.name}name": names[c.name],
            f"{c.name}1": c.means(1),
            f"{c.name}0": c.means(0),
        }
    return {
        "model_id": model_id,
        "story_id": STORY,
        "graph_id": STORY,
        "alignment": None,  # a real table has no CLadder story alignment
        "structure": ",".join(f"{a}->{b}" for a, b in edges or []),
        "background": background,
        "variable_mapping": mapping,
        "data": {"table": table.file, "rows": table.n, "columns": table.names, "hidden": []},
    }


def background_of(
    spec: OwnSpec, table: OwnTable, names: Mapping[str, str], edges: list[tuple[str, str]] | None
) -> str:
    if spec.context is not None:
        if not spec.context.strip():
            raise ConfigError("--context is empty; leave it out for the default sentence")
        text = spec.context.strip()
    else:
        listed = _and([names[c] for c in table.names])
        text = f"The attached table records {table.n} observations of {listed}."
        if not edges:
            text += " Which of them causes which is not stated."
    if edges and spec.graph_in_text:
        text += " " + graph_text(edges, names)
    return text


def build_question(
    table: OwnTable, model: dict[str, Any], spec: OwnSpec, x: Column, y: Column, qid: int
) -> dict[str, Any]:
    import numpy as np

    from crawdad.causal.estimate import Counts
    from crawdad.data.tables import pointer_text

    counts = Counts.from_rows({c.name: np.asarray(c.bits) for c in table.columns}, table.names)
    names = {c: model["variable_mapping"][f"{c}name"] for c in table.names}
    text = (
        spec.question
        if spec.question is not None
        else default_question(spec.query_type, x, y, names)
    )
    if not text.strip():
        raise ConfigError("--question is empty; leave it out for the default wording")
    data: dict[str, Any] = {"table": table.file, "rows": table.n, "columns": table.names}
    data |= {"hidden": [], "source": table.source.name}
    if spec.counts_in_text:
        data["counts"] = counts.cells.tolist()
    qt = spec.query_type
    return {
        "question_id": qid,
        "desc_id": f"own-{qt}-{Path(table.file).stem}-q{qid}",
        "given_info": pointer_text(model, counts, table.file, spec.counts_in_text),
        "question": text.strip(),
        "answer": spec.answer,  # null: no exact answer
        "meta": {
            "rung": RUNGS[qt],
            "query_type": qt,
            "story_id": STORY,
            "graph_id": STORY,
            "model_id": model["model_id"],
            "polarity": True,  # the question asks whether the quantity is positive
            "formal_form": _formal(qt, x.name, y.name),
            "treatment": x.name,
            "outcome": y.name,
            "data": data,
        },
        "reasoning": {},
    }


# --- the folder ----------------------------------------------------------------------------------


@dataclass
class Added:
    """What `add_own_question` did."""

    folder: Path
    question: dict[str, Any]
    table: OwnTable
    new_table: bool  # its table was written now (else: one of the folder's, reused)
    questions: int  # in the folder now
    tables: int
    written: bool  # False: the folder asked this question already; nothing was written


def add_own_question(csv: Path, out: Path, spec: OwnSpec) -> Added:
    """Add the question `spec` asks of the CSV's table to the folder `out` (created if need be).

    The folder's files are read, added to and written back under its lock (`.own.lock`), each
    replaced atomically and never through a link: processes adding to one folder at once wait
    for each other, and no question is lost."""
    table = read_own_table(csv, spec.codes)
    out = Path(out)
    if not out.exists():  # the spec checked first: a refused question makes no folder
        _add(table, out, None, spec)
    with Folder(out) as folder, folder.locked(LOCK_FILE):
        return _add(table, out, folder, spec)


def _add(table: OwnTable, out: Path, folder: Folder | None, spec: OwnSpec) -> Added:
    """The question added to the folder's (`None`: to an empty folder, nothing written)."""
    questions, models = read_folder(out, folder) if folder is not None else ([], [])
    x, y = table.column(spec.treatment, "--treatment"), table.column(spec.outcome, "--outcome")
    if x is y:
        raise ConfigError(f"--treatment and --outcome both name {x.name}; name two columns")
    old = next((m for m in models if (m.get("data") or {}).get("table") == table.file), None)
    if folder is not None:
        _check_content(folder, table)
    model = _model_for(table, spec, old, _next_id(models, "model_id"), out)
    if edges := parse_edges(model["structure"]):
        in_graph = {v for e in edges for v in e}
        if missing := [c.name for c in (x, y) if c.name not in in_graph]:
            raise ConfigError(
                f"the graph ({model['structure']}) does not hold {', '.join(missing)}; add its "
                "edges to --graph"
            )
    question = build_question(table, model, spec, x, y, _next_id(questions, "question_id"))
    asked = _asked(questions, question)
    if asked is not None and asked.get("answer") != question["answer"]:
        raise ConfigError(
            f"question {asked['question_id']} of {out} asks this already, with the answer "
            f"{json.dumps(asked.get('answer'))}; edit its `answer` in {out / QUESTIONS_FILE}, "
            "or write to another --out"
        )
    new_table = old is None
    if asked is None:
        questions.append(question)
        if new_table:
            models.append(model)
        if folder is not None:
            _write(folder, table, questions, models)
    return Added(
        folder=out,
        question=asked or question,
        table=table,
        new_table=new_table,
        questions=len(questions),
        tables=len(models),
        written=asked is None,
    )


def _names(spec: OwnSpec, table: OwnTable, stored: Mapping[str, Any]) -> dict[str, str]:
    """Each column's name in the story: --name, else the stored one, else its header."""
    names = {c.name: str(stored.get(f"{c.name}name") or c.story) for c in table.columns}
    for key, value in spec.names.items():
        if not value.strip():
            raise ConfigError(f"--name {key}= is empty; give the column's name in the story")
        names[table.column(key, "--name").name] = value.strip()
    return names


def _model_for(
    table: OwnTable, spec: OwnSpec, old: dict[str, Any] | None, model_id: int, out: Path
) -> dict[str, Any]:
    """The table's model: a new one, or the folder's, which the flags must not contradict."""
    names = _names(spec, table, (old or {}).get("variable_mapping") or {})
    if spec.graph is not None:
        edges: list[tuple[str, str]] | None = parse_graph(spec.graph, table)
    else:
        edges = parse_edges(str((old or {}).get("structure") or "")) or None
    if old is None:
        background = background_of(spec, table, names, edges)
        return build_model(table, names, edges, background, model_id)
    if spec.context is None:
        background = str(old.get("background"))
    else:
        background = background_of(spec, table, names, edges)
    model = build_model(table, names, edges, background, old["model_id"])
    flags = {"structure": "--graph", "background": "--context", "variable_mapping": "--name"}
    if differ := [flag for key, flag in flags.items() if model[key] != old.get(key)]:
        raise ConfigError(
            f"{out} has a causal model of {table.file} already (model {old['model_id']}), and "
            f"this {' and '.join(differ)} differs from it; a table has one model: leave "
            f"{' and '.join(differ)} out to keep the folder's, or write to another --out"
        )
    return old


def _next_id(items: list[dict[str, Any]], key: str) -> int:
    ids = [i for i in (item.get(key) for item in items) if isinstance(i, int)]
    return max(ids, default=-1) + 1


def _asked(questions: list[dict[str, Any]], new: dict[str, Any]) -> dict[str, Any] | None:
    """The folder's question asking what `new` asks, of the same table, if any."""
    keys = ("model_id", "query_type", "treatment", "outcome")
    for q in questions:
        meta = q.get("meta") or {}
        if q.get("question") == new["question"] and all(
            meta.get(k) == new["meta"][k] for k in keys
        ):
            return q
    return None


def _check_content(folder: Folder, table: OwnTable) -> None:
    path = folder.path / table.file
    sub, name = _table_place(table)
    try:
        tables = folder.sub(sub, create=False)
    except FileNotFoundError:
        return
    with tables:
        if not tables.is_file(name) or tables.read_text(name) == table.csv_text():
            return
        raise DataError(
            f"{path} holds another table already; the table is named after the CSV "
            f"({table.source.name}), and a name holds one table: rename the CSV, or write to "
            "another --out"
        )


def _table_place(table: OwnTable) -> tuple[str, str]:
    """(its folder, its file name): `tables/<name>.csv`."""
    sub, _, name = table.file.partition("/")
    return sub, name


def read_folder(out: Path, folder: Folder) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The questions and models of an own-table folder (none yet: empty lists); its files are
    read without following a link."""
    clash = sorted(
        p.name for p in out.glob("*.json") if p.name not in (QUESTIONS_FILE, MODELS_FILE)
    )
    if clash:
        raise DataError(
            f"{out} holds other JSON files ({', '.join(clash)}): `crawdad data own` adds to its "
            "own folders only; choose another --out"
        )
    files = [QUESTIONS_FILE, MODELS_FILE]
    if not any([folder.is_file(f) for f in files]):
        return [], []
    return _json_list(folder, files[0]), _json_list(folder, files[1])


def _json_list(folder: Folder, name: str) -> list[dict[str, Any]]:
    path = folder.path / name
    try:
        data = json.loads(folder.read_text(name))
    except FileNotFoundError:
        raise DataError(
            f"{path} is missing (its folder has the other file); write the folder again"
        ) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise DataError(
            f"{path} is not valid JSON ({e}); fix it or write the folder again"
        ) from None
    if not isinstance(data, list) or not all(isinstance(d, dict) for d in data):
        raise DataError(f"{path}: expected a JSON list of objects")
    return data


def _write(
    folder: Folder, table: OwnTable, questions: list[dict[str, Any]], models: list[dict[str, Any]]
) -> None:
    """The table (if new), then the models and the questions, each replaced atomically."""
    sub, name = _table_place(table)
    with folder.sub(sub) as tables:
        if not tables.is_file(name):
            tables.write_text(name, table.csv_text())
    for file, items in ((MODELS_FILE, models), (QUESTIONS_FILE, questions)):
        folder.write_text(file, json.dumps(items, indent=1, ensure_ascii=False) + "\n")


def summary(added: Added, configs: tuple[str, ...] = ("protocols/data-agent",)) -> list[str]:
    """What was written, for the user, and the commands to run next."""
    q, t, out = added.question, added.table, added.folder
    meta = q["meta"]
    if not added.written:
        return [f"{out} asks this already (question {q['question_id']}); nothing written"]
    coded = ", ".join(f"{c.name} = {c.one}" for c in t.columns)
    lines = [
        f"question {q['question_id']} ({meta['query_type']}, rung {meta['rung']}) written to "
        f"{out / QUESTIONS_FILE}: {q['question']}",
        f"  table: {out / t.file} ({'new' if added.new_table else 'the folder has it'}; "
        f"{t.n} rows; columns {', '.join(t.names)}; coded 1: {coded})",
    ]
    if t.renamed:
        lines.append(
            "  renamed to plain names: " + ", ".join(f"{h!r} -> {n}" for h, n in t.renamed)
        )
    if q["answer"] is None:
        lines.append(
            "  answer: none given; the report lists the answers, and the scores that need the "
            "exact answer (accuracy) are left out (give one with --answer yes|no)"
        )
    else:
        lines.append(f"  answer: {q['answer']}")
    lines.append(f"{out} holds {added.questions} question(s) over {added.tables} table(s).")
    lines.append("Next, with simulated agents, then with yours:")
    for config in configs:
        lines.append(f"  crawdad demo --data {out} --config {config} --out runs/own-demo")
        lines.append(f"  crawdad run --data {out} --config {config} --out runs/own")
    return lines
