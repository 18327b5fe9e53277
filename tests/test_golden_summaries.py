"""Speed work changes no figure: `analyze --json` of every shared external trace matches the digests
recorded before it (tests/golden.py explains the digests and how to re-record them)."""
from __future__ import annotations

import json

import pytest

from tests.conftest import external
from tests.golden import GOLDEN, digests, trace_files

# Sections other changes legitimately alter, by design, and so not compared here: none. Instead the
# digests are re-recorded from main's own code (`git archive main`) each time the speed branch merges
# main, so a failure here is a change made on this branch. At the first such merge (11:10 UTC) the
# lenient decoder (ingest) made the ROCm and Triton traces analyzable; ceilings without a device,
# attribution, metrics and attention formulas (numbers, training, infer) changed the by_* tables and
# summary.metrics/unattributed/total_flops/total_bytes/kernel_time_s/time_by_class on most traces;
# summary.skipped_events/partial_steps/phases are new. Re-recorded again at the second merge
# (11:35 UTC: ROCm runtime names, repaired JSON, phases and CUDA-graph advice from the other helpers).
# Re-recorded 2026-11-25 after the last merges: host-to-device and device-to-host copies are placed on
# the host-link roof (PCIe from the datasheet) instead of HBM, which moves copies between the memory,
# latency and underutilized classes (by_* tables, time_by_class, phases, the underutilized finding's
# saving) and adds host_link to summary.ceilings; checked section by section against 7861d18's output.
# Re-recorded again the same day: summary.above_roof names the compute peak's precision (fp32) for a
# kernel whose FLOPs set its floor, instead of the memory level (empty without levels); 8 traces,
# that section only.
# Re-recorded 2026-11-25 (fourth session): summary.diagnosis gained capture_steps (recorded steps that
# captured a CUDA graph, left out of the terms); [] on all 32 traces, no other section moved.
# Re-recorded 2026-11-25 (gate branch, issue 29.5): summary.metrics of the 4 traces whose 3 x forward
# estimate exceeds the counted FLOPs: MFU is capped at the count (HFU no longer raised to it).
# Re-recorded 2026-11-26 (issue 26, fourth session): summary.above_roof names the level of a kernel above a
# memory roof without cache levels ("memory, no cache roof", was empty); 9 traces, that section only.
# Re-recorded 2026-11-28 (ops branch, issue 39), 8 traces: (a) fp32 GEMMs and convolutions whose kernels are
# NVIDIA tensor-core kernels (cutlass_80_tensorop_s1688gemm_*) are placed on the TF32 roof (hta_a100_rank0,
# trace_diff/control, negative_queue_length_values_check, timeline_analysis and trace_filter's sampled ranks:
# by_* tables, time_by_class, phases, diagnosis; above_roof drops the tensorop kernels that sat at 106-108% of
# fp32); (b) unknown custom ops are costed by their family or signature: fbgemm's FP8 rowwise quantize (quant
# family: total_flops/bytes, the fusion finding's chains) and fbgemm::offsets_range / asynchronous_complete_cumsum
# (memory-bound from their signature: the CPU-only MTIA traces gain those work items, kernels/kernel_time_s);
# unattributed.notes lists them. Checked section by section against main's output (d829e9e).
# Re-recorded 2026-11-28 (gloo over CUDA tensors), 9 NCCL traces, summary.findings only: the exposed-communication
# finding says "ms/step of communication" (it said "of NCCL time", which a gloo job has none of); checked by
# running the previous digests with the old wording restored: 34 passed.
# Re-recorded 2026-11-29 (issue 37, the rule launch_fusion), summary.diagnosis and summary.findings only: every
# trace's skipped list gains launch_fusion, and 5 traces gain its finding and its place in torch_compile's change
# (AMD minitoy, timeline_analysis and trace_filter's sampled ranks, trace_diff/control); checked against 389e143's
# output on hta_a100_rank0 and trace_filter/sampled_rank-0: nothing else moved.
# Re-recorded 2026-11-29 (issue 37, ninth session), summary.diagnosis only: its program gains root_owner, root_attr
# ('' on every trace) and cpu (true on the CPU-only rank); checked against 87d1e16's output on all 33 files:
# nothing else moved.
# Sections that only appear later are new output and pass.
TOLERATED: dict[str, str] = {}

RECORDED = json.loads(GOLDEN.read_text())


def test_every_trace_at_hand_has_digests() -> None:
    assert set(trace_files()) <= set(RECORDED)


@pytest.mark.parametrize("rel", trace_files())
def test_summary_unchanged(rel: str) -> None:
    want, got = RECORDED[rel], digests(external(rel))
    if isinstance(want, str) or isinstance(got, str):
        assert got == want
        return
    # A section that appears only now is new output, not a changed figure.
    changed = sorted(k for k in want if k not in TOLERATED and got.get(k) != want[k])
    assert not changed, f"{rel}: sections changed: {changed}"
