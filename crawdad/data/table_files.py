"""A question's table, read from its file and checked (issue 33: the file is the truth).

A data-question folder (`crawdad data tables`, or one written by hand) names, per question, a
CSV under the folder (`meta.data.table`) and the columns the question uses. Each file is read
once, with pandas, every cell as text so that nothing is guessed, then checked: it must lie
inside the folder (no symlink or `..` out of it), have a header of distinct plain names that
include the question's columns, and hold only the column's domain (0 or 1) in every cell, within
the size limits. Every problem of every file is listed, each with its file and line or column,
before anything runs.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from crawdad.causal.estimate import Counts
from crawdad.config import TableLimits
from crawdad.errors import UnsafePathError
from crawdad.safe_files import read_input

DOMAIN = ("0", "1")  # CLadder's variables are binary
PLAIN_NAME = re.compile(r"^[A-Za-z_]\w*$")  # a column name a table may have


@dataclass
class TableFile:
    """One checked file: its counts over its columns, or the problems found in it."""

    path: str  # as the questions name it, relative to the folder
    counts: Counts | None = None
    problems: list[str] = field(default_factory=list)


def read_tables(
    folder: Path, wanted: Mapping[str, Iterable[str]], limits: TableLimits | None = None
) -> dict[str, TableFile]:
    """Each file of `wanted` (relative path -> the columns its questions use), read and checked."""
    limits = limits or TableLimits()
    return {rel: read_table(folder, rel, set(columns), limits) for rel, columns in wanted.items()}


def read_table(
    folder: Path, rel: str, columns: set[str], limits: TableLimits | None = None
) -> TableFile:
    limits = limits or TableLimits()
    out = TableFile(rel)
    path = _inside(folder, rel, out)
    if path is None:
        return out
    text = _text(path, out)
    if text is None:
        return out
    lines = text.splitlines()
    if not lines or not lines[0].strip():
        out.problems.append("empty: a table needs a header row of column names, then its rows")
        return out
    if len(lines) - 1 > limits.max_rows:
        out.problems.append(
            f"{len(lines) - 1:,} rows; a table has at most {limits.max_rows:,} "
            "(table_limits.max_rows)"
        )
        return out
    grid = _cells(text, out)
    if grid is None:
        return out
    header, body = grid[0], grid[1:]
    if not _header_ok(header, columns, limits.max_columns, out):
        return out
    _values_ok(header, body, out)
    if not out.problems:
        data = np.array(body, dtype=np.int64).reshape(-1, len(header))
        out.counts = Counts.from_rows({h: data[:, i] for i, h in enumerate(header)}, header)
    return out


def _inside(folder: Path, rel: str, out: TableFile) -> Path | None:
    root = Path(folder).resolve()
    path = Path(folder) / rel
    try:
        real = path.resolve()
    except (OSError, RuntimeError) as e:  # a symlink loop
        out.problems.append(f"cannot be followed: {e}")
        return None
    if not real.is_relative_to(root):
        how = "a symlink" if path.is_symlink() else "a path"
        out.problems.append(
            f"{how} that leads outside the dataset folder (to {real}); put the table itself in "
            "the folder"
        )
        return None
    if not real.is_file():
        out.problems.append("missing: no such file in the folder")
        return None
    return real


def _text(path: Path, out: TableFile) -> str | None:
    try:
        return read_input(path, "table").decode("utf-8-sig")
    except UnsafePathError as e:
        out.problems.append(str(e))
    except UnicodeDecodeError:
        out.problems.append("not UTF-8 text: save it as a CSV file")
    except OSError as e:
        out.problems.append(f"cannot be read: {e.strerror or e}")
    return None


def _cells(text: str, out: TableFile) -> list[list[str]] | None:
    """Every cell as text, the header row first (pandas' C reader: quoting handled, nothing
    converted, empty cells kept empty)."""
    import io

    import pandas as pd

    try:
        frame = pd.read_csv(
            io.StringIO(text),
            header=None,
            dtype=str,
            keep_default_na=False,
            skip_blank_lines=True,
        )
    except (pd.errors.ParserError, ValueError) as e:
        out.problems.append(f"not a CSV table: {str(e).strip()}")
        return None
    # a short row's missing cells come as NaN: they are empty cells
    return [
        [cell.strip() if isinstance(cell, str) else "" for cell in row]
        for row in frame.itertuples(index=False)
    ]


def _header_ok(header: list[str], columns: set[str], max_columns: int, out: TableFile) -> bool:
    if all(h in DOMAIN for h in header):
        out.problems.append(
            "line 1: no header (its cells are values); the first line names the columns"
        )
        return False
    if len(header) > max_columns:
        out.problems.append(
            f"{len(header)} columns; a table has at most {max_columns} (table_limits.max_columns)"
        )
    if blank := [i + 1 for i, h in enumerate(header) if not h]:
        out.problems.append(f"line 1: column(s) {blank} have no name")
    if bad := [h for h in header if h and not PLAIN_NAME.match(h)]:
        out.problems.append(f"line 1: column names {bad} are not plain names like X or V2")
    if dup := sorted({h for h in header if h and header.count(h) > 1}):
        out.problems.append(f"line 1: duplicate column name(s) {', '.join(dup)}")
    if missing := sorted(columns - set(header)):
        out.problems.append(
            f"line 1: no column {', '.join(missing)} (its questions name it); the header has "
            f"{', '.join(header)}"
        )
    return not out.problems


def _values_ok(header: list[str], body: list[list[str]], out: TableFile) -> None:
    """Per column, its first bad cell by line (the header is line 1) and how many more."""
    first: dict[str, str] = {}
    more: dict[str, int] = {}
    for i, row in enumerate(body):
        if len(row) != len(header):
            out.problems.append(f"line {i + 2}: {len(row)} values for {len(header)} columns")
            return
        for name, cell in zip(header, row, strict=True):
            if cell in DOMAIN:
                continue
            if name in first:
                more[name] = more.get(name, 0) + 1
                continue
            what = (
                "an empty cell" if cell == "" else ("NaN" if cell.lower() == "nan" else repr(cell))
            )
            first[name] = f"line {i + 2}, column {name}: {what[:48]}"
    for name, text in first.items():
        also = f" (and {more[name]} more in the column)" if more.get(name) else ""
        out.problems.append(f"{text}{also}; its values are 0 or 1")


def counts_over(counts: Counts, columns: list[str]) -> Counts:
    """The same table's counts with its columns in `columns`' order (a file may order them
    otherwise than the question lists them)."""
    if list(counts.columns) == columns:
        return counts
    bits = np.array([[row[counts.columns.index(c)] for c in columns] for row in counts.rows()])
    index = np.zeros(len(bits), dtype=np.int64)
    for j in range(len(columns)):
        index = index * 2 + bits[:, j]
    cells = np.zeros(2 ** len(columns), dtype=np.int64)
    np.add.at(cells, index, counts.cells)
    return Counts(tuple(columns), cells)


def first_difference(file: Counts, stated: Counts) -> str | None:
    """The first combination whose count differs, in words, or None when they agree."""
    for row_f, row_s in zip(file.rows(), stated.rows(), strict=True):
        if row_f[-1] != row_s[-1]:
            cell = ", ".join(f"{c}={b}" for c, b in zip(file.columns, row_f[:-1], strict=True))
            return (
                f"rows with {cell}: the file has {row_f[-1]}, the question's counts say {row_s[-1]}"
            )
    return None
