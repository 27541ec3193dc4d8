import json
import shutil
import zipfile
from pathlib import Path

import pytest
from conftest import SHARED_SAMPLE

from crawdad.config import SelectionConfig
from crawdad.data import load_cladder, parse_ranges, select, stratified_sample, summary
from crawdad.errors import DataError


def test_joins_background_and_derives_fields(tiny_cladder: Path) -> None:
    ds = load_cladder(tiny_cladder)
    q = ds.questions[2]
    assert q.block == (
        "Ear shape has a direct effect on tar.\n\nThe probability of tar is 12%.\n\nQuestion: Is question number 2 true?"
    )
    assert [x.alignment for x in ds.questions] == ["commonsense"] * 2 + ["anticommonsense"] * 2 + [
        "nonsense"
    ] * 2
    assert ds.info.n_total == 6 and len(ds.info.sha256) == 64


def test_questions_file_directly_and_from_zip(tiny_cladder: Path, tmp_path: Path) -> None:
    direct = load_cladder(tiny_cladder / "tiny-q-balanced.json")
    archive = tmp_path / "x.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for p in tiny_cladder.iterdir():
            zf.write(p, f"some/nested/{p.name}")
    zipped = load_cladder(archive)
    assert [q.block for q in direct.questions] == [q.block for q in zipped.questions]


def test_picks_balanced_file_among_several(tiny_cladder: Path) -> None:
    shutil.copy(tiny_cladder / "tiny-q-balanced.json", tiny_cladder / "tiny-q-hard.json")
    assert load_cladder(tiny_cladder).info.questions_file.endswith("tiny-q-balanced.json")
    assert load_cladder(tiny_cladder, "tiny-q-hard.json").info.questions_file.endswith(
        "tiny-q-hard.json"
    )
    with pytest.raises(DataError, match="not found; choose one of"):
        load_cladder(tiny_cladder, "easy")


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda qs: qs[1].pop("answer"), r"question 1 \(entry 1\): missing answer"),
        (lambda qs: qs[2]["meta"].pop("rung"), "missing meta.rung"),
        (lambda qs: qs[3]["meta"].update(model_id=99), "unknown meta.model_id 99"),
        (lambda qs: qs[4].update(question_id=0), "question 0: duplicate question_id"),
        (lambda qs: qs[0].update(answer="maybe"), "answer must be 'yes' or 'no'"),
    ],
)
def test_bad_questions_are_named(tiny_cladder: Path, mutate, message: str) -> None:
    path = tiny_cladder / "tiny-q-balanced.json"
    qs = json.loads(path.read_text())
    mutate(qs)
    path.write_text(json.dumps(qs))
    with pytest.raises(DataError, match=message):
        load_cladder(tiny_cladder)


def test_truncated_json_says_cut_short(tiny_cladder: Path) -> None:
    path = tiny_cladder / "tiny-q-balanced.json"
    path.write_text(path.read_text()[:-40])
    with pytest.raises(DataError, match=r"tiny-q-balanced.json is not valid JSON.*cut short"):
        load_cladder(tiny_cladder)


def test_missing_models_file_and_missing_path(tiny_cladder: Path) -> None:
    (tiny_cladder / "tiny-meta-models.json").unlink()
    with pytest.raises(DataError, match="no meta-models file"):
        load_cladder(tiny_cladder)
    with pytest.raises(DataError, match="crawdad data fetch"):
        load_cladder(tiny_cladder / "nope.zip")


def test_damaged_zip(tmp_path: Path) -> None:
    bad = tmp_path / "cladder-v1.zip"
    bad.write_bytes(b"PK\x03\x04 not really a zip")
    with pytest.raises(DataError, match="not a valid zip"):
        load_cladder(bad)


def test_selection_filters_and_empty_selection(tiny_cladder: Path) -> None:
    ds = load_cladder(tiny_cladder)
    picked = select(
        ds, SelectionConfig(rungs=[1, 3], alignments=["anticommonsense", "nonsense"]), seed=0
    )
    assert [q.question_id for q in picked.questions] == [2, 3, 5]
    assert picked.info.n_selected == 3 and picked.info.selection["rungs"] == [1, 3]
    assert [
        q.question_id for q in select(ds, SelectionConfig(ranges=["1-2", "5-"]), 0).questions
    ] == [1, 2, 5]
    with pytest.raises(DataError, match="leaves no questions"):
        select(ds, SelectionConfig(query_types=["ate"], rungs=[1]), 0)
    with pytest.raises(DataError, match="unknown query type"):
        select(ds, SelectionConfig(query_types=["atee"]), 0)


def test_ranges() -> None:
    assert parse_ranges(["0-2", "8-"], 10) == [0, 1, 2, 8, 9]
    assert parse_ranges(["-1,5"], 10) == [0, 1, 5]
    with pytest.raises(DataError, match="bad index range"):
        parse_ranges(["a-b"], 10)


def test_stratified_sample_is_seeded_and_proportional(tiny_cladder: Path) -> None:
    qs = load_cladder(tiny_cladder).questions * 1
    a = stratified_sample(qs, 3, seed=1)
    assert a == stratified_sample(qs, 3, seed=1)
    assert len(a) == 3


@pytest.mark.skipif(not SHARED_SAMPLE.exists(), reason="shared CLadder sample not present")
@pytest.mark.parametrize("name", ["cladder-sample.zip", "", "cladder-sample-q.json"])
def test_real_cladder_sample_counts(name: str) -> None:
    ds = load_cladder(SHARED_SAMPLE / name if name else SHARED_SAMPLE)
    counts = summary(ds.questions)
    assert ds.info.n_total == 3652
    assert counts["rung"] == {"1": 1356, "2": 1288, "3": 1008}
    assert counts["alignment"] == {"commonsense": 1688, "anticommonsense": 844, "nonsense": 1120}
    assert counts["answer"] == {"yes": 1764, "no": 1888}
    q = ds.questions[0]
    assert q.block.startswith("Imagine a self-contained, hypothetical world")
    assert q.block.endswith(
        "Question: Will alarm set by husband increase the chance of ringing alarm?"
    )
    sample = select(ds, SelectionConfig(sample=300), seed=7).questions
    by_rung = summary(sample)["rung"]
    assert len(sample) == 300 and abs(by_rung["1"] - 300 * 1356 / 3652) <= 2
