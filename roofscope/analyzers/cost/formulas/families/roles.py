"""What the family formulas share: an op's name read as words, and its tensors sorted into roles by shape.

A serving engine's op and a new framework's op of the same kind differ in name and argument order,
not in what their tensors are: an RMSNorm has activations ``(..., H)``, a weight ``(H,)``, an epsilon;
a paged attention has a query ``(T, Hq, D)``, caches whose first dimension counts pages, integer
index tensors. :class:`Operands` sorts a call's recorded tensors so: the *token dimension* ``T`` is
the leading size most of its multi-dimensional tensors share; tensors led by ``T`` are activations,
the others of two or more dimensions are *pools* (caches, tables, stacked weights) that an op reads
through indices, never whole. A formula raises :class:`Unmatched` when a call's tensors do not have
its family's shape, so that a name that only sounds like the family is not costed as one.
"""
from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable

from roofscope.analyzers.cost.formulas.dtypes import DTYPE_BY_NAME, DType
from roofscope.analyzers.cost.formulas.records import SCALAR, TENSOR, Cost, MissingShapes, OpCall, TensorSpec

FLOAT32, INT32 = DTYPE_BY_NAME["float32"], DTYPE_BY_NAME["int32"]
# A tensor led by the token dimension whose rows hold more than this many elements is no
# activation: a stack of expert weights (E, 2I, H) with E equal to a decode batch's size.
MAX_ROW = 1 << 20


class Unmatched(ValueError):
    """The call's tensors do not have the family's shape (its name only sounds like the family)."""


_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_NON_WORD = re.compile(r"[^a-z0-9]+")
_LAYER_SUFFIX = re.compile(r"_\d+$")


def words(name: str) -> str:
    """An op's own name as lower-case words joined by ``_``: the namespace dropped, camelCase split and
    a per-layer counter dropped (``sglang_profiler::attention_paged_attention_ragged_12`` ->
    ``attention_paged_attention_ragged``, ``LigerRMSNormFunction`` -> ``liger_rmsnorm_function``)."""
    local = name.rsplit("::", 1)[-1]
    return _LAYER_SUFFIX.sub("", _NON_WORD.sub("_", _CAMEL.sub("_", local).lower()).strip("_"))


def squashed(name: str) -> str:
    """:func:`words` without the separators, for names that run words together (``rmsnorm2d_fwd``)."""
    return words(name).replace("_", "")


def is_quantized(dt: DType | None) -> bool:
    """8-bit and 4-bit element types (fp8, int8, uint8 packing fp8 or two fp4 values, fp4x2)."""
    return dt is not None and dt.itemsize == 1 and dt.kind in ("float", "int")


def item(t: TensorSpec) -> float:
    return float(t.dtype.itemsize) if t.dtype else math.nan


def nbytes(ts: list[TensorSpec] | tuple[TensorSpec, ...]) -> float:
    return float(sum(t.nbytes for t in ts))


@dataclass(frozen=True)
class Operands:
    """A call's recorded tensors by role (positions kept in ``order``)."""

    order: tuple[TensorSpec, ...]        # every tensor with a dtype, in argument order
    tokens: int                          # the token dimension (0: none)
    acts: tuple[TensorSpec, ...]         # data led by the token dimension: activations (float or quantized)
    ints: tuple[TensorSpec, ...]         # index tensors (indices, positions, lengths, masks), any shape
    pools: tuple[TensorSpec, ...]        # data of 2+ dims not led by it: caches, tables, stacked weights
    small: tuple[TensorSpec, ...]        # other data (0-d, 1-d): weights (H,), scales, workspaces
    scalars: tuple[Any, ...]             # recorded scalar values, in order (None: not recorded)

    @property
    def float_acts(self) -> tuple[TensorSpec, ...]:
        return tuple(t for t in self.acts if not is_quantized(t.dtype))

    @property
    def quant_acts(self) -> tuple[TensorSpec, ...]:
        return tuple(t for t in self.acts if is_quantized(t.dtype))

    def ints_of(self, *sizes: int) -> tuple[TensorSpec, ...]:
        return tuple(t for t in self.ints if t.numel in sizes)

    def int_scalars(self) -> list[int]:
        return [v for v in self.scalars if isinstance(v, int) and not isinstance(v, bool)]


def operands(call: OpCall, tokens: int | None = None) -> Operands:
    """Sort ``call``'s tensors into roles (module docstring); ``tokens`` overrides the token dimension."""
    order = tuple(a.tensor for a in call.args if a.kind == TENSOR and a.tensor is not None and a.tensor.dtype)
    if tokens is None:
        # the leading size most tensors share (data of 2+ dims, and indices: an embedding's table is
        # not led by its lookups' count); of two, the one of smaller tensors (not the pool's)
        leads: Counter[int] = Counter()
        sizes: Counter[int] = Counter()
        for t in order:
            if t.numel and (len(t.shape) >= 2 or is_index(t)) and t.numel > 1:
                leads[t.shape[0]] += 1
                sizes[t.shape[0]] += t.numel
        tokens = max(leads, key=lambda n: (leads[n], -sizes[n])) if leads else 0
    acts, ints, pools, small = [], [], [], []
    for t in order:
        if is_index(t):
            ints.append(t)
        elif len(t.shape) >= 2 and t.shape[0] == tokens and t.numel // max(tokens, 1) <= MAX_ROW:
            acts.append(t)
        elif len(t.shape) >= 2:
            pools.append(t)
        else:
            small.append(t)
    values = tuple(a.value if a.known else None for a in call.args if a.kind == SCALAR)
    return Operands(order, tokens, tuple(acts), tuple(ints), tuple(pools), tuple(small), values)


def is_index(t: TensorSpec) -> bool:
    """Indices, positions, lengths, masks: integers of 2+ bytes and booleans. Bytes (uint8, int8) are
    data: fp8 stored as uint8, two fp4 values a byte, int8 quantized values."""
    return t.dtype is not None and (t.dtype.kind == "bool" or (t.dtype.kind == "int" and t.dtype.itemsize >= 2))


def need_acts(ops: Operands, n: int = 1) -> tuple[TensorSpec, ...]:
    acts = ops.float_acts
    if len(acts) < n:
        raise Unmatched(f"needs {n} activation tensor(s), has {len(acts)}")
    return acts


def activation_sized(ops: Operands) -> bool:
    """Every tensor is the size of the op's tokens (no pool, no flat buffer larger than them): what an
    op reads and writes is then its arguments, each once (the ``signature`` cost)."""
    if ops.pools or not ops.order:
        return False
    largest = max((t.numel for t in ops.order if len(t.shape) >= 2), default=0)
    flat = [t for t in ops.order if len(t.shape) < 2]
    if largest == 0:  # vectors only: elementwise over one length
        return len({t.numel for t in flat if t.numel > 1}) <= 1
    return all(t.numel <= largest for t in flat) and all(t.shape[0] == ops.tokens for t in ops.order
                                                          if len(t.shape) >= 2)


def missing(what: str) -> MissingShapes:
    return MissingShapes(what)


def hint(call: OpCall, name: str) -> Any:
    """The value of the hidden argument ``name`` (``hint:*``, appended by hidden_args.py), or None."""
    return next((a.value for a in call.args if a.name == name and a.known), None)


def int_row(n: int) -> TensorSpec:
    return TensorSpec((n,), INT32)


@dataclass(frozen=True)
class Family:
    """One kind of op: its formula, the category its kernels take, the word pattern (on
    :func:`squashed` names) that proposes it for an op no formula is registered for, and the names
    the frameworks give it (registered as they are)."""

    name: str
    category: str
    pattern: re.Pattern[str]
    fn: Callable[[OpCall], Cost]
    aliases: tuple[str, ...] = ()


def family(name: str, category: str, pattern: str, aliases: tuple[str, ...] = ()) -> Callable[
        [Callable[[OpCall], Cost]], Family]:
    """Decorator: the formula below, as the :class:`Family` ``name``."""
    def deco(fn: Callable[[OpCall], Cost]) -> Family:
        return Family(name, category, re.compile(pattern), fn, aliases)
    return deco
