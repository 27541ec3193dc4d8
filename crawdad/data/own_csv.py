"""A user's own CSV as a table of 0/1 columns (`crawdad data own`, crawdad.data.own_table).

Each column must hold exactly two values. 0/1, yes/no, true/false and y/n (any case; 1.0 and 0.0
too) are coded by themselves (1, yes, true, y are 1); any other pair needs the value coded 1
named (`codes`, the `--code COL=VALUE` flags). An empty or NaN cell is an error naming its line
and column; every problem of the file is listed at once. A header that is not a plain name
("stone size") is written as one, each non-word character replaced by `_` ("stone_size"): the
flags may name a column either way, and its name in the story stays the header as written.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from crawdad.config import TableLimits
from crawdad.data.table_files import PLAIN_NAME
from crawdad.errors import ConfigError, DataError
from crawdad.safe_files import read_input

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

TABLES_DIR = "tables"
MISSING = ("", "nan", "na", "n/a", "null")  # compared in lower case
# The pairs coded without --code: (the value coded 1, the value coded 0), in lower case.
BOOLEAN = (("1", "0"), ("yes", "no"), ("true", "false"), ("y", "n"))

LIMITS = TableLimits()  # a table written here is checked again against the run's config


# --- the table -----------------------------------------------------------------------------------


@dataclass
class Column:
    name: str  # a plain name, as written
    header: str  # as the CSV has it
    one: str  # the value coded 1, as the CSV has it
    zero: str
    yes_no: bool  # a yes/no-like pair, 1 its yes: the column alone names its 1
    bits: np.ndarray  # int8, 0/1

    @property
    def story(self) -> str:
        """Its name in the story by default: the header, underscores as spaces."""
        return re.sub(r"[_\s]+", " ", self.header).strip()

    def means(self, bit: int) -> str:
        """What 1 or 0 means in the legend: its value as written, 1 and 0 as yes and no."""
        value = self.one if bit else self.zero
        return {"1": "yes", "0": "no"}.get(_lower(value), value)


@dataclass
class OwnTable:
    source: Path
    file: str  # relative to the folder: tables/<stem>.csv
    columns: list[Column]

    @property
    def n(self) -> int:
        return len(self.columns[0].bits)

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.columns]

    @property
    def renamed(self) -> list[tuple[str, str]]:
        return [(c.header, c.name) for c in self.columns if c.header != c.name]

    def csv_text(self) -> str:
        import pandas as pd

        frame = pd.DataFrame({c.name: c.bits for c in self.columns})
        return str(frame.to_csv(index=False, lineterminator="\n"))

    def column(self, given: str, flag: str) -> Column:
        """The column named by its plain name or its header, else ConfigError listing them."""
        for c in self.columns:
            if given.strip() in (c.name, c.header):
                return c
        raise ConfigError(
            f"{flag}: {self.source.name} has no column {given.strip()!r}; its columns are "
            + ", ".join(self.names)
        )


def plain_name(header: str) -> str:
    name = re.sub(r"\W", "_", header)
    return name if PLAIN_NAME.match(name) else f"_{name}"


def read_own_table(path: Path, codes: Mapping[str, str]) -> OwnTable:
    """The CSV at `path` as a 0/1 table; one DataError listing every problem found."""
    frame = _read_frame(path)
    headers = [str(h) for h in frame.columns]
    names = [plain_name(h) for h in headers]
    if dup := sorted({n for n in names if names.count(n) > 1}):
        raise DataError(
            f"{path}: line 1: the column name(s) {', '.join(dup)} appear twice (written as plain"
            " names, each non-word character as _); give each column its own name"
        )
    if len(headers) > LIMITS.max_columns:
        raise DataError(
            f"{path}: {len(headers)} columns; the data tools take at most {LIMITS.max_columns}: "
            "keep the columns the question needs in a smaller CSV"
        )
    stem = re.sub(r"[^\w.-]", "_", path.stem)
    table = OwnTable(path, f"{TABLES_DIR}/{stem}.csv", [])
    problems = [
        f"--code {k}: no such column; the columns are {', '.join(names)}"
        for k in codes
        if k.strip() not in names and k.strip() not in headers
    ]
    for head, name in zip(headers, names, strict=True):
        code = codes.get(name, codes.get(head))
        column = _coded(frame[head], head, name, code, problems)
        if column is not None:
            table.columns.append(column)
    if problems:
        raise DataError(f"{path}: cannot be used as it is:\n  - " + "\n  - ".join(problems))
    return table


def _read_frame(path: Path) -> pd.DataFrame:
    """Every cell as stripped text, the header's names as columns, indexed by the file's line;
    blank lines dropped, nothing converted."""
    import io

    import pandas as pd

    try:
        raw = read_input(path, "CSV file")
        frame = pd.read_csv(
            io.BytesIO(raw),
            header=None,
            dtype=str,
            keep_default_na=False,
            skip_blank_lines=False,  # so that row i is line i + 1 of the file
            encoding="utf-8-sig",
            nrows=LIMITS.max_rows + 2,
        )
    except FileNotFoundError:
        raise DataError(f"{path}: no such file") from None
    except UnicodeDecodeError:
        raise DataError(f"{path}: not UTF-8 text; save it as a CSV file (UTF-8)") from None
    except pd.errors.EmptyDataError:
        raise DataError(f"{path}: empty; a table needs a header row, then its rows") from None
    except (pd.errors.ParserError, ValueError) as e:
        raise DataError(f"{path}: not a CSV table: {str(e).strip()}") from None
    frame = frame.fillna("").apply(lambda col: col.str.strip())
    frame.index = frame.index + 1
    header = [str(h) for h in frame.iloc[0]]
    if blank := [i + 1 for i, h in enumerate(header) if not h]:
        raise DataError(f"{path}: line 1: column(s) {blank} have no name; name every column")
    body = frame.iloc[1:]
    body = body[(body != "").any(axis=1)]
    body.columns = header
    if body.empty:
        raise DataError(f"{path}: a header and no rows; a table needs observations")
    if len(body) > LIMITS.max_rows:
        raise DataError(f"{path}: more than {LIMITS.max_rows:,} rows; a table has at most that")
    return body


def _coded(
    cells: pd.Series, head: str, name: str, code: str | None, problems: list[str]
) -> Column | None:
    """One column coded 0/1, or None with its problem added to `problems`."""
    empty = cells.str.lower().isin(MISSING)
    if empty.any():
        more = f" (and {int(empty.sum()) - 1} more in the column)" if empty.sum() > 1 else ""
        problems.append(
            f"line {cells.index[empty.argmax()]}, column {head}: an empty or NaN cell{more}; "
            "every cell needs a value"
        )
        return None
    raw = sorted(str(v) for v in cells.unique())
    low = {v: _lower(v) for v in raw}
    pair = _boolean(set(low.values()))
    key = low if pair else {v: v for v in raw}  # a yes/no-like pair: "Yes" and "yes" are one
    values = sorted(set(key.values()))
    if len(values) != 2:
        shown = ", ".join(repr(v) for v in raw[:6]) + (" ..." if len(raw) > 6 else "")
        problems.append(
            f"column {head} holds {len(raw)} distinct values ({shown}); each column must hold "
            "exactly two (a binary variable): recode it, or leave it out of the CSV"
        )
        return None
    spelled = {k: next(v for v in raw if key[v] == k) for k in values}  # as the CSV has it
    if code is not None:
        want = code.strip()
        hits = [k for k in values if spelled[k] == want] or [
            k for k in values if _lower(k) == _lower(want)
        ]
        if len(hits) != 1:
            problems.append(
                f"--code {name}={code}: column {head} holds {spelled[values[0]]!r} and "
                f"{spelled[values[1]]!r}, not {want!r}; name one of the two"
            )
            return None
        one = hits[0]
    elif pair is not None:
        one = pair[0]
    else:
        problems.append(
            f"column {head} holds {values[0]!r} and {values[1]!r}; say which is coded 1: "
            f"--code {shlex.quote(f'{name}={values[0]}')} "
            f"(or --code {shlex.quote(f'{name}={values[1]}')})"
        )
        return None
    zero = values[1] if one == values[0] else values[0]
    bits = (cells.map(key) == one).to_numpy().astype("int8")
    yes_no = pair is not None and one == pair[0]
    return Column(name, head, spelled[one], spelled[zero], yes_no, bits)


def _lower(value: str) -> str:
    """A value in lower case, 1.0 and 0.0 read as 1 and 0."""
    try:
        return {1.0: "1", 0.0: "0"}.get(float(value), value.lower())
    except ValueError:
        return value.lower()


def _boolean(values: set[str]) -> tuple[str, str] | None:
    """(the value coded 1, the other) of a yes/no-like pair in lower case, else None."""
    return next(((one, zero) for one, zero in BOOLEAN if values == {one, zero}), None)
