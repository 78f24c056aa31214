"""Tests of BitCast, CumProd and TensorScatter on the CPU provider (the library's kernels and the CPU's TensorScatter override).

The onnx node conformance cases run straight through the registry; targeted tests cover what
they leave out (half, complex and 4-bit types for BitCast; int and half types, every
exclusive/reverse combination and 3-D axes for CumProd; string caches, inner axes, circular
wrap-around and absent write_indices for TensorScatter), checked against onnxruntime or
numpy truth.
"""

from __future__ import annotations

import numpy as np
import pytest
from kernel_cases import (
    BF16,
    assert_all_versions_registered,
    conformance_params,
    op_output,
    op_output_onnxruntime,
    randn,
    run_case,
    run_op_onnxruntime,
)
from onnx import TensorProto

from onyxrt.dtypes import np_dtype
from onyxrt.errors import InvalidGraph

OPS = ["BitCast", "CumProd", "TensorScatter"]

# Conformance cases these kernels cannot pass, with the reason. None today.
XFAIL: dict[str, str] = {}


@pytest.mark.parametrize("case", conformance_params(OPS, XFAIL))
def test_conformance(case):
    run_case(case)


def test_all_versions_registered():
    assert_all_versions_registered(OPS)


# ------------------------------------------------------------------- BitCast


@pytest.mark.parametrize(
    ("src", "to"),
    [
        (np.float16, TensorProto.INT16),
        (np.int16, TensorProto.FLOAT16),
        (np.float16, TensorProto.BFLOAT16),
        (np.float32, TensorProto.UINT32),
        (np.uint64, TensorProto.DOUBLE),
        (np.complex64, TensorProto.INT64),
        (np.uint8, TensorProto.BOOL),
        (np.int8, TensorProto.FLOAT8E4M3FN),
    ],
)
def test_bitcast_vs_numpy_view(src, to):
    x = (randn((2, 3, 4), seed=3, scale=50.0) + 1).astype(src)
    if src is np.uint8:
        x = (x % 2).astype(np.uint8)  # valid bools only
    got = op_output("BitCast", [x], 26, to=to)
    want = x.view(np_dtype(to))
    assert got.dtype == np_dtype(to) and got.shape == x.shape
    assert got.tobytes() == want.tobytes()


def test_bitcast_float32_vs_ort_non_contiguous():
    x = randn((4, 6), seed=1)[:, ::2]
    got = op_output("BitCast", [x], 26, to=TensorProto.INT32)
    want = op_output_onnxruntime("BitCast", [np.ascontiguousarray(x)], 26, np.int32,
                                 to=TensorProto.INT32)  # fmt: skip
    np.testing.assert_array_equal(got, want)


def test_bitcast_4bit_types():
    x = np.array([-8, -1, 0, 3, 7], dtype=np_dtype(TensorProto.INT4))
    got = op_output("BitCast", [x], 26, to=TensorProto.UINT4)
    assert got.dtype == np_dtype(TensorProto.UINT4)
    assert got.astype(np.int64).tolist() == [8, 15, 0, 3, 7]
    back = op_output("BitCast", [got], 26, to=TensorProto.INT4)
    assert back.astype(np.int64).tolist() == [-8, -1, 0, 3, 7]


def test_bitcast_width_mismatch():
    with pytest.raises(ValueError, match="bits"):
        op_output("BitCast", [np.float32([1.0])], 26, to=TensorProto.INT64)


def test_bitcast_to_string_rejected():
    with pytest.raises(InvalidGraph, match="string"):
        op_output("BitCast", [np.float32([1.0])], 26, to=TensorProto.STRING)


# ------------------------------------------------------------------- CumProd


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64, np.uint32])
@pytest.mark.parametrize("axis", [0, 1, -1, 2])
@pytest.mark.parametrize(("exclusive", "reverse"), [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_cumprod_vs_ort(dtype, axis, exclusive, reverse):
    x = (np.random.default_rng(axis + 5).integers(1, 4, (2, 3, 4))).astype(dtype)
    ins = [x, np.array(axis, dtype=np.int64)]
    attrs = dict(exclusive=exclusive, reverse=reverse)
    got = op_output("CumProd", ins, 26, **attrs)
    want = op_output_onnxruntime("CumProd", ins, 26, **attrs)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def test_cumprod_int32_wraps_around():
    x = np.full(5, 1 << 10, dtype=np.int32)
    got = op_output("CumProd", [x, np.int32(0)], 26)
    assert got.dtype == np.int32
    assert got.tolist() == [1 << 10, 1 << 20, 1 << 30, 0, 0]


@pytest.mark.parametrize("dtype", [np.float16, BF16])
def test_cumprod_half(dtype):
    x = (np.abs(randn((3, 5), seed=2)) + 0.5).astype(dtype)
    got = op_output("CumProd", [x, np.int64(1)], 26, exclusive=1)
    assert got.dtype == dtype
    ref = np.cumprod(x.astype(np.float32), axis=1)
    ref = np.concatenate([np.ones((3, 1), np.float32), ref[:, :-1]], axis=1)
    np.testing.assert_allclose(got.astype(np.float32), ref, rtol=2e-2)


def test_cumprod_empty_axis():
    x = np.zeros((2, 0), dtype=np.float32)
    got = op_output("CumProd", [x, np.int64(1)], 26, exclusive=1, reverse=1)
    assert got.shape == (2, 0) and got.dtype == np.float32


def test_cumprod_bad_axis():
    with pytest.raises(ValueError, match="axis"):
        op_output("CumProd", [np.float32([1, 2]), np.int64(1)], 26)


# ------------------------------------------------------------- TensorScatter


def _scatter_truth(past, update, write_indices, axis, circular):
    out = past.copy()
    ax = axis % past.ndim
    max_len, seq = past.shape[ax], update.shape[ax]
    for prefix in np.ndindex(past.shape[:ax]):
        for s in range(seq):
            c = write_indices[prefix[0]] + s
            c = c % max_len if circular else c
            out[(*prefix, c)] = update[(*prefix, s)]
    return out


@pytest.mark.parametrize("mode", ["linear", "circular"])
@pytest.mark.parametrize(("shape", "axis"), [((2, 3, 6, 4), -2), ((2, 6, 3), 1), ((3, 2, 6), -1)])
def test_tensorscatter_vs_ort(mode, shape, axis):
    past = randn(shape, seed=1)
    ax = axis % len(shape)
    upd_shape = list(shape)
    upd_shape[ax] = 3
    update = randn(upd_shape, seed=2)
    idx = np.array([3, 0, 2][: shape[0]], dtype=np.int64)
    if mode == "circular":
        idx = idx + 2  # wraps around
    ins = [past, update, idx]
    got = op_output("TensorScatter", ins, 24, mode=mode, axis=axis)
    want = op_output_onnxruntime("TensorScatter", ins, 24, mode=mode, axis=axis)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, _scatter_truth(past, update, idx, axis, mode == "circular"))


def test_tensorscatter_no_write_indices_and_strings():
    past = np.array([["a", "b", "c"], ["d", "e", "f"]], dtype=object)
    update = np.array([["X", "Y"], ["Z", "W"]], dtype=object)
    got = op_output("TensorScatter", [past, update], 24, axis=1)
    assert got.dtype == object
    assert got.tolist() == [["X", "Y", "c"], ["Z", "W", "f"]]
    assert past.tolist() == [["a", "b", "c"], ["d", "e", "f"]]


def test_tensorscatter_linear_overflow_rejected():
    past = np.zeros((1, 4, 2), np.float32)
    update = np.ones((1, 2, 2), np.float32)
    with pytest.raises(ValueError, match="linear"):
        op_output("TensorScatter", [past, update, np.int64([3])], 24, axis=1)


def test_tensorscatter_bad_mode():
    with pytest.raises(InvalidGraph, match="mode"):
        op_output("TensorScatter", [np.zeros((1, 2, 2), np.float32)] * 2, 24, mode="ring")


def test_tensorscatter_int8_vs_ort():
    past = np.arange(2 * 5 * 3, dtype=np.int8).reshape(2, 5, 3)
    update = -np.ones((2, 2, 3), np.int8)
    ins = [past, update, np.int64([1, 3])]
    got = op_output("TensorScatter", ins, 24, axis=1)
    want = run_op_onnxruntime("TensorScatter", ins, 24, [np.int8], axis=1)[0]
    np.testing.assert_array_equal(got, want)
