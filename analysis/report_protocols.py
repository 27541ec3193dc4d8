"""The report's protocol parts: which paper sections apply to which protocol, the section every
run gets (accuracy of final and first answers, cost per question) with the one special to its
protocol (judge bias, simultaneous rounds, self-consistency), and the cross-run comparison.

report.py calls `restricted` (tables only over the runs they make sense for), `applies` (what to
show in a run's section), `protocol_section` and `compare_lines`.
"""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd
from crawdad.analysis.figures import protocols as FP
from crawdad.analysis.metrics import protocols as MP
from crawdad.analysis.metrics.compare import side_by_side
from crawdad.analysis.section import Plot, Section, Table

__all__ = [
    "PROTOCOL_FIGURES",
    "PROTOCOL_TABLES",
    "applies",
    "compare_section",
    "protocol_section",
    "protocol_tables",
    "restricted",
    "run_kind",
    "skip_note",
]

TableFn = Callable[[pd.DataFrame, pd.DataFrame], pd.DataFrame]

# Paper tables and figures that read the crawdad protocol's alternating turns (persuasion,
# critique / defence, rounds to finish), and those that read "the first speaker's answer vs the
# final answer": a judge debate without assigned stances has both; simultaneous and solo runs
# have no first speaker, and a stance debater's opening is its assigned side, not its belief.
CRAWDAD_ONLY = {
    "accuracy_by_cap",
    "persuasion",
    "answer_changes",
    "confidence_change",
    "rounds_to_finish",
    "consensus_by_round",
    "fig2_persuasion",
    "fig4_answer_changes",
    "fig5_confidence_change",
    "fig6_rounds",
}
FIRST_SPEAKER = {
    "table1",
    "mcnemar",
    "accuracy_by_query_type",
    "accuracy_by_gold",
    "confidence",
    "confidence_by_alignment",
    "confident_wrong_corrected",
    "calibration",
    "reliability",
    "accuracy",
    "fig3_confidence",
}
# What reads the models' responses: an algorithm run (a causal-discovery baseline) has none, so
# these would be empty tables and "no data" figures.
RESPONSES = {
    "sentiment",
    "short_debate_turns",
    "lengths",
    "fig7_lengths",
    "time_sources",
    "timing",
    "slowest_seconds",
    "stop_reasons",
    "fig8_timing",
}
_WHY = {
    "crawdad": "it follows the crawdad protocol's alternating critique and defence turns",
    "first": "it compares the first speaker's opening answer with the final answer",
    "algorithm": "an algorithm, not a model, gave every answer: there are no responses, turns or "
    "first speaker to read",
}

PROTOCOL_TABLES: dict[str, tuple[str, TableFn]] = {
    "protocol_accuracy": (
        "Accuracy of the final answer and of each agent's first answer (every question; 95% Wilson CIs)",
        MP.protocol_accuracy,
    ),
    "cost": ("Cost per question: requests and tokens", MP.cost_counts),
    # shown in the report's wall-clock section, not the protocol's
    "cost_seconds": ("GPU seconds per question", MP.cost_seconds),
    "judge_bias": (
        "How the judge's verdicts side (position and stance bias; 95% Wilson CIs)",
        MP.judge_bias,
    ),
    "answer_changes_by_round": ("Answer changes per round (95% Wilson CIs)", MP.answer_changes),
    "majority_by_round": ("The majority answer per round (95% Wilson CIs)", MP.majority_by_round),
    "self_consistency": (
        "Self-consistency: accuracy against k samples (95% Wilson CIs of the mean share)",
        MP.self_consistency,
    ),
}
PROTOCOL_FIGURES = {
    "protocol_accuracy": "Accuracy of the final answer and each agent's first answer, by rung (95% CIs)",
    "judge_bias": "How the judge's verdicts side (95% CIs; dashed: 0.5)",
    "simultaneous_rounds": "Answer changes per round, and the majority's accuracy per round",
    "self_consistency": "Self-consistency: accuracy of a majority of k samples (95% CI band)",
    "cost_accuracy": "Final-answer accuracy against tokens per question, one point per run",
}
# protocol kind -> its own tables and figures
SPECIAL: dict[str, tuple[list[str], list[str]]] = {
    "judge": (["judge_bias"], ["judge_bias"]),
    "judge (stances)": (["judge_bias"], ["judge_bias"]),
    "simultaneous": (["answer_changes_by_round", "majority_by_round"], ["simultaneous_rounds"]),
    "solo": (["self_consistency"], ["self_consistency"]),
}


def run_kind(debates: pd.DataFrame) -> str:
    """The protocol of one run's debates ("crawdad" for an empty or schema-1 run)."""
    kinds = MP.protocol_of(debates)
    return next(iter(kinds.values()), "crawdad")


def applies(name: str, kind: str) -> bool:
    """Whether a paper table or figure of the report makes sense for a run of this protocol."""
    if kind == "algorithm" and name in RESPONSES:
        return False
    if name in CRAWDAD_ONLY:
        return kind == "crawdad"
    if name in FIRST_SPEAKER:
        return kind in ("crawdad", "judge")
    return True


def skip_note(names: list[str], kind: str) -> str:
    names = list(dict.fromkeys(names))  # a table and its figure may share a name
    if kind == "algorithm":
        why = _WHY["algorithm"]
    else:
        why = _WHY["crawdad"] if names[0] in CRAWDAD_ONLY else _WHY["first"]
    return (
        f"_Not shown for this {kind} run ({', '.join(names)}): {why}; the Protocol section "
        "above holds the accuracy of every protocol._"
    )


def restricted(name: str, fn: TableFn) -> TableFn:
    """`fn` computed only over the runs whose protocol it applies to (others get no rows); the
    run summary blanks its first-speaker columns for runs without a first speaker."""

    def wrapped(debates: pd.DataFrame, turns: pd.DataFrame) -> pd.DataFrame:
        kinds = MP.protocol_of(debates) if len(debates) else {}
        keep = [r for r, k in kinds.items() if applies(name, k)]
        if len(keep) == len(kinds):
            out = fn(debates, turns)
        else:
            out = fn(debates[debates["run"].isin(keep)], turns[turns["run"].isin(keep)])
        if name == "summary" and not out.empty and len(keep) < len(kinds):
            blank = out["run"].map(lambda r: not applies("table1", kinds.get(r, "crawdad")))
            for col in ("first_speaker_acc", "initial_unanswered"):
                out[col] = out[col].astype("float64").where(~blank)
        return out

    return wrapped


def protocol_tables(debates: pd.DataFrame, turns: pd.DataFrame) -> dict[str, pd.DataFrame]:
    return {name: fn(debates, turns) for name, (_, fn) in PROTOCOL_TABLES.items()}


# --- lines ------------------------------------------------------------------------------------


def _pct(x: float) -> str:
    return "-" if pd.isna(x) else f"{100 * x:.1f}%"


def _accuracy_line(acc: pd.DataFrame) -> str:
    o = acc[acc["dimension"] == "overall"]
    if o.empty:
        return "No debates."
    parts = []
    for r in o.itertuples(index=False):
        who = "The final answer" if r.stage == "final" else f"{r.who}'s {MP_STAGE[r.stage]}"
        parts.append(
            f"{who}: {_pct(r.acc)} ({r.n_correct}/{r.n}, CI {_pct(r.ci_lo)} to {_pct(r.ci_hi)})"
        )
    return "; ".join(parts) + "."


MP_STAGE = {"first": "first answer", "last": "last answer", "majority": "majority of its samples"}


def _cost_line(cost: pd.DataFrame) -> str:
    a = cost[cost["party"] == "all"]
    if a.empty:
        return "No debates."
    r = a.iloc[0]
    return (
        f"Per question: {r['requests_per_q']:.2f} requests and {r['tokens_per_q']:.0f} tokens in "
        "all (retries included); the GPU seconds they took are in the time section."
    )


def _bias_line(b: pd.DataFrame) -> str:
    rows = b.set_index("measure")
    if "sides with the last speaker" not in rows.index:
        return "No judged debates."
    last = rows.loc["sides with the last speaker"]
    out = (
        f"Where the debaters disagreed, the verdict sided with the last speaker in "
        f"{last['k']}/{last['n']} ({_pct(last['share'])}; 50% is no position bias)"
    )
    neither = rows.loc["sides with neither debater"]
    out += f"; with neither debater in {neither['k']}/{neither['n']}"
    if "sides with the yes stance" in rows.index:
        y = rows.loc["sides with the yes stance"]
        g = rows.loc["gold is yes"]
        out += f"; with the yes stance in {_pct(y['share'])} (gold is yes in {_pct(g['share'])})"
    return out + "."


def _changes_line(c: pd.DataFrame) -> str:
    if c.empty:
        return "No later rounds."
    return (
        "Agents that changed their answer: "
        + ", ".join(
            f"round {r['round']}: {r['changed']}/{r['n']} ({r['to_correct']} to correct, "
            f"{r['to_wrong']} to wrong)"
            for _, r in c.iterrows()
        )
        + "."
    )


def _majority_line(m: pd.DataFrame) -> str:
    if m.empty:
        return "No simultaneous debates."
    later = m[m["round"] > 0]
    toward, away = int(later["toward"].sum()), int(later["away"].sum())
    first, last = m.iloc[0], m.iloc[-1]
    return (
        f"The majority was right in {_pct(first['acc'])} of round 0 and {_pct(last['acc'])} of "
        f"round {last['round']}; over the later rounds it moved toward the gold answer {toward} "
        f"times and away {away} times (a count tie is no majority)."
    )


def _sc_line(s: pd.DataFrame) -> str:
    if s.empty:
        return "No samples."
    parts = []
    for agent, g in s.groupby("agent", sort=False):
        g = g.sort_values("k")
        a, b = g.iloc[0], g.iloc[-1]
        parts.append(f"{agent}: {_pct(a['acc'])} at k = 1, {_pct(b['acc'])} at k = {b['k']}")
    return "; ".join(parts) + "."


_LINES: dict[str, Callable[[pd.DataFrame], str]] = {
    "protocol_accuracy": _accuracy_line,
    "cost": _cost_line,
    "judge_bias": _bias_line,
    "answer_changes_by_round": _changes_line,
    "majority_by_round": _majority_line,
    "self_consistency": _sc_line,
}


# --- the section ------------------------------------------------------------------------------


def _plot(name: str, t: dict[str, pd.DataFrame], colors: dict[str, str]) -> Plot:
    caption = PROTOCOL_FIGURES[name]
    if name == "protocol_accuracy":
        return Plot(name, caption, FP.protocol_accuracy_figure, (t["protocol_accuracy"], colors))
    if name == "judge_bias":
        return Plot(name, caption, FP.judge_bias_figure, (t["judge_bias"],))
    if name == "simultaneous_rounds":
        args = (t["answer_changes_by_round"], t["majority_by_round"])
        return Plot(name, caption, FP.simultaneous_figure, args)
    return Plot(name, caption, FP.self_consistency_figure, (t["self_consistency"], colors))


def protocol_plots(
    kind: str, tables: dict[str, pd.DataFrame], colors: dict[str, str]
) -> list[Plot]:
    """The figures of a run's protocol section: accuracy by protocol, and its protocol's own."""
    return [
        _plot(name, tables, colors)
        for name in ["protocol_accuracy", *SPECIAL.get(kind, ([], []))[1]]
    ]


def protocol_section(kind: str, tables: dict[str, pd.DataFrame], colors: dict[str, str]) -> Section:
    """One run's protocol section: accuracy over every question, cost, and the protocol's own
    tables and figures."""
    special_t, _special_f = SPECIAL.get(kind, ([], []))
    intro = (
        "Accuracy here is over every question of the run: the final answer, and each agent's "
        "first answer (solo: its first sample) whether or not it opened the debate."
    )
    plots = protocol_plots(kind, tables, colors)
    shown = [
        Table(
            name,
            tables[name],
            PROTOCOL_TABLES[name][0],
            _LINES[name](tables[name]),
            hide=("run", "protocol"),
        )
        for name in ["protocol_accuracy", "cost", *special_t]
    ]
    return Section(f"Protocol: {kind}", [intro, *plots, *shown])


def compare_section(tables: dict[str, pd.DataFrame], labels: list[str]) -> Section:
    """Protocol numbers of several runs side by side, and accuracy against cost."""
    head = MP.protocol_headline(tables["protocol_accuracy"], tables["cost"])
    kinds = tables["cost"].drop_duplicates("run").set_index("run")["protocol"]
    head = pd.concat(
        [pd.DataFrame({"run": kinds.index, "metric": "protocol", "value": kinds.to_numpy()}), head],
        ignore_index=True,
    )
    wide = side_by_side(head, ["metric"], "value", labels)
    shown = wide.copy()
    for c in labels:
        if c in shown.columns:
            shown[c] = [
                f"{v:.1f}"
                if isinstance(v, float) and "%" in m
                else (f"{v:.2f}" if isinstance(v, float) else ("-" if v is None else str(v)))
                for m, v in zip(shown["metric"], shown[c], strict=True)
            ]
    table = Table(
        "protocols",
        wide,
        "Protocols side by side",
        "Accuracy over every question, and cost per question in requests and tokens (all "
        "parties; see each run's cost table for debaters, judge and extractor, and its time "
        "section for GPU seconds).",
        shown=shown.fillna("-"),
        fold="never",
    )
    args = (tables["protocol_accuracy"], tables["cost"])
    plot = Plot("cost_accuracy", PROTOCOL_FIGURES["cost_accuracy"], FP.cost_accuracy_figure, args)
    return Section("", [table, plot], folder="compare")
