"""Unit tests of the formula layer: dtype table, promotion, shape rules, registry hygiene."""
from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest
import torch

from roofscope.analyzers.cost import formulas as cf
from roofscope.analyzers.cost.formulas import (DTYPE_BY_NAME, DTYPES, SCALAR_TYPE_CODES, Arg, OpCall, TensorSpec,
                                          broadcast_shapes, conv_out_shape, lookup, parse_dtype, promote_types,
                                          result_type)

DOC = Path(__file__).resolve().parents[1] / "docs" / "cost-model.md"


# ---------------------------------------------------------------- dtypes


@pytest.mark.parametrize("kineto,size,prec", [
    ("c10::BFloat16", 2, "bf16"), ("c10::Half", 2, "fp16"), ("float", 4, "fp32"), ("double", 8, "fp64"),
    ("long int", 8, ""), ("long", 8, ""), ("int", 4, ""), ("short int", 2, ""), ("bool", 1, ""),
    ("unsigned char", 1, ""), ("signed char", 1, "int8"), ("c10::Float8_e4m3fn", 1, "fp8"),
    ("c10::Float8_e5m2", 1, "fp8"), ("c10::complex<float>", 8, ""),
])
def test_kineto_type_strings(kineto: str, size: int, prec: str) -> None:
    dt = parse_dtype(kineto)
    assert dt is not None and dt.itemsize == size and dt.precision == prec


def test_non_tensor_type_strings_are_not_dtypes() -> None:
    for s in ("Scalar", "ScalarList", "TensorList", "GenericList", "", "c10::qint8"):
        assert parse_dtype(s) is None


def test_dtype_table_matches_torch() -> None:
    for dt in DTYPE_BY_NAME.values():
        tdt = getattr(torch, dt.name)
        assert tdt.itemsize == dt.itemsize, dt.name
        assert tdt.is_floating_point == (dt.kind == "float"), dt.name
        assert tdt.is_complex == (dt.kind == "complex"), dt.name


def test_scalar_type_codes_match_profiler() -> None:
    # the codes Kineto writes in Concrete Inputs for dtype= arguments (recorded with .to(dtype))
    seen = {5: "float16", 1: "int8", 0: "uint8", 2: "int16", 3: "int32", 4: "int64", 11: "bool",
            7: "float64", 6: "float32", 15: "bfloat16", 24: "float8_e4m3fn", 23: "float8_e5m2",
            9: "complex64", 27: "uint16"}
    for code, name in seen.items():
        assert SCALAR_TYPE_CODES[code].name == name
    # passing the code where a ScalarType is expected gives the same torch dtype
    for code, dt in SCALAR_TYPE_CODES.items():
        if dt.name.startswith("complex32"):
            continue
        t = torch.ops.aten._to_copy.default(torch.empty(1, device="meta"), dtype=code)
        assert str(t.dtype) == f"torch.{dt.name}"


def test_promote_types_matches_torch() -> None:
    names = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64",
             "float8_e4m3fn", "complex64"]
    for a, b in itertools.product(names, repeat=2):
        try:
            want = torch.promote_types(getattr(torch, a), getattr(torch, b))
        except RuntimeError:
            continue  # torch refuses (e.g. float8 with float16): nothing to compare
        assert promote_types(DTYPE_BY_NAME[a], DTYPE_BY_NAME[b]).name == str(want)[6:], (a, b)


def test_result_type_matches_torch() -> None:
    f32, i64, bf16, f64 = (DTYPE_BY_NAME[n] for n in ("float32", "int64", "bfloat16", "float64"))
    cases = [
        ([TensorSpec((4,), bf16), TensorSpec((), f32)], [], torch.bfloat16),  # 0-dim float can't upcast bf16
        ([TensorSpec((4,), i64), TensorSpec((), f64)], [], torch.float64),  # higher category wins
        ([TensorSpec((4,), i64)], [2.5], torch.float32),  # python float -> default dtype
        ([TensorSpec((4,), bf16)], [2.5], torch.bfloat16),
        ([TensorSpec((4,), f32), TensorSpec((4,), i64)], [], torch.float32),
    ]
    for specs, scalars, want in cases:
        got = result_type(specs, scalars)
        ts = [torch.empty(s.shape, dtype=getattr(torch, s.dtype.name)) for s in specs]  # type: ignore[union-attr]
        assert got is not None and got.name == str(want)[6:]
        assert torch.result_type(*(ts + scalars)) == want  # the expectation itself is torch's


def test_every_kineto_string_round_trips() -> None:
    for s, dt in DTYPES.items():
        assert parse_dtype(s) is dt


# ---------------------------------------------------------------- shape rules


def test_broadcast_shapes_matches_torch() -> None:
    for shapes in [((3, 1, 5), (4, 1)), ((), (2, 3)), ((0, 3), (1, 3)), ((8, 1, 6, 1), (7, 1, 5))]:
        assert broadcast_shapes(*shapes) == tuple(torch.broadcast_shapes(*shapes))
    with pytest.raises(ValueError):
        broadcast_shapes((3,), (4,))


@pytest.mark.parametrize("x,w,stride,pad,dil,transposed,opad,groups", [
    ((2, 3, 32, 32), (16, 3, 3, 3), [1, 1], [1, 1], [1, 1], False, [0, 0], 1),
    ((2, 8, 17, 17), (8, 1, 5, 5), [2, 2], [2, 2], [1, 1], False, [0, 0], 8),
    ((1, 4, 10, 9), (6, 4, 3, 3), [3, 2], [0, 1], [2, 1], False, [0, 0], 1),
    ((2, 8, 7, 7), (8, 4, 3, 3), [2, 2], [1, 1], [1, 1], True, [1, 1], 1),
    ((2, 4, 33), (6, 4, 5), [2], [1], [1], False, [0], 1),
])
def test_conv_out_shape_matches_torch(x, w, stride, pad, dil, transposed, opad, groups) -> None:
    got = conv_out_shape(x, w, stride, pad, dil, transposed, opad, groups)
    ref = torch.ops.aten.convolution(torch.empty(x, device="meta"), torch.empty(w, device="meta"), None,
                                     stride, pad, dil, transposed, opad, groups)
    assert got == tuple(ref.shape)


def test_footprint_counts_broadcast_dims_once() -> None:
    # expanded bias [32, 192] with strides [0, 1]: 192 distinct fp32 elements = 768 bytes
    t = TensorSpec((32, 192), DTYPE_BY_NAME["float32"], (0, 1))
    assert (t.numel, t.footprint, t.nbytes) == (6144, 192, 768.0)
    assert TensorSpec((4, 0), DTYPE_BY_NAME["float32"], (0, 1)).footprint == 0


def test_unknown_dtype_gives_nan_bytes() -> None:
    assert TensorSpec((4,), None).nbytes != TensorSpec((4,), None).nbytes  # NaN


# ---------------------------------------------------------------- registry


def test_composites_are_not_registered() -> None:
    # their kernels come from registered children; a formula here would shadow nothing but
    # double counting must stay impossible by construction
    for name in ("aten::linear", "aten::matmul", "aten::scaled_dot_product_attention", "aten::conv2d",
                 "aten::conv1d", "aten::layer_norm", "aten::batch_norm", "aten::group_norm", "aten::softmax",
                 "aten::log_softmax", "aten::cross_entropy_loss", "aten::nll_loss", "aten::dropout", "aten::to",
                 "aten::einsum", "aten::zeros", "aten::ones_like"):
        assert lookup(name) is None, name


def test_registry_categories() -> None:
    assert lookup("aten::addmm").category == "gemm"  # type: ignore[union-attr]
    assert lookup("aten::addmm").tensor_core  # type: ignore[union-attr]
    assert lookup("aten::convolution_backward").category == "conv"  # type: ignore[union-attr]
    assert lookup("aten::_flash_attention_forward").category == "attention"  # type: ignore[union-attr]
    assert lookup("aten::gelu_").category == "elementwise"  # type: ignore[union-attr]
    assert not lookup("aten::gelu").tensor_core  # type: ignore[union-attr]
    assert lookup("aten::_foreach_addcdiv_").category == "optimizer"  # type: ignore[union-attr]
    assert lookup("aten::_foreach_frobnicate_") is None
    assert lookup("aten::view").category == "view"  # type: ignore[union-attr]
    assert lookup(None) is None and lookup("c10d::allreduce_") is None and lookup("aten::frobnicate") is None
    # a custom op with no formula of its own: its name's families, else its signature (families/__init__.py)
    assert lookup("fbgemm::permute_2D_sparse_data").category == "other"  # type: ignore[union-attr]
    valid = {"gemm", "conv", "attention", "elementwise", "reduction", "normalization", "softmax", "optimizer",
             "copy", "embedding", "view"}
    assert {f.category for f in cf.REGISTRY.values()} <= valid
    assert {n for n, f in cf.REGISTRY.items() if f.tensor_core} == \
        {n for n, f in cf.REGISTRY.items() if f.category in ("gemm", "conv", "attention")}


@pytest.mark.parametrize("name,cat,tc", [
    ("triton_poi_fused_add_0", "elementwise", False), ("triton_red_fused_sum_1", "reduction", False),
    ("triton_per_fused_native_layer_norm_0", "reduction", False), ("triton_tem_fused_mm_2", "gemm", True),
    ("triton_tem_fused_convolution_3", "conv", True), ("triton_tem_fused_flex_attention_4", "attention", True),
])
def test_triton_kernel_families(name: str, cat: str, tc: bool) -> None:
    f = lookup(name)
    assert f is not None and (f.category, f.tensor_core) == (cat, tc)


def test_duplicate_registration_is_an_error() -> None:
    with pytest.raises(ValueError):
        cf.register("aten::mm", category="gemm")(lambda call: cf.Cost(0.0, 0.0))


def test_docs_table_lists_every_elementwise_count() -> None:
    # docs/cost-model.md is the user-facing table: keep it in sync with ELEMENTWISE
    text = DOC.read_text()
    table = text[text.index("### elementwise"):text.index("### reductions")]
    documented: dict[str, int] = {}
    for m in re.finditer(r"^\| (\d+) \| (.+) \|$", table, re.M):
        for item in m.group(2).split(", "):
            head = re.sub(r" \(.*", "", item)
            base, _, rest = head.partition("/")
            names = [base] + [base.rsplit("_", 1)[0] + "_" + r for r in rest.split("/") if r] if rest else [base]
            for n in names:
                documented[n] = int(m.group(1))
    for name, (per, _) in cf.ELEMENTWISE.items():
        assert documented.get(name) == per, name


def test_formula_reads_by_name_when_bound_and_by_position_otherwise() -> None:
    f32 = DTYPE_BY_NAME["float32"]
    args = [Arg(cf.TENSOR, name="self", tensor=TensorSpec((2, 3), f32)), Arg(cf.SCALAR, name="dim", value=1,
                                                                             known=True)]
    bound = OpCall("aten::sum", args, bound=True)
    assert bound.value("dim", 1) == 1 and bound.arg("dtype", 2) is None
    unbound = OpCall("aten::sum", [Arg(a.kind, tensor=a.tensor, value=a.value, known=a.known) for a in args])
    assert unbound.value("dim", 1) == 1 and unbound.value("keepdim", 2) is cf.UNKNOWN
