"""Tests of the library's indexing operators (onyxrt_ops.indexing).

Every operator runs over numpy and over array_api_strict and is compared with onnxruntime
(or onnx's reference evaluator where onnxruntime has no kernel): old versions, attribute
variants, negative indices, Slice clamping, scatter reductions with duplicate indices
(exact: applied in update order), Unique's orderings. Half-precision and string tensors
(which the array API standard lacks) run over numpy. Attribute errors are InvalidGraph
naming the node; bad data is ValueError, an index out of range IndexError.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from library_harness import Bound, node, typed_oracle, unbound_versions
from onnx import TensorProto, helper

from onyxrt.dtypes import np_dtype, onnx_elem_type
from onyxrt.errors import InvalidGraph
from onyxrt.kernels import KernelInfo
from onyxrt_ops import library

BF16 = np_dtype(TensorProto.BFLOAT16)
INDEXING = {d.op_type for d in library.definitions if d.cls.__module__ == "onyxrt_ops.indexing"}
I64 = np.iinfo(np.int64)


def randn(*shape: int, seed: int = 0, dtype: Any = np.float32) -> np.ndarray:
    """Seeded standard-normal values times 10."""
    return (np.random.default_rng(seed).standard_normal(shape) * 10).astype(dtype)


def randint(*shape: int, lo: int = 0, hi: int = 4, seed: int = 0, dtype: Any = np.int64):
    """Seeded integers in [lo, hi)."""
    return np.random.default_rng(seed).integers(lo, hi, shape).astype(dtype)


def i64(values: Any) -> np.ndarray:
    return np.array(values, np.int64)


def case(op: str, inputs: list[Any], opset: int, *, id: str | None = None, **attrs: Any) -> Any:
    return pytest.param(op, inputs, opset, attrs, id=id or f"{op}-{opset}")


X = randn(5, 6, 7)
ELEMENT_IDX = np.clip(randint(3, 4, 5, lo=-5, hi=5, seed=1), -5, 4)

CASES = [
    case("Slice", [X, i64([1, -1]), i64([4, -7]), i64([0, 2]), i64([2, -2])], 13),
    case("Slice", [X, i64([-1]), i64([I64.min]), i64([1]), i64([-1])], 13, id="Slice-to-start"),
    case("Slice", [X, i64([I64.max]), i64([I64.min]), i64([0]), i64([-2])], 13, id="Slice-extremes"),
    case("Slice", [X, i64([10]), i64([-10]), i64([2]), i64([-1])], 13, id="Slice-clamped"),
    case("Slice", [X, i64([3]), i64([1])], 13, id="Slice-empty"),
    case("Slice", [randint(5, 6, dtype=np.int32), np.array([1, 2], np.int32),
                   np.array([4, 5], np.int32)], 10, id="Slice-10-int32"),
    case("Slice", [X], 1, starts=[1, -3], ends=[1000, -1], axes=[0, 2]),
    case("Slice", [X], 1, starts=[1, 0], ends=[3, 2], id="Slice-1-no-axes"),
    case("Gather", [X, i64([[0, -1], [2, -2]])], 13, axis=1),
    case("Gather", [X, np.array(-1, np.int32)], 11, axis=-1, id="Gather-11-scalar"),
    case("Gather", [randint(6, 3, dtype=np.uint8), i64([5, 0, 5])], 1, id="Gather-1-uint8"),
    case("Gather", [i64([1, 7, 768]), i64(2)], 13, id="Gather-shape"),
    case("GatherElements", [X, randint(5, 3, 7, lo=-6, hi=6)], 13, axis=1),
    case("GatherElements", [X, randint(2, 6, 3, lo=-5, hi=5, dtype=np.int32)], 11,
         id="GatherElements-11-smaller"),
    case("GatherND", [X, i64([[0, 1], [1, -1]])], 13),
    case("GatherND", [X, i64([[[0, 1, 2]], [[4, -1, 0]]])], 11, id="GatherND-11-elements"),
    case("GatherND", [X, i64([[[1], [2]], [[0], [-1]], [[0], [0]], [[1], [1]], [[5], [0]]])],
         12, batch_dims=1),
    case("GatherND", [randn(2, 3, 4, 5), randint(2, 3, 6, 2)], 13, batch_dims=2,
         id="GatherND-batch2"),
    case("ScatterND", [X, i64([[0, -1], [1, 0]]), randn(2, 7, seed=1)], 11),
    case("ScatterND", [X, i64([[0, 1], [0, 1]]), randn(2, 7, seed=1)], 16,
         id="ScatterND-16-last-wins"),
    case("ScatterND", [X, i64([[4, 5, 6], [0, 0, 0]]), randn(2, seed=1)], 13, id="ScatterND-13-elements"),
    *[case("ScatterND", [X, i64([[0, 1], [1, 2], [0, 1], [0, 1]]), randn(4, 7, seed=1)],
           18 if r in ("max", "min") else 16, reduction=r, id=f"ScatterND-{r}")
      for r in ("add", "mul", "max", "min")],
    case("ScatterND", [randint(4, 5, hi=9), randint(10, 1), randint(10, 5, lo=-3, hi=3, seed=2)], 18,
         reduction="add", id="ScatterND-add-int64"),
    case("ScatterElements", [X[:4, :5, :6], ELEMENT_IDX, randn(3, 4, 5, seed=1)], 13, axis=2),
    *[case("ScatterElements", [X, ELEMENT_IDX, randn(3, 4, 5, seed=1)], 18, axis=a,
           reduction=r, id=f"ScatterElements-{r}-{a}")
      for r, a in (("none", 1), ("add", -1), ("mul", 0), ("max", 2), ("min", 1))],
    case("ScatterElements", [randint(3, 3, hi=9, dtype=np.int32), i64([[1, 0, 2], [1, 1, 1]]),
                             randint(2, 3, lo=-3, hi=3, dtype=np.int32)], 16, reduction="mul",
         id="ScatterElements-16-mul-int32"),
    case("Scatter", [np.zeros((3, 3), np.float32), i64([[1, 0, 2], [0, 2, 1]]),
                     randn(2, 3, seed=1)], 9),
    case("Scatter", [np.zeros((3, 3), np.float32), i64([[-1, 0]]), randn(1, 2, seed=1)], 11,
         axis=1, id="Scatter-11-axis"),
    case("OneHot", [i64([[1, -1, 5], [0, -3, 3]]), i64(3), np.array([0, 1], np.float32)], 11,
         axis=1),
    case("OneHot", [np.array([1.7, -0.5, 2.0], np.float32), np.array([4.0], np.float32),
                    np.array([2, 7], np.float32)], 11, id="OneHot-float-indices"),
    case("OneHot", [i64([[1, 2], [0, 3]]), i64([4]), i64([0, 1])], 9, axis=0, id="OneHot-9-axis0"),
    case("NonZero", [np.array([[0, 1, 0], [2, 0, 3]], np.float32)], 13),
    case("NonZero", [np.array([True, False, True])], 9, id="NonZero-9-bool"),
    case("NonZero", [np.zeros((2, 0), np.int32)], 13, id="NonZero-empty"),
    case("NonZero", [np.array(3.0, np.float32)], 13, id="NonZero-scalar"),
    case("NonZero", [np.array(0, np.int32)], 13, id="NonZero-zero-scalar"),
]

_OUT_DTYPE = {"NonZero": lambda inputs: np.int64, "OneHot": lambda inputs: inputs[2].dtype}


@pytest.mark.parametrize(("op", "inputs", "opset", "attrs"), CASES)
def test_same_as_onnxruntime(bound: Bound, op, inputs, opset, attrs):
    got = bound.run(op, inputs, opset, **attrs)
    out_dtype = _OUT_DTYPE.get(op, lambda inputs: inputs[0].dtype)(inputs)
    # onnxruntime refuses the deprecated Scatter from opset 11: ScatterElements is the same.
    oracle_op = "ScatterElements" if op == "Scatter" and opset >= 11 else op
    expected = np.asarray(typed_oracle(oracle_op, inputs, opset, out_dtype, **attrs))
    assert got.dtype == expected.dtype and got.shape == expected.shape
    np.testing.assert_array_equal(got, expected)


def test_inputs_are_not_modified(bound: Bound):
    data = randn(4, 5)
    before = data.copy()
    bound.run("ScatterND", [data, i64([[1], [1]]), randn(2, 5, seed=1)], 18, reduction="add")
    bound.run("ScatterElements", [data, i64([[0, 1]]), randn(1, 2, seed=1)], 18)
    np.testing.assert_array_equal(data, before)


def test_every_operator_has_a_case():
    # TensorScatter: test_misc_ops.py
    assert {p.values[0] for p in CASES} | {"Unique"} == INDEXING - {"TensorScatter"}


def test_every_onnx_version_is_bound(numpy_bound: Bound, strict_bound: Bound):
    assert not unbound_versions(numpy_bound.registry, INDEXING)
    assert not unbound_versions(strict_bound.registry, INDEXING)


def test_steering_inputs_are_host_inputs():
    hosts = {(d.op_type, d.versions[-1]): set(d.host_inputs) for d in library.definitions
             if d.op_type in INDEXING}
    assert hosts[("Slice", 13)] == {1, 2, 3, 4} and hosts[("OneHot", 28)] == {1}
    assert hosts[("Gather", 13)] == set()  # indices are data, on the device


# ----------------------------------------------------------------------------- Unique


def _unique_oracle(x: np.ndarray, opset: int, **attrs: Any) -> list[np.ndarray]:
    n = helper.make_node("Unique", ["x"], ["y", "first", "inverse", "counts"], **attrs)
    i64_out = [helper.make_tensor_value_info(k, TensorProto.INT64, None)
               for k in ("first", "inverse", "counts")]
    graph = helper.make_graph(
        [n], "oracle", [helper.make_tensor_value_info("x", onnx_elem_type(x.dtype), list(x.shape))],
        [helper.make_tensor_value_info("y", onnx_elem_type(x.dtype), None), *i64_out])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)
    import onnxruntime as ort

    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})


def _unique(bound: Bound, x: np.ndarray, opset: int = 11, **attrs: Any) -> list[np.ndarray]:
    n = helper.make_node("Unique", ["in0"], ["y", "first", "inverse", "counts"], name="Unique_node",
                         **attrs)
    kdef, reason = bound.registry.lookup("", "Unique", opset)
    assert kdef is not None, reason
    kernel = kdef.factory(KernelInfo.from_node(n, opset, since_version=kdef.since_version))
    return [bound.host(v) for v in kernel.compute(bound.array(x))]


@pytest.mark.parametrize(("x", "attrs"), [
    (np.array([2, 1, 1, 3, 4, 3], np.float32), {"sorted": 0}),
    (np.array([2, 1, 1, 3, 4, 3], np.int64), {}),
    (np.array([[1, 3], [2, 3]], np.int64), {}),
    (np.array([[1, 0, 0], [1, 0, 0], [2, 3, 4]], np.float32), {"axis": 0}),
    (np.array([[1, 0, 0], [1, 0, 0], [2, 3, 4]], np.float32), {"axis": 0, "sorted": 0}),
    (randint(4, 5, 3, hi=3), {"axis": -1, "sorted": 0}),
    (randint(4, 5, 3, hi=3), {"axis": 2}),
    (randint(6, 2, hi=3, dtype=np.float32), {"axis": 0}),
    (randint(40, hi=5, dtype=np.float64), {"sorted": 0}),
    (randint(1000, hi=50, dtype=np.float32), {}),
], ids=lambda v: str(v) if isinstance(v, dict) else str(v.shape))
def test_unique_same_as_onnxruntime(bound: Bound, x, attrs):
    for got, want in zip(_unique(bound, x, **attrs), _unique_oracle(x, 11, **attrs), strict=True):
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)


def test_unique_nan_and_empty(bound: Bound):
    """NaNs form one group (numpy.unique's rule), sorted last."""
    y, first, inverse, counts = _unique(bound, np.array([np.nan, 1, np.nan], np.float32))
    np.testing.assert_array_equal(y, [1, np.nan])
    assert first.tolist() == [1, 0] and inverse.tolist() == [1, 0, 1] and counts.tolist() == [1, 2]
    y, first, inverse, counts = _unique(bound, np.zeros(0, np.float32))
    assert y.shape == (0,) and first.dtype == inverse.dtype == counts.dtype == np.int64
    assert first.size == inverse.size == counts.size == 0


def test_unique_axis_is_lexicographic(bound: Bound):
    x = randint(3, 9, 2, hi=2)
    want = np.unique(x, axis=1, return_index=True, return_inverse=True, return_counts=True)
    for got, w in zip(_unique(bound, x, axis=1), want, strict=True):
        np.testing.assert_array_equal(got, np.asarray(w).reshape(got.shape))


def test_unique_strings_over_numpy(numpy_bound: Bound):
    s = np.array(["b", "a", "c", "a", "b"], dtype=object)
    y, first, inverse, counts = _unique(numpy_bound, s)
    assert y.tolist() == ["a", "b", "c"] and first.tolist() == [1, 0, 2]
    assert inverse.tolist() == [1, 0, 2, 0, 1] and counts.tolist() == [2, 2, 1]
    y, first, inverse, counts = _unique(numpy_bound, s, sorted=0)
    assert y.tolist() == ["b", "a", "c"] and inverse.tolist() == [0, 1, 2, 1, 0]


# ----------------------------------------------------------------- half precision, strings


@pytest.mark.parametrize("half", [np.float16, BF16], ids=["float16", "bfloat16"])
def test_half_types_over_numpy(numpy_bound: Bound, half):
    data = randn(4, 5).astype(half)
    upd = np.array([[1, 2, 3, 4, 5], [1, 1, 1, 1, 1]], np.float32).astype(half)
    got = numpy_bound.run("ScatterND", [data, i64([[1], [1]]), upd], 18, reduction="add")
    want = data.astype(np.float32)
    want[1] += upd.astype(np.float32).sum(axis=0)
    assert got.dtype == half
    np.testing.assert_array_equal(got.astype(np.float32), want.astype(half).astype(np.float32))
    got = numpy_bound.run("Gather", [data, i64([3, -4])], 13)
    assert got.dtype == half and np.array_equal(got.astype(np.float32), data[[3, 0]].astype(np.float32))
    got = numpy_bound.run("NonZero", [np.array([[0, 1.5], [0, -2]], half)], 13)
    np.testing.assert_array_equal(got, [[0, 1], [1, 1]])
    got = numpy_bound.run("OneHot", [i64([0, 2]), i64(3), np.array([0, 1], half)], 11)
    assert got.dtype == half and got.astype(np.float32).tolist() == [[1, 0, 0], [0, 0, 1]]


def test_strings_over_numpy(numpy_bound: Bound):
    s = np.array(["a", "b", "c", "d"], dtype=object)
    assert numpy_bound.run("Slice", [s, i64([-1]), i64([-5]), i64([0]), i64([-2])], 13).tolist() == ["d", "b"]
    assert numpy_bound.run("Gather", [s, i64([[3, -4]])], 13).tolist() == [["d", "a"]]
    got = numpy_bound.run("OneHot", [np.array([1.7, -0.5], np.float32), np.array(3, np.int32),
                                     np.array(["off", "on"], dtype=object)], 11)
    assert got.dtype == object and got.tolist() == [["off", "on", "off"], ["on", "off", "off"]]


# ----------------------------------------------------------------------------- errors


@pytest.mark.parametrize(("op", "opset", "attrs", "match"), [
    ("Slice", 1, {"starts": [1]}, "'starts' and 'ends' are required"),
    ("Slice", 1, {"starts": [1], "ends": [2, 3]}, "same length"),
    ("Slice", 1, {"starts": [1], "ends": [2], "axes": [0, 1]}, "as many values"),
    ("GatherND", 13, {"batch_dims": -1}, "batch_dims"),
    ("ScatterND", 16, {"reduction": "max"}, "reduction 'max' is not supported in version 16"),
    ("ScatterND", 13, {"reduction": "add"}, "reduction 'add'"),
    ("ScatterElements", 18, {"reduction": "sum"}, "reduction 'sum'"),
])
def test_bad_attributes_are_invalid_graph(numpy_bound: Bound, op, opset, attrs, match):
    with pytest.raises(InvalidGraph, match=match) as err:
        numpy_bound.kernel(node(op, 3, **attrs), opset)
    assert f"{op}_node" in str(err.value)


@pytest.mark.parametrize(("op", "inputs", "opset", "attrs", "error", "match"), [
    ("Gather", [randn(3, 2), i64([3])], 13, {}, IndexError, "out of range"),
    ("Gather", [randn(3, 2), i64([-4])], 13, {}, IndexError, "out of range"),
    ("Gather", [randn(3, 2), i64([0])], 13, {"axis": 2}, ValueError, "axis 2"),
    ("GatherElements", [randn(3, 2), i64([[0, 3]])], 13, {"axis": 1}, IndexError, "out of range"),
    ("GatherElements", [randn(3, 2), i64([0, 1])], 13, {}, ValueError, "rank"),
    ("GatherND", [randn(2, 3), i64([[0, 3]])], 13, {}, IndexError, "out of range"),
    ("GatherND", [randn(2, 3), i64([[0], [1], [0]])], 13, {"batch_dims": 1}, ValueError, "batch"),
    ("ScatterND", [randn(2, 3), i64([[0]]), randn(2, 3)], 13, {}, ValueError, "updates shape"),
    ("ScatterND", [randn(2, 3), i64([[2]]), randn(1, 3)], 13, {}, IndexError, "out of range"),
    ("ScatterElements", [randn(2, 3), i64([[0, 1]]), randn(1, 3)], 13, {}, ValueError, "updates shape"),
    ("Slice", [randn(4), i64([0]), i64([2]), i64([0]), i64([0])], 13, {}, ValueError, "step"),
    ("Slice", [randn(4), i64([0, 1]), i64([2])], 13, {}, ValueError, "starts"),
    ("Slice", [randn(4, 4), i64([0, 1]), i64([2, 3]), i64([1, -1])], 13, {}, ValueError, "repeated"),
    ("OneHot", [i64([0]), i64(0), np.array([0, 1], np.float32)], 11, {}, ValueError, "depth"),
    ("OneHot", [i64([0]), i64(2), np.array([0, 1, 2], np.float32)], 11, {}, ValueError, "values"),
])
def test_bad_data_raises(bound: Bound, op, inputs, opset, attrs, error, match):
    with pytest.raises(error, match=match):
        bound.run(op, inputs, opset, **attrs)


def test_constant_gather_indices_are_checked_per_axis_size(numpy_bound: Bound):
    n = node("Gather", 2)
    kdef, _ = numpy_bound.registry.lookup("", "Gather", 13)
    kernel = kdef.factory(KernelInfo.from_node(n, 13, since_version=13, constants={1: i64([-1, 2])}))
    np.testing.assert_array_equal(kernel.compute(np.arange(5), None)[0], [4, 2])
    np.testing.assert_array_equal(kernel.compute(np.arange(3), None)[0], [2, 2])
    with pytest.raises(IndexError, match="out of range"):
        kernel.compute(np.arange(2), None)
