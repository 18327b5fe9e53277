"""The analysis: a trace or a Run through the stages along the data's path, ending in one Result.

::

    source   ── open_source ──▶ Source: the Trace (ingest/), the Run's metadata, telemetry, counters
    ceilings ── resolve_ceilings ──▶ Ceilings (hardware/): what the roofline is drawn with
    cost     ── signature_costs, attribute, graphs ──▶ kernels with FLOPs, bytes, module, phase (cost/)
    place    ── settle, place, apply_counters ──▶ kernels on the roofline, classed (place/)
    views    ── steps, timeline, samples, metrics, inference, phases (views/): each once
    diagnose ── diagnose(DiagnosisInput) ──▶ Diagnosis (diagnose/)
    result   ── Result (analyzers/model/result.py): summary.json's figures, typed, and the frames

Everything runs eagerly, once, in this order; every renderer, ``diff``, the gate and the job read
the Result and compute nothing. :class:`Analysis` is the deprecated face of a Result that
``roofscope.analyze`` still returns, so library code written against it keeps working.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from roofscope.analyzers.cost.attribution import UNATTRIBUTED_REASONS, attribute, cpu_work_items, op_costs
from roofscope.analyzers.cost.costmodel import signature_costs
from roofscope.analyzers.cost.graphs import GraphMap, load_captures, map_graph_kernels, run_captures
from roofscope.analyzers.cost.hidden_args import missing_notes, window_notes
from roofscope.analyzers.cost.modelflops import model_flops
from roofscope.analyzers.diagnose import DiagnosisInput, RunFacts, diagnose
from roofscope.analyzers.ingest import read as read_trace
from roofscope.analyzers.ingest.frames import regions_at, steps_at
from roofscope.analyzers.ingest.linking import take
from roofscope.analyzers.ingest.modules import module_column
from roofscope.analyzers.model.findings import Diagnosis
from roofscope.analyzers.model.kernels import CLASSES, RooflineParams
from roofscope.analyzers.model.result import Result
from roofscope.analyzers.model.summary import Summary
from roofscope.analyzers.model.timeline import Timeline
from roofscope.analyzers.model.trace import Trace
from roofscope.analyzers.place.bandwidth import settle
from roofscope.analyzers.place.measured import apply_counters, counters_summary
from roofscope.analyzers.place.roofline import above_roof, device_sms, input_bytes, place
from roofscope.analyzers.views.collectives import kernel_collectives
from roofscope.analyzers.views.inference import inference_metrics, inference_note, step_phases
from roofscope.analyzers.views.metrics import (metrics, profiled_window, region_times, step_samples, step_table,
                                               utilization_roof)
from roofscope.analyzers.views.phases import kernel_phases, phase_summary, phase_table
from roofscope.analyzers.views.programtime import program_samples, step_time
from roofscope.analyzers.views.telemetry_summary import load as load_telemetry
from roofscope.analyzers.views.telemetry_summary import summarize
from roofscope.analyzers.views.timeline import timeline
from roofscope.config import CeilingOverrides, RooflineThresholds, values
from roofscope.hardware.ceilings import Ceilings
from roofscope.hardware.devices import resolve_ceilings
from roofscope.run import is_run_dir, load
from roofscope.run.directory import orphaned_traces
from roofscope.run.counters import Counters
from roofscope.run.counters import load as load_counters
from roofscope.run.telemetry import Telemetry


@dataclass(frozen=True)
class AnalysisSettings:
    """The user's choices for one analysis, whole: the ceiling overrides (``--datasheet``,
    ``--peak-*``, ``--ceilings``) and the roofline thresholds travel as the objects config.py
    declares, not re-spelled as keywords."""

    ceilings: CeilingOverrides = field(default_factory=CeilingOverrides)
    params: RooflineParams = field(default_factory=RooflineParams)
    use_cache: bool = True              # ceilings cached by `roofscope microbench` for the trace's device
    graph_capture: tuple[Any, ...] = ()  # capture traces (paths or Traces) that cost graph replays
    attention_window: int | None = None  # sliding-window layers' window (no trace records it)

    @classmethod
    def of(cls, ceilings: CeilingOverrides | None = None, thresholds: RooflineThresholds | None = None,
           **more: Any) -> AnalysisSettings:
        """Settings from the options objects (a command's options are both: pass them twice). Only
        the declared fields are kept, so the settings pickle to the job's worker processes alone."""
        overrides = CeilingOverrides(**values(CeilingOverrides, ceilings)) if ceilings is not None else CeilingOverrides()
        params = RooflineParams.from_thresholds(thresholds) if thresholds is not None else RooflineParams()
        return cls(ceilings=overrides, params=params, **more)


@dataclass(frozen=True, eq=False)
class Source:
    """What the analysis reads: a trace, and what a Run directory keeps beside it."""

    trace: Trace
    run_meta: dict[str, Any] | None = None
    telemetry: Telemetry | None = None
    counters: Counters | None = None
    captures: tuple[Any, ...] = ()
    run_ceilings: str | None = None     # the Run's measured ceilings: beat the datasheet, not the user's choice


def open_source(source: str | os.PathLike | Trace, settings: AnalysisSettings, *,
                telemetry: Telemetry | None = None, run_meta: dict[str, Any] | None = None) -> Source:
    """A Trace, a trace file or a Run directory, opened; explicit ``telemetry``/``run_meta`` win."""
    captures = tuple(settings.graph_capture)
    # A folder where a profile died before its Run was written: load() names the trace it left.
    if isinstance(source, Trace) or not (is_run_dir(source) or orphaned_traces(Path(source))):
        trace = source if isinstance(source, Trace) else read_trace(source)
        return Source(trace, run_meta, telemetry, None, captures)
    run = load(source)
    if telemetry is None and run.telemetry_path is not None:
        telemetry = load_telemetry(run.telemetry_path)
    return Source(read_trace(run.trace_path), run_meta if run_meta is not None else run.meta, telemetry,
                  load_counters(run.path), captures + tuple(run_captures(run.path)),
                  str(run.ceilings_path) if run.ceilings_path is not None else None)


def run(source: str | os.PathLike | Trace, settings: AnalysisSettings = AnalysisSettings(), *,
        ceilings: Ceilings | None = None, telemetry: Telemetry | None = None,
        run_meta: dict[str, Any] | None = None) -> Result:
    """Analyze a Kineto trace or a Run directory: every stage, once, in order (module docstring).

    Ceilings come from ``ceilings`` if given, else as hardware/devices.resolve_ceilings picks them
    from ``settings.ceilings`` and the trace's device; without any, ``Ceilings.none``: everything
    that needs none is still computed. Raises :class:`~roofscope.errors.DeviceError` for an
    unknown ``--datasheet`` or a lone peak flag.
    """
    src = open_source(source, settings, telemetry=telemetry, run_meta=run_meta)
    trace, meta, params = src.trace, src.run_meta, settings.params
    cpu_only = len(trace.kernels) == 0
    if ceilings is None:
        device = trace.meta.device
        ceilings = resolve_ceilings("cpu" if cpu_only else device.name, settings.ceilings,
                                    memory_bytes=device.memory_bytes, props=None if cpu_only else device.properties,
                                    run_ceilings=src.run_ceilings, use_cache=settings.use_cache)
    kernels, graphs = _cost(trace, src, ceilings, cpu_only, settings.attention_window)
    kernels = _place(kernels, trace, ceilings, params, src.counters, cpu_only)

    steps = step_table(trace, None if cpu_only else kernels)
    complete, partial = _complete_steps(steps, meta)
    tl = timeline(trace, kernels, steps, ceilings.launch_latency_s)
    own = step_time(meta)
    phases_of_steps = step_phases(trace, steps, kernels)
    inference = inference_metrics(kernels, steps, phases_of_steps, tl.capture_steps, own, ceilings.bandwidth)
    phases = phase_table(kernels)
    window = profiled_window(trace, steps)
    tel = summarize(src.telemetry, *window, steps=len(steps) or None) if src.telemetry is not None else None
    roof, model = utilization_roof(kernels, ceilings), model_flops(kernels, trace.signatures, meta)
    samples = step_samples(kernels, steps, roof, model, tl.steps,
                           region_times(trace, steps, None if cpu_only else kernels))
    samples = samples.drop(index=partial) if partial else samples
    step_metrics = metrics(samples, roof, model, (meta or {}).get("tokens_per_step"), own, tel)
    communicates = bool((kernels["category"] == "communication").any())
    diagnosis = diagnose(DiagnosisInput(
        trace=trace, kernels=kernels, steps=steps, timeline=tl, ceilings=ceilings, params=params,
        run=RunFacts.of(meta, own), cpu_only=cpu_only, inference=inference, telemetry=tel,
        # Listing the collectives reads every op's tensor sizes: only where a kernel communicates.
        collectives=kernel_collectives(trace, kernels, steps) if communicates else None))

    summary = _summary(trace, ceilings, params, kernels, cpu_only, partial, graphs, inference,
                       inference_note(kernels, phases_of_steps, inference), phase_summary(phases),
                       counters_summary(kernels, src.counters.meta) if "m_flops" in kernels else None,
                       step_metrics, own, tel, tl, meta, diagnosis)
    program, time_source = program_samples(samples, meta)
    return Result(summary=Summary.from_dict(summary), trace=trace, ceilings=ceilings, params=params,
                  kernels=kernels, cpu_only=cpu_only, steps=steps, complete_steps=tuple(complete),
                  step_samples=samples, program_samples=program, time_source=time_source, timeline=tl,
                  diagnosis=diagnosis, phases=phases, window_unix_ns=window, run_meta=meta,
                  telemetry=src.telemetry)


def _cost(trace: Trace, src: Source, ceilings: Ceilings, cpu_only: bool,
          window: int | None = None) -> tuple[pd.DataFrame, GraphMap | None]:
    """The cost stage: each op signature costed once, the costs handed to the kernels the ops
    launched, graph replays costed from their captures, modules and phases named. Between the
    attribution and the graph mapping (which copies the settled costs to replays), place/'s
    ``settle`` makes the two choices only the memory roof can make (analyzers/place/bandwidth.py)."""
    sig_costs = signature_costs(trace.signatures)
    if cpu_only:
        kernels, graphs = _cpu_work(trace, sig_costs), None
    else:
        kernels, choices = attribute(trace, sig_costs, (src.run_meta or {}).get("optimizer"), window)
        settle(kernels, choices, ceilings.bandwidth)  # before the graph mapping reads the cost columns
    kernels["module"] = module_column(trace, kernels["op"].to_numpy())
    if not cpu_only:
        graphs = map_graph_kernels(trace, kernels, load_captures(list(src.captures)), window)
    kernels["phase"] = kernel_phases(trace, kernels)
    if not cpu_only:  # what an uncosted kernel's op reads: a class from its bytes (roofline.class_sources)
        sig = take(trace.ops["sig"].to_numpy(), kernels["op"].to_numpy(dtype=np.int64), -1)
        kernels["io_bytes"] = input_bytes(trace.signatures, sig)
    return kernels, graphs


def _place(kernels: pd.DataFrame, trace: Trace, ceilings: Ceilings, params: RooflineParams,
           counters: Counters | None, cpu_only: bool) -> pd.DataFrame:
    """The place stage: the roofline, then again with measured counters where the Run has them."""
    sms = None if cpu_only else device_sms(trace.meta.device.properties, ceilings)
    kernels = place(kernels, ceilings, params, sms)
    if counters is not None and not cpu_only:
        kernels = place(apply_counters(kernels, counters.table), ceilings, params, sms)
    return kernels


def _complete_steps(steps: pd.DataFrame, meta: dict[str, Any] | None) -> tuple[list[int], list[int]]:
    """(complete, partial) profiled steps. A partial step is one no step boundary ended: the step
    running when the script ended before its requested steps (``--active 10`` against a 12-step
    script records a 1-7 ms tail as step 12). Known from the Run's step counts; a bare trace has none."""
    st = (meta or {}).get("steps") or {}
    seen = st.get("boundaries_seen")
    ids = [int(n) for n in steps["step"]]
    if not isinstance(seen, int) or "active" not in (st.get("requested") or {}):
        return ids, []
    # Step N ends at boundary N + 1 (steps count from 0), so N is complete when N < boundaries seen.
    return [n for n in ids if n < seen], [n for n in ids if n >= seen]


def _unattributed(kernels: pd.DataFrame, graphs: GraphMap | None) -> dict[str, Any]:
    """Share of non-communication kernel time without a cost, by reason."""
    nc = kernels[kernels["category"] != "communication"]
    total = float(nc["dur_s"].sum())
    by_reason = nc[nc["unattributed"] != ""].groupby("unattributed")["dur_s"].sum()
    return {
        "share": float(by_reason.sum() / total) if total > 0 else 0.0,
        "time_s": float(by_reason.sum()),
        "non_communication_time_s": total,
        "by_reason": {r: {"time_s": float(by_reason.get(r, 0.0)),
                          "share": float(by_reason.get(r, 0.0) / total) if total > 0 else 0.0,
                          "kernels": int((nc["unattributed"] == r).sum())}
                      for r in UNATTRIBUTED_REASONS},
        "notes": (list(graphs.notes) if graphs is not None else []) + missing_notes(nc) + window_notes(nc),
    }


def _summary(trace: Trace, ceilings: Ceilings, params: RooflineParams, k: pd.DataFrame, cpu_only: bool,
             partial: list[int], graphs: GraphMap | None, inference: dict[str, Any] | None,
             inference_text: str | None, phases: dict[str, Any], counters: dict[str, Any] | None,
             step_metrics: dict[str, Any], own: dict[str, Any] | None, tel: dict[str, Any] | None,
             tl: Timeline, meta: dict[str, Any] | None, diagnosis: Diagnosis) -> dict[str, Any]:
    """summary.json's figures, in their written order (analyzers/model/summary.py types them)."""
    total = float(k["dur_s"].sum())
    by_class = k.groupby("cls")["dur_s"].sum()
    comm = k["category"] == "communication"
    s: dict[str, Any] = {
        "trace": trace.path,
        "device": ceilings.device if cpu_only else (trace.meta.device.name or ceilings.device),
        "cpu_only": cpu_only,
        "ceilings": ceilings.to_dict(),
        "params": {"latency_floor_s": params.latency_floor_s, "underutilized_below": params.underutilized_below},
        "events": trace.meta.events,
        "skipped_events": dict(trace.meta.skipped_events),
        "kernels": int(len(k)),
        "kernel_time_s": total,
        "communication_time_s": float(k.loc[comm, "dur_s"].sum()),
        "total_flops": float(np.nansum(k["flops"].to_numpy())),
        "total_bytes": float(np.nansum(k["bytes"].to_numpy())),
        "time_by_class": {c: {"time_s": float(by_class.get(c, 0.0)),
                              "share": float(by_class.get(c, 0.0) / total) if total > 0 else 0.0}
                          for c in CLASSES},
        "untimed_kernels": int(k["dur_s"].isna().sum()),
        "counter_flops": float(np.nansum(k["counter_flops"].to_numpy())) if "counter_flops" in k else 0.0,
        "steps": sorted(int(s) for s in k.loc[k["step"] >= 0, "step"].unique()),
        "partial_steps": partial,
        "unattributed": _unattributed(k, graphs),
        "above_roof": above_roof(k),
        "distributed": dict(d.recorded) if (d := trace.meta.distributed) else None,
        "modules": bool((k["module"] != "").any()),
        "inference": inference,
        "inference_note": inference_text,
        "graphs": graphs.to_dict() if graphs is not None else None,
        "phases": phases,
    }
    if counters is not None:
        s["counters"] = counters
    s.update({"metrics": step_metrics, "step_time": own, "telemetry": tel, "timeline": tl.to_dict()})
    if meta:
        run = {key: meta.get(key) for key in ("command", "started", "exit_status", "steps", "warnings")}
        if isinstance(run["steps"], dict):
            # run.json gains the recorded steps after its first analysis (pipeline.py): this analysis's own,
            # so that analysis and every re-analysis say the same.
            run["steps"] = {**run["steps"], "recorded": s["steps"]}
        s["run"] = run
    s["findings"] = [f.to_dict() for f in diagnosis.findings]
    s["diagnosis"] = diagnosis.to_dict()
    return s


def _cpu_work(trace: Trace, sig_costs: pd.DataFrame) -> pd.DataFrame:
    """CPU-only traces: the innermost costed ops are the 'kernels' of the CPU roofline."""
    ops = trace.ops
    oc = op_costs(trace, sig_costs)
    sel = cpu_work_items(ops["parent"].to_numpy(), oc)
    k = ops.iloc[sel][["name", "ts_ns", "dur_ns", "tid"]].copy()
    for col in ("flops", "bytes", "dtype", "tensor_core", "category", "cost_source"):
        k[col] = oc[col].to_numpy()[sel]
    k["tensor_core"] = False  # CPU roofs: the matmul peak is measured per dtype, not by unit
    k["cat"] = "cpu_op"
    k["op_name"] = k["name"].astype(str)
    k["cost_op_name"] = k["op_name"]
    k["unattributed"] = ""
    k["op"] = sel
    k["step"] = steps_at(trace.annotations, ops["ts_ns"].to_numpy()[sel])
    k["region"] = regions_at(trace.annotations, ops["thread"].to_numpy()[sel], ops["ts_ns"].to_numpy()[sel],
                             ops["end_ns"].to_numpy()[sel], np.ones(len(sel), dtype=bool))
    return k.reset_index(drop=True)


class Analysis:
    """Deprecated: what ``roofscope.analyze`` returned before the :class:`Result`, kept as a thin
    face over one so library code written against it keeps working. ``.result`` is the Result;
    every member reads it, none computes."""

    def __init__(self, result: Result) -> None:
        self.result = result

    trace = property(lambda self: self.result.trace)
    ceilings = property(lambda self: self.result.ceilings)
    kernels = property(lambda self: self.result.kernels)
    params = property(lambda self: self.result.params)
    cpu_only = property(lambda self: self.result.cpu_only)
    run_meta = property(lambda self: self.result.run_meta)
    telemetry = property(lambda self: self.result.telemetry)

    def summary(self) -> dict[str, Any]:
        return self.result.to_dict()

    def typed_summary(self) -> Summary:
        return self.result.summary

    def steps(self) -> pd.DataFrame:
        return self.result.steps

    def timeline(self) -> Timeline:
        return self.result.timeline

    def complete_steps(self) -> list[int]:
        return list(self.result.complete_steps)

    def partial_steps(self) -> list[int]:
        return list(self.result.summary.partial_steps)

    def step_samples(self) -> pd.DataFrame:
        return self.result.step_samples

    def program_samples(self) -> tuple[pd.DataFrame, str]:
        return self.result.program_samples, self.result.time_source

    def metrics(self) -> dict[str, Any]:
        return self.result.summary.metrics.to_dict()

    def step_time(self) -> dict[str, Any] | None:
        return self.result.summary.extra.get("step_time")

    def inference(self) -> dict[str, Any] | None:
        return self.result.summary.inference

    def telemetry_summary(self) -> dict[str, Any] | None:
        tel = self.result.summary.telemetry
        return tel.to_dict() if tel is not None else None

    def unattributed(self) -> dict[str, Any]:
        return self.result.summary.unattributed.to_dict()

    def diagnosis(self) -> Diagnosis:
        return self.result.diagnosis

    def by_phase(self) -> pd.DataFrame:
        return self.result.phases

    def by_kernel(self) -> pd.DataFrame:
        return self.result.by_kernel()

    def by_op(self) -> pd.DataFrame:
        return self.result.by_op()

    def by_class(self) -> pd.DataFrame:
        return self.result.by_class()

    def by_category(self) -> pd.DataFrame:
        return self.result.by_category()

    def by_step(self) -> pd.DataFrame:
        return self.result.by_step()

    def by_region(self) -> pd.DataFrame:
        return self.result.by_region()

    def by_module(self, depth: int | None = None) -> pd.DataFrame:
        return self.result.by_module(depth)


def analyze(source: str | os.PathLike | Trace, *, device: str | None = None,
            peak_tflops: float | None = None, peak_bandwidth_gbs: float | None = None,
            ceilings_file: str | os.PathLike | None = None, ceilings: Ceilings | None = None,
            params: RooflineParams | None = None, telemetry: Telemetry | None = None,
            run_meta: dict[str, Any] | None = None, use_cache: bool = True,
            graph_capture: list[str | os.PathLike | Trace] | None = None,
            attention_window: int | None = None) -> Analysis:
    """Deprecated keyword form of :func:`run`, returning the :class:`Analysis` face of its Result."""
    overrides = CeilingOverrides(device=device, peak_tflops=peak_tflops, peak_bandwidth_gbs=peak_bandwidth_gbs,
                                 ceilings=None if ceilings_file is None else str(ceilings_file))
    settings = AnalysisSettings(ceilings=overrides, params=params or RooflineParams(), use_cache=use_cache,
                                graph_capture=tuple(graph_capture or ()), attention_window=attention_window)
    return Analysis(run(source, settings, ceilings=ceilings, telemetry=telemetry, run_meta=run_meta))
