"""Tests of the CPU indexing kernels (onyxrt_cpu/kernels/indexing.py).

The ONNX node conformance cases for every op of the module run straight through the kernel
registry; targeted tests cover versions, dtypes, negative indices, clamping, reductions with
duplicate indices and the output ordering rules of Unique, against onnxruntime or numpy.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from kernel_cases import (
    assert_all_versions_registered,
    assert_every_op_has_cases,
    conformance_params,
    one_node,
    run_case,
    run_ours,
)
from kernel_cases import assert_same_as_onnxruntime as check

from onyxrt.errors import InvalidGraph

OPS = [
    "Slice",
    "Gather",
    "GatherElements",
    "GatherND",
    "ScatterND",
    "ScatterElements",
    "Scatter",
    "OneHot",
    "NonZero",
    "Unique",
]

#: Conformance cases this module cannot pass, with the reason. (None at present.)
EXPECTED_FAILURES: dict[str, str] = {}

I64 = np.iinfo(np.int64)


@pytest.mark.parametrize("case", conformance_params(OPS, EXPECTED_FAILURES))
def test_conformance(case) -> None:
    run_case(case)


def test_every_op_has_cases() -> None:
    assert_every_op_has_cases(OPS)


def test_every_schema_version_registered() -> None:
    assert_all_versions_registered(OPS)


# ----------------------------------------------------------------------------- helpers


RNG = np.random.default_rng(4321)


def _arr(shape, dtype=np.float32):
    return (RNG.standard_normal(shape) * 10).astype(dtype)


def _i64(v) -> np.ndarray:
    return np.array(v, dtype=np.int64)


# ----------------------------------------------------------------------------- Slice


@pytest.mark.parametrize(
    ("starts", "ends", "axes", "steps"),
    [
        ([0], [I64.max], [1], [1]),
        ([-1], [I64.min], [1], [-1]),
        ([I64.max], [I64.min], [0], [-2]),
        ([10], [-10], [2], [-1]),
        ([-100], [100], [-1], [3]),
        ([2, 1], [0, 5], [0, 2], [-1, 2]),
        ([1], [1], [0], [1]),
        ([5], [-8], [0], [-1]),
        ([4], [0], [0], [-1]),
        ([3], [1], [1], [1]),
    ],
)
def test_slice_clamping_vs_ort(starts, ends, axes, steps) -> None:
    x = _arr((5, 6, 7))
    check(one_node("Slice", 5), 13, x, _i64(starts), _i64(ends), _i64(axes), _i64(steps))


def test_slice_optional_inputs_and_int32() -> None:
    x = _arr((5, 6, 7), np.int32)
    i32 = np.int32
    check(one_node("Slice", 3), 10, x, np.array([1, 2], i32), np.array([4, 5], i32))
    node = one_node("Slice", ["in0", "in1", "in2", "", "in4"])
    check(node, 13, x, _i64([1, -1]), _i64([4, -6]), None, _i64([1, -2]))
    (y,) = run_ours(node, 13, x, _i64([1, -1]), _i64([4, -6]), None, _i64([1, -2]))
    np.testing.assert_array_equal(y, x[1:4, -1:-6:-2])


def test_slice_v1_attributes() -> None:
    x = _arr((5, 6, 7))
    (y,) = run_ours(one_node("Slice", 1, starts=[1, -3], ends=[I64.max, -1], axes=[0, 2]), 1, x)
    np.testing.assert_array_equal(y, x[1:, :, -3:-1])
    (y,) = run_ours(one_node("Slice", 1, starts=[1, 0], ends=[100, 2]), 9, x)
    np.testing.assert_array_equal(y, x[1:, 0:2])
    with pytest.raises(InvalidGraph, match="Slice"):
        run_ours(one_node("Slice", 1, starts=[1]), 1, x)


def test_slice_bad_step_and_strings() -> None:
    x = np.array(["a", "b", "c", "d"], dtype=object)
    (y,) = run_ours(one_node("Slice", 5), 13, x, _i64([-1]), _i64([-5]), _i64([0]), _i64([-2]))
    assert y.tolist() == ["d", "b"]
    with pytest.raises(ValueError, match="step"):
        run_ours(one_node("Slice", 5), 13, x, _i64([0]), _i64([2]), _i64([0]), _i64([0]))


# ----------------------------------------------------------------------------- Gather family


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.uint8])
def test_gather_negative_indices_vs_ort(axis, dtype) -> None:
    x = _arr((5, 6, 7), dtype)
    check(one_node("Gather", 2, axis=axis), 13, x, _i64([[0, -1], [2, -2]]))
    check(one_node("Gather", 2, axis=axis), 11, x, np.array(-1, np.int32))


def test_gather_out_of_range_and_dtypes() -> None:
    with pytest.raises(IndexError, match="out of range"):
        run_ours(one_node("Gather", 2), 13, _arr((3, 2)), _i64([3]))
    x = _arr((4, 2)).astype(ml_dtypes.bfloat16)
    (y,) = run_ours(one_node("Gather", 2), 1, x, _i64([3, 0]))
    assert y.dtype == x.dtype
    np.testing.assert_array_equal(y, x[[3, 0]])


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather_elements_vs_ort(axis) -> None:
    x = _arr((5, 6, 7))
    n = x.shape[axis]
    idx = RNG.integers(-n, n, (5, 6, 7))
    check(one_node("GatherElements", 2, axis=axis), 13, x, idx.astype(np.int64))
    check(one_node("GatherElements", 2, axis=axis), 11, x, idx[:3, :2, :4].astype(np.int32))


@pytest.mark.parametrize(
    ("indices", "batch_dims"),
    [
        ([[0, 1], [1, -1]], 0),
        ([[[0, 1, 2, 3]], [[1, -1, 0, 0]]], 0),
        ([[[1], [2]], [[0], [-1]]], 1),
        (RNG.integers(0, 4, (2, 3, 6, 1)), 2),
        (RNG.integers(0, 4, (2, 3, 6, 2)), 2),
        (RNG.integers(0, 2, (2, 7, 2)), 1),
    ],
)
def test_gather_nd_vs_ort(indices, batch_dims) -> None:
    x = _arr((2, 3, 4, 5))
    check(one_node("GatherND", 2, batch_dims=batch_dims), 13, x, _i64(indices))


def test_gather_nd_errors() -> None:
    with pytest.raises(ValueError, match="batch"):
        run_ours(one_node("GatherND", 2, batch_dims=1), 13, _arr((2, 3)), _i64([[0], [1], [0]]))
    with pytest.raises(IndexError):
        run_ours(one_node("GatherND", 2), 13, _arr((2, 3)), _i64([[0, 3]]))


# ----------------------------------------------------------------------------- Scatter family


@pytest.mark.parametrize("reduction", ["add", "mul", "max", "min"])
@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_scatter_nd_reductions_with_duplicates_vs_ort(reduction, dtype) -> None:
    data = _arr((2, 3, 4, 5), dtype)
    node = one_node("ScatterND", 3, reduction=reduction)
    dup = _i64([[0, 1], [1, 2], [0, 1], [0, 1]])
    check(node, 18, data, dup, _arr((4, 4, 5), dtype))
    idx = RNG.integers(0, 2, (10, 4)).astype(np.int64)
    check(node, 18, data, idx, _arr((10,), dtype))


def test_scatter_nd_none_and_negative_indices() -> None:
    data = _arr((2, 3, 4))
    upd = _arr((2, 4))
    check(one_node("ScatterND", 3), 11, data, _i64([[0, -1], [1, 0]]), upd)
    (y,) = run_ours(one_node("ScatterND", 3), 13, data, _i64([[0, -1], [1, 0]]), upd)
    want = data.copy()
    want[0, 2] = upd[0]
    want[1, 0] = upd[1]
    np.testing.assert_array_equal(y, want)
    assert not np.array_equal(data, y)  # the input was not modified in place
    # Duplicate indices without reduction: the last update wins, as in onnxruntime.
    check(one_node("ScatterND", 3), 16, data, _i64([[0, 1], [0, 1]]), _arr((2, 4)))


def test_scatter_nd_reduction_versions() -> None:
    with pytest.raises(InvalidGraph, match="reduction"):
        run_ours(one_node("ScatterND", 3, reduction="max"), 16, _arr(3), _i64([[0]]), _arr(1))
    with pytest.raises(InvalidGraph, match="reduction"):
        run_ours(one_node("ScatterND", 3, reduction="add"), 13, _arr(3), _i64([[0]]), _arr(1))
    x = np.zeros(4, ml_dtypes.bfloat16)
    upd = np.array([1, 2], ml_dtypes.bfloat16)
    (y,) = run_ours(one_node("ScatterND", 3, reduction="add"), 18, x, _i64([[1], [1]]), upd)
    assert y.dtype == x.dtype and y.astype(np.float32).tolist() == [0, 3, 0, 0]


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_scatter_elements_vs_ort(axis) -> None:
    x = _arr((5, 6, 7))
    n = x.shape[axis]
    idx = np.clip(RNG.integers(-5, 5, (5, 6, 7)), -n, n - 1)
    check(one_node("ScatterElements", 3, axis=axis), 18, x, idx.astype(np.int64), _arr(idx.shape))
    small = idx[:3, :2, :4].astype(np.int64)
    for red in ["add", "mul", "max", "min"]:
        node = one_node("ScatterElements", 3, axis=axis, reduction=red)
        check(node, 18, x, small, _arr(small.shape))
        check(node, 18, x.astype(np.int32), small, RNG.integers(-3, 3, small.shape, np.int32))


def test_scatter_deprecated_alias() -> None:
    data = np.zeros((3, 3), np.float32)
    idx = _i64([[1, 0, 2], [0, 2, 1]])
    upd = np.array([[1.0, 1.1, 1.2], [2.0, 2.1, 2.2]], np.float32)
    (y,) = run_ours(one_node("Scatter", 3), 9, data, idx, upd)
    want = np.array([[2.0, 1.1, 0.0], [1.0, 0.0, 2.2], [0.0, 2.1, 1.2]], np.float32)
    np.testing.assert_array_equal(y, want)
    (y2,) = run_ours(one_node("Scatter", 3, axis=1), 11, data, _i64([[-1, 0]]), _arr((1, 2)))
    assert y2[0, 2] != 0 and y2[0, 0] != 0


# ----------------------------------------------------------------------------- OneHot


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_one_hot_vs_ort(axis) -> None:
    ind = _i64([[1, -1, 5], [0, -3, 3]])
    check(one_node("OneHot", 3, axis=axis), 11, ind, _i64(3), np.array([0, 1], np.float32))
    check(
        one_node("OneHot", 3, axis=axis),
        11,
        ind.astype(np.float32),
        np.array([4.0], np.float32),
        np.array([2, 7], np.float32),
    )
    check(one_node("OneHot", 3, axis=axis), 9, ind, _i64([3]), np.array([0, 1], np.int64))


def test_one_hot_float_indices_truncate_and_strings() -> None:
    (y,) = run_ours(
        one_node("OneHot", 3),
        11,
        np.array([1.7, -0.5, 2.0], np.float32),
        np.array(3, np.int32),
        np.array(["off", "on"], dtype=object),
    )
    assert y.tolist() == [["off", "on", "off"], ["on", "off", "off"], ["off", "off", "on"]]


# ----------------------------------------------------------------------------- NonZero


@pytest.mark.parametrize(
    "x",
    [
        np.array([[0, 1, 0], [2, 0, 3]], np.float32),
        np.array([True, False, True]),
        np.zeros((2, 0), np.int32),
        np.array(3.0, np.float32),
        np.array(0, np.int32),
        np.array([[0, 1], [1, 1]], np.uint8),
    ],
)
def test_non_zero_vs_ort(x) -> None:
    check(one_node("NonZero", 1), 13, x)


def test_non_zero_other_dtypes() -> None:
    x = np.array([[0, 1.5], [0, -2]], ml_dtypes.bfloat16)
    (y,) = run_ours(one_node("NonZero", 1), 9, x)
    assert y.dtype == np.int64
    np.testing.assert_array_equal(y, [[0, 1], [1, 1]])
    (y,) = run_ours(one_node("NonZero", 1), 13, np.array(["", "a", "b"], dtype=object))
    np.testing.assert_array_equal(y, [[1, 2]])


# ----------------------------------------------------------------------------- Unique


@pytest.mark.parametrize(
    ("x", "attrs"),
    [
        (np.array([2, 1, 1, 3, 4, 3], np.float32), {"sorted": 0}),
        (np.array([2, 1, 1, 3, 4, 3], np.int64), {}),
        (np.array([[1, 3], [2, 3]], np.int64), {}),
        (np.array([[1, 0, 0], [1, 0, 0], [2, 3, 4]], np.float32), {"axis": 0}),
        (np.array([[1, 0, 0], [1, 0, 0], [2, 3, 4]], np.float32), {"axis": 0, "sorted": 0}),
        (RNG.integers(0, 3, (4, 5, 3)).astype(np.int64), {"axis": -1, "sorted": 0}),
        (RNG.integers(0, 3, (4, 5, 3)).astype(np.int64), {"axis": 2}),
        (RNG.integers(0, 3, (6, 2)).astype(np.float32), {"axis": 0}),
        (RNG.integers(0, 5, (40,)).astype(np.float64), {"sorted": 0}),
    ],
)
def test_unique_vs_ort(x, attrs) -> None:
    check(one_node("Unique", 1, 4, **attrs), 11, x)


def test_unique_strings_nan_and_empty() -> None:
    s = np.array(["b", "a", "c", "a", "b"], dtype=object)
    y, first, inv, cnt = run_ours(one_node("Unique", 1, 4), 11, s)
    assert y.tolist() == ["a", "b", "c"]
    assert first.tolist() == [1, 0, 2] and inv.tolist() == [1, 0, 2, 0, 1]
    assert cnt.tolist() == [2, 2, 1]
    y, first, inv, cnt = run_ours(one_node("Unique", 1, 4, sorted=0), 11, s)
    assert y.tolist() == ["b", "a", "c"] and inv.tolist() == [0, 1, 2, 1, 0]
    # NaNs form one group (numpy semantics), sorted last.
    x = np.array([np.nan, 1, np.nan], np.float32)
    y, first, inv, cnt = run_ours(one_node("Unique", 1, 4), 11, x)
    np.testing.assert_array_equal(y, [1, np.nan])
    assert first.tolist() == [1, 0] and inv.tolist() == [1, 0, 1] and cnt.tolist() == [1, 2]
    y, first, inv, cnt = run_ours(one_node("Unique", 1, 4), 11, np.zeros(0, np.float32))
    assert y.shape == (0,) and first.dtype == np.int64 and cnt.size == 0


def test_unique_axis_lexicographic_matches_numpy() -> None:
    x = RNG.integers(0, 2, (3, 9, 2)).astype(np.int64)
    y, first, inv, cnt = run_ours(one_node("Unique", 1, 4, axis=1), 11, x)
    ny, nfirst, ninv, ncnt = np.unique(
        x, axis=1, return_index=True, return_inverse=True, return_counts=True
    )
    np.testing.assert_array_equal(y, ny)
    np.testing.assert_array_equal(first, nfirst)
    np.testing.assert_array_equal(inv, ninv.ravel())
    np.testing.assert_array_equal(cnt, ncnt)
