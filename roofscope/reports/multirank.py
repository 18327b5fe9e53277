"""A distributed job for people: the terminal summary (per-rank table, straggler verdict,
collectives, scaling tax, recommendations) and the combined HTML report (per-rank table, step
time per rank, per-rank time split, collectives, recommendations, the per-rank roofline and
links to each rank's own report).

It reuses the single-run report's machinery (reports/html.py): the stylesheet, the vendored
plotly.js, the Content-Security-Policy that lets only the page's own scripts run (by hash)
and the JSON-into-<script> encoder; the page's script writes names as text only.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from roofscope.analyzers.model.summary import Recommendation
from roofscope.reports.charts import CLASS_COLORS
from roofscope.reports.html import PLOTLY_FILE, _asset, _col, _sha, script_json
from roofscope.reports.phrases import finding_lines
from roofscope.text import pct, shorten, si, table
from roofscope.text_safety import clean
from roofscope.version import __version__

if TYPE_CHECKING:  # pragma: no cover
    from roofscope.analyzers.job.straggler import Job

SPLIT_COLORS = {"compute": "#2b8a3e", "comm overlapped": "#74c0fc", "comm exposed": "#c92a2a", "idle": "#adb5bd"}


def _split(job: "Job") -> dict[str, list]:
    """Per-rank median step split into compute-only busy, overlapped and exposed communication,
    and idle: the four add up to the step (busy = non-communication busy + exposed comm)."""
    r = job.ranks
    exposed = r["comm_exposed_s"].fillna(0.0)
    overlapped = (r["comm_s"].fillna(0.0) - exposed).clip(lower=0)
    compute = (r["busy_s"] - exposed - overlapped).clip(lower=0)
    idle = (r["profiled_step_s"] - r["busy_s"]).clip(lower=0)   # the split is of the profiled step
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


def _ms(x: float) -> str:
    return "-" if x != x else f"{x * 1e3:.2f}"


def _gb(x: float) -> str:
    return "-" if x != x else f"{x / 1e9:.1f}"


def render_terminal(job: "Job", top: int = 5) -> str:
    """Terminal summary of a job: per-rank table, straggler verdict, collectives, recommendations."""
    own = job.own_time
    step_note = (f"; median step {_ms(job.step_s)} ms without the profiler"
                 f" ({_ms(float(job.ranks['profiled_step_s'].median()))} profiled)" if own
                 else f"; median step {_ms(job.step_s)} ms (profiled: the ranks' own step times were not recorded)")
    out = [f"roofscope job: {len(job.results)} of {job.world_size} ranks, "
           + ", ".join(sorted({r.device for r in job.results})) + step_note, ""]
    out += [f"warning: {w}" for w in job.warnings]
    rows = [[str(r.rank), _ms(r.step_s), _ms(r.profiled_step_s), pct(r.mfu),
             pct(r.busy_s / r.profiled_step_s if r.profiled_step_s > 0 else None),
             _ms(r.comm_s), _ms(r.comm_exposed_s), _ms(r.self_s)] for r in job.ranks.itertuples()]
    out += table(["rank", "own step ms" if own else "step ms", "profiled ms", "MFU", "busy", "comm ms", "exposed ms",
                  "self ms"], rows, ">>>>>>>>") + [""]
    if job.stragglers:
        for s in job.stragglers:
            ker = "; ".join(f"{shorten(k['name'], 48)} +{k['excess_ms']:.2f} ms" for k in s.kernels[:3])
            what = ("enters the collectives last: the others wait" if s.basis == "arrival skew"
                    else "own work")
            out.append(f"straggler: rank {s.rank} {what} +{s.excess_s * 1e3:.2f} ms/step in"
                       f" {100 * s.positive_share:.0f}% of steps (noise {s.noise_s * 1e3:.2f} ms)"
                       + (f"; catching up saves at most {s.saving_s * 1e3:.2f} ms/step" if s.saving_s < s.excess_s
                          else "")
                       + (f"; slower: {ker}" if ker else "")
                       + (f"; host idle +{s.host_idle_excess_s * 1e3:.2f} ms" if s.host_idle_excess_s > 0 else ""))
    elif job.noise_s == job.noise_s:
        what = "arrival at the collectives" if job.lateness is not None else "own work"
        out.append(f"no straggler: every rank's {what} is within the noise ({job.noise_s * 1e3:.2f} ms/step)")
    else:
        out.append("straggler test needs two ranks with common steps")
    out.append("")
    c = job.collectives
    if len(c):
        crow = [[r.collective, f"{r.count:.1f}", _ms(r.time_s), "-" if r.bytes != r.bytes else f"{r.bytes / 1e6:.2f}",
                 _gb(r.algbw), _gb(r.busbw), r.algorithms or "-"] for r in c.itertuples()]
        out += ["Collectives (median over ranks, per step)"]
        out += table(["collective", "calls", "ms", "MB/call", "algbw GB/s", "busbw GB/s", "algorithm"], crow,
                     "<>>>>><") + [""]
    if job.scaling:
        t = job.scaling
        out.append(f"scaling tax vs baseline {_ms(t['baseline_step_s'])} ms: +{_ms(t['tax_s'])} ms/step"
                   f" (exposed comm {_ms(t['exposed_comm_s'])}, straggler wait {_ms(t['straggler_wait_s'])},"
                   f" other {_ms(t['other_s'])}); scaling efficiency {pct(t['efficiency'])}")
        out.append("")
    out += finding_lines([Recommendation.from_dict(f.to_dict()) for f in job.findings], top)
    return "\n".join(map(clean, out)) + "\n"
