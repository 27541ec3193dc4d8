"""Filters, counts, sorting and paging of the debate table, over index entries only."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from crawdad.records import ALONE
from crawdad.view.index import OUTCOMES, Entry

PAGE_SIZE = 50


def _yn(b: bool) -> str:
    return "yes" if b else "no"


def consensus_value(e: Entry) -> str:
    """The consensus column's value: yes / no for a debate; for agents that answered alone,
    whether their answers agree ("agree" / "differ")."""
    if e.protocol in ALONE:
        return "agree" if e.consensus else "differ"
    return _yn(e.consensus)


@dataclass(frozen=True)
class Facet:
    key: str  # the query parameter
    label: str
    values: Callable[[Entry], Iterable[str]]  # every value of the entry (stop reasons: several)
    order: tuple[str, ...] = ()  # preferred order of the values shown
    numeric: bool = False


FACETS: list[Facet] = [
    Facet("run", "run / variant", lambda e: (e.run,)),
    Facet("rung", "rung", lambda e: (str(e.rung),), numeric=True),
    Facet("query_type", "query type", lambda e: (e.query_type,)),
    Facet("alignment", "alignment", lambda e: (e.alignment,)),
    Facet("protocol", "protocol", lambda e: (e.protocol,)),
    Facet("first", "first speaker", lambda e: (e.first_speaker,)),
    Facet("outcome", "outcome", lambda e: (e.outcome,), order=OUTCOMES),
    Facet("consensus", "consensus (solo: answers agree)", lambda e: (consensus_value(e),)),
    Facet("responses", "responses", lambda e: (str(e.responses),), numeric=True),
    Facet("stop", "stop reason (any turn)", lambda e: e.stop_reasons),
    Facet("error", "errored", lambda e: (_yn(e.errored),)),
]
TOOLS = Facet("tools", "tool use", lambda e: ())  # values set per view (see facets_for)
CONTRADICTED = Facet("contradicted", "label contradicted (audit)", lambda e: ())

SORTS: dict[str, tuple[str, Callable[[Entry], object]]] = {
    "order": ("file order", lambda e: (e.run, e.line_no)),
    "length": ("length (characters)", lambda e: e.chars),
    "time": ("time (s)", lambda e: e.seconds),
    "tokens": ("tokens", lambda e: e.tokens),
    "responses": ("responses", lambda e: e.responses),
}


def facets_for(tool_use: bool, contradicted: set[str] | None) -> list[Facet]:
    """The facets of a view: tool use only when some turn has a tool call, the audit's facet
    only when an audit file was given."""
    out = list(FACETS)
    if tool_use:
        out.append(Facet(TOOLS.key, TOOLS.label, lambda e: (_yn(e.tool_use),)))
    if contradicted is not None:
        out.append(
            Facet(CONTRADICTED.key, CONTRADICTED.label, lambda e: (_yn(e.qid in contradicted),))
        )
    return out


@dataclass
class Result:
    total: int  # debates in the view
    matched: int  # debates passing every filter
    rows: list[Entry]  # this page
    page: int
    pages: int
    # facet key -> value -> debates passing every *other* filter that have this value
    counts: dict[str, Counter[str]] = field(default_factory=dict)


def run_query(
    entries: list[Entry],
    facets: list[Facet],
    params: Mapping[str, str],
    page_size: int = PAGE_SIZE,
    with_counts: bool = True,
) -> Result:
    chosen = {f.key: params[f.key] for f in facets if params.get(f.key)}
    min_responses = _int(params.get("min_responses"), 0)
    counts: dict[str, Counter[str]] = {f.key: Counter() for f in facets}
    matched: list[Entry] = []
    for e in entries:
        if e.responses < min_responses:
            continue
        values = [(f, tuple(f.values(e))) for f in facets]
        failing = [f.key for f, vs in values if f.key in chosen and chosen[f.key] not in vs]
        if not failing:
            matched.append(e)
        if with_counts and len(failing) <= 1:  # counts of a facet ignore that facet's own filter
            for f, vs in values:
                if not failing or failing[0] == f.key:
                    counts[f.key].update(vs)
    key, desc = params.get("sort") or "order", params.get("dir", "desc") == "desc"
    if key not in SORTS:
        key = "order"
    if key == "order":
        desc = params.get("dir") == "desc"
    matched.sort(key=SORTS[key][1], reverse=desc)  # type: ignore[arg-type]
    pages = max(1, -(-len(matched) // page_size))
    page = min(max(_int(params.get("page"), 1), 1), pages)
    rows = matched[(page - 1) * page_size : page * page_size]
    return Result(len(entries), len(matched), rows, page, pages, counts)


def ordered_values(facet: Facet, counter: Counter[str], chosen: str | None) -> list[str]:
    values = set(counter) | ({chosen} if chosen else set())
    if facet.order:
        return [v for v in facet.order if v in values] + sorted(values - set(facet.order))
    if facet.numeric:
        return sorted(values, key=lambda v: (len(v), v))
    return sorted(values)


def _int(text: str | None, default: int) -> int:
    try:
        return int(text) if text else default
    except ValueError:
        return default
