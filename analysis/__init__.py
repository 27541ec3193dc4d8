"""crawdad's analysis: run folders -> the tables and figures of the CRAwDAD paper, and more.

    from crawdad.analysis import write_report
    write_report([Path("runs/a"), Path("runs/b")], Path("report"))

Modules: `load` (files -> DataFrames), `metrics` (DataFrames -> tables), `figures` (tables ->
matplotlib Figures), `formatting` and `narrative` (tables -> Markdown / LaTeX / sentences), `report`
(all of it -> a folder), `synthetic_runs` (made-up runs for tests and demos), `response_text`
(formatting stripping and VADER sentiment).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from crawdad.analysis.load import Run, concat, load_run, load_runs, records_to_frames
    from crawdad.analysis.report import write_report

__all__ = ["Run", "concat", "load_run", "load_runs", "records_to_frames", "write_report"]


def __getattr__(name: str) -> Any:
    # Lazy, so that `import analysis.metrics` does not pull in matplotlib.
    if name == "write_report":
        from crawdad.analysis.report import write_report

        return write_report
    if name in {"Run", "concat", "load_run", "load_runs", "records_to_frames"}:
        from crawdad.analysis import load

        return getattr(load, name)
    raise AttributeError(f"module 'analysis' has no attribute {name!r}")
