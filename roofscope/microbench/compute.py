"""Compute ceilings: cuBLAS matmuls per precision and Triton CUDA-core FMA kernels.

Every benchmark searches a few shapes and keeps the best rate, counted as 2*M*N*K FLOPs.
Tensor-core matmuls run twice, on random operands and on zeros: Hopper tensor cores draw
less power on low-entropy data and run faster on it (an LM head's backward GEMM ran at 854
TFLOP/s on softmax-gradient operands, 827 on random ones; docs/microbench.md), so the
random-operand rate is a roof that real gradients beat. Zeros draw the least power of all.
"""
from __future__ import annotations

import contextlib
from typing import Callable, Iterator, Sequence

from roofscope.microbench.names import DATA
from roofscope.microbench.timing import TARGET_S, Measurement, best, rate, time_cuda

# Elementwise FMA kernel shape: iterations x unrolled steps x independent chains.
_FMA_UNROLL = 8
_FMA_CHAINS = 4
_FMA_BLOCK = 512


class Unsupported(Exception):
    """The device or this torch build cannot run the benchmark (not a failure of it)."""


@contextlib.contextmanager
def tf32_mode(enabled: bool) -> Iterator[None]:
    """Set every TF32 switch torch has and restore all three afterwards, even on error.

    The flags are process-global: leaving TF32 on (or off) would silently change
    the user's own matmuls after a measurement.
    """
    import torch

    matmul, cudnn = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    precision = torch.get_float32_matmul_precision()
    try:
        torch.backends.cuda.matmul.allow_tf32 = enabled
        torch.backends.cudnn.allow_tf32 = enabled
        torch.set_float32_matmul_precision("high" if enabled else "highest")
        yield
    finally:
        torch.set_float32_matmul_precision(precision)
        torch.backends.cuda.matmul.allow_tf32 = matmul
        torch.backends.cudnn.allow_tf32 = cudnn


def _operands(precision: str, shape: tuple[int, int, int], col_major: str = "", data: str = "random"):
    """The matmul of ``a`` (m x k) by ``b`` (k x n) for ``precision`` on ``data`` operands; ``col_major``
    names the operand ("a" or "b") laid out column-major (a transposed view), if any."""
    import torch

    if data not in DATA:
        raise ValueError(f"data must be one of {DATA}, got {data!r}")
    m, n, k = shape

    def fill(rows: int, cols: int, dtype):
        if data == "zeros":
            return torch.zeros(rows, cols, device="cuda", dtype=dtype)
        if dtype == torch.int8:
            return torch.randint(-128, 128, (rows, cols), device="cuda", dtype=dtype)
        if dtype == getattr(torch, "float8_e4m3fn", None):
            return torch.randn(rows, cols, device="cuda", dtype=torch.float16).to(dtype)
        return torch.randn(rows, cols, device="cuda", dtype=dtype)

    if precision == "fp8":
        if not hasattr(torch, "float8_e4m3fn") or torch.cuda.get_device_capability() < (8, 9):
            raise Unsupported("fp8 needs compute capability 8.9+ and torch float8 types")
        # _scaled_mm wants a row-major and b column-major.
        a, b = fill(m, k, torch.float8_e4m3fn), fill(n, k, torch.float8_e4m3fn).t()
        one = torch.tensor(1.0, device="cuda")
        return lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    if precision == "int8":
        a = fill(m, k, torch.int8)
        b = fill(n, k, torch.int8).t() if col_major == "b" else fill(k, n, torch.int8)
        return lambda: torch._int_mm(a, b)
    dtype = {"fp64": torch.float64, "fp32": torch.float32, "tf32": torch.float32,
             "fp16": torch.float16, "bf16": torch.bfloat16}[precision]
    a = fill(k, m, dtype).t() if col_major == "a" else fill(m, k, dtype)
    b = fill(k, n, dtype)
    out = torch.empty(m, n, device="cuda", dtype=dtype)
    return lambda: torch.mm(a, b, out=out)


# Operand layouts timed besides row-major ones: int8's fastest path wants b column-major; cuBLAS's
# fastest fp32 GEMM on CUDA cores is the CUTLASS SIMT kernel it picks for a transposed a (H200,
# 2026-11-26: 53.4-53.6 TFLOP/s where row-major operands gave 50.8-51.7, on every shape tried;
# benchmarks/real_clients/fp32_probe.py). A detector's weight-gradient GEMM (a = grad_out.t())
# ran at 53.6 TFLOP/s, above a row-major ceiling.
_LAYOUTS = {"int8": ("", "b"), "fp32": ("", "a")}

# Idle time before each timed burst: the power cap that long GEMM streams hit (H200: 804 ->
# 689 TFLOP/s within 0.5 s) relaxes, so each configuration starts at boost clock.
COOL_S = 0.2


def matmul_bench(precision: str, sizes: Sequence[int | tuple[int, int, int]], target_s: float = TARGET_S,
                 cool_s: float = COOL_S, data: str = "random") -> Callable[[], Measurement]:
    """cuBLAS(Lt) matmul rate for ``precision`` over ``sizes`` (n for n^3, or (m, n, k)) on
    ``data`` operands (:data:`DATA`); fp32 runs with TF32 off, tf32 with it on."""

    def run() -> Measurement:
        import time

        layouts = _LAYOUTS.get(precision, ("",))
        found = []
        with tf32_mode(precision == "tf32"):
            for size in sizes:
                m, n, k = (size,) * 3 if isinstance(size, int) else size
                for col in layouts:
                    fn = _operands(precision, (m, n, k), col, data)
                    time.sleep(cool_s)
                    s = time_cuda(fn, target_s=target_s)
                    del fn
                    config = f"{m}x{n}x{k}" + (f", {col} col-major" if col else "")
                    found.append(rate(2.0 * m * n * k, s, config))
        return best(found)

    return run


_KERNELS: dict = {}


def _fma_kernel():
    """The Triton FMA kernel, compiled once per process (lazily: importing must not need triton)."""
    if "fma" in _KERNELS:
        return _KERNELS["fma"]
    import triton
    import triton.language as tl

    @triton.jit
    def fma(x_ptr, out_ptr, n_iter, BLOCK: tl.constexpr, UNROLL: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs)
        # Multiplier just below 1 and a small addend keep the chains finite;
        # four independent chains hide the FMA pipeline latency.
        m = x * 0 + 0.999
        c = x * 0 + 0.001
        a0, a1, a2, a3 = x, x + 1, x + 2, x + 3
        for _ in range(n_iter):
            for _u in tl.static_range(UNROLL):
                a0 = a0 * m + c
                a1 = a1 * m + c
                a2 = a2 * m + c
                a3 = a3 * m + c
        # Storing the sum keeps the compiler from deleting the chains.
        tl.store(out_ptr + offs, a0 + a1 + a2 + a3)

    _KERNELS["fma"] = fma
    return fma


def fma_bench(precision: str, iters: Sequence[int], target_s: float = TARGET_S, cool_s: float = COOL_S
              ) -> Callable[[], Measurement]:
    """CUDA-core FMA rate (fp32 or fp64) of a Triton kernel that fills every SM, each
    configuration after ``cool_s`` of idle (the power cap, as for matmuls)."""

    def run() -> Measurement:
        import time

        import torch

        dtype = {"fp32": torch.float32, "fp64": torch.float64}[precision]
        kernel = _fma_kernel()
        sms = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
        # Eight 512-element blocks per SM: enough resident warps to hide latency.
        n = sms * 8 * _FMA_BLOCK
        x = torch.rand(n, device="cuda", dtype=dtype)
        out = torch.empty_like(x)
        grid = (n // _FMA_BLOCK,)
        found = []
        for it in iters:
            def fn(it: int = it) -> None:
                kernel[grid](x, out, it, BLOCK=_FMA_BLOCK, UNROLL=_FMA_UNROLL, num_warps=4)

            time.sleep(cool_s)
            s = time_cuda(fn, target_s=target_s)
            flops = 2.0 * n * it * _FMA_UNROLL * _FMA_CHAINS
            found.append(rate(flops, s, f"triton, {n} elements x {it * _FMA_UNROLL * _FMA_CHAINS} fma"))
        return best(found)

    return run
