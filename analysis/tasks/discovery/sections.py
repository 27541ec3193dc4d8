"""The report's causal discovery part: the discovery-pairs task (MAC's Meta Agents Model, one
question per ordered variable pair) and the discovery-graph task (a whole graph per record:
whole-graph debates, MAC's Coding Agents and hybrids, the plain-algorithm baselines of
`crawdad discover-baseline`). Each run's records are read back into frames (pairs and their
answers; whole graphs and theirs), the graphs assembled and scored (`analysis.tasks.discovery.metrics`),
and the Markdown of the "Causal discovery" section of a run report (`discovery_section`) and of
an experiment report (`experiment_discovery_section`) written, with their tables (CSV +
Markdown) and figures (PNG + PDF): every system in the same table.

Only run folders are read: the records' `item` (graph, source dataset, cause, effect, the
graph's variables), `gold` and `graph_id` (CLadder's graph kind) say everything needed.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
from crawdad.analysis import scorecard as SC
from crawdad.analysis.load import Run, agent_label
from crawdad.analysis.section import Block, Plot, Section, Table
from crawdad.analysis.tasks.discovery import metrics as D
from crawdad.analysis.tasks.discovery.figures import (
    discovery_alignment_figure,
    discovery_cost_figure,
    system_label,
)

from crawdad.records import DebateRecord, Turn

__all__ = [
    "GRAPH_TASK",
    "TASK",
    "DiscoveryFrames",
    "discovery_frames",
    "discovery_section",
    "experiment_discovery_section",
    "frames_of_records",
    "is_discovery_run",
]

TASK = "discovery-pairs"
GRAPH_TASK = "discovery-graph"
TASKS = (TASK, GRAPH_TASK)
FOLDER = "discovery"  # of the report folder: tables/ and figures/

ABOUT = """\
Each record answers one meta-question of MAC's Meta Agents Model (Le et al., section 3.2.1,
algorithm 1): "is there a direct causal relationship from A to B?", for every ordered pair of a
graph's variables. A system's answers assemble into its predicted graph (yes = the edge A->B),
scored against the true graph. The rows are the protocol's **final answers** (for the judge
protocol with stances, MAC's meta-debate: affirmative and negative debaters and a judge), and
**each agent's first answer** (solo: its first sample; the second speaker of a debate had seen
the first speaker's text). Under stances a negative's opening argues against the affirmative
(or, with fixed sides, each opening argues the side drawn), and the agents take turns at each side,
so an agent's openings are no graph of its beliefs: such runs have no first-answer rows, and their
single-agent comparison is a solo run (MAC's single-agent baseline). In MAC's Table 2 these are the cells of the *Causal Agent Debate*
rows (final answers of the judge protocol with stances) and the *Single-agent* rows (a solo run's
answers), SHD and NHD columns; MAC scores one graph per dataset (Auto MPG, DWD climate, Sachs),
crawdad scores many small graphs (CLadder's causal models, their variables named by the story,
never its background sentence, which states the graph) and gives means over graphs with CIs."""

RULES = """\
**How graphs are counted.** A pair answered "yes" is an edge; a pair left unanswered (nothing
the extractor could read, a tied vote) or whose debate errored is **no edge**, and counted
(`unans.`, `err.`). A graph with pairs not yet recorded is left out (`incomplete`). SHD counts
the unordered variable pairs whose state (none, A->B, B->A, both) differs from the truth: a
missing or extra edge counts 1, a **reversed edge once**; NHD is the share of the n x n adjacency
matrix that differs (a reversed edge twice). Edge F1 ignores direction, orientation F1 counts
directed edges (a reversed edge is a false positive and a false negative); an empty predicted
graph has F1 0 against a true graph with edges. Every score is a mean over graphs with a 95%
percentile bootstrap CI (10,000 resamples of the graphs, seeded). Cost per graph is the sum over
its pairs of that system's turns: completion tokens (reasoning included) plus the extractor's,
GPU seconds (server-reported where the server reports them, else wall time, plus the extractor's
wall time: in the wall-clock table at the end, as two identical runs differ there alone) and
requests (generations plus extractor calls); a final answer costs the whole record, a first
answer only its own turn."""


GRAPH_ABOUT = """\
**Whole graphs.** A record of the discovery-graph task carries one predicted graph, an edge list
(`A -> B; C -> D`), read over the graph's variables: the protocol's **final answer**, and **each
agent's first answer** (solo: its first sample; a coding agent: its first plan's graph). Such
records come from whole-graph debates (the crawdad, simultaneous and solo protocols, prompt set
`mac-graph`), MAC's *Coding Agents* (protocol `coding`: the debaters choose a causal-learn
algorithm and its parameters, each plan run on the data), the hybrids (a system given another
system's graph as prior knowledge: MAC's *Coding-Debating* and *Debating-Coding*) and the plain
algorithms of `crawdad discover-baseline` (protocol `algorithm`: MAC's PC, LiNGAM, exact search
rows). An edge PC or GES leaves undirected (a CPDAG) counts as both directions."""

GRAPH_RULES = """\
For whole graphs, `unans.` and `err.` count graphs, not pairs (no edge list read, or a failed
debate: scored as the empty graph); pair accuracy is over the graph's ordered pairs. A graph
without a known truth (Auto MPG: MAC does not state the graph it scored against) is learned and
counted (`no truth`), never scored. A system scored on **one graph** (Sachs, as in MAC's Table 2)
has **no CI over graphs**: its score is shown alone; the same system run with other seeds is
another run (another row), not a resample."""


def _heading(frames: DiscoveryFrames) -> str:
    return (
        "Causal discovery (MAC's Meta Agents Model)"
        if frames.graphs.empty
        else "Causal discovery (MAC)"
    )


def _intro(frames: DiscoveryFrames) -> list[str]:
    """What the section's records are."""
    if frames.graphs.empty:
        return [ABOUT]
    return [ABOUT, GRAPH_ABOUT] if not frames.pairs.empty else [GRAPH_ABOUT]


def _rules(frames: DiscoveryFrames) -> list[str]:
    return [RULES, GRAPH_RULES] if not frames.graphs.empty else [RULES]


@dataclass
class DiscoveryFrames:
    pairs: pd.DataFrame  # D.PAIR_COLUMNS
    answers: pd.DataFrame  # D.ANSWER_COLUMNS
    graphs: pd.DataFrame = field(  # D.GRAPH_ANSWER_COLUMNS
        default_factory=lambda: pd.DataFrame(columns=D.GRAPH_ANSWER_COLUMNS)
    )


# --- records -> frames --------------------------------------------------------------------------


def _extractor_called(t: Turn) -> bool:
    e = t.extraction
    return e is not None and (
        e.prompt_tokens is not None or e.completion_tokens is not None or e.seconds > 0
    )


def _cost(turns: Iterable[Turn]) -> tuple[float, float, float]:
    """(completion tokens, GPU seconds, requests) of some turns and their extractions."""
    tokens = gpu = requests = 0.0
    for t in turns:
        tokens += t.completion_tokens or 0
        gpu += t.server_seconds if t.server_seconds is not None else t.seconds
        requests += 1
        if _extractor_called(t):
            assert t.extraction is not None
            tokens += t.extraction.completion_tokens or 0
            gpu += t.extraction.seconds
            requests += 1
    return tokens, gpu, requests


def _answer(run: str, rec: DebateRecord, who: str, stage: str, answer: Any, turns: list[Turn]):
    tokens, gpu, requests = _cost(turns)
    errored = rec.error is not None and answer is None
    return (run, str(rec.question_id), who, stage, answer, errored, tokens, gpu, requests)


def frames_of_records(records: Iterable[DebateRecord], run: str) -> DiscoveryFrames:
    """Pair, answer and whole-graph frames of a run's records (those of the discovery tasks)."""
    pairs, answers, graphs = [], [], []
    for rec in records:
        if rec.task == GRAPH_TASK:
            graphs += _graph_rows(rec, run)
            continue
        if rec.task != TASK:
            continue
        item = rec.item
        pairs.append(
            (
                run,
                str(rec.question_id),
                str(item.get("graph")),
                item.get("source"),
                rec.alignment,
                rec.graph_id,
                tuple(item.get("variables") or ()),
                item.get("cause"),
                item.get("effect"),
                rec.gold,
                _protocol(rec),
                any(t.stance is not None for t in rec.turns),
            )
        )
        final = rec.final_answer if rec.error is None else None
        answers.append(_answer(run, rec, D.FINAL, "final", final, rec.turns))
        for label, stage, answer, turns in _agent_systems(rec):
            answers.append(_answer(run, rec, label, stage, answer, turns))
    return DiscoveryFrames(
        pd.DataFrame(pairs, columns=D.PAIR_COLUMNS),
        pd.DataFrame(answers, columns=D.ANSWER_COLUMNS),
        pd.DataFrame(graphs, columns=D.GRAPH_ANSWER_COLUMNS),
    )


def _protocol(rec: DebateRecord) -> str:
    """The record's protocol, "+ prior" when it was shown another system's graph (a hybrid)."""
    return f"{rec.protocol} + prior" if rec.item.get("prior_from") else str(rec.protocol)


def _agent_systems(rec: DebateRecord) -> list[tuple[str, str, Any, list[Turn]]]:
    """(label, stage, answer, the turns it cost) of each agent's own systems in a record: its
    first answer (not under stances, nor for a lone solo sample, nor for an agent without
    turns, it errored), its majority (solo) or last answer (simultaneous)."""
    out = []
    several = {
        name: [t for t in rec.turns if t.agent == name and t.role != "verdict"]
        for name in rec.agents
    }
    stances = any(t.stance is not None or t.side is not None for t in rec.turns)
    # One agent's one sample is the final answer itself: no row of its own.
    alone = rec.protocol == "solo" and len(rec.agents) == 1 and len(rec.turns) <= 1
    for name, own in several.items():
        if rec.protocol == "algorithm":  # a plain algorithm: its final answer only
            continue
        label = agent_label(name, rec.agents.get(name))
        first = own[0] if own else None
        # An opening under stances argues a side (fixed: the side drawn; MAC: the negative argues
        # against the affirmative), and the agents take turns at each side: no first-answer graphs.
        if not stances and not alone:
            out.append((label, "first", first.answer if first else None, own[:1]))
        stage = {"solo": "majority", "simultaneous": "last"}.get(rec.protocol)
        if stage is not None and len(own) > 1:
            out.append((label, stage, rec.agent_answers.get(name), own))
    return out


def _graph_rows(rec: DebateRecord, run: str) -> list[tuple[Any, ...]]:
    """One row per system of a whole-graph record: its final answer, each agent's own."""
    item = rec.item
    head = (
        run,
        str(rec.question_id),
        str(item.get("graph") or rec.question_id),
        item.get("source"),
        rec.alignment,
        rec.graph_id,
        tuple(item.get("variables") or ()),
        rec.gold or "",
        _protocol(rec),
    )
    final = rec.final_answer if rec.error is None else None
    systems = [(D.FINAL, "final", final, rec.turns), *_agent_systems(rec)]
    rows = []
    for who, stage, answer, turns in systems:
        tokens, gpu, requests = _cost(turns)
        errored = rec.error is not None and answer is None
        rows.append((*head, who, stage, answer, errored, tokens, gpu, requests))
    return rows


def is_discovery_run(run: Run) -> bool:
    """Whether a run's records are of a discovery task (its manifest says so; a run without a
    manifest is asked through its question ids' shape)."""
    if run.manifest is not None:
        return run.manifest.config.get("task", "cladder") in TASKS
    return bool(len(run.debates)) and bool(
        run.debates["question_id"].astype(str).str.contains("->", regex=False).all()
    )


def discovery_frames(run: Run, label: str | None = None) -> DiscoveryFrames:
    """The frames of the debates `load_run` kept for the run (the last line per question, of
    the run's seed, agents and selection)."""
    return frames_of_records(run.records(), label or run.label)


def _concat(frames: Sequence[DiscoveryFrames]) -> DiscoveryFrames:
    def joined(parts: list[pd.DataFrame], columns: list[str]) -> pd.DataFrame:
        parts = [p for p in parts if not p.empty]
        return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=columns)

    return DiscoveryFrames(
        joined([f.pairs for f in frames], D.PAIR_COLUMNS),
        joined([f.answers for f in frames], D.ANSWER_COLUMNS),
        joined([f.graphs for f in frames], D.GRAPH_ANSWER_COLUMNS),
    )


def _empty(frames: DiscoveryFrames) -> bool:
    return frames.pairs.empty and frames.graphs.empty


def all_scores(frames: DiscoveryFrames) -> pd.DataFrame:
    """Per-graph scores of every system: assembled from pairs, and whole graphs."""
    parts = [
        D.graph_scores(frames.pairs, frames.answers),
        D.graph_answer_scores(frames.graphs),
    ]
    parts = [p for p in parts if not p.empty]
    if not parts:
        return pd.DataFrame(columns=D.SCORE_COLUMNS)
    return pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]


def _protocols(frames: DiscoveryFrames) -> dict[str, str]:
    out = {}
    for run, g in frames.pairs.groupby("run", sort=False):
        kind = "+".join(dict.fromkeys(g["protocol"].dropna())) or "crawdad"
        stances = kind.startswith("judge") and g["stances"].any()
        out[str(run)] = kind.replace("judge", "judge (stances)", 1) if stances else kind
    for run, g in frames.graphs.groupby("run", sort=False):
        kind = "+".join(dict.fromkeys(g["protocol"].dropna())) or "crawdad"
        out[str(run)] = f"{kind}, whole graph" if kind != "algorithm" else kind
    return out


# --- tables for people --------------------------------------------------------------------------


def _num(x: float, digits: int) -> str:
    return "-" if pd.isna(x) else f"{x:.{digits}f}"


def _with_ci(r: pd.Series, m: str, digits: int) -> str:
    if pd.isna(r[m]):
        return "-"
    if pd.isna(r[f"{m}_lo"]):  # one graph: no CI over graphs
        return f"{r[m]:.{digits}f}"
    return f"{r[m]:.{digits}f} [{_num(r[f'{m}_lo'], digits)}, {_num(r[f'{m}_hi'], digits)}]"


_DIGITS = {"pair_acc": 3, "shd": 2, "nhd": 3, "edge_f1": 3, "orientation_f1": 3}


def shown_summary(s: pd.DataFrame, several_runs: bool, group: bool = False) -> pd.DataFrame:
    """The summary as people read it: one column per score, "mean [lo, hi]" ("mean" alone for
    one graph); a "no truth" column when some graphs have no true graph."""
    rows = []
    unscored = bool(s["graphs_unscored"].fillna(0).sum()) if "graphs_unscored" in s else False
    for _, r in s.iterrows():
        row: dict[str, object] = {}
        if several_runs:
            row["run"] = r["run"]
        row["system"] = system_label(str(r["run"]), str(r["who"]), str(r["stage"]), False)
        if group:
            row["group"] = r["group"]
        row |= {
            "graphs": int(r["graphs"]),
            "incomplete": int(r["graphs_incomplete"]),
            **({"no truth": int(r["graphs_unscored"])} if unscored else {}),
            "unans.": int(r["n_unanswered"]),
            "err.": int(r["n_errored"]),
        }
        row |= {name: _with_ci(r, m, _DIGITS[m]) for m, name in D.METRICS.items()}
        row |= {
            "tokens / graph": _num(r["tokens_per_graph"], 0),
            "requests / graph": _num(r["requests_per_graph"], 1),
        }
        rows.append(row)
    return pd.DataFrame(rows)


def _pts(x: float, digits: int) -> str:
    return "-" if pd.isna(x) else f"{x:+.{digits}f}".replace("-", "\u2212")


def shown_paired(p: pd.DataFrame, several_runs: bool) -> pd.DataFrame:
    rows = []
    for _, r in p.iterrows():
        row: dict[str, object] = {}
        if several_runs or r["run"] != r["against_run"]:
            row["run"] = r["run"]
        row["against"] = system_label(
            str(r["against_run"]),
            str(r["against_who"]),
            str(r["against_stage"]),
            r["run"] != r["against_run"],
        )
        row["graphs"] = int(r["graphs"])
        for m, name in D.METRICS.items():
            d = _DIGITS[m]
            row[f"\u0394 {name}"] = (
                f"{_pts(r[f'd_{m}'], d)} [{_pts(r[f'd_{m}_lo'], d)}, {_pts(r[f'd_{m}_hi'], d)}]"
                if not pd.isna(r[f"d_{m}"])
                else "-"
            )
        rows.append(row)
    return pd.DataFrame(rows)


def _verdict(lo: float, hi: float, lower_is_better: bool, graphs: int = 0) -> str:
    if pd.isna(lo) or pd.isna(hi):
        return "one graph: no CI" if graphs == 1 else "no graphs to compare"
    if (hi < 0) if lower_is_better else (lo > 0):
        return "better (the CI excludes 0)"
    if (lo > 0) if lower_is_better else (hi < 0):
        return "worse (the CI excludes 0)"
    return "no difference the CI supports"


def paired_sentences(p: pd.DataFrame) -> list[str]:
    out = []
    for _, r in p.iterrows():
        if r["graphs"] == 0:
            continue
        mine = "the final answers" if r["run"] == r["against_run"] else f"`{r['run']}`"
        theirs = (
            f"{r['against_who']}'s first answers"
            if r["against_stage"] == "first"
            else f"`{r['against_run']}`"
        )
        where = f" in `{r['run']}`" if r["run"] == r["against_run"] else ""
        out.append(
            f"{mine[0].upper()}{mine[1:]}{where} against {theirs}, over {r['graphs']} graph{'s' if r['graphs'] != 1 else ''}: SHD "
            f"{_pts(r['d_shd'], 2)} [{_pts(r['d_shd_lo'], 2)}, {_pts(r['d_shd_hi'], 2)}] "
            f"({_verdict(r['d_shd_lo'], r['d_shd_hi'], True, r['graphs'])}), edge F1 "
            f"{_pts(r['d_edge_f1'], 3)} [{_pts(r['d_edge_f1_lo'], 3)}, "
            f"{_pts(r['d_edge_f1_hi'], 3)}] "
            f"({_verdict(r['d_edge_f1_lo'], r['d_edge_f1_hi'], False, r['graphs'])})."
        )
    return out


def alignment_sentence(s: pd.DataFrame) -> str:
    """Does knowing the world help, or hurt when the names mislead? Final answers' SHD by
    alignment."""
    a = s[(s["dimension"] == "alignment") & (s["stage"] == "final") & (s["graphs"] > 0)]
    if a.empty:
        return "No graph has a commonsense alignment."
    parts = []
    for run, g in a.groupby("run", sort=False):
        cells = ", ".join(
            f"{r['group']} {_with_ci(r, 'shd', 2)} (n = {r['graphs']})" for _, r in g.iterrows()
        )
        parts.append(f"`{run}`: {cells}" if a["run"].nunique() > 1 else cells)
    return (
        "Mean SHD of the final answers by alignment: "
        + "; ".join(parts)
        + ". Commonsense graphs relate variables as the world does, anticommonsense ones "
        "against it (what a model knows misleads), nonsense ones name made-up variables "
        "(knowledge cannot help): an SHD rising from commonsense to anticommonsense means the "
        "answers follow the names, not the question."
    )


# --- the sections ----------------------------------------------------------------------------


def _simulated_note(names: list[str]) -> list[str]:
    if not names:
        return []
    return [
        f"> **Simulated:** {', '.join(f'`{n}`' for n in names)} were served by crawdad's fake "
        "servers, which answer each pair (or each pair of a whole graph) from the gold at a seeded "
        "accuracy, and whose coding agents pick plans at random: their graphs and scores mean "
        "nothing about any model or about MAC."
    ]


@dataclass
class Scored:
    frames: DiscoveryFrames
    scores: pd.DataFrame
    summary: pd.DataFrame
    protocols: dict[str, str]


def score(frames: DiscoveryFrames, graphs: set[str] | None = None) -> Scored:
    """Per-graph scores and their summary; `graphs`: only these graphs (an experiment's
    common graphs)."""
    scores = all_scores(frames)
    if graphs is not None:
        scores = scores[scores["graph"].isin(graphs)].reset_index(drop=True)
    protocols = _protocols(frames)
    return Scored(frames, scores, D.discovery_summary(scores, protocols), protocols)


def _tables(sc: Scored, several: bool, runs_word: str) -> list[Block]:
    """The overall, alignment, source and graph-kind tables."""
    s = sc.summary
    clock = [c for c in s.columns if "seconds" in c]
    overall = s[s["dimension"] == "overall"]
    out: list[Block] = [
        # GPU seconds are measured by the clock: two identical runs differ there alone
        *_split_clock("graph_scores", sc.scores, ["run", "graph", "system", "stage"]),
        *_split_clock("summary", s, ["run", "system", "stage", "dimension", "group"]),
        Table(
            "overall",
            overall.drop(columns=clock),
            f"Graphs per system{f' ({runs_word})' if runs_word else ''}",
            "Means over the complete graphs, 95% bootstrap CIs.",
            shown=shown_summary(overall, several),
            links=(("all groups", "summary.csv"), ("per graph", "graph_scores.csv")),
            fold="never",
        ),
    ]
    for dim, title in (
        ("alignment", "By commonsense alignment"),
        ("source", "By source dataset"),
        ("kind", "By CLadder graph kind"),
    ):
        part = s[s["dimension"] == dim]
        if part.empty or (dim == "source" and part["group"].nunique() < 2):
            continue
        line = alignment_sentence(s) if dim == "alignment" else ""
        shown = shown_summary(part, several, group=True)
        out.append(Table(f"by_{dim}", part.drop(columns=clock), title, line, shown=shown))
    return out


def _split_clock(name: str, df: pd.DataFrame, keys: list[str]) -> list[Block]:
    """`df` written as two tables: `name` without the wall-clock columns, `name_seconds` with
    them (beside the columns that say which row is which)."""
    clock = [c for c in df.columns if "seconds" in c]
    keys = [k for k in keys if k in df.columns]
    return [
        Table(name, df.drop(columns=clock), show=False),
        Table(f"{name}_seconds", df[[*keys, *clock]], show=False),
    ]


def _clock_table(sc: Scored) -> Table:
    """GPU seconds per graph of each system: measured by the clock, so apart."""
    o = sc.summary[sc.summary["dimension"] == "overall"]
    shown = pd.DataFrame(
        {
            "run": o["run"],
            "system": [
                system_label(str(r["run"]), str(r["who"]), str(r["stage"]), False)
                for _, r in o.iterrows()
            ],
            "GPU s / graph": [_num(x, 2) for x in o["gpu_seconds_per_graph"]],
        }
    )
    return Table(
        "gpu_seconds",
        o[["run", "who", "stage", "gpu_seconds_per_graph"]],
        "GPU seconds per graph (wall-clock)",
        "Measured by the clock: two runs of one command differ here and only here.",
        shown=shown,
        fold="never",
    )


def _paired(paired: pd.DataFrame, name: str, title: str, several: bool) -> list[Block]:
    if paired.empty:
        return []
    return [
        "\n".join(f"- {line}" for line in paired_sentences(paired)),
        Table(name, paired, title, shown=shown_paired(paired, several), fold="never"),
    ]


def _published(sc: Scored, simulated: set[str]) -> list[Table]:
    """MAC's published SHD and NHD beside the systems' graphs on the data sets both have."""
    card = SC.discovery_scorecard(sc.scores, sc.protocols, simulated)
    if card.empty:
        return []
    paper, source = card["paper"].iloc[0], card["source"].iloc[0]
    return [
        Table(
            "published_mac",
            card,
            f"Against the published figures ({paper.split(':')[0]}, {source.split(':')[0]})",
            "SHD and NHD of each system's final graphs beside the paper's rows of the same kind "
            "of system on the same data set (one graph each: no CI). "
            f"Source: {paper}, {source}.",
            shown=SC.discovery_scorecard_markdown_frame(card),
            fold="never",
        )
    ]


def discovery_section(runs: list[Run]) -> list[Section]:
    """The "Causal discovery" section of a run report, over the runs of the discovery tasks
    (none: no section)."""
    mine = [r for r in runs if is_discovery_run(r)]
    if not mine:
        return []
    frames = _concat([discovery_frames(r) for r in mine])
    if _empty(frames):
        return []
    sc = score(frames)
    several = len(mine) > 1
    blocks: list[Block] = [
        *_intro(frames),
        *_simulated_note([r.label for r in mine if r.simulated]),
    ]
    blocks += _rules(frames)
    blocks += _tables(sc, several, "one row per run and system" if several else "")
    blocks += _paired(
        D.debate_vs_first(sc.scores),
        "debate_vs_first",
        "Final answers against each agent's first answers, paired by graph (difference final "
        "\u2212 first; SHD lower is better)",
        several,
    )
    blocks += _published(sc, {r.label for r in mine if r.simulated})
    blocks += [
        Plot(
            "graphs_vs_tokens",
            "Mean SHD and edge F1 of each system's graphs against its completion tokens per "
            "graph (95% CIs; filled: final answers, open: first answers)",
            discovery_cost_figure,
            (sc.summary,),
        ),
        Plot(
            "shd_by_alignment",
            "Mean SHD by commonsense alignment (95% CIs)",
            discovery_alignment_figure,
            (sc.summary,),
        ),
    ]
    return [Section(_heading(frames), [*blocks, _clock_table(sc)], folder=FOLDER)]


def experiment_discovery_section(variants: Sequence[Any], baseline: str | None) -> list[Section]:
    """The "Causal discovery" section of an experiment report: each variant's final-answer
    graphs (and its agents' first answers) over the graphs every variant completed, paired
    with the baseline, and graphs against tokens per graph. `variants`: the experiment's
    loaded variants (each with `.name` and `.run`)."""
    mine = [v for v in variants if is_discovery_run(v.run)]
    if not mine:
        return []
    frames = _concat([discovery_frames(v.run, v.name) for v in mine])
    if _empty(frames):
        return []
    names = [v.name for v in mine]
    full = all_scores(frames)
    common = D.common_graphs(full, names)
    sc = score(frames, common)
    left = len(set(full["graph"])) - len(common)
    blocks: list[Block] = [
        *_intro(frames),
        *_simulated_note([v.name for v in mine if v.run.simulated]),
    ]
    blocks += [
        *_rules(frames),
        f"Every variant is scored on the {len(common)} graphs each completed ({left} left out: "
        "some variant has not answered all their pairs yet, or its run selected other graphs).",
    ]
    blocks += _tables(sc, True, "one row per variant and system")
    if baseline is not None and baseline in names:
        blocks += _paired(
            D.versus_baseline(sc.scores, baseline),
            "versus_baseline",
            f"Each variant's final-answer graphs against the baseline `{baseline}`'s, paired by "
            "graph (difference variant \u2212 baseline)",
            True,
        )
    finals = sc.summary[sc.summary["stage"] == "final"]
    blocks.append(
        Plot(
            "graphs_vs_tokens",
            "Mean SHD and edge F1 of each variant's final-answer graphs against its completion "
            "tokens per graph (95% CIs)",
            discovery_cost_figure,
            (finals, "Graphs against cost, one point per variant"),
        )
    )
    return [Section(_heading(frames), [*blocks, _clock_table(sc)], folder=FOLDER)]
