from datetime import UTC, datetime
from pathlib import Path

import pytest

from crawdad.config import RunConfig, public_dump
from crawdad.errors import StoreError
from crawdad.records import DatasetInfo, DebateRecord, RunManifest
from crawdad.store import TORN, RunStore, read_jsonl_ids


def manifest(**config) -> RunManifest:
    return RunManifest(
        crawdad_version="t",
        created_at=datetime(2026, 1, 1, tzinfo=UTC),
        config=public_dump(RunConfig(**config)),
        prompts={"initial": "initial@abc"},
        dataset=DatasetInfo(
            source="s",
            questions_file="q",
            models_file="m",
            sha256="0" * 64,
            n_total=3,
            n_selected=3,
        ),
    )


def record(qid: int, answer: str = "yes", error: str | None = None) -> DebateRecord:
    return DebateRecord(
        question_id=qid,
        gold="yes",
        rung=1,
        query_type="ate",
        alignment="commonsense",
        agents={"a": "m", "b": "n"},
        first_speaker="a",
        second_speaker="b",
        final_answer=None if error else answer,
        error=error,
        consensus=not error,
    )


def test_append_and_resume_scan(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "run")
    assert store.open(manifest()).finished == set()
    store.append([record(1), record(2, "no")])
    store.append([record(3, error="server down")])
    store.close()
    scan = RunStore(tmp_path / "run").open(manifest(concurrency=99))
    assert scan.finished == {"1", "2"} and scan.errored == {"3": "server down"}
    assert (scan.correct, scan.consensus, scan.lines) == (1, 2, 3)


def test_retried_error_superseded_by_later_line(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    store.open(manifest())
    store.append([record(1, error="boom")])
    store.append([record(1)])
    store.close()
    scan = RunStore(tmp_path).open(manifest())
    assert scan.finished == {"1"} and scan.errored == {}
    assert [r.ok for r in RunStore(tmp_path).records()] == [True]


def test_torn_last_line_set_aside(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = RunStore(tmp_path)
    store.open(manifest())
    store.append([record(1), record(2)])
    store.close()
    path = tmp_path / "debates.jsonl"
    good = path.read_bytes()
    path.write_bytes(good + record(3).model_dump_json().encode()[:57])
    store = RunStore(tmp_path)
    scan = store.open(manifest())
    assert scan.finished == {"1", "2"}
    assert path.read_bytes() == good  # truncated back to the last whole line, nothing else touched
    assert (tmp_path / TORN).read_bytes().startswith(b'{"schema_version"')
    assert "torn line" in caplog.text
    store.append([record(3)])
    store.close()
    assert read_jsonl_ids(path) == ["1", "2", "3"]


def test_complete_json_without_newline_counts_as_torn(tmp_path: Path) -> None:
    (tmp_path / "debates.jsonl").write_bytes(record(1).model_dump_json().encode())
    assert RunStore(tmp_path).open(manifest()).finished == set()


def test_other_settings_refused_with_differences(tmp_path: Path) -> None:
    RunStore(tmp_path).open(manifest()).finished  # noqa: B018
    RunStore(tmp_path).close()
    with pytest.raises(StoreError, match=r"other settings:\n  - config.seed: 0 -> 4"):
        RunStore(tmp_path).open(manifest(seed=4))


def test_force_keeps_old_manifest(tmp_path: Path) -> None:
    s = RunStore(tmp_path)
    s.open(manifest())
    s.close()
    s = RunStore(tmp_path)
    s.open(manifest(seed=4), force=True)
    s.close()
    assert len(list(tmp_path.glob("manifest.*.json"))) == 1
    assert RunStore(tmp_path).read_manifest().config["seed"] == 4


def test_second_process_is_locked_out(tmp_path: Path) -> None:
    first = RunStore(tmp_path)
    first.open(manifest())
    with pytest.raises(StoreError, match="another crawdad process"):
        RunStore(tmp_path).open(manifest())
    first.close()


def test_unwritable_folder(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(StoreError, match="cannot write to the run folder"):
        RunStore(blocker / "run").open(manifest())
