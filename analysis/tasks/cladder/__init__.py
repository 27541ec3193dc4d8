"""The analysis of CLadder's own questions (`crawdad/tasks/cladder.py`) beyond the paper's
sections every yes/no run gets: the contamination check (originals against their fresh twins)
and step scoring (which CausalCoT step goes wrong first)."""

from __future__ import annotations

from collections.abc import Sequence

from crawdad.analysis.load import Run, concat
from crawdad.analysis.section import Section
from crawdad.analysis.tasks.cladder.contamination import contamination_section
from crawdad.analysis.tasks.cladder.steps import steps_section


def run_sections(runs: Sequence[Run]) -> list[Section]:
    debates, turns = concat(list(runs))
    return [*contamination_section(debates, turns), *steps_section(turns)]
