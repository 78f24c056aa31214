"""Tests for the CPU linear-algebra kernels (onyxrt_cpu.kernels.linalg).

The onnx node conformance cases run straight through the registry; the rest compare with
onnxruntime or numpy truth: Gemm transposes/alpha/beta/C broadcasting (incl. old opsets,
integer and float16 types, prepacked constant B), MatMul's 1-D promotion and batch
broadcasting, MatMulInteger zero points, Einsum equations and Det.
"""

from __future__ import annotations

import numpy as np
import pytest
from kernel_cases import BF16, conformance_params, randn, run_case
from kernel_cases import op_output as ours
from kernel_cases import op_output_onnxruntime as onnxrt
from onnx import helper

from onyxrt.errors import InvalidGraph
from onyxrt.kernels import KernelInfo
from onyxrt_cpu.kernels import registry

OPS = ["Gemm", "MatMul", "MatMulInteger", "Einsum", "Det"]

# Conformance cases these kernels cannot pass, with the reason. None today.
XFAIL: dict[str, str] = {}


@pytest.mark.parametrize("case", conformance_params(OPS, XFAIL))
def test_conformance(case):
    run_case(case)


# --------------------------------------------------------------------- Gemm

GEMM_CASES = [
    ("plain", False, False, 1.0, 1.0, (3, 5)),
    ("transA", True, False, 1.0, 1.0, (5,)),
    ("transB_alpha_beta", False, True, 0.5, -2.0, (3, 1)),
    ("both_scalar_c", True, True, 2.0, 0.25, ()),
    ("row_c", False, True, 1.0, 1.0, (1, 5)),
    ("no_c", True, False, 1.5, 1.0, None),
    ("beta_zero", False, False, 1.0, 0.0, (3, 5)),
]


@pytest.mark.parametrize(
    ("trans_a", "trans_b", "alpha", "beta", "c_shape"),
    [c[1:] for c in GEMM_CASES],
    ids=[c[0] for c in GEMM_CASES],
)
@pytest.mark.parametrize("const_b", [False, True], ids=["b_input", "b_const"])
def test_gemm_matches_onnxruntime(trans_a, trans_b, alpha, beta, c_shape, const_b):
    a = randn((4, 3) if trans_a else (3, 4), 1)
    b = randn((5, 4) if trans_b else (4, 5), 2)
    c = None if c_shape is None else randn(c_shape, 3)
    attrs = {"transA": int(trans_a), "transB": int(trans_b), "alpha": alpha, "beta": beta}
    want = onnxrt("Gemm", [a, b, c], 13, **attrs)
    got = ours("Gemm", [a, b, c], 13, constants=(1,) if const_b else (), **attrs)
    assert got.dtype == np.float32 and got.shape == (3, 5)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_gemm_constant_b_still_uses_given_input():
    a, b1, b2 = randn((2, 3), 1), randn((3, 4), 2), randn((3, 4), 3)
    node = helper.make_node("Gemm", ["a", "b"], ["y"], transB=0)
    kdef, _ = registry.lookup("", "Gemm", 13)
    kernel = kdef.factory(KernelInfo.from_node(node, 13, constants={1: b1}))
    np.testing.assert_allclose(kernel.compute(a, b1)[0], a @ b1, rtol=1e-6)
    np.testing.assert_allclose(kernel.compute(a, b2)[0], a @ b2, rtol=1e-6)


@pytest.mark.parametrize("opset", [1, 6, 7, 9, 11])
def test_gemm_old_opsets(opset):
    a, b, c = randn((3, 4), 1), randn((4, 2), 2), randn((2,), 3)
    attrs = {"alpha": 0.5, "beta": 2.0, "transA": 0, "transB": 0}
    if opset < 7:
        attrs["broadcast"] = 1
    got = ours("Gemm", [a, b, c], opset, **attrs)
    np.testing.assert_allclose(got, 0.5 * (a @ b) + 2.0 * c, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint32, np.uint64])
def test_gemm_integer_types(dtype):
    rng = np.random.default_rng(4)
    a = rng.integers(0, 10, (3, 4)).astype(dtype)
    b = rng.integers(0, 10, (4, 2)).astype(dtype)
    c = rng.integers(0, 10, (2,)).astype(dtype)
    got = ours("Gemm", [a, b, c], 13)
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, a @ b + c)  # onnxruntime has no integer Gemm


@pytest.mark.parametrize("dtype", [np.float16, BF16, np.float64])
def test_gemm_low_and_high_precision(dtype):
    a, b, c = randn((8, 16), 1), randn((16, 4), 2), randn((4,), 3)
    want = (a.astype(np.float64) @ b.astype(np.float64)) * 0.5 + c
    got = ours("Gemm", [a.astype(dtype), b.astype(dtype), c.astype(dtype)], 13, alpha=0.5)
    assert got.dtype == dtype
    tol = 1e-10 if dtype == np.float64 else 5e-2
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol, atol=tol * 4)


def test_gemm_bad_shapes_are_clear():
    with pytest.raises(ValueError, match="inner dims"):
        ours("Gemm", [randn((2, 3)), randn((4, 5))], 13)
    with pytest.raises(ValueError, match="broadcast"):
        ours("Gemm", [randn((2, 3)), randn((3, 5)), randn((3,))], 13)


# ------------------------------------------------------------------- MatMul

MATMUL_SHAPES = [
    ((3, 4), (4, 5)),
    ((4,), (4, 5)),
    ((3, 4), (4,)),
    ((4,), (4,)),
    ((2, 1, 3, 4), (5, 4, 6)),
    ((7,), (2, 3, 7, 2)),
    ((2, 3, 3, 4), (4,)),
    ((1, 4), (2, 4, 3)),
]


@pytest.mark.parametrize(("sa", "sb"), MATMUL_SHAPES, ids=[f"{a}x{b}" for a, b in MATMUL_SHAPES])
def test_matmul_shapes_match_onnxruntime(sa, sb):
    a, b = randn(sa, 1), randn(sb, 2)
    want = onnxrt("MatMul", [a, b], 13)
    got = ours("MatMul", [a, b], 13)
    assert got.shape == want.shape == np.matmul(a, b).shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [np.float16, BF16, np.float64, np.int32, np.int64, np.uint32,
                                   np.uint64])  # fmt: skip
@pytest.mark.parametrize("const_b", [False, True])
def test_matmul_dtypes(dtype, const_b):
    rng = np.random.default_rng(5)
    a = rng.integers(0, 8, (2, 3, 6)).astype(np.float64)
    b = rng.integers(0, 8, (6, 4)).astype(np.float64)
    got = ours("MatMul", [a.astype(dtype), b.astype(dtype)], 13,
               constants=(1,) if const_b else ())  # fmt: skip
    assert got.dtype == dtype
    np.testing.assert_array_equal(got.astype(np.float64), a @ b)  # small ints: exact


@pytest.mark.parametrize("opset", [1, 9])
def test_matmul_old_opsets(opset):
    a, b = randn((2, 3, 4), 1), randn((4, 2), 2)
    np.testing.assert_allclose(ours("MatMul", [a, b], opset), a @ b, rtol=1e-5, atol=1e-6)


def test_matmul_float16_accumulates_in_float32():
    a = np.full((1, 4096), 1.0, np.float16)
    b = np.full((4096, 1), 1.0, np.float16)
    # 4096 is representable; a float16 accumulator would stall at 2048.
    assert ours("MatMul", [a, b], 13)[0, 0] == 4096


# ------------------------------------------------------------ MatMulInteger


@pytest.mark.parametrize("constant_b", [False, True], ids=["runtime-b", "constant-b"])
@pytest.mark.parametrize(("adt", "bdt"), [(np.uint8, np.uint8), (np.uint8, np.int8),
                                          (np.int8, np.int8), (np.int8, np.uint8)])  # fmt: skip
def test_matmulinteger_matches_onnxruntime(adt, bdt, constant_b):
    """A constant B (the weights) takes the int8 kernel where the CPU has one (csrc/qgemm.c,
    AVX-512 VNNI), a uint8 A or B shifted to u8 x s8; otherwise exact float32 GEMMs."""
    rng = np.random.default_rng(6)

    def rand(dt, shape):
        info = np.iinfo(dt)
        return rng.integers(info.min, info.max + 1, shape).astype(dt)

    a, b = rand(adt, (2, 5, 7)), rand(bdt, (7, 3))
    az, bz = np.array(11, adt), np.array(-3 if bdt == np.int8 else 200, bdt)
    want = onnxrt("MatMulInteger", [a, b, az, bz], 10, out_type=np.int32)
    consts = (1, 3) if constant_b else ()
    got = ours("MatMulInteger", [a, b, az, bz], 10, constants=consts)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, want)
    got_nozp = ours("MatMulInteger", [a, b], 10, constants=(1,) if constant_b else ())
    np.testing.assert_array_equal(got_nozp, a.astype(np.int64) @ b.astype(np.int64))


@pytest.mark.parametrize("constant_b", [False, True], ids=["runtime-b", "constant-b"])
@pytest.mark.parametrize(("m", "k", "n"), [(4, 6, 3), (37, 131, 70)])
def test_matmulinteger_per_row_and_per_column_zero_points(m, k, n, constant_b):
    rng = np.random.default_rng(7)
    a = rng.integers(0, 256, (m, k)).astype(np.uint8)
    b = rng.integers(0, 256, (k, n)).astype(np.uint8)
    az = rng.integers(0, 256, (m,)).astype(np.uint8)
    bz = rng.integers(0, 256, (n,)).astype(np.uint8)
    want = (a.astype(np.int64) - az[:, None]) @ (b.astype(np.int64) - bz)
    # onnxruntime: per-tensor a_zero_point only
    got = ours("MatMulInteger", [a, b, az, bz], 10, constants=(1, 3) if constant_b else ())
    np.testing.assert_array_equal(got, want)


def test_matmulinteger_batched_a_with_a_constant_b():
    rng = np.random.default_rng(9)
    a = rng.integers(-128, 128, (2, 3, 65, 200)).astype(np.int8)
    b = rng.integers(-128, 128, (200, 33)).astype(np.int8)
    az, bz = np.array(-7, np.int8), np.array(5, np.int8)
    want = (a.astype(np.int64) + 7) @ (b.astype(np.int64) - 5)
    np.testing.assert_array_equal(ours("MatMulInteger", [a, b, az, bz], 10, constants=(1, 3)), want)


@pytest.mark.parametrize(("adt", "bdt", "k"), [(np.uint8, np.int8, 3072), (np.uint8, np.uint8, 4099),
                                               (np.int8, np.int8, 1000), (np.int8, np.uint8, 600)])  # fmt: skip
@pytest.mark.parametrize("constant_b", [False, True], ids=["runtime-b", "constant-b"])
def test_matmulinteger_is_exact_at_the_extremes_over_long_sums(adt, bdt, k, constant_b):
    """The CPU multiplies in float32 over chunks of K: every partial sum must stay an exact
    integer, also when every term is as large as 8 bits allow (rows of extremes, a K far
    beyond one chunk), with a constant B shifted once or a B given at run time."""
    rng = np.random.default_rng(8)
    ai, bi = np.iinfo(adt), np.iinfo(bdt)
    a = np.stack([np.full(k, ai.max), np.full(k, ai.min), rng.integers(ai.min, ai.max + 1, k)]).astype(adt)
    b = np.stack([np.full(k, bi.min), np.full(k, bi.max), rng.integers(bi.min, bi.max + 1, k)], axis=1).astype(bdt)
    az, bz = np.array(ai.min, adt), np.array(bi.max, bdt)
    want = (a.astype(np.int64) - int(az)) @ (b.astype(np.int64) - int(bz))
    got = ours("MatMulInteger", [a, b, az, bz], 10, constants=(1, 3) if constant_b else ())
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, want)


# ------------------------------------------------------------------- Einsum

EINSUM_CASES = [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("...ij,...jk", [(2, 3, 4), (2, 4, 5)]),
    ("ii->i", [(4, 4)]),
    ("ij->", [(3, 4)]),
    ("i,j->ij", [(3,), (4,)]),
    ("abc,cd,de->abe", [(2, 3, 4), (4, 5), (5, 2)]),
    ("Ab,bC -> AC", [(3, 4), (4, 2)]),
    ("ij", [(3, 4)]),
    ("ji", [(3, 4)]),
]


@pytest.mark.parametrize(("eq", "shapes"), EINSUM_CASES, ids=[c[0] for c in EINSUM_CASES])
def test_einsum_matches_onnxruntime(eq, shapes):
    inputs = [randn(s, i) for i, s in enumerate(shapes)]
    want = onnxrt("Einsum", inputs, 12, equation=eq)
    got = ours("Einsum", inputs, 12, equation=eq)
    assert got.dtype == np.float32 and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float16, BF16, np.float64])
def test_einsum_dtypes(dtype):
    rng = np.random.default_rng(8)
    a = rng.integers(-4, 5, (2, 3, 4)).astype(np.float64)
    b = rng.integers(-4, 5, (2, 4, 3)).astype(np.float64)
    got = ours("Einsum", [a.astype(dtype), b.astype(dtype)], 28, equation="bij,bjk->bik")
    assert got.dtype == dtype
    np.testing.assert_array_equal(got.astype(np.float64), a @ b)


def test_einsum_requires_equation():
    node = helper.make_node("Einsum", ["a"], ["y"], name="bad_einsum")
    kdef, _ = registry.lookup("", "Einsum", 12)
    with pytest.raises(InvalidGraph, match="bad_einsum"):
        kdef.factory(KernelInfo.from_node(node, 12))


# ---------------------------------------------------------------------- Det


@pytest.mark.parametrize("shape", [(3, 3), (2, 4, 4), (2, 1, 2, 2)])
def test_det_matches_onnxruntime(shape):
    x = randn(shape, 9)
    want = onnxrt("Det", [x], 11)
    got = ours("Det", [x], 11)
    assert got.shape == shape[:-2] and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dtype", [np.float16, BF16, np.float64])
def test_det_dtypes(dtype):
    x = np.array([[[2.0, 1.0], [1.0, 3.0]], [[1.0, 2.0], [3.0, 4.0]]])
    got = ours("Det", [x.astype(dtype)], 22)
    assert got.dtype == dtype and got.shape == (2,)
    np.testing.assert_allclose(got.astype(np.float64), [5.0, -2.0], rtol=1e-2)
