"""Several runs side by side: one column per run."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
from crawdad.analysis.metrics.accuracy import ALL

__all__ = ["headline", "side_by_side"]


def side_by_side(
    df: pd.DataFrame, index: Sequence[str], value: str, runs: Sequence[str] | None = None
) -> pd.DataFrame:
    """Pivot a tidy table so that each run is a column of `value`, rows keyed by `index`.

    Row order is the order of first appearance in df; column order is `runs` (or appearance).
    """
    runs = list(runs) if runs is not None else list(dict.fromkeys(df["run"]))
    keys = list(index)
    order = df[keys].drop_duplicates()
    wide = df.pivot_table(index=keys, columns="run", values=value, aggfunc="first", dropna=False)
    wide = wide.reindex(pd.MultiIndex.from_frame(order) if len(keys) > 1 else order[keys[0]])
    wide = wide.reindex(columns=[r for r in runs if r in wide.columns])
    wide.columns.name = None
    return wide.reset_index()


def headline(
    summary: pd.DataFrame,
    mcnemar: pd.DataFrame,
    calibration: pd.DataFrame,
    persuasion: pd.DataFrame,
) -> pd.DataFrame:
    """The numbers that matter most, long: run, metric, value (pivot with `side_by_side`)."""
    rows: list[dict[str, object]] = []

    def add(run: str, metric: str, value: object) -> None:
        rows.append({"run": run, "metric": metric, "value": value})

    for r in summary.itertuples(index=False):
        add(r.run, "debates", r.debates)
        add(r.run, "errored debates (counted wrong)", r.errored)
        add(r.run, "final answer not extracted (counted wrong)", r.final_unanswered)
        add(r.run, "ended without consensus", r.no_consensus)
        add(r.run, "accuracy, first speaker alone (%)", 100 * r.first_speaker_acc)
        add(r.run, "accuracy, after debate (%)", 100 * r.debate_acc)
    for r in mcnemar.itertuples(index=False):
        who = "all first speakers" if r.agent == ALL else r.agent
        add(r.run, f"{who}: initial accuracy (%)", 100 * r.initial_acc)
        add(r.run, f"{who}: final accuracy (%)", 100 * r.final_acc)
        add(r.run, f"{who}: gain (points)", 100 * r.gain)
        add(r.run, f"{who}: McNemar p", r.p_value)
    for r in calibration.itertuples(index=False):
        if r.agent == ALL:
            continue
        add(r.run, f"{r.agent}: ECE, {r.stage}", r.ece)
    for p in persuasion.to_dict("records"):
        if p["agent"] == ALL and p["rung"] == ALL:
            add(p["run"], "debates with 3+ responses", p["n"])
            add(p["run"], "of which I->C (debate fixed the first answer)", p["I->C"])
            add(p["run"], "of which C->I (debate broke the first answer)", p["C->I"])
    return pd.DataFrame(rows, columns=["run", "metric", "value"])
