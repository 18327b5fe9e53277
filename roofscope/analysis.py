"""The analysis: a trace or a Run through the stages along the data's path, ending in one Result.

::

    source   ── open_source ──▶ Source: the Trace (ingest/), run.json typed, telemetry, counters
    ceilings ── resolve_ceilings ──▶ Ceilings (hardware/): what the roofline is drawn with
    cost     ── signature_costs, attribute, graphs ──▶ kernels with FLOPs, bytes, module, phase (cost/)
    place    ── settle, place, apply_counters ──▶ kernels on the roofline, classed (place/)
    views    ── steps, timeline, samples, metrics, inference, phases (views/): each once
    diagnose ── diagnose(DiagnosisInput) ──▶ Diagnosis (diagnose/); a verified Run's ranked by its verify.json
    result   ── Result (analyzers/model/result.py): summary.json's figures, typed, and the frames

Everything runs eagerly, once, in this order; every renderer, ``diff``, the gate and the job read
the Result and compute nothing. :func:`analyze` is :func:`run` with the command line's options as
keywords: ``roofscope.analyze``, the public API.
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from roofscope.analyzers.cost.attribution import UNATTRIBUTED_REASONS, attribute, cpu_work_items, op_costs
from roofscope.analyzers.cost.compiled_cpu import fused_kernel_items
from roofscope.analyzers.cost.costmodel import signature_costs
from roofscope.analyzers.cost.formulas.custom import load_all
from roofscope.analyzers.cost.graphs import GraphMap, load_captures, map_graph_kernels, run_captures
from roofscope.analyzers.cost.modelflops import model_flops
from roofscope.analyzers.cost.notes import NOTE_COLUMNS, all_notes
from roofscope.analyzers.diagnose import DiagnosisInput, RunFacts, diagnose
from roofscope.analyzers.compare.verified import rank_verified
from roofscope.analyzers.ingest import read as read_trace
from roofscope.analyzers.ingest.frames import drop_impossible_shapes, regions_at, steps_at
from roofscope.analyzers.ingest.gpujob import gpu_job_evidence
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
from roofscope.analyzers.views.collectives import host_communicates, kernel_collectives
from roofscope.analyzers.views.inference import inference_metrics, inference_note, step_phases
from roofscope.analyzers.views.metrics import (metrics, profiled_window, region_times, step_samples, step_table,
                                               utilization_roof)
from roofscope.analyzers.views.phases import kernel_phases, phase_summary, phase_table
from roofscope.analyzers.views.programtime import program_samples, step_time
from roofscope.analyzers.views.telemetry_summary import load as load_telemetry
from roofscope.analyzers.views.telemetry_summary import summarize
from roofscope.analyzers.views.timeline import timeline
from roofscope.config import CeilingOverrides, RooflineThresholds, values
from roofscope.errors import RoofscopeError
from roofscope.fileio import collector_paused
from roofscope.hardware.ceilings import Ceilings
from roofscope.hardware.devices import resolve_ceilings
from roofscope.run import is_run_dir, load, typed_meta
from roofscope.run.directory import orphaned_traces
from roofscope.run.counters import Counters
from roofscope.run.counters import load as load_counters
from roofscope.run.schema import RunMeta
from roofscope.run.telemetry import Telemetry
from roofscope.run.verification import Verification
from roofscope.run.verification import load as load_verification


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

    def __post_init__(self) -> None:
        # What the command line's types refuse, refused here for every caller (roofscope.analyze too).
        w = self.attention_window
        if w is not None and (isinstance(w, bool) or not isinstance(w, int) or w < 1):
            raise RoofscopeError(f"attention_window {w!r}: expected a whole number of tokens, 1 or more")
        for c in self.graph_capture:
            if not isinstance(c, (str, os.PathLike, Trace)):
                raise RoofscopeError(f"graph capture {c!r}: expected a trace's path or a Trace")
            if not isinstance(c, Trace) and not os.path.isfile(c):
                raise RoofscopeError(f"graph capture {os.fspath(c)}: no such file")

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
    run_meta: dict[str, Any] | None = None   # run.json as written: the summary repeats its own words
    info: RunMeta | None = None              # the same, typed: what the stages read
    telemetry: Telemetry | None = None
    counters: Counters | None = None
    captures: tuple[Any, ...] = ()
    run_ceilings: str | None = None     # the Run's measured ceilings: beat the datasheet, not the user's choice
    verification: Verification | None = None   # the Run's verify.json: its fixes measured in the program


def open_source(source: str | os.PathLike | Trace, settings: AnalysisSettings, *,
                telemetry: Telemetry | None = None, run_meta: Mapping[str, Any] | None = None) -> Source:
    """A Trace, a trace file or a Run directory, opened; explicit ``telemetry``/``run_meta`` (run.json's
    fields, typed here as a Run's are: :class:`~roofscope.run.RunError` when malformed) win."""
    captures = tuple(settings.graph_capture)
    info = typed_meta(run_meta) if run_meta is not None else None   # refuses a malformed one first
    given = (dict(run_meta), info) if run_meta is not None else None
    # A folder where a profile died before its Run was written: load() names the trace it left.
    if isinstance(source, Trace) or not (is_run_dir(source) or orphaned_traces(Path(source))):
        # A Trace built in-process has not been through ingest.read's check of its shapes.
        trace = drop_impossible_shapes(source) if isinstance(source, Trace) else read_trace(source)
        return Source(trace, *(given or (None, None)), telemetry, None, captures)
    run = load(source)
    if telemetry is None and run.telemetry_path is not None:
        telemetry = load_telemetry(run.telemetry_path)
    return Source(read_trace(run.trace_path), *(given or (run.meta, run.info)), telemetry,
                  load_counters(run.path), captures + tuple(run_captures(run.path)),
                  str(run.ceilings_path) if run.ceilings_path is not None else None, load_verification(run.path))


def _analysis_scope(fn: Callable[..., Result]) -> Callable[..., Result]:
    """``fn`` with the cyclic garbage collector paused, and pandas' text kept as Python strings.

    Reading and the stages allocate millions of short-lived containers, and each full collection
    walks every object the trace holds (0.1-0.3 s on a million events) to find the few cycles pandas
    makes, which are freed once it resumes. pandas 3 stores text in pyarrow arrays wherever pyarrow
    is installed (Hugging Face datasets brings it): the stages' many small string operations then
    cost a conversion each, and a million events took 25% longer (docs/benchmarks.md), for the same
    outputs."""
    @functools.wraps(fn)
    def scoped(*args: Any, **kwargs: Any) -> Result:
        with pd.option_context("mode.string_storage", "python"), collector_paused():
            return fn(*args, **kwargs)
    return scoped


@_analysis_scope
def run(source: str | os.PathLike | Trace, settings: AnalysisSettings = AnalysisSettings(), *,
        ceilings: Ceilings | None = None, telemetry: Telemetry | None = None,
        run_meta: Mapping[str, Any] | None = None) -> Result:
    """Analyze a Kineto trace or a Run directory: every stage, once, in order (module docstring).

    Ceilings come from ``ceilings`` if given, else as hardware/devices.resolve_ceilings picks them
    from ``settings.ceilings`` and the trace's device; without any, ``Ceilings.none``: everything
    that needs none is still computed. Raises :class:`~roofscope.errors.DeviceError` for an
    unknown ``--datasheet`` or a lone peak flag.
    """
    src = open_source(source, settings, telemetry=telemetry, run_meta=run_meta)
    trace, info, params = src.trace, src.info, settings.params
    cpu_only = len(trace.kernels) == 0
    device = trace.meta.device
    # A GPU trace cut before its kernels reads as CPU-only: its ops ran on another machine's CPU beside
    # that GPU, so neither this machine's CPU ceilings nor the GPU's judge them (unless the user names some).
    kernels_lost = cpu_only and device.name is not None and trace.meta.cut_short is not None
    if ceilings is None and kernels_lost and settings.ceilings == CeilingOverrides():
        ceilings = Ceilings.none(device.name, f"no ceilings: the trace of {device.name} was cut short before its"
                                 " GPU kernels: its CPU ops are judged on no device's ceilings")
    gpu_job = gpu_job_evidence(trace) if cpu_only else ""
    if gpu_job and ceilings is None:
        # Its host ops last as long as their launches: no CPU roof (nor any other) says anything of them.
        ceilings = Ceilings.none("cpu", f"CPU-only trace of a GPU job ({gpu_job}): its GPU activity was not"
                                 " recorded, and its host ops are not judged against a CPU's roofs; profile it with"
                                 " CUDA activities (roofscope run records them)")
    if ceilings is None:
        ceilings = resolve_ceilings("cpu" if cpu_only else device.name, settings.ceilings,
                                    memory_bytes=device.memory_bytes, props=None if cpu_only else device.properties,
                                    run_ceilings=src.run_ceilings, use_cache=settings.use_cache)
    kernels, graphs = _cost(trace, src, ceilings, cpu_only, settings.attention_window)
    kernels = _place(kernels, trace, ceilings, params, src.counters, cpu_only)

    steps = step_table(trace, None if cpu_only else kernels)
    complete, partial = _complete_steps(steps, info)
    tl = timeline(trace, kernels, steps, ceilings.launch_latency_s)
    own = step_time(info, steps["step"].tolist())
    phases_of_steps = step_phases(trace, steps, kernels)
    inference = inference_metrics(kernels, steps, phases_of_steps, tl.capture_steps, own, ceilings.bandwidth)
    phases = phase_table(kernels)
    window = profiled_window(trace, steps)
    tel = summarize(src.telemetry, *window, steps=len(steps) or None) if src.telemetry is not None else None
    roof, model = utilization_roof(kernels, ceilings), model_flops(kernels, trace.signatures, info)
    samples = step_samples(kernels, steps, roof, model, tl.steps,
                           region_times(trace, steps, None if cpu_only else kernels))
    samples = samples.drop(index=partial) if partial else samples
    step_metrics = metrics(samples, roof, model, info.tokens_per_step if info is not None else None, own, tel)
    communicates = bool((kernels["category"] == "communication").any()) or host_communicates(trace, kernels)
    diagnosis = diagnose(DiagnosisInput(
        trace=trace, kernels=kernels, steps=steps, timeline=tl, ceilings=ceilings, params=params,
        run=RunFacts.of(info, own), cpu_only=cpu_only, gpu_job=gpu_job, inference=inference, telemetry=tel,
        # Listing the collectives reads every op's tensor sizes: only where a kernel communicates.
        collectives=kernel_collectives(trace, kernels, steps) if communicates else None))
    verified = rank_verified(diagnosis, src.verification)

    summary = _summary(trace, ceilings, params, kernels, cpu_only, gpu_job, partial, graphs, inference,
                       inference_note(kernels, phases_of_steps, inference), phase_summary(phases),
                       counters_summary(kernels, src.counters.meta) if "m_flops" in kernels else None,
                       step_metrics, own, tel, tl, src.run_meta, diagnosis, verified)
    program, time_source = program_samples(samples, info)
    return Result(summary=Summary.from_dict(summary), trace=trace, ceilings=ceilings, params=params,
                  kernels=kernels, cpu_only=cpu_only, steps=steps, complete_steps=tuple(complete),
                  step_samples=samples, program_samples=program, time_source=time_source, timeline=tl,
                  diagnosis=diagnosis, phases=phases, window_unix_ns=window, run_meta=src.run_meta,
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
        kernels, choices = attribute(trace, sig_costs, src.info.optimizer if src.info is not None else None, window)
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


def _complete_steps(steps: pd.DataFrame, info: RunMeta | None) -> tuple[list[int], list[int]]:
    """(complete, partial) profiled steps. A partial step is one no step boundary ended: the step
    running when the script ended before its requested steps (``--active 10`` against a 12-step
    script records a 1-7 ms tail as step 12). Known from the Run's step counts; a bare trace has none."""
    st = info.steps if info is not None else None
    ids = [int(n) for n in steps["step"]]
    if st is None or st.boundaries_seen is None or "active" not in st.requested:
        return ids, []
    seen = st.boundaries_seen
    # Step N ends at boundary N + 1 (steps count from 0), so N is complete when N < boundaries seen.
    return [n for n in ids if n < seen], [n for n in ids if n >= seen]


def _unattributed(kernels: pd.DataFrame, graphs: GraphMap | None) -> dict[str, Any]:
    """Share of non-communication kernel time without a cost, by reason."""
    # The columns read here and by the notes: a copy of every column costs more than the sums.
    cols = [c for c in dict.fromkeys(("dur_s", "unattributed", *NOTE_COLUMNS)) if c in kernels]
    nc = kernels.loc[kernels["category"] != "communication", cols]
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
        "notes": (list(graphs.notes) if graphs is not None else []) + all_notes(nc),
    }


def _summary(trace: Trace, ceilings: Ceilings, params: RooflineParams, k: pd.DataFrame, cpu_only: bool,
             gpu_job: str, partial: list[int], graphs: GraphMap | None, inference: dict[str, Any] | None,
             inference_text: str | None, phases: dict[str, Any], counters: dict[str, Any] | None,
             step_metrics: dict[str, Any], own: dict[str, Any] | None, tel: dict[str, Any] | None,
             tl: Timeline, meta: dict[str, Any] | None, diagnosis: Diagnosis,
             verified: dict[str, Any] | None = None) -> dict[str, Any]:
    """summary.json's figures, in their written order (analyzers/model/summary.py types them)."""
    total = float(k["dur_s"].sum())
    by_class = k.groupby("cls")["dur_s"].sum()
    comm = k["category"] == "communication"
    s: dict[str, Any] = {
        "trace": trace.path,
        "device": ceilings.device if cpu_only else (trace.meta.device.name or ceilings.device),
        "cpu_only": cpu_only,
        "gpu_job_host_only": gpu_job or None,   # a CPU-only trace of a GPU job: what says so (ingest/gpujob.py)
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
    if verified is not None:
        s["verification"] = verified
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
    return _with_fused_kernels(trace, k.reset_index(drop=True))


def _with_fused_kernels(trace: Trace, k: pd.DataFrame) -> pd.DataFrame:
    """The work items and, in time order among them, the own time of compiled graphs: Inductor's
    C++ kernels, which no op records (cost/compiled_cpu.py), uncosted."""
    fused = fused_kernel_items(trace)
    if not len(fused):
        return k
    f = fused[["name", "ts_ns", "dur_ns", "tid"]].assign(
        flops=np.nan, bytes=np.nan, dtype="", tensor_core=False, category="other", cost_source="none",
        cat="cpu_op", op_name=fused["op_name"], cost_op_name="", unattributed="compiled_no_metadata", op=-1,
        step=steps_at(trace.annotations, fused["ts_ns"].to_numpy()))
    f["region"] = regions_at(trace.annotations, fused["thread"].to_numpy(), fused["ts_ns"].to_numpy(),
                             fused["end_ns"].to_numpy(), np.ones(len(fused), dtype=bool))
    return pd.concat([k, f[k.columns]], ignore_index=True).sort_values("ts_ns", kind="stable", ignore_index=True)


def analyze(source: str | os.PathLike | Trace, *, device: str | None = None, peak_tflops: float | None = None,
            peak_bandwidth_gbs: float | None = None, ceilings: Ceilings | str | os.PathLike | None = None,
            ceilings_file: str | os.PathLike | None = None, params: RooflineParams | None = None,
            telemetry: Telemetry | None = None, run_meta: Mapping[str, Any] | None = None, use_cache: bool = True,
            graph_capture: Sequence[str | os.PathLike | Trace] | str | os.PathLike | Trace = (),
            attention_window: int | None = None, formulas: Sequence[str] | str = ()) -> Result:
    """``roofscope.analyze``: :func:`run` with the command line's options as keywords.

    ``device`` is ``--datasheet``; ``peak_tflops``/``peak_bandwidth_gbs`` are ``--peak-*``;
    ``ceilings`` a ceilings file's path (``--ceilings``; ``ceilings_file`` says the same) or the
    :class:`Ceilings` themselves, drawn as given; ``params`` the roofline thresholds;
    ``graph_capture`` capture traces (``--graph-capture``); ``formulas`` files or modules of
    custom cost formulas (``--formulas``), imported first with the installed packages' ones;
    ``run_meta`` run.json's fields for a bare trace (``tokens_per_step``, ``optimizer``, ...).
    What cannot be used is refused with a :class:`~roofscope.errors.RoofscopeError` (one line),
    before the trace is read.
    """
    if isinstance(ceilings, (str, os.PathLike)):
        if ceilings_file is not None:
            raise RoofscopeError(f"ceilings {os.fspath(ceilings)} and ceilings_file {os.fspath(ceilings_file)}:"
                                 " give one ceilings file")
        ceilings, ceilings_file = None, ceilings
    elif ceilings is not None:
        if not isinstance(ceilings, Ceilings):
            raise RoofscopeError(f"ceilings: expected a ceilings file's path or a Ceilings, got {type(ceilings).__name__}")
        given = [k for k, v in (("device", device), ("peak_tflops", peak_tflops),
                                ("peak_bandwidth_gbs", peak_bandwidth_gbs), ("ceilings_file", ceilings_file)) if v]
        if given:
            raise RoofscopeError(f"ceilings=Ceilings(...) is drawn as given: {', '.join(given)} would be ignored;"
                                 " give one or the other")
    if params is not None and not isinstance(params, RooflineParams):
        raise RoofscopeError(f"params: expected a RooflineParams, got {type(params).__name__}")
    load_all(_several(formulas))
    overrides = CeilingOverrides(device=device, peak_tflops=peak_tflops, peak_bandwidth_gbs=peak_bandwidth_gbs,
                                 ceilings=None if ceilings_file is None else os.fspath(ceilings_file))
    settings = AnalysisSettings(ceilings=overrides, params=params or RooflineParams(), use_cache=use_cache,
                                graph_capture=_several(graph_capture), attention_window=attention_window)
    return run(source, settings, ceilings=ceilings, telemetry=telemetry, run_meta=run_meta)


def _several(items: Any) -> tuple[Any, ...]:
    """One path (or Trace) or several: ``formulas="mine.py"`` is one file, not seven letters."""
    return (items,) if isinstance(items, (str, os.PathLike, Trace)) else tuple(items or ())
