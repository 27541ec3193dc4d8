from datetime import UTC, datetime
from pathlib import Path

import pytest

from crawdad.config import RunConfig, public_dump
from crawdad.errors import StoreError
from crawdad.records import DatasetInfo, DebateRecord, RunManifest
from crawdad.run.store import TORN, RunStore, is_being_written, read_jsonl_ids


def manifest(ids: list[str] | None = None, **config) -> RunManifest:
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
            selected_ids=ids,
        ),
    )


def record(qid: int, answer: str = "yes", error: str | None = None, seed: int = 0) -> DebateRecord:
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
        seed=seed,
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
    store = RunStore(tmp_path)
    store.open(manifest())
    store.close()
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


def _run_with_records(folder: Path, *records: DebateRecord) -> None:
    store = RunStore(folder)
    store.open(manifest())
    store.append(list(records))
    store.close()


@pytest.mark.parametrize("damage", ["delete", "garble", "empty"])
def test_records_without_a_readable_manifest_are_not_resumed(tmp_path: Path, damage: str) -> None:
    _run_with_records(tmp_path, record(1), record(2))
    path = tmp_path / "manifest.json"
    if damage == "delete":
        path.unlink()
    else:
        path.write_text("{not json" if damage == "garble" else "")
    with pytest.raises(StoreError) as info:
        RunStore(tmp_path).open(manifest(seed=7))
    text = str(info.value)
    assert str(tmp_path) in text
    assert "Restore" in text and "another --out" in text and "--force" in text
    if damage == "delete":
        assert "has 2 debate line(s) in debates.jsonl but no manifest.json" in text
    else:
        assert "manifest.json cannot be read (Invalid JSON" in text
    assert not is_being_written(tmp_path)  # the refusal let go of the lock


def test_force_adopts_a_folder_without_manifest_and_notes_it(tmp_path: Path) -> None:
    _run_with_records(tmp_path, record(1), record(2, seed=5))
    (tmp_path / "manifest.json").unlink()
    store = RunStore(tmp_path)
    scan = store.open(manifest(), force=True)
    store.close()
    adopted = RunStore(tmp_path).read_manifest()
    assert len(adopted.notes) == 1
    assert "manifest.json was missing when 2 debate line(s)" in adopted.notes[0]
    # the line made with another seed is not this run's: it runs again
    assert scan.finished == {"1"} and scan.other_seed == {"2": 5}


def test_force_replaces_a_damaged_manifest_and_keeps_it(tmp_path: Path) -> None:
    _run_with_records(tmp_path, record(1))
    (tmp_path / "manifest.json").write_text("{oops")
    store = RunStore(tmp_path)
    store.open(manifest(), force=True)
    store.close()
    (kept,) = tmp_path.glob("manifest.damaged.*.json")
    assert kept.read_text() == "{oops"
    assert "was damaged" in RunStore(tmp_path).read_manifest().notes[0]


def test_empty_folder_without_manifest_starts_fresh(tmp_path: Path) -> None:
    (tmp_path / "debates.jsonl").write_text("\n")
    store = RunStore(tmp_path)
    store.open(manifest())
    store.close()
    assert RunStore(tmp_path).read_manifest().notes == []


def test_selected_ids_are_kept_and_grow_on_resume(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    store.open(manifest(ids=["0", "1"]))
    store.close()
    m = RunStore(tmp_path).read_manifest()
    assert m.dataset.ids_file == "selected-ids.txt" and m.dataset.selected_ids is None
    assert "selected_ids" not in (tmp_path / "manifest.json").read_text()
    store = RunStore(tmp_path)
    store.open(manifest(ids=["1", "2"]))  # a wider selection resumes the same run
    store.close()
    assert (tmp_path / "selected-ids.txt").read_text() == "0\n1\n2\n"


def test_is_being_written_follows_the_lock(tmp_path: Path) -> None:
    assert not is_being_written(tmp_path)
    store = RunStore(tmp_path)
    store.open(manifest())
    assert is_being_written(tmp_path)
    store.close()
    assert not is_being_written(tmp_path)


def test_a_resume_on_other_started_servers_adds_them_with_a_note(tmp_path: Path) -> None:
    from crawdad.records import StartedServer

    def served_by(version: str, port: int) -> RunManifest:
        server = StartedServer(
            key="qwen3",
            engine="vllm",
            engine_version=version,
            command=["vllm", "serve", "Qwen/Qwen3-32B", "--port", str(port)],
            weights="Qwen/Qwen3-32B",
            weights_hash="revision:abc",
            served_name="qwen3:32b",
            base_url=f"http://127.0.0.1:{port}/v1",
        )
        return manifest().model_copy(update={"started": [server]})

    first = RunStore(tmp_path / "run")
    first.open(served_by("0.9.2", 8100))
    first.close()
    same = RunStore(tmp_path / "run")
    same.open(served_by("0.9.2", 8101))  # another port is not another server
    same.close()
    assert len(RunStore(tmp_path / "run").read_manifest().started) == 1
    other = RunStore(tmp_path / "run")
    other.open(served_by("0.10.0", 8100))
    other.close()
    kept = RunStore(tmp_path / "run").read_manifest()
    assert [s.engine_version for s in kept.started] == ["0.9.2", "0.10.0"]
    assert "server qwen3: now vllm 0.10.0 on Qwen/Qwen3-32B (revision:abc)" in kept.notes[-1]
