from __future__ import annotations

import json
import re

import roofscope
from roofscope.devices import Ceilings
from roofscope.reports.html import render_html, script_json

from .kineto import TraceBuilder

EVIL = "</script><img src=x onerror=alert(1)>"
TOY = Ceilings(device="toy", source="user", peaks={"fp32": 10e12, "bf16": 100e12}, bandwidth=1e12)


def _evil_analysis(tmp_path):
    b = TraceBuilder()
    ext = b.op("aten::mm", 0, 100, [[1024, 1024], [1024, 1024]], ["c10::BFloat16"] * 2)
    b.launch_kernel("gemm" + EVIL, 10, 200, 30, ext=ext)
    r = b.op("aten::relu", 200, 10, [[1 << 24]], ["float"])
    b.launch_kernel("relu<!--" + EVIL, 210, 300, 200, ext=r)
    return roofscope.analyze(b.write(tmp_path / "x<b>bold.json"), ceilings=TOY)


def test_hostile_kernel_names_render_as_text(tmp_path, monkeypatch):
    monkeypatch.setenv("ROOFSCOPE_TEST_SECRET", "s3cr3t-token-value")
    html = render_html(_evil_analysis(tmp_path))
    assert "<img src=x" not in html
    assert "<b>bold" not in html and "&lt;b&gt;bold" in html
    # The data block parses back to the exact names: escaped for HTML, intact for the page's JS.
    block = re.search(r'<script type="application/json" id="roofscope-data">(.*?)</script>', html, re.S).group(1)
    data = json.loads(block)
    assert {p["name"] for p in data["points"]} == {"gemm" + EVIL, "relu<!--" + EVIL}
    assert "s3cr3t-token-value" not in html


def test_script_json_escapes_closing_tags():
    text = script_json({"a": "</script>", "b": "<!-- x", "c": float("nan")})
    assert "</" not in text and "<!--" not in text
    assert json.loads(text) == {"a": "</script>", "b": "<!-- x", "c": None}


def test_report_is_self_contained(tmp_path):
    html = render_html(_evil_analysis(tmp_path))
    # plotly.js is inlined: no script or stylesheet is loaded from anywhere
    assert not re.search(r'<script[^>]+src=', html)
    assert not re.search(r'<link[^>]+href=', html)
    assert "Plotly" in html and len(html) > 1_000_000


def test_measured_ceilings_keep_datasheet_roofs_dashed(tmp_path):
    from dataclasses import replace

    from roofscope.datasheets import spec_by_key
    from roofscope.reports.html import report_data

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
