"""The import graph against the contracts setup.cfg declares (tests/importgraph.py reads both), and the
hygiene issue 28 asks for: no cycle, even through type-only imports; few function-level imports, each saying
why; no crowded folder.

Each check runs once on a made-up graph that breaks it (so a check that cannot fail shows), then on the
package, one test per layer, part or contract, so that a failure names the floor that broke it.
"""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.importgraph import (CONFIG, FUNCTION, PACKAGE, ROOT, TOP, TYPE_ONLY, Forbidden, Import, Layer, Layers,
                               crowded, cycles, forbidden_violations, function_level_share, graph_of,
                               layer_violations, missing_layers, modules, read_contracts, read_imports, unexplained,
                               within)

CONTRACTS = read_contracts(CONFIG)   # setup.cfg only: collecting the suite parses no source
LADDERS: list[Layers] = CONTRACTS.of_type(Layers)   # the package's floors, then the stages' inside analyzers/
LAYERS: Layers = LADDERS[0]
# The facade and the package's top-level modules and packages (the floors of the ladder): the groups tests
# are split by.
PARTS = [PACKAGE] + sorted(f"{PACKAGE}.{p.stem}" for p in (ROOT / PACKAGE).glob("*")
                           if p.suffix == ".py" and p.name != "__init__.py" or (p / "__init__.py").is_file())

def each(names: list[str]) -> list:
    return [pytest.param(n, id=n) for n in names]


def part_of(module: str, part: str) -> bool:
    return module == part if part == PACKAGE else within(module, (part,))


@pytest.fixture(scope="module")
def imports() -> list[Import]:
    return read_imports()


@pytest.fixture(scope="module")
def graph(imports: list[Import]) -> dict[str, set[str]]:
    return graph_of(imports, set(modules()))


# --- the graph is read right ------------------------------------------------------------------------------------


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return tmp_path


def test_every_import_is_an_edge_and_knows_its_place(tmp_path: Path) -> None:
    root = _package(tmp_path, {
        "__init__.py": "",
        "a.py": """\
            from typing import TYPE_CHECKING
            from pkg import b
            if TYPE_CHECKING:
                from pkg.c import C
            def f():
                # start-up time:
                # c pulls in pandas
                from pkg import c
                import pkg.d
                from . import e  # optional dependency
                from pkg.b import name
            """,
        "b.py": "from .sub import x\n", "c.py": "", "d.py": "", "e.py": "",
        "sub/__init__.py": "", "sub/x.py": "",
    })
    edges = {(e.source, e.target, e.where, e.reason) for e in read_imports(root, "pkg")}
    assert edges == {
        ("pkg.a", "pkg.b", TOP, ""), ("pkg.a", "pkg.c", TYPE_ONLY, ""),
        ("pkg.a", "pkg.c", FUNCTION, "start-up time: c pulls in pandas"),
        ("pkg.a", "pkg.d", FUNCTION, "start-up time: c pulls in pandas"),   # one comment heads the block
        ("pkg.a", "pkg.e", FUNCTION, "optional dependency"),
        ("pkg.a", "pkg.b", FUNCTION, ""),   # a comment on a line speaks for that line only
        ("pkg.b", "pkg.sub.x", TOP, ""),
    }


def test_the_package_graph_is_read(graph: dict[str, set[str]]) -> None:
    assert CONTRACTS.root_package == PACKAGE and len(graph) > 100
    assert "roofscope.commands.analyze" in graph["roofscope.cli"]      # a function-level import
    assert "roofscope.analyzers.diagnose.base" in graph["roofscope.analyzers.diagnose"]  # relative, from a package


# --- cycles ------------------------------------------------------------------------------------------------------


def test_a_cycle_is_found() -> None:
    made_up = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(made_up) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


@pytest.mark.parametrize("part", each(PARTS))
def test_no_cycle_runs_through(graph: dict[str, set[str]], part: str) -> None:
    # Type-only imports count: a type-level circle is a design circle, and the one that import-linter sees.
    assert [c for c in cycles(graph) if any(part_of(m, part) for m in c)] == []


def test_the_facade_is_imported_by_no_module(graph: dict[str, set[str]]) -> None:
    # roofscope/__init__.py reaches every layer (lazily): importing it from inside would close a cycle, and the
    # layers contract checks direct imports only because no chain can climb through the container.
    assert [m for m, targets in graph.items() if PACKAGE in targets] == []


# --- function-level imports ---------------------------------------------------------------------------------------


def test_function_level_imports_are_counted_and_need_a_reason() -> None:
    made_up = [Import("a", "b", TOP, 1), Import("a", "c", FUNCTION, 5, "optional dependency"),
               Import("a", "d", FUNCTION, 9), Import("a", "e", TYPE_ONLY, 2)]
    assert function_level_share(made_up) == 0.5
    assert unexplained(made_up) == ["a:9 -> d"]


def test_few_imports_wait_for_a_function(imports: list[Import]) -> None:
    assert function_level_share(imports) <= 0.10


@pytest.mark.parametrize("part", each(PARTS))
def test_function_level_imports_say_why(imports: list[Import], part: str) -> None:
    # The reason sits on the import's line or heads its block: an optional dependency, start-up time, a cycle.
    assert unexplained([e for e in imports if part_of(e.source, part)]) == []


# --- folders -------------------------------------------------------------------------------------------------------


def test_a_crowded_folder_is_found(tmp_path: Path) -> None:
    root = _package(tmp_path, {"__init__.py": "", **{f"big/m{i}.py": "" for i in range(4)}, "big/__init__.py": ""})
    assert crowded(root, "pkg", most=3) == {"pkg/big": 4}
    assert crowded(root, "pkg", most=4) == {}


def test_no_folder_holds_more_than_15_modules() -> None:
    assert crowded() == {}


# --- contracts -----------------------------------------------------------------------------------------------------


def test_the_contracts_are_read(tmp_path: Path) -> None:
    cfg = tmp_path / "setup.cfg"
    cfg.write_text(textwrap.dedent("""\
        [importlinter]
        root_package = p
        [importlinter:contract:ladder]
        name = ladder
        type = layers
        containers =
            p
        exhaustive = true
        layers =
            top
            mid | side
            (gone) : low
        ignore_imports =
            p.low -> p.top
        [importlinter:contract:no]
        name = no
        type = forbidden
        source_modules =
            p.top
        forbidden_modules =
            p.low
        allow_indirect_imports = true
        """))
    ladder, no = read_contracts(cfg).contracts
    assert [(layer.modules, layer.independent) for layer in ladder.layers] == [
        (("p.top",), True), (("p.mid", "p.side"), True), (("p.gone", "p.low"), False)]
    assert ladder.layers[2].optional == {"p.gone"} and ladder.ignore == {("p.low", "p.top")}
    assert ladder.exhaustive and ladder.container == "p"
    assert no == Forbidden("no", "no", ("p.top",), ("p.low",), indirect=False)


def test_a_layer_violation_is_found() -> None:
    made_up = Layers("t", "t", (Layer(("p.top",), True), Layer(("p.mid", "p.side"), True),
                                Layer(("p.low", "p.base"), False)),
                     container="p", exhaustive=True, ignore=frozenset({("p.base", "p.top")}))
    graph = {"p.top": {"p.mid"}, "p.mid": {"p.low", "p.side.x"}, "p.side.x": {"p.top"},
             "p.low": {"p.base"}, "p.base": {"p.low", "p.top"}, "p.stray": set()}
    assert layer_violations(graph, made_up) == ["p.mid -> p.side.x", "p.side.x -> p.top"]
    assert layer_violations(graph, made_up, "p.side") == ["p.side.x -> p.top"]
    assert missing_layers(graph, made_up) == ["p.stray"]


def test_a_forbidden_chain_is_found() -> None:
    graph = {"p.a": {"p.b"}, "p.b": {"p.c.x"}, "p.c.x": set(), "p.d": {"p.c.x"}}
    direct = Forbidden("f", "f", ("p.a", "p.d"), ("p.c",), indirect=False)
    assert forbidden_violations(graph, direct) == ["p.d -> p.c.x"]
    chains = Forbidden("f", "f", ("p.a", "p.d"), ("p.c",), indirect=True)
    assert forbidden_violations(graph, chains) == ["p.a -> p.b -> p.c.x", "p.d -> p.c.x"]
    ignored = Forbidden("f", "f", ("p.a",), ("p.c",), ignore=frozenset({("p.b", "p.c.x")}))
    assert forbidden_violations(graph, ignored) == []


@pytest.mark.parametrize("key", each([c.key for c in LADDERS]))
def test_every_module_stands_on_a_layer(graph: dict[str, set[str]], key: str) -> None:
    assert missing_layers(graph, next(c for c in LADDERS if c.key == key)) == []


@pytest.mark.parametrize("key,layer", [pytest.param(c.key, m, id=m) for c in LADDERS for m in c.members()])
def test_the_layer_imports_only_from_below(graph: dict[str, set[str]], key: str, layer: str) -> None:
    assert layer_violations(graph, next(c for c in LADDERS if c.key == key), layer) == []


@pytest.mark.parametrize("key", each([c.key for c in CONTRACTS.of_type(Forbidden)]))
def test_forbidden_imports(graph: dict[str, set[str]], key: str) -> None:
    contract = next(c for c in CONTRACTS.of_type(Forbidden) if c.key == key)
    assert forbidden_violations(graph, contract) == [], contract.name
