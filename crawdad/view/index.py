"""An index of run folders for the viewer: per question the byte range of its latest line in
debates.jsonl and the few small fields the filters and sorts need, never the texts.

One streaming pass at start; `refresh` reads only the bytes appended since (a run still writing
its folder), and starts over if the file shrank (the store set a torn tail aside). Every line is
validated as a record, as every reader does: one that fails the checks never reaches the table,
and its debate's page says why.
"""

from __future__ import annotations

import json
import os
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import IO, Any

from crawdad.errors import CrawdadError
from crawdad.records import DebateRecord, ExperimentManifest
from crawdad.run.store import (
    DEBATES,
    MANIFEST,
    InvalidLine,
    is_being_written,
    read_experiment,
    read_line,
    require_run_folder,
)
from crawdad.safe_files import Folder, read_inside
from crawdad.scoring.scored import Accuracy, outcome

# Persuasion outcomes, then the debates that have none: an error, or no exact answer to score.
OUTCOMES = ("C->C", "I->C", "C->I", "I->I", "U->C", "U->I", "error", "unscored")
PERSUASION = OUTCOMES[:-2]


@dataclass(slots=True)
class Entry:
    """What the table needs of one debate (its latest line)."""

    run: str
    qid: str
    offset: int
    length: int
    line_no: int  # 1-based: the order of lines, for "newest first"
    rung: int
    query_type: str
    alignment: str
    protocol: str
    first_speaker: str
    gold: str | None  # None: no exact answer (a table of one's own)
    final_answer: str | None
    outcome: str  # one of OUTCOMES
    consensus: bool
    responses: int
    stop_reasons: frozenset[str]
    errored: bool
    tool_use: bool
    chars: int  # final texts and traces, all turns
    seconds: float
    tokens: int  # completion tokens, all turns
    started_at: str  # ISO text as written ("" if none)
    finished_at: float | None = None  # Unix time, for the live view's rates
    retries: int = 0  # requests retried, all turns (attempts beyond the first)


def outcome_of(first: str | None, final: str | None, gold: str | None, errored: bool) -> str:
    """First speaker's round-0 answer -> the final answer, as analysis.metrics.persuasion names
    it (U: the first answer was not extracted; a final answer not extracted counts as wrong);
    "unscored" for a question without an exact answer."""
    if errored:
        return "error"
    if gold is None:
        return "unscored"
    a = "U" if first is None else ("C" if first == gold else "I")
    return f"{a}->{'C' if final == gold else 'I'}"


def _entry(run: str, raw: dict[str, Any], offset: int, length: int, line_no: int) -> Entry:
    turns = raw.get("turns") or []
    first = next((t for t in turns if t.get("round") == 0), None)
    errored = raw.get("error") is not None
    gold = None if raw.get("gold") is None else str(raw["gold"])
    final = raw.get("final_answer")
    return Entry(
        run=run,
        qid=str(raw["question_id"]),
        offset=offset,
        length=length,
        line_no=line_no,
        rung=int(raw.get("rung") or 0),
        query_type=str(raw.get("query_type") or "-"),
        alignment=str(raw.get("alignment") or "-"),
        protocol=str(raw.get("protocol") or "crawdad"),  # schema 1 lines have no protocol
        first_speaker=str(raw.get("first_speaker") or "-"),
        gold=gold,
        final_answer=final,
        outcome=outcome_of(first.get("answer") if first else None, final, gold, errored),
        consensus=bool(raw.get("consensus")),
        responses=len(turns),
        stop_reasons=frozenset(str(t.get("stop_reason") or "stop") for t in turns),
        errored=errored,
        tool_use=any(t.get("tool_calls") for t in turns),
        chars=sum(len(t.get("text") or "") + len(t.get("thinking") or "") for t in turns),
        seconds=float(raw.get("seconds") or 0.0),
        tokens=sum(int(t.get("completion_tokens") or 0) for t in turns),
        started_at=str(raw.get("started_at") or ""),
        finished_at=_unix(raw.get("finished_at")),
        retries=sum(max(int(t.get("attempts") or 1) - 1, 0) for t in turns),
    )


def _unix(text: object) -> float | None:
    try:
        return datetime.fromisoformat(str(text)).timestamp() if text else None
    except ValueError:
        return None


RECENT = 5000  # the newest debates kept per run for the live view's rates and list


@dataclass(slots=True)
class Tally:
    """A run's counts over the latest line of each question, kept up to date line by line (a
    retried question's earlier line is taken out when its new one comes), so that the live view
    never goes over all the entries again."""

    done: int = 0
    errors: int = 0
    retries: int = 0
    loops: int = 0
    scored: int = 0  # not errored, with an exact answer to score against
    correct: int = 0
    unscored: int = 0  # not errored, without an exact answer: left out of the accuracy

    def add(self, e: Entry, sign: int = 1) -> None:
        self.done += sign
        self.errors += sign * e.errored
        self.retries += sign * e.retries
        self.loops += sign * ("loop" in e.stop_reasons)
        if e.errored:
            return
        got = outcome(e.gold, e.final_answer)  # the one rule: crawdad.scoring.scored
        self.unscored += sign * (got is None)
        self.scored += sign * (got is not None)
        self.correct += sign * (got == 1)

    @property
    def accuracy(self) -> Accuracy:
        return Accuracy(self.correct, self.scored, self.unscored)


@dataclass
class RunIndex:
    """One run folder: its latest line per question, kept up to date by `refresh`."""

    label: str
    path: Path
    entries: dict[str, Entry] = field(default_factory=dict)
    scanned: int = 0  # bytes of debates.jsonl read (up to the end of the last whole line)
    lines: int = 0
    bad_lines: int = 0
    # Question id -> why its line was left out (file, line, field, value), for its page.
    invalid: dict[str, str] = field(default_factory=dict)
    tally: Tally = field(default_factory=Tally)
    # The newest valid lines, in file order (the live view's rates and newest debates).
    recent: deque[Entry] = field(default_factory=lambda: deque(maxlen=RECENT))
    models: dict[str, str] = field(default_factory=dict)  # agent -> model, of the newest line
    # The folder the run folder must stay inside (an experiment's, for a variant): nothing is
    # read through a link below it. None: the run folder itself.
    root: Path | None = None
    # Why the run's debates cannot be read (a debates.jsonl that is a link, a FIFO, ...): the
    # run then shows no debates, and nothing is read through the link.
    problem: str | None = None

    @property
    def debates_path(self) -> Path:
        return self.path / DEBATES

    def _open(self) -> IO[bytes] | None:
        """debates.jsonl, opened without following a link (None when there is none yet)."""
        with Folder.inside(self.root or self.path, self.path) as f:
            return f.open_read(DEBATES) if f.is_file(DEBATES) else None

    def refresh(self) -> bool:
        """Read what was appended since the last call; True if anything changed."""
        try:
            handle = self._open()
        except (OSError, CrawdadError) as e:
            changed = self.problem is None or bool(self.entries)
            self.problem = str(e) if isinstance(e, CrawdadError) else f"{self.path}: {e}"
            self.entries.clear()
            self.invalid.clear()
            self.scanned = self.lines = self.bad_lines = 0
            return changed
        self.problem = None
        if handle is None:
            size = 0
        else:
            with handle:
                size = os.fstat(handle.fileno()).st_size
                return self._read_from(handle, size)
        if size < self.scanned:
            self.entries.clear()
            self.invalid.clear()
            self.scanned = self.lines = self.bad_lines = 0
            return True
        return False

    def _read_from(self, f: IO[bytes], size: int) -> bool:
        if size < self.scanned:  # cut back (a torn tail set aside): start over
            self.entries.clear()
            self.invalid.clear()
            self.recent.clear()
            self.tally = Tally()
            self.scanned = self.lines = self.bad_lines = 0
        if size == self.scanned:
            return False
        f.seek(self.scanned)
        offset = self.scanned
        for line in f:
            if not line.endswith(b"\n"):
                break  # a line still being written: read it next time
            self._add(line, offset)
            offset += len(line)
        self.scanned = offset
        return True

    def _add(self, line: bytes, offset: int) -> None:
        if not line.strip():
            return
        self.lines += 1
        record = read_line(line, self.lines)
        if isinstance(record, InvalidLine):  # left out, as every reader leaves it out
            self.bad_lines += 1
            if record.qid is not None:
                self.invalid[record.qid] = record.describe(self.debates_path)
            return
        try:
            raw = json.loads(line)
            entry = _entry(self.label, raw, offset, len(line), self.lines)
        except (ValueError, KeyError, TypeError, AttributeError):
            self.bad_lines += 1
            return
        old = self.entries.get(entry.qid)
        if old is not None:
            self.tally.add(old, -1)
        self.tally.add(entry)
        self.recent.append(entry)
        agents = raw.get("agents")
        if isinstance(agents, dict):
            self.models = {str(k): str(v) for k, v in agents.items()}
        self.entries[entry.qid] = entry  # the last valid line for a question wins

    def read(self, qid: str) -> tuple[DebateRecord, list[list[dict[str, Any]]]]:
        """The full record of a question (read from disk by offset) and each turn's tool calls."""
        entry = self.entries[qid]
        handle = self._open()
        if handle is None:
            raise FileNotFoundError(f"{self.debates_path} is gone")
        with handle as f:
            f.seek(entry.offset)
            raw = json.loads(f.read(entry.length))
        # Tool calls (issue 13) may not be in this crawdad's Turn model yet: take them apart.
        tools = [list(t.pop("tool_calls", None) or []) for t in raw.get("turns") or []]
        return DebateRecord.model_validate(raw), tools

    @property
    def live(self) -> bool:
        return is_being_written(self.path, self.root)

    def manifest_text(self) -> str | None:
        """The run's manifest.json (never read through a link); None when there is none."""
        data = read_inside(self.path, MANIFEST, root=self.root)
        return None if data is None else data.decode("utf-8")


@dataclass
class Source:
    """A folder given on the command line: one run, or an experiment of several variants."""

    path: Path
    runs: list[RunIndex]
    experiment: ExperimentManifest | None = None


def _started(folder: Path) -> bool:
    return (folder / MANIFEST).exists() or (folder / DEBATES).exists()


def new_variants(sources: list[Source], taken: set[str]) -> list[RunIndex]:
    """The variants of the experiments in `sources` whose folders have appeared since they were
    opened (a running experiment starts them one after another), added to their sources and
    labelled as `open_sources` labels them; `taken` (the labels in use) gets theirs."""
    added: list[RunIndex] = []
    prefix = len(sources) > 1
    for src in sources:
        if src.experiment is None:
            continue
        have = {r.path.name for r in src.runs}
        for name in src.experiment.variants:
            if name in have or not _started(src.path / name):
                continue
            base = f"{src.path.name}/{name}" if prefix else name
            label, n = base, 2
            while label in taken:
                label, n = f"{base}~{n}", n + 1
            taken.add(label)
            run = RunIndex(label, src.path / name, root=src.path)
            order = list(src.experiment.variants)
            src.runs.append(run)
            src.runs.sort(key=lambda r: order.index(r.path.name))
            added.append(run)
    return added


def open_sources(paths: list[Path]) -> list[Source]:
    """Each folder as a Source (experiment folders: one run per variant present, in file order).
    Run labels are unique: a variant is labelled `variant`, or `folder/variant` when several
    folders are given."""
    sources: list[Source] = []
    for path in paths:
        path = Path(path)
        exp = read_experiment(path)
        if exp is None:
            require_run_folder(path)
            sources.append(Source(path, [RunIndex(path.name or str(path), path)]))
            continue
        runs = [
            RunIndex(name, path / name, root=path) for name in exp.variants if _started(path / name)
        ]
        sources.append(Source(path, runs, exp))
    prefix = len(sources) > 1
    seen: set[str] = set()
    for src in sources:
        for run in src.runs:
            label = f"{src.path.name}/{run.label}" if prefix and src.experiment else run.label
            base, n = label, 2
            while label in seen:
                label, n = f"{base}~{n}", n + 1
            seen.add(label)
            run.label = label
    return sources
