"""Which unit a kernel's name says it computes on: tensor (matrix) cores, CUDA cores, or nothing said.

Every vendor library spells its matrix instructions its own way; one table reads them all, first match
wins (tests/test_tensor_core_names.py checks it name by name):

=====================================  =============  ==================================================
name says                              unit           examples
=====================================  =============  ==================================================
``simt``, ``ffma``, ``sgemm``/         CUDA cores     ``cutlass_80_simt_sgemm_*``, ``ampere_sgemm_128x64_nn``,
``dgemm``/``hgemm`` without an MMA     (SIMT)         ``sm90_xmma_gemm_f32f32_..._ffma_...``,
shape, ``implicit_convolve_sgemm``                    ``cudnn::implicit_convolve_sgemm``
``tf32``                               tensor, TF32   ``sm86_xmma_fprop_implicit_gemm_tf32f32_*``
CUTLASS/cuBLAS MMA shapes              tensor         ``cutlass_80_tensorop_s1688gemm_*`` (``s``: fp32
``[sdhib]NNN(N)``: ``s1688``,                         accumulation), ``h16816`` (fp16), ``i8816``
``s16816``, ``h16816``, ``i8816``,                    (int8), ``volta_fp16_s884gemm_*``, ``d884`` (fp64)
``h884``, ``d884``, ...
``tensorop``, ``xmma``, ``hmma``,      tensor         cuDNN/cuBLAS ``sm80_xmma_gemm_*``, Hopper ``wgmma``
``imma``, ``dmma``, ``gmma``,                         tiles, cuBLASLt ``nvjet_*``, CUTLASS 3
``wgmma``, ``nvjet``                                  ``cutlass3x_sm90_tensorop_*``, ``sm90_xmma_*``
``mfma``, ``wmma``, ``xdl``, ``_MI``   matrix         AMD: CK ``*_mfma_*``/``*_wmma_*``/``gemm_xdl``,
+ a shape (``MI16x16x16``)                            hipBLASLt/Tensile ``Cijk_*_MI16x16x16x1_*``
=====================================  =============  ==================================================

An NVIDIA tensor core has no fp32 arithmetic: an fp32 op whose kernel runs on one multiplies in TF32 (or
emulates fp32 with several TF32 products, faster still than the CUDA cores). PyTorch lets cuDNN do
so by default (``torch.backends.cudnn.allow_tf32 = True``), which is why an fp32 convolution whose
kernel is ``cutlass_80_tensorop_s1688gemm_*`` runs at 55-57 TFLOP/s on an H100 (104-108% of the
fp32 CUDA-core roof): :func:`tf32_from_names` places such kernels on the TF32 roof. AMD's matrix
cores multiply fp32 natively (CDNA's fp32 MFMA: the datasheets' fp32 peak), so theirs stay on it.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from roofscope.analyzers.ingest.names import per_name

CUDA_CORES, TENSOR_CORES, TF32, MATRIX_CORES, UNSAID = "cuda", "tensor", "tf32", "matrix", ""

# (unit, pattern), first match wins; matched case-insensitively on the whole kernel name.
TABLE: tuple[tuple[str, re.Pattern[str]], ...] = tuple((unit, re.compile(rx, re.IGNORECASE)) for unit, rx in (
    (CUDA_CORES, r"simt|ffma|implicit_convolve_[sdh]gemm|(?<![a-z0-9])[sdhz]gemm(?:_|\b)(?!.*tensorop)"),
    (TF32, r"tf32"),
    (TENSOR_CORES, r"(?<![a-z])[sdhib]\d{3,5}(?:tf32)?gemm|[sdhi](?:884|1688|16816|8816|16832|16864)"),
    (TENSOR_CORES, r"tensorop|xmma|[hid]mma|w?gmma|nvjet"),
    (MATRIX_CORES, r"mfma|wmma|_xdl|gemm_xdl|_MI\d+x\d+x\d+"),
))


def unit_of(name: str) -> str:
    """The unit ``name``'s kernel computes on: ``cuda``, ``tensor``, ``tf32`` (tensor cores in TF32),
    ``matrix`` (AMD's), or ``""`` when the name says nothing (an elementwise kernel, a Triton template)."""
    for unit, rx in TABLE:
        if rx.search(name):
            return unit
    return UNSAID


def units(names: pd.Series) -> np.ndarray:
    """:func:`unit_of` per row, computed once per distinct name."""
    if not len(names):
        return np.zeros(0, dtype=object)
    return per_name(names, lambda s: s.map(unit_of)).astype(object)


def tf32_from_names(unit: np.ndarray, dtype: np.ndarray) -> np.ndarray:
    """Rows whose fp32 data met NVIDIA tensor cores, so were multiplied in TF32: the name says TF32 or
    tensor cores, the op's data are fp32."""
    return (dtype == "fp32") & np.isin(unit, (TF32, TENSOR_CORES))
