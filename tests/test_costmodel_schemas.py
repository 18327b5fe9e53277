"""Costing without torch: the shipped op-schema table and the pure GEMM/conv/attention FLOP counts
agree with torch's own (that analyzing imports no torch: tests/test_no_torch_in_analyze.py)."""
from __future__ import annotations

import json

import pytest

from roofscope.analyzers.cost import schemas
from roofscope.analyzers.cost.formulas import flops


def test_table_binds_like_torch() -> None:
    torch = pytest.importorskip("torch")
    table = json.loads(schemas.SCHEMA_FILE.read_text())
    if torch.__version__.split("+")[0] != table["torch"]:
        pytest.skip(f"table written from torch {table['torch']}, torch {torch.__version__} installed")
    # Every op with a formula is in the table (else it would be costed unbound), with exactly
    # torch's overloads and argument facts.
    assert schemas.generate() == table, "run `python -m roofscope.analyzers.cost.schemas --write`"
    for name in ("aten::addmm", "aten::convolution_backward", "aten::_foreach_add_", "aten::native_layer_norm"):
        assert schemas.overloads(name) == schemas.torch_overloads(name)


def test_table_param_facts() -> None:
    # aten::add_.Tensor(Tensor(a!) self, Tensor other, *, Scalar alpha=1): self is written, alpha kwarg-only
    ovs = dict(schemas.overloads("aten::add_"))
    self_, other, alpha = ovs["Tensor"]
    assert (self_.name, self_.mutable, self_.write_only, self_.kinds) == ("self", True, False, frozenset({"T"}))
    assert (other.name, other.mutable) == ("other", False)
    assert (alpha.name, alpha.kwarg_only, alpha.has_default) == ("alpha", True, True)
    assert alpha.loose == frozenset({"S", "SL", "G", "N"})


@pytest.mark.parametrize("op, args, kwargs", [
    ("mm", ([64, 128], [128, 32]), {}),                               # 2*64*32*128 = 524,288
    ("addmm", ([32], [64, 128], [128, 32]), {}),
    ("bmm", ([4, 64, 128], [4, 128, 32]), {}),
    ("baddbmm", ([4, 64, 32], [4, 64, 128], [4, 128, 32]), {}),
    ("_scaled_mm", ([64, 128], [128, 32], [], []), {}),
    ("convolution", ([8, 3, 32, 32], [16, 3, 3, 3], None, None, None, None, False),
     {"out_val": [8, 16, 30, 30]}),
    ("convolution", ([8, 16, 30, 30], [16, 3, 3, 3], None, None, None, None, True),
     {"out_val": [8, 3, 32, 32]}),
    ("convolution", ([2, 4, 10], [6, 2, 3], None, None, None, None, False), {"out_val": [2, 6, 8]}),
    ("convolution_backward", ([8, 16, 30, 30], [8, 3, 32, 32], [16, 3, 3, 3], None, None, None, None, False,
                              None, None, [True, True, False]),
     {"out_val": [[8, 3, 32, 32], [16, 3, 3, 3], None]}),
    ("convolution_backward", ([8, 3, 32, 32], [8, 16, 30, 30], [16, 3, 3, 3], None, None, None, None, True,
                              None, None, [False, True, False]),
     {"out_val": [[8, 16, 30, 30], [16, 3, 3, 3], None]}),
])
def test_flops_match_flop_counter(op, args, kwargs) -> None:
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import flop_registry

    assert flops.FLOP_FORMULAS[op](*args, **kwargs) == flop_registry[getattr(torch.ops.aten, op)](*args, **kwargs)


def test_flops_by_hand() -> None:
    assert flops.mm([64, 128], [128, 32]) == 2 * 64 * 32 * 128 == 524_288
    # conv 3x3, 3 -> 16 channels, 30x30 outputs, batch 8: 900 points * 9 taps * 8 * 16 * 3 * 2
    assert flops.convolution([8, 3, 32, 32], [16, 3, 3, 3], None, None, None, None, False,
                             out_val=[8, 16, 30, 30]) == 900 * 9 * 8 * 16 * 3 * 2 == 6_220_800
    with pytest.raises(ValueError):
        flops.mm([2, 3], [4, 5])


def test_an_op_the_table_lacks_is_unbound() -> None:
    # never torch's schemas: costing must not import torch (it is costed positionally)
    assert schemas.overloads("aten::_foreach_not_an_op") == ()
