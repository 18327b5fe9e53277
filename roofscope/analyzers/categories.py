"""Kernel categories from kernel names, for kernels whose launching op says nothing.

Patterns are matched once per distinct kernel name (names are categorical), so a
million kernels cost a few thousand regex searches.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

CATEGORIES = ("gemm", "conv", "attention", "elementwise", "reduction", "normalization", "softmax",
              "optimizer", "copy", "embedding", "memcpy", "memset", "communication", "other")

# First match wins; order matters (an attention kernel may mention gemm, a conv kernel
# may mention "implicit_gemm").
_RULES: tuple[tuple[str, re.Pattern[str]], ...] = tuple((cat, re.compile(rx, re.I)) for cat, rx in (
    ("communication", r"nccl|all_?reduce|all_?gather|reduce_?scatter|alltoall|sendrecv|cross_device"),
    ("attention", r"flash|fmha|attention|sdpa|mha_|_attn"),
    ("conv", r"conv|cudnn::|winograd|implicit_?gemm|dgrad|wgrad|fprop"),
    ("gemm", r"gemm|cutlass|cublas|xmma|nvjet|matmul|_mm_|splitk|triton_tem|sm\d+_.*tensorop"),
    ("normalization", r"norm"),
    ("softmax", r"softmax"),
    ("optimizer", r"adam|sgd|lamb|multi_tensor_apply|fused_optim"),
    ("embedding", r"embedding|index_select|indexing_backward|gather|scatter"),
    ("reduction", r"reduce|triton_red|triton_per|sum_|mean_|max_|argmax|cub::"),
    ("copy", r"copy|cat_|catarray|transpose|permute|contiguous"),
    ("elementwise", r"elementwise|triton_poi|vectorized|unrolled|pointwise|fill|activation|gelu|relu|silu"),
))


def category_of(name: str) -> str:
    """Category of one GPU kernel name (see :data:`CATEGORIES`)."""
    for cat, rx in _RULES:
        if rx.search(name):
            return cat
    return "other"


def kernel_categories(names: pd.Series, cats: pd.Series | None = None) -> np.ndarray:
    """Category per kernel row: memcpy/memset from the activity type, else from the name."""
    codes, uniques = pd.factorize(names.astype(str))
    by_name = np.array([category_of(u) for u in uniques] or ["other"], dtype=object)
    out = by_name[np.maximum(codes, 0)]
    if cats is not None:
        c = cats.astype(str).to_numpy()
        out = np.where(c == "gpu_memcpy", "memcpy", np.where(c == "gpu_memset", "memset", out))
    return out
