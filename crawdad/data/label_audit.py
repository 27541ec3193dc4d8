"""`crawdad data audit`: recompute every CLadder question from its causal model and compare.

For each question: the exact quantity (crawdad.causal.queries) against the stored
`meta.groundtruth`, the exact answer (crawdad.causal.answers) against the stored label, the
numbers in `meta.given_info` against the model's exact values, and the percentages printed in the
`given_info` text against those values rounded.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from crawdad.causal.answers import CONVENTION, verdict
from crawdad.causal.given_info import shown_exact
from crawdad.causal.model import BinaryModel
from crawdad.causal.queries import QUANTITY
from crawdad.data.questions import load_cladder, read_raw
from crawdad.errors import CrawdadError, DataError
from crawdad.safe_files import read_input

AUDIT_SCHEMA = 1
EXACT, CLOSE = 1e-9, 1e-4  # |stored - exact| up to EXACT is float noise; up to CLOSE, rounding

# agrees; convention: agrees under a CLadder convention that the textbook answer does not share
# (backadj with two valid sets); contradicted; ambiguous: no answer is uniquely right; error.
LabelStatus = Literal["agrees", "convention", "contradicted", "ambiguous", "error"]
ValueStatus = Literal["exact", "close", "off", "n/a"]

# Why CLadder's stored numbers differ from the exact ones (found by reading its generator,
# causalbenchmark/graphs/bayes.py, and confirmed by which graphs and queries are off).
CAUSES = {
    "loopy": (
        "CLadder computes marginals with pomegranate's belief propagation (BayesianNetwork."
        "predict_proba), which is exact only when the graph, after any intervention and evidence, "
        "has no undirected cycle; mediation, confounding, IV, arrowhead, diamond, diamondcut and "
        "frontdoor have one"
    ),
    "soft": (
        "CLadder computes natural effects by setting the mediator to an independent coin with its "
        "interventional marginal, which cuts the mediator's tie to the confounder V2 in the "
        "arrowhead graph"
    ),
    "fork": (
        "CLadder's table of valid adjustment sets lists only the empty set for the fork "
        "(X->Y, V2->Y), but {V2} is valid too: V2 is no descendant of X and there is no backdoor "
        "path, so both methods are correct; the labels (and the engine, which follows CLadder's "
        "rules) take the minimal set as the right one"
    ),
}


class AuditRow(BaseModel):
    question_id: str
    query_type: str
    graph_id: str | None
    rung: int | None
    model_id: str
    label: str
    exact_answer: str | None
    exact_value: Any = None
    stored_value: Any = None
    value_status: ValueStatus
    label_status: LabelStatus
    reason: str | None = None
    note: str | None = None
    shown_max_error: float | None = None  # largest |meta.given_info number - exact value|
    text_ok: bool | None = None  # the text's percentages are the exact values rounded


class AuditFile(BaseModel):
    schema_version: int = AUDIT_SCHEMA
    source: str
    questions_file: str
    n_questions: int
    n_contradicted: int
    n_ambiguous: int
    n_convention: int = 0  # labels that agree only under a CLadder convention
    rows: list[AuditRow]


# --- what the text shows -------------------------------------------------------------------------

_PERCENT = re.compile(r"(-?\d+(?:\.\d+)?)%")
_DECIMAL = re.compile(r"(?<![\w.])(-?\d+\.\d+)(?![\d%])")


def text_matches(text: str, exact: list[float]) -> bool | None:
    """Whether the text's numbers are the exact values as CLadder prints them ({:.0%} or
    {:.2f}), compared as sorted lists. None when the text shows no numbers."""
    shown = [float(p) / 100 for p in _PERCENT.findall(text)]
    digits = 0.01
    if not shown:
        shown = [float(d) for d in _DECIMAL.findall(text)]
    if not shown:
        return None
    if len(shown) != len(exact):
        return False
    return all(
        abs(s - e) <= digits / 2 + 1e-9 for s, e in zip(sorted(shown), sorted(exact), strict=True)
    )


# --- one question --------------------------------------------------------------------------------


def _value_status(
    qt: str, exact: Any, stored: Any, m: BinaryModel, meta: Mapping[str, Any]
) -> ValueStatus:
    if qt == "backadj":  # stored: the set CLadder holds valid
        from crawdad.causal.queries import backdoor_valid

        ok = isinstance(stored, list) and backdoor_valid(m, stored, *_tx(meta))
        return "exact" if ok else "off"
    if qt == "collider_bias" or not isinstance(stored, int | float) or isinstance(stored, bool):
        return "n/a"
    diff = abs(float(exact) - float(stored))
    return "exact" if diff <= EXACT else "close" if diff <= CLOSE else "off"


def _tx(meta: Mapping[str, Any]) -> tuple[str, str]:
    return str(meta.get("treatment") or "X"), str(meta.get("outcome") or "Y")


def _show(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4f}"
    return str(v)


def audit_question(q: Mapping[str, Any], m: BinaryModel) -> AuditRow:
    meta = q["meta"]
    qt, graph = str(meta["query_type"]), meta.get("graph_id")
    base = {
        "question_id": str(q["question_id"]),
        "query_type": qt,
        "graph_id": graph,
        "rung": meta.get("rung"),
        "model_id": str(meta.get("model_id")),
        "label": str(q.get("answer")),
        "stored_value": meta.get("groundtruth"),
    }
    if qt not in QUANTITY:
        return AuditRow(
            **base,
            exact_answer=None,
            value_status="n/a",
            label_status="error",
            reason=f"unknown query type {qt!r}",
        )
    try:
        exact = QUANTITY[qt](m, meta)
        v = verdict(qt, exact, meta)
        shown = shown_exact(m, meta)
    except (ZeroDivisionError, DataError, KeyError, TypeError, ValueError) as e:
        return AuditRow(
            **base,
            exact_answer=None,
            value_status="n/a",
            label_status="error",
            reason=f"cannot compute: {e}",
        )
    value_status = _value_status(qt, exact, meta.get("groundtruth"), m, meta)
    exact_out = [bool(x) for x in exact] if qt == "backadj" else float(exact)
    if v.answer is None:
        status: LabelStatus = "ambiguous"
        reason = v.note
    elif v.answer == q.get("answer") and v.note == CONVENTION:
        status, reason = "convention", v.note
        if qt == "backadj" and graph == "fork":
            reason += " ({V2} is valid in the fork; CLadder's table lists only {})"
    elif v.answer == q.get("answer"):
        status, reason = "agrees", None
    else:
        status = "contradicted"
        stored = meta.get("groundtruth")
        if value_status in ("off", "close"):
            why = (
                "mediator decoupled, belief propagation"
                if qt in ("nde", "nie") and graph == "arrowhead"
                else "belief propagation on a loopy graph"
            )
            reason = f"stored {qt} {_show(stored)} is inexact ({why}); the exact {_show(exact_out)} gives {v.answer!r}"
        else:
            reason = f"the exact {qt} {_show(exact_out)} gives {v.answer!r}, the label is {q.get('answer')!r}"
    return AuditRow(
        **base,
        exact_answer=v.answer,
        exact_value=exact_out,
        value_status=value_status,
        label_status=status,
        reason=reason,
        note=v.note if status == "agrees" else None,
        shown_max_error=max((abs(s - e) for s, e in shown), default=None),
        text_ok=text_matches(str(q.get("given_info", "")), [e for _, e in shown])
        if shown
        else None,
    )


# --- the dataset ---------------------------------------------------------------------------------


def audit_dataset(path: Path, questions_file: str | None = None) -> AuditFile:
    load_cladder(path, questions_file)  # validates every field the loader reads
    questions, models, q_name = read_raw(path, questions_file)
    built: dict[str, BinaryModel] = {}
    problems: dict[str, str] = {}
    for raw in models:
        try:
            built[str(raw["model_id"])] = BinaryModel.from_meta(raw)
        except CrawdadError as e:
            problems[str(raw["model_id"])] = str(e)
    rows = []
    for q in questions:
        mid = str(q["meta"]["model_id"])
        if mid in built:
            rows.append(audit_question(q, built[mid]))
        else:
            meta = q["meta"]
            rows.append(
                AuditRow(
                    question_id=str(q["question_id"]),
                    query_type=str(meta["query_type"]),
                    graph_id=meta.get("graph_id"),
                    rung=meta.get("rung"),
                    model_id=mid,
                    label=str(q["answer"]),
                    exact_answer=None,
                    value_status="n/a",
                    label_status="error",
                    reason=problems[mid],
                )
            )
    count = Counter(r.label_status for r in rows)
    return AuditFile(
        source=str(path),
        questions_file=q_name,
        n_questions=len(rows),
        n_contradicted=count["contradicted"],
        n_ambiguous=count["ambiguous"],
        n_convention=count["convention"],
        rows=rows,
    )


def _pct(n: int, d: int) -> str:
    return f"{100 * n / d:.1f}%" if d else "-"


def render_markdown(audit: AuditFile) -> str:
    rows = audit.rows
    n = len(rows)
    status = Counter(r.label_status for r in rows)
    unique = n - status["ambiguous"] - status["error"] - status["convention"]
    reproduced = status["agrees"] + status["convention"]
    lines = [
        "# CLadder audit: every question recomputed from its causal model",
        "",
        f"Source: `{audit.source}` ({Path(audit.questions_file.split('!')[-1]).name}), {n} questions.",
        "",
        f"- Labels reproduced by the exact answer under CLadder's rules: {reproduced} of {n} "
        f"({_pct(reproduced, n)}); of the {unique} questions whose answer needs no convention: "
        f"{_pct(status['agrees'], unique)}.",
        f"- Reproduced only under CLadder's convention that the minimal valid adjustment set is "
        f"the right one (by the backdoor criterion both methods are valid): {status['convention']}.",
        f"- Contradicted (the exact answer is the other one): {status['contradicted']}.",
        f"- No uniquely right answer: {status['ambiguous']}.",
        f"- Could not be computed: {status['error']}.",
        f"- Answers that rest on CLadder's band (|quantity| < 0.005 answers no): "
        f"{sum(1 for r in rows if r.note and 'band' in r.note)}.",
        "",
        "## Per query type and graph",
        "",
        "Stored value: `meta.groundtruth` against the exact quantity (exact: within 1e-9; close: "
        "within 1e-4; off: further). Shown: every number in `meta.given_info` within 1e-9 of the "
        "exact value. Text: the percentages printed in the question are the exact values rounded.",
        "",
        "| query type | graph | n | value exact | close | off | label agrees | by convention | contradicted | ambiguous | shown exact | text right |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    groups: dict[tuple[str, str], list[AuditRow]] = defaultdict(list)
    for r in rows:
        groups[(r.query_type, r.graph_id or "-")].append(r)
    for (qt, graph), rs in sorted(groups.items()):
        vs = Counter(r.value_status for r in rs)
        ls = Counter(r.label_status for r in rs)
        shown = [r for r in rs if r.shown_max_error is not None]
        texts = [r for r in rs if r.text_ok is not None]
        cells = [
            qt, graph, str(len(rs)),
            *(str(vs[k]) if vs["n/a"] < len(rs) else "-" for k in ("exact", "close", "off")),
            str(ls["agrees"]), str(ls["convention"]), str(ls["contradicted"]), str(ls["ambiguous"]),
            f"{sum(1 for r in shown if (r.shown_max_error or 0) <= EXACT)}/{len(shown)}" if shown else "-",
            f"{sum(1 for r in texts if r.text_ok)}/{len(texts)}" if texts else "-",
        ]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    off = [r for r in rows if r.value_status in ("off", "close") and r.query_type != "backadj"]
    if off:
        lines += ["", "## Where CLadder's stored values are inexact, and why", ""]
        by: dict[tuple[str, str], list[float]] = defaultdict(list)
        for r in off:
            by[(r.query_type, r.graph_id or "-")].append(
                abs(float(r.exact_value) - float(r.stored_value))
            )
        for (qt, graph), errs in sorted(by.items()):
            lines.append(
                f"- {qt} on {graph}: {len(errs)} questions, largest error {max(errs):.4f}."
            )
        lines += [
            "",
            f"Why: {CAUSES['loopy']}. For nde and nie on arrowhead also: {CAUSES['soft']}.",
        ]
    shown_off = [r for r in rows if r.shown_max_error is not None and r.shown_max_error > EXACT]
    if shown_off:
        lines += ["", "## Numbers shown to the models that are inexact", ""]
        worst: dict[tuple[str, str], list[AuditRow]] = defaultdict(list)
        for r in shown_off:
            worst[(r.query_type, r.graph_id or "-")].append(r)
        for (qt, graph), rs in sorted(worst.items()):
            wrong_text = sum(1 for r in rs if r.text_ok is False)
            lines.append(
                f"- {qt} on {graph}: {len(rs)} questions, largest error "
                f"{max(r.shown_max_error or 0 for r in rs):.4f}; the printed percentages differ "
                f"from the exact ones, rounded, in {wrong_text}."
            )
        lines += [
            "",
            "Same cause: these conditional probabilities were computed by belief propagation.",
        ]
    if any(r.graph_id == "fork" and r.label_status == "convention" for r in rows):
        lines += ["", f"backadj on fork: {CAUSES['fork']}."]
    listed = [r for r in rows if r.label_status != "agrees"]
    if listed:
        lines += [
            "",
            "## Questions whose label is contradicted or has no uniquely right answer",
            "",
            "| question_id | query type | graph | label | exact answer | exact value | stored value | status | reason |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        for r in listed:
            cells = [
                r.question_id, r.query_type, r.graph_id or "-", r.label, r.exact_answer or "none",
                _show(r.exact_value), _show(r.stored_value), r.label_status, r.reason or "",
            ]  # fmt: skip
            lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines) + "\n"


def read_audit(path: Path) -> AuditFile:
    """An audit file written by `crawdad data audit --json`."""
    try:
        return AuditFile.model_validate_json(read_input(path, "audit file"))
    except FileNotFoundError:
        raise DataError(
            f"audit file not found: {path}. Write one with `crawdad data audit DATA --json {path}`"
        ) from None
    except ValueError as e:
        raise DataError(
            f"{path} is not an audit file written by `crawdad data audit --json` ({str(e).splitlines()[0]}); "
            "write it again"
        ) from None


def contradicted_ids(audit: AuditFile) -> set[str]:
    return {r.question_id for r in audit.rows if r.label_status == "contradicted"}
