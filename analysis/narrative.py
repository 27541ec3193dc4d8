"""One line per table or figure saying what it shows, generated from the numbers of one run.

Every function takes the metrics' tables of ONE run and returns a Markdown sentence (or a short
paragraph); none of them looks at anything but its arguments.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from crawdad.analysis.formatting import fmt_p, fmt_pct
from crawdad.analysis.metrics.accuracy import ALL

__all__ = [
    "accuracy_lines",
    "calibration_line",
    "cap_line",
    "change_line",
    "confidence_alignment_line",
    "confidence_change_line",
    "confidence_line",
    "confident_wrong_line",
    "gold_line",
    "lengths_line",
    "persuasion_line",
    "quality_line",
    "query_type_line",
    "rounds_line",
    "sentiment_line",
    "time_sources_line",
    "timing_caption",
    "timing_line",
]


def _name(agent: str) -> str:
    return agent.split(" (")[0]


def _p_eq(p: float) -> str:
    f = fmt_p(p)
    return f"p{f}" if f.startswith("<") else f"p={f}"


def _secs(x: float) -> str:
    """Seconds, with as many decimals as small values need."""
    if x != x:  # NaN
        return "-"
    if abs(x) >= 100:
        return f"{x:,.0f}"
    return f"{x:.1f}" if abs(x) >= 1 else f"{x:.3f}"


def _count(k: int, noun: str) -> str:
    """3 "debate turn" -> "3 debate turns"; 1 -> "1 debate turn"."""
    return f"{k} {noun}" + ("" if k == 1 else "s")


def _pts(x: float) -> str:
    return f"{100 * x:+.1f}"


def accuracy_lines(mcnemar: pd.DataFrame, table1: pd.DataFrame) -> list[str]:
    """Per model: gain after debate with McNemar p; and the rung where debate helped most."""
    lines = []
    for r in mcnemar.itertuples(index=False):
        if r.n == 0:
            continue
        who = "All first speakers together" if r.agent == ALL else f"**{r.agent}**"
        points = round(abs(100 * r.gain), 1)  # as printed: 0.0 is no change
        one = r.agent != ALL
        if points == 0:
            change = "does not change" if one else "do not change"
        else:
            change = ("gain" if r.gain > 0 else "lose") + ("s" if one else "")
            change += f" {points:.1f} points"
        lines.append(
            f"{who} {change} after debate "
            f"({fmt_pct(r.initial_acc)}% \u2192 {fmt_pct(r.final_acc)}%, 95% CI of the change "
            f"[{_pts(r.gain_ci_lo)}, {_pts(r.gain_ci_hi)}]; exact McNemar {_p_eq(r.p_value)} on "
            f"{r.i_to_c} wrong\u2192right vs {r.c_to_i} right\u2192wrong of {r.n} questions"
            + (" it opened)." if r.agent != ALL else ")."),
        )
    rung = table1[(table1["dimension"] == "rung") & (table1["agent"] != ALL)]
    if not rung.empty:
        w = rung.pivot_table(index=["agent", "group"], columns="stage", values="acc")
        if {"initial", "final"} <= set(w.columns):
            gain = (w["final"] - w["initial"]).dropna()
            if not gain.empty:
                (agent, group), g = gain.idxmax(), gain.max()
                lines.append(f"The largest gain is {_name(agent)}'s on {group}: {_pts(g)} points.")
    return lines


def cap_line(cap: pd.DataFrame) -> str:
    c = cap[cap["agent"] == ALL].sort_values("cap")
    if c.empty:
        return "No debates."
    first, last = c.iloc[0], c.iloc[-1]
    return (
        f"Keeping the first speaker's answer alone would have scored {fmt_pct(first['acc'])}%; "
        f"the full debate scored {fmt_pct(last['acc'])}% ({_pts(last['acc'] - first['acc'])} points)."
    )


def quality_line(summary: pd.DataFrame, quality: pd.DataFrame) -> str:
    s = summary.iloc[0]
    q = quality[quality["agent"] == ALL]
    q = q.iloc[0] if not q.empty else None
    parts = [
        f"{s['errored']} of {s['debates']} debates errored and {s['final_unanswered']} final "
        f"answers are missing (not extracted or errored); both count as wrong in every accuracy"
    ]
    if q is not None:
        parts.append(
            f"{q['answer_null']} of {q['n']} responses have no extracted answer and "
            f"{q['confidence_null']} no confidence; {q['errored']} requests failed"
        )
    return "; ".join(parts) + "."


def persuasion_line(pers: pd.DataFrame) -> str:
    tot = pers[(pers["agent"] == ALL) & (pers["rung"] == ALL)]
    if tot.empty or tot.iloc[0]["n"] == 0:
        return "No debate reached a third response (round 2), so there is no persuasion to show."
    t = tot.iloc[0]
    line = (
        f"Of {t['n']} debates that went to a third response, debate turned {t['I->C']} wrong first "
        f"answers right and {t['C->I']} right ones wrong (C\u2192C {t['C->C']}, I\u2192I {t['I->I']})."
    )
    unread = int(t.get("U->C", 0)) + int(t.get("U->I", 0))
    if unread:
        line += (
            f" {_count(unread, 'first answer')} could not be extracted (U, neither right nor "
            "wrong): "
            f"{t['U->C']} ended correct, {t['U->I']} wrong."
        )
    per = pers[(pers["agent"] != ALL) & (pers["rung"] == ALL) & (pers["n"] > 0)]
    if len(per):
        flips = [
            f"{_name(r['agent'])} {fmt_pct((r['I->C'] + r['C->I']) / r['n'])}%"
            for _, r in per.iterrows()
        ]
        line += " First answers overturned, by first speaker: " + ", ".join(flips) + "."
    return line


def sentiment_line(sent: pd.DataFrame) -> str:
    """Each agent's mean VADER compound, initial -> debate; a phase without scored responses
    is said to have none (a solo run has no debate responses), never printed as `nan`."""
    s = sent[sent["agent"] != ALL]
    if s.empty:
        return "No responses to score."
    s = s[s["n"] > 0]
    phases = set(s["phase"])

    def mean(v: pd.Series, phase: str) -> str:
        x = v.get(phase)
        return "none" if x is None or pd.isna(x) else f"{x:+.3f}"

    parts = []
    for agent, g in s.groupby("agent", sort=True):
        v = g.set_index("phase")["mean"]
        if phases == {"initial"}:
            parts.append(f"{_name(agent)} {mean(v, 'initial')}")
        else:
            parts.append(f"{_name(agent)} {mean(v, 'initial')} \u2192 {mean(v, 'debate')}")
    if not parts:
        return "No response has a text to score."
    if phases == {"initial"}:
        return (
            "Mean VADER compound (formatting stripped) of the first responses: "
            + "; ".join(parts)
            + ". No response answered another agent's (each agent answered alone), so there is"
            " no debate sentiment to compare with."
        )
    return (
        "Mean VADER compound (formatting stripped), initial \u2192 debate responses: "
        + "; ".join(parts)
        + "."
    )


def confidence_line(conf: pd.DataFrame) -> str:
    c = conf[(conf["agent"] == ALL) & (conf["stage"] == "initial")]
    if c.empty:
        return "No extracted confidences."
    by_rung = c[c["rung"] != ALL]
    means = {
        rung: float(np.average(g["mean"], weights=g["n"]))
        for rung, g in by_rung.groupby("rung", sort=True)
    }
    allr = c[c["rung"] == ALL].set_index("correct")["median"]
    parts = []
    if means:
        parts.append(
            "Mean initial confidence by rung: "
            + ", ".join(f"Rung {k} {v:.3f}" for k, v in means.items())
        )
    if True in allr.index and False in allr.index:
        parts.append(f"median of correct answers {allr[True]:.2f} vs wrong {allr[False]:.2f}")
    fin = conf[(conf["agent"] == ALL) & (conf["stage"] == "final") & (conf["rung"] == ALL)]
    if not fin.empty:
        m = np.average(fin["mean"], weights=fin["n"])
        ini = np.average(c[c["rung"] == ALL]["mean"], weights=c[c["rung"] == ALL]["n"])
        parts.append(f"mean confidence {ini:.2f} initially, {m:.2f} in the final answers")
    return "; ".join(parts) + "."


def confidence_alignment_line(ca: pd.DataFrame) -> str:
    """Mean initial confidence by commonsense alignment, all first speakers and per model."""
    c = ca[(ca["stage"] == "initial") & (ca["alignment"] != ALL)]
    if c.empty:
        return "No extracted confidences."

    def means(g: pd.DataFrame) -> str:
        return ", ".join(f"{r['alignment']} {r['mean']:.3f}" for _, r in g.iterrows())

    line = "Mean initial confidence by alignment: " + means(c[c["agent"] == ALL])
    per = [
        f"{_name(agent)} " + means(g)
        for agent, g in c[c["agent"] != ALL].groupby("agent", sort=True)
    ]
    if per:
        line += "; by first speaker: " + "; ".join(per)
    return line + " (the paper, 4.2, saw no evident difference by alignment)."


def change_line(change: pd.DataFrame) -> str:
    c = change[change["agent"] == ALL]
    if c.empty:
        return "No response was contradicted by an opponent with a stated confidence."
    lo = c[c["hi"] <= 0.9]
    hi = c[c["lo"] >= 0.9]
    parts = []
    for name, g in (("below 0.9", lo), ("0.9 or above", hi)):
        n = int(g["n"].sum())
        if n:
            parts.append(f"{fmt_pct(g['n_changed'].sum() / n)}% when it was {name} (n={n})")
    return "Contradicted responses switched to the opponent's answer " + " vs ".join(parts) + "."


def confidence_change_line(cc: pd.DataFrame) -> str:
    c = cc[cc["agent"] == ALL].set_index("outcome")
    if c.empty:
        return "No contradicted responses with both confidences."
    parts = []
    for o in ("defended", "persuaded"):
        if o in c.index and c.loc[o, "n_with_confidence"] > 0:
            r = c.loc[o]
            parts.append(
                f"{o}: mean change {r['mean_delta']:+.3f} (up {fmt_pct(r['share_up'])}%, "
                f"down {fmt_pct(r['share_down'])}%, n={int(r['n_with_confidence'])})"
            )
    return "Confidence after being contradicted, " + "; ".join(parts) + "."


def confident_wrong_line(cw: pd.DataFrame, threshold: float = 0.9) -> str:
    t = cw[(cw["agent"] == ALL) & (cw["rung"] == ALL)]
    if t.empty:
        return "No debates."
    t0 = t.iloc[0]
    line = (
        f"{t0['confident_wrong']} first answers were wrong with confidence > {threshold}; the debate "
        f"corrected {t0['corrected']} of them"
    )
    by_rung = cw[(cw["agent"] == ALL) & (cw["rung"] != ALL)]
    if len(by_rung) and by_rung["corrected"].sum() > 0:
        parts = [f"Rung {r['rung']} {r['corrected']}" for _, r in by_rung.iterrows()]
        line += " (" + ", ".join(parts) + ")"
    per = cw[(cw["agent"] != ALL) & (cw["rung"] == ALL)]
    if len(per):
        line += "; by first speaker: " + ", ".join(
            f"{_name(r['agent'])} {r['corrected']}/{r['confident_wrong']}"
            for _, r in per.iterrows()
        )
    return line + "."


def rounds_line(rounds: pd.DataFrame, consensus: pd.DataFrame, summary: pd.DataFrame) -> str:
    a = rounds[rounds["first_agent"] == ALL]
    if a.empty:
        return "No finished debates."
    parts = []
    two = a[a["responses"] == 2].set_index("rung")["share"]
    rungs = sorted(r for r in a["rung"].unique() if r != ALL)
    if rungs:
        parts.append(
            "Agreement after two responses: "
            + ", ".join(f"Rung {r} {fmt_pct(two.get(r, 0.0))}%" for r in rungs)
        )
        means = a.drop_duplicates("rung").set_index("rung")["mean_responses"]
        parts.append("mean responses " + ", ".join(f"{means[r]:.2f}" for r in rungs))
    s = summary.iloc[0]
    parts.append(f"{s['no_consensus']} finished debates ended without consensus")
    return "; ".join(parts) + "."


def _chars(x: float) -> str:
    return "-" if x != x else f"{x:,.0f}"


def lengths_line(short: pd.DataFrame, limit: int = 100) -> str:
    """Share of short debate responses (over those with a final text), the runaway turns without
    a final text apart, and the traces behind the short ones (fig. 7c)."""
    if short.empty:
        return "No debate responses."
    parts = []
    for _, r in short.iterrows():
        part = (
            f"{_name(r['agent'])}: {fmt_pct(r['share_short'], 2)}% ({r['n_short']}/"
            f"{r['n_with_text']}) of debate responses with a final text are {limit} characters or "
            f"less, median {_chars(r['median_chars'])} characters "
            f"({_chars(r['median_chars_excl_short'])} without those)"
        )
        if r["n_short"]:
            part += (
                f"; the reasoning traces behind the short ones: median "
                f"{_chars(r['median_trace_short'])} characters (all debate traces "
                f"{_chars(r['median_trace'])})"
            )
        if r["n_no_text"]:
            why = ", ".join(
                f"{k} {int(r[f'no_text_{k}'])}"
                for k in ("loop", "length", "timeout")
                if r[f"no_text_{k}"]
            )
            part += (
                f"; {_count(int(r['n_no_text']), 'debate turn')} ({fmt_pct(r['share_no_text'])}%) "
                "had no final "
                f"text: stopped as {why}, everything in the trace, not counted as short"
            )
        parts.append(part)
    return "; ".join(parts) + "."


def _source(src: str) -> str:
    return "server-reported" if src == "server" else "wall"


def time_sources_line(sources: pd.DataFrame) -> str:
    """Which time is shown for which model, and why (fig. 8 and the time tables)."""
    if sources.empty:
        return "No responses."
    parts = []
    for _, r in sources.iterrows():
        if r["time_source"] == "server":
            part = (
                f"{_name(r['agent'])}: the server's own generation time ({r['n_server']} of "
                f"{r['n']} responses"
            )
            if r["n_fallback"]:
                part += f"; {r['n_fallback']} without one, cut by crawdad, show their wall time"
            part += f"; wall time was a median {_secs(r['median_wait_s'])} s longer)"
        else:
            part = f"{_name(r['agent'])}: wall time (its server reports no generation time)"
        parts.append(part)
    return (
        "The paper timed one request at a time; under concurrency, wall time also holds the time "
        "a request waited in queues, so the time shown is the server's own where it reports one. "
        + "; ".join(parts)
        + "."
    )


def timing_caption(sources: pd.DataFrame) -> str:
    """The caption of fig. 8: which time it shows for which model."""
    base = "Fig. 8: median generation time by round and rung"
    if sources.empty:
        return base
    parts = []
    for src, g in sources.groupby("time_source", sort=False):
        who = " and ".join(_name(a) for a in g["agent"])
        if src == "server":
            parts.append(
                f"{who}: the server's own generation time, without the queueing that wall time "
                "includes under concurrency"
            )
        else:
            parts.append(f"{who}: wall time, as the server reports no time of its own")
    return f"{base}. " + "; ".join(parts) + "."


def timing_line(timing: pd.DataFrame, slowest: pd.DataFrame, stops: pd.DataFrame) -> str:
    t = timing[(timing["rung"] == ALL) & (timing["agent"] != ALL)]
    if t.empty:
        return "No responses."
    parts = []
    for agent, g in t.groupby("agent", sort=True):
        med = g.set_index("round")["median_s"]
        parts.append(
            f"{_name(agent)} ({_source(g['time_source'].iloc[0])}) "
            + " / ".join(_secs(v) for v in med.to_numpy())
        )
    line = "Median seconds per response by round (0, 1, ...): " + "; ".join(parts)
    if not slowest.empty:
        s = slowest.iloc[0]
        line += (
            f". Slowest: {_secs(s['seconds'])} s ({_name(s['agent'])}, round {s['round']}, "
            f"{s['time_source']} time, stop reason \u201c{s['stop_reason']}\u201d)"
        )
    slow_col = [c for c in stops.columns if c.startswith("over_")]
    tot = stops[stops["agent"] == ALL]
    if slow_col and not tot.empty:
        line += f"; {int(tot.iloc[0][slow_col[0]])} responses took {slow_col[0][5:]} or more"
    return line + "."


def calibration_line(cal: pd.DataFrame) -> str:
    c = cal[cal["agent"] != ALL]
    if c.empty:
        return "No answers with confidences."
    parts = []
    for agent, g in c.groupby("agent", sort=True):
        v = g.set_index("stage")
        if {"initial", "final"} <= set(v.index):
            parts.append(
                f"{_name(agent)} ECE {v.loc['initial', 'ece']:.3f} \u2192 {v.loc['final', 'ece']:.3f}, "
                f"Brier {v.loc['initial', 'brier']:.3f} \u2192 {v.loc['final', 'brier']:.3f}"
            )
    return "Initial \u2192 final: " + "; ".join(parts) + " (10 equal-width bins; lower is better)."


def query_type_line(acc: pd.DataFrame) -> str:
    a = acc[(acc["agent"] == ALL)]
    w = a.pivot_table(index="query_type", columns="stage", values="acc")
    if w.empty or "initial" not in w.columns:
        return "No debates."
    hard = w["initial"].idxmin()
    easy = w["initial"].idxmax()
    return (
        f"Hardest query type for the first speakers: {hard} ({fmt_pct(w.loc[hard, 'initial'])}% "
        f"\u2192 {fmt_pct(w.loc[hard, 'final'])}% after debate); easiest: {easy} "
        f"({fmt_pct(w.loc[easy, 'initial'])}%)."
    )


def gold_line(acc: pd.DataFrame) -> str:
    a = acc[(acc["agent"] == ALL)]
    w = a.pivot_table(index="gold", columns="stage", values="acc")
    if w.empty:
        return "No debates."
    parts = [
        f"gold \u201c{g}\u201d {fmt_pct(w.loc[g, 'initial'])}% \u2192 {fmt_pct(w.loc[g, 'final'])}%"
        for g in w.index
    ]
    return "Accuracy by gold answer, initial \u2192 final: " + "; ".join(parts) + "."


def length_kinds_line(lengths: pd.DataFrame) -> str:
    """Median characters per agent of initial texts, debate texts and reasoning traces."""
    if lengths.empty:
        return "No responses."
    kinds = ("initial text", "debate text", "debate trace")
    parts = []
    for agent, g in lengths.groupby("agent", sort=True):
        med = g.set_index("kind")["median"]
        parts.append(
            f"{_name(agent)} " + " / ".join(f"{med[k]:,.0f}" if k in med else "-" for k in kinds)
        )
    return (
        "Median characters, initial response / debate response / debate trace: "
        + "; ".join(parts)
        + "."
    )


def slowest_line(slowest: pd.DataFrame) -> str:
    if slowest.empty:
        return "No responses."
    who = slowest["agent"].map(_name).value_counts()
    why = slowest["stop_reason"].value_counts()
    return (
        f"The {len(slowest)} slowest responses took {_secs(slowest['seconds'].min())} to "
        f"{_secs(slowest['seconds'].max())} s (`seconds`: the time shown, see `time_source`; wall "
        "and server times beside it); by model: "
        + ", ".join(f"{k} {v}" for k, v in who.items())
        + "; by stop reason: "
        + ", ".join(f"{k} {v}" for k, v in why.items())
        + "."
    )


def reliability_line(rel: pd.DataFrame) -> str:
    r = rel[(rel["agent"] == ALL) & (rel["n"] > 0)]
    if r.empty:
        return "No answers with confidences."
    parts = []
    for stage, g in r.groupby("stage", sort=False):
        top = g.loc[g["n"].idxmax()]
        parts.append(
            f"{stage}: {fmt_pct(top['n'] / g['n'].sum())}% of answers in the {top['lo']:.1f}-"
            f"{top['hi']:.1f} bin, where accuracy is {fmt_pct(top['accuracy'])}% at mean "
            f"confidence {fmt_pct(top['mean_confidence'])}%"
        )
    return "Fullest bin, " + "; ".join(parts) + "."
