"""Run folders -> a report folder: every table (CSV + Markdown, LaTeX for Table 1), every figure
(PNG + PDF) and `report.md` showing them all with one generated line each.

Layout of `out/`:
    report.md
    compare/            (several runs only) the main tables side by side, one column per run
    <run>/tables/       <name>.csv (full precision) and <name>.md; table1.tex
    <run>/figures/      <name>.png and <name>.pdf
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Literal, TypeVar

import pandas as pd
from crawdad.analysis import figures as F
from crawdad.analysis import metrics as M
from crawdad.analysis import narrative as N
from crawdad.analysis import report_protocols as RP
from crawdad.analysis import scorecard as SC
from crawdad.analysis.experiment_folder import is_experiment
from crawdad.analysis.formatting import (
    TABLE1_NOTE,
    fmt_p,
    format_table,
    table1_latex,
    table1_shown,
    to_markdown,
)
from crawdad.analysis.grader_agreement import grading_section
from crawdad.analysis.load import Run, by_gold, concat, load_runs
from crawdad.analysis.report_files import ReportWriter, write_into
from crawdad.analysis.report_progress import ReportProgress
from crawdad.analysis.section import Block, Plot, Section, Table
from crawdad.analysis.servers_section import servers_section
from crawdad.analysis.shards import pool_shards
from crawdad.analysis.tasks import task_sections
from crawdad.analysis.tasks.discovery.sections import is_discovery_run
from matplotlib.figure import Figure

from crawdad import __version__
from crawdad.errors import CrawdadError, StoreError
from crawdad.records import ALONE, ServedBy, StartedServer
from crawdad.safe_files import read_inside

__all__ = ["FIGURES", "TABLES", "compute_tables", "write_report"]

# name -> (title, function of (debates, turns)); every one is written for every run.
TABLES: dict[str, tuple[str, Callable[[pd.DataFrame, pd.DataFrame], pd.DataFrame]]] = {
    "summary": ("Run summary", M.run_summary),
    "table1": (
        "Table 1: accuracy before and after debate (95% Wilson CIs)",
        lambda d, t: M.table1(d),
    ),
    "mcnemar": (
        "Initial vs final answers: exact McNemar test (gain: Newcombe's paired 95% CI)",
        lambda d, t: M.mcnemar(d),
    ),
    "accuracy_by_cap": (
        "Accuracy had the debate stopped after k responses (95% Wilson CIs)",
        M.accuracy_by_cap,
    ),
    "accuracy_by_query_type": (
        "Accuracy by query type (95% Wilson CIs)",
        lambda d, t: M.accuracy_by(d, "query_type"),
    ),
    "accuracy_by_gold": (
        "Accuracy by gold answer (95% Wilson CIs)",
        lambda d, t: M.accuracy_by(d, "gold"),
    ),
    "persuasion": ("Persuasion outcomes (debates with 3+ responses)", lambda d, t: M.persuasion(d)),
    "sentiment": ("Sentiment (VADER compound)", lambda d, t: M.sentiment(t)),
    "confidence": (
        "Stated confidence by rung and correctness",
        lambda d, t: M.confidence_summary(d),
    ),
    "confidence_by_alignment": (
        "Stated confidence by commonsense alignment",
        lambda d, t: M.confidence_by_alignment(d),
    ),
    "answer_changes": (
        "Answer changes vs the opponent's confidence (95% Wilson CIs)",
        lambda d, t: M.change_vs_opponent_confidence(M.challenged_turns(t)),
    ),
    "confidence_change": (
        "Confidence change when defending vs persuaded",
        lambda d, t: M.confidence_change(M.challenged_turns(t)),
    ),
    "confident_wrong_corrected": (
        "Confidently wrong first answers (> 0.9) that debate corrected",
        lambda d, t: M.confident_wrong_corrected(d),
    ),
    "rounds_to_finish": ("Responses until the debate ended", lambda d, t: M.rounds_to_finish(d)),
    "consensus_by_round": ("Consensus by debate length", lambda d, t: M.consensus_by_round(d)),
    "lengths": ("Response lengths (characters)", lambda d, t: M.lengths(t)),
    "short_debate_turns": (
        "Debate responses of 100 characters or less",
        lambda d, t: M.short_debate_turns(t),
    ),
    "time_sources": ("Which time is shown for which model", lambda d, t: M.time_sources(t)),
    "timing": ("Generation time (s) by round and rung", lambda d, t: M.timing(t)),
    "slowest_seconds": ("Slowest responses", lambda d, t: M.slowest(t)),
    "stop_reasons": ("Stop reasons and slow responses", lambda d, t: M.stop_reasons(t)),
    "calibration": ("Calibration: ECE and Brier score", lambda d, t: M.calibration_summary(d)),
    "reliability": (
        "Reliability diagram data (10 equal-width bins)",
        lambda d, t: M.reliability(d),
    ),
    "extraction_quality": ("Extraction and failed requests", lambda d, t: M.extraction_quality(t)),
    "errored_debates": (
        "Errored debates",
        lambda d, t: d.loc[d["errored"], ["run", "question_id", "first_agent", "n_turns", "error"]],
    ),
}

# CLadder's own descriptors: nothing to show for another task's items.
CLADDER_ONLY = {"accuracy_by_query_type"}

FIGURES = {
    "accuracy": "Accuracy before and after debate, by rung (95% Wilson CIs)",
    "fig2_persuasion": (
        "Fig. 2: persuasion outcomes by first speaker and rung (first answers that could not be "
        "extracted hatched, as their own class)"
    ),
    "fig3_confidence": "Fig. 3: stated confidence by rung, correct vs incorrect, initial and final",
    "fig4_answer_changes": "Fig. 4: answer changes vs the opponent's confidence",
    "fig5_confidence_change": "Fig. 5: confidence change when defending vs when persuaded",
    "fig6_rounds": "Fig. 6: rounds to finish by rung and first speaker; consensus by length",
    "fig7_lengths": (
        "Fig. 7: lengths of (a) debate responses with a final text, (b) initial responses, "
        "(c) the reasoning traces behind debate responses of 100 characters or less and "
        "(d) behind all debate responses"
    ),
    "fig8_timing": "Fig. 8: median generation time by round and rung",  # completed per run
    "reliability": "Reliability diagrams of initial and final answers",
}

RULES = """\
**How things are counted.** Rounds are 0-based as in the records: round 0 is the first speaker's
answer, round 1 the second speaker's critique, and so on; the paper's "round k" is our round k-1,
and the number of responses in a debate is the paper's number of rounds. A model's *initial*
accuracy is over the questions it answered first (its round-0 answer); its *final* accuracy is
the debate's final answer on those same questions. An answer the extractor could not read, and
every debate that errored, **count as wrong** in all accuracies; their numbers are given in each
table (columns "n unanswered" and "n errored") and in the summary. Persuasion, rounds and
answer-change tables leave errored debates out. CIs on shares are 95% Wilson score intervals (they keep their coverage
near 0% and 100% and for a handful of questions: 2 of 2 right is 34.2 to 100, never a point); a
paired difference (debate's gain) uses Newcombe's score interval for paired proportions. McNemar tests are exact (binomial test on the discordant pairs). Calibration uses 10
equal-width confidence bins. Sentiment is VADER's compound score of the response text with
Markdown and LaTeX stripped. A first answer that could not be extracted is its own persuasion class
(U->C, U->I), not a wrong one. A debate turn that ran out of budget (stopped as loop, length or
timeout) with an empty final text has no text length: it is counted apart, not as a short
response. Generation time is the server's own where the server reports one (Ollama's
`total_duration`, which starts when Ollama accepts the request: it leaves out waiting in crawdad
and on the network, but can still hold a wait for a model load or a free slot inside Ollama) and
crawdad's wall time where it does not (OpenAI-compatible servers): the paper timed one request at
a time, and under concurrency wall time includes queueing. The time tables say which time is
shown for which model."""


def compute_tables(
    debates: pd.DataFrame, turns: pd.DataFrame, progress: ReportProgress | None = None
) -> dict[str, pd.DataFrame]:
    """Every table of the report, for all runs at once (each has a `run` column), over the
    debates with an exact answer (those without one are scored nowhere: `analysis.unscored`)."""
    debates, turns = by_gold(debates, turns)
    if progress is not None:
        progress.phase("computing tables", len(TABLES) + 1)
    tables = {}
    for name, (_, fn) in TABLES.items():
        tables[name] = RP.restricted(name, fn)(debates, turns)
        if progress is not None:
            progress.step()
    tables |= RP.protocol_tables(debates, turns)
    if progress is not None:
        progress.step()
    return tables


def _slug(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", label).strip("_") or "run"


def _of(df: pd.DataFrame, run: str) -> pd.DataFrame:
    return df[df["run"] == run].reset_index(drop=True) if "run" in df.columns else df


def _points(run: Run) -> dict[str, pd.DataFrame]:
    """Per-item frames some figures draw from (the tables hold only their summaries)."""
    return {
        "confidence": M.confidence_points(run.debates),
        "challenged": M.challenged_turns(run.turns),
        "lengths": M.length_points(run.turns),
    }


def _colors(debates: pd.DataFrame, turns: pd.DataFrame) -> dict[str, str]:
    """One colour per agent, the same in every figure of the report."""
    agents = pd.concat([debates["first_agent"], debates["second_agent"], turns["agent"]])
    agents = pd.concat([agents, pd.Series([a for ags in debates["agents"] for a in ags])])
    return F.agent_colors(agents.dropna().unique())


def _plots(run: Run, t: dict[str, pd.DataFrame], colors: dict[str, str]) -> dict[str, Plot]:
    """The paper's figures that apply to the run's protocol, by name."""
    points = _points(run)
    captions = FIGURES | {"fig8_timing": N.timing_caption(t["time_sources"])}
    specs: dict[str, tuple[Callable[..., Figure], tuple[object, ...]]] = {
        "accuracy": (F.accuracy_figure, (t["table1"], colors)),
        "fig2_persuasion": (F.persuasion_figure, (t["persuasion"], colors)),
        "fig3_confidence": (F.confidence_figure, (points["confidence"],)),
        "fig4_answer_changes": (F.change_figure, (t["answer_changes"], colors)),
        "fig5_confidence_change": (F.confidence_change_figure, (points["challenged"], colors)),
        "fig6_rounds": (F.rounds_figure, (t["rounds_to_finish"], t["consensus_by_round"], colors)),
        "fig7_lengths": (F.lengths_figure, (points["lengths"], t["short_debate_turns"], colors)),
        "fig8_timing": (F.timing_figure, (t["timing"], colors)),
        "reliability": (F.reliability_figure, (t["reliability"], t["calibration"], colors)),
    }
    assert set(specs) == set(FIGURES)
    kind = RP.run_kind(run.debates)
    return {
        name: Plot(name, captions[name], fn, args)
        for name, (fn, args) in specs.items()
        if RP.applies(name, kind)
    }


def run_figures(run: Run, tables: dict[str, pd.DataFrame]) -> dict[str, Figure]:
    """The paper's figures of one run and its protocol section's ("protocol_accuracy", and the
    protocol's own) as matplotlib figures, by name (the functions the report draws with; `tables` as `compute_tables` gives them, for this run or several)."""
    t = {k: _of(v, run.label) for k, v in tables.items()}
    colors = _colors(run.debates, run.turns)
    plots = list(_plots(run, t, colors).values())
    plots += RP.protocol_plots(RP.run_kind(run.debates), t, colors)  # "protocol_accuracy", ...
    return {p.name: p.draw(*p.args) for p in plots}


def _lines(t: dict[str, pd.DataFrame]) -> dict[str, str]:
    """The one-line statement shown with each table / figure."""
    acc = N.accuracy_lines(t["mcnemar"], t["table1"])
    return {
        "summary": N.quality_line(t["summary"], t["extraction_quality"]),
        "table1": " ".join(acc) if acc else "No debates.",
        "mcnemar": (
            "One pair per question: (first speaker's round-0 answer correct?, debate's final answer "
            "correct?); p is the two-sided exact binomial test of i_to_c among i_to_c + c_to_i."
        ),
        "accuracy_by_cap": N.cap_line(t["accuracy_by_cap"]),
        "accuracy_by_query_type": N.query_type_line(t["accuracy_by_query_type"]),
        "accuracy_by_gold": N.gold_line(t["accuracy_by_gold"]),
        "persuasion": N.persuasion_line(t["persuasion"]),
        "sentiment": N.sentiment_line(t["sentiment"]),
        "confidence": N.confidence_line(t["confidence"]),
        "confidence_by_alignment": N.confidence_alignment_line(t["confidence_by_alignment"]),
        "answer_changes": N.change_line(t["answer_changes"]),
        "confidence_change": N.confidence_change_line(t["confidence_change"]),
        "confident_wrong_corrected": N.confident_wrong_line(t["confident_wrong_corrected"]),
        "rounds_to_finish": N.rounds_line(
            t["rounds_to_finish"], t["consensus_by_round"], t["summary"]
        ),
        "consensus_by_round": _consensus_line(t["consensus_by_round"]),
        "lengths": N.length_kinds_line(t["lengths"]),
        "short_debate_turns": N.lengths_line(t["short_debate_turns"]),
        "time_sources": N.time_sources_line(t["time_sources"]),
        "timing": N.timing_line(t["timing"], t["slowest_seconds"], t["stop_reasons"]),
        "slowest_seconds": N.slowest_line(t["slowest_seconds"]),
        "cost_seconds": _seconds_line(t["cost_seconds"]),
        "stop_reasons": _stop_line(t["stop_reasons"]),
        "calibration": N.calibration_line(t["calibration"]),
        "reliability": N.reliability_line(t["reliability"]),
        "extraction_quality": N.quality_line(t["summary"], t["extraction_quality"]),
        "errored_debates": f"{len(t['errored_debates'])} debates errored; each counts as wrong.",
    }


def _consensus_line(c: pd.DataFrame) -> str:
    rows = c[c["responses"] != M.ALL]
    if rows.empty:
        return "No finished debates."
    return (
        "Consensus rate by number of responses: "
        + ", ".join(f"{r['responses']}: {r['consensus']}/{r['n']}" for _, r in rows.iterrows())
        + "."
    )


def _stop_line(s: pd.DataFrame) -> str:
    a = s[s["agent"] == M.ALL]
    if a.empty:
        return "No responses."
    r = a.iloc[0]
    return (
        f"Of {r['n']} responses, {r['length']} hit the token budget, {r['loop']} were stopped as "
        f"loops, {r['timeout']} timed out and {r['error']} failed."
    )


# Sections of a run, in the paper's order: (heading, tables, figures).
# What two identical runs (same command, same seed) may not share: the clock. Every wall-clock
# figure lives in these tables, under this section's heading; everything else is a function of
# the records' content and the seed alone.
WALL_CLOCK_SECTION = "Time taken (fig. 8): wall-clock figures"
WALL_CLOCK_TABLES = ("time_sources", "timing", "slowest_seconds", "cost_seconds")

SECTIONS: list[tuple[str, list[str], list[str]]] = [
    ("Overview", ["summary"], []),
    ("Accuracy (Table 1)", ["table1", "mcnemar", "accuracy_by_cap"], ["accuracy"]),
    ("Persuasion (fig. 2) and sentiment", ["persuasion", "sentiment"], ["fig2_persuasion"]),
    (
        "Confidence (fig. 3)",
        ["confidence", "confidence_by_alignment", "confident_wrong_corrected"],
        ["fig3_confidence"],
    ),
    (
        "Answer changes and confidence (figs. 4, 5)",
        ["answer_changes", "confidence_change"],
        ["fig4_answer_changes", "fig5_confidence_change"],
    ),
    ("Rounds taken (fig. 6)", ["rounds_to_finish", "consensus_by_round"], ["fig6_rounds"]),
    ("Response length (fig. 7)", ["short_debate_turns", "lengths"], ["fig7_lengths"]),
    (
        WALL_CLOCK_SECTION,
        ["time_sources", "timing", "slowest_seconds", "cost_seconds", "stop_reasons"],
        ["fig8_timing"],
    ),
    ("Calibration", ["calibration", "reliability"], ["reliability"]),
    ("Accuracy by query type and gold answer", ["accuracy_by_query_type", "accuracy_by_gold"], []),
    ("Data quality", ["extraction_quality", "errored_debates"], []),
]


def _uses_tools(run: Run) -> bool:
    config = run.manifest.config if run.manifest is not None else {}
    specs = [*(config.get("agents") or []), config.get("judge")]
    return any(isinstance(spec, dict) and spec.get("tools") for spec in specs)


def _tools_named(run: Run) -> str:
    """What the run's agents were given, as the report's title says it: the config decides, not
    the calls made (a run whose tools were never called well is still a data-tools run)."""
    config = run.manifest.config if run.manifest is not None else {}
    specs = [*(config.get("agents") or []), config.get("judge")]
    given = {t for s in specs if isinstance(s, dict) for t in s.get("tools") or []}
    names = []
    if given - {"causal"}:
        names.append("data tools")
    if "causal" in given:
        names.append("causal calculator")
    return " and ".join(names) or "tools"


def _tool_section(run: Run, name: str = "tool_use") -> list[Section]:
    """Calls of the causal calculator per model and rung, malformed calls counted apart from
    accuracy (paper 004); only for runs whose agents had the tool."""
    if not _uses_tools(run):
        return []
    from crawdad.analysis.tool_use import tool_use

    intro = (
        "Per model and rung over the turns that had the tools: turns that called one, calls, "
        "calls that could not be read (malformed: counted apart, never as answers) and calls "
        "the tool refused (missing or inconsistent numbers, a query it cannot answer)."
    )
    table = Table(name, tool_use(run.records()), fold="never")
    return [Section(f"Tool use ({_tools_named(run)})", [intro, table])]


ALONE_SUMMARY = {"consensus": "answers agree", "no_consensus": "answers differ"}


def _table(name: str, t: dict[str, pd.DataFrame], lines: dict[str, str], kind: str = "") -> Table:
    df = t[name]
    title = (TABLES.get(name) or RP.PROTOCOL_TABLES[name])[0]
    if name == "summary" and kind in ALONE:  # the CSV keeps its columns' names
        shown = format_table(df.drop(columns=["run"], errors="ignore"))
        shown = shown.rename(columns=ALONE_SUMMARY)
        return Table(name, df, title, lines[name], shown=shown)
    if name != "table1":
        return Table(name, df, title, lines[name])
    if df.empty:
        return Table(
            name,
            df,
            title,
            lines[name],
            "_(empty)_",
            files=(("LaTeX", "table1.tex", "% no debates\n"),),
        )
    return Table(
        name,
        df,
        title,
        f"{lines[name]} {TABLE1_NOTE}",
        shown=table1_shown(df),
        files=(("LaTeX", "table1.tex", table1_latex(df)),),
        fold="never",
    )


def _preamble(run: Run) -> list[str]:
    """What the reader must know before the run's numbers: the task, shards, simulation."""
    out: list[str] = []
    if is_discovery_run(run):
        graphs = run.manifest is not None and run.manifest.config.get("task") == "discovery-graph"
        out.append(
            "Causal discovery (whole graphs): the graphs are scored in the Causal discovery "
            "section above; below, an answer is right only when its edge list is the true one."
            if graphs
            else "Causal discovery (pairs): the graphs are scored in the Causal discovery section "
            "above; the sections below read each pair as a yes/no question."
        )
    if run.shards:
        out.append(
            f"One run pooled from {len(run.shards)} shards (the same settings, disjoint "
            "questions): " + ", ".join(f"`{p}`" for p in run.shards) + "."
        )
    if run.simulated:
        out.append("> **Simulated run**: these numbers come from crawdad's fake servers.")
        # written by `crawdad demo`: what its models imitate (never read through a link)
        with contextlib.suppress(OSError, UnicodeDecodeError, CrawdadError):
            note = read_inside(run.path, "simulation.txt", root=run.root, limit=1 << 16)
            if note is not None:
                out.append(f"> {' '.join(note.decode('utf-8').split())}")
    return out


def run_section(run: Run, all_tables: dict[str, pd.DataFrame], colors: dict[str, str]) -> Section:
    """One run's section of the report: the paper's tables and figures, in the paper's order,
    with its protocol's and its tools' sections. Its files go to the folder named by the run."""
    label = run.label
    t = {k: _of(v, label) for k, v in all_tables.items()}
    lines = _lines(t)
    kind = RP.run_kind(run.debates)
    plots = _plots(run, t, colors)
    not_here = CLADDER_ONLY if is_discovery_run(run) else set()
    blocks: list[Block] = list(_preamble(run))
    for i, (heading, all_t, all_f) in enumerate(SECTIONS):
        if i == 1:
            blocks.append(RP.protocol_section(kind, t, colors))
            blocks += _tool_section(run)
        part: list[Block] = []
        if heading == WALL_CLOCK_SECTION:
            part.append(_clock_note(run, kind))
        skipped = [n for n in all_t + all_f if not RP.applies(n, kind)]
        if skipped:
            part.append(RP.skip_note(skipped, kind))
        part += [plots.pop(n) for n in all_f if n in plots]
        for name in all_t:
            if RP.applies(name, kind) and name not in not_here:
                part.append(_table(name, t, lines, kind))
                if name == "table1" and not t[name].empty:
                    part += _scorecard(run, t[name])
        blocks.append(Section(heading, part))
        if i == 1 and kind == "crawdad":
            blocks += _paper_findings(run, t)
    assert not plots, f"figures not placed in a section: {sorted(plots)}"
    blocks.append(
        servers_section(run.folders[0], label, run.manifest.config if run.manifest else None)
    )
    return Section(f"Run `{label}` ({kind} protocol)", blocks, folder=_slug(label))


def _scorecard(run: Run, table1: pd.DataFrame) -> list[Table]:
    """The paper's Table 1 beside the run's, where the run has the paper's models."""
    card = SC.table1_scorecard(run, table1)
    if card.empty:
        return []
    return [
        Table(
            "published_table1",
            card,
            "Against the published figures (CRAwDAD, Table 1)",
            SC.scorecard_lines(card),
            shown=SC.scorecard_markdown(card),
            fold="always",
        )
    ]


def _paper_findings(run: Run, t: dict[str, pd.DataFrame]) -> list[Section]:
    """CRAwDAD's other published results beside the run's: the figures its text states, and
    the findings its figures 2 to 5 draw (no values printed: each checked as a claim)."""
    stated = SC.text_scorecard(run, t)
    claims = SC.claims_scorecard(run, t)
    blocks: list[Block] = []
    if not stated.empty:
        inside = stated["inside_ci"].dropna()
        blocks.append(
            Table(
                "published_text",
                stated,
                "Figures stated in the paper's text",
                f"{int(inside.sum())} of {len(inside)} published values with a CI lie inside "
                f"this run's 95% CI ({stated['setup'].iloc[0]}); medians have no CI.",
                shown=SC.text_scorecard_frame(stated),
                fold="never",
            )
        )
    if not claims.empty:
        told = claims["holds"].dropna()
        blocks.append(
            Table(
                "published_claims",
                claims,
                "Findings the paper's figures draw",
                f"Figures 2 to 5 print no values; their findings, checked on this run: "
                f"{int(told.sum())} of {len(told)} hold ({claims['setup'].iloc[0]}).",
                shown=SC.claims_frame(claims),
                fold="never",
            )
        )
    if not blocks:
        return []
    return [Section("Against the paper's other published results", blocks)]


def _clock_note(run: Run, kind: str) -> str:
    started = run.manifest.created_at.isoformat(timespec="seconds") if run.manifest else "unknown"
    shown = [f"`{n}`" for n in WALL_CLOCK_TABLES if RP.applies(n, kind)]
    return (
        f"_Everything in this section is measured by the clock (the run was started {started}): "
        f"two runs of the same command differ here and only here. Its tables: {', '.join(shown)}._"
    )


def _seconds_line(cost: pd.DataFrame) -> str:
    a = cost[cost["party"] == "all"]
    if a.empty:
        return "No debates."
    return (
        f"{a.iloc[0]['gpu_seconds_per_q']:.2f} GPU seconds per question in all (debaters, judge "
        "and extractor apart in the table); seconds are the server's generation time where it "
        "reports one, else crawdad's wall time (column `seconds_basis`)."
    )


def _fmt_headline(metric: str, v: object) -> str:
    if v is None or (isinstance(v, float) and pd.isna(v)):
        return "-"
    x = float(v)  # type: ignore[arg-type]
    if "McNemar p" in metric:
        return fmt_p(x)
    if "ECE" in metric:
        return f"{x:.3f}"
    if "(%)" in metric or "points" in metric:
        return f"{x:.1f}"
    return f"{int(x)}"


def _compare_section(all_tables: dict[str, pd.DataFrame], runs: list[Run]) -> Section:
    labels = [r.label for r in runs]
    head = M.headline(
        all_tables["summary"],
        all_tables["mcnemar"],
        all_tables["calibration"],
        all_tables["persuasion"],
    )
    wide = M.side_by_side(head, ["metric"], "value", labels)
    shown = wide.copy()
    for c in labels:
        if c in shown.columns:
            shown[c] = [_fmt_headline(m, v) for m, v in zip(shown["metric"], shown[c], strict=True)]
    t1w = M.side_by_side(all_tables["table1"], ["agent", "stage", "group"], "acc", labels)
    t1s = t1w.copy()
    for c in labels:
        if c in t1s.columns:
            t1s[c] = [f"{100 * v:.2f}" if pd.notna(v) else "-" for v in t1s[c]]
    return Section(
        "Runs side by side",
        [
            Table(
                "headline",
                wide,
                "Headline numbers",
                "One column per run.",
                shown=shown,
                fold="never",
            ),
            Table(
                "table1",
                t1w,
                "Table 1 side by side",
                "Accuracy %; n and CIs in each run's section.",
                shown=t1s,
                fold="always",
            ),
        ],
        folder="compare",
    )


def _runs_table(runs: list[Run]) -> str:
    rows = []
    for r in runs:
        m = r.manifest
        agents = sorted({a for ags in r.debates["agents"] for a in ags})
        rows.append(
            {
                "run": r.label,
                "protocol": RP.run_kind(r.debates),
                "folder": str(r.path),
                "simulated": "**yes**" if r.simulated else "no",
                "models": ", ".join(agents),
                "debates": str(len(r.debates)),
                "lines read": str(r.n_lines),
                "superseded (retried)": str(r.n_superseded),
                "skipped (unparseable)": str(r.n_invalid_lines),
                "left out (other run)": str(r.n_other_settings),
                "left out (not selected)": str(r.n_outside_selection),
                "crawdad": m.crawdad_version if m else "-",
            }
        )
    frame = pd.DataFrame(rows)
    unscored = [int(r.debates["gold"].isna().sum()) for r in runs]
    if any(unscored):  # questions of one's own: answered, never scored
        frame.insert(6, "no exact answer", [str(n) for n in unscored])
    return to_markdown(frame, formatted=True)


def _served_lines(runs: list[Run]) -> list[str]:
    """What answered each run (asked at the start of every session), and a warning when one
    model name was served as more than one build: their numbers are not one model's."""
    lines: list[str] = []
    builds: _Ways[ServedBy] = {}  # model -> build -> (an entry of that build, the runs it served)
    for r in runs:
        served = r.served()
        if not served:
            continue
        lines += [f"**Served by** (run `{r.label}`):", ""]
        for role, entries in served.items():
            lines += [f"- {role}: {e.describe()}" for e in entries]
            for e in entries:
                if e.software is not None:
                    _note_way(builds, e.model, e.build(), e, r.label)
        lines.append("")
    return lines + _differing(
        builds,
        lambda e: ", ".join([e.server_text(), *e.build_details()]),
        "Different builds of `{model}`",
    )


def _started_lines(runs: list[Run]) -> list[str]:
    """The servers crawdad started for each run (engine version, weights hash, GPUs), and a
    warning where runs served one model differently: their numbers may differ for that."""
    lines: list[str] = []
    # model -> how it was served (StartedServer.identity less the key) -> (an entry, its runs)
    ways: _Ways[StartedServer] = {}
    for r in runs:
        started = [s for m in r.manifests() for s in m.started]
        if not started:
            continue
        lines += [f"**Servers crawdad started** (run `{r.label}`):", ""]
        for s in started:
            lines.append(f"- {s.key}: {_serving_text(s)}")
            _note_way(ways, s.served_name, s.identity()[1:], s, r.label)
        lines.append("")
    return lines + _differing(ways, _serving_text, "`{model}` was served differently")


T = TypeVar("T")
# model -> one way it was served -> (an entry served that way, the runs it served)
_Ways = dict[str, dict[tuple[object, ...], tuple[T, list[str]]]]


def _note_way(ways: _Ways[T], model: str, way: tuple[object, ...], entry: T, run: str) -> None:
    _, where = ways.setdefault(model, {}).setdefault(way, (entry, []))
    if run not in where:
        where.append(run)


def _differing(ways: _Ways[T], describe: Callable[[T], str], title: str) -> list[str]:
    """A warning for each model served more than one way, each way with the runs it served."""
    lines: list[str] = []
    for model, found in ways.items():
        if len(found) > 1:
            told = "; ".join(
                f"{describe(e)} in " + ", ".join(f"`{x}`" for x in labels)
                for e, labels in found.values()
            )
            lines += [f"> **{title.format(model=model)}:** {told}.", ""]
    return lines


def _serving_text(s: StartedServer) -> str:
    gpus = ", ".join(s.gpus) or "CPU"
    memory = f", {s.memory_fraction:.0%} of each GPU" if s.memory_fraction is not None else ""
    return (
        f"{s.engine} {s.engine_version or '(version unknown)'} serving {s.weights} "
        f"({s.weights_hash or 'no hash'}) on {gpus}{memory}"
    )


def _default_workers() -> int:
    return max(1, min(4, os.cpu_count() or 1))


def write_report(
    run_dirs: list[Path],
    out: Path,
    *,
    workers: int | None = None,
    audit: Path | None = None,
    contradicted: str = "leave-out",
    compare: bool = False,
    progress: bool | Literal["lines"] = False,
    figures: str | None = None,
) -> Path:
    """Analyse the run folders and write the report folder `out`; return the path of report.md.
    One experiment folder (with `experiment.json`) gets the experiment report instead. Folders
    that are shards of one run (the same settings, disjoint questions) are analysed as one run
    (`crawdad.analysis.shards`), unless `compare` asks for them side by side.

    `workers`: processes used to parse large files and to draw the figures (default: the CPU
    count, at most 4; 1 draws everything in this process). A run folder that cannot be analysed
    or a report folder that cannot be written raises `StoreError` with a message. `audit`: a
    file from `crawdad data audit --json`; debates on questions whose label it contradicts are
    left out (`contradicted="leave-out"`) or kept and marked (`"mark"`). `progress`: the
    phases (loading, tables, sections, figures) as a bar on stderr, where it is a terminal;
    "lines": a line per phase instead (for logs). `figures`: each figure's formats, "png,pdf"
    (the default) or "png" (PNG only, about twice as fast: a draft); None reads the environment's
    CRAWDAD_FIGURES.
    """
    from crawdad.analysis.figures import figure_formats

    figure_formats(figures)  # a wrong value is refused before any work
    with ReportProgress(progress) as bar:
        return _write_report(run_dirs, out, workers, audit, contradicted, compare, bar, figures)


def _write_report(
    run_dirs: list[Path],
    out: Path,
    workers: int | None,
    audit: Path | None,
    contradicted: str,
    compare: bool,
    bar: ReportProgress,
    figures: str | None = None,
) -> Path:
    workers = _default_workers() if workers is None else workers
    if not run_dirs:
        raise ValueError("no run folder given")
    out = Path(out)
    if any(is_experiment(d) for d in run_dirs):  # an experiment folder has its own report
        if len(run_dirs) > 1:
            raise StoreError(
                "an experiment folder (one with experiment.json) is analysed alone: give only "
                "it, or give run folders (its variants' folders are run folders)"
            )
        from crawdad.analysis.experiment_report import write_experiment_report

        return write_experiment_report(Path(run_dirs[0]), out, bar, figures)
    bar.phase(f"loading {len(run_dirs)} run folder{'s' if len(run_dirs) != 1 else ''}")
    runs = load_runs(run_dirs, workers=workers)  # first: a wrong run folder gets no report folder
    runs = pool_shards(runs, compare=compare)
    if audit is not None:  # `crawdad data audit --json`: contradicted labels left out or marked
        from crawdad.analysis.contradicted_labels import apply_audit

        runs = apply_audit(runs, audit, contradicted)  # type: ignore[arg-type]
    return write_into(out, lambda: _write(runs, out, workers, bar, figures))


def _head(runs: list[Run]) -> list[str]:
    """The report's top: warnings that change how everything below reads, the runs, their
    servers, the loader's warnings and the counting rules."""
    md = ["# crawdad analysis report", ""]
    sim = [r.label for r in runs if r.simulated]
    if sim:
        md += [
            f"> **SIMULATED DATA.** Run(s) {', '.join(f'`{s}`' for s in sim)} were served by "
            "crawdad's fake servers, not by real models: their numbers say nothing about any model.",
            "",
        ]
    from crawdad.analysis.metrics.stopping import stopped_runs

    for label, caveat in stopped_runs(runs).items():
        md += [f"> **Run `{label}` stopped early**: {caveat}.", ""]
    for r in runs:
        if r.live:
            md += [
                f"> **Run `{r.label}`: this run was still being written when analysed: "
                f"{len(r.debates) + r.n_other_settings + r.n_outside_selection} debates so "
                "far.** Its numbers will change; analyse it again when it has finished.",
                "",
            ]
    md += [
        # no clock time: the same records give the same report, byte for byte
        f"Written by crawdad {__version__} from {len(runs)} run(s).",
        "",
        _runs_table(runs),
        "",
        *_served_lines(runs),
        *_started_lines(runs),
    ]
    problems = [p for r in runs for p in r.warnings]
    if problems:
        md += ["**Loader warnings:**", "", *[f"- {p}" for p in problems], ""]
    return [*md, RULES, ""]


def report_sections(runs: list[Run], tables: dict[str, pd.DataFrame]) -> list[Section]:
    """Every section of the run report, in order: the runs side by side (several), each task's
    own sections (found through the task, `crawdad.analysis.tasks`), the protocols side by side
    (several), and each run's section."""
    debates, turns = concat(runs)
    several = len(runs) > 1
    out = [_compare_section(tables, runs)] if several else []
    out += task_sections(runs)
    graded = [r for r in runs if r.manifest is not None and r.manifest.config.get("grader")]
    out += grading_section([(r.label, r.records()) for r in graded])  # runs with a [grader]
    if several:
        out.append(RP.compare_section(tables, [r.label for r in runs]))
    colors = _colors(debates, turns)
    return [*out, *(run_section(run, tables, colors) for run in runs)]


def _add_unscored(sections: list[Section], runs: list[Run]) -> list[Section]:
    """Each run's debates over questions without an exact answer, in a section of their own
    at the end of the run's section (the run's only one when it has no other question)."""
    from crawdad.analysis.unscored import HEADING, unscored_section

    by_folder = {s.folder: s for s in sections if s.heading.startswith("Run `")}
    for run in runs:
        open_ = run.unscored()
        if open_.debates.empty:
            continue
        part = unscored_section(open_)
        part.blocks += _tool_section(open_, "unscored_tool_use")
        mine = by_folder.get(_slug(run.label))
        if mine is None:
            sections.append(Section(f"Run `{run.label}`", [part], folder=_slug(run.label)))
            continue
        mine.blocks.insert(
            0,
            f"{len(open_.debates)} of this run's debates are over questions without an exact "
            f"answer: no score below counts them (see *{HEADING}* at the end of this section).",
        )
        mine.blocks.append(part)
    return sections


def _write(
    runs: list[Run],
    out: Path,
    workers: int,
    bar: ReportProgress | None = None,
    figures: str | None = None,
) -> Path:
    # Every score is over the debates with an exact answer; the others have a section of their
    # own (a run of nothing but questions of one's own has only that).
    scoring = [s for s in (r.scored() for r in runs) if len(s.debates)]
    tables: dict[str, pd.DataFrame] = {}
    if scoring:
        debates, turns = concat(scoring)
        tables = compute_tables(debates, turns, bar)
    if bar is not None:
        bar.phase("computing sections")
    sections = report_sections(scoring, tables) if scoring else []
    sections = _add_unscored(sections, runs)
    return ReportWriter(out, figures).write(sections, workers, _head(runs), bar)
