"""Tests for the CPU elementwise kernels (onyxrt_cpu.kernels.elementwise).

The onnx node conformance cases run straight through the registry; targeted tests cover what
they leave out (old opset versions with legacy broadcasting, float16/bfloat16, integer
division and powers, Cast to and from strings, float8 saturation, erf accuracy), checked
against onnxruntime or numpy truth.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import ml_dtypes
import numpy as np
import onnx
import pytest
from kernel_cases import (
    BF16,
    assert_all_versions_registered,
    conformance_params,
    input_names,
    one_node,
    one_node_model,
    randn,
    run_case,
)
from kernel_cases import op_output as ours
from kernel_cases import op_output_onnxruntime as onnxrt
from onnx import TensorProto, numpy_helper

import onyxrt
from onyxrt.dtypes import np_dtype, onnx_elem_type
from onyxrt.errors import InvalidGraph
from onyxrt_cpu.kernels._special import erf, erf_float32
from onyxrt_cpu.kernels.elementwise import cast_array

OPS = [
    "Add", "Sub", "Mul", "Div", "Pow", "Mod", "Sqrt", "Neg", "Reciprocal", "Abs", "Exp", "Log",
    "Floor", "Ceil", "Round", "Sign", "Erf", "Min", "Max", "Sum", "Mean", "Sin", "Cos", "Tan",
    "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh", "IsNaN", "IsInf",
    "BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitwiseNot", "Cast", "CastLike",
]  # fmt: skip

# Conformance cases these kernels cannot pass, with the reason. None today.
XFAIL: dict[str, str] = {}


def _to_numpy(value):
    if isinstance(value, onnx.TensorProto):
        return numpy_helper.to_array(value)
    if isinstance(value, list):
        return [_to_numpy(v) for v in value]
    return value


def _numpy_case(case):
    """The case with TensorProto data turned into arrays.

    Some generated cases (all of Cast/CastLike) keep their inputs and outputs as
    ``TensorProto`` objects in ``data_sets``; a session gets arrays, so convert here.
    """
    data = [(_to_numpy(list(i)), _to_numpy(list(o))) for i, o in case.data_sets]
    return dataclasses.replace(case, data_sets=data)


@pytest.mark.parametrize("case", conformance_params(OPS, XFAIL))
def test_conformance(case):
    run_case(_numpy_case(case))


def test_every_schema_version_is_registered():
    assert_all_versions_registered(OPS)


# ----------------------------------------------------------------- helpers


_randn = functools.partial(randn, scale=3.0)


def _randint(shape, dtype, seed=0, lo=None, hi=None):
    info = np.iinfo(dtype)
    lo = max(info.min, -1000) if lo is None else lo
    hi = min(info.max, 1000) if hi is None else hi
    return np.random.default_rng(seed).integers(lo, hi, size=shape, endpoint=True).astype(dtype)


INT_TYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]
SIGNED = [np.int8, np.int16, np.int32, np.int64]


# ----------------------------------------------------------------- erf


def test_erf_accuracy_against_math_erf():
    x = np.concatenate(
        [
            np.linspace(-8, 8, 400_001),
            _randn((100_000,), seed=5, scale=2.0, dtype=np.float64),
            [0.0, -0.0, 0.46875, -0.46875, 4.0, -4.0, 5.9, 6.0, 27.0, 1e-300, 5e-324, 1e10],
        ]
    )
    want = np.array([math.erf(v) for v in x])
    got = erf(x)
    assert got.dtype == np.float64 and got.shape == x.shape
    err = np.max(np.abs(got - want))
    assert err < 1e-7
    # The shared erf (kernels/_special.py, also behind Gelu) documents ~1e-14 in float64;
    # Erf's outputs are float32/float16 in practice, where 1e-7 is already below an ulp.
    assert err < 1e-13


def test_erf_special_values():
    got = erf(np.array([[np.nan, np.inf], [-np.inf, -0.0]]))
    assert np.isnan(got[0, 0]) and got[0, 1] == 1.0 and got[1, 0] == -1.0
    assert got[1, 1] == 0.0 and math.copysign(1.0, got[1, 1]) == -1.0


def test_float32_erf_within_three_ulps():
    # The float32 path (Erf and Gelu on float32) runs in float32 without masks; over a dense
    # grid and down to the smallest normals it stays within 3 ulps of the float64 erf.
    x = np.concatenate([np.linspace(-6, 6, 600_001), np.geomspace(1e-38, 6, 100_000)])
    x = x.astype(np.float32)
    want = erf(x.astype(np.float64))
    got = erf_float32(x)
    assert got.dtype == np.float32
    rel = np.abs(got - want) / np.maximum(np.abs(want), 1e-38)
    assert rel.max() < 3 * np.finfo(np.float32).eps
    special = erf_float32(np.array([np.nan, np.inf, -np.inf, -0.0], np.float32))
    assert np.isnan(special[0]) and list(special[1:3]) == [1.0, -1.0]
    assert special[3] == 0.0 and math.copysign(1.0, special[3]) == -1.0


@pytest.mark.parametrize("exponent", [0.5, 1.0, 2.0, 3.0, 2.5])
def test_pow_constant_exponent_fast_paths(exponent):
    # Constant exponents 0.5/1/2/3 use sqrt or multiplication; the result is within an ulp
    # or two of numpy's pow (onnxruntime special-cases the same exponents).
    x = np.abs(_randn((4, 50), seed=8, scale=3.0)) + 0.1
    y = np.array(exponent, np.float32)
    got = ours("Pow", [x, y], 15, constants=(1,))
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, np.power(x.astype(np.float64), exponent), rtol=3e-7)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, BF16])
def test_erf_kernel_keeps_dtype(dtype):
    x = _randn((3, 40), seed=6, scale=2.0).astype(dtype)
    got = ours("Erf", [x], 13)
    assert got.dtype == dtype
    want = np.array([math.erf(float(v)) for v in x.astype(np.float64).ravel()]).reshape(x.shape)
    eps = float(ml_dtypes.finfo(dtype).eps)  # within an ulp or two of the true value
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=2 * eps, atol=1e-300)


# ----------------------------------------------------------------- Add/Sub/Mul/Div


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, np.int32, np.int64])
def test_arith_broadcast_vs_ort(op, dtype):
    if np.dtype(dtype).kind == "f":
        a = _randn((2, 3, 4), seed=1).astype(dtype)
        b = _randn((3, 1), seed=2).astype(dtype)
    else:
        a = _randint((2, 3, 4), dtype, seed=1)
        b = _randint((3, 1), dtype, seed=2, lo=1, hi=50)
        b[0, 0] = -7
    got = ours(op, [a, b], 14)
    assert got.dtype == dtype and got.shape == (2, 3, 4)
    np.testing.assert_allclose(
        got, onnxrt(op, [a, b], 14), rtol=1e-3 if dtype == np.float16 else 1e-6
    )


@pytest.mark.parametrize("dtype", SIGNED)
def test_integer_div_truncates_toward_zero(dtype):
    a = np.array([7, -7, 7, -7, 0, 1, -1, 6, -6], dtype=dtype)
    b = np.array([2, 2, -2, -2, 3, 3, 3, -3, -3], dtype=dtype)
    got = ours("Div", [a, b], 14)
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, [3, -3, -3, 3, 0, 0, 0, -2, 2])
    np.testing.assert_array_equal(got, onnxrt("Div", [a, b], 14))


@pytest.mark.parametrize("dtype", INT_TYPES)
def test_integer_div_by_zero_does_not_crash(dtype):
    a = np.array([5, 0, 3], dtype=dtype)
    b = np.array([0, 0, 1], dtype=dtype)
    got = ours("Div", [a, b], 14)
    assert got.dtype == dtype and got.shape == (3,)
    assert got[2] == 3
    got = ours("Mod", [a, b], 13)
    assert got.dtype == dtype and got.shape == (3,)
    got = ours("Mod", [a, b], 13, fmod=1)
    assert got.shape == (3,)


def test_int_min_div_minus_one_does_not_crash():
    a = np.array([np.iinfo(np.int32).min], dtype=np.int32)
    got = ours("Div", [a, np.array([-1], dtype=np.int32)], 14)
    assert got.dtype == np.int32


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
def test_bfloat16_arith_rounds_float32_result(op):
    a = _randn((50,), seed=3).astype(BF16)
    b = _randn((50,), seed=4).astype(BF16)
    got = ours(op, [a, b], 14)
    assert got.dtype == BF16
    fn = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide}[op]
    want = fn(a.astype(np.float32), b.astype(np.float32)).astype(BF16)
    np.testing.assert_array_equal(got.astype(np.float32), want.astype(np.float32))


def test_integer_add_wraps():
    a = np.array([127, -128], dtype=np.int8)
    got = ours("Add", [a, np.array([1, -1], dtype=np.int8)], 14)
    np.testing.assert_array_equal(got, np.array([-128, 127], dtype=np.int8))


def test_zero_dim_inputs_give_arrays():
    a = np.array(2.0, dtype=np.float32)
    for op in ("Add", "Mul", "Pow", "Div"):
        got = ours(op, [a, a], 14 if op != "Pow" else 15)
        assert isinstance(got, np.ndarray) and got.shape == () and got.dtype == np.float32
    got = ours("Sqrt", [a], 13)
    assert isinstance(got, np.ndarray) and got.shape == ()


# ----------------------------------------------------------------- legacy broadcasting


@pytest.mark.parametrize("opset", [1, 6])
def test_legacy_broadcast_with_axis(opset):
    a = _randn((2, 3, 4, 5), seed=7)
    b = _randn((3, 4), seed=8)
    got = ours("Add", [a, b], opset, broadcast=1, axis=1)
    np.testing.assert_allclose(got, a + b[None, :, :, None])
    b0 = _randn((2,), seed=9)
    got = ours("Mul", [a, b0], opset, broadcast=1, axis=0)
    np.testing.assert_allclose(got, a * b0[:, None, None, None])


def test_legacy_broadcast_suffix_and_one_element():
    a = _randn((2, 3, 4), seed=10)
    b = _randn((3, 4), seed=11)
    np.testing.assert_allclose(ours("Sub", [a, b], 6, broadcast=1), a - b)
    one = np.array([[2.0]], dtype=np.float32)
    got = ours("Pow", [a[0, 0], one], 1, broadcast=1)
    assert got.shape == (4,)
    np.testing.assert_allclose(got, a[0, 0] ** 2, rtol=1e-6)


def test_legacy_no_broadcast_requires_equal_shapes():
    a = _randn((2, 3), seed=12)
    np.testing.assert_allclose(ours("Div", [a, a + 10], 6), a / (a + 10))
    with pytest.raises(ValueError, match="broadcast"):
        ours("Add", [a, a[0]], 6)


# ----------------------------------------------------------------- Pow


@pytest.mark.parametrize(
    ("xdt", "ydt"),
    [
        (np.float32, np.float32),
        (np.float32, np.int64),
        (np.float32, np.int32),
        (np.float64, np.float32),
        (np.float16, np.float16),
        (np.float16, np.float32),
        (np.int64, np.int64),
        (np.int32, np.int32),
        (np.int32, np.float32),
        (np.int64, np.float64),
    ],
)
def test_pow_types_vs_ort(xdt, ydt):
    if np.dtype(xdt).kind == "f":
        x = np.abs(_randn((3, 4), seed=13)).astype(xdt) + xdt(0.5)
    else:
        x = _randint((3, 4), xdt, seed=13, lo=-6, hi=6)
    y = _randint((4,), np.int32, seed=14, lo=0, hi=4).astype(ydt)
    got = ours("Pow", [x, y], 15)
    assert got.dtype == xdt
    rtol = 2e-3 if xdt == np.float16 else 1e-6
    np.testing.assert_allclose(got, onnxrt("Pow", [x, y], 15), rtol=rtol)


def test_pow_int_negative_exponent():
    x = np.array([1, -1, -1, 2, -3, 0, 5], dtype=np.int64)
    y = np.array([-2, -3, -2, -1, -2, 3, 0], dtype=np.int64)
    got = ours("Pow", [x, y], 15)
    np.testing.assert_array_equal(got, [1, -1, 1, 0, 0, 0, 1])


# ----------------------------------------------------------------- Mod


@pytest.mark.parametrize("dtype", INT_TYPES)
@pytest.mark.parametrize("fmod", [0, 1])
def test_mod_integers_vs_ort(dtype, fmod):
    a = _randint((40,), dtype, seed=15)
    b = _randint((40,), dtype, seed=16, lo=1, hi=30)
    if np.dtype(dtype).kind == "i":
        b[::3] = -b[::3]
    got = ours("Mod", [a, b], 13, fmod=fmod)
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, onnxrt("Mod", [a, b], 13, fmod=fmod))


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_mod_float_fmod_vs_ort(dtype):
    a = _randn((50,), seed=17, scale=10).astype(dtype)
    b = _randn((50,), seed=18, scale=3).astype(dtype)
    got = ours("Mod", [a, b], 13, fmod=1)
    assert got.dtype == dtype
    np.testing.assert_allclose(got, onnxrt("Mod", [a, b], 13, fmod=1), rtol=1e-3, atol=1e-3)


def test_mod_python_sign_semantics():
    a = np.array([5, -5, 5, -5], dtype=np.int32)
    b = np.array([3, 3, -3, -3], dtype=np.int32)
    np.testing.assert_array_equal(ours("Mod", [a, b], 13), [2, 1, -1, -2])
    np.testing.assert_array_equal(ours("Mod", [a, b], 13, fmod=1), [2, -2, 2, -2])


def test_mod_rejects_bad_fmod():
    with pytest.raises(InvalidGraph, match="fmod"):
        ours("Mod", [np.ones(2, np.int32), np.ones(2, np.int32)], 13, fmod=2)


# ----------------------------------------------------------------- unary math

UNARY = {
    "Sqrt": (13, 0.0, 4.0, np.sqrt),
    "Reciprocal": (13, 0.5, 4.0, np.reciprocal),
    "Exp": (13, -4.0, 4.0, np.exp),
    "Log": (13, 0.1, 10.0, np.log),
    "Floor": (13, -5.0, 5.0, np.floor),
    "Ceil": (13, -5.0, 5.0, np.ceil),
    "Round": (11, -5.0, 5.0, np.rint),
    "Neg": (13, -5.0, 5.0, np.negative),
    "Abs": (13, -5.0, 5.0, np.abs),
    "Sign": (13, -5.0, 5.0, np.sign),
    "Sin": (7, -4.0, 4.0, np.sin),
    "Cos": (7, -4.0, 4.0, np.cos),
    "Tan": (7, -1.4, 1.4, np.tan),
    "Asin": (7, -1.0, 1.0, np.arcsin),
    "Acos": (7, -1.0, 1.0, np.arccos),
    "Atan": (7, -5.0, 5.0, np.arctan),
    "Sinh": (9, -4.0, 4.0, np.sinh),
    "Cosh": (9, -4.0, 4.0, np.cosh),
    "Asinh": (9, -5.0, 5.0, np.arcsinh),
    "Acosh": (9, 1.0, 5.0, np.arccosh),
    "Atanh": (9, -0.99, 0.99, np.arctanh),
    "Erf": (13, -3.0, 3.0, np.vectorize(math.erf)),
}


@pytest.mark.parametrize("op", sorted(UNARY))
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_unary_vs_ort_and_numpy(op, dtype):
    opset, lo, hi, fn = UNARY[op]
    x = np.linspace(lo, hi, 97).astype(dtype).reshape(97, 1)
    if op in ("Round", "Floor", "Ceil"):
        x[:9, 0] = [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 2.4999, -0.0, 3.0]
    got = ours(op, [x], opset)
    assert got.dtype == dtype and got.shape == x.shape
    tol = 2e-3 if dtype == np.float16 else 1e-6 if dtype == np.float32 else 1e-14
    # truth: the float64 function rounded to the type
    want = fn(x.astype(np.float64)).astype(dtype)
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    if dtype == np.float32:  # onnxruntime implements these for float32
        np.testing.assert_allclose(got, onnxrt(op, [x], opset), rtol=tol, atol=tol)


@pytest.mark.parametrize("op", ["Sqrt", "Exp", "Sin", "Round", "Abs", "Neg", "Atanh"])
def test_unary_bfloat16(op):
    x = np.linspace(0.05, 0.95, 31).astype(BF16)
    got = ours(op, [x], 22 if op in ("Sin", "Atanh", "Round") else 13)
    assert got.dtype == BF16
    fn = {
        "Sqrt": np.sqrt, "Exp": np.exp, "Sin": np.sin, "Round": np.rint, "Abs": np.abs,
        "Neg": np.negative, "Atanh": np.arctanh,
    }[op]  # fmt: skip
    want = fn(x.astype(np.float32)).astype(BF16)
    np.testing.assert_array_equal(got.astype(np.float32), want.astype(np.float32))


@pytest.mark.parametrize("op", ["Neg", "Abs", "Sign"])
@pytest.mark.parametrize("dtype", SIGNED)
def test_unary_integers_vs_ort(op, dtype):
    x = _randint((30,), dtype, seed=19)
    x[0] = 0
    got = ours(op, [x], 13)
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, onnxrt(op, [x], 13))


@pytest.mark.parametrize("dtype", [np.uint8, np.uint64])
def test_abs_sign_unsigned(dtype):
    x = np.array([0, 1, 200], dtype=dtype)
    np.testing.assert_array_equal(ours("Abs", [x], 13), x)
    np.testing.assert_array_equal(ours("Sign", [x], 13), np.array([0, 1, 1], dtype=dtype))


def test_sqrt_log_of_negative_give_nan_quietly():
    x = np.array([-1.0, 0.0], dtype=np.float32)
    with np.errstate(all="raise"):
        s = ours("Sqrt", [x], 13)
        lg = ours("Log", [x], 13)
    assert np.isnan(s[0]) and s[1] == 0
    assert np.isnan(lg[0]) and lg[1] == -np.inf


# ----------------------------------------------------------------- IsNaN/IsInf


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, BF16])
def test_isnan_isinf(dtype):
    x = np.array([1.0, np.nan, np.inf, -np.inf, 0.0], dtype=np.float32).astype(dtype)
    np.testing.assert_array_equal(ours("IsNaN", [x], 20), [False, True, False, False, False])
    np.testing.assert_array_equal(ours("IsInf", [x], 20), [False, False, True, True, False])
    pos = ours("IsInf", [x], 20, detect_negative=0)
    np.testing.assert_array_equal(pos, [False, False, True, False, False])
    neg = ours("IsInf", [x], 10, detect_positive=0)
    np.testing.assert_array_equal(neg, [False, False, False, True, False])


def test_isnan_isinf_float8():
    x = np.array([1.0, np.nan, 2.0], dtype=np.float32).astype(ml_dtypes.float8_e4m3fn)
    np.testing.assert_array_equal(ours("IsNaN", [x], 20), [False, True, False])
    y = np.array([1.0, np.inf, -np.inf], dtype=np.float32).astype(ml_dtypes.float8_e5m2)
    np.testing.assert_array_equal(ours("IsInf", [y], 20), [False, True, True])


# ----------------------------------------------------------------- Min/Max/Sum/Mean


@pytest.mark.parametrize("op", ["Min", "Max", "Sum", "Mean"])
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_variadic_broadcast_vs_ort(op, dtype):
    a = _randn((2, 3, 4), seed=20).astype(dtype)
    b = _randn((3, 1), seed=21).astype(dtype)
    c = _randn((4,), seed=22).astype(dtype)
    got = ours(op, [a, b, c], 13)
    assert got.dtype == dtype and got.shape == (2, 3, 4)
    tol = 2e-3 if dtype == np.float16 else 1e-6
    f = [v.astype(np.float64) for v in (a, b, c)]
    want = {
        "Min": lambda: np.minimum(np.minimum(f[0], f[1]), f[2]),
        "Max": lambda: np.maximum(np.maximum(f[0], f[1]), f[2]),
        "Sum": lambda: f[0] + f[1] + f[2],
        "Mean": lambda: (f[0] + f[1] + f[2]) / 3,
    }[op]()
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    if dtype == np.float32:
        np.testing.assert_allclose(got, onnxrt(op, [a, b, c], 13), rtol=tol, atol=tol)


@pytest.mark.parametrize("op", ["Min", "Max"])
@pytest.mark.parametrize("dtype", INT_TYPES)
def test_min_max_integers_vs_ort(op, dtype):
    a = _randint((5, 4), dtype, seed=23)
    b = _randint((4,), dtype, seed=24)
    got = ours(op, [a, b], 13)
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, (np.minimum if op == "Min" else np.maximum)(a, b))
    if dtype in (np.int32, np.int64, np.uint32, np.uint64, np.int8, np.uint8):
        np.testing.assert_array_equal(got, onnxrt(op, [a, b], 13))


def test_variadic_old_versions_and_bfloat16():
    a = _randn((3, 4), seed=25)
    b = _randn((3, 4), seed=26)
    np.testing.assert_allclose(ours("Sum", [a, b, a], 6), a + b + a, rtol=1e-6)
    np.testing.assert_allclose(ours("Mean", [a, b], 1), (a + b) / 2, rtol=1e-6)
    np.testing.assert_allclose(ours("Max", [a, b], 8), np.maximum(a, b))
    got = ours("Max", [a.astype(BF16), b.astype(BF16)], 13)
    assert got.dtype == BF16
    want = np.maximum(a.astype(BF16).astype(np.float32), b.astype(BF16).astype(np.float32))
    np.testing.assert_array_equal(got.astype(np.float32), want)


# ----------------------------------------------------------------- bitwise


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.uint32, np.uint64])
@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
def test_bitshift_unsigned(dtype, direction):
    x = _randint((20,), dtype, seed=27, lo=0, hi=250)
    y = _randint((20,), dtype, seed=28, lo=0, hi=np.dtype(dtype).itemsize * 8 - 1)
    got = ours("BitShift", [x, y], 11, direction=direction)
    assert got.dtype == dtype
    fn = np.left_shift if direction == "LEFT" else np.right_shift
    np.testing.assert_array_equal(got, fn(x, y))
    if dtype != np.uint16:  # onnxruntime has no uint16 BitShift
        np.testing.assert_array_equal(got, onnxrt("BitShift", [x, y], 11, direction=direction))


def test_bitshift_signed_semantics():
    x = np.array([-8, -8, 8, 64, -1, 5, -5, 5], dtype=np.int8)
    y = np.array([1, 8, 8, 1, 7, -1, 100, 0], dtype=np.int8)
    right = ours("BitShift", [x, y], 28, direction="RIGHT")
    np.testing.assert_array_equal(right, [-4, -1, 0, 32, -1, 0, -1, 5])
    left = ours("BitShift", [x, y], 28, direction="LEFT")
    np.testing.assert_array_equal(left, [-16, 0, 0, -128, -128, 0, 0, 5])


def test_bitshift_rejects_bad_direction():
    with pytest.raises(InvalidGraph, match="direction"):
        ours("BitShift", [np.ones(2, np.uint8), np.ones(2, np.uint8)], 11, direction="UP")


@pytest.mark.parametrize("op", ["BitwiseAnd", "BitwiseOr", "BitwiseXor"])
@pytest.mark.parametrize("dtype", [np.int8, np.int64, np.uint16, np.uint32])
def test_bitwise_vs_ort(op, dtype):
    a = _randint((3, 4), dtype, seed=29)
    b = _randint((4,), dtype, seed=30)
    got = ours(op, [a, b], 18)
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, onnxrt(op, [a, b], 18))
    n = ours("BitwiseNot", [a], 18)
    np.testing.assert_array_equal(n, onnxrt("BitwiseNot", [a], 18))


# ----------------------------------------------------------------- Cast

FLOATS_FOR_TEXT = np.array(
    [0.47892547, 1e-7, 1e20, 123456789.0, 3.0, -0.0, np.nan, np.inf, -np.inf, 1 / 3, 100.0,
     1e16, 1e-5, 12345678.0, -2.5, 0.1],
)  # fmt: skip


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_cast_float_to_string_vs_ort(dtype):
    with np.errstate(over="ignore"):  # 1e20 is inf in float16
        x = FLOATS_FOR_TEXT.astype(np.float32).astype(dtype)
    got = ours("Cast", [x], 21, to=TensorProto.STRING)
    assert got.dtype == object and all(isinstance(v, str) for v in got)
    want = onnxrt("Cast", [x], 21, out_type=TensorProto.STRING, to=TensorProto.STRING)
    assert got.tolist() == want.tolist()


def test_cast_double_to_string_vs_ort():
    x = np.array([0.1 + 0.2, 1 / 3, 1e300, 5e-324, 1.2345678901e17, 2.5, -7.0])
    got = ours("Cast", [x], 19, to=TensorProto.STRING)
    want = onnxrt("Cast", [x], 19, out_type=TensorProto.STRING, to=TensorProto.STRING)
    assert got.tolist() == want.tolist()


@pytest.mark.parametrize("dtype", [np.int8, np.int64, np.uint64, np.bool_])
def test_cast_int_bool_to_string_vs_ort(dtype):
    if dtype == np.bool_:
        x = np.array([True, False, True])
    else:
        x = np.array([0, 1, np.iinfo(dtype).max, np.iinfo(dtype).min], dtype=dtype)
    got = ours("Cast", [x], 21, to=TensorProto.STRING)
    want = onnxrt("Cast", [x], 21, out_type=TensorProto.STRING, to=TensorProto.STRING)
    assert got.tolist() == want.tolist()


@pytest.mark.parametrize("to", [TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16])
def test_cast_string_to_float_vs_ort(to):
    text = ["0.5", "NaN", "nan", "INF", "+INF", "-INF", "inf", "-inf", "+Inf", "1e-5", "1E8",
            "-3.25", "100", "Infinity", "7"]  # fmt: skip
    x = np.array(text, dtype=object).reshape(3, 5)
    got = ours("Cast", [x], 21, to=to)
    assert got.dtype == np_dtype(to) and got.shape == (3, 5)
    want = onnxrt("Cast", [x], 21, out_type=to, to=to)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    ("to", "text"),
    [
        (TensorProto.INT64, ["12", "-7", "9223372036854775807", "-9223372036854775808", "0"]),
        (TensorProto.INT32, ["12", "-7", "2147483647", "300", "0"]),
        (TensorProto.UINT8, ["12", "255", "256", "-1", "0"]),
        (TensorProto.UINT64, ["18446744073709551615", "5", "0", "42", "7"]),
        (TensorProto.INT64, ["100.5", "-2.5", "3", "1.0", "0.9"]),
    ],
)
def test_cast_string_to_int_vs_ort(to, text):
    x = np.array(text, dtype=object)
    got = ours("Cast", [x], 19, to=to)
    assert got.dtype == np_dtype(to)
    np.testing.assert_array_equal(got, onnxrt("Cast", [x], 19, out_type=to, to=to))


def test_cast_string_to_bool_and_bytes_input():
    x = np.array(["1.5", "0", "1", "-1", "0.0"], dtype=object)
    got = ours("Cast", [x], 19, to=TensorProto.BOOL)
    np.testing.assert_array_equal(got, onnxrt("Cast", [x], 19, out_type=TensorProto.BOOL, to=9))
    b = np.array([b"1.5", b"-INF"], dtype=object)
    np.testing.assert_array_equal(ours("Cast", [b], 19, to=TensorProto.FLOAT), [1.5, -np.inf])


def test_cast_string_to_string_and_float8():
    x = np.array(["a", "b"], dtype=object)
    assert ours("Cast", [x], 19, to=TensorProto.STRING).tolist() == ["a", "b"]
    y = np.array(["1000", "-1e9", "0.5", "NaN"], dtype=object)
    got = ours("Cast", [y], 19, to=TensorProto.FLOAT8E4M3FN)
    np.testing.assert_array_equal(got.astype(np.float32), [448, -448, 0.5, np.nan])


@pytest.mark.parametrize(
    "src", [np.float32, np.float64, np.float16, np.int32, np.int64, np.uint8, np.bool_]
)
@pytest.mark.parametrize(
    "dst", [np.float32, np.float64, np.float16, np.int8, np.int32, np.int64, np.uint8, np.bool_]
)
def test_cast_numeric_vs_ort(src, dst):
    if np.dtype(src).kind == "f":
        x = _randn((40,), seed=31, scale=50).astype(src)
        if np.dtype(dst).kind in "iu":  # out of range float→int is undefined
            info = np.iinfo(dst)
            x = np.clip(x, max(info.min, -100), min(info.max, 100)).astype(src)
        x[:2] = 0
    elif src == np.bool_:
        x = np.array([True, False, True])
    else:
        x = _randint((40,), src, seed=32)
    to = onnx_elem_type(dst)
    got = ours("Cast", [x], 21, to=to)
    assert got.dtype == dst
    np.testing.assert_array_equal(got, onnxrt("Cast", [x], 21, out_type=to, to=to))


def test_cast_integer_overflow_wraps():
    x = np.array([200, 300, -129], dtype=np.int16)
    np.testing.assert_array_equal(ours("Cast", [x], 13, to=TensorProto.INT8), [-56, 44, 127])


def test_cast_bfloat16_from_double_and_ints():
    x = np.array([1.00390625, 3.0, -2.5, 1e30])
    got = ours("Cast", [x], 13, to=TensorProto.BFLOAT16)
    assert got.dtype == BF16
    np.testing.assert_array_equal(got, x.astype(BF16))
    i = np.array([1, 257, -3], dtype=np.int64)
    np.testing.assert_array_equal(
        ours("Cast", [i], 13, to=TensorProto.BFLOAT16).astype(np.float32), [1, 256, -3]
    )
    back = ours("Cast", [got], 13, to=TensorProto.INT32)
    np.testing.assert_array_equal(back[:3], [1, 3, -2])


F8 = [
    ml_dtypes.float8_e4m3fn,
    ml_dtypes.float8_e4m3fnuz,
    ml_dtypes.float8_e5m2,
    ml_dtypes.float8_e5m2fnuz,
]


@pytest.mark.parametrize("f8", F8)
@pytest.mark.parametrize("src", [np.float64, np.int32])
def test_cast_float8_saturation_from_other_types(f8, src):
    fmax = float(ml_dtypes.finfo(f8).max)
    vals = np.array([1e6, -1e6, 0.5, 3, -3], dtype=np.float64).astype(src)
    to = onnx_elem_type(np.dtype(f8))
    got = ours("Cast", [vals], 19, to=to)
    assert got.dtype == np.dtype(f8)
    np.testing.assert_array_equal(got.astype(np.float32), [fmax, -fmax, vals[2], 3, -3])
    ns = ours("Cast", [vals], 19, to=to, saturate=0)
    assert not np.isfinite(ns.astype(np.float32)[0])


def test_cast_float8_inf_saturates():
    x = np.array([np.inf, -np.inf, np.nan], dtype=np.float32)
    got = ours("Cast", [x], 19, to=TensorProto.FLOAT8E5M2)
    np.testing.assert_array_equal(got.astype(np.float32), [57344, -57344, np.nan])
    ns = ours("Cast", [x], 19, to=TensorProto.FLOAT8E5M2, saturate=0)
    np.testing.assert_array_equal(ns.astype(np.float32), [np.inf, -np.inf, np.nan])


@pytest.mark.parametrize("round_mode", ["up", "down", "nearest"])
def test_cast_e8m0_round_modes_vs_onnx_helper(round_mode):
    x = np.array(
        [0.124, 0.25, 0.5, 1.1, 2.0, 4.0, 8.0, 1.5, 3.0, 0.75, 1.7, 6.0, 1e-30, 1e30, -3.0],
        dtype=np.float32,
    )
    got = ours("Cast", [x], 25, to=TensorProto.FLOAT8E8M0, round_mode=round_mode)
    assert got.dtype == np.dtype(ml_dtypes.float8_e8m0fnu)
    want = numpy_helper.to_float8e8m0(x, saturate=True, round_mode=round_mode)
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


def test_cast_e8m0_special_values():
    x = np.array([0.0, np.nan, np.inf, 3e38, 2.0**-127], dtype=np.float32)
    sat = ours("Cast", [x], 25, to=TensorProto.FLOAT8E8M0)
    np.testing.assert_array_equal(sat.view(np.uint8), [0, 255, 254, 254, 0])
    raw = ours("Cast", [x], 25, to=TensorProto.FLOAT8E8M0, saturate=0, round_mode="nearest")
    np.testing.assert_array_equal(raw.view(np.uint8), [255, 255, 255, 255, 0])


def test_cast_e8m0_rejects_bad_round_mode():
    with pytest.raises(InvalidGraph, match="round_mode"):
        ours("Cast", [np.ones(2, np.float32)], 25, to=TensorProto.FLOAT8E8M0, round_mode="x")


def test_cast_4bit_and_2bit_types():
    x = np.arange(-9, 16, dtype=np.float32)
    got = ours("Cast", [x], 21, to=TensorProto.INT4)
    np.testing.assert_array_equal(got.astype(np.int8), x.astype(ml_dtypes.int4).astype(np.int8))
    u = ours("Cast", [got], 21, to=TensorProto.UINT8)
    np.testing.assert_array_equal(u, got.astype(np.int8).astype(np.uint8))
    i2 = ours("Cast", [np.array([-3, -2, 1, 2], np.int32)], 25, to=TensorProto.INT2)
    np.testing.assert_array_equal(i2.astype(np.int8), [1, -2, 1, -2])
    txt = ours("Cast", [got[:4]], 21, to=TensorProto.STRING)
    assert txt.tolist() == ["7", "-8", "-7", "-6"]
    f6 = ours("Cast", [np.array([0.5, 1.25], np.float32)], 28, to=TensorProto.FLOAT6E2M3)
    np.testing.assert_array_equal(f6.astype(np.float32), [0.5, 1.25])


def test_cast_version_1_takes_type_names():
    x = np.array([1.7, -2.2], dtype=np.float32)
    np.testing.assert_array_equal(ours("Cast", [x], 1, to="INT32"), [1, -2])
    assert ours("Cast", [x], 1, to="DOUBLE").dtype == np.float64
    with pytest.raises(InvalidGraph, match="to"):
        ours("Cast", [x], 1, to="NOT_A_TYPE")


def test_cast_rejects_missing_or_unknown_to():
    x = np.ones(2, np.float32)
    with pytest.raises(InvalidGraph, match="'to'"):
        ours("Cast", [x], 21)
    with pytest.raises(InvalidGraph, match="to=999"):
        ours("Cast", [x], 21, to=999)


def test_cast_same_type_and_zero_dim():
    x = np.array(3.5, dtype=np.float32)
    got = ours("Cast", [x], 21, to=TensorProto.FLOAT)
    assert isinstance(got, np.ndarray) and got.dtype == np.float32 and got == 3.5
    got = ours("Cast", [x], 21, to=TensorProto.STRING)
    assert got.shape == () and got.item() == "3.5"


def test_castlike_to_string_int_and_bfloat16():
    x = np.array([1.5, np.nan], dtype=np.float32)
    got = ours("CastLike", [x, np.array(["a"], dtype=object)], 21)
    assert got.tolist() == ["1.5", "NaN"]
    got = ours("CastLike", [x[:1], np.array([0], dtype=np.int16)], 15)
    assert got.dtype == np.int16 and got[0] == 1
    got = ours("CastLike", [x, np.array([0], dtype=BF16)], 19)
    assert got.dtype == BF16
    got = ours("CastLike", [np.array([1e6], np.float32), np.zeros(1, F8[0])], 19, saturate=0)
    assert np.isnan(got.astype(np.float32)[0])


def test_cast_array_helper_direct():
    np.testing.assert_array_equal(cast_array([1, 2], np.dtype(np.float32)), [1.0, 2.0])


# Div, Max, Min, Sqrt, Exp, Log, Abs, Neg and Relu of float32/float64 inputs of one type
# are the ufunc alone (kernels/elementwise.py, kernels/activation.py): the same values as
# the library's (numpy's ufunc on the same dtype), special values and broadcasting
# included, and onnxruntime's within its vectorized exp/log's ulps.
_FAST_FLOAT_CASES = [("Div", np.divide), ("Max", np.maximum), ("Min", np.minimum), ("Sqrt", np.sqrt),
                     ("Exp", np.exp), ("Log", np.log), ("Abs", np.abs), ("Neg", np.negative),
                     ("Relu", lambda x: np.maximum(x, 0))]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("op,ufunc", _FAST_FLOAT_CASES, ids=[c[0] for c in _FAST_FLOAT_CASES])
def test_float_fast_paths_match_numpy_and_onnxruntime(op, ufunc, dtype):
    special = np.array([0.0, -0.0, 1.5, -2.25, np.inf, -np.inf, np.nan, 1e-40], dtype)
    binary = op in ("Div", "Max", "Min")
    cases = [(special,), (randn((3, 1, 4), 1, dtype=dtype),), (np.array(-3.0, dtype),)]
    if binary:
        cases = [(special, special[::-1].copy()), (randn((3, 1, 4), 1, dtype=dtype), randn((5, 1), 2, dtype=dtype)),
                 (np.array(2.0, dtype), np.array(0.0, dtype))]
    opset = 14 if op == "Relu" else 13
    for inputs in cases:
        # a session: the kernel is built knowing its input types, as the fast path needs
        model, feeds = one_node_model(one_node(op, input_names(inputs), 1), opset, list(inputs))
        sess = onyxrt.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        kernel = sess._plan.steps[0].kernel
        assert "compute" in vars(kernel), f"{op} did not take its float fast path"
        (got,) = sess.run(None, feeds)
        with np.errstate(all="ignore"):  # the reference: inf and nan are expected results
            want = ufunc(*inputs)
        assert isinstance(got, np.ndarray) and got.dtype == dtype and got.shape == np.shape(want)
        np.testing.assert_array_equal(got, want)
        theirs = onnxrt(op, list(inputs), opset)
        np.testing.assert_allclose(got, theirs, rtol=2e-7 if dtype == np.float32 else 1e-15, atol=0)
