"""Tests for the CPU pooling kernels (onyxrt_cpu.kernels.pool).

The onnx node conformance cases run straight through the registry; the rest compare with
onnxruntime on random inputs: MaxPool values and Indices (both storage orders), ceil_mode,
dilations, asymmetric pads and auto_pad, AveragePool's count_include_pad, LpPool, the
Global pools, float16 and 8-bit integer inputs, and older opset versions.
"""

from __future__ import annotations

import numpy as np
import pytest
from kernel_cases import conformance_params, randn, run_case, run_op, run_op_onnxruntime
from onnx import TensorProto, helper

from onyxrt.errors import InvalidGraph
from onyxrt.kernels import KernelInfo
from onyxrt_cpu.kernels import registry

OPS = ["MaxPool", "AveragePool", "LpPool", "GlobalMaxPool", "GlobalAveragePool", "GlobalLpPool"]

# Conformance cases these kernels cannot pass, with the reason. None today.
XFAIL: dict[str, str] = {}


@pytest.mark.parametrize("case", conformance_params(OPS, XFAIL))
def test_conformance(case):
    run_case(case)


# ----------------------------------------------------------------- helpers


def ours(op, x, opset, n_out=1, **attrs):
    """Run our kernel for a one-input pool node with ``n_out`` outputs."""
    return run_op(op, [x], opset, n_out, **attrs)[:n_out]


def onnxrt(op, x, opset, n_out=1, **attrs):
    """Run the same node in onnxruntime (the oracle)."""
    types = [x.dtype, TensorProto.INT64][:n_out]
    return tuple(run_op_onnxruntime(op, [x], opset, types, **attrs))


WINDOWS = [
    ("k3_s2_pads", (2, 3, 11, 10), {"kernel_shape": [3, 3], "strides": [2, 2],
                                    "pads": [1, 1, 1, 1]}),
    ("k3_s2_asym_pads_ceil", (1, 2, 10, 9), {"kernel_shape": [3, 2], "strides": [2, 2],
                                             "pads": [1, 0, 0, 1], "ceil_mode": 1}),
    ("k2_s3_ceil", (1, 2, 11, 8), {"kernel_shape": [2, 2], "strides": [3, 3],
                                   "ceil_mode": 1}),
    ("dilated_padded", (1, 3, 12, 11), {"kernel_shape": [3, 2], "dilations": [2, 3],
                                        "pads": [2, 1, 2, 1], "strides": [1, 2]}),
    ("dilated_ceil", (1, 2, 10, 10), {"kernel_shape": [2, 3], "dilations": [2, 2],
                                      "strides": [3, 2], "ceil_mode": 1, "pads": [1, 1, 0, 0]}),
    ("same_upper", (1, 2, 9, 8), {"kernel_shape": [3, 4], "strides": [2, 3],
                                  "auto_pad": "SAME_UPPER"}),
    ("same_lower", (1, 2, 9, 8), {"kernel_shape": [3, 4], "strides": [2, 3],
                                  "auto_pad": "SAME_LOWER"}),
    ("valid", (1, 2, 9, 8), {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "VALID"}),
    ("pool1d", (2, 3, 17), {"kernel_shape": [4], "strides": [3], "pads": [2, 1]}),
    ("pool3d", (1, 2, 6, 7, 5), {"kernel_shape": [2, 3, 2], "strides": [2, 1, 2],
                                 "pads": [1, 1, 0, 0, 1, 1]}),
]  # fmt: skip
WINDOW_IDS = [w[0] for w in WINDOWS]
WINDOW_ARGS = [w[1:] for w in WINDOWS]


# ------------------------------------------------------------------ MaxPool


@pytest.mark.parametrize(("shape", "attrs"), WINDOW_ARGS, ids=WINDOW_IDS)
@pytest.mark.parametrize("storage_order", [0, 1])
def test_maxpool_values_and_indices_match_onnxruntime(shape, attrs, storage_order):
    x = randn(shape, 1)
    attrs = dict(attrs, storage_order=storage_order)
    want_y, want_i = onnxrt("MaxPool", x, 22, n_out=2, **attrs)
    got_y, got_i = ours("MaxPool", x, 22, n_out=2, **attrs)
    assert got_y.dtype == np.float32 and got_i.dtype == np.int64
    np.testing.assert_array_equal(got_y, want_y)
    np.testing.assert_array_equal(got_i, want_i)
    # The indices point at the maxima in the flattened input (spatial axes reversed for
    # column-major storage order).
    flat = x if storage_order == 0 else x.transpose((0, 1) + tuple(range(x.ndim - 1, 1, -1)))
    np.testing.assert_array_equal(flat.ravel()[got_i], got_y)


@pytest.mark.parametrize(("shape", "attrs"), WINDOW_ARGS[:3], ids=WINDOW_IDS[:3])
def test_maxpool_without_indices_matches(shape, attrs):
    x = randn(shape, 2)
    (want,) = onnxrt("MaxPool", x, 22, **attrs)
    (got,) = ours("MaxPool", x, 22, **attrs)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.float16, np.float64])
def test_maxpool_other_dtypes(dtype):
    rng = np.random.default_rng(3)
    if np.dtype(dtype).kind == "f":
        x = rng.standard_normal((1, 3, 9, 9)).astype(dtype)
    else:
        info = np.iinfo(dtype)
        x = rng.integers(info.min, info.max + 1, (1, 3, 9, 9)).astype(dtype)
    attrs = {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}
    (want,) = onnxrt("MaxPool", x, 12, **attrs)
    (got,) = ours("MaxPool", x, 12, **attrs)
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("opset", [1, 8, 10, 11])
def test_maxpool_old_opsets(opset):
    x = randn((1, 2, 8, 7), 4)
    attrs = {"kernel_shape": [2, 3], "strides": [2, 1], "pads": [0, 1, 1, 1]}
    (want,) = onnxrt("MaxPool", x, max(opset, 8), **attrs)
    (got,) = ours("MaxPool", x, opset, **attrs)
    np.testing.assert_array_equal(got, want)


def test_maxpool_ties_pick_first_and_padding_never_wins():
    x = np.full((1, 1, 3, 3), -5.0, np.float32)
    y, idx = ours("MaxPool", x, 22, n_out=2, kernel_shape=[2, 2], pads=[1, 1, 1, 1])
    assert y.shape == (1, 1, 4, 4) and np.all(y == -5.0)
    # The first real element of each window (row-major) is the reported maximum.
    np.testing.assert_array_equal(idx[0, 0], [[0, 0, 1, 2], [0, 0, 1, 2], [3, 3, 4, 5],
                                              [6, 6, 7, 8]])  # fmt: skip


def test_maxpool_rejects_bad_attributes():
    kdef, _ = registry.lookup("", "MaxPool", 22)
    for attrs in ({}, {"kernel_shape": [2, 2], "auto_pad": "BOTH"},
                  {"kernel_shape": [2, 2], "storage_order": 2},
                  {"kernel_shape": [2, 2], "strides": [1]}):  # fmt: skip
        node = helper.make_node("MaxPool", ["x"], ["y"], name="bad_pool", **attrs)
        with pytest.raises(InvalidGraph, match="bad_pool"):
            kdef.factory(KernelInfo.from_node(node, 22))


@pytest.mark.parametrize("budget", [1, 2000, 50000])
@pytest.mark.parametrize("op", ["MaxPool", "AveragePool", "LpPool"])
def test_pools_blocked_paths_match_onnxruntime(monkeypatch, budget, op):
    """Cache blocking (by images, by channels, one row at a time) gives the same result."""
    from onyxrt_cpu.kernels import _spatial

    monkeypatch.setattr(_spatial, "BLOCK_BYTES", budget)
    x = randn((3, 5, 9, 8), 11)
    attrs = {"kernel_shape": [3, 2], "strides": [2, 1], "pads": [1, 0, 1, 1]}
    n_out = 2 if op == "MaxPool" else 1
    opset = 18 if op == "LpPool" else 22
    want = onnxrt(op, x, opset, n_out=n_out, **attrs)
    got = ours(op, x, opset, n_out=n_out, **attrs)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


# -------------------------------------------------------------- AveragePool


@pytest.mark.parametrize(("shape", "attrs"), WINDOW_ARGS, ids=WINDOW_IDS)
@pytest.mark.parametrize("count_include_pad", [0, 1])
def test_averagepool_matches_onnxruntime(shape, attrs, count_include_pad):
    x = randn(shape, 5)
    attrs = dict(attrs, count_include_pad=count_include_pad)
    (want,) = onnxrt("AveragePool", x, 19, **attrs)
    (got,) = ours("AveragePool", x, 19, **attrs)
    assert got.dtype == np.float32 and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("opset", [7, 10, 11, 22])
def test_averagepool_float16_and_opsets(opset):
    x = randn((2, 3, 9, 8), 6)
    attrs = {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}
    (want,) = onnxrt("AveragePool", x, 19, **attrs)
    (got16,) = ours("AveragePool", x.astype(np.float16), opset, **attrs)
    assert got16.dtype == np.float16
    np.testing.assert_allclose(got16.astype(np.float32), want, rtol=1e-2, atol=1e-2)


# ------------------------------------------------------------------- LpPool


@pytest.mark.parametrize(("shape", "attrs"), WINDOW_ARGS[:1] + WINDOW_ARGS[5:],
                         ids=WINDOW_IDS[:1] + WINDOW_IDS[5:])  # fmt: skip
@pytest.mark.parametrize("p", [1, 2, 3])
def test_lppool_matches_onnxruntime(shape, attrs, p):
    x = randn(shape, 7)
    (want,) = onnxrt("LpPool", x, 18, p=p, **attrs)
    (got,) = ours("LpPool", x, 18, p=p, **attrs)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_lppool_v1_float_p():
    x = randn((1, 2, 5, 5), 8)
    (got,) = ours("LpPool", x, 1, p=3.0, kernel_shape=[2, 2])
    want = np.zeros((1, 2, 4, 4), np.float64)
    for i in range(4):
        for j in range(4):
            want[:, :, i, j] = np.sum(np.abs(x[:, :, i : i + 2, j : j + 2].astype(np.float64)) ** 3,
                                      axis=(2, 3)) ** (1 / 3)  # fmt: skip
    np.testing.assert_allclose(got, want, rtol=1e-5)


# ------------------------------------------------------------ Global pools


@pytest.mark.parametrize("op", ["GlobalMaxPool", "GlobalAveragePool", "GlobalLpPool"])
@pytest.mark.parametrize("shape", [(2, 3, 5), (2, 3, 4, 5), (1, 2, 3, 4, 5)])
def test_global_pools_match_onnxruntime(op, shape):
    x = randn(shape, 9)
    attrs = {"p": 3} if op == "GlobalLpPool" else {}
    (want,) = onnxrt(op, x, 2 if op == "GlobalLpPool" else 22, **attrs)
    (got,) = ours(op, x, 22, **attrs)
    assert got.shape == want.shape == shape[:2] + (1,) * (len(shape) - 2)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_global_average_float16_accumulates_in_float32():
    x = np.full((1, 2, 64, 64), 1000.0, np.float16)  # float16 sums would overflow
    (got,) = ours("GlobalAveragePool", x, 1)
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got, np.full((1, 2, 1, 1), 1000.0, np.float16))


@pytest.mark.parametrize("shape", [(1, 1280, 7, 7), (2, 3, 5), (1, 1, 1, 1), (2, 17, 224, 224), (1, 2, 3, 4, 5)])
@pytest.mark.parametrize("opset", [1, 22])
def test_global_average_float32_compiled_path(shape, opset):
    """float32 planes averaged by the compiled kernel where it is built (a double sum, one
    rounding: within an ulp of the float64 mean), as onnxruntime within float tolerance;
    a non-contiguous view and NaN/inf take the same values as numpy's mean."""
    from onyxrt_cpu import native

    x = randn(shape, 11)
    (got,) = ours("GlobalAveragePool", x, opset)
    want = x.astype(np.float64).mean(axis=tuple(range(2, x.ndim)), keepdims=True)
    assert got.dtype == np.float32 and got.shape == want.shape
    if native.ENABLED:  # the compiled path ran: one rounding of a double sum
        assert native.global_average(x) is not None
        np.testing.assert_allclose(got, want, rtol=2 * np.finfo(np.float32).eps, atol=1e-30)
    (ref,) = onnxrt("GlobalAveragePool", x, 22)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
    view = np.asfortranarray(x)  # not C-contiguous (but for one value): the library's mean
    (got_view,) = ours("GlobalAveragePool", view, opset)
    np.testing.assert_allclose(got_view, want, rtol=1e-5, atol=1e-6)
    special = x.copy()
    rows = special.reshape(shape[0] * shape[1], -1)
    rows[0, 0] = np.nan
    rows[-1, -1] = np.inf if len(rows) > 1 else np.nan
    (got_special,) = ours("GlobalAveragePool", special, opset)
    flat = got_special.reshape(-1)
    assert np.isnan(flat[0]) and (flat.size == 1 or flat[-1] == np.inf)
