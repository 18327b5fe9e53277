"""The combined HTML report of a distributed job: per-rank table, step time per rank, per-rank
time split, collectives, recommendations, the per-rank roofline and links to each rank's own
report.

It reuses the single-run report's machinery (render/html.py): the stylesheet, the vendored
plotly.js, the Content-Security-Policy that lets only the page's own scripts run (by hash)
and the JSON-into-<script> encoder; the page's script writes names as text only.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from roofscope.version import __version__
from roofscope.render.charts import CLASS_COLORS
from roofscope.render.console import pct, shorten, si
from roofscope.render.html import PLOTLY_FILE, _asset, _col, _sha, script_json

if TYPE_CHECKING:  # pragma: no cover
    from roofscope.job.straggler import Job

SPLIT_COLORS = {"compute": "#2b8a3e", "comm overlapped": "#74c0fc", "comm exposed": "#c92a2a", "idle": "#adb5bd"}


def _split(job: "Job") -> dict[str, list]:
    """Per-rank median step split into compute-only busy, overlapped and exposed communication,
    and idle: the four add up to the step (busy = non-communication busy + exposed comm)."""
    r = job.ranks
    exposed = r["comm_exposed_s"].fillna(0.0)
    overlapped = (r["comm_s"].fillna(0.0) - exposed).clip(lower=0)
    compute = (r["busy_s"] - exposed - overlapped).clip(lower=0)
    idle = (r["step_s"] - r["busy_s"]).clip(lower=0)
    return {"ranks": [int(x) for x in r["rank"]],
            "series": {name: _col(v * 1e3, 4) for name, v in
                       zip(SPLIT_COLORS, (compute, overlapped, exposed, idle))}}


def _roofline(job: "Job") -> dict[str, Any]:
    ranks = {}
    for res in job.results:
        t = res.roofline
        ok = (t["intensity"] > 0) & (t["achieved_flops"] > 0)
        t = t[ok.fillna(False)]
        ranks[str(res.rank)] = {"name": t["name"].astype(str).tolist(), "x": _col(t["intensity"]),
                                "y": _col(t["achieved_flops"]), "ms": _col(t["time_s"] * 1e3, 4),
                                "cls": t["cls"].astype(str).tolist()}
    c = job.results[0].ceilings if job.results else {}
    bw = c.get("bandwidth") or 0.0
    roofs = [{"precision": p, "peak": v, "ridge": v / bw} for p, v in sorted((c.get("peaks") or {}).items())
             if v and bw]
    return {"ranks": ranks, "roofs": roofs, "bandwidth": bw}


def page_data(job: "Job") -> dict[str, Any]:
    """What the page's script draws, JSON-ready."""
    st = job.step_time
    return {"steps": [int(s) for s in st.index],
            "step_ms": {str(r): _col(st[r].to_numpy(dtype=np.float64) * 1e3, 4) for r in st.columns},
            "self_ms": {str(r): _col(job.self_time[r].reindex(st.index).to_numpy(dtype=np.float64) * 1e3, 4)
                        for r in job.self_time.columns},
            "stragglers": [s.rank for s in job.stragglers], "split": _split(job), "split_colors": SPLIT_COLORS,
            "roofline": _roofline(job), "class_colors": CLASS_COLORS}


def render_multirank(job: "Job", reports: dict[int, str] | None = None) -> str:
    """The job's report as one self-contained HTML document; ``reports`` maps a rank to the
    relative path of its own report.html."""
    import jinja2

    env = jinja2.Environment(loader=jinja2.PackageLoader("roofscope", "templates"),
                             autoescape=jinja2.select_autoescape(default=True, default_for_string=True))
    env.filters.update(si=si, pct=pct, shorten=shorten)
    data = page_data(job)
    plotly_js, page_js = _asset(PLOTLY_FILE), _asset("multirank.js")
    csp = (f"default-src 'none'; style-src 'unsafe-inline'; img-src data: blob:;"
           f" script-src '{_sha(plotly_js)}' '{_sha(page_js)}'")
    return env.get_template("multirank.html.j2").render(
        job=job, s=job.to_dict(), reports=reports or {}, data_stragglers={st.rank for st in job.stragglers},
        data_json=script_json(data), csp=csp, css=_asset("report.css"), plotly_js=plotly_js, page_js=page_js,
        version=__version__)
