"""Rules every formula shares: the bytes rule, which tensors an op writes, broadcasting."""

from __future__ import annotations

from typing import Callable

from roofscope.cost.formulas.records import Cost, MissingShapes, OpCall, TensorSpec


def _bytes(specs: list[TensorSpec] | tuple[TensorSpec, ...]) -> float:
    return float(sum(s.nbytes for s in specs))


def _cost(call: OpCall, flops: float, outs: list[TensorSpec], dtype: str | None = None) -> Cost:
    """The bytes rule: every tensor input read once + every output written once."""
    return Cost(float(flops), _bytes(call.reads()) + _bytes(outs), dtype)


def _outputs(call: OpCall, rule: Callable[[], list[TensorSpec]]) -> list[TensorSpec]:
    """What the op writes: out= args, else mutated args (in-place), else the rule's new tensors."""
    outs = [a for a in call.args if a.write_only]
    if outs:
        try:  # out= tensors are often recorded before being resized: trust the rule's shape
            return [r.like(dtype=a.tensor.dtype) for r, a in zip(rule(), outs)]  # type: ignore[union-attr]
        except MissingShapes:
            return [s for a in outs for s in a.specs]
    mutated = [s for a in call.args if a.mutable for s in a.specs]
    return mutated if mutated else rule()


def broadcast_shapes(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    out: list[int] = []
    for dims in zip(*(((1,) * (max(map(len, shapes)) - len(s)) + tuple(s)) for s in shapes)):
        sizes = set(dims) - {1}
        if len(sizes) > 1:
            raise ValueError(f"shapes {shapes} do not broadcast")
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)
