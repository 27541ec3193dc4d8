"""Questions answered from data (`crawdad data tables`, tasks cladder-data*): each way of
answering a run stands for (stated numbers, data in context, data + tools for one agent or a
debate, LLM4Causal's pipeline) scored against the exact label and against the perfect
estimator's answer (what perfect reasoning from the sample gives), by rung, query type and
alignment, with Wilson CIs; "uncertain" answers (the Causal Agent's, where the prompt set
allows them) scored as paper 001 scores any answer that is not the label, wrong, and counted
apart from unreadable ones (no answer extracted); paired differences between the ways; the gap
to the perfect estimator; LLM4Causal's pipeline under the paper's metrics (`pipeline_scores.py`
beside this module); tool use and tool errors (parse failures apart from wrong
calls, `analysis.tool_use`); tokens and GPU seconds per question. Pure functions over records,
and the report's section.

A run over CLadder's own questions (stated numbers) joins the comparison when it shares question
ids with a data-backed run: `crawdad data tables` keeps the ids, so the perfect answer of a
question is known from the data-backed records.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd
from crawdad.analysis.formatting import fmt_p, fmt_pct, fmt_pct_ci
from crawdad.analysis.load import Run
from crawdad.analysis.metrics._stats import (
    mcnemar_exact,
    newcombe_paired_difference,
    wilson_proportion,
)
from crawdad.analysis.section import Block, Section, Table
from crawdad.analysis.tasks.cladder_data.pipeline_scores import pipeline_blocks
from crawdad.analysis.tool_use import calls_by_tool

from crawdad.records import UNCERTAIN, DebateRecord

Ways = Mapping[str, list[DebateRecord]]  # run label -> its records (errored ones included)


def run_records(run: Run) -> list[DebateRecord]:
    """The records of the debates a run's analysis kept (its debates frame's questions)."""
    return run.records()


def is_data_backed(record: DebateRecord) -> bool:
    return "perfect_answer" in record.item


def perfect_answers(ways: Ways) -> dict[str, str | None]:
    """Question id -> the perfect estimator's answer, from any data-backed record."""
    out: dict[str, str | None] = {}
    for records in ways.values():
        for r in records:
            if is_data_backed(r):
                out.setdefault(str(r.question_id), r.item.get("perfect_answer"))
    return out


def _tools(records: Sequence[DebateRecord]) -> bool:
    return any(t.tool_mode is not None for r in records for t in r.turns)


def way_of_answering(records: Sequence[DebateRecord]) -> str:
    """What a run stands for, read from its records."""
    if not records:
        return "-"
    r = records[0]
    agents = len(r.agents)
    who = (
        "pipeline"
        if r.protocol == "pipeline"
        else f"{'one agent' if agents == 1 else f'{agents} agents'}, {r.protocol}"
    )
    if not is_data_backed(r):
        return f"stated numbers ({who})"
    shown = "data in context" if r.item.get("counts_in_text") else "data not in context"
    if r.protocol == "pipeline":
        return f"pipeline (task JSON, tool run, interpretation; {shown})"
    return f"{shown}{' + tools' if _tools(records) else ''} ({who})"


def _row(label: str, dim: str, group: str, rs: list[DebateRecord], perfect: Mapping) -> dict:
    n = len(rs)
    k = sum(r.ok and r.final_answer == r.gold for r in rs)
    with_p = [r for r in rs if perfect.get(str(r.question_id)) is not None]
    kp = sum(r.ok and r.final_answer == perfect[str(r.question_id)] for r in with_p)
    ceiling = sum(perfect[str(r.question_id)] == r.gold for r in with_p)
    lo, hi = wilson_proportion(k, n)
    plo, phi = wilson_proportion(kp, len(with_p))
    uncertain = sum(r.ok and r.final_answer == UNCERTAIN for r in rs)
    unreadable = sum(r.ok and r.final_answer is None for r in rs)
    return {
        "run": label,
        "dimension": dim,
        "group": group,
        "n": n,
        "n_correct": k,
        "acc": k / n if n else float("nan"),
        "ci_lo": lo,
        "ci_hi": hi,
        "n_perfect": len(with_p),
        "n_agree_perfect": kp,
        "acc_perfect": kp / len(with_p) if with_p else float("nan"),
        "perfect_ci_lo": plo,
        "perfect_ci_hi": phi,
        # the perfect estimator's own accuracy against the label on these questions: a ceiling
        # for answers from this sample; `gap` is how far the run is below it
        "perfect_acc": ceiling / len(with_p) if with_p else float("nan"),
        "gap": (k / n - ceiling / len(with_p)) if n and with_p else float("nan"),
        # "uncertain" final answers (counted wrong above, as paper 001 counts them) and finished
        # debates with no answer read, each over all n
        "n_uncertain": uncertain,
        "uncertain_rate": uncertain / n if n else float("nan"),
        "n_unreadable": unreadable,
        "unreadable_rate": unreadable / n if n else float("nan"),
    }


DIMENSIONS = ("rung", "query_type", "alignment")


def accuracy_table(ways: Ways) -> pd.DataFrame:
    """Per run: accuracy against the label and against the perfect answer, overall, by rung,
    query type, alignment, and by whether the sample points the label's way."""
    perfect = perfect_answers(ways)
    rows = []
    for label, records in ways.items():
        rows.append(_row(label, "overall", "all", records, perfect))
        for dim in DIMENSIONS:
            groups: dict[str, list[DebateRecord]] = {}
            for r in records:
                groups.setdefault(str(getattr(r, dim)), []).append(r)
            for g in sorted(groups):
                rows.append(_row(label, dim, g, groups[g], perfect))
        split: dict[str, list[DebateRecord]] = {}
        for r in records:
            p = perfect.get(str(r.question_id))
            if p is not None:
                split.setdefault("agrees" if p == r.gold else "disagrees", []).append(r)
        for g in sorted(split):
            rows.append(_row(label, "sample vs label", g, split[g], perfect))
    return pd.DataFrame(rows)


def paired_table(ways: Ways, baseline: str) -> pd.DataFrame:
    """Each run against `baseline` on the questions both finished: the difference in accuracy
    against the label and against the perfect answer, with Newcombe's paired score CIs and McNemar."""
    perfect = perfect_answers(ways)
    base = {str(r.question_id): r for r in ways.get(baseline, []) if r.ok}
    rows = []
    for label, records in ways.items():
        if label == baseline:
            continue
        mine = {str(r.question_id): r for r in records if r.ok}
        common = sorted(set(base) & set(mine))
        for target in ("label", "perfect"):
            ids = [q for q in common if target == "label" or perfect.get(q) is not None]
            cells = [0, 0, 0, 0]  # both, only baseline, only this run, neither
            for q in ids:
                want = base[q].gold if target == "label" else perfect[q]
                a, b = base[q].final_answer == want, mine[q].final_answer == want
                cells[0 if a and b else 1 if a else 2 if b else 3] += 1
            n = len(ids)
            lo, hi = newcombe_paired_difference(*cells)
            rows.append(
                {
                    "run": label,
                    "baseline": baseline,
                    "against": target,
                    "n": n,
                    "baseline_acc": (cells[0] + cells[1]) / n if n else float("nan"),
                    "run_acc": (cells[0] + cells[2]) / n if n else float("nan"),
                    "diff": (cells[2] - cells[1]) / n if n else float("nan"),
                    "diff_ci_lo": lo,
                    "diff_ci_hi": hi,
                    "p_value": mcnemar_exact(cells[2], cells[1]),
                }
            )
    return pd.DataFrame(rows)


def cost_table(ways: Ways) -> pd.DataFrame:
    """Tokens and GPU seconds per question (debaters and extractor; the server's generation
    time where it reports one, else crawdad's wall time) and tool calls per question."""
    rows = []
    for label, records in ways.items():
        n = len(records)
        tokens = gpu = calls = 0.0
        for r in records:
            for t in r.turns:
                tokens += (t.prompt_tokens or 0) + (t.completion_tokens or 0)
                gpu += t.server_seconds if t.server_seconds is not None else t.seconds
                calls += len(t.tool_calls)
                if t.extraction is not None:
                    x = t.extraction
                    tokens += (x.prompt_tokens or 0) + (x.completion_tokens or 0)
                    gpu += x.seconds
            calls += sum((p.call is not None) + len(p.more_calls) for p in r.pipeline)
        rows.append(
            {
                "run": label,
                "questions": n,
                "tokens_per_q": tokens / n if n else float("nan"),
                "gpu_seconds_per_q": gpu / n if n else float("nan"),
                "tool_calls_per_q": calls / n if n else float("nan"),
            }
        )
    return pd.DataFrame(rows)


# --- the report's section -----------------------------------------------------------------------


def _shown_accuracy(acc: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "run": acc["run"],
            "by": acc["dimension"],
            "group": acc["group"],
            "n": acc["n"],
            "vs label % (CI)": [
                fmt_pct_ci(a, lo, hi)
                for a, lo, hi in zip(acc["acc"], acc["ci_lo"], acc["ci_hi"], strict=True)
            ],
            "vs perfect % (CI)": [
                fmt_pct_ci(a, lo, hi)
                for a, lo, hi in zip(
                    acc["acc_perfect"], acc["perfect_ci_lo"], acc["perfect_ci_hi"], strict=True
                )
            ],
            "perfect vs label %": [fmt_pct(x) for x in acc["perfect_acc"]],
            "gap (points)": ["-" if pd.isna(g) else f"{100 * g:+.1f}" for g in acc["gap"]],
            "uncertain %": [fmt_pct(x) for x in acc["uncertain_rate"]],
            "no answer %": [fmt_pct(x) for x in acc["unreadable_rate"]],
        }
    )


def data_section(named_runs: Sequence[tuple[str, list[DebateRecord]]]) -> list[Section]:
    """The report's section on questions answered from data (none when no run has any)."""
    ways = {label: records for label, records in named_runs}
    if not any(is_data_backed(r) for rs in ways.values() for r in rs):
        return []
    perfect = perfect_answers(ways)  # the questions with a table: a stated-numbers run keeps those
    ways = {k: [r for r in v if str(r.question_id) in perfect] for k, v in ways.items()}
    ways = {k: v for k, v in ways.items() if v}
    acc = accuracy_table(ways)
    kinds = pd.DataFrame(
        [{"run": k, "way of answering": way_of_answering(v)} for k, v in ways.items()]
    )
    overall = acc[acc["dimension"] == "overall"]
    md: list[Block] = [
        "Each run is one way of answering: stated numbers (CLadder's own questions, paired by "
        "question id), data in context (the counts in the question), data + tools (the data "
        "tools over the question's table), or LLM4Causal's pipeline. Accuracy is against the "
        "exact label and against the perfect estimator's answer (the same query over the "
        "sample's plug-in model: what perfect reasoning from this sample answers); `perfect vs "
        "label` is that estimator's own accuracy, the ceiling of answers drawn from the sample, "
        'and `gap` the run\'s distance to it. `uncertain`: final answers "uncertain" (where '
        "the prompt set allows them, as the Causal Agent's do), counted wrong as paper 001 "
        "counts any answer that is not the label; `no answer`: finished debates whose answer "
        "could not be read (also wrong). 95% Wilson CIs.",
        Table("data_ways", kinds, "Ways of answering", shown=kinds),
        Table(
            "data_accuracy",
            acc,
            "Accuracy, overall",
            shown=_shown_accuracy(overall),
            fold="never",
        ),
        Table(
            "data_accuracy_by_group",
            acc[acc["dimension"] != "overall"],
            "By rung, query type, alignment and whether the sample points the label's way",
            shown=_shown_accuracy(acc[acc["dimension"] != "overall"]),
            fold="always",
        ),
    ]
    if len(ways) > 1:
        baseline = next(iter(ways))
        paired = paired_table(ways, baseline)
        shown = pd.DataFrame(
            {
                "run": paired["run"],
                "against": paired["against"],
                "n": paired["n"],
                f"{baseline} %": [fmt_pct(x) for x in paired["baseline_acc"]],
                "run %": [fmt_pct(x) for x in paired["run_acc"]],
                "diff (points, CI)": [
                    "-" if pd.isna(d) else f"{100 * d:+.1f} ({100 * lo:+.1f} to {100 * hi:+.1f})"
                    for d, lo, hi in zip(
                        paired["diff"], paired["diff_ci_lo"], paired["diff_ci_hi"], strict=True
                    )
                ],
                "McNemar p": [fmt_p(p) for p in paired["p_value"]],
            }
        )
        md.append(
            Table(
                "data_paired",
                paired,
                f"Each way against `{baseline}`",
                "The first run given, on the questions both finished; Newcombe's paired score CI of the "
                "difference.",
                shown=shown,
                fold="never",
            )
        )
    md += pipeline_blocks(ways)
    tools = calls_by_tool(ways)
    if not tools.empty:
        md.append(
            Table(
                "data_tools",
                tools,
                "Tool use and tool errors",
                "Per run and tool: questions with a call, calls per "
                "question, parse failures (malformed: not JSON, not the schema, no such tool) apart "
                "from wrong calls (read, but the table cannot answer them: a column it lacks, an "
                "effect the graph does not identify). Pipeline calls are crawdad's own (mode "
                "pipeline).",
                hide=(),
                fold="never",
            )
        )
    cost = cost_table(ways)
    clock = ["gpu_seconds_per_q"]  # measured by the clock: two identical runs differ here alone
    md.append(
        Table(
            "data_cost",
            cost.drop(columns=clock),
            "Cost per question",
            "Tokens (prompt and completion, debaters and extractor) and tool calls.",
            hide=(),
            fold="never",
        )
    )
    md.append(
        Table(
            "data_cost_seconds",
            cost[["run", *clock]],
            "GPU seconds per question (wall-clock)",
            "The server's generation time where it reports one, else wall time: measured by "
            "the clock, so two runs of one command differ here.",
            hide=(),
            fold="never",
        )
    )
    return [Section("Questions answered from data", md, folder="data")]
