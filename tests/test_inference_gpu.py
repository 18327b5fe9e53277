"""Inference loops under `roofscope run` on a CUDA GPU, with no extra flags (run on the device machine)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[1]


def _run(tmp_path: Path, *script: str) -> dict:
    out = tmp_path / "run"
    # --settle 0: the schedule as asked (these scripts decode a few tokens only)
    res = subprocess.run([sys.executable, "-m", "roofscope", "run", "-o", str(out), "--no-report", "--settle", "0",
                          *script],
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads((out / "summary.json").read_text())


def test_decode_cuda_graph_replays_are_costed(tmp_path: Path) -> None:
    s = _run(tmp_path, "examples/decode.py", "--cuda-graph", "--new-tokens", "8")
    assert s["graphs"]["graph_launches"] > 0 and s["graphs"]["mapped"] == s["graphs"]["graph_launches"]
    assert s["unattributed"]["share"] < 0.05
    inf = s["inference"]
    assert inf["decode"]["steps"] >= 1 and inf["tpot_s"] > 0 and inf["batch"] == 1
    assert inf["decode"]["time_by_class"].get("memory", 0) + inf["decode"]["time_by_class"].get("latency", 0) > 0.5


def test_hf_generate_gets_forward_steps_and_prefill_decode(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    # The warm-up generate() call (3 tokens) starts the profile; the measured call is profiled again
    # (steps.rearmed), here from its prefill: no warm-up step, so the prefill is recorded.
    s = _run(tmp_path, "--warmup", "0", "examples/generate.py", "--size", "tiny", "--batch", "2",
             "--prompt-len", "32", "--new-tokens", "8")
    assert s["run"]["steps"]["source"] == "forward" and s["run"]["steps"]["rearmed"]
    inf = s["inference"]
    assert inf["prefill"]["q_len"] == 32 and inf["decode"]["q_len"] == 1 and inf["batch"] == 2
    assert inf["ttft_s"] > 0 and inf["tokens_per_s"] > 0
    assert s["unattributed"]["share"] < 0.05
    assert not any("loss" in f["fix"]["snippet"] for f in s["findings"])
