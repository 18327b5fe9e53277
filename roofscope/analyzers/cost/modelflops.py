"""Model FLOPs per step for MFU: what the model needs, not what the hardware did.

In order, the first that applies (``source``, and the ``formula`` the summary prints):

1. ``model_flops``: the user's ``--model-flops-per-step``.
2. ``palm``: a transformer (attention kernels in the forward phase) whose run knows its
   parameters (from the optimizer) and tokens per step: PaLM's (Chowdhery et al. 2022,
   appendix B) 6 · N_non-embedding · T + 12 · L · H · Q · S · T, with N_non-embedding the
   optimizer's parameters less the embedding tables looked up by ``aten::embedding`` (a
   lookup does no matmul). The attention term is 3 × the forward attention kernels' FLOPs
   (4 · B · H · S_q · S_k · Q per call is 12 · H · Q · S · T / 3 over L layers), from the
   cost model, so causal attention counts its lower triangle as the kernels compute it.
3. ``forward_x3`` (training: a backward ran) / ``forward``: the forward phase's matmul,
   convolution and attention FLOPs per step (analyzers/views/phases.py) × 3 for training
   (backward = 2 × forward) or × 1 for inference. Embedding lookups, elementwise work and
   recomputation in the backward are not model FLOPs.
4. ``params_tokens``: 6 (training) or 2 (inference) · N_non-embedding · T when the trace
   has no forward matmuls to count (e.g. compiled kernels without Inductor's metadata).

None when nothing applies: MFU then equals HFU (``op_counted``).
"""
from __future__ import annotations

from dataclasses import dataclass
import numpy as np
import pandas as pd

from roofscope.run.schema import RUN_SCHEMA_VERSION, RunMeta

MODEL_CATEGORIES = ("gemm", "conv", "attention")
FORMULAS = {
    "model_flops": "--model-flops-per-step",
    "palm": "6 * N_non_embedding * T + 12 * L * H * Q * S * T (PaLM)",
    "forward_x3": "3 * forward matmul/conv/attention FLOPs (trace)",
    "forward": "forward matmul/conv/attention FLOPs (trace)",
    "params_tokens": "6 * N_non_embedding * T",
    "params_tokens_inference": "2 * N_non_embedding * T",
}


@dataclass(frozen=True)
class ModelFlops:
    """Model FLOPs per step and their ``source`` (a :data:`FORMULAS` key); both None when nothing
    applies (MFU then equals HFU)."""

    per_step: float | None = None
    source: str | None = None

    @property
    def formula(self) -> str:
        """The formula the summary prints (``counted FLOPs`` without an estimate)."""
        return FORMULAS.get(self.source or "", "counted FLOPs")


def _step_count(k: pd.DataFrame) -> int:
    in_steps = k["step"] >= 0
    return max(1, int(k.loc[in_steps, "step"].nunique())) if in_steps.any() else 1


def embedding_params(signatures: pd.DataFrame) -> int:
    """Elements of the distinct tables ``aten::embedding`` looked up (``signatures``: the trace's op
    signatures, ``name`` and ``input_dims``)."""
    if not len(signatures):
        return 0
    emb = signatures[signatures["name"].astype(str) == "aten::embedding"]
    tables = {tuple(d[0]) for d in emb["input_dims"] if isinstance(d, list) and d and isinstance(d[0], list)
              and len(d[0]) == 2}
    return int(sum(v * dim for v, dim in tables))


def model_flops(kernels: pd.DataFrame, signatures: pd.DataFrame, run: RunMeta | None) -> ModelFlops:
    """Model FLOPs per step (see the module docstring). ``kernels``: the costed kernels with their
    ``step``, ``phase``, ``category`` and ``flops``; ``signatures``: the trace's op signatures (for
    the embedding tables); ``run``: run.json typed (its ``model_flops_per_step``, ``optimizer`` and
    ``tokens_per_step``), if the trace came from a Run."""
    run = run if run is not None else RunMeta(schema_version=RUN_SCHEMA_VERSION)
    if run.model_flops_per_step:
        return ModelFlops(float(run.model_flops_per_step), "model_flops")
    k = kernels
    if not len(k) or "phase" not in k:
        return ModelFlops()
    steps = _step_count(k)
    in_steps = (k["step"] >= 0).to_numpy() if (k["step"] >= 0).any() else np.ones(len(k), dtype=bool)
    training = bool((k["phase"].to_numpy()[in_steps] == "backward").any()) or run.optimizer is not None
    forward = in_steps & (k["phase"] == "forward").to_numpy()
    model = forward & k["category"].isin(MODEL_CATEGORIES).to_numpy()
    params = run.optimizer.params if run.optimizer is not None else None
    tokens = run.tokens_per_step
    n_ne = max(0.0, float(params) - embedding_params(signatures)) if params else None
    flops = np.nan_to_num(k["flops"].to_numpy(dtype=np.float64))
    attn = model & (k["category"] == "attention").to_numpy()
    if training and n_ne and tokens and attn.any():
        return ModelFlops(6.0 * n_ne * float(tokens) + 3.0 * float(flops[attn].sum()) / steps, "palm")
    fwd = float(flops[model].sum()) / steps
    if fwd > 0:
        return ModelFlops(3.0 * fwd, "forward_x3") if training else ModelFlops(fwd, "forward")
    if n_ne and tokens:
        return ModelFlops((6.0 if training else 2.0) * n_ne * float(tokens),
                          "params_tokens" if training else "params_tokens_inference")
    return ModelFlops()
