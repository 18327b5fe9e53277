"""The annotated trace: the profiled kernels with roofscope's verdicts, for Perfetto.

Chrome's JSON trace format (``{"traceEvents": [...]}``), which ui.perfetto.dev (also served
offline as a static page), Perfetto's trace processor and chrome://tracing all read:

* one ``X`` (complete) event per kernel of the analysis (per CPU work item on a CPU trace), on
  a process per device and a thread per stream (per host thread on CPU), its ``args`` holding
  the roofline: class, category, op, module, FLOPs, bytes, intensity, achieved FLOP/s and
  bytes/s, roof, efficiency, and the findings whose evidence names the kernel;
* one ``X`` event per profiled step on a ``steps`` thread;
* ``C`` (counter) tracks per device: ``achieved FLOP/s`` and ``achieved bytes/s`` summed over the
  kernels running at each instant (overlapping streams add up), and ``efficiency %`` of the
  kernel last started (0 while none runs).

Timestamps are microseconds on the analysis' clock (0 = the trace's first event).
"""
from __future__ import annotations

import gzip
from typing import TYPE_CHECKING, Any

import msgspec
import numpy as np
import pandas as pd

if TYPE_CHECKING:  # pragma: no cover
    from roofscope.analyzers.model.result import Result

FILE_NAME = "trace.annotated.json.gz"
_ARG_COLUMNS = (("class", "cls"), ("category", "category"), ("op", "op_name"), ("module", "module"),
                ("phase", "phase"), ("step", "step"), ("dtype", "dtype"), ("flops", "flops"), ("bytes", "bytes"),
                ("intensity", "intensity"), ("achieved_flops_per_s", "achieved_flops"),
                ("achieved_bytes_per_s", "achieved_bw"), ("roof_flops_per_s", "attainable"),
                ("roof_level", "roof_level"), ("efficiency", "efficiency"))


def _column(values: pd.Series) -> list[Any]:
    """A column as Python values, None where absent (NaN, infinite, empty string): left out of args."""
    if pd.api.types.is_integer_dtype(values) or pd.api.types.is_bool_dtype(values):
        return values.tolist()
    if pd.api.types.is_numeric_dtype(values):
        v = values.to_numpy(dtype=np.float64)
        out = v.astype(object)
        out[~np.isfinite(v)] = None
        return out.tolist()
    return [None if x is None or x == "" or (isinstance(x, float) and x != x) else x for x in values.tolist()]


def _findings_by_kernel(result: "Result") -> dict[str, list[str]]:
    """Kernel name -> the findings ("#rank title") whose evidence lists it."""
    out: dict[str, list[str]] = {}
    for f in result.diagnosis.findings:
        for k in f.kernels:
            out.setdefault(str(k.get("name", "")), []).append(f"#{f.rank} {f.title}")
    return out


def _tracks(k: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, dict[int, str], dict[tuple[int, int], str]]:
    """pid and tid of each kernel, with the process and thread names."""
    if "device" in k and "stream" in k:
        dev = k["device"].fillna(-1).to_numpy(dtype=np.int64)
        stream = k["stream"].fillna(-1).to_numpy(dtype=np.int64)
        pids = dev + 1   # pid 0 is the steps' process
        procs = {int(p): (f"GPU {p - 1}" if p > 0 else "device ?") for p in np.unique(pids)}
        threads = {(int(p), int(s)): f"stream {s}" for p, s in set(zip(pids.tolist(), stream.tolist()))}
        return pids, stream, procs, threads
    tid = k["tid"].fillna(-1).to_numpy(dtype=np.int64) if "tid" in k else np.zeros(len(k), dtype=np.int64)
    pids = np.ones(len(k), dtype=np.int64)
    return pids, tid, {1: "CPU"}, {(1, int(t)): f"thread {t}" for t in np.unique(tid)}


def _counters(pid: int, ts: np.ndarray, end: np.ndarray, flops: np.ndarray, bw: np.ndarray,
              eff: np.ndarray) -> list[dict[str, Any]]:
    """Counter events of one device: rates summed over the running kernels (a sweep over starts
    and ends: +rate at a start, -rate at an end; ends first where they meet a start)."""
    n = len(ts)
    t = np.concatenate([ts, end])
    sign = np.concatenate([np.ones(n), -np.ones(n)])
    order = np.lexsort((sign, t))
    f = np.cumsum(np.concatenate([flops, -flops])[order])
    b = np.cumsum(np.concatenate([bw, -bw])[order])
    running = np.cumsum(sign[order])
    # The efficiency of the kernel last started, 0 while none runs.
    started = np.where(sign[order] > 0, np.concatenate([eff, eff])[order], np.nan)
    last = pd.Series(started).ffill().fillna(0.0).to_numpy()
    e = np.where(running > 0, last, 0.0) * 100
    t = t[order]
    # One sample per instant: the state after all of its events.
    keep = np.append(t[1:] != t[:-1], True)
    us = (t[keep] / 1e3).tolist()
    # Rounding leaves sums of cancelled rates a hair below 0.
    f, b, e = np.maximum(f[keep], 0.0).tolist(), np.maximum(b[keep], 0.0).tolist(), e[keep].tolist()
    return ([{"ph": "C", "pid": pid, "name": "achieved FLOP/s", "ts": x, "args": {"FLOP/s": v}} for x, v in zip(us, f)]
            + [{"ph": "C", "pid": pid, "name": "achieved bytes/s", "ts": x, "args": {"bytes/s": v}} for x, v in zip(us, b)]
            + [{"ph": "C", "pid": pid, "name": "efficiency %", "ts": x, "args": {"efficiency %": v}}
               for x, v in zip(us, e)])


def trace_events(result: "Result") -> list[dict[str, Any]]:
    """The annotated trace's events (see the module docstring)."""
    k = result.kernels
    if "timed" in k:
        k = k[k["timed"].astype(bool)]
    k = k[k["dur_ns"].notna()]
    pids, tids, procs, threads = _tracks(k)
    ts = k["ts_ns"].to_numpy(dtype=np.int64)
    end = ts + k["dur_ns"].to_numpy(dtype=np.int64)
    findings = _findings_by_kernel(result)
    names = k["name"].astype(str).tolist()
    present = [(key, c) for key, c in _ARG_COLUMNS if c in k]
    keys = [key for key, _ in present]
    rows = zip(*(_column(k[c]) for _, c in present)) if present else iter([()] * len(k))
    events: list[dict[str, Any]] = [{"ph": "M", "pid": 0, "name": "process_name", "args": {"name": "steps"}}]
    events += [{"ph": "M", "pid": p, "name": "process_name", "args": {"name": n}} for p, n in procs.items()]
    events += [{"ph": "M", "pid": p, "tid": t, "name": "thread_name", "args": {"name": n}}
               for (p, t), n in threads.items()]
    for name, row, pid, tid, t0, dur in zip(names, rows, pids.tolist(), tids.tolist(), (ts / 1e3).tolist(),
                                            ((end - ts) / 1e3).tolist()):
        args = {key: v for key, v in zip(keys, row) if v is not None}
        if name in findings:
            args["findings"] = findings[name]
        events.append({"ph": "X", "name": name, "cat": str(args.get("class") or "kernel"), "pid": pid, "tid": tid,
                       "ts": t0, "dur": dur, "args": args})
    for s in result.steps.itertuples():
        events.append({"ph": "X", "name": f"step {s.step}", "cat": "step", "pid": 0, "tid": 0,
                       "ts": float(s.ts_ns) / 1e3, "dur": float(s.end_ns - s.ts_ns) / 1e3,
                       "args": {"step": int(s.step), "dur_s": float(s.dur_s)}})
    num = {c: k[c].to_numpy(dtype=np.float64) if c in k else np.full(len(k), np.nan)
           for c in ("achieved_flops", "achieved_bw", "efficiency")}
    for p in np.unique(pids):
        m = pids == p
        events += _counters(int(p), ts[m], end[m], np.nan_to_num(num["achieved_flops"][m]),
                            np.nan_to_num(num["achieved_bw"][m]), num["efficiency"][m])
    return events


def render_perfetto(result: "Result") -> bytes:
    """The annotated trace as gzipped Chrome JSON (``trace.annotated.json.gz``)."""
    doc = {"traceEvents": trace_events(result), "displayTimeUnit": "ns",
           "otherData": {"producer": "roofscope", "device": str(result.ceilings.device or ""),
                         "trace": result.trace.path}}
    return gzip.compress(msgspec.json.encode(doc), compresslevel=6, mtime=0)
