"""The servers during a run: a folder's servers.jsonl (crawdad/run/server_series.py) as a frame,
rates derived from its counters, and a summary per server.

`server_series` has one row per server per sample: `run`, `server` (its base URL), `kind`
(vllm, sglang, llamacpp, ollama; empty: no metrics), `source` (what was read), `at` (Unix
time), `minutes` (since the run's first session began: the run's own clock), `running` and
`waiting` (requests, as the server counts them), `kv_cache` (0-1 of its KV cache in use),
`server_tokens_per_s` (generated tokens per second, from its counter), `prefix_hit_rate`
(0-1: prompt tokens found in its prefix cache over those looked up since the sample before,
or the server's own rate), `slots`, `in_flight` (crawdad's requests there), `received_tokens_per_s`
(completion tokens crawdad received per second from it), `responses` (answered so far this
session), `debates` (finished this session). A figure the server does not give is NaN.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from crawdad.errors import CrawdadError, UnsafePathError
from crawdad.run.series_file import SERIES, iter_raw, load_series
from crawdad.run.store import is_experiment
from crawdad.safe_files import Folder

if TYPE_CHECKING:
    from crawdad.records import ServerRestart, StartedServer

SERIES_COLUMNS = [
    "run",
    "server",
    "kind",
    "source",
    "session",
    "at",
    "minutes",
    "running",
    "waiting",
    "kv_cache",
    "server_tokens_per_s",
    "prefix_hit_rate",
    "slots",
    "in_flight",
    "received_tokens_per_s",
    "responses",
    "debates",
    # the counters, cumulative since the server started (crawdad's: since the session began)
    "prompt_tokens",
    "generation_tokens",
    "prefix_queries",
    "prefix_hits",
    "tokens",
    "lost",  # samples of the server lost so far this session (a bound broken, late, unreadable)
]
NOTE_COLUMNS = ["run", "server", "note"]


def _has_series(folder: Path) -> bool:
    """The folder has a servers.jsonl entry of any kind (a link too: refused when read)."""
    try:
        with Folder(folder, create=False) as f:
            return f.lstat(SERIES) is not None
    except OSError:
        return False


def series_folder(folder: Path) -> Path:
    """Where a run's series lies: its folder, or the experiment's around it (the variants of an
    experiment share their servers, and one series)."""
    folder = Path(folder)
    if not _has_series(folder) and is_experiment(folder.parent):
        return folder.parent
    return folder


def read_lines(folder: Path) -> list[dict[str, Any]]:
    """The valid lines of the run's series; each line left out, and a file refused (a link, a
    FIFO), is said as a warning naming it."""
    where = series_folder(folder)
    try:
        found = load_series(where)
    except (UnsafePathError, OSError) as e:
        warnings.warn(f"{e}; the servers' series is left out", stacklevel=3)
        return []
    for problem in found.problems:
        warnings.warn(problem, stacklevel=3)
    return found.lines


def server_series(folder: Path, run: str = "") -> tuple[pd.DataFrame, pd.DataFrame, float]:
    """(the samples, the notes, the seconds between samples) of a run folder."""
    lines = read_lines(folder)
    rows: list[dict[str, Any]] = []
    notes: list[dict[str, Any]] = []
    session, every, first = 0.0, 0.0, None
    for line in lines:
        if "session" in line:
            session, every = float(line["session"]), float(line.get("every") or 0.0)
            first = session if first is None else min(first, session)
        elif "note" in line:
            notes.append({"run": run, "server": line.get("server", ""), "note": line["note"]})
        elif "servers" in line:
            for url, s in (line.get("servers") or {}).items():
                rows.append(
                    {"run": run, "server": url, "session": session, "at": line.get("at"), **s}
                )
    df = pd.DataFrame(rows)
    for col in SERIES_COLUMNS:
        if col not in df.columns:
            df[col] = np.nan
    for col in ("kind", "source"):
        df[col] = df[col].astype(object).where(df[col].notna(), "")
    df["minutes"] = (df["at"] - (first or 0.0)) / 60.0
    df = df.sort_values(["server", "at"], kind="stable")
    df["server_tokens_per_s"] = _rate(df, "generation_tokens")
    df["received_tokens_per_s"] = _rate(df, "tokens")
    hit_rate = _delta(df, "prefix_hits") / _delta(df, "prefix_queries").replace(0, np.nan)
    if "prefix_hit_rate" in df:
        hit_rate = hit_rate.fillna(df["prefix_hit_rate"])
    df["prefix_hit_rate"] = hit_rate
    debates = {float(x.get("at", 0)): x.get("debates") for x in lines if "servers" in x}
    df["debates"] = df["at"].map(debates)
    kept = df[SERIES_COLUMNS].reset_index(drop=True)
    return kept, pd.DataFrame(notes, columns=NOTE_COLUMNS), every


def _delta(df: pd.DataFrame, col: str) -> pd.Series:
    """The counter's growth since the server's sample before, in the same session; NaN where a
    counter went down (the server restarted)."""
    d = df.groupby(["server", "session"])[col].diff()
    return d.where(d >= 0)


def _rate(df: pd.DataFrame, col: str) -> pd.Series:
    dt = df.groupby(["server", "session"])["at"].diff()
    return _delta(df, col) / dt.where(dt > 0)


SUMMARY_COLUMNS = [
    "run",
    "server",
    "kind",
    "source",
    "samples",
    "running_mean",
    "running_max",
    "waiting_share",
    "waiting_mean",
    "kv_cache_mean",
    "kv_cache_max",
    "server_tokens_per_s",
    "received_tokens_per_s",
    "prefix_hit_rate",
    "in_flight_mean",
]


def server_summary(series: pd.DataFrame) -> pd.DataFrame:
    """One row per server: samples, requests running (mean, max), the share of samples with
    requests waiting and their mean, KV cache use (mean, max; 0-1), tokens/s generated by the
    server and received by crawdad and the prefix-cache hit rate (0-1), each over the whole run
    (the counters' growth from its first sample to its last, session by session), crawdad's
    mean requests in flight there."""
    rows = []
    for (run, server), g in series.groupby(["run", "server"], sort=False):
        rows.append(
            {
                "run": run,
                "server": server,
                "kind": g["kind"].iloc[-1],
                "source": g["source"].iloc[-1],
                "samples": int(g["running"].notna().sum()),
                "running_mean": g["running"].mean(),
                "running_max": g["running"].max(),
                "waiting_share": (g["waiting"].dropna() > 0).mean(),
                "waiting_mean": g["waiting"].mean(),
                "kv_cache_mean": g["kv_cache"].mean(),
                "kv_cache_max": g["kv_cache"].max(),
                "server_tokens_per_s": _growth(g, "generation_tokens") / _growth(g, "at"),
                "received_tokens_per_s": _growth(g, "tokens") / _growth(g, "at"),
                "prefix_hit_rate": _hit_rate(g),
                "in_flight_mean": g["in_flight"].mean(),
            }
        )
    return pd.DataFrame(rows, columns=SUMMARY_COLUMNS)


def _growth(g: pd.DataFrame, col: str) -> float:
    """How much a counter grew over the samples, session by session (NaN: not counted)."""
    total, seen = 0.0, False
    for _, part in g.groupby("session"):
        values = part[col].dropna()
        if len(values) >= 2 and values.iloc[-1] >= values.iloc[0]:
            total += float(values.iloc[-1] - values.iloc[0])
            seen = True
    return total if seen else np.nan


def _hit_rate(g: pd.DataFrame) -> float:
    if g["prefix_queries"].notna().any():
        queries = _growth(g, "prefix_queries")
        return _growth(g, "prefix_hits") / queries if queries else np.nan
    return float(g["prefix_hit_rate"].mean())  # the server's own rate (SGLang, vLLM < 0.8)


STARTED_COLUMNS = [
    "server",
    "engine",
    "version",
    "weights",
    "weights_hash",
    "gpus",
    "memory",
    "restarts",
    "downtime_s",
    "command",
]


def restarts_folder(folder: Path) -> Path:
    """Where a run's `servers/restarts.jsonl` lies: its folder, or, for a variant of an
    experiment, the experiment's (its variants share the servers crawdad started)."""
    folder = Path(folder)
    if not (folder / "servers" / "restarts.jsonl").exists() and is_experiment(folder.parent):
        return folder.parent
    return folder


RESTARTS_LIMIT = 4_000_000  # bytes of restarts.jsonl read (a line: ~150 bytes; a run: a few)


def read_restarts(where: Path) -> list[ServerRestart]:
    """The lines of `where`/servers/restarts.jsonl, read within bounds: without following a
    link, at most RESTARTS_LIMIT bytes, a line longer than the series' MAX_LINE skipped; what is
    left out (and a file refused: a link, a FIFO) is said as a warning naming it. A line cut
    short by a crash is not counted, silently."""
    from crawdad.records import ServerRestart

    problems: list[str] = []
    found: list[ServerRestart] = []
    name = str(where / "servers" / "restarts.jsonl")
    try:
        with Folder.inside(where, where / "servers") as servers:
            if not servers.is_file("restarts.jsonl"):
                return []
            with servers.open_read("restarts.jsonl") as f:
                for _no, raw in iter_raw(f, RESTARTS_LIMIT, problems, name):
                    with contextlib.suppress(ValueError):
                        found.append(ServerRestart.model_validate_json(raw))
    except FileNotFoundError:
        return []
    except (CrawdadError, OSError) as e:
        problems.append(f"{e}; the servers' restarts are left out")
    for problem in problems:
        warnings.warn(problem, stacklevel=3)
    return found


RESTART_COLUMNS = ["server", "at", "reason", "cause", "silent_s", "downtime_s", "outcome"]


def server_restarts(folder: Path) -> pd.DataFrame:
    """One row per time a server crawdad started went down: when (UTC), why (it exited, with
    its code; or it froze: no health answer and no token for so long), the likely cause read
    from its log, how long it had been silent before crawdad acted, its downtime from its last
    sign of life, and whether it came back."""
    rows = [
        {
            "server": r.key,
            "at": r.at.strftime("%Y-%m-%d %H:%M:%S"),
            "reason": r.reason,
            "cause": r.cause or "",
            "silent_s": round(r.silent_for, 1),
            "downtime_s": round(r.downtime, 1),
            "outcome": "back" if r.back else "given up",
        }
        for r in read_restarts(restarts_folder(folder))
    ]
    return pd.DataFrame(rows, columns=RESTART_COLUMNS)


def started_servers(folder: Path, started: Sequence[StartedServer] | None = None) -> pd.DataFrame:
    """The servers crawdad started for a run (the manifest's `started`, schema 9) with their
    restarts and seconds down (`servers/restarts.jsonl`): one row per server; empty for a run
    whose servers someone else ran. `started`: the servers, where the folder has no run manifest
    (an experiment's: its variants' manifests name the servers they shared)."""
    from crawdad.run.store import RunStore

    if started is None:
        try:
            started = RunStore(folder).read_manifest().started
        except (CrawdadError, OSError):
            return pd.DataFrame(columns=STARTED_COLUMNS)
    restarts: dict[str, list[float]] = {}
    for r in read_restarts(restarts_folder(folder)):
        restarts.setdefault(r.key, []).append(r.downtime)
    rows = []
    for s in dict((s.key, s) for s in started).values():  # a resume's entry replaces the first
        memory = f"{s.memory_gib:g} GiB" if s.memory_gib else ""
        if s.memory_fraction is not None:
            memory += f" ({s.memory_fraction:.0%} of each GPU)"
        rows.append(
            {
                "server": s.key,
                "engine": s.engine,
                "version": s.engine_version or "",
                "weights": s.weights,
                "weights_hash": s.weights_hash or "",
                "gpus": ", ".join(s.gpus) or "CPU",
                "memory": memory.strip(),
                "restarts": len(restarts.get(s.key, [])),
                "downtime_s": round(sum(restarts.get(s.key, [])), 1),
                "command": " ".join(s.command),
            }
        )
    return pd.DataFrame(rows, columns=STARTED_COLUMNS)
