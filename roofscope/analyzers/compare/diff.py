"""Compare two analyses of the same workload (A before a change, B after): headline metrics,
kernels per step matched by name, and whether A's predicted saving showed up in B.

Kernel times are per profiled step (total time / number of profiled steps), so runs
recorded with different step counts compare. A kernel is *unchanged* when its time per
step moved by at most 3 % or 2 µs, whichever is larger. The profiled step's mean time less the
kernels' time per step is the time *outside any kernel* (op, in a CPU-only trace): host work
between them, waits, sleeps; a step that grew there shows no kernel that grew.

Runs of two devices and traces cut short are refused (comparable.py) unless told.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from roofscope.analyzers.compare.comparable import refuse_cut_short, refuse_other_device
from roofscope.analyzers.model.kernels import aggregate
from roofscope.errors import RoofscopeError
from roofscope.jsonsafe import json_safe

if TYPE_CHECKING:  # pragma: no cover
    from roofscope.analyzers.model.result import Result

UNCHANGED_REL = 0.03
UNCHANGED_ABS_S = 2e-6
STATUSES = ("slower", "appeared", "faster", "disappeared", "unchanged")
CHANGE_COLUMNS = ["name", "category", "calls_a", "calls_b", "time_a_s", "time_b_s", "delta_s",
                  "cls_a", "cls_b", "status"]
# (summary["metrics"] key, label, unit, whether a larger value is better)
METRICS: tuple[tuple[str, str, str, bool], ...] = (
    ("step_time_s", "step time", "s", False),
    ("hfu", "HFU", "", True),
    ("mfu", "MFU", "", True),
    ("mbu", "MBU", "", True),
    ("busy_fraction", "GPU busy", "", True),
    ("idle_fraction", "GPU idle", "", False),
    ("tokens_per_s", "tokens/s", "tokens/s", True),
    ("energy_per_step_j", "energy/step", "J", False),
)
# Measured saving as a share of the predicted one: at least this much for each verdict.
VERDICTS = ((0.5, "materialized"), (0.2, "partly"))


@dataclass
class MetricChange:
    key: str
    label: str
    unit: str
    a: float | None
    b: float | None
    delta: float | None          # b - a
    rel: float | None            # delta / a
    better: bool | None          # None when unchanged, unknown, or not a gain (see note)
    note: str = ""               # why a change is neither better nor worse


@dataclass
class Prediction:
    verdict: str                 # materialized | partly | not materialized | no prediction | no measurement
    why: str                     # which finding was taken and why, or why there is no verdict
    rule: str | None = None
    title: str | None = None
    predicted_s: float | None = None
    measured_s: float | None = None   # median step A - median step B
    ratio: float | None = None        # measured / predicted
    evidence_time_a_s: float | None = None   # per step, the finding's evidence kernels
    evidence_time_b_s: float | None = None


@dataclass
class Diff:
    a: str
    b: str
    device_a: str | None
    device_b: str | None
    steps_a: int
    steps_b: int
    metrics: list[MetricChange]
    kernels: pd.DataFrame        # kernel_changes(a, b)
    by_status: pd.DataFrame      # index status: kernels, time_a_s, time_b_s, delta_s
    by_category: pd.DataFrame    # index category: time_a_s, time_b_s, delta_s
    by_class: pd.DataFrame       # index cls: time_a_s, time_b_s, delta_s
    prediction: Prediction
    warnings: list[str] = field(default_factory=list)
    # Per profiled step (mean), the time outside any kernel (op in a CPU-only trace): None without steps
    outside_a_s: float | None = None
    outside_b_s: float | None = None
    cpu_only: bool = False       # both CPU-only: the "kernels" are ops

    @property
    def outside_delta_s(self) -> float | None:
        return None if self.outside_a_s is None or self.outside_b_s is None else self.outside_b_s - self.outside_a_s

    def class_changes(self) -> pd.DataFrame:
        """Kernels present in both runs whose class differs."""
        k = self.kernels
        both = k["status"].isin(["faster", "slower", "unchanged"])
        return k[both & (k["cls_a"] != k["cls_b"])]

    def to_dict(self) -> dict[str, Any]:
        def records(df: pd.DataFrame, key: str) -> list[dict[str, Any]]:
            return df.rename_axis(key).reset_index().to_dict("records")

        return json_safe({
            "a": self.a, "b": self.b, "device_a": self.device_a, "device_b": self.device_b,
            "steps_a": self.steps_a, "steps_b": self.steps_b, "warnings": self.warnings,
            "metrics": [asdict(m) for m in self.metrics],
            "kernels": self.kernels.to_dict("records"),
            "class_changes": self.class_changes()["name"].tolist(),
            "by_status": records(self.by_status, "status"),
            "by_category": records(self.by_category, "category"),
            "by_class": records(self.by_class, "cls"),
            "outside_kernels": {"a_s": self.outside_a_s, "b_s": self.outside_b_s, "delta_s": self.outside_delta_s},
            "prediction": asdict(self.prediction),
        })


def profiled_steps(result: "Result") -> int:
    """Complete profiled steps of a run; a trace without step markers counts as one step."""
    return max(len(result.complete_steps), 1)


def _step_kernels(result: "Result") -> pd.DataFrame:
    """The kernels of the complete profiled steps (all of them when the trace has no step markers)."""
    k = result.kernels
    return k[k["step"].isin(result.complete_steps)] if len(result.steps) else k


# The per-step figures gate and diff both judge by: medians over the complete steps' samples
# (Result.step_samples), so one run has one MFU whichever command reads it.
STEP_FIGURES = {"step_time_s": "step_time_s", "hfu": "hfu", "mfu": "mfu", "mbu": "mbu",
                "idle_fraction": "idle_fraction"}


def step_figures(result: "Result") -> dict[str, Any]:
    """Median step time, HFU, MFU, MBU, idle and busy fraction over the complete steps, tokens/s
    from that median step, and ``mfu_source`` (``op_counted`` when no model FLOPs were given)."""
    profiled = result.step_samples
    samples, source = (result.program_samples, result.time_source)
    m = result.summary.metrics.to_dict()
    out: dict[str, Any] = {key: None for key in STEP_FIGURES}
    for key, col in STEP_FIGURES.items():
        # idle is the profiled steps' (the trace's timeline); the rest is the program's own time
        v = (samples if col in samples else profiled)[col].dropna() if col in profiled else profiled.iloc[:0, 0]
        out[key] = float(v.median()) if len(v) else None
    out["time_source"] = source
    out["busy_fraction"] = None if out["idle_fraction"] is None else 1.0 - out["idle_fraction"]
    tokens = m.get("tokens_per_step")
    out["tokens_per_s"] = tokens / out["step_time_s"] if tokens and out["step_time_s"] else None
    out["energy_per_step_j"] = m.get("energy_per_step_j")
    out["mfu_source"] = m.get("mfu_source")
    return out


def per_step_kernels(result: "Result") -> pd.DataFrame:
    """One row per kernel name: ``calls`` and ``time_s`` per profiled step, ``cls`` (the class
    holding most of its time) and ``category``. This is what :func:`compare_kernels` matches."""
    k = _step_kernels(result)
    n = profiled_steps(result)
    if not len(k):
        return pd.DataFrame({"calls": pd.Series([], dtype=float), "time_s": pd.Series([], dtype=float),
                             "cls": pd.Series([], dtype=object), "category": pd.Series([], dtype=object)},
                            index=pd.Index([], name="name", dtype=object))
    agg = aggregate(k, "name")
    return pd.DataFrame({"calls": agg["calls"] / n, "time_s": agg["time_s"].fillna(0.0) / n, "cls": agg["cls"],
                         "category": k.groupby("name", sort=False)["category"].first().reindex(agg.index)})


def outside_kernels(a: "Result") -> float | None:
    """The profiled steps' mean time less their kernels' time per step (module docstring); None
    without complete steps. Kernels that overlap (streams, threads) can make it negative."""
    t = a.step_samples["step_time_s"].dropna() if "step_time_s" in a.step_samples else pd.Series(dtype=float)
    if not len(t) or not len(a.steps):
        return None
    return float(t.mean()) - float(_step_kernels(a)["dur_s"].sum()) / profiled_steps(a)


def compare_kernels(table_a: pd.DataFrame, table_b: pd.DataFrame) -> pd.DataFrame:
    """Match two :func:`per_step_kernels` tables by name (columns ``CHANGE_COLUMNS``, sorted by
    |delta_s| descending). Absent kernels have 0 calls and time and an empty class."""
    j = table_a.add_suffix("_a").join(table_b.add_suffix("_b"), how="outer")
    in_a = j["time_s_a"].notna().to_numpy()
    in_b = j["time_s_b"].notna().to_numpy()
    ta = j["time_s_a"].fillna(0.0).to_numpy(dtype=np.float64)
    tb = j["time_s_b"].fillna(0.0).to_numpy(dtype=np.float64)
    delta = tb - ta
    small = np.abs(delta) <= np.maximum(UNCHANGED_REL * ta, UNCHANGED_ABS_S)
    status = np.select([~in_b, ~in_a, small, delta < 0], ["disappeared", "appeared", "unchanged", "faster"],
                       "slower")
    out = pd.DataFrame({
        "name": j.index.astype(str),
        "category": j["category_a"].fillna(j["category_b"]).to_numpy(),
        "calls_a": j["calls_a"].fillna(0.0).to_numpy(), "calls_b": j["calls_b"].fillna(0.0).to_numpy(),
        "time_a_s": ta, "time_b_s": tb, "delta_s": delta,
        "cls_a": j["cls_a"].fillna("").to_numpy(), "cls_b": j["cls_b"].fillna("").to_numpy(),
        "status": status.astype(object),
    })
    order = np.lexsort((out["name"].to_numpy(), -np.abs(delta)))
    return out.iloc[order].reset_index(drop=True)


def kernel_changes(a: "Result", b: "Result") -> pd.DataFrame:
    """Kernels of B against A per profiled step: name, category, calls_a, calls_b, time_a_s,
    time_b_s, delta_s, cls_a, cls_b, status (faster, slower, appeared, disappeared, unchanged)."""
    return compare_kernels(per_step_kernels(a), per_step_kernels(b))


def _totals(a: "Result", b: "Result", by: str) -> pd.DataFrame:
    ta = _step_kernels(a).groupby(by)["dur_s"].sum() / profiled_steps(a)
    tb = _step_kernels(b).groupby(by)["dur_s"].sum() / profiled_steps(b)
    out = pd.DataFrame({"time_a_s": ta, "time_b_s": tb}).fillna(0.0)
    out["delta_s"] = out["time_b_s"] - out["time_a_s"]
    return out.sort_values("delta_s", key=np.abs, ascending=False)


def _by_status(changes: pd.DataFrame) -> pd.DataFrame:
    g = changes.groupby("status")
    out = pd.DataFrame({"kernels": g.size(), "time_a_s": g["time_a_s"].sum(), "time_b_s": g["time_b_s"].sum(),
                        "delta_s": g["delta_s"].sum()})
    return out.reindex(list(STATUSES)).fillna(0).astype({"kernels": int})


# Utilization of counted work: it rises with extra (wasted) work as much as with faster work.
_COUNTED_WORK = ("hfu", "mbu")


def _metric_changes(ma: dict[str, Any], mb: dict[str, Any], roofs: tuple[str | None, str | None] = (None, None)
                    ) -> list[MetricChange]:
    ta, tb = ma.get("step_time_s"), mb.get("step_time_s")
    slower = ta is not None and tb is not None and tb - ta > max(UNCHANGED_REL * ta, UNCHANGED_ABS_S)
    op_counted = "op_counted" in (ma.get("mfu_source"), mb.get("mfu_source"))
    out = []
    for key, label, unit, higher_better in METRICS:
        va, vb = ma.get(key), mb.get(key)
        delta = vb - va if va is not None and vb is not None else None
        rel = delta / va if delta is not None and va else None
        better = None if not delta else (delta > 0) == higher_better
        note = ""
        if key == "mfu" and op_counted:
            label = "MFU (op-counted)"
        counted = key in _COUNTED_WORK or (key == "mfu" and op_counted)
        if counted and better and slower:
            # More FLOPs or bytes per second while each step takes longer: the steps did more work.
            better, note = None, "more work, slower steps"
        if key in ("mfu", "hfu") and delta and None not in roofs and roofs[0] != roofs[1]:
            # Shares of two peaks (a change of precision): neither better nor worse by this figure.
            better, note = None, f"{roofs[0]} peak vs {roofs[1]}"
        out.append(MetricChange(key, label, unit, va, vb, delta, rel, better, note))
    return out


def _evidence_names(finding: dict[str, Any]) -> list[str]:
    # A kernel named twice must not count twice.
    return list(dict.fromkeys(str(k["name"]) for k in (finding.get("evidence") or {}).get("kernels") or []))


def predict(findings: list[dict[str, Any]], changes: pd.DataFrame, step_a: float | None, step_b: float | None,
            applied: str | None = None, fixes: list[dict[str, Any]] | None = None) -> Prediction:
    """Check A's predicted saving against B: the change (or the finding's rule) named ``applied``,
    else the finding whose evidence kernels lost the largest share of their time per step in B.
    A finding that belongs to one of A's ``fixes`` (findings grouped by the change a user makes,
    diagnose/fixes.py) is checked against the change's combined saving, since applying the change
    realizes all of its findings at once."""
    measured = step_a - step_b if step_a is not None and step_b is not None else None
    if not findings:
        return Prediction("no prediction", "A has no findings to check", measured_s=measured)
    fixes = fixes or []
    times = changes.set_index("name")[["time_a_s", "time_b_s"]]
    evidence = [times.reindex(_evidence_names(f)).fillna(0.0).sum() for f in findings]
    fix = next((c for c in fixes if c.get("change") == applied), None) if applied is not None else None
    if fix is not None:
        idx = next(i for i, f in enumerate(findings) if f.get("rule") in fix["rules"])
        why = f"given with --applied {applied}"
    elif applied is not None:
        idx = next((i for i, f in enumerate(findings) if f.get("rule") == applied), None)
        if idx is None:
            names = ", ".join(dict.fromkeys([str(c.get("change")) for c in fixes]
                                            + [str(f.get("rule")) for f in findings]))
            raise RoofscopeError(f"--applied {applied}: A has no change or finding of that name (its changes"
                                 f" and rules: {names})")
        why = f"given with --applied {applied}"
    else:
        lost = np.array([(e["time_a_s"] - e["time_b_s"]) / e["time_a_s"] if e["time_a_s"] > 0 else -np.inf
                         for e in evidence])
        if np.isfinite(lost).any():
            idx = int(np.argmax(lost))    # ties: the higher-ranked finding, listed first
            why = (f"its evidence kernels lost the largest share of their time in B "
                   f"({lost[idx]:.0%}, of {len(findings)} findings)")
        else:
            idx = 0
            why = "top-ranked finding (no finding names evidence kernels that ran in A)"
    f = findings[idx]
    fix = fix or next((c for c in fixes if f.get("rule") in (c.get("rules") or [])), None)
    rule, title, predicted, ev = f.get("rule"), f.get("title"), f.get("saving_s"), evidence[idx]
    if fix is not None and len(fix["rules"]) > 1:
        members = [g for g in findings if g.get("rule") in fix["rules"]]
        names = list(dict.fromkeys(n for g in members for n in _evidence_names(g)))
        rule, title, predicted = "+".join(fix["rules"]), fix.get("title"), fix.get("saving_s")
        ev = times.reindex(names).fillna(0.0).sum()
        why += f"; checked against change {fix['change']}, which combines {', '.join(fix['rules'])}"
    p = Prediction("no measurement", why, rule=rule, title=title, predicted_s=predicted,
                   measured_s=measured, evidence_time_a_s=float(ev["time_a_s"]),
                   evidence_time_b_s=float(ev["time_b_s"]))
    if not predicted or predicted <= 0:
        p.verdict = "no prediction"
        p.why += "; it predicts no saving"
    elif measured is None:
        p.why += "; a run has no profiled steps, so the step-time saving is unknown"
    else:
        p.ratio = measured / predicted
        p.verdict = next((v for floor, v in VERDICTS if p.ratio >= floor), "not materialized")
    return p


def diff(a: "Result", b: "Result", applied: str | None = None,
         findings: list[dict[str, Any]] | None = None, fixes: list[dict[str, Any]] | None = None, *,
         allow_partial: bool = False, allow_other_device: bool = False) -> Diff:
    """Compare run B against run A (see the module docstring); ``findings`` and ``fixes`` (the
    findings grouped per change) default to A's own. Raises :class:`~.comparable.IncomparableError`
    (exit 2) for a trace cut short unless ``allow_partial``, and for runs of two devices unless
    ``allow_other_device``."""
    for label, r in (("A", a), ("B", b)):
        refuse_cut_short(f"{label} {r.trace.path}", r.trace.meta.cut_short, allow_partial)
    if not allow_other_device:
        refuse_other_device(a.summary.device, b.summary.device, "A ran on {a}, B on {b}",
                            "pass --allow-other-device to compare them anyway, each on its own ceilings")
    sa, sb = a.to_dict(), b.to_dict()
    ma, mb = step_figures(a), step_figures(b)
    changes = kernel_changes(a, b)
    if findings is None:
        findings = sa.get("findings") or []
    warnings = []
    if sa["device"] != sb["device"]:
        warnings.append(f"the runs are from different devices: A {sa['device']}, B {sb['device']}")
    for label, an in (("A", a), ("B", b)):
        if not len(an.steps):
            warnings.append(f"{label} has no profiled steps: its kernel times are totals over the whole trace")
    sources = {label: f["time_source"] for label, f in (("A", ma), ("B", mb))}
    if "profiled" in sources.values():
        only = " and ".join(label for label, src in sources.items() if src == "profiled")
        warnings.append(f"{only} {'has' if len(only) == 1 else 'have'} only profiled step times (a bare trace or an"
                        " older Run): the profiler inflates host-bound steps, so "
                        + ("step times and the measured saving compare profiled with unprofiled time"
                           if len(set(sources.values())) > 1 else "the measured saving is the profiled one"))
    for label, an in (("A", a), ("B", b)):
        if an.trace.meta.cut_short:
            warnings.append(f"{label}'s trace was cut short ({an.trace.meta.cut_short}): compared on the part it"
                            " holds (--allow-partial)")
        if an.summary.partial_steps:
            warnings.append(f"{label}: left out step {', '.join(map(str, an.summary.partial_steps))}, cut short when the"
                            " script ended")
    return Diff(a=str(a.trace.path), b=str(b.trace.path), device_a=sa["device"], device_b=sb["device"],
                steps_a=len(a.complete_steps), steps_b=len(b.complete_steps),
                metrics=_metric_changes(ma, mb, (a.summary.metrics.peak_roof, b.summary.metrics.peak_roof)),
                kernels=changes, by_status=_by_status(changes), by_category=_totals(a, b, "category"),
                by_class=_totals(a, b, "cls"),
                prediction=predict(findings, changes, ma.get("step_time_s"), mb.get("step_time_s"), applied,
                                   fixes if fixes is not None else (sa.get("diagnosis") or {}).get("changes")),
                warnings=warnings, outside_a_s=outside_kernels(a), outside_b_s=outside_kernels(b),
                cpu_only=a.cpu_only and b.cpu_only)
