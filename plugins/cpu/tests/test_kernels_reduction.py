"""Tests for the CPU reduction kernels (onyxrt_cpu.kernels.reduction).

The onnx node conformance cases run straight through the registry; targeted tests cover what
they leave out (attribute-axes versions, integer and half types, noop_with_empty_axes, empty
sets, ArgMax/ArgMin ties, CumSum modes, TopK ties and old versions), checked against
onnxruntime or numpy truth.
"""

from __future__ import annotations

import numpy as np
import pytest
from kernel_cases import BF16, conformance_params, randn, run_case, run_op, run_op_onnxruntime
from onnx import TensorProto, helper

from onyxrt.errors import InvalidGraph
from onyxrt.kernels import KernelInfo
from onyxrt_cpu.kernels import registry

REDUCE_OPS = [
    "ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
    "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare",
]  # fmt: skip
OPS = [*REDUCE_OPS, "ArgMax", "ArgMin", "CumSum", "TopK"]

# Conformance cases these kernels cannot pass, with the reason. None today.
XFAIL: dict[str, str] = {}


@pytest.mark.parametrize("case", conformance_params(OPS, XFAIL))
def test_conformance(case):
    run_case(case)


# ----------------------------------------------------------------- helpers


def ours(op, inputs, opset, n_out=1, **attrs):
    """Run our kernel for ``op`` at ``opset``; returns the first ``n_out`` outputs."""
    outs = run_op(op, inputs, opset, n_out, **attrs)
    return outs[0] if n_out == 1 else outs[:n_out]


def onnxrt(op, inputs, opset, n_out=1, out_types=None, **attrs):
    """Run ``op`` at ``opset`` in onnxruntime (the oracle)."""
    out_types = out_types or [inputs[0].dtype] * n_out
    res = run_op_onnxruntime(op, inputs, opset, out_types, **attrs)
    return res[0] if n_out == 1 else res


def _axes_input_since(op):
    return 13 if op == "ReduceSum" else 18


def _reduce_both(op, x, axes, opset, **attrs):
    """(ours, onnxruntime) for a Reduce op, passing axes the way ``opset`` expects."""
    if opset >= _axes_input_since(op):
        ins = [x] if axes is None else [x, np.array(axes, dtype=np.int64)]
        return ours(op, ins, opset, **attrs), onnxrt(op, ins, opset, **attrs)
    if axes is not None:
        attrs = {**attrs, "axes": list(axes)}
    return ours(op, [x], opset, **attrs), onnxrt(op, [x], opset, **attrs)


# ------------------------------------------------------------------- Reduce*


@pytest.mark.parametrize("op", REDUCE_OPS)
@pytest.mark.parametrize("opset", [11, 13, 18])
@pytest.mark.parametrize("axes", [None, [0], [1, 2], [-1], [0, -1], [2, 0]])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_reduce_float32_vs_ort(op, opset, axes, keepdims):
    x = randn((3, 4, 5), seed=1)
    if op in ("ReduceLogSum", "ReduceL2", "ReduceProd"):
        x = np.abs(x) + 0.5
    got, want = _reduce_both(op, x, axes, opset, keepdims=keepdims)
    assert got.dtype == np.float32
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op", [op for op in REDUCE_OPS if op != "ReduceLogSumExp"])
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_reduce_integer_types_vs_ort(op, dtype):
    x = np.random.default_rng(2).integers(-9, 10, size=(3, 4, 5)).astype(dtype)
    if op in ("ReduceLogSum", "ReduceL2"):
        x = np.abs(x) % 4 + 1
    if op == "ReduceProd":  # keep the product inside int32
        x = np.where(x >= 0, 1, -1).astype(dtype) + (x == 9)
    for axes in ([1], [0, 2], None):
        got, want = _reduce_both(op, x, axes, 18, keepdims=0)
        assert got.dtype == dtype
        np.testing.assert_array_equal(got, want)


def test_reduce_logsumexp_integer_truncates_float_result():
    # onnxruntime's integer ReduceLogSumExp is not log(sum(exp(x))) truncated; ours is.
    x = np.array([[4, 4, 4, 4], [1, 2, 3, 4], [0, 0, 0, 0]], dtype=np.int32)
    got = ours("ReduceLogSumExp", [x, np.array([1], dtype=np.int64)], 18, keepdims=0)
    assert got.dtype == np.int32
    want = np.log(np.exp(x.astype(np.float64)).sum(axis=1)).astype(np.int32)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin"])
@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.uint32, np.uint64])
def test_reduce_max_min_small_int_types(op, dtype):
    x = np.random.default_rng(3).integers(0, 100, size=(4, 6)).astype(dtype)
    got = ours(op, [x, np.array([1], dtype=np.int64)], 18)
    assert got.dtype == dtype
    want = (np.max if op == "ReduceMax" else np.min)(x, axis=1, keepdims=True)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceL2"])
def test_reduce_float16_accumulates_in_float32(op):
    x = (np.abs(randn((8, 3000), seed=4)) + 0.1).astype(np.float16)
    got = ours(op, [x, np.array([1], dtype=np.int64)], 18)
    assert got.dtype == np.float16
    want = _reduce_both(op, x.astype(np.float32), [1], 18)[1]
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=1e-3)


@pytest.mark.parametrize("op", REDUCE_OPS)
def test_reduce_bfloat16(op):
    x = (np.abs(randn((4, 6), seed=5)) + 0.5).astype(BF16)
    got = ours(op, [x, np.array([1], dtype=np.int64)], 18)
    assert got.dtype == BF16 and got.shape == (4, 1)
    want = _reduce_both(op, x.astype(np.float32), [1], 18)[1]
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=2e-2)


@pytest.mark.parametrize("op", REDUCE_OPS)
def test_reduce_noop_with_empty_axes_vs_ort(op):
    x = np.abs(randn((2, 3), seed=6)) + 0.5
    for axes in (None, []):
        ins = [x] if axes is None else [x, np.array(axes, dtype=np.int64)]
        got = ours(op, ins, 18, noop_with_empty_axes=1)
        want = onnxrt(op, ins, 18, noop_with_empty_axes=1)
        assert got.shape == x.shape
        np.testing.assert_allclose(got, want, rtol=1e-6)
        # Without noop, empty axes reduce everything.
        got_all = ours(op, ins, 18, keepdims=0)
        assert got_all.shape == ()
        np.testing.assert_allclose(got_all, onnxrt(op, ins, 18, keepdims=0), rtol=1e-6)


EMPTY_IDENTITY = {
    "ReduceSum": 0.0,
    "ReduceMean": np.nan,
    "ReduceMax": -np.inf,
    "ReduceMin": np.inf,
    "ReduceProd": 1.0,
    "ReduceL1": 0.0,
    "ReduceL2": 0.0,
    "ReduceLogSum": -np.inf,
    "ReduceLogSumExp": -np.inf,
    "ReduceSumSquare": 0.0,
}


@pytest.mark.parametrize("op", REDUCE_OPS)
def test_reduce_empty_set_gives_identity(op):
    x = np.zeros((2, 0, 4), dtype=np.float32)
    with np.errstate(all="raise"):
        got = ours(op, [x, np.array([1], dtype=np.int64)], 18)
    assert got.shape == (2, 1, 4) and got.dtype == np.float32
    np.testing.assert_array_equal(got, np.full((2, 1, 4), EMPTY_IDENTITY[op], np.float32))


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.uint8, np.int64])
def test_reduce_max_min_empty_set_integers(dtype):
    x = np.zeros((0, 3), dtype=dtype)
    axes = np.array([0], dtype=np.int64)
    mx = ours("ReduceMax", [x, axes], 18, keepdims=0)
    mn = ours("ReduceMin", [x, axes], 18, keepdims=0)
    assert mx.dtype == mn.dtype == dtype
    np.testing.assert_array_equal(mx, [np.iinfo(dtype).min] * 3)
    np.testing.assert_array_equal(mn, [np.iinfo(dtype).max] * 3)


def test_reduce_max_min_bool():
    x = np.array([[True, False], [False, False]])
    axes = np.array([1], dtype=np.int64)
    np.testing.assert_array_equal(ours("ReduceMax", [x, axes], 20, keepdims=0), [True, False])
    np.testing.assert_array_equal(ours("ReduceMin", [x, axes], 20, keepdims=0), [False, False])
    empty = np.zeros((0,), dtype=bool)
    assert ours("ReduceMin", [empty], 20).tolist() == [True]


def test_reduce_logsumexp_is_stable():
    x = np.array([[1000.0, 1000.0], [-1000.0, -1000.0], [-np.inf, 0.0]], dtype=np.float32)
    got = ours("ReduceLogSumExp", [x, np.array([1], dtype=np.int64)], 18, keepdims=0)
    np.testing.assert_allclose(got, [1000.0 + np.log(2), -1000.0 + np.log(2), 0.0], rtol=1e-6)


def test_reduce_mean_integer_truncates_toward_zero():
    x = np.array([[2, -4, 6], [1, 0, 0], [-1, 0, 0]], dtype=np.int32)
    got, want = _reduce_both("ReduceMean", x, [1], 18, keepdims=0)
    np.testing.assert_array_equal(got, [1, 0, 0])
    np.testing.assert_array_equal(got, want)


def test_reduce_rank0_input():
    x = np.array(3.0, dtype=np.float32)
    got = ours("ReduceSum", [x], 13)
    assert got.shape == () and got == 3.0
    got = ours("ReduceSumSquare", [x], 11)
    assert isinstance(got, np.ndarray) and got.shape == () and got == 9.0


def test_reduce_rejects_out_of_range_axis():
    with pytest.raises(ValueError, match="axis"):
        ours("ReduceSum", [np.zeros((2, 3), np.float32), np.array([2], dtype=np.int64)], 13)


def test_reduce_rejects_bad_keepdims():
    node = helper.make_node("ReduceMax", ["x"], ["y"], name="r1", keepdims=3)
    kdef, _ = registry.lookup("", "ReduceMax", 18)
    with pytest.raises(InvalidGraph, match="r1"):
        kdef.factory(KernelInfo.from_node(node, 18, since_version=18))


# -------------------------------------------------------------- ArgMax/Min


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("opset", [11, 12, 13])
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("last", [0, 1])
def test_arg_reduce_with_ties_vs_ort(op, opset, axis, keepdims, last):
    if opset < 12 and last:
        pytest.skip("select_last_index starts in version 12")
    x = np.random.default_rng(7).integers(0, 3, size=(4, 5, 3)).astype(np.float32)
    attrs = {"axis": axis, "keepdims": keepdims}
    if last:
        attrs["select_last_index"] = 1
    got = ours(op, [x], opset, **attrs)
    want = onnxrt(op, [x], opset, out_types=[TensorProto.INT64], **attrs)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int32, np.int64, np.float16, BF16])
def test_arg_reduce_types(dtype):
    x = np.array([[3, 7, 7, 1], [0, 0, 5, 5]], dtype=dtype)
    np.testing.assert_array_equal(ours("ArgMax", [x], 13, axis=1, keepdims=0), [1, 2])
    np.testing.assert_array_equal(
        ours("ArgMax", [x], 13, axis=1, keepdims=0, select_last_index=1), [2, 3]
    )
    np.testing.assert_array_equal(ours("ArgMin", [x], 13, axis=1), [[3], [0]])
    np.testing.assert_array_equal(ours("ArgMin", [x], 13, axis=1, select_last_index=1), [[3], [1]])


# -------------------------------------------------------------------- CumSum


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
@pytest.mark.parametrize("axis", [0, 1, 2, -1, -3])
@pytest.mark.parametrize(("exclusive", "reverse"), [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_cumsum_vs_ort(dtype, axis, exclusive, reverse):
    x = np.random.default_rng(8).integers(-5, 6, size=(2, 3, 4)).astype(dtype)
    for axis_dtype in (np.int32, np.int64):
        ax = np.array(axis, dtype=axis_dtype)
        got = ours("CumSum", [x, ax], 14, exclusive=exclusive, reverse=reverse)
        want = onnxrt("CumSum", [x, ax], 14, exclusive=exclusive, reverse=reverse)
        assert got.dtype == dtype
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("half", [np.float16, BF16], ids=["float16", "bfloat16"])
def test_cumsum_half_types(half):
    x = np.ones((3, 300), dtype=half)
    got = ours("CumSum", [x, np.array([1], dtype=np.int64)], 14, exclusive=1)
    assert got.dtype == half
    np.testing.assert_array_equal(got.astype(np.float32)[:, :5], [[0, 1, 2, 3, 4]] * 3)
    got = ours("CumSum", [x.astype(np.float32), np.array(1)], 11, reverse=1)
    np.testing.assert_array_equal(got[0, :3], [300, 299, 298])


def test_cumsum_rejects_bad_axis():
    with pytest.raises(ValueError, match="axis"):
        ours("CumSum", [np.zeros((2, 3), np.float32), np.array(2)], 14)


# ---------------------------------------------------------------------- TopK


def _topk_truth(x, k, axis, largest):
    """Sorted top-k with lower indices first on ties, by lexsort on (index, value)."""
    xm = np.moveaxis(x, axis, -1)
    idx = np.empty(xm.shape[:-1] + (k,), dtype=np.int64)
    for pos in np.ndindex(xm.shape[:-1]):
        row = xm[pos]
        keys = -row.astype(np.float64) if largest else row.astype(np.float64)
        idx[pos] = np.lexsort((np.arange(row.size), keys))[:k]
    idx = np.moveaxis(idx, -1, axis)
    return np.take_along_axis(x, idx, axis), idx


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64, np.uint8, np.float16])
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("largest", [0, 1])
def test_topk_ties_take_lower_index_first(dtype, axis, largest):
    x = np.random.default_rng(9).integers(0, 4, size=(5, 6, 7)).astype(dtype)
    k = 3
    vals, idx = ours("TopK", [x, np.array([k], dtype=np.int64)], 11, n_out=2, axis=axis,
                     largest=largest)  # fmt: skip
    want_vals, want_idx = _topk_truth(x, k, axis, largest)
    assert vals.dtype == dtype and idx.dtype == np.int64
    np.testing.assert_array_equal(idx, want_idx)
    np.testing.assert_array_equal(vals, want_vals)


@pytest.mark.parametrize("opset", [9, 10, 11, 13])
def test_topk_versions_vs_ort(opset):
    x = randn((3, 8), seed=10)
    k = 4
    if opset < 10:
        got = ours("TopK", [x], opset, n_out=2, k=k)
        want = onnxrt("TopK", [x], opset, n_out=2, out_types=[1, 7], k=k)
    else:
        ins = [x, np.array([k], dtype=np.int64)]
        got = ours("TopK", ins, opset, n_out=2)
        want = onnxrt("TopK", ins, opset, n_out=2, out_types=[1, 7])
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])


def test_topk_uint64_and_bfloat16_and_k0():
    x = np.array([[2**64 - 1, 0, 2**63, 5]], dtype=np.uint64)
    vals, idx = ours("TopK", [x, np.array([2], dtype=np.int64)], 24, n_out=2)
    np.testing.assert_array_equal(vals, [[2**64 - 1, 2**63]])
    np.testing.assert_array_equal(idx, [[0, 2]])
    xb = np.array([1.5, -2.0, 3.0, 3.0], dtype=BF16)
    vals, idx = ours("TopK", [xb, np.array([3], dtype=np.int64)], 24, n_out=2, largest=0)
    assert vals.dtype == BF16
    np.testing.assert_array_equal(idx, [1, 0, 2])
    vals, idx = ours("TopK", [xb, np.array([0], dtype=np.int64)], 24, n_out=2)
    assert vals.shape == (0,) and idx.shape == (0,) and idx.dtype == np.int64


def test_topk_rejects_k_larger_than_axis():
    with pytest.raises(ValueError, match="k=5"):
        ours("TopK", [np.zeros((2, 3), np.float32), np.array([5], dtype=np.int64)], 11, n_out=2)


@pytest.mark.parametrize("high", [4, 60, None], ids=["many-ties", "some-ties", "floats"])
@pytest.mark.parametrize("largest", [0, 1])
@pytest.mark.parametrize("k", [1, 5, 40])
def test_topk_large_axis_small_k(high, largest, k):
    # n >= 64 and k <= n / 4 takes the argpartition path; it must agree with a full sort.
    rng = np.random.default_rng(11)
    if high is None:
        x = rng.standard_normal((6, 200, 3)).astype(np.float32)
    else:
        x = rng.integers(0, high, size=(6, 200, 3)).astype(np.float32)
    kk = np.array([k], dtype=np.int64)
    vals, idx = ours("TopK", [x, kk], 11, n_out=2, axis=1, largest=largest)
    want_vals, want_idx = _topk_truth(x, k, 1, largest)
    np.testing.assert_array_equal(idx, want_idx)
    np.testing.assert_array_equal(vals, want_vals)


@pytest.mark.parametrize("largest", [0, 1])
def test_topk_nan_rows_agree_between_paths(largest):
    x = np.random.default_rng(12).integers(0, 5, size=(4, 100)).astype(np.float64)
    x[0, [3, 50, 70]] = np.nan
    x[1, :] = np.nan
    x[2, ::2] = np.nan
    full_vals, full_idx = ours("TopK", [x, np.array([100])], 11, n_out=2, largest=largest)
    for k in (1, 3, 25):
        vals, idx = ours("TopK", [x, np.array([k])], 11, n_out=2, largest=largest)
        np.testing.assert_array_equal(idx, full_idx[:, :k])
        np.testing.assert_array_equal(vals, full_vals[:, :k])
