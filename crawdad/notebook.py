"""crawdad from Python and notebooks: runs and experiments started synchronously or awaited
(inside Jupyter's running event loop too), and run folders loaded into pandas frames whose
tables are the report's.

    import crawdad
    summary = crawdad.run_sync("examples", "runs/demo", config="protocols/judge", limit=20)
    frames = crawdad.load_frames("runs/demo")
    tables = crawdad.report_tables(frames)
    tables["table1"]                      # the paper's Table 1 for this run

Everything here is a thin layer over the functions the command line calls: a run started here
writes the same folder `crawdad run` writes, and `report_tables` computes the tables the report
writes (`crawdad.analysis.report.compute_tables`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from crawdad.config import RunConfig, SelectionConfig, load_config

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

    from crawdad.analysis.load import Run
    from crawdad.run.runner import RunSummary

T = TypeVar("T")

# --- running -------------------------------------------------------------------------------------


def in_running_loop() -> bool:
    """Whether this thread runs an event loop (Jupyter does), where `asyncio.run` fails."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _sync(make: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run a coroutine to its end from synchronous code: here, or, when this thread already runs
    an event loop, in a worker thread with a loop of its own (the caller waits for it)."""
    if not in_running_loop():
        return asyncio.run(make())
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="crawdad") as pool:
        return pool.submit(lambda: asyncio.run(make())).result()


def _config(config: RunConfig | str | Path | None) -> RunConfig:
    if isinstance(config, RunConfig):
        return config
    return load_config(Path(config) if config is not None else None)


async def run_async(
    data: str | Path,
    out: str | Path,
    config: RunConfig | str | Path | None = None,
    *,
    limit: int | None = None,
    selection: SelectionConfig | None = None,
    progress: bool = False,
    simulated: bool = False,
) -> RunSummary:
    """Run (or resume) debates: `crawdad run --data DATA --out OUT [--config CONFIG]`, awaited.

    `config`: a `RunConfig`, a TOML file, a ready config by name (`"protocols/judge"`), or None
    for the paper's setup. `data`: a CLadder folder, zip or file, or `"examples"`. `limit` takes
    the first N selected questions; `selection` replaces the config's selection."""
    from crawdad.run.runner import run
    from crawdad.run.store import selection_for
    from crawdad.tasks import load_items, task_named

    cfg = _config(config).model_copy(deep=True)
    if selection is not None:
        cfg.selection = selection
    if limit is not None:
        cfg.selection.limit = limit
    task = task_named(cfg.task)
    items = load_items(task, Path(data), cfg.selection.questions_file, cfg.table_limits)
    cfg.selection = selection_for(cfg.selection, Path(out))
    dataset = task.select(items, cfg.selection, cfg.seed)
    return await run(cfg, dataset, Path(out), progress=progress, simulated=simulated)


def run_sync(
    data: str | Path,
    out: str | Path,
    config: RunConfig | str | Path | None = None,
    **options: Any,
) -> RunSummary:
    """`run_async`, waited for: works in a script and inside a notebook's running loop alike."""
    return _sync(lambda: run_async(data, out, config, **options))


async def experiment_async(
    file: str | Path,
    data: str | Path,
    out: str | Path,
    *,
    limit: int | None = None,
    progress: bool = False,
) -> list[RunSummary]:
    """Run (or resume) every variant of an experiment: `crawdad experiment FILE --data DATA
    --out OUT`, awaited. `file`: an experiment file or a ready one by name
    (`"experiments/paper-ablations"`)."""
    from crawdad.run.experiment import prepare, run_experiment

    flags = {"selection": {"limit": limit}} if limit is not None else None
    configs, manifest, dataset = prepare(Path(file), Path(data), flags, Path(out))
    return await run_experiment(configs, manifest, dataset, Path(out), progress=progress)


def experiment_sync(
    file: str | Path, data: str | Path, out: str | Path, **options: Any
) -> list[RunSummary]:
    """`experiment_async`, waited for (in a notebook's running loop too)."""
    return _sync(lambda: experiment_async(file, data, out, **options))


# --- loading ---------------------------------------------------------------------------------


@dataclass
class Frames:
    """Run folders as pandas frames.

    - `debates`: one row per debate (question), the columns of
      `crawdad.analysis.load.DEBATE_COLUMNS`: `run` (the run's label), `question_id`, `rung`,
      `query_type`, `alignment`, `gold` (None: no exact answer, a table of one's own; the
      report's tables leave such rows out), `first_agent` and `second_agent` (agent labels),
      `n_turns`, `initial_answer` and `initial_confidence` (the first speaker's round 0; 0-1),
      `final_answer`, `final_confidence` (0-1), `final_agent`, `consensus`, `end` (why it
      ended), `errored`, `error`, `seconds` (wall time of the debate), `simulated`, `protocol`,
      `prompt_set`, `judge`, `tie`, `agents`, `speaking_order`, `agent_answers`, `stances`.
    - `turns`: one row per response, the columns of `TURN_COLUMNS`: `run`, `question_id`,
      `round`, `agent`, `role`, `answer`, `confidence` (0-1), `text_chars` and `thinking_chars`
      (lengths of the final text and the trace, characters), `sentiment` (VADER compound),
      `seconds` (wall time of the generation), `server_seconds` (as the server reported),
      `completion_tokens`, `prompt_tokens`, `stop_reason`, `extraction` (how the answer was
      read), `attempts` (requests, retries included), the extractor's tokens and seconds, and
      more.
    - `tool_calls`: one row per tool call: `run`, `question_id`, `round`, `agent`, `model`,
      `tool` (the function named), `mode` (native or text), `malformed` (the call could not be
      read), `error` (what the model was told instead of a result; empty when it got one),
      `seconds` (compute time of the call).
    - `runs`: the loaded runs (`crawdad.analysis.load.Run`: path, manifest, counts, warnings).
    """

    debates: pd.DataFrame
    turns: pd.DataFrame
    tool_calls: pd.DataFrame
    runs: list[Run] = field(default_factory=list)


TOOL_CALL_COLUMNS = ["run", "question_id", "round", "agent", "model", "tool", "mode"]
TOOL_CALL_COLUMNS += ["malformed", "error", "seconds"]


def _tool_calls(runs: list[Run]) -> pd.DataFrame:
    import pandas as pd

    rows = [
        {
            "run": run.label,
            "question_id": str(r.question_id),
            "round": t.round,
            "agent": t.agent,
            "model": t.model,
            "tool": c.name,
            "mode": c.mode,
            "malformed": c.malformed,
            "error": c.error or "",
            "seconds": c.seconds,
        }
        for run in runs
        for r in run.records()
        for t in r.turns
        for c in t.tool_calls
    ]
    return pd.DataFrame(rows, columns=TOOL_CALL_COLUMNS)


def load_frames(*paths: str | Path, compare: bool = False) -> Frames:
    """Load run folders (or one experiment folder: its variants) into frames. Folders that are
    shards of one run (the same settings, disjoint questions) are pooled into one run, as
    `crawdad analyze` does, unless `compare`."""
    from crawdad.analysis.load import concat, load_runs
    from crawdad.analysis.shards import pool_shards
    from crawdad.run.store import is_experiment

    folders = [Path(p) for p in paths]
    if len(folders) == 1 and is_experiment(folders[0]):
        folders = sorted(p.parent for p in folders[0].glob("*/manifest.json"))
    runs = pool_shards(load_runs(folders), compare=compare)
    debates, turns = concat(runs)
    return Frames(debates=debates, turns=turns, tool_calls=_tool_calls(runs), runs=runs)


def report_tables(frames: Frames) -> dict[str, pd.DataFrame]:
    """Every table of the report over these frames (the functions `crawdad analyze` uses),
    by name: "table1", "persuasion", "calibration", ... (each has a `run` column)."""
    from crawdad.analysis.report import compute_tables

    return compute_tables(frames.debates, frames.turns)


def report_figures(frames: Frames, run: str | None = None) -> dict[str, Figure]:
    """The report's figures of one run (its label; the first run by default) as matplotlib
    figures, by name: "accuracy", "fig2_persuasion", ..., "reliability" (those that apply to
    the run's protocol). Shown inline by Jupyter; `fig.savefig(...)` to keep one."""
    from crawdad.analysis.report import run_figures

    labels = [r.label for r in frames.runs]
    if not labels:
        raise ValueError("no runs loaded")
    label = run or labels[0]
    if label not in labels:
        raise ValueError(f"no run {label!r}; the runs are {', '.join(labels)}")
    chosen = next(r for r in frames.runs if r.label == label)
    return run_figures(chosen, report_tables(frames))


# --- stopping rules --------------------------------------------------------------------------


def sequences(folder: str | Path) -> pd.DataFrame:
    """An experiment's confidence sequences (one with a `[stop]` rule), as its report draws them:
    columns `variant`, `questions` (settled questions counted), `estimate`, `lower`, `upper`:
    each variant's paired difference from the baseline (the baseline's own accuracy), valid at
    every moment at once."""
    from crawdad.analysis.experiment_folder import load_experiment
    from crawdad.analysis.metrics.stopping import sequence_frame

    return sequence_frame(_stopping_experiment(load_experiment(Path(folder)), folder))


def decisions(folder: str | Path) -> pd.DataFrame:
    """An experiment's stopping decisions, recomputed from its records as the run reached them:
    columns `variant`, `decision` (better, worse, equivalent or undecided), `questions` (used),
    `estimate`, `lower`, `upper` (the sequence at the stop), `settled`."""
    from crawdad.analysis.experiment_folder import load_experiment
    from crawdad.analysis.metrics.stopping import decision_table

    return decision_table(_stopping_experiment(load_experiment(Path(folder)), folder))


def _stopping_experiment(exp: Any, folder: str | Path) -> Any:
    if exp.manifest.stop is None or exp.baseline is None:
        raise ValueError(
            f"{folder} was run without a stopping rule ([stop] in the experiment file, or "
            "--stop): it has no decisions"
        )
    return exp
