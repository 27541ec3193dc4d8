"""The report's progress on stderr: one tqdm bar whose description names the phase (loading the
runs, computing the tables, writing the sections, drawing the figures) and which counts the
phase's steps (tables, figures). Off unless asked for, and then off where stderr is not a
terminal (tqdm's own rule), so that logs and tests stay clean; or, asked for as "lines", one line
per phase (the demo piped: a log that says what its silence was)."""

from __future__ import annotations

import sys
import time
from types import TracebackType
from typing import Literal

from tqdm import tqdm


class ReportProgress:
    """`with ReportProgress(on) as p: p.phase("loading runs"); ...; p.step()`."""

    def __init__(self, enabled: bool | Literal["lines"] = False) -> None:
        """`enabled`: a bar where stderr is a terminal; "lines": a line per phase instead."""
        self.lines = enabled == "lines"
        self.start = time.monotonic()
        self.bar = tqdm(
            total=0,
            file=sys.stderr,
            disable=None if enabled is True else True,  # None: off when stderr is not a terminal
            unit="step",
            leave=False,
            bar_format="report: {desc} {n_fmt}/{total_fmt} [{elapsed}]",
        )

    def phase(self, name: str, steps: int = 1) -> None:
        """A new phase of `steps` steps (the bar restarts at 0)."""
        self.bar.reset(total=steps)
        self.bar.set_description_str(name, refresh=True)
        if self.lines:
            took = round(time.monotonic() - self.start)
            print(f"report [{took // 60}:{took % 60:02d}]: {name}", file=sys.stderr, flush=True)

    def step(self, n: int = 1) -> None:
        self.bar.update(n)

    def close(self) -> None:
        self.bar.close()

    def __enter__(self) -> ReportProgress:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
