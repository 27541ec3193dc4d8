"""The run folder: manifest.json, append-only debates.jsonl, resume.

Every finished debate is one line of debates.jsonl, written and fsynced as it finishes; the file is
only ever appended to. A crash mid-write leaves at most a torn last line, which the next open
moves to debates.torn.jsonl. A debate recorded with an error is retried on resume and its new
line supersedes the old one (the last line for a question wins).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from pydantic import ValidationError

from crawdad.config import diff_settings, result_settings
from crawdad.errors import StoreError, StoreWriteError
from crawdad.records import DebateRecord, RunManifest

log = logging.getLogger("crawdad")

MANIFEST = "manifest.json"
DEBATES = "debates.jsonl"
TORN = "debates.torn.jsonl"
LOCK = ".lock"


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
    bad_lines: list[int] = field(default_factory=list)  # unparseable lines kept in place (1-based)

    def questions(self) -> set[str]:
        """Every question id the folder has a (latest) line for, finished or failed."""
        return self.finished | set(self.errored)


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    with tmp.open("w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def manifest_differences(old: RunManifest, new: RunManifest) -> list[str]:
    diffs = diff_settings(result_settings(old.config), result_settings(new.config), "config")
    diffs += diff_settings(old.prompts, new.prompts, "prompts")
    if old.dataset.sha256 != new.dataset.sha256:
        diffs.append(
            f"dataset: {old.dataset.questions_file} ({old.dataset.sha256[:12]}) -> "
            f"{new.dataset.questions_file} ({new.dataset.sha256[:12]})"
        )
    return diffs


class RunStore:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._file: IO[bytes] | None = None
        self._lock: IO[str] | None = None

    @property
    def debates_path(self) -> Path:
        return self.path / DEBATES

    # --- opening ---------------------------------------------------------------------------

    def open(self, manifest: RunManifest, force: bool = False) -> Scan:
        """Create or resume the run folder; return what is already in it."""
        self._make_folder()
        self._take_lock()
        try:
            return self._open(manifest, force)
        except OSError as e:  # a full disk while writing the manifest or setting a tail aside
            self.close()
            raise StoreWriteError(self.write_failure(e, MANIFEST)) from None

    def _open(self, manifest: RunManifest, force: bool) -> Scan:
        manifest_path = self.path / MANIFEST
        if manifest_path.exists():
            old = self.read_manifest()
            if diffs := manifest_differences(old, manifest):
                if not force:
                    self.close()
                    raise StoreError(
                        f"{self.path} holds a run made with other settings:\n  - "
                        + "\n  - ".join(diffs)
                        + "\nUse another --out folder, or --force to continue anyway (the old "
                        "manifest is kept beside the new one)."
                    )
                stamp = old.created_at.strftime("%Y%m%dT%H%M%S")
                os.replace(manifest_path, self.path / f"manifest.{stamp}.json")
                _atomic_write(manifest_path, manifest.model_dump_json(indent=2))
        else:
            _atomic_write(manifest_path, manifest.model_dump_json(indent=2))
        scan = self.scan()
        # Unbuffered: a failed write leaves nothing behind in a buffer to be flushed later.
        self._file = self.debates_path.open("ab", buffering=0)
        return scan

    def _make_folder(self) -> None:
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            probe = self.path / ".write-test"
            probe.write_text("ok")
            probe.unlink()
        except OSError as e:
            raise StoreError(
                f"cannot write to the run folder {self.path}: {e.strerror}; choose another --out"
            ) from None

    def _take_lock(self) -> None:
        self._lock = (self.path / LOCK).open("w")
        try:
            fcntl.flock(self._lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock.close()
            self._lock = None
            raise StoreError(
                f"another crawdad process is running on {self.path}; wait for it or stop it"
            ) from None

    def read_manifest(self) -> RunManifest:
        path = self.path / MANIFEST
        try:
            return RunManifest.model_validate_json(path.read_text(encoding="utf-8"))
        except (OSError, ValidationError) as e:
            raise StoreError(
                f"{path} cannot be read ({e}); it is not a crawdad run folder, or is damaged"
            ) from None

    # --- reading ---------------------------------------------------------------------------

    def scan(self) -> Scan:
        """Read debates.jsonl once; set a torn last line aside (moved to debates.torn.jsonl)."""
        scan = Scan()
        if not self.debates_path.exists():
            return scan
        latest: dict[str, tuple[bool, bool, bool, str | None]] = {}
        good_end = offset = number = 0
        with self.debates_path.open("rb") as f:
            for number, line in enumerate(f, start=1):
                offset += len(line)
                try:
                    if not line.endswith(b"\n"):
                        raise ValueError("no line end")
                    record = DebateRecord.model_validate_json(line)
                except (ValueError, ValidationError):
                    if line.strip():
                        scan.bad_lines.append(number)
                    continue
                good_end = offset
                scan.lines += 1
                latest[str(record.question_id)] = (
                    record.ok,
                    record.final_answer == record.gold,
                    record.consensus,
                    record.error,
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
        for qid, (ok, correct, consensus, error) in latest.items():
            if ok:
                scan.finished.add(qid)
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
        with self.debates_path.open("rb+") as f:
            f.seek(good_end)
            tail = f.read()
            with (self.path / TORN).open("ab") as side:
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
        """All parseable lines, latest per question (for `crawdad show` and small runs)."""
        out: dict[str, DebateRecord] = {}
        if self.debates_path.exists():
            with self.debates_path.open("rb") as f:
                for line in f:
                    try:
                        record = DebateRecord.model_validate_json(line)
                    except (ValueError, ValidationError):
                        continue
                    out[str(record.question_id)] = record
        return list(out.values())

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
