"""Commands that only read traces import no torch, triton or pynvml, nor the microbenchmarks that
need them (issue 28): `import torch` alone costs 1-3 s of CPU, and a laptop that reads traces may
not have it. Each command runs in a fresh interpreter under PYTHONPROFILEIMPORTTIME, which makes it,
and every Python process it starts (merge's rank workers), print each module it imports."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parent / "data"
REPO = Path(__file__).resolve().parents[1]
# A Run whose trace pads tensors (aten::constant_pad_nd, once shaped by torch's meta kernels) and
# names an H100 (a ceilings cache lookup); a CPU trace (this CPU's cached ceilings); a CPU job.
RUN = DATA / "h100_hf_generate_static"
CPU_TRACE = DATA / "cpu_block.json.gz"
JOB = DATA / "cpu_gloo_straggler"
FORBIDDEN = ("torch", "triton", "pynvml")
BENCHMARKS = ("compute", "timing", "gpu", "memory", "launch", "hostlink")


def listing(cmd: list[str], cwd: Path) -> tuple[int, set[str]]:
    """The exit status of ``cmd`` and the modules it and its children imported."""
    env = dict(os.environ, PYTHONPROFILEIMPORTTIME="1",
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, env=env, timeout=600)
    # "import time:  self [us] | cumulative | imported package", one line per first import
    rows = [line.rsplit("|", 1) for line in res.stderr.splitlines() if line.startswith("import time:")]
    return res.returncode, {row[1].strip() for row in rows if len(row) == 2} - {"imported package"}


def heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if m.split(".")[0] in FORBIDDEN
                  or any(m == f"roofscope.microbench.{b}" for b in BENCHMARKS))


@pytest.mark.parametrize("args", [
    ("analyze", str(RUN), "--json", "a.json", "--csv", "k.csv", "-q"),
    ("report", str(RUN), "-o", "r.html"),
    ("analyze", str(CPU_TRACE), "--json", "a.json", "-q"),
    ("diff", str(CPU_TRACE), str(CPU_TRACE)),
    ("gate", "--write-baseline", str(CPU_TRACE), "b.json"),
    ("merge", str(JOB), "-o", "job", "-q"),
], ids=["analyze-run", "report-run", "analyze-cpu", "diff", "gate", "merge"])
def test_command_imports_no_torch(tmp_path: Path, args: tuple[str, ...]) -> None:
    rc, modules = listing([sys.executable, "-m", "roofscope", *args], tmp_path)
    assert rc == 0
    assert heavy(modules) == []
    assert "roofscope.analyzers.cost.costmodel" in modules  # it did cost the trace's ops


def test_the_listing_sees_torch(tmp_path: Path) -> None:
    # The check can fail: a process that imports torch lists it.
    pytest.importorskip("torch")
    rc, modules = listing([sys.executable, "-c", "import torch.nn"], tmp_path)
    assert rc == 0 and "torch" in heavy(modules) and "torch.nn" in modules
