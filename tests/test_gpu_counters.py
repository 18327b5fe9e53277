"""`roofscope run --counters ncu` on a real GPU with Nsight Compute (run on the device machine)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from roofscope.run import counters

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


def test_run_with_ncu_counters_matches_every_profiled_launch(tmp_path):
    from roofscope.collectors.counters.ncu import NcuError, find_ncu

    try:
        find_ncu()
    except NcuError as e:
        pytest.skip(str(e))
    out = tmp_path / "run"
    res = subprocess.run([sys.executable, "-m", "roofscope", "run", "-o", str(out), "--settle", "0", "--wait", "1", "--warmup", "1",
                          "--active", "2", "--counters", "ncu", "-q", str(EXAMPLES / "mlp.py"), "--steps", "5",
                          "--width", "256", "--batch", "128"],
                         capture_output=True, text=True, timeout=600, cwd=tmp_path,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(
                             p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)})
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    c = counters.load(out)
    assert c is not None and (out / counters.COUNTERS_REPORT).is_file()
    join = c.meta["join"]
    assert join["matched"] == join["ncu_kernels"] > 0, join
    assert join["name_mismatches"] == 0
    assert (c.table["correlation"] >= 0).all()
    # fp32 Linear layers: CUDA-core or TF32 FLOPs were counted, and every launch has a time.
    assert (c.table["time_ns"] > 0).all()
    assert (c.table["flops_fp32"].fillna(0) + c.table["tensor_flops_tf32"].fillna(0)).sum() > 0
    entry = json.loads((out / "run.json").read_text())["counters"]
    assert entry["kernels"] == len(c.table) and entry["ncu_version"]
