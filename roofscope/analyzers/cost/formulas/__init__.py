"""Per-op FLOP and compulsory-byte formulas, as pure functions of recorded shapes.

A formula receives an :class:`OpCall` (the parsed arguments of one op signature) and
returns a :class:`Cost`.  Formulas are registered by Kineto op name with
:func:`register`; :func:`lookup` also resolves the dynamic families (``triton_*``
Inductor kernels, ``aten::_foreach_*``).  See docs/cost-model.md for the per-element
FLOP counts and the bytes rule.

Importing this package imports every formula module, which registers its formulas:

* ``dtypes``: Kineto dtype strings, ScalarType codes, type promotion
* ``records``: OpCall / Arg / TensorSpec / Cost, MissingShapes; the bytes rule, which tensors an
  op writes, broadcasting
* ``registry``: REGISTRY, register, Formula
* ``flops``: GEMM and convolution FLOP counts (attention's are in ``attention``)
* ``custom`` (not imported here): the user's formulas (``register_formula``, ``--formulas``, entry points)
* ``elementwise``, ``reductions`` (also pooling, norms, softmax, losses), ``matmul``
  (gemm / conv), ``attention`` (SDPA variants, GQA, varlen, paged), ``memory`` (copies, gathers, fills, views), ``optimizer``,
  ``inductor`` (Triton kernels), ``library`` (sort / top-k, indexing, embedding bags, torchvision
  detection ops): the formulas; ``families`` (a package): ops costed by what they are, not by
  their name -- norms, rotary, gated activations, quantization, KV-cache writes, paged and varlen
  attention, MoE, sampling -- under every framework's alias, and by the words of an unknown op's
  name and the shape of its tensors; an unknown custom op of activation-sized tensors from its
  signature

No formula imports torch (``flops`` holds the GEMM/conv/attention counts of
``torch.utils.flop_counter`` as pure functions, roofscope/analyzers/cost/shapes.py the output
shapes of the copies that reshape, as torch's meta kernels compute them), so costing a trace
needs no torch.
"""

from __future__ import annotations

from typing import Any

# importing the formula modules registers their formulas
from roofscope.analyzers.cost.formulas import (  # noqa: F401
    attention,
    elementwise,
    families,
    inductor,
    library,
    matmul,
    memory,
    optimizer,
    reductions,
)
from roofscope.analyzers.cost.formulas.dtypes import (BOOL, DTYPE_BY_NAME, DTYPES, FLOAT32, INT64, SCALAR_TYPE_CODES,
                                                      TENSORLIST_DTYPE, DType, dtype_from_code, parse_dtype,
                                                      promote_types, result_type)
from roofscope.analyzers.cost.formulas.elementwise import ELEMENTWISE
from roofscope.analyzers.cost.formulas.inductor import _triton_formula
from roofscope.analyzers.cost.formulas.matmul import conv_out_shape
from roofscope.analyzers.cost.formulas.memory import VIEW_OPS
from roofscope.analyzers.cost.formulas.optimizer import _FOREACH_SPECIAL, _foreach
from roofscope.analyzers.cost.formulas.records import (NONE, SCALAR, TENSOR, TENSORS, UNKNOWN, Arg, Cost, MissingShapes,
                                                       OpCall, TensorSpec, broadcast_shapes, first_float_precision)
from roofscope.analyzers.cost.formulas.registry import REGISTRY, Formula, register


def lookup(name: Any) -> Formula | None:
    if not isinstance(name, str):
        return None
    f = REGISTRY.get(name)
    if f is not None:
        return f
    if name.startswith("triton_"):
        return _triton_formula(name)
    if name.startswith("aten::_foreach_"):
        base = name[len("aten::_foreach_"):].rstrip("_")
        if base in ELEMENTWISE or base in _FOREACH_SPECIAL:
            return Formula(_foreach, "optimizer", False)
    return families.match(name)


__all__ = [
    "DType", "DTYPES", "SCALAR_TYPE_CODES", "parse_dtype", "dtype_from_code", "promote_types", "TensorSpec",
    "Arg", "OpCall", "Cost", "Formula", "MissingShapes", "REGISTRY", "register", "lookup", "ELEMENTWISE",
    "VIEW_OPS", "broadcast_shapes", "result_type", "conv_out_shape", "first_float_precision", "UNKNOWN",
    "TENSOR", "TENSORS", "SCALAR", "NONE", "TENSORLIST_DTYPE", "DTYPE_BY_NAME", "FLOAT32", "INT64", "BOOL",
]
