"""What kernel names tell the costs: element types that the ops' records leave out, and the size of
multi-tensor streams no op costs.

* Kineto gives a tensor list's elements no dtype, so the cost model counts them as fp32; the kernels
  say better: multi_tensor_apply functors name their element type, cat's copies its size
  (:func:`fix_tensorlist_dtype`).
* multi_tensor_apply kernels launched with no costed op (apex's fused Adam, an optimizer op recorded
  without shapes) are streams of at most ``grid.x`` chunks (:func:`multi_tensor_streams`).
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from roofscope.analyzers.cost.hidden_args import CHUNK
from roofscope.analyzers.ingest.linking import take
from roofscope.analyzers.ingest.names import per_name

# multi_tensor_apply functors take the element type as their first template argument; cat's kernels
# copy elements as an opaque type of their size (CatArrayBatchedCopy<OpaqueType<2u>, ...>, or
# OpaqueType<(unsigned int)2> as some demanglers write it).
_FUNCTOR_HALF = re.compile(r"Functor<\s*c10::(?:BFloat16|Half)\s*,")
_CAT_ITEM = re.compile(r"CatArrayBatchedCopy\w*<(?:[\w:]*\(anonymous namespace\)::|[\w:]*<unnamed>::)?"
                       r"(?:OpaqueType<\(?(?:unsigned int\)\s*)?(\d+)u?>|(c10::BFloat16|c10::Half|float|double|long|int)\b)")
_TYPE_ITEM = {"c10::BFloat16": 2.0, "c10::Half": 2.0, "float": 4.0, "double": 8.0, "long": 8.0, "int": 4.0}
_CAT_OPS = ("aten::cat", "aten::_cat", "aten::stack")


def fix_tensorlist_dtype(names: pd.Series, oc: pd.DataFrame, op_names: np.ndarray, cost_op: np.ndarray,
                          nbytes: np.ndarray) -> None:
    """Kineto records no dtype for TensorList arguments, so the cost model counts their elements as
    fp32. The kernels name the element type: multi_tensor_apply's functors in their template
    arguments (a 16-bit type: the bytes were counted twice over), cat's copies by its size (a bf16
    LoRA fine-tune's cat sat at 129% of the memory roof with its bytes counted as fp32). A cat given
    an ``out=`` tensor has its dtype from it (formulas/memory.py) and is left alone."""
    if not len(oc):
        return
    at = np.maximum(cost_op, 0)  # sized from run.json's parameter dtypes: already right
    foreach = (oc["category"].to_numpy()[at] == "optimizer") & (oc["cost_source"].to_numpy()[at] != "run")
    cand = np.flatnonzero((cost_op >= 0) & foreach)
    if cand.size:
        half = names.iloc[cand].astype(str).str.contains(_FUNCTOR_HALF).to_numpy(dtype=bool)
        nbytes[cand[half]] *= 0.5
    cat = np.flatnonzero((cost_op >= 0) & np.isin(take(op_names, cost_op, ""), _CAT_OPS)
                         & (oc["dtype"].to_numpy()[at] == "fp32"))
    if cat.size:
        found = names.iloc[cat].astype(str).str.extract(_CAT_ITEM)
        item = found[0].astype(float).fillna(found[1].map(_TYPE_ITEM)).to_numpy(dtype=float)
        nbytes[cat] *= np.where(np.isnan(item), 1.0, item / 4.0)


# multi_tensor_apply kernels (torch's foreach / fused optimizers, apex): ``TensorListMetadata<depth>``
# lists, chunks of 65,536 elements, one block per chunk; the functor names its element type first.
_MULTI_TENSOR = re.compile(r"multi_tensor_apply_kernel<[^<>,]*TensorListMetadata<(\d)>\s*,\s*[^<>,]*?(\w+)<\s*"
                           r"(?:c10::)?(\w+)")
_ITEM = {"float": (4, "fp32"), "double": (8, "fp64"), "Half": (2, "fp16"), "__half": (2, "fp16"),
         "BFloat16": (2, "bf16"), "__nv_bfloat16": (2, "bf16")}
_STATEFUL = re.compile(r"Adam|Lamb|Adagrad|SGD|Novograd|Lion", re.I)


def multi_tensor_streams(k: pd.DataFrame, uncosted: np.ndarray, flops: np.ndarray, nbytes: np.ndarray) -> np.ndarray:
    """Cost multi_tensor_apply kernels that no op costs (launched with no CPU op: apex's fused Adam
    in HTA's A100 trace, 25% of its time; or an op recorded without shapes) as streams: at most
    ``grid.x`` chunks of 65,536 elements (an upper bound: a tensor's last chunk is partial; the
    caller drops a bound faster than the memory roof allows), each
    element of every list read once and of the written lists written once (optimizer functors
    write all lists but the gradients, norms none, others one). Returns the precision of the
    kernels it costed, "" elsewhere."""
    out = np.full(len(k), "", dtype=object)
    if "grid" not in k:
        return out
    mta = per_name(k["name"], lambda s: s.str.contains("multi_tensor_apply", regex=False)).astype(bool)
    cand = np.flatnonzero(uncosted & np.isnan(flops) & mta)
    if not cand.size:
        return out
    codes, uniques = pd.factorize(k["name"].iloc[cand].astype(str))
    shape: dict[int, tuple[int, int, int, str]] = {}  # name code -> FLOPs/element, lists moved, itemsize, precision
    for c, name in enumerate(uniques):
        m = _MULTI_TENSOR.search(name)
        if m is None or m.group(3) not in _ITEM:
            continue
        depth, functor = int(m.group(1)), m.group(2)
        item, prec = _ITEM[m.group(3)]
        if _STATEFUL.search(functor):
            writes, per = depth - 1, 14 if "adam" in functor.lower() else 2 * depth
        elif "norm" in functor.lower():
            writes, per = 0, 2
        else:
            writes, per = 1, depth
        shape[c] = (per, depth + writes, item, prec)
    hit = np.isin(codes, list(shape))
    grids = k["grid"].to_numpy(dtype=object)
    for i, c in zip(cand[hit].tolist(), codes[hit].tolist()):
        g = grids[i]
        if isinstance(g, (list, tuple)) and g:
            per, lists, item, prec = shape[c]
            elems = float(g[0]) * CHUNK
            flops[i], nbytes[i], out[i] = per * elems, elems * lists * item, prec
    return out
