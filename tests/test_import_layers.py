"""The package's imports go one way: no module imports, directly or through others, a module that
imports it back (deferred imports inside functions and type-only imports count: they are couplings
too), and no import points up a layer. The layers, lowest first: the Dagster-free core (contracts,
scoring, decision, reports, alerts, sources, …), the demo's content, the Dagster building blocks
(``defs``), the code location and the component that assemble them, and the entry points (the CLI and
the local runner). Read from the source (``ast``), so a new circle or upward arrow fails here."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "ragspine_pipeline"
# (layer, module prefixes), highest first; a module is in the first layer one of whose prefixes it has.
LAYERS = [
    (4, ("ragspine_pipeline.cli", "ragspine_pipeline.defs.local", "ragspine_pipeline.defs.dev")),
    (3, ("ragspine_pipeline.definitions", "ragspine_pipeline.component", "ragspine_pipeline.services")),
    (2, ("ragspine_pipeline.defs",)),
    (1, ("ragspine_pipeline.demo",)),
]


def modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        name = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        found[name.removesuffix(".__init__")] = path
    return found


def imports(found: dict[str, Path]) -> set[tuple[str, str]]:
    """Every (importer, imported) pair of the package's modules, an imported name resolved to the
    module it is (``from pkg import submodule``) or is defined in."""
    edges = set()
    for name, path in found.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*parent, *([base] if base else [])])
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in found else base for a in node.names]
            else:
                continue
            for target in targets:
                while target and target not in found:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    edges.add((name, target))
    return edges


def layer(module: str) -> int:
    for level, prefixes in LAYERS:
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return level
    return 0


def circles(edges: set[tuple[str, str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm, iterative)."""
    graph: dict[str, list[str]] = {}
    for a, b in edges:
        graph.setdefault(a, []).append(b)
        graph.setdefault(b, [])
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return found


def test_no_module_imports_one_that_imports_it_back():
    assert circles(imports(modules())) == []


def test_no_import_points_up_a_layer():
    upward = sorted((a, b) for a, b in imports(modules()) if layer(a) < layer(b))
    assert upward == []


def test_the_checks_see_a_circle_and_an_upward_arrow():
    edges = {("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")}
    assert circles(edges) == [["a", "b", "c"]]
    assert layer("ragspine_pipeline.scoring.grounded") < layer("ragspine_pipeline.defs.alerts")
    assert layer("ragspine_pipeline.defs.alerts") < layer("ragspine_pipeline.definitions")
    assert layer("ragspine_pipeline.definitions") < layer("ragspine_pipeline.cli.score")
