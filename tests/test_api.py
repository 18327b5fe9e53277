"""The public API (docs/api.md): `roofscope.analyze` returns the Result and takes what the command line takes
(a ceilings file's path, formula files, graph-capture paths), or refuses with a typed one-line error."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import roofscope
from roofscope.analyzers.model.kernels import RooflineParams
from roofscope.cli import main
from roofscope.errors import DeviceError, RoofscopeError
from roofscope.hardware.ceilings import Ceilings, save_ceilings_file
from roofscope.jsonsafe import json_safe
from roofscope.run import RunError
from tests.test_graphs import CAPTURE, REPLAY
from tests.test_inference import _custom_trace

DATA = Path(__file__).parent / "data"
EAGER = DATA / "h100_eager_block.json.gz"
H200_RUN = DATA / "h200_gpt_run"
# Made-up measured ceilings, far from any datasheet: a figure drawn with them cannot come from elsewhere.
MEASURED = Ceilings(device="NVIDIA H100 80GB HBM3", source="measured",
                    peaks={"bf16": 500e12, "fp16": 500e12, "tf32": 250e12, "fp32": 40e12}, bandwidth=2.0e12,
                    measured_at="2026-11-28T00:00:00+00:00")


@pytest.fixture
def ceilings_file(tmp_path: Path) -> Path:
    return save_ceilings_file(MEASURED, tmp_path / "c.json")


def test_analyze_returns_the_result() -> None:
    r = roofscope.analyze(EAGER)
    assert isinstance(r, roofscope.Result)
    assert r.to_dict() == r.summary.to_dict() and r.summary.metrics.mfu == r.to_dict()["metrics"]["mfu"]


def test_a_ceilings_file_path_draws_the_roofline_as_the_cli_does(tmp_path: Path, ceilings_file: Path) -> None:
    r = roofscope.analyze(H200_RUN, ceilings=str(ceilings_file))
    assert r.ceilings.source == "measured" and r.ceilings.bandwidth == 2.0e12
    assert r.summary.ceilings.to_dict()["bandwidth"] == 2.0e12 and r.ceilings.roof("bf16", True) == 500e12
    # A Path, and the older keyword, are the same file.
    for same in (roofscope.analyze(H200_RUN, ceilings=ceilings_file),
                 roofscope.analyze(H200_RUN, ceilings_file=ceilings_file)):
        assert same.to_dict() == r.to_dict()
    out = tmp_path / "a.json"
    assert main(["analyze", str(H200_RUN), "--ceilings", str(ceilings_file), "-q", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["summary"] == json.loads(json.dumps(json_safe(r.to_dict())))


def test_formulas_and_graph_captures_as_one_path_or_several(tmp_path: Path) -> None:
    from roofscope.analyzers.cost.formulas import REGISTRY

    f = tmp_path / "my_formulas.py"
    f.write_text("import roofscope\n\n@roofscope.register_formula('mylib::fused_rmsnorm', category='normalization')\n"
                 "def rmsnorm(x, w, eps):\n    return 4 * x[0] * x[1]\n")
    try:
        # 4 * 8 * 1024 = 32,768 FLOPs for the one call (tests/test_inference.py's custom op)
        r = roofscope.analyze(_custom_trace(tmp_path), peak_tflops=1, peak_bandwidth_gbs=10, formulas=str(f))
        assert r.summary.total_flops == 32_768
    finally:
        REGISTRY.pop("mylib::fused_rmsnorm", None)
    # 3 replays of 5 kernels, each mapped to the one capture (tests/test_graphs.py)
    one, several = roofscope.analyze(REPLAY, graph_capture=CAPTURE), roofscope.analyze(REPLAY, graph_capture=[CAPTURE])
    assert one.to_dict()["graphs"]["mapped"] == several.to_dict()["graphs"]["mapped"] == 3


def test_run_meta_reaches_the_analysis_typed_and_as_given() -> None:
    r = roofscope.analyze(EAGER, run_meta={"tokens_per_step": 4096})
    m = r.to_dict()["metrics"]
    assert m["tokens_per_step"] == 4096 and isinstance(m["tokens_per_step"], int)   # summary.json says 4096
    assert m["tokens_per_s"] == pytest.approx(4096 / m["step_time_s"])


REFUSED = [
    ({"ceilings": "missing.json"}, DeviceError, "ceilings file not found: missing.json"),
    ({"ceilings": "a.json", "ceilings_file": "b.json"}, RoofscopeError, "give one ceilings file"),
    ({"ceilings": MEASURED, "device": "h100-sxm"}, RoofscopeError, "device would be ignored"),
    ({"ceilings": 42}, RoofscopeError, "expected a ceilings file's path or a Ceilings, got int"),
    ({"params": {"latency_floor_s": 1}}, RoofscopeError, "expected a RooflineParams, got dict"),
    ({"device": "no-such-gpu"}, DeviceError, "no-such-gpu"),
    ({"graph_capture": "missing.json.gz"}, RoofscopeError, "graph capture missing.json.gz: no such file"),
    ({"graph_capture": [3]}, RoofscopeError, "expected a trace's path or a Trace"),
    ({"formulas": "missing_formulas.py"}, RoofscopeError, "missing_formulas.py: no such file"),
    ({"attention_window": 0}, RoofscopeError, "attention_window 0: expected a whole number"),
    ({"attention_window": 1.5}, RoofscopeError, "attention_window 1.5"),
    ({"run_meta": {"tokens_per_step": "many"}}, RunError, "run_meta: malformed Run file"),
    ({"run_meta": [("tokens_per_step", 1)]}, RunError, "expected run.json's fields as a dict, got list"),
]


@pytest.mark.parametrize("kwargs, error, message", REFUSED, ids=[next(iter(k)) + str(i) for i, (k, _, _)
                                                                  in enumerate(REFUSED)])
def test_what_cannot_be_used_is_refused_with_a_typed_error(kwargs, error, message) -> None:
    with pytest.raises(error, match=re.escape(message)) as e:
        roofscope.analyze(EAGER, **kwargs)
    assert e.value.exit_code == 2 and "\n" not in str(e.value)


def test_params_and_the_ceilings_object_still_work() -> None:
    r = roofscope.analyze(EAGER, ceilings=MEASURED, params=RooflineParams(latency_floor_s=1.0))
    # A 1 s latency floor makes every kernel of a few-microsecond trace latency-bound (floor time >= 1 s).
    assert r.ceilings is MEASURED and set(r.kernels.loc[r.kernels["cls"] != "unknown", "cls"]) == {"latency"}


def test_import_roofscope_loads_no_pandas_until_the_result_is_named() -> None:
    code = ("import sys, roofscope; assert 'pandas' not in sys.modules; "
            "t = roofscope.Result; assert 'pandas' in sys.modules; print(t.__name__)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0 and res.stdout.strip() == "Result", res.stderr
    with pytest.raises(AttributeError, match="no attribute 'Analysis'"):
        roofscope.Analysis  # noqa: B018  (the former face lives in roofscope.compat)
