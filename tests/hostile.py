"""Damaged and hostile run folders, each made from a copy of a valid one (issue 40).

Every case is a function `case(folder) -> Expect` registered with `@hostile`: it damages the run
folder it is given (a copy of a valid run: `manifest.json`, `debates.jsonl`, one finished debate
per line) in place and says what a reader must make of it: which questions' debates the damage
took away (every other finished debate must still be counted), whether the folder as a whole is
refused, and what the warning or refusal names. tests/test_hostile_folders.py runs every case
through `crawdad analyze`, `crawdad show`, the viewer, the notebook API and resume.

New classes of damage (symlinks, FIFOs, ...) are new functions here; nothing else changes.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEBATES = "debates.jsonl"
MANIFEST = "manifest.json"
SERIES = "servers.jsonl"
OUTSIDE = "outside"  # beside the run folder: what links in it lead to; never read nor written
# Only in the files outside the run folder: it must never reach a table, a page or a report.
MARKER = "OUTSIDE-MARKER-7f3a9c"


@dataclass(frozen=True)
class Expect:
    """What a reader must make of a damaged folder."""

    says: str | None  # a regex the warnings (or the refusal) must match; None: nothing to say
    lost: frozenset[str] = frozenset()  # question ids whose finished debate the damage removed
    refused: bool = False  # the analysis refuses the folder (a message, never a traceback)
    resume_refused: bool = False  # resume refuses the folder (its manifest cannot be trusted)
    # Complete lines that fail the checks: resume keeps them in place and does not rerun them.
    held: frozenset[str] = frozenset()
    resume_says: str = "manifest.json"  # a regex resume's refusal must match
    writes_refused: bool = False  # analyze reads the run but refuses to write its report


Case = Callable[[Path], Expect]
CASES: dict[str, Case] = {}


def hostile(fn: Case) -> Case:
    CASES[fn.__name__] = fn
    return fn


# --- helpers ----------------------------------------------------------------------------------


def lines(folder: Path) -> list[bytes]:
    return (folder / DEBATES).read_bytes().splitlines(keepends=True)


def qid(line: bytes) -> str:
    return str(json.loads(line)["question_id"])


def _write(folder: Path, new: list[bytes]) -> None:
    (folder / DEBATES).write_bytes(b"".join(new))


def _edit(folder: Path, index: int, change: Callable[[dict[str, Any]], None]) -> str:
    """Change line `index` (its JSON) with `change`; the question id of the line."""
    all_lines = lines(folder)
    record = json.loads(all_lines[index])
    change(record)
    all_lines[index] = json.dumps(record).encode() + b"\n"
    _write(folder, all_lines)
    return str(record["question_id"])


def _field_case(index: int, change: Callable[[dict[str, Any]], None], says: str) -> Case:
    def make(folder: Path) -> Expect:
        q = _edit(folder, index, change)
        return Expect(says=says, lost=frozenset({q}), held=frozenset({q}))

    return make


def _set_turn(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(record: dict[str, Any]) -> None:
        record["turns"][0][key] = value

    return change


def _set(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(record: dict[str, Any]) -> None:
        record[key] = value

    return change


# --- records: torn, mis-encoded, out of range, of the wrong type --------------------------------


@hostile
def truncated_last_line(folder: Path) -> Expect:
    all_lines = lines(folder)
    last = all_lines[-1]
    _write(folder, [*all_lines[:-1], last[: len(last) // 2]])
    return Expect(says="torn last line", lost=frozenset({qid(last)}))


@hostile
def invalid_utf8(folder: Path) -> Expect:
    all_lines = lines(folder)
    line = all_lines[1]
    all_lines[1] = line.replace(b'"text":"', b'"text":"\xff\xfe caf\xe9 ', 1)
    assert all_lines[1] != line
    _write(folder, all_lines)
    return Expect(says="not a JSON record", lost=frozenset({qid(line)}))


@hostile
def utf16_line(folder: Path) -> Expect:
    all_lines = lines(folder)
    line = all_lines[2]
    all_lines[2] = line.rstrip(b"\n").decode().encode("utf-16") + b"\n"
    _write(folder, all_lines)
    return Expect(says="not a JSON record", lost=frozenset({qid(line)}))


CASES["confidence_7"] = _field_case(0, _set_turn("confidence", 7), r"confidence = 7")
CASES["confidence_minus_3"] = _field_case(1, _set("final_confidence", -3), r"final_confidence")
CASES["negative_seconds"] = _field_case(2, _set("seconds", -0.64), r"seconds = -0\.64")
CASES["rung_99"] = _field_case(3, _set("rung", 99), r"rung = 99")
CASES["huge_tokens"] = _field_case(0, _set_turn("prompt_tokens", 10**30), r"prompt_tokens")
CASES["huge_seconds"] = _field_case(1, _set_turn("seconds", 1e300), r"seconds")
CASES["tokens_many"] = _field_case(2, _set_turn("prompt_tokens", "many"), r"prompt_tokens = 'many'")
CASES["turns_not_turns"] = _field_case(3, _set("turns", [1, "two", None]), r"turns\.0")
CASES["turns_a_string"] = _field_case(0, _set("turns", "no turns here"), r"turns")
CASES["unknown_enum"] = _field_case(1, _set("end", "exploded"), r"end = 'exploded'")
CASES["later_schema"] = _field_case(2, _set("schema_version", 99), r"schema_version = 99")


@hostile
def nan_and_infinity(folder: Path) -> Expect:
    """JSON's non-standard NaN and Infinity, as Python's json writes them."""
    first = _edit(folder, 0, _set("seconds", float("nan")))
    second = _edit(folder, 1, _set_turn("confidence", float("inf")))
    both = frozenset({first, second})
    return Expect(says="finite number", lost=both, held=both)


@hostile
def duplicate_question_ids(folder: Path) -> Expect:
    """Every line twice: the last line per question wins, nothing is counted twice."""
    all_lines = lines(folder)
    _write(folder, all_lines + all_lines)
    return Expect(says=None)


@hostile
def blank_and_junk_lines(folder: Path) -> Expect:
    all_lines = lines(folder)
    _write(folder, [b"\n", b"   \n", b"[1, 2, 3]\n", b"null\n", *all_lines])
    return Expect(says="invalid line")


@hostile
def empty_debates(folder: Path) -> Expect:
    everything = frozenset(qid(line) for line in lines(folder))
    _write(folder, [])
    return Expect(says="no readable debates", lost=everything, refused=True)


# --- links out of the folder, and files that are not files -------------------------------------


def outside(folder: Path) -> Path:
    """The folder beside the run folder that its links lead to (made if missing)."""
    out = folder.parent / OUTSIDE
    out.mkdir(exist_ok=True)
    return out


def marked(data: bytes) -> bytes:
    """Records with the marker in every turn's text: valid, and found if ever read."""
    return data.replace(b'"text":"', f'"text":"{MARKER} '.encode())


def _link_out(folder: Path, name: str, data: bytes) -> Path:
    """`name` in the run folder replaced by a link to a file outside holding `data`."""
    target = outside(folder) / name
    target.write_bytes(data)
    (folder / name).unlink(missing_ok=True)
    (folder / name).symlink_to(target)
    return target


@hostile
def debates_link_out(folder: Path) -> Expect:
    """debates.jsonl a link to a valid records file elsewhere: not one line of it is read."""
    everything = frozenset(qid(line) for line in lines(folder))
    _link_out(folder, DEBATES, marked((folder / DEBATES).read_bytes()))
    says = r"debates\.jsonl is a link"
    return Expect(says, lost=everything, refused=True, resume_refused=True, resume_says=says)


@hostile
def manifest_link_out(folder: Path) -> Expect:
    manifest = json.loads((folder / MANIFEST).read_bytes())
    manifest["config"]["marker"] = MARKER
    _link_out(folder, MANIFEST, json.dumps(manifest).encode())
    return Expect(r"manifest\.json is a link", refused=True, resume_refused=True)


@hostile
def selected_ids_link_out(folder: Path) -> Expect:
    """The selection file a link: not read (every debate counted, and said), resume refused."""
    name = json.loads((folder / MANIFEST).read_bytes())["dataset"]["ids_file"]
    _link_out(folder, name, (folder / name).read_bytes() + f"{MARKER}\n".encode())
    says = rf"{name.replace('.', '[.]')} is a link"
    return Expect(says, resume_refused=True, resume_says=says)


@hostile
def lock_link_out(folder: Path) -> Expect:
    """.lock a link to a file elsewhere: never opened (a resume would truncate or lock it)."""
    _link_out(folder, ".lock", f"{MARKER}: not a lock\n".encode())
    return Expect(None, resume_refused=True, resume_says=r"\.lock is a link")


@hostile
def report_folder_link_out(folder: Path) -> Expect:
    """report/ a link to a folder elsewhere: analyze refuses to write there, the viewer to
    serve from there."""
    target = outside(folder) / "report"
    target.mkdir()
    (target / "report.md").write_text(f"# {MARKER}\n")
    (folder / "report").symlink_to(target, target_is_directory=True)
    return Expect(r"report is a link", writes_refused=True)


@hostile
def report_md_link_out(folder: Path) -> Expect:
    (folder / "report").mkdir()
    target = outside(folder) / "notes.md"
    target.write_text(f"# {MARKER}\n")
    (folder / "report" / "report.md").symlink_to(target)
    return Expect(r"report\.md is a link", writes_refused=True)


@hostile
def servers_link_out(folder: Path) -> Expect:
    """servers.jsonl a link to a series elsewhere (issue 47): never read into a report, a page
    or a frame; a resume refuses to append to it."""
    sample = {"at": 1.0, "servers": {f"http://{MARKER}/v1": {"kind": "vllm", "running": 1}}}
    _link_out(folder, SERIES, (json.dumps(sample) + "\n").encode())
    says = r"servers\.jsonl is a link"
    return Expect(says, resume_refused=True, resume_says=says)


@hostile
def servers_wrong_types(folder: Path) -> Expect:
    """servers.jsonl with wrong-typed and impossible lines (issue 47): each named and left out,
    the debates untouched."""
    bad = [
        '{"at": 1.0, "servers": [1, 2, 3]}',
        '{"at": 2.0, "servers": {"http://s/v1": {"generation_tokens": "12"}}}',
        '{"at": null, "servers": {}}',
        '{"at": 3.0, "servers": {"http://s/v1": {"running": NaN, "kv_cache": 1.5}}}',
    ]
    with (folder / SERIES).open("a") as f:
        f.write("\n".join(bad) + "\n")
    return Expect(r"servers\.jsonl line \d+")


@hostile
def debates_fifo(folder: Path) -> Expect:
    """debates.jsonl a FIFO: refused before it is opened (opening one blocks forever)."""
    everything = frozenset(qid(line) for line in lines(folder))
    (folder / DEBATES).unlink()
    os.mkfifo(folder / DEBATES)
    says = r"debates\.jsonl is a FIFO"
    return Expect(says, lost=everything, refused=True, resume_refused=True, resume_says=says)


# --- manifests ---------------------------------------------------------------------------------


@hostile
def manifest_not_json(folder: Path) -> Expect:
    (folder / MANIFEST).write_text('{"schema_version": 7, "config": ')
    return Expect(says="manifest.json cannot be read", refused=True, resume_refused=True)


@hostile
def manifest_wrong_shape(folder: Path) -> Expect:
    (folder / MANIFEST).write_text(json.dumps([{"config": 5}, "seed"]))
    return Expect(says="manifest.json cannot be read", refused=True, resume_refused=True)


@hostile
def manifest_empty(folder: Path) -> Expect:
    (folder / MANIFEST).write_bytes(b"")
    return Expect(says="manifest.json cannot be read", refused=True, resume_refused=True)


@hostile
def records_without_manifest(folder: Path) -> Expect:
    (folder / MANIFEST).unlink()
    return Expect(says="manifest.json is missing", resume_refused=True)


@dataclass
class Damaged:
    """A damaged copy of the valid run and what is expected of it."""

    name: str
    folder: Path
    expect: Expect
    questions: list[str] = field(default_factory=list)  # the valid run's question ids

    @property
    def kept(self) -> set[str]:
        return set(self.questions) - self.expect.lost
