"""Tests of the library's comparisons, boolean logic and Where (onyxrt_ops.logical).

Every operator runs over numpy and over array_api_strict and is compared with onnxruntime
(or onnx's reference evaluator where onnxruntime has no kernel): old versions with legacy
broadcasting, float32/float64, integer and bool types, NaN. Half-precision types (which
the array API standard lacks) run over numpy. Strings, which the standard cannot hold,
are refused when the node's types are checked; errors in the data (legacy broadcasting
mismatches) are ValueError.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from library_harness import Bound, node, typed_oracle, unbound_versions
from onnx import TensorProto

from onyxrt.dtypes import np_dtype
from onyxrt.kernels import ValueType
from onyxrt_ops import library

BF16 = np_dtype(TensorProto.BFLOAT16)
LOGICAL = {d.op_type for d in library.definitions if d.cls.__module__ == "onyxrt_ops.logical"}


def values(*shape: int, seed: int = 0, dtype: Any = np.int32) -> np.ndarray:
    """Seeded values in [0, 4): few distinct values, so ties are common."""
    return np.random.default_rng(seed).integers(0, 4, shape).astype(dtype)


def flags(*shape: int, seed: int = 0) -> np.ndarray:
    """Seeded bools."""
    return values(*shape, seed=seed) > 1


NAN = np.array([np.nan, 1.0, np.nan, 2.0, -np.inf], np.float32)
NAN_B = np.array([np.nan, np.nan, 1.0, 2.0, -np.inf], np.float32)


def case(op: str, inputs: list[Any], opset: int, *, id: str | None = None,
         want: Any = None, **attrs: Any) -> Any:
    """One case: ``want`` (a function of the inputs) replaces the oracle where onnxruntime
    cannot run the node (legacy broadcasting)."""
    return pytest.param(op, inputs, opset, attrs, want, id=id or f"{op}-{opset}")


CASES = [
    case("Equal", [values(2, 3, 4), values(3, 1, seed=1)], 19),
    case("Equal", [NAN, NAN_B], 13, id="Equal-nan"),
    case("Equal", [flags(3, 4), flags(4, seed=1)], 7, id="Equal-7-bool"),
    case("Equal", [values(2, 3, 4, dtype=np.int64), values(3, seed=1, dtype=np.int64)], 1,
         broadcast=1, axis=1, id="Equal-1-axis", want=lambda a, b: a == b.reshape(3, 1)),
    case("Equal", [values(2, 3), values(1, seed=1)], 1, broadcast=1, id="Equal-1-one-element",
         want=lambda a, b: a == b[0]),
    case("Less", [values(3, 4, dtype=np.float32), values(4, seed=1, dtype=np.float32)], 13),
    case("Less", [values(3, 4, dtype=np.int64), values(3, 1, seed=1, dtype=np.int64)], 9,
         id="Less-9-int64"),
    case("Less", [NAN, NAN_B], 13, id="Less-nan"),
    case("Less", [values(2, 3, 4, dtype=np.float32), values(2, 3, seed=1, dtype=np.float32)], 1,
         broadcast=1, axis=0, id="Less-1-axis", want=lambda a, b: a < b.reshape(2, 3, 1)),
    case("LessOrEqual", [values(3, 4, dtype=np.uint8), values(4, seed=1, dtype=np.uint8)], 16),
    case("LessOrEqual", [values(3, 4, dtype=np.float64), values(3, 4, seed=1,
                         dtype=np.float64)], 12, id="LessOrEqual-12-f64"),
    case("Greater", [values(3, 4, dtype=np.int8), values(3, 1, seed=1, dtype=np.int8)], 13),
    case("Greater", [values(3, 4, dtype=np.float64), values(4, seed=1, dtype=np.float64)], 7),
    case("Greater", [values(2, 3, 4, dtype=np.float32), values(3, 4, seed=1, dtype=np.float32)],
         1, broadcast=1, id="Greater-1-suffix", want=lambda a, b: a > b),
    case("Greater", [values(2, 3, 4, dtype=np.float32), values(3, 1, seed=1, dtype=np.float32)],
         6, broadcast=1, axis=1, id="Greater-6-stretch", want=lambda a, b: a > b),
    case("GreaterOrEqual", [NAN, NAN_B], 16),
    case("GreaterOrEqual", [values(3, 4, dtype=np.int16), values(4, seed=1, dtype=np.int16)],
         12, id="GreaterOrEqual-12-int16"),
    case("And", [flags(3, 4, 5), flags(4, 1, seed=1)], 7),
    case("And", [flags(2, 3, 4), flags(3, seed=1)], 1, broadcast=1, axis=-2, id="And-1-axis",
         want=lambda a, b: a & b.reshape(3, 1)),
    case("Or", [flags(3, 4, 5), flags(5, seed=1)], 7),
    case("Or", [flags(2, 3), flags(1, seed=1)], 1, broadcast=1, id="Or-1-one-element",
         want=lambda a, b: a | b[0]),
    case("Xor", [flags(3, 4, 5), flags(3, 1, 5, seed=1)], 7),
    case("Xor", [flags(2, 3), flags(2, 3, seed=1)], 1, id="Xor-1-same-shape",
         want=lambda a, b: a ^ b),
    case("Not", [flags(3, 4)], 1),
    case("Where", [flags(2, 1, 4), values(3, 1, dtype=np.float32),
                   values(4, seed=1, dtype=np.float32)], 16),
    case("Where", [flags(3, 4), values(3, 4, dtype=np.int64), values(1, seed=1, dtype=np.int64)],
         9, id="Where-9-int64"),
    case("Where", [flags(3, 4), values(4, dtype=np.uint8), values(3, 4, seed=1, dtype=np.uint8)],
         16, id="Where-uint8"),
    case("Where", [flags(5), flags(5, seed=1), flags(1, seed=2)], 16, id="Where-bool"),
    case("Where", [flags(2, 3), values(2, 3, dtype=np.float64), values(3, dtype=np.float64)],
         16, id="Where-f64"),
]


def _out_dtype(op: str, inputs: list[Any]) -> Any:
    return inputs[1].dtype if op == "Where" else np.bool_


@pytest.mark.parametrize(("op", "inputs", "opset", "attrs", "want"), CASES)
def test_same_as_onnxruntime(bound: Bound, op, inputs, opset, attrs, want):
    got = bound.run(op, inputs, opset, **attrs)
    expected = np.asarray(want(*inputs) if want else
                          typed_oracle(op, inputs, opset, _out_dtype(op, inputs), **attrs))
    assert got.dtype == expected.dtype and got.shape == expected.shape
    np.testing.assert_array_equal(got, expected)


def test_every_operator_has_a_case():
    assert {p.values[0] for p in CASES} == LOGICAL


def test_every_onnx_version_is_bound(numpy_bound: Bound):
    assert not unbound_versions(numpy_bound.registry, LOGICAL)


# ----------------------------------------------------------------- half precision

COMPARISONS = [("Equal", 19), ("Less", 13), ("LessOrEqual", 16), ("Greater", 13),
               ("GreaterOrEqual", 16)]


@pytest.mark.parametrize(("op", "opset"), COMPARISONS)
@pytest.mark.parametrize("half", [np.float16, BF16], ids=["float16", "bfloat16"])
def test_half_types_compare_as_their_values(numpy_bound: Bound, op, opset, half):
    """float16/bfloat16 compare exactly as their float32 values (numpy: the standard has
    neither type)."""
    a = (values(4, 6) * 0.25).astype(half)
    b = (values(6, seed=1) * 0.25).astype(half)
    got = numpy_bound.run(op, [a, b], opset)
    want = numpy_bound.run(op, [a.astype(np.float32), b.astype(np.float32)], opset)
    assert got.dtype == np.bool_
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("half", [np.float16, BF16], ids=["float16", "bfloat16"])
def test_where_keeps_half_types(numpy_bound: Bound, half):
    x = values(3, 4, dtype=np.float32).astype(half)
    y = values(4, seed=1, dtype=np.float32).astype(half)
    c = flags(3, 4, seed=2)
    got = numpy_bound.run("Where", [c, x, y], 16)
    assert got.dtype == half
    np.testing.assert_array_equal(got.astype(np.float32),
                                  np.where(c, x.astype(np.float32), y.astype(np.float32)))


# ------------------------------------------------------------------------- outputs


def test_zero_dim_inputs_give_arrays(numpy_bound: Bound):
    """numpy makes scalars of 0-d results; the kernels hand back 0-d arrays."""
    a, t = np.array(2.0, np.float32), np.array(True)
    for op, inputs, opset in (("Equal", [a, a], 19), ("And", [t, t], 7), ("Not", [t], 1),
                              ("Where", [t, a, a], 16)):
        kernel = numpy_bound.kernel(node(op, len(inputs)), opset)
        (y,) = kernel.compute(*inputs)
        assert type(y) is np.ndarray and y.shape == (), op


# -------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("inputs", "attrs", "match"),
    [
        ([flags(2, 3), flags(3)], {}, "'broadcast' attribute is not set"),
        ([flags(2, 3), flags(2)], {"broadcast": 1}, "legacy broadcasting needs a contiguous"),
        ([flags(3), flags(2, 3)], {"broadcast": 1}, "rank is larger"),
    ],
)
@pytest.mark.parametrize("op", ["Equal", "And"])
def test_legacy_broadcast_mismatch_is_a_value_error(bound: Bound, op, inputs, attrs, match):
    if op == "Equal":
        inputs = [x.astype(np.int32) for x in inputs]
    with pytest.raises(ValueError, match=match):
        bound.run(op, inputs, 1, **attrs)


# ------------------------------------------------------------------------- binding

TEXT = ValueType("tensor", TensorProto.STRING)
BOOL = ValueType("tensor", TensorProto.BOOL)
INT32 = ValueType("tensor", TensorProto.INT32)


def test_strings_are_refused_at_capability_time(bound: Bound):
    """The standard holds no strings: Equal and Where are declared without them, so a
    provider binding the library refuses string nodes before they run (the CPU provider
    registers its own kernels for them)."""
    kdef, _ = bound.registry.lookup("", "Equal", 19)
    assert kdef.unsupported_type([INT32, INT32], [BOOL]) is None
    assert kdef.unsupported_type([TEXT, TEXT], [BOOL]) is not None
    kdef, _ = bound.registry.lookup("", "Where", 16)
    assert kdef.unsupported_type([BOOL, INT32, INT32], [INT32]) is None
    assert kdef.unsupported_type([BOOL, TEXT, TEXT], [TEXT]) is not None
