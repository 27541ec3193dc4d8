"""The run's seeded order: `--limit N` takes the first N of an order drawn from the seed (a sample
of the benchmark, not a prefix of the file), the same for every variant of an experiment and on
resume; `--range` still names positions in the file; old run folders resume in file order."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crawdad.config import RunConfig, SelectionConfig
from crawdad.data.demo_questions import write_cladder
from crawdad.data.questions import load_cladder, run_order, select
from crawdad.demo import answer_key
from crawdad.fake import FakeServer, paper_models
from crawdad.run.experiment import prepare
from crawdad.run.runner import run
from crawdad.run.store import read_jsonl_ids, recorded_order, selection_for
from tests.conftest import SHARED_SAMPLE


@pytest.fixture
def data(tmp_path: Path) -> Path:
    return write_cladder(tmp_path / "data", 40)


def ids(dataset) -> list[str]:  # type: ignore[no-untyped-def]
    return [str(q.question_id) for q in dataset.questions]


def test_limit_takes_the_first_of_the_seeded_order(data: Path) -> None:
    full = load_cladder(data)
    file_ids = ids(full)
    first = ids(select(full, SelectionConfig(limit=10), 3))
    assert first == ids(select(full, SelectionConfig(limit=10), 3))  # the same seed, the same
    assert first != file_ids[:10] and first != ids(select(full, SelectionConfig(limit=10), 4))
    # every prefix is a prefix of the whole order: --limit 20 extends --limit 10
    assert ids(select(full, SelectionConfig(limit=20), 3))[:10] == first
    assert first == [str(q.question_id) for q in run_order(full.questions, 3)[:10]]
    # the file's order where asked for (and for folders made before the seeded order)
    assert ids(select(full, SelectionConfig(limit=10, order="file"), 3)) == file_ids[:10]


def test_ranges_name_positions_in_the_file(data: Path) -> None:
    full = load_cladder(data)
    shard = select(full, SelectionConfig(ranges=["0-9"]), 3)
    assert set(ids(shard)) == set(ids(full)[:10])  # the same questions, in the run's order
    assert ids(shard) == [i for i in ids(select(full, SelectionConfig(), 3)) if i in ids(shard)]


@pytest.mark.skipif(
    not (SHARED_SAMPLE / "cladder-sample-q.json").exists(), reason="no CLadder sample here"
)
def test_limit_50_on_the_cladder_sample_spans_rungs_and_stories() -> None:
    picked = select(load_cladder(SHARED_SAMPLE), SelectionConfig(limit=50), 0).questions
    assert {q.rung for q in picked} == {1, 2, 3}
    assert len({q.story_id for q in picked}) >= 15


def test_every_variant_of_an_experiment_gets_the_same_order(tmp_path: Path, data: Path) -> None:
    path = tmp_path / "exp.toml"
    path.write_text(
        'baseline = "a"\n[base]\nseed = 7\n[variants.a]\n[variants.b]\nseed = 8\n'
        '[variants.c]\nprotocol = { kind = "solo", samples = 1 }\n'
    )
    _, _, datasets = prepare(path, data, {"selection": {"limit": 15}})
    orders = {name: ids(d) for name, d in datasets.items()}
    assert orders["a"] == orders["b"] == orders["c"]
    assert orders["a"] == ids(select(load_cladder(data), SelectionConfig(limit=15), 7))


async def test_debates_start_in_the_run_order_and_resume_in_it(tmp_path: Path, data: Path) -> None:
    dataset = select(load_cladder(data), SelectionConfig(limit=12), 1)
    models = paper_models(answer_key(dataset.questions))
    out = tmp_path / "run"
    async with FakeServer("ollama", models) as server:
        # one debate at a time: the lines are written in the order the debates started
        cfg = RunConfig(seed=1, concurrency=1).serve_all_from(server.url)
        first = select(load_cladder(data), SelectionConfig(limit=5), 1)
        await run(cfg, first, out, progress=False, simulated=True)
        assert recorded_order(out) == "seeded"
        again = select(load_cladder(data), selection_for(SelectionConfig(limit=12), out), 1)
        await run(cfg, again, out, progress=False, simulated=True)
    assert read_jsonl_ids(out / "debates.jsonl") == ids(dataset)


def test_a_folder_made_before_the_seeded_order_resumes_in_file_order(
    tmp_path: Path, data: Path
) -> None:
    assert recorded_order(tmp_path / "new") is None
    old = tmp_path / "old"
    old.mkdir()
    (old / "manifest.json").write_text(json.dumps({"schema_version": 7}))
    selection = selection_for(SelectionConfig(limit=10), old)
    assert selection.order == "file"
    assert ids(select(load_cladder(data), selection, 1)) == ids(load_cladder(data))[:10]
    # an experiment folder: its variants' manifests tell
    exp = tmp_path / "exp"
    (exp / "paper").mkdir(parents=True)
    (exp / "paper" / "manifest.json").write_text(json.dumps({"schema_version": 5}))
    assert recorded_order(exp) == "file"
