"""Every figure of the report: pure functions from the metrics' tables of ONE run to a
`matplotlib.figure.Figure` (no pyplot), plus `save` (PNG + PDF, or PNG alone: `figure_formats`)
and the shared style.

Sized for one paper column (3.5 in wide, fonts >= 8 pt at 100%), with one colour per model
(`agent_colors`) used in every figure where models are told apart.
"""

from crawdad.analysis.figures._style import (
    COLUMN_WIDTH,
    agent_colors,
    figure_formats,
    no_data_figure,
    save,
)
from crawdad.analysis.figures.confidence import (
    change_figure,
    confidence_change_figure,
    confidence_figure,
)
from crawdad.analysis.figures.debate import lengths_figure, rounds_figure, timing_figure
from crawdad.analysis.figures.outcomes import accuracy_figure, persuasion_figure, reliability_figure

__all__ = [
    "COLUMN_WIDTH",
    "accuracy_figure",
    "agent_colors",
    "change_figure",
    "confidence_change_figure",
    "confidence_figure",
    "figure_formats",
    "lengths_figure",
    "no_data_figure",
    "persuasion_figure",
    "reliability_figure",
    "rounds_figure",
    "save",
    "timing_figure",
]
