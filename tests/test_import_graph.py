"""The package's import graph, read from the source with ``ast``: no module imports itself back
through others, and the layers import downward only (docs/architecture.md).

Every import statement counts, also those inside functions (a lazy import is still a
dependency, and a lazy cycle is still a cycle); only imports under ``if TYPE_CHECKING:`` are
left out, since they never run. ``from pkg import name`` is an edge to ``pkg.name`` when that
is a module, else to ``pkg``; a package's ``__init__`` is the package's own node.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "roofscope"


def _modules() -> dict[str, tuple[Path, bool]]:
    mods = {}
    for path in (ROOT / PACKAGE).rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        mods[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return mods


def _type_checking_only(tree: ast.AST) -> set[int]:
    """ids of the nodes under ``if TYPE_CHECKING:`` (or ``typing.TYPE_CHECKING``)."""
    hidden: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If):
            test = node.test
            name = test.id if isinstance(test, ast.Name) else test.attr if isinstance(test, ast.Attribute) else None
            if name == "TYPE_CHECKING":
                hidden.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return hidden


def _targets(module: str, is_package: bool, node: ast.Import | ast.ImportFrom, mods: dict) -> set[str]:
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        if node.level:
            base = module.split(".") if is_package else module.split(".")[:-1]
            base = base[:len(base) - (node.level - 1)]
            stem = ".".join(base + ([node.module] if node.module else []))
        else:
            stem = node.module or ""
        names = [f"{stem}.{a.name}" if f"{stem}.{a.name}" in mods else stem for a in node.names]
    found = set()
    for name in names:
        while name and name not in mods:   # `import roofscope.x.y` of a name inside x.y; outside modules vanish
            name = name.rpartition(".")[0]
        if name and name != module:
            found.add(name)
    return found


def import_graph() -> dict[str, set[str]]:
    mods = _modules()
    graph: dict[str, set[str]] = {}
    for module, (path, is_package) in mods.items():
        tree = ast.parse(path.read_text(), str(path))
        hidden = _type_checking_only(tree)
        graph[module] = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in hidden:
                graph[module] |= _targets(module, is_package, node, mods)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            child = next(edges, None)
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


def _within(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def violations(graph: dict[str, set[str]], layer: str, forbidden: tuple[str, ...]) -> list[str]:
    return sorted(f"{m} -> {t}" for m, targets in graph.items() if _within(m, (layer,))
                  for t in targets if _within(t, forbidden))


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    # Parsed when a test asks, not at import: collecting the suite reads no source.
    return import_graph()


UPPER = ("roofscope.render", "roofscope.commands", "roofscope.cli", "roofscope.pipeline", "roofscope.context")
# The analysis entry points: collectors record, the pipeline analyzes what they recorded.
RESULT = ("roofscope.analysis", "roofscope.job.ranks")


def test_the_graph_is_read_from_every_module(graph) -> None:
    assert len(graph) > 100
    assert "roofscope.analysis" in graph["roofscope.pipeline"]          # a function-level import
    assert "roofscope.collectors.session" not in graph["roofscope.pipeline"]      # under TYPE_CHECKING only
    assert "roofscope.diagnose.base" in graph["roofscope.diagnose"]  # relative, from a package
    assert "roofscope.diagnose.inference" in graph["roofscope.diagnose.overhead"]


def test_a_cycle_is_found() -> None:
    made_up = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(made_up) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles(graph) -> None:
    assert cycles(graph) == []


def test_the_facade_is_imported_by_no_module(graph) -> None:
    # roofscope/__init__.py reaches every layer (lazily): importing it from inside would close a cycle.
    assert [m for m, targets in graph.items() if PACKAGE in targets] == []


@pytest.mark.parametrize("layer, forbidden", [
    ("roofscope.collectors", UPPER + RESULT),
    ("roofscope.analyzers", UPPER + ("roofscope.collectors",)),
    ("roofscope.render", ("roofscope.commands", "roofscope.cli", "roofscope.pipeline", "roofscope.context",
                           "roofscope.collectors")),
    ("roofscope.run", UPPER + ("roofscope.analyzers", "roofscope.collectors")),
    ("roofscope.pipeline", ("roofscope.cli", "roofscope.context")),
])
def test_layers_import_downward(graph, layer: str, forbidden: tuple[str, ...]) -> None:
    assert violations(graph, layer, forbidden) == []


def test_the_pipeline_reaches_into_no_command(graph) -> None:
    # Rank 0's merge of a distributed job is job/merge.py's, which `roofscope merge` calls too.
    assert {t for t in graph["roofscope.pipeline"] if _within(t, ("roofscope.commands",))} == set()


def test_only_renderers_import_the_console_renderer(graph) -> None:
    # The text helpers everyone shares are in text.py; the console summary is found through render/registry.py.
    assert [m for m, targets in graph.items() if "roofscope.render.console" in targets
            and not _within(m, ("roofscope.render",))] == []
