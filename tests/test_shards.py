"""A cluster's shards analysed as one run (issue 32): folders made with the same settings over
disjoint `--range`s are pooled into one run's report; the same settings over overlapping
questions are refused unless compared; different runs are still compared side by side."""

from __future__ import annotations

from pathlib import Path

import pytest
from crawdad.analysis.load import load_runs
from crawdad.analysis.report import write_report
from crawdad.analysis.shards import pool_shards

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
    assert one.label == "paper" and one.shards == folders
    assert len(one.debates) == 20 and one.debates["question_id"].astype(str).nunique() == 20
    report = write_report(folders, tmp_path / "report", workers=1).read_text()
    assert "Runs side by side" not in report
    assert "pooled from 2 shards" in report
    assert "## Run `paper`" in report


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
