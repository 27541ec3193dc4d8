"""The responses themselves: sentiment, lengths, extraction (time: `metrics.timing`).

"Initial" responses are round 0 (the first speaker's answer); "debate" responses are rounds >= 1.
Turns whose request failed (`errored`) have no response and are left out of sentiment, length and
time; `extraction_quality` counts them.

A *runaway* turn stopped because it ran out of budget (stop reason "loop", "length" or "timeout");
when its final text is empty, everything it wrote is in the trace, and it has **no final text**.
Such turns are not "short responses": they are counted apart (`n_no_text`), and the share of short
responses is over the turns with a final text. An empty text of a turn that stopped normally is a
real (empty) answer and counts as short.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from crawdad.analysis.metrics.accuracy import ALL

__all__ = [
    "RUNAWAY",
    "SHORT_CHARS",
    "extraction_quality",
    "length_points",
    "lengths",
    "sentiment",
    "short_debate_turns",
]

SHORT_CHARS = 100  # "100 characters or less" (paper, 4.4)
RUNAWAY = ("loop", "length", "timeout")  # stop reasons of a turn that ran out of budget


def _no_text(turns: pd.DataFrame) -> pd.Series:
    """Runaway turns with an empty final text (everything went into the trace)."""
    return (turns["text_chars"] == 0) & turns["stop_reason"].isin(RUNAWAY)


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
    n_empty, mean, sd, median, mean_ci_lo, mean_ci_hi (mean +- 1.96 standard errors, in the
    score's own units from -1 to 1: not a share, so not shown as a percentage).
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
    cols = [
        "run",
        "agent",
        "phase",
        "n",
        "n_empty",
        "mean",
        "sd",
        "median",
        "mean_ci_lo",
        "mean_ci_hi",
    ]
    if f.empty:
        return pd.DataFrame(columns=cols)
    g = f.groupby(["run", "agent", "phase"], sort=True)["s"]
    out = g.agg(n="count", n_all="size", mean="mean", sd="std", median="median").reset_index()
    out["n_empty"] = out["n_all"] - out["n"]
    se = out["sd"] / np.sqrt(out["n"].where(out["n"] > 0))
    out["mean_ci_lo"] = out["mean"] - 1.96 * se
    out["mean_ci_hi"] = out["mean"] + 1.96 * se
    out["_p"] = (out["phase"] == "debate").astype(int)
    out = out.sort_values(["run", "agent", "_p"]).drop(columns="_p")
    return _order(out, [])[cols]


SHORT_TRACE = "debate trace, short text"  # traces behind short debate responses (fig. 7c)
LENGTH_KINDS = ("debate text", "initial text", SHORT_TRACE, "debate trace", "initial trace")


def length_points(turns: pd.DataFrame, limit: int = SHORT_CHARS) -> pd.DataFrame:
    """Long frame of response lengths: run, agent, kind ("debate text", "initial text",
    "debate trace", "initial trace"), chars, and two flags of the turn the point belongs to:
    no_text (a runaway turn with an empty final text) and short (a debate response with a final
    text of `limit` characters or less; always False for initial responses)."""
    t = _ok(turns)
    phase = _phase(t["round"])
    no_text = _no_text(t).to_numpy(dtype=bool)
    short = (phase == "debate") & ~no_text & (t["text_chars"] <= limit).to_numpy(dtype=bool)
    parts = []
    for what, col in (("text", "text_chars"), ("trace", "thinking_chars")):
        parts.append(
            pd.DataFrame(
                {
                    "run": t["run"].to_numpy(),
                    "agent": t["agent"].to_numpy(),
                    "kind": np.char.add(phase.astype(str), f" {what}"),
                    "chars": t[col].to_numpy(),
                    "no_text": no_text,
                    "short": short,
                }
            )
        )
    return pd.concat(parts, ignore_index=True)


def lengths(turns: pd.DataFrame, limit: int = SHORT_CHARS) -> pd.DataFrame:
    """Character counts of responses per agent: debate / initial texts, reasoning traces, and
    the traces behind short debate responses (`limit` characters or less; paper, fig. 7c).

    Texts of runaway turns without a final text are not lengths: they are left out of the text
    rows and counted in `n_no_text`. Columns: run, agent, kind (LENGTH_KINDS), n, n_no_text,
    n_empty (0 characters among the n), median, mean, q10, q90, max.
    """
    p = length_points(turns, limit)
    cols = [
        "run",
        "agent",
        "kind",
        "n",
        "n_no_text",
        "n_empty",
        "median",
        "mean",
        "q10",
        "q90",
        "max",
    ]
    if p.empty:
        return pd.DataFrame(columns=cols)
    is_text = p["kind"].str.endswith(" text")
    short_traces = p[(p["kind"] == "debate trace") & p["short"]].assign(kind=SHORT_TRACE)
    shown = pd.concat([p[~(is_text & p["no_text"])], short_traces], ignore_index=True)
    g = shown.groupby(["run", "agent", "kind"], sort=True)["chars"]
    out = g.agg(
        n="size",
        n_empty=lambda s: int((s == 0).sum()),
        median="median",
        mean="mean",
        q10=lambda s: s.quantile(0.1),
        q90=lambda s: s.quantile(0.9),
        max="max",
    ).reset_index()
    dropped = p[is_text & p["no_text"]].groupby(["run", "agent", "kind"]).size()
    keys = pd.MultiIndex.from_frame(out[["run", "agent", "kind"]])
    out["n_no_text"] = dropped.reindex(keys, fill_value=0).to_numpy().astype("int64")
    out["_k"] = out["kind"].map({k: i for i, k in enumerate(LENGTH_KINDS)})
    out = out.sort_values(["run", "agent", "_k"]).drop(columns="_k")
    return out[cols].reset_index(drop=True)


def short_debate_turns(turns: pd.DataFrame, limit: int = SHORT_CHARS) -> pd.DataFrame:
    """Debate responses (round >= 1) of `limit` characters or less, per agent (paper, 4.4).

    Runaway turns without a final text (stop reason loop / length / timeout, empty text) are
    not short responses: they are counted apart (`n_no_text`, `share_no_text` of all `n` debate
    responses, and by stop reason). `share_short` is `n_short` over `n_with_text`, the responses
    with a final text. The medians are over the responses with a final text; `median_trace_short`
    is the median trace length behind the short ones (fig. 7c), `median_trace` behind all.
    Columns: run, agent, n, n_no_text, share_no_text, no_text_loop, no_text_length,
    no_text_timeout, n_with_text, n_short, share_short, median_chars, median_chars_excl_short,
    median_trace_short, median_trace.
    """
    cols = [
        "run",
        "agent",
        "n",
        "n_no_text",
        "share_no_text",
        *[f"no_text_{r}" for r in RUNAWAY],
        "n_with_text",
        "n_short",
        "share_short",
        "median_chars",
        "median_chars_excl_short",
        "median_trace_short",
        "median_trace",
    ]
    t = _ok(turns)
    t = t[t["round"] >= 1]
    rows = []
    for (run, agent), g in t.groupby(["run", "agent"], sort=True):
        none = _no_text(g)
        w = g[~none]
        c = w["text_chars"]
        short = c <= limit
        n, m = len(g), len(w)
        rows.append(
            {
                "run": run,
                "agent": agent,
                "n": n,
                "n_no_text": int(none.sum()),
                "share_no_text": float(none.mean()) if n else np.nan,
                **{f"no_text_{r}": int((none & (g["stop_reason"] == r)).sum()) for r in RUNAWAY},
                "n_with_text": m,
                "n_short": int(short.sum()),
                "share_short": float(short.mean()) if m else np.nan,
                "median_chars": float(c.median()) if m else np.nan,
                "median_chars_excl_short": float(c[~short].median()) if (~short).any() else np.nan,
                "median_trace_short": float(w.loc[short, "thinking_chars"].median())
                if short.any()
                else np.nan,
                "median_trace": float(g["thinking_chars"].median()) if n else np.nan,
            }
        )
    return pd.DataFrame(rows, columns=cols)


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
