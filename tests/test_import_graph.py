"""The import graph against the contracts setup.cfg declares (tests/importgraph.py reads both), and the
hygiene issue 28 asks for: no cycle, even through type-only imports; few function-level imports, each saying
why; no crowded folder.

Each check runs once on a made-up graph that breaks it (so a check that cannot fail shows), then on the
package, one test per layer or folder, so that a pending fix marks its own test only. ``PENDING`` lists the
tests that fail until the work named in their reason lands: strict, so a fix that lands flags its marker.
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
LAYERS: Layers = CONTRACTS.of_type(Layers)[0]
# The facade and the package's top-level modules and packages (the floors of the ladder): the groups tests
# are split by.
PARTS = [PACKAGE] + sorted(f"{PACKAGE}.{p.stem}" for p in (ROOT / PACKAGE).glob("*")
                           if p.suffix == ".py" and p.name != "__init__.py" or (p / "__init__.py").is_file())

PENDING = {
    # layers: the floor's modules import from a floor above
    "layers:collectors": "collectors take the annotation labels from model/trace.py (helper ingest)",
    "layers:cost": "cost.modelflops -> analysis (helper views); cost.graphs -> views.modules, views.inference",
    "layers:diagnose": "rules read a DiagnosisInput, not the Analysis (helper diagnose)",
    "layers:views": "views take the frames they read, not the Analysis (helper views)",
    "layers:gate": "gate/ -> render.console's text helpers: text.py (helper job); GateResult.report() -> "
                   "render.gate (the lead: the gate result's text is render's)",
    "layers:pipeline": "the rank-0 merge from job/merge.py, not commands/ (helper job)",
    "layers:render": "render.console -> pipeline.SessionResult (the renderers read Result: the lead)",
    # cycles through a part
    "cycles:roofscope.analysis": "views/, diagnose/ and cost.modelflops take narrow inputs (helpers views, diagnose)",
    "cycles:roofscope.cost": "cost.graphs, cost.modelflops in the analysis ring (helper views; the lead)",
    "cycles:roofscope.diagnose": "diagnose/ reads a DiagnosisInput; base <-> fixes (helper diagnose)",
    "cycles:roofscope.views": "views take the frames they read (helper views)",
    "cycles:roofscope.commands": "commands.merge <-> pipeline: job/merge.py (helper job)",
    "cycles:roofscope.gate": "gate <-> render: text.py (helper job) and GateResult.report() (the lead)",
    "cycles:roofscope.pipeline": "pipeline -> commands.merge: job/merge.py (helper job)",
    "cycles:roofscope.render": "render <-> gate, commands.merge, pipeline (helper job; the lead)",
    # forbidden contracts
    "contract:render-reads-results": "the renderers read Result (the lead)",
    "contract:collectors-beside-analysis": "render.console -> pipeline.SessionResult (the lead)",
    "contract:kineto-in-ingest": "every reader goes through ingest.read and model.Trace (helper ingest)",
    "contract:text-helpers": "text.py (helper job)",
    # function-level imports with no reason, by part
    "reasons:roofscope.analysis": "the eager orchestrator imports its stages at the top (the lead)",
    "reasons:roofscope.commands": "commands/merge.py and microbench.py (helper job)",
    "reasons:roofscope.cost": "cost/ (helpers notorch, views; cost/graphs.py: the lead)",
    "reasons:roofscope.diagnose": "diagnose/ (helper diagnose)",
    "reasons:roofscope.job": "job/urls.py -> ingest.trace goes through the readers (helper ingest)",
    "reasons:roofscope.microbench": "microbench/ (helper notorch)",
    "reasons:roofscope.pipeline": "the rank-0 merge call, to job/merge.py (helper job)",
    "reasons:roofscope.render": "render/ (helper job; the lead)",
    "reasons:roofscope.views": "views/ (helper views)",
    "share": "analysis.py's 27 function-level imports (the lead), render/ and the stages' (helpers job, views, "
             "diagnose, notorch)",
}


def pending(test_id: str) -> list[pytest.MarkDecorator]:
    return [pytest.mark.xfail(strict=True, reason=PENDING[test_id])] if test_id in PENDING else []


def each(kind: str, names: list[str]) -> list:
    return [pytest.param(n, id=n, marks=pending(f"{kind}:{n}")) for n in names]


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
    assert "roofscope.diagnose.base" in graph["roofscope.diagnose"]  # relative, from a package


# --- cycles ------------------------------------------------------------------------------------------------------


def test_a_cycle_is_found() -> None:
    made_up = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(made_up) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


@pytest.mark.parametrize("part", each("cycles", PARTS))
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


@pytest.mark.parametrize("most", [pytest.param(0.10, id="10%", marks=pending("share"))])
def test_few_imports_wait_for_a_function(imports: list[Import], most: float) -> None:
    assert function_level_share(imports) <= most


@pytest.mark.parametrize("part", each("reasons", PARTS))
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


def test_every_module_stands_on_a_layer(graph: dict[str, set[str]]) -> None:
    assert missing_layers(graph, LAYERS) == []


@pytest.mark.parametrize("layer", each("layers", [m.rpartition(".")[2] for m in LAYERS.members()]))
def test_the_layer_imports_only_from_below(graph: dict[str, set[str]], layer: str) -> None:
    assert layer_violations(graph, LAYERS, f"{LAYERS.container}.{layer}") == []


@pytest.mark.parametrize("key", each("contract", [c.key for c in CONTRACTS.of_type(Forbidden)]))
def test_forbidden_imports(graph: dict[str, set[str]], key: str) -> None:
    contract = next(c for c in CONTRACTS.of_type(Forbidden) if c.key == key)
    assert forbidden_violations(graph, contract) == [], contract.name
