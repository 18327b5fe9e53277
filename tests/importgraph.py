"""The package's import graph, read from the source with ``ast``, and the import contracts setup.cfg declares.

Every import statement is an edge, wherever it stands: at module top, inside a function (a lazy import is
still a dependency, and a lazy cycle still a cycle) and under ``if TYPE_CHECKING:`` (a type-only import still
ties one module's design to the other's; import-linter counts it too). ``from pkg import name`` is an edge to
``pkg.name`` when that is a module, else to ``pkg``; a package's ``__init__`` is the package's own node.

The contracts are import-linter's sections of setup.cfg (``[importlinter:contract:*]``, types ``layers`` and
``forbidden``), read here so that the test suite needs no import-linter; ``lint-imports`` reads the same
sections for whoever installs it. Only the syntax the contracts use is understood, and anything else is
refused rather than skipped: full module names or one container, ``|`` and ``:`` siblings, ``(optional)``
layers, ``exhaustive``, ``ignore_imports`` without wildcards, ``allow_indirect_imports``.

``python -m tests.importgraph`` prints the figures: imports by place, cycles, crowded folders, contract
violations and the function-level imports with their reasons.
"""
from __future__ import annotations

import ast
import configparser
import io
import tokenize
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "roofscope"
CONFIG = ROOT / "setup.cfg"
TOP, FUNCTION, TYPE_ONLY = "top", "function", "type"


@dataclass(frozen=True)
class Import:
    """One edge of one import statement: ``where`` is TOP, FUNCTION (inside a def) or TYPE_ONLY."""
    source: str
    target: str
    where: str
    line: int
    reason: str = ""   # the comment on the statement's lines, or in the block right above it


def modules(root: Path = ROOT, package: str = PACKAGE) -> dict[str, tuple[Path, bool]]:
    """Module name -> (file, is a package's __init__)."""
    found = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        found[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return found


def _targets(module: str, is_package: bool, node: ast.Import | ast.ImportFrom, known: set[str]) -> set[str]:
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        if node.level:
            base = module.split(".") if is_package else module.split(".")[:-1]
            base = base[:len(base) - (node.level - 1)]
            stem = ".".join(base + ([node.module] if node.module else []))
        else:
            stem = node.module or ""
        names = [f"{stem}.{a.name}" if f"{stem}.{a.name}" in known else stem for a in node.names]
    found = set()
    for name in names:
        while name and name not in known:   # `import roofscope.x.y` of a name inside x.y; outside modules vanish
            name = name.rpartition(".")[0]
        if name and name != module:
            found.add(name)
    return found


def _places(tree: ast.AST) -> dict[int, str]:
    """id(import node) -> FUNCTION or TYPE_ONLY, for the imports not at module top."""
    places: dict[int, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            places.update((id(n), FUNCTION) for n in ast.walk(node) if n is not node)
    for node in ast.walk(tree):   # second, so that a type-only import inside a function counts as type-only
        if isinstance(node, ast.If):
            test = node.test
            name = test.id if isinstance(test, ast.Name) else test.attr if isinstance(test, ast.Attribute) else None
            if name == "TYPE_CHECKING":
                places.update((id(n), TYPE_ONLY) for stmt in node.body for n in ast.walk(stmt))
    return places


def _comments(source: str) -> dict[int, str]:
    """Line -> its comment's text; ``comment_only`` lines are marked by a leading newline."""
    found = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            only = tok.line[:tok.start[1]].strip() == ""
            found[tok.start[0]] = ("\n" if only else "") + tok.string.lstrip("#").strip()
    return found


def _reason(node: ast.stmt, comments: dict[int, str], heads: dict[int, str]) -> tuple[str, bool]:
    """A statement's own comment; else the comment line right above it, or the one that heads the block of
    imports ending on the line above (``heads``: line -> that comment). The flag: the reason heads a block."""
    for line in range(node.lineno, (node.end_lineno or node.lineno) + 1):
        if line in comments and not comments[line].startswith("\n"):
            return comments[line], False
    block, line = [], node.lineno - 1
    while comments.get(line, "").startswith("\n"):
        block.insert(0, comments[line].strip())
        line -= 1
    return (" ".join(block), True) if block else (heads.get(node.lineno - 1, ""), True)


def read_imports(root: Path = ROOT, package: str = PACKAGE) -> list[Import]:
    known = modules(root, package)
    names = set(known)
    edges = []
    for module, (path, is_package) in known.items():
        source = path.read_text()
        tree = ast.parse(source, str(path))
        places, comments = _places(tree), _comments(source)
        heads: dict[int, str] = {}
        nodes = sorted((n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))),
                       key=lambda n: n.lineno)
        for node in nodes:
            reason, heading = _reason(node, comments, heads)
            if heading:
                heads[node.end_lineno or node.lineno] = reason
            where = places.get(id(node), TOP)
            edges.extend(Import(module, t, where, node.lineno, reason)
                         for t in sorted(_targets(module, is_package, node, names)))
    return edges


def graph_of(imports: list[Import], known: set[str] | None = None) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {m: set() for m in known or ()}
    for edge in imports:
        graph.setdefault(edge.source, set()).add(edge.target)
        graph.setdefault(edge.target, set())
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


def within(module: str, prefixes: tuple[str, ...] | set[str]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def function_level_share(imports: list[Import]) -> float:
    """Function-level imports among all internal ones (top, function and type-only)."""
    return sum(e.where == FUNCTION for e in imports) / max(len(imports), 1)


def unexplained(imports: list[Import]) -> list[str]:
    """Function-level imports with no comment saying why they are not at the top."""
    return sorted({f"{e.source}:{e.line} -> {e.target}" for e in imports if e.where == FUNCTION and not e.reason})


def crowded(root: Path = ROOT, package: str = PACKAGE, most: int = 15) -> dict[str, int]:
    """Package folders holding more than ``most`` modules (their ``.py`` files but ``__init__.py``, which is the
    folder's own module)."""
    counts = {str(init.parent.relative_to(root)): sum(1 for p in init.parent.glob("*.py") if p.name != "__init__.py")
              for init in (root / package).rglob("__init__.py")}
    return {folder: n for folder, n in sorted(counts.items()) if n > most}


# --- contracts -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Layer:
    modules: tuple[str, ...]
    independent: bool        # `a | b`: the siblings may not import each other; `a : b`: they may
    optional: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Layers:
    key: str
    name: str
    layers: tuple[Layer, ...]
    container: str | None = None
    exhaustive: bool = False
    ignore: frozenset[tuple[str, str]] = frozenset()

    def members(self) -> list[str]:
        return [m for layer in self.layers for m in layer.modules]


@dataclass(frozen=True)
class Forbidden:
    key: str
    name: str
    sources: tuple[str, ...]
    forbidden: tuple[str, ...]
    indirect: bool = True    # import-linter's default: a chain through other modules counts too
    ignore: frozenset[tuple[str, str]] = frozenset()


@dataclass
class Contracts:
    root_package: str
    contracts: list[Layers | Forbidden] = field(default_factory=list)

    def of_type(self, kind: type) -> list:
        return [c for c in self.contracts if isinstance(c, kind)]


def _lines(value: str) -> list[str]:
    return [line.split("#")[0].strip() for line in value.splitlines() if line.split("#")[0].strip()]


def _ignored(section: configparser.SectionProxy) -> frozenset[tuple[str, str]]:
    pairs = set()
    for line in _lines(section.get("ignore_imports", "")):
        source, _, target = (part.strip() for part in line.partition("->"))
        if "*" in line or not target:
            raise ValueError(f"ignore_imports: {line!r}: only plain `a -> b` lines are read here")
        pairs.add((source, target))
    return frozenset(pairs)


def _layer(line: str, container: str | None) -> Layer:
    if "|" in line and ":" in line:
        raise ValueError(f"layers: {line!r} mixes | and :")
    items = [item.strip() for item in line.replace("|", ":").split(":")] if ("|" in line or ":" in line) else [line]
    names, optional = [], set()
    for item in items:
        name = item[1:-1].strip() if item.startswith("(") and item.endswith(")") else item
        full = f"{container}.{name}" if container else name
        names.append(full)
        if name != item:
            optional.add(full)
    return Layer(tuple(names), independent=":" not in line, optional=frozenset(optional))


def read_contracts(path: Path = CONFIG) -> Contracts:
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(path)
    top = parser["importlinter"]
    contracts = Contracts(top["root_package"])
    known = {"name", "type", "layers", "containers", "exhaustive", "ignore_imports", "source_modules",
             "forbidden_modules", "allow_indirect_imports"}
    for section_name in parser.sections():
        if not section_name.startswith("importlinter:contract:"):
            continue
        section, key = parser[section_name], section_name.rpartition(":")[2]
        unread = set(section) - known
        if unread:
            raise ValueError(f"{section_name}: options not read here: {sorted(unread)}")
        if section["type"] == "layers":
            containers = _lines(section.get("containers", ""))
            if len(containers) > 1:
                raise ValueError(f"{section_name}: one container at most is read here")
            container = containers[0] if containers else None
            contracts.contracts.append(Layers(
                key, section["name"], tuple(_layer(line, container) for line in _lines(section["layers"])),
                container, section.getboolean("exhaustive", fallback=False), _ignored(section)))
        elif section["type"] == "forbidden":
            contracts.contracts.append(Forbidden(
                key, section["name"], tuple(_lines(section["source_modules"])),
                tuple(_lines(section["forbidden_modules"])),
                not section.getboolean("allow_indirect_imports", fallback=False), _ignored(section)))
        else:
            raise ValueError(f"{section_name}: contract type {section['type']!r} is not read here")
    return contracts


def _layer_of(contract: Layers, module: str) -> int | None:
    for i, layer in enumerate(contract.layers):
        if within(module, layer.modules):
            return i
    return None


def layer_violations(graph: dict[str, set[str]], contract: Layers, layer: str | None = None) -> list[str]:
    """Imports from a layer to one above it, or between independent siblings; with ``layer``, only those
    made by that layer's modules. Direct imports suffice when the layers are exhaustive: then every chain
    that climbs holds one import that climbs (the container itself is imported by no module: a test says so)."""
    found = []
    for source, targets in graph.items():
        low = _layer_of(contract, source)
        if low is None or (layer is not None and not within(source, (layer,))):
            continue
        for target in targets:
            high = _layer_of(contract, target)
            if high is None or (source, target) in contract.ignore:
                continue
            siblings = contract.layers[low]
            own = next(m for m in siblings.modules if within(source, (m,)))
            if high < low or (high == low and siblings.independent and not within(target, (own,))):
                found.append(f"{source} -> {target}")
    return sorted(found)


def missing_layers(graph: dict[str, set[str]], contract: Layers) -> list[str]:
    """Layers that name no module (optional ones excepted), and with ``exhaustive``, modules of the container
    that no layer names."""
    missing = [m for layer in contract.layers for m in layer.modules
               if m not in layer.optional and not any(within(g, (m,)) for g in graph)]
    if contract.exhaustive and contract.container:
        depth = contract.container.count(".") + 2
        children = {".".join(m.split(".")[:depth]) for m in graph if m.startswith(contract.container + ".")}
        missing += sorted(c for c in children if _layer_of(contract, c) is None)
    return missing


def forbidden_violations(graph: dict[str, set[str]], contract: Forbidden) -> list[str]:
    """Chains from a source module to a forbidden one (direct imports only without ``indirect``)."""
    def edges(module: str) -> list[str]:
        return [t for t in sorted(graph.get(module, ())) if (module, t) not in contract.ignore]

    found = []
    for source in sorted(m for m in graph if within(m, contract.sources)):
        came_from: dict[str, str] = {source: ""}
        queue = deque([source])
        while queue:
            module = queue.popleft()
            for target in edges(module):
                if target in came_from:
                    continue
                came_from[target] = module
                if within(target, contract.forbidden):
                    chain = [target]
                    while came_from[chain[-1]]:
                        chain.append(came_from[chain[-1]])
                    found.append(" -> ".join(reversed(chain)))
                elif contract.indirect:
                    queue.append(target)
    return found


def main() -> None:
    imports = read_imports()
    graph = graph_of(imports, set(modules()))
    counts = {where: sum(e.where == where for e in imports) for where in (TOP, FUNCTION, TYPE_ONLY)}
    print(f"internal imports: {len(imports)} {counts}; function-level share {function_level_share(imports):.1%}")
    for cycle in cycles(graph):
        print(f"cycle of {len(cycle)}: {' '.join(cycle)}")
    for folder, n in crowded().items():
        print(f"{folder}: {n} modules")
    for contract in read_contracts().contracts:
        found = (layer_violations(graph, contract) + missing_layers(graph, contract) if isinstance(contract, Layers)
                 else forbidden_violations(graph, contract))
        print(f"contract {contract.key}: {len(found)} broken" + "".join(f"\n    {v}" for v in found))
    print("function-level imports:")
    for e in sorted(imports, key=lambda e: (e.source, e.line)):
        if e.where == FUNCTION:
            print(f"    {e.source}:{e.line} -> {e.target}  # {e.reason or '(no reason)'}")


if __name__ == "__main__":
    main()
