"""The formula registry: Kineto op name -> :class:`Formula` (function, category, tensor-core flag).

The formula modules fill it with :func:`register` when they are imported (the package
``__init__`` imports them all); the package's ``lookup`` also resolves the dynamic
families (``triton_*`` Inductor kernels, ``aten::_foreach_*``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from roofscope.analyzers.cost.formulas.records import Cost, OpCall


@dataclass(frozen=True)
class Formula:
    fn: Callable[[OpCall], Cost]
    category: str
    tensor_core: bool


REGISTRY: dict[str, Formula] = {}
_TC_CATEGORIES = {"gemm", "conv", "attention"}


def register(*names: str, category: str) -> Callable[[Callable[[OpCall], Cost]], Callable[[OpCall], Cost]]:
    def deco(fn: Callable[[OpCall], Cost]) -> Callable[[OpCall], Cost]:
        for n in names:
            if n in REGISTRY:
                raise ValueError(f"duplicate cost formula for {n}")
            REGISTRY[n] = Formula(fn, category, category in _TC_CATEGORIES)
        return fn

    return deco
