"""The demo's modules import each other without a cycle, and the core never imports the demo.

Read from the source with ``ast`` (no import runs), counting every import: at the top, inside a function
and under ``TYPE_CHECKING`` alike.
"""

from __future__ import annotations

import ast
from pathlib import Path

import ragspine_pipeline

PACKAGE = Path(ragspine_pipeline.__file__).parent


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, known: set[str]) -> set[str]:
    """The project modules ``path`` imports (``from a import b`` names ``a.b`` when that is a module)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return found & known


def _graph() -> dict[str, set[str]]:
    paths = {_module_name(path): path for path in PACKAGE.rglob("*.py")}
    known = set(paths)
    return {name: _imports(path, known) - {name} for name, path in paths.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as a path of module names, or None (depth-first, three colours)."""
    state: dict[str, str] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_the_demo_modules_import_each_other_without_a_cycle():
    graph = _graph()
    demo = {name for name in graph if name.startswith("ragspine_pipeline.demo.")}
    assert {"ragspine_pipeline.demo.reference_engine", "ragspine_pipeline.demo.reference_outcome"} <= demo
    assert _cycle({name: graph[name] & demo for name in demo}) is None


def test_the_cycle_finder_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_the_core_never_imports_the_demo():
    core = tuple(f"ragspine_pipeline.{layer}" for layer in ("contracts", "scoring", "decision"))
    offenders = {
        name: sorted(m for m in imported if m.startswith("ragspine_pipeline.demo"))
        for name, imported in _graph().items()
        if name.startswith(core)
    }
    assert {name: found for name, found in offenders.items() if found} == {}
