"""Kernel categories from kernel names, for kernels whose launching op says nothing.

Patterns are matched once per distinct kernel name (names are categorical), so a
million kernels cost a few thousand regex searches.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from roofscope.analyzers.ingest.names import as_text, lookup

CATEGORIES = ("gemm", "conv", "attention", "elementwise", "reduction", "normalization", "softmax",
              "optimizer", "copy", "embedding", "memcpy", "memset", "communication", "other")

# Patterns match whole words of the name split at punctuation and camelCase, lower-cased
# (``ncclDevKernel_AllReduce`` -> `` nccl dev kernel all reduce ``): a short word like
# ``lamb`` or ``norm`` must not match inside ``{lambda()#1}`` or ``normal_kernel``. Library
# prefixes that are never a word of their own (``sgemm``, ``cutlass_80_tensorop``) stay unanchored.
# First match wins; order matters (an attention kernel may mention gemm, a conv kernel
# may mention "implicit_gemm").
_RULES: tuple[tuple[str, re.Pattern[str]], ...] = tuple((cat, re.compile(rx)) for cat, rx in (
    # NCCL and RCCL (same kernel names), vLLM's custom all-reduce
    ("communication", r"nccl|rccl|msccl|\ball ?reduce|\ball ?gather|\breduce ?scatter|\ball ?to ?all\b"
                      r"|\bsend ?recv|\bcross device"),
    # FlashAttention, xformers/CK fmha (ck_tile FmhaFwdKernel), aiter paged attention and MLA
    ("attention", r"flash|fmha|attention|\battn|sdpa|\bmha\b|\bmla\b"),
    # cuDNN/MIOpen convolutions (implicit GEMM, Winograd, dgrad/wgrad engines)
    ("conv", r"\bconv(?!ert)|convolve|winograd|implicit ?gemm|\bigemm|dgrad|wgrad|fprop|[sh]cudnn|\bfft2d"),
    # cuBLAS/cuBLASLt/CUTLASS/nvjet, hipBLASLt/Tensile (Cijk_...), rocBLAS, CK gemm, aiter MoE
    # and skinny GEMMs, Triton templates
    ("gemm", r"gemm|gemv|cutlass|cublas|hipblas|rocblas|xmma|nvjet|matmul|\bmm\b|\bsplit ?k\b|triton tem"
             r"|tensorop|\bcijk\b|fmoe|\bmoe gemm"),
    ("normalization", r"norm(?!al\b)|\bbn (?:fw|bw)"),
    ("softmax", r"soft ?max"),
    # before optimizer: FBGEMM's embedding backward kernels fuse the optimizer (..._rowwise_adagrad_...)
    ("embedding", r"embedding|index ?select|indexing backward|\bgather|\bscatter"),
    ("optimizer", r"\badam|\bsgd\b|\blamb\b|\badagrad|\brmsprop|multi tensor apply|fused optim"),
    ("reduction", r"\breduce(?!d)|triton red|triton per|\b(?:sum|mean|max|min|argmax|argmin)\b|\bcub\b"),
    ("copy", r"\bcopy|\bcat\b|cat ?array|transpose|permute|contiguous|nchw ?to ?nhwc|nhwc ?to ?nchw"),
    ("elementwise", r"elementwise|triton poi|vectorized|unrolled|pointwise|\bfill|activation|gelu|relu|silu"
                    r"|sigmoid|\btanh"),
))
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_NON_WORD = re.compile(r"[^A-Za-z0-9]+")


def _words(name: str) -> str:
    return " " + _NON_WORD.sub(" ", _CAMEL.sub(" ", name)).strip().lower() + " "


def category_of(name: str) -> str:
    """Category of one GPU kernel name (see :data:`CATEGORIES`)."""
    words = _words(name)
    for cat, rx in _RULES:
        if rx.search(words):
            return cat
    return "other"


def kernel_categories(names: pd.Series, cats: pd.Series | None = None) -> np.ndarray:
    """Category per kernel row: memcpy/memset from the activity type, else from the name."""
    out = lookup(names, category_of)
    if cats is not None:
        c = as_text(cats)
        out = np.where(c == "gpu_memcpy", "memcpy", np.where(c == "gpu_memset", "memset", out))
    return out
