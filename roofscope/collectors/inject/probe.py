"""What the program computed in its first steps, to tell a fix that changes results (roofscope verify).

Two records, both kept only over the first ``steps`` step boundaries (the warm-up, which is not
timed), then unhooked:

* losses: each scalar tensor ``backward()`` is called on (``loss.backward()``, also inside an
  optimizer's closure or an AMP scaler's ``scale(loss).backward()``), its value before the backward;
* outputs: the first tensor of each output of the program's first root module that holds parameters
  (the model; fixes/injection.py's roots), with the first tensor of its input, each as its shape and
  at most :data:`SAMPLES` evenly spaced values: the input says whether two runs fed the model the
  same data, the output what it made of it;
* random: whether the model's forward drew random numbers (dropout in training): the default
  generators' states before and after it differ. Compiled code draws them from a stream of its own,
  so its results cannot be compared with the eager program's (verify/stats.results_verdict).

Reading a value back syncs the device: only in these untimed steps.
"""
from __future__ import annotations

from typing import Any

from roofscope.fixes.injection import Injection

SAMPLES = 1024


def _first_tensor(value: Any) -> Any:
    import torch

    if isinstance(value, torch.Tensor):
        return value
    items = value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else ()
    for v in items:
        found = _first_tensor(v)
        if found is not None:
            return found
    return None


def sample(t: Any) -> dict[str, Any] | None:
    """``t``'s shape and at most SAMPLES of its values, evenly spaced, as floats."""
    import torch

    if t is None:
        return None
    flat = t.detach().reshape(-1)
    if flat.numel() > SAMPLES:
        flat = flat[torch.linspace(0, flat.numel() - 1, SAMPLES, device=flat.device).long()]
    return {"shape": list(t.shape), "values": [float(v) for v in flat.to("cpu", torch.float64).tolist()]}


class ResultProbe:
    def __init__(self, steps: int, injection: Injection) -> None:
        self.steps = steps
        self.losses: list[float] = []
        self.outputs: list[dict[str, Any]] = []
        self.random = False
        self._rng: Any = None
        self._inj = injection
        self._hook: Any = None
        self._model: Any = None
        self._backward: Any = None

    def install(self) -> None:
        import torch

        if self.steps <= 0:
            return
        probe = self
        backward = self._backward = torch.Tensor.backward

        def recording_backward(loss: Any, *args: Any, **kwargs: Any) -> Any:
            if probe.steps > 0 and loss.numel() == 1 and not torch.compiler.is_compiling():
                probe.losses.append(float(loss.detach().float().item()))
            return backward(loss, *args, **kwargs)

        self._inj.patch(torch.Tensor, "backward", recording_backward)
        self._inj.roots.subscribe(self._root)

    def _root(self, module: Any, args: tuple[Any, ...]) -> None:
        if self._model is not None or next(module.parameters(), None) is None:
            return None
        self._model = module
        self._hook = (module.register_forward_pre_hook(self._before), module.register_forward_hook(self._output,
                                                                                                   with_kwargs=True))
        return self._before(module, args)   # this call's own pre-hooks were gathered before the one just added

    def _before(self, module: Any, args: Any) -> None:
        import torch

        if self.steps > 0 and not torch.compiler.is_compiling():
            self._rng = _generator_states()
        return None

    def _output(self, module: Any, args: Any, kwargs: Any, output: Any) -> None:
        import torch

        if self.steps > 0 and not torch.compiler.is_compiling():
            self.outputs.append({"input": sample(_first_tensor((args, kwargs))),
                                 "output": sample(_first_tensor(output))})
            if self._rng is not None and not self.random:
                self.random = _generator_states() != self._rng

    def boundary(self, n: int) -> None:
        """Step boundary ``n`` (from 1) has passed: past ``steps`` of them, stop recording and unhook."""
        import torch

        if self.steps <= 0 or n < self.steps:
            return
        self.steps = 0
        for hook in self._hook or ():
            hook.remove()
        torch.Tensor.backward = self._backward

    def to_dict(self) -> dict[str, Any]:
        return {"losses": self.losses, "outputs": self.outputs, "random": self.random}


def _generator_states() -> tuple[Any, ...]:
    """The CPU generator's state and, where CUDA is up, each device generator's offset: what a random op moves."""
    import torch

    cuda = (tuple(g.get_offset() for g in torch.cuda.default_generators) if torch.cuda.is_initialized() else ())
    return (bytes(torch.default_generator.get_state().numpy()), cuda)
