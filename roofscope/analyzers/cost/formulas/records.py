"""The records formulas work on: a parsed op call (:class:`OpCall`, its :class:`Arg` list and
their :class:`TensorSpec` shapes) and the :class:`Cost` a formula returns; and the rules every
formula shares: the bytes rule, which tensors an op writes, broadcasting."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

from roofscope.analyzers.cost.formulas.dtypes import DType

TENSOR, TENSORS, SCALAR, NONE = "tensor", "tensors", "scalar", "none"
UNKNOWN: Any = object()  # sentinel: the trace did not record this scalar's value


class MissingShapes(Exception):
    """The formula needs a shape or scalar that the trace did not record."""


@dataclass(frozen=True)
class TensorSpec:
    shape: tuple[int, ...]
    dtype: DType | None
    strides: tuple[int, ...] | None = None

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def footprint(self) -> int:
        """Distinct elements addressed: broadcast (stride-0) dims are read once."""
        if self.strides is None or len(self.strides) != len(self.shape):
            return self.numel
        return math.prod(n for n, s in zip(self.shape, self.strides) if s != 0 or n == 0)

    @property
    def nbytes(self) -> float:
        return float(self.footprint * self.dtype.itemsize) if self.dtype else math.nan

    def like(self, shape: tuple[int, ...] | None = None, dtype: DType | None = None) -> TensorSpec:
        return TensorSpec(self.shape if shape is None else tuple(shape), dtype or self.dtype)


@dataclass
class Arg:
    kind: str  # TENSOR | TENSORS | SCALAR | NONE
    name: str = ""  # schema argument name when the signature was bound to a schema
    tensor: TensorSpec | None = None
    tensors: tuple[TensorSpec, ...] = ()
    value: Any = None
    known: bool = False  # value recorded (Concrete Inputs) or certainly None
    mutable: bool = False  # the op writes it (schema alias annotation, or trailing "_")
    write_only: bool = False  # out= argument: written, never read

    @property
    def specs(self) -> tuple[TensorSpec, ...]:
        if self.kind == TENSOR:
            return (self.tensor,)  # type: ignore[return-value]
        return self.tensors if self.kind == TENSORS else ()


@dataclass
class OpCall:
    name: str
    args: list[Arg]
    bound: bool = False  # argument names come from the op's schema

    def arg(self, name: str, pos: int | None = None) -> Arg | None:
        """By schema name when the call is bound (None if the overload lacks it), else by position."""
        if name and self.bound:
            return next((a for a in self.args if a.name == name), None)
        return self.args[pos] if pos is not None and pos < len(self.args) else None

    def tensor(self, name: str, pos: int | None = None) -> TensorSpec | None:
        a = self.arg(name, pos)
        return a.tensor if a is not None and a.kind == TENSOR else None

    def need(self, name: str, pos: int | None = None) -> TensorSpec:
        t = self.tensor(name, pos)
        if t is None:
            raise MissingShapes(name)
        return t

    def value(self, name: str, pos: int | None = None, default: Any = UNKNOWN) -> Any:
        a = self.arg(name, pos)
        if a is None or a.kind in (TENSOR, TENSORS) or not a.known:
            return default
        return a.value

    def need_int(self, name: str, pos: int | None = None, default: Any = UNKNOWN, missing: str = "") -> int:
        """An integer argument (``value``), else :class:`MissingShapes` naming it (or ``missing``)."""
        v = self.value(name, pos, default)
        if not isinstance(v, int):
            raise MissingShapes(missing or name)
        return v

    def reads(self) -> list[TensorSpec]:
        return [s for a in self.args if not a.write_only for s in a.specs]


@dataclass(frozen=True)
class Cost:
    flops: float
    bytes: float
    dtype: str | None = None  # precision override; None = first floating tensor input
    tensor_core: bool | None = None  # override of the formula's class (depthwise convs: CUDA cores)
    category: str | None = None  # override of the formula's category (a family found by signature)
    source: str | None = None  # how it was costed, when not by its name's formula ("family", "signature")
    # A size the arguments do not carry was estimated: what (a few words), and the bounds of
    # (flops, bytes) it allows: (flops_lo, flops_hi, bytes_lo, bytes_hi).
    estimate: str = ""
    bounds: tuple[float, float, float, float] | None = None


def first_float_precision(args: list[Arg]) -> str:
    """Default precision key: the first floating tensor input."""
    for a in args:
        for s in a.specs:
            if s.dtype is not None and s.dtype.kind == "float":
                return s.dtype.precision
    return ""


def _bytes(specs: list[TensorSpec] | tuple[TensorSpec, ...]) -> float:
    return float(sum(s.nbytes for s in specs))


def _cost(call: OpCall, flops: float, outs: list[TensorSpec], dtype: str | None = None) -> Cost:
    """The bytes rule: every tensor input read once + every output written once."""
    return Cost(float(flops), _bytes(call.reads()) + _bytes(outs), dtype)


def _outputs(call: OpCall, rule: Callable[[], list[TensorSpec]]) -> list[TensorSpec]:
    """What the op writes: out= args, else mutated args (in-place), else the rule's new tensors."""
    outs = [a for a in call.args if a.write_only]
    if outs:
        try:  # out= tensors are often recorded before being resized: trust the rule's shape
            return [r.like(dtype=a.tensor.dtype) for r, a in zip(rule(), outs)]  # type: ignore[union-attr]
        except MissingShapes:
            return [s for a in outs for s in a.specs]
    mutated = [s for a in call.args if a.mutable for s in a.specs]
    return mutated if mutated else rule()


def broadcast_shapes(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    out: list[int] = []
    for dims in zip(*(((1,) * (max(map(len, shapes)) - len(s)) + tuple(s)) for s in shapes)):
        sizes = set(dims) - {1}
        if len(sizes) > 1:
            raise ValueError(f"shapes {shapes} do not broadcast")
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)
