"""The costs that the device's memory roof decides, settled before placement.

The cost stage (roofscope.analyzers.cost.attribution) knows no device, and hands on two choices that
only a bandwidth can make (:class:`~roofscope.analyzers.cost.attribution.RoofChoices`):

* a layout kernel of a matmul-class op reads and writes one of the op's operands, which one
  the trace does not say: the largest that the kernel's duration allows at the roof. A kernel
  too short for any operand moved less than a whole one: no bytes (latency);
* a multi-tensor stream's bytes are an upper bound from its grid (many small tensors leave
  chunks part-empty): a bound that the kernel's duration rules out at the roof says nothing,
  so the stream's cost is dropped.

Without a bandwidth (no ceilings) the cost stage's answers stand: layout kernels share their
op's bytes by duration, and every stream keeps its bound.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from roofscope.analyzers.cost.attribution import RoofChoices


def settle(kernels: pd.DataFrame, choices: RoofChoices, bandwidth: float | None) -> None:
    """Make ``choices`` for ``kernels`` (attribute()'s frame, rows in its order) at ``bandwidth``
    (bytes/s), in place. Runs before anything reads the cost columns (cost.graphs reads
    ``cost_source`` to leave streams alone)."""
    if not bandwidth:
        return
    dur_s = kernels["dur_ns"].to_numpy(dtype=np.float64) / 1e9
    nbytes = kernels["bytes"].to_numpy(dtype=np.float64, copy=True)
    rows = choices.layout_rows
    for i, op, t in zip(rows.tolist(), kernels["cost_op"].to_numpy()[rows].tolist(), dur_s[rows].tolist()):
        sizes = choices.operand_bytes[op]
        fits = sizes[sizes <= t * bandwidth]
        nbytes[i] = fits[-1] if fits.size else 0.0
    kernels["bytes"] = nbytes

    at = choices.unstreamed.index.to_numpy()
    out = nbytes[at] > dur_s[at] * bandwidth
    if not out.any():
        return
    for col, back in choices.unstreamed[out].items():
        values = kernels[col].to_numpy().copy()
        values[at[out]] = back.to_numpy()
        kernels[col] = values
