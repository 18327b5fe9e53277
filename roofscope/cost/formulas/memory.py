"""Data-movement ops: copies, gathers/scatters, fills, padding/upsampling, and views (free)."""

from __future__ import annotations

import math
from functools import reduce

from roofscope.cost.formulas.dtypes import dtype_from_code, promote_types
from roofscope.cost.formulas.records import TENSORS, UNKNOWN, Cost, MissingShapes, OpCall, TensorSpec
from roofscope.cost.formulas.registry import register
from roofscope.cost.formulas.rules import _bytes, _cost, _outputs


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
    a = call.arg("tensors", 0)
    if a is None or a.kind != TENSORS or not a.tensors:
        raise MissingShapes("tensor list")
    dt = reduce(promote_types, [t.dtype for t in a.tensors if t.dtype]) if a.tensors[0].dtype else None
    out = TensorSpec((sum(t.numel for t in a.tensors),), dt)
    return _cost(call, 0, _outputs(call, lambda: [out]))


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


@register("aten::repeat", "aten::roll", "aten::flip", "aten::tril", "aten::triu", "aten::constant_pad_nd",
          "aten::reflection_pad1d", "aten::reflection_pad2d", "aten::replication_pad2d", "aten::narrow_copy",
          "aten::upsample_nearest1d", "aten::upsample_nearest2d", "aten::upsample_nearest3d",
          "aten::_upsample_nearest_exact2d", category="copy")
def _copy_meta(call: OpCall) -> Cost:
    outs = call.meta()
    if not outs:
        raise MissingShapes("output")
    return _cost(call, 0, outs)


@register("aten::upsample_bilinear2d", "aten::upsample_linear1d", "aten::upsample_trilinear3d",
          "aten::upsample_bicubic2d", category="elementwise")
def _upsample_interp(call: OpCall) -> Cost:
    outs = call.meta()
    if not outs:
        raise MissingShapes("upsample output")
    taps = {"linear1d": 2, "bilinear2d": 4, "trilinear3d": 8, "bicubic2d": 16}[call.name.split("_", 1)[1]]
    return _cost(call, (2 * taps - 1) * outs[0].numel, outs)  # a multiply per tap plus the adds


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
