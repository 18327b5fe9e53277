"""Findings grouped by the change a user makes, and fix snippets in the framework's terms.

One change often answers several findings: ``torch.compile`` fuses the elementwise chains
(``fusion``) and, with fewer and CUDA-graphed launches, removes the launch-bound idle
(``cuda_graphs``). Each change gets a combined saving that counts overlapping time once:
its findings' savings are summed per term of the step they address (memory-bound time,
host-bound idle, ...), each term capped at the time it holds, and the total capped at the
step. Changes rank by that saving, and ``roofscope diff --applied CHANGE`` checks it.

The framework comes from the Run (``run.json``'s ``frameworks``, the modules loaded in the
profiled process: collectors/frameworks.py) or, for a plain trace, from op and annotation
names (FSDP2's ``FSDP::`` spans, DeepSpeed's ops, a backward inside ``optimizer.step``,
which is how Lightning calls the optimizer with a closure).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from roofscope.analyzers.diagnose.inputs import DiagnosisInput
from roofscope.analyzers.ingest.names import per_name
from roofscope.analyzers.model.findings import Finding


@dataclass(frozen=True)
class Change:
    key: str
    title: str
    rules: tuple[str, ...]
    # framework key -> snippet; without one, a finding keeps its rule's plain-PyTorch snippet.
    snippets: dict[str, str] = field(default_factory=dict)


CHANGES: tuple[Change, ...] = (
    # small_grid's fix is a compile too (autotuned tile sizes): on an H200 Lightning CNN, compiling with
    # mode="reduce-overhead" saved 1.97 ms, fusion and graphs predicted 0.90 and the small grids 0.62 more.
    Change("torch_compile", "Compile the model (torch.compile: fusion, fewer launches, CUDA graphs, tuned grids)",
           ("fusion", "cuda_graphs", "small_grid"), {
               "hf_trainer": "TrainingArguments(..., torch_compile=True)"
                             '   # torch_compile_mode="reduce-overhead" adds CUDA graphs',
               # default mode fuses but keeps every launch: on an H100 Lightning CNN it left the
               # launch-bound step host-bound (11.7 -> 20.5 ms); CUDA graphs remove the launches
               "lightning": 'model = torch.compile(model, mode="reduce-overhead")'
                            "   # the LightningModule, before trainer.fit(model)",
               "accelerate": 'accelerator = Accelerator(dynamo_backend="inductor")',
               "torchtitan": "[compile]\nenable = true\ncomponents = [\"model\", \"loss\"]   # in the job's .toml",
               "deepspeed": "model_engine.compile()   # after deepspeed.initialize(...)",
           }),
    Change("precision", "Tensor-core precision (TF32 / bf16 autocast)", ("tf32",), {
        "hf_trainer": "TrainingArguments(..., bf16=True, tf32=True)",
        "lightning": 'Trainer(..., precision="bf16-mixed")\ntorch.set_float32_matmul_precision("high")',
        "accelerate": 'accelerator = Accelerator(mixed_precision="bf16")',
        "torchtitan": '[training]\nmixed_precision_param = "bfloat16"   # in the job\'s .toml',
        "deepspeed": '"bf16": {"enabled": true}   # in the DeepSpeed config',
    }),
    Change("fused_optimizer", "Fused or foreach optimizer", ("fused_optimizer",), {
        "hf_trainer": 'TrainingArguments(..., optim="adamw_torch_fused")',
        "lightning": "def configure_optimizers(self):\n"
                     "    return torch.optim.AdamW(self.parameters(), lr=self.lr, fused=True)",
        "deepspeed": '"optimizer": {"type": "AdamW", "params": {"torch_adam": false}}   # DeepSpeed\'s fused Adam',
    }),
    Change("data_loader", "Pinned, asynchronous input pipeline", ("h2d_copies",), {
        "hf_trainer": "TrainingArguments(..., dataloader_pin_memory=True, dataloader_num_workers=4)",
        "lightning": "DataLoader(ds, batch_size=B, pin_memory=True, num_workers=4)   # in train_dataloader()",
        "accelerate": "DataLoader(ds, batch_size=B, pin_memory=True, num_workers=4)   # before accelerator.prepare",
    }),
    Change("host_syncs", "No host syncs in the step", ("host_syncs",), {
        "hf_trainer": "TrainingArguments(..., logging_steps=100)   # the loss is read back at each log",
        "lightning": "Trainer(..., log_every_n_steps=100)   # and self.log(..., sync_dist=False)",
    }),
    Change("sdpa", "Fused attention (scaled_dot_product_attention)", ("sdpa",), {
        "hf_trainer": 'model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")',
    }),
)
_BY_RULE = {r: c for c in CHANGES for r in c.rules}
# Preference when several frameworks are loaded: the one closest to the user's code first
# (a Lightning or HF Trainer loop also loads accelerate or FSDP underneath).
_PRIORITY = ("hf_trainer", "lightning", "torchtitan", "deepspeed", "accelerate", "fsdp2")


def change_of(rule: str) -> str:
    """The change a finding of ``rule`` asks for (a rule without a group is its own change)."""
    c = _BY_RULE.get(rule)
    return c.key if c else rule


def detect_frameworks(inp: DiagnosisInput) -> list[str]:
    """Frameworks of the run, in :data:`_PRIORITY` order: from run.json and the trace (a
    closure inside optimizer.step says Lightning only when run.json names no frameworks:
    LBFGS takes a closure too)."""
    named = inp.run.frameworks
    found = set(named or ()) | _from_trace(inp, lightning=named is None)
    return [f for f in _PRIORITY if f in found] + sorted(found - set(_PRIORITY))


def _from_trace(inp: DiagnosisInput, lightning: bool) -> set[str]:
    trace = inp.trace
    # The distinct names (a categorical's in C), not a string per row.
    names = set(map(str, trace.annotations["name"].unique())) if len(trace.annotations) else set()
    names |= set(map(str, trace.ops["name"].unique())) if len(trace.ops) else set()
    found = set()
    if any(n.startswith("FSDP::") for n in names):
        found.add("fsdp2")
    if any("deepspeed" in n.lower() for n in names):
        found.add("deepspeed")
    k = inp.kernels
    # Forward kernels launched inside optimizer.step: the closure Lightning passes it.
    if lightning and "phase" in k and "region" in k:
        in_step = per_name(k["region"], lambda s: s.str.startswith("Optimizer.step#"))
        if (in_step & (k["phase"] == "backward")).any():
            found.add("lightning")
    return found


def snippet_for(change: str, frameworks: list[str], default: str) -> tuple[str, str]:
    """(snippet, framework) for ``change``: the first framework with its own snippet, else
    ``default`` (the rule's plain-PyTorch snippet) and ""."""
    c = next((c for c in CHANGES if c.key == change), None)
    for f in frameworks if c is not None else ():
        if f in c.snippets:
            return c.snippets[f], f
    return default, ""


def group(findings: list[Finding], terms: dict[str, float], step_s: float) -> list[dict[str, Any]]:
    """One entry per change, ranked by combined saving (see the module docstring)."""
    by_change: dict[str, list[Finding]] = {}
    for f in findings:
        if f.status != "blocked":  # a blocked fix is no change to make as it stands
            by_change.setdefault(f.change or change_of(f.rule), []).append(f)
    out = []
    for key, fs in by_change.items():
        per_term: dict[str, float] = {}
        for f in fs:
            per_term[f.binding] = per_term.get(f.binding, 0.0) + f.saving_s
        # Savings on one term overlap: never more than the term holds (terms without a time,
        # such as copy, are kept as given).
        combined = sum(min(v, terms[t]) if terms.get(t) else v for t, v in per_term.items())
        combined = min(combined, step_s) if step_s > 0 else combined
        c = next((c for c in CHANGES if c.key == key), None)
        out.append({"change": key, "title": c.title if c else fs[0].title,
                    "rules": [f.rule for f in fs], "findings": [f.rank for f in fs],
                    "saving_s": float(combined), "saving_pct": float(combined / step_s) if step_s > 0 else 0.0,
                    "snippet": fs[0].snippet, "framework": fs[0].framework})
    out.sort(key=lambda d: -d["saving_s"])
    for i, d in enumerate(out, 1):
        d["rank"] = i
    return out


def apply(findings: list[Finding], frameworks: list[str]) -> None:
    """Set each finding's change and its snippet for the first of ``frameworks`` that has one."""
    for f in findings:
        f.change = change_of(f.rule)
        if f.status != "blocked":  # a blocked fix's snippet is the way around its blocker, not the change
            f.snippet, f.framework = snippet_for(f.change, frameworks, f.snippet)


__all__ = ["CHANGES", "Change", "apply", "change_of", "detect_frameworks", "group", "snippet_for"]
