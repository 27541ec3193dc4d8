"""An experiment folder -> a report folder: the variants side by side (accuracy with CIs, cost per
question), paired comparisons with the baseline, and accuracy against compute with the
self-consistency curves, each with its CSV and the figure as PNG and PDF.

Layout of `out/`:
    report.md
    tables/     variants.csv / .md, coverage, paired, sc_curves, cost_match
    figures/    accuracy_vs_tokens.png / .pdf
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
from crawdad.analysis.experiment_folder import Experiment, load_experiment, overrides_text
from crawdad.analysis.figures.experiment import compute_figure
from crawdad.analysis.formatting import fmt_p, to_markdown
from crawdad.analysis.metrics import experiment as X
from crawdad.analysis.metrics import self_consistency as SC
from crawdad.analysis.report_files import ReportWriter, write_into
from crawdad.analysis.report_progress import ReportProgress
from crawdad.analysis.section import Block, Plot, Section, Table
from crawdad.analysis.servers_section import servers_section
from crawdad.analysis.tasks import experiment_task_sections

from crawdad.scoring.scored import Accuracy, has_answer

__all__ = ["cost_sentence", "paired_sentence", "write_experiment_report"]

FIGURE = "accuracy_vs_tokens"
RULES = """\
**How things are counted.** Every comparison uses only questions that each variant in it
finished: the variants side by side, the figure and the self-consistency comparison use the
questions *every* variant finished; a paired comparison with the baseline uses the questions
both finished. Errored and unfinished questions are left out and counted, and so are questions
without an exact answer (a table of one's own): no accuracy counts them. A final answer the
extractor could not read, or a tied vote, **counts as wrong**. Accuracy CIs are 95% Wilson score
intervals (never a point, even at 0% or 100% of a few questions); a paired difference with the
baseline has Newcombe's score interval for paired proportions (method 10, 1998), which does not
collapse when no question is discordant; self-consistency differences use the same
square-and-add construction on the per-question shares; McNemar tests are exact (binomial test on the questions only one of
the two got right). Costs are means per question and count every turn, including turns served
from the experiment's response store (the cost of a variant is what it spends run alone):
requests are generations plus extractor calls (retries not counted); tokens are completion
tokens, reasoning included; GPU seconds are the server-reported generation time where the
server reports one, else wall time as seen by crawdad (which, on a batching server, counts the
time a request shared the GPU with others), plus the extractor's wall time. The token axis of
the figure is all completion tokens (debaters, judge and extractor). The self-consistency
accuracy at k is the expected accuracy of the majority of k of an agent's K samples drawn
without replacement (every subset, or 1,000 seeded random subsets when there are more), votes
as crawdad casts them (unextracted answers do not vote, a tie goes to the larger summed
confidence, an exact tie is wrong); its cost is k times the agent's mean tokens per sample."""


def _pts(x: float) -> str:
    """A difference in points, signed, with a true minus sign."""
    return f"{100 * x:+.1f}".replace("-", "\u2212")


def _ci_pts(lo: float, hi: float) -> str:
    return f"[{_pts(lo)}, {_pts(hi)}]".replace("+", "")


def _acc(acc: float, lo: float, hi: float) -> str:
    """An accuracy in percent with its interval, as Table 1 writes it: `87.5% [52.9, 97.8]`."""
    return f"{100 * acc:.1f}% [{100 * lo:.1f}, {100 * hi:.1f}]"


def _verdict(lo: float, hi: float, up: str, down: str, level: str) -> str:
    if lo > 0:
        return up
    if hi < 0:
        return down
    return level


def paired_sentence(r: pd.Series) -> str:
    """One paired comparison (a row of `paired_comparisons`, group "all") in words."""
    left = f"{int(r['left_out'])} left out" + (
        f": {r['left_out_note']}" if r["left_out_note"] else ""
    )
    if r["n"] == 0:
        return f"`{r['variant']}` vs `{r['baseline']}`: no question finished by both ({left})."
    said = _verdict(
        r["ci_lo"],
        r["ci_hi"],
        "higher than the baseline (the CI lies above 0)",
        "lower than the baseline (the CI lies below 0)",
        "no difference the CI supports",
    )
    return (
        f"`{r['variant']}` vs `{r['baseline']}` on the {r['n']} questions both finished "
        f"({left}): {r['variant_acc']:.3f} vs {r['baseline_acc']:.3f}, difference "
        f"{_pts(r['diff'])} points {_ci_pts(r['ci_lo'], r['ci_hi'])}, McNemar p = "
        f"{fmt_p(r['p_value'])} ({_plural(int(r['only_variant']), 'question')} only "
        f"`{r['variant']}` got right, {r['only_baseline']} only `{r['baseline']}`): {said}."
    )


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def cost_sentence(
    m: pd.Series, paired: pd.DataFrame, baseline: str | None, early: frozenset[str] = frozenset()
) -> str:
    """One debate variant against self-consistency at its cost (a row of `cost_match`), then
    its paired difference with the baseline. Worded by the CI: a gain only when it excludes 0.
    `early`: variants a stopping rule stopped early (their fixed-sample CI gets its caveat)."""
    head = (
        f"`{m['variant']}` ({m['tokens']:,.0f} tokens/question, "
        f"{_acc(m['acc'], m['ci_lo'], m['ci_hi'])})"
    )
    if m["variant"] in early:
        head += (
            " (stopped early: every interval in this sentence is a fixed-sample one that "
            "ignores the optional stopping, not valid at 95%; its sequence at the stop is in "
            "the Decisions section)"
        )
    if pd.isna(m["sc_acc"]):
        out = f"{head} has no self-consistency curve to compare with (no solo variant with K \u2265 2)"
    else:
        if m["chosen_as"] == "same model":
            curve = (
                f"the self-consistency curve of {m['curve_model']} (the model of its first "
                f"answers; variant `{m['curve_variant']}`)"
            )
        else:
            curve = (
                f"the best self-consistency curve, {m['curve_model']}'s "
                f"(variant `{m['curve_variant']}`),"
            )
        whose = curve.replace("the self-consistency curve of", "self-consistency of", 1)
        curve = curve.rstrip(",")
        by = f"{abs(100 * m['diff']):.1f} points {_ci_pts(m['diff_lo'], m['diff_hi'])}"
        level = f"difference {_pts(m['diff'])} points {_ci_pts(m['diff_lo'], m['diff_hi'])}"
        if m["where"] == "within":
            at = f"{whose} at the same cost ({m['sc_acc']:.3f} at k\u2248{m['k']:.1f})"
            out = f"{head} " + _verdict(
                m["diff_lo"],
                m["diff_hi"],
                f"beats {at} by {by}",
                f"falls short of {at} by {by}",
                f"is not distinguishable from {at}: {level}",
            )
        else:
            K = int(m["curve_K"])
            k = K if m["where"] == "beyond" else 1
            if m["where"] == "beyond":
                where = (
                    f"lies beyond {curve}: it costs more than k = {K} samples "
                    f"({K * m['sample_tokens']:,.0f} tokens)"
                )
            else:
                where = (
                    f"costs less than the first point (k = 1) of {curve} "
                    f"({m['sample_tokens']:,.0f} tokens)"
                )
            out = f"{head} {where}; against k = {k} ({m['sc_acc']:.3f}) it " + _verdict(
                m["diff_lo"],
                m["diff_hi"],
                f"is ahead by {by}",
                f"falls short by {by}",
                f"is not distinguishable: {level}",
            )
    if baseline is None:
        return out + "."
    if m["variant"] == baseline:
        return out + "; it is the baseline."
    row = paired[(paired["variant"] == m["variant"]) & (paired["group"] == "all")]
    if row.empty or row.iloc[0]["n"] == 0:
        return out + "."
    r = row.iloc[0]
    caveat = "; fixed-sample, ignoring the stopping" if m["variant"] in early else ""
    return (
        f"{out}; the paired difference with the baseline `{baseline}` is {_pts(r['diff'])} "
        f"{_ci_pts(r['ci_lo'], r['ci_hi'])} points (McNemar p = {fmt_p(r['p_value'])}, "
        f"n = {r['n']}{caveat})."
    )


# --- tables for people --------------------------------------------------------------------------


STOPPED_MARK = "\u2020"  # a stopped variant's fixed-sample interval: see the table's note


def _variants_wide(
    acc: pd.DataFrame, cost: pd.DataFrame, names: list[str], cut: frozenset[str] = frozenset()
) -> pd.DataFrame:
    """One column per variant: accuracy rows ("0.912 [0.890, 0.930]"), then cost rows. `cut`:
    variants a stopping rule cut short, their intervals marked (`STOPPED_MARK`)."""
    rows = []
    for (dim, group), g in acc.groupby(["dimension", "group"], sort=False):
        cells = g.set_index("variant")
        row = {"": group if dim != "overall" else "accuracy, all", "n": str(cells["n"].iloc[0])}
        for v in names:
            c = cells.loc[v] if v in cells.index else None
            row[v] = _acc(c["acc"], c["ci_lo"], c["ci_hi"]) if c is not None and c["n"] > 0 else "-"
            if v in cut and row[v] != "-":
                row[v] += f" {STOPPED_MARK}"
        rows.append(row)
    return pd.concat([pd.DataFrame(rows), _cost_wide(cost, names)], ignore_index=True)


def stopped_note(cut: frozenset[str]) -> str:
    """The note of a table of fixed-sample intervals where a stopping rule cut variants short."""
    if not cut:
        return ""
    names = ", ".join(f"`{v}`" for v in sorted(cut))
    return (
        f" {STOPPED_MARK} {names} stopped early (a stopping rule): their intervals here are "
        "fixed-sample 95% intervals computed as if the number of questions had been fixed in "
        "advance; after a stop that depended on the outcomes they do not hold at 95%. Quote "
        "their confidence sequences at the stop (Decisions). The questions every variant "
        "finished end where the first of them stopped, so every interval here is over a count "
        "the stopping chose."
    )


def _scored_words(keep: set[str], unscored: set[str]) -> str:
    """Where some of `keep` have no exact answer: what the accuracy rows are over."""
    left = len(keep & unscored)
    if not left:
        return ""
    return (
        f" Accuracy {Accuracy(0, len(keep) - left, left).of()}; the cost per question over all "
        f"{len(keep)}."
    )


def _clock_rows(cost: pd.DataFrame) -> pd.Series:
    """The cost rows measured by the clock: two runs of one experiment differ there alone."""
    return cost["metric"].str.contains("seconds")


def _cost_wide(cost: pd.DataFrame, names: list[str]) -> pd.DataFrame:
    """One column per variant, one row per cost metric."""
    rows = []
    for metric, g in cost.groupby("metric", sort=False):
        cells = g.set_index("variant")
        row = {"": metric, "n": ""}
        for v in names:
            if v not in cells.index:
                row[v] = "-"
                continue
            c = cells.loc[v]
            if c["note"]:
                row[v] = c["note"]
            elif pd.isna(c["value"]):
                row[v] = "-"
            elif "seconds" in metric:
                row[v] = f"{c['value']:.2f}"
            elif "tokens /" in metric or "token count" in metric:
                row[v] = f"{c['value']:,.0f}"
            else:
                row[v] = f"{c['value']:.1f}"
        rows.append(row)
    return pd.DataFrame(rows, columns=["", "n", *names])


def _paired_shown(p: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "variant": p["variant"],
            "questions": p["group"],
            "n": p["n"],
            "left out": [
                "" if pd.isna(x) else f"{int(x)}" + (f" ({note})" if note else "")
                for x, note in zip(p["left_out"], p["left_out_note"], strict=True)
            ],
            "baseline": [f"{x:.3f}" for x in p["baseline_acc"]],
            "variant acc.": [f"{x:.3f}" for x in p["variant_acc"]],
            "difference (points) [95% CI]": [
                f"{_pts(d)} {_ci_pts(lo, hi)}"
                for d, lo, hi in zip(p["diff"], p["ci_lo"], p["ci_hi"], strict=True)
            ],
            "only baseline right": p["only_baseline"],
            "only variant right": p["only_variant"],
            "McNemar p": [fmt_p(x) for x in p["p_value"]],
        }
    )


def _curves_shown(c: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "variant": c["variant"],
            "agent": c["agent"],
            "k": c["k"],
            "tokens / question": [f"{x:,.0f}" for x in c["tokens"]],
            "accuracy": [f"{x:.3f}" for x in c["acc"]],
            "n": c["n"],
            "subsets": ["all" if e else f"{SC.MAX_SUBSETS:,} random" for e in c["exact"]],
        }
    )


def _variants_table(exp: Experiment, cov: pd.DataFrame) -> str:
    rows = []
    c = cov.set_index("variant")
    for name in exp.manifest.variants:
        v = next((x for x in exp.variants if x.name == name), None)
        if v is None:
            rows.append({"variant": name, "folder": str(exp.path / name), "protocol": "-"})
            continue
        models = ", ".join(dict.fromkeys(v.agents.values()))
        rows.append(
            {
                "variant": f"{name} (baseline)" if name == exp.baseline else name,
                "folder": str(v.path),
                "protocol": v.protocol + (f", K = {v.samples}" if v.protocol == "solo" else ""),
                "models": models,
                "overrides": overrides_text(v.overrides),
                "finished": str(c.loc[name, "finished"]),
                "errored": str(c.loc[name, "errored"]),
                "unfinished": str(c.loc[name, "unfinished"]),
                "simulated": "**yes**" if v.simulated else "no",
            }
        )
    return to_markdown(pd.DataFrame(rows).fillna("-"), formatted=True)


# --- the report ---------------------------------------------------------------------------------


def _points(
    q: pd.DataFrame,
    exp: Experiment,
    acc: pd.DataFrame,
    keep: set[str],
    cut: frozenset[str] = frozenset(),
) -> pd.DataFrame:
    overall = acc[acc["dimension"] == "overall"].set_index("variant")
    rows = []
    for v in exp.variants:
        mine = q[(q["variant"] == v.name) & q["question_id"].isin(keep)]
        if v.name not in overall.index or mine.empty:
            continue
        o = overall.loc[v.name]
        rows.append(
            {
                "variant": v.name,
                "protocol": v.protocol,
                "tokens": float(mine["tokens"].mean()),
                "acc": o["acc"],
                "ci_lo": o["ci_lo"],
                "ci_hi": o["ci_hi"],
                "baseline": v.name == exp.baseline,
                "stopped": v.name in cut,
            }
        )
    return pd.DataFrame(
        rows,
        columns=["variant", "protocol", "tokens", "acc", "ci_lo", "ci_hi", "baseline", "stopped"],
    )


def write_experiment_report(
    folder: Path, out: Path, progress: ReportProgress | None = None, figures: str | None = None
) -> Path:
    """Analyse the experiment folder and write the report folder `out`; return report.md.
    `progress`: the bar that shows the phases (`crawdad analyze`); `figures`: as
    `write_report`'s."""
    if progress is not None:
        progress.phase("loading the experiment's variants")
    exp = load_experiment(folder)  # first: a wrong folder gets no report folder
    if progress is not None:
        progress.phase("computing tables")
    return write_into(out, lambda: _write(exp, out, progress, figures))


def _task(v: Any) -> str:
    manifest = v.run.manifest
    return str((manifest.config.get("task") if manifest is not None else None) or "cladder")


def _by_task(exp: Experiment) -> tuple[Experiment, list[Experiment]]:
    """The variants of the baseline's task (or the first variant's), and those of each other
    task (MAC's experiment: pair variants and the coding agents' whole graphs): items of two
    tasks are compared only in the Causal discovery section, by graph."""
    # cladder-data-no-counts shows cladder-data's questions without the counts: the same items
    tasks = {v.name: _task(v).removesuffix("-no-counts") for v in exp.variants}
    main = tasks.get(exp.baseline or "") or next(iter(tasks.values()), "cladder")
    groups: dict[str, list[Any]] = {}
    for v in exp.variants:
        groups.setdefault(tasks[v.name], []).append(v)
    mine = dataclasses.replace(exp, variants=groups.pop(main, []))
    return mine, [dataclasses.replace(exp, variants=vs) for vs in groups.values()]


def _head(
    whole: Experiment, exp: Experiment, apart: list[Experiment], cov: pd.DataFrame
) -> list[str]:
    md = ["# crawdad experiment report", ""]
    sim = [v.name for v in exp.variants if v.simulated]
    if sim:
        md += [
            f"> **SIMULATED DATA.** Variant(s) {', '.join(f'`{s}`' for s in sim)} were served by "
            "crawdad's fake servers, not by real models: their numbers say nothing about any model.",
            "",
        ]
    live = [v.name for v in exp.variants if v.run.live]
    if live:
        md += [
            f"> **Still being written when analysed:** {', '.join(f'`{s}`' for s in live)}. "
            "The numbers will change; analyse again when the experiment has finished.",
            "",
        ]
    m = exp.manifest
    md += [
        f"Written from the experiment "
        f"`{exp.path}` (file `{m.file}`, sha256 {m.file_sha256[:12]}, crawdad "
        f"{m.crawdad_version}). Baseline: "
        + (f"`{m.baseline}`." if m.baseline else "none named (no paired comparisons)."),
        "",
        _variants_table(whole, cov),
        "",
    ]
    if apart:
        others = ", ".join(f"`{v.name}` ({_task(v)})" for o in apart for v in o.variants)
        md += [
            f"Variants of another task than the baseline's ({_task(exp.variants[0])}): "
            f"{others}. Their items differ, so the sections below compare the "
            f"{_task(exp.variants[0])} variants only; the Causal discovery section scores every "
            "variant's graphs together.",
            "",
        ]
    if exp.warnings:
        md += ["**Loader warnings:**", "", *[f"- {w}" for w in exp.warnings], ""]
    return [*md, RULES, ""]


IGNORES_STOPPING = (
    "fixed-sample figures, which ignore the optional stopping: computed as if the number of "
    "questions had been fixed in advance, they are too narrow (and the p-value too small) for a "
    "variant stopped when its sequence decided; shown for reference, not to quote"
)
DECIDED_EARLY = ("better", "worse", "equivalent")


def fixed_sample_caveat(decision: str) -> str:
    """Why a stopped variant's fixed-sample figures do not hold, by how it stopped: "too
    narrow" only where its sequence decided (it stopped because its difference looked large)."""
    if decision in DECIDED_EARLY:
        return "which ignore the optional stopping (too narrow after it)"
    if decision == "contradicted":
        return "which ignore that it stopped where its sequence contradicted itself"
    return (
        "which ignore that it stopped on its GPU budget (long debates, more often wrong, spend "
        "it, so that stop depends on the outcomes too)"
    )


def early_stopped(decisions: pd.DataFrame | None) -> dict[str, pd.Series]:
    """The variants the stopping rule stopped (decided, contradicted, or budget spent), with
    their row of `decision_table`."""
    if decisions is None or decisions.empty:
        return {}
    return {r["variant"]: r for _, r in decisions.iterrows() if r["decision"] != "undecided"}


def stopped_before_end(exp: Experiment, decisions: pd.DataFrame | None) -> frozenset[str]:
    """The variants whose figures a stopping rule cut short: stopped (`early_stopped`) with
    questions of their selection never run, and the baseline where it stopped because every
    variant had (its question count then depends on theirs). Their fixed-sample intervals
    (Wilson, Newcombe, McNemar, by rung) do not hold at their stated level."""
    stopped = early_stopped(decisions)
    short = {v.name for v in exp.variants if len(v.questions) < (len(v.order) or len(v.questions))}
    out = {name for name in stopped if name in short}
    compared = [v.name for v in exp.variants if v.name != exp.baseline]
    if compared and all(n in stopped for n in compared) and exp.baseline in short:
        out.add(str(exp.baseline))
    return frozenset(out)


def stopped_sentence(
    d: pd.Series, baseline: str, pool: str = "", alpha: float | None = None, compared: int = 1
) -> str:
    """A variant stopped early, in words: its sequence at the stop first (the figure to quote),
    over its pool and at its level; the difference at the stop labelled as overstated."""
    from crawdad.stopping.claims import STOP_ESTIMATE, UNKNOWN_POOL, level_words
    from crawdad.stopping.decide import interval_words, target_name

    what = str(d["decision"])
    against = {"better": f"better than `{baseline}`", "worse": f"worse than `{baseline}`"}.get(
        what, f"equivalent to `{baseline}`" if what == "equivalent" else what
    )
    about = f"{target_name(d['target'])}, over {pool or UNKNOWN_POOL}"
    if what == "contradicted":
        return (
            f"`{d['variant']}` stopped after {d['questions']} questions: its sequence about "
            f"{about} contradicted itself (a miss at the stated alpha): no interval, no claim."
        )
    level = f" at {level_words(alpha, compared)}" if alpha is not None else ""
    # Better or worse with 0 still inside: the sequential test decided; the sequence, valid for
    # every value at once, needs more evidence to leave 0.
    holds_zero = what in ("better", "worse") and d["lower"] <= 0 <= d["upper"]
    why = "; it still holds 0: its sequential test decided, on less evidence" if holds_zero else ""
    return (
        f"`{d['variant']}` stopped after {d['questions']} questions, **{against}** (about "
        f"{about}): its anytime-valid confidence sequence at the stop "
        f"{interval_words(d['lower'], d['upper'])}{level} (the interval to quote{why}); "
        f"{STOP_ESTIMATE}: {_pts(d['estimate'])} points."
    )


def _paired_section(
    paired: pd.DataFrame,
    base: str | None,
    decisions: pd.DataFrame | None = None,
    unscored: int = 0,
    cut: frozenset[str] = frozenset(),
    claim: tuple[str, float | None] = ("", None),
) -> Section:
    """`cut`: the variants a stopping rule cut short (`stopped_before_end`); `claim`: the pool
    in words and the rule's alpha, for the sentences of stopped variants."""
    if base is None:
        return Section(
            "Paired comparisons with the baseline",
            ["The experiment names no baseline (or one without a run): nothing to pair."],
        )
    stopped = early_stopped(decisions)
    early = {v: d for v, d in stopped.items() if v in cut}
    compared = max(1, len(decisions)) if decisions is not None else 1
    overall = paired[paired["group"] == "all"]
    lines = []
    if unscored:
        lines.append(
            f"- {_plural(unscored, 'question')} without an exact answer (a table of one's own) "
            "are left out of every paired comparison."
        )
    for _, r in overall.iterrows():
        name = r["variant"]
        if name in stopped:
            head = stopped_sentence(stopped[name], base, claim[0], claim[1], compared)
            if name in early:
                caveat = fixed_sample_caveat(str(early[name]["decision"]))
                lines.append(
                    f"- {head} For reference only, the fixed-sample figures, {caveat}: "
                    + paired_sentence(r)
                )
            else:  # stopped at its last question: the full-pass figures hold as they are
                lines.append(f"- {head} Over every question it ran: {paired_sentence(r)}")
        else:
            lines.append(f"- {paired_sentence(r)}")
    shown = _paired_shown(paired)
    note = "On the questions both finished, overall and by rung."
    if early:
        names = ", ".join(f"`{v}`" for v in early)
        shown = shown.rename(
            columns={
                "difference (points) [95% CI]": "difference (points) [95% CI, ignores stopping]",
                "McNemar p": "McNemar p (ignores stopping)",
            }
        )
        shown.insert(1, "stopped early", ["yes" if v in early else "" for v in paired["variant"]])
        decided = [v for v, d in early.items() if d["decision"] in DECIDED_EARLY]
        why = (
            IGNORES_STOPPING
            if decided
            else "fixed-sample figures, computed as if the number of questions had been fixed "
            "in advance, which it was not; shown for reference, not to quote"
        )
        note += (
            f" {names} stopped early: for them the CIs (by rung too) and p-values below are "
            f"{why}. Their confidence sequences at the stop (the Decisions section) are the "
            "figures that hold."
        )
    return Section(
        "Paired comparisons with the baseline",
        [
            "\n".join(lines),
            Table(
                "paired",
                paired,
                f"Each variant against `{base}`",
                note,
                shown=shown,
                fold="never",
            ),
        ],
    )


def _compute_section(
    points: pd.DataFrame,
    cframe: pd.DataFrame,
    match: pd.DataFrame,
    paired: pd.DataFrame,
    base: str | None,
    early: frozenset[str] = frozenset(),
) -> Section:
    stopped = (
        "; hollow without a bar: a variant stopped early by the stopping rule, whose "
        "fixed-sample interval is not valid after the stop and is not shown"
        if early
        else ""
    )
    blocks: list[Block] = [
        Plot(
            FIGURE,
            "Each variant at its mean completion tokens per question with its 95% CI (open "
            "marker: the baseline); lines: the self-consistency accuracy of each solo agent for "
            f"k = 1..K samples, at k times its tokens per sample{stopped}",
            compute_figure,
            (points, cframe),
        )
    ]
    debates = match[match["protocol"].isin(SC.DEBATE_PROTOCOLS)]
    if not debates.empty:
        blocks.append(
            "\n".join(f"- {cost_sentence(r, paired, base, early)}" for _, r in debates.iterrows())
        )
    blocks.append(Table("cost_match", match, show=False))
    if not cframe.empty:
        blocks.append(
            Table(
                "sc_curves",
                cframe,
                "Self-consistency curves",
                "Accuracy of a k-sample majority.",
                shown=_curves_shown(cframe),
                fold="never",
            )
        )
    return Section("Accuracy against compute", blocks)


def method_words(rule: Any) -> str:
    """What decides, where the tests do (`crawdad.stopping.decide.TESTS_DECIDE`): "" otherwise."""
    from crawdad.stopping.decide import TESTS_DECIDE, tested

    return " " + TESTS_DECIDE if tested(rule, "difference") else ""


def stopping_guarantee(
    rule: Any, baseline: str, compared: int, pool: str = "", unscored: int = 0
) -> str:
    """The rule and what its decisions are about, in words: the target and the pool named
    where the numbers stand, the level (alpha shared among the comparisons said so), and the
    guarantee that goes with it. `unscored`: settled questions without an exact answer."""
    from crawdad.stopping.claims import UNKNOWN_POOL, level_words
    from crawdad.stopping.decide import target_name

    pool = pool or UNKNOWN_POOL
    level = level_words(rule.alpha, compared)
    head = (
        f"**What these decisions are about: {target_name(rule.target)}** (`target = "
        f'"{rule.target}"` in [stop]), over {pool}. The rule: alpha = {rule.alpha} shared among '
        f"the {compared} variants compared with `{baseline}` (Bonferroni), margin = "
        f"{100 * rule.margin:.1f} points, at least {rule.min_questions} questions"
        + (f", at most {rule.max_questions}" if rule.max_questions else "")
        + (
            f", at most {rule.max_gpu_seconds:g} GPU seconds per variant"
            if rule.max_gpu_seconds
            else ""
        )
        + f". Every sequence below holds at {level}. "
    )
    if rule.target == "run":
        about = (
            "Each sequence is an anytime-valid confidence sequence for the difference a full "
            f"pass over {pool}, with these sampled responses, would report (questions sampled "
            "without replacement, in the run's seeded order): with probability at least "
            f"{100 * (1 - rule.alpha):g}% every variant's sequence holds that difference at "
            "every moment at once, however often it was looked at. So, with that probability, "
            "no variant is called better or worse **than it would be on a full pass of this "
            "run**, nor equivalent when that difference is beyond the margin. **The claim is "
            "about this run, not about the models**: another run of the same models (other "
            "sampled responses, other questions) may differ. For a claim about the models' "
            'answers to the pool, set target = "models".'
        )
    else:
        about = (
            "Each sequence is an anytime-valid confidence sequence for the expected difference "
            f"of the models' answers to {pool}, the questions coming in an order drawn at random, "
            "under this run's settings (its prompts, temperatures and seeds; at temperature 0 or "
            "with fixed seeds, the answers this run gave): an i.i.d. betting sequence. With "
            f"probability at least {100 * (1 - rule.alpha):g}% every variant's sequence holds "
            "its expected difference at every moment at once, however often it was looked at. "
            "So, with that probability, no variant is called better or worse than its answers "
            "to that pool are, nor equivalent when their expected difference is beyond the "
            "margin. It never closes on a figure, so it needs more questions than a claim about "
            "this run alone would. Nothing is claimed beyond that pool and those settings: "
            "other questions, other temperatures or other seeds may differ (see the metrics "
            "page, What a decision generalises to)."
        )
    left = ""
    if unscored:
        left = (
            " Questions without an exact answer are left out of every sequence"
            + (", and out of the population" if rule.target == "run" else "")
            + "."
        )
    rest = (
        " A decision uses only questions every earlier one of which had finished for the "
        f"variant and the baseline.{left} An undecided variant is not equivalent: the table says "
        "why it is undecided. A sequence that ran empty (contradicted) is a miss at the stated "
        "alpha: it supports no claim at all. The difference shown at the stop is the "
        "sequence's estimate there; stopping early overstates it (a variant stops when its "
        "difference looks large), so quote the interval."
    )
    return head + about + method_words(rule) + rest


def decisions_section(exp: Experiment, decisions: pd.DataFrame | None = None) -> Section:
    """The stopping rule's decisions: per variant the decision, what it is about, the questions
    it used, its sequence at the stop, the sequences narrowing, and what stopping saved."""
    from crawdad.analysis.figures.stopping import sequences_figure
    from crawdad.analysis.metrics import stopping as ST

    from crawdad.run.experiment import recorded_rule
    from crawdad.stopping.claims import STOP_ESTIMATE, level_words
    from crawdad.stopping.decide import interval_words, target_name

    rule = recorded_rule(exp.manifest.stop or {})
    if decisions is None:
        decisions = ST.decision_table(exp)
    seqs = ST.sequence_frame(exp)
    spend = ST.spending_table(exp)
    compared = max(1, len(decisions))
    level = f"sequence at the stop ({level_words(rule.alpha, compared)})"
    shown = pd.DataFrame(
        {
            "variant": decisions["variant"],
            "decision": decisions["decision"],
            "about": [target_name(t) for t in decisions["target"]],
            "questions": decisions["questions"],
            f"difference (points): {STOP_ESTIMATE}": [
                _pts(x) if x == x else "–" for x in decisions["estimate"]
            ],
            level: [
                interval_words(lo, hi)
                for lo, hi in zip(decisions["lower"], decisions["upper"], strict=True)
            ],
            "settled": decisions["settled"],
            "why undecided": [
                r if d not in ("better", "worse", "equivalent") else ""
                for d, r in zip(decisions["decision"], decisions["reason"], strict=True)
            ],
        }
    )
    changed = [
        note
        for note in (
            _changed_rule(exp.manifest.stop_history),
            _changed_selection(exp.manifest.selection_history),
        )
        if note
    ]
    unscored = int(decisions["unscored"].max()) if not decisions.empty else 0
    blocks: list[Block] = [
        *changed,
        stopping_guarantee(rule, str(exp.baseline), compared, ST.experiment_pool(exp), unscored),
    ]
    contradicted = decisions[decisions["decision"] == "contradicted"]
    if not contradicted.empty:
        names = ", ".join(f"`{v}`" for v in contradicted["variant"])
        blocks.append(
            f"**A sequence contradicted itself** ({names}): its running intersection ran empty, "
            f"which happens only after a miss, with probability at most alpha = {rule.alpha}. "
            "No interval is shown for it and no claim is made; its decisions, and the guarantee "
            "of the others' taken together, should not be relied on. Rerun with more questions "
            "or another seed to see whether it was chance."
        )
    if unscored:
        blocks.append(
            f"{_plural(unscored, 'settled question')} without an exact answer (a table of one's "
            "own) are left out of every sequence and decision"
            + (
                ", and out of the population, so that a sequence about this run closes on the "
                "scored questions."
                if rule.target == "run"
                else "."
            )
        )
    blocks += [
        Table(
            "decisions",
            decisions,
            "The stopping rule's decisions",
            f"Per variant, against the baseline, about {target_name(rule.target)}: the decision, "
            "the questions it used, the difference (points) with its confidence sequence at the "
            "stop, the questions settled in all, and why an undecided one is undecided. The "
            "full-run tables above are over every question run.",
            shown=shown,
            fold="never",
        ),
        Plot(
            "sequences",
            f"Each variant's confidence sequence for its paired difference from the baseline, "
            f"about {target_name(rule.target)}, over the settled questions (dashed: ± the "
            "margin; dotted: the stop)",
            sequences_figure,
            (seqs, decisions, rule.margin),
        ),
        Table("sequences", seqs, show=False),
        Table(
            "spending",
            spend,
            "Spent against a full pass",
            "Requests, completion tokens and GPU seconds each variant spent (debates "
            "finished after its decision included) and a full pass over its selected "
            "questions, projected from its mean cost per question.",
            shown=spending_shown(spend),
            fold="never",
        ),
    ]
    return Section("Decisions", blocks)


# The spending table's columns as a reader names them (the CSV keeps the frame's names).
SPENDING_HEADERS = {
    "variant": "variant",
    "questions_run": "questions run",
    "selected": "questions selected",
    "requests": "requests",
    "tokens": "completion tokens",
    "gpu_seconds": "GPU seconds",
    "full_requests": "full pass: requests",
    "full_tokens": "full pass: tokens",
    "full_gpu_seconds": "full pass: GPU seconds",
    "saved_requests": "saved: requests",
    "saved_tokens": "saved: tokens",
    "saved_gpu_seconds": "saved: GPU seconds",
}


def _count(x: float) -> str:
    return "-" if pd.isna(x) else f"{round(x):,}"


def _seconds(x: float) -> str:
    if pd.isna(x):
        return "-"
    text = f"{x:,.1f}"
    return "0" if text in ("0.0", "-0.0") else text


def spending_shown(spend: pd.DataFrame) -> pd.DataFrame:
    """The spending table for reading: whole requests and tokens with thousands separators,
    GPU seconds to a tenth, nothing saved shown as 0, headers in words."""
    out = pd.DataFrame({"variant": spend["variant"].astype(str)})
    for col in SPENDING_HEADERS:
        if col == "variant":
            continue
        fmt = _seconds if col.endswith("gpu_seconds") else _count
        out[col] = [fmt(float(x)) for x in spend[col]]
    return out.rename(columns=SPENDING_HEADERS)


def _rule_words(rule: dict[str, Any] | None) -> str:
    """A recorded rule's settings in words (only numbers: a rule that does not validate is
    not shown)."""
    from crawdad.errors import ConfigError
    from crawdad.run.experiment import recorded_rule

    if rule is None:
        return "no rule"
    try:
        valid = recorded_rule(rule)
    except ConfigError:
        return "a rule that is not valid"
    return ", ".join(
        f"{k} = {v:g}" if isinstance(v, int | float) else f"{k} = {v}"
        for k, v in valid.model_dump().items()
        if v is not None
    )


def _history_steps(history: list[Any], words: Callable[[Any], str]) -> str:
    """A manifest's history (stopping rules, selections) in words: from which question each held,
    and when it took over."""
    return "; ".join(
        ("from the start" if c.from_question == 0 else f"after {c.from_question} questions")
        + f" ({c.at:%Y-%m-%d %H:%M} UTC): {words(c)}"
        for c in history
    )


def _changed_rule(history: list[Any]) -> str:
    """What the report says where a resume with --force changed the stopping rule: which rules
    held from which question, and that the guarantee no longer holds as stated."""
    if len(history) < 2:
        return ""
    steps = _history_steps(history, lambda c: _rule_words(c.rule))
    return (
        "**The stopping rule was changed while the experiment ran** (a resume with `--force`): "
        f"{steps}. The guarantee below is that of a rule fixed before any decision was seen. "
        "A rule changed after interim decisions could have been chosen for what they showed, "
        "so the guarantee no longer holds as stated: read the decisions below as descriptive, "
        "not as decisions at the stated error rate."
    )


def _selection_words(selection: dict[str, Any] | None) -> str:
    """A recorded selection (`ExperimentManifest.selection`) in words."""
    from crawdad.stopping.claims import pool_words

    if not selection:
        return "not recorded"
    return (
        pool_words(
            int(selection.get("selected") or 0),
            str(selection.get("questions_file")),
            selection.get("selection") or {},
        )
        + f", seed {selection.get('seed')}, sha256 {str(selection.get('sha256'))[:12]}"
    )


def _changed_selection(history: list[Any]) -> str:
    """What the report says where a resume with --force changed a stopped experiment's
    questions: which held from which question, and that the guarantee no longer holds."""
    if len(history) < 2:
        return ""
    steps = _history_steps(history, lambda c: _selection_words(c.selection))
    return (
        "**The questions were changed while the experiment ran** (a resume with `--force` "
        f"after decisions could be seen): {steps}. The decisions below hold at their stated "
        "level only for questions fixed before any was seen; questions chosen after looking "
        "could have been chosen for what the decisions showed, so **the guarantee no longer "
        "holds as stated**: read the decisions as descriptive, not as decisions at the stated "
        "error rate. The decisions below are recomputed over every question the experiment ever "
        "selected, in the order its folders recorded, and may differ from those the resumed run "
        "printed over its new questions."
    )


def _servers(exp: Experiment) -> list[Section]:
    """The servers the variants shared, over the experiment (its one series)."""
    manifests = [v.run.manifest for v in exp.variants if v.run.manifest is not None]
    top = max((m.config.get("concurrency") or 0 for m in manifests), default=0)
    # the servers crawdad started are named in each variant's manifest (the same set, shared);
    # their restarts are the experiment's (DIR/servers/restarts.jsonl)
    started = [s for m in manifests for s in m.started]
    config = {"concurrency": top or None}
    return [servers_section(exp.path, "experiment", config, started)]


def _write(
    whole: Experiment,
    out: Path,
    progress: ReportProgress | None = None,
    figures: str | None = None,
) -> Path:
    exp, apart = _by_task(whole)
    names = [v.name for v in exp.variants]
    q = exp.questions()
    universe = exp.universe()
    keep = X.common_questions(q, names)
    cov = X.coverage(q, names, universe)
    for other in apart:  # each counted against its own items
        own = [v.name for v in other.variants]
        cov = pd.concat([cov, X.coverage(other.questions(), own, other.universe())])
    # questions without an exact answer (a table of one's own) are left out of every accuracy
    # and paired comparison, as the stopping decisions leave them out (crawdad.scoring.scored);
    # the cost per question counts every finished question
    unscored = set(q.loc[~q["gold"].map(has_answer), "question_id"])
    scored = keep - unscored
    acc = X.accuracy_rows(q, names, keep)
    cost = X.cost_rows(q, names, keep)
    gold = q.drop_duplicates("question_id").set_index("question_id")["gold"]
    curves = SC.sc_curves(exp.samples(), gold, scored)
    cframe = SC.curve_frame(curves)
    match = SC.cost_match(q, {v.name: v.protocol for v in exp.variants}, curves, scored)
    base = exp.baseline if exp.baseline in names else None
    paired = (
        X.paired_comparisons(q[~q["question_id"].isin(unscored)], base, names, universe - unscored)
        if base is not None
        else pd.DataFrame(columns=X.PAIRED_COLUMNS)
    )
    decisions = None
    if exp.manifest.stop is not None and base is not None:
        from crawdad.analysis.metrics.stopping import decision_table

        decisions = decision_table(exp)
    early = stopped_before_end(exp, decisions)
    claim: tuple[str, float | None] = ("", None)
    if decisions is not None:
        from crawdad.analysis.metrics.stopping import experiment_pool

        from crawdad.run.experiment import recorded_rule

        claim = (experiment_pool(exp), recorded_rule(exp.manifest.stop or {}).alpha)
    left = len(universe) - len(keep)
    notes = X.left_out_note(q, names, universe) if left else ""
    sections = [
        Section("", [Table("coverage", cov, show=False)]),
        Section(
            "Variants side by side",
            [
                Table(
                    "variants",
                    acc,
                    "Accuracy of the final answer and cost per question",
                    f"Over the {len(keep)} questions every variant finished ({left} left out"
                    f"{': ' + notes if notes else ''}).{_scored_words(keep, unscored)}"
                    + stopped_note(early),
                    shown=_variants_wide(acc, cost[~_clock_rows(cost)], names, early),
                    links=(("cost CSV", "cost.csv"),),
                    fold="never",
                ),
                Table("cost", cost[~_clock_rows(cost)], show=False),
            ],
        ),
        _paired_section(paired, base, decisions, len(unscored), early, claim),
        *([decisions_section(exp, decisions)] if decisions is not None else []),
        _compute_section(_points(q, exp, acc, scored, early), cframe, match, paired, base, early),
        # each task's own sections over every variant (MAC's pair and graph variants together)
        *experiment_task_sections(whole.variants, base),
        Section(
            "Time taken: wall-clock figures",
            [
                "_Measured by the clock: two runs of one experiment differ here and only here._",
                Table(
                    "cost_seconds",
                    cost[_clock_rows(cost)],
                    "GPU seconds per question",
                    "The server's generation time where it reports one, else crawdad's wall time "
                    "(on a batching server that counts time shared with other requests), plus the "
                    "extractor's wall time.",
                    shown=_cost_wide(cost[_clock_rows(cost)], names),
                    fold="never",
                ),
            ],
        ),
        *_servers(whole),
        Section(
            "Each variant on its own",
            [
                "The full run report of a variant (Table 1, persuasion, confidence, rounds, "
                f"lengths, times): `crawdad analyze {exp.path}/VARIANT`."
            ],
        ),
    ]
    return ReportWriter(out, figures).write(
        sections, head=_head(whole, exp, apart, cov), progress=progress
    )
