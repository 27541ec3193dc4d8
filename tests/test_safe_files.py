"""Nothing written or read through a path that leaves its folder (issue 40): links inside a run,
report or data folder are refused, never followed; names are plain names; an input that is not a
regular file, or is too large, is refused before it is read; writers to one folder wait for each
other and lose nothing. Each case checks that the file outside the folder is untouched."""

from __future__ import annotations

import json
import multiprocessing
import os
from pathlib import Path
from typing import Any

import pytest
from crawdad.analysis.report import write_report
from crawdad.analysis.synthetic_runs import write_synthetic_run

from crawdad.config import load_config
from crawdad.data.own_table import QUESTIONS_FILE, OwnSpec, add_own_question
from crawdad.errors import ConfigError, DataError, StoreError, UnsafePathError
from crawdad.run.experiment import ExperimentFile, variant_configs
from crawdad.run.store import RunStore, is_being_written
from crawdad.safe_files import Folder, read_input, use_input_limit, write_file
from tests.test_store import manifest, record


def _spec(question: str | None = None) -> OwnSpec:
    codes = {"treatment": "open", "stone size": "large"}
    return OwnSpec(treatment="treatment", outcome="success", codes=codes, question=question)


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A file outside every folder under test, with content to keep."""
    path = tmp_path / "elsewhere" / "precious.txt"
    path.parent.mkdir()
    path.write_text("keep me\n")
    return path


def _same(path: Path, before: tuple[bytes, int]) -> bool:
    return (path.read_bytes(), path.stat().st_mtime_ns) == before


def _state(path: Path) -> tuple[bytes, int]:
    return path.read_bytes(), path.stat().st_mtime_ns


# --- writes: links inside a folder are refused -------------------------------------------------


def test_a_run_folder_whose_lock_is_a_link_is_refused(tmp_path: Path, outside: Path) -> None:
    run = tmp_path / "run"
    store = RunStore(run)
    store.open(manifest())
    store.append([record(1)])
    store.close()
    (run / ".lock").unlink()
    (run / ".lock").symlink_to(outside)
    before = _state(outside)
    with pytest.raises(UnsafePathError, match=r"\.lock is a link"):
        RunStore(run).open(manifest())
    assert _same(outside, before)


@pytest.mark.parametrize("name", ["debates.jsonl", "manifest.json", "selected-ids.txt"])
def test_a_run_folders_files_that_are_links_are_refused(
    tmp_path: Path, outside: Path, name: str
) -> None:
    run = tmp_path / "run"
    store = RunStore(run)
    store.open(manifest(ids=["1", "2"]))
    store.append([record(1)])
    store.close()
    (run / name).unlink()
    (run / name).symlink_to(outside)
    before = _state(outside)
    with pytest.raises(UnsafePathError, match=f"{name} is a link"):
        store = RunStore(run)
        store.open(manifest(ids=["1", "2", "3"]))
        store.append([record(2)])
    assert _same(outside, before)


def test_a_lock_that_is_a_fifo_neither_blocks_nor_counts(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    os.mkfifo(run / ".lock")
    assert not is_being_written(run)  # returns at once: the FIFO is never opened for reading
    with pytest.raises(UnsafePathError, match="FIFO"):
        RunStore(run).open(manifest())


@pytest.mark.parametrize("name", [QUESTIONS_FILE, "tables"])
def test_data_own_never_writes_through_a_link(
    kidney: Path, tmp_path: Path, outside: Path, name: str
) -> None:
    out = tmp_path / "own"
    add_own_question(kidney, out, _spec())
    target = outside if name == QUESTIONS_FILE else outside.parent
    if name == "tables":  # the folder's table moved elsewhere, a link left in its place
        (outside.parent / "kidney.csv").write_bytes((out / "tables" / "kidney.csv").read_bytes())
        (out / "tables" / "kidney.csv").unlink()
        (out / "tables").rmdir()
    else:
        (out / name).unlink()
    (out / name).symlink_to(target)
    before = _state(outside)
    listing = sorted(p.name for p in outside.parent.iterdir())
    with pytest.raises(UnsafePathError, match=f"{name} is a link"):
        add_own_question(kidney, out, _spec("Is it really so?"))
    assert _same(outside, before)
    assert sorted(p.name for p in outside.parent.iterdir()) == listing


def test_a_report_folder_that_is_a_link_is_refused(tmp_path: Path, outside: Path) -> None:
    run = write_synthetic_run(tmp_path / "run", 20, seed=1)
    (run / "report").symlink_to(outside.parent, target_is_directory=True)
    with pytest.raises(UnsafePathError, match=r"report is a link"):
        write_report([run], run / "report")
    assert sorted(p.name for p in outside.parent.iterdir()) == ["precious.txt"]


def test_a_link_inside_the_report_folder_is_refused(tmp_path: Path, outside: Path) -> None:
    run = write_synthetic_run(tmp_path / "run", 20, seed=1)
    (run / "report" / "run").mkdir(parents=True)  # the run's own sections go in report/<label>/
    (run / "report" / "run" / "tables").symlink_to(outside.parent, target_is_directory=True)
    with pytest.raises(UnsafePathError, match=r"tables is a link"):
        write_report([run], run / "report")
    assert sorted(p.name for p in outside.parent.iterdir()) == ["precious.txt"]


def test_a_file_is_replaced_whole_and_a_link_in_its_place_is_refused(
    tmp_path: Path, outside: Path
) -> None:
    folder = tmp_path / "f"
    write_file(folder, "sub/a.txt", "one")
    write_file(folder, "sub/a.txt", "two")
    assert (folder / "sub" / "a.txt").read_text() == "two"
    assert sorted(p.name for p in (folder / "sub").iterdir()) == ["a.txt"]  # no temp left
    (folder / "sub" / "b.txt").symlink_to(outside)
    before = _state(outside)
    with pytest.raises(UnsafePathError, match=r"b\.txt is a link"):
        write_file(folder, "sub/b.txt", "x")
    with Folder(folder, "sub") as f, pytest.raises(UnsafePathError):
        f.open_append("b.txt")
    assert _same(outside, before)


# --- names -------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["..", ".", ""])
def test_a_variant_that_is_not_a_plain_name_is_refused(name: str) -> None:
    spec = ExperimentFile(variants={name: {}, "b": {}})
    with pytest.raises(ConfigError, match=f"variant name '{name}'" if name else "variant name"):
        variant_configs(spec, "exp.toml")


def test_an_experiment_manifest_naming_a_path_as_variant_is_refused(tmp_path: Path) -> None:
    from datetime import UTC, datetime

    from crawdad.records import ExperimentManifest

    with pytest.raises(ValueError, match="not a plain folder name"):
        ExperimentManifest(
            crawdad_version="t",
            created_at=datetime(2026, 1, 1, tzinfo=UTC),
            file="e.toml",
            file_sha256="0",
            variants={"..": {}},
        )


# --- inputs ------------------------------------------------------------------------------------


def test_a_fifo_input_is_refused_before_it_is_opened(tmp_path: Path) -> None:
    fifo = tmp_path / "q.csv"
    os.mkfifo(fifo)  # no writer: opening it for reading would block forever
    with pytest.raises(UnsafePathError, match=r"FIFO \(named pipe\), not a regular file"):
        read_input(fifo, "CSV file")
    with pytest.raises(StoreError, match="FIFO"):
        add_own_question(fifo, tmp_path / "own", _spec())
    config = tmp_path / "c.toml"
    os.mkfifo(config)
    with pytest.raises(StoreError, match="FIFO"):
        load_config(config)


def test_a_device_input_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UnsafePathError, match="a device, not a regular file"):
        add_own_question(Path("/dev/zero"), tmp_path / "own", _spec())
    assert not (tmp_path / "own").exists()


def test_an_input_past_the_limit_is_refused_naming_the_key(tmp_path: Path, kidney: Path) -> None:
    big = tmp_path / "big.csv"
    big.write_bytes(b"a,b\n" + b"1,0\n" * 300_000)  # 1.2 MB
    with pytest.raises(UnsafePathError, match=r"input_limits\.max_file_mb"):
        read_input(big, "CSV file", limit=1_000_000)
    assert len(read_input(big, "CSV file", limit=2_000_000)) == 1_200_004
    config = tmp_path / "c.toml"
    config.write_text("[input_limits]\nmax_file_mb = 1\n")
    try:
        assert load_config(config).input_limits.max_file_mb == 1
        with pytest.raises(UnsafePathError, match="larger than 1 MB"):
            add_own_question(big, tmp_path / "own", _spec())
    finally:
        use_input_limit(load_config().input_limits.max_file_mb)
    add_own_question(kidney, tmp_path / "own", _spec())


def test_a_folder_given_as_a_data_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UnsafePathError, match="a folder, not a regular file"):
        read_input(tmp_path, "CSV file")


# --- writers at once ---------------------------------------------------------------------------

WRITERS = 6


def _add_one(csv: Path, out: Path, i: int, start: Any) -> None:
    start.wait()  # all at once
    add_own_question(csv, out, _spec(f"Question {i}: does the treatment help?"))


def test_concurrent_data_own_loses_no_question(kidney: Path, tmp_path: Path) -> None:
    out = tmp_path / "own"
    add_own_question(kidney, out, _spec())  # the folder and its table exist: only questions race
    ctx = multiprocessing.get_context("fork")
    start = ctx.Barrier(WRITERS)
    procs = [ctx.Process(target=_add_one, args=(kidney, out, i, start)) for i in range(WRITERS)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    assert [p.exitcode for p in procs] == [0] * WRITERS
    questions = json.loads((out / QUESTIONS_FILE).read_text())
    texts = {q["question"] for q in questions}
    assert {f"Question {i}: does the treatment help?" for i in range(WRITERS)} <= texts
    assert len(questions) == WRITERS + 1
    assert sorted(q["question_id"] for q in questions) == list(range(WRITERS + 1))


def test_data_own_errors_are_messages(tmp_path: Path) -> None:
    with pytest.raises(DataError):
        add_own_question(tmp_path / "missing.csv", tmp_path / "own", _spec())
