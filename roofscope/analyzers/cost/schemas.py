"""Argument schemas of the aten ops that have cost formulas, shipped as data (op_schemas.json).

The cost model binds each recorded signature to its op's schema (argument names, which
arguments are written). Reading schemas from torch costs a `import torch` (1.5 s, 220 MB) on
every analysis; the table holds the same facts for every op a formula exists for, written by
:func:`generate` from torch's schemas, so analysis imports no torch and a trace's costs do
not depend on the analyzing machine's torch build. An op missing from the table (a
``_foreach_`` op of a newer torch, a user formula for an aten op) is costed positionally,
unbound; tests/test_costmodel_schemas.py checks that the table holds every op a formula
exists for, as the installed torch declares it. Regenerate after adding a formula:

    python -m roofscope.analyzers.cost.schemas --write
"""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from roofscope.analyzers.cost import formulas as cf

SCHEMA_FILE = Path(__file__).with_name("op_schemas.json")
# Param fields stored per argument, in this order (kinds and loose as joined strings).
_FIELDS = ("name", "kwarg_only", "mutable", "write_only", "tensor_slot", "optional", "kinds", "loose",
           "has_default", "device")


@dataclass(frozen=True)
class Param:
    name: str
    kwarg_only: bool
    mutable: bool
    write_only: bool
    tensor_slot: bool  # Tensor or Tensor?
    optional: bool
    kinds: frozenset[str]  # strict matches
    loose: frozenset[str]  # what older Kineto versions recorded for it
    has_default: bool
    device: bool


Overloads = tuple[tuple[str, tuple[Param, ...]], ...]  # (overload name, params) per overload


def param_of(a: Any) -> Param:
    """A torch ``Argument`` (from an overload's ``_schema.arguments``) as a :class:`Param`."""
    ts = str(a.type)
    optional = ts.startswith("Optional[")
    base = ts[len("Optional["):-1] if optional else ts
    if base == "Tensor":
        kinds = {"T"}
    elif base in ("List[Tensor]", "List[Optional[Tensor]]"):
        kinds = {"L", "G"}
    elif base.startswith("List["):
        kinds = {"SL", "G"}
    else:
        kinds = {"S"}
    if optional or base in ("str", "Device", "Generator", "Layout"):
        kinds.add("N")
    loose = kinds | ({"S", "SL", "G", "N"} if "T" not in kinds and "L" not in kinds else set())
    is_write = a.alias_info is not None and a.alias_info.is_write
    return Param(a.name, a.kwarg_only, is_write, is_write and a.is_out, base == "Tensor", optional, frozenset(kinds),
                 frozenset(loose), a.has_default_value(), base == "Device")


def torch_overloads(name: str) -> Overloads:
    """The op's overloads as the installed torch declares them; () when torch lacks the op."""
    import torch

    ns, _, op = name.partition("::")
    try:
        packet = getattr(getattr(torch.ops, ns), op)
        return tuple((ov, tuple(param_of(a) for a in getattr(packet, ov)._schema.arguments))
                     for ov in packet.overloads())
    except Exception:  # not an op of this torch build (custom or removed op)
        return ()


@lru_cache(maxsize=1)
def _table() -> dict[str, Any]:
    try:
        return json.loads(SCHEMA_FILE.read_text())
    except (OSError, ValueError):
        return {"ops": {}, "params": []}


def _decode(p: list[Any]) -> Param:
    d = dict(zip(_FIELDS, p))
    d["kinds"], d["loose"] = frozenset(d["kinds"].split(",")), frozenset(d["loose"].split(","))
    return Param(**d)


@lru_cache(maxsize=None)
def overloads(name: str) -> Overloads:
    """The op's overloads from the shipped table; () for an op it lacks (never torch's: analysis
    imports no torch)."""
    table = _table()
    if name not in table["ops"]:
        return ()
    palette = table["params"]
    return tuple((ov, tuple(_decode(palette[i]) for i in params)) for ov, params in table["ops"][name])


def _encode(p: Param) -> list[Any]:
    return [",".join(sorted(v)) if isinstance(v, frozenset) else v for v in (getattr(p, f) for f in _FIELDS)]


def formula_ops() -> list[str]:
    """Every aten op a cost formula exists for: the registry and the dynamic ``_foreach_`` family."""
    import torch

    names = {n for n in cf.REGISTRY if n.startswith("aten::")}
    names |= {f"aten::{s.name.split('::', 1)[1]}" for s in torch._C._jit_get_all_schemas()
              if s.name.startswith("aten::_foreach_") and cf.lookup(s.name) is not None}
    return sorted(names)


def generate() -> dict[str, Any]:
    import torch

    # Params repeat across ops and overloads ("self", "out"): each distinct one is stored once,
    # in a palette the overloads index.
    palette: dict[tuple, int] = {}
    ops = {}
    for name in formula_ops():  # an op torch lacks is kept, with no overloads: it is not bound
        ops[name] = [[ov, [palette.setdefault(tuple(_encode(p)), len(palette)) for p in params]]
                     for ov, params in torch_overloads(name)]
    return {"torch": torch.__version__.split("+")[0], "params": [list(p) for p in palette], "ops": ops}


if __name__ == "__main__":
    if "--write" not in sys.argv:
        raise SystemExit(__doc__)
    table = generate()

    def compact(v: Any) -> str:
        return json.dumps(v, separators=(",", ":"))

    # One param and one op per line: a regenerated table diffs line by line.
    SCHEMA_FILE.write_text(
        f'{{"torch":{compact(table["torch"])},\n"params":[\n' + ",\n".join(map(compact, table["params"]))
        + '],\n"ops":{\n' + ",\n".join(f"{compact(k)}:{compact(v)}" for k, v in table["ops"].items()) + "}}\n")
    print(f"wrote {SCHEMA_FILE} ({SCHEMA_FILE.stat().st_size:,} bytes)")
