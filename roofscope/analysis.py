"""The Analysis: one trace placed on one device's roofline, with the DataFrames reachable."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from roofscope.hardware.devices import Ceilings, resolve_ceilings
from roofscope.cost.attribution import UNATTRIBUTED_REASONS, attribute
from roofscope.cost.hidden_args import missing_notes
from roofscope.place.roofline import CLASSES, RooflineParams, above_roof, aggregate, device_sms, input_bytes, place
from roofscope.model.summary import Summary
from roofscope.ingest import read as read_trace
from roofscope.ingest.frames import regions_at, steps_at
from roofscope.model.trace import Trace


@dataclass
class Analysis:
    """Result of :func:`analyze`.

    ``kernels`` holds one row per GPU activity (kernel, memcpy, memset) with its cost,
    roofline placement and class; for CPU-only traces, one row per costed CPU op
    without costed children (``device == "cpu"``).
    """

    trace: Trace
    ceilings: Ceilings
    kernels: pd.DataFrame
    params: RooflineParams = field(default_factory=RooflineParams)
    cpu_only: bool = False
    run_meta: dict[str, Any] | None = None     # run.json of the Run this came from, if any
    telemetry: Any = None                      # collectors.nvml.Telemetry, if the Run has some
    counters_meta: dict[str, Any] | None = None  # roofscope.run.counters.Counters.meta, if the Run has counters
    graphs: Any = None                         # graphs.GraphMap: CUDA-graph replays mapped to their captures
    _summary: dict[str, Any] | None = field(default=None, init=False, repr=False)
    _timeline: Any = field(default=None, init=False, repr=False)
    _diagnosis: Any = field(default=None, init=False, repr=False)
    _metrics: dict[str, Any] | None = field(default=None, init=False, repr=False)
    _steps: pd.DataFrame | None = field(default=None, init=False, repr=False)
    _telemetry_summary: dict[str, Any] | None = field(default=None, init=False, repr=False)
    _inference: Any = field(default=False, init=False, repr=False)
    _step_time: Any = field(default=False, init=False, repr=False)

    def by_kernel(self) -> pd.DataFrame:
        return aggregate(self.kernels, "name")

    def by_op(self) -> pd.DataFrame:
        k = self.kernels
        key = k["cost_op_name"].where(k["cost_op_name"] != "", k["op_name"]).replace("", "(no op)")
        return aggregate(k.assign(op=key), "op")

    def by_class(self) -> pd.DataFrame:
        present = set(self.kernels["cls"].unique())  # not set(series): a Python loop over every kernel
        return aggregate(self.kernels, "cls").reindex([c for c in CLASSES if c in present])

    def by_category(self) -> pd.DataFrame:
        return aggregate(self.kernels, "category")

    def by_step(self) -> pd.DataFrame:
        return aggregate(self.kernels[self.kernels["step"] >= 0], "step").sort_index()

    def by_phase(self) -> pd.DataFrame:
        """Per training phase (forward, backward, optimizer, data, communication, other; see
        :mod:`.phases`): time, kernels, FLOPs and bytes per step, time per class."""
        from roofscope.views.phases import phase_table

        return phase_table(self)

    def by_region(self) -> pd.DataFrame:
        k = self.kernels
        return aggregate(k.assign(region=k["region"].replace("", "(no region)")), "region")

    def by_module(self, depth: int | None = None) -> pd.DataFrame:
        """Per-module table (needs a run with ``--modules``); ``depth`` truncates names (see modules.at_depth)."""
        from roofscope.views.modules import at_depth

        k = self.kernels
        return aggregate(k.assign(module=at_depth(k["module"], depth).replace("", "(no module)")), "module")

    def steps(self) -> pd.DataFrame:
        """One row per profiled step (``ProfilerStep#N``): start, end, duration, measured on the
        GPU when the step launched GPU work (see :func:`.metrics.step_table`)."""
        if self._steps is None:
            from roofscope.views.metrics import step_table

            self._steps = step_table(self.trace, None if self.cpu_only else self.kernels)
        return self._steps

    def timeline(self) -> Any:
        """GPU busy/idle, idle gaps, syncs and copies per step (:class:`.timeline.Timeline`)."""
        if self._timeline is None:
            from roofscope.views.timeline import timeline

            self._timeline = timeline(self.trace, self.kernels, self.steps(), self.ceilings.launch_latency_s)
        return self._timeline

    def partial_steps(self) -> list[int]:
        """Recorded steps that no step boundary ended: the step that was running when the script
        ended before its requested steps (``--active 10`` against a 12-step script records a
        1-7 ms tail as step 12). Known from the Run's step counts; a bare trace has none."""
        st = (self.run_meta or {}).get("steps") or {}
        seen = st.get("boundaries_seen")
        if not isinstance(seen, int) or "active" not in (st.get("requested") or {}):
            return []
        # Step N ends at boundary N + 1 (steps count from 0), so N is complete when N < boundaries seen.
        return [int(n) for n in self.steps()["step"] if n >= seen]

    def complete_steps(self) -> list[int]:
        """The profiled steps that ran to their end: what per-step figures and comparisons use."""
        partial = set(self.partial_steps())
        return [int(n) for n in self.steps()["step"] if n not in partial]

    def step_samples(self) -> pd.DataFrame:
        """Per-step step time, FLOPs, bytes, HFU/MFU/MBU, busy time and region times (see metrics.py),
        for the complete steps only (:meth:`partial_steps` are left out)."""
        from roofscope.views.metrics import step_samples

        samples = step_samples(self, busy=self.timeline().steps)
        partial = self.partial_steps()
        return samples.drop(index=partial) if partial else samples

    def step_time(self) -> dict[str, Any] | None:
        """The program's own step time, without and with the profiler (programtime.py); None when
        the Run kept no step times (an older Run, a bare trace)."""
        if self._step_time is False:   # metrics, inference, the rules and the summary all read it
            from roofscope.views.programtime import step_time

            self._step_time = step_time(self.run_meta)
        return self._step_time

    def program_samples(self) -> tuple[pd.DataFrame, str]:
        """Per-step samples in the program's own time where the Run measured it (the gate and diff
        compare these), and ``"unprofiled"``; else :meth:`step_samples` and ``"profiled"``."""
        from roofscope.views.programtime import program_samples

        return program_samples(self.step_samples(), self.run_meta)

    def metrics(self) -> dict[str, Any]:
        """Headline step metrics: step time, HFU, MFU, MBU, tokens/s, energy (see metrics.py)."""
        if self._metrics is None:
            from roofscope.views.metrics import metrics

            self._metrics = metrics(self, self.step_samples(), self.telemetry_summary())
        return self._metrics

    def diagnosis(self) -> Any:
        """Ranked recommendations with evidence and estimated savings (:class:`.rules.Diagnosis`)."""
        if self._diagnosis is None:
            from roofscope.diagnose import diagnose

            self._diagnosis = diagnose(self)
        return self._diagnosis

    def inference(self) -> dict[str, Any] | None:
        """Prefill vs decode: TTFT, time per output token, tokens/s, decode MBU (see inference.py);
        None when no profiled step decodes."""
        if self._inference is False:
            from roofscope.views.inference import inference_metrics

            self._inference = inference_metrics(self)
        return self._inference

    def unattributed(self) -> dict[str, Any]:
        """Share of non-communication kernel time without a cost, by reason."""
        k = self.kernels
        nc = k[k["category"] != "communication"]
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
            "notes": (list(self.graphs.notes) if self.graphs is not None else []) + missing_notes(nc),
        }

    def summary(self) -> dict[str, Any]:
        """Headline figures (computed once: reports and the console all ask for them)."""
        if self._summary is None:
            self._summary = self._compute_summary()
        return self._summary

    def typed_summary(self) -> Summary:
        """:meth:`summary` with typed fields (summary.py); the dict stays what the JSON writes."""
        return Summary.from_dict(self.summary())

    def _base_summary(self) -> dict[str, Any]:
        k = self.kernels
        total = float(k["dur_s"].sum())
        by_class = k.groupby("cls")["dur_s"].sum()
        comm = k["category"] == "communication"
        return {
            "trace": self.trace.path,
            "device": (self.trace.meta.device.name or self.ceilings.device) if not self.cpu_only
            else self.ceilings.device,
            "cpu_only": self.cpu_only,
            "ceilings": self.ceilings.to_dict(),
            "params": {"latency_floor_s": self.params.latency_floor_s,
                       "underutilized_below": self.params.underutilized_below},
            "events": self.trace.meta.events,
            "skipped_events": dict(self.trace.meta.skipped_events),
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
            "partial_steps": self.partial_steps(),
            "unattributed": self.unattributed(),
            "above_roof": above_roof(k),
            "distributed": dict(d.recorded) if (d := self.trace.meta.distributed) else None,
            "modules": bool((k["module"] != "").any()),
            "inference": self.inference(),
            "inference_note": self._inference_note(),
            "graphs": self.graphs.to_dict() if self.graphs is not None else None,
            "phases": self._phases(),
            **self._counters_figures(),
            **self._run_figures(),
        }

    def _inference_note(self) -> str | None:
        from roofscope.views.inference import inference_note

        return inference_note(self)

    def _phases(self) -> dict[str, Any]:
        from roofscope.views.phases import phase_summary

        return phase_summary(self)

    def _counters_figures(self) -> dict[str, Any]:
        if "m_flops" not in self.kernels:
            return {}
        from roofscope.place.measured import counters_summary

        return {"counters": counters_summary(self.kernels, self.counters_meta)}

    def _compute_summary(self) -> dict[str, Any]:
        s = self._base_summary()
        d = self.diagnosis()
        s["findings"] = [f.to_dict() for f in d.findings]
        s["diagnosis"] = d.to_dict()
        return s

    def telemetry_summary(self) -> dict[str, Any] | None:
        """NVML telemetry summarized over the profiled steps, or None without telemetry
        (computed once: metrics, rules and the summary all read it)."""
        if self.telemetry is None:
            return None
        if self._telemetry_summary is None:
            from roofscope.views.metrics import to_unix_ns
            from roofscope.views.telemetry_summary import summarize

            steps = self.steps()
            start = to_unix_ns(self.trace, int(steps["ts_ns"].min())) if len(steps) else None
            end = to_unix_ns(self.trace, int(steps["end_ns"].max())) if len(steps) else None
            self._telemetry_summary = summarize(self.telemetry, start, end, steps=len(steps) or None)
        return self._telemetry_summary

    def _run_figures(self) -> dict[str, Any]:
        """Step metrics, timeline, telemetry and diagnosis over the profiled steps."""
        meta = self.run_meta or {}
        out: dict[str, Any] = {"metrics": self.metrics(), "step_time": self.step_time(),
                               "telemetry": self.telemetry_summary(), "timeline": self.timeline().to_dict()}
        if meta:
            out["run"] = {key: meta.get(key) for key in ("command", "started", "exit_status", "steps", "warnings")}
        return out


def _cpu_work(trace: Trace, sig_costs: pd.DataFrame) -> pd.DataFrame:
    """CPU-only traces: the innermost costed ops are the 'kernels' of the CPU roofline."""
    from roofscope.cost.attribution import cpu_work_items, op_costs

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


def analyze(source: str | os.PathLike | Trace, *, device: str | None = None,
            peak_tflops: float | None = None, peak_bandwidth_gbs: float | None = None,
            ceilings_file: str | os.PathLike | None = None, ceilings: Ceilings | None = None,
            params: RooflineParams | None = None, telemetry: Any = None,
            run_meta: dict[str, Any] | None = None, use_cache: bool = True,
            graph_capture: list[str | os.PathLike | Trace] | None = None) -> Analysis:
    """Ingest, cost and classify a Kineto trace or a Run directory.

    Ceilings come from ``ceilings`` if given, else a measured-ceilings file, else the
    ``device`` override, else ceilings cached by ``roofscope microbench`` for the trace's
    device (``use_cache``; the summary's ceilings notes name the cache file), else the
    trace's own device name's datasheet (or the row its device properties identify),
    completed by the peak flags; without any, no ceilings (``Ceilings.none``): everything
    that needs none is still computed.
    A Run directory also brings its metadata (tokens and model FLOPs per step) and
    NVML telemetry and its recorded CUDA-graph captures; ``graph_capture`` adds capture traces
    (see graphs.py). Raises :class:`~roofscope.errors.DeviceError` for an unknown
    ``--device`` or a lone peak flag.
    """
    from roofscope.run import is_run_dir, load
    from roofscope.cost.costmodel import signature_costs
    from roofscope.views.modules import module_column
    from roofscope.views.phases import kernel_phases

    counters = None
    captures = list(graph_capture or [])
    if not isinstance(source, Trace) and is_run_dir(source):
        run = load(source)
        from roofscope.run.counters import load as load_counters

        counters = load_counters(run.path)
        # Ceilings measured where the Run was collected beat the datasheet, not the user's choice.
        if ceilings_file is None and device is None and run.ceilings_path is not None:
            ceilings_file = run.ceilings_path
        if telemetry is None and run.telemetry_path is not None:
            from roofscope.views.telemetry_summary import load as load_telemetry

            telemetry = load_telemetry(run.telemetry_path)
        run_meta = run_meta if run_meta is not None else run.meta
        from roofscope.cost.graphs import run_captures

        captures += run_captures(run.path)
        source = run.trace_path
    trace = source if isinstance(source, Trace) else read_trace(source)
    params = params or RooflineParams()
    cpu_only = len(trace.kernels) == 0
    if ceilings is None:
        name = trace.meta.device.name if not cpu_only else "cpu"
        ceilings = resolve_ceilings(name, memory_bytes=trace.meta.device.memory_bytes, device=device,
                                    props=trace.meta.device.properties if not cpu_only else None,
                                    peak_tflops=peak_tflops, peak_bandwidth_gbs=peak_bandwidth_gbs,
                                    ceilings_file=ceilings_file, use_cache=use_cache)
    sig_costs = signature_costs(trace.signatures)
    if cpu_only:
        kernels = _cpu_work(trace, sig_costs)
    else:
        kernels = attribute(trace, sig_costs, ceilings.bandwidth, (run_meta or {}).get("optimizer"))
    kernels["module"] = module_column(trace, kernels["op"].to_numpy())
    graphs = None
    if not cpu_only:
        from roofscope.cost.graphs import load_captures, map_graph_kernels

        graphs = map_graph_kernels(trace, kernels, load_captures(captures))
    kernels["phase"] = kernel_phases(trace, kernels)
    sms = device_sms(trace.meta.device.properties, ceilings) if not cpu_only else None
    if not cpu_only:  # what an uncosted kernel's op reads: a class from its bytes (roofline.class_sources)
        from roofscope.ingest.linking import take

        sig = take(trace.ops["sig"].to_numpy(), kernels["op"].to_numpy(dtype=np.int64), -1)
        kernels["io_bytes"] = input_bytes(trace.signatures, sig)
    kernels = place(kernels, ceilings, params, sms)
    if counters is not None and not cpu_only:
        from roofscope.place.measured import apply_counters

        kernels = place(apply_counters(kernels, counters.table), ceilings, params, sms)
    return Analysis(trace=trace, ceilings=ceilings, kernels=kernels, params=params, cpu_only=cpu_only,
                    run_meta=run_meta, telemetry=telemetry,
                    counters_meta=counters.meta if counters is not None else None, graphs=graphs)
