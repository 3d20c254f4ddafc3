"""The import graph of the project's source: no cycle, and observability never imports jobs.

Parsed with `ast`, nothing imported. Counted: every `import` and `from ...
import` in a module, at top level and inside functions and classes
(function-local imports hide cycles, they do not remove them). Not counted:
imports under `if TYPE_CHECKING:` (never run), dynamic imports by string
(`importlib`, Celery's "module:attr" settings), and the implicit import of
a package's `__init__` when one of its submodules is imported (a package
re-exporting its submodules would otherwise be a cycle with each of them).
`from package import name` counts as an import of `package.name` when that
is a module, else of `package`.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("config", "jobs", "observability", "devstack", "bench")
# Cycles allowed until the code that makes them is rewritten: (module, module) edges
# closing a cycle, each with the reason. Empty: keep it so.
ALLOWED_CYCLE_EDGES: dict[tuple[str, str], str] = {}


def _modules() -> dict[str, tuple[Path, bool]]:
    """{dotted name: (path, is a package)} of every project module (migrations left out)."""
    modules = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            modules[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return modules


def _imports(
    nodes: Sequence[ast.AST], *, type_checking: bool
) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement in `nodes` and below; under `if TYPE_CHECKING:` only if `type_checking`."""
    for node in nodes:
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING"):
            if type_checking:
                yield from _imports(node.body, type_checking=type_checking)
            yield from _imports(node.orelse, type_checking=type_checking)
        else:
            yield from _imports(list(ast.iter_child_nodes(node)), type_checking=type_checking)


def _imported_names(node: ast.Import | ast.ImportFrom, *, package: str) -> Iterator[str]:
    """Dotted names an import statement may load: `a.b` for `import a.b`, `a.b` and `a` for
    `from a import b`, relative imports resolved against `package`."""
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
        return
    base = node.module or ""
    if node.level:
        parts = package.split(".")
        parts = parts[: len(parts) - (node.level - 1)]
        base = ".".join([*parts, *([node.module] if node.module else [])])
    for alias in node.names:
        yield f"{base}.{alias.name}"
    yield base


def _resolve(name: str, modules: dict[str, tuple[Path, bool]]) -> str | None:
    """The project module `name` loads (its longest prefix that is one), or None."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def _targets(
    node: ast.Import | ast.ImportFrom, *, package: str, modules: dict[str, tuple[Path, bool]]
) -> set[str]:
    """Project modules one import statement in `package` loads."""
    names = list(_imported_names(node, package=package))
    targets = [t for t in (_resolve(n, modules) for n in names) if t is not None]
    if isinstance(node, ast.ImportFrom) and targets:
        # `from a import b`: the submodule a.b when it is one, else the module a.
        submodules = [t for t in targets[:-1] if t != targets[-1]]
        targets = submodules or targets[-1:]
    return set(targets)


def import_graph(*, type_checking: bool = False) -> dict[str, set[str]]:
    """{module: project modules it imports} over PACKAGES."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, (path, is_package) in modules.items():
        package = name if is_package else name.rpartition(".")[0]
        edges = graph.setdefault(name, set())
        for node in _imports([ast.parse(path.read_text())], type_checking=type_checking):
            edges.update(_targets(node, package=package, modules=modules) - {name})
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module, each sorted (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

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
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _describe(component: list[str], graph: dict[str, set[str]]) -> str:
    members = set(component)
    edges = [f"{a} -> {b}" for a in component for b in sorted(graph[a] & members)]
    return "cycle: " + ", ".join(edges)


def test_import_graph_has_no_cycle() -> None:
    graph = import_graph()
    for edge in ALLOWED_CYCLE_EDGES:
        graph[edge[0]].discard(edge[1])
    found = cycles(graph)
    assert not found, "\n".join(_describe(c, graph) for c in found)


def test_import_graph_observability_imports_nothing_from_jobs() -> None:
    graph = import_graph(type_checking=True)
    offending = {
        f"{module} -> {target}"
        for module, targets in graph.items()
        if module.partition(".")[0] == "observability"
        for target in targets
        if target.partition(".")[0] == "jobs"
    }
    assert not offending, sorted(offending)


def test_import_graph_sees_function_local_imports_and_a_cycle_through_them() -> None:
    # given a module whose only import of another sits inside a function
    tree = ast.parse("def f():\n    from a import x\n")

    # when its imports are walked into the graph a -> b -> c
    local = {
        n.module for n in _imports([tree], type_checking=False) if isinstance(n, ast.ImportFrom)
    }
    graph = {"a": {"b"}, "b": {"c"}, "c": {m for m in local if m}}

    # then the cycle through the local import is reported
    assert cycles(graph) == [["a", "b", "c"]]


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from jobs import selectors", {"jobs.selectors"}),
        ("from jobs.kinds import policy_for", {"jobs.kinds"}),
        ("import jobs.kinds.registry", {"jobs.kinds.registry"}),
        ("from . import metrics", {"observability.metrics"}),
        ("if TYPE_CHECKING:\n    from jobs import selectors", set()),
        ("if TYPE_CHECKING:\n    pass\nelse:\n    from jobs import clock", {"jobs.clock"}),
    ],
)
def test_import_graph_resolves_an_import_to_the_module_it_loads(
    source: str, expected: set[str]
) -> None:
    modules = _modules()
    found: set[str] = set()
    for node in _imports([ast.parse(source)], type_checking=False):
        found |= _targets(node, package="observability", modules=modules)
    assert found == expected
