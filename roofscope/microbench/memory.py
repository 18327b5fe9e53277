"""Memory ceilings: HBM copy/read/write/triad bandwidth and L2 read bandwidth.

The bandwidth roof is the best of the streaming rates (gpu.py): elementwise kernels
reach the write or triad rate, above a plain copy's (3.19 TB/s against 3.02 on an H100),
and a roof kernels beat makes every class and saving suspect.

HBM buffers are 1-2 GiB, twenty times any L2; each benchmark keeps the best of a
torch and a Triton kernel. Bytes counted are those the kernel must move: a copy
reads and writes each byte, so it counts twice.

Only the read benchmark flushes L2 between repetitions. Copies and writes must
not: a flush would write back the previous run's dirty lines outside the timed
region while the timed run leaves its own in L2, overstating bandwidth by up to
L2/buffer (about 2.5%). Without a flush each run pays its predecessor's
write-back, which is the steady state a training step sees.
"""
from __future__ import annotations

from typing import Callable, Sequence

from roofscope.microbench.timing import TARGET_S, Measurement, best, l2_flusher, rate, time_cuda

_KERNELS: dict = {}


def _kernels() -> dict:
    """Triton streaming kernels, defined on first use (importing must not need triton)."""
    if _KERNELS:
        return _KERNELS
    import triton
    import triton.language as tl

    @triton.jit
    def copy(src, dst, BLOCK: tl.constexpr):
        offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        # Streaming hints: neither side will be reused, so don't let it evict anything.
        tl.store(dst + offs, tl.load(src + offs, eviction_policy="evict_first"),
                 cache_modifier=".cs")

    @triton.jit
    def read(src, out, BLOCK: tl.constexpr):
        offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        tl.store(out + tl.program_id(0), tl.sum(tl.load(src + offs, eviction_policy="evict_first")))

    @triton.jit
    def write(dst, value, BLOCK: tl.constexpr):
        offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        tl.store(dst + offs, tl.full((BLOCK,), 0, tl.float32) + value, cache_modifier=".cs")

    @triton.jit
    def l2_read(src, out, n, repeats, BLOCK: tl.constexpr):
        # Program p reads block (p + r) of the buffer on pass r: a block is never
        # read twice by the same SM in a row, and ".cg" skips L1, so every byte
        # after the first pass comes from L2.
        pid = tl.program_id(0)
        nblocks = n // BLOCK
        acc = tl.zeros((BLOCK,), tl.float32)
        for r in range(repeats):
            blk = (pid + r) % nblocks
            acc += tl.load(src + blk * BLOCK + tl.arange(0, BLOCK), cache_modifier=".cg")
        tl.store(out + pid, tl.sum(acc))

    @triton.jit
    def triad(a, b, c, scalar, BLOCK: tl.constexpr):
        # STREAM's triad, a = b + s * c: two reads and one write per element.
        offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(b + offs, eviction_policy="evict_first")
        y = tl.load(c + offs, eviction_policy="evict_first")
        tl.store(a + offs, x + scalar * y, cache_modifier=".cs")

    _KERNELS.update(copy=copy, read=read, write=write, l2_read=l2_read, triad=triad)
    return _KERNELS


def _buffers(gib: float, pair: bool):
    import torch

    n = int(gib * (1 << 30)) // 4
    src = torch.rand(n, device="cuda")
    return src, (torch.empty_like(src) if pair else None), n


def copy_bench(sizes_gib: Sequence[float], target_s: float = TARGET_S,
               blocks: Sequence[int] = (4096,)) -> Callable[[], Measurement]:
    """HBM copy bandwidth (read + write bytes): ``dst.copy_(src)`` and a Triton copy."""

    def at(gib: float) -> list[Measurement]:
        # One function per size so its buffers are freed on return, before the next size.
        k = _kernels()
        src, dst, n = _buffers(gib, pair=True)
        moved = 2.0 * n * 4
        found = [rate(moved, time_cuda(lambda: dst.copy_(src), target_s=target_s),
                      f"{gib:g} GiB, torch copy_")]
        for block in blocks:
            grid = (n // block,)
            s = time_cuda(lambda: k["copy"][grid](src, dst, BLOCK=block, num_warps=8),
                          target_s=target_s)
            found.append(rate(moved, s, f"{gib:g} GiB, triton block {block}"))
        return found

    return lambda: best([m for gib in sizes_gib for m in at(gib)])


def read_bench(sizes_gib: Sequence[float], target_s: float = TARGET_S,
               block: int = 8192) -> Callable[[], Measurement]:
    """HBM read-only bandwidth: ``torch.sum`` and a Triton per-block reduction."""

    def at(gib: float, flush: Callable[[], object]) -> list[Measurement]:
        import torch

        k = _kernels()
        src, _, n = _buffers(gib, pair=False)
        grid = (n // block,)
        out = torch.empty(grid[0], device="cuda")
        torch_sum = rate(n * 4.0, time_cuda(lambda: src.sum(), target_s=target_s, flush=flush),
                         f"{gib:g} GiB, torch sum")
        s = time_cuda(lambda: k["read"][grid](src, out, BLOCK=block, num_warps=8),
                      target_s=target_s, flush=flush)
        return [torch_sum, rate(n * 4.0, s, f"{gib:g} GiB, triton block {block}")]

    def run() -> Measurement:
        flush = l2_flusher()
        return best([m for gib in sizes_gib for m in at(gib, flush)])

    return run


def write_bench(sizes_gib: Sequence[float], target_s: float = TARGET_S,
                block: int = 4096) -> Callable[[], Measurement]:
    """HBM write-only bandwidth: ``fill_`` and a Triton store kernel."""

    def at(gib: float) -> list[Measurement]:
        k = _kernels()
        dst, _, n = _buffers(gib, pair=False)
        grid = (n // block,)
        fill = rate(n * 4.0, time_cuda(lambda: dst.fill_(1.5), target_s=target_s),
                    f"{gib:g} GiB, torch fill_")
        s = time_cuda(lambda: k["write"][grid](dst, 2.5, BLOCK=block, num_warps=8),
                      target_s=target_s)
        return [fill, rate(n * 4.0, s, f"{gib:g} GiB, triton block {block}")]

    return lambda: best([m for gib in sizes_gib for m in at(gib)])


def triad_bench(sizes_gib: Sequence[float], target_s: float = TARGET_S,
                block: int = 4096) -> Callable[[], Measurement]:
    """HBM bandwidth of an elementwise triad ``a = b + s * c`` (2 reads + 1 write counted):
    ``torch.add(b, c, alpha=s, out=a)`` and a Triton kernel."""

    def at(gib: float) -> list[Measurement]:
        import torch

        k = _kernels()
        b, a, n = _buffers(gib, pair=True)
        c = torch.rand_like(b)
        moved = 3.0 * n * 4
        found = [rate(moved, time_cuda(lambda: torch.add(b, c, alpha=0.5, out=a), target_s=target_s),
                      f"{gib:g} GiB x 3, torch add")]
        grid = (n // block,)
        s = time_cuda(lambda: k["triad"][grid](a, b, c, 0.5, BLOCK=block, num_warps=8), target_s=target_s)
        found.append(rate(moved, s, f"{gib:g} GiB x 3, triton block {block}"))
        return found

    return lambda: best([m for gib in sizes_gib for m in at(gib)])


def l2_bench(sizes_mib: Sequence[int], repeats: int = 64, target_s: float = TARGET_S,
             block: int = 2048) -> Callable[[], Measurement]:
    """L2 read bandwidth: a working set far below L2 size read ``repeats`` times per launch."""

    def at(mib: int) -> Measurement:
        import torch

        k = _kernels()
        sms = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
        n = (mib << 20) // 4 // block * block
        src = torch.rand(n, device="cuda")
        # Enough programs to keep every SM busy, independent of the buffer size.
        grid = (max(n // block, 8 * sms),)
        out = torch.empty(grid[0], device="cuda")
        s = time_cuda(lambda: k["l2_read"][grid](src, out, n, repeats, BLOCK=block, num_warps=8),
                      target_s=target_s)
        moved = 4.0 * block * grid[0] * repeats
        return rate(moved, s, f"{mib} MiB working set, {repeats} reads/program, triton .cg")

    return lambda: best([at(mib) for mib in sizes_mib])
