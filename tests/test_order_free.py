"""Same records, same report (issue 29): a run folder whose debates.jsonl lines are put in
another order gives byte-identical tables and report.md; two identical runs give identical
tables and report apart from the wall-clock figures, which live in their own tables and
section."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

from crawdad.analysis.report import WALL_CLOCK_SECTION, WALL_CLOCK_TABLES, write_report

from crawdad.demo import run_demo
from tests.test_data_task import data_folder  # noqa: F401  (the module's fixture)


def _written(report_md: Path) -> dict[str, str]:
    root = report_md.parent
    files = {p.relative_to(root).as_posix(): p.read_text() for p in root.rglob("*.csv")}
    files["report.md"] = report_md.read_text()
    return files


def _without_the_clock(files: dict[str, str]) -> dict[str, str]:
    """The tables that are not wall-clock tables, and report.md without its clock section."""
    kept = {k: v for k, v in files.items() if Path(k).stem not in WALL_CLOCK_TABLES}
    head, _, rest = kept["report.md"].partition(f"### {WALL_CLOCK_SECTION}")
    kept["report.md"] = head + "###" + rest.partition("\n### ")[2]
    return kept


def test_shuffled_records_give_the_same_tables_and_report(tmp_path: Path) -> None:
    run = tmp_path / "demo"
    run_demo(run, limit=40, progress=False)
    before = _written(write_report([run], tmp_path / "before", workers=1))
    debates = run / "debates.jsonl"
    lines = debates.read_text().splitlines(keepends=True)
    shuffled = lines[:]
    random.Random(7).shuffle(shuffled)
    assert shuffled != lines
    debates.write_text("".join(shuffled))
    after = _written(write_report([run], tmp_path / "after", workers=1))
    assert before.keys() == after.keys() and len(before) > 20
    changed = [name for name in before if before[name] != after[name]]
    assert changed == []


def test_two_identical_runs_differ_only_in_their_wall_clock_figures(tmp_path: Path) -> None:
    reports = []
    for i in range(2):
        run = tmp_path / "demo"  # the same command twice: the same --out
        shutil.rmtree(run, ignore_errors=True)
        run_demo(run, limit=40, progress=False)
        reports.append(_written(write_report([run], tmp_path / f"report-{i}", workers=1)))
    first, second = reports
    assert first.keys() == second.keys()
    clock = {k for k in first if Path(k).stem in WALL_CLOCK_TABLES}
    assert {Path(k).stem for k in clock} == set(WALL_CLOCK_TABLES)
    assert any(first[k] != second[k] for k in clock)  # the clock did move: the test can fail
    a, b = _without_the_clock(first), _without_the_clock(second)
    assert [k for k in a if a[k] != b[k]] == []
    assert first["report.md"] != second["report.md"]  # only inside the clock section


def test_no_clock_figure_outside_the_wall_clock_tables(data_folder: Path, tmp_path: Path) -> None:  # noqa: F811
    """Every figure measured by the clock lives in a table named for it (the run report's
    WALL_CLOCK_TABLES, a task's or the experiment's `*seconds*` tables): a discovery run and a
    questions-from-data run, analysed together, hold seconds nowhere else."""
    from crawdad.config import RunConfig, load_config

    pairs = tmp_path / "pairs"
    run_demo(pairs, limit=2, progress=False, config=load_config(Path("discovery/meta-agents")))
    data = tmp_path / "data"
    cfg = RunConfig(task="cladder-data")
    cfg.agents[0].tools = ["data"]  # type: ignore[list-item]
    run_demo(data, limit=4, progress=False, config=cfg, data=data_folder)
    out = tmp_path / "report"
    write_report([pairs, data], out, workers=1)
    leaks = []
    for csv in sorted(out.rglob("*.csv")):
        if "seconds" in csv.stem or csv.stem in WALL_CLOCK_TABLES:
            continue
        text = csv.read_text()
        if "seconds" in text or "gpu_s" in text:
            leaks.append(csv.relative_to(out).as_posix())
    assert leaks == []
    assert (out / "discovery" / "tables" / "gpu_seconds.csv").is_file()
    assert (out / "data" / "tables" / "data_cost_seconds.csv").is_file()
