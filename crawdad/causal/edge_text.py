"""A graph's edges as one line of text: the answer of a whole-graph item, in records and reports.

The form is `A -> B; C -> D`, edges sorted (case-insensitively), each name as written; a graph
with no edge is `no edges`. Reading is tolerant of what models and extractors write: `;`, `,` or
new lines between edges, `->`, `→` or `=>` as the arrow, list markers and backticks around an
edge. `graph_from_text` matches names to a graph's variables ignoring case and spacing, and
returns the names it could not match (their edges are left out, never guessed).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from crawdad.causal.structure import Edge, Graph

NO_EDGES = "no edges"
ARROW = re.compile(r"\s*(?:->|→|=>|-->)\s*")
_MARKER = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s+")


def format_edges(edges: Iterable[Edge]) -> str:
    """Directed edges -> `A -> B; C -> D` (sorted, repeats and self-loops dropped)."""
    unique = {(a.strip(), b.strip()) for a, b in edges if a.strip() and a.strip() != b.strip()}
    if not unique:
        return NO_EDGES
    ordered = sorted(unique, key=lambda e: (e[0].casefold(), e[1].casefold(), e))
    return "; ".join(f"{a} -> {b}" for a, b in ordered)


def parse_edges(text: str) -> list[Edge]:
    """The edges written in a text (`A -> B` pieces); [] for `no edges` or nothing readable."""
    edges: list[Edge] = []
    # Commas separate edges only in a text that uses neither `;` nor lines (a name may hold one).
    separators = r"[;\n]" if ";" in text or "\n" in text else r",(?![^()]*\))"
    for piece in re.split(separators, text):
        piece = _MARKER.sub("", piece).strip().strip("`*\"'").strip()
        parts = ARROW.split(piece)
        if len(parts) == 2 and parts[0].strip() and parts[1].strip():
            edges.append((parts[0].strip().strip("`*\"'"), parts[1].strip().strip("`*\"'")))
    return edges


def same_edges(a: str, b: str) -> bool:
    """Whether two edge texts name the same edges, ignoring case, spacing and order."""
    return _key(a) == _key(b)


def _key(text: str) -> frozenset[tuple[str, str]]:
    return frozenset((_norm(x), _norm(y)) for x, y in parse_edges(text))


def _norm(name: str) -> str:
    return " ".join(name.casefold().split())


def graph_from_text(text: str, variables: Sequence[str]) -> tuple[Graph, list[str]]:
    """The graph an edge text states over `variables`, and the names it used that are not
    variables (edges naming them are dropped)."""
    known = {_norm(v): v for v in variables}
    edges: list[Edge] = []
    unknown: list[str] = []
    for a, b in parse_edges(text):
        ka, kb = known.get(_norm(a)), known.get(_norm(b))
        unknown += [n for n, k in ((a, ka), (b, kb)) if k is None and n not in unknown]
        if ka is not None and kb is not None and ka != kb:
            edges.append((ka, kb))
    return Graph.of(variables, edges), unknown
