"""The house: no import cycles inside crawdad/ and analysis/, crawdad never imports the analysis,
and no two modules share a name unless ARCHITECTURE.md says why (a fake of the real part, or one
topic in the metrics and figures layers).

The graph is drawn from every import statement in the source (module level, inside functions and
under TYPE_CHECKING alike): a cycle through a deferred import is still a cycle in the design.
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("crawdad", "analysis")
# Same file name, one job seen from two sides: the fake of a real part, an interface module,
# one topic as metrics and as figures, a package's entry point.
SHARED_NAMES = {
    "__init__.py",
    "__main__.py",
    "base.py",  # backends/, protocols/, tasks/, tools/: each package's small interface
    "judge.py",  # protocols/judge.py and fake/judge.py (the fake judge model)
    "ollama.py",  # backends/ollama.py (the client) and serving/engines/ollama.py (the server)
    "confidence.py",  # analysis/metrics and analysis/figures
    "experiment.py",  # run/experiment.py, analysis/metrics and analysis/figures
    "protocols.py",  # analysis/metrics and analysis/figures
    "stopping.py",  # analysis/metrics and analysis/figures (an experiment's stopping decisions)
    "servers.py",  # analysis/metrics and analysis/figures
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[0] == "analysis":  # the checkout's analysis/ is the package crawdad.analysis
        parts = ["crawdad", *parts]
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


def _resolve(name: str, known: dict[str, Path]) -> str | None:
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def _from_base(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The module a `from ... import` names, relative imports resolved."""
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - node.level + 1]
    return ".".join([*base, node.module] if node.module else base)


def _targets(node: ast.Import | ast.ImportFrom, module: str, is_package: bool, known: set[str]):
    """The modules one import statement loads: `from pkg import mod` loads pkg.mod, `from mod
    import name` loads mod."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    base = _from_base(node, module, is_package)
    return [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]


def import_graph() -> dict[str, set[str]]:
    known = modules()
    graph: dict[str, set[str]] = {}
    for name, path in known.items():
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import | ast.ImportFrom):
                for target in _targets(node, name, path.name == "__init__.py", set(known)):
                    if target.split(".")[0] in PACKAGES and (found := _resolve(target, known)):
                        deps.add(found)
        deps.discard(name)
        graph[name] = deps
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(graph) == [["a", "b", "c"]]


def test_the_graph_reads_deferred_and_relative_imports() -> None:
    tree = ast.parse("def f():\n    from . import sibling\n    from crawdad.x import y\n")
    first, second = [n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    known = {"crawdad.pkg.sibling", "crawdad.x"}
    assert _targets(first, "crawdad.pkg.mod", False, known) == ["crawdad.pkg.sibling"]
    assert _targets(second, "crawdad.pkg.mod", False, known) == ["crawdad.x"]


def test_no_import_cycles() -> None:
    assert cycles(import_graph()) == []


def test_only_the_cli_the_viewer_and_the_notebook_api_import_the_analysis() -> None:
    graph = import_graph()
    top = ("crawdad.cli", "crawdad.view", "crawdad.notebook")
    offenders = {
        m: sorted(d for d in deps if d.startswith("crawdad.analysis"))
        for m, deps in graph.items()
        if not m.startswith((*top, "crawdad.analysis"))
    }
    assert {m: d for m, d in offenders.items() if d} == {}


def test_lower_layers_do_not_import_upper_ones() -> None:
    """The direction ARCHITECTURE.md draws: the engine, records, backends and tools never reach
    up into protocols, tasks' runs or the CLI."""
    upper = ("crawdad.cli", "crawdad.run", "crawdad.protocols", "crawdad.view", "crawdad.bench")
    lower = ("crawdad.causal", "crawdad.records", "crawdad.backends", "crawdad.tools")
    graph = import_graph()
    bad = {
        m: sorted(d for d in deps if d.startswith(upper))
        for m, deps in graph.items()
        if m.startswith(lower)
    }
    assert {m: d for m, d in bad.items() if d} == {}


def test_module_names_say_one_job() -> None:
    names = Counter(p.name for p in modules().values())
    assert sorted(n for n, k in names.items() if k > 1 and n not in SHARED_NAMES) == []


def test_the_causal_engine_stands_alone() -> None:
    """crawdad/causal/ is exact causal inference over a model: it reads no dataset, no record and
    no config, so the data writers, the tools, scoring and the tasks can all build on it."""
    graph = import_graph()
    reach = {
        d
        for m, deps in graph.items()
        if m.startswith("crawdad.causal")
        for d in deps
        if not d.startswith("crawdad.causal")
    }
    assert reach <= {"crawdad.errors"}


def _layout_block() -> str:
    page = (ROOT / "docs" / "explanation" / "architecture.md").read_text()
    return page.split("```", 2)[1]


def test_the_documented_layout_matches_the_tree() -> None:
    """Every folder the documented layout names exists, and every package of crawdad/ is named."""
    block = _layout_block()
    named: set[str] = set()
    parent = ""
    for line in block.splitlines():
        first = line.split()[0] if line.strip() else ""
        if not first.endswith("/"):
            continue
        if line.startswith("  "):
            named.add(parent + first.rstrip("/"))
        else:
            parent = first
            named.add(first.rstrip("/"))
    missing = sorted(n for n in named if not (ROOT / n).is_dir())
    packages = {f"crawdad/{p.parent.name}" for p in (ROOT / "crawdad").glob("*/__init__.py")}
    assert missing == [] and sorted(packages - named) == []


# Files that may write: the one report writer, figure saving (which it calls), the HTML made
# from report.md, and the synthetic run folders of tests and demos.
WRITERS = {"report_files.py", "figures/_style.py", "html.py", "synthetic_runs.py"}


def test_only_the_report_writer_writes_files_in_the_analysis() -> None:
    """A report section computes; `ReportWriter` writes (issue: no module keeps its own table
    or figure writer)."""
    found = []
    for path in sorted((ROOT / "analysis").rglob("*.py")):
        if path.relative_to(ROOT / "analysis").as_posix() in WRITERS:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                f = node.func
                name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
                if name in {"to_csv", "write_text", "write_bytes", "savefig", "save"}:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} {name}")
    assert found == []
