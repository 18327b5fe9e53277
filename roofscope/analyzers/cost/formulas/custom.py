"""User formulas for custom ops: ``roofscope.register_formula(name, fn)``, ``--formulas FILE|MODULE``
and the ``roofscope.formulas`` entry-point group.

A user formula is a function of the op's recorded arguments, in order, like the formulas of
``torch.utils.flop_counter`` (which can be registered as they are): a tensor arrives as its
shape (a tuple of ints), a tensor list as a list of shapes, a scalar as its recorded value
(``None`` when the trace did not record it). It returns the op's FLOPs, or ``(flops, bytes)``;
given FLOPs only, bytes follow the compulsory rule with one output the size of the first
tensor argument.
"""
from __future__ import annotations

from typing import Any, Callable

from roofscope.analyzers.cost.costmodel import clear_cache
from roofscope.analyzers.cost.formulas.records import NONE, SCALAR, TENSOR, TENSORS, Cost, OpCall, _bytes
from roofscope.analyzers.cost.formulas.registry import _TC_CATEGORIES, REGISTRY, Formula
from roofscope.errors import RoofscopeError
from roofscope.fileio import import_failure, import_source

CATEGORIES = ("gemm", "conv", "attention", "elementwise", "reduction", "normalization", "softmax",
              "optimizer", "copy", "embedding", "other")
ENTRY_POINT_GROUP = "roofscope.formulas"


def _arguments(call: OpCall) -> list[Any]:
    out: list[Any] = []
    for a in call.args:
        if a.kind == TENSOR:
            out.append(a.tensor.shape)  # type: ignore[union-attr]
        elif a.kind == TENSORS:
            out.append([t.shape for t in a.tensors])
        elif a.kind == SCALAR:
            out.append(a.value if a.known else None)
        else:
            assert a.kind == NONE
            out.append(None)
    return out


def _wrap(fn: Callable[..., Any], name: str) -> Callable[[OpCall], Cost]:
    def formula(call: OpCall) -> Cost:
        result = fn(*_arguments(call))
        if isinstance(result, tuple):
            if len(result) != 2:
                raise ValueError(f"formula for {name} returned {len(result)} values; return flops or (flops, bytes)")
            return Cost(float(result[0]), float(result[1]))
        first = next((s for s in call.reads()), None)
        return Cost(float(result), _bytes(call.reads()) + (_bytes([first]) if first is not None else 0.0))

    formula.__name__ = f"user_formula_{getattr(fn, '__name__', 'fn')}"
    return formula


def register_formula(name: str, fn: Callable[..., Any] | None = None, *, category: str = "other",
                     replace: bool = False) -> Any:
    """Register ``fn`` as the cost formula of the op ``name`` (as the trace names it, e.g.
    ``"mylib::fused_rmsnorm"``); usable as a decorator. ``category`` places its kernels
    (``gemm``/``conv``/``attention`` ones count as tensor-core work). An op that already has a
    formula needs ``replace=True``."""
    if category not in CATEGORIES:
        raise RoofscopeError(f"unknown formula category {category!r}; one of {', '.join(CATEGORIES)}")

    def deco(f: Callable[..., Any]) -> Callable[..., Any]:
        if not callable(f):
            raise RoofscopeError(f"the formula for {name} is not callable")
        if name in REGISTRY and not replace:
            raise RoofscopeError(f"{name} already has a cost formula; pass replace=True to override it")
        REGISTRY[name] = Formula(_wrap(f, name), category, category in _TC_CATEGORIES)
        clear_cache()  # signatures costed before must see the new formula
        return f

    return deco(fn) if fn is not None else deco


_loaded: set[str] = set()


def load_formulas(source: str) -> None:
    """Import a Python file or module that calls :func:`register_formula` (``--formulas``);
    each source is imported once per process."""
    if source in _loaded:
        return
    import_source(source, "--formulas", "roofscope_user_formulas_")
    _loaded.add(source)


def load_entry_points() -> None:
    """Import the modules installed packages declare under ``[project.entry-points."roofscope.formulas"]``."""
    from importlib.metadata import entry_points

    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.value in _loaded:
            continue
        try:
            ep.load()
        except (Exception, SystemExit) as e:
            raise RoofscopeError(f"formula entry point {ep.name} ({ep.value}): {import_failure(e)}") from None
        _loaded.add(ep.value)


def load_all(sources: list[str] | tuple[str, ...] = ()) -> None:
    load_entry_points()
    for s in sources:
        load_formulas(s)
