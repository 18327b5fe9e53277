"""Self-contained HTML report: summary, interactive roofline, top kernels.

Everything the page needs is inlined (plotly.js included), so it opens offline.
Data reaches the page only as JSON inside a ``<script type="application/json">``
block, with ``<`` escaped so no string in a trace can close the script element;
everything else goes through Jinja2 autoescaping.
"""
from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import __version__
from .console import shorten
from .export import json_safe

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from ..analyzers.analysis import Analysis

MAX_MARKERS = 5000
CLASS_COLORS = {"compute": "#2b8a3e", "memory": "#1971c2", "latency": "#e8590c",
                "underutilized": "#c2255c", "communication": "#7048e8", "unknown": "#868e96"}


def script_json(value: Any) -> str:
    """JSON that is safe inside a <script> element: with every '<' written as the JSON
    escape \\u003c, neither '</script' nor '<!--' can appear."""
    text = json.dumps(json_safe(value), allow_nan=False, separators=(",", ":"))
    return text.replace("<", "\\u003c")


def _points(a: "Analysis", agg: "pd.DataFrame") -> list[dict[str, Any]]:
    agg = agg[agg["flops"].notna() & agg["bytes"].notna() & (agg["flops"] > 0) & (agg["bytes"] > 0)]
    ops = a.kernels.drop_duplicates("name").set_index("name")["op_name"]
    pts = []
    for name, r in agg.head(MAX_MARKERS).iterrows():
        pts.append({"name": str(name), "short": shorten(str(name)), "op": str(ops.get(name, "")),
                    "cls": r["cls"], "calls": int(r["calls"]), "time_s": r["time_s"],
                    "share": r["time_share"], "x": r["intensity"], "y": r["achieved_flops"],
                    "bw": r["achieved_bw"], "eff": r["efficiency"], "flops": r["flops"], "bytes": r["bytes"]})
    return pts


def _roofs(a: "Analysis", peaks: Any, bandwidth: float) -> list[dict[str, Any]]:
    used = set(a.kernels["roof_precision"].dropna().astype(str)) - {""}
    used |= {"fp32"}
    return [{"precision": p, "peak": v, "ridge": v / bandwidth, "bandwidth": bandwidth}
            for p, v in sorted(peaks.items()) if p in used and v and bandwidth]


def _datasheet_roofs(a: "Analysis") -> list[dict[str, Any]]:
    """The datasheet's roofs, drawn dashed beside measured or user ceilings for reference."""
    spec = a.ceilings.datasheet
    if a.ceilings.source == "datasheet" or spec is None:
        return []
    return _roofs(a, spec.peaks, spec.bandwidth)


def report_data(a: "Analysis", top: int = 50) -> dict[str, Any]:
    s = a.summary()
    agg = a.by_kernel()
    table = []
    for name, r in agg.head(top).iterrows():
        table.append({"name": str(name), "cls": r["cls"], "calls": int(r["calls"]), "time_ms": r["time_s"] * 1e3,
                      "share": r["time_share"], "tflops": r["achieved_flops"] / 1e12
                      if not math.isnan(r["achieved_flops"]) else None,
                      "gbs": r["achieved_bw"] / 1e9 if not math.isnan(r["achieved_bw"]) else None,
                      "intensity": r["intensity"], "eff": r["efficiency"]})
    return {"summary": s, "points": _points(a, agg), "roofs": _roofs(a, a.ceilings.peaks, a.ceilings.bandwidth),
            "datasheet_roofs": _datasheet_roofs(a), "bandwidth": a.ceilings.bandwidth,
            "table": table, "colors": CLASS_COLORS}


def render_html(a: "Analysis", title: str | None = None) -> str:
    import jinja2
    import plotly.offline

    env = jinja2.Environment(loader=jinja2.PackageLoader("roofscope", "templates"),
                             autoescape=jinja2.select_autoescape(default=True, default_for_string=True))
    s = a.summary()
    by_class = [(c, v["time_s"] * 1e3, v["share"]) for c, v in s["time_by_class"].items() if v["time_s"] > 0]
    return env.get_template("report.html.j2").render(
        title=title or f"roofscope: {a.trace.path}", s=s, a=a, by_class=by_class, colors=CLASS_COLORS,
        data_json=script_json(report_data(a)), plotly_js=plotly.offline.get_plotlyjs(),
        version=__version__, total_ms=float(np.nansum(a.kernels["dur_s"])) * 1e3)
