"""Run folders -> tidy DataFrames: one row per debate, one row per turn.

`debates.jsonl` is read line by line and each line validated as a `DebateRecord`. The texts and
reasoning traces are reduced to what the analysis needs while streaming (their lengths, and the
VADER score of the text with formatting stripped) and then dropped, so memory stays small.

Rules:
- the LAST valid line per `question_id` wins (an errored debate is retried on resume and a new
  line appended);
- a line that does not parse, or fails the records' checks (a value out of its range: a
  confidence outside 0-1, negative seconds, rung 99, a count that is not a count), is skipped
  with a warning that names the file, the line number, the field and its value (a torn last
  line after a crash is the expected case) and counted in `Run.n_invalid_lines`;
- a debate the run did not ask for is left out and reported: one made with another seed or by
  other agents than the manifest's (records of another run in the same folder), or one for a
  question outside the run's selection (`selected-ids.txt`, when the manifest names it; run
  folders older than that file count every debate, and the report says so);
- a run still being written (another process holds its lock) is analysed as it stands, and
  the report says so;
- agents are keyed by a display label, "name (model)" (just "name" when the two are equal),
  used as the `agent`, `first_agent`, `second_agent` and `final_agent` values everywhere.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any

import pandas as pd
from crawdad.analysis.response_text import SentimentScorer
from pydantic import ValidationError

from crawdad.errors import StoreError, UnsafePathError
from crawdad.records import DebateRecord, RunManifest, ServedBy, invalid_reason, merge_served
from crawdad.run.store import RunStore, is_being_written, read_selected_ids, require_run_folder
from crawdad.safe_files import Folder

__all__ = [
    "DEBATE_COLUMNS",
    "TURN_COLUMNS",
    "Run",
    "agent_label",
    "by_gold",
    "concat",
    "load_run",
    "load_runs",
    "records_to_frames",
]

DEBATES_FILE = "debates.jsonl"
MANIFEST_FILE = "manifest.json"
_ERROR_CHARS = 300  # of an error message kept in the frame
_PARALLEL_BYTES = 32 * 1024 * 1024  # files above this are parsed by several processes

DEBATE_COLUMNS = [
    "run",
    "question_id",
    "rung",
    "query_type",
    "alignment",
    "gold",  # None: the question has no exact answer (a table of one's own); never scored
    "first_agent",
    "second_agent",
    "n_turns",
    "initial_answer",
    "initial_confidence",
    "final_answer",
    "final_confidence",
    "final_agent",
    "consensus",
    "end",
    "errored",
    "error",
    "seconds",
    "simulated",
    # protocols (record schema 2; schema-1 records are crawdad-protocol records)
    "protocol",
    "prompt_set",
    "judge",
    "tie",
    "agents",  # tuple of agent labels, config order
    "speaking_order",  # tuple of agent labels ([] for schema 1)
    "agent_answers",  # tuple of (agent label, answer) pairs, hashable
    "stances",  # whether debaters were assigned sides (judge protocol)
]
TURN_COLUMNS = [
    "run",
    "question_id",
    "round",
    "agent",
    "role",
    "answer",
    "confidence",
    "text_chars",
    "thinking_chars",
    "sentiment",
    "seconds",
    "server_seconds",
    "completion_tokens",
    "stop_reason",
    "extraction",
    "errored",
    "rung",
    "gold",
    # protocols and cost
    "protocol",
    "turn_index",  # position in the record's turns
    "stance",
    "sample",
    "seen",  # tuple of turn indices shown (None: every earlier turn, schema 1)
    "followup",  # the judge asked a follow-up question
    "prompt_tokens",
    "attempts",
    "extractor_called",  # the extractor model was asked about this response
    "extractor_prompt_tokens",
    "extractor_completion_tokens",
    "extractor_seconds",
    # step scoring: (graph, query_type, numbers, value, first_wrong), None when not scored
    "steps",
]


def agent_label(name: str, model: str | None) -> str:
    """The label an agent is shown and keyed by: "name (model)", or "name" if they are equal."""
    if not model or model == name:
        return name
    return f"{name} ({model})"


@dataclass
class Run:
    """One run folder, loaded."""

    label: str
    path: Path
    manifest: RunManifest | None
    debates: pd.DataFrame
    turns: pd.DataFrame
    n_lines: int = 0  # non-blank lines read
    n_invalid_lines: int = 0  # skipped because they did not parse
    n_superseded: int = 0  # valid lines replaced by a later line for the same question
    n_other_settings: int = 0  # left out: made with another seed or by other agents
    n_outside_selection: int = 0  # left out: questions the run did not select
    live: bool = False  # another process was still writing the run when it was loaded
    warnings: list[str] = field(default_factory=list)
    # The folders of a run made in shards (one process per `--range`), pooled as one run by
    # `crawdad.analysis.shards.pool_shards`; empty for a run of one folder.
    shards: list[Path] = field(default_factory=list)
    # The folder the run folder must stay inside (an experiment's, for a variant): nothing is
    # read through a link below it. None: the run folder itself.
    root: Path | None = None

    @property
    def folders(self) -> list[Path]:
        """The run folders this run's records come from."""
        return self.shards or [self.path]

    def manifests(self) -> list[RunManifest]:
        """The manifest of every folder of the run (one per shard of a pooled run)."""
        found = [_read_manifest(p) for p in self.shards] if self.shards else [self.manifest]
        return [m for m in found if m is not None]

    def n_selected(self) -> int | None:
        """How many questions the run selected: over its shards, the sum of theirs."""
        counts = [m.dataset.n_selected for m in self.manifests()]
        return sum(counts) if counts else None

    def served(self) -> dict[str, list[ServedBy]]:
        """Role -> what served it (each server and model build once), over every folder of the
        run: a cluster's shards may have been answered by different servers."""
        out: dict[str, list[ServedBy]] = {}
        for m in self.manifests():
            out = merge_served(out, m.served)
        return out

    def records(self) -> list[DebateRecord]:
        """The records of the debates this run kept (latest line per question), from every
        folder of the run."""
        ids = set(self.debates["question_id"].astype(str)) if len(self.debates) else set()
        return [
            r
            for folder in self.folders
            for r in RunStore(folder, self.root if folder == self.path else None).records()
            if str(r.question_id) in ids
        ]

    def scored(self) -> Run:
        """The run's debates over questions with an exact answer (all of them, for CLadder's
        own): what every score is computed over."""
        debates, turns = by_gold(self.debates, self.turns)
        return replace(self, debates=debates, turns=turns)

    def unscored(self) -> Run:
        """The run's debates over questions without an exact answer (`gold` null: a table of
        one's own, schema 7): answered, but nothing can score them."""
        debates, turns = by_gold(self.debates, self.turns, known=False)
        return replace(self, debates=debates, turns=turns)

    @property
    def simulated(self) -> bool:
        if self.manifest is not None and self.manifest.simulated:
            return True
        return bool(self.debates["simulated"].any()) if len(self.debates) else False


# --- one record -> rows -------------------------------------------------------------------------


def _steps_cell(steps: Any) -> tuple[Any, ...] | None:
    if steps is None or steps.scores is None:
        return None
    sc = steps.scores
    return (sc.graph, sc.query_type, sc.numbers, sc.value, sc.first_wrong)


NO_RUNG = 0  # the rung column of an item that has none (another task than CLadder's questions)


def _rung(rec: DebateRecord) -> int:
    return rec.rung if rec.rung is not None else NO_RUNG


def _debate_rows(rec: DebateRecord, scorer: SentimentScorer) -> tuple[tuple[Any, ...], list[tuple]]:
    """(debate row, turn rows) of one record, without the `run` column."""

    def label(name: str, model: str | None = None) -> str:
        return agent_label(name, rec.agents.get(name, model))

    qid = str(rec.question_id)
    turns = []
    for i, t in enumerate(rec.turns):
        x = t.extraction
        called = x is not None and (
            x.seconds > 0 or x.prompt_tokens is not None or x.completion_tokens is not None
        )
        turns.append(
            (
                qid,
                t.round,
                label(t.agent, t.model),
                t.role,
                t.answer,
                t.confidence,
                len(t.text),
                len(t.thinking),
                scorer.score(t.text),
                t.seconds,
                t.server_seconds,
                t.completion_tokens,
                t.stop_reason,
                t.extraction.method if t.extraction is not None else None,
                t.error is not None,
                _rung(rec),
                rec.gold,
                rec.protocol,
                i,
                t.stance,
                t.sample,
                tuple(t.seen) if t.seen is not None else None,
                t.followup is not None,
                t.prompt_tokens,
                t.attempts,
                called,
                x.prompt_tokens if x is not None else None,
                x.completion_tokens if x is not None else None,
                x.seconds if x is not None else 0.0,
                _steps_cell(t.steps),
            )
        )
    # The first answer (the pipeline's first turn writes a task, not an answer: its step 3).
    first = next(
        (t for t in rec.turns if t.role != "task" and (t.round == 0 or rec.protocol == "pipeline")),
        None,
    )
    last = rec.turns[-1] if rec.turns else None
    debate = (
        qid,
        _rung(rec),
        rec.query_type,
        rec.alignment,
        rec.gold,
        label(rec.first_speaker) if rec.first_speaker is not None else None,
        label(rec.second_speaker) if rec.second_speaker is not None else None,
        len(rec.turns),
        first.answer if first is not None else None,
        first.confidence if first is not None else None,
        rec.final_answer,
        rec.final_confidence,
        label(last.agent, last.model) if last is not None else None,
        rec.consensus,
        rec.end,
        rec.error is not None,
        rec.error[:_ERROR_CHARS] if rec.error is not None else None,
        rec.seconds,
        rec.simulated,
        rec.protocol,
        rec.prompt_set,
        rec.judge,
        rec.tie,
        tuple(label(n) for n in rec.agents),
        tuple(label(n) for n in rec.speaking_order),
        tuple((label(n), a) for n, a in rec.agent_answers.items()),
        any(t.stance is not None or t.side is not None for t in rec.turns),
    )
    return debate, turns


def records_to_frames(
    records: Iterable[DebateRecord], run: str = "run"
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Records (already de-duplicated) -> (debates, turns) frames. Handy for tests and notebooks."""
    scorer = SentimentScorer()
    debates, turns = [], []
    for rec in records:
        d, ts = _debate_rows(rec, scorer)
        debates.append(d)
        turns.extend(ts)
    return _frames(run, debates, turns)


def _frames(
    run: str, debates: list[tuple], turns: list[tuple]
) -> tuple[pd.DataFrame, pd.DataFrame]:
    d = pd.DataFrame.from_records(debates, columns=DEBATE_COLUMNS[1:])
    t = pd.DataFrame.from_records(turns, columns=TURN_COLUMNS[1:])
    d.insert(0, "run", run)
    t.insert(0, "run", run)
    d = d.astype(
        {
            "rung": "int64",
            "n_turns": "int64",
            "initial_confidence": "float64",
            "final_confidence": "float64",
            "consensus": "bool",
            "errored": "bool",
            "seconds": "float64",
            "simulated": "bool",
            "tie": "bool",
            "stances": "bool",
        }
    )
    t = t.astype(
        {
            "round": "int64",
            "confidence": "float64",
            "text_chars": "int64",
            "thinking_chars": "int64",
            "sentiment": "float64",
            "seconds": "float64",
            "server_seconds": "float64",
            "completion_tokens": "float64",
            "errored": "bool",
            "rung": "int64",
            "turn_index": "int64",
            "sample": "float64",
            "followup": "bool",
            "prompt_tokens": "float64",
            "attempts": "int64",
            "extractor_called": "bool",
            "extractor_prompt_tokens": "float64",
            "extractor_completion_tokens": "float64",
            "extractor_seconds": "float64",
        }
    )
    return d, t


# --- streaming the file -------------------------------------------------------------------------


@dataclass
class _Parsed:
    offset: int  # byte offset of the line: the order of lines in the file
    qid: str | None = None
    seed: int = 0
    agents: dict[str, str] = field(default_factory=dict)
    debate: tuple | None = None
    turns: list[tuple] | None = None
    problem: str | None = None  # why the line was skipped
    torn: bool = False  # the line is the file's last and has no newline


@dataclass(frozen=True)
class _Source:
    """A file of a run folder, opened without following a link below `root` (the run folder, or
    the experiment folder above a variant's): a link leaving it, a FIFO or a device is refused
    before it is opened, with a message naming it. Picklable, for the parsing processes."""

    root: Path
    folder: Path
    name: str

    @property
    def path(self) -> Path:
        return self.folder / self.name

    def open(self) -> IO[bytes]:
        with Folder.inside(self.root, self.folder) as f:
            return f.open_read(self.name)


def _iter_lines(src: _Source, start: int, end: int) -> Iterator[tuple[int, bytes]]:
    """Lines whose first byte lies in [start, end) (a line straddling `start` belongs before)."""
    with src.open() as f:
        if start > 0:
            f.seek(start - 1)
            if f.read(1) != b"\n":
                f.readline()  # the rest of a line that began in the previous chunk
        pos = f.tell()
        while pos < end:
            line = f.readline()
            if not line:
                break
            yield pos, line
            pos += len(line)


def _parse_chunk(src: _Source, start: int, end: int) -> list[_Parsed]:
    scorer = SentimentScorer()
    out = []
    for offset, raw in _iter_lines(src, start, end):
        if not raw.strip():
            continue
        torn = not raw.endswith(b"\n")
        try:
            rec = DebateRecord.model_validate_json(raw)
        except ValidationError as e:
            out.append(_Parsed(offset, problem=invalid_reason(e), torn=torn))
            continue
        debate, turns = _debate_rows(rec, scorer)
        out.append(
            _Parsed(
                offset, qid=debate[0], seed=rec.seed, agents=rec.agents, debate=debate, turns=turns
            )
        )
    return out


def _line_numbers(src: _Source, offsets: Iterable[int]) -> dict[int, int]:
    """The 1-based line number of each line starting at these byte offsets (read only when
    some line was skipped, to name it)."""
    out: dict[int, int] = {}
    pos = newlines = 0
    with src.open() as f:
        for offset in sorted(set(offsets)):
            while pos < offset:
                block = f.read(min(1 << 20, offset - pos))
                if not block:
                    break
                newlines += block.count(b"\n")
                pos += len(block)
            out[offset] = newlines + 1
    return out


def _chunks(size: int, n: int) -> list[tuple[int, int]]:
    step = -(-size // n)
    return [(i, min(i + step, size)) for i in range(0, size, step)]


def _parse_file(src: _Source, workers: int) -> list[_Parsed]:
    with src.open() as f:
        size = os.fstat(f.fileno()).st_size
    if workers <= 1 or size < _PARALLEL_BYTES:
        return _parse_chunk(src, 0, size)
    spans = _chunks(size, workers)
    with ProcessPoolExecutor(max_workers=workers) as pool:
        parts = list(pool.map(_parse_chunk, [src] * len(spans), *zip(*spans, strict=True)))
    return [p for part in parts for p in part]


def _default_workers() -> int:
    return max(1, min(4, os.cpu_count() or 1))


def _manifest_agents(config: dict[str, Any]) -> dict[str, str] | None:
    """Agent name -> model from a dumped config (a list of agent tables, or a plain mapping)."""
    agents = config.get("agents")
    if isinstance(agents, dict):
        return {str(k): str(v) for k, v in agents.items()}
    if isinstance(agents, list) and all(isinstance(a, dict) and "name" in a for a in agents):
        return {str(a["name"]): str(a.get("model")) for a in agents}
    return None


def _read_manifest(path: Path, root: Path | None = None) -> RunManifest | None:
    """The run folder's manifest (None when there is none; a link is refused, never followed)."""
    with Folder.inside(root or path, path) as f:
        if f.lstat(MANIFEST_FILE) is None:
            return None
    try:
        return RunStore(path, root).read_manifest()
    except UnsafePathError:
        raise
    except StoreError as e:
        raise StoreError(
            f"{e}. Restore it (e.g. from a backup) to analyse this run; `crawdad run --force` "
            "with the run's own command writes a new one"
        ) from None


def _other_settings(
    latest: dict[str, _Parsed], manifest: RunManifest | None, dpath: Path
) -> tuple[set[str], list[str]]:
    """Question ids whose debate was made with another seed or other agents, and why."""
    if manifest is None:
        seeds = sorted({p.seed for p in latest.values()})
        if len(seeds) > 1:
            counts = ", ".join(
                f"seed {s}: {sum(p.seed == s for p in latest.values())}" for s in seeds
            )
            raise StoreError(
                f"{dpath} holds debates made with several seeds ({counts}) and there is no "
                f"{MANIFEST_FILE} to say which run is this one. Restore the manifest, or move "
                "the other run's lines to a folder of their own"
            )
        return set(), []
    out: set[str] = set()
    why: list[str] = []
    seed = manifest.config.get("seed")
    if isinstance(seed, int):
        other = {q for q, p in latest.items() if p.seed != seed}
        if other:
            others = ", ".join(str(s) for s in sorted({latest[q].seed for q in other}))
            why.append(
                f"{dpath}: {len(other)} debate(s) were made with seed {others}, not the run's "
                f"seed {seed} (another run's records in this folder); they are left out"
            )
            out |= other
    agents = _manifest_agents(manifest.config)
    if agents is not None:
        other = {q for q, p in latest.items() if p.agents != agents and q not in out}
        if other:
            theirs = sorted(
                {", ".join(f"{k}={v}" for k, v in latest[q].agents.items()) for q in other}
            )
            mine = ", ".join(f"{k}={v}" for k, v in agents.items())
            why.append(
                f"{dpath}: {len(other)} debate(s) were made by other agents ({'; '.join(theirs)}) "
                f"than the run's ({mine}); they are left out"
            )
            out |= other
    return out, why


def _outside_selection(
    latest: dict[str, _Parsed], manifest: RunManifest | None, path: Path, root: Path | None
) -> tuple[set[str], list[str]]:
    """Question ids the run did not select, and what was said about the selection."""
    if manifest is None:
        return set(), []
    ids_file = manifest.dataset.ids_file
    if ids_file is None:
        return set(), [
            f"{path / MANIFEST_FILE} does not list the run's selected questions (made before "
            "crawdad kept them): the selection is unknown, every debate is counted"
        ]
    try:
        selected = read_selected_ids(path, ids_file, root)
    except UnsafePathError as e:
        return set(), [f"{e}. Its selection is unknown, every debate is counted"]
    if selected is None:
        return set(), [
            f"{path / ids_file} cannot be read: the selection is unknown, every debate is counted"
        ]
    outside = set(latest) - selected
    if not outside:
        return set(), []
    shown = ", ".join(sorted(outside, key=lambda q: (len(q), q))[:10])
    more = ", ..." if len(outside) > 10 else ""
    return outside, [
        f"{path / DEBATES_FILE}: {len(outside)} debate(s) are for questions not in the run's "
        f"selection ({len(selected)} questions in {ids_file}): {shown}{more}; they are left out"
    ]


def load_run(
    path: Path | str,
    label: str | None = None,
    *,
    workers: int | None = None,
    root: Path | str | None = None,
) -> Run:
    """Load one run folder (`manifest.json` + `debates.jsonl`). `root`: a folder above it that
    it must stay inside (an experiment's, for a variant's run folder).

    Its files are read without following a link: a `manifest.json` or `debates.jsonl` that is a
    link (to anywhere), a FIFO or a device, or a run folder below `root` that is a link, is
    refused with a message naming it, and nothing is read through it.

    Raises `StoreError` (a message for the user) when the folder is not a run, has no debates,
    or its manifest is damaged.
    """
    path = Path(path)
    root = Path(root) if root is not None else None
    if root is not None and path.is_symlink():  # refused before anything is read through it
        with Folder.inside(root, path):
            pass
    require_run_folder(path)
    label = label or path.resolve().name
    problems: list[str] = []
    manifest = _read_manifest(path, root)
    if manifest is None:
        problems.append(f"{path / MANIFEST_FILE} is missing: run settings unknown")
    else:
        problems += [f"{path / MANIFEST_FILE}: {note}" for note in manifest.notes]
    live = is_being_written(path, root)
    src = _Source(root or path, path, DEBATES_FILE)
    dpath = src.path
    with Folder.inside(src.root, path) as f:
        there = f.is_file(DEBATES_FILE)  # a link, a FIFO or a device: refused, never opened
    if not there:
        state = "is still starting" if live else "has no debates yet"
        raise StoreError(f"{path} {state} ({DEBATES_FILE} is missing): nothing to analyse")

    parsed = _parse_file(src, workers if workers is not None else _default_workers())
    latest: dict[str, _Parsed] = {}
    n_invalid = n_superseded = 0
    bad = [p.offset for p in parsed if p.problem is not None]
    line_no = _line_numbers(src, bad) if bad else {}
    for p in parsed:  # in file order
        if p.problem is not None:
            n_invalid += 1
            where = "torn last line" if p.torn else "invalid line"
            if live and p.torn:
                where = "last line, still being written,"
            problems.append(
                f"{dpath} line {line_no[p.offset]}: skipped {where}, left out of the analysis "
                f"({p.problem})"
            )
            continue
        assert p.qid is not None
        if p.qid in latest:
            n_superseded += 1
        latest[p.qid] = p  # last line wins
    if not latest:
        raise StoreError(
            f"{path} has no readable debates yet ({DEBATES_FILE} has {n_invalid} unreadable "
            "line(s) and no others): nothing to analyse"
        )
    other, why = _other_settings(latest, manifest, dpath)
    outside, said = _outside_selection(latest, manifest, path, root)
    outside -= other
    problems += why + said
    if live:
        problems.insert(
            0,
            f"this run was still being written when analysed: {len(latest)} debates so far "
            f"({path})",
        )
    for msg in problems:
        warnings.warn(msg, stacklevel=2)

    # In question order, not the order the debates finished: every sum, mean and resampled CI
    # is then a function of the records alone, whatever order their lines were written in.
    kept = sorted(
        (p for q, p in latest.items() if q not in other and q not in outside),
        key=lambda p: _id_key(p.qid),
    )
    debates = [p.debate for p in kept if p.debate is not None]
    turns = [t for p in kept for t in (p.turns or [])]
    d, t = _frames(label, debates, turns)
    return Run(
        label=label,
        path=path,
        manifest=manifest,
        debates=d,
        turns=t,
        n_lines=len(parsed),
        n_invalid_lines=n_invalid,
        n_superseded=n_superseded,
        n_other_settings=len(other),
        n_outside_selection=len(outside),
        live=live,
        warnings=problems,
        root=root,
    )


def _id_key(qid: str | None) -> tuple[int, int, str]:
    """Question ids in their natural order: numbers by value, then other ids as text."""
    text = str(qid)
    return (0, int(text), "") if text.isdigit() else (1, 0, text)


def _unique_labels(paths: Sequence[Path]) -> list[str]:
    names = [p.resolve().name for p in paths]
    labels = []
    for p, name in zip(paths, names, strict=True):
        label = name
        if names.count(name) > 1:
            label = f"{p.resolve().parent.name}/{name}"
        while label in labels:
            label += "'"
        labels.append(label)
    return labels


def load_runs(
    paths: Sequence[Path | str], *, workers: int | None = None, root: Path | str | None = None
) -> list[Run]:
    """Load several run folders; each gets a unique label (its folder name, made unique).
    `root`: a folder they must all stay inside (an experiment's)."""
    ps = [Path(p) for p in paths]
    return [
        load_run(p, label, workers=workers, root=root)
        for p, label in zip(ps, _unique_labels(ps), strict=True)
    ]


def by_gold(
    debates: pd.DataFrame, turns: pd.DataFrame, known: bool = True
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The debates, and their turns, over questions with an exact answer (`known`) or without
    one (a table of one's own: `gold` null, in both frames)."""
    keep_d, keep_t = debates["gold"].notna() == known, turns["gold"].notna() == known
    if bool(keep_d.all()) and bool(keep_t.all()):
        return debates, turns
    return debates[keep_d].reset_index(drop=True), turns[keep_t].reset_index(drop=True)


def concat(runs: Sequence[Run]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """All runs' debates and turns in two frames (the `run` column tells them apart, so no two
    runs may share a label: that would merge them)."""
    labels = [r.label for r in runs]
    twice = sorted({x for x in labels if labels.count(x) > 1})
    if twice:
        raise ValueError(f"runs must have unique labels; {', '.join(map(repr, twice))} is not")
    d = pd.concat([r.debates for r in runs], ignore_index=True)
    t = pd.concat([r.turns for r in runs], ignore_index=True)
    return d, t
