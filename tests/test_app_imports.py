"""The app's modules import each other in one direction only: no two modules under app/ import each other,
directly or round a longer loop (issue 29). Such a loop is what made app.main_window and app.scripted
import each other from inside a function, which works only as long as nobody moves the import.

Read from the source with ast, so Qt is never imported: every ``import`` and ``from ... import`` counts,
at module level, inside a function or under ``if TYPE_CHECKING`` alike, because each one says that one
module needs the other. The engine's own packages are held to the same rule by lint-imports (pyproject.toml).
"""

from __future__ import annotations

import ast
from pathlib import Path

APP = Path(__file__).resolve().parent.parent / "app"


def module_name(path: Path, root: Path) -> str:
    """app/pages/lab/page.py -> app.pages.lab.page; a package's __init__.py is the package."""
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _known(name: str, modules: set[str]) -> str | None:
    """The module a dotted name means: itself, else its longest prefix that is a module (``app.x.Class``)."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def _imported(node: ast.Import | ast.ImportFrom, module: str, is_package: bool, modules: set[str]) -> set[str]:
    """The modules among ``modules`` that one import statement of ``module`` loads by name."""
    if isinstance(node, ast.Import):
        return {m for alias in node.names if (m := _known(alias.name, modules))}
    base = node.module or ""
    if node.level:  # from . import x / from ..y import z, relative to the module's package
        package = module.split(".") if is_package else module.split(".")[:-1]
        anchor = package[: len(package) - (node.level - 1)]
        base = ".".join(anchor + ([base] if base else []))
    found = set()
    for alias in node.names:
        # from app.pages.lab import page: the submodule; from app.session import LabSession: the module
        m = _known(f"{base}.{alias.name}", modules) if alias.name != "*" else _known(base, modules)
        if m:
            found.add(m)
    return found


def import_graph(sources: dict[str, tuple[str, bool]]) -> dict[str, set[str]]:
    """module -> the modules it imports, for sources {module name: (its source, whether it is a package)}; only
    imports of those modules count (Qt, the engine and the standard library are not part of the graph)."""
    modules = set(sources)
    graph: dict[str, set[str]] = {}
    for module, (source, is_package) in sources.items():
        edges: set[str] = set()
        for node in ast.walk(ast.parse(source)):  # ast.walk reaches into functions, classes and if blocks
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                edges |= _imported(node, module, is_package, modules)
        edges.discard(module)
        graph[module] = edges
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One loop for each group of modules that reach each other (Tarjan's strongly connected components),
    as the modules in import order with the first repeated at the end: [a, b, a]."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.add(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(group)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [_loop_in(group, graph) for group in groups]


def _loop_in(group: set[str], graph: dict[str, set[str]]) -> list[str]:
    """A shortest loop from the group's first module back to itself, through the group only (breadth first)."""
    start = min(group)
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for v in frontier:
            for w in sorted(graph[v] & group):
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return [start, *reversed(path[:-1]), start]
                if w not in came_from:
                    came_from[w] = v
                    following.append(w)
        frontier = following
    raise AssertionError(f"{sorted(group)} is no cycle")  # Tarjan's groups always hold one


def app_sources(root: Path = APP) -> dict[str, tuple[str, bool]]:
    return {
        module_name(path, root): (path.read_text(encoding="utf-8"), path.name == "__init__.py")
        for path in sorted(root.rglob("*.py"))
    }


def test_no_two_app_modules_import_each_other():
    graph = import_graph(app_sources())
    # the parse found the window's imports: a graph with no edges would pass for the wrong reason
    assert {"app.pages.lab.page", "app.session"} <= graph["app.main_window"]
    cycles = find_cycles(graph)
    assert not cycles, "modules under app/ import each other (move what both need into a module of its own):\n" + (
        "\n".join(" -> ".join(loop) for loop in cycles)
    )


def test_a_loop_through_an_import_inside_a_function_is_named():
    sources = {
        "app": ("", True),
        "app.window": ("from app.names import NAMES\n\ndef demo():\n    from app.script import Script\n", False),
        "app.script": ("import app.names\nfrom app.widgets.bar import Bar\n", False),
        "app.names": ("from PySide6.QtCore import Qt\n", False),
        "app.widgets": ("from . import bar\n", True),
        "app.widgets.bar": ("from ..window import MainWindow\n", False),
    }
    graph = import_graph(sources)
    assert graph["app.window"] == {"app.names", "app.script"}
    assert graph["app.widgets"] == {"app.widgets.bar"}  # a relative import of a submodule
    assert graph["app.widgets.bar"] == {"app.window"}  # and of a name from a module one package up
    assert find_cycles(graph) == [["app.script", "app.widgets.bar", "app.window", "app.script"]]
    # two modules that import each other directly
    assert find_cycles({"app.a": {"app.b"}, "app.b": {"app.a"}}) == [["app.a", "app.b", "app.a"]]
    assert find_cycles({"app.a": {"app.b"}, "app.b": set()}) == []
