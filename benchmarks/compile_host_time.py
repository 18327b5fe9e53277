"""The host time a torch.compile of the model would remove, read from a GPU Run's trace: a candidate model for
`launch_fusion`'s saving, which errs low on host-bound programs (docs/validation.md, 2026-11-29: 1.53x on LoRA,
about 2.5x on BERT). Not used by the analysis: it prints its terms beside the rule's figure, to be checked
against `roofscope verify` on programs it was not derived on before it replaces anything.

Per profiled step, inside forward and backward (analyzers/views/phases.py), what eager runs and compiled code
does not:
* the forward's glue: gaps between consecutive outermost aten ops on one thread that overlap no backward node
  (Python, module calls and hooks between ops);
* the backward's node overhead: each ``autograd::engine::evaluate_function`` less the outermost aten ops in
  it, and the gaps between nodes that overlap no forward op;
* kernel-less aten ops (views, reshapes, detach) and the ops whose every kernel a fusion chain removes.
Saving = min(that, the in-model host-bound idle), scaled by the unprofiled step over the profiled one. What
the compiled code's own launches still cost on the host is not subtracted (the model's open term).

    python benchmarks/compile_host_time.py RUN_DIR [RUN_DIR ...]
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from roofscope.analysis import run  # noqa: E402
from roofscope.analyzers.diagnose import fusion  # noqa: E402
from roofscope.analyzers.diagnose.overhead import in_model_idle  # noqa: E402
from roofscope.analyzers.ingest.frames import steps_at  # noqa: E402
from roofscope.analyzers.views.phases import op_phases  # noqa: E402


def _ancestor(parent: np.ndarray, rows: np.ndarray, mark: np.ndarray) -> np.ndarray:
    """Per row, its nearest strict ancestor with ``mark`` (-1: none)."""
    cur, found = parent[rows].copy(), np.full(len(rows), -1)
    while ((cur >= 0) & (found < 0)).any():
        live = (cur >= 0) & (found < 0)
        hit = live & mark[np.maximum(cur, 0)]
        found[hit] = cur[hit]
        cur = np.where(live & ~hit, parent[np.maximum(cur, 0)], -1)
    return found


def _outermost(parent: np.ndarray, rows: np.ndarray, outer: np.ndarray) -> np.ndarray:
    """Per row (an op, or -1), the outermost-aten op it is or lies in (-1: none)."""
    rows = np.asarray(rows)
    safe = np.maximum(rows, 0)
    return np.where(rows >= 0, np.where(outer[safe], safe, _ancestor(parent, safe, outer)), -1)


def _gaps(th: np.ndarray, st: np.ndarray, ts: np.ndarray, end: np.ndarray, other_s: np.ndarray,
          other_e: np.ndarray) -> float:
    """Seconds between consecutive intervals of one thread and step that overlap no ``other`` interval."""
    order = np.lexsort((ts, st, th))
    th, st, ts, end = th[order], st[order], ts[order], end[order]
    same = (th[1:] == th[:-1]) & (st[1:] == st[:-1])
    a, b = end[:-1], ts[1:]
    o = np.argsort(other_s)
    s_, e_ = other_s[o], np.maximum.accumulate(other_e[o]) if len(o) else other_e
    i = np.searchsorted(s_, b)
    covered = np.where(i > 0, e_[np.maximum(i - 1, 0)] > a, False) if len(o) else np.zeros(len(a), bool)
    gap = (b - a) / 1e9
    return float(gap[same & (gap > 0) & ~covered].sum())


def terms(run_dir: str) -> dict[str, float]:
    captured = {}
    match = fusion.LaunchFusion.match

    def keep(self, ctx):   # the rule's own context: its kernels, steps and chains
        captured["ctx"] = ctx
        return match(self, ctx)

    fusion.LaunchFusion.match = keep
    try:
        result = run(run_dir)
    finally:
        fusion.LaunchFusion.match = match
    ctx = captured["ctx"]
    trace, steps = ctx.inp.trace, ctx.steps
    ops = trace.ops
    names = ops["name"].astype(str)
    parent = ops["parent"].to_numpy()
    is_aten = names.str.startswith("aten::").to_numpy()
    is_node = names.str.startswith("autograd::engine::evaluate_function").to_numpy()
    rows = np.arange(len(ops))
    outer = is_aten & (_ancestor(parent, rows, is_aten) < 0)
    ts, end, th = ops["ts_ns"].to_numpy(), ops["end_ns"].to_numpy(), ops["thread"].to_numpy()
    dur = (end - ts) / 1e9
    st = steps_at(trace.annotations, ts)
    in_steps = (st >= 0) & ~np.isin(st, ctx.inp.timeline.capture_steps)
    phase = op_phases(trace)
    model = np.isin(phase, ("forward", "backward")) & in_steps

    k = ctx.kernels
    by_kernel = _outermost(parent, k["op"].to_numpy(), outer)
    launched = np.bincount(by_kernel[by_kernel >= 0], minlength=len(ops))
    chains, _ = fusion.model_chains(ctx)
    first_kept = chains.sort_values("ts_ns")
    away_ops = _outermost(parent, k.loc[first_kept.index[first_kept["chain"].duplicated()], "op"].to_numpy(), outer)
    fused = np.bincount(away_ops[away_ops >= 0], minlength=len(ops))

    fwd = np.flatnonzero(outer & model & (phase == "forward"))
    nodes = np.flatnonzero(is_node & in_steps)
    fwd_glue = _gaps(th[fwd], st[fwd], ts[fwd], end[fwd], ts[nodes], end[nodes])
    inside = np.flatnonzero(outer & in_steps)
    holder = _ancestor(parent, inside, is_node)
    aten_in_node = np.zeros(len(ops))
    np.add.at(aten_in_node, holder[holder >= 0], dur[inside[holder >= 0]])
    node_own = float((dur[nodes] - aten_in_node[nodes]).sum())
    node_gaps = _gaps(th[nodes], st[nodes], ts[nodes], end[nodes], ts[fwd], end[fwd])
    kernel_less = float(dur[outer & model & (launched == 0)].sum())
    fused_away = float(dur[outer & model & (launched > 0) & (fused == launched)].sum())
    removed = (fwd_glue + node_own + node_gaps + kernel_less + fused_away) / steps
    own = result.to_dict()["step_time"]["unprofiled_median_s"] or ctx.step_s
    scale = own / ctx.step_s
    idle = in_model_idle(ctx)
    rule = next((f.saving_s for f in result.diagnosis.findings if f.rule == "launch_fusion"), 0.0)
    return {"profiled_step_ms": ctx.step_s * 1e3, "own_step_ms": own * 1e3, "in_model_idle_ms": idle * 1e3,
            "forward_glue_ms": fwd_glue / steps * 1e3, "node_own_ms": node_own / steps * 1e3,
            "node_gaps_ms": node_gaps / steps * 1e3, "kernel_less_ms": kernel_less / steps * 1e3,
            "fused_away_ms": fused_away / steps * 1e3, "removed_ms": removed * 1e3,
            "estimate_ms": min(removed, idle) * scale * 1e3, "launch_fusion_ms": rule * 1e3}


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__.strip().splitlines()[-1].strip())
    rows = {Path(d).name: terms(d) for d in sys.argv[1:]}
    print(pd.DataFrame(rows).T.round(2).to_string())
