"""Tests of the library's reductions (onyxrt_ops.reduction).

Every operator runs over numpy and over array_api_strict and is compared with onnxruntime
(or onnx's reference evaluator where onnxruntime has no kernel): axes as an attribute (old
versions) and as an input, keepdims, noop_with_empty_axes, negative and unsorted axes,
float32/float64 and integer types (which keep their type), NaN, ties for ArgMax/ArgMin,
CumSum's exclusive and reverse modes. Empty sets give the operation's identity; half
precision (which the standard lacks) runs over numpy. Attribute errors are InvalidGraph
naming the node; errors in the data are ValueError.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from library_harness import Bound, assert_matches, node, oracle, typed_oracle, unbound_versions
from onnx import TensorProto

from onyxrt.dtypes import np_dtype
from onyxrt.errors import InvalidGraph
from onyxrt.kernels import KernelInfo
from onyxrt_ops import library

BF16 = np_dtype(TensorProto.BFLOAT16)
REDUCTION = {d.op_type for d in library.definitions if d.cls.__module__ == "onyxrt_ops.reduction"}
REDUCE_OPS = sorted(op for op in REDUCTION if op.startswith("Reduce"))
_TOL = {np.dtype(np.float32): (1e-5, 1e-6), np.dtype(np.float64): (1e-12, 1e-12)}


def randn(*shape: int, seed: int = 0, dtype: Any = np.float32) -> np.ndarray:
    """Seeded standard-normal values times 3."""
    return (np.random.default_rng(seed).standard_normal(shape) * 3).astype(dtype)


def positive(*shape: int, seed: int = 0, dtype: Any = np.float32) -> np.ndarray:
    """Seeded values in [0.5, 1.5): products and logarithms stay tame."""
    return (np.random.default_rng(seed).random(shape) + 0.5).astype(dtype)


def randint(*shape: int, lo: int = -9, hi: int = 10, seed: int = 0, dtype: Any = np.int32):
    """Seeded integers in [lo, hi)."""
    return np.random.default_rng(seed).integers(lo, hi, shape).astype(dtype)


def axes(*values: int) -> np.ndarray:
    """An int64 axes input."""
    return np.array(values, np.int64)


def case(op: str, inputs: list[Any], opset: int, *, id: str | None = None,
         want: Any = None, **attrs: Any) -> Any:
    """One case: ``want`` (a function of the inputs) replaces the oracle where it reads
    the operator differently (onnxruntime's integer ReduceLogSumExp)."""
    return pytest.param(op, inputs, opset, attrs, want, id=id or f"{op}-{opset}")


def _reduce_cases(op: str) -> list[Any]:
    """Attribute axes (versions 1, 11, 13), input axes (18; ReduceSum from 13), keepdims,
    all axes, float64 and integers."""
    x = positive(3, 4, 5) if op in ("ReduceProd", "ReduceLogSum", "ReduceL2") else randn(3, 4, 5)
    since = 13 if op == "ReduceSum" else 18
    old = [case(op, [x], 1, axes=[1], id=f"{op}-1"),
           case(op, [x], 11, axes=[-1, 0], keepdims=0, id=f"{op}-11-negative"),
           case(op, [x.astype(np.float64)], 11, id=f"{op}-11-all-f64")]
    if since == 18:
        old.append(case(op, [x], 13, axes=[2, 0], id=f"{op}-13-unsorted"))
    return [
        *old,
        case(op, [x, axes(1)], since, id=f"{op}-{since}"),
        case(op, [x, axes(-1, 0)], since, keepdims=0, id=f"{op}-{since}-keepdims0"),
        case(op, [x], since, keepdims=0, id=f"{op}-{since}-no-axes"),
        case(op, [x, axes()], since, keepdims=0, id=f"{op}-{since}-empty-axes"),
        case(op, [x, axes()], since, noop_with_empty_axes=1, id=f"{op}-{since}-noop"),
        case(op, [x.astype(np.float64), axes(0, 2)], since, id=f"{op}-{since}-f64"),
    ]


def _int_want(op: str) -> Any:
    # onnxruntime's integer ReduceLogSumExp is not log(sum(exp(x))) truncated; ours is (as
    # the CPU provider's always was).
    if op != "ReduceLogSumExp":
        return None
    return lambda x, a: np.log(np.exp(x.astype(np.float64)).sum(axis=1)).astype(x.dtype)


CASES = [
    *[c for op in REDUCE_OPS for c in _reduce_cases(op)],
    *[case(op, [randint(3, 4, 5, lo=1, hi=4, dtype=dt), axes(1)], 18, keepdims=0,
           id=f"{op}-{np.dtype(dt).name}", want=_int_want(op))
      for op in REDUCE_OPS if op != "ReduceSum" for dt in (np.int32, np.int64)],
    case("ReduceSum", [randint(3, 4, 5), axes(0, 2)], 13, id="ReduceSum-int32"),
    case("ReduceSum", [randint(3, 4, dtype=np.uint64), axes(1)], 13, id="ReduceSum-uint64"),
    case("ReduceMean", [randint(3, 4, 5), axes(1)], 18, id="ReduceMean-int32-truncates"),
    case("ReduceMax", [randint(4, 6, lo=0, hi=200, dtype=np.uint8), axes(1)], 18,
         id="ReduceMax-uint8"),
    case("ReduceMin", [randint(4, 6, dtype=np.int8), axes(0)], 18, id="ReduceMin-int8"),
    case("ReduceMax", [randint(3, 4, lo=0, hi=2).astype(bool), axes(1)], 20, id="ReduceMax-bool"),
    case("ReduceMin", [randint(3, 4, lo=0, hi=2).astype(bool), axes(1)], 20, id="ReduceMin-bool"),
    case("ReduceMax", [np.array([[np.nan, 1.0], [2.0, 3.0]], np.float32), axes(1)], 18,
         id="ReduceMax-nan"),
    case("ReduceLogSumExp", [np.array([[1000.0, 1000.0], [-1000.0, -1000.0], [-np.inf, 0.0]],
                                      np.float32), axes(1)], 18, id="ReduceLogSumExp-stable"),
    case("ArgMax", [randint(4, 5, 3, lo=0, hi=3, dtype=np.float32)], 13, axis=1),
    case("ArgMax", [randint(4, 5, 3, lo=0, hi=3, dtype=np.float32)], 12, axis=-1, keepdims=0,
         select_last_index=1, id="ArgMax-12-last"),
    case("ArgMax", [randint(4, 5, lo=0, hi=3)], 11, axis=0, id="ArgMax-11-int32"),
    case("ArgMax", [randn(6)], 1, keepdims=0, id="ArgMax-1-vector"),
    case("ArgMin", [randint(4, 5, 3, lo=0, hi=3, dtype=np.float64)], 13, axis=2, keepdims=0),
    case("ArgMin", [randint(4, 5, lo=0, hi=3, dtype=np.int64)], 12, axis=1,
         select_last_index=1, id="ArgMin-12-last"),
    case("ArgMin", [randint(4, 5, lo=0, hi=3, dtype=np.uint8)], 11, axis=-2, id="ArgMin-11-uint8"),
    *[case("CumSum", [randint(2, 3, 4, lo=-5, hi=6, dtype=np.float32), np.array(ax)], 14,
           exclusive=ex, reverse=rv, id=f"CumSum-axis{ax}-exclusive{ex}-reverse{rv}")
      for ax in (0, -1) for ex in (0, 1) for rv in (0, 1)],
    case("CumSum", [randint(5, 3), np.array([0], np.int32)], 11, exclusive=1, id="CumSum-11-int32"),
    case("CumSum", [randint(5, dtype=np.int64), np.array(0)], 14, reverse=1, id="CumSum-int64"),
    case("CumSum", [randint(4, 3, dtype=np.uint32, lo=0), np.array(1)], 14, id="CumSum-uint32"),
    case("CumSum", [randn(3, 6, dtype=np.float64), np.array(1)], 14, exclusive=1, reverse=1,
         id="CumSum-f64"),
]


def _out_dtype(op: str, inputs: list[Any]) -> Any:
    return np.int64 if op.startswith("Arg") else inputs[0].dtype


@pytest.mark.parametrize(("op", "inputs", "opset", "attrs", "want"), CASES)
def test_same_as_onnxruntime(bound: Bound, op, inputs, opset, attrs, want):
    got = bound.run(op, inputs, opset, **attrs)
    expected = np.asarray(want(*inputs) if want else
                          typed_oracle(op, inputs, opset, _out_dtype(op, inputs), **attrs))
    assert_matches(got, expected, _TOL)


def test_every_operator_has_a_case():
    assert {p.values[0] for p in CASES} == REDUCTION - {"TopK", "CumProd"}  # test_misc_ops.py


def test_every_onnx_version_is_bound(numpy_bound: Bound):
    assert not unbound_versions(numpy_bound.registry, REDUCTION)


# ---------------------------------------------------------------------- empty sets

IDENTITY = {
    "ReduceSum": 0.0, "ReduceMean": np.nan, "ReduceMax": -np.inf, "ReduceMin": np.inf,
    "ReduceProd": 1.0, "ReduceL1": 0.0, "ReduceL2": 0.0, "ReduceLogSum": -np.inf,
    "ReduceLogSumExp": -np.inf, "ReduceSumSquare": 0.0,
}  # fmt: skip


@pytest.mark.parametrize("op", REDUCE_OPS)
def test_an_empty_set_gives_the_identity(bound: Bound, op):
    with np.errstate(all="raise"):  # no floating-point exception on the way
        got = bound.run(op, [np.zeros((2, 0, 4), np.float32), axes(1)], 18)
    assert got.dtype == np.float32 and got.shape == (2, 1, 4)
    np.testing.assert_array_equal(got, np.full((2, 1, 4), IDENTITY[op], np.float32))


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int32, np.int64])
def test_an_empty_integer_max_or_min_gives_the_dtypes_bound(bound: Bound, dtype):
    x = np.zeros((0, 3), dtype)
    mx = bound.run("ReduceMax", [x, axes(0)], 18, keepdims=0)
    mn = bound.run("ReduceMin", [x, axes(0)], 18, keepdims=0)
    assert mx.dtype == mn.dtype == dtype
    np.testing.assert_array_equal(mx, [np.iinfo(dtype).min] * 3)
    np.testing.assert_array_equal(mn, [np.iinfo(dtype).max] * 3)


def test_empty_sets_of_other_types(bound: Bound):
    assert bound.run("ReduceMin", [np.zeros((0,), bool)], 20).tolist() == [True]
    assert bound.run("ReduceMax", [np.zeros((0,), bool)], 20).tolist() == [False]
    assert bound.run("ReduceMean", [np.zeros((0, 2), np.int32)], 18).tolist() == [[0]]
    assert bound.run("ReduceSum", [np.zeros((0, 2), np.int32)], 13, keepdims=0).dtype == np.int32
    got = bound.run("CumSum", [np.zeros((2, 0), np.float32), np.array(1)], 14, exclusive=1,
                    reverse=1)
    assert got.shape == (2, 0) and got.dtype == np.float32


def test_a_rank0_input_reduces_to_itself(bound: Bound):
    x = np.array(3.0, np.float32)
    assert bound.run("ReduceSum", [x], 13).tolist() == 3.0
    assert bound.run("ReduceSumSquare", [x], 11, axes=[0]).tolist() == 9.0


# --------------------------------------------------------------------- half precision


@pytest.mark.parametrize("op", REDUCE_OPS)
@pytest.mark.parametrize("half", [np.float16, BF16], ids=["float16", "bfloat16"])
def test_half_types_accumulate_in_float32(numpy_bound: Bound, op, half):
    """float16/bfloat16 (numpy: the standard has neither) are computed in float32 and
    rounded once: a long float16 sum does not drift."""
    x = positive(4, 3000).astype(half)
    got = numpy_bound.run(op, [x, axes(1)], 18)
    assert got.dtype == half and got.shape == (4, 1)
    want = oracle(op, [x.astype(np.float32), axes(1)], 18).astype(half)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("half", [np.float16, BF16], ids=["float16", "bfloat16"])
def test_half_types_in_argmax_and_cumsum(numpy_bound: Bound, half):
    x = np.array([[3, 7, 7, 1], [0, 0, 5, 5]], np.float32).astype(half)
    np.testing.assert_array_equal(numpy_bound.run("ArgMax", [x], 13, axis=1, keepdims=0), [1, 2])
    np.testing.assert_array_equal(
        numpy_bound.run("ArgMin", [x], 13, axis=1, select_last_index=1), [[3], [1]])
    ones = np.ones((3, 300), half)
    got = numpy_bound.run("CumSum", [ones, np.array([1])], 14, exclusive=1)
    assert got.dtype == half
    # Summed in float32, so exact counts rounded once (bfloat16 holds no 257).
    np.testing.assert_array_equal(got, np.tile(np.arange(300.0).astype(half), (3, 1)))


# --------------------------------------------------------------------------- kernels


def _built(bound: Bound, op: str, opset: int, n_inputs: int, constants: dict[int, Any],
           **attrs: Any) -> Any:
    kdef, reason = bound.registry.lookup("", op, opset)
    assert kdef is not None, reason
    info = KernelInfo.from_node(node(op, n_inputs, **attrs), opset,
                                since_version=kdef.since_version, constants=constants)
    return kdef.factory(info)


def test_constant_axes_serve_every_rank(bound: Bound):
    """Constant axes are normalized once per input rank, not once for the first."""
    kernel = _built(bound, "ReduceMean", 18, 2, {1: axes(-1)})
    for shape in ((2, 3), (2, 3, 4), (5,)):
        x = randn(*shape)
        (y,) = kernel.compute(bound.array(x), bound.array(axes(-1)))
        np.testing.assert_allclose(bound.host(y), x.mean(axis=-1, keepdims=True), rtol=1e-5)


def test_full_reductions_give_arrays(numpy_bound: Bound):
    """numpy makes scalars of 0-d results; the kernels hand back 0-d arrays."""
    for op, inputs, opset in (("ReduceSum", [randn(3)], 13), ("ReduceMax", [randn(3)], 18),
                              ("ReduceMean", [randint(3)], 18), ("ArgMax", [randn(3)], 13)):
        kernel = numpy_bound.kernel(node(op, 1, keepdims=0), opset)
        (y,) = kernel.compute(*inputs)
        assert type(y) is np.ndarray and y.shape == (), op


def test_reverse_cumsum_is_contiguous(numpy_bound: Bound):
    got = numpy_bound.run("CumSum", [randn(3, 4), np.array(1)], 14, reverse=1)
    assert got.flags.c_contiguous


# -------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("op", "inputs", "opset", "attrs", "match"),
    [
        ("ReduceSum", [randn(2, 3), axes(2)], 13, {}, "axis 2 is out of range"),
        ("ReduceMax", [randn(2, 3), axes(-3)], 18, {}, "axis -3 is out of range"),
        ("ReduceMean", [randn(2, 3)], 13, {"axes": [5]}, "axis 5 is out of range"),
        ("ReduceL1", [randn(2, 3), np.array([[0]], np.int64)], 18, {}, "1-D int64"),
        ("ReduceL2", [randn(2, 3), np.array([0.0], np.float32)], 18, {}, "1-D int64"),
        ("ArgMax", [randn(2, 3)], 13, {"axis": 2}, "axis 2 is out of range"),
        ("ArgMin", [np.zeros((2, 0), np.float32)], 13, {"axis": 1}, "axis 1 of size 0"),
        ("CumSum", [randn(2, 3), np.array(2)], 14, {}, "axis 2 is out of range"),
        ("CumSum", [randn(2, 3), np.array([0, 1])], 14, {}, "must hold one integer"),
        ("CumSum", [randn(2, 3), np.array(1.0, np.float32)], 14, {}, "must hold one integer"),
    ],
)
def test_bad_data_is_a_value_error(bound: Bound, op, inputs, opset, attrs, match):
    with pytest.raises(ValueError, match=match):
        bound.run(op, inputs, opset, **attrs)


@pytest.mark.parametrize(
    ("op", "opset", "attrs", "match"),
    [
        ("ReduceMax", 18, {"keepdims": 3}, "'keepdims' must be 0 or 1"),
        ("ReduceSum", 13, {"noop_with_empty_axes": 2}, "'noop_with_empty_axes'"),
        ("ReduceMean", 13, {"axes": [0.5]}, "'axes' must be a list of ints"),
        ("ArgMax", 13, {"axis": "x"}, "'axis' must be an int"),
        ("ArgMin", 12, {"select_last_index": 2}, "'select_last_index'"),
        ("CumSum", 14, {"exclusive": 5}, "'exclusive'"),
        ("CumSum", 14, {"reverse": -1}, "'reverse'"),
    ],
)
def test_bad_attributes_are_invalid_graph_naming_the_node(bound: Bound, op, opset, attrs, match):
    with pytest.raises(InvalidGraph, match=f"{op}_node.*{match}"):
        bound.kernel(node(op, 2, **attrs), opset)
