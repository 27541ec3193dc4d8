"""Tables for people: number formatting, Markdown, the paper-shaped Table 1 (Markdown and LaTeX)."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

import pandas as pd
from crawdad.analysis.metrics.accuracy import ALIGNMENT_LABELS, ALL, RUNG_LABELS

__all__ = [
    "fmt_p",
    "fmt_pct",
    "format_table",
    "header_words",
    "md_cell",
    "no_html",
    "no_links",
    "table1_latex",
    "table1_shown",
    "table1_wide",
    "to_markdown",
]

# Columns holding proportions in [0, 1], shown as percentages.
_PCT_COLS = {
    "acc",
    "ci_lo",
    "ci_hi",
    "initial_acc",
    "final_acc",
    "gain",
    "gain_ci_lo",
    "gain_ci_hi",
    "share",
    "share_corrected",
    "rate",
    "p_change",
    "share_short",
    "share_no_text",
    "share_up",
    "share_same",
    "share_down",
    "first_speaker_acc",
    "debate_acc",
    "accuracy",
    "share_ge_0_9",
}
_P_COLS = {"p_value"}


def fmt_pct(x: float, digits: int = 1) -> str:
    """0.8416 -> "84.2"."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{100 * x:.{digits}f}"


def fmt_pct_ci(x: float, lo: float, hi: float) -> str:
    """0.84, 0.80, 0.88 -> "84.0 (80.0–88.0)"; "-" without a value."""
    if fmt_pct(x) == "-":
        return "-"
    return f"{fmt_pct(x)} ({fmt_pct(lo)}–{fmt_pct(hi)})"


def fmt_p(p: float) -> str:
    """p-values: 3 significant digits, "<0.001" below that."""
    if p is None or (isinstance(p, float) and math.isnan(p)):
        return "-"
    if p < 0.001:
        return "<0.001"
    return f"{p:.3g}"


def _fmt_num(x: object) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int) or (isinstance(x, float) and x.is_integer() and abs(x) >= 100):
        return f"{int(x)}"
    if isinstance(x, float):
        return f"{x:.3f}" if abs(x) < 100 else f"{x:.1f}"
    return str(x)


def format_table(df: pd.DataFrame) -> pd.DataFrame:
    """All cells as strings: proportions as percentages (column renamed with " %"), p-values
    with 3 significant digits, other floats with 3 decimals."""
    out = {}
    for c in df.columns:
        col = df[c]
        if c in _PCT_COLS:
            out[f"{c} %"] = [fmt_pct(v) for v in col]
        elif c in _P_COLS:
            out[c] = [fmt_p(v) for v in col]
        elif pd.api.types.is_bool_dtype(col):
            out[c] = ["yes" if v else "no" for v in col]
        elif pd.api.types.is_integer_dtype(col):
            out[c] = [str(v) for v in col]
        else:
            out[c] = [_fmt_num(v) if not isinstance(v, str) else v for v in col]
    return pd.DataFrame(out)


# A "<" that would open raw HTML, an HTML comment or an autolink in Markdown (CommonMark's rule:
# "<" followed by a letter, "/", "!" or "?").
_OPENS_HTML = re.compile(r"<(?=[A-Za-z/!?])")
# What lets a table cell's text change the table or become a link, an image or code: a "|", a
# backslash, a backtick, and a "]" that would close a link's or an image's text.
_CELL = re.compile(r"[\\`|]|\](?=[(\[:])")
_LINK_END = re.compile(r"(\\*)\](?=[(\[:])")  # with the backslashes before it


def no_html(markdown: str) -> str:
    """Markdown with no raw HTML or autolink left in it: each "<" that would open one becomes
    "&lt;", which renders as "<" (in a code span it stays "&lt;", as nothing there is markup).

    `ReportWriter` passes every line it writes through this, so that no string from a record or
    a server (a model or agent name, a question id, a text) becomes markup in report.md or the
    HTML made from it; the writer's own `<details>` are added afterwards."""
    return _OPENS_HTML.sub("&lt;", markdown)


def no_links(markdown: str) -> str:
    """Markdown whose text makes no link, image or link definition: each "]" that would close a
    link's text ("](", "][", "]:") is escaped, and renders as "]". The report's own links (to its
    tables and figures) are added by `ReportWriter` afterwards; sections write none."""

    def escape(m: re.Match[str]) -> str:  # an odd run of backslashes has escaped it already
        return m[0] if len(m[1]) % 2 else m[1] + "\\]"

    return _LINK_END.sub(escape, markdown)


def md_cell(value: object) -> str:
    """A table cell's text that renders as itself: one line, no "|" to split the row, no link,
    image or code span (raw HTML: `no_html`). Emphasis ("**no**") is kept: the report's own cells
    use it."""
    text = " ".join(str(value).splitlines())
    return _CELL.sub(lambda m: "\\" + m[0], text)


# Column names (the CSV files' data interface) shown in words: whole names first, then each
# snake_case word.
_HEADER_NAMES = {
    "i_to_c": "wrong to right",
    "c_to_i": "right to wrong",
    "share_ge_0_9": "share ≥ 0.9",
    "p_value": "p-value",
    "p_change": "changed",
    "question_id": "question id",
    "ece": "ECE",
    "brier": "Brier",
}
_HEADER_WORDS = {
    "acc": "accuracy",
    "ci": "CI",
    "lo": "low",
    "hi": "high",
    "gpu": "GPU",
    "sd": "SD",
    "q": "question",
    "excl": "excluding",
    "s": "(s)",
}
_SNAKE = re.compile(r"^[a-z0-9]+(?:_[a-z0-9]+)*$")


def header_words(name: object) -> str:
    """A table's column name as a reader's words: `n_correct` -> "n correct", `acc %` ->
    "accuracy (%)", `median_wall_s` -> "median wall (s)". Names already in words stay."""
    text = str(name)
    pct = text.endswith(" %")
    base = text[:-2] if pct else text
    if base in _HEADER_NAMES:
        base = _HEADER_NAMES[base]
    elif _SNAKE.match(base) and ("_" in base or base in _HEADER_WORDS):
        base = " ".join(_HEADER_WORDS.get(w, w) for w in base.split("_"))
    return f"{base} (%)" if pct else base


# A cell that reads as a number: 12, -0.5, 1,234, 45.2 %, 61.0 [52.1, 70.0], <0.001, +3.1,
# inf, or an interval (59.5 to 90.8, [52.1, 70.0]).
_NUM = r"[<>≤≥]?[+\-−]?(?:\d[\d,]*(?:\.\d+)?|\.\d+|inf)(?:e[+-]?\d+)?\s*%?"
_NUMBER = re.compile(rf"^(?:{_NUM}(?:\s*[\[(][^\])]*[\])])?|{_NUM} to {_NUM}|\[{_NUM}, {_NUM}\])$")
_NO_VALUE = {"", "-", "–", "—", "nan", "n/a"}
# Columns of labels that happen to be numbers: kept left like the other labels.
_LABEL_COLUMNS = {"rung", "round", "bin", "responses", "question_id", "seed"}


def _numeric(name: object, cells: pd.Series) -> bool:
    if name in _LABEL_COLUMNS:
        return False
    texts = [str(v).strip().strip("*") for v in cells]
    values = [t for t in texts if t not in _NO_VALUE]
    # Most, not all: a table of variants by row (a measure per row) holds a row of words too.
    return 2 * sum(bool(_NUMBER.match(t)) for t in values) > len(values)


def to_markdown(df: pd.DataFrame, formatted: bool = False) -> str:
    """A GitHub Markdown table (cells formatted with `format_table` unless already); column
    names in words (`header_words`), numbers right-aligned (`---:`), text left-aligned; every
    cell and column name escaped with `md_cell`, so a record's string cannot change the table."""
    if df.empty:
        return "_(empty)_"
    f = df if formatted else format_table(df)
    align = [
        "right" if _numeric(name, f.iloc[:, i]) else "left" for i, name in enumerate(f.columns)
    ]
    f = f.rename(columns=lambda c: md_cell(header_words(c)))
    f = f.map(lambda v: md_cell(v) if isinstance(v, str) else v)
    return str(f.to_markdown(index=False, disable_numparse=True, colalign=align))


def _groups_present(t1: pd.DataFrame) -> list[str]:
    order = ["Overall", *RUNG_LABELS.values(), *ALIGNMENT_LABELS.values()]
    present = set(t1["group"])
    return [g for g in order if g in present] + sorted(present - set(order))


def _agents(t1: pd.DataFrame) -> list[str]:
    agents = [a for a in dict.fromkeys(t1["agent"]) if a != ALL]
    return [*agents, ALL] if ALL in set(t1["agent"]) else agents


def _row_name(agent: str, stage: str) -> str:
    who = "All first speakers" if agent == ALL else agent
    return f"{who} ({'Initial' if stage == 'initial' else 'Final'})"


def table1_wide(t1: pd.DataFrame, ci: bool = True) -> pd.DataFrame:
    """Table 1 of one run in the paper's shape: rows "<model> (Initial|Final)" and "n", columns
    Overall, the rungs, the alignments; cells "84.2% [83.1, 85.2]" (accuracy %, 95% CI), or
    without `ci` the paper's "84.16"."""
    if t1["run"].nunique() > 1:
        raise ValueError("table1_wide shows one run")
    groups = _groups_present(t1)
    rows = []
    for agent in _agents(t1):
        a = t1[t1["agent"] == agent].set_index(["stage", "group"])
        for stage in ("initial", "final"):
            row: dict[str, str] = {"": _row_name(agent, stage)}
            for g in groups:
                if (stage, g) not in a.index:
                    row[g] = "-"
                    continue
                r = a.loc[(stage, g)]
                if ci:  # one format: a tenth of a percent, the interval in brackets
                    cell = f"{fmt_pct(r['acc'])}% [{fmt_pct(r['ci_lo'])}, {fmt_pct(r['ci_hi'])}]"
                else:  # the paper's LaTeX table: two decimals, no interval
                    cell = fmt_pct(r["acc"], 2)
                row[g] = cell
            rows.append(row)
        n_row = {"": f"{'All' if agent == ALL else agent}: n"}
        for g in groups:
            n = a["n"].get(("initial", g))
            n_row[g] = "-" if n is None else str(int(n))
        rows.append(n_row)
    return pd.DataFrame(rows, columns=["", *groups])


# The paper's abbreviated alignment columns, in words for the report's Markdown.
ALIGNMENT_WORDS = {
    "Comm.": "Commonsensical",
    "Nonsens.": "Nonsensical",
    "Anti-C.": "Anti-commonsensical",
}
TABLE1_NOTE = (
    "Cells: accuracy (%) and its 95% Wilson interval [low, high] (%). Alignment is CLadder's: "
    "commonsensical stories, nonsensical ones (made-up variable names) and anti-commonsensical "
    "ones (causal relations against common sense); the paper's columns abbreviate them Comm., "
    "Nonsens. and Anti-C., as the CSV and the LaTeX table do."
)


def table1_shown(t1: pd.DataFrame) -> str:
    """Table 1 as report.md shows it: `table1_wide` with its alignment columns in words."""
    return to_markdown(table1_wide(t1).rename(columns=ALIGNMENT_WORDS), formatted=True)


def _tex(s: str) -> str:
    for a, b in (
        ("\\", r"\textbackslash{}"),
        ("&", r"\&"),
        ("%", r"\%"),
        ("_", r"\_"),
        ("#", r"\#"),
        ("$", r"\$"),
        ("{", r"\{"),
        ("}", r"\}"),
    ):
        s = s.replace(a, b)
    return s


def table1_latex(t1: pd.DataFrame, caption: str | None = None, label: str = "tab:accuracy") -> str:
    """Table 1 of one run as a booktabs LaTeX table, laid out like the paper's (accuracy in %,
    two decimals; an n row per model). CIs are in the CSV and the Markdown version."""
    wide = table1_wide(t1, ci=False)
    groups = list(wide.columns[1:])
    rungs = [g for g in groups if g in RUNG_LABELS.values()]
    aligns = [g for g in groups if g in ALIGNMENT_LABELS.values()]
    other = [g for g in groups if g not in rungs and g not in aligns]
    cols = other + rungs + aligns
    head1 = ["", *[_tex(g) for g in other]]
    if rungs:
        head1.append(rf"\multicolumn{{{len(rungs)}}}{{c}}{{Acc.\ by Rung}}")
    if aligns:
        head1.append(rf"\multicolumn{{{len(aligns)}}}{{c}}{{Acc.\ by Commonsense Alignment}}")
    head2 = [
        "",
        *["" for _ in other],
        *[g.split(" ")[1] for g in rungs],
        *[_tex(g) for g in aligns],
    ]
    lines = [
        r"\begin{table}[t]",
        r"\centering",
        rf"\caption{{{_tex(caption or 'Accuracy (%) before (Initial) and after (Final) debate.')}}}",
        rf"\label{{{label}}}",
        r"\begin{tabular}{l" + "r" * len(cols) + "}",
        r"\toprule",
        " & ".join(head1) + r" \\",
    ]
    start = 2 + len(other)
    rules = []
    if rungs:
        rules.append(rf"\cmidrule(lr){{{start}-{start + len(rungs) - 1}}}")
        start += len(rungs)
    if aligns:
        rules.append(rf"\cmidrule(lr){{{start}-{start + len(aligns) - 1}}}")
    if rules:
        lines.append(" ".join(rules))
    lines += [" & ".join(head2) + r" \\", r"\midrule"]
    for _, r in wide.iterrows():
        name = str(r[""])
        cells = [str(r[c]) for c in cols]
        if name.endswith(": n"):
            lines.append(
                r"\textit{"
                + _tex(name)
                + "} & "
                + " & ".join(rf"\textit{{{c}}}" for c in cells)
                + r" \\"
            )
            lines.append(r"\addlinespace")
        else:
            lines.append(_tex(name) + " & " + " & ".join(cells) + r" \\")
    if lines[-1] == r"\addlinespace":
        lines.pop()
    lines += [r"\bottomrule", r"\end{tabular}", r"\end{table}", ""]
    return "\n".join(lines)


def details(summary: str, body: str) -> str:
    """A collapsible Markdown block (GitHub renders <details>)."""
    return f"<details><summary>{summary}</summary>\n\n{body}\n\n</details>"


def link_list(paths: Sequence[tuple[str, str]]) -> str:
    return " · ".join(f"[{name}]({href})" for name, href in paths)
