"""Tests for the CPU sampling/detection kernels (onyxrt_cpu.kernels.detection).

The onnx node conformance cases run straight through the registry; the rest compare with
onnxruntime on random inputs: GridSample in every mode/padding/align_corners combination
(4-D and 5-D, float16/float64, the opset-16 mode names), NonMaxSuppression in both box
formats with and without a score threshold, RoiAlign (avg/max, both coordinate modes,
fixed and adaptive sampling), Col2Im, MaxUnpool (also as MaxPool's inverse) and DeformConv
(2-D against onnxruntime, 3-D with zero offsets against an ordinary Conv).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from kernel_cases import (
    assert_all_versions_registered,
    assert_every_op_has_cases,
    conformance_params,
    op_output,
    op_output_onnxruntime,
    randn,
    run_case,
    run_op,
    run_op_onnxruntime,
)
from onnx import helper

from onyxrt.errors import InvalidGraph
from onyxrt.kernels import KernelInfo
from onyxrt_cpu.kernels import registry

OPS = ["GridSample", "NonMaxSuppression", "RoiAlign", "Col2Im", "MaxUnpool", "DeformConv"]

# Conformance cases these kernels cannot pass, with the reason. None today.
XFAIL: dict[str, str] = {}


@pytest.mark.parametrize("case", conformance_params(OPS, XFAIL))
def test_conformance(case):
    run_case(case)


def test_every_version_is_registered():
    assert_every_op_has_cases(OPS)
    assert_all_versions_registered(OPS)


# ---------------------------------------------------------------- GridSample


def _grid(shape, seed):
    return np.random.default_rng(seed).uniform(-1.6, 1.6, shape).astype(np.float32)


@pytest.mark.parametrize(
    ("mode", "padding", "align"),
    list(itertools.product(["nearest", "linear", "cubic"], ["zeros", "border", "reflection"],
                           [0, 1])),
)  # fmt: skip
def test_gridsample_2d_matches_onnxruntime(mode, padding, align):
    x = randn((2, 3, 5, 6), 1)
    g = _grid((2, 7, 4, 2), 2)
    attrs = {"mode": mode, "padding_mode": padding, "align_corners": align}
    want = op_output_onnxruntime("GridSample", [x, g], 22, **attrs)
    got = op_output("GridSample", [x, g], 22, **attrs)
    assert got.dtype == np.float32 and got.shape == (2, 3, 7, 4)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("mode", "padding", "align"),
    list(itertools.product(["nearest", "linear"], ["zeros", "border", "reflection"], [0, 1])),
)
def test_gridsample_volumetric_matches_onnxruntime(mode, padding, align):
    x = randn((2, 2, 4, 5, 3), 3)
    g = _grid((2, 3, 4, 2, 3), 4)
    attrs = {"mode": mode, "padding_mode": padding, "align_corners": align}
    want = op_output_onnxruntime("GridSample", [x, g], 22, **attrs)
    got = op_output("GridSample", [x, g], 22, **attrs)
    assert got.shape == (2, 2, 3, 4, 2)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("old", "new"), [("bilinear", "linear"), ("bicubic", "cubic"),
                                          ("nearest", "nearest")])  # fmt: skip
def test_gridsample_opset16_mode_names(old, new):
    x = randn((1, 2, 6, 5), 5)
    g = _grid((1, 3, 4, 2), 6)
    want = op_output_onnxruntime("GridSample", [x, g], 16, mode=old, padding_mode="border")
    got16 = op_output("GridSample", [x, g], 16, mode=old, padding_mode="border")
    got20 = op_output("GridSample", [x, g], 20, mode=new, padding_mode="border")
    np.testing.assert_allclose(got16, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(got16, got20)


@pytest.mark.parametrize("dtype", [np.float16, np.float64])
def test_gridsample_other_float_types(dtype):
    x = randn((1, 2, 6, 5), 7)
    g = _grid((1, 3, 4, 2), 8)
    want = op_output_onnxruntime("GridSample", [x, g], 22, mode="linear")
    got = op_output("GridSample", [x.astype(dtype), g.astype(dtype)], 22, mode="linear")
    assert got.dtype == dtype
    tol = 1e-2 if dtype == np.float16 else 1e-5
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=tol, atol=tol)


def test_gridsample_identity_grid_returns_input():
    x = randn((1, 1, 3, 4), 9)
    ys, xs = np.meshgrid(np.linspace(-1, 1, 3), np.linspace(-1, 1, 4), indexing="ij")
    g = np.stack([xs, ys], axis=-1)[None].astype(np.float32)
    for mode in ("nearest", "linear", "cubic"):
        got = op_output("GridSample", [x, g], 22, mode=mode, align_corners=1)
        np.testing.assert_allclose(got, x, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(
    ("opset", "attrs"),
    [(16, {"mode": "linear"}), (22, {"mode": "bilinear"}), (22, {"padding_mode": "wrap"}),
     (22, {"align_corners": 2})],
)  # fmt: skip
def test_gridsample_rejects_bad_attributes(opset, attrs):
    kdef, _ = registry.lookup("", "GridSample", opset)
    node = helper.make_node("GridSample", ["x", "g"], ["y"], name="bad_gs", **attrs)
    with pytest.raises(InvalidGraph, match="bad_gs"):
        kdef.factory(KernelInfo.from_node(node, opset))


# ----------------------------------------------------------- NonMaxSuppression


def _nms_inputs(seed, center, with_score_threshold, limit=3):
    rng = np.random.default_rng(seed)
    b, c, n = 2, 3, 40
    if center:
        boxes = np.concatenate([rng.uniform(0, 10, (b, n, 2)), rng.uniform(0.5, 4, (b, n, 2))], -1)
    else:
        boxes = rng.uniform(0, 10, (b, n, 4))
    scores = rng.choice([0.1, 0.2, 0.5, 0.7, 0.9], (b, c, n))  # many ties
    return [
        boxes.astype(np.float32),
        scores.astype(np.float32),
        np.array([limit], np.int64),
        np.array([0.3], np.float32),
        np.array([0.5], np.float32) if with_score_threshold else None,
    ]


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("center", [0, 1])
@pytest.mark.parametrize("with_score_threshold", [False, True])
def test_nms_matches_onnxruntime(seed, center, with_score_threshold):
    ins = _nms_inputs(seed, center, with_score_threshold, limit=seed + 2)
    want = run_op_onnxruntime("NonMaxSuppression", ins, 11, [np.int64], center_point_box=center)
    got = op_output("NonMaxSuppression", ins, 11, center_point_box=center)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, want[0])


def test_nms_without_limit_selects_nothing():
    ins = _nms_inputs(0, 0, False)[:2]
    got = op_output("NonMaxSuppression", ins, 10)
    assert got.shape == (0, 3) and got.dtype == np.int64


def test_nms_zero_area_boxes_are_never_suppressed():
    boxes = np.array([[[0, 0, 1, 1], [0, 0, 0, 1], [0, 0, 0, 1], [0, 0, 1, 1]]], np.float32)
    scores = np.array([[[0.9, 0.8, 0.7, 0.6]]], np.float32)
    ins = [boxes, scores, np.array([10], np.int64), np.array([0.0], np.float32)]
    got = op_output("NonMaxSuppression", ins, 11)
    np.testing.assert_array_equal(got, [[0, 0, 0], [0, 0, 1], [0, 0, 2]])


# ------------------------------------------------------------------ RoiAlign

ROIS = np.array(
    [[0, 0, 5, 5], [1.3, 2.2, 9.7, 8.1], [-3, -2, 4, 15], [2, 3, 2.5, 3.2], [5, 5, 30, 30]],
    np.float32,
)
BATCH = np.array([0, 1, 0, 1, 1], np.int64)


@pytest.mark.parametrize(
    ("mode", "ctm", "ratio"),
    list(itertools.product(["avg", "max"], ["half_pixel", "output_half_pixel"], [0, 2, 3])),
)
def test_roialign_matches_onnxruntime(mode, ctm, ratio):
    x = randn((2, 3, 12, 11), 10)
    attrs = {"mode": mode, "coordinate_transformation_mode": ctm, "sampling_ratio": ratio,
             "output_height": 3, "output_width": 4, "spatial_scale": 0.9}  # fmt: skip
    want = op_output_onnxruntime("RoiAlign", [x, ROIS, BATCH], 16, **attrs)
    got = op_output("RoiAlign", [x, ROIS, BATCH], 22, **attrs)
    assert got.shape == (5, 3, 3, 4) and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_roialign_v10_uses_output_half_pixel():
    x = randn((2, 3, 12, 11), 11)
    want = op_output_onnxruntime("RoiAlign", [x, ROIS, BATCH], 10, output_height=2)
    got = op_output("RoiAlign", [x, ROIS, BATCH], 10, output_height=2)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_roialign_float16():
    x = randn((2, 3, 12, 11), 12)
    want = op_output_onnxruntime("RoiAlign", [x, ROIS, BATCH], 16, output_width=2)
    got = op_output("RoiAlign", [x.astype(np.float16), ROIS.astype(np.float16), BATCH], 22,
                    output_width=2)  # fmt: skip
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=2e-2, atol=2e-2)


# -------------------------------------------------------------------- Col2Im


@pytest.mark.parametrize(
    ("image", "block", "attrs"),
    [((6, 7), (2, 3), {}),
     ((9, 8), (3, 2), {"strides": [2, 3], "pads": [1, 0, 2, 1], "dilations": [2, 1]}),
     ((4, 5, 6), (2, 2, 3), {"strides": [1, 2, 2], "pads": [0, 1, 1, 1, 0, 1]})],
)  # fmt: skip
def test_col2im_matches_onnxruntime(image, block, attrs):
    nsp = len(image)
    s = attrs.get("strides", [1] * nsp)
    d = attrs.get("dilations", [1] * nsp)
    p = attrs.get("pads", [0] * 2 * nsp)
    n_blocks = np.prod(
        [(image[i] + p[i] + p[i + nsp] - d[i] * (block[i] - 1) - 1) // s[i] + 1 for i in range(nsp)]
    )
    x = randn((2, 3 * int(np.prod(block)), int(n_blocks)), 13)
    ins = [x, np.array(image, np.int64), np.array(block, np.int64)]
    want = op_output_onnxruntime("Col2Im", ins, 18, **attrs)
    got = op_output("Col2Im", ins, 18, **attrs)
    assert got.shape == (2, 3, *image)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_col2im_rejects_wrong_block_count():
    x = randn((1, 4, 5), 14)
    with pytest.raises(ValueError, match="blocks"):
        op_output("Col2Im", [x, np.array([3, 3], np.int64), np.array([2, 2], np.int64)], 18)


# ----------------------------------------------------------------- MaxUnpool


@pytest.mark.parametrize(
    ("shape", "attrs"),
    [((1, 2, 8, 6), {"kernel_shape": [2, 2], "strides": [2, 2]}),
     ((2, 3, 9, 8), {"kernel_shape": [3, 2], "strides": [2, 2], "pads": [1, 0, 1, 0]}),
     ((1, 2, 6, 4, 4), {"kernel_shape": [2, 2, 2], "strides": [2, 2, 2]})],
)  # fmt: skip
def test_maxunpool_inverts_maxpool(shape, attrs):
    x = randn(shape, 15)
    pooled, idx = run_op_onnxruntime("MaxPool", [x], 12, [np.float32, np.int64], **attrs)
    want = op_output_onnxruntime("MaxUnpool", [pooled, idx], 11, **attrs)
    got = op_output("MaxUnpool", [pooled, idx], 22, **attrs)
    np.testing.assert_array_equal(got, want)
    # The maxima are back in place, everything else is zero.
    flat = got.reshape(-1)
    np.testing.assert_array_equal(flat[idx.reshape(-1)], pooled.reshape(-1))
    assert np.count_nonzero(flat) <= pooled.size


def test_maxunpool_output_shape_equal_to_default():
    x = randn((1, 1, 2, 2), 16)
    idx = np.array([[[[1, 6], [8, 15]]]], np.int64)
    attrs = {"kernel_shape": [2, 2], "strides": [2, 2]}
    got = op_output("MaxUnpool", [x, idx, np.array([1, 1, 4, 4], np.int64)], 22, **attrs)
    np.testing.assert_array_equal(got, op_output("MaxUnpool", [x, idx], 9, **attrs))
    assert got.reshape(-1)[15] == x[0, 0, 1, 1]


@pytest.mark.parametrize("dtype", [np.int32, np.float16, np.float64])
def test_maxunpool_keeps_dtype(dtype):
    x = (randn((1, 2, 2, 2), 17) * 10).astype(dtype)
    idx = np.arange(8, dtype=np.int64).reshape(1, 2, 2, 2) * 4
    (got,) = run_op("MaxUnpool", [x, idx], 11, kernel_shape=[2, 2], strides=[2, 2])
    assert got.dtype == dtype and got.shape == (1, 2, 4, 4)
    np.testing.assert_array_equal(got.reshape(-1)[idx.reshape(-1)], x.reshape(-1))


# ---------------------------------------------------------------- DeformConv


def _out_size(size, k, s, d, pb, pe):
    return (size + pb + pe - d * (k - 1) - 1) // s + 1


@pytest.mark.parametrize(
    ("group", "offset_group", "dil", "stride", "pads", "with_mask"),
    [(1, 1, [1, 1], [1, 1], [0, 0, 0, 0], False),
     (2, 2, [2, 1], [2, 1], [1, 0, 2, 1], True),
     (1, 3, [1, 1], [1, 2], [1, 1, 1, 1], True),
     (3, 1, [1, 2], [1, 1], [0, 1, 0, 1], False)],
)  # fmt: skip
def test_deformconv_matches_onnxruntime(group, offset_group, dil, stride, pads, with_mask):
    rng = np.random.default_rng(18)
    x = randn((2, 6, 7, 8), 19)
    k = [3, 2]
    w = randn((6, 6 // group, *k), 20)
    outs = [_out_size(x.shape[2 + i], k[i], stride[i], dil[i], pads[i], pads[i + 2])
            for i in range(2)]  # fmt: skip
    off = randn((2, offset_group * 6 * 2, *outs), 21, scale=2.0)
    b = randn(6, 22)
    mask = rng.uniform(0, 1, (2, offset_group * 6, *outs)).astype(np.float32) if with_mask else None
    attrs = {"group": group, "offset_group": offset_group, "dilations": dil, "strides": stride,
             "pads": pads, "kernel_shape": k}  # fmt: skip
    ins = [x, w, off, b, mask]
    want = op_output_onnxruntime("DeformConv", ins, 19, **attrs)
    got = op_output("DeformConv", ins, 22, **attrs)
    assert got.shape == (2, 6, *outs)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_deformconv_3d_with_zero_offsets_is_conv():
    x = randn((1, 4, 5, 4, 6), 23)
    w = randn((4, 2, 2, 3, 2), 24)
    attrs = {"group": 2, "strides": [1, 1, 2], "pads": [1, 0, 1, 0, 1, 1]}
    conv = op_output_onnxruntime("Conv", [x, w], 22, **attrs)
    off = np.zeros((1, 12 * 3, *conv.shape[2:]), np.float32)
    got = op_output("DeformConv", [x, w, off], 22, **attrs)
    np.testing.assert_allclose(got, conv, rtol=1e-4, atol=1e-4)


def test_deformconv_integer_offsets_shift_the_taps():
    x = randn((1, 1, 5, 5), 25)
    w = np.ones((1, 1, 1, 1), np.float32)
    off = np.zeros((1, 2, 5, 5), np.float32)
    off[:, 0] = 1.0  # every tap reads one row further down; the last row reads outside: 0
    got = op_output("DeformConv", [x, w, off], 22)
    want = np.zeros_like(x)
    want[0, 0, :4] = x[0, 0, 1:]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
