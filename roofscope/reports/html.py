"""Self-contained HTML report: headline metrics and recommendations, an interactive
roofline, breakdowns, one step's kernel timeline, NVML telemetry and sortable tables.

Everything the page needs is inlined (the vendored plotly.js basic bundle included), so it
opens offline; a Content-Security-Policy lets only the page's own scripts run (by hash)
and forbids every network fetch. Data reaches the page only as JSON inside a
``<script type="application/json">`` block, with ``<`` escaped so no string in a trace
can close the script element; everything else goes through Jinja2 autoescaping, and the
page's script writes names with ``textContent`` (or escaped, for plotly's labels).

The roofline is drawn from pre-aggregated cells, one per (group, step, region, class), that
the page sums for the chosen grouping and filter: totals stay exact however the groups
are folded to keep the page fast.
"""
from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shlex
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from roofscope.analyzers.model.kernels import CLASSES
from roofscope.jsonsafe import json_safe
from roofscope.reports.charts import (BINDING_COLORS, CATEGORY_COLORS, CLASS_COLORS, per_step, step_timeline,
                                      telemetry_series)
from roofscope.reports.phrases import above_roof_text, ceilings_kind, memory_text, unplaced, utilization_note
from roofscope.text import number, pct, shorten, si
from roofscope.version import __version__

if TYPE_CHECKING:  # pragma: no cover
    from roofscope.analyzers.model.result import Result

MAX_MARKERS = 5000   # groups drawn per grouping; the rest fold into one "other" group
MAX_CELLS = 6000     # cells per grouping: bounds the page's JSON (~75 bytes a cell) and re-aggregation
MAX_FILTER_STEPS = 64  # steps offered by the step filter; beyond, cells merge the steps
PLOTLY_VERSION = "4.1.1"
PLOTLY_FILE = f"vendor/plotly-basic-{PLOTLY_VERSION}.min.js"
PLOTLY_CDN = f"https://cdn.jsdelivr.net/npm/plotly.js-basic-dist-min@{PLOTLY_VERSION}/plotly-basic.min.js"
MODE_LABELS = {"kernel": "kernel", "op": "op", "module": "module", "region": "region"}


_SECRET = re.compile(r"(?<![a-z])(?:token|secret|passw(?:or)?d|api[-_]?key|access[-_]?key|private[-_]?key|auth"
                     r"|credentials?)(?![a-z])", re.I)


def redact(argv: list[str]) -> list[str]:
    """The command line with the values of secret-looking options masked (``--hf-token X``,
    ``--api-key=X``, ``HF_TOKEN=X``): a report is made to be shared."""
    out: list[str] = []
    hide = False
    for arg in argv:
        name, eq, _ = arg.partition("=")
        if hide and not arg.startswith("-"):
            out.append("***")
        elif eq and _SECRET.search(name):
            out.append(f"{name}=***")
        else:
            out.append(arg)
        hide = not eq and arg.startswith("-") and bool(_SECRET.search(arg))
    return out


def _numpy_default(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def script_json(value: Any) -> str:
    """JSON that is safe inside a <script> element: with every '<' written as the JSON
    escape \\u003c, neither '</script' nor '<!--' can appear."""
    try:
        text = json.dumps(value, allow_nan=False, separators=(",", ":"), default=_numpy_default)
    except ValueError:
        # Only when a NaN slipped through: scrubbing the whole payload up front would cost a
        # Python-level pass over every cell of a large trace.
        text = json.dumps(json_safe(value), allow_nan=False, separators=(",", ":"), default=_numpy_default)
    return text.replace("<", "\\u003c")


def _col(x: Any, digits: int | None = None) -> list:
    """A float column as a JSON-ready list: NaN becomes null, values rounded if asked."""
    x = np.asarray(x, dtype=np.float64)
    if digits is not None:
        x = np.round(x, digits)
    return np.where(np.isnan(x), None, x).tolist()


def _ints(x: np.ndarray) -> list:
    """Sums of integers (nanoseconds; float64 holds them exactly up to 2**53) as ints, null for NaN."""
    return [None if v != v else int(v) for v in np.rint(x).tolist()]


def _roofs(result: "Result", peaks: Any, bandwidth: float) -> list[dict[str, Any]]:
    used = {str(p) for p in result.kernels["roof_precision"].dropna().unique()} - {""}
    used |= {"fp32"}
    return [{"precision": p, "peak": v, "ridge": v / bandwidth, "bandwidth": bandwidth}
            for p, v in sorted(peaks.items()) if p in used and v and bandwidth]


def _datasheet_roofs(result: "Result") -> list[dict[str, Any]]:
    """The datasheet's roofs, drawn dashed beside measured or user ceilings for reference."""
    spec = result.ceilings.datasheet
    if result.ceilings.source == "datasheet" or spec is None:
        return []
    return _roofs(result, spec.peaks, spec.bandwidth)


def mode_keys(k: pd.DataFrame) -> dict[str, pd.Series]:
    """The group key of each kernel per grouping, named as Result.by_kernel/by_op/by_module/
    by_region name their groups (the page's totals must match those tables)."""
    op = k["cost_op_name"].where(k["cost_op_name"] != "", k["op_name"])
    keys = {"kernel": k["name"].astype(str), "op": op.astype(str).replace("", "(no op)")}
    if (k["module"] != "").any():
        keys["module"] = k["module"].astype(str).replace("", "(no module)")
    if (k["region"] != "").any():
        keys["region"] = k["region"].astype(str).replace("", "(no region)")
    return keys


def _format_dims(dims: Any) -> str:
    if not isinstance(dims, list):
        return ""
    parts = ["×".join(str(d) for d in t) for t in dims
             if isinstance(t, list) and t and all(isinstance(d, int) for d in t)]
    return ", ".join(parts)


def _shapes(result: "Result", rows: np.ndarray) -> list[str]:
    """Input shapes of the op whose cost each of ``rows`` (kernel rows) carries."""
    k = result.kernels
    op = k["op"].to_numpy(dtype=np.int64)[rows]
    if "cost_op" in k:
        cost = k["cost_op"].to_numpy(dtype=np.int64)[rows]
        op = np.where(cost >= 0, cost, op)
    ops, sigs = result.trace.ops, result.trace.signatures
    sig = np.full(len(op), -1, dtype=np.int64)
    ok = (op >= 0) & (op < len(ops))
    sig[ok] = ops["sig"].to_numpy(dtype=np.int64)[op[ok]]
    dims = sigs["input_dims"].tolist() if "input_dims" in sigs else []
    return [_format_dims(dims[s]) if 0 <= s < len(dims) else "" for s in sig.tolist()]


class _Names:
    """A string table: long kernel names travel once, groups refer to them by index."""

    def __init__(self) -> None:
        self.index: dict[str, int] = {}

    def ids(self, names: list[str]) -> list[int]:
        return [self.index.setdefault(n, len(self.index)) for n in names]

    def to_dict(self) -> dict[str, list[str]]:
        names = list(self.index)
        return {"name": names, "short": [shorten(n) for n in names]}


def _fold(codes: np.ndarray, dur: np.ndarray, n: int, keep: int) -> tuple[np.ndarray, np.ndarray]:
    """Group index per row, groups ranked by total time; ranks >= ``keep`` share index ``keep``."""
    total = np.bincount(codes, weights=dur, minlength=n)
    order = np.argsort(-total, kind="stable")
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n)
    return np.minimum(rank[codes], keep), order


@dataclass
class _Rows:
    """Per-kernel columns every grouping's cells are built from."""

    step: np.ndarray            # index into ``steps`` (all 0 once steps are merged)
    steps: np.ndarray           # step number per index (-1: outside the profiled steps, or merged)
    region: np.ndarray          # index into the sorted region names
    n_regions: int
    cls: np.ndarray             # index into CLASSES
    dur: np.ndarray             # seconds, 0 for untimed rows: ranks groups
    longest_first: np.ndarray   # row order by decreasing duration: picks each group's labels
    sums: dict[str, np.ndarray]  # additive columns (NaN where unknown)

    def merged(self) -> "_Rows":
        return replace(self, step=np.zeros_like(self.step), steps=np.array([-1]))


def _cells(group: np.ndarray, r: _Rows) -> dict[str, Any]:
    """Sums per (group, step, region, class), like roofline.aggregate's (NaN when no row of a
    cell knows the value), as JSON-ready columns."""
    n_steps, n_cls = len(r.steps), len(CLASSES)
    key = ((group * n_steps + r.step) * r.n_regions + r.region) * n_cls + r.cls
    inv, uniq = pd.factorize(key)
    out: dict[str, Any] = {}
    rest, cls = np.divmod(uniq, n_cls)
    rest, region = np.divmod(rest, r.n_regions)
    g, step = np.divmod(rest, n_steps)
    out.update(g=g.tolist(), step=r.steps[step].tolist(), region=region.tolist(), cls=cls.tolist(),
               calls=np.bincount(inv, minlength=len(uniq)).tolist())
    for name, x in r.sums.items():
        known = ~np.isnan(x)
        # astype: bincount of nothing is an int array even with weights.
        total = np.bincount(inv, weights=np.where(known, x, 0.0), minlength=len(uniq)).astype(np.float64)
        total[np.bincount(inv, weights=known, minlength=len(uniq)) == 0] = np.nan
        out[name] = _ints(total) if name == "time_ns" else _col(total, 3 if name == "floor_ns" else None)
    return out


def _mode(result: "Result", mode: str, key: pd.Series, labels: dict[str, np.ndarray], rows: _Rows,
          names: _Names) -> tuple[dict[str, Any], bool]:
    """One grouping's payload, and whether the cell budget (not the marker cap) folded groups."""
    codes, uniques = pd.factorize(key, sort=False)
    keep = MAX_MARKERS
    while True:
        group, order = _fold(codes, rows.dur, len(uniques), keep)
        cells = _cells(group, rows)
        # Cells grow with groups x steps x regions: fold more groups until the page stays light.
        if len(cells["g"]) <= MAX_CELLS or keep <= 1:
            break
        keep = max(1, int(keep * MAX_CELLS / len(cells["g"]) * 0.95))
    shown = min(keep, len(uniques))
    # Each group's hover labels come from its longest kernel.
    ranked = group[rows.longest_first]
    first = rows.longest_first[~pd.Series(ranked).duplicated().to_numpy()]
    first = first[np.argsort(group[first], kind="stable")][:shown]
    keys: dict[str, Any] = {"kernel": names.ids([str(labels["kernel"][i]) for i in first])}
    if mode != "kernel":
        keys["name"] = [str(uniques[i]) for i in order[:shown]]
    for field in ("op", "module", "region", "dtype", "category"):
        keys[field] = [str(labels[field][i]) for i in first]
    keys["shapes"] = _shapes(result, first)
    folded = len(uniques) - shown
    if folded:
        # One group holds the tail so the page's totals still add up to the trace's.
        keys["other"] = {"groups": folded, "name": f"({folded:,} other {mode}s)"}
    payload = {"label": MODE_LABELS[mode], "count": shown + (1 if folded else 0), "keys": keys, "cells": cells}
    return payload, shown < min(MAX_MARKERS, len(uniques))


def _counter_sums(k: pd.DataFrame) -> dict[str, np.ndarray]:
    """Measured L2 bytes, and kernel time of matmuls with and without tensor-core FLOPs, when
    the Run has hardware counters (analyzers/place/measured.py)."""
    if "m_l2_bytes" not in k:
        return {}
    dur = k["dur_ns"].to_numpy(dtype=np.float64)
    tc = k["tc_used"]
    return {"l2_bytes": k["m_l2_bytes"].to_numpy(dtype=np.float64),
            "tc_ns": np.where(tc.eq(True).fillna(False).to_numpy(dtype=bool), dur, np.nan),
            "notc_ns": np.where(tc.eq(False).fillna(False).to_numpy(dtype=bool), dur, np.nan)}


def _rows(k: pd.DataFrame) -> tuple[_Rows, list[str]]:
    step_idx, steps = pd.factorize(k["step"].to_numpy(dtype=np.int64), sort=True)
    region, regions = pd.factorize(k["region"].astype(str), sort=True)
    dur_s = k["dur_s"].to_numpy(dtype=np.float64)
    dur = np.nan_to_num(dur_s)
    rows = _Rows(step=step_idx.astype(np.int64), steps=np.asarray(steps, dtype=np.int64),
                 region=region.astype(np.int64), n_regions=max(1, len(regions)),
                 cls=pd.Categorical(k["cls"], categories=CLASSES).codes.astype(np.int64),
                 dur=dur, longest_first=np.argsort(-dur, kind="stable"), sums={
                     "time_ns": np.where(np.isnan(dur_s), np.nan, k["dur_ns"].to_numpy(dtype=np.float64)),
                     "flops": k["flops"].to_numpy(dtype=np.float64), "bytes": k["bytes"].to_numpy(dtype=np.float64),
                     "floor_ns": k["floor_s"].to_numpy(dtype=np.float64) * 1e9, **_counter_sums(k)})
    return rows, [str(r) for r in regions]


def roofline_groups(result: "Result") -> dict[str, Any]:
    """The roofline's cells per grouping (kernel, op, and module/region when the trace has
    them), the string table of kernel names, and the filters' steps and regions."""
    k = result.kernels
    keys = mode_keys(k)
    labels = {"kernel": k["name"].astype(str).to_numpy(), "op": keys["op"].to_numpy(),
              "module": k["module"].astype(str).to_numpy(), "region": k["region"].astype(str).to_numpy(),
              "dtype": k["dtype"].astype(str).to_numpy(), "category": k["category"].astype(str).to_numpy()}
    rows, regions = _rows(k)
    steps = [int(s) for s in rows.steps if s >= 0]
    # Many steps, or too many cells with them, cost the step filter before they cost markers.
    merged = len(steps) > MAX_FILTER_STEPS
    while True:
        names = _Names()
        built = {m: _mode(result, m, key, labels, rows.merged() if merged else rows, names) for m, key in keys.items()}
        if merged or len(steps) < 2 or not any(limited for _, limited in built.values()):
            break
        merged = True
    return {"modes": {m: payload for m, (payload, _) in built.items()}, "kernels": names.to_dict(),
            "steps": [] if merged else steps, "steps_merged": len(steps) if merged else 0, "regions": regions}


def report_data(result: "Result") -> dict[str, Any]:
    """Everything the page's script draws, as JSON-ready values."""
    return {**roofline_groups(result), "classes": list(CLASSES), "colors": CLASS_COLORS,
            "category_colors": CATEGORY_COLORS, "cpu_only": result.cpu_only,
            "roofs": _roofs(result, result.ceilings.peaks, result.ceilings.bandwidth),
            "datasheet_roofs": _datasheet_roofs(result),
            "ceilings_source": result.ceilings.source, "bandwidth": result.ceilings.bandwidth,
            "counters": "m_l2_bytes" in result.kernels, "l2_bandwidth": result.ceilings.l2_bandwidth,
            # Cache levels inside the outermost one (CPU: L2, LLC), drawn as their own bandwidth roofs.
            "levels": [{"name": n, "bandwidth": bw} for n, _, bw in result.ceilings.levels[:-1]],
            "per_step": per_step(result), "timeline": step_timeline(result), "telemetry": telemetry_series(result)}


def _bar(rows: list[tuple[str, float | None, float]], colors: dict[str, str]) -> list[dict[str, Any]]:
    """Segments of a horizontal stacked bar: (label, seconds or None, share) -> label, ms, share, color."""
    return [{"label": label, "ms": None if t is None else t * 1e3, "share": share,
             "color": colors.get(label, "#868e96")} for label, t, share in rows if share > 0]


@lru_cache(maxsize=None)
def _asset(name: str) -> str:
    from importlib.resources import files

    return files("roofscope").joinpath("templates", name).read_text(encoding="utf-8")


def _sha(text: str, algo: str = "sha256") -> str:
    return f"{algo}-" + base64.b64encode(hashlib.new(algo, text.encode()).digest()).decode()


def render_html(result: "Result", title: str | None = None, cdn: bool = False) -> str:
    """The report as one HTML document. ``cdn`` loads plotly.js from a CDN (pinned by its
    hash) instead of inlining it: a small file that needs the network to draw its charts."""
    import jinja2

    env = jinja2.Environment(loader=jinja2.PackageLoader("roofscope", "templates"),
                             autoescape=jinja2.select_autoescape(default=True, default_for_string=True))
    env.filters.update(si=si, pct=pct, shorten=shorten, number=number)
    s = result.to_dict()
    by_class = [(c, v["time_s"], v["share"]) for c, v in s["time_by_class"].items()]
    cat = result.by_category()
    by_category = [(str(c), float(r["time_s"]), float(r["time_share"])) for c, r in cat.iterrows()]
    binding = ((s.get("diagnosis") or {}).get("binding") or {})
    run = s.get("run") or {}
    command = shlex.join(redact([str(c) for c in run["command"]])) if run.get("command") else None
    data = report_data(result)
    path = str(result.trace.path)
    plotly_js = _asset(PLOTLY_FILE)
    page_js = _asset("report.js")
    scripts = [page_js] if cdn else [plotly_js, page_js]
    sources = [f"'{_sha(x)}'" for x in scripts] + ([PLOTLY_CDN] if cdn else [])
    csp = f"default-src 'none'; style-src 'unsafe-inline'; img-src data: blob:; script-src {' '.join(sources)}"
    above = result.summary.above_roof
    return env.get_template("report.html.j2").render(
        title=title or f"roofscope: {os.path.basename(os.path.dirname(path) if result.run_meta else path)}", s=s,
        result=result,
        metrics=s.get("metrics") or {}, utilization_note=utilization_note(s.get("metrics") or {}),
        findings=s.get("findings") or [], other_fixes=unplaced(s.get("verification")),
        skipped=(s.get("diagnosis") or {}).get("skipped") or [], command=command,
        class_bar=_bar(by_class, CLASS_COLORS), category_bar=_bar(by_category, CATEGORY_COLORS),
        binding_bar=_bar([(t, None, v) for t, v in sorted(binding.items(), key=lambda kv: -kv[1])], BINDING_COLORS),
        ceilings_notes=list(result.ceilings.notes), memory=memory_text(result.ceilings),
        ceilings_kind=ceilings_kind(result.ceilings),
        above_roof=above_roof_text(above) if above.kernels else None, d=data, data_json=script_json(data), csp=csp, cdn=cdn,
        css=_asset("report.css"),
        plotly_js=plotly_js, page_js=page_js, plotly_cdn=PLOTLY_CDN, plotly_sri=_sha(plotly_js, "sha384"),
        version=__version__)
