"""Same records, same report (issue 29): a run folder whose debates.jsonl lines are put in
another order gives byte-identical tables and report.md."""

from __future__ import annotations

import random
from pathlib import Path

from crawdad.analysis.report import write_report

from crawdad.demo import run_demo


def _written(report_md: Path) -> dict[str, str]:
    root = report_md.parent
    files = {p.relative_to(root).as_posix(): p.read_text() for p in root.rglob("*.csv")}
    files["report.md"] = report_md.read_text()
    return files


def test_shuffled_records_give_the_same_tables_and_report(tmp_path: Path) -> None:
    run = tmp_path / "demo"
    run_demo(run, limit=60, progress=False)
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
