"""Generation time per model, round and rung (fig. 8), the slowest responses, stop reasons.

Generation time: the paper timed one request at a time, so its times are generation times. Under
concurrency crawdad's wall time (`seconds`) also holds the time a request waited in queues, so
the time shown is the server's own (`server_seconds`) for a model whose server reports one, and
wall time for a model whose server does not (`time_sources` says which, per model). A turn of a
server-timed model without a server time (crawdad cut it: loop or timeout) falls back to its wall
time, and is counted.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from crawdad.analysis.metrics.accuracy import ALL
from crawdad.analysis.metrics.responses import _ok, _order

__all__ = [
    "SERVER",
    "SLOW_SECONDS",
    "WALL",
    "slowest",
    "stop_reasons",
    "time_sources",
    "timed_turns",
    "timing",
]

SLOW_SECONDS = 500.0  # "responses that took over 500 seconds" (paper, 4.5)
SERVER, WALL = "server", "wall"  # time sources


def timed_turns(turns: pd.DataFrame) -> pd.DataFrame:
    """The turns that have a response (not errored), with the time shown for each: `time_s` is
    `server_seconds` for a model whose server reports times (`time_source` "server"), falling back
    to the wall time for a turn without one (`fallback` True), and the wall time for a model whose
    server reports none (`time_source` "wall")."""
    t = _ok(turns).copy()
    has = t["server_seconds"].notna()
    reports = has.groupby([t["run"], t["agent"]]).transform("any").astype(bool)
    t["time_source"] = np.where(reports, SERVER, WALL)
    t["fallback"] = reports & ~has
    t["time_s"] = t["server_seconds"].where(reports & has, t["seconds"]).astype(float)
    return t


def time_sources(turns: pd.DataFrame) -> pd.DataFrame:
    """Which generation time is shown for each model, and why.

    Columns: run, agent, time_source ("server": the server reports its own generation time;
    "wall": it reports none, so crawdad's wall time is shown, which includes queueing), n,
    n_server (turns with a server time), n_fallback (turns of a server-timed model shown with wall
    time: the server sent no time, as when crawdad cut a loop), median_wall_s, median_server_s,
    median_wait_s (median of wall minus server time: waiting in crawdad's and the server's
    queues, and transfer).
    """
    cols = [
        "run",
        "agent",
        "time_source",
        "n",
        "n_server",
        "n_fallback",
        "median_wall_s",
        "median_server_s",
        "median_wait_s",
    ]
    t = timed_turns(turns)
    if t.empty:
        return pd.DataFrame(columns=cols)
    t = t.assign(wait=t["seconds"] - t["server_seconds"])
    out = (
        t.groupby(["run", "agent"], sort=True)
        .agg(
            time_source=("time_source", "first"),
            n=("seconds", "size"),
            n_server=("server_seconds", "count"),
            n_fallback=("fallback", "sum"),
            median_wall_s=("seconds", "median"),
            median_server_s=("server_seconds", "median"),
            median_wait_s=("wait", "median"),
        )
        .reset_index()
    )
    out["n_fallback"] = out["n_fallback"].astype("int64")
    return out[cols]


def timing(turns: pd.DataFrame) -> pd.DataFrame:
    """Generation time per agent, round and rung ("all" too): the server's own time where the
    server reports it, else wall time (see `timed_turns`, `time_sources`).

    Columns: run, agent, time_source, rung, round, n, n_fallback, median_s, mean_s, p90_s, max_s
    (of the time shown), median_wall_s (wall time, always).
    """
    t = timed_turns(turns)
    f = pd.DataFrame(
        {
            "run": t["run"].to_numpy(),
            "agent": t["agent"].to_numpy(),
            "time_source": t["time_source"].to_numpy(),
            "rung": t["rung"].astype(str).to_numpy(),
            "round": t["round"].to_numpy(),
            "s": t["time_s"].to_numpy(dtype=float),
            "fb": t["fallback"].to_numpy(dtype=bool),
            "wall": t["seconds"].to_numpy(dtype=float),
        }
    )
    cols = [
        "run",
        "agent",
        "time_source",
        "rung",
        "round",
        "n",
        "n_fallback",
        "median_s",
        "mean_s",
        "p90_s",
        "max_s",
        "median_wall_s",
    ]
    if f.empty:
        return pd.DataFrame(columns=cols)
    f = pd.concat([f, f.assign(rung=ALL)], ignore_index=True)
    g = f.groupby(["run", "agent", "time_source", "rung", "round"], sort=True)
    out = g.agg(
        n=("s", "size"),
        n_fallback=("fb", "sum"),
        median_s=("s", "median"),
        mean_s=("s", "mean"),
        p90_s=("s", lambda s: s.quantile(0.9)),
        max_s=("s", "max"),
        median_wall_s=("wall", "median"),
    ).reset_index()
    out["n_fallback"] = out["n_fallback"].astype("int64")
    return out[cols]


def slowest(turns: pd.DataFrame, k: int = 10) -> pd.DataFrame:
    """The k slowest responses of each run by the time shown (`timed_turns`), with why they
    stopped. `seconds` is that time; `wall_seconds` and `server_seconds` are both kept."""
    cols = [
        "run",
        "question_id",
        "agent",
        "round",
        "rung",
        "seconds",
        "time_source",
        "wall_seconds",
        "server_seconds",
        "stop_reason",
        "completion_tokens",
        "thinking_chars",
        "text_chars",
    ]
    t = timed_turns(turns)
    if t.empty:
        return pd.DataFrame(columns=cols)
    t = t.assign(wall_seconds=t["seconds"], seconds=t["time_s"])
    t["time_source"] = np.where(t["fallback"], "wall (no server time)", t["time_source"])
    out = t.sort_values(["run", "seconds"], ascending=[True, False]).groupby("run").head(k)
    return out[cols].reset_index(drop=True)


STOP_REASONS = ("stop", "length", "loop", "timeout", "error")


def stop_reasons(turns: pd.DataFrame, slow_seconds: float = SLOW_SECONDS) -> pd.DataFrame:
    """Responses per agent by stop reason, and how many took longer than `slow_seconds` (by the
    time shown: `timed_turns`; wall time for failed requests).

    Columns: run, agent, n, stop, length, loop, timeout, error, over_<slow_seconds>s.
    """
    slow_col = f"over_{slow_seconds:g}s"
    cols = ["run", "agent", "n", *STOP_REASONS, slow_col]
    if turns.empty:
        return pd.DataFrame(columns=cols)
    f = turns[["run", "agent", "stop_reason", "seconds"]].copy()
    shown = timed_turns(turns)["time_s"]
    f.loc[shown.index, "seconds"] = shown
    f = pd.concat([f, f.assign(agent=ALL)], ignore_index=True)
    ct = pd.crosstab([f["run"], f["agent"]], f["stop_reason"]).reindex(
        columns=list(STOP_REASONS), fill_value=0
    )
    ct["n"] = ct.sum(axis=1)
    ct[slow_col] = (f["seconds"] > slow_seconds).groupby([f["run"], f["agent"]]).sum()
    out = ct.reset_index()
    out.columns.name = None
    return _order(out, [])[cols]
