"""Tests for the CPU normalization kernels (onyxrt_cpu.kernels.normalization).

The onnx node conformance cases run straight through the registry; the rest compare with
onnxruntime or numpy truth: BatchNormalization (old opsets, spatial=0, mixed float16/float32
types, training mode), LayerNormalization outputs and axes, InstanceNormalization,
GroupNormalization's per-group (v18) versus per-channel (v21) scale, LRN window sizes,
MeanVarianceNormalization axes and LpNormalization.
"""

from __future__ import annotations

import numpy as np
import pytest
from kernel_cases import BF16, conformance_params, randn, run_case, run_op, run_op_onnxruntime
from onnx import helper

from onyxrt.errors import InvalidGraph
from onyxrt.kernels import KernelInfo
from onyxrt_cpu.kernels import registry

OPS = [
    "BatchNormalization", "LayerNormalization", "InstanceNormalization", "GroupNormalization",
    "LRN", "MeanVarianceNormalization", "LpNormalization",
]  # fmt: skip

# Conformance cases these kernels cannot pass, with the reason. None today.
XFAIL: dict[str, str] = {}


@pytest.mark.parametrize("case", conformance_params(OPS, XFAIL))
def test_conformance(case):
    run_case(case)


# ----------------------------------------------------------------- helpers


def ours(op, inputs, opset, n_out=1, **attrs):
    """Run our kernel; returns the first ``n_out`` outputs as a tuple."""
    return run_op(op, inputs, opset, n_out, **attrs)[:n_out]


def onnxrt(op, inputs, opset, out_dtypes=None, **attrs):
    """Run ``op`` at ``opset`` in onnxruntime (the oracle)."""
    return tuple(run_op_onnxruntime(op, inputs, opset, out_dtypes or [inputs[0].dtype], **attrs))


def _bn_inputs(shape, seed=0):
    c = shape[1]
    return [
        randn(shape, seed),
        randn((c,), seed + 1),
        randn((c,), seed + 2),
        randn((c,), seed + 3),
        np.abs(randn((c,), seed + 4)) + 0.1,
    ]


# -------------------------------------------------------- BatchNormalization


@pytest.mark.parametrize("shape", [(4, 3), (2, 3, 5), (2, 3, 4, 5), (1, 2, 3, 4, 2)])
@pytest.mark.parametrize("opset", [7, 9, 14, 15])
def test_batchnorm_inference_matches_onnxruntime(shape, opset):
    inputs = _bn_inputs(shape)
    (want,) = onnxrt("BatchNormalization", inputs, opset, epsilon=1e-3)
    (got,) = ours("BatchNormalization", inputs, opset, epsilon=1e-3)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("opset", [1, 6])
def test_batchnorm_is_test_old_opsets(opset):
    x, s, b, m, v = _bn_inputs((2, 3, 4, 4), 1)
    (got,) = ours("BatchNormalization", [x, s, b, m, v], opset, is_test=1)
    cs = (1, 3, 1, 1)
    want = (x - m.reshape(cs)) / np.sqrt(v.reshape(cs) + 1e-5) * s.reshape(cs) + b.reshape(cs)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_batchnorm_non_spatial_v7():
    x = randn((3, 2, 4), 2)
    s, b, m = randn((2, 4), 3), randn((2, 4), 4), randn((2, 4), 5)
    v = np.abs(randn((2, 4), 6)) + 0.5
    (got,) = ours("BatchNormalization", [x, s, b, m, v], 7, spatial=0)
    np.testing.assert_allclose(got, (x - m) / np.sqrt(v + 1e-5) * s + b, rtol=1e-5, atol=1e-5)


def test_batchnorm_mixed_types_v15():
    x, s, b, m, v = _bn_inputs((2, 3, 4, 4), 3)
    x16 = x.astype(np.float16)
    (want,) = onnxrt("BatchNormalization", [x16, s, b, m, v], 15)
    (got,) = ours("BatchNormalization", [x16, s, b, m, v], 15)
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=1e-2,
                               atol=1e-2)  # fmt: skip


@pytest.mark.parametrize("dtype", [np.float16, BF16, np.float64])
def test_batchnorm_training_mode(dtype):
    x, s, b, m, v = (a.astype(dtype) for a in _bn_inputs((3, 2, 4, 5), 4))
    y, rm, rv = ours("BatchNormalization", [x, s, b, m, v], 15, n_out=3, training_mode=1,
                     momentum=0.8, epsilon=1e-4)  # fmt: skip
    xd = x.astype(np.float64)
    mom = float(np.float32(0.8))  # the attribute is stored as float32
    mean = xd.mean(axis=(0, 2, 3))
    var = xd.var(axis=(0, 2, 3))
    cs = (1, 2, 1, 1)
    want_y = (xd - mean.reshape(cs)) / np.sqrt(var.reshape(cs) + 1e-4) * s.astype(
        np.float64
    ).reshape(cs) + b.astype(np.float64).reshape(cs)
    tol = 1e-9 if dtype == np.float64 else 3e-2
    assert y.dtype == rm.dtype == rv.dtype == dtype
    np.testing.assert_allclose(y.astype(np.float64), want_y, rtol=tol, atol=tol)
    np.testing.assert_allclose(rm.astype(np.float64), m.astype(np.float64) * mom + mean * (1 - mom),
                               rtol=tol, atol=tol)  # fmt: skip
    np.testing.assert_allclose(rv.astype(np.float64), v.astype(np.float64) * mom + var * (1 - mom),
                               rtol=tol, atol=tol)  # fmt: skip


# -------------------------------------------------------- LayerNormalization


@pytest.mark.parametrize(("shape", "axis"), [((2, 3, 4), -1), ((2, 3, 4), 1), ((2, 3, 4, 5), -2),
                                             ((6, 8), 0)])  # fmt: skip
@pytest.mark.parametrize("with_bias", [True, False])
def test_layernorm_matches_onnxruntime(shape, axis, with_bias):
    x = randn(shape, 1) * 3 + 1
    norm_shape = shape[axis:]
    scale = randn(norm_shape, 2)
    bias = randn(norm_shape, 3) if with_bias else None
    want = onnxrt("LayerNormalization", [x, scale, bias], 17,
                  out_dtypes=[np.float32] * 3, axis=axis)  # fmt: skip
    got = ours("LayerNormalization", [x, scale, bias], 17, n_out=3, axis=axis)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def test_layernorm_float16_with_broadcast_scale():
    x = (randn((2, 5, 8), 4) * 2).astype(np.float16)
    scale = randn((8,), 5).astype(np.float16)
    bias = randn((1, 8), 6).astype(np.float16)
    want = onnxrt("LayerNormalization", [x, scale, bias], 17,
                  out_dtypes=[np.float16, np.float32, np.float32], axis=-1)  # fmt: skip
    got = ours("LayerNormalization", [x, scale, bias], 17, n_out=3, axis=-1)
    assert got[0].dtype == np.float16 and got[1].dtype == got[2].dtype == np.float32
    np.testing.assert_allclose(got[0].astype(np.float32), want[0].astype(np.float32),
                               rtol=1e-2, atol=1e-2)  # fmt: skip
    np.testing.assert_allclose(got[1], want[1], rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(got[2], want[2], rtol=1e-3, atol=1e-3)


def test_layernorm_bad_axis():
    with pytest.raises(ValueError, match="axis"):
        ours("LayerNormalization", [randn((2, 3)), randn((3,))], 17, axis=2)


# ----------------------------------------------------- InstanceNormalization


@pytest.mark.parametrize("shape", [(2, 3, 7), (2, 3, 4, 5), (1, 2, 3, 4, 2)])
@pytest.mark.parametrize("opset", [6, 22])
def test_instancenorm_matches_onnxruntime(shape, opset):
    x = randn(shape, 1) * 2 + 0.5
    s, b = randn((shape[1],), 2), randn((shape[1],), 3)
    (want,) = onnxrt("InstanceNormalization", [x, s, b], opset, epsilon=1e-3)
    (got,) = ours("InstanceNormalization", [x, s, b], opset, epsilon=1e-3)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    (got16,) = ours("InstanceNormalization", [x.astype(np.float16), s.astype(np.float16),
                                              b.astype(np.float16)], opset, epsilon=1e-3)  # fmt: skip
    assert got16.dtype == np.float16
    np.testing.assert_allclose(got16.astype(np.float32), want, rtol=1e-2, atol=2e-2)


# -------------------------------------------------------- GroupNormalization


def _group_norm_truth(x, scale_c, bias_c, groups, eps):
    n, c = x.shape[:2]
    xg = x.astype(np.float64).reshape(n, groups, -1)
    normed = (xg - xg.mean(-1, keepdims=True)) / np.sqrt(xg.var(-1, keepdims=True) + eps)
    cs = (1, c) + (1,) * (x.ndim - 2)
    return normed.reshape(x.shape) * scale_c.reshape(cs) + bias_c.reshape(cs)


@pytest.mark.parametrize("shape", [(2, 6, 5), (2, 6, 3, 4)])
def test_groupnorm_v21_per_channel(shape):
    x = randn(shape, 1)
    s, b = randn((6,), 2), randn((6,), 3)
    (want,) = onnxrt("GroupNormalization", [x, s, b], 21, num_groups=3, epsilon=1e-4)
    (got,) = ours("GroupNormalization", [x, s, b], 21, num_groups=3, epsilon=1e-4)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got, _group_norm_truth(x, s, b, 3, 1e-4), rtol=1e-4, atol=1e-5)


def test_groupnorm_v18_per_group():
    x = randn((2, 6, 3, 4), 4)
    s, b = randn((3,), 5), randn((3,), 6)
    (got,) = ours("GroupNormalization", [x, s, b], 18, num_groups=3)
    want = _group_norm_truth(x, np.repeat(s, 2), np.repeat(b, 2), 3, 1e-5)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="num_groups"):
        ours("GroupNormalization", [x, randn((6,)), randn((6,))], 18, num_groups=3)


def test_groupnorm_float16():
    x = randn((1, 4, 8, 8), 7)
    s, b = randn((4,), 8), randn((4,), 9)
    (got,) = ours("GroupNormalization", [a.astype(np.float16) for a in (x, s, b)], 21,
                  num_groups=2)  # fmt: skip
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float64), _group_norm_truth(x, s, b, 2, 1e-5),
                               rtol=1e-2, atol=2e-2)  # fmt: skip


def test_groupnorm_requires_num_groups():
    node = helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], name="bad_gn")
    kdef, _ = registry.lookup("", "GroupNormalization", 21)
    with pytest.raises(InvalidGraph, match="bad_gn"):
        kdef.factory(KernelInfo.from_node(node, 21))


# ---------------------------------------------------------------------- LRN


def _lrn_truth(x, size, alpha, beta, bias):
    """The operator's definition, channel by channel."""
    xd = x.astype(np.float64)
    c = x.shape[1]
    out = np.empty_like(xd)
    for i in range(c):
        lo, hi = max(0, i - (size - 1) // 2), min(c - 1, i + -(-(size - 1) // 2))
        sq = np.sum(xd[:, lo : hi + 1] ** 2, axis=1)
        out[:, i] = xd[:, i] / (bias + alpha / size * sq) ** beta
    return out


@pytest.mark.parametrize("size", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("shape", [(2, 7, 4, 5), (1, 6, 9)])
def test_lrn_matches_definition_and_onnxruntime(size, shape):
    x = randn(shape, 1) * 4
    attrs = {"size": size, "alpha": 0.3, "beta": 0.6, "bias": 1.5}
    (got,) = ours("LRN", [x], 13, **attrs)
    np.testing.assert_allclose(got, _lrn_truth(x, **attrs), rtol=1e-5, atol=1e-6)
    (got1,) = ours("LRN", [x], 1, **attrs)
    np.testing.assert_array_equal(got1, got)
    if size % 2 and len(shape) == 4:  # onnxruntime: odd sizes and 4-D inputs only
        (want,) = onnxrt("LRN", [x], 13, **attrs)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)


# ------------------------------------------------- MeanVarianceNormalization


@pytest.mark.parametrize("axes", [None, [1], [2, 3], [0, 1, 2, 3], [-1]])
def test_mvn_matches_onnxruntime(axes):
    x = randn((2, 3, 4, 5), 1) * 3 + 2
    attrs = {} if axes is None else {"axes": axes}
    (want,) = onnxrt("MeanVarianceNormalization", [x], 13, **attrs)
    (got,) = ours("MeanVarianceNormalization", [x], 13, **attrs)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    (got9,) = ours("MeanVarianceNormalization", [x], 9, **attrs)
    np.testing.assert_allclose(got9, want, rtol=1e-4, atol=1e-5)


# ----------------------------------------------------------- LpNormalization


@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_lpnorm_matches_onnxruntime(p, axis):
    x = randn((3, 4, 5), 1)
    (want,) = onnxrt("LpNormalization", [x], 1, p=p, axis=axis)
    (got,) = ours("LpNormalization", [x], 22, p=p, axis=axis)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_lpnorm_zero_slice_and_float16():
    x = np.array([[0.0, 0.0], [3.0, 4.0]], np.float16)
    (got,) = ours("LpNormalization", [x], 1, p=2, axis=1)
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float32), [[0, 0], [0.6, 0.8]], rtol=1e-3)


def test_lpnorm_rejects_p3():
    node = helper.make_node("LpNormalization", ["x"], ["y"], name="bad_lp", p=3)
    kdef, _ = registry.lookup("", "LpNormalization", 22)
    with pytest.raises(InvalidGraph, match="bad_lp"):
        kdef.factory(KernelInfo.from_node(node, 22))
