"""The compiled inner loops (onyxrt_cpu._native) against the numpy paths they replace.

Every kernel that uses the extension keeps its numpy path for what the extension does not
take; here each compiled path is run with ``native.ENABLED`` on and off over the same
inputs, and the results must agree (bit for bit where the operations are the same, within
float32 rounding where the C code sums in another order). The C functions' own argument
checks are exercised directly: a bad call raises a Python exception, never crashes.
"""

from __future__ import annotations

import itertools
import math
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kernel_cases import run_ours
from onnx import helper

from onyxrt.errors import InvalidGraph
from onyxrt.kernels import KernelInfo
from onyxrt_cpu import native
from onyxrt_cpu.kernels import conv as conv_kernels
from onyxrt_cpu.kernels import registry, winograd
from onyxrt_cpu.kernels._spatial import window
from onyxrt_cpu.kernels._special import (
    _ERF32_CLAMP_ARG,
    _ERF32_T_SCALE,
    _erf32_poly,
    erf_float32,
    erf_float32_numpy,
    gelu_float32_native,
)

pytestmark = pytest.mark.skipif(
    os.environ.get("ONYXRT_CPU_PURE", "") not in ("", "0"),
    reason="ONYXRT_CPU_PURE=1: onyxrt-cpu was installed without its compiled kernels on purpose",
)


def test_extension_is_built():
    """A normal install (a C compiler present) must carry the compiled kernels: losing
    them silently would make the provider several times slower."""
    assert native.AVAILABLE, native.UNAVAILABLE_REASON
    assert native.ENABLED or os.environ.get("ONYXRT_CPU_NATIVE") == "0"
    assert "compiled kernels" in native.status()


@pytest.fixture
def numpy_only(monkeypatch):
    """Run the numpy paths: call it to switch, the fixture restores the flag."""

    def switch(enabled: bool) -> None:
        monkeypatch.setattr(native, "ENABLED", enabled)

    return switch


def _both(numpy_only, fn):
    numpy_only(True)
    compiled = fn()
    numpy_only(False)
    reference = fn()
    numpy_only(True)
    return compiled, reference


# ----------------------------------------------------------------- convolution


def _forward(x, w, group, kernel, strides, dilations, pads_begin, pads_end):
    win = window(x.shape[2:], kernel, strides, dilations, pads_begin, pads_end, "NOTSET")
    wp = conv_kernels.pack_conv_weight(w, group, np.dtype(np.float32))
    return conv_kernels.conv_forward(x, wp, kernel, strides, dilations, win)


GEOMETRIES = [
    # (N, C, H, W, M per group, kernel, strides, dilations, pads_begin, pads_end)
    (1, 8, 9, 9, 1, (3, 3), (1, 1), (1, 1), (1, 1), (1, 1)),  # 3x3 fast path, stride 1
    (2, 5, 12, 11, 1, (3, 3), (2, 2), (1, 1), (1, 1), (1, 1)),  # 3x3 fast path, stride 2
    (1, 4, 7, 7, 2, (3, 3), (1, 1), (1, 1), (0, 0), (0, 0)),  # channel multiplier 2
    (1, 3, 10, 13, 1, (5, 5), (1, 1), (1, 1), (2, 2), (2, 2)),  # general kernel
    (1, 3, 10, 13, 1, (3, 3), (1, 1), (2, 2), (2, 1), (0, 3)),  # dilated, asymmetric pads
    (1, 6, 8, 9, 1, (3, 2), (3, 2), (1, 1), (1, 0), (2, 1)),  # odd stride, rectangular
    (2, 4, 1, 1, 1, (3, 3), (1, 1), (1, 1), (1, 1), (1, 1)),  # 1x1 image: all padding
    (1, 4, 5, 6, 1, (3, 3), (2, 2), (1, 1), (0, 0), (0, 0)),  # unpadded, stride 2
    # 16 channels at a time on small planes (depthwise.c's lanes), and next to them:
    (2, 32, 7, 7, 1, (3, 3), (1, 1), (1, 1), (1, 1), (1, 1)),  # 7x7, stride 1
    (1, 48, 14, 14, 1, (3, 3), (2, 2), (1, 1), (1, 1), (1, 1)),  # 14x14 -> 7x7
    (1, 16, 9, 8, 1, (5, 3), (2, 1), (2, 1), (3, 0), (1, 2)),  # dilated, rectangular, uneven pads
    (1, 16, 2, 3, 1, (3, 3), (1, 1), (1, 1), (2, 2), (2, 2)),  # pads wider than the image
    (1, 40, 7, 7, 1, (3, 3), (1, 1), (1, 1), (1, 1), (1, 1)),  # 40 channels: phase planes
]


@pytest.mark.parametrize("geometry", GEOMETRIES, ids=lambda g: f"{g[1]}c{g[2]}x{g[3]}k{g[5]}s{g[6]}")
def test_depthwise_matches_numpy(numpy_only, geometry):
    n, c, h, w, mpg, kernel, strides, dilations, pb, pe = geometry
    rng = np.random.default_rng(1)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = rng.standard_normal((c * mpg, 1) + kernel).astype(np.float32)
    compiled, reference = _both(
        numpy_only, lambda: _forward(x, wt, c, kernel, strides, dilations, pb, pe)
    )
    np.testing.assert_allclose(compiled, reference, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("geometry", GEOMETRIES, ids=lambda g: f"{g[1]}c{g[2]}x{g[3]}k{g[5]}s{g[6]}")
@pytest.mark.parametrize("group", [1, 2])
def test_im2col_convolution_matches_numpy(numpy_only, geometry, group):
    n, c, h, w, _, kernel, strides, dilations, pb, pe = geometry
    c = 2 * c  # divisible by group
    rng = np.random.default_rng(2)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = rng.standard_normal((6, c // group) + kernel).astype(np.float32)
    compiled, reference = _both(
        numpy_only, lambda: _forward(x, wt, group, kernel, strides, dilations, pb, pe)
    )
    np.testing.assert_allclose(compiled, reference, rtol=1e-5, atol=1e-5)


def test_im2col_row_chunks_match_numpy(numpy_only, monkeypatch):
    """A column budget smaller than one image cuts it into runs of output rows (r0 > 0)."""
    monkeypatch.setattr(conv_kernels, "_COLS_BUDGET", 4096)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 4, 23, 17)).astype(np.float32)
    wt = rng.standard_normal((5, 4, 3, 3)).astype(np.float32)
    compiled, reference = _both(
        numpy_only, lambda: _forward(x, wt, 1, (3, 3), (2, 1), (1, 1), (1, 2), (0, 1))
    )
    np.testing.assert_allclose(compiled, reference, rtol=1e-5, atol=1e-5)


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 2),
    c=st.integers(1, 5),
    h=st.integers(1, 9),
    w=st.integers(1, 9),
    k=st.tuples(st.integers(1, 4), st.integers(1, 4)),
    s=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    d=st.tuples(st.integers(1, 2), st.integers(1, 2)),
    pads=st.tuples(*[st.integers(0, 2)] * 4),
    depthwise=st.booleans(),
)
def test_convolution_property(n, c, h, w, k, s, d, pads, depthwise):
    """Any 2-D geometry with at least one output: compiled == numpy path."""
    pb, pe = pads[:2], pads[2:]
    out = [(size + a + b - (kk - 1) * dd - 1) // ss + 1
           for size, kk, ss, dd, a, b in zip((h, w), k, s, d, pb, pe)]
    if min(out) < 1 or (depthwise and k == (1, 1)):
        return
    group = c if depthwise else 1
    rng = np.random.default_rng(n * 1000 + c * 100 + h * 10 + w)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = rng.standard_normal((c if depthwise else 3, c // group) + k).astype(np.float32)
    saved = native.ENABLED
    try:
        native.ENABLED = True
        compiled = _forward(x, wt, group, k, s, d, pb, pe)
        native.ENABLED = False
        reference = _forward(x, wt, group, k, s, d, pb, pe)
    finally:
        native.ENABLED = saved
    np.testing.assert_allclose(compiled, reference, rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------- Winograd F(2x2, 3x3)


@pytest.fixture
def winograd_everywhere(monkeypatch):
    """Winograd for any channel count and tile count (the thresholds are about speed)."""
    monkeypatch.setattr(winograd, "MIN_CHANNELS", 1)
    monkeypatch.setattr(winograd, "MIN_TILES", 1)


WINOGRAD_CASES = [
    (shape, pads)
    for shape in [(1, 3, 5, 7, 8), (2, 4, 6, 1, 5), (1, 8, 2, 6, 6), (2, 2, 3, 9, 4)]
    for pads in [(1, 1, 1, 1), (0, 0, 0, 0), (2, 1, 0, 2)]
    # at least one output position
    if shape[3] + pads[0] + pads[2] >= 3 and shape[4] + pads[1] + pads[3] >= 3
]


@pytest.mark.parametrize("shape,pads", WINOGRAD_CASES)
def test_winograd_matches_im2col(winograd_everywhere, shape, pads):
    n, c, m, h, w = shape
    pb, pe = pads[:2], pads[2:]
    rng = np.random.default_rng(11)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = (rng.standard_normal((m, c, 3, 3)) / 3).astype(np.float32)
    win = window((h, w), (3, 3), (1, 1), (1, 1), pb, pe, "NOTSET")
    wp = conv_kernels.pack_conv_weight(wt, 1, np.dtype(np.float32))
    assert winograd.applicable(x, wp, (3, 3), (1, 1), (1, 1))
    got, applied = winograd.convolve(x, winograd.transform_filters(wp), win.out_shape, pb)
    assert not applied  # nothing to finish was given
    want = conv_kernels.conv_forward(x, wp, (3, 3), (1, 1), (1, 1), win)
    # Different (but equally accurate) roundings: measured against a float64 convolution,
    # both paths stay within 1e-6 of the outputs' scale.
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


@pytest.mark.parametrize(
    "activation,params", [("", []), ("Relu", []), ("Clip", [-0.5, 0.75]), ("LeakyRelu", [0.1])]
)
@pytest.mark.parametrize("with_residual", [True, False])
def test_winograd_applies_the_fused_epilogue(winograd_everywhere, numpy_only, activation, params,
                                             with_residual):
    compiled, reference = _both(numpy_only, _fused_conv(activation, params, True, with_residual))
    np.testing.assert_allclose(compiled, reference, rtol=1e-5, atol=1e-5)


def test_winograd_thresholds_keep_small_layers_on_im2col():
    x = np.zeros((1, 64, 7, 7), np.float32)  # 16 tiles
    wp = np.zeros((1, 64, 64 * 9), np.float32)
    assert not winograd.applicable(x, wp, (3, 3), (1, 1), (1, 1))
    assert winograd.applicable(np.zeros((1, 64, 14, 14), np.float32), wp, (3, 3), (1, 1), (1, 1))
    assert not winograd.applicable(np.zeros((1, 64, 14, 14), np.float32), wp, (3, 3), (2, 2), (1, 1))
    assert not winograd.applicable(np.zeros((1, 8, 14, 14), np.float32), wp[:, :, :72], (3, 3), (1, 1), (1, 1))


# ----------------------------------------------------------------- MaxPool


@pytest.mark.parametrize(
    "attrs",
    [
        {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},  # ResNet's stem pool
        {"kernel_shape": [2, 2], "strides": [2, 2]},
        {"kernel_shape": [3, 2], "strides": [1, 3], "pads": [0, 1, 2, 0], "dilations": [2, 1]},
        {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1},
        {"kernel_shape": [5, 5], "auto_pad": "SAME_UPPER"},
    ],
    ids=["3x3s2p1", "2x2s2", "dilated", "ceil", "same"],
)
def test_maxpool_matches_numpy(numpy_only, attrs):
    node = helper.make_node("MaxPool", ["x"], ["y"], **attrs)
    x = np.random.default_rng(12).standard_normal((2, 3, 11, 10)).astype(np.float32)
    x[0, 0, 3, 4] = np.nan
    x[1, 2, 0, 0] = -np.inf
    compiled, reference = _both(numpy_only, lambda: run_ours(node, 12, x)[0])
    np.testing.assert_array_equal(compiled, reference)  # max picks an element: exact


# ----------------------------------------------------------------- FusedConv epilogue


# FusedConv geometries, one per convolution path: im2col, depthwise, 1x1 (no columns), in
# 2-D and in 1-D (which runs as 2-D over a height of 1).
CONV_KINDS = {
    "dense3x3": ((2, 3, 6, 5), (4, 3, 3, 3), {"pads": [1, 1, 1, 1]}),
    "depthwise": ((2, 3, 6, 5), (3, 1, 3, 3), {"pads": [1, 1, 1, 1], "group": 3}),
    "pointwise": ((2, 3, 6, 5), (4, 3, 1, 1), {}),
    "dense1d": ((2, 3, 17), (4, 3, 5), {"pads": [2, 2]}),
    "depthwise1d": ((2, 3, 17), (3, 1, 7), {"pads": [3, 3], "group": 3}),
    "pointwise1d": ((2, 3, 17), (4, 3, 1), {}),
}


def _fused_conv(activation, params, with_bias, with_residual, dtype=np.float32, kind="dense3x3"):
    x_shape, w_shape, attrs = CONV_KINDS[kind]
    attrs = dict(attrs, activation=activation)
    if params:
        attrs["activation_params"] = params
    node = helper.make_node(
        "FusedConv", ["x", "w", "b" if with_bias else "", "z" if with_residual else ""], ["y"],
        domain="ai.onyxrt", **attrs,
    )
    m = w_shape[0]
    rng = np.random.default_rng(4)
    args = [rng.standard_normal(x_shape).astype(dtype),
            rng.standard_normal(w_shape).astype(dtype),
            rng.standard_normal(m).astype(dtype) if with_bias else None,
            rng.standard_normal((x_shape[0], m) + x_shape[2:]).astype(dtype) if with_residual else None]
    return lambda: run_ours(node, 1, *args)[0]


@pytest.mark.parametrize(
    "activation,params",
    [("", []), ("Relu", []), ("Clip", [-0.5, 0.75]), ("Clip", [1.0, -1.0]),
     ("LeakyRelu", [0.1]), ("Sigmoid", []), ("HardSigmoid", [0.2, 0.5])],
)
@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize("with_residual", [True, False])
@pytest.mark.parametrize("kind", sorted(CONV_KINDS))
def test_fused_conv_epilogue_matches_numpy(numpy_only, activation, params, with_bias,
                                           with_residual, kind):
    compiled, reference = _both(
        numpy_only,
        _fused_conv(activation, params, with_bias, with_residual, kind=kind),
    )
    # The same float32 additions in the same order: identical, not merely close.
    np.testing.assert_array_equal(compiled, reference)


def test_fused_conv_float16_finishes_in_float32(numpy_only):
    compiled, reference = _both(numpy_only, _fused_conv("Relu", [], True, True, np.float16))
    assert compiled.dtype == np.float16
    np.testing.assert_array_equal(compiled, reference)


def test_epilogue_keeps_nan():
    y = np.array([[[np.nan, -1.0, 2.0]]], dtype=np.float32)
    assert native.epilogue(y, None, None, native.ACT_RELU)
    assert np.isnan(y[0, 0, 0]) and y[0, 0, 1] == 0.0 and y[0, 0, 2] == 2.0


def test_epilogue_declines_what_it_cannot_take():
    y = np.zeros((1, 3, 4), dtype=np.float32)
    assert not native.epilogue(y, np.zeros(2, np.float32), None)  # wrong bias length
    assert not native.epilogue(y, None, np.zeros((1, 3, 5), np.float32))  # wrong residual
    assert not native.epilogue(y.astype(np.float64), None, None)  # not float32
    assert not native.epilogue(np.zeros((1, 3, 8), np.float32)[:, :, ::2], None, None)


# ----------------------------------------------------------------- GELU


def test_gelu_is_erf_float32_bit_for_bit():
    rng = np.random.default_rng(5)
    x = (rng.standard_normal(10_000) * 4).astype(np.float32)
    x[:8] = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-30, 3.92, -100.0]
    with np.errstate(invalid="ignore"):
        reference = erf_float32_numpy(x * np.float32(1.0 / math.sqrt(2.0)))
        reference *= np.float32(0.5)
        reference += np.float32(0.5)
        reference *= x
    compiled = gelu_float32_native(x)
    assert compiled is not None
    np.testing.assert_array_equal(compiled, reference)


@pytest.mark.parametrize("n", [1, 7, 16, 10_001])
def test_erf_float32_compiled_is_its_numpy_form_bit_for_bit(n):
    """erf_float32 compiled (native.erf32) gives the bits of its numpy operations, NaN,
    infinities, signed zeros and the clamp included; a strided view takes numpy."""
    rng = np.random.default_rng(n)
    x = (rng.standard_normal(n) * 3).astype(np.float32)
    special = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-30, 3.92, -100.0], np.float32)[:n]
    x[:special.size] = special
    compiled = native.erf32(x, _erf32_poly(), _ERF32_CLAMP_ARG, _ERF32_T_SCALE)
    assert compiled is not None
    np.testing.assert_array_equal(compiled.view(np.uint32), erf_float32_numpy(x).view(np.uint32))
    np.testing.assert_array_equal(erf_float32(x).view(np.uint32), compiled.view(np.uint32))
    assert native.erf32(np.zeros(8, np.float32)[::2], _erf32_poly(), _ERF32_CLAMP_ARG, _ERF32_T_SCALE) is None


def test_gelu_accuracy_against_math_erf():
    x = np.linspace(-6, 6, 4001, dtype=np.float32)
    exact = np.array([v * 0.5 * (1 + math.erf(v / math.sqrt(2))) for v in x.astype(float)])
    # erf_float32's bound (1.8e-7 absolute) scaled by |x|/2, plus 1.5 float32 ulps of the
    # result's own rounding.
    err = np.abs(gelu_float32_native(x).astype(float) - exact)
    bound = 1.8e-7 * np.abs(x) / 2 + 1.5 * np.spacing(np.abs(exact).astype(np.float32))
    assert np.all(err <= bound), float(np.max(err - bound))


def test_gelu_tanh_against_float64_formula():
    x = np.concatenate([
        np.linspace(-12, 12, 20001, dtype=np.float32),
        np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 1e-30, -1e-30, 1e4, -1e4], np.float32),
    ])
    node = helper.make_node("Gelu", ["x"], ["y"], approximate="tanh")
    compiled = run_ours(node, 20, x)[0]
    # Reference: x * sigmoid(2u) in float64, in the form that keeps the negative tail
    # (1 + tanh(u) cancels to 0 there, as the numpy path's float64 formula does), from u
    # rounded as float32 arithmetic rounds it: exp(2u) magnifies u's own rounding by 2|u|
    # (up to 70 here), which no float32 implementation avoids.
    w = x.astype(np.float64)
    with np.errstate(all="ignore"):
        u32 = np.float32(0.7978845608028654) * (x + np.float32(0.044715) * x * x * x)
        u = u32.astype(np.float64)
        e = np.exp(-2 * np.abs(u))
        want = w * np.where(u >= 0, 1.0, e) / (1 + e)
    want[np.isinf(w) & (w < 0)] = np.nan  # -inf * 0, as the formula gives
    # A few float32 ulps; tails below ~1e-36 may be flushed to zero.
    np.testing.assert_allclose(compiled, want.astype(np.float32), rtol=5e-7, atol=1e-36)


def test_gelu_declines_non_contiguous_input():
    x = np.ones((4, 4), dtype=np.float32).T[::2]
    assert gelu_float32_native(x) is None


def test_gelu_kernel_uses_either_path_alike(numpy_only):
    node = helper.make_node("Gelu", ["x"], ["y"])
    x = np.random.default_rng(6).standard_normal((3, 7, 11)).astype(np.float32)
    compiled, reference = _both(numpy_only, lambda: run_ours(node, 20, x)[0])
    np.testing.assert_array_equal(compiled, reference)


# ----------------------------------------------------------------- Softmax, LayerNormalization


@pytest.mark.parametrize("shape", [(1, 12, 197, 197), (3, 5), (2, 1), (4, 33), (2, 15), (3, 16), (3, 17), (5, 128)])
def test_softmax_matches_numpy(numpy_only, shape):
    node = helper.make_node("Softmax", ["x"], ["y"], axis=-1)
    x = (np.random.default_rng(8).standard_normal(shape) * 6).astype(np.float32)
    compiled, reference = _both(numpy_only, lambda: run_ours(node, 13, x)[0])
    # exp is a polynomial here and numpy's own there: a few float32 ulps apart.
    np.testing.assert_allclose(compiled, reference, rtol=2e-6, atol=1e-12)
    np.testing.assert_allclose(compiled.sum(axis=-1), 1.0, rtol=2e-6)


def test_softmax_special_values(numpy_only):
    node = helper.make_node("Softmax", ["x"], ["y"], axis=-1)
    x = np.array(
        [[0, 1, 2, np.inf], [-np.inf] * 4, [np.nan, 1, 2, 3], [1e30, -1e30, 0, 5],
         [-100, 0, -200, -87.5], [3, 3, 3, 3]],
        dtype=np.float32,
    )
    compiled, reference = _both(numpy_only, lambda: run_ours(node, 13, x)[0])
    np.testing.assert_allclose(compiled, reference, rtol=2e-6, atol=1e-37)  # NaN == NaN here


def test_softmax_other_axes_keep_numpy(numpy_only):
    node = helper.make_node("Softmax", ["x"], ["y"], axis=1)
    x = np.random.default_rng(9).standard_normal((2, 3, 4)).astype(np.float32)
    compiled, reference = _both(numpy_only, lambda: run_ours(node, 13, x)[0])
    np.testing.assert_array_equal(compiled, reference)


@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize("shape", [(197, 768), (2, 3, 17), (5, 1)])
def test_layernorm_matches_numpy(numpy_only, with_bias, shape):
    node = helper.make_node(
        "LayerNormalization", ["x", "s", "b" if with_bias else ""], ["y", "mean", "inv"],
        axis=-1, epsilon=1e-5,
    )
    rng = np.random.default_rng(10)
    x = (rng.standard_normal(shape) * 3 + 1).astype(np.float32)
    scale = rng.standard_normal(shape[-1]).astype(np.float32)
    bias = rng.standard_normal(shape[-1]).astype(np.float32) if with_bias else None
    compiled, reference = _both(numpy_only, lambda: run_ours(node, 17, x, scale, bias))
    for got, want in zip(compiled, reference, strict=True):
        assert got.shape == want.shape and got.dtype == want.dtype
        # Sums run in another order than numpy's pairwise ones.
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-6)


# ----------------------------------------------------------------- the C functions' own checks


def _geometry(**changes):
    g = dict(n=1, c=2, h=4, w=4, kh=3, kw=3, oh=4, ow=4, sh=1, sw=1, ph=1, pw=1, dh=1, dw=1)
    g.update(changes)
    return tuple(g.values())


def test_c_functions_reject_bad_buffers():
    from onyxrt_cpu import _native

    x = np.zeros((1, 2, 4, 4), np.float32)
    w = np.zeros((2, 1, 9), np.float32)
    y = np.zeros((1, 2, 4, 4), np.float32)
    with pytest.raises(TypeError, match="float32"):
        _native.depthwise(x.astype(np.float64), w, y, _geometry(), 1)
    with pytest.raises(ValueError, match="needed"):
        _native.depthwise(x[:, :1], w, y, _geometry(), 1)  # x too small for the geometry
    with pytest.raises(ValueError, match="needed"):
        _native.depthwise(x, w, y, _geometry(oh=5), 1)  # y too small
    with pytest.raises(TypeError, match="writable"):
        y_ro = y.copy()
        y_ro.flags.writeable = False
        _native.depthwise(x, w, y_ro, _geometry(), 1)
    with pytest.raises(TypeError, match="C-contiguous"):
        _native.depthwise(x.transpose(0, 1, 3, 2), w, y, _geometry(), 1)
    with pytest.raises(ValueError, match="stride"):
        _native.depthwise(x, w, y, _geometry(sh=0), 1)
    with pytest.raises(ValueError, match="exceed the output height"):
        _native.im2col(x, np.zeros(2 * 9 * 4 * 4, np.float32), _geometry(), 2, 3)
    with pytest.raises(ValueError, match="activation"):
        _native.epilogue(y, 2, 16, None, None, 7, 0.0, 0.0)
    with pytest.raises(ValueError, match="whole number"):
        _native.epilogue(y, 3, 16, None, None, 0, 0.0, 0.0)
    with pytest.raises(ValueError, match="needed"):
        _native.gelu_erf(x, np.zeros(3, np.float32), np.zeros(19, np.float32), 1.0, 1.0, 1.0)
    with pytest.raises(ValueError, match="whole rows"):
        _native.softmax(x, y, 3)
    with pytest.raises(ValueError, match="scale"):
        _native.layernorm(x, y, 4, np.zeros(3, np.float32), None, 1e-5, None, None)
    with pytest.raises(ValueError, match="mean"):
        _native.layernorm(x, y, 4, np.zeros(4, np.float32), None, 1e-5, np.zeros(2, np.float32), None)


def test_outputs_reading_only_padding_are_zero():
    """A 1x1 image under a padded 1x1 or 3x3 depthwise kernel: every output that reads
    only padding is 0, the one that reads the pixel is its weight."""
    for k, p in itertools.product([1, 3], [1, 2]):
        out = 1 + 2 * p - k + 1
        x = np.ones((1, 2, 1, 1), np.float32)
        y = np.full((1, 2, out, out), np.nan, np.float32)
        wp = np.arange(2 * k * k, dtype=np.float32).reshape(2, 1, k * k) + 1
        assert native.depthwise2d(x, wp, y, (k, k), (1, 1), (p, p), (1, 1))
        for ch in range(2):
            for oy, ox in itertools.product(range(out), range(out)):
                ky, kx = p - oy, p - ox  # the tap that lands on the pixel, if any
                inside = 0 <= ky < k and 0 <= kx < k
                assert y[0, ch, oy, ox] == (wp[ch, 0, ky * k + kx] if inside else 0.0)


def test_odd_geometries_never_crash_the_process():
    """Random geometries the wrappers would never send (negative pads, output sizes that do
    not match the input, partial row ranges), with buffers of exactly the needed size, in a
    subprocess so that a crash fails this test instead of killing the run. (The same loop
    ran 1,500 calls under valgrind's memcheck with no error in the extension.)"""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent("""
        import random
        import numpy as np
        from onyxrt_cpu import _native as N
        rng = random.Random(1)
        f32 = lambda n: np.random.rand(n).astype(np.float32)
        for _ in range(3000):
            n, c, h, w = rng.randint(0, 2), rng.randint(1, 3), rng.randint(0, 9), rng.randint(0, 9)
            kh, kw, oh, ow = rng.randint(1, 4), rng.randint(1, 4), rng.randint(0, 9), rng.randint(0, 9)
            sh, sw, dh, dw = (rng.randint(1, 3) for _ in range(4))
            ph, pw = rng.randint(-3, 3), rng.randint(-3, 3)
            g = (n, c, h, w, kh, kw, oh, ow, sh, sw, ph, pw, dh, dw)
            x = f32(n * c * h * w)
            th, tw = (oh + 1) // 2, (ow + 1) // 2
            g3 = (n, c, h, w, 3, 3, oh, ow, 1, 1, ph, pw, 1, 1)
            which = rng.randrange(5)
            if which == 0:
                mpg = rng.randint(1, 2)
                size = n * c * mpg * oh * ow
                N.depthwise(x, f32(c * mpg * kh * kw), np.zeros(size, np.float32), g, mpg,
                            f32(c * mpg), f32(size) if rng.random() < 0.5 else None,
                            rng.randint(0, 3), -0.5, 0.5)
            elif which == 1:
                r0 = rng.randint(0, oh)
                rows = rng.randint(0, oh - r0)
                N.im2col(x, np.zeros(c * kh * kw * n * rows * ow, np.float32), g, r0, rows)
            elif which == 2:
                N.maxpool(x, np.zeros(n * c * oh * ow, np.float32), g)
            elif which == 3:
                N.winograd_input(x, np.zeros(16 * c * n * th * tw, np.float32), g3)
            else:
                m = rng.randint(1, 3)
                size = n * m * oh * ow
                N.winograd_output(f32(16 * m * n * th * tw), np.zeros(size, np.float32), g3, m,
                                  f32(m), f32(size) if rng.random() < 0.5 else None,
                                  rng.randint(0, 3), 0.0, 1.0)
        print("done")
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "done" in done.stdout, (done.returncode, done.stderr[-2000:])


@settings(max_examples=60, deadline=None)
@given(rows=st.integers(0, 19), cols=st.integers(0, 19))
def test_transposed_is_the_transpose(rows, cols):
    """Every shape, including those with rows or columns outside the 4x4 blocks."""
    x = np.arange(rows * cols, dtype=np.float32).reshape(rows, cols) - 7.5
    t = native.transposed(x)
    assert t is not None and t.flags.c_contiguous and t.shape == (cols, rows)
    np.testing.assert_array_equal(t, x.T)


def test_transposed_takes_only_contiguous_float32_matrices():
    assert native.transposed(np.zeros((3, 4), np.float64)) is None
    assert native.transposed(np.zeros((3, 4, 2), np.float32)) is None
    assert native.transposed(np.zeros((4, 3), np.float32).T) is None
    big = np.random.default_rng(0).standard_normal((1000, 1280)).astype(np.float32)
    np.testing.assert_array_equal(native.transposed(big), big.T)


def test_c_transpose_rejects_bad_buffers():
    from onyxrt_cpu import _native

    x = np.zeros((3, 4), np.float32)
    with pytest.raises(ValueError, match="needed"):
        _native.transpose(x, 4, 4, np.zeros((4, 4), np.float32))
    with pytest.raises(ValueError, match="needed"):
        _native.transpose(x, 3, 4, np.zeros(11, np.float32))
    with pytest.raises(TypeError, match="writable"):
        out = np.zeros((4, 3), np.float32)
        out.flags.writeable = False
        _native.transpose(x, 3, 4, out)
    with pytest.raises(ValueError, match="overflows"):
        _native.transpose(x, 1 << 40, 1 << 40, x)
    with pytest.raises(ValueError):
        _native.transpose(x, -1, 4, x)


@pytest.mark.parametrize("op", ["Sigmoid", "Tanh"])
def test_sigmoid_and_tanh_are_onnxruntimes_bit_for_bit(op):
    """float32 Sigmoid and Tanh compute exactly what onnxruntime's CPU provider does (MLAS's
    approximations with fused multiply-adds): quantized models turn a last-bit difference
    into a whole quantization step (ddddocr's dynamically quantized OCR model did)."""
    from kernel_cases import run_onnxruntime

    x = np.concatenate([
        (np.random.default_rng(0).standard_normal(200_000) * 8).astype(np.float32),
        np.linspace(-25, 25, 500001, dtype=np.float32),  # both tails: MLAS clamps below only
        np.array([np.inf, -np.inf, 0.0, -0.0, 1e-30, -1e-30, 8.999, -8.999, 18.5, -18.5], np.float32),
    ])
    node = helper.make_node(op, ["x"], ["y"])
    ours, (theirs,) = run_ours(node, 13, x)[0], run_onnxruntime(node, 13, [x])
    assert ours.dtype == np.float32
    assert np.array_equal(ours.view(np.uint32), theirs.view(np.uint32))
    assert np.isnan(run_ours(node, 13, np.array([np.nan], np.float32))[0]).all()


@pytest.mark.skipif(not native.QGEMM, reason="this CPU has no AVX-512 VNNI: MatMulInteger takes its exact float32 path")
@pytest.mark.parametrize(("m", "k", "n"), [(1, 1, 1), (1, 5, 3), (3, 7, 70), (5, 768, 768), (9, 4099, 65),
                                           (128, 64, 129), (0, 8, 4), (4, 0, 3), (6, 8, 64), (7, 13, 200),
                                           (13, 12, 48)])  # fmt: skip
def test_int8_gemm_is_exact(m, k, n):
    """csrc/qgemm.c: raw u8 x s8 sums in int32, every tail (K not a multiple of 4, N not
    of 64, M not of the 6-row tiles), and the extremes (255 x -128 over 4099 terms)."""
    rng = np.random.default_rng(m * 10007 + k * 101 + n)
    a = rng.integers(0, 256, (m, k)).astype(np.uint8)
    b = rng.integers(-128, 128, (k, n)).astype(np.int8)
    got = native.qgemm_u8s8(a, native.pack_int8(b))
    assert got.dtype == np.int32 and np.array_equal(got, a.astype(np.int64) @ b.astype(np.int64))
    if m and k:
        a[:] = 255
        b[:] = -128
        got = native.qgemm_u8s8(a, native.pack_int8(b))
        assert np.array_equal(got, a.astype(np.int64) @ b.astype(np.int64))


# ----------------------------------------------------------------- FusedElementwise


def _group_kernel(ops, args, n_inputs):
    node = helper.make_node("FusedElementwise", [f"i{k}" for k in range(n_inputs)], ["y"], domain="ai.onyxrt",
                            ops=ops, args=args)
    kdef, reason = registry.lookup("ai.onyxrt", "FusedElementwise", 1)
    assert kdef is not None, reason
    return kdef.factory(KernelInfo.from_node(node, 1, since_version=kdef.since_version))


# Inputs: 0 x, 1 a row constant, 2 a scalar, 3 a second tensor; results from index 4.
# Every exact operator, both operand orders, tensor-tensor steps, a result read twice.
EXACT_GROUP = (["Add", "Mul", "Sub", "Relu", "Div", "Abs", "Sqrt", "Max", "Neg", "Min", "Mul", "Sub"],
               [0, 1, 2, 4, 3, 5, 6, -1, 7, 1, 8, -1, 9, -1, 10, 2, 11, -1, 12, 0, 6, 13, 14, 3])


@pytest.mark.parametrize("shape", [(3, 1000), (2, 3, 17), (5000,), (1, 1), (4, 1200)])
def test_fused_elementwise_compiled_matches_the_step_by_step_path(numpy_only, shape):
    rng = np.random.default_rng(len(shape))
    x = (rng.standard_normal(shape) * 3).astype(np.float32)
    x.reshape(-1)[:4] = [np.nan, np.inf, -0.0, 0.0][: x.size]
    x2 = rng.standard_normal(shape).astype(np.float32)
    row = (rng.random(shape[-1]) + 0.5).astype(np.float32)
    scalar = np.array(0.75, np.float32)
    kernel = _group_kernel(*EXACT_GROUP, 4)
    compiled, reference = _both(numpy_only, lambda: kernel.compute(x, row, scalar, x2)[0])
    # The same float32 operations, NaN and signed zeros included: identical.
    np.testing.assert_array_equal(compiled, reference)
    assert np.array_equal(np.signbit(compiled), np.signbit(reference))
    # With the transcendental steps (SiLU, then more): Sigmoid/Tanh are onnxruntime's when
    # compiled (exact functions without the module), Exp/Log the C library's: within ulps.
    kernel = _group_kernel(["Sigmoid", "Mul", "Tanh", "Exp", "Log", "Add"],
                           [0, -1, 0, 3, 4, -1, 5, -1, 6, -1, 7, 1], 3)
    compiled, reference = _both(numpy_only, lambda: kernel.compute(x, row, scalar)[0])
    np.testing.assert_allclose(compiled, reference, rtol=1e-6, atol=1e-6, equal_nan=True)


def test_fused_elementwise_of_unary_steps_only(numpy_only):
    x = np.linspace(-3, 3, 101, dtype=np.float32).reshape(1, 101)
    kernel = _group_kernel(["Abs", "Neg", "Relu", "Sqrt"], [0, -1, 1, -1, 2, -1, 3, -1], 1)
    compiled, reference = _both(numpy_only, lambda: kernel.compute(x)[0])
    np.testing.assert_array_equal(compiled, reference)


def test_fused_elementwise_broadcasts_other_inputs_as_numpy_does():
    # The optimizer only fuses inputs that keep the output's shape; a kernel given any
    # other still computes what the unfused operators would (numpy's broadcasting).
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    c = np.array([[1.0], [2.0], [3.0]], np.float32)  # (3, 1): not per position of the last axis
    y = _group_kernel(["Mul", "Neg"], [0, 1, 2, -1], 2).compute(x, c)[0]
    np.testing.assert_array_equal(y, -(x * c))


def test_fused_elementwise_rejects_bad_attributes():
    with pytest.raises(InvalidGraph, match="FusedElementwise"):
        _group_kernel(["Add"], [0, -1], 1)  # a binary step without its second operand
    with pytest.raises(InvalidGraph, match="FusedElementwise"):
        _group_kernel(["Relu", "Neg"], [0, -1, 2, -1], 1)  # reads its own result
    with pytest.raises(InvalidGraph, match="FusedElementwise"):
        _group_kernel(["Cos"], [0, -1], 1)


@pytest.mark.skipif(not native.ENABLED, reason="compiled module not built")
def test_compiled_group_refuses_bad_programs():
    x = np.ones(8, np.float32)
    y = np.empty(8, np.float32)
    with pytest.raises(ValueError, match="bad step"):
        native.elementwise_group((x,), (0,), y, np.array([[0, 0, 5]], np.int32), 0)
    with pytest.raises(ValueError):
        native.elementwise_group((np.ones(3, np.float32),), (0,), y, np.array([[6, 0, -1]], np.int32), 0)


# --------------------------------------------------------------------------------- Pad


@settings(max_examples=300, deadline=None)
@given(
    shape=st.lists(st.integers(0, 5), min_size=1, max_size=4),
    dtype=st.sampled_from(["float32", "int64", "uint8", "float16", "bool", "float64", "int8"]),
    mode=st.sampled_from(["constant", "reflect", "edge", "wrap"]),
    pads=st.lists(st.tuples(st.integers(0, 4), st.integers(0, 4)), min_size=4, max_size=4),
    value=st.sampled_from([None, 3]),
)
def test_pad_matches_numpy(shape, dtype, mode, pads, value):
    rng = np.random.default_rng(len(shape))
    x = (rng.standard_normal(shape) * 10).astype(dtype)
    begins, ends = [p[0] for p in pads[: len(shape)]], [p[1] for p in pads[: len(shape)]]
    y = native.pad(x, begins, ends, mode, value)
    if y is None:  # declined: a reflect pad past its axis, an empty axis padded by copies
        assert mode != "constant"
        return
    kwargs = {"constant_values": np.asarray(0 if value is None else value).astype(dtype)} if mode == "constant" else {}
    np.testing.assert_array_equal(y, np.pad(x, list(zip(begins, ends)), mode=mode, **kwargs))


def test_pad_takes_ml_dtypes_and_strided_inputs():
    import ml_dtypes

    x = np.arange(24, dtype=np.float32).reshape(4, 6)[:, ::2].astype(ml_dtypes.bfloat16)
    y = native.pad(x, [1, 2], [2, 1], "reflect", None)
    np.testing.assert_array_equal(y.astype(np.float32), np.pad(x.astype(np.float32), [(1, 2), (2, 1)], mode="reflect"))
    assert native.pad(x, [0, 3], [0, 0], "reflect", None) is None  # past the axis: declined
    assert native.pad(np.array(["a", "b"], dtype=object), [1], [1], "edge", None) is None


def _log_softmax64(x: np.ndarray) -> np.ndarray:
    x64 = x.astype(np.float64)
    with np.errstate(invalid="ignore"):
        shifted = x64 - x64.max(axis=-1, keepdims=True)
        return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


@pytest.mark.parametrize("shape", [(80, 1, 100), (3, 5), (2, 15), (3, 16), (4, 17), (1, 12, 7, 197)])
def test_log_softmax_compiled_rows(shape):
    x = (np.random.default_rng(9).standard_normal(shape) * 6).astype(np.float32)
    y = np.empty_like(x)
    native.compiled_module().log_softmax(x, y, shape[-1])
    np.testing.assert_allclose(y, _log_softmax64(x), rtol=2e-6, atol=2e-6)


def test_log_softmax_compiled_special_values():
    x = np.array([[0, 1, 2, np.inf], [-np.inf] * 4, [np.nan, 1, 2, 3], [-100, 0, -200, -87.5],
                  [3, 3, 3, 3]], dtype=np.float32)
    y = np.empty_like(x)
    native.compiled_module().log_softmax(x, y, 4)
    np.testing.assert_allclose(y, _log_softmax64(x), rtol=1e-6, atol=1e-6)  # NaN == NaN here


@pytest.mark.parametrize("opset", [11, 13])
def test_log_softmax_session_takes_the_compiled_rows(opset):
    """A float32 LogSoftmax over the last axis (typed input: the route is chosen when
    the kernel is built) runs the compiled rows, at either opset, and matches float64."""
    from onnx import TensorProto

    import onyxrt

    graph = helper.make_graph([helper.make_node("LogSoftmax", ["x"], ["y"], axis=2)], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["t", 1, 100])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    session = onyxrt.InferenceSession(model.SerializeToString())
    (step,) = session._plan.steps
    assert step.kernel.compute.__qualname__.startswith("_compiled_call")
    x = (np.random.default_rng(3).standard_normal((80, 1, 100)) * 6).astype(np.float32)
    np.testing.assert_allclose(session.run(None, {"x": x})[0], _log_softmax64(x), rtol=2e-6, atol=2e-6)


# ----------------------------------------------------------------- elementwise activations


@pytest.mark.parametrize(("op", "version", "attrs"), [
    ("LeakyRelu", 16, {}), ("LeakyRelu", 16, {"alpha": 0.3}), ("HardSigmoid", 6, {"alpha": 0.3, "beta": 0.4}),
    ("HardSigmoid", 6, {}), ("HardSwish", 14, {}), ("ThresholdedRelu", 10, {"alpha": 0.7}),
])
@pytest.mark.parametrize("n", [1, 17, 100_003])
def test_unary_activation_is_the_librarys_formula(op, version, attrs, n):
    """The compiled pass against the operator library's numpy formula, bit for bit (NaN,
    infinities, tiny values included) — but for LeakyRelu of -0.0, which it keeps as
    -0.0 (x >= 0 gives x), as onnxruntime does, where the formula's max + min gives +0.0."""
    import onnx

    from onyxrt.kernels import KernelInfo
    from onyxrt_ops.backend import numpy_backend
    from onyxrt_ops.library import library

    rng = np.random.default_rng(n)
    x = (rng.standard_normal(n) * 4).astype(np.float32)
    special = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-38, -1e-38, 3.0], np.float32)[:n]
    x[:special.size] = special
    node = onnx.helper.make_node(op, ["x"], ["y"], **attrs)
    kernel = library.kernel(op, version, numpy_backend())(KernelInfo.from_node(node, 17))
    with np.errstate(all="ignore"):
        want = kernel.f(x)
    got = native.unary_activation(x, op, kernel.alpha, kernel.beta)
    differ = np.flatnonzero(want.view(np.uint32) != got.view(np.uint32))
    if op == "LeakyRelu":
        assert all(x[i] == 0 and np.signbit(x[i]) and np.signbit(got[i]) for i in differ)
    else:
        assert differ.size == 0
    assert native.unary_activation(x.astype(np.float64), op, kernel.alpha, kernel.beta) is None
    assert native.unary_activation(np.zeros(8, np.float32)[::2], op) is None
    assert native.unary_activation(x, "Relu") is None  # not one of its operators
