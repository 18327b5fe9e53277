"""The built-in fixes' installers: each changes the running process the way the fix's one line of code
would, before the program starts (registry.py names them; docs/verify.md says what each does).

An installer patches through the :class:`~roofscope.fixes.injection.Injection` (undone with it) and
says what it changed or why it could not. Fixes of the program's model act on its root modules at
their first call: that call runs as the program wrote it (its forward is already chosen), the
fix holds from the next one on, inside the warm-up steps that ``roofscope verify`` does not time.
"""
from __future__ import annotations

import functools
import inspect
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from roofscope.fixes.injection import Injection

OPTIMIZERS = ("Adam", "AdamW", "SGD")


def _cuda(inj: "Injection") -> bool:
    import torch

    if not torch.cuda.is_available():
        inj.skip("no CUDA device")
        return False
    return True


def tf32(arg: str | None, inj: "Injection") -> None:
    import torch

    if not _cuda(inj):
        return
    # torch.backends.cuda.matmul is an object without a __name__ (asking raises AttributeError): named here.
    # Held as flags: a program that sets its own precision at its start does not undo the fix.
    for name, owner in (("torch.backends.cuda.matmul", torch.backends.cuda.matmul),
                        ("torch.backends.cudnn", torch.backends.cudnn)):
        inj.flag(owner, "allow_tf32", True, f"{name}.allow_tf32 = True")


def cudnn_benchmark(arg: str | None, inj: "Injection") -> None:
    import torch

    if not _cuda(inj):
        return
    inj.flag(torch.backends.cudnn, "benchmark", True, "torch.backends.cudnn.benchmark = True")


def fallback_random(arg: str | None, inj: "Injection") -> None:
    # Compiled code then draws random numbers through ATen's generator, as eager does (the same masks for a
    # seed), instead of Inductor's own per-element code: on the CPU 0.46x a dropout's eager time more, not 2x
    # (analyzers/diagnose/cpu.py).
    import torch._inductor.config as inductor_config

    inj.flag(inductor_config, "fallback_random", True, "torch._inductor.config.fallback_random = True")


def _to_channels_last(args: Any) -> Any:
    import torch

    if isinstance(args, torch.Tensor) and args.dim() == 4:
        return args.contiguous(memory_format=torch.channels_last)
    if isinstance(args, tuple):
        return tuple(_to_channels_last(a) for a in args)
    if isinstance(args, dict):
        return {k: _to_channels_last(v) for k, v in args.items()}
    return args


def channels_last(arg: str | None, inj: "Injection") -> None:
    import torch

    def root(module: Any, args: tuple[Any, ...]) -> tuple[Any, ...] | None:
        if not any(isinstance(m, torch.nn.modules.conv._ConvNd) for m in module.modules()):
            return None
        module.to(memory_format=torch.channels_last)
        module.register_forward_pre_hook(lambda m, a, kw: (_to_channels_last(a), _to_channels_last(kw)),
                                         with_kwargs=True)
        inj.applied(f"{type(module).__name__} and its 4-D inputs in channels_last")
        return _to_channels_last(args)

    inj.on_root(root)


def _compiled(module: Any) -> bool:
    return getattr(module, "_compiled_call_impl", None) is not None or type(module).__name__ == "OptimizedModule"


def compile_roots(arg: str | None, inj: "Injection") -> None:
    """The root's ``forward`` is compiled on the instance, so that its hooks (the program's, and the step
    boundaries roofscope finds) stay outside the graph, as with ``torch.compile(model.forward)``."""
    import torch

    mode = arg or "default"

    def root(module: Any, args: tuple[Any, ...]) -> None:
        name = type(module).__name__
        if _compiled(module):
            inj.skip(f"the program already compiles {name}")
            return None
        if next(module.parameters(), None) is None:
            return None   # a loss module or another stateless one: nothing of the model's to compile
        # Without CUDA graphs the compiled forward can be swapped with the program's own between steps (a
        # switch: verify alternates them inside one run); a graph's replays own their outputs' memory.
        inj.setting(module, "forward", torch.compile(module.forward, mode=None if mode == "default" else mode))
        inj.applied(f"torch.compile({name}.forward, mode={mode!r})")
        return None

    inj.on_root(root)


def mark_step(arg: str | None, inj: "Injection") -> None:
    """Each forward of a root module with parameters begins a new CUDA-graph step, so that a replay may
    overwrite only the outputs of the forward before it: what a step of several forwards (gradient
    accumulation) needs under ``mode="reduce-overhead"``, whose graphs otherwise span the whole step."""
    import torch

    def mark(module: Any, args: tuple[Any, ...]) -> None:
        torch.compiler.cudagraph_mark_step_begin()

    def root(module: Any, args: tuple[Any, ...]) -> None:
        if next(module.parameters(), None) is None:
            return None
        module.register_forward_pre_hook(mark)
        mark(module, args)
        inj.applied(f"torch.compiler.cudagraph_mark_step_begin() before each {type(module).__name__} forward")
        return None

    inj.on_root(root)


def static_cache(arg: str | None, inj: "Injection") -> None:
    try:
        from transformers.generation.utils import GenerationMixin
    except ImportError:
        inj.skip("transformers is not installed")
        return
    generate = GenerationMixin.generate

    @functools.wraps(generate)
    def with_static_cache(self: Any, *args: Any, **kwargs: Any) -> Any:
        config = getattr(self, "generation_config", None)
        given = kwargs.get("cache_implementation") or getattr(config, "cache_implementation", None)
        if given not in (None, "static") or kwargs.get("past_key_values") is not None:
            inj.skip(f"the program's generate() brings its own cache ({given or 'past_key_values'})", "static_cache")
        elif config is not None:
            config.cache_implementation = "static"
            inj.applied(f'{type(self).__name__}.generation_config.cache_implementation = "static"', "static_cache")
        return generate(self, *args, **kwargs)

    inj.patch(GenerationMixin, "generate", with_static_cache)


def fused_optimizer(arg: str | None, inj: "Injection") -> None:
    import torch

    inside = threading.local()   # AdamW.__init__ calls Adam.__init__: only the outermost call decides
    for name in OPTIMIZERS:
        cls = getattr(torch.optim, name)
        inj.patch(cls, "__init__", _fused_init(cls, cls.__init__, inside, inj))


def _fused_init(cls: type, init: Any, inside: threading.local, inj: "Injection") -> Any:
    @functools.wraps(init)
    def __init__(self: Any, params: Any, *args: Any, **kwargs: Any) -> None:
        if getattr(inside, "active", False) or type(self) is not cls:
            return init(self, params, *args, **kwargs)
        if kwargs.get("fused") is not None or kwargs.get("foreach") is not None:
            inj.skip(f"the program sets {cls.__name__}'s fused/foreach itself", "fused_optimizer")
            return init(self, params, *args, **kwargs)
        params = params if isinstance(params, (list, tuple)) else list(params)  # tried twice
        inside.active = True
        try:
            try:
                init(self, params, *args, fused=True, **kwargs)
                inj.applied(f"{cls.__name__}(..., fused=True)", "fused_optimizer")
            except (RuntimeError, ValueError) as e:   # parameters fused kernels do not take
                init(self, params, *args, foreach=True, **kwargs)
                inj.applied(f"{cls.__name__}(..., foreach=True) (fused refused: {str(e).splitlines()[0][:80]})",
                            "fused_optimizer")
        finally:
            inside.active = False

    return __init__


def threads(arg: str | None, inj: "Injection") -> None:
    import torch

    n, before = int(arg or 1), torch.get_num_threads()
    set_threads = torch.set_num_threads
    own = [before]   # what the program would run with: its own last set_num_threads, else the default

    def ignored(k: int) -> None:
        own[0] = k
        if k != n:
            inj.applied(f"the program's torch.set_num_threads({k}) ignored: it runs {n}", "threads")

    # Patched even when the count is already n: a program that sets its own count later (most that set one)
    # runs n threads only if its call is ignored. Shown only when nothing applied, the skip is then true.
    inj.patch(torch, "set_num_threads", ignored)
    inj.on_undo(lambda: set_threads(before))
    inj.switch(lambda on: set_threads(n if on else own[0]))
    if n == before:
        inj.skip(f"the program already runs {n} thread{'s' if n > 1 else ''} (torch's count, and it sets no other)")
        return
    set_threads(n)
    inj.applied(f"torch.set_num_threads({n}) (was {before})")


def dataloader(arg: str | None, inj: "Injection") -> None:
    import torch
    from torch.utils.data import DataLoader

    key, _, value = (arg or "").partition("=")
    if key == "pin_memory" and not _cuda(inj):
        return
    init = DataLoader.__init__

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        # Only when the program left the default: a value it chose stays. Positional arguments past the
        # dataset are read as DataLoader's signature orders them.
        bound = _loader_args(init, self, args, kwargs)
        if key == "workers" and bound.get("num_workers", 0) == 0:
            kwargs = {**_named(init, args, kwargs), "num_workers": int(value)}
            args = args[:1]
            inj.applied(f"DataLoader(num_workers={value})", "dataloader")
        elif key == "pin_memory" and not bound.get("pin_memory", False) and torch.cuda.is_available():
            kwargs = {**_named(init, args, kwargs), "pin_memory": True}
            args = args[:1]
            inj.applied("DataLoader(pin_memory=True)", "dataloader")
        init(self, *args, **kwargs)

    inj.patch(DataLoader, "__init__", __init__)


def _loader_args(init: Any, self: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    try:
        return dict(inspect.signature(init).bind(self, *args, **kwargs).arguments)
    except TypeError:   # the call is wrong as it stands: DataLoader will say so itself
        return {"num_workers": None, "pin_memory": None}


def _named(init: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The DataLoader call's arguments after the dataset, by name."""
    names = [p.name for p in inspect.signature(init).parameters.values()][2:]   # self, dataset
    return {**dict(zip(names, args[1:])), **kwargs}
