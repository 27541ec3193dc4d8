"""The run folder: manifest.json, append-only debates.jsonl, resume.

Every finished debate is one line of debates.jsonl, written and fsynced as it finishes; the file is
only ever appended to. A crash mid-write leaves at most a torn last line, which the next open
moves to debates.torn.jsonl. A debate recorded with an error is retried on resume and its new
line supersedes the old one (the last line for a question wins).

A whole line that fails the records' checks (a value out of its range, a field of the wrong type)
is never moved or rewritten: resume names it, keeps it in place and does not run its question
again (a finished debate is never traded for a check); the readers leave it out.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, Literal

from pydantic import ValidationError

from crawdad.config import SelectionConfig, diff_settings, normalized_config, result_settings
from crawdad.errors import CrawdadError, StoreError, StoreWriteError, UnsafePathError
from crawdad.records import (
    DatasetInfo,
    DebateRecord,
    ExperimentManifest,
    RunManifest,
    SelectionChange,
    ServedBy,
    StopChange,
    gpu_seconds,
    invalid_reason,
    merge_served,
)
from crawdad.safe_files import Folder, plain_name_problem, read_inside
from crawdad.scoring.scored import outcome

log = logging.getLogger("crawdad")

MANIFEST = "manifest.json"
DEBATES = "debates.jsonl"
TORN = "debates.torn.jsonl"
EXPERIMENT = "experiment.json"  # an experiment folder's manifest; its variants are run folders
LOCK = ".lock"
IDS = "selected-ids.txt"  # the run's selected question ids, one per line


@dataclass(frozen=True)
class InvalidLine:
    """A line of debates.jsonl that is not a valid record: where, which question (when its
    JSON tells), whether it records a failed debate, its seed, and why it fails."""

    line_no: int  # 1-based
    why: str
    qid: str | None = None  # None: not a JSON object with a question id
    errored: bool = False  # the line itself records an error
    seed: int | None = None

    def describe(self, path: Path) -> str:
        which = f" (question {self.qid})" if self.qid is not None else ""
        return f"{path} line {self.line_no}{which} fails the record checks: {self.why}"


def read_line(line: bytes, line_no: int) -> DebateRecord | InvalidLine:
    """One line of debates.jsonl as a record, or what is wrong with it."""
    try:
        return DebateRecord.model_validate_json(line)
    except ValidationError as e:
        why = invalid_reason(e)
    try:
        raw = json.loads(line)
    except ValueError:  # not JSON (UnicodeDecodeError is one)
        return InvalidLine(line_no, why)
    qid = raw.get("question_id") if isinstance(raw, dict) else None
    if not isinstance(qid, int | str) or isinstance(qid, bool):
        return InvalidLine(line_no, why)
    seed = raw.get("seed", 0)
    return InvalidLine(
        line_no,
        why,
        qid=str(qid),
        errored=raw.get("error") is not None,
        seed=seed if isinstance(seed, int) and not isinstance(seed, bool) else None,
    )


@dataclass
class Scan:
    """What debates.jsonl holds: the latest state per question, without keeping the records."""

    finished: set[str] = field(default_factory=set)  # question ids whose latest line has no error
    errored: dict[str, str] = field(default_factory=dict)  # question id -> error of latest line
    lines: int = 0
    correct: int = 0  # finished debates whose final answer matches the gold answer
    consensus: int = 0
    # The same two figures by question id, so that a caller can count them over its selection.
    correct_ids: set[str] = field(default_factory=set)
    consensus_ids: set[str] = field(default_factory=set)
    unscored_ids: set[str] = field(default_factory=set)  # finished, no exact answer to score
    # Question id -> the GPU seconds of its latest line, finished or failed
    # (`crawdad.records.gpu_seconds`: what a stopping rule's `max_gpu_seconds` counts).
    gpu_seconds: dict[str, float] = field(default_factory=dict)
    bad_lines: list[int] = field(default_factory=list)  # unparseable lines kept in place (1-based)
    other_seed: dict[str, int] = field(default_factory=dict)  # question id -> seed of its line
    # Question id -> (line number, why) of a finished debate whose latest line fails the
    # records' checks: kept in place, counted finished (not run again), left out of analysis.
    held: dict[str, tuple[int, str]] = field(default_factory=dict)

    def questions(self) -> set[str]:
        """Every question id the folder has a (latest) line for, finished or failed."""
        return self.finished | set(self.errored)


def make_writable_folder(folder: Path) -> None:
    """Make `folder` and write a file in it: a folder that cannot take files fails here (OSError),
    before any work, not halfway through it (a link where the probe goes: UnsafePathError)."""
    with Folder(folder) as f:
        f.check_writable()


def manifest_differences(old: RunManifest, new: RunManifest) -> list[str]:
    old_config = normalized_config(old.config, old.schema_version)
    diffs = diff_settings(result_settings(old_config), result_settings(new.config), "config")
    old_prompts = old.prompts
    new_prompts = new.prompts
    if old.schema_version < 2:  # schema 1 listed the five templates of the paper protocol only
        new_prompts = {k: v for k, v in new_prompts.items() if k in old_prompts}
    prompt_diffs = diff_settings(old_prompts, new_prompts, "prompts")
    if prompt_diffs and old.schema_version < 2 and new.config.get("prompt_set") != "crawdad-v1":
        prompt_diffs.append(
            "prompt_set: this folder was made by crawdad 0.1; resume it with "
            "--set prompt_set=crawdad-v1 (its prompts), or start a new --out folder"
        )
    diffs += prompt_diffs
    if old.dataset.sha256 != new.dataset.sha256:
        diffs.append(
            f"dataset: {old.dataset.questions_file} ({old.dataset.sha256[:12]}) -> "
            f"{new.dataset.questions_file} ({new.dataset.sha256[:12]})"
        )
    return diffs


def _rule_settings(stop: dict[str, Any] | None) -> dict[str, Any] | None:
    """A recorded rule with every setting spelled out (an older crawdad's rule lacks the keys
    added since, at their defaults; a rule recorded before targets was about the run, so its
    missing `target` is "run", not today's default, and one recorded before methods was decided
    by its sequence's edges, `method` "cs"), so that the same rule compares equal."""
    if stop is None:
        return None
    from crawdad.stopping.decide import Rule  # numpy: only where a rule is recorded

    try:
        rule = Rule.model_validate({"target": "run", "method": "cs", **stop})
    except ValidationError:
        return dict(stop)
    settings = rule.model_dump(mode="json")
    if rule.target == "run":  # the run's target is decided by its sequence, whatever the method
        settings["method"] = "cs"
    return settings


def stop_differences(old: dict[str, Any] | None, new: dict[str, Any] | None) -> list[str]:
    """How a run's (or an experiment's) stopping rule would change: `[]` when it would not. A
    stopping rule is part of what a run is: its guarantee holds for a rule fixed before any
    result was seen, so a resume may not change it without --force."""
    before, after = _rule_settings(old), _rule_settings(new)
    if before == after:
        return []
    if before is None or after is None:
        shown = ", ".join(f"{k}={v}" for k, v in (before or after or {}).items() if v is not None)
        what = f"no rule -> {shown}" if before is None else f"{shown} -> no rule"
        return [f"stop: {what}"]
    return diff_settings(before, after, "stop")


def selection_identity(dataset: DatasetInfo, seed: Any) -> dict[str, Any]:
    """What a stopped run's questions are, as its identity: the questions file and its sha256,
    the selection (rungs, filters, sample, limit, order), the seed that draws the order, and
    the questions selected."""
    return {
        "questions_file": dataset.questions_file,
        "sha256": dataset.sha256,
        "selection": _full_selection(dataset.selection),
        "seed": seed,
        "selected": dataset.n_selected,
    }


def _full_selection(selection: dict[str, Any]) -> dict[str, Any]:
    """A recorded selection with its defaults spelled out, so that the same one compares equal."""
    try:
        return SelectionConfig.model_validate(selection).model_dump(mode="json")
    except ValidationError:
        return dict(selection)


def selection_differences(old: dict[str, Any] | None, new: dict[str, Any] | None) -> list[str]:
    """How a stopped run's questions would change (`selection_identity`): `[]` when they would
    not, or when the old ones were never recorded. Decisions hold at their stated level only for
    questions fixed before any was seen: a resume may not change them without --force."""
    if old is None or new is None:
        return []
    before = {**old, "selection": _full_selection(old.get("selection") or {})}
    after = {**new, "selection": _full_selection(new.get("selection") or {})}
    return diff_settings(before, after, "questions") if before != after else []


def changed_selection_history(
    history: list[SelectionChange],
    old: dict[str, Any] | None,
    since: datetime,
    new: dict[str, Any] | None,
    finished: int,
) -> list[SelectionChange]:
    """The selections a stopped experiment went through once `new` replaces `old` after
    `finished` questions (the first, from question 0, put first where the history is empty)."""
    earlier = list(history) or [SelectionChange(selection=old, from_question=0, at=since)]
    return [*earlier, SelectionChange(selection=new, from_question=finished, at=datetime.now(UTC))]


def selection_change_note(history: list[SelectionChange]) -> str:
    """The note a manifest keeps of questions changed by --force."""
    return (
        f"the questions of a stopped run were changed by --force after "
        f"{history[-1].from_question} finished question(s); decisions made on questions changed "
        "after results were seen no longer carry their stated guarantee (see selection_history)"
    )


def changed_stop_history(
    history: list[StopChange],
    old: dict[str, Any] | None,
    since: datetime,
    new: dict[str, Any] | None,
    finished: int,
) -> list[StopChange]:
    """The rules a run went through once `new` replaces `old` after `finished` questions: the
    first rule (from question 0, at `since`) is put first where the history is still empty."""
    earlier = list(history) or [StopChange(rule=old, from_question=0, at=since)]
    return [*earlier, StopChange(rule=new, from_question=finished, at=datetime.now(UTC))]


def stop_change_note(history: list[StopChange]) -> str:
    """The note a manifest keeps of a rule changed by --force."""
    last = history[-1]
    return (
        f"the stopping rule was changed by --force after {last.from_question} finished "
        "question(s); a rule changed after results were seen no longer carries its stated "
        "guarantee (see stop_history)"
    )


class RunStore:
    """A run folder. `root`: the folder it must stay inside (an experiment's folder for a
    variant's run folder); by default the run folder itself. Every file in it is opened without
    following a link, and no folder between `root` and the run folder may be a link."""

    def __init__(self, path: Path, root: Path | None = None) -> None:
        self.path = Path(path)
        self.root = Path(root) if root is not None else self.path
        self._parts = self.path.relative_to(self.root).parts
        self._dir: Folder | None = None
        self._file: IO[bytes] | None = None
        self._lock: IO[bytes] | None = None

    @contextlib.contextmanager
    def _folder(self) -> Iterator[Folder]:
        """The run folder, opened without following links below `root` (the open store's own
        while it is open)."""
        if self._dir is not None:
            yield self._dir
            return
        with Folder(self.root, *self._parts, create=False) as f:
            yield f

    @property
    def debates_path(self) -> Path:
        return self.path / DEBATES

    # --- opening ---------------------------------------------------------------------------

    def open(self, manifest: RunManifest, force: bool = False) -> Scan:
        """Create or resume the run folder; return what is already in it.

        A folder whose debates.jsonl has records but whose manifest is missing or damaged is not
        resumed unless `force`: its records' settings are unknown. With `force` a new manifest is
        written, noting what it replaced (a damaged one is kept beside it).
        """
        self._make_folder()
        try:
            self._take_lock()
            manifest = self._settle_manifest(manifest, force)
            scan = self.scan(seed=_seed_of(manifest))
            # Unbuffered: a failed write leaves nothing behind in a buffer to be flushed later.
            assert self._dir is not None
            self._file = self._dir.open_append(DEBATES, buffering=0)
        except CrawdadError:
            self.close()
            raise
        except OSError as e:  # a full disk while writing the manifest or setting a tail aside
            self.close()
            raise StoreWriteError(self.write_failure(e, MANIFEST)) from None
        return scan

    def _settle_manifest(self, manifest: RunManifest, force: bool) -> RunManifest:
        """The manifest the run goes on under, written to disk; the selected ids file too."""
        assert self._dir is not None
        now = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
        if self._dir.is_file(MANIFEST):
            try:
                old = self.read_manifest()
            except StoreError as e:
                if not force:
                    raise StoreError(f"{e}. {self._choices()}") from None
                aside = f"manifest.damaged.{now}.json"
                self._dir.rename(MANIFEST, aside)
                return self._write_new(
                    manifest, f"manifest.json was damaged (kept as {aside}); replaced by --force"
                )
            stop_diffs = stop_differences(old.stop, manifest.stop)
            sel_diffs = []
            if old.stop is not None and manifest.stop is not None:  # a stopped run's questions
                sel_diffs = selection_differences(
                    selection_identity(old.dataset, _seed_of(old)),
                    selection_identity(manifest.dataset, _seed_of(manifest)),
                )
            if diffs := manifest_differences(old, manifest) + stop_diffs + sel_diffs:
                if not force:
                    raise StoreError(
                        f"{self.path} holds a run made with other settings:\n  - "
                        + "\n  - ".join(diffs)
                        + "\nUse another --out folder, or --force to continue anyway (the old "
                        "manifest is kept beside the new one; debates made with another seed "
                        "run again)."
                    )
                note, history = "", old.stop_history
                if stop_diffs:
                    finished = len(self.scan(seed=_seed_of(old)).finished)
                    history = changed_stop_history(
                        old.stop_history, old.stop, old.created_at, manifest.stop, finished
                    )
                    note = stop_change_note(history)
                if sel_diffs:
                    finished = len(self.scan(seed=_seed_of(old)).finished)
                    note = "; ".join(
                        [
                            *([note] if note else []),
                            f"{'; '.join(sel_diffs)}: the questions of a stopped run were "
                            f"changed by --force after {finished} finished question(s); its "
                            "decisions no longer carry their stated guarantee",
                        ]
                    )
                manifest = manifest.model_copy(update={"stop_history": history})
                stamp = old.created_at.strftime("%Y%m%dT%H%M%S")
                self._dir.rename(MANIFEST, f"manifest.{stamp}.json")
                return self._write_new(manifest, note, keep_notes=old.notes)
            self._add_selected_ids(old, manifest)
            return self._add_served(old, manifest)
        if lines := self._count_lines():
            if not force:
                raise StoreError(
                    f"{self.path} has {lines} debate line(s) in {DEBATES} but no {MANIFEST}, so "
                    f"the settings they were made with are unknown. {self._choices()}"
                )
            return self._write_new(
                manifest,
                f"manifest.json was missing when {lines} debate line(s) were already in "
                f"{DEBATES}; written anew by --force (those lines' settings are unknown)",
            )
        return self._write_new(manifest, "")

    def _choices(self) -> str:
        return (
            f"Restore {self.path / MANIFEST} (e.g. from a backup), use another --out folder, or "
            "pass --force to adopt the folder under this command's settings (a note of it is "
            "kept in the new manifest, and debates made with another seed run again)."
        )

    def _write_new(
        self, manifest: RunManifest, note: str, keep_notes: list[str] | None = None
    ) -> RunManifest:
        notes = [*(keep_notes or []), *manifest.notes]
        if note:
            log.warning("%s: %s", self.path, note)
            notes.append(f"{datetime.now(UTC).isoformat(timespec='seconds')}: {note}")
        dataset = manifest.dataset
        assert self._dir is not None
        if dataset.selected_ids is not None:
            self._dir.write_text(IDS, "".join(f"{q}\n" for q in dataset.selected_ids))
            dataset = dataset.model_copy(update={"ids_file": IDS})
        manifest = manifest.model_copy(update={"notes": notes, "dataset": dataset})
        self._dir.write_text(MANIFEST, manifest.model_dump_json(indent=2))
        return manifest

    def _add_selected_ids(self, old: RunManifest, new: RunManifest) -> None:
        """A resume may select more questions: the run's selection is every one ever selected."""
        ids = new.dataset.selected_ids
        if old.dataset.ids_file is None or ids is None:
            return  # a run folder from before selected ids were kept: the selection stays unknown
        name = old.dataset.ids_file
        if problem := plain_name_problem(name):
            raise UnsafePathError(
                f"{self.path / MANIFEST}: dataset.ids_file {problem}; it names a file of the run "
                "folder itself. Restore the manifest, or use another --out folder"
            )
        assert self._dir is not None
        text = self._dir.read_text(name) if self._dir.is_file(name) else ""
        known = {line for line in text.splitlines() if line.strip()}
        if added := [q for q in ids if q not in known]:
            self._dir.write_text(name, text + "".join(f"{q}\n" for q in added))

    def _add_served(self, old: RunManifest, new: RunManifest) -> RunManifest:
        """A resume answered by another build of a model (a re-pulled tag, another server
        version) is noted, and its servers added: the analysis then says the run mixes builds."""
        served = merge_served(old.served, new.served, key=ServedBy.build)
        known = {s.identity() for s in old.started}
        started = [*old.started, *(s for s in new.started if s.identity() not in known)]
        if served == old.served and len(started) == len(old.started):
            return old
        changed = [
            f"{role}: now {e.describe()}"
            for role, entries in served.items()
            if role in old.served
            for e in entries[len(old.served[role]) :]
        ]
        changed += [
            f"server {s.key}: now {s.engine} {s.engine_version or '?'} on {s.weights} "
            f"({s.weights_hash or 'no hash'})"
            for s in started[len(old.started) :]
            if old.started
        ]
        notes = list(old.notes)
        if changed:
            note = "resumed on another build: " + "; ".join(changed)
            log.warning("%s: %s", self.path, note)
            notes.append(f"{datetime.now(UTC).isoformat(timespec='seconds')}: {note}")
        manifest = old.model_copy(update={"served": served, "started": started, "notes": notes})
        assert self._dir is not None
        self._dir.write_text(MANIFEST, manifest.model_dump_json(indent=2))
        return manifest

    def _count_lines(self) -> int:
        """Non-blank lines of debates.jsonl (0 when there is none)."""
        with self._folder() as folder:
            if not folder.is_file(DEBATES):
                return 0
            with folder.open_read(DEBATES) as f:
                return sum(1 for line in f if line.strip())

    def _make_folder(self) -> None:
        try:
            self._dir = Folder(self.root, *self._parts)
            self._dir.check_writable()
        except CrawdadError:
            self.close()
            raise
        except OSError as e:
            self.close()
            raise StoreError(
                f"cannot write to the run folder {self.path}: {e.strerror}; choose another --out"
            ) from None

    def _take_lock(self) -> None:
        assert self._dir is not None
        self._lock = self._dir.lock(LOCK, wait=False)
        if self._lock is None:
            raise StoreError(
                f"another crawdad process is running on {self.path}; wait for it or stop it"
            ) from None

    def read_manifest(self) -> RunManifest:
        path = self.path / MANIFEST
        try:
            with self._folder() as folder:
                text = folder.read_text(MANIFEST)
            return RunManifest.model_validate_json(text)
        except UnsafePathError:
            raise
        except OSError as e:
            why = e.strerror or str(e)
        except UnicodeDecodeError:
            why = "it is not UTF-8 text"
        except ValidationError as e:
            first = e.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            why = f"{where + ': ' if where else ''}{first['msg']}"
        raise StoreError(f"{path} cannot be read ({why}): it is damaged or not a crawdad manifest")

    # --- reading ---------------------------------------------------------------------------

    def scan(self, seed: int | None = None) -> Scan:
        """Read debates.jsonl once; set a torn last line aside (moved to debates.torn.jsonl).

        With `seed`, a debate whose latest line was made with another seed is not finished: it is
        another run's, and runs again (its new line supersedes the old one).
        """
        scan = Scan()
        if not self.debates_path.exists():
            return scan
        latest: dict[str, tuple[bool, bool, bool, str | None, bool]] = {}
        held: dict[str, InvalidLine] = {}  # question id -> its finished, invalid latest line
        rerun: list[InvalidLine] = []  # invalid lines of failed debates or of another seed
        good_end = offset = number = 0
        with self._folder() as folder, folder.open_read(DEBATES) as f:
            for number, line in enumerate(f, start=1):
                offset += len(line)
                if not line.endswith(b"\n"):  # torn: set aside below
                    if line.strip():
                        scan.bad_lines.append(number)
                    continue
                record = read_line(line, number)
                if isinstance(record, InvalidLine):
                    if record.qid is None:  # not a record at all: skipped, left in place
                        if line.strip():
                            scan.bad_lines.append(number)
                        continue
                    # A whole record that fails the checks: never set aside, never rewritten.
                    good_end = offset
                    scan.lines += 1
                    if record.errored or (seed is not None and record.seed != seed):
                        rerun.append(record)  # a failed debate or another run's: not held
                        held.pop(record.qid, None)
                        continue
                    held[record.qid] = record
                    latest.pop(record.qid, None)
                    scan.gpu_seconds.pop(record.qid, None)
                    scan.other_seed.pop(record.qid, None)
                    continue
                good_end = offset
                scan.lines += 1
                if seed is not None and record.seed != seed:
                    scan.other_seed[str(record.question_id)] = record.seed
                    latest.pop(str(record.question_id), None)
                    scan.gpu_seconds.pop(str(record.question_id), None)
                    continue
                scan.other_seed.pop(str(record.question_id), None)
                held.pop(str(record.question_id), None)
                scan.gpu_seconds[str(record.question_id)] = gpu_seconds(record)
                latest[str(record.question_id)] = (
                    record.ok,
                    outcome(record.gold, record.final_answer) == 1,
                    record.consensus,
                    record.error,
                    outcome(record.gold, record.final_answer) is None,
                )
        if scan.bad_lines and scan.bad_lines[-1] == number and offset > good_end:
            self._set_aside_tail(good_end)
            scan.bad_lines.pop()
        for line_no in scan.bad_lines:
            log.warning(
                "%s line %d cannot be parsed; it is skipped (left in place)",
                self.debates_path,
                line_no,
            )
        for bad in rerun:
            log.warning(
                "%s; it records a failed debate or another seed's: it is left in place and "
                "left out (its question runs again unless another line finished it)",
                bad.describe(self.debates_path),
            )
        for qid, bad in held.items():
            scan.finished.add(qid)
            scan.held[qid] = (bad.line_no, bad.why)
            log.warning(
                "%s; the debate is kept in place and not run again, but every reader leaves it "
                "out (correct or remove the line to count it, or remove it to run the question "
                "again)",
                bad.describe(self.debates_path),
            )
        if scan.other_seed:
            log.warning(
                "%s: %d debate(s) were made with another seed (%s) than this run's (%s); they "
                "run again",
                self.debates_path,
                len(scan.other_seed),
                ", ".join(str(x) for x in sorted(set(scan.other_seed.values()))),
                seed,
            )
        for qid, (ok, correct, consensus, error, unscored) in latest.items():
            if ok:
                scan.finished.add(qid)
                if unscored:
                    scan.unscored_ids.add(qid)
                scan.correct += correct
                scan.consensus += consensus
                if correct:
                    scan.correct_ids.add(qid)
                if consensus:
                    scan.consensus_ids.add(qid)
            else:
                scan.errored[qid] = error or "error"
        return scan

    def _set_aside_tail(self, good_end: int) -> None:
        with self._folder() as folder, folder.open_update(DEBATES) as f:
            f.seek(good_end)
            tail = f.read()
            with folder.open_append(TORN) as side:
                side.write(tail if tail.endswith(b"\n") else tail + b"\n")
                side.flush()
                os.fsync(side.fileno())
            f.truncate(good_end)
            f.flush()
            os.fsync(f.fileno())
        log.warning(
            "%s ended in a torn line (a crash mid-write); it was moved to %s and that debate will run again",
            self.debates_path,
            TORN,
        )

    def records(self) -> list[DebateRecord]:
        """All valid lines, latest per question (for `crawdad show` and small runs); lines
        that fail the records' checks are left out (`read_records` names them)."""
        return self.read_records()[0]

    def read_records(self) -> tuple[list[DebateRecord], list[InvalidLine]]:
        """The valid lines, latest per question, and every other non-blank line, named."""
        out: dict[str, DebateRecord] = {}
        invalid: list[InvalidLine] = []
        if self.debates_path.exists():
            with self._folder() as folder, folder.open_read(DEBATES) as f:
                for number, line in enumerate(f, start=1):
                    if not line.strip():
                        continue
                    record = read_line(line, number)
                    if isinstance(record, InvalidLine):
                        invalid.append(record)
                    else:
                        out[str(record.question_id)] = record
        return list(out.values()), invalid

    # --- writing ---------------------------------------------------------------------------

    def append(self, records: list[DebateRecord]) -> None:
        """Append and fsync: when this returns, the debates survive a crash.

        A failed write or fsync (a full disk, an I/O error) cuts the file back to where it was,
        so no part of these records stays behind (if even that fails, the next open sets the
        torn tail aside), and raises StoreWriteError; the lines written before are untouched.
        """
        if self._file is None:
            raise StoreError("the run store is not open")
        fd = self._file.fileno()
        data = b"".join(r.model_dump_json().encode() + b"\n" for r in records)
        size = os.fstat(fd).st_size
        try:
            _write_all(fd, data)
            os.fsync(fd)
        except OSError as e:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, size)
            raise StoreWriteError(self.write_failure(e, DEBATES)) from None

    def write_failure(self, e: OSError, name: str) -> str:
        """What failed, and what to do about it."""
        code = errno.errorcode.get(e.errno or 0, "")
        what = f"{e.strerror or e}" + (f" ({code})" if code else "")
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            fix = f"free space on the disk that holds {self.path}"
        else:
            fix = f"check the disk that holds {self.path} (the system log says more)"
        return (
            f"could not write {self.path / name}: {what}. The run stopped; the debates written "
            f"before are kept and the ones in flight will run again. To go on, {fix}, then run "
            "the same command again to resume."
        )

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        if self._lock is not None:
            fcntl.flock(self._lock.fileno(), fcntl.LOCK_UN)
            self._lock.close()
            self._lock = None
        if self._dir is not None:
            self._dir.close()
            self._dir = None


SEEDED_ORDER_SCHEMA = 8  # run folders made before it work through their questions in file order


def recorded_order(out: Path) -> Literal["seeded", "file"] | None:
    """The order an existing run folder (or any variant of an experiment folder) was made in:
    "file" for a manifest of record schema 7 or older, whose `limit` took the first questions of
    the file, so that it resumes with the selection it recorded; None for a new folder."""
    out = Path(out)
    manifests = [out / MANIFEST, *sorted(out.glob(f"*/{MANIFEST}"))]
    for path in manifests:
        try:  # never through a link (a variant folder that is one is refused when opened)
            data = read_inside(path.parent, MANIFEST, root=out, limit=EXPERIMENT_LIMIT)
            version = json.loads(data or b"null").get("schema_version", 1)
        except (OSError, ValueError, AttributeError, StoreError):
            continue
        return "file" if isinstance(version, int) and version < SEEDED_ORDER_SCHEMA else "seeded"
    return None


def selection_for(selection: SelectionConfig, out: Path) -> SelectionConfig:
    """The selection a run into `out` takes: an old folder's (file order) where `out` holds one,
    else the one given."""
    if recorded_order(out) == "file" and selection.order != "file":
        return selection.model_copy(update={"order": "file"})
    return selection


def _seed_of(manifest: RunManifest) -> int | None:
    seed = manifest.config.get("seed")
    return seed if isinstance(seed, int) and not isinstance(seed, bool) else None


def read_selected_order(folder: Path, name: str, root: Path | None = None) -> list[str] | None:
    """The ids in the run folder's selected-ids file `name`, in the run's order (None if it is
    missing or cannot be read). Read without following a link (`root`: the folder the run folder
    must stay inside): a link or a FIFO is refused with `UnsafePathError`, naming it."""
    try:
        data = read_inside(folder, name, root=root)
    except UnsafePathError:
        raise
    except OSError:
        return None
    if data is None:
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return [line for line in text.splitlines() if line.strip()]


def read_selected_ids(folder: Path, name: str, root: Path | None = None) -> set[str] | None:
    """The ids in the run folder's selected-ids file `name`, as a set (`read_selected_order`)."""
    order = read_selected_order(folder, name, root)
    return set(order) if order is not None else None


def is_being_written(folder: Path, root: Path | None = None) -> bool:
    """True while a crawdad process holds the run folder's lock (a run still writing it)."""
    try:  # never created here (analysis writes nothing); a link or a FIFO is no lock
        with Folder.inside(root if root is not None else folder, folder) as f:
            handle = os.fdopen(f.open_fd(LOCK, os.O_RDONLY), "rb")
    except (OSError, StoreError):
        return False
    with handle:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        except OSError:
            return False
        fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
        return False


def require_run_folder(folder: Path) -> None:
    """Refuse, with a message, a path that is not a run folder (for show and analyze)."""
    folder = Path(folder)
    if not folder.exists():
        raise StoreError(f"{folder} does not exist; give the --out folder of a `crawdad run`")
    if not folder.is_dir():
        raise StoreError(f"{folder} is a file, not a run folder; give the --out folder of a run")
    if not (folder / MANIFEST).exists() and not (folder / DEBATES).exists():
        what = "is empty" if not any(folder.iterdir()) else f"has no {MANIFEST} and no {DEBATES}"
        raise StoreError(
            f"{folder} {what}: it is not a crawdad run folder; give the --out folder of a run"
        )


def _write_all(fd: int, data: bytes) -> None:
    """os.write until everything is out (a write may take only part of it)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def read_jsonl_ids(path: Path) -> list[str]:
    """Question ids of every parseable line, in order (for tests and checks)."""
    ids = []
    with Path(path).open("rb") as f:
        for line in f:
            try:
                ids.append(str(json.loads(line)["question_id"]))
            except (ValueError, KeyError):
                continue
    return ids


def is_experiment(folder: Path | str) -> bool:
    """True when the folder holds an entry named experiment.json (an experiment, not a run; one
    that is a link or no regular file is refused when read, by `read_experiment`)."""
    try:
        return os.lstat(Path(folder) / EXPERIMENT) is not None
    except OSError:
        return False


EXPERIMENT_LIMIT = 16_000_000  # bytes: an experiment's manifest is a few KB


def read_experiment(folder: Path | str) -> ExperimentManifest | None:
    """An experiment folder's manifest; None when the folder has none. Read without following a
    link: an experiment.json that is a link, a FIFO or a device is refused, naming it."""
    path = Path(folder) / EXPERIMENT
    try:
        data = read_inside(folder, EXPERIMENT, limit=EXPERIMENT_LIMIT)
    except FileNotFoundError:
        return None
    except UnsafePathError:
        raise
    except OSError as e:
        raise StoreError(f"cannot read {path}: {e.strerror or e}") from None
    if data is None:
        return None
    try:
        return ExperimentManifest.model_validate_json(data)
    except ValidationError as e:
        first: dict[str, Any] = dict(e.errors()[0]) if e.errors() else {}
        raise StoreError(
            f"{path} is not an experiment manifest ({first.get('msg', 'invalid')} at "
            f"{first.get('loc', ())}); restore it, or run `crawdad experiment` again to rewrite it"
        ) from None
