"""Loading run folders: last line wins, torn and invalid lines, labels, parallel parsing."""

from __future__ import annotations

import fcntl
import json
import warnings
from pathlib import Path

import crawdad.analysis.load as L
import pandas as pd
import pytest
from crawdad.analysis.load import agent_label, load_run, load_runs, records_to_frames
from crawdad.analysis.synthetic_runs import synthetic_records, write_synthetic_run

from crawdad.errors import StoreError
from crawdad.records import DebateRecord, RunManifest


def _write(folder: Path, lines: list[str], tail: str = "") -> Path:
    write_synthetic_run(folder, 0)  # the manifest
    (folder / "debates.jsonl").write_text("".join(line + "\n" for line in lines) + tail)
    return folder


def _recs(n: int, **kw) -> list[DebateRecord]:
    """Records of the run `_write` makes (seed 0); `seed` here only varies their content."""
    recs = synthetic_records(n, trace_chars=(50, 100), **kw)
    return [r.model_copy(update={"seed": 0}) for r in recs]


def test_last_line_per_question_wins(tmp_path):
    a = _recs(3, seed=1)
    b = _recs(3, seed=2)  # same question ids, other content
    # q1 appears three times: a, b, then a again -> the third line (a) wins; q2 only in b.
    lines = [
        a[0].model_dump_json(),
        a[1].model_dump_json(),
        b[1].model_dump_json(),
        b[2].model_dump_json(),
        a[1].model_dump_json(),
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no manifest
        run = load_run(_write(tmp_path / "r", lines))
    assert run.n_superseded == 2
    assert len(run.debates) == 3
    d = run.debates.set_index("question_id")
    assert d.loc["1", "n_turns"] == len(a[1].turns)
    assert d.loc["1", "final_answer"] == a[1].final_answer
    assert d.loc["2", "n_turns"] == len(b[2].turns)
    # turns follow the winning line only
    assert (run.turns["question_id"] == "1").sum() == len(a[1].turns)


def test_errored_then_retried_debate_is_replaced(tmp_path):
    ok = _recs(1)[0]
    failed = ok.model_copy(
        update={
            "turns": ok.turns[:1],
            "error": "boom",
            "end": "error",
            "final_answer": None,
            "consensus": False,
        }
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run = load_run(_write(tmp_path / "r", [failed.model_dump_json(), ok.model_dump_json()]))
    assert not run.debates["errored"].any()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run = load_run(_write(tmp_path / "s", [ok.model_dump_json(), failed.model_dump_json()]))
    assert run.debates["errored"].all()  # the later line wins even if it is worse


def test_torn_last_line_is_skipped_with_a_warning(tmp_path):
    recs = _recs(4)
    lines = [r.model_dump_json() for r in recs]
    torn = recs[0].model_dump_json()[:-40]  # a retry of q0, cut by a crash
    folder = _write(tmp_path / "r", lines, tail=torn)
    with pytest.warns(UserWarning, match="torn last line"):
        run = load_run(folder)
    assert len(run.debates) == 4
    assert run.n_invalid_lines == 1 and run.n_superseded == 0
    assert run.debates.set_index("question_id").loc["0", "n_turns"] == len(recs[0].turns)


def test_invalid_middle_line_is_skipped_and_reported(tmp_path):
    recs = _recs(3)
    bad = json.loads(recs[1].model_dump_json())
    bad["gold"] = "maybe"  # fails validation
    lines = [recs[0].model_dump_json(), json.dumps(bad), "", recs[2].model_dump_json()]
    with pytest.warns(UserWarning, match="invalid line"):
        run = load_run(_write(tmp_path / "r", lines))
    assert sorted(run.debates["question_id"]) == ["0", "2"]
    assert run.n_invalid_lines == 1
    assert any("invalid line" in w for w in run.warnings)


def test_missing_debates_file_raises(tmp_path):
    write_synthetic_run(tmp_path / "r", 0)
    (tmp_path / "r" / "debates.jsonl").unlink()
    with pytest.raises(StoreError, match=r"has no debates yet \(debates\.jsonl is missing\)"):
        load_run(tmp_path / "r")


def test_frames_keep_no_text(tmp_path):
    folder = write_synthetic_run(tmp_path / "r", 5)
    run = load_run(folder)
    assert list(run.debates.columns) == L.DEBATE_COLUMNS
    assert list(run.turns.columns) == L.TURN_COLUMNS
    assert not {"text", "thinking", "prompt"} & set(run.turns.columns)
    assert (run.turns["thinking_chars"] > 1000).all()
    assert run.simulated and run.manifest is not None


def test_agent_labels():
    assert agent_label("qwen3", "qwen3:32b") == "qwen3 (qwen3:32b)"
    assert agent_label("qwen3:32b", "qwen3:32b") == "qwen3:32b"
    d, t = records_to_frames(_recs(4, agents={"a": "m1", "b": "m1"}))
    assert set(d["first_agent"]) | set(d["second_agent"]) == {"a (m1)", "b (m1)"}
    assert set(t["agent"]) == {"a (m1)", "b (m1)"}  # same model, still two agents


def test_parallel_parse_equals_serial(tmp_path, monkeypatch):
    folder = write_synthetic_run(tmp_path / "r", 60, error_rate=0.1, torn_tail=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        serial = load_run(folder, workers=1)
        monkeypatch.setattr(L, "_PARALLEL_BYTES", 0)
        parallel = load_run(folder, workers=3)
    assert parallel.n_superseded == serial.n_superseded > 0
    assert parallel.n_invalid_lines == serial.n_invalid_lines == 1
    pd.testing.assert_frame_equal(serial.debates, parallel.debates)
    pd.testing.assert_frame_equal(serial.turns, parallel.turns)


def test_chunk_boundaries_split_lines_once(tmp_path):
    folder = _write(tmp_path / "r", [f'{{"n": {i}}}' for i in range(50)])
    path = folder / "debates.jsonl"
    size = path.stat().st_size
    src = L._Source(folder, folder, "debates.jsonl")
    for n in (1, 2, 3, 7, 50):
        got = [line for a, b in L._chunks(size, n) for _, line in L._iter_lines(src, a, b)]
        assert got == path.read_bytes().splitlines(keepends=True)


def test_load_runs_labels_are_unique(tmp_path):
    a = write_synthetic_run(tmp_path / "x" / "run", 3)
    b = write_synthetic_run(tmp_path / "y" / "run", 3)
    runs = load_runs([a, b])
    assert [r.label for r in runs] == ["x/run", "y/run"]


def _quiet_load(folder: Path):
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        run = load_run(folder)
    return run, [str(w.message) for w in seen]


def _select(folder: Path, ids: list[int]) -> None:
    """Give a synthetic run's manifest a selected-ids file, as `crawdad run` writes it."""
    m = RunManifest.model_validate_json((folder / "manifest.json").read_text())
    m.dataset.ids_file = "selected-ids.txt"
    (folder / "manifest.json").write_text(m.model_dump_json())
    (folder / "selected-ids.txt").write_text("".join(f"{i}\n" for i in ids))


def test_debates_of_another_seed_are_left_out_and_reported(tmp_path):
    folder = write_synthetic_run(tmp_path / "r", 6, retry_errors=False)
    other = [r.model_copy(update={"seed": 7}) for r in synthetic_records(3, seed=1, ids=[4, 5, 6])]
    with (folder / "debates.jsonl").open("a") as f:
        f.writelines(r.model_dump_json() + "\n" for r in other)
    run, said = _quiet_load(folder)
    assert sorted(run.debates["question_id"]) == ["0", "1", "2", "3"]
    assert run.n_other_settings == 3
    assert any(
        "3 debate(s) were made with seed 7, not the run's seed 0" in m and "left out" in m
        for m in said
    )


def test_several_seeds_without_manifest_are_refused(tmp_path):
    folder = write_synthetic_run(tmp_path / "r", 4, retry_errors=False)
    with (folder / "debates.jsonl").open("a") as f:
        f.write(_recs(1)[0].model_copy(update={"seed": 9, "question_id": 8}).model_dump_json())
        f.write("\n")
    (folder / "manifest.json").unlink()
    with pytest.raises(StoreError, match=r"several seeds \(seed 0: 4, seed 9: 1\)"):
        load_run(folder)


def test_debates_of_other_agents_are_left_out(tmp_path):
    folder = write_synthetic_run(tmp_path / "r", 4, retry_errors=False)
    rec = _recs(1, agents={"x": "m1", "y": "m2"})[0].model_copy(update={"question_id": 9})
    with (folder / "debates.jsonl").open("a") as f:
        f.write(rec.model_dump_json() + "\n")
    run, said = _quiet_load(folder)
    assert len(run.debates) == 4 and run.n_other_settings == 1
    assert any("1 debate(s) were made by other agents (x=m1, y=m2)" in m for m in said)


def test_questions_outside_the_selection_are_left_out_and_named(tmp_path):
    folder = write_synthetic_run(tmp_path / "r", 6, retry_errors=False)
    _select(folder, [0, 1, 2, 3])
    run, said = _quiet_load(folder)
    assert sorted(run.debates["question_id"]) == ["0", "1", "2", "3"]
    assert run.n_outside_selection == 2
    assert set(run.turns["question_id"]) == {"0", "1", "2", "3"}
    assert any(
        "2 debate(s) are for questions not in the run's selection (4 questions in "
        "selected-ids.txt): 4, 5; they are left out" in m
        for m in said
    )


def test_old_manifest_without_selection_counts_all_and_says_so(tmp_path):
    folder = write_synthetic_run(tmp_path / "r", 3, retry_errors=False)
    run, said = _quiet_load(folder)
    assert len(run.debates) == 3 and run.n_outside_selection == 0
    assert any("selection is unknown, every debate is counted" in m for m in said)


def test_run_still_being_written_says_so(tmp_path):
    folder = write_synthetic_run(tmp_path / "r", 3, retry_errors=False)
    with (folder / ".lock").open("w") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        run, said = _quiet_load(folder)
    assert run.live
    assert said[0].startswith("this run was still being written when analysed: 3 debates so far")
    assert not _quiet_load(folder)[0].live


def test_manifest_notes_are_shown(tmp_path):
    folder = write_synthetic_run(tmp_path / "r", 2, retry_errors=False)
    m = RunManifest.model_validate_json((folder / "manifest.json").read_text())
    m.notes.append("2026-01-01T00:00:00+00:00: manifest.json was missing when 2 debate line(s)")
    (folder / "manifest.json").write_text(m.model_dump_json())
    assert any("manifest.json was missing when 2" in w for w in _quiet_load(folder)[1])


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: None, r"does not exist; give the --out folder"),
        (lambda p: p.mkdir(), r"is empty: it is not a crawdad run folder"),
        (lambda p: (p.mkdir(), (p / "x.txt").write_text("x")), r"has no manifest.json and no"),
        (lambda p: p.write_text("x"), r"is a file, not a run folder"),
        (
            lambda p: (write_synthetic_run(p, 2), (p / "manifest.json").write_text("{")),
            r"manifest.json cannot be read \(Invalid JSON.*Restore it",
        ),
        (
            lambda p: (write_synthetic_run(p, 0), (p / "debates.jsonl").write_text("")),
            r"has no readable debates yet",
        ),
    ],
)
def test_folders_that_cannot_be_analysed_give_messages(tmp_path, make, message):
    make(tmp_path / "r")
    with pytest.raises(StoreError, match=message):
        load_run(tmp_path / "r")
