"""A causal graph as the calculator's caller gives it: a DAG over named variables, with
d-separation (ancestral moral graph) and Pearl's backdoor criterion.

The graph comes from a model's tool call, so nothing here recurses or grows with the input
beyond a polynomial: every walk is iterative (a chain of thousands of edges is fine), and the
search for minimal adjustment sets is exhaustive only over a few candidates (`MAX_SET_SEARCH`);
past that it gives one minimal set, found greedily from the treatment's parents."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
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

    @cached_property
    def _children(self) -> dict[str, set[str]]:
        """Each variable's children (the graph is complete once built: `from_edges`)."""
        out: dict[str, set[str]] = {v: set() for v in self.parents}
        for v, ps in self.parents.items():
            for p in ps:
                out.setdefault(p, set()).add(v)
        return out

    def children(self, v: str) -> set[str]:
        return set(self._children.get(v, ()))

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
        stack = list(self._children.get(v, ()))
        while stack:
            c = stack.pop()
            if c not in seen:
                seen.add(c)
                stack.extend(self._children.get(c, ()))
        return seen

    def require(self, *names: str) -> None:
        missing = list(dict.fromkeys(n for n in names if n not in self.parents))
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
        """Every minimal valid backdoor adjustment set, smallest first ([] when none exists).
        A minimal set lies among the ancestors of x and y; when more than `MAX_SET_SEARCH`
        of them are candidates, one minimal set (found greedily) instead of all."""
        descendants = self.descendants(x)
        candidates = sorted(self.ancestors({x, y}) - {x, y} - descendants)
        if self.backdoor_valid(x, y, set()):
            return [[]]
        if len(candidates) > MAX_SET_SEARCH:
            found = self._greedy_set(x, y, descendants)
            return [found] if found is not None else []
        found_sets: list[set[str]] = []
        for size in range(1, len(candidates) + 1):
            for combo in combinations(candidates, size):
                s = set(combo)
                if any(f <= s for f in found_sets):
                    continue
                if self.backdoor_valid(x, y, s):
                    found_sets.append(s)
        return [sorted(s) for s in found_sets]

    def _greedy_set(self, x: str, y: str, descendants: set[str]) -> list[str] | None:
        """One minimal backdoor set: x's parents (valid whenever y is not one of them), less
        every variable the set stays valid without, in name order."""
        current = set(self.parents[x]) - {y} - descendants
        if not self.backdoor_valid(x, y, current):
            return None
        for v in sorted(current):
            if self.backdoor_valid(x, y, current - {v}):
                current.discard(v)
        return sorted(current)

    def mediators(self, x: str, y: str) -> list[str]:
        """Variables on a directed path from x to y."""
        return sorted(self.descendants(x) & self.ancestors({y}) - {x, y})

    def _cycle(self) -> list[str] | None:
        """A directed cycle, as [a, b, ..., a], or None: Kahn's order removes every variable
        of a DAG; what it leaves has a parent left in each, and walking up those parents
        must come round."""
        indegree = {v: len(ps) for v, ps in self.parents.items()}
        ready = [v for v, n in indegree.items() if n == 0]
        removed = 0
        while ready:
            v = ready.pop()
            removed += 1
            for c in self._children.get(v, ()):
                indegree[c] -= 1
                if indegree[c] == 0:
                    ready.append(c)
        if removed == len(self.parents):
            return None
        left = {v for v, n in indegree.items() if n > 0}
        walk, at = [min(left)], {min(left): 0}
        while True:
            parent = min(self.parents[walk[-1]] & left)
            if parent in at:
                loop = [*walk[at[parent] :], parent]
                return loop[::-1]  # walked against the edges
            at[parent] = len(walk)
            walk.append(parent)
