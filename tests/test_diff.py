from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from roofscope.analysis import analyze, run
from roofscope.analyzers.compare.comparable import IncomparableError
from roofscope.analyzers.compare.diff import CHANGE_COLUMNS, diff, kernel_changes
from roofscope.cli import main
from roofscope.errors import RoofscopeError
from roofscope.reports.diffview import render_markdown, render_terminal

from .kineto import TraceBuilder
from .test_gate_ceilings import trace as gemm_trace
from .test_trace import HTA

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
H200_RUN = DATA / "h200_gpt_run"
PEAKS = {"peak_tflops": 100.0, "peak_bandwidth_gbs": 1000.0}
PEAK_FLAGS = ["--peak-tflops", "100", "--peak-bandwidth", "1000"]

# gelu on 1,048,576 fp32 elements reads and writes 4 B each: 8,388,608 B, a floor of 8.389 us at
# 1 TB/s (above the 3 us latency floor). Efficiency = 8.389 us / duration: memory-bound from 33.6 us
# down, underutilized (< 25 %) above. relu on 1,024 fp32 (8 KiB, 8 ns floor) is latency-bound.
N = 1_048_576
# name -> (op, elements, durations in us of its calls within one step)
RUN_A = {"fast_kernel": ("aten::gelu", N, [20, 20]),    # 2 x 20 = 40 us/step, eff 0.42: memory
         "class_kernel": ("aten::gelu", N, [10]),       # eff 0.84: memory
         "gone_kernel": ("aten::gelu", N, [15]),        # eff 0.56: memory
         "steady_kernel": ("aten::gelu", N, [100]),     # eff 0.084: underutilized
         "tiny_kernel": ("aten::relu", 1024, [4])}      # latency
RUN_B = {"fast_kernel": ("aten::gelu", N, [10, 10]),    # 2x faster: 20 us/step, -20
         "class_kernel": ("aten::gelu", N, [40]),       # eff 0.21: underutilized, +30
         "steady_kernel": ("aten::gelu", N, [102.5]),   # +2.5 us = 2.5 % (< 3 %): unchanged
         "tiny_kernel": ("aten::relu", 1024, [5.5]),    # +1.5 us = 37 % but < 2 us: unchanged
         "new_kernel": ("aten::gelu", N, [25])}         # eff 0.34: memory, appeared, +25


def _write(path: Path, kernels: dict, steps: int, step_us: float) -> Path:
    """``steps`` back-to-back ProfilerStep spans of ``step_us``, each launching ``kernels`` once
    more; GPU activities run one after another from 10 us into the step."""
    b = TraceBuilder()
    for s in range(steps):
        t0 = s * step_us
        b.annotation(f"ProfilerStep#{s}", t0, step_us)
        cpu, gpu = t0 + 2, t0 + 10
        for name, (op, elems, durs) in kernels.items():
            for d in durs:
                ext = b.op(op, cpu, 3, [[elems]], ["float"])
                b.launch_kernel(name, cpu + 1, gpu, d, ext=ext)
                cpu, gpu = cpu + 4, gpu + d + 1
    return b.write(path)


@pytest.fixture
def pair(tmp_path):
    """A: 3 steps of 300 us; B: 4 steps of 250 us (per-step times must not depend on the count).

    Steps are measured on the GPU, from their first kernel (10 us in) to the next step's; the
    last one ends with its CPU span, 10 us short: A (300, 300, 290), B (250, 250, 250, 240),
    medians 300 and 250 us."""
    return _write(tmp_path / "a.json", RUN_A, 3, 300.0), _write(tmp_path / "b.json", RUN_B, 4, 250.0)


@pytest.fixture
def analyses(pair):
    return analyze(pair[0], **PEAKS), analyze(pair[1], **PEAKS)


US = 1e-6
FINDINGS = [
    # fast_kernel: 40 -> 20 us/step, lost 50 %
    {"rule": "fuse", "title": "Fuse elementwise chains", "saving_s": 40 * US, "rank": 1,
     "evidence": {"kernels": [{"name": "fast_kernel", "calls": 4, "time_s": 80 * US, "cls": "memory"}]}},
    # gone_kernel + tiny_kernel: 15 + 4 = 19 -> 0 + 5.5 us/step, lost 13.5 / 19 = 71 %
    {"rule": "drop", "title": "Drop the copies", "saving_s": 80 * US, "rank": 2,
     "evidence": {"kernels": [{"name": "gone_kernel"}, {"name": "tiny_kernel"}]}},
    # class_kernel: 10 -> 40 us/step, lost -300 %
    {"rule": "tune", "title": "Tune the kernel", "saving_s": 10 * US, "rank": 3,
     "evidence": {"kernels": [{"name": "class_kernel"}]}},
]


def test_kernel_changes_per_step(analyses):
    a, b = analyses
    ch = kernel_changes(a, b)
    assert list(ch.columns) == CHANGE_COLUMNS
    # sorted by |delta|: class +30, new +25, fast -20, gone -15, steady +2.5, tiny +1.5 (us/step)
    assert ch["name"].tolist() == ["class_kernel", "new_kernel", "fast_kernel", "gone_kernel", "steady_kernel",
                                   "tiny_kernel"]
    assert ch["status"].tolist() == ["slower", "appeared", "faster", "disappeared", "unchanged", "unchanged"]
    r = ch.set_index("name")
    assert r.loc["fast_kernel", ["time_a_s", "time_b_s", "delta_s"]].tolist() == pytest.approx([40 * US, 20 * US,
                                                                                                 -20 * US])
    # B has 4 steps: its 4 x 25 us of new_kernel are 25 us/step, 1 call/step; fast_kernel 2 calls/step in both
    assert r.loc["new_kernel", ["calls_a", "calls_b", "time_a_s", "time_b_s"]].tolist() == pytest.approx(
        [0, 1, 0, 25 * US])
    assert r.loc["fast_kernel", ["calls_a", "calls_b"]].tolist() == [2, 2]
    assert r.loc["steady_kernel", "delta_s"] == pytest.approx(2.5 * US)
    assert r.loc["gone_kernel", ["cls_a", "cls_b"]].tolist() == ["memory", ""]
    assert r.loc["class_kernel", ["cls_a", "cls_b"]].tolist() == ["memory", "underutilized"]
    assert r.loc["tiny_kernel", ["cls_a", "cls_b"]].tolist() == ["latency", "latency"]
    assert set(r["category"]) == {"elementwise"}


def test_diff_totals_metrics_and_class_changes(analyses):
    a, b = analyses
    d = diff(a, b, findings=[])
    assert (d.steps_a, d.steps_b) == (3, 4)
    assert d.class_changes()["name"].tolist() == ["class_kernel"]
    st = d.by_status
    assert st["kernels"].to_dict() == {"slower": 1, "appeared": 1, "faster": 1, "disappeared": 1, "unchanged": 2}
    # unchanged: steady +2.5 and tiny +1.5; in all 30 + 25 - 20 - 15 + 4 = +24 us/step (169 -> 193)
    assert st.loc["unchanged", "delta_s"] == pytest.approx(4 * US)
    assert st["delta_s"].sum() == pytest.approx(24 * US)
    assert st["time_a_s"].sum() == pytest.approx(169 * US)
    # by class, per step: memory A fast 40 + class 10 + gone 15 = 65, B fast 20 + new 25 = 45;
    # underutilized A steady 100, B class 40 + steady 102.5; latency 4 -> 5.5
    cls = d.by_class
    assert cls.loc["memory", ["time_a_s", "time_b_s"]].tolist() == pytest.approx([65 * US, 45 * US])
    assert cls.loc["underutilized", ["time_a_s", "time_b_s"]].tolist() == pytest.approx([100 * US, 142.5 * US])
    assert cls.loc["latency", "delta_s"] == pytest.approx(1.5 * US)
    assert cls.index[0] == "underutilized"  # largest |delta| first
    assert d.by_category.loc["elementwise", "delta_s"] == pytest.approx(24 * US)
    m = {x.key: x for x in d.metrics}
    # median steps 300 us -> 250 us: -50 us, -16.7 %, lower is better
    step = m["step_time_s"]
    assert (step.a, step.b, step.delta) == pytest.approx((300 * US, 250 * US, -50 * US))
    assert step.rel == pytest.approx(-1 / 6)
    assert step.better is True
    # two bare traces: only profiled step times, which the diff says (docs/overhead.md)
    assert [w for w in d.warnings if not w.startswith("A and B have only profiled step times")] == []


@pytest.mark.parametrize("saving_us,verdict,ratio", [
    (80, "materialized", 50 / 80),       # measured 300 - 250 = 50 us of 80 predicted
    (200, "partly", 50 / 200),           # 25 %
    (300, "not materialized", 50 / 300),  # 16.7 %
])
def test_prediction_auto_detects_the_applied_finding(analyses, saving_us, verdict, ratio):
    findings = [dict(f) for f in FINDINGS]
    findings[1]["saving_s"] = saving_us * US
    p = diff(*analyses, findings=findings).prediction
    # drop lost 71 % of its evidence time, fuse 50 %, tune -300 %
    assert p.rule == "drop" and "71%" in p.why and "largest share" in p.why
    assert (p.predicted_s, p.measured_s) == pytest.approx((saving_us * US, 50 * US))
    assert p.ratio == pytest.approx(ratio)
    assert p.verdict == verdict
    assert (p.evidence_time_a_s, p.evidence_time_b_s) == pytest.approx((19 * US, 5.5 * US))


def test_prediction_applied_rule_wins(analyses):
    p = diff(*analyses, findings=FINDINGS, applied="fuse").prediction
    # 50 us measured of 40 predicted
    assert p.rule == "fuse" and p.why == "given with --applied fuse"
    assert p.ratio == pytest.approx(1.25) and p.verdict == "materialized"
    p = diff(*analyses, findings=FINDINGS, applied="tune").prediction
    assert p.ratio == pytest.approx(5.0) and p.evidence_time_b_s == pytest.approx(40 * US)
    with pytest.raises(RoofscopeError, match="no change or finding of that name.*fuse, drop, tune"):
        diff(*analyses, findings=FINDINGS, applied="nope")


def test_prediction_of_a_change_combines_its_findings(analyses):
    # One change (say torch.compile) answers "fuse" (40 us) and "drop" (80 us), whose time
    # overlaps: the change's combined saving is 100 us, and B's 50 us is checked against it.
    fixes = [{"change": "torch_compile", "title": "Compile the model", "rules": ["fuse", "drop"],
              "saving_s": 100 * US}]
    for applied in ("torch_compile", "fuse", None):
        p = diff(*analyses, findings=FINDINGS, fixes=fixes, applied=applied).prediction
        assert p.rule == "fuse+drop" and p.title == "Compile the model"
        assert (p.predicted_s, p.ratio) == pytest.approx((100 * US, 0.5))
        assert "checked against change torch_compile" in p.why
    # The evidence is both findings' kernels: fast 40 + gone 15 + tiny 4 = 59 us/step in A,
    # 20 + 0 + 5.5 = 25.5 in B.
    assert (p.evidence_time_a_s, p.evidence_time_b_s) == pytest.approx((59 * US, 25.5 * US))
    with pytest.raises(RoofscopeError, match="torch_compile, fuse, drop, tune"):
        diff(*analyses, findings=FINDINGS, fixes=fixes, applied="nope")


def test_prediction_without_findings(analyses):
    p = diff(*analyses, findings=[]).prediction
    assert p.verdict == "no prediction" and p.rule is None and p.ratio is None
    assert p.measured_s == pytest.approx(50 * US)
    # A finding with no evidence kernels and no saving: taken as the top-ranked one, no verdict
    p = diff(*analyses, findings=[{"rule": "x", "saving_s": 0.0}]).prediction
    assert (p.rule, p.verdict) == ("x", "no prediction") and "top-ranked" in p.why


def test_views_fit_80_columns_and_to_dict_is_json(analyses):
    d = diff(*analyses, findings=FINDINGS)
    text = render_terminal(d, top=3)
    lines = text.splitlines()
    assert lines[0].endswith("a.json") and lines[1].endswith("b.json")
    assert max(map(len, lines[2:])) <= 80   # all but the two paths
    top = lines.index("Top 3 kernel changes by |Δ| per step")
    assert [ln.split()[0] for ln in lines[top + 3:top + 6]] == ["slower", "appeared", "faster"]
    assert lines[top + 6] == ""
    assert "memory -> underutilized" in text
    assert "  verdict:   materialized" in lines
    md = render_markdown(d)
    assert "| slower | `class_kernel` | 1/1 | 10.0 | 40.0 | +30.0 | memory | underutilized |" in md
    doc = json.loads(json.dumps(d.to_dict(), allow_nan=False))
    assert doc["class_changes"] == ["class_kernel"]
    assert doc["prediction"]["rule"] == "drop"
    assert [s["status"] for s in doc["by_status"]] == ["slower", "appeared", "faster", "disappeared", "unchanged"]


def test_h200_run_against_itself_is_unchanged():
    a, b = analyze(H200_RUN), analyze(H200_RUN)
    d = diff(a, b)
    ch = d.kernels
    assert len(ch) == a.kernels["name"].nunique()
    assert (ch["status"] == "unchanged").all() and (ch["delta_s"] == 0).all()
    assert d.class_changes().empty
    # 3 profiled steps: per-step kernel time is a third of the steps' total
    assert d.steps_a == 3
    total = a.kernels.loc[a.kernels["step"] >= 0, "dur_s"].sum()
    assert ch["time_a_s"].sum() == pytest.approx(total / 3)
    step = next(m for m in d.metrics if m.key == "step_time_s")
    assert step.delta == 0 and step.better is None
    p = d.prediction
    assert p.measured_s == 0
    # Its own findings predicted savings that a rerun cannot show.
    assert p.verdict == ("not materialized" if a.to_dict()["findings"] else "no prediction")
    text = render_terminal(d)
    assert max(map(len, text.splitlines()[2:])) <= 80
    assert "No kernel moved by more than 3% or 2 µs per step." in text


def test_real_traces_eager_vs_compiled_and_device_warning():
    eager, compiled = analyze(DATA / "h100_eager_block.json.gz"), analyze(DATA / "h100_compiled_block.json.gz")
    d = diff(eager, compiled)
    # two bare traces: only profiled step times, which the diff says (docs/overhead.md)
    assert [w for w in d.warnings if not w.startswith("A and B have only profiled step times")] == []
    ch = d.kernels
    # Totals are consistent: per-kernel deltas add up to the change of kernel time per step (one step each)
    kt = [x.kernels.loc[x.kernels["step"] >= 0, "dur_s"].sum() for x in (eager, compiled)]
    assert ch["delta_s"].sum() == pytest.approx(kt[1] - kt[0])
    assert d.by_class["delta_s"].sum() == pytest.approx(kt[1] - kt[0])
    # Inductor replaced eager elementwise kernels with its own Triton kernels
    assert (ch["status"] == "appeared").any() and (ch["status"] == "disappeared").any()
    assert ch.loc[ch["status"] == "appeared", "name"].str.startswith("triton_").any()
    with pytest.raises(IncomparableError, match="A ran on NVIDIA H200, B on NVIDIA H100 80GB HBM3") as e:
        diff(analyze(H200_RUN), eager)
    assert e.value.exit_code == 2
    d = diff(analyze(H200_RUN), eager, allow_other_device=True)
    assert d.warnings[0] == "the runs are from different devices: A NVIDIA H200, B NVIDIA H100 80GB HBM3"
    assert d.warnings[1].startswith("A and B have only profiled step times") and len(d.warnings) == 2


def test_hta_trace_against_itself():
    a = analyze(HTA)
    d = diff(a, a)
    assert (d.kernels["status"] == "unchanged").all()
    assert d.by_status.loc["unchanged", "kernels"] == a.kernels["name"].nunique()


def test_cli_in_process(pair, tmp_path, capsys):
    out = tmp_path / "d.json"
    assert main(["diff", str(pair[0]), str(pair[1]), *PEAK_FLAGS, "--json", str(out), "--top", "2"]) == 0
    text = capsys.readouterr().out
    assert "Top 2 kernel changes" in text and "class_kernel" in text
    doc = json.loads(out.read_text())
    assert (doc["steps_a"], doc["steps_b"]) == (3, 4)
    k = {r["name"]: r for r in doc["kernels"]}
    assert k["fast_kernel"]["time_a_s"] == pytest.approx(40 * US) and k["fast_kernel"]["status"] == "faster"
    assert k["gone_kernel"]["cls_b"] == ""
    assert doc["prediction"]["measured_s"] == pytest.approx(50 * US)
    # refuses to overwrite without -f, before any analysis; -f overwrites
    out.write_text("precious")
    assert main(["diff", str(pair[0]), str(pair[1]), *PEAK_FLAGS, "--json", str(out)]) == 2
    assert "already exists; pass --force" in capsys.readouterr().err
    assert out.read_text() == "precious"
    assert main(["diff", str(pair[0]), str(pair[1]), *PEAK_FLAGS, "--json", str(out), "-f", "-q"]) == 0
    assert capsys.readouterr().out == ""
    assert json.loads(out.read_text())["a"] == str(pair[0])


def test_cli_markdown_on_stdout(pair, capsys):
    assert main(["diff", str(pair[0]), str(pair[1]), *PEAK_FLAGS, "--markdown", "-"]) == 0
    text = capsys.readouterr().out   # the markdown alone, no terminal comparison
    assert "| faster | `fast_kernel` | 2/2 | 40.0 | 20.0 | -20.0 | memory | memory |" in text
    assert "kernel changes by |Δ| per step" not in text   # the terminal table's title


@pytest.mark.parametrize("content,needle", [(None, "no such file"), (b'{"a": 1}', "not a Kineto trace")])
def test_cli_bad_input_is_one_line_exit_2(pair, tmp_path, capsys, content, needle):
    bad = tmp_path / "bad.json"
    if content is not None:
        bad.write_bytes(content)
    assert main(["diff", str(pair[0]), str(bad), *PEAK_FLAGS]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1 and "Traceback" not in err


def test_cli_other_device_is_refused_unless_allowed(capsys):
    assert main(["diff", str(H200_RUN), str(DATA / "h100_eager_block.json.gz"), "-q"]) == 2
    assert capsys.readouterr().err == (
        "roofscope: error: A ran on NVIDIA H200, B on NVIDIA H100 80GB HBM3: their step times, kernels and ceilings"
        " differ by the hardware, not by a change of the code; pass --allow-other-device to compare them anyway,"
        " each on its own ceilings\n")
    assert main(["diff", str(H200_RUN), str(DATA / "h100_eager_block.json.gz"), "-q", "--allow-other-device"]) == 0
    assert ("roofscope: warning: the runs are from different devices: A NVIDIA H200, B NVIDIA H100 80GB HBM3"
            in capsys.readouterr().err)


def test_cli_subprocess_markdown(pair, tmp_path):
    md = tmp_path / "d.md"
    r = subprocess.run([sys.executable, "-m", "roofscope", "diff", str(pair[0]), str(pair[1]), *PEAK_FLAGS,
                        "--markdown", str(md)], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "Prediction check" in r.stdout and f"wrote {md}" in r.stderr
    text = md.read_text()
    assert "| faster | `fast_kernel` | 2/2 | 40.0 | 20.0 | -20.0 | memory | memory |" in text
    assert "| appeared | `new_kernel` | 0/1 | 0.0 | 25.0 | +25.0 | - | memory |" in text


# ---------------------------------------------------------------------------------------------
# issue 40: what diff cannot compare; issue 36: the time outside any op


@pytest.fixture
def cut_run(tmp_path):
    """The H200 Run with its trace.json.gz cut at 100,000 of its 136,974 bytes: its three steps are
    there, most of their kernels are not."""
    d = tmp_path / "cut"
    shutil.copytree(H200_RUN, d)
    (d / "summary.json").unlink()
    (d / "trace.json.gz").write_bytes((H200_RUN / "trace.json.gz").read_bytes()[:100_000])
    return d


def test_a_run_cut_short_is_refused_unless_allowed(cut_run, capsys):
    # Before: "MBU -33.6% worse" and the lost kernels as "disappeared", with no note of the cut.
    full, cut = run(H200_RUN), run(cut_run)
    with pytest.raises(IncomparableError, match=f"B {cut_run}/trace.json.gz: the trace was cut short") as e:
        diff(full, cut)
    assert e.value.exit_code == 2
    assert main(["diff", str(H200_RUN), str(cut_run), "-q"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the trace was cut short (file cut short at byte" in err
    assert "or pass --allow-partial to compare what it holds" in err
    d = diff(full, cut, allow_partial=True)
    assert any(w.startswith("B's trace was cut short (file cut short at byte") for w in d.warnings)
    assert main(["diff", str(H200_RUN), str(cut_run), "--allow-partial"]) == 0
    assert "warning B's trace was cut short" in capsys.readouterr().out


def test_a_run_cut_short_is_refused_as_a_subprocess(cut_run):
    r = subprocess.run([sys.executable, "-m", "roofscope", "diff", str(cut_run), str(H200_RUN)],
                       capture_output=True, text=True, cwd=ROOT, timeout=600,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 2 and r.stdout == "" and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith(f"roofscope: error: A {cut_run}/trace.json.gz: the trace was cut short")


def _cpu_steps(path: Path, step_us: float) -> Path:
    """Four CPU-only steps of ``step_us``, each an mm (200 us) and a relu (50 us): the rest of the
    step runs in no op (a sleep, Python between the ops)."""
    b = TraceBuilder(device_name=None)
    for s in range(4):
        t0 = s * step_us
        b.annotation(f"ProfilerStep#{s}", t0, step_us)
        b.op("aten::mm", t0 + 10, 200, [[256, 256], [256, 256]], ["float", "float"])
        b.op("aten::relu", t0 + 220, 50, [[256, 256]], ["float"])
    return b.write(path)


def test_the_time_outside_any_op_is_shown(tmp_path):
    # B sleeps 3 ms more per step: +3.000 ms per step, and no op moved. Before, the diff showed the
    # step time's +3 ms beside per-op changes summing to 0, and nothing said where the time went.
    a, b = (run(_cpu_steps(tmp_path / f"{n}.json", us)) for n, us in (("a", 1000), ("b", 4000)))
    d = diff(a, b)
    # A: 1000 us steps less 200 + 50 us of ops = 750 us outside; B: 4000 - 250 = 3750 us.
    assert (d.outside_a_s, d.outside_b_s) == (pytest.approx(750e-6), pytest.approx(3750e-6))
    assert d.kernels["delta_s"].sum() == pytest.approx(0.0)
    assert d.to_dict()["outside_kernels"] == {"a_s": pytest.approx(750e-6), "b_s": pytest.approx(3750e-6),
                                              "delta_s": pytest.approx(3000e-6)}
    text = render_terminal(d)
    assert "  outside any op        -  750.0  3,750.0  +3,000.0" in text.splitlines()
    assert "outside: the profiled steps' mean time less their kernels' time" in text
    assert "| outside any op | - | 750.0 | 3,750.0 | +3,000.0 |" in render_markdown(d)
    # A GPU run names kernels: the H200 Run against itself moved nothing outside them either.
    same = diff(run(H200_RUN), run(H200_RUN))
    assert same.outside_delta_s == 0.0 and "outside any kernel" in render_terminal(same)


def test_utilizations_of_two_precisions_are_not_judged(tmp_path):
    # fp32 then bf16 GEMMs (test_gate_ceilings.trace): MFU and HFU are shares of two peaks, so their
    # change is shown but called neither better nor worse; the diff of such a change still runs.
    fp32 = gemm_trace(tmp_path / "a.json")
    bf16 = gemm_trace(tmp_path / "b.json", dtype="c10::BFloat16", kernel="ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_nn")
    d = diff(run(fp32), run(bf16))
    m = {x.key: x for x in d.metrics}
    assert m["hfu"].better is None and m["hfu"].note == "fp32 peak vs bf16"
    assert m["mfu"].better is None and m["step_time_s"].delta == pytest.approx(0.0, abs=1e-12)
