from __future__ import annotations

import base64
import hashlib
import json
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import roofscope
from roofscope.cli import main
from roofscope.hardware.devices import Ceilings
from roofscope.analyzers.model.summary import Summary
from roofscope.reports import charts, html
from roofscope.reports.html import redact, render_html, report_data, script_json

from .conftest import external
from .kineto import TraceBuilder

EVIL = "</script><img src=x onerror=alert(1)>"
TOY = Ceilings(device="toy", source="user", peaks={"fp32": 10e12, "bf16": 100e12}, bandwidth=1e12)
DATA = Path(__file__).parent / "data"
H200_RUN = DATA / "h200_gpt_run"
HTA = external("hta_a100_rank0.json.gz")


def _evil_analysis(tmp_path):
    """Two kernels whose names, module, region and file name all carry markup."""
    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 0, 1000)
    b.annotation("phase" + EVIL, 0, 900)
    b.annotation("nn.Module: Net.fc" + EVIL, 0, 150)
    ext = b.op("aten::mm", 0, 100, [[1024, 1024], [1024, 1024]], ["c10::BFloat16"] * 2)
    b.launch_kernel("gemm" + EVIL, 10, 200, 30, ext=ext)
    r = b.op("aten::relu", 200, 10, [[1 << 24]], ["float"])
    b.launch_kernel("relu<!--" + EVIL, 210, 300, 200, ext=r)
    return roofscope.analyze(b.write(tmp_path / "x<b>bold.json"), ceilings=TOY,
                             run_meta={"command": ["roofscope", "run", "train" + EVIL + ".py"]})


def _finding(title: str, **kw) -> dict:
    return {"rule": "cuda_graphs", "title": title, "binding": "host", "saving_s": 2.5e-3, "saving_pct": 0.2,
            "confidence": "high", "summary": "GPU idle 5.4 ms/step waiting for launches",
            "evidence": {"kernels": [{"name": "gemm" + EVIL, "calls": 3, "time_s": 4.5e-5, "cls": "compute"}],
                         "figures": {"idle_host_s": 0.0054, "kernels_per_step": 142}},
            "fix": {"text": "Capture the step in a CUDA graph",
                    "snippet": "torch.compile(model, mode=\"reduce-overhead\")"},
            "rank": 1, **kw}


def _with_summary(r, **extra):
    """Hand-filled summary keys (issue 5's schema) on top of the real ones."""
    return replace(r, summary=Summary.from_dict({**r.to_dict(), **extra}))


def _data_block(page: str) -> dict:
    block = re.search(r'<script type="application/json" id="roofscope-data">(.*?)</script>', page, re.S).group(1)
    return json.loads(block)


def test_hostile_names_render_as_text_everywhere(tmp_path, monkeypatch):
    monkeypatch.setenv("ROOFSCOPE_TEST_SECRET", "s3cr3t-token-value")
    a = _with_summary(_evil_analysis(tmp_path), findings=[_finding("Use graphs" + EVIL, summary="idle" + EVIL)],
                      diagnosis={"binding": {"host": 0.8}, "skipped": [{"rule": "r" + EVIL, "reason": "n/a" + EVIL}]})
    page = render_html(a)
    # Nothing a trace or a script names becomes markup: not in kernel names, the module, the region,
    # the script path in the command line, or a finding's text.
    assert "<img src=x" not in page
    assert "<b>bold" not in page and "&lt;b&gt;bold" in page
    escaped = "&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;"
    assert f"train{escaped}.py" in page                # header: the run's command line
    assert f"Use graphs{escaped}" in page              # finding card and evidence title
    assert f"idle{escaped}" in page and f"n/a{escaped}" in page
    assert f'data-filter="gemm{escaped}"' in page       # evidence kernel link
    # The data block parses back to the exact names: escaped for HTML, intact for the page's script.
    data = _data_block(page)
    assert set(data["kernels"]["name"]) == {"gemm" + EVIL, "relu<!--" + EVIL}
    assert "Net.fc" + EVIL in data["modes"]["module"]["keys"]["name"]
    assert data["regions"] == ["phase" + EVIL]
    assert "s3cr3t-token-value" not in page


def test_script_json_escapes_closing_tags():
    text = script_json({"a": "</script>", "b": "<!-- x", "c": float("nan"), "d": np.int64(7)})
    assert "</" not in text and "<!--" not in text
    assert json.loads(text) == {"a": "</script>", "b": "<!-- x", "c": None, "d": 7}


def _inline_scripts(page: str) -> list[str]:
    return re.findall(r"<script>(.*?)</script>", page, re.S)


def _sha(text: str, algo: str) -> str:
    return base64.b64encode(hashlib.new(algo, text.encode()).digest()).decode()


def test_report_is_self_contained_and_its_csp_allows_only_its_own_scripts(tmp_path):
    page = render_html(_evil_analysis(tmp_path))
    # plotly.js is inlined: no script or stylesheet is loaded from anywhere
    assert not re.search(r"<script[^>]+src=", page)
    assert not re.search(r"<link[^>]+href=", page)
    assert "plotly.js (basic - minified) v4.1.1" in page and len(page) > 1_000_000
    csp = re.search(r'http-equiv="Content-Security-Policy" content="([^"]*)"', page).group(1)
    assert "default-src &#39;none&#39;" in csp            # no fetches at all: connect-src falls back to none
    scripts = _inline_scripts(page)
    assert len(scripts) == 2                                # plotly.js and the page's script
    allowed = re.findall(r"sha256-([A-Za-z0-9+/=]+)", csp)
    assert allowed == [_sha(s, "sha256") for s in scripts]  # an injected script would match no hash


def test_cdn_report_is_small_and_pins_plotly_by_hash(tmp_path):
    a = _evil_analysis(tmp_path)
    page = render_html(a, cdn=True)
    tag = re.search(r'<script src="([^"]+)" integrity="([^"]+)" crossorigin="anonymous">', page)
    assert tag.group(1) == "https://cdn.jsdelivr.net/npm/plotly.js-basic-dist-min@4.1.1/plotly-basic.min.js"
    vendored = (Path(html.__file__).parent.parent / "templates" / html.PLOTLY_FILE).read_text()
    assert tag.group(2) == "sha384-" + _sha(vendored, "sha384")
    assert len(page) < len(render_html(a)) - 1_100_000     # the 1.19 MB bundle stays out
    assert html.PLOTLY_CDN in re.search(r'Content-Security-Policy" content="([^"]*)"', page).group(1)


def test_measured_ceilings_keep_datasheet_roofs_dashed(tmp_path):
    from dataclasses import replace

    from roofscope.hardware.datasheets import spec_by_key

    b = TraceBuilder()
    ext = b.op("aten::mm", 0, 100, [[1024, 1024], [1024, 1024]], ["c10::BFloat16"] * 2)
    b.launch_kernel("gemm", 10, 200, 30, ext=ext)
    path = b.write(tmp_path / "t.json")
    h100 = spec_by_key("h100-sxm")
    measured = replace(Ceilings.from_spec(h100), source="measured", peaks={"bf16": 800e12, "fp32": 51e12},
                       bandwidth=3.0e12)
    data = report_data(roofscope.analyze(path, ceilings=measured))
    # Solid roofs from the measurement: bf16 ridge 800e12 / 3.0e12 = 266.7 FLOP/B.
    assert {r["precision"]: round(r["ridge"], 1) for r in data["roofs"]} == {"bf16": 266.7, "fp32": 17.0}
    # Dashed datasheet roofs for reference: 989.5e12 / 3.35e12 = 295.4 FLOP/B.
    ds = {r["precision"]: r for r in data["datasheet_roofs"]}
    assert ds["bf16"]["peak"] == 989.5e12 and round(ds["bf16"]["ridge"], 1) == 295.4
    # Datasheet ceilings are not drawn twice.
    assert report_data(roofscope.analyze(path))["datasheet_roofs"] == []


def test_toy_cells_carry_exact_totals_and_labels(tmp_path):
    d = report_data(_evil_analysis(tmp_path))
    k = d["modes"]["kernel"]
    # relu (200 us) ranks before gemm (30 us); one cell each (one step, one region, one class).
    assert [d["kernels"]["name"][i] for i in k["keys"]["kernel"]] == ["relu<!--" + EVIL, "gemm" + EVIL]
    cells = k["cells"]
    c = {col: [v for _, v in sorted(zip(cells["g"], values))] for col, values in cells.items()}   # by group
    assert c["time_ns"] == [200_000, 30_000] and c["calls"] == [1, 1] and c["step"] == [1, 1]
    # gemm: 2 * 1024^3 = 2,147,483,648 FLOPs over 3 * 1024^2 * 2 B = 6,291,456 B; its floor is the
    # bf16 roof's 2.147e9 / 1e14 s = 21,474.8 ns.
    assert c["flops"][1] == 2_147_483_648 and c["bytes"][1] == 6_291_456
    assert c["floor_ns"][1] == pytest.approx(21_474.836, abs=1e-3)
    assert [d["classes"][i] for i in c["cls"]] == ["memory", "compute"]
    assert k["keys"]["shapes"] == ["16777216", "1024×1024, 1024×1024"]
    assert k["keys"]["dtype"] == ["fp32", "bf16"] and k["keys"]["op"] == ["aten::relu", "aten::mm"]


@pytest.fixture(scope="module")
def h200():
    return roofscope.analyze(H200_RUN)


def _mode_totals(d: dict, mode: str) -> dict[str, tuple[int, int]]:
    """(calls, time ns) per group name, summed over the mode's cells."""
    m, out = d["modes"][mode], {}
    names = m["keys"].get("name") or [d["kernels"]["name"][i] for i in m["keys"]["kernel"]]
    for g, calls, t in zip(m["cells"]["g"], m["cells"]["calls"], m["cells"]["time_ns"]):
        name = names[g] if g < len(names) else m["keys"]["other"]["name"]
        c0, t0 = out.get(name, (0, 0))
        out[name] = (c0 + calls, t0 + t)
    return out


def test_cells_sum_to_the_aggregate_tables_on_the_h200_run(h200):
    d = report_data(h200)
    assert set(d["modes"]) == {"kernel", "op", "module", "region"}
    assert d["steps"] == [3, 4, 5] and d["regions"] == ["", "Optimizer.step#AdamW.step"]
    for mode, table in (("kernel", h200.by_kernel()), ("op", h200.by_op()), ("module", h200.by_module()),
                        ("region", h200.by_region())):
        totals = _mode_totals(d, mode)
        assert totals == {str(n): (int(r["calls"]), round(r["time_s"] * 1e9)) for n, r in table.iterrows()}, mode
    # 438 kernels, 1,614,897 ns in all (memory 222,013 + latency 1,390,869 + unknown 2,015 ns).
    assert sum(d["modes"]["kernel"]["cells"]["calls"]) == 438
    assert sum(d["modes"]["kernel"]["cells"]["time_ns"]) == 1_614_897
    # Per step, the cells give by_step's totals.
    c = d["modes"]["op"]["cells"]
    for step, r in h200.by_step().iterrows():
        assert sum(t for s, t in zip(c["step"], c["time_ns"]) if s == step) == round(r["time_s"] * 1e9)


def test_folding_keeps_totals_exact(h200, monkeypatch):
    monkeypatch.setattr(html, "MAX_MARKERS", 5)
    k = report_data(h200)["modes"]["kernel"]
    # 40 kernel names: the 5 longest keep their own group, 35 share the sixth.
    assert k["count"] == 6 and k["keys"]["other"] == {"groups": 35, "name": "(35 other kernels)"}
    assert set(k["cells"]["g"]) == set(range(6)) and sum(k["cells"]["time_ns"]) == 1_614_897
    top5 = h200.by_kernel().head(5)
    totals = _mode_totals(report_data(h200), "kernel")
    assert [totals[n][1] for n in top5.index] == [round(t * 1e9) for t in top5["time_s"]]
    # A cell budget below the cell count folds further: 40 names x 3 steps are 120 cells.
    monkeypatch.setattr(html, "MAX_MARKERS", 5000)
    monkeypatch.setattr(html, "MAX_CELLS", 30)
    k = report_data(h200)["modes"]["kernel"]
    assert len(k["cells"]["g"]) <= 30 and sum(k["cells"]["time_ns"]) == 1_614_897


def test_many_steps_merge_before_groups_fold(h200, monkeypatch):
    monkeypatch.setattr(html, "MAX_FILTER_STEPS", 2)
    d = report_data(h200)
    assert d["steps"] == [] and d["steps_merged"] == 3
    k = d["modes"]["kernel"]
    # Without the step dimension the 40 names need 40 cells (each name holds one class), all kept.
    assert set(k["cells"]["step"]) == {-1} and len(k["cells"]["g"]) == 40 and k["count"] == 40
    assert sum(k["cells"]["time_ns"]) == 1_614_897
    # A cell budget that steps alone break merges them too: 40 names x 3 steps > 100 >= 40 names.
    monkeypatch.setattr(html, "MAX_FILTER_STEPS", 64)
    monkeypatch.setattr(html, "MAX_CELLS", 100)
    d = report_data(h200)
    assert d["steps_merged"] == 3 and d["modes"]["kernel"]["count"] == 40


def test_timeline_is_the_median_step(h200, monkeypatch):
    tl = charts.step_timeline(h200)
    # Steps 3, 4, 5 took 6.293, 6.332 and 5.923 ms on the GPU: the median is step 3, 146 kernels on stream 7.
    assert tl["step"] == 3 and tl["step_ms"] == pytest.approx(6.293366)
    assert tl["lanes"] == ["stream 7"] and tl["shown"] == tl["total"] == 146
    # The step starts at its first kernel: 327,470 ns into the trace.
    assert tl["start_us"][0] == 0.0
    k = h200.kernels[h200.kernels["step"] == 3]
    assert sum(tl["dur_us"]) == pytest.approx(k["dur_ns"].sum() / 1e3)
    monkeypatch.setattr(charts, "TIMELINE_MAX", 10)
    tl = charts.step_timeline(h200)
    assert tl["shown"] == 10 and tl["total"] == 146
    assert sorted(tl["dur_us"]) == sorted((k["dur_ns"].nlargest(10) / 1e3).tolist())
    assert tl["start_us"] == sorted(tl["start_us"])        # still in time order


def test_per_step_series(h200):
    ps = charts.per_step(h200)
    assert ps["steps"] == [3, 4, 5]
    assert ps["wall_ms"] == pytest.approx([6.293366, 6.332373, 5.922597])
    # GPU busy is under a tenth of the step: 0.537, 0.538, 0.540 ms of kernels, one stream.
    assert ps["busy_ms"] == pytest.approx([0.537238, 0.537571, 0.540088])
    by_step = h200.by_step()["time_s"] * 1e3
    for i, step in enumerate(ps["steps"]):
        assert sum(v[i] for v in ps["classes"].values()) == pytest.approx(by_step[step], abs=1e-3)
        assert sum(v[i] for v in ps["categories"].values()) == pytest.approx(by_step[step], abs=1e-3)
    # The one uncosted kernel (arange, 0.6 us: shorter than the latency floor) is latency by its duration.
    assert list(ps["classes"]) == ["memory", "latency"]


def test_telemetry_series_on_the_h200_run(h200, monkeypatch):
    t = charts.telemetry_series(h200)
    assert t["samples"] == 205 and t["origin"] == "first profiled step"
    # The steps span 327,470 to 18,875,806 ns of trace clock (18,548,336 ns); sample 0 came
    # 3,420,567,055 + 327,470 ns before the first step's first kernel.
    assert t["window"] == pytest.approx([0.0, 0.018548336])
    dev = t["devices"][0]
    assert dev["name"] == "NVIDIA H200" and dev["max_sm_clock_mhz"] == 1980 and dev["power_limit_w"] == 700.0
    assert len(dev["t_s"]) == 205 and dev["t_s"][0] == pytest.approx(-3.420894525, abs=1e-6)
    assert dev["sm_clock_mhz"][0] == 345 and dev["sm_clock_mhz"][-1] == 1980
    assert dev["events"] == {"t_s": [], "reasons": []}     # gpu_idle is a state, not throttling
    # Bucketed: at most 50 points, each bucket's minimum SM clock (the idle 345 MHz survives).
    monkeypatch.setattr(charts, "TELEMETRY_POINTS", 50)
    dev = charts.telemetry_series(h200)["devices"][0]
    assert 40 <= len(dev["t_s"]) <= 50 and min(dev["sm_clock_mhz"]) == 345


def test_throttle_events_are_named(h200, monkeypatch):
    samples = {k: list(v) for k, v in h200.telemetry.samples.items()}
    samples["clock_event_reasons"][10] = 0x4 | 0x1        # sw_power_cap (throttle) + gpu_idle (not)
    samples["clock_event_reasons"][11] = 0x40             # hw_thermal_slowdown
    ev = charts.telemetry_series(replace(h200, telemetry=replace(h200.telemetry, samples=samples)))["devices"][0]["events"]
    assert ev["reasons"] == ["sw_power_cap", "hw_thermal_slowdown"] and len(ev["t_s"]) == 2


def test_header_cards_and_findings_from_the_issue5_schema(h200):
    metrics = {"steps": 3, "step_time_s": 0.0125, "step_time_min_s": 0.0121, "step_time_max_s": 0.0133,
               "tokens_per_s": 655360.0, "tokens_per_step": 8192, "mfu": 0.412, "mfu_source": "model_flops",
               "hfu": 0.455, "mbu": 0.21, "busy_fraction": 0.93, "idle_fraction": 0.07, "energy_per_step_j": 8.4,
               "energy_per_token_j": 0.00103, "throttled_fraction": 0.25, "peak_roof": "bf16", "peak_flops": 989.5e12}
    page = render_html(_with_summary(roofscope.analyze(H200_RUN), metrics=metrics,
                                     findings=[_finding("Capture the step in a CUDA graph")]))
    for text in ("12.500 ms", "median of 3 profiled steps, 12.100–13.300 ms", "655 k", "41.2%", "model FLOPs: model_flops",
                 "45.5%", "21.0%", "93.0%", "idle 7.0%", "8.4 J", "0.00103 J/token", "25.0%", "bf16 990 TFLOP/s"):
        assert text in page, text
    # The card links to its evidence, which shows the figures, kernels and the fix's snippet.
    assert '<a class="finding" href="#finding-1">' in page and 'id="finding-1"' in page
    assert "−2.5 ms/step (20.0%)" in page
    assert "<td class=\"txt\">kernels_per_step</td><td>142</td>" in page
    assert "<pre><code>torch.compile(model, mode=&#34;reduce-overhead&#34;)</code></pre>" in page
    # Keys that are absent draw no card.
    page = render_html(_with_summary(roofscope.analyze(H200_RUN), metrics={}, findings=[]))
    assert ">MFU<" not in page and 'class="finding"' not in page and ">Kernel time<" in page


def test_redact_masks_secret_looking_arguments():
    argv = ["roofscope", "run", "--tokens-per-step", "8192", "train.py", "--hf-token", "hf_abc", "--api-key=sk-1",
            "HF_TOKEN=x", "--lr", "3e-4", "--password", "--verbose", "--author", "me"]
    # Secret-looking option names mask their value; --tokens-per-step and --author are no secrets.
    assert redact(argv) == ["roofscope", "run", "--tokens-per-step", "8192", "train.py", "--hf-token", "***",
                            "--api-key=***", "HF_TOKEN=***", "--lr", "3e-4", "--password", "--verbose",
                            "--author", "me"]


def test_command_line_secrets_stay_out_of_the_report(tmp_path):
    meta = {"command": ["roofscope", "run", "train.py", "--wandb-api-key", "abc123secret"]}
    r = _evil_analysis(tmp_path)
    page = render_html(replace(r, run_meta=meta, summary=Summary.from_dict({**r.to_dict(), "run": meta})))
    assert "abc123secret" not in page and "--wandb-api-key &#39;***&#39;" in page


def test_cpu_only_trace_renders_threads():
    a = roofscope.analyze(DATA / "cpu_block.json.gz",
                          ceilings=Ceilings(device="cpu", source="user", peaks={"fp32": 1e12}, bandwidth=50e9))
    tl = report_data(a)["timeline"]
    assert tl["lanes"] and all(lane.startswith("thread ") for lane in tl["lanes"])
    assert "Top CPU ops" in render_html(a)


def test_trace_without_work_items_still_renders(tmp_path):
    from roofscope.reports.markdown import render_markdown

    b = TraceBuilder(device_name=None)
    b.annotation("ProfilerStep#1", 0, 100)
    b.op("aten::foo", 0, 10)                    # no shapes: no cost, so no work item
    a = roofscope.analyze(b.write(tmp_path / "e.json"),
                          ceilings=Ceilings(device="cpu", source="user", peaks={"fp32": 1e12}, bandwidth=50e9))
    assert len(a.kernels) == 0
    d = report_data(a)
    assert d["modes"]["kernel"]["count"] == 0 and d["modes"]["kernel"]["cells"]["g"] == [] and d["timeline"] is None
    assert "0 CPU ops" in render_html(a)
    assert "Top 0" not in render_markdown(a) and "### Time by class" not in render_markdown(a)


def test_hta_report_size_and_groups():
    a = roofscope.analyze(HTA)
    d = report_data(a)
    # No module labels in this trace; 91 kernel names over 7,747 kernels and 5 steps.
    assert "module" not in d["modes"] and d["steps"] == [550, 551, 552, 553, 554]
    assert d["modes"]["kernel"]["count"] == 91 and sum(d["modes"]["kernel"]["cells"]["calls"]) == 7747
    assert len(render_html(a)) < 6_000_000


# -- the `report` command ---------------------------------------------------------------------

def test_report_command_writes_refuses_to_clobber_and_opens(tmp_path, monkeypatch, capsys):
    out = tmp_path / "r.html"
    opened = []
    monkeypatch.setattr("webbrowser.open", lambda url: opened.append(url))
    assert main(["report", str(H200_RUN), "-o", str(out), "--open"]) == 0
    assert out.stat().st_size > 1_200_000 and opened == [out.resolve().as_uri()]
    capsys.readouterr()
    assert main(["report", str(H200_RUN), "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"roofscope: error: {out} already exists; pass --force to overwrite it"
    assert main(["report", str(H200_RUN), "-o", str(out), "--force", "--cdn"]) == 0
    assert out.stat().st_size < 400_000 and "cdn.jsdelivr.net" in out.read_text()


def test_report_command_as_a_subprocess(tmp_path):
    out = tmp_path / "r.html"
    p = subprocess.run([sys.executable, "-m", "roofscope", "report", str(H200_RUN), "-o", str(out)],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    assert p.stdout == "" and p.stderr.strip() == f"wrote {out}"
    assert "<title>roofscope: h200_gpt_run</title>" in out.read_text()
