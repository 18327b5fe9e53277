"""What the program is, so that its fixes are written for it (fixes.py): how it runs, the names it
has, what it already does.

* **How it runs** (:attr:`Program.kind`): Hugging Face ``generate()``; a decode loop of its own over
  the model's forward; a training framework's loop (HF Trainer, Lightning, accelerate, DeepSpeed,
  torchtitan); a plain training loop (a backward ran in the step); a plain loop without one.
  ``generate()`` is known from the Run (collectors/steps.py counts the root model's calls, or
  ``--step-on generate``); a bare trace cannot tell, and the fix then says both ways.
* **Its names**: the outermost module's class, the optimizer's class (run.json, else the trace's
  ``Optimizer.step#AdamW.step``), the function its steps run on (``--step-on __main__.FUNC``).
* **What it does already**: compiled (Inductor's kernels or compiled regions in the trace), with
  CUDA graphs (graph launches beside them: ``mode="reduce-overhead"`` or ``"max-autotune"``) or
  without; forwards per step (micro-batches of gradient accumulation: the backward passes each step
  runs, or the ``roofscope: forward`` spans of the root module); a DataLoader and its workers.

Frameworks come from run.json (the modules loaded in the profiled process: collectors/frameworks.py)
or, for a plain trace, from op and annotation names (FSDP2's ``FSDP::`` spans, DeepSpeed's ops, a
backward inside ``optimizer.step``, which is how Lightning calls the optimizer with a closure).
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from roofscope.analyzers.diagnose.inputs import DiagnosisInput
from roofscope.analyzers.ingest.frames import steps_at
from roofscope.analyzers.ingest.names import per_name
from roofscope.analyzers.ingest.runtime_names import GRAPH_LAUNCHES
from roofscope.labels import FORWARD_LABEL

# Preference when several frameworks are loaded: the one closest to the user's code first
# (a Lightning or HF Trainer loop also loads accelerate or FSDP underneath).
FRAMEWORKS = ("hf_trainer", "lightning", "torchtitan", "deepspeed", "accelerate", "fsdp2")
# Names in a trace that say torch.compile ran (Dynamo's regions, Inductor's launches).
COMPILED_NAMES = ("Torch-Compiled Region", "CompiledFunction", "## Call CompiledFxGraph")
# Inductor's generated kernels (pointwise, reduction, persistent reduction, template); a user's own
# Triton kernel has its own name.
INDUCTOR_KERNELS = r"triton_(?:poi|red|per|tem)_"
_OPTIMIZER_SPAN = re.compile(r"^Optimizer\.step#(\w+)\.step")
LOADER_SPAN = "enumerate(DataLoader)#"


@dataclass(frozen=True)
class Program:
    kind: str                          # generate, decode_loop, decode, hf_trainer, lightning, accelerate, deepspeed,
    #                                    torchtitan, training_loop, inference_loop
    frameworks: tuple[str, ...] = ()
    training: bool = False             # a backward ran in the steps: there is a loss
    forwards_per_step: float = 1.0     # backward passes (micro-batches) or root forwards per step
    optimizer: str = ""                # its class ("AdamW"); "" for none seen
    root_module: str = ""              # the outermost module's class; "" when the Run does not say
    root_package: str = ""             # the package that defines it ("transformers", "__main__")
    root_owner: str = ""               # the class of the module holding it (its forward never ran): "" for none
    root_attr: str = ""                # the attribute it is held by ("body" in self.body)
    step_function: str = ""            # the function the steps ran on ("__main__.train_step")
    generate: bool | None = None       # generate() drove the forwards; None: not known
    compiled: str = ""                 # "", "inductor" (no CUDA graphs) or "inductor+graphs"
    dataloader: str = ""               # "", "workers=0" or "workers" (a DataLoader with worker processes)
    cpu: bool = False                  # the model ran on the CPU (a CPU-only trace)
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def framework(self) -> str:
        return self.frameworks[0] if self.frameworks else ""

    @property
    def decode(self) -> bool:
        return self.kind in ("generate", "decode_loop", "decode")

    @property
    def hf_model(self) -> bool:
        return self.root_package == "transformers"

    def model_note(self) -> str:
        """A comment naming the model's class where the Run knows it (no variable name is in a trace): the
        holder's where a module of the program holds the one the steps call."""
        return f"   # your {self.root_owner or self.root_module}" if self.root_module else ""

    @property
    def root_words(self) -> str:
        """The model the steps call: its class, and where a module of the program holds it, that holder's
        attribute ("Net.body (Sequential)")."""
        if self.root_owner and self.root_attr:
            return f"{self.root_owner}.{self.root_attr} ({self.root_module})"
        return self.root_module

    def words(self) -> str:
        """One line saying what the program is and does, as the fixes assume it."""
        what = {"generate": "generate() decoding", "decode_loop": "a decode loop of its own over forward",
                "decode": "decoding (generate() or a loop of its own: the trace does not say)",
                "hf_trainer": "an HF Trainer loop", "lightning": "a Lightning loop", "accelerate": "an accelerate loop",
                "deepspeed": "a DeepSpeed loop", "torchtitan": "a torchtitan job",
                "training_loop": "a training loop", "inference_loop": "a loop without backward"}[self.kind]
        parts = [what + (f" over {self.root_words}" if self.root_module else "")]
        if self.step_function:
            parts.append(f"steps on {self.step_function}()")
        if self.optimizer:
            parts.append(f"optimizer {self.optimizer}")
        if self.training and self.forwards_per_step > 1:
            parts.append(f"{self.forwards_per_step:g} forwards per optimizer step")
        if self.compiled:
            parts.append("compiled" + (" with CUDA graphs" if self.compiled == "inductor+graphs" else
                                       " without CUDA graphs (mode default or max-autotune-no-cudagraphs)"))
        if self.dataloader:
            parts.append(f"DataLoader ({'num_workers=0' if self.dataloader == 'workers=0' else 'worker processes'})")
        return "; ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["frameworks"], d["notes"] = list(self.frameworks), list(self.notes)
        d["words"] = self.words()
        return d


def program_of(inp: DiagnosisInput, kernels: pd.DataFrame) -> Program:
    """The program behind ``inp``'s trace and Run; ``kernels``: those of the analyzed steps."""
    meta = inp.run.program
    names = _names(inp)
    frameworks = detect_frameworks(inp, names)
    training = bool("phase" in kernels and (kernels["phase"] == "backward").any())
    generate = _generate(inp)
    if inp.inference is not None:
        kind = "generate" if generate else "decode_loop" if generate is False else "decode"
    elif frameworks and frameworks[0] != "fsdp2":
        kind = frameworks[0]
    else:
        kind = "training_loop" if training else "inference_loop"
    compiled = ""
    if any(n.startswith(COMPILED_NAMES) for n in names) or "OptimizedModule" in meta.wrappers \
            or per_name(kernels["name"], lambda s: s.str.match(INDUCTOR_KERNELS)).any():
        rt = inp.trace.runtime
        graphs = bool(len(rt) and rt["name"].astype(str).isin(GRAPH_LAUNCHES).any())
        compiled = "inductor+graphs" if graphs else "inductor"
    optimizer = inp.run.optimizer.cls if inp.run.optimizer is not None and inp.run.optimizer.cls else ""
    if not optimizer:
        optimizer = _traced_optimizer(inp, names)
    loader = [n for n in names if n.startswith(LOADER_SPAN)]
    dataloader = ("workers=0" if any("_SingleProcess" in n for n in loader) else "workers") if loader else ""
    step_fn = meta.step_on if meta.step_on not in ("", "forward", "generate") else ""
    return Program(kind=kind, frameworks=tuple(frameworks), training=training,
                   forwards_per_step=forwards_per_step(inp, kernels) if training else 1.0, optimizer=optimizer,
                   root_module=meta.root_module, root_package=meta.root_package, root_owner=meta.root_owner,
                   root_attr=meta.root_attr, step_function=step_fn,
                   generate=generate, compiled=compiled, dataloader=dataloader, cpu=inp.cpu_only)


def _traced_optimizer(inp: DiagnosisInput, names: set[str]) -> str:
    """The optimizer class whose ``Optimizer.step#CLASS.step`` spans the trace holds most often (the earliest
    first on a tie): a wrapper (an EMA around Shampoo) and the optimizer it wraps both leave spans."""
    spans = {n: m.group(1) for n in names if (m := _OPTIMIZER_SPAN.match(n))}
    if not spans:
        return ""
    seen = pd.concat([inp.trace.annotations[["name", "ts_ns"]], inp.trace.ops[["name", "ts_ns"]]])
    seen = seen[seen["name"].astype(str).isin(spans)]
    by = seen.assign(cls=seen["name"].astype(str).map(spans)).groupby("cls")["ts_ns"].agg(["size", "min"])
    return str(by.sort_values(["size", "min"], ascending=[False, True]).index[0])


def _names(inp: DiagnosisInput) -> set[str]:
    """Every distinct op and annotation name (a categorical column's categories: no pass over its rows)."""
    out: set[str] = set()
    for col in (inp.trace.annotations["name"], inp.trace.ops["name"]):
        if isinstance(col.dtype, pd.CategoricalDtype):
            out |= set(map(str, col.cat.categories))
        elif len(col):
            out |= set(map(str, col.unique()))
    return out


def _generate(inp: DiagnosisInput) -> bool | None:
    """Whether Hugging Face generate() drove the decode: the Run's count of the root model's calls, its
    step source, or the rearm that a second call caused; None for a trace that does not say."""
    meta = inp.run.program
    if meta.step_source == "generate" or (meta.generate_calls or 0) > 0 or "generate()" in meta.rearmed:
        return True
    if meta.generate_calls == 0 and meta.root_module:
        return False
    return None


def detect_frameworks(inp: DiagnosisInput, names: set[str] | None = None) -> list[str]:
    """Frameworks of the run, in :data:`FRAMEWORKS` order: from run.json and the trace (a closure
    inside optimizer.step says Lightning only when run.json names no frameworks: LBFGS takes a
    closure too)."""
    named = inp.run.frameworks
    names = _names(inp) if names is None else names
    found = set(named or ())
    if any(n.startswith("FSDP::") for n in names):
        found.add("fsdp2")
    if any("deepspeed" in n.lower() for n in names):
        found.add("deepspeed")
    k = inp.kernels
    # Forward kernels launched inside optimizer.step: the closure Lightning passes it.
    if named is None and "phase" in k and "region" in k:
        in_step = per_name(k["region"], lambda s: s.str.startswith("Optimizer.step#"))
        if (in_step & (k["phase"] == "backward")).any():
            found.add("lightning")
    return [f for f in FRAMEWORKS if f in found] + sorted(found - set(FRAMEWORKS))


def forwards_per_step(inp: DiagnosisInput, kernels: pd.DataFrame) -> float:
    """Forwards per step (the median over the analyzed steps): the backward passes each step runs
    (a forward phase, then a backward one, counted in time order) or, where more, the root module's
    ``roofscope: forward`` spans (a Run's). Gradient accumulation runs several per optimizer step."""
    best = 1.0
    if "phase" in kernels and len(kernels):
        k = kernels.loc[kernels["phase"].isin(("forward", "backward")) & (kernels["step"] >= 0),
                        ["step", "ts_ns", "phase"]].sort_values(["step", "ts_ns"], kind="stable")
        back = (k["phase"] == "backward").to_numpy()
        same = np.r_[False, k["step"].to_numpy()[1:] == k["step"].to_numpy()[:-1]]
        starts = back & ~(same & np.r_[False, back[:-1]])      # a backward run begins
        runs = pd.Series(starts).groupby(k["step"].to_numpy()).sum()
        if len(runs):
            best = max(best, float(np.median(runs)))
    a = inp.trace.annotations
    if len(a):
        fw = a[a["name"].astype(str).str.startswith(FORWARD_LABEL)]
        step = steps_at(a, fw["ts_ns"].to_numpy()) if len(fw) else np.array([], dtype=np.int64)
        steps = set(kernels.loc[kernels["step"] >= 0, "step"].unique()) if "step" in kernels else set()
        counts = pd.Series(step[np.isin(step, list(steps))]).value_counts()
        if len(counts):
            best = max(best, float(np.median(counts.reindex(list(steps), fill_value=0))))
    return best


__all__ = ["COMPILED_NAMES", "FRAMEWORKS", "LOADER_SPAN", "Program", "detect_frameworks", "forwards_per_step", "program_of"]
