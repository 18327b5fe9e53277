"""What keeps a fix from applying, read from the trace (docs/diagnosis.md, "Fixes that apply").

A CUDA graph replays one recorded sequence of launches: the CPU cannot read a device value
inside it, and every replay runs the same kernels on the same shapes. A step blocks capture when
it has:

* **host syncs** (timeline.py's syncs): a capture refuses a sync, and ``torch.compile``
  breaks the graph at it;
* **data-dependent shapes**: ops whose output size depends on tensor values (``nonzero``,
  ``masked_select``, boolean indexing, ``unique``, ``nms``) read a count back to the host;
* **dynamic shapes across steps**: one op with other input dims in another step (a graph
  replays one shape; ``torch.compile`` captures again, and recompiles, for each new one);
* **CPU work**: arithmetic on host tensors (ops with FLOPs and no GPU work beneath them), which
  a graph does not contain (``mode="reduce-overhead"`` skips graphs for CPU tensors);
* **outputs reused across replays**: several forwards per step (micro-batches of gradient
  accumulation, program.py). A CUDA graph's outputs live in memory the next replay overwrites:
  with ``mode="reduce-overhead"`` a second forward before the step ends overwrote the first's
  outputs ("accessing tensor output of CUDAGraphs that has been overwritten by a subsequent run",
  PEFT LoRA with 4 micro-batches on an H200). Mark each forward as a new graph step
  (``torch.compiler.cudagraph_mark_step_begin()``) or compile without graphs.

Compile fusion has a precondition of its own: Inductor fuses PyTorch's elementwise and reduction
ops; a library's kernels (``torchvision::nms``, ``roi_align``, custom ops) stay as they are
(:func:`library_ops`), and so does what runs outside the compiled model (the optimizer, gradient
clipping, the loss scaler).

Each blocker names its op, how often per step, and where it runs: the library op around it
(``torchvision::nms``) and the module (with ``--modules``), so the fix can be said in its terms.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd

from roofscope.analyzers.cost.costmodel import signature_costs
from roofscope.analyzers.diagnose.base import Context
from roofscope.analyzers.diagnose.program import Program
from roofscope.analyzers.diagnose.fixes import compile_code
from roofscope.analyzers.ingest.frames import steps_at
from roofscope.analyzers.ingest.linking import ancestor_where, take
from roofscope.analyzers.ingest.modules import module_column
from roofscope.analyzers.ingest.names import as_text, per_name

# Ops whose output size depends on the values of their inputs (they read a count back).
DATA_DEPENDENT = frozenset(("aten::nonzero", "aten::argwhere", "aten::masked_select", "aten::is_nonzero",
                            "aten::item", "aten::_local_scalar_dense", "aten::unique", "aten::_unique",
                            "aten::_unique2", "aten::unique_dim", "aten::unique_consecutive", "torchvision::nms"))
# (repeat_interleave is data-dependent only with tensor repeats, and then syncs: a host_sync blocker.)
# Indexing ops that are data-dependent when an index is a boolean mask.
MASK_INDEXING = frozenset(("aten::index", "aten::index_put_", "aten::index_put", "aten::_index_put_impl_"))
SIZE_READERS = DATA_DEPENDENT | MASK_INDEXING
# Ops that read a device value on the host: what a user's own code calls (not a library's).
READS = frozenset(("aten::item", "aten::_local_scalar_dense", "aten::is_nonzero"))
# Ops that copy a device tensor to the host (a blocking .cpu(), .tolist(), .numpy()).
COPIES = frozenset(("aten::to", "aten::_to_copy", "aten::copy_"))
# CPU work under this share of the step is noise (a scalar's arithmetic), not a blocker.
CPU_WORK_MIN_SHARE = 0.02


@dataclass
class Blocker:
    kind: str          # host_sync, data_dependent_shape, dynamic_shape, cpu_work, outputs_reused, library_kernel
    op: str            # the op that blocks
    per_step: float
    library: str = ""  # the library op around it (torchvision::nms), "" for the user's own code
    module: str = ""   # the module it runs in (--modules), else ""
    detail: str = ""

    def where(self) -> str:
        parts = [f"inside {self.library}" if self.library and self.library != self.op else "",
                 f"in {self.module}" if self.module else ""]
        return " ".join(p for p in parts if p)

    def text(self) -> str:
        w = self.where()
        return (f"{self.op} {self.per_step:g}x/step" + (f" {w}" if w else "")
                + (f" ({self.detail})" if self.detail else ""))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _library(ops: pd.DataFrame, rows: np.ndarray) -> np.ndarray:
    """The outermost op of a library's own namespace (not aten, not a profiler label) around each row."""
    lib = per_name(ops["name"], lambda s: ~s.str.extract(r"^(\w+)::", expand=False).fillna("")
                   .isin(("", "aten", "prim", "c10d", "cuda", "profiler")))
    parent = ops["parent"].to_numpy()
    found = ancestor_where(parent, rows, lib)
    while True:  # outermost: the library's entry point, not its inner helpers
        up = ancestor_where(parent, take(parent, found, -1), lib)
        if not (up >= 0).any():
            break
        found = np.where(up >= 0, up, found)
    return take(as_text(ops["name"]), found, "")


def library_ops(ctx: Context, k: pd.DataFrame) -> np.ndarray:
    """Per kernel of ``k``: the library op it runs in ("torchvision::roi_align"), "" for PyTorch's own."""
    ops = ctx.inp.trace.ops
    rows = k["op"].to_numpy(dtype=np.int64) if "op" in k else np.full(len(k), -1, dtype=np.int64)
    return _library(ops, rows) if len(ops) else np.full(len(k), "", dtype=object)


def _profiled_ops(ctx: Context) -> tuple[pd.DataFrame, np.ndarray]:
    """The ops of the analyzed steps and each one's step."""
    ops = ctx.inp.trace.ops
    step = steps_at(ctx.inp.trace.annotations, ops["ts_ns"].to_numpy())
    steps = ctx.kernels["step"].unique()
    return ops, np.where(np.isin(step, steps[steps >= 0]), step, -1)


def _in_model(ctx: Context, step: np.ndarray, ts: np.ndarray) -> np.ndarray:
    """Whether each time (host clock, in ``step``) falls inside its step's model work: from the first
    to the last launch of a forward or backward kernel (analyzers/views/phases.py). What the loop does
    around the model (a timing synchronize(), logging a loss after the optimizer) is not captured
    with it and blocks nothing. A trace without phases counts the whole step."""
    k = ctx.kernels
    if "phase" not in k or "launch" not in k:
        return step >= 0
    rt_ts = ctx.inp.trace.runtime["ts_ns"].to_numpy(dtype=np.int64)
    model = k[k["phase"].isin(("forward", "backward")) & (k["launch"] >= 0)]
    if not len(model):
        return step >= 0
    t = pd.Series(rt_ts[model["launch"].to_numpy(dtype=np.int64)]).groupby(model["step"].to_numpy())
    lo, hi = t.min(), t.max()
    first = lo.reindex(step).to_numpy(dtype=np.float64)
    last = hi.reindex(step).to_numpy(dtype=np.float64)
    return (step >= 0) & (ts >= first) & (ts <= last)


def _counted(ctx: Context, kind: str, rows: np.ndarray, detail: str = "") -> list[Blocker]:
    """One blocker per (op, library, module) of ``rows`` (op rows), counted per step."""
    if not len(rows):
        return []
    ops = ctx.inp.trace.ops
    df = pd.DataFrame({"op": as_text(ops["name"])[rows], "library": _library(ops, rows),
                       "module": module_column(ctx.inp.trace, rows)})
    n = df.groupby(["op", "library", "module"], sort=False).size().sort_values(ascending=False)
    return [Blocker(kind, op, float(c) / ctx.steps, lib, mod, detail) for (op, lib, mod), c in n.items()]


def host_syncs(ctx: Context) -> list[Blocker]:
    syncs = ctx.inp.timeline.syncs
    steps = ctx.kernels["step"].unique()
    syncs = syncs[syncs["step"].isin(steps[steps >= 0])] if (syncs["step"] >= 0).any() else syncs
    syncs = syncs[_in_model(ctx, syncs["step"].to_numpy(dtype=np.int64), syncs["ts_ns"].to_numpy(dtype=np.int64))]
    rows = syncs["op"].to_numpy(dtype=np.int64)
    named = _counted(ctx, "host_sync", rows[rows >= 0])
    # Runtime syncs outside any op (a bare torch.cuda.synchronize()).
    bare = int((rows < 0).sum())
    if bare:
        name = str(syncs.loc[rows < 0, "name"].iloc[0])
        named.append(Blocker("host_sync", name, bare / ctx.steps))
    return named


def data_dependent(ctx: Context) -> list[Blocker]:
    ops, step = _profiled_ops(ctx)
    names = ops["name"].astype(str)
    hit = names.isin(DATA_DEPENDENT).to_numpy() & _in_model(ctx, step, ops["ts_ns"].to_numpy(dtype=np.int64))
    rows = np.flatnonzero(hit)
    parent = ops["parent"].to_numpy()
    # Count the outermost one, and boolean indexing as itself: x[mask] calls nonzero inside aten::index.
    rows = rows[ancestor_where(parent, take(parent, rows, -1), hit) < 0]
    up = take(parent, rows, -1)
    masked = np.isin(take(names.to_numpy(dtype=object), up, ""), list(MASK_INDEXING))
    rows = np.where(masked, up, rows)
    return _counted(ctx, "data_dependent_shape", rows, "output size depends on tensor values")


def dynamic_shapes(ctx: Context) -> list[Blocker]:
    """Ops launching GPU work whose input dims differ between the analyzed steps (read once per diagnosis:
    the graph fix and the fusion fix both ask)."""
    if "dynamic_shapes" not in ctx.memo:
        ctx.memo["dynamic_shapes"] = _dynamic_shapes(ctx)
    return list(ctx.memo["dynamic_shapes"])


def _dynamic_shapes(ctx: Context) -> list[Blocker]:
    ops, step = _profiled_ops(ctx)
    launched = ctx.kernels["op"].to_numpy(dtype=np.int64)
    rows = np.unique(launched[launched >= 0])
    rows = rows[step[rows] >= 0]
    if len(np.unique(step[rows])) < 2:
        return []
    dims = ctx.inp.trace.signatures["input_dims"].map(str)
    df = pd.DataFrame({"name": ops["name"].astype(str).to_numpy()[rows], "step": step[rows],
                       "dims": take(dims.to_numpy(dtype=object), ops["sig"].to_numpy(dtype=np.int64)[rows], "")})
    df = df.drop_duplicates()
    in_steps = df.groupby("name")["step"].nunique()
    per_dims = df.groupby(["name", "dims"])["step"].nunique()
    # An op is dynamic when one of its shapes is missing from a step the op runs in.
    varying = per_dims[per_dims < in_steps.reindex(per_dims.index.get_level_values("name")).to_numpy()]
    names = varying.index.get_level_values("name").unique()
    calls = pd.Series(ops["name"].astype(str).to_numpy()[rows]).value_counts()
    out = []
    for name in names:
        shapes = df.loc[df["name"] == name, "dims"].nunique()
        out.append(Blocker("dynamic_shape", name, float(calls[name]) / ctx.steps,
                           detail=f"{shapes} input shapes across {int(in_steps[name])} steps"))
    return sorted(out, key=lambda b: -b.per_step)


def cpu_work(ctx: Context) -> list[Blocker]:
    """Ops with FLOPs and no GPU work beneath them, holding a real share of the step."""
    trace = ctx.inp.trace
    ops, step = _profiled_ops(ctx)
    parent = ops["parent"].to_numpy()
    gpu = np.zeros(len(ops), dtype=bool)
    cur = np.unique(np.concatenate((trace.runtime["op"].to_numpy(dtype=np.int64),
                                    ctx.inp.kernels["op"].to_numpy(dtype=np.int64))))
    cur = cur[cur >= 0]
    while cur.size:   # every op with GPU work at or below it
        gpu[cur] = True
        cur = parent[cur]
        cur = np.unique(cur[cur >= 0])
        cur = cur[~gpu[cur]]
    flops = signature_costs(trace.signatures)["flops"].to_numpy(dtype=np.float64)
    work = ((np.nan_to_num(take(flops, ops["sig"].to_numpy(dtype=np.int64), np.nan)) > 0) & ~gpu
            & _in_model(ctx, step, ops["ts_ns"].to_numpy(dtype=np.int64)))
    # Under an op with GPU work it is that op's helper (the launch linking may credit the parent).
    work &= ancestor_where(parent, np.arange(len(ops)), gpu) < 0
    rows = np.flatnonzero(work)
    rows = rows[ancestor_where(parent, take(parent, rows, -1), work) < 0]
    if not len(rows):
        return []
    t = pd.Series(ops["dur_ns"].to_numpy()[rows] / 1e9).groupby(ops["name"].astype(str).to_numpy()[rows]).sum()
    heavy = t[t / ctx.steps >= CPU_WORK_MIN_SHARE * ctx.step_s]
    rows = rows[np.isin(ops["name"].astype(str).to_numpy()[rows], heavy.index)]
    return _counted(ctx, "cpu_work", rows, "runs on the host, outside any graph")


def several_forwards(ctx: Context) -> list[Blocker]:
    """Several forwards per step: a graph's outputs are overwritten by the next replay before the step is done."""
    n = ctx.program.forwards_per_step
    if n <= 1:
        return []
    return [Blocker("outputs_reused", "forward", n, detail=f"{n:g} forwards per optimizer step (gradient"
                    " accumulation): each replay overwrites the previous one's outputs")]


def graph_blockers(ctx: Context) -> list[Blocker]:
    """Everything on this trace that keeps the step from being captured as one CUDA graph."""
    if "graph_blockers" not in ctx.memo:
        ctx.memo["graph_blockers"] = (several_forwards(ctx) + host_syncs(ctx) + data_dependent(ctx)
                                      + dynamic_shapes(ctx) + cpu_work(ctx))
    return list(ctx.memo["graph_blockers"])


def clean_modules(ctx: Context, blockers: list[Blocker]) -> list[str]:
    """Children of the model (``Root.child``) with GPU work and no blocker inside, most GPU time
    first: the parts that can be captured alone."""
    mods = ctx.kernels["module"].astype(str) if "module" in ctx.kernels else pd.Series([], dtype=str)
    parts = mods.str.split(".")
    child = parts.str[:2].str.join(".").where(parts.str.len() >= 2, "")
    time = ctx.kernels["dur_s"].groupby(child.to_numpy()).sum().drop("", errors="ignore").sort_values(ascending=False)
    blocked = {".".join(b.module.split(".")[:2]) for b in blockers if b.module}
    if not blocked:  # without module labels nothing says where the blockers are
        return []
    return [m for m in time.index if m not in blocked]


def graph_fix(ctx: Context, blockers: list[Blocker]) -> tuple[str, str]:
    """(fix, snippet) in the blockers' terms and the program's (program.py)."""
    p = ctx.program
    if blockers and all(b.kind == "outputs_reused" for b in blockers):
        fix = (f"The step runs {p.forwards_per_step:g} forwards before its optimizer step: a CUDA graph's outputs"
               " are overwritten by the next replay (mode=\"reduce-overhead\" crashes or reads them overwritten)."
               " Mark each forward as a new graph step, or compile without CUDA graphs (fusion only).")
        snippet, _ = compile_code(p, "max-autotune-no-cudagraphs")
        return fix, ("torch.compiler.cudagraph_mark_step_begin()   # before each micro-batch's forward, with"
                     ' mode="reduce-overhead"\n# or, without CUDA graphs:\n' + snippet)
    blockers = [b for b in blockers if b.kind != "outputs_reused"] or blockers
    kinds = {b.kind for b in blockers}
    libs = sorted({b.library.split("::")[0] for b in blockers if b.library})
    top = "; ".join(b.text() for b in blockers[:3])
    clean = clean_modules(ctx, blockers)
    what = ("they cannot be captured" if kinds & {"host_sync", "data_dependent_shape"}
            else "a graph replays one shape" if "dynamic_shape" in kinds else "a graph holds GPU work only")
    fix = f"The step cannot be captured whole: {top}; {what}."
    if p.forwards_per_step > 1:
        fix += f" It also runs {p.forwards_per_step:g} forwards per step (torch.compiler.cudagraph_mark_step_begin())."
    if clean:
        part = clean[0].split(".", 1)[1]
        fix += f" Capture the part without them alone ({', '.join(clean[:3])})."
        snippet = f'model.{part} = torch.compile(model.{part}, mode="reduce-overhead")'
        if libs:
            snippet += f"   # the {'/'.join(libs)} ops stay eager"
        return fix, snippet
    if libs:
        fix += (f" The blockers come from {', '.join(libs)}'s ops: capture only the modules before them"
                " (run with --modules to see which), or compile without graphs.")
        return fix, ("# the modules that run before them, alone (--modules names them), e.g.\n"
                     'model.backbone = torch.compile(model.backbone, mode="reduce-overhead")')
    if kinds <= {"host_sync"} or kinds <= {"host_sync", "data_dependent_shape"} and all(
            b.op in READS for b in blockers if b.kind == "data_dependent_shape"):
        fix += (" Move the host reads and blocking copies out of the step (log every N steps, copy with"
                " non_blocking=True), then capture it.")
        return fix, host_read_code(p, read_kinds(blockers)) + "\n" + compile_code(p, "reduce-overhead")[0]
    if "dynamic_shape" in kinds:
        fix += " Pad inputs to a few fixed sizes (bucket lengths) so each shape is captured once."
        return fix, ("x = torch.nn.functional.pad(x, (0, bucket - x.shape[-1]))   # a few fixed lengths\n"
                     + compile_code(p, "reduce-overhead")[0])
    fix += " Keep the step's tensors on the GPU, or capture only the part after the host work."
    return fix, compile_code(p)[0] + "   # fuses; no graphs while the step has host work"


def read_kinds(blockers: list[Blocker]) -> set[str]:
    """What the host-sync blockers do, as timeline.py's sync kinds: item, dtoh_copy, or a runtime sync."""
    return {"item" if b.op in READS else "dtoh_copy" if b.op in COPIES else "device_sync"
            for b in blockers if b.kind == "host_sync"}


def host_read_code(p: Program, kinds: set[str]) -> str:
    """The code that keeps a step's host reads (timeline.py's sync kinds) off the GPU's critical path,
    naming what this program reads: a loss only where a backward ran (there is one)."""
    lines = []
    if "item" in kinds:
        lines.append("loss_sum += loss.detach()          # instead of loss.item() every step" if p.training else
                     "total += out.detach()              # instead of out.item() every step; read it every N steps")
    if "dtoh_copy" in kinds:
        lines.append("out.to('cpu', non_blocking=True)    # or keep it on the GPU and read it every N steps")
    if kinds & {"device_sync", "stream_sync", "event_sync"} or not lines:
        lines.append("# torch.cuda.synchronize() in the step: drop it, or time with torch.cuda.Event")
    return "\n".join(lines)
