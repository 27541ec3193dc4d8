"""The responses themselves: sentiment, lengths, generation time, stop reasons, extraction.

"Initial" responses are round 0 (the first speaker's answer); "debate" responses are rounds >= 1.
Turns whose request failed (`errored`) have no response and are left out of sentiment, length and
time; `extraction_quality` counts them.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.metrics.accuracy import ALL

__all__ = [
    "SHORT_CHARS",
    "extraction_quality",
    "lengths",
    "sentiment",
    "short_debate_turns",
    "slowest",
    "stop_reasons",
    "timing",
]

SHORT_CHARS = 100  # "100 characters or less" (paper, 4.4)
SLOW_SECONDS = 500.0  # "responses that took over 500 seconds" (paper, 4.5)


def _phase(rounds: pd.Series) -> np.ndarray:
    return np.where(rounds.to_numpy() == 0, "initial", "debate")


def _ok(turns: pd.DataFrame) -> pd.DataFrame:
    return turns[~turns["errored"]]


def _order(df: pd.DataFrame, keys: list[str], first: str = "agent") -> pd.DataFrame:
    df = df.copy()
    df["_a"] = (df[first] == ALL).astype(int)
    return df.sort_values(["run", "_a", first, *keys]).drop(columns="_a").reset_index(drop=True)


def sentiment(turns: pd.DataFrame) -> pd.DataFrame:
    """Mean VADER compound (formatting stripped) of initial and debate responses, per agent.

    Empty texts have no score and are counted in `n_empty`. Columns: run, agent, phase, n,
    n_empty, mean, sd, median, ci_lo, ci_hi (mean +- 1.96 standard errors).
    """
    t = _ok(turns)
    f = pd.DataFrame(
        {
            "run": t["run"].to_numpy(),
            "agent": t["agent"].to_numpy(),
            "phase": _phase(t["round"]),
            "s": t["sentiment"].to_numpy(dtype=float),
        }
    )
    f = pd.concat([f, f.assign(agent=ALL)], ignore_index=True)
    cols = ["run", "agent", "phase", "n", "n_empty", "mean", "sd", "median", "ci_lo", "ci_hi"]
    if f.empty:
        return pd.DataFrame(columns=cols)
    g = f.groupby(["run", "agent", "phase"], sort=True)["s"]
    out = g.agg(n="count", n_all="size", mean="mean", sd="std", median="median").reset_index()
    out["n_empty"] = out["n_all"] - out["n"]
    se = out["sd"] / np.sqrt(out["n"].where(out["n"] > 0))
    out["ci_lo"] = out["mean"] - 1.96 * se
    out["ci_hi"] = out["mean"] + 1.96 * se
    out["_p"] = (out["phase"] == "debate").astype(int)
    out = out.sort_values(["run", "agent", "_p"]).drop(columns="_p")
    return _order(out, [])[cols]


LENGTH_KINDS = ("debate text", "initial text", "debate trace", "initial trace")


def length_points(turns: pd.DataFrame) -> pd.DataFrame:
    """Long frame of response lengths: run, agent, kind (LENGTH_KINDS), chars."""
    t = _ok(turns)
    phase = _phase(t["round"])
    parts = []
    for what, col in (("text", "text_chars"), ("trace", "thinking_chars")):
        parts.append(
            pd.DataFrame(
                {
                    "run": t["run"].to_numpy(),
                    "agent": t["agent"].to_numpy(),
                    "kind": np.char.add(phase.astype(str), f" {what}"),
                    "chars": t[col].to_numpy(),
                }
            )
        )
    return pd.concat(parts, ignore_index=True)


def lengths(turns: pd.DataFrame) -> pd.DataFrame:
    """Character counts of responses per agent: debate / initial texts and reasoning traces.

    Columns: run, agent, kind, n, n_empty, median, mean, q10, q90, max.
    """
    p = length_points(turns)
    cols = ["run", "agent", "kind", "n", "n_empty", "median", "mean", "q10", "q90", "max"]
    if p.empty:
        return pd.DataFrame(columns=cols)
    g = p.groupby(["run", "agent", "kind"], sort=True)["chars"]
    out = g.agg(
        n="size",
        n_empty=lambda s: int((s == 0).sum()),
        median="median",
        mean="mean",
        q10=lambda s: s.quantile(0.1),
        q90=lambda s: s.quantile(0.9),
        max="max",
    ).reset_index()
    out["_k"] = out["kind"].map({k: i for i, k in enumerate(LENGTH_KINDS)})
    out = out.sort_values(["run", "agent", "_k"]).drop(columns="_k")
    return out[cols].reset_index(drop=True)


def short_debate_turns(turns: pd.DataFrame, limit: int = SHORT_CHARS) -> pd.DataFrame:
    """Share of debate responses (round >= 1) whose text is `limit` characters or less.

    Columns: run, agent, n, n_short, share_short, median_chars, median_chars_excl_short.
    """
    t = _ok(turns)
    t = t[t["round"] >= 1]
    rows = []
    for (run, agent), g in t.groupby(["run", "agent"], sort=True):
        c = g["text_chars"]
        short = c <= limit
        rows.append(
            {
                "run": run,
                "agent": agent,
                "n": len(c),
                "n_short": int(short.sum()),
                "share_short": float(short.mean()) if len(c) else np.nan,
                "median_chars": float(c.median()) if len(c) else np.nan,
                "median_chars_excl_short": float(c[~short].median()) if (~short).any() else np.nan,
            }
        )
    cols = [
        "run",
        "agent",
        "n",
        "n_short",
        "share_short",
        "median_chars",
        "median_chars_excl_short",
    ]
    return pd.DataFrame(rows, columns=cols)


def timing(turns: pd.DataFrame) -> pd.DataFrame:
    """Generation time (wall seconds as seen by crawdad) per agent, round and rung ("all" too).

    Columns: run, agent, rung, round, n, median_s, mean_s, p90_s, max_s, median_server_s (the
    server-reported time, where the server reports one).
    """
    t = _ok(turns)
    f = pd.DataFrame(
        {
            "run": t["run"].to_numpy(),
            "agent": t["agent"].to_numpy(),
            "rung": t["rung"].astype(str).to_numpy(),
            "round": t["round"].to_numpy(),
            "s": t["seconds"].to_numpy(dtype=float),
            "ss": t["server_seconds"].to_numpy(dtype=float),
        }
    )
    cols = [
        "run",
        "agent",
        "rung",
        "round",
        "n",
        "median_s",
        "mean_s",
        "p90_s",
        "max_s",
        "median_server_s",
    ]
    if f.empty:
        return pd.DataFrame(columns=cols)
    f = pd.concat([f, f.assign(rung=ALL)], ignore_index=True)
    g = f.groupby(["run", "agent", "rung", "round"], sort=True)
    out = g.agg(
        n=("s", "size"),
        median_s=("s", "median"),
        mean_s=("s", "mean"),
        p90_s=("s", lambda s: s.quantile(0.9)),
        max_s=("s", "max"),
        median_server_s=("ss", "median"),
    ).reset_index()
    return out[cols]


def slowest(turns: pd.DataFrame, k: int = 10) -> pd.DataFrame:
    """The k slowest responses of each run, with why they stopped."""
    cols = [
        "run",
        "question_id",
        "agent",
        "round",
        "rung",
        "seconds",
        "stop_reason",
        "completion_tokens",
        "thinking_chars",
        "text_chars",
    ]
    if turns.empty:
        return pd.DataFrame(columns=cols)
    out = turns.sort_values(["run", "seconds"], ascending=[True, False]).groupby("run").head(k)
    return out[cols].reset_index(drop=True)


STOP_REASONS = ("stop", "length", "loop", "timeout", "error")


def stop_reasons(turns: pd.DataFrame, slow_seconds: float = SLOW_SECONDS) -> pd.DataFrame:
    """Responses per agent by stop reason, and how many took longer than `slow_seconds`.

    Columns: run, agent, n, stop, length, loop, timeout, error, over_<slow_seconds>s.
    """
    slow_col = f"over_{slow_seconds:g}s"
    cols = ["run", "agent", "n", *STOP_REASONS, slow_col]
    if turns.empty:
        return pd.DataFrame(columns=cols)
    f = turns[["run", "agent", "stop_reason", "seconds"]]
    f = pd.concat([f, f.assign(agent=ALL)], ignore_index=True)
    ct = pd.crosstab([f["run"], f["agent"]], f["stop_reason"]).reindex(
        columns=list(STOP_REASONS), fill_value=0
    )
    ct["n"] = ct.sum(axis=1)
    ct[slow_col] = (f["seconds"] > slow_seconds).groupby([f["run"], f["agent"]]).sum()
    out = ct.reset_index()
    out.columns.name = None
    return _order(out, [])[cols]


def extraction_quality(turns: pd.DataFrame) -> pd.DataFrame:
    """Per agent: responses, failed requests, answers / confidences not extracted, how the
    extractor got them. Columns: run, agent, n, errored, answer_null, confidence_null, strict,
    tolerant, none, no_extraction."""
    cols = [
        "run",
        "agent",
        "n",
        "errored",
        "answer_null",
        "confidence_null",
        "strict",
        "tolerant",
        "none",
        "no_extraction",
    ]
    if turns.empty:
        return pd.DataFrame(columns=cols)
    f = pd.DataFrame(
        {
            "run": turns["run"].to_numpy(),
            "agent": turns["agent"].to_numpy(),
            "errored": turns["errored"].to_numpy(dtype=bool),
            "answer_null": turns["answer"].isna().to_numpy(),
            "confidence_null": turns["confidence"].isna().to_numpy(),
            "strict": (turns["extraction"] == "strict").to_numpy(dtype=bool),
            "tolerant": (turns["extraction"] == "tolerant").to_numpy(dtype=bool),
            "none": (turns["extraction"] == "none").to_numpy(dtype=bool),
            "no_extraction": turns["extraction"].isna().to_numpy(),
        }
    )
    f = pd.concat([f, f.assign(agent=ALL)], ignore_index=True)
    out = f.groupby(["run", "agent"], sort=True).agg(
        n=("errored", "size"), **{c: (c, "sum") for c in cols[3:]}
    )
    out = out.reset_index()
    for c in cols[2:]:
        out[c] = out[c].astype("int64")
    return _order(out, [])[cols]
