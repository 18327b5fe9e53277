"""Optimizer ops: ``aten::_foreach_*`` (per list element, like the elementwise table) and fused Adam/SGD."""

from __future__ import annotations

from roofscope.analyzers.cost.formulas.elementwise import ELEMENTWISE
from roofscope.analyzers.cost.formulas.records import TENSORS, Cost, MissingShapes, OpCall, TensorSpec, _bytes, _cost
from roofscope.analyzers.cost.formulas.registry import register

_FOREACH_SPECIAL = {"norm", "max", "copy", "zero"}


def _foreach(call: OpCall) -> Cost:
    base = call.name[len("aten::_foreach_"):]
    inplace = base.endswith("_")
    base = base.rstrip("_")
    lists = [a for a in call.args if a.kind == TENSORS]
    if not lists or not lists[0].tensors:
        raise MissingShapes("tensor list")
    selfs = lists[0].tensors
    n = sum(t.numel for t in selfs)
    if base in ("norm", "max"):  # one 0-dim result per tensor
        per = 2 if base == "norm" else 1
        return _cost(call, per * n, [TensorSpec((), t.dtype) for t in selfs])
    if base == "copy":
        return Cost(0.0, _bytes(selfs) + _bytes(lists[1].tensors if len(lists) > 1 else ()))
    if base == "zero":
        return Cost(0.0, _bytes(selfs))
    per = ELEMENTWISE[base][0]
    outs = [s for a in call.args if a.mutable for s in a.specs] if inplace else [t.like() for t in selfs]
    return _cost(call, per * n, outs or list(selfs))


@register("aten::_fused_adam_", "aten::_fused_adamw_", "aten::_fused_adam", "aten::_fused_adamw",
          category="optimizer")
def _fused_adam(call: OpCall) -> Cost:
    params, grads, m, v, vmax, steps = (call.arg("", i) for i in range(6))
    if params is None or not params.tensors:
        raise MissingShapes("tensor list")
    n = sum(t.numel for t in params.tensors)
    amsgrad = bool(vmax and vmax.tensors)
    wd = call.value("weight_decay", 9, 0.0)
    unscale = call.tensor("grad_scale", 13) is not None
    # decay 1 (adamw) / 2 (adam: g += wd*p), m lerp 3, v update 4, denom sqrt+div+add 3, update 3
    per = 13 + (wd != 0) * (1 if "adamw" in call.name else 2) + amsgrad + unscale
    rw = params.tensors + m.tensors + v.tensors + (vmax.tensors if amsgrad else ())  # type: ignore[union-attr]
    total = 2 * _bytes(rw) + _bytes(grads.tensors) * (2 if unscale else 1)  # type: ignore[union-attr]
    total += _bytes(steps.tensors if steps else ()) + _bytes([t for a in call.args[6:] for t in a.specs])
    return Cost(float(per * n), total)


@register("aten::_fused_sgd_", "aten::_fused_sgd", category="optimizer")
def _fused_sgd(call: OpCall) -> Cost:
    params, grads, bufs = (call.arg("", i) for i in range(3))
    if params is None or not params.tensors:
        raise MissingShapes("tensor list")
    n = sum(t.numel for t in params.tensors)
    momentum = bool(bufs and bufs.tensors) and call.value("momentum", 4, 1.0) != 0
    wd = call.value("weight_decay", 3, 0.0) != 0
    per = 2 + 2 * wd + 2 * momentum  # update 2, decay 2, momentum 2
    total = 2 * _bytes(params.tensors) + _bytes(grads.tensors)  # type: ignore[union-attr]
    if momentum:
        total += 2 * _bytes(bufs.tensors)  # type: ignore[union-attr]
    return Cost(float(per * n), total + _bytes([t for a in call.args[3:] for t in a.specs]))


@register("aten::_amp_foreach_non_finite_check_and_unscale_", category="optimizer")
def _amp_unscale(call: OpCall) -> Cost:
    """GradScaler's unscale: (grads!, found_inf!, inv_scale): each gradient checked and multiplied
    in place (2 FLOPs per element), read and written once."""
    grads = call.arg("", 0)
    if grads is None or not grads.tensors:
        raise MissingShapes("tensor list")
    n = sum(t.numel for t in grads.tensors)
    return Cost(2.0 * n, 2 * _bytes(grads.tensors) + _bytes([t for a in call.args[1:] for t in a.specs]))
