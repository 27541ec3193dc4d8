"""The analysis of the discovery tasks (`crawdad/tasks/discovery/`: discovery-pairs and
discovery-graph): `metrics` (graphs assembled and scored), `figures`, `report` (the "Causal
discovery" section of run and experiment reports)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from crawdad.analysis.load import Run
from crawdad.analysis.section import Section


def run_sections(runs: Sequence[Run]) -> list[Section]:
    from crawdad.analysis.tasks.discovery.sections import discovery_section

    return discovery_section(list(runs))


def experiment_sections(variants: Sequence[Any], baseline: str | None) -> list[Section]:
    from crawdad.analysis.tasks.discovery.sections import experiment_discovery_section

    return experiment_discovery_section(variants, baseline)
