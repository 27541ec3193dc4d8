"""A causal graph as the calculator's caller gives it: a small DAG over named variables, with
d-separation (ancestral moral graph) and Pearl's backdoor criterion. Graphs of CLadder size
(up to about a dozen variables), so plain set code is enough."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import combinations

MAX_SET_SEARCH = 14  # variables beyond which adjustment sets are not enumerated


class GraphError(ValueError):
    """The edges do not make a DAG, or a named variable is not in it."""


@dataclass
class DAG:
    parents: dict[str, set[str]] = field(default_factory=dict)

    @classmethod
    def from_edges(cls, edges: Iterable[tuple[str, str]]) -> DAG:
        g = cls()
        for a, b in edges:
            if a == b:
                raise GraphError(f"edge {a}->{b} is a self-loop")
            g.parents.setdefault(a, set())
            g.parents.setdefault(b, set()).add(a)
        cycle = g._cycle()
        if cycle:
            raise GraphError("the edges contain a cycle: " + "->".join(cycle))
        return g

    @property
    def variables(self) -> list[str]:
        return sorted(self.parents)

    def children(self, v: str) -> set[str]:
        return {c for c, ps in self.parents.items() if v in ps}

    def ancestors(self, vs: Iterable[str]) -> set[str]:
        """The variables with a directed path into any of `vs`, `vs` included."""
        seen, stack = set(), list(vs)
        while stack:
            v = stack.pop()
            if v not in seen:
                seen.add(v)
                stack.extend(self.parents.get(v, ()))
        return seen

    def descendants(self, v: str) -> set[str]:
        """Variables reachable from v by directed edges (v excluded)."""
        seen: set[str] = set()
        stack = list(self.children(v))
        while stack:
            c = stack.pop()
            if c not in seen:
                seen.add(c)
                stack.extend(self.children(c))
        return seen

    def require(self, *names: str) -> None:
        missing = [n for n in names if n not in self.parents]
        if missing:
            raise GraphError(
                f"{', '.join(missing)} not in the graph (its variables: {', '.join(self.variables)})"
            )

    def d_separated(self, xs: set[str], ys: set[str], zs: set[str]) -> bool:
        """xs and ys d-separated by zs: disconnected in the moral graph of their ancestors
        once zs is removed (Lauritzen's criterion)."""
        keep = self.ancestors(xs | ys | zs)
        nbrs: dict[str, set[str]] = {v: set() for v in keep}
        for v in keep:
            ps = self.parents[v] & keep
            for p in ps:
                nbrs[v].add(p)
                nbrs[p].add(v)
            for a, b in combinations(ps, 2):  # marry the parents
                nbrs[a].add(b)
                nbrs[b].add(a)
        seen, stack = set(), [x for x in xs if x not in zs]
        while stack:
            v = stack.pop()
            if v in ys:
                return False
            if v in seen:
                continue
            seen.add(v)
            stack.extend(n for n in nbrs[v] if n not in zs and n not in seen)
        return True

    def without_out_edges(self, x: str) -> DAG:
        return DAG({v: (ps - {x}) for v, ps in self.parents.items()})

    def backdoor_valid(self, x: str, y: str, zs: set[str]) -> bool:
        """Pearl's backdoor criterion: no descendant of x in zs, and zs blocks every path
        from x to y that starts with an arrow into x."""
        if zs & self.descendants(x) or x in zs or y in zs:
            return False
        return self.without_out_edges(x).d_separated({x}, {y}, zs)

    def backdoor_sets(self, x: str, y: str) -> list[list[str]]:
        """Every minimal valid backdoor adjustment set, smallest first ([] when none exists)."""
        candidates = sorted(set(self.parents) - {x, y} - self.descendants(x))
        if len(candidates) > MAX_SET_SEARCH:
            candidates = sorted(self.ancestors({x, y}) & set(candidates))
        found: list[set[str]] = []
        for size in range(len(candidates) + 1):
            for combo in combinations(candidates, size):
                s = set(combo)
                if any(f <= s for f in found):
                    continue
                if self.backdoor_valid(x, y, s):
                    found.append(s)
        return [sorted(s) for s in found]

    def mediators(self, x: str, y: str) -> list[str]:
        """Variables on a directed path from x to y."""
        return sorted(self.descendants(x) & self.ancestors({y}) - {x, y})

    def _cycle(self) -> list[str] | None:
        state: dict[str, int] = {}
        path: list[str] = []

        def visit(v: str) -> list[str] | None:
            state[v] = 1
            path.append(v)
            for c in sorted(self.children(v)):
                if state.get(c) == 1:
                    return [*path[path.index(c) :], c]
                if c not in state and (found := visit(c)):
                    return found
            path.pop()
            state[v] = 2
            return None

        for v in self.variables:
            if v not in state and (found := visit(v)):
                return found
        return None
