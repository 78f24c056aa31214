"""Tests of the library's activations and softmax family (onyxrt_ops.activation).

Every operator runs over numpy and over array_api_strict and is compared with onnxruntime
(or onnx's reference evaluator where onnxruntime has no kernel): attribute variants, old
versions, float32/float64 and integer types, extreme values. Half-precision types (which
the array API standard lacks) run over numpy. Attribute errors are InvalidGraph naming the
node; errors in the data are ValueError.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np
import pytest
from library_harness import Bound, assert_matches, node, oracle, unbound_versions
from onnx import TensorProto

from onyxrt.dtypes import np_dtype
from onyxrt.errors import InvalidGraph
from onyxrt.kernels import KernelRegistry, ValueType
from onyxrt_ops import library, namespace_backend

BF16 = np_dtype(TensorProto.BFLOAT16)


def randn(*shape: int, seed: int = 0, scale: float = 3.0, dtype: Any = np.float32) -> np.ndarray:
    """Seeded standard-normal values times ``scale``."""
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(dtype)


def randint(*shape: int, lo: int = -9, hi: int = 10, seed: int = 0, dtype: Any = np.int32):
    """Seeded integers in [lo, hi)."""
    return np.random.default_rng(seed).integers(lo, hi, shape).astype(dtype)


def extremes(dtype: Any = np.float32) -> np.ndarray:
    """Values where a careless formula overflows or loses precision."""
    return np.array([-1000.0, -100.0, -30.0, -1e-3, -0.0, 0.0, 1e-3, 30.0, 100.0, 1000.0],
                    dtype=dtype)


f64 = functools.partial(randn, dtype=np.float64)
SQRT2 = math.sqrt(2.0)
_erfc = np.vectorize(math.erfc, otypes=[np.float64])  # exact, where the oracles are not


def case(op: str, inputs: list[Any], opset: int, *, id: str | None = None,
         want: Any = None, **attrs: Any) -> Any:
    """One case: ``want`` (a function of the inputs) replaces the oracle where it
    implements another reading (PRelu-6's per-channel slope)."""
    return pytest.param(op, inputs, opset, attrs, want, id=id or f"{op}-{opset}")


CASES = [
    case("Relu", [randn(3, 4)], 14),
    case("Relu", [f64(2, 5)], 6),
    case("Relu", [randint(3, 4, dtype=np.int8)], 14, id="Relu-int8"),
    case("Relu", [randint(3, 4, dtype=np.int64)], 14, id="Relu-int64"),
    case("LeakyRelu", [randn(3, 4)], 16, alpha=0.2),
    case("LeakyRelu", [f64(3, 4)], 6),
    case("PRelu", [randn(2, 3, 4, 5), np.array([0.1, 0.2, 0.3], np.float32).reshape(3, 1, 1)], 16),
    case("PRelu", [randn(2, 3, 4), randn(4, seed=1)], 9, id="PRelu-9-trailing"),
    case("PRelu", [randint(2, 4), randint(4, seed=1)], 16, id="PRelu-int32"),
    case("PRelu", [randn(2, 3, 4, 5), np.array([0.1, 0.2, 0.3], np.float32)], 6,
         id="PRelu-6-channel",
         want=lambda x, s: np.where(x < 0, x * s.reshape(3, 1, 1), x)),
    case("Elu", [randn(3, 4)], 22, alpha=0.7),
    case("Elu", [f64(3, 4)], 6),
    case("Selu", [randn(3, 4)], 22),
    case("Selu", [randn(3, 4)], 6, alpha=1.5, gamma=2.0, id="Selu-6-attrs"),
    case("Celu", [randn(3, 4)], 12, alpha=1.5),
    case("Celu", [f64(3, 4)], 28, alpha=0.5),
    case("ThresholdedRelu", [randn(3, 4)], 22, alpha=0.5),
    case("ThresholdedRelu", [randn(3, 4)], 10),
    case("Clip", [randn(4, 6)], 6, min=-1.0, max=1.5),
    case("Clip", [randn(4, 6)], 6, min=-0.5, id="Clip-6-min-only"),
    case("Clip", [randn(4, 6)], 6, id="Clip-6-none"),
    case("Clip", [randn(4, 6), np.float32(-1), np.float32(2)], 11),
    case("Clip", [randn(4, 6), None, np.float32(0.5)], 13, id="Clip-13-max-only"),
    case("Clip", [randn(4, 6), np.float32(2), np.float32(1)], 13, id="Clip-13-min-gt-max"),
    case("Clip", [randn(4, 6)], 13, id="Clip-13-none"),
    case("Clip", [randint(4, 6), np.int32(-2), np.int32(3)], 13, id="Clip-13-int32"),
    case("Clip", [randint(4, 6, lo=0, hi=255, dtype=np.uint8), np.uint8(3), np.uint8(50)], 12,
         id="Clip-12-uint8"),
    case("Sigmoid", [randn(3, 4, scale=10)], 13),
    case("Sigmoid", [extremes()], 13, id="Sigmoid-extremes"),
    case("Sigmoid", [f64(3, 4)], 6),
    case("HardSigmoid", [randn(3, 4)], 22, alpha=0.3, beta=0.4),
    case("HardSigmoid", [randn(3, 4)], 6),
    case("HardSwish", [randn(3, 4, scale=4)], 22),
    case("HardSwish", [f64(3, 4, scale=4)], 14),
    case("Tanh", [randn(3, 4)], 13),
    case("Tanh", [f64(3, 4)], 6),
    case("Gelu", [randn(4, 16)], 20),
    case("Gelu", [randn(4, 16)], 20, approximate="tanh", id="Gelu-tanh"),
    case("Gelu", [f64(4, 16)], 20, id="Gelu-f64", want=lambda x: 0.5 * x * _erfc(-x / SQRT2)),
    case("Softplus", [randn(3, 4, scale=30)], 22),
    case("Softplus", [extremes()], 1, id="Softplus-extremes"),
    case("Softsign", [randn(3, 4)], 22),
    case("Softsign", [f64(3, 4)], 1),
    case("Shrink", [randn(3, 4)], 9, lambd=0.6, bias=0.2),
    case("Shrink", [randint(3, 4)], 9, lambd=1.5, bias=1.0, id="Shrink-int32"),
    case("Shrink", [f64(3, 4)], 9, id="Shrink-defaults"),
    case("Mish", [randn(3, 4, scale=10)], 22),
    case("Mish", [extremes()], 18, id="Mish-extremes"),
    case("Swish", [randn(3, 4, scale=5)], 24, alpha=0.75),
    case("Swish", [extremes(np.float64)], 24, id="Swish-extremes"),
    case("Softmax", [randn(2, 3, 5)], 13, axis=1),
    case("Softmax", [randn(2, 3, 5)], 11, axis=1, id="Softmax-11-coerced"),
    case("Softmax", [f64(2, 3, 5)], 1, id="Softmax-1-default-axis"),
    case("Softmax", [np.array([[1000, 1001, 1002], [-1e30, 0, 1e30]], np.float32)], 13,
         id="Softmax-large"),
    case("LogSoftmax", [randn(2, 3, 5)], 13),
    case("LogSoftmax", [randn(2, 3, 5)], 11, axis=2, id="LogSoftmax-11"),
    case("LogSoftmax", [f64(2, 3, 5)], 13, axis=0, id="LogSoftmax-axis0"),
    case("Hardmax", [np.array([[1, 3, 3, 2], [5, 5, 5, 5]], np.float32)], 13, id="Hardmax-tie"),
    case("Hardmax", [randn(2, 3, 4)], 11, axis=1, id="Hardmax-11-coerced"),
    case("Hardmax", [f64(2, 3, 4)], 13, axis=0, id="Hardmax-axis0"),
]

# float64 within float32's precision: the oracles use float32 constants (the attributes'
# type, 1/6 in HardSwish, sqrt(2/pi) in Gelu) where the library computes in float64.
_TOL = {np.dtype(np.float32): (1e-5, 1e-6), np.dtype(np.float64): (1e-6, 1e-9)}


@pytest.mark.parametrize(("op", "inputs", "opset", "attrs", "want"), CASES)
def test_same_as_onnxruntime(bound: Bound, op, inputs, opset, attrs, want):
    got = bound.run(op, inputs, opset, **attrs)
    expected = want(*inputs) if want else oracle(op, inputs, opset, **attrs)
    assert_matches(got, expected, _TOL)


def test_every_operator_has_a_case():
    defined = {d.op_type for d in library.definitions if d.cls.__module__ == "onyxrt_ops.activation"}
    assert {p.values[0] for p in CASES} == defined


def test_every_onnx_version_is_bound(numpy_bound: Bound):
    assert not unbound_versions(numpy_bound.registry, library.op_types())


# ----------------------------------------------------------------- half precision

FLOAT_OPS = [
    ("Relu", {}, 14), ("LeakyRelu", {"alpha": 0.2}, 16), ("Elu", {}, 22), ("Selu", {}, 22),
    ("Celu", {}, 28), ("ThresholdedRelu", {}, 22), ("Sigmoid", {}, 13), ("Tanh", {}, 13),
    ("HardSigmoid", {}, 22), ("HardSwish", {}, 22), ("Gelu", {}, 20),
    ("Gelu", {"approximate": "tanh"}, 20), ("Softplus", {}, 22), ("Softsign", {}, 22),
    ("Shrink", {}, 9), ("Mish", {}, 22), ("Swish", {}, 24), ("Clip", {"min": -1.0}, 6),
    ("Softmax", {}, 13), ("LogSoftmax", {}, 13), ("Hardmax", {}, 13),
]  # fmt: skip


@pytest.mark.parametrize(("op", "attrs", "opset"), FLOAT_OPS)
@pytest.mark.parametrize("half", [np.float16, BF16], ids=["float16", "bfloat16"])
def test_half_types_keep_their_dtype(numpy_bound: Bound, op, attrs, opset, half):
    """float16/bfloat16 are computed in float32 and rounded once (numpy: the standard has
    neither type)."""
    x = randn(4, 50, seed=2).astype(half)
    got = numpy_bound.run(op, [x], opset, **attrs)
    assert got.dtype == half and got.shape == x.shape
    want = numpy_bound.run(op, [x.astype(np.float32)], opset, **attrs)
    tol = 1e-2 if half is BF16 else 2e-3
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=tol, atol=tol)


def test_half_inputs_of_prelu_and_clip(numpy_bound: Bound):
    x = np.array([[-4, -1, 0, 3]], np.float16)
    got = numpy_bound.run("PRelu", [x, np.array([0.5], np.float16)], 16)
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got, [[-2, -0.5, 0, 3]])
    xb = np.array([-3, -1, 0, 2, 9], dtype=BF16)
    got = numpy_bound.run("Clip", [xb, np.array(-1, BF16), np.array(4, BF16)], 13)
    assert got.dtype == BF16
    np.testing.assert_array_equal(got.astype(np.float32), [-1, -1, 0, 2, 4])


# ------------------------------------------------------------------------- outputs


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
def test_softmax_family_empty_input(bound: Bound, op):
    got = bound.run(op, [np.zeros((2, 0), np.float32)], 13)
    assert got.shape == (2, 0) and got.dtype == np.float32


@pytest.mark.parametrize(("op", "opset", "attrs"), [("Clip", 13, {}), ("Clip", 6, {})])
def test_clip_without_bounds_copies_its_input(bound: Bound, op, opset, attrs):
    x = bound.array(randn(3, 4))
    kernel = bound.kernel(node(op, 1, **attrs), opset)
    (y,) = kernel.compute(x)
    assert y is not x
    np.testing.assert_array_equal(bound.host(y), bound.host(x))


def test_large_inputs_give_no_overflow_warning(numpy_bound: Bound):
    """exp never overflows in Sigmoid, Softplus, Swish, Mish, Softmax and LogSoftmax."""
    x = extremes()
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        for op, opset in (("Sigmoid", 13), ("Softplus", 22), ("Swish", 24), ("Mish", 22),
                          ("Softmax", 13), ("LogSoftmax", 13)):
            assert np.isfinite(numpy_bound.run(op, [x], opset)).all(), op


# -------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("op", "opset", "attrs", "match"),
    [
        ("Gelu", 20, {"approximate": "fast"}, "approximate"),
        ("Celu", 12, {"alpha": 0.0}, "'alpha' must not be 0"),
        ("LeakyRelu", 16, {"alpha": "steep"}, "'alpha' must be a float"),
        ("Shrink", 9, {"lambd": "wide"}, "'lambd' must be a float"),
    ],
)
def test_bad_attributes_are_invalid_graph_naming_the_node(bound: Bound, op, opset, attrs, match):
    with pytest.raises(InvalidGraph, match=match) as err:
        bound.kernel(node(op, 1, **attrs), opset)
    assert f"{op}_node" in str(err.value)


@pytest.mark.parametrize(
    ("op", "inputs", "opset", "attrs", "match"),
    [
        ("PRelu", [np.zeros(3, np.float32), np.zeros((2, 3), np.float32)], 16, {}, "slope"),
        ("Clip", [np.zeros(3, np.float32), np.zeros(2, np.float32)], 13, {}, "'min' must be a scalar"),
        ("Softmax", [np.zeros((2, 3), np.float32)], 13, {"axis": 2}, "axis 2 is out of range"),
        ("Hardmax", [np.zeros((2, 3), np.float32)], 11, {"axis": -3}, "axis -3 is out of range"),
    ],
)  # fmt: skip
def test_bad_data_is_a_value_error(bound: Bound, op, inputs, opset, attrs, match):
    with pytest.raises(ValueError, match=match):
        bound.run(op, inputs, opset, **attrs)


# ------------------------------------------------------------------------- binding


def test_a_backend_without_erf_is_not_offered_gelu():
    import array_api_strict as xp
    registry = KernelRegistry("no erf")
    missing = library.bind(namespace_backend(xp), registry)
    assert {op: missing[op] for op in ("Gelu", "Erf", "Einsum", "BitCast")} == {
        "Gelu": "array_api_strict lacks erf", "Erf": "array_api_strict lacks erf",
        "Einsum": "array_api_strict lacks einsum", "BitCast": "array_api_strict lacks bitcast"}
    # The rest: other operators needing one of those functions (com.microsoft's Gelu
    # family), or taking only types the standard has not (Tokenizer's strings).
    assert all(r.startswith("array_api_strict lacks ") or r.endswith("holds none of the element types it takes")
               for r in missing.values()), missing
    kdef, reason = registry.lookup("", "Gelu", 20)
    # Refused at capability time, with the reason (not a failure when the node runs).
    assert kdef is None and reason.endswith("Gelu: array_api_strict lacks erf"), reason
    assert registry.lookup("", "Relu", 14)[0] is not None


def test_types_are_narrowed_to_what_the_backend_holds(strict_bound: Bound, numpy_bound: Bound):
    f16 = ValueType("tensor", TensorProto.FLOAT16)
    i8 = ValueType("tensor", TensorProto.INT8)
    strict_relu, _ = strict_bound.registry.lookup("", "Relu", 14)
    assert "float16" in strict_relu.unsupported_type([f16], [f16])  # the standard has none
    assert strict_relu.unsupported_type([i8], [i8]) is None
    numpy_relu, _ = numpy_bound.registry.lookup("", "Relu", 14)
    assert numpy_relu.unsupported_type([f16], [f16]) is None
    relu13, _ = numpy_bound.registry.lookup("", "Relu", 13)
    assert relu13.unsupported_type([i8], [i8]) is not None  # integers arrive in Relu-14
