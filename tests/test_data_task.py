"""The cladder-data task: a `crawdad data tables` folder loads as questions that carry their table
and the perfect estimator's answer; records keep both answers; the counts can be left out of the
text; a folder without tables is refused with the command that makes one."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from crawdad.config import RunConfig, SelectionConfig
from crawdad.data.tables import make_tables, write_tables
from crawdad.errors import ConfigError, DataError
from crawdad.run.runner import build_setup
from crawdad.tasks import task_named
from crawdad.tasks.base import tool_context
from crawdad.tasks.cladder_data import COUNTS_MARK, DataQuestion
from crawdad.tools.data_tools import Table
from tests.conftest import SHARED_SAMPLE

SAMPLE = Path(os.environ.get("CRAWDAD_SAMPLE", SHARED_SAMPLE))


@pytest.fixture(scope="module")
def data_folder(tmp_path_factory) -> Path:
    if not (SAMPLE / "cladder-sample-q.json").exists():
        pytest.skip(f"the CLadder sample is not at {SAMPLE}")
    out = tmp_path_factory.mktemp("data") / "tables"
    result = make_tables(SAMPLE, seed=5, rows=1000, selection=SelectionConfig(sample=40))
    write_tables(result, out, SAMPLE, 5, 1000)
    return out


def test_items_carry_their_table_and_both_answers(data_folder: Path) -> None:
    task = task_named("cladder-data")
    dataset = task.load(data_folder)
    assert dataset.questions and all(isinstance(q, DataQuestion) for q in dataset.questions)
    q = dataset.questions[0]
    assert isinstance(q.table, Table) and q.table.columns == tuple(q.data.columns)
    assert q.table.counts.n == q.data.rows == 1000
    assert q.data.exact_answer == q.answer and q.data.perfect_answer in ("yes", "no")
    assert q.meta["treatment"] == "X" and q.meta["query_type"] == q.query_type
    # Questions of one model share one table.
    by_table: dict[str, set[int]] = {}
    for item in dataset.questions:
        by_table.setdefault(item.data.table, set()).add(id(item.table))
    assert all(len(ids) == 1 for ids in by_table.values())
    fields = task.record_fields(q)
    assert fields["gold"] == q.answer and fields["rung"] == q.rung
    assert fields["item"]["perfect_answer"] == q.data.perfect_answer
    assert fields["item"]["perfect_agrees"] == (q.data.perfect_answer == q.answer)
    assert fields["item"]["counts_in_text"] is True and fields["item"]["rows"] == 1000
    assert tool_context(task, q) == {"table": q.table}
    assert tool_context(task_named("cladder"), q) == {}


def test_the_counts_can_be_left_out_of_the_text(data_folder: Path) -> None:
    with_counts, without = task_named("cladder-data"), task_named("cladder-data-no-counts")
    q = with_counts.load(data_folder).questions[0]
    shown, hidden = with_counts.show(q), without.show(q)
    assert COUNTS_MARK in shown and " count\n" in shown
    assert COUNTS_MARK not in hidden and " count\n" not in hidden
    assert "Data: a table of 1000 observations" in hidden
    assert hidden.endswith(q.block.rsplit("\n\n", 1)[1])  # the same question line
    assert without.record_fields(q)["item"]["counts_in_text"] is False


def test_a_folder_without_tables_is_refused_naming_the_command() -> None:
    if not (SAMPLE / "cladder-sample-q.json").exists():
        pytest.skip(f"the CLadder sample is not at {SAMPLE}")
    with pytest.raises(DataError, match=r"crawdad data tables DATA --out DIR"):
        task_named("cladder-data").load(SAMPLE)


def test_the_data_task_takes_cladder_prompt_sets() -> None:
    for prompt_set in ("paper", "data-context"):
        setup, _ = build_setup(RunConfig(task="cladder-data", prompt_set=prompt_set))
        assert setup.task.name == "cladder-data"
    with pytest.raises(ConfigError, match="mac-pairs"):
        build_setup(RunConfig(task="cladder-data", prompt_set="mac-pairs"))
