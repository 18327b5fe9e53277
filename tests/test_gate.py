"""The gate's verdicts, warnings, evidence, baseline file and outputs, on hand-made snapshots."""
from __future__ import annotations

import json
import math
import xml.etree.ElementTree as ET

import numpy as np
import pandas as pd
import pytest

from roofscope.cli import main
from roofscope.errors import RoofscopeError
from roofscope.gate import check, load_baseline
from roofscope.gate.evaluate import check_regression, warnings_for
from roofscope.reports.gate import markdown, text
from roofscope.analyzers.model.summary import Metrics
from roofscope.gate.snapshot import VERSION, GateInputError, Snapshot
from roofscope.gate.stats import steps_to_decide
from roofscope.gate.thresholds import metric, parse_limit
from roofscope.reports.github import annotations, append_step_summary, escape_data, escape_property, in_actions
from roofscope.reports.junit import junit_xml

MS = 1e-3
ENV = {"roofscope": "0.1.0", "torch": "2.11.0+cu130", "cuda": "13.0", "python": "3.12.3"}
CEILINGS = {"source": "datasheet", "device": "NVIDIA H200", "peak_roof": "bf16", "peak_flops": 989.5e12,
            "bandwidth": 4.8e12}


def kernels(rows: list[tuple[str, float, float, str]]) -> pd.DataFrame:
    """(name, calls per step, ms per step, class) rows as a per_step_kernels table."""
    return pd.DataFrame({"calls": [r[1] for r in rows], "time_s": [r[2] * MS for r in rows],
                         "cls": [r[3] for r in rows], "category": ["gemm"] * len(rows)},
                        index=pd.Index([r[0] for r in rows], name="name"))


BASE_KERNELS = [("gemm", 4, 6.0, "compute"), ("add", 8, 1.0, "memory"), ("softmax", 2, 0.5, "memory")]


def snap(step_ms, mfu=None, *, device="NVIDIA H200", env=None, ceilings=None, idle=None, regions=None,
         throttled=0.0, reasons=(), kern=BASE_KERNELS, source="run") -> Snapshot:
    samples = {"step_time": np.array(step_ms, dtype=float) * MS}
    if mfu is not None:
        samples["mfu"] = np.array(mfu, dtype=float)
    if idle is not None:
        samples["idle_fraction"] = np.array(idle, dtype=float)
    for name, values in (regions or {}).items():
        samples[f"region:{name}"] = np.array(values, dtype=float) * MS
    return Snapshot(source=source, device=device, environment=dict(env or ENV), ceilings=dict(ceilings or CEILINGS),
                    steps=list(range(len(step_ms))), samples=samples,
                    metrics=Metrics.from_dict({"step_time_s": float(np.median(step_ms)) * MS,
                                               "throttled_fraction": throttled}),
                    throttle_reasons=list(reasons), kernels=kernels(kern), kernels_total=len(kern))


BASE = snap([10.0, 10.1, 10.2, 9.9, 10.05], mfu=[0.400, 0.396, 0.392, 0.404, 0.398], source="base")


def by_name(result):
    return {c.name: c for c in result.checks}


def test_clear_regression_fails_with_evidence():
    # Every step about 1 ms slower: median 10.05 -> 11.05 ms = +9.95% > 5%; all 5 run steps rank
    # above all 5 baseline steps: p = 1/C(10,5) = 1/252 = 0.00397 < 0.05.
    run = snap([11.0, 11.1, 11.2, 10.9, 11.05], mfu=[0.364, 0.360, 0.357, 0.367, 0.362],
               kern=[("gemm", 4, 6.0, "compute"), ("add", 8, 1.6, "memory"), ("mul", 4, 0.4, "memory"),
                     ("softmax", 2, 0.5, "latency")])
    r = check(run, BASE)
    c = by_name(r)
    assert c["step_time"].status == "fail"
    assert c["step_time"].change == pytest.approx(1.0 / 10.05)
    assert c["step_time"].p_value == pytest.approx(1 / 252)
    # MFU 0.398 -> 0.362 (medians): (0.398 - 0.362) / 0.398 = 9.05% worse, same separation.
    assert c["mfu"].status == "fail" and c["mfu"].worse_by == pytest.approx(0.036 / 0.398)
    assert not r.passed and r.exit_code == 1
    assert r.verdict() == "FAIL: 2 of 2 checks regressed (step_time, mfu)"
    assert c["step_time"].message() == ("step time rose 10.0% vs baseline (10.050 ms -> 11.050 ms; limit 5%;"
                                        " Mann-Whitney p=0.00397, 5 vs 5 steps)")
    assert c["mfu"].message().startswith("MFU fell 9.0% vs baseline (39.80% -> 36.20%; limit 5%;")
    # Evidence: add grew 1.0 -> 1.6 ms/step (+0.6), mul appeared (+0.4); gemm is unchanged.
    grown = r.grown_kernels()
    assert grown["name"].tolist() == ["add", "mul"]
    assert grown["delta_s"].tolist() == pytest.approx([0.6 * MS, 0.4 * MS])
    assert grown["status"].tolist() == ["slower", "appeared"]
    assert r.class_changes()[["name", "cls_a", "cls_b"]].values.tolist() == [["softmax", "memory", "latency"]]
    assert r.culprits() == "add +0.600 ms/step (memory), mul +0.400 ms/step (memory)"
    shown = text(r)
    assert "kernels whose time per step grew" in shown and "memory -> latency" in shown
    assert shown.rstrip().endswith("FAIL: 2 of 2 checks regressed (step_time, mfu)")


def test_noise_past_the_limit_is_undecided_not_a_pass():
    # Medians 10.5 -> 11.5 ms (+9.5%) but the samples interleave: run ranks 2,5,6,8,10 of the pooled
    # ten, rank sum 31, U = 16; 69 of 252 splits are as extreme: p = 0.274. The gate cannot tell a
    # +9.5% regression from noise with these steps: not a pass (a run 58% slower once passed so).
    base = snap([9.0, 10.0, 12.0, 14.0, 10.5])
    run = snap([9.5, 11.0, 11.5, 15.0, 12.5])
    r = check(run, base)
    c = by_name(r)["step_time"]
    assert c.worse_by == pytest.approx(1.0 / 10.5)
    assert c.p_value == pytest.approx(69 / 252)
    assert c.status == "undecided"
    need = steps_to_decide(run.samples["step_time"], base.samples["step_time"])
    assert need is not None and need > 5
    assert c.note == (f"past the limit but not clear (p=0.274 > alpha 0.05): the steps scatter too much to tell"
                      f" this from noise; about {need} steps a side (--active {need}, the baseline's too) would"
                      " decide a shift like this one")
    assert not r.passed and r.exit_code == 3
    assert r.verdict() == "UNDECIDED: 1 of 1 checks cannot be decided from these steps (step_time); not a pass"
    assert "UNDECIDED" in text(r) and c.message() in text(r)


def test_a_clear_shift_of_58_percent_fails_and_an_unclear_one_is_undecided():
    # 5 vs 5 separated, +58%: p = 1/252, fails. With two run steps among the baseline's (run ranks
    # 4, 6, 8, 9, 10: rank sum 37, U = 22; the 5-subsets of 1..10 summing to 40, 39, 38 (2) and 37 (3)
    # are 7 of 252: p = 0.0278) it still fails; with two run steps at the bottom it cannot decide.
    base = snap([10.0, 10.2, 10.4, 10.6, 10.8])
    assert by_name(check(snap([15.8, 16.0, 16.3, 16.5, 16.9]), base))["step_time"].status == "fail"
    c = by_name(check(snap([10.5, 10.7, 16.3, 16.5, 16.9]), base))["step_time"]
    assert c.status == "fail" and c.p_value == pytest.approx(7 / 252)
    c = by_name(check(snap([9.0, 10.1, 16.3, 16.5, 16.9]), base))["step_time"]
    assert c.status == "undecided" and c.p_value > 0.05 and c.worse_by > 0.5


def test_a_pass_says_when_the_steps_could_not_have_caught_the_limit():
    # Unchanged (the same five steps), but they scatter 9-14 ms: a run 5% slower (every step + 0.525 ms)
    # would interleave with these (ranks 2, 5, 6, 8, 10 of ten: p = 69/252 = 0.27), so this pass
    # cannot mean "no 5% regression", and the note says so and how many steps would.
    base = snap([9.0, 10.0, 12.0, 14.0, 10.5])
    c = by_name(check(snap([9.0, 10.0, 12.0, 14.0, 10.5]), base))["step_time"]
    assert c.status == "pass" and c.change == 0.0
    need = steps_to_decide(base.samples["step_time"] + 0.525 * MS, base.samples["step_time"])
    assert c.note == ("within the limit, but these steps could not have caught a regression of 5% (p=0.27 for one)"
                      f"; about {need} steps a side (--active {need}, the baseline's too) would")
    # Steady steps (10.0-10.2 ms, BASE): a 5% shift separates them, p = 1/252: no note.
    assert by_name(check(BASE, BASE))["step_time"].note == ""


def test_improvement_passes():
    run = snap([8.0, 8.1, 8.2, 7.9, 8.05], mfu=[0.50, 0.49, 0.48, 0.51, 0.495])
    r = check(run, BASE)
    assert r.passed and r.exit_code == 0
    assert by_name(r)["step_time"].change == pytest.approx(-2.0 / 10.05)
    assert by_name(r)["step_time"].p_value == pytest.approx(1.0)
    assert r.verdict() == "PASS: 2 checks passed"


def test_small_change_under_the_limit_passes_even_when_clear():
    # Every run step above the slowest baseline step (10.2 ms): separated, p = 1/252; but the
    # medians move 10.05 -> 10.32 ms, +2.7%, under the 5% limit.
    run = snap([10.3, 10.35, 10.4, 10.25, 10.32])
    c = by_name(check(run, BASE))["step_time"]
    assert c.p_value == pytest.approx(1 / 252) and c.status == "pass" and c.note == ""


def test_too_few_steps_cannot_decide_either_way():
    base2 = snap([10.0, 10.1])
    # 2 vs 2: the best p is 1/C(4,2) = 1/6 > 0.05: no regression could ever be shown, so +20% is
    # undecided (not a failure on the median alone) and +1% is not a pass either.
    r = check(snap([12.0, 12.1]), base2)
    c = by_name(r)["step_time"]
    assert c.status == "undecided" and r.exit_code == 3
    assert c.note == ("2 vs 2 steps cannot show a regression: the rank test's best possible p is 0.167 > alpha"
                      " 0.05; record at least 3 steps a side (--active 3, 8-10 tolerate a slow step, and rewrite"
                      " the baseline)")
    c = by_name(check(snap([10.1, 10.2]), base2))["step_time"]
    assert c.status == "undecided" and c.note.startswith("2 vs 2 steps cannot show a regression")
    # Three a side reach p = 1/20 = 0.05: decided.
    assert by_name(check(snap([12.0, 12.1, 12.2]), snap([10.0, 10.1, 10.2])))["step_time"].status == "fail"


def test_absolute_limits_points_and_time():
    base = snap([10.0, 10.1, 10.2], idle=[0.02, 0.03, 0.025])
    # Idle 0.025 -> 0.09 (medians): +6.5 points > 5pp, separated 3 vs 3: p = 0.05.
    run = snap([11.4, 11.5, 11.6], idle=[0.09, 0.10, 0.08])
    r = check(run, base, max_regression="step_time=2ms")
    c = by_name(r)
    assert c["idle_fraction"].status == "fail" and c["idle_fraction"].worse_by == pytest.approx(0.065)
    assert c["idle_fraction"].delta_text() == "+6.5pp"
    # Step time 10.1 -> 11.5 ms = +1.4 ms < 2 ms.
    assert c["step_time"].status == "pass" and c["step_time"].delta_text() == "+1.400 ms"
    assert c["step_time"].limit == "2ms"


def test_regions_default_to_ten_percent_and_can_be_turned_off():
    base = snap([10.0, 10.1, 10.2], regions={"fwd": [3.0, 3.0, 3.1], "bwd": [6.0, 6.1, 6.0],
                                             "tiny": [0.08, 0.09, 0.08]})
    run = snap([10.0, 10.1, 10.2], regions={"fwd": [3.5, 3.6, 3.5], "bwd": [6.3, 6.3, 6.4],
                                            "tiny": [0.12, 0.13, 0.12]})
    c = by_name(check(run, base))
    # fwd 3.0 -> 3.5 ms: +16.7% > 10%, separated: fail. bwd 6.0 -> 6.3: +5% < 10%: pass.
    assert c["region:fwd"].status == "fail" and c["region:fwd"].limit == "10%"
    assert c["region:bwd"].status == "pass"
    # tiny is 0.08 ms of a 10.1 ms step (0.8% < 1%): +50% but not gated by region:*...
    assert c["region:tiny"].status == "skip"
    assert c["region:tiny"].note == "under 1% of the step; give it its own limit to gate it"
    # ...unless it gets its own limit.
    c = by_name(check(run, base, max_regression="region:fwd=off,region:*=3%,region:tiny=20%"))
    assert "region:fwd" not in c and c["region:bwd"].status == "fail" and c["region:tiny"].status == "fail"


def test_metric_missing_from_the_run_is_skipped():
    r = check(snap([10.0, 10.1, 10.2, 9.9, 10.05]), BASE)
    c = by_name(r)["mfu"]
    assert c.status == "skip" and c.note == "not measured in the run"
    assert r.passed and r.verdict() == "PASS: 1 checks passed, 1 skipped"


def test_bounds_without_a_baseline():
    run = snap([11.0, 11.2, 10.9], mfu=[0.36, 0.37, 0.38])
    r = check(run, min_mfu=0.35, max_step_time_ms=10.95)
    c = by_name(r)
    assert c["mfu >= 35.00%"].status == "pass"                       # median 0.37 >= 0.35
    assert c["step_time <= 10.950 ms"].status == "fail"               # median 11.0 > 10.95
    assert c["step_time <= 10.950 ms"].run == pytest.approx(11.0 * MS)
    assert c["step_time <= 10.950 ms"].message() == ("step time 11.000 ms is above the bound <= 10.950 ms"
                                                     " (median of 3 steps)")
    assert r.exit_code == 1
    assert check(run, min_mfu=0.375).checks[0].status == "fail"       # 0.37 < 0.375


def test_nothing_to_check_is_a_usage_error():
    with pytest.raises(RoofscopeError, match="nothing to check") as e:
        check(snap([10.0]))
    assert e.value.exit_code == 2


def test_warnings_versions_ceilings_throttling():
    run = snap([10.0, 10.1, 10.2], env={**ENV, "torch": "2.12.0+cu130"},
               ceilings={**CEILINGS, "peak_flops": 989.4e12}, throttled=0.23, reasons=("sw_power_cap",))
    w = warnings_for(run, BASE)
    assert w == ["the run throttled in 23% of telemetry samples (sw_power_cap): its clocks were lowered",
                 "different torch versions: baseline 2.11.0+cu130, run 2.12.0+cu130",
                 "the run's ceilings differ from the baseline's (peak_flops: baseline 9.895e+14, run 9.894e+14):"
                 " MFU/HFU compared on the baseline's; kernel classes are each run's own"]
    # 5% of samples is the threshold: at it, no warning; unknown versions never warn.
    assert warnings_for(snap([10.0], throttled=0.05, env={"torch": None}), BASE) == []
    # Warnings never fail the gate.
    assert check(run, BASE).passed


def test_baseline_round_trip(tmp_path):
    base = snap([10.0, 10.1, 10.2], mfu=[0.4, float("nan"), 0.39], regions={"decode": [1.0, 1.1, 1.0]})
    path = tmp_path / "baseline.json"
    path.write_text(base.to_json())
    doc = json.loads(path.read_text())
    assert doc["format"] == "roofscope-gate-baseline" and doc["version"] == VERSION == 1
    assert doc["device"] == "NVIDIA H200" and doc["environment"]["torch"] == "2.11.0+cu130"
    assert doc["metrics"]["step_time"] == {"label": "step time", "unit": "s", "higher_is_better": False,
                                           "median": pytest.approx(0.0101),
                                           "samples": pytest.approx([0.01, 0.0101, 0.0102])}
    assert doc["metrics"]["mfu"]["samples"][1] is None and doc["metrics"]["mfu"]["median"] == pytest.approx(0.395)
    assert doc["kernels"]["rows"][0] == {"name": "gemm", "calls": 4, "time_s": 0.006, "cls": "compute",
                                         "category": "gemm"}
    back = load_baseline(path)
    assert back.device == base.device and back.environment == base.environment
    assert back.samples["step_time"].tolist() == base.samples["step_time"].tolist()
    assert math.isnan(back.samples["mfu"][1])
    assert back.median("region:decode") == pytest.approx(1.0 * MS)
    pd.testing.assert_frame_equal(back.kernels, base.kernels, check_dtype=False)
    # A baseline compared with the run it came from: step time and the region pass (3 vs 3, all tied);
    # MFU has 2 known steps a side, too few to ever show a regression: undecided, not a pass.
    c = by_name(check(base, path))
    assert c["step_time"].status == c["region:decode"].status == "pass"
    assert c["mfu"].status == "undecided" and (c["mfu"].n_run, c["mfu"].n_base) == (2, 2)


def test_baseline_keeps_the_top_kernels_and_new_small_ones_are_not_blamed(tmp_path):
    base = snap([10.0, 10.1, 10.2])
    path = tmp_path / "b.json"
    path.write_text(base.to_json(kernels_kept=2))      # gemm 6 ms and add 1 ms; softmax 0.5 ms dropped
    back = load_baseline(path)
    assert back.kernels.index.tolist() == ["gemm", "add"] and back.kernels_total == 3
    assert back.kernel_cutoff_s == pytest.approx(1.0 * MS)
    r = check(snap([12.0, 12.1, 12.2], kern=BASE_KERNELS + [("copy", 1, 2.0, "memory")]), path)
    # softmax (0.5 ms, below the 1 ms cutoff) is not 'appeared'; copy (2 ms) is.
    assert r.grown_kernels()["name"].tolist() == ["copy"]


@pytest.mark.parametrize("content, fragment", [
    ("{not json", "not readable as JSON"),
    ('{"format": "something-else"}', "not a roofscope gate baseline"),
    ('{"format": "roofscope-gate-baseline", "version": 99}', "baseline version 99 is newer"),
    ('{"format": "roofscope-gate-baseline", "version": 1, "metrics": {"step_time": {}}}', "malformed baseline"),
    ('{"format": "roofscope-gate-baseline", "version": 1, "metrics": {"bogus": {"samples": [1]}},'
     ' "kernels": {"rows": []}}', "malformed baseline"),
])
def test_bad_baseline_files(tmp_path, content, fragment):
    p = tmp_path / "b.json"
    p.write_text(content)
    with pytest.raises(GateInputError, match=fragment) as e:
        load_baseline(p)
    assert e.value.exit_code == 2
    with pytest.raises(GateInputError, match="no such baseline file"):
        load_baseline(tmp_path / "missing.json")


def _corrupt(doc: dict, path: str, value) -> dict:
    """``doc`` with the value at dotted ``path`` (list indices as numbers) replaced."""
    d = json.loads(json.dumps(doc))
    *parents, last = [int(k) if k.isdigit() else k for k in path.split(".")]
    node = d
    for k in parents:
        node = node[k]
    node[last] = value
    return d


@pytest.mark.parametrize("path, value, where", [
    ("environment", "x", "Expected `object`, got `str` - at `$.environment`"),
    ("metrics", [1], "Expected `object`, got `array` - at `$.metrics`"),
    ("kernels.rows.0.time_s", "1.0", "Expected `float`, got `str` - at `$.kernels.rows[0].time_s`"),
    ("metrics.step_time.samples", "fast", "Expected `array`, got `str` - at `$.metrics[...].samples`"),
    ("metrics.step_time.samples.1", {}, "Expected `float | null`, got `object` - at `$.metrics[...].samples[1]`"),
    ("ceilings", 7, "Expected `object`, got `int` - at `$.ceilings`"),
    ("kernels.rows.0.calls", -4, "Expected `float` >= 0.0 - at `$.kernels.rows[0].calls`"),
    ("metrics.step_time.samples", [-0.01, -0.02], "a sample of step_time is a negative time"),
    ("metrics.mfu.samples.0", float("inf"), "a sample of mfu is infinite"),
    ("summary_metrics", {"throttled_fraction": "most"},
     "Expected `float | null`, got `str` - at `$.summary_metrics.throttled_fraction`"),
])
def test_corrupt_baseline_is_a_one_line_input_error(tmp_path, capsys, path, value, where):
    # Before: AttributeError/TypeError tracebacks and exit 1, which the gate defines as "regression".
    good = json.loads(BASE.to_json())
    p = tmp_path / "b.json"
    p.write_text(json.dumps(_corrupt(good, path, value)))
    with pytest.raises(GateInputError, match="malformed baseline") as e:
        load_baseline(p)
    assert where in str(e.value) and e.value.exit_code == 2
    capsys.readouterr()
    assert main(["gate", "unused-run.json", "--baseline", str(p)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"roofscope: error: {p}: malformed baseline") and err.count("\n") == 1


@pytest.mark.parametrize("samples", [[], [None, None, None]])
def test_baseline_without_samples_is_refused_not_passed(tmp_path, samples):
    # Before: "PASS: 0 checks passed, 2 skipped", exit 0.
    doc = json.loads(BASE.to_json())
    for entry in doc["metrics"].values():
        entry["samples"], entry["median"] = samples, None
    p = tmp_path / "b.json"
    p.write_text(json.dumps(doc))
    with pytest.raises(GateInputError, match="the baseline holds no samples") as e:
        check(snap([10.0, 10.1, 10.2]), p)
    assert e.value.exit_code == 2


def test_every_check_skipped_is_nothing_checked():
    # The baseline has MFU only, the run has none: one check, skipped. Nothing checked is no pass.
    base = snap([10.0, 10.1, 10.2], mfu=[0.4, 0.41, 0.39])
    del base.samples["step_time"]
    with pytest.raises(RoofscopeError, match=r"nothing was checked \(mfu: not measured in the run\)") as e:
        check(snap([10.0, 10.1, 10.2]), base)
    assert e.value.exit_code == 2


def failing_result():
    run = snap([11.0, 11.1, 11.2, 10.9, 11.05], mfu=[0.364, 0.360, 0.357, 0.367, 0.362],
               env={**ENV, "torch": "2.12.0+cu130"},
               kern=[("gemm", 4, 6.0, "compute"), ("add<float>, 50%", 8, 1.6, "memory")])
    base = snap([10.0, 10.1, 10.2, 9.9, 10.05], mfu=[0.400, 0.396, 0.392, 0.404, 0.398],
                regions={"decode": [1.0, 1.0, 1.1, 1.0, 1.0]}, source="base",
                kern=[("gemm", 4, 6.0, "compute"), ("add<float>, 50%", 8, 1.0, "memory")])
    return check(run, base, min_mfu=0.30)


def test_junit_xml_one_testcase_per_check():
    r = failing_result()
    root = ET.fromstring(junit_xml(r))
    suite = root.find("testsuite")
    assert root.tag == "testsuites" and suite.get("tests") == "4"
    assert (suite.get("failures"), suite.get("skipped"), suite.get("errors")) == ("2", "1", "0")
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    assert list(cases) == ["step_time", "mfu", "region:decode", "mfu >= 30.00%"]
    failure = cases["step_time"].find("failure")
    assert failure.get("message") == by_name(r)["step_time"].message()
    assert failure.get("type") == "regression"
    assert "add<float>, 50%" in failure.text                     # the evidence rides along, escaped
    assert cases["region:decode"].find("skipped").get("message") == "not measured in the run"
    assert cases["mfu >= 30.00%"].find("failure") is None and cases["mfu >= 30.00%"].find("skipped") is None
    assert "different torch versions" in suite.find("system-err").text
    assert {p.get("name"): p.get("value") for p in suite.find("properties")} == \
        {"run": "run", "baseline": "base", "alpha": "0.05"}


def test_annotation_escaping():
    assert escape_data("50% slower\r\nsee below") == "50%25 slower%0D%0Asee below"
    assert escape_property("gate: mfu, hfu 5%") == "gate%3A mfu%2C hfu 5%25"
    lines = annotations(failing_result())
    assert len(lines) == 3          # two failures, one warning (torch versions)
    assert lines[0].startswith("::error title=roofscope gate%3A step_time regressed::step time rose 10.0%25 vs")
    assert "%0AKernels that grew most: add<float>, 50%25 +0.600 ms/step (memory)" in lines[0]
    assert all("\n" not in line for line in lines)
    assert lines[2] == ("::warning title=roofscope gate::different torch versions: baseline 2.11.0+cu130,"
                        " run 2.12.0+cu130")


def test_step_summary_appends(tmp_path):
    summary = tmp_path / "summary.md"
    summary.write_text("# earlier step\n")
    md = markdown(failing_result())
    assert append_step_summary(md, {"GITHUB_STEP_SUMMARY": str(summary)}) == summary
    text = summary.read_text()
    assert text.startswith("# earlier step\n### roofscope gate :x: FAIL: 2 of 3 checks regressed (step_time, mfu)")
    assert "| step_time | 10.050 ms | 11.050 ms | +10.0% | 5% | 0.00397 | **FAIL** |" in text
    assert "| +0.600 | 1.000 | 1.600 | 8 -> 8 | memory -> memory | slower | `add<float>, 50%` |" in text
    assert append_step_summary(md, {}) is None
    assert in_actions({"GITHUB_ACTIONS": "true"}) and not in_actions({"GITHUB_ACTIONS": "false"})


def test_result_json_is_strict_json():
    d = failing_result().to_dict()
    text = json.dumps(d, allow_nan=False)
    back = json.loads(text)
    assert back["passed"] is False and back["exit_code"] == 1
    assert back["counts"] == {"pass": 1, "fail": 2, "skip": 1, "undecided": 0}
    assert [c["name"] for c in back["checks"]] == ["step_time", "mfu", "region:decode", "mfu >= 30.00%"]
    assert back["evidence"]["grown_kernels"][0]["name"] == "add<float>, 50%"


def test_check_regression_orients_higher_is_better():
    # MFU 0.40 -> 0.44 is an improvement: the test on the negated samples finds nothing (p = 1).
    base, run = snap([10.0] * 3, mfu=[0.40, 0.41, 0.39]), snap([10.0] * 3, mfu=[0.44, 0.45, 0.43])
    c = check_regression(metric("mfu"), parse_limit("mfu", "5%"), run, base)
    assert c.status == "pass" and c.p_value == pytest.approx(1.0) and c.change == pytest.approx(0.1)


def test_undecided_in_every_output():
    # 2 vs 2 steps: undecided, exit 3, and no output reads it as a pass (nor as a regression).
    r = check(snap([12.0, 12.1]), snap([10.0, 10.1]))
    d = json.loads(json.dumps(r.to_dict()))
    assert d["passed"] is False and d["exit_code"] == 3 and d["counts"]["undecided"] == 1
    assert d["verdict"].startswith("UNDECIDED: 1 of 1 checks cannot be decided")
    suite = ET.fromstring(junit_xml(r)).find("testsuite")
    assert (suite.get("failures"), suite.get("errors")) == ("0", "1")
    error = suite.find("testcase").find("error")
    assert error.get("type") == "undecided" and "cannot show a regression" in error.get("message")
    assert markdown(r).startswith("### roofscope gate :grey_question: UNDECIDED:")
    assert "| step_time | 10.050 ms | 12.050 ms | +19.9% | 5% | 0.167 | **UNDECIDED** |" in markdown(r)
    lines = annotations(r)
    assert len(lines) == 1 and lines[0].startswith("::error title=roofscope gate%3A step_time undecided::step time")
    assert "kernels whose time per step grew" not in text(r)
