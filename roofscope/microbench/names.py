"""The names of the matmul results: the GPU benchmark list (gpu.py) writes them, and the cache
reader parses them (cache.random_operands_only) without importing the benchmarks."""
from __future__ import annotations

__all__ = ["DATA", "TENSOR_CORE", "matmul_name"]

# Operand data the tensor-core matmuls are timed on.
DATA = ("random", "zeros")
# Precisions cuBLAS runs on tensor cores: the ones timed on both kinds of DATA.
TENSOR_CORE = ("bf16", "fp16", "fp8", "int8", "tf32")


def matmul_name(precision: str, data: str = "random") -> str:
    """``matmul bf16``, ``matmul bf16 zeros``: a matmul result's name."""
    return f"matmul {precision}{' zeros' if data == 'zeros' else ''}"
