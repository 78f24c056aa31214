"""The NCHWc kernels (csrc/nchwc.c, onyxrt_cpu.kernels.nchwc) against a float64 reference.

Geometries cover every tile shape of the blocked convolution (panels of 1-4 output blocks:
24x1, 12x2, 8x3 and 6x4 pixel tiles with AVX-512's wide tiles, 6x1 per block with the
narrow ones; the convolution tests run with both on any CPU), work rows that cross output rows and end in a
partial tile, explicit padding (symmetric, asymmetric, SAME), strides, dilations, the
plain NCHW input of a first layer, channel counts off the block (padding lanes), batches,
and every fused epilogue. Depthwise covers its tiled interior and checked edges.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from threadpoolctl import threadpool_limits

from onyxrt_cpu import native

pytestmark = pytest.mark.skipif(not native.ENABLED, reason="the compiled kernels are not built")


def reference_conv(x, w, b, strides, pads, dilations, group=1):
    """float64 convolution of NCHW x with W (M, C/group, KH, KW); pads (top, left, bottom,
    right)."""
    n, c, h, wd = x.shape
    m, cg, kh, kw = w.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    oh = (h + pads[0] + pads[2] - (kh - 1) * dilations[0] - 1) // strides[0] + 1
    ow = (wd + pads[1] + pads[3] - (kw - 1) * dilations[1] - 1) // strides[1] + 1
    y = np.zeros((n, m, oh, ow))
    mg = m // group
    for g in range(group):
        for i in range(kh):
            for j in range(kw):
                r0, c0 = i * dilations[0], j * dilations[1]
                patch = xp[:, g * cg:(g + 1) * cg, r0:r0 + (oh - 1) * strides[0] + 1:strides[0],
                           c0:c0 + (ow - 1) * strides[1] + 1:strides[1]]
                y[:, g * mg:(g + 1) * mg] += np.einsum("nchw,mc->nmhw", patch, w[g * mg:(g + 1) * mg, :, i, j])
    if b is not None:
        y += b[None, :, None, None]
    return y


ACTIVATIONS = {
    "none": (native.ACT_NONE, 0.0, 0.0, lambda v: v),
    "relu": (native.ACT_RELU, 0.0, 0.0, lambda v: np.maximum(v, 0)),
    "clip": (native.ACT_CLIP, -0.5, 0.75, lambda v: np.minimum(np.maximum(v, -0.5), 0.75)),
    "leaky": (native.ACT_LEAKY, 0.1, 0.0, lambda v: np.where(v < 0, v * 0.1, v)),
}


def _run_conv(x, w, b, z, strides, pads_begin, dilations, out_hw, act, blocked):
    n, m = x.shape[0], w.shape[0]
    xin = native.to_nchwc(x) if blocked else x
    y = np.full((n, -(-m // 16), *out_hw, 16), np.nan, np.float32)
    code, p0, p1, _ = ACTIVATIONS[act]
    native.nchwc_conv(xin, native.pack_nchwc_filters(w, blocked), y, w.shape[2:], strides, pads_begin,
                      dilations, None if b is None else native.pad_channels(b),
                      None if z is None else native.to_nchwc(z), code, p0, p1)
    return y


def _check(y, expected, m, tol=2e-5, sums=None):
    """``sums``: the values before the activation, where their magnitude (not the
    activated output's) bounds the rounding (a clip maps sums of ~50 to 0.75)."""
    got = native.from_nchwc(y, m)
    scale = max(1.0, float(np.abs(expected if sums is None else sums).max()))
    np.testing.assert_allclose(got, expected, rtol=tol, atol=tol * scale)
    if m % 16:  # lanes past the channels stay zero
        assert not np.any(y[:, -1, :, :, m % 16:])


CONV_CASES = [
    # n, c, h, w, m, k, stride, pads (t, l, b, r), dilation, blocked input
    (1, 32, 7, 7, 64, 1, 1, (0, 0, 0, 0), 1, True),     # 6x4 tiles over rows of 7
    (1, 24, 14, 14, 48, 1, 1, (0, 0, 0, 0), 1, True),   # 8x3
    (1, 17, 9, 9, 32, 1, 1, (0, 0, 0, 0), 1, True),     # 12x2, C off the block
    (2, 16, 5, 6, 16, 1, 1, (0, 0, 0, 0), 1, True),     # 24x1, batch
    (1, 32, 13, 11, 16, 1, 1, (0, 0, 0, 0), 1, True),   # 24x1 across rows of 11, partial last tile
    (1, 16, 9, 10, 16, 3, 2, (1, 1, 1, 1), 1, True),    # 24x1 strided and padded
    (1, 40, 11, 13, 88, 3, 1, (1, 1, 1, 1), 1, True),   # panels of 4 then 2 blocks... (6 blocks)
    (1, 64, 10, 10, 80, 3, 2, (1, 1, 1, 1), 1, True),   # 5 blocks: 4 + 1
    (2, 20, 9, 12, 40, 3, 1, (2, 1, 0, 3), 2, True),    # asymmetric pads, dilation
    (1, 16, 16, 16, 112, 1, 2, (0, 0, 0, 0), 1, True),  # strided 1x1 (ResNet downsample)
    (1, 3, 23, 23, 32, 3, 2, (1, 1, 1, 1), 1, False),   # first layer on the NCHW image
    (1, 3, 30, 30, 64, 7, 2, (3, 3, 3, 3), 1, False),   # ResNet's stem
    (1, 5, 10, 13, 20, 5, 3, (2, 2, 2, 2), 1, False),
    (1, 33, 1, 1, 70, 1, 1, (0, 0, 0, 0), 1, True),     # one pixel
    (1, 8, 200, 3, 24, 3, 1, (1, 1, 1, 1), 1, True),    # many work rows, narrow planes
    # panels over 640 KB (wide tiles): channels in chunks of 4 groups (4, 4, 4, 4, 3)
    (1, 300, 5, 7, 70, 3, 1, (1, 1, 1, 1), 1, True),
    (2, 290, 9, 9, 40, 3, 2, (1, 1, 1, 1), 1, True),    # 3 blocks, strided, batch
]


@pytest.fixture(params=[True, False], ids=["wide", "narrow"], autouse=False)
def tiles(request, monkeypatch):
    """Both register-tile sets of csrc/nchwc.c (the CPU picks one; both must be right)."""
    monkeypatch.setattr(native, "NCHWC_WIDE_TILES", request.param)
    return request.param


@pytest.mark.parametrize("case", CONV_CASES, ids=[str(i) for i in range(len(CONV_CASES))])
@pytest.mark.parametrize("act", sorted(ACTIVATIONS))
def test_conv_matches_the_reference(case, act, tiles):
    n, c, h, wd, m, k, s, pads, d, blocked = case
    rng = np.random.default_rng(len(act) + c)
    x = rng.standard_normal((n, c, h, wd)).astype(np.float32)
    w = rng.standard_normal((m, c, k, k)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    ref = reference_conv(x, w, b, (s, s), pads, (d, d))
    z = rng.standard_normal(ref.shape).astype(np.float32)
    y = _run_conv(x, w, b, z, (s, s), pads[:2], (d, d), ref.shape[2:], act, blocked)
    # the chunked cases sum 2600-2700 products: their error scales with the sums
    _check(y, ACTIVATIONS[act][3](ref + z), m, sums=ref + z if c * k * k > 2000 else None)


def test_chunked_channels_with_a_residual_in_the_output():
    """A residual z that is y itself (the partial sums of chunked channels would overwrite
    it): the call takes the whole panel at once, and the result is still conv + z."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((1, 300, 5, 7)).astype(np.float32)
    w = rng.standard_normal((70, 300, 3, 3)).astype(np.float32)
    b = rng.standard_normal(70).astype(np.float32)
    ref = reference_conv(x, w, b, (1, 1), (1, 1, 1, 1), (1, 1))
    z = rng.standard_normal(ref.shape).astype(np.float32)
    y = native.to_nchwc(z)
    native.nchwc_conv(native.to_nchwc(x), native.pack_nchwc_filters(w, True), y, (3, 3), (1, 1), (1, 1),
                      (1, 1), native.pad_channels(b), y, native.ACT_RELU)
    _check(y, np.maximum(ref + z, 0), 70, sums=ref + z)


def test_conv_without_bias_or_residual(tiles):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 16, 6, 6)).astype(np.float32)
    w = rng.standard_normal((32, 16, 3, 3)).astype(np.float32)
    y = _run_conv(x, w, None, None, (1, 1), (0, 0), (1, 1), (4, 4), "none", True)
    _check(y, reference_conv(x, w, None, (1, 1), (0, 0, 0, 0), (1, 1)), 32)


DEPTHWISE_CASES = [
    # n, c, h, w, k, stride, pad, dilation
    (1, 32, 28, 28, 3, 1, 1, 1),
    (1, 96, 30, 30, 3, 2, 1, 1),
    (2, 24, 7, 7, 3, 1, 1, 1),
    (1, 20, 9, 10, 5, 2, 2, 2),
    (1, 16, 3, 3, 3, 1, 1, 1),
    (1, 40, 13, 17, 3, 1, 0, 1),
    (1, 16, 12, 12, 3, 1, 2, 2),
    (1, 8, 6, 20, 7, 3, 3, 1),
]


@pytest.mark.parametrize("case", DEPTHWISE_CASES, ids=[str(i) for i in range(len(DEPTHWISE_CASES))])
@pytest.mark.parametrize("act", ["none", "clip"])
@pytest.mark.parametrize("residual", [False, True])
def test_depthwise_matches_the_reference(case, act, residual):
    n, c, h, wd, k, s, p, d = case
    rng = np.random.default_rng(c + k)
    x = rng.standard_normal((n, c, h, wd)).astype(np.float32)
    w = rng.standard_normal((c, 1, k, k)).astype(np.float32)
    b = rng.standard_normal(c).astype(np.float32)
    ref = reference_conv(x, w, b, (s, s), (p, p, p, p), (d, d), group=c)
    z = rng.standard_normal(ref.shape).astype(np.float32) if residual else None
    y = np.full((n, -(-c // 16), *ref.shape[2:], 16), np.nan, np.float32)
    code, p0, p1, fn = ACTIVATIONS[act]
    native.nchwc_depthwise(native.to_nchwc(x), native.pack_nchwc_depthwise(w), y, (k, k), (s, s),
                           (p, p), (d, d), native.pad_channels(b),
                           None if z is None else native.to_nchwc(z), code, p0, p1)
    _check(y, fn(ref + (0 if z is None else z)), c)


@settings(max_examples=40, deadline=None)
@given(
    c=st.integers(1, 40), m=st.integers(1, 72), h=st.integers(1, 12), w=st.integers(1, 12),
    k=st.integers(1, 3), s=st.integers(1, 2), p=st.integers(0, 1), n=st.integers(1, 2),
)
def test_conv_property(c, m, h, w, k, s, p, n):
    if h + 2 * p < k or w + 2 * p < k:
        return
    rng = np.random.default_rng(c * 100 + m)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = rng.standard_normal((m, c, k, k)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    ref = reference_conv(x, wt, b, (s, s), (p, p, p, p), (1, 1))
    wide = native.NCHWC_WIDE_TILES
    try:
        for native.NCHWC_WIDE_TILES in (True, False):
            for blocked in (True, False):
                y = _run_conv(x, wt, b, None, (s, s), (p, p), (1, 1), ref.shape[2:], "none", blocked)
                _check(y, ref, m)
    finally:
        native.NCHWC_WIDE_TILES = wide


@pytest.mark.parametrize("case", [CONV_CASES[0], CONV_CASES[4], CONV_CASES[5], CONV_CASES[9]])
def test_narrow_tiles_equal_the_wide_ones_bit_for_bit(case, monkeypatch):
    """Each output sums its products in the same order (tap, group, channel) in both tile
    sets, so the CPU's choice never changes a result."""
    n, c, h, wd, m, k, s, pads, d, blocked = case
    rng = np.random.default_rng(9)
    x = rng.standard_normal((n, c, h, wd)).astype(np.float32)
    w = rng.standard_normal((m, c, k, k)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    out_hw = reference_conv(x, w, None, (s, s), pads, (d, d)).shape[2:]
    results = []
    for wide in (True, False):
        monkeypatch.setattr(native, "NCHWC_WIDE_TILES", wide)
        results.append(_run_conv(x, w, b, None, (s, s), pads[:2], (d, d), out_hw, "relu", blocked))
    np.testing.assert_array_equal(results[0], results[1])


@pytest.mark.parametrize(("setting", "avx512", "offered"), [
    ("", True, True), ("", False, False), ("1", False, True), ("0", True, False), ("x", False, False),
])
def test_nchwc_kernels_are_offered_only_with_avx512_unless_forced(setting, avx512, offered, monkeypatch):
    monkeypatch.setenv("ONYXRT_CPU_NCHWC", setting)
    assert native._nchwc_enabled(avx512) is offered


# planes of whole 16-pixel tiles, of tiles and a remainder, and shorter than one tile
@pytest.mark.parametrize("shape", [(1, 1, 1, 1), (2, 21, 5, 6), (1, 32, 7, 7), (3, 16, 1, 9), (0, 4, 2, 2),
                                   (1, 40, 16, 16), (2, 64, 13, 11)])
def test_reorders_round_trip_and_pad_with_zeros(shape):
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    blocked = native.to_nchwc(x)
    assert blocked.shape == (shape[0], -(-shape[1] // 16), shape[2], shape[3], 16)
    np.testing.assert_array_equal(native.from_nchwc(blocked, shape[1]), x)
    # channel c is lane c % 16 of block c // 16; lanes past C are zero
    planes = blocked.transpose(0, 1, 4, 2, 3).reshape(shape[0], blocked.shape[1] * 16, *shape[2:])
    np.testing.assert_array_equal(planes[:, :shape[1]], x)
    assert not np.any(planes[:, shape[1]:])


def test_split_work_equals_unsplit_bit_for_bit():
    from onyxrt_cpu import blas_threads

    rng = np.random.default_rng(5)
    x = native.to_nchwc(rng.standard_normal((2, 48, 20, 20)).astype(np.float32))
    w = rng.standard_normal((80, 48, 3, 3)).astype(np.float32)
    wd = rng.standard_normal((48, 1, 3, 3)).astype(np.float32)
    f, fd = native.pack_nchwc_filters(w, True), native.pack_nchwc_depthwise(wd)

    def run():
        y = np.empty((2, 5, 20, 20, 16), np.float32)
        native.nchwc_conv(x, f, y, (3, 3), (1, 1), (1, 1), (1, 1))
        yd = np.empty((2, 3, 20, 20, 16), np.float32)
        native.nchwc_depthwise(x, fd, yd, (3, 3), (1, 1), (1, 1), (1, 1))
        return y, yd

    blas_threads.share_pool()
    split = run()
    with threadpool_limits(limits=1, user_api="blas"):
        assert native.threads()[1] == 1
        alone = run()
    for a, b in zip(split, alone, strict=True):
        np.testing.assert_array_equal(a, b)


def test_bad_buffers_are_refused():
    x = np.zeros((1, 1, 4, 4, 16), np.float32)
    f = native.pack_nchwc_filters(np.zeros((16, 16, 3, 3), np.float32), True)
    with pytest.raises(ValueError, match="floats"):
        native.nchwc_conv(x, f.reshape(-1)[:100], np.zeros((1, 1, 2, 2, 16), np.float32), (3, 3), (1, 1), (0, 0), (1, 1))
    with pytest.raises(ValueError, match="x holds"):  # a geometry larger than the input
        native._native.nchwc_conv(x, True, 1, (1, 1, 8, 8, 3, 3, 6, 6, 1, 1, 0, 0, 1, 1), f, 1,
                                  np.zeros((1, 1, 6, 6, 16), np.float32))
    with pytest.raises(TypeError, match="float32"):
        native.nchwc_conv(x.astype(np.float64), f, np.zeros((1, 1, 2, 2, 16), np.float32), (3, 3), (1, 1),
                          (0, 0), (1, 1))
    with pytest.raises(ValueError, match="activation"):
        native.nchwc_conv(x, f, np.zeros((1, 1, 2, 2, 16), np.float32), (3, 3), (1, 1), (0, 0), (1, 1),
                          None, None, 9)


@pytest.mark.parametrize("attrs", [
    {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},   # ResNet's
    {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1},           # overhang = -inf
    {"kernel_shape": [2, 3], "dilations": [2, 1], "pads": [0, 1, 1, 0]},
    {"kernel_shape": [3, 3], "auto_pad": "SAME_UPPER"},
])
def test_maxpool_matches_the_nchw_kernel(attrs):
    from onyxrt.kernels import KernelInfo
    from onyxrt_cpu.kernels.nchwc import NchwcMaxPool
    from onyxrt_cpu.kernels.pool import MaxPool

    x = np.random.default_rng(3).standard_normal((2, 40, 13, 11)).astype(np.float32)
    x[0, 3, 4, 4] = np.nan
    x[1, 17, :, :] = -np.inf
    x[0, 7] = np.random.default_rng(4).choice([0.0, -0.0], size=(13, 11))  # which zero wins
    expected = MaxPool(KernelInfo("p", "MaxPool", attributes=attrs, output_names=("y",))).compute(x)[0]
    got = NchwcMaxPool(KernelInfo("p", "NchwcMaxPool", attributes=attrs)).compute(native.to_nchwc(x))[0]
    # the same bits (-0.0 and +0.0 apart; the AVX-512 and generic paths alike)
    np.testing.assert_array_equal(native.from_nchwc(got, 40).view(np.int32), expected.view(np.int32))
    assert np.isnan(expected[0, 3]).any()


@pytest.mark.parametrize("shape", [(1, 1280, 7, 7), (2, 21, 56, 56), (1, 16, 1, 3), (3, 5, 2, 2)])
def test_global_average_matches_numpy(shape):
    from onyxrt.kernels import KernelInfo
    from onyxrt_cpu.kernels.nchwc import NchwcGlobalAveragePool

    x = np.random.default_rng(6).standard_normal(shape).astype(np.float32) + 3
    got = NchwcGlobalAveragePool(KernelInfo("g", "NchwcGlobalAveragePool")).compute(native.to_nchwc(x))[0]
    assert got.shape == (shape[0], -(-shape[1] // 16), 1, 1, 16)
    expected = x.astype(np.float64).mean(axis=(2, 3), keepdims=True)
    np.testing.assert_allclose(native.from_nchwc(got, shape[1]), expected, rtol=2e-6)
    assert not np.any(got[:, -1, :, :, shape[1] % 16 or 16:])
