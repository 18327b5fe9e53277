"""Records cpu_sdpa_strides.json.gz: UNet-style spatial attention through scaled_dot_product_attention on
the CPU, once on transposed views (q, k, v [B, heads, HW, C/heads] whose last-dim stride is HW: the
math backend runs) and once on the same tensors made contiguous (the CPU's flash kernel runs), each in a
``ProfilerStep#N`` span.

    python tests/data/record_sdpa_strides.py /tmp/sdpa.json && gzip -9 -n -c /tmp/sdpa.json > tests/data/cpu_sdpa_strides.json.gz
"""
from __future__ import annotations

import sys

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

torch.manual_seed(0)
B, C, H, W, HEADS = 2, 64, 8, 8, 2
h = torch.randn(B, 3 * C, H, W)


def attention(h: torch.Tensor, contiguous: bool) -> torch.Tensor:
    # Heads as channel groups, pixels as the sequence: views with the head dimension strided.
    q, k, v = (t.reshape(B, HEADS, C // HEADS, H * W).transpose(-1, -2) for t in h.chunk(3, dim=1))
    if contiguous:
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    return F.scaled_dot_product_attention(q, k, v)


with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
    for contiguous in (False, True):
        with torch.profiler.record_function(f"ProfilerStep#{int(contiguous) + 1}"):
            attention(h, contiguous)
prof.export_chrome_trace(sys.argv[1])
