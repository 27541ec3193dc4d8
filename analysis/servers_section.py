"""The report's "Servers during the run": each server's own metrics over the run (requests
running and waiting, KV cache, tokens/s, prefix-cache hit rate), crawdad's figures beside them,
and a verdict in plain words (crawdad.run.server_series.verdict, as the run's end summary says).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
from crawdad.analysis.figures.servers import servers_figure
from crawdad.analysis.formatting import md_cell
from crawdad.analysis.metrics.servers import (
    restarts_folder,
    series_folder,
    server_restarts,
    server_series,
    server_summary,
    started_servers,
)
from crawdad.analysis.section import Block, Plot, Section, Table

from crawdad.run.server_series import KIND_LABEL, SERIES, verdict

if TYPE_CHECKING:
    from crawdad.records import StartedServer

HEADING = "Servers during the run"
NOT_SHOWN = (
    "its requests running and waiting, KV-cache use, tokens/s and prefix-cache hit rate cannot "
    "be shown; crawdad's own figures for it (requests in flight, tokens received) are in the "
    "series CSV"
)


def _list(s: pd.Series) -> list[float] | None:
    values = [float(x) for x in s.dropna()]
    return values or None


def no_samples(folder: Path, config: dict[str, Any] | None, every: float) -> str:
    """Why a run has no figures of its servers, in a sentence."""
    metrics = (config or {}).get("server_metrics")
    if metrics is not None and float(metrics) == 0:
        return "_No server was sampled: the run set `server_metrics = 0`._"
    if every > 0:
        return (
            f"_No server was sampled: the run ended before its first sample (one every {every:g} "
            "s, `server_metrics`). A shorter interval samples shorter runs._"
        )
    if not (series_folder(folder) / SERIES).exists():
        return (
            f"_No server was sampled: {folder.name} has no {SERIES} (a run made before crawdad "
            "sampled its servers, or one whose file was removed)._"
        )
    return f"_No server was sampled: {SERIES} holds no sample._"


def servers_section(
    folder: Path,
    label: str,
    config: dict[str, Any] | None,
    started_by: Sequence[StartedServer] | None = None,
) -> Section:
    """The section for one run folder; without a sample of any server (a run made before
    crawdad sampled servers, one with `server_metrics = 0`, or one shorter than the interval
    between samples) a sentence that says which. `started_by`: the servers crawdad started, where
    the folder has no run manifest to name them (an experiment's: see `started_servers`)."""
    series, notes, every = server_series(folder, label)
    started = started_servers(folder, started_by)
    concurrency = (config or {}).get("concurrency")
    blocks: list[Block] = []
    if series.empty and notes.empty:
        blocks.append(no_samples(folder, config, every))
    else:
        blocks.append(
            f"_Measured by the clock: each server's own metrics, read every {every:g} s "
            "(`server_metrics`) while the run went, beside crawdad's own counts at the same "
            "moments. Two runs of the same settings differ here._"
        )
    verdicts = []
    for server, g in series.groupby("server", sort=False):
        kind = str(g["kind"].iloc[-1])
        if not kind:
            continue
        slots = g["slots"].dropna()
        said = verdict(
            md_cell(server),
            kind,
            _list(g["running"]) or [],
            _list(g["waiting"]),
            _list(g["kv_cache"]),
            int(concurrency) if concurrency else None,
            int(slots.iloc[-1]) if len(slots) else None,
        )
        source = str(g["source"].iloc[-1])
        if said:
            said = " ".join(said.splitlines())  # crawdad's words, the URL escaped above
            verdicts.append(f"- {said[0].upper()}{said[1:]} (source: {md_cell(source)}).")
        elif kind == "ollama":
            verdicts.append(
                f"- The {KIND_LABEL[kind]} server at {md_cell(server)} tells which models it has "
                f"loaded ({md_cell(source)}), not its queue: no verdict on its load."
            )
    if verdicts:
        blocks.append("**Verdict.**\n\n" + "\n".join(verdicts))
    if not notes.empty:
        said_notes = [f"- {md_cell(n)}" for n in dict.fromkeys(notes["note"])]
        blocks.append("**What could not be read.**\n\n" + "\n".join(said_notes))
    with_figures = set(series.loc[series["kind"] != "", "server"]) if not series.empty else set()
    for server in dict.fromkeys(notes["server"]):
        if server not in with_figures:
            blocks.append(
                f"The server at {md_cell(server)} served no metrics crawdad could read: {NOT_SHOWN}."
            )
    lost = series.groupby("server")["lost"].max().dropna() if not series.empty else None
    if lost is not None and (lost > 0).any():
        counted = ", ".join(f"{md_cell(u)}: {int(n)}" for u, n in lost.items() if n > 0)
        blocks.append(
            f"Samples lost (an answer too large, too slow or unreadable; counted this session, "
            f"left out, never guessed): {counted}."
        )
    if not series.empty:
        blocks.append(
            Plot(
                "servers",
                "Each server over the run's own clock: requests running, waiting (the server's "
                "counts) and in flight from crawdad (count); KV cache in use (%); tokens per "
                "second generated (the server's counter) and received (crawdad); prefix-cache "
                "hit rate (%, prompt tokens found in the cache over those looked up).",
                servers_figure,
                (series,),
            )
        )
        blocks.append(
            Table(
                "servers_summary",
                server_summary(series),
                "Each server over the run",
                "Means over the samples; shares and KV cache as fractions (0-1); tokens/s from "
                "the counters' growth between samples.",
            )
        )
        blocks.append(Table("servers_series", series, show=False))
    if not started.empty:
        blocks.append(_started_table(started, shared=restarts_folder(folder) != Path(folder)))
        restarts = server_restarts(folder)
        if not restarts.empty:
            blocks.append(_restarts_table(restarts))
    return Section(HEADING, blocks)


def _restarts_table(restarts: pd.DataFrame) -> Table:
    """Each restart of a server crawdad started, and why."""
    shown = restarts.rename(
        columns={
            "at": "at (UTC)",
            "cause": "likely cause (its log)",
            "silent_s": "silent before (s)",
            "downtime_s": "down (s)",
        }
    )
    return Table(
        "server_restarts",
        restarts,
        "Each restart and why",
        "A server is restarted when it exits, or when it is frozen: neither a health answer nor "
        "a token of any request for `serving.freeze_timeout` seconds (a busy server may answer "
        "its health late; its tokens show that it works). Its downtime runs from its last sign "
        "of life (a health answer, a token) to its health answer after the restart; "
        '"silent before" is the part before crawdad acted. "given up": past '
        "`serving.max_restarts`, the run stopped.",
        shown=shown,
        hide=(),
    )


def _started_table(started: pd.DataFrame, shared: bool = False) -> Table:
    """What served the run (crawdad started these servers) and how often each went down;
    `shared`: the experiment's servers, seen from one of its variants."""
    n = int(started["restarts"].sum())
    line = (
        f"{n} restart{'s' * (n != 1)}, {started['downtime_s'].sum():.0f} s down in all."
        if n
        else "No server had to be restarted."
    )
    if shared:
        line += (
            " The experiment's variants share these servers: restarts over the whole experiment."
        )
    shown = started.drop(columns=["command"]).rename(
        columns={"weights_hash": "weights hash", "downtime_s": "down (s)"}
    )
    return Table(
        "servers_started",
        started,
        "Servers crawdad started",
        f"Each with its engine's version, its weights' hash and its GPUs (the exact commands "
        f"are in the CSV and the manifest). {line}",
        shown=shown,
        hide=(),
    )
