"""The fixes: their code, written for the program, and the findings grouped by the change a user makes.

**Code for the program** (program.py): its loop's own switch (HF Trainer's ``TrainingArguments``,
Lightning's ``configure_optimizers``, accelerate's ``Accelerator``), its names (the model's class, the
optimizer's class, the function its steps run on), and never an object it lacks (no ``loss`` without a
backward, no ``generate()`` in a loop of its own, no DataLoader where none ran). Each ``*_code`` function
returns ``(snippet, framework)``: the framework whose terms the snippet is written in, "" for plain
PyTorch. The fixes roofscope can inject without editing the program carry an ``apply`` name
(analyzers/model/findings.APPLY_NAMES).

**Changes.** One change often answers several findings: ``torch.compile`` fuses the elementwise chains
(``fusion``) and, with fewer and CUDA-graphed launches, removes the launch-bound idle
(``cuda_graphs``). Each change gets a combined saving that counts overlapping time once:
its findings' savings are summed per term of the step they address (memory-bound time,
host-bound idle, ...), each term capped at the time it holds, and the total capped at the
step. Changes rank by that saving, and ``roofscope diff --applied CHANGE`` checks it.
A blocked fix and advice (a step that finds out more) are no change to make.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from roofscope.analyzers.diagnose.program import Program
from roofscope.analyzers.model.findings import Finding

# torch.optim classes that take fused=True (CUDA and CPU kernels in torch 2.4+); others take foreach=True.
FUSED_OPTIMIZERS = ("Adam", "AdamW", "SGD", "Adagrad")
# Hugging Face TrainingArguments' optim names for the fused torch optimizers.
_HF_OPTIM = {"AdamW": "adamw_torch_fused", "Adam": "adamw_torch_fused"}


def compile_apply(p: Program, mode: str = "default") -> str:
    """The ``apply`` name of compiling the root module in ``mode``: a ``generate()`` program's is its static
    cache (generate() then compiles the forward itself on a GPU; on the CPU it compiles nothing, so the
    forward is compiled too); none for a program that compiles already."""
    if p.compiled:
        return ""
    if p.kind == "generate":
        return f"static_cache;compile:{mode}" if p.cpu else "static_cache"
    return f"compile:{mode}"


def compile_code(p: Program, mode: str = "") -> tuple[str, str]:
    """Compiling the model in ``mode`` ("" for the default), in the program's loop's terms."""
    kw = f', mode="{mode}"' if mode else ""
    if p.kind == "hf_trainer":
        return ("TrainingArguments(..., torch_compile=True"
                + (f', torch_compile_mode="{mode}"' if mode else "") + ")", "hf_trainer")
    if p.root_owner and p.root_attr and p.kind in ("lightning", "training_loop", "inference_loop"):
        # The steps call a child of the program's module, never the holder's forward: compiling the holder
        # would compile a forward no step runs.
        a, why = p.root_attr, f"the steps call {p.root_owner}.{p.root_attr}, not {p.root_owner}.forward"
        if p.kind == "lightning":
            return (f"self.{a} = torch.compile(self.{a}{kw})   # in {p.root_owner}.__init__ or configure_model():"
                    f" {why}"), "lightning"
        return f"model.{a} = torch.compile(model.{a}{kw})   # model: your {p.root_owner}; {why}", ""
    if p.kind == "lightning":
        what = f"the LightningModule ({p.root_module})" if p.root_module else "the LightningModule"
        return f"model = torch.compile(model{kw})   # {what}, before trainer.fit(model)", "lightning"
    if p.kind == "accelerate":
        if not mode:
            return 'accelerator = Accelerator(dynamo_backend="inductor")', "accelerate"
        return f"model = torch.compile(model{kw})   # before accelerator.prepare(model, ...)", "accelerate"
    if p.kind == "deepspeed":
        return ("model_engine.compile(" + (f'compile_kwargs={{"mode": "{mode}"}}' if mode else "")
                + ")   # after deepspeed.initialize(...)", "deepspeed")
    if p.kind == "torchtitan":
        return '[compile]\nenable = true\ncomponents = ["model", "loss"]   # in the job\'s .toml', "torchtitan"
    if p.kind == "generate" and p.cpu:   # generate() compiles its forward itself on GPUs only
        return ('model.generation_config.cache_implementation = "static"   # fixed shapes for the compiled forward\n'
                f"model.forward = torch.compile(model.forward{kw})   # on the CPU generate() compiles nothing"
                " itself"), ""
    if p.kind == "generate":   # compiling the module leaves generate() calling its eager forward
        return ('model.generation_config.cache_implementation = "static"   # generate() then compiles the'
                ' forward itself (fusion, CUDA graphs)'), ""
    if p.kind == "decode_loop":
        return f"model.forward = torch.compile(model.forward{kw})   # the forward your loop calls", ""
    if p.step_function.startswith("__main__."):
        fn = p.step_function.rsplit(".", 1)[-1]
        return f"{fn} = torch.compile({fn}{kw})   # the function each step runs", ""
    return f"model = torch.compile(model{kw}){p.model_note()}", ""


def decode_graph_code(p: Program) -> tuple[str, str]:
    """(fix text, snippet) that replays a decode step as a CUDA graph, for how this program decodes."""
    generate = ('model.generation_config.cache_implementation = "static"'
                '   # generate() then compiles each decode step (mode="reduce-overhead")')
    own_hf = ("from transformers import StaticCache\n"
              "cache = StaticCache(config=model.config, max_cache_len=prompt_len + new_tokens)"
              "   # preallocated (transformers < 4.56 also takes max_batch_size=B)\n"
              'model.forward = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True)\n'
              "logits = model(input_ids=token, past_key_values=cache, cache_position=pos).logits   # in your loop")
    own = ("# a KV cache preallocated at its full length (static shapes), then the step captured once:\n"
           'decode_step = torch.compile(decode_step, mode="reduce-overhead")')
    if p.kind == "generate":
        return ("A static cache: with it generate() compiles the decode step into CUDA graphs itself (do not also"
                " torch.compile model.forward).", generate)
    if p.kind == "decode_loop":
        if p.hf_model:
            return ("The program decodes in a loop of its own over the model's forward: give the forward a static"
                    " cache and compile it with CUDA graphs; a growing cache changes shapes every token and cannot be"
                    " captured.", own_hf)
        return ("The program decodes in a loop of its own: preallocate the KV cache at its full length so every"
                " token's step has the same shapes, then capture the step (torch.compile mode=\"reduce-overhead\","
                " or torch.cuda.graph around it).", own)
    return ("If the program decodes with Hugging Face generate(): a static cache (generate() then compiles the decode"
            " step itself). If it runs a loop of its own over the model's forward: a preallocated (static) cache and"
            " the step compiled with mode=\"reduce-overhead\".", generate + "\n# a loop of your own:\n" + own)


def tf32_code(p: Program) -> tuple[str, str]:
    if p.kind == "hf_trainer":
        return "TrainingArguments(..., tf32=True)", "hf_trainer"
    return 'torch.set_float32_matmul_precision("high")   # TF32 for fp32 matmuls', ""


def optimizer_code(p: Program) -> tuple[str, str, str]:
    """(snippet, framework, apply) of a fused (or, for other classes, foreach) optimizer."""
    cls = p.optimizer
    arg = "fused=True" if cls in FUSED_OPTIMIZERS else "foreach=True"
    apply = "fused_optimizer" if p.optimizer else ""
    if p.kind == "hf_trainer" and cls in _HF_OPTIM:
        return f'TrainingArguments(..., optim="{_HF_OPTIM[cls]}")', "hf_trainer", apply
    if p.kind == "deepspeed":
        return ('"optimizer": {"type": "AdamW", "params": {"torch_adam": false}}   # DeepSpeed\'s fused Adam',
                "deepspeed", "")
    # An optimizer of a class the trace does not name is called by no name of ours.
    line = (f"torch.optim.{cls}(params, lr=lr, {arg})" if p.optimizer else
            "YourOptimizer(params, lr=lr, fused=True)   # fused=True for Adam, AdamW, SGD, Adagrad; else foreach=True")
    if p.kind == "lightning":
        return ("def configure_optimizers(self):\n    return " + line.replace("params", "self.parameters()")
                .replace("lr=lr", "lr=self.lr"), "lightning", apply)
    return "opt = " + line.replace("params", "model.parameters()"), "", apply


def loader_code(p: Program, workers: int | None = None, pin: bool = False) -> tuple[str, str]:
    """The DataLoader's workers and pinning, where the program builds one (a DataLoader ran)."""
    args = "".join((", pin_memory=True" if pin else "", f", num_workers={workers}" if workers else ""))
    if p.kind == "hf_trainer":
        return ("TrainingArguments(..., " + ", ".join(filter(None, (
            "dataloader_pin_memory=True" if pin else "", f"dataloader_num_workers={workers}" if workers else "")))
                + ")"), "hf_trainer"
    where = {"lightning": "   # in train_dataloader()", "accelerate": "   # before accelerator.prepare"}
    return f"DataLoader(dataset, batch_size=B{args}){where.get(p.kind, '')}", p.kind if p.kind in where else ""


def channels_last_code(p: Program) -> tuple[str, str]:
    return ("model = model.to(memory_format=torch.channels_last)" + p.model_note()
            + "\nx = x.to(memory_format=torch.channels_last)   # each batch, as it comes"), ""


def threads_code(n: int) -> tuple[str, str]:
    return (f"torch.set_num_threads({n})   # first thing in the program; or OMP_NUM_THREADS={n} python ..."), ""



@dataclass(frozen=True)
class Change:
    key: str
    title: str
    rules: tuple[str, ...]


CHANGES: tuple[Change, ...] = (
    # small_grid's fix is a compile too (autotuned tile sizes): on an H200 Lightning CNN, compiling with
    # mode="reduce-overhead" saved 1.97 ms, fusion and graphs predicted 0.90 and the small grids 0.62 more.
    Change("torch_compile", "Compile the model (torch.compile: fusion, fewer launches, CUDA graphs, tuned grids)",
           ("fusion", "launch_fusion", "cuda_graphs", "small_grid")),
    Change("precision", "TF32 tensor cores for fp32 matmuls", ("tf32",)),
    Change("fused_optimizer", "Fused or foreach optimizer", ("fused_optimizer",)),
    Change("data_loader", "Input pipeline: pinned memory, worker processes", ("h2d_copies", "dataloader")),
    Change("host_syncs", "No host syncs in the step", ("host_syncs",)),
    Change("sdpa", "Fused attention (scaled_dot_product_attention)", ("sdpa",)),
    Change("threads", "Threads for the cores the process gets", ("cpu_threads",)),
)
_BY_RULE = {r: c for c in CHANGES for r in c.rules}
# A finding whose saving another finding of its change holds whole: compiling without CUDA graphs saves
# part of the launch overhead that compiling with them saves all of (the change applies the latter).
SUBSUMED = {"launch_fusion": "cuda_graphs"}


def change_of(rule: str) -> str:
    """The change a finding of ``rule`` asks for (a rule without a group is its own change)."""
    c = _BY_RULE.get(rule)
    return c.key if c else rule


def combined_saving(per_term: dict[str, float], terms: dict[str, float]) -> float:
    """Savings summed per term (``per_term``), added across terms. Savings on one term overlap: never more
    than the term holds (terms without a time, such as copy, are kept as given)."""
    return sum(min(v, terms[t]) if terms.get(t) else v for t, v in per_term.items())


def group(findings: list[Finding], terms: dict[str, float], step_s: float) -> list[dict[str, Any]]:
    """One entry per change, ranked by combined saving (see the module docstring)."""
    by_change: dict[str, list[Finding]] = {}
    for f in findings:
        if f.status != "blocked" and f.kind != "advice":  # no change to make as it stands
            by_change.setdefault(f.change or change_of(f.rule), []).append(f)
    out = []
    for key, fs in by_change.items():
        per_term: dict[str, float] = {}
        rules = {f.rule for f in fs}
        for f in fs:
            if SUBSUMED.get(f.rule) in rules:
                continue
            per_term[f.binding] = per_term.get(f.binding, 0.0) + f.saving_s
        combined = combined_saving(per_term, terms)
        combined = min(combined, step_s) if step_s > 0 else combined
        c = next((c for c in CHANGES if c.key == key), None)
        out.append({"change": key, "title": c.title if c else fs[0].title,
                    "rules": [f.rule for f in fs], "findings": [f.rank for f in fs],
                    "saving_s": float(combined), "saving_pct": float(combined / step_s) if step_s > 0 else 0.0,
                    "snippet": fs[0].snippet, "framework": fs[0].framework, "apply": merge_apply(f.apply for f in fs)})
    out.sort(key=lambda d: -d["saving_s"])
    for i, d in enumerate(out, 1):
        d["rank"] = i
    return out


# Of several compile modes asked for by one change, the one that does what the others do and more.
_COMPILE_ORDER = ("compile:reduce-overhead", "compile:max-autotune-no-cudagraphs", "compile:default", "compile")


def merge_apply(applies: Iterable[str]) -> str:
    """One ``apply`` for several findings' (NAME[:ARG] joined by ";"): each name once, one compile mode."""
    names = list(dict.fromkeys(a for s in applies for a in s.split(";") if a))
    modes = [m for m in _COMPILE_ORDER if m in names]
    return ";".join(n for n in names if not n.startswith("compile") or modes and n == modes[0])


def apply(findings: list[Finding]) -> None:
    """Set each finding's change; a blocked fix or advice injects nothing (its ``apply`` is "")."""
    for f in findings:
        f.change = change_of(f.rule)
        if f.status == "blocked" or f.kind == "advice":
            f.apply = ""


__all__ = ["CHANGES", "FUSED_OPTIMIZERS", "Change", "apply", "change_of", "channels_last_code", "combined_saving",
           "compile_apply", "compile_code", "decode_graph_code", "group", "loader_code", "merge_apply",
           "optimizer_code", "tf32_code", "threads_code"]
