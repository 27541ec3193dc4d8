"""The analysis of questions answered from data (`crawdad/tasks/cladder_data.py`, tasks
cladder-data*): `ways` (each way of answering against the label and the perfect estimator, paired
differences, tool errors, cost) and `pipeline` (LLM4Causal's pipeline under the paper's
metrics)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from crawdad.analysis.load import Run
from crawdad.analysis.section import Section
from crawdad.analysis.tasks.cladder_data.ways import data_section, run_records


def run_sections(runs: Sequence[Run]) -> list[Section]:
    """The run report's sections: every run given joins (a run over CLadder's own questions
    is the stated-numbers way of answering)."""
    return data_section([(r.label, run_records(r)) for r in runs])


def experiment_sections(variants: Sequence[Any], baseline: str | None) -> list[Section]:
    """The experiment report's sections: every variant, with or without the counts."""
    return data_section([(v.name, run_records(v.run)) for v in variants])
