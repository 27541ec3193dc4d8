"""`servers.jsonl`: its lines (pydantic models, checked by meaning), written and read under the
run folder's rules.

Written through `safe_files.Folder` like every other file of a run folder: appended without
following a link, compacted through a temporary file beside it (never a link either). Bounded
in samples (`MAX_SAMPLES`) and in bytes (`MAX_BYTES`): past either, the file is rewritten
keeping every other sample, and from then on every other sample is written (the stride doubles
each time). A line longer than `MAX_LINE` is summarised (an Ollama server's models left out,
their count kept) or, still too long, dropped and counted.

Read as debates.jsonl is: without following a link (`UnsafePathError` names it), at most
`MAX_BYTES` twice over, line by line. A line that is not JSON, not a line crawdad writes, or
fails the checks (a count that is negative, NaN or a string, a fraction above 1, a null time) is
named in `SeriesRead.problems` and left out; the rest is kept.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from crawdad.safe_files import Folder

SERIES = "servers.jsonl"
MAX_SAMPLES = 4000
MAX_LINE = 64_000  # bytes of one line: a sample of a few servers is ~0.5 KB a server
MAX_BYTES = 32_000_000  # the file, compacted past it (4,000 samples of ~8 KB)
READ_LIMIT = 2 * MAX_BYTES  # what a reader reads of a file someone else may have made


def _whole(value: float) -> int:
    if value != int(value):
        raise ValueError("a count is a whole number")
    return int(value)


# A figure that can be: finite and >= 0 (strict: a string or a bool is no number).
Count = Annotated[float, Field(ge=0, allow_inf_nan=False, strict=True)]
# A whole count (an int, or a float of a whole value as other writers may give): >= 0.
Whole = Annotated[float, Field(ge=0, allow_inf_nan=False, strict=True), AfterValidator(_whole)]
Fraction = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False, strict=True)]
Time = Annotated[float, Field(allow_inf_nan=False, strict=True)]


class _Line(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class ServerFigures(_Line):
    """One server in a sample: the server's figures (`server_metrics.Reading`), crawdad's
    (`in_flight`, `responses`, `tokens`), and the samples of it lost so far this session
    (`lost`: a bound broken, late, unreadable)."""

    kind: Literal["vllm", "sglang", "llamacpp", "ollama"] | None = None
    source: Annotated[str, Field(max_length=64)] | None = None
    running: Count | None = None
    waiting: Count | None = None
    kv_cache: Fraction | None = None
    prefix_queries: Count | None = None
    prefix_hits: Count | None = None
    prefix_hit_rate: Fraction | None = None
    prompt_tokens: Count | None = None
    generation_tokens: Count | None = None
    slots: Whole | None = None
    models: Annotated[dict[str, dict[str, Count]], Field(max_length=256)] | None = None
    models_loaded: Whole | None = None  # the models' count, where they were left out (too long)
    in_flight: Whole | None = None
    responses: Whole | None = None
    tokens: Whole | None = None
    lost: Whole | None = None


class ModelFigures(_Line):
    """crawdad's figures of one model in a sample."""

    in_flight: Whole = 0
    waiting: Whole = 0
    responses: Whole = 0
    tokens: Whole = 0


class SampleLine(_Line):
    at: Time
    t: Time | None = None
    servers: Annotated[dict[str, ServerFigures], Field(max_length=1024)]
    models: Annotated[dict[str, ModelFigures], Field(max_length=1024)] = {}
    debates: Whole | None = None


class NoteLine(_Line):
    note: Annotated[str, Field(max_length=4000)]
    server: Annotated[str, Field(max_length=2000)] = ""
    at: Time | None = None


class SessionLine(_Line):
    session: Time
    every: Count = 0.0


def check_line(raw: bytes | str) -> dict[str, Any] | str:
    """A line of servers.jsonl, checked (None and unknown keys left out), or why it fails."""
    try:
        data = json.loads(raw)
    except ValueError:  # UnicodeDecodeError is one
        return "not JSON"
    if not isinstance(data, dict):
        return "not a JSON object"
    model: type[_Line]
    if "servers" in data:
        model = SampleLine
    elif "note" in data:
        model = NoteLine
    elif "session" in data:
        model = SessionLine
    else:
        return "not a sample, a note or a session"
    try:
        return model.model_validate(data).model_dump(exclude_none=True)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(x) for x in first["loc"])
        value = repr(first.get("input"))
        value = value if len(value) <= 60 else value[:57] + "..."
        return f"{where} = {value}: {first['msg']}"


def dumps(line: dict[str, Any]) -> str:
    """A line as strict JSON (a non-finite number is a bug upstream: refused, not written)."""
    return json.dumps(line, separators=(",", ":"), allow_nan=False) + "\n"


def _summarised(line: dict[str, Any]) -> dict[str, Any]:
    """A sample too long: each server's models left out (their count kept)."""
    servers = {}
    for url, fig in line.get("servers", {}).items():
        fig = dict(fig)
        if "models" in fig:
            fig["models_loaded"] = len(fig.pop("models"))
        servers[url] = fig
    return {**line, "servers": servers}


@dataclass
class SeriesRead:
    """A series file's valid lines, and what was left out (each named, with its line number)."""

    lines: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def iter_raw(f: Any, limit: int, problems: list[str], name: str, start_no: int = 1) -> Any:
    """(line number, bytes) of the complete lines of the open file `f`, at most `limit` bytes
    read, a line longer than `MAX_LINE` skipped and named (never held whole)."""
    read, no = 0, start_no - 1
    while read < limit:
        raw = f.readline(MAX_LINE + 1)
        if not raw:
            return
        read += len(raw)
        no += 1
        if len(raw) > MAX_LINE and not raw.endswith(b"\n"):
            while raw and not raw.endswith(b"\n") and read < limit:  # the rest, in pieces
                raw = f.readline(MAX_LINE + 1)
                read += len(raw)
            problems.append(f"{name} line {no}: longer than {MAX_LINE:,} bytes, left out")
            continue
        yield no, raw
    problems.append(f"{name}: more than {limit:,} bytes, the rest left out")


def load_series(folder: Path | str, root: Path | str | None = None) -> SeriesRead:
    """The folder's servers.jsonl, read without following a link below `root` (default: the
    folder): a link or a FIFO raises `UnsafePathError`; no file: nothing."""
    out = SeriesRead()
    folder = Path(folder)
    with Folder.inside(root if root is not None else folder, folder) as f:
        if not f.is_file(SERIES):
            return out
        with f.open_read(SERIES) as handle:
            for no, raw in iter_raw(handle, READ_LIMIT, out.problems, str(folder / SERIES)):
                if not raw.strip():
                    continue
                if not raw.endswith(b"\n"):
                    continue  # the last line, being written (or cut by a crash)
                line = check_line(raw)
                if isinstance(line, str):
                    out.problems.append(f"{folder / SERIES} line {no}: {line}; left out")
                else:
                    out.lines.append(line)
    return out


def read_series(folder: Path | str, root: Path | str | None = None) -> list[dict[str, Any]]:
    """Every valid line of a folder's servers.jsonl ([] when it has none)."""
    return load_series(folder, root).lines


class SeriesFile:
    """Appends lines to `folder`/servers.jsonl, keeping at most `cap` samples and `max_bytes`
    bytes (see the module's docstring). Opening it refuses a servers.jsonl that is a link
    (`UnsafePathError`), before anything is written."""

    def __init__(self, folder: Path, cap: int = MAX_SAMPLES, max_bytes: int = MAX_BYTES) -> None:
        self.folder = Path(folder)
        self.path = self.folder / SERIES
        self.cap = cap
        self.max_bytes = max_bytes
        self.stride = 1
        self._seen = 0
        self.samples = 0
        self.bytes = 0
        self.dropped = 0  # samples too long to keep, even summarised
        with self._open() as f:
            if f.is_file(SERIES):
                kept = self._read(f)
                self.samples = sum(1 for x in kept if "servers" in x)
                st = f.lstat(SERIES)
                self.bytes = st.st_size if st is not None else 0
                while self.samples >= cap or self.bytes >= max_bytes:  # an earlier session's
                    if not self._compact(f):
                        break

    def _open(self) -> Folder:
        return Folder(self.folder, create=True)

    def _read(self, f: Folder) -> list[dict[str, Any]]:
        with f.open_read(SERIES) as handle:
            return [
                line
                for _, raw in iter_raw(handle, READ_LIMIT, [], SERIES)
                if raw.endswith(b"\n") and not isinstance(line := check_line(raw), str)
            ]

    def append(self, line: dict[str, Any]) -> bool:
        """Write `line` (a sample only at the current stride); False when it was not written."""
        sample = "servers" in line
        if sample:
            self._seen += 1
            if (self._seen - 1) % self.stride:
                return False
        text = dumps(line)
        if len(text) > MAX_LINE and sample:
            text = dumps(_summarised(line))
        if len(text) > MAX_LINE:
            self.dropped += 1
            return False
        data = text.encode()
        with self._open() as f, f.open_append(SERIES) as out:
            out.write(data)
        self.bytes += len(data)
        if sample:
            self.samples += 1
        if self.samples >= self.cap or self.bytes >= self.max_bytes:
            with self._open() as f:
                self._compact(f)
        return True

    def _compact(self, f: Folder) -> bool:
        """Keep every other sample (and every other line); False when nothing could go."""
        kept, n = [], 0
        lines = self._read(f)
        for line in lines:
            if "servers" in line:
                n += 1
                if n % 2 == 0:
                    continue
            kept.append(line)
        text = "".join(dumps(x) for x in kept)
        f.write_text(SERIES, text)
        self.samples = sum(1 for x in kept if "servers" in x)
        self.bytes = len(text.encode())
        self.stride *= 2
        return len(kept) < len(lines)


def finite(value: Any) -> Any:
    """`value` with every float that is not finite replaced by None (for JSON a browser parses)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value
