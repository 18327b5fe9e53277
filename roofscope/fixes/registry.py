"""The fixes roofscope can inject into a program without editing it, by name: their grammar and registry.

A fix spec is ``NAME`` or ``NAME:ARG``, several joined by ``;`` and applied together
(``dataloader:workers=4;dataloader:pin_memory``). Each finding in summary.json names the spec
that answers it in ``fix.apply`` ("" when only a source edit does: analyzers/diagnose/), and
``roofscope verify`` (roofscope/verify/) re-runs the program with it injected
(roofscope/collectors/inject/). This module is the contract between the two sides: it imports no
torch, and every layer may import it. docs/verify.md lists the fixes; :func:`register` adds one
(``--fix-module FILE.py|MODULE`` imports the module that calls it).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from roofscope.errors import RoofscopeError
from roofscope.fileio import import_source
from roofscope.fixes import patches

if TYPE_CHECKING:  # pragma: no cover
    from roofscope.fixes.injection import Injection

# (the fix's argument, the process's injection) -> None; see patches.py for the built-in ones
Installer = Callable[[str | None, "Injection"], None]
# the ARG as written -> the ARG kept (None: no argument); raises FixError when it is not one
ArgCheck = Callable[[str | None], str | None]
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


class FixError(RoofscopeError):
    """A fix spec that names no fix, or gives one an argument it does not take."""


@dataclass(frozen=True, order=True)
class Spec:
    """One fix of a spec, as ``NAME[:ARG]``."""

    name: str
    arg: str | None = None

    def __str__(self) -> str:
        return self.name if self.arg is None else f"{self.name}:{self.arg}"


@dataclass(frozen=True)
class Fix:
    name: str
    summary: str            # what it does to the program, one line
    acts_on: str            # what the program must make for it to apply ("the program made no <acts_on>")
    install: Installer
    check: ArgCheck
    usage: str              # its grammar, e.g. "compile[:MODE]"
    # A change that can be turned off and on between steps (Injection.switch), for every ARG or for those the
    # callable accepts: verify alternates it inside each run, so that the drift between processes falls on
    # both sides alike.
    switch: bool | Callable[[str | None], bool] = False


def no_arg(name: str) -> ArgCheck:
    def check(arg: str | None) -> str | None:
        if arg is not None:
            raise FixError(f"fix {name} takes no argument, got {name}:{arg}")
        return None
    return check


def count_arg(name: str) -> ArgCheck:
    def check(arg: str | None) -> str | None:
        if arg is None or not arg.isdigit() or int(arg) < 1:
            raise FixError(f"fix {name} needs a positive count: {name}:N, got {name}{'' if arg is None else ':' + arg}")
        return str(int(arg))
    return check


def _compile_mode(arg: str | None) -> str | None:
    if arg is not None and arg not in COMPILE_MODES:
        raise FixError(f"fix compile: unknown mode {arg!r}; one of {', '.join(COMPILE_MODES)}")
    return None if arg == "default" else arg   # `compile` and `compile:default` are one fix


def _loader_arg(arg: str | None) -> str | None:
    if arg == "pin_memory":
        return arg
    key, _, n = (arg or "").partition("=")
    if key != "workers" or not n.isdigit() or int(n) < 1:
        raise FixError(f"fix dataloader takes workers=N or pin_memory, got {'nothing' if arg is None else repr(arg)}")
    return f"workers={int(n)}"


FIXES: dict[str, Fix] = {f.name: f for f in (
    Fix("tf32", "TF32 for fp32 matmuls and convolutions (torch.backends.cuda.matmul / cudnn .allow_tf32 = True)",
        "CUDA device", patches.tf32, no_arg("tf32"), "tf32", switch=True),
    Fix("cudnn_benchmark", "cuDNN picks its fastest convolution algorithms (torch.backends.cudnn.benchmark = True)",
        "CUDA device", patches.cudnn_benchmark, no_arg("cudnn_benchmark"), "cudnn_benchmark", switch=True),
    Fix("channels_last", "root modules with convolutions in channels_last, and their 4-D inputs (a forward pre-hook)",
        "root module with a convolution", patches.channels_last, no_arg("channels_last"), "channels_last"),
    Fix("compile", "torch.compile of the root modules' forward (the outermost nn.Modules the program calls that hold "
        "parameters), in MODE", "root module with parameters", patches.compile_roots, _compile_mode,
        "compile[:" + "|".join(COMPILE_MODES) + "]", switch=lambda mode: mode in (None, "max-autotune-no-cudagraphs")),
    Fix("fallback_random", "compiled code draws random numbers as eager does (torch._inductor.config.fallback_random"
        " = True): with compile, a dropout's masks", "", patches.fallback_random, no_arg("fallback_random"),
        "fallback_random", switch=True),
    Fix("mark_step", "torch.compiler.cudagraph_mark_step_begin() before each call of a root module with parameters"
        " (with compile:reduce-overhead, a step of several forwards)", "root module with parameters",
        patches.mark_step, no_arg("mark_step"), "mark_step"),
    Fix("static_cache", 'generate() with a static KV cache (generation_config.cache_implementation = "static")',
        "generate() call", patches.static_cache, no_arg("static_cache"), "static_cache"),
    Fix("fused_optimizer", "Adam, AdamW and SGD made with fused=True where the parameters allow it, else foreach=True",
        "Adam, AdamW or SGD optimizer without fused/foreach set", patches.fused_optimizer, no_arg("fused_optimizer"),
        "fused_optimizer"),
    Fix("threads", "torch.set_num_threads(N) before the program starts (its own calls are ignored)",
        "", patches.threads, count_arg("threads"), "threads:N", switch=True),
    Fix("dataloader", "DataLoaders made with num_workers=N (where the program leaves it 0) or pin_memory=True",
        "DataLoader that could take it", patches.dataloader, _loader_arg, "dataloader:workers=N|pin_memory"),
)}


def register(name: str, install: Installer, summary: str, *, acts_on: str = "", takes_arg: bool = False,
             replace: bool = False, switch: bool = False) -> None:
    """Add the fix ``name`` (``NAME`` or, with ``takes_arg``, ``NAME:ARG`` with any ARG): ``install(arg,
    injection)`` runs in the program's process before the program (see fixes/injection.py). A module
    passed as ``--fix-module`` calls this; a name already taken needs ``replace``. ``switch``: its installer
    makes every change through ``Injection.flag``, ``Injection.setting`` or ``Injection.switch``, so that verify
    may turn it off and on between the steps of one run."""
    if not name.isidentifier():
        raise FixError(f"a fix name is a Python identifier, got {name!r}")
    if name in FIXES and not replace:
        raise FixError(f"fix {name} already exists; pass replace=True to override it")
    FIXES[name] = Fix(name, summary, acts_on, install, (lambda arg: arg) if takes_arg else no_arg(name),
                      f"{name}:ARG" if takes_arg else name, switch)


_loaded: set[str] = set()


def load_modules(sources: tuple[str, ...] | list[str]) -> None:
    """Import each ``--fix-module`` (a Python file or module that calls :func:`register`) once per process."""
    for source in sources:
        if source not in _loaded:
            import_source(source, "--fix-module", "roofscope_user_fixes_")
            _loaded.add(source)


def install(specs: tuple[Spec, ...], injection: "Injection") -> None:
    """Run each fix's installer in this process, in order, recording under its name."""
    for spec in specs:
        injection.installing(spec.name)
        FIXES[spec.name].install(spec.arg, injection)


def parse(text: str) -> tuple[Spec, ...]:
    """The fixes of a spec, in order, each once; FixError for a name or argument the registry refuses."""
    specs: list[Spec] = []
    for part in (p.strip() for p in text.split(";")):
        if not part:
            continue
        name, sep, arg = part.partition(":")
        fix = FIXES.get(name.strip())
        if fix is None:
            raise FixError(f"unknown fix {name.strip()!r}; one of {', '.join(sorted(FIXES))}")
        spec = Spec(fix.name, fix.check(arg.strip() if sep else None))
        if spec not in specs:
            specs.append(spec)
    if not specs:
        raise FixError(f"empty fix spec {text!r}")
    return tuple(specs)


def switches(specs: tuple[Spec, ...]) -> bool:
    """Whether every fix of the spec is a switch (Fix.switch): the spec can be alternated inside one run."""
    def one(spec: Spec) -> bool:
        switch = FIXES[spec.name].switch
        return switch(spec.arg) if callable(switch) else switch

    return all(one(s) for s in specs)


def spec_text(specs: tuple[Spec, ...]) -> str:
    """The canonical text of parsed specs (``compile:default`` reads ``compile``)."""
    return ";".join(str(s) for s in specs)


# The fix a finding asks for when summary.json does not say (`fix.apply` absent: a Run analyzed before the
# analysis named them): by rule, then by change. Rules absent here need a source edit ("").
# cuda_graphs and launch_bound_decode ask for CUDA graphs: compile's reduce-overhead mode captures them, and
# Hugging Face's generate() does so itself with a static cache (launch_bound_decode's own fix text).
DERIVED_BY_RULE = {
    "tf32": "tf32",
    "fusion": "compile",
    "launch_fusion": "compile",
    "cuda_graphs": "compile:reduce-overhead",
    "small_grid": "compile:max-autotune-no-cudagraphs",
    "launch_bound_decode": "static_cache",
    "fused_optimizer": "fused_optimizer",
    "h2d_copies": "dataloader:pin_memory",
}
DERIVED_BY_CHANGE = {"torch_compile": "compile", "precision": "tf32", "fused_optimizer": "fused_optimizer",
                     "data_loader": "dataloader:pin_memory"}


def derive(rule: str, change: str = "") -> str:
    """The spec for a finding of ``rule`` (and ``change``) that names none; "" when it needs a source edit."""
    return DERIVED_BY_RULE.get(rule) or DERIVED_BY_CHANGE.get(change, "")
