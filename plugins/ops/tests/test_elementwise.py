"""Tests of the library's elementwise operators (onyxrt_ops.elementwise).

Every operator runs over numpy and over array_api_strict and is compared with onnxruntime
(or onnx's reference evaluator where onnxruntime has no kernel): old versions with legacy
broadcasting, float32/float64 and integer types, wrap-around, NaN and infinities. Where
onnxruntime's result is undefined (integer division by zero, negative integer exponents,
shifts past the width) the expected value is given. Half-precision types (which the array
API standard lacks) run over numpy. Attribute errors are InvalidGraph naming the node;
errors in the data are ValueError.
"""

from __future__ import annotations

import functools
import math
import warnings
from typing import Any

import numpy as np
import pytest
from library_harness import Bound, assert_matches, bind, node, oracle, unbound_versions
from onnx import TensorProto

from onyxrt.dtypes import np_dtype
from onyxrt.errors import InvalidGraph
from onyxrt.kernels import KernelInfo
from onyxrt_ops import library

BF16 = np_dtype(TensorProto.BFLOAT16)
ELEMENTWISE = {d.op_type for d in library.definitions if d.cls.__module__ == "onyxrt_ops.elementwise"}


def randn(*shape: int, seed: int = 0, scale: float = 3.0, dtype: Any = np.float32) -> np.ndarray:
    """Seeded standard-normal values times ``scale``."""
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(dtype)


def uniform(*shape: int, lo: float, hi: float, seed: int = 0, dtype: Any = np.float32):
    """Seeded values in [lo, hi)."""
    return np.random.default_rng(seed).uniform(lo, hi, shape).astype(dtype)


def randint(*shape: int, lo: int = -9, hi: int = 10, seed: int = 0, dtype: Any = np.int32):
    """Seeded integers in [lo, hi)."""
    return np.random.default_rng(seed).integers(lo, hi, shape).astype(dtype)


f64 = functools.partial(randn, dtype=np.float64)
SPECIAL = np.array([1.0, -2.5, np.nan, np.inf, -np.inf, 0.0, -0.0], np.float32)


def case(op: str, inputs: list[Any], opset: int, *, id: str | None = None,
         want: Any = None, **attrs: Any) -> Any:
    """One case: ``want`` (a function of the inputs) replaces the oracle where onnxruntime
    cannot run the node (legacy broadcasting) or its result is undefined."""
    return pytest.param(op, inputs, opset, attrs, want, id=id or f"{op}-{opset}")


def _unary_cases() -> list[Any]:
    domains = {  # op: (since, low, high) — inputs inside the function's domain
        "Sqrt": (13, 0.0, 9.0), "Reciprocal": (13, 0.5, 4.0), "Exp": (13, -20.0, 20.0),
        "Log": (13, 1e-3, 100.0), "Floor": (13, -5.0, 5.0), "Ceil": (13, -5.0, 5.0),
        "Sin": (22, -7.0, 7.0), "Cos": (22, -7.0, 7.0), "Tan": (22, -1.5, 1.5),
        "Asin": (22, -1.0, 1.0), "Acos": (22, -1.0, 1.0), "Atan": (22, -50.0, 50.0),
        "Sinh": (22, -10.0, 10.0), "Cosh": (22, -10.0, 10.0), "Asinh": (22, -50.0, 50.0),
        "Acosh": (22, 1.0, 50.0), "Atanh": (22, -0.99, 0.99), "Abs": (13, -5.0, 5.0),
        "Neg": (13, -5.0, 5.0), "Sign": (13, -5.0, 5.0), "Erf": (13, -4.0, 4.0),
    }  # fmt: skip
    # The oracles' float64 erf has float32's precision: the exact one stands in.
    exact = {"Erf": np.vectorize(math.erf, otypes=[np.float64])}
    cases = []
    for op, (since, lo, hi) in domains.items():
        cases.append(case(op, [uniform(3, 7, lo=lo, hi=hi)], since))
        cases.append(case(op, [uniform(3, 7, lo=lo, hi=hi, dtype=np.float64)], since,
                          id=f"{op}-f64", want=exact.get(op)))
    return cases


CASES = [
    case("Add", [randn(2, 3, 4), randn(4, seed=1)], 14),
    case("Add", [randint(3, 4, lo=-128, hi=128, dtype=np.int8),
                 randint(3, 4, lo=-128, hi=128, seed=1, dtype=np.int8)], 14, id="Add-int8-wrap"),
    case("Add", [randn(2, 3, 4), randn(3, seed=1)], 6, broadcast=1, axis=1, id="Add-6-axis",
         want=lambda a, b: a + b.reshape(3, 1)),
    case("Add", [randn(2, 3), randn(1, seed=1)], 6, broadcast=1, id="Add-6-one-element",
         want=lambda a, b: a + b[0]),
    case("Add", [f64(2, 3), f64(2, 3, seed=1)], 1, id="Add-1-same-shape",
         want=lambda a, b: a + b),
    case("Sub", [f64(2, 3), f64(2, 1, seed=1)], 13),
    case("Sub", [randint(5, lo=0, hi=256, dtype=np.uint8),
                 randint(5, lo=0, hi=256, seed=3, dtype=np.uint8)], 14, id="Sub-uint8-wrap"),
    case("Mul", [randint(3, 4, dtype=np.int64), randint(4, seed=1, dtype=np.int64)], 14,
         id="Mul-int64"),
    case("Mul", [randn(3, 4), randn(3, 1, seed=1)], 7),
    case("Div", [randn(3, 4), uniform(3, 4, lo=0.5, hi=3, seed=1)], 14),
    case("Div", [randint(4, 5, lo=-20, hi=20), randint(4, 5, lo=1, hi=6, seed=2)], 14,
         id="Div-int32-trunc"),
    case("Div", [randint(4, 5, lo=-20, hi=20, dtype=np.int64),
                 -randint(4, 5, lo=1, hi=6, seed=2, dtype=np.int64)], 13, id="Div-int64-neg"),
    case("Div", [randint(6, lo=0, hi=200, dtype=np.uint32),
                 randint(6, lo=1, hi=7, seed=1, dtype=np.uint32)], 14, id="Div-uint32"),
    case("Div", [np.array([7, -7, 0], np.int32), np.array([0, 0, 0], np.int32)], 14,
         id="Div-int-by-zero", want=lambda a, b: np.zeros(3, np.int32)),
    case("Div", [np.array([1.0, -1.0, 0.0], np.float32), np.zeros(3, np.float32)], 14,
         id="Div-float-by-zero"),
    case("Pow", [uniform(3, 4, lo=0.1, hi=3), randn(3, 4, seed=1, scale=1)], 15),
    case("Pow", [randn(3, 4), np.array([2, 3, 0, 1], np.int64)], 15, id="Pow-int-exponent"),
    case("Pow", [randint(8, lo=-3, hi=4), randint(8, lo=0, hi=4, seed=1)], 15, id="Pow-int"),
    case("Pow", [np.array([1, -1, -1, 2, 0, -3], np.int32),
                 np.array([-3, -3, -2, -1, -2, 2], np.int32)], 15, id="Pow-int-negative",
         want=lambda x, y: np.array([1, -1, 1, 0, 0, 9], np.int32)),
    case("Pow", [randint(6, lo=1, hi=5, dtype=np.int64), uniform(6, lo=0, hi=2)], 15,
         id="Pow-int-float-exponent"),
    case("Pow", [uniform(2, 3, lo=0.1, hi=3, dtype=np.float64), np.array([1.5, 2.0, 3.0])], 7),
    case("Pow", [uniform(2, 3, lo=0.1, hi=3), uniform(2, 3, lo=0, hi=2, dtype=np.float64)],
         15, id="Pow-mixed-floats"),
    *_unary_cases(),
    case("Neg", [randint(3, 4, dtype=np.int64)], 13, id="Neg-int64"),
    case("Neg", [np.array([-128, 127], np.int8)], 13, id="Neg-int8-wrap"),
    case("Abs", [randint(3, 4, dtype=np.int16)], 13, id="Abs-int16"),
    case("Abs", [randint(3, 4, lo=0, hi=200, dtype=np.uint8)], 13, id="Abs-uint8"),
    case("Sign", [randint(3, 4, dtype=np.int32)], 13, id="Sign-int32"),
    case("Sign", [randint(3, 4, lo=0, hi=3, dtype=np.uint16)], 13, id="Sign-uint16"),
    case("Round", [np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.4, -0.6, 7.0], np.float32)], 22),
    case("Round", [f64(3, 4)], 11, id="Round-11-f64"),
    case("Sqrt", [np.array([-1.0, 4.0], np.float32)], 13, id="Sqrt-negative"),
    case("Log", [np.array([-1.0, 0.0, 1.0], np.float32)], 13, id="Log-nonpositive"),
    case("Reciprocal", [np.array([0.0, -0.0, 2.0], np.float32)], 13, id="Reciprocal-zero"),
    case("IsNaN", [SPECIAL], 20),
    case("IsNaN", [SPECIAL.astype(np.float64)], 9, id="IsNaN-9-f64"),
    case("IsInf", [SPECIAL], 20),
    case("IsInf", [SPECIAL], 10, detect_negative=0, id="IsInf-positive"),
    case("IsInf", [SPECIAL.astype(np.float64)], 20, detect_positive=0, id="IsInf-negative"),
    case("IsInf", [SPECIAL], 20, detect_positive=0, detect_negative=0, id="IsInf-neither"),
    case("Max", [randn(3, 4), randn(4, seed=1), randn(3, 1, seed=2)], 13),
    case("Max", [np.array([1.0, np.nan, 3.0], np.float32),
                 np.array([2.0, 1.0, np.nan], np.float32)], 13, id="Max-nan"),
    case("Max", [randint(3, 4, dtype=np.uint8, lo=0), randint(3, 4, seed=1, dtype=np.uint8,
                 lo=0)], 13, id="Max-uint8"),
    case("Max", [f64(3, 4)], 6, id="Max-6-single"),
    case("Min", [randn(3, 4), randn(3, 4, seed=1)], 13),
    case("Min", [randint(2, 3, dtype=np.int64), randint(3, seed=1, dtype=np.int64)], 12,
         id="Min-int64"),
    case("Sum", [randn(3, 4), randn(4, seed=1), randn(3, 1, seed=2)], 13),
    case("Sum", [f64(3, 4), f64(3, 4, seed=1)], 6, id="Sum-6"),
    case("Mean", [randn(3, 4), randn(4, seed=1), randn(3, 1, seed=2)], 13),
    case("Mean", [f64(2, 3)], 8, id="Mean-single"),
    case("BitShift", [randint(6, lo=0, hi=256, dtype=np.uint8),
                      randint(6, lo=0, hi=8, seed=1, dtype=np.uint8)], 11, direction="LEFT"),
    case("BitShift", [randint(6, lo=0, hi=2**31, dtype=np.uint32),
                      randint(6, lo=0, hi=32, seed=1, dtype=np.uint32)], 11, direction="RIGHT",
         id="BitShift-right"),
    case("BitShift", [np.array([1, 255, 3], np.uint8), np.array([8, 9, 200], np.uint8)], 11,
         direction="LEFT", id="BitShift-past-width",
         want=lambda x, y: np.zeros(3, np.uint8)),
    case("BitShift", [np.array([-8, 8, -1, 5], np.int16), np.array([1, 2, 16, -1], np.int16)],
         28, direction="RIGHT", id="BitShift-28-signed",
         want=lambda x, y: np.array([-4, 2, -1, 0], np.int16)),
    case("BitwiseAnd", [randint(3, 4), randint(3, 4, seed=1)], 18),
    case("BitwiseOr", [randint(3, 4, lo=0, dtype=np.uint16),
                       randint(4, lo=0, seed=1, dtype=np.uint16)], 18),
    case("BitwiseXor", [randint(3, 4, dtype=np.int8), randint(3, 4, seed=1, dtype=np.int8)], 18),
    case("BitwiseNot", [randint(3, 4, dtype=np.int64)], 18),
    case("BitwiseNot", [randint(3, 4, lo=0, hi=256, dtype=np.uint8)], 18, id="BitwiseNot-uint8"),
]

_TOL = {np.dtype(np.float32): (2e-6, 1e-6), np.dtype(np.float64): (1e-12, 1e-14)}


@pytest.mark.parametrize(("op", "inputs", "opset", "attrs", "want"), CASES)
def test_same_as_onnxruntime(bound: Bound, op, inputs, opset, attrs, want):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # IEEE exceptions give their results, silently
        got = bound.run(op, inputs, opset, **attrs)
    with np.errstate(all="ignore"):
        expected = want(*inputs) if want else oracle(op, inputs, opset, **attrs)
    assert_matches(got, expected, _TOL)


def test_every_operator_has_a_case():
    # Mod: test_misc_ops.py; BitCast: below and plugins/cpu/tests/test_kernels_misc.py.
    assert {p.values[0] for p in CASES} == ELEMENTWISE - {"Mod", "BitCast"}


def test_every_onnx_version_is_bound(numpy_bound: Bound):
    assert not unbound_versions(numpy_bound.registry, ELEMENTWISE)


# ----------------------------------------------------------------- BitCast

BITCASTS = [
    pytest.param(np.float32([1.0, -2.5, np.inf]), TensorProto.INT32, id="float32-int32"),
    pytest.param(np.int64([[1, -1], [2**62, 0]]), TensorProto.DOUBLE, id="int64-float64"),
    pytest.param(np.bool_([True, False]), TensorProto.UINT8, id="bool-uint8"),
    pytest.param(np.float16([0.5, -1.0]), TensorProto.INT16, id="float16-int16"),
    pytest.param(np.uint32(7), TensorProto.INT32, id="scalar"),
    pytest.param(np.float32([[1, 2], [3, 4]]).T, TensorProto.UINT32, id="transposed"),
]


@pytest.mark.parametrize(("x", "to"), BITCASTS)
def test_bitcast_views_the_bytes_on_numpy_and_the_gpu_backend(numpy_bound: Bound, x, to):
    """The same bytes as numpy's view, over numpy and over the GPU providers' backend
    (CuPy's view, under the simulated CuPy)."""
    from onyxrt_gpu.kernels._common import BACKEND
    from onyxrt_gpu.testing.simulated_cupy import install

    want = np.array(x, order="C").view(np_dtype(to))
    got = numpy_bound.run("BitCast", [x], 26, to=to)
    assert got.dtype == want.dtype and got.shape == want.shape and got.tobytes() == want.tobytes()
    with install():
        import cupy

        gpu = bind("cupy", BACKEND)
        gpu.array = cupy.asarray  # type: ignore[method-assign]
        gpu.host = lambda value: value.get()  # type: ignore[method-assign]
        got = gpu.run("BitCast", [x], 26, to=to)
    assert got.dtype == want.dtype and got.tobytes() == want.tobytes()


def test_bitcast_checks_widths_and_needs_the_bitcast_extra(numpy_bound: Bound, strict_bound: Bound):
    with pytest.raises(ValueError, match="float32 is 32 bits wide but int64 is 64 bits wide"):
        numpy_bound.run("BitCast", [np.float32([1.0])], 26, to=TensorProto.INT64)
    with pytest.raises(InvalidGraph, match="BitCast node 'BitCast_node': attribute 'to' is required"):
        numpy_bound.run("BitCast", [np.float32([1.0])], 26)
    # A reinterpretation of bytes is not in the standard: refused at capability time.
    kdef, reason = strict_bound.registry.lookup("", "BitCast", 26)
    assert kdef is None and reason.endswith("BitCast: array_api_strict lacks bitcast"), reason


# ----------------------------------------------------------------- half precision

HALF_OPS = [
    ("Add", 2, 14), ("Sub", 2, 14), ("Mul", 2, 14), ("Div", 2, 14), ("Pow", 2, 15),
    ("Sqrt", 1, 13), ("Exp", 1, 13), ("Sin", 1, 22), ("Round", 1, 22), ("Erf", 1, 13),
    ("Abs", 1, 13), ("Neg", 1, 13), ("Sign", 1, 13), ("Max", 2, 13), ("Sum", 2, 13),
    ("Mean", 2, 13),
]  # fmt: skip


@pytest.mark.parametrize(("op", "n", "opset"), HALF_OPS)
@pytest.mark.parametrize("half", [np.float16, BF16], ids=["float16", "bfloat16"])
def test_half_types_are_rounded_once(numpy_bound: Bound, op, n, opset, half):
    """float16/bfloat16 give their own type, equal to the float32 result rounded once
    (numpy: the standard has neither type)."""
    inputs = [uniform(4, 25, lo=0.2, hi=3, seed=i).astype(half) for i in range(n)]
    got = numpy_bound.run(op, inputs, opset)
    assert got.dtype == half and got.shape == inputs[0].shape
    want = numpy_bound.run(op, [x.astype(np.float32) for x in inputs], opset).astype(half)
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=1e-2)


def test_isnan_isinf_of_narrow_floats(numpy_bound: Bound):
    for dtype in (np.float16, BF16, np_dtype(TensorProto.FLOAT8E4M3FN)):
        x = np.array([1.0, np.nan, 0.5], np.float32).astype(dtype)
        np.testing.assert_array_equal(numpy_bound.run("IsNaN", [x], 20), [False, True, False])
        np.testing.assert_array_equal(numpy_bound.run("IsInf", [x], 20), [False, False, False])


# ------------------------------------------------------------------------- outputs


def _kernel(bound: Bound, op: str, n: int, opset: int, constants: dict[int, Any]) -> Any:
    kdef, reason = bound.registry.lookup("", op, opset)
    assert kdef is not None, reason
    info = KernelInfo.from_node(node(op, n), opset, since_version=kdef.since_version,
                                constants=constants)
    return kdef.factory(info)


@pytest.mark.parametrize("exponent", [1.0, 2.0, 3.0, 0.5])
def test_pow_constant_exponent_fast_paths_match_the_power(bound: Bound, exponent):
    y = np.array(exponent, np.float32)
    kernel = _kernel(bound, "Pow", 2, 15, {1: y})
    x = uniform(5, 6, lo=0.1, hi=4)
    (got,) = kernel.compute(bound.array(x), bound.array(y))
    got = bound.host(got)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, np.power(x, y), rtol=1e-6)
    if exponent == 1.0:
        x_in = bound.array(x)
        (same,) = kernel.compute(x_in, bound.array(y))
        assert same is not x_in  # never hand the input back as the output


def test_pow_constant_exponent_keeps_broadcast_shape(numpy_bound: Bound):
    y = np.array([2.0], np.float32)
    kernel = _kernel(numpy_bound, "Pow", 2, 15, {1: y})
    (got,) = kernel.compute(np.array(3.0, np.float32), y)
    assert got.shape == (1,) and got[0] == 9.0


def test_zero_dim_inputs_give_arrays(numpy_bound: Bound):
    """numpy makes scalars of 0-d results; the kernels hand back 0-d arrays."""
    a = np.array(2.0, np.float32)
    for op, inputs, opset in (("Add", [a, a], 14), ("Sqrt", [a], 13), ("Max", [a, a], 13),
                              ("Div", [np.array(7, np.int32), np.array(-2, np.int32)], 14)):
        kernel = numpy_bound.kernel(node(op, len(inputs)), opset)
        (y,) = kernel.compute(*inputs)
        assert type(y) is np.ndarray and y.shape == (), op


def test_integer_division_truncates_toward_zero(bound: Bound):
    a = np.array([7, -7, 7, -7, -128], np.int8)
    b = np.array([2, 2, -2, -2, -1], np.int8)
    got = bound.run("Div", [a, b], 14)
    np.testing.assert_array_equal(got, [3, -3, -3, 3, -128])  # -128 / -1 wraps


# -------------------------------------------------------------------------- errors


def test_bad_bitshift_direction_is_invalid_graph_naming_the_node(bound: Bound):
    with pytest.raises(InvalidGraph, match="direction must be 'LEFT' or 'RIGHT'") as err:
        bound.kernel(node("BitShift", 2, direction="UP"), 11)
    assert "BitShift_node" in str(err.value)


@pytest.mark.parametrize(
    ("inputs", "attrs", "match"),
    [
        ([randn(2, 3), randn(3)], {}, "'broadcast' attribute is not set"),
        ([randn(2, 3), randn(2)], {"broadcast": 1}, "legacy broadcasting needs a contiguous"),
        ([randn(3), randn(2, 3)], {"broadcast": 1}, "rank is larger"),
    ],
)
def test_legacy_broadcast_mismatch_is_a_value_error(bound: Bound, inputs, attrs, match):
    with pytest.raises(ValueError, match=match):
        bound.run("Add", inputs, 6, **attrs)


def test_variadic_without_inputs_is_a_value_error(bound: Bound):
    kernel = bound.kernel(node("Max", 0), 13)
    with pytest.raises(ValueError, match="Max needs at least one input"):
        kernel.compute()


# ------------------------------------------------------------------------- binding


def test_erf_is_offered_only_with_an_erf(strict_bound: Bound):
    assert strict_bound.registry.lookup("", "Erf", 13)[0] is not None
    assert "Erf" not in strict_bound.missing
    assert math.isclose(float(strict_bound.run("Erf", [np.array([0.5])], 13)[0]), math.erf(0.5))
