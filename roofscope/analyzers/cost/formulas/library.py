"""Library ops: sorting and top-k, advanced indexing, data-dependent selections, embedding bags,
and torchvision's detection ops (RoIAlign, NMS, deformable convolution).

Bytes follow the compulsory rule (inputs read once, outputs written once) with two refinements:
gathers read only the selected rows (as :mod:`.memory`'s gathers do), and ops whose output size
depends on the data (``nonzero``, ``masked_select``, boolean indexing) count their inputs only, a
lower bound (the trace records input shapes, never the output's). FLOPs per element:

* ``sort`` / ``argsort``: ``ceil(log2 L)`` comparisons per element, ``L`` the sorted dimension's
  length; ``topk``: ``ceil(log2 k) + 1`` (a selection pass, then the k best ordered).
* ``nonzero`` / ``masked_select``: 2 per input element (a test and a prefix sum).
* ``embedding_bag``: one add per gathered element (two with per-sample weights); backward one add
  per gradient element into the dense ``(num_weights, D)`` table it writes.
* ``roi_align``: 8 per bilinear sample (4 weights and taps, 3 adds, one average), ``s^2``
  samples per output bin (``sampling_ratio``, or 2 when adaptive: torchvision's default
  FPN pooler bins span about two feature cells); it reads at most the sampled feature taps.
  Backward: the same per sample, and writes the whole input gradient.
* ``nms``: the ``N (N - 1) / 2`` box pairs of the IoU mask at 15 FLOPs each (intersection 6,
  areas and union 4, divide 1, compare 1, ...); writes the ``N x ceil(N/64)`` 64-bit mask.
* ``deform_conv2d``: the bilinear sampling of its column buffer only (11 per column entry: 8 for
  the sample, the modulation mask, the offsets); the GEMM on the columns is an ``aten::addmm`` /
  ``mm`` of its own, costed there.
"""
from __future__ import annotations

import math

from roofscope.analyzers.cost.formulas.dtypes import INT64
from roofscope.analyzers.cost.formulas.records import (TENSORS, Cost, MissingShapes, OpCall, TensorSpec, _bytes, _cost,
                                                       _outputs, broadcast_shapes)
from roofscope.analyzers.cost.formulas.registry import register


def _log2(n: int) -> int:
    return max(1, math.ceil(math.log2(max(n, 2))))


def _dim(call: OpCall, x: TensorSpec, name: str, pos: int) -> int:
    d = call.value(name, pos, -1)
    if not isinstance(d, int) or isinstance(d, bool):
        d = -1
    return d % len(x.shape) if x.shape else 0


@register("aten::sort", "aten::argsort", category="reduction")
def _sort(call: OpCall) -> Cost:
    x = call.need("self", 0)
    length = x.shape[_dim(call, x, "dim", 1)] if x.shape else 1
    values = [] if call.name == "aten::argsort" else [x.like()]
    outs = _outputs(call, lambda: values + [x.like(dtype=INT64)])
    return _cost(call, _log2(length) * x.numel, outs)


@register("aten::topk", category="reduction")
def _topk(call: OpCall) -> Cost:
    x = call.need("self", 0)
    k = call.need_int("k", 1)
    d = _dim(call, x, "dim", 2)
    shape = tuple(k if i == d else n for i, n in enumerate(x.shape))
    outs = _outputs(call, lambda: [TensorSpec(shape, x.dtype), TensorSpec(shape, INT64)])
    return _cost(call, (_log2(k) + 1) * x.numel, outs)


@register("aten::nonzero", "aten::masked_select", "aten::argwhere", category="reduction")
def _data_dependent(call: OpCall) -> Cost:
    x = call.need("self", 0)
    return Cost(2.0 * x.numel, _bytes(call.reads()))  # output size depends on the data: not counted


def _index_list(call: OpCall) -> list[TensorSpec]:
    a = call.arg("indices", 1)
    if a is None or a.kind != TENSORS or not a.tensors:
        raise MissingShapes("indices")
    return list(a.tensors)


@register("aten::index", category="copy")
def _index(call: OpCall) -> Cost:
    """``x[idx...]`` with integer index tensors (Kineto records their shapes, not their dtype: a
    boolean mask is a tensor shaped like the dimensions it covers, its result data-dependent)."""
    x, idx = call.need("self", 0), _index_list(call)
    if len(idx) == 1 and idx[0].shape == x.shape[:len(idx[0].shape)] and len(idx[0].shape) > 1:
        return Cost(0.0, x.nbytes + idx[0].numel)  # a boolean mask: read both, output unknown
    rows = math.prod(broadcast_shapes(*(t.shape for t in idx)))
    out = rows * math.prod(x.shape[len(idx):])
    item = x.dtype.itemsize if x.dtype else math.nan
    return Cost(0.0, sum(t.numel for t in idx) * INT64.itemsize + 2.0 * out * item)


@register("aten::index_put_", "aten::index_put", "aten::_index_put_impl_", category="copy")
def _index_put(call: OpCall) -> Cost:
    x, idx = call.need("self", 0), _index_list(call)
    v = call.need("values", 2)
    acc = call.value("accumulate", 3, False) is True
    item = x.dtype.itemsize if x.dtype else math.nan
    n = max(v.numel, math.prod(broadcast_shapes(*(t.shape for t in idx))))
    moved = sum(t.numel for t in idx) * INT64.itemsize + v.nbytes + n * item * (2 if acc else 1)
    if not call.name.endswith("_"):
        moved += 2 * x.nbytes  # functional: a copy of self first
    return Cost(float(n if acc else 0), moved)


@register("aten::embedding_bag", "aten::_embedding_bag", "aten::_embedding_bag_forward_only", category="embedding")
def _embedding_bag(call: OpCall) -> Cost:
    w, idx, offsets = call.need("weight", 0), call.need("indices", 1), call.need("offsets", 2)
    psw = call.tensor("per_sample_weights", 6)
    bags = offsets.numel - (1 if call.value("include_last_offset", 7, False) is True else 0)
    d = w.shape[-1]
    item = w.dtype.itemsize if w.dtype else math.nan
    gathered = idx.numel * d
    outs = [TensorSpec((bags, d), w.dtype)]
    if call.name != "aten::embedding_bag":  # offset2bag, bag_size, max_indices
        outs += [TensorSpec((idx.numel,), INT64), TensorSpec((bags,), INT64), TensorSpec((bags,), INT64)]
    reads = idx.nbytes + offsets.nbytes + gathered * item + (psw.nbytes if psw else 0.0)
    return Cost(float(gathered * (2 if psw else 1)), reads + _bytes(outs))


@register("aten::_embedding_bag_backward", "aten::_embedding_bag_dense_backward", category="embedding")
def _embedding_bag_backward(call: OpCall) -> Cost:
    g, idx = call.need("grad", 0), call.need("indices", 1)
    num = call.need_int("num_weights", 5 if call.name == "aten::_embedding_bag_backward" else 4)
    d = g.shape[-1]
    return Cost(float(idx.numel * d), _bytes(call.reads()) + num * d * (g.dtype.itemsize if g.dtype else math.nan))


# ---------------------------------------------------------------------------
# torchvision


def _samples(ratio: object) -> int:
    return ratio * ratio if isinstance(ratio, int) and ratio > 0 else 4


@register("torchvision::roi_align", category="elementwise")
def _roi_align(call: OpCall) -> Cost:
    """(input (B, C, H, W), rois (K, 5), spatial_scale, pooled_height, pooled_width, sampling_ratio, aligned)."""
    x, rois = call.need("", 0), call.need("", 1)
    ph, pw, ratio = call.value("", 3), call.value("", 4), call.value("", 5)
    if not isinstance(ph, int) or not isinstance(pw, int):
        raise MissingShapes("pooled size")
    out = TensorSpec((rois.shape[0], x.shape[1], ph, pw), x.dtype)
    samples = out.numel * _samples(ratio)
    item = x.dtype.itemsize if x.dtype else math.nan
    taps = min(float(x.numel), 4.0 * samples) * item
    return Cost(8.0 * samples, taps + rois.nbytes + out.nbytes)


@register("torchvision::_roi_align_backward", category="elementwise")
def _roi_align_backward(call: OpCall) -> Cost:
    """(grad (K, C, ph, pw), rois, spatial_scale, pooled_height, pooled_width, batch_size, channels,
    height, width, sampling_ratio, aligned): atomically accumulated into a zeroed input gradient."""
    g, rois = call.need("", 0), call.need("", 1)
    dims = [call.value("", i) for i in (5, 6, 7, 8)]
    if not all(isinstance(v, int) for v in dims):
        raise MissingShapes("input size")
    grad_in = TensorSpec(tuple(dims), g.dtype)
    return Cost(8.0 * g.numel * _samples(call.value("", 9)), g.nbytes + rois.nbytes + grad_in.nbytes)


@register("torchvision::nms", category="reduction")
def _nms(call: OpCall) -> Cost:
    """(dets (N, 4), scores (N,), iou_threshold): the IoU bit mask, then the greedy keep pass."""
    dets, scores = call.need("", 0), call.need("", 1)
    n = dets.shape[0]
    mask = n * math.ceil(n / 64) * 8
    return Cost(15.0 * n * (n - 1) / 2, dets.nbytes + scores.nbytes + mask + n * INT64.itemsize)


@register("torchvision::deform_conv2d", category="elementwise")
def _deform_conv2d(call: OpCall) -> Cost:
    """(input (N, C, H, W), weight (O, C/g, kh, kw), offset (N, 2*og*kh*kw, Ho, Wo), mask, bias, ...)."""
    x, w, off = call.need("", 0), call.need("", 1), call.need("", 2)
    mask = call.tensor("", 3)
    n, c = x.shape[0], x.shape[1]
    kh, kw = w.shape[2], w.shape[3]
    ho, wo = off.shape[2], off.shape[3]
    columns = n * c * kh * kw * ho * wo
    item = x.dtype.itemsize if x.dtype else math.nan
    reads = min(float(x.numel), 4.0 * columns) * item + off.nbytes + (mask.nbytes if mask else 0.0)
    return Cost(11.0 * columns, reads + columns * item)

