"""A cluster's shards analysed as one run (issue 32): folders made with the same settings over
disjoint `--range`s are pooled into one run's report; the same settings over overlapping
questions are refused unless compared; different runs are still compared side by side."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from crawdad.analysis.load import load_runs
from crawdad.analysis.report import write_report
from crawdad.analysis.shards import pool_shards

import crawdad
from crawdad.config import RunConfig
from crawdad.data.demo_questions import EXAMPLES
from crawdad.data.questions import SelectionConfig, load_cladder, select
from crawdad.demo import answer_key
from crawdad.errors import StoreError
from crawdad.fake import FakeServer, paper_models
from crawdad.run.runner import run


async def _shards(tmp_path: Path, ranges: dict[str, str], seed: dict[str, int]) -> list[Path]:
    everything = load_cladder(EXAMPLES)
    models = paper_models(answer_key(everything.questions))
    folders = []
    async with FakeServer("ollama", models) as server:
        for name, span in ranges.items():
            config = RunConfig(seed=seed.get(name, 0)).serve_all_from(server.url)
            config.selection = SelectionConfig(ranges=[span])
            dataset = select(everything, config.selection, config.seed)
            await run(config, dataset, tmp_path / name, progress=False, simulated=True)
            folders.append(tmp_path / name)
    return folders


async def test_two_shards_make_one_runs_report(tmp_path: Path) -> None:
    folders = await _shards(tmp_path / "paper", {"shard-0": "0-9", "shard-1": "10-19"}, {})
    runs = pool_shards(load_runs(folders))
    assert len(runs) == 1
    (one,) = runs
    # named after its shards' folders (shard-0, shard-1), never after the folder they lie in
    assert one.label == "shard" and one.shards == folders
    assert len(one.debates) == 20 and one.debates["question_id"].astype(str).nunique() == 20
    report = write_report(folders, tmp_path / "report", workers=1).read_text()
    assert "Runs side by side" not in report
    assert "pooled from 2 shards" in report
    assert "## Run `shard`" in report


async def test_overlapping_shards_are_refused_unless_compared(tmp_path: Path) -> None:
    folders = await _shards(tmp_path, {"a": "0-9", "b": "5-14"}, {})
    with pytest.raises(StoreError, match=r"share 5 questions.*--compare"):
        pool_shards(load_runs(folders))
    assert len(pool_shards(load_runs(folders), compare=True)) == 2
    report = write_report(folders, tmp_path / "report", workers=1, compare=True).read_text()
    assert "Runs side by side" in report


async def test_different_runs_are_still_compared_side_by_side(tmp_path: Path) -> None:
    folders = await _shards(tmp_path, {"a": "0-9", "b": "10-19"}, {"b": 1})  # another seed
    assert [r.label for r in pool_shards(load_runs(folders))] == ["a", "b"]
    report = write_report(folders, tmp_path / "report", workers=1).read_text()
    assert "Runs side by side" in report


def _accuracy(debates: pd.DataFrame) -> float:
    return float((debates["final_answer"] == debates["gold"]).mean())


async def test_two_sharded_runs_in_one_folder_keep_their_own_names_and_numbers(
    tmp_path: Path,
) -> None:
    """Issue 40: two runs (seeds 0 and 1), each in two --range shards, all four folders in one
    parent `runs/`: analysed side by side, each run gets its own label and its own accuracy
    (both used to be labelled `runs`: analyze crashed and load_frames merged them)."""
    spans = {"seed0-a": "0-9", "seed0-b": "10-19", "seed1-a": "20-29", "seed1-b": "30-39"}
    seeds = {"seed1-a": 1, "seed1-b": 1}
    folders = await _shards(tmp_path / "runs", spans, seeds)
    alone = {
        seed: _accuracy(pool_shards(load_runs(folders[2 * i : 2 * i + 2]))[0].debates)
        for i, seed in enumerate(("seed0", "seed1"))
    }
    runs = pool_shards(load_runs(folders))
    assert [r.label for r in runs] == ["seed0", "seed1"]
    assert [len(r.debates) for r in runs] == [20, 20]
    frames = crawdad.load_frames(*folders)
    assert sorted(frames.debates["run"].unique()) == ["seed0", "seed1"]
    side_by_side = {
        label: _accuracy(group) for label, group in frames.debates.groupby("run", sort=True)
    }
    assert side_by_side == alone and alone["seed0"] != alone["seed1"]  # merged, they'd blur
    report = write_report(folders, tmp_path / "report", workers=1).read_text()
    assert "Runs side by side" in report
    assert "## Run `seed0`" in report and "## Run `seed1`" in report


def test_pooled_names_never_take_another_runs_name(tmp_path: Path) -> None:
    """Shards whose common name is another run's folder name get a name of their own."""
    from crawdad.analysis.load import Run
    from crawdad.analysis.shards import _label, _unique

    def run(label: str) -> Run:
        return Run(
            label=label,
            path=tmp_path / label,
            manifest=None,
            debates=pd.DataFrame(),
            turns=pd.DataFrame(),
        )

    assert _label([run("seed0-a"), run("seed0-b")]) == "seed0"
    assert _label([run("x"), run("y"), run("z")]) == "x+2 shards"
    assert _unique("seed0", {"seed0", "seed0~2"}) == "seed0~3"
