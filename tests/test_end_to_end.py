"""A few hundred debates on the fake servers, then `crawdad analyze`: every table and figure."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

from crawdad.data.demo_questions import write_cladder
from crawdad.data.questions import load_cladder
from crawdad.demo import answer_key, demo_config
from crawdad.fake import FakeServer, paper_models
from crawdad.run.runner import run

FIGURES = [
    "accuracy",
    "fig2_persuasion",
    "fig3_confidence",
    "fig4_answer_changes",
    "fig5_confidence_change",
    "fig6_rounds",
    "fig7_lengths",
    "fig8_timing",
    "reliability",
]
TABLES = [
    "table1",
    "mcnemar",
    "persuasion",
    "sentiment",
    "confidence",
    "answer_changes",
    "confidence_change",
    "confident_wrong_corrected",
    "rounds_to_finish",
    "consensus_by_round",
    "lengths",
    "short_debate_turns",
    "timing",
    "slowest_seconds",
    "accuracy_by_cap",
    "calibration",
    "reliability",
    "accuracy_by_query_type",
    "accuracy_by_gold",
    "errored_debates",
    "summary",
]


def test_fake_run_then_analyze_writes_every_table_and_figure(tmp_path: Path) -> None:
    dataset = load_cladder(write_cladder(tmp_path / "data", 300))
    with FakeServer("ollama", paper_models(answer_key(dataset.questions))) as server:
        summary = asyncio.run(
            run(
                demo_config(server.url, 64),
                dataset,
                tmp_path / "run",
                progress=False,
                simulated=True,
            )
        )
    assert summary.done_total == 300
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "crawdad",
            "analyze",
            str(tmp_path / "run"),
            "--out",
            str(tmp_path / "report"),
            "--figures",
            "png,pdf",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    report = tmp_path / "report"
    text = (report / "report.md").read_text()
    assert "SIMULATED" in text
    for name in FIGURES:
        for ext in ("png", "pdf"):
            path = report / "run" / "figures" / f"{name}.{ext}"
            assert path.stat().st_size > 1000, path
        assert f"figures/{name}.png" in text
    for name in TABLES:
        for ext in ("csv", "md"):
            path = report / "run" / "tables" / f"{name}.{ext}"
            assert path.stat().st_size > 0, path
    assert (report / "run" / "tables" / "table1.tex").read_text().count("\\\\") >= 3
