"""Tests of the library's linear algebra (onyxrt_ops.linalg): MatMul, Gemm, MatMulInteger,
Det and Einsum.

Every operator runs over numpy and over array_api_strict and is compared with onnxruntime
(or onnx's reference evaluator where onnxruntime has no kernel): shapes (1-D promotion,
batch broadcasting), Gemm's transposes/alpha/beta/C broadcasting and old versions, a
constant C folded at creation, integer types, zero points. Half-precision types run over
numpy. Shape errors are ValueError.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pytest
from library_harness import Bound, assert_matches, bind, oracle, typed_oracle, unbound_versions
from onnx import TensorProto, helper

from onyxrt.dtypes import np_dtype
from onyxrt.errors import InvalidGraph
from onyxrt.kernels import KernelInfo
from onyxrt_ops import library

BF16 = np_dtype(TensorProto.BFLOAT16)


def randn(*shape: int, seed: int = 0, dtype: Any = np.float32) -> np.ndarray:
    """Seeded standard-normal values."""
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def randint(*shape: int, lo: int = -9, hi: int = 10, seed: int = 0, dtype: Any = np.int32):
    """Seeded integers in [lo, hi)."""
    return np.random.default_rng(seed).integers(lo, hi, shape).astype(dtype)


f64 = functools.partial(randn, dtype=np.float64)
u8 = functools.partial(randint, lo=0, hi=256, dtype=np.uint8)
i8 = functools.partial(randint, lo=-128, hi=128, dtype=np.int8)


def case(op: str, inputs: list[Any], opset: int, *, id: str | None = None, **attrs: Any) -> Any:
    return pytest.param(op, inputs, opset, attrs, id=id or f"{op}-{opset}")


CASES = [
    case("MatMul", [randn(3, 4), randn(4, 5, seed=1)], 13),
    case("MatMul", [randn(2, 3, 4), randn(4, 5, seed=1)], 13, id="MatMul-batched-2d"),
    case("MatMul", [randn(2, 1, 3, 4), randn(5, 4, 2, seed=1)], 13, id="MatMul-broadcast"),
    case("MatMul", [randn(4), randn(2, 4, 3, seed=1)], 9, id="MatMul-9-1d-a"),
    case("MatMul", [randn(3, 4), randn(4, seed=1)], 1, id="MatMul-1-1d-b"),
    case("MatMul", [randn(4), randn(4, seed=1)], 13, id="MatMul-vectors"),
    case("MatMul", [f64(3, 4), f64(4, 2, seed=1)], 13, id="MatMul-f64"),
    case("MatMul", [randint(3, 4), randint(4, 2, seed=1)], 13, id="MatMul-int32"),
    case("MatMul", [randint(3, 4, dtype=np.uint64, lo=0), randint(4, 2, seed=1, lo=0, dtype=np.uint64)],
         13, id="MatMul-uint64"),
    case("Gemm", [randn(3, 4), randn(4, 5, seed=1), randn(3, 5, seed=2)], 13),
    case("Gemm", [randn(4, 3), randn(5, 4, seed=1), randn(5, seed=2)], 13, transA=1, transB=1,
         alpha=0.5, beta=-2.0, id="Gemm-trans-alpha-beta"),
    case("Gemm", [randn(3, 4), randn(5, 4, seed=1), randn(3, 1, seed=2)], 11, transB=1, id="Gemm-11-column-c"),
    case("Gemm", [randn(3, 4), randn(4, 5, seed=1), np.float32(1.5)], 13, beta=0.25, id="Gemm-scalar-c"),
    case("Gemm", [randn(3, 4), randn(4, 5, seed=1)], 11, alpha=2.0, id="Gemm-11-no-c"),
    case("Gemm", [randn(3, 4), randn(4, 5, seed=1), randn(3, 5, seed=2)], 13, beta=0.0, id="Gemm-beta-0"),
    case("Gemm", [randn(3, 4), randn(4, 5, seed=1), randn(5, seed=2)], 6, broadcast=1, id="Gemm-6"),
    case("Gemm", [f64(3, 4), f64(4, 5, seed=1), f64(1, 5, seed=2)], 9, id="Gemm-9-f64"),
    case("Gemm", [randint(3, 4), randint(4, 2, seed=1), randint(2, seed=2)], 13, alpha=2.0, beta=3.0,
         id="Gemm-int32"),
    case("Det", [randn(3, 3)], 22),
    case("Det", [randn(2, 4, 4, 4)], 11, id="Det-batched"),
    case("Det", [f64(5, 5)], 22, id="Det-f64"),
]  # fmt: skip

_TOL = {np.dtype(np.float32): (1e-5, 1e-5), np.dtype(np.float64): (1e-12, 1e-12)}


@pytest.mark.parametrize(("op", "inputs", "opset", "attrs"), CASES)
def test_same_as_onnxruntime(bound: Bound, op, inputs, opset, attrs):
    assert_matches(bound.run(op, inputs, opset, **attrs), oracle(op, inputs, opset, **attrs), _TOL)


MATMUL_INTEGER = [
    pytest.param([u8(3, 4), u8(4, 5, seed=1)], id="uint8-no-zero-points"),
    pytest.param([u8(3, 4), i8(4, 5, seed=1), np.uint8(12)], id="uint8-int8-a-zp"),
    pytest.param([i8(3, 4), u8(4, 5, seed=1), np.int8(-3), np.uint8(200)], id="int8-uint8-both"),
    pytest.param([u8(2, 3, 4), i8(4, 5, seed=1), np.uint8(7), np.int8(-1)], id="batched"),
]


@pytest.mark.parametrize("inputs", MATMUL_INTEGER)
def test_matmul_integer_same_as_onnxruntime(bound: Bound, inputs):
    got = bound.run("MatMulInteger", inputs, 10)
    assert_matches(got, typed_oracle("MatMulInteger", inputs, 10, np.int32), _TOL)


def test_matmul_integer_per_row_and_per_column_zero_points(bound: Bound):
    """A's zero point per row, B's per column (onnxruntime takes scalars only)."""
    a, b, za, zb = u8(3, 4), u8(4, 5, seed=1), u8(3, seed=2), u8(5, seed=3)
    got = bound.run("MatMulInteger", [a, b, za, zb], 10)
    want = (a.astype(np.int32) - za.astype(np.int32)[:, None]) @ (b.astype(np.int32) - zb.astype(np.int32))
    assert_matches(got, want, _TOL)


def test_every_operator_has_a_case():
    defined = {d.op_type for d in library.definitions if d.cls.__module__ == "onyxrt_ops.linalg"}
    assert {p.values[0] for p in CASES} | {"MatMulInteger", "Einsum"} == defined


def test_every_onnx_version_is_bound(numpy_bound: Bound):
    assert not unbound_versions(numpy_bound.registry, ("MatMul", "Gemm", "MatMulInteger", "Det", "Einsum"))


# ------------------------------------------------------------------ Einsum

EINSUM = [
    pytest.param("ij,jk->ik", [randn(3, 4), randn(4, 5, seed=1)], id="matmul"),
    pytest.param("bij,bjk->bik", [randn(2, 3, 4), randn(2, 4, 5, seed=1)], id="batched"),
    pytest.param("...ij,...jk", [randn(2, 3, 4), randn(2, 4, 5, seed=1)], id="ellipsis-implicit"),
    pytest.param("ij->ji", [randn(3, 4)], id="transpose"),
    pytest.param("ii->i", [randn(4, 4)], id="diagonal"),
    pytest.param("i,i", [randn(5), randn(5, seed=1)], id="inner-scalar"),
    pytest.param("i j , j -> i", [randn(3, 4), randn(4, seed=1)], id="spaces"),
    pytest.param("ij,jk,kl->il", [randn(2, 3), randn(3, 4, seed=1), randn(4, 2, seed=2)], id="three-operands"),
    pytest.param("ij->i", [randint(3, 4)], id="int32-sum"),
    pytest.param("ij,jk->ik", [f64(3, 4), f64(4, 2, seed=1)], id="float64"),
    pytest.param("ij,jk->ik", [randn(3, 0), randn(0, 2, seed=1)], id="empty-contraction"),
]


@pytest.mark.parametrize(("equation", "inputs"), EINSUM)
def test_einsum_same_as_onnxruntime(numpy_bound: Bound, equation, inputs):
    got = numpy_bound.run("Einsum", inputs, 12, equation=equation)
    assert_matches(got, oracle("Einsum", inputs, 12, equation=equation), _TOL)


def test_einsum_half_types_multiply_in_float32(numpy_bound: Bound):
    a, b = randn(3, 8, dtype=np.float16), randn(8, 2, seed=1, dtype=np.float16)
    got = numpy_bound.run("Einsum", [a, b], 12, equation="ij,jk->ik")
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got, (a.astype(np.float32) @ b.astype(np.float32)).astype(np.float16))
    got = numpy_bound.run("Einsum", [a.astype(BF16), b.astype(BF16)], 28, equation="ij,jk->ik")
    assert got.dtype == BF16


def test_einsum_is_not_offered_without_the_einsum_extra(strict_bound: Bound):
    """The standard has no einsum: a backend without the extra refuses the node with that
    reason (at capability time), never fails when it runs."""
    kdef, reason = strict_bound.registry.lookup("", "Einsum", 12)
    assert kdef is None and reason.endswith("Einsum: array_api_strict lacks einsum"), reason


def test_einsum_errors(numpy_bound: Bound):
    with pytest.raises(InvalidGraph, match="Einsum node 'Einsum_node': attribute 'equation' is required"):
        numpy_bound.kernel(helper.make_node("Einsum", ["a"], ["y"], name="Einsum_node"), 12)
    kernel = numpy_bound.kernel(helper.make_node("Einsum", [], ["y"], name="e", equation="->"), 12)
    with pytest.raises(ValueError, match="at least one input"):
        kernel.compute()
    with pytest.raises(ValueError):  # operands that do not fit the equation
        numpy_bound.run("Einsum", [randn(3, 4), randn(5, 2)], 12, equation="ij,jk->ik")


def test_einsum_over_the_gpu_backend():
    """The GPU providers bind Einsum over ``cupy.einsum``: under the simulated CuPy it
    gives the numpy backend's results."""
    from onyxrt_gpu.kernels._common import BACKEND
    from onyxrt_gpu.testing.simulated_cupy import install

    with install():
        import cupy

        gpu = bind("cupy", BACKEND)
        gpu.array = cupy.asarray  # type: ignore[method-assign]
        gpu.host = lambda value: value.get()  # type: ignore[method-assign]
        for p in EINSUM:
            equation, inputs = p.values
            want = oracle("Einsum", inputs, 12, equation=equation)
            assert_matches(gpu.run("Einsum", inputs, 12, equation=equation), want, _TOL)


# ------------------------------------------------------------------ constant C


@pytest.mark.parametrize(("c", "beta"), [(randn(5, seed=2), 0.5), (randint(5, seed=2), -2.0)],
                         ids=["float32", "int32"])
def test_gemm_scales_a_constant_c_once(bound: Bound, c, beta):
    a, b = (randn(3, 4), randn(4, 5, seed=1)) if c.dtype.kind == "f" else (randint(3, 4), randint(4, 5, seed=1))
    n = helper.make_node("Gemm", ["a", "b", "c"], ["y"], name="gemm", beta=beta)
    kdef, _ = bound.registry.lookup("", "Gemm", 13)
    kernel = kdef.factory(KernelInfo.from_node(n, 13, since_version=13, constants={2: c}))
    assert kernel.c_scaled is not None
    (y,) = kernel.compute(*[bound.array(v) for v in (a, b, c)])
    assert_matches(bound.host(y), oracle("Gemm", [a, b, c], 13, beta=beta), _TOL)


def test_gemm_integer_scaling_truncates_toward_zero(bound: Bound):
    """alpha * (A @ B) of integers keeps their type, truncated toward zero (the CPU
    provider's reading; onnxruntime rounds differently)."""
    a, b = np.array([[1, -3]], np.int32), np.array([[1], [0]], np.int32)
    got = bound.run("Gemm", [a, b, np.array([[-3]], np.int32)], 13, alpha=2.5, beta=0.5)
    np.testing.assert_array_equal(got, [[int(2.5 * 1) + int(-3 * 0.5)]])


# ----------------------------------------------------------------- half precision


@pytest.mark.parametrize("half", [np.float16, BF16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize(
    ("op", "shapes", "attrs"),
    [("MatMul", [(2, 3, 64), (64, 4)], {}), ("Gemm", [(64, 3), (5, 64), (5,)], {"transA": 1, "transB": 1}),
     ("Det", [(2, 3, 3)], {})],
)  # fmt: skip
def test_half_types_accumulate_in_float32(numpy_bound: Bound, op, shapes, attrs, half):
    """float16/bfloat16 are multiplied in float32 and rounded once: the result is the
    float32 product rounded (numpy: the standard has neither type)."""
    inputs = [randn(*s, seed=i).astype(half) for i, s in enumerate(shapes)]
    got = numpy_bound.run(op, inputs, 13 if op != "Det" else 22, **attrs)
    want = numpy_bound.run(op, [v.astype(np.float32) for v in inputs], 13 if op != "Det" else 22, **attrs)
    assert got.dtype == half
    np.testing.assert_array_equal(got, want.astype(half))


# -------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("op", "inputs", "opset", "attrs", "match"),
    [
        ("MatMul", [np.float32(1), randn(3)], 13, {}, "rank >= 1"),
        ("Gemm", [randn(2, 3, 4), randn(4, 5)], 13, {}, "must be 2-D"),
        ("Gemm", [randn(2, 3), randn(4, 5)], 13, {}, "inner dims differ"),
        ("Gemm", [randn(2, 3), randn(5, 3)], 13, {}, "inner dims differ"),
        ("Gemm", [randn(2, 3), randn(3, 5), randn(3)], 13, {}, "broadcast"),
        ("Det", [randn(2, 3)], 22, {}, r"\[..., M, M\]"),
        ("Det", [randn(3)], 22, {}, r"\[..., M, M\]"),
    ],
)  # fmt: skip
def test_bad_data_is_a_value_error(bound: Bound, op, inputs, opset, attrs, match):
    with pytest.raises(ValueError, match=match):
        bound.run(op, inputs, opset, **attrs)
