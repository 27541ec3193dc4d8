"""A question's table is read from its file and checked (issue 33): broken files are refused
before anything runs, every one named with what is wrong; the tools compute on the file."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from crawdad.config import SelectionConfig
from crawdad.data.tables import make_tables, write_tables
from crawdad.errors import DataError
from crawdad.resources import examples
from crawdad.tasks.cladder_data import load_data_questions
from crawdad.tools.data_tools import compute, parse_call


@pytest.fixture(scope="module")
def clean(tmp_path_factory) -> Path:
    """A data-question folder from crawdad's example questions (parameters drawn, offline)."""
    out = tmp_path_factory.mktemp("data") / "tables"
    result = make_tables(
        examples(), seed=3, rows=400, selection=SelectionConfig(sample=40), draw_params=True
    )
    write_tables(result, out, examples(), 3, 400)
    return out


@pytest.fixture
def folder(clean: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "tables"
    shutil.copytree(clean, copy)
    return copy


def _tables(folder: Path) -> list[Path]:
    return sorted((folder / "tables").glob("*.csv"))


def _problems(folder: Path) -> str:
    with pytest.raises(DataError) as caught:
        load_data_questions(folder)
    return str(caught.value)


def test_a_clean_folder_loads_its_tables_from_the_files(folder: Path) -> None:
    questions = load_data_questions(folder).questions
    first = questions[0]
    lines = (folder / first.data.table).read_text().splitlines()
    assert first.table.counts.n == len(lines) - 1 == first.data.rows


def test_five_broken_tables_are_all_named_before_anything_runs(
    folder: Path, tmp_path: Path
) -> None:
    a, b, c, d, e = _tables(folder)[:5]
    rows = a.read_text().splitlines()
    a.write_text("\n".join([rows[0], "nan" + rows[1][1:], *rows[2:]]) + "\n")
    b.write_text("")
    header = c.read_text().splitlines()[0].split(",")
    c.write_text(
        ",".join([header[0], header[0], *header[2:]])
        + "\n"
        + "\n".join(c.read_text().splitlines()[1:])
    )
    body = d.read_text().splitlines()
    d_first = body[0].split(",")[0]
    body[2] = "2" + body[2][1:]
    body[4] = "<script>" + body[4][1:]
    d.write_text("\n".join(body) + "\n")
    outside = tmp_path / "outside.csv"
    outside.write_text(e.read_text())
    e.unlink()
    e.symlink_to(outside)
    message = _problems(folder)
    assert "5 of" in message and "tables cannot be used" in message
    assert f"{a.name}: line 2, column {rows[0].split(',')[0]}: NaN" in message
    assert f"{b.name}: empty" in message
    assert f"{c.name}: line 1: duplicate column name(s) {header[0]}" in message
    assert f"{d.name}: line 3, column {d_first}: '2' (and 1 more in the column)" in message
    assert f"{e.name}: a symlink that leads outside the dataset folder" in message


@pytest.mark.parametrize(
    ("rows", "expected"),
    [
        (["{zeros}", "{zeros}"], "line 1: no header"),
        (["{header}", "{zeros}", "1"], "line 3, column"),  # a short row: empty cells
        (["{header}", "{zeros},1"], "not a CSV table"),
        (["{header} Z", "{zeros}"], "not plain names"),
    ],
)
def test_more_bad_tables_name_the_line(folder: Path, rows: list[str], expected: str) -> None:
    table = _tables(folder)[0]
    header = table.read_text().splitlines()[0]
    zeros = ",".join("0" for _ in header.split(","))
    table.write_text("\n".join(r.format(header=header, zeros=zeros) for r in rows) + "\n")
    message = _problems(folder)
    assert table.name in message and expected in message


def test_a_missing_table_and_a_path_out_of_the_folder(folder: Path) -> None:
    questions = json.loads((folder / "cladder-tables-q.json").read_text())
    questions[0]["meta"]["data"]["table"] = "../elsewhere.csv"
    (folder / "cladder-tables-q.json").write_text(json.dumps(questions))
    gone = _tables(folder)[-1]
    gone.unlink()
    message = _problems(folder)
    assert "../elsewhere.csv: a path that leads outside the dataset folder" in message
    assert f"tables/{gone.name}: missing" in message


def test_an_edited_table_that_disagrees_with_its_counts_is_named(folder: Path) -> None:
    table = _tables(folder)[0]
    lines = table.read_text().splitlines()
    table.write_text("\n".join([lines[0], *lines[1:], lines[1]]) + "\n")  # one row more
    message = _problems(folder)
    assert f"{table.name} does not match the counts in its `meta.data`" in message
    assert "the file has" in message and "the question's counts say" in message


def test_the_tools_follow_the_file(folder: Path) -> None:
    """With no counts stored beside it, a table edited by hand is what the tools compute on."""
    questions = json.loads((folder / "cladder-tables-q.json").read_text())
    for q in questions:
        q["meta"]["data"].pop("counts", None)
    (folder / "cladder-tables-q.json").write_text(json.dumps(questions))
    item = load_data_questions(folder).questions[0]
    call = parse_call("describe_data", {})
    before = compute(item.table, call)
    path = folder / item.data.table
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[0], *lines[1:], *lines[1:11]]) + "\n")  # ten rows more
    after = compute(load_data_questions(folder).questions[0].table, call)
    assert after["rows"] == before["rows"] + 10
