"""Pure functions from the tidy frames of `analysis.load` to tidy tables.

Every table has a `run` column first, so several runs can be analysed at once; "all" in the
`agent` (or `rung`, ...) column marks rows that pool the others.
"""

from crawdad.analysis.metrics._stats import (
    bootstrap_paired_difference,
    bootstrap_proportion,
    mcnemar_exact,
)
from crawdad.analysis.metrics.accuracy import (
    ALIGNMENT_LABELS,
    ALL,
    RUNG_LABELS,
    accuracy_by,
    accuracy_by_cap,
    mcnemar,
    run_summary,
    rung_label,
    table1,
)
from crawdad.analysis.metrics.compare import headline, side_by_side
from crawdad.analysis.metrics.confidence import (
    N_BINS,
    calibration_summary,
    confidence_by_alignment,
    confidence_points,
    confidence_summary,
    reliability,
)
from crawdad.analysis.metrics.dynamics import (
    CONFIDENCE_BINS,
    OUTCOMES,
    challenged_turns,
    change_vs_opponent_confidence,
    confidence_change,
    confident_wrong_corrected,
    consensus_by_round,
    persuasion,
    rounds_to_finish,
)
from crawdad.analysis.metrics.responses import (
    LENGTH_KINDS,
    RUNAWAY,
    SHORT_CHARS,
    SHORT_TRACE,
    extraction_quality,
    length_points,
    lengths,
    sentiment,
    short_debate_turns,
)
from crawdad.analysis.metrics.timing import (
    SERVER,
    SLOW_SECONDS,
    WALL,
    slowest,
    stop_reasons,
    time_sources,
    timed_turns,
    timing,
)

__all__ = [
    "ALIGNMENT_LABELS",
    "ALL",
    "CONFIDENCE_BINS",
    "LENGTH_KINDS",
    "N_BINS",
    "OUTCOMES",
    "RUNAWAY",
    "RUNG_LABELS",
    "SERVER",
    "SHORT_CHARS",
    "SHORT_TRACE",
    "SLOW_SECONDS",
    "WALL",
    "accuracy_by",
    "accuracy_by_cap",
    "bootstrap_paired_difference",
    "bootstrap_proportion",
    "calibration_summary",
    "challenged_turns",
    "change_vs_opponent_confidence",
    "confidence_by_alignment",
    "confidence_change",
    "confidence_points",
    "confidence_summary",
    "confident_wrong_corrected",
    "consensus_by_round",
    "extraction_quality",
    "headline",
    "length_points",
    "lengths",
    "mcnemar",
    "mcnemar_exact",
    "persuasion",
    "reliability",
    "rounds_to_finish",
    "run_summary",
    "rung_label",
    "sentiment",
    "short_debate_turns",
    "side_by_side",
    "slowest",
    "stop_reasons",
    "table1",
    "time_sources",
    "timed_turns",
    "timing",
]
