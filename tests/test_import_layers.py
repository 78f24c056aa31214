"""The core's modules import one way: no module of ``onyxrt`` imports, directly or
through others, a module that imports it back.

The layers, lowest first: errors/status/dtypes/devices/options → kernels/protocol/
hookspecs/limits → graph/loader/external_data/functions/shape_inference → discovery →
partitioner/optimizer/plan/parallel → ortvalue/iobinding → session → api/capi/compat/cli.
A lower module that needs something of a higher one gets it passed in (a callable, an
object, a protocol it declares), or the thing moves down a layer. An import deferred into
a function still counts: it only hides the cycle from the interpreter. Imports under
``if TYPE_CHECKING:`` do not, since they never run.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import onyxrt

CORE = Path(onyxrt.__file__).parent


@dataclass(frozen=True)
class Edge:
    """``source`` imports ``target`` at ``line`` (``deferred``: inside a function)."""

    source: str
    target: str
    line: int
    deferred: bool

    def __str__(self) -> str:
        where = "in a function" if self.deferred else "at module level"
        return f"{self.source} -> {self.target} (line {self.line}, {where})"


def _modules(root: Path) -> dict[str, tuple[Path, bool]]:
    """Dotted module name → (file, is a package), for every ``.py`` file under ``root``."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts.pop()
        found[".".join(parts)] = (path, is_package)
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import statement that can run, with whether it sits inside a function;
    ``if TYPE_CHECKING:`` bodies are skipped (their ``else:`` is kept)."""

    def walk(nodes: Iterable[ast.AST], deferred: bool) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
        for node in nodes:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                yield node, deferred
            elif isinstance(node, ast.If) and _is_type_checking(node.test):
                yield from walk(node.orelse, deferred)
            else:
                inner = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                yield from walk(ast.iter_child_nodes(node), deferred or inner)

    return walk([tree], False)


def _targets(node: ast.Import | ast.ImportFrom, module: str, is_package: bool,
             modules: dict[str, tuple[Path, bool]]) -> set[str]:
    """The modules of ``modules`` whose code must have run for ``node`` to succeed."""
    if isinstance(node, ast.Import):
        names = {alias.name for alias in node.names}
    else:
        if node.level:
            package = module if is_package else module.rpartition(".")[0]
            parts = package.split(".")
            base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
        else:
            base = node.module or ""
        submodules = {f"{base}.{alias.name}" for alias in node.names} & set(modules)
        names = set(submodules)
        # `from pkg import name` of a name that is not a submodule needs pkg's body to have
        # run; so does any import from a package the importer is not inside of.
        if len(submodules) < len(node.names) or not (module == base or module.startswith(base + ".")):
            names.add(base)
    targets = set()
    for name in names & set(modules):
        targets.add(name)
        parts = name.split(".")
        for i in range(1, len(parts)):  # importing a.b.c runs a.b's __init__ first
            ancestor = ".".join(parts[:i])
            if ancestor in modules and not (module == ancestor or module.startswith(ancestor + ".")):
                targets.add(ancestor)
    targets.discard(module)
    return targets


def import_graph(root: Path) -> dict[str, list[Edge]]:
    """Each module of the package at ``root`` → its imports of the package's modules."""
    modules = _modules(root)
    graph: dict[str, list[Edge]] = {name: [] for name in modules}
    for module, (path, is_package) in modules.items():
        for node, deferred in _imports(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            for target in sorted(_targets(node, module, is_package, modules)):
                graph[module].append(Edge(module, target, node.lineno, deferred))
    return graph


def cycles(graph: dict[str, list[Edge]]) -> list[list[Edge]]:
    """One cycle (as its edges) per strongly connected group of modules."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[set[str]] = []

    def visit(v: str) -> None:  # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        for edge in graph[v]:
            w = edge.target
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = set()
            while True:
                w = stack.pop()
                group.add(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(group)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [_cycle_in(graph, group) for group in groups]


def _cycle_in(graph: dict[str, list[Edge]], group: set[str]) -> list[Edge]:
    """A shortest cycle through the group's first module, staying inside the group."""
    start = min(group)
    came_by: dict[str, Edge] = {}
    frontier = [start]
    while frontier:
        following = []
        for v in frontier:
            for edge in graph[v]:
                if edge.target not in group:
                    continue
                if edge.target == start:
                    path = [edge]
                    while path[0].source != start:
                        path.insert(0, came_by[path[0].source])
                    return path
                if edge.target not in came_by:
                    came_by[edge.target] = edge
                    following.append(edge.target)
        frontier = following
    raise AssertionError(f"no cycle found in the group {sorted(group)}")


def _describe(graph: dict[str, list[Edge]], found: list[list[Edge]]) -> str:
    parts = []
    for cycle in found:
        group = _group_of(graph, cycle[0].source)
        parts.append(f"import cycle among {len(group)} modules ({', '.join(sorted(group))}), e.g.:")
        parts.extend(f"  {edge}" for edge in cycle)
        deferred = [e for m in sorted(group) for e in graph[m] if e.deferred and e.target in group]
        if deferred:
            parts.append("  deferred imports inside it (often the upward ones):")
            parts.extend(f"    {edge}" for edge in deferred)
    return "\n".join(parts)


def _group_of(graph: dict[str, list[Edge]], module: str) -> set[str]:
    """The modules that ``module`` reaches and that reach it back."""

    def reach(start: str, forward: bool) -> set[str]:
        seen, todo = {start}, [start]
        while todo:
            v = todo.pop()
            nexts = ([e.target for e in graph[v]] if forward
                     else [m for m, edges in graph.items() if any(e.target == v for e in edges)])
            for w in nexts:
                if w not in seen:
                    seen.add(w)
                    todo.append(w)
        return seen

    return reach(module, True) & reach(module, False)


def test_the_core_has_no_import_cycle():
    graph = import_graph(CORE)
    assert len(graph) > 50 and graph["onyxrt.session"], "the graph did not find the core's modules"
    found = cycles(graph)
    assert not found, (
        f"{_describe(graph, found)}\nMove what both sides need to a lower module, or pass it in "
        "(a callable, an object) instead of importing the higher module; deferring the "
        "import into a function does not break the cycle."
    )


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "pkg"
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def test_a_cycle_through_a_deferred_import_is_reported_with_its_lines(tmp_path):
    root = _package(tmp_path, {
        "__init__.py": "",
        "low.py": "def f():\n    from .high import g\n    return g\n",
        "high.py": "from . import low\n",
    })
    found = cycles(import_graph(root))
    assert [[str(e) for e in cycle] for cycle in found] == [[
        "pkg.high -> pkg.low (line 1, at module level)",
        "pkg.low -> pkg.high (line 2, in a function)",
    ]]


def test_type_checking_imports_and_subpackage_imports_are_told_apart(tmp_path):
    root = _package(tmp_path, {
        "__init__.py": "from .sub import thing\n",
        "sub/__init__.py": "from .leaf import thing\n",
        # The package's own __init__ is already running when its submodules import
        # each other: only importing a *name* from it depends on it.
        "sub/leaf.py": "from typing import TYPE_CHECKING\nfrom . import other\n"
                       "if TYPE_CHECKING:\n    from .. import thing\nthing = 1\n",
        "sub/other.py": "",
    })
    graph = import_graph(root)
    assert cycles(graph) == []
    assert {e.target for e in graph["pkg.sub.leaf"]} == {"pkg.sub.other"}
    assert {e.target for e in graph["pkg"]} == {"pkg.sub"}
