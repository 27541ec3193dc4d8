"""Checkpoints, manifests and server answers read within bounds: what `sizes`, `weights` and
`served_by` share.

Every file and answer they read is hostile until checked, as a run folder is (`safe_files`): a
FIFO or a device is refused before it is read (`safe_files.open_input`), no more than a cap of
bytes is read (N + 1 read, more refused), JSON is refused past a depth before it reaches the
parser's recursion and when it holds NaN or Infinity, and each number crawdad uses is checked by
its meaning (a count of layers is a positive integer of sane size) before any arithmetic, so
that no value costs more than a cap (a shape's product stops at `MAX_ELEMENTS`). What breaks a
bound is a `CrawdadError` naming the file (or the server's path) and what is wrong.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from crawdad.errors import CrawdadError
from crawdad.safe_files import open_input, read_input

MAX_JSON_FILE = 16_000_000  # config.json, a safetensors index, an Ollama manifest (real: < 1 MB)
MAX_DEPTH = 64  # JSON nesting (real config.json: 3 or 4)
MAX_ANSWER = 4_000_000  # bytes of /api/show or /version (real: a few KB, a template at most)
ANSWER_SECONDS = 10.0  # the whole answer, first byte to last
MAX_ELEMENTS = 10**15  # of one tensor, and parameters of a model (10x the largest there is)
MAX_BYTES = 10**16  # of a model's weights (10 PB)
GB = 1000**3
MAX_WIDTH = 10_000_000  # layers, heads, a head's or the model's width
MAX_CONTEXT = 100_000_000  # tokens a model may take (the longest today: 10 million)
MAX_TEXT = 200  # characters of a version or a dtype kept


_STRING = re.compile(rb'"(?:[^"\\]++|\\.)*+"', re.DOTALL)
_NOT_BRACKET = bytes(sorted(set(range(256)) - set(b"[]{}")))


def depth_problem(data: bytes, max_depth: int = MAX_DEPTH) -> str | None:
    """Why `data` is nested too deep for JSON crawdad reads (None: it is not), found before any
    parser recurses, at C speed: strings taken out, then the brackets alone, their innermost
    pairs removed once per level (at most `max_depth` passes). Brackets that do not pair are
    left to the parser to refuse."""
    if data.count(b"[") + data.count(b"{") <= max_depth:
        return None
    brackets = _STRING.sub(b"", data).translate(None, _NOT_BRACKET)
    for _ in range(max_depth + 1):
        inner = brackets.replace(b"[]", b"").replace(b"{}", b"")
        if inner == brackets:
            return None
        brackets = inner
    return f"its JSON is nested deeper than {max_depth} levels"


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def loads(data: bytes, what: str, max_depth: int = MAX_DEPTH) -> Any:
    """JSON from `data` (from `what`: a file, a server's path), refused with a CrawdadError when
    too deep, not JSON, or holding NaN or Infinity."""
    if problem := depth_problem(data, max_depth):
        raise CrawdadError(f"{what}: {problem}")
    try:
        return json.loads(data, parse_constant=_no_constant)
    except RecursionError:  # brackets that never close: the parser's own bound
        raise CrawdadError(f"{what}: its JSON is nested deeper than {max_depth} levels") from None
    except ValueError as e:  # UnicodeDecodeError is a ValueError
        raise CrawdadError(f"{what}: cannot be read as JSON ({str(e)[:200]})") from None


def read_json(path: Path, limit: int = MAX_JSON_FILE) -> dict[str, Any]:
    """A JSON object from the regular file `path`, at most `limit` bytes."""
    try:
        data = read_input(path, "file", limit)
    except OSError as e:
        raise CrawdadError(f"{path}: cannot be read ({e.strerror or e})") from None
    found = loads(data, str(path))
    if not isinstance(found, dict):
        raise CrawdadError(f"{path}: not a JSON object")
    return found


@contextlib.contextmanager
def opened(path: Path, what: str) -> Iterator[IO[bytes]]:
    """The regular file `path` open for reading a part of it (`safe_files.open_input`: a FIFO,
    a device or a folder refused); a file that cannot be opened is a CrawdadError naming it."""
    try:
        f = open_input(path, what)
    except OSError as e:
        raise CrawdadError(f"{path}: cannot be read ({e.strerror or e})") from None
    with f:
        yield f


def take(f: IO[bytes], n: int, path: Path, what: str = "header") -> bytes:
    """Exactly `n` bytes of `f` (`n` already checked against a cap)."""
    data = f.read(n)
    if len(data) < n:
        raise CrawdadError(f"{path}: its {what} ends early (a partial download?)")
    return data


def number(value: Any, where: str, key: str, low: int = 1, high: int = MAX_ELEMENTS) -> int | None:
    """`value` as an integer in [low, high] (an integral float counts), None when missing or
    null; anything else (a string, a bool, NaN, a negative or absurd size) refused naming
    `where` and `key`."""
    if type(value) is int and low <= value <= high:  # the common case, first
        return value
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer() and abs(value) <= 2**63:
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and low <= value <= high:
        return value
    shown = repr(value)
    shown = shown if len(shown) <= 40 else shown[:40] + "..."
    raise CrawdadError(
        f"{where}: {key} = {shown} is not a whole number from {low:,} to {high:,}: a damaged or "
        "hand-edited file"
    )


def product(dims: Iterable[Any], where: str, cap: int = MAX_ELEMENTS) -> int:
    """The product of a shape's dimensions, each a whole number >= 0, stopped past `cap` (so a
    shape of a million dimensions costs a million small multiplications, never big numbers)."""
    count = 1
    for i, dim in enumerate(dims):
        size = (
            dim
            if type(dim) is int and 0 <= dim <= cap
            else number(dim, where, f"shape[{i}]", 0, cap)
        )
        if size is None:
            raise CrawdadError(f"{where}: shape[{i}] is null: a damaged file")
        count *= size
        if count > cap:
            raise CrawdadError(f"{where}: its shape holds more than {cap:,} elements")
    return count


def text(value: Any, high: int = MAX_TEXT) -> str | None:
    """A short printable string from a file or an answer (None: not a string, or empty)."""
    if not isinstance(value, str):
        return None
    kept = "".join(c for c in value[:high] if c.isprintable()).strip()
    return kept or None


def read_stream(chunks: Iterable[bytes], what: str, limit: int = MAX_ANSWER) -> bytes:
    """An answer's body from its chunks, at most `limit` bytes and `ANSWER_SECONDS` (checked
    between chunks; each read has the client's own timeout)."""
    data = bytearray()
    deadline = time.monotonic() + ANSWER_SECONDS
    for chunk in chunks:
        data += chunk
        if len(data) > limit:
            raise CrawdadError(f"{what}: answered more than {limit:,} bytes")
        if time.monotonic() > deadline:
            raise CrawdadError(f"{what}: took more than {ANSWER_SECONDS:g} s to answer")
    return bytes(data)
