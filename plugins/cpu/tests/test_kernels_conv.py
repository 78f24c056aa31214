"""Tests for the CPU convolution kernels (onyxrt_cpu.kernels.conv).

The onnx node conformance cases run straight through the registry; the rest compare Conv,
ConvTranspose and ConvInteger with onnxruntime on random inputs over the configurations
the conformance cases leave out (groups, depthwise, dilations, strides, asymmetric pads,
auto_pad, 1-D/3-D, float16, prepacked constant weights).
"""

from __future__ import annotations

import numpy as np
import pytest
from kernel_cases import conformance_params, randn, run_case
from kernel_cases import op_output as ours
from kernel_cases import op_output_onnxruntime as onnxrt
from onnx import helper

from onyxrt.errors import InvalidGraph
from onyxrt.kernels import KernelInfo
from onyxrt_cpu import native
from onyxrt_cpu.kernels import registry

OPS = ["Conv", "ConvTranspose", "ConvInteger"]

# Conformance cases these kernels cannot pass, with the reason. None today.
XFAIL: dict[str, str] = {}


@pytest.mark.parametrize("case", conformance_params(OPS, XFAIL))
def test_conformance(case):
    run_case(case)


# -------------------------------------------------------------------- Conv

# (x shape, w shape, with bias, attributes)
CONV_CASES = [
    ("grouped_strided_dilated_padded", (2, 6, 11, 13), (4, 3, 3, 3), True,
     {"group": 2, "strides": [2, 1], "dilations": [2, 1], "pads": [1, 2, 0, 1]}),
    ("plain_3x3", (1, 3, 8, 8), (5, 3, 3, 3), True, {"pads": [1, 1, 1, 1]}),
    ("pointwise_1x1", (2, 8, 5, 7), (6, 8, 1, 1), True, {}),
    ("pointwise_grouped", (2, 8, 5, 7), (6, 8 // 2, 1, 1), False, {"group": 2}),
    ("pointwise_strided", (1, 4, 9, 9), (3, 4, 1, 1), False, {"strides": [2, 3]}),
    ("depthwise", (2, 8, 10, 9), (8, 1, 3, 3), True,
     {"group": 8, "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ("depthwise_multiplier_dilated", (1, 4, 12, 12), (8, 1, 3, 5), True,
     {"group": 4, "dilations": [2, 1], "pads": [2, 2, 2, 2]}),
    ("same_upper_stride2", (1, 3, 10, 11), (4, 3, 4, 3), False,
     {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ("same_lower_stride2", (1, 3, 10, 11), (4, 3, 4, 3), False,
     {"auto_pad": "SAME_LOWER", "strides": [2, 2]}),
    ("valid_dilated", (1, 2, 9, 9), (3, 2, 2, 2), True,
     {"auto_pad": "VALID", "dilations": [3, 2], "strides": [1, 2]}),
    ("conv1d", (3, 4, 17), (6, 2, 5), True,
     {"group": 2, "strides": [3], "pads": [2, 1], "dilations": [2]}),
    # 1-D runs as 2-D over a height of 1: the compiled im2col (an STFT front end's many
    # strided taps), depthwise (with a channel multiplier, dilated) and 1x1 paths.
    ("conv1d_stft", (1, 1, 1000), (18, 1, 64), True, {"strides": [10], "pads": [32, 31]}),
    ("conv1d_depthwise", (2, 6, 23), (12, 1, 5), True,
     {"group": 6, "dilations": [2], "pads": [4, 3]}),
    ("conv1d_pointwise", (2, 5, 9), (3, 5, 1), False, {}),
    ("conv1d_same_lower", (1, 3, 10), (4, 3, 4), True, {"auto_pad": "SAME_LOWER", "strides": [3]}),
    ("conv3d", (1, 4, 6, 7, 5), (4, 2, 3, 2, 3), True,
     {"group": 2, "strides": [1, 2, 1], "pads": [1, 0, 1, 1, 1, 0]}),
    ("kernel_shape_attr", (1, 2, 6, 6), (2, 2, 3, 3), False, {"kernel_shape": [3, 3]}),
]  # fmt: skip


@pytest.mark.parametrize(
    ("xs", "ws", "bias", "attrs"), [c[1:] for c in CONV_CASES], ids=[c[0] for c in CONV_CASES]
)
@pytest.mark.parametrize("const_w", [False, True], ids=["w_input", "w_const"])
def test_conv_matches_onnxruntime(xs, ws, bias, attrs, const_w):
    x = randn(xs, 1)
    w = randn(ws, 2)
    b = randn((ws[0],), 3) if bias else None
    inputs = [x, w, b]
    want = onnxrt("Conv", inputs, 22, **attrs)
    got = ours("Conv", inputs, 22, constants=(1,) if const_w else (), **attrs)
    assert got.dtype == np.float32 and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_conv_constant_weight_still_uses_given_input():
    """A kernel built with a constant W must still compute with the W it is passed."""
    x = randn((1, 2, 5, 5), 1)
    w_const = randn((3, 2, 3, 3), 2)
    w_other = randn((3, 2, 3, 3), 3)
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="c")
    kdef, _ = registry.lookup("", "Conv", 22)
    kernel = kdef.factory(KernelInfo.from_node(node, 22, constants={1: w_const}))
    (got_const,) = kernel.compute(x, w_const)
    (got_other,) = kernel.compute(x, w_other)
    np.testing.assert_allclose(got_const, onnxrt("Conv", [x, w_const], 22), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got_other, onnxrt("Conv", [x, w_other], 22), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("opset", [1, 11, 22])
def test_conv_float16_and_float64(opset):
    x = randn((1, 4, 7, 7), 1)
    w = randn((4, 2, 3, 3), 2)
    b = randn((4,), 3)
    attrs = {"group": 2, "pads": [1, 1, 1, 1], "strides": [2, 2]}
    # onnxruntime has no float64 CPU Conv: compare with its float32 result.
    want = onnxrt("Conv", [x, w, b], 22, **attrs).astype(np.float64)
    got16 = ours("Conv", [x.astype(np.float16), w.astype(np.float16), b.astype(np.float16)],
                 opset, **attrs)  # fmt: skip
    got64 = ours("Conv", [x.astype(np.float64), w.astype(np.float64), b.astype(np.float64)],
                 opset, **attrs)  # fmt: skip
    assert got16.dtype == np.float16 and got64.dtype == np.float64
    np.testing.assert_allclose(got64, want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got16.astype(np.float64), want, rtol=1e-2, atol=2e-2)


def test_conv_rejects_bad_attributes():
    for attrs in ({"auto_pad": "SAME"}, {"strides": [0, 1]}, {"pads": [1, 1, 1]}, {"group": 0}):
        node = helper.make_node("Conv", ["x", "w"], ["y"], name="bad_conv", **attrs)
        kdef, _ = registry.lookup("", "Conv", 22)
        with pytest.raises(InvalidGraph, match="bad_conv"):
            kdef.factory(KernelInfo.from_node(node, 22))


def test_conv_channel_mismatch_is_clear():
    with pytest.raises(ValueError, match="channels"):
        ours("Conv", [randn((1, 3, 5, 5)), randn((2, 2, 3, 3))], 22)


# ----------------------------------------------------------- ConvTranspose

CONVT_CASES = [
    ("grouped_strided_dilated_padded", (2, 4, 5, 6), (4, 3, 3, 3), True,
     {"group": 2, "strides": [2, 3], "dilations": [2, 1], "pads": [1, 0, 2, 1]}),
    ("output_padding", (1, 3, 4, 4), (3, 2, 3, 3), True,
     {"strides": [3, 2], "output_padding": [2, 1], "pads": [1, 1, 0, 0]}),
    ("output_shape", (1, 2, 4, 5), (2, 3, 3, 3), False,
     {"strides": [2, 2], "output_shape": [10, 9]}),
    ("output_shape_with_output_padding", (1, 2, 4, 5), (2, 3, 3, 3), False,
     {"strides": [2, 2], "output_shape": [9, 11], "output_padding": [1, 1]}),
    ("same_upper", (1, 2, 4, 5), (2, 3, 3, 4), False,
     {"strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    ("depthwise", (2, 6, 5, 5), (6, 1, 3, 3), True, {"group": 6, "strides": [2, 2]}),
    ("pointwise", (2, 5, 4, 3), (5, 3, 1, 1), True, {}),
    ("convt1d", (2, 4, 7), (4, 2, 4), True,
     {"group": 2, "strides": [3], "dilations": [2], "pads": [1, 2]}),
    ("convt3d", (1, 2, 3, 4, 3), (2, 2, 2, 3, 2), True,
     {"strides": [2, 1, 2], "pads": [0, 1, 1, 1, 0, 0]}),
]  # fmt: skip


@pytest.mark.parametrize(
    ("xs", "ws", "bias", "attrs"), [c[1:] for c in CONVT_CASES], ids=[c[0] for c in CONVT_CASES]
)
@pytest.mark.parametrize("const_w", [False, True], ids=["w_input", "w_const"])
def test_convtranspose_matches_onnxruntime(xs, ws, bias, attrs, const_w):
    x = randn(xs, 4)
    w = randn(ws, 5)
    b = randn((ws[1] * attrs.get("group", 1),), 6) if bias else None
    inputs = [x, w, b]
    want = onnxrt("ConvTranspose", inputs, 22, **attrs)
    got = ours("ConvTranspose", inputs, 22, constants=(1,) if const_w else (), **attrs)
    assert got.dtype == np.float32 and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_convtranspose_float16():
    x = randn((1, 2, 4, 4), 1)
    w = randn((2, 3, 3, 3), 2)
    want = onnxrt("ConvTranspose", [x, w], 11, strides=[2, 2])
    got = ours("ConvTranspose", [x.astype(np.float16), w.astype(np.float16)], 11, strides=[2, 2])
    assert got.dtype == np.float16 and got.shape == want.shape
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=1e-2, atol=2e-2)


# ------------------------------------------------------------- ConvInteger


@pytest.mark.parametrize("xdt", [np.uint8, np.int8])
def test_convinteger_matches_onnxruntime(xdt):
    rng = np.random.default_rng(7)
    info = np.iinfo(xdt)
    x = rng.integers(info.min, info.max + 1, (2, 4, 7, 6)).astype(xdt)
    w = rng.integers(-128, 128, (6, 2, 3, 3)).astype(np.int8)
    xz = np.array(3, dtype=xdt)
    wz = np.array(-2, dtype=np.int8)
    attrs = {"group": 2, "pads": [1, 0, 1, 2], "strides": [2, 1]}
    want = onnxrt("ConvInteger", [x, w, xz, wz], 10, out_type=np.int32, **attrs)
    got = ours("ConvInteger", [x, w, xz, wz], 10, **attrs)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    ("xs", "ws", "attrs"),
    [
        ((3, 4, 9, 7), (6, 4, 3, 3), {"pads": [1, 1, 1, 1], "strides": [1, 2]}),
        ((2, 4, 8, 6, 5), (4, 2, 3, 2, 2), {"group": 2, "dilations": [2, 1, 1]}),
        ((3, 6, 9, 8), (12, 1, 3, 3), {"group": 6, "pads": [1, 0, 1, 2]}),
    ],
    ids=["2d", "3d_grouped", "depthwise"],
)
@pytest.mark.parametrize("budget", [1, 3000, 20000])
def test_conv_chunked_paths_match_onnxruntime(monkeypatch, xs, ws, attrs, budget):
    """Column/accumulator chunking (by images, by rows, by channels) gives the same result."""
    from onyxrt_cpu.kernels import _spatial, conv

    monkeypatch.setattr(conv, "_COLS_BUDGET", budget)
    monkeypatch.setattr(_spatial, "BLOCK_BYTES", budget)
    x, w, b = randn(xs, 1), randn(ws, 2), randn((ws[0],), 3)
    want = onnxrt("Conv", [x, w, b], 22, **attrs)
    got = ours("Conv", [x, w, b], 22, **attrs)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.skipif(not native.ENABLED, reason="compiled module not built")
@pytest.mark.parametrize(("ws", "attrs", "path"), [
    ((8, 2, 64), {"strides": [10], "pads": [32, 31]}, "im2col2d"),
    ((4, 1, 5), {"group": 2, "pads": [2, 2]}, "depthwise2d"),
])  # fmt: skip
def test_conv1d_takes_the_compiled_2d_paths(monkeypatch, ws, attrs, path):
    """A 1-D convolution runs as 2-D over a height of 1, so the compiled im2col and
    depthwise kernels take it (the generic im2col loops over taps in Python)."""
    calls = []
    real = getattr(native, path)
    monkeypatch.setattr(native, path, lambda *a, **k: calls.append(a[0].shape) or real(*a, **k))
    x = randn((1, 2, 300), 1)
    inputs = [x, randn(ws, 2), None]
    got = ours("Conv", inputs, 22, **attrs)
    want = onnxrt("Conv", inputs, 22, **attrs)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert calls and all(len(shape) == 4 and shape[2] == 1 for shape in calls)
