"""Data-movement ops: copies, gathers/scatters, fills, padding/upsampling, and views (free)."""

from __future__ import annotations

import math
from dataclasses import replace
from functools import reduce
from typing import Any, Callable

from roofscope.analyzers.cost import shapes
from roofscope.analyzers.cost.formulas.dtypes import dtype_from_code, promote_types
from roofscope.analyzers.cost.formulas.records import (TENSOR, TENSORS, UNKNOWN, Cost, MissingShapes, OpCall,
                                                       TensorSpec, _bytes, _cost, _outputs)
from roofscope.analyzers.cost.formulas.registry import register
from roofscope.analyzers.cost.shapes import Shape

# ---------------------------------------------------------------------------
# copies, gathers, fills


@register("aten::copy_", "aten::_copy_from", category="copy")
def _copy(call: OpCall) -> Cost:
    dst_pos, src_pos = (0, 1) if call.name == "aten::copy_" else (1, 0)
    dst = call.need("", dst_pos)
    src = call.tensor("", src_pos)
    return Cost(0.0, _bytes([src] if src else []) + dst.nbytes)  # dst is overwritten, never read


@register("aten::_to_copy", "aten::clone", "aten::contiguous", category="copy")
def _clone(call: OpCall) -> Cost:
    x = call.need("self", 0)
    if call.name == "aten::_to_copy":
        code = call.value("dtype", 1)
        if code is UNKNOWN:
            raise MissingShapes("dtype")
        dt = dtype_from_code(code) or x.dtype
    else:
        dt = x.dtype
    if call.name == "aten::contiguous" and x.strides is not None:
        fmt = call.value("memory_format", 1, 0)
        if x.strides == _dense_strides(x.shape, fmt if isinstance(fmt, int) else -1):
            return Cost(0.0, 0.0)  # already in that layout: returns self, launches nothing
    return _cost(call, 0, _outputs(call, lambda: [TensorSpec(x.shape, dt)]))


def _dense_strides(shape: tuple[int, ...], memory_format: int) -> tuple[int, ...] | None:
    """Strides of a dense tensor in MemoryFormat 0 (contiguous) / 2, 3 (channels_last[_3d])."""
    order = list(range(len(shape)))[::-1]  # innermost first
    if memory_format in (2, 3) and len(shape) == memory_format + 2:
        order = [1] + order[:-2] + [0]  # channels innermost, then spatial, then batch
    elif memory_format != 0:
        return None
    out, acc = [0] * len(shape), 1
    for d in order:
        out[d] = acc
        acc *= max(shape[d], 1)
    return tuple(out)


@register("aten::cat", "aten::stack", "aten::_cat", category="copy")
def _cat(call: OpCall) -> Cost:
    """Inputs read, output written. Kineto gives a tensor list's elements no dtype (fp32 assumed, the
    kernel's name corrects it: attribution._fix_tensorlist_dtype); an ``out=`` tensor's dtype is that
    of the inputs too (cat promotes them to it)."""
    a = call.arg("tensors", 0)
    if a is None or a.kind != TENSORS or not a.tensors:
        raise MissingShapes("tensor list")
    given = next((x.tensor.dtype for x in call.args if x.kind == TENSOR and x.tensor is not None and x.tensor.dtype),
                 None)
    if given is not None:
        a.tensors = tuple(replace(t, dtype=given) for t in a.tensors)
    dt = reduce(promote_types, [t.dtype for t in a.tensors if t.dtype]) if a.tensors[0].dtype else None
    out = TensorSpec((sum(t.numel for t in a.tensors),), dt)
    return _cost(call, 0, _outputs(call, lambda: [out]), given.precision if given is not None else None)


def _gathered(call: OpCall, src: TensorSpec, idx: TensorSpec, out: TensorSpec) -> Cost:
    # gather semantics: only the selected elements of the source are read (documented)
    outs = _outputs(call, lambda: [out])
    return Cost(0.0, idx.nbytes + out.numel * (src.dtype.itemsize if src.dtype else math.nan) + _bytes(outs))


@register("aten::index_select", category="copy")
def _index_select(call: OpCall) -> Cost:
    x, idx = call.need("self", 0), call.need("index", 2)
    dim = call.need_int("dim", 1, 0 if len(x.shape) <= 1 else UNKNOWN)
    shape = list(x.shape) or [1]
    shape[dim % len(shape)] = idx.numel
    return _gathered(call, x, idx, TensorSpec(tuple(shape), x.dtype))


@register("aten::gather", category="copy")
def _gather(call: OpCall) -> Cost:
    x, idx = call.need("self", 0), call.need("index", 2)
    return _gathered(call, x, idx, TensorSpec(idx.shape, x.dtype))


@register("aten::embedding", category="embedding")
def _embedding(call: OpCall) -> Cost:
    w, idx = call.need("weight", 0), call.need("indices", 1)
    return _gathered(call, w, idx, TensorSpec(idx.shape + w.shape[-1:], w.dtype))


@register("aten::embedding_dense_backward", category="embedding")
def _embedding_backward(call: OpCall) -> Cost:
    g = call.need("grad_output", 0)
    num = call.need_int("num_weights", 2)
    # one add per gradient element, accumulated into the full [num_weights, D] table
    return _cost(call, g.numel, [TensorSpec((num, g.shape[-1]), g.dtype)])


@register("aten::fill_", "aten::zero_", category="copy")
def _fill(call: OpCall) -> Cost:
    x = call.need("self", 0)
    value = call.tensor("value", 1)
    return Cost(0.0, x.nbytes + (value.nbytes if value else 0.0))  # write only


def _touched(src: TensorSpec, dst: TensorSpec) -> float:
    return src.numel * (dst.dtype.itemsize if dst.dtype else math.nan)


@register("aten::scatter_add_", "aten::scatter_add", "aten::index_add_", "aten::index_add", "aten::scatter_",
          "aten::scatter", "aten::index_copy_", "aten::index_copy", "aten::scatter_reduce_",
          "aten::scatter_reduce", category="copy")
def _scatter(call: OpCall) -> Cost:
    x, idx = call.need("self", 0), call.need("index", 2)
    src = call.tensor("", 3)
    moved = src if src is not None else idx  # scatter_.value writes one scalar per index
    adds = "add" in call.name or "reduce" in call.name
    if call.name.endswith("_"):  # in place: only the touched elements of self move
        rw = _touched(moved, x) * (2 if adds else 1)
        return Cost(float(moved.numel * adds), _bytes(call.reads()) - x.nbytes + rw)
    return _cost(call, moved.numel * adds, [x.like()])  # functional: a full copy of self


# Output shapes of the copy ops that reshape (shapes.py); each reads the named arguments of the
# op's schema, so only a call bound to it is shaped.
_SHAPE_RULES: dict[str, Callable[[OpCall, Shape], Shape]] = {
    "aten::repeat": lambda c, s: shapes.repeat(s, c.value("repeats")),
    "aten::roll": lambda c, s: shapes.roll(s, c.value("shifts"), _or_default(c.value("dims"), [])),
    "aten::flip": lambda c, s: shapes.flip(s, c.value("dims")),
    "aten::tril": lambda c, s: shapes.triangle(s),
    "aten::triu": lambda c, s: shapes.triangle(s),
    "aten::constant_pad_nd": lambda c, s: shapes.constant_pad(s, c.value("pad")),
    "aten::reflection_pad1d": lambda c, s: shapes.edge_pad(s, c.value("padding"), 1, reflect=True),
    "aten::reflection_pad2d": lambda c, s: shapes.edge_pad(s, c.value("padding"), 2, reflect=True),
    "aten::replication_pad2d": lambda c, s: shapes.edge_pad(s, c.value("padding"), 2, reflect=False),
    "aten::narrow_copy": lambda c, s: shapes.narrow(s, c.value("dim"), c.value("start"), c.value("length")),
}
_UPSAMPLE_NEAREST = ("aten::upsample_nearest1d", "aten::upsample_nearest2d", "aten::upsample_nearest3d",
                     "aten::_upsample_nearest_exact2d")
_UPSAMPLE_TAPS = {"aten::upsample_linear1d": 2, "aten::upsample_bilinear2d": 4, "aten::upsample_trilinear3d": 8,
                  "aten::upsample_bicubic2d": 16}


def _or_default(value: Any, default: Any) -> Any:
    """An argument with a schema default: unrecorded (or recorded as None) means the default."""
    return default if value is UNKNOWN or value is None else value


def _upsample_shape(call: OpCall, shape: Shape) -> Shape:
    # The .vec overloads take output_size or scale_factors (both recorded, one None); the others
    # take output_size (their scales_* only pick the source pixels).
    size = call.value("output_size")
    factors = call.value("scale_factors") if call.arg("scale_factors") is not None else None
    if size is UNKNOWN or factors is UNKNOWN:
        raise ValueError("output_size or scale_factors not recorded")
    return shapes.upsample(shape, int(call.name[-2]), size, factors)


def _reshaped(call: OpCall, missing: str) -> TensorSpec:
    """The op's output: the input's dtype, the shape its rule gives. MissingShapes (``missing``)
    for an unbound call, an unknown dtype, or arguments the rule lacks or torch would refuse."""
    x = call.args[0].tensor if call.bound and call.args and call.args[0].kind == TENSOR else None
    if x is None or any(s.dtype is None for a in call.args for s in a.specs):
        raise MissingShapes(missing)
    rule = _SHAPE_RULES.get(call.name, _upsample_shape)
    try:
        return TensorSpec(rule(call, x.shape), x.dtype)
    except ValueError:
        raise MissingShapes(missing) from None


@register(*_SHAPE_RULES, *_UPSAMPLE_NEAREST, category="copy")
def _reshaping_copy(call: OpCall) -> Cost:
    """FLOPs = 0. Bytes = the input read + the output (shape by the op's rule) written."""
    return _cost(call, 0, _outputs(call, lambda: [_reshaped(call, "output")]))


@register(*_UPSAMPLE_TAPS, category="elementwise")
def _upsample_interp(call: OpCall) -> Cost:
    """FLOPs = (2·taps − 1) per output element: a multiply per tap plus the adds (2 taps per
    interpolated dim, bicubic 4). Bytes = the input read + the output written."""
    outs = _outputs(call, lambda: [_reshaped(call, "upsample output")])
    return _cost(call, (2 * _UPSAMPLE_TAPS[call.name] - 1) * outs[0].numel, outs)


# ---------------------------------------------------------------------------
# views and metadata: no kernel, no traffic

VIEW_OPS = [
    "view", "_unsafe_view", "_reshape_alias", "reshape", "view_as", "t", "t_", "transpose", "transpose_",
    "permute", "expand", "expand_as", "select", "slice", "narrow", "unsqueeze", "unsqueeze_", "squeeze",
    "squeeze_", "as_strided", "as_strided_", "detach", "detach_", "alias", "lift_fresh", "empty",
    "empty_like", "empty_strided", "new_empty", "new_empty_strided", "resize_", "resize_as_", "unbind",
    "split", "split_with_sizes", "chunk", "tensor_split", "unsafe_split", "unfold", "diagonal", "flatten",
    "unflatten", "movedim", "moveaxis", "swapaxes", "numpy_T", "real", "imag", "view_as_real",
    "view_as_complex", "resolve_conj", "resolve_neg", "conj", "_conj", "_neg_view", "set_", "record_stream",
    "broadcast_tensors", "broadcast_to", "_nested_view_from_buffer", "is_same_size", "_unsafe_split",
]


@register(*(f"aten::{n}" for n in VIEW_OPS), category="view")
def _view(call: OpCall) -> Cost:
    return Cost(0.0, 0.0)
