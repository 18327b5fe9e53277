"""The gate compares two runs on one set of ceilings (the baseline's): ceilings re-measured
between two runs of unchanged code move nothing, a run 20% slower still fails. Synthetic
traces analyzed end to end (cost model, metrics, snapshots, baseline file)."""
from __future__ import annotations

import json

import pytest

import roofscope
from roofscope.cli import main
from roofscope.hardware.devices import Ceilings
from roofscope.gate import check, write_baseline
from roofscope.gate.snapshot import Snapshot

from .kineto import TraceBuilder

T, D = 4096, 1024
MM = 2 * T * D * D                                    # 8.59 GFLOP per step
# Step spacing in us: 10 ms with a +-1.5% scatter, as one run's steps have.
SPACING = [10000, 10150, 9900, 10050, 9850, 10100, 9950, 10000]
MEASURED = Ceilings(device="toy", source="measured", peaks={"fp32": 20e12, "tf32": 80e12}, bandwidth=1e12)
# The same machine measured again under load: every roof lower (a 2-core CPU's ranged 3-69 GFLOP/s).
REMEASURED = Ceilings(device="toy", source="measured", peaks={"fp32": 5.6e12, "tf32": 22e12}, bandwidth=0.31e12)


def trace(path, slow: float = 1.0, dtype: str = "float", kernel: str = "volta_sgemm_128x64_nn"):
    """Eight steps of one GEMM each (fp32 unless ``dtype``, on the GEMM ``kernel`` names); ``slow`` stretches
    every time (steps, kernels) by that factor."""
    b = TraceBuilder()
    t = 0.0
    for i, spacing in enumerate(SPACING):
        s = spacing * slow
        b.annotation(f"ProfilerStep#{i + 1}", t, s * 0.98)
        ext = b.op("aten::mm", t + 10, 20, [[T, D], [D, D]], [dtype, dtype])
        b.launch_kernel(kernel, t + 11, t + 50, s * 0.8, ext=ext)
        t += s
    return b.write(path)


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    d = tmp_path_factory.mktemp("gate-ceilings")
    return {"base": trace(d / "base.json"), "slow": trace(d / "slow.json", slow=1.2), "dir": d}


def snapshot(path, ceilings: Ceilings) -> Snapshot:
    return Snapshot.from_result(roofscope.analyze(path, ceilings=ceilings), source=path)


def test_unchanged_run_on_remeasured_ceilings_passes(traces):
    base = snapshot(traces["base"], MEASURED)
    rerun = snapshot(traces["base"], REMEASURED)
    assert base.metrics.flops_per_step == rerun.metrics.flops_per_step == MM
    # Each run's own MFU: the same FLOPs over the same steps against a peak 20/5.6 = 3.57x lower.
    assert rerun.median("hfu") == pytest.approx(base.median("hfu") * 20 / 5.6)
    assert rerun.median("mbu") == pytest.approx(base.median("mbu") * 1 / 0.31)
    # Compared as they were, the baseline (re-measured, the run fast) would say HFU fell 72%:
    # (1 - 5.6/20) = 72%. On the baseline's ceilings nothing moved: every check passes, change 0.
    r = check(base, rerun, max_regression="hfu=5%,mbu=5%")
    c = {x.name: x for x in r.checks}
    assert c["hfu"].run == pytest.approx(c["hfu"].base) and c["hfu"].status == "pass"
    assert c["mbu"].run == pytest.approx(c["mbu"].base) and c["mbu"].status == "pass"
    assert c["step_time"].change == pytest.approx(0.0) and c["step_time"].status == "pass"
    assert r.passed and r.exit_code == 0
    assert any("compared on the baseline's" in w for w in r.warnings)


def test_twenty_percent_slower_fails_on_either_ceilings(traces, tmp_path):
    # Baseline file from the measured ceilings; the slowed run analyzed on the re-measured ones.
    path = tmp_path / "baseline.json"
    write_baseline(snapshot(traces["base"], MEASURED), path)
    assert json.loads(path.read_text())["ceilings"]["peaks"] == {"fp32": 20e12, "tf32": 80e12}
    r = check(snapshot(traces["slow"], REMEASURED), path)
    c = {x.name: x for x in r.checks}
    # Every step 1.2x its baseline step: median step time +20%; each slowed step is slower than every
    # baseline step (the slowest baseline step, 10.15 ms, < the fastest slowed one, 9.85 x 1.2 = 11.82):
    # p = 1/C(16,8) = 1/12870.
    assert c["step_time"].change == pytest.approx(0.2, rel=1e-3)
    assert c["step_time"].p_value == pytest.approx(1 / 12870)
    # HFU on the baseline's ceilings: 1/1.2 of the baseline's, -16.7% (on its own, it would be +198%).
    assert c["hfu"].change == pytest.approx(1 / 1.2 - 1, rel=1e-3)
    assert {x.name for x in r.failures} >= {"step_time", "hfu", "mbu"}
    assert r.exit_code == 1


def test_baseline_without_the_runs_peak_cannot_decide(traces):
    # An older baseline without per-precision peaks, whose ceilings held no compute peak: the run's
    # MFU cannot be put on the baseline's ceilings, so those checks cannot decide.
    base = snapshot(traces["base"], MEASURED)
    base.ceilings.pop("peaks")
    base.ceilings["peak_flops"] = None
    r = check(snapshot(traces["base"], REMEASURED), base)
    c = {x.name: x for x in r.checks}
    assert c["hfu"].status == "undecided"
    assert c["hfu"].note == ("cannot compare on one set of ceilings: the baseline stores no fp32 peak (the run's HFU"
                             " is against fp32 peak_flops); rewrite the baseline")
    assert c["mbu"].status == "pass" and r.exit_code == 3


def test_cli_gate_against_a_baseline_on_other_ceilings(traces, tmp_path, capsys):
    # The CLI analyzes the run on the ceilings it resolves (the trace names an H100: its datasheet,
    # fp32 67 TFLOP/s, 3.35x the baseline's measured 20): re-expressed on the baseline's, unchanged.
    path = tmp_path / "baseline.json"
    write_baseline(snapshot(traces["base"], MEASURED), path)
    capsys.readouterr()
    code = main(["gate", str(traces["base"]), "--baseline", str(path)])
    out = capsys.readouterr().out
    assert code == 0, out
    # step_time, MFU (forward FLOPs: no backward ran), HFU, MBU and GPU idle, all +0.0%.
    assert "PASS: 5 checks passed" in out and out.count("+0.0") == 5
    assert ("the run's ceilings differ from the baseline's (peak_flops: baseline 2e+13, run 6.7e+13, bandwidth:"
            " baseline 1e+12, run 3.35e+12): MFU/HFU/MBU compared on the baseline's") in " ".join(out.split())
