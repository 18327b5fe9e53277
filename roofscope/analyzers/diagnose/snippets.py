"""Fix code written for the program (program.py): its loop's own switch (HF Trainer's
``TrainingArguments``, Lightning's ``configure_optimizers``, accelerate's ``Accelerator``), its
names (the model's class, the optimizer's class, the function its steps run on), and never an object
it lacks (no ``loss`` without a backward, no ``generate()`` in a loop of its own, no DataLoader where
none ran). Each function returns ``(snippet, framework)``: the framework whose terms the snippet is
written in, "" for plain PyTorch.

Also the ``apply`` names of the fixes roofscope can inject without editing the program
(analyzers/model/findings.APPLY_NAMES).
"""
from __future__ import annotations

from roofscope.analyzers.diagnose.program import Program

# torch.optim classes that take fused=True (CUDA and CPU kernels in torch 2.4+); others take foreach=True.
FUSED_OPTIMIZERS = ("Adam", "AdamW", "SGD", "Adagrad")
# Hugging Face TrainingArguments' optim names for the fused torch optimizers.
_HF_OPTIM = {"AdamW": "adamw_torch_fused", "Adam": "adamw_torch_fused"}


def compile_apply(mode: str = "default") -> str:
    """The ``apply`` name of compiling the root module in ``mode``."""
    return f"compile:{mode}"


def compile_code(p: Program, mode: str = "") -> tuple[str, str]:
    """Compiling the model in ``mode`` ("" for the default), in the program's loop's terms."""
    kw = f', mode="{mode}"' if mode else ""
    if p.kind == "hf_trainer":
        return ("TrainingArguments(..., torch_compile=True"
                + (f', torch_compile_mode="{mode}"' if mode else "") + ")", "hf_trainer")
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
    cls = p.optimizer or "AdamW"
    arg = "fused=True" if cls in FUSED_OPTIMIZERS else "foreach=True"
    apply = "fused_optimizer" if p.optimizer else ""
    if p.kind == "hf_trainer" and cls in _HF_OPTIM:
        return f'TrainingArguments(..., optim="{_HF_OPTIM[cls]}")', "hf_trainer", apply
    if p.kind == "deepspeed":
        return ('"optimizer": {"type": "AdamW", "params": {"torch_adam": false}}   # DeepSpeed\'s fused Adam',
                "deepspeed", "")
    line = f"torch.optim.{cls}(params, lr=lr, {arg})" + ("" if p.optimizer else "   # your optimizer, with " + arg)
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


__all__ = ["FUSED_OPTIMIZERS", "channels_last_code", "compile_apply", "compile_code", "decode_graph_code",
           "loader_code", "optimizer_code", "tf32_code", "threads_code"]
