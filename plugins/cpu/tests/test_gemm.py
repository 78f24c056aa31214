"""The compiled GEMM (csrc/gemm.c, onyxrt_cpu.native.gemm) and the kernels that route to it.

Every product is checked against a float64 product with the worst-case float32 bound
(|error| <= k * eps * (|A| @ |B|), which no correct summation order can exceed), over
shapes on both sides of every tile and block edge (MR = 8 rows, NR = 32 columns, KC = 512
along k), each operand packed or not (a row-major A is read in place), strided, transposed. The kernels that use it
(FusedMatMul with a constant B, Conv's GEMMs) are run with the route forced on and off:
CI machines without AVX-512 would otherwise never take it.
"""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kernel_cases import run_ours
from onnx import helper

from onyxrt.kernels import KernelInfo
from onyxrt.optimizer import FUSED_DOMAIN, FUSED_DOMAIN_VERSION
from onyxrt_cpu import native
from onyxrt_cpu.kernels import conv as conv_kernels
from onyxrt_cpu.kernels import registry
from onyxrt_cpu.kernels.linalg import MIN_PACKED_ROWS

pytestmark = pytest.mark.skipif(
    os.environ.get("ONYXRT_CPU_PURE", "") not in ("", "0") or not native.ENABLED,
    reason="needs the compiled kernels (ONYXRT_CPU_PURE=1 or ONYXRT_CPU_NATIVE=0)",
)

EPS = float(np.finfo(np.float32).eps)


def _check(c: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    want = a64 @ b64
    bound = max(a.shape[1], 1) * EPS * (np.abs(a64) @ np.abs(b64)) + 1e-30
    assert np.all(np.abs(c - want) <= bound), float(np.max(np.abs(c - want) / bound))


def _operands(rng, m, k, n):
    return (rng.standard_normal((m, k), dtype=np.float32),
            rng.standard_normal((k, n), dtype=np.float32))


# rows: 1 and 2 (k split over several accumulators), 3-7 (partial row tiles), 8, 9, 33
EDGES = [1, 2, 3, 5, 7, 8, 9, 33]
K_EDGES = [1, 31, 255, 511, 512, 513, 1100]


@pytest.mark.parametrize("m", EDGES)
@pytest.mark.parametrize("n", [1, 16, 17, 31, 32, 33, 48, 49, 70])
@pytest.mark.parametrize("k", K_EDGES)
def test_gemm_edges_all_operand_forms(m, n, k):
    rng = np.random.default_rng(m * 1000 + n * 10 + k)
    a, b = _operands(rng, m, k, n)
    pa, pb = native.pack_gemm_a(a), native.pack_gemm_b(b)
    assert pa is not None and pb is not None
    for left in (a, pa):
        for right in (b, pb):
            c = np.full((m, n), np.nan, np.float32)
            assert native.gemm(left, right, c)
            _check(c, a, b)


@pytest.mark.parametrize("m", [1, 2, 3, 6, 7, 12])
@pytest.mark.parametrize("k", [5, 300, 700])
def test_gemm_finish_on_partial_row_tiles(m, k):
    """Column bias, residual and activation applied in registers by the partial-row
    kernel too (both column tiles full, and an edge one), across k blocks."""
    rng = np.random.default_rng(m + k)
    for n in (64, 45):
        a, b = _operands(rng, m, k, n)
        bias = rng.standard_normal(n, dtype=np.float32)
        z = rng.standard_normal((m, n), dtype=np.float32)
        out = np.empty((m, n), np.float32)
        assert native.gemm(a, native.pack_gemm_b(b), out, None, bias, z, native.ACT_LEAKY, 0.2)
        want = a.astype(np.float64) @ b.astype(np.float64) + bias + z
        want = np.where(want < 0, 0.2 * want, want)
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-4)


def test_gemm_strided_operands_and_output():
    """Transposed views (no copy), a column slice, and an output whose rows are longer."""
    rng = np.random.default_rng(3)
    at = rng.standard_normal((300, 45), dtype=np.float32)  # A = at.T: (45, 300)
    bt = rng.standard_normal((70, 300), dtype=np.float32)  # B = bt.T: (300, 70)
    wide = np.full((45, 100), -7.0, np.float32)
    out = wide[:, 10:80]
    assert native.gemm(at.T, bt.T, out)
    _check(out, at.T, bt.T)
    assert np.all(wide[:, :10] == -7) and np.all(wide[:, 80:] == -7)
    packed = native.pack_gemm_b(bt.T)
    out2 = np.empty((45, 70), np.float32)
    assert native.gemm(at.T, packed, out2)
    np.testing.assert_array_equal(out2, out)
    sliced = rng.standard_normal((300, 90), dtype=np.float32)[:, 5:75]
    assert native.gemm(at.T, sliced, out2)
    _check(out2, at.T, sliced)
    # A read in place with rows further apart than K (a column slice), across k blocks
    wide_a = rng.standard_normal((45, 1200), dtype=np.float32)
    a_rows = wide_a[:, 3:1103]
    b_long = rng.standard_normal((1100, 70), dtype=np.float32)
    for right in (b_long, native.pack_gemm_b(b_long)):
        out3 = np.empty((45, 70), np.float32)
        assert native.gemm(a_rows, right, out3)
        _check(out3, a_rows, b_long)


def test_gemm_empty_dimensions():
    a = np.ones((5, 0), np.float32)
    b = np.ones((0, 4), np.float32)
    c = np.full((5, 4), np.nan, np.float32)
    assert native.gemm(a, b, c)
    np.testing.assert_array_equal(c, np.zeros((5, 4), np.float32))
    assert native.gemm(np.ones((0, 3), np.float32), np.ones((3, 4), np.float32),
                       np.empty((0, 4), np.float32))


@settings(max_examples=60, deadline=None)
@given(m=st.integers(1, 70), n=st.integers(1, 100), k=st.integers(1, 700),
       pack_a=st.booleans(), pack_b=st.booleans())
def test_gemm_property(m, n, k, pack_a, pack_b):
    rng = np.random.default_rng(m * n + k)
    a, b = _operands(rng, m, k, n)
    left = native.pack_gemm_a(a) if pack_a else a
    right = native.pack_gemm_b(b) if pack_b else b
    c = np.empty((m, n), np.float32)
    assert native.gemm(left, right, c)
    _check(c, a, b)


def test_gemm_special_values_propagate():
    a = np.ones((9, 40), np.float32)
    b = np.ones((40, 33), np.float32)
    a[3, 7] = np.nan
    b[5, 32] = np.inf
    c = np.empty((9, 33), np.float32)
    assert native.gemm(native.pack_gemm_a(a), b, c)
    assert np.isnan(c[3]).all()
    assert np.isinf(c[np.arange(9) != 3, 32]).all()
    assert np.isfinite(c[np.arange(9) != 3, :32]).all()


def test_gemm_finish_keeps_nan_and_clips_infinity():
    """The in-register epilogue has onyxrt_epilogue's semantics: Relu keeps NaN, Clip maps
    +-inf to its bounds and keeps NaN."""
    a = np.ones((8, 64), np.float32)
    b = np.ones((64, 32), np.float32)
    z = np.zeros((8, 32), np.float32)
    z[0, 0], z[1, 1], z[2, 2] = np.nan, -np.inf, np.inf
    out = np.empty((8, 32), np.float32)
    assert native.gemm(native.pack_gemm_a(a), b, out, None, None, z - 100, native.ACT_RELU)
    assert np.isnan(out[0, 0]) and out[1, 1] == 0 and out[2, 2] == np.inf and out[3, 3] == 0
    assert native.gemm(a, native.pack_gemm_b(b), out, None, None, z, native.ACT_CLIP, -1, 2)
    assert np.isnan(out[0, 0]) and out[1, 1] == -1 and out[2, 2] == 2 and out[3, 3] == 2


def test_gemm_declines_what_it_cannot_take():
    a = np.ones((4, 5), np.float32)
    b = np.ones((5, 6), np.float32)
    assert not native.gemm(a, b, np.empty((4, 7), np.float32))         # shapes disagree
    assert not native.gemm(a.astype(np.float64), b, np.empty((4, 6), np.float32))
    assert not native.gemm(a, b, np.empty((6, 4), np.float32).T)       # columns not unit
    assert not native.gemm(native.pack_gemm_b(b), b, np.empty((4, 6), np.float32))  # sides
    assert native.pack_gemm_a(np.ones((2, 2, 2), np.float32)) is None


def test_c_gemm_rejects_bad_buffers():
    """The C entry points check every buffer against the sizes they are told."""
    from onyxrt_cpu import _native

    a = np.ones((4, 5), np.float32)
    b = np.ones((5, 6), np.float32)
    c = np.empty((4, 6), np.float32)
    with pytest.raises(ValueError):
        _native.gemm(a, 5, 1, False, b, 6, 1, False, c, 4, 6, 9)   # k past A's end
    with pytest.raises(ValueError):
        _native.gemm(a, 5, 1, True, b, 6, 1, False, c, 4, 6, 5)    # A is not packed
    with pytest.raises(ValueError):
        _native.gemm(a, 5, 1, False, b, 6, 1, False, c, 5, 6, 5)   # C's shape differs
    with pytest.raises(ValueError):
        _native.gemm(a, -5, 1, False, b, 6, 1, False, c, 4, 6, 5)  # negative stride
    with pytest.raises(ValueError):
        _native.gemm(a, 5, 1, False, b, 6, 1, False, np.empty((6, 4), np.float32).T, 4, 6, 5)
    with pytest.raises(ValueError):
        _native.gemm_pack(a, 5, 1, 4, 5, False, np.empty(8, np.float32))  # too small
    with pytest.raises(ValueError):  # a row bias needs one value per row of C
        _native.gemm(a, 5, 1, False, b, 6, 1, False, c, 4, 6, 5, np.ones(3, np.float32))
    with pytest.raises(ValueError):  # z must be C's shape
        _native.gemm(a, 5, 1, False, b, 6, 1, False, c, 4, 6, 5, None, None,
                     np.ones((4, 5), np.float32))
    with pytest.raises(ValueError):
        _native.gemm(a, 5, 1, False, b, 6, 1, False, c, 4, 6, 5, None, None, None, 9)


# ------------------------------------------------------------ kernels that route here


@pytest.fixture(params=[True, False], ids=["compiled-gemm", "blas"])
def gemm_route(request, monkeypatch):
    """Kernels built with the compiled GEMM preferred, or not (whatever this CPU is);
    preferred, it takes every product, whatever its shape (the route by shape,
    native.compiled_gemm_wins, is tested on its own)."""
    monkeypatch.setattr(native, "GEMM_PREFERRED", request.param)
    if request.param:
        monkeypatch.setattr(native, "compiled_gemm_wins", lambda m, k, n: True)
    return request.param


# (A's shape, the bias's): a bias per column (fused into the GEMM when alpha is 1), and
# one per element (added after it).
MATMUL_CASES = [((2, 40, 64), (48,)), ((3, 64), (1, 48)), ((1, 20, 64), (48,)),
                ((2, 40, 64), (40, 48))]


@pytest.mark.parametrize("shape,bias_shape", MATMUL_CASES)
@pytest.mark.parametrize("trans_b", [0, 1])
@pytest.mark.parametrize("alpha", [1.0, 0.5])
def test_fused_matmul_with_constant_b(gemm_route, shape, bias_shape, trans_b, alpha):
    rng = np.random.default_rng(len(shape) + trans_b)
    a = rng.standard_normal(shape, dtype=np.float32)
    w = rng.standard_normal((48, 64) if trans_b else (64, 48), dtype=np.float32)
    bias = rng.standard_normal(bias_shape, dtype=np.float32)
    node = helper.make_node("FusedMatMul", ["a", "w", "bias"], ["y"], domain=FUSED_DOMAIN,
                            transB=trans_b, alpha=alpha)
    (y,) = run_ours(node, FUSED_DOMAIN_VERSION, a, w, bias, constants=(1,))
    want = alpha * (a.astype(np.float64) @ (w.T if trans_b else w).astype(np.float64)) + bias
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-4)


# Gemm's C: none, a row per column (fused into the GEMM when beta scales it once), a
# scalar, a full (M, N) matrix; A of 40 rows and of 3 (the packed route: the compiled
# kernel's full and partial row tiles) and of 1 (BLAS's matrix-vector product).
GEMM_CASES = [(40, None), (40, (48,)), (40, (1, 48)), (40, ()), (40, (40, 48)), (3, (48,)), (3, ()),
              (1, (48,)), (1, None)]


@pytest.mark.parametrize("rows,c_shape", GEMM_CASES)
@pytest.mark.parametrize("trans_b", [0, 1])
@pytest.mark.parametrize("beta", [1.0, 0.25])
def test_gemm_with_constant_b(gemm_route, rows, c_shape, trans_b, beta, monkeypatch):
    rng = np.random.default_rng(rows + trans_b)
    a = rng.standard_normal((rows, 64), dtype=np.float32)
    w = rng.standard_normal((48, 64) if trans_b else (64, 48), dtype=np.float32)
    c = None if c_shape is None else rng.standard_normal(c_shape, dtype=np.float32)
    calls = []
    real = native.gemm
    monkeypatch.setattr(native, "gemm", lambda *args, **kw: calls.append(1) or real(*args, **kw))
    node = helper.make_node("Gemm", ["a", "w", "c" if c is not None else ""], ["y"], transB=trans_b, beta=beta)
    (y,) = run_ours(node, 13, a, w, c, constants=(1, 2) if c is not None else (1,))
    want = a.astype(np.float64) @ (w.T if trans_b else w).astype(np.float64)
    if c is not None:
        want = want + beta * c
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-4)
    assert y.dtype == np.float32 and y.shape == (rows, 48)
    assert bool(calls) == (gemm_route and rows >= MIN_PACKED_ROWS and native.ENABLED)


def _conv_reference(x: np.ndarray, w: np.ndarray, pads: int) -> np.ndarray:
    """A float64 2-D convolution (stride 1, symmetric padding) by its definition."""
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pads, pads), (pads, pads)))
    kh, kw = w.shape[2:]
    windows = np.lib.stride_tricks.sliding_window_view(xp, (kh, kw), axis=(2, 3))
    return np.einsum("nchwij,mcij->nmhw", windows, w.astype(np.float64))


@pytest.mark.parametrize("kernel,pads,x_shape", [
    ((1, 1), 0, (1, 24, 30, 30)),   # pointwise: 900 positions
    ((3, 3), 1, (1, 8, 26, 26)),    # im2col, one image
    ((3, 3), 1, (3, 8, 13, 13)),    # im2col, images stacked into one GEMM
])
def test_conv_gemms(gemm_route, kernel, pads, x_shape, monkeypatch):
    monkeypatch.setattr(conv_kernels, "MIN_GEMM_POSITIONS", 64)
    monkeypatch.setattr(conv_kernels.winograd, "MIN_CHANNELS", 10**6)  # keep im2col
    rng = np.random.default_rng(7)
    x = rng.standard_normal(x_shape, dtype=np.float32)
    w = rng.standard_normal((20, x_shape[1]) + kernel, dtype=np.float32)
    node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[pads] * 4)
    (y,) = run_ours(node, 17, x, w, constants=(1,))
    np.testing.assert_allclose(y, _conv_reference(x, w, pads), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("activation,params,code", [
    ("", [], "none"), ("Relu", [], "relu"), ("Clip", [-0.5, 0.75], "clip"),
    ("LeakyRelu", [0.1], "leaky"),
])
@pytest.mark.parametrize("kernel,pads,x_shape", [
    ((1, 1), 0, (2, 24, 9, 9)),    # pointwise, image by image
    ((3, 3), 1, (1, 8, 10, 10)),   # im2col, the image in one piece
])
def test_fused_conv_finished_by_the_gemm(gemm_route, activation, params, code, kernel, pads,
                                         x_shape, monkeypatch):
    """Bias, residual and activation applied tile by tile by the compiled GEMM (or after a
    BLAS product): both within float32 rounding of a float64 reference."""
    monkeypatch.setattr(conv_kernels, "MIN_GEMM_POSITIONS", 16)
    monkeypatch.setattr(conv_kernels, "MIN_GEMM_DEPTH", 1)
    monkeypatch.setattr(conv_kernels.winograd, "MIN_CHANNELS", 10**6)
    rng = np.random.default_rng(11)
    x = rng.standard_normal(x_shape, dtype=np.float32)
    w = rng.standard_normal((12, x_shape[1]) + kernel, dtype=np.float32)
    b = rng.standard_normal(12, dtype=np.float32)
    z = rng.standard_normal((x_shape[0], 12) + x_shape[2:], dtype=np.float32)
    attrs = {"pads": [pads] * 4, "activation": activation}
    if params:
        attrs["activation_params"] = params
    node = helper.make_node("FusedConv", ["x", "w", "b", "z"], ["y"], domain=FUSED_DOMAIN, **attrs)
    (y,) = run_ours(node, FUSED_DOMAIN_VERSION, x, w, b, z, constants=(1,))
    want = _conv_reference(x, w, pads) + b[:, None, None] + z
    if code == "relu":
        want = np.maximum(want, 0)
    elif code == "clip":
        want = np.clip(want, *params)
    elif code == "leaky":
        want = np.where(want < 0, want * params[0], want)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-4)


# FusedGemm (Gemm + activation, the optimizer's MLP layer): the compiled GEMM applies
# Relu/LeakyRelu/Clip to each tile in registers; Sigmoid (which it does not know) follows
# in numpy. One row takes BLAS, 3 and 40 rows the compiled kernel's partial and full tiles.
FUSED_GEMM_ACTIVATIONS = [("Relu", [], lambda v: np.maximum(v, 0)),
                          ("LeakyRelu", [0.1], lambda v: np.where(v < 0, 0.1 * v, v)),
                          ("Clip", [-0.5, 0.5], lambda v: np.clip(v, -0.5, 0.5)),
                          ("Sigmoid", [], lambda v: 1 / (1 + np.exp(-v)))]


@pytest.mark.parametrize("rows", [1, 3, 9, 40])
@pytest.mark.parametrize("name,params,reference", FUSED_GEMM_ACTIVATIONS, ids=[a[0] for a in FUSED_GEMM_ACTIVATIONS])
def test_fused_gemm_activation_with_constant_b(gemm_route, rows, name, params, reference, monkeypatch):
    rng = np.random.default_rng(rows)
    a = rng.standard_normal((rows, 70), dtype=np.float32)
    w = rng.standard_normal((70, 37), dtype=np.float32)  # 37 columns: an edge tile too
    c = rng.standard_normal((37,), dtype=np.float32)
    calls = []
    real = native.gemm
    monkeypatch.setattr(native, "gemm", lambda *args, **kw: calls.append(1) or real(*args, **kw))
    extra = {"activation_params": params} if params else {}
    node = helper.make_node("FusedGemm", ["a", "w", "c"], ["y"], domain=FUSED_DOMAIN, activation=name, **extra)
    (y,) = run_ours(node, FUSED_DOMAIN_VERSION, a, w, c, constants=(1, 2))
    want = reference(a.astype(np.float64) @ w.astype(np.float64) + c)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-4)
    assert y.dtype == np.float32 and y.shape == (rows, 37)
    assert bool(calls) == (gemm_route and rows >= MIN_PACKED_ROWS and native.ENABLED)


@pytest.mark.parametrize("rows,k,n,compiled", [
    (101, 257, 80, False),  # the log-mel filter bank: OpenBLAS's
    (48, 512, 512, False),  # 512 columns: about even, OpenBLAS
    (128, 768, 768, True),  # a transformer's projection: the compiled GEMM's
    (200, 80, 1024, True),
    (2, 768, 768, True),  # few rows of a wide product: the compiled GEMM's
    (8, 256, 256, False),
])
def test_products_go_where_they_run_faster(rows, k, n, compiled, monkeypatch):
    """With the compiled GEMM preferred, a constant-B product takes it only for the shapes
    it runs faster (native.compiled_gemm_wins); the others go to numpy, with the same
    values within float32 rounding."""
    monkeypatch.setattr(native, "GEMM_PREFERRED", True)
    assert native.compiled_gemm_wins(rows, k, n) == compiled
    rng = np.random.default_rng(rows + n)
    a = rng.standard_normal((rows, k), dtype=np.float32)
    w = rng.standard_normal((k, n), dtype=np.float32)
    c = rng.standard_normal((n,), dtype=np.float32)
    calls = []
    real = native.gemm
    monkeypatch.setattr(native, "gemm", lambda *args, **kw: calls.append(1) or real(*args, **kw))
    node = helper.make_node("FusedMatMul", ["a", "w", "c"], ["y"], domain=FUSED_DOMAIN)
    (y,) = run_ours(node, FUSED_DOMAIN_VERSION, a, w, c, constants=(1,))
    assert bool(calls) == (compiled and native.ENABLED)
    want = a.astype(np.float64) @ w.astype(np.float64) + c
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-3 * np.sqrt(k))


# ------------------------------------------------------------ the one-row product


@pytest.mark.parametrize("n", [1, 3, 15, 16, 17, 63, 64, 65, 127, 128, 129, 300])
@pytest.mark.parametrize("k", [1, 7, 256, 513])
@pytest.mark.parametrize("act,params,reference", [
    (native.ACT_NONE, (0.0, 0.0), lambda v: v),
    (native.ACT_RELU, (0.0, 0.0), lambda v: np.maximum(v, 0)),
    (native.ACT_CLIP, (-0.5, 0.75), lambda v: np.clip(v, -0.5, 0.75)),
    (native.ACT_LEAKY, (0.1, 0.0), lambda v: np.where(v < 0, 0.1 * v, v)),
], ids=["none", "relu", "clip", "leaky"])
def test_gemv_edges(n, k, act, params, reference):
    """Every panel edge (one panel of 64 columns, several, a last one partly past N),
    with and without a bias, within the float32 bound of a float64 product."""
    rng = np.random.default_rng(n * 1000 + k)
    a, b = _operands(rng, 1, k, n)
    row_product = native.one_row_product(b)
    assert row_product is not None
    for bias in (None, rng.standard_normal(n, dtype=np.float32)):
        y = np.full((1, n), np.nan, np.float32)
        row_product(a, y, bias, act, *params)
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        product = a64 @ b64
        bound = k * EPS * (np.abs(a64) @ np.abs(b64)) + 1e-30
        # an activation never widens a difference (each is 1-Lipschitz)
        want = reference(product + (0 if bias is None else bias))
        assert np.all(np.abs(y - want) <= bound + (0 if bias is None else EPS * np.abs(want))), (n, k)


def test_gemv_special_values_and_refusals():
    b = np.ones((3, 20), np.float32)
    a = np.array([[1.0, np.nan, 2.0]], np.float32)
    y = np.empty((1, 20), np.float32)
    product = native.one_row_product(b)
    product(a, y, None, native.ACT_RELU, 0.0, 0.0)
    assert np.isnan(y).all()  # ReLU keeps NaN, as the GEMM's finish and numpy do
    gemv, panels = native.compiled_module().gemv, product.panels
    assert panels.size == 3 * 64  # 20 columns: one panel of 64, zero past column 20
    with pytest.raises(ValueError):  # y too small
        gemv(a, panels, np.empty(5, np.float32), 3, 20)
    with pytest.raises(ValueError):  # B given as rows, not panels: too few floats
        gemv(a, b, y, 3, 20)
    with pytest.raises(TypeError):
        gemv(a.astype(np.float64), panels, y, 3, 20)
    with pytest.raises(ValueError):
        gemv(a, panels, y, 3, 20, None, 9)
    # what the route does not take: too large, not float32
    assert native.one_row_product(np.ones((1024, 1024), np.float32)) is None
    assert native.one_row_product(np.ones((4, 4), np.float64)) is None
    # a strided B is laid out in panels like any other
    strided = np.arange(32, dtype=np.float32).reshape(4, 8)[:, ::2]
    y4 = np.empty((1, 4), np.float32)
    native.one_row_product(strided)(np.ones((1, 4), np.float32), y4)
    np.testing.assert_array_equal(y4[0], strided.sum(axis=0))


@pytest.mark.parametrize("name,params,reference", FUSED_GEMM_ACTIVATIONS, ids=[a[0] for a in FUSED_GEMM_ACTIVATIONS])
@pytest.mark.parametrize("with_c", [True, False])
def test_batch_one_gemm_takes_the_one_row_product(name, params, reference, with_c, monkeypatch):
    """A float32 row through FusedGemm/Gemm with constant weights is one compiled call
    (product, bias and the activations it knows), equal to the float64 reference."""
    rng = np.random.default_rng(5)
    a = rng.standard_normal((1, 70), dtype=np.float32)
    w = rng.standard_normal((70, 37), dtype=np.float32)
    c = rng.standard_normal((37,), dtype=np.float32) if with_c else None
    calls = []
    real = native.one_row_product

    def counted(b):
        product = real(b)
        if product is None:
            return None

        def gemv(*args):
            calls.append(args[6])
            return product.gemv(*args)

        return native.RowProduct(product.panels, product.k, product.n, gemv)

    monkeypatch.setattr(native, "one_row_product", counted)
    extra = {"activation_params": params} if params else {}
    node = helper.make_node("FusedGemm", ["a", "w", "c" if with_c else ""], ["y"], domain=FUSED_DOMAIN,
                            activation=name, **extra)
    (y,) = run_ours(node, FUSED_DOMAIN_VERSION, a, w, c, constants=(1, 2) if with_c else (1,))
    want = reference(a.astype(np.float64) @ w.astype(np.float64) + (c if with_c else 0))
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
    assert y.dtype == np.float32 and y.shape == (1, 37)
    # the compiled call ran once, with the activation code where the kernel knows it
    assert len(calls) == 1
    assert calls[0] == (native.ACT_NONE if name == "Sigmoid" else {"Relu": native.ACT_RELU,
                        "LeakyRelu": native.ACT_LEAKY, "Clip": native.ACT_CLIP}[name])


@pytest.mark.parametrize("name", ["Relu", "Sigmoid", None])
def test_one_row_single_output_is_compute(name):
    """The straight-line runner calls a Gemm's ``single_output``: a batch-1 float32 row
    straight to the compiled product, anything else through ``compute`` — the same
    values either way (FusedGemm's Sigmoid, applied after the product, keeps compute)."""
    rng = np.random.default_rng(8)
    w = rng.standard_normal((70, 37), dtype=np.float32)
    c = rng.standard_normal((37,), dtype=np.float32)
    if name is None:
        node, version = helper.make_node("Gemm", ["a", "w", "c"], ["y"]), 13
    else:
        node = helper.make_node("FusedGemm", ["a", "w", "c"], ["y"], domain=FUSED_DOMAIN, activation=name)
        version = FUSED_DOMAIN_VERSION
    kdef, reason = registry.lookup(node.domain, node.op_type, version)
    assert kdef is not None, reason
    kernel = kdef.factory(KernelInfo.from_node(node, version, since_version=kdef.since_version,
                                               constants={1: w, 2: c}))
    single = kernel.single_output
    if name == "Sigmoid" or not native.ENABLED:
        assert single is None
        return
    assert single is not None
    wide = rng.standard_normal((1, 140), dtype=np.float32)
    other_w = rng.standard_normal((70, 37), dtype=np.float32)
    for a, b in [(rng.standard_normal((1, 70), dtype=np.float32), w),  # the compiled row
                 (rng.standard_normal((3, 70), dtype=np.float32), w),  # more rows
                 (wide[:, ::2], w),  # a strided row
                 (rng.standard_normal((1, 70)), w),  # float64
                 (rng.standard_normal((1, 70), dtype=np.float32), other_w)]:  # B not the constant
        got = single(a, b, c)
        want = kernel.compute(a, b, c)[0]
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)


def test_conv_filters_are_packed_at_creation(gemm_route):
    """A Conv whose constant filters the compiled GEMM may take has them packed when the
    session is built, not in its first run (a 1-D convolution keeps the im2col path)."""
    from onyxrt_cpu.kernels.conv import _gemm_filters

    rng = np.random.default_rng(9)
    x = rng.standard_normal((1, 1, 2000), dtype=np.float32)
    w = rng.standard_normal((40, 1, 64), dtype=np.float32)
    model = helper.make_model(helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], strides=[4])], "g",
        [helper.make_tensor_value_info("x", 1, [1, 1, 2000])], [helper.make_tensor_value_info("y", 1, None)],
        [onnx.numpy_helper.from_array(w, "w")]), opset_imports=[helper.make_opsetid("", 17)])
    import onyxrt

    before = set(_gemm_filters)
    s = onyxrt.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    added = set(_gemm_filters) - before
    assert bool(added) == (gemm_route and native.ENABLED)
    (y,) = s.run(None, {"x": x})
    assert set(_gemm_filters) - before == added  # the run packed nothing more
    windows = np.lib.stride_tricks.sliding_window_view(x[0, 0].astype(np.float64), 64)[::4]
    np.testing.assert_allclose(y[0], w[:, 0].astype(np.float64) @ windows.T, rtol=1e-5, atol=1e-4)


# ------------------------------------------------------------------ the batched GEMM


def _check_batched(c: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
    for index in np.ndindex(*c.shape[:-2]):
        _check(c[index], a[index], b[index])


def _heads(rng, tokens, heads, dim, parts=3):
    """Attention's views: q (1, H, T, D) and k^T (1, H, D, T) split out of one
    (1, T, parts * H * D) projection, as exports compute them (no copies)."""
    qkv = rng.standard_normal((1, tokens, parts * heads * dim), dtype=np.float32)
    q = qkv[:, :, : heads * dim].reshape(1, tokens, heads, dim).transpose(0, 2, 1, 3)
    k = qkv[:, :, heads * dim: 2 * heads * dim].reshape(1, tokens, heads, dim).transpose(0, 2, 3, 1)
    return q, k


@pytest.mark.parametrize("tokens,heads,dim", [(1, 4, 8), (7, 3, 5), (33, 12, 64), (197, 12, 64), (70, 2, 300)])
def test_gemm_batched_attention_views(tokens, heads, dim):
    rng = np.random.default_rng(tokens * heads + dim)
    q, k = _heads(rng, tokens, heads, dim)
    out = np.empty((1, heads, tokens, tokens), np.float32)
    assert native.gemm_batched(q, k, out)
    _check_batched(out, q, k)
    scores = rng.standard_normal((1, heads, tokens, tokens), dtype=np.float32)
    v = q  # (1, H, T, D): rows along the projection's stride
    out = np.empty((1, heads, tokens, dim), np.float32)
    assert native.gemm_batched(scores, v, out)
    _check_batched(out, scores, v)


@pytest.mark.parametrize("batch", [(2, 3), (5,), (1, 1, 4)])
@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (9, 257, 17), (8, 31, 48), (3, 600, 49), (9, 1100, 17)])
def test_gemm_batched_shapes_and_layouts(batch, m, k, n):
    rng = np.random.default_rng(m * k + n)
    a = rng.standard_normal((*batch, m, k), dtype=np.float32)
    b = rng.standard_normal((*batch, n, k), dtype=np.float32).swapaxes(-1, -2)  # column-major B
    out = np.empty((*batch, m, n), np.float32)
    assert native.gemm_batched(a, b, out)
    _check_batched(out, a, b)
    # a ufunc's result on a transposed input owns permuted memory: still one block
    a_perm = np.negative(rng.standard_normal((*batch, k, m), dtype=np.float32).swapaxes(-1, -2))
    if min(m, k) > 1:
        assert not a_perm.flags.c_contiguous and a_perm.base is None
    assert native.gemm_batched(a_perm, b, out)
    _check_batched(out, a_perm, b)


def test_gemm_batched_zero_k_broadcast_and_refusals():
    a = np.ones((3, 4, 0), np.float32)
    b = np.ones((3, 0, 5), np.float32)
    out = np.full((3, 4, 5), np.nan, np.float32)
    assert native.gemm_batched(a, b, out) and not out.any()
    # a batch dimension of stride 0 (np.broadcast_to) reads the one matrix each time
    a = np.broadcast_to(np.arange(6, dtype=np.float32).reshape(1, 2, 3), (4, 2, 3))
    b = np.ones((4, 3, 2), np.float32)
    out = np.empty((4, 2, 2), np.float32)
    assert native.gemm_batched(a, b, out)
    np.testing.assert_array_equal(out, np.matmul(a, b))
    # batch dimensions that do not merge into one stride, other dtypes, disagreeing shapes
    x = np.ones((4, 5, 3, 3), np.float32)[:, :3]
    assert not native.gemm_batched(x, np.ones((4, 3, 3, 3), np.float32), np.empty((4, 3, 3, 3), np.float32))
    assert not native.gemm_batched(np.ones((2, 3, 3)), np.ones((2, 3, 3)), np.empty((2, 3, 3)))
    assert not native.gemm_batched(np.ones((2, 3, 4), np.float32), np.ones((3, 4, 3), np.float32),
                                   np.empty((2, 3, 3), np.float32))


def test_attention_scores_take_the_batched_gemm_and_match_numpy(monkeypatch):
    from onyxrt_cpu.kernels import linalg

    rng = np.random.default_rng(5)
    q, k = _heads(rng, 50, 12, 64)
    calls = []
    original = native.gemm_batched
    monkeypatch.setattr(native, "GEMM_PREFERRED", True)
    monkeypatch.setattr(native, "gemm_batched", lambda *args: calls.append(1) or original(*args))
    y = linalg.matmul(q, k)
    assert calls and y.shape == (1, 12, 50, 50)
    _check_batched(y, q, k)
    v = q
    calls.clear()
    linalg.matmul(y, v)  # probabilities @ V: B row-major, numpy's loop over OpenBLAS
    assert not calls


@pytest.mark.parametrize("alpha, beta, trans_b, c_shape", [
    (-2.0, 1.0, 1, (1, 1)),    # KMeans' conversion: -2 X Cᵀ + |X|² (C an input of one column)
    (0.5, 2.0, 0, (1, 5)),
    (1.0, 0.5, 1, (5,)),
    (3.0, 0.0, 0, (1, 1)),     # beta 0: C ignored
    (-1.5, 1.0, 1, None),
])
def test_batch_one_gemm_with_an_input_c_or_alpha_takes_the_one_row_product(alpha, beta, trans_b, c_shape):
    """A float32 row times a constant B with alpha other than 1 or C an input: the product
    by the compiled one-row call, alpha and beta C after it, as the general path (checked
    on a 3-row batch, which takes it) and onnxruntime give; a C that does not broadcast is
    refused as there."""
    rng = np.random.default_rng(11)
    w = rng.standard_normal((5, 8) if trans_b else (8, 5), dtype=np.float32)
    inputs = ["a", "w"] + (["c"] if c_shape is not None else [])
    node = helper.make_node("Gemm", inputs, ["y"], alpha=alpha, beta=beta, transB=trans_b)
    kdef, reason = registry.lookup("", "Gemm", 13)
    assert kdef is not None, reason
    kernel = kdef.factory(KernelInfo.from_node(node, 13, since_version=kdef.since_version, constants={1: w}))
    assert (kernel._gemv_plain is not None) == native.ENABLED
    rows = rng.standard_normal((3, 8), dtype=np.float32)
    # a one-column C is one value per row (|X|² in KMeans'); the others are shared by the rows
    per_row = c_shape == (1, 1)
    c3 = None if c_shape is None else rng.standard_normal((3, 1) if per_row else c_shape, dtype=np.float32)
    batch = kernel.compute(rows, w, c3)[0]
    for i in range(3):
        c = c3[i:i + 1] if per_row else c3
        (one,) = kernel.compute(rows[i:i + 1], w, c)
        assert one.dtype == np.float32 and one.shape == (1, 5)
        np.testing.assert_allclose(one[0], batch[i], rtol=1e-6, atol=1e-6)
        (want,) = onnxruntime_gemm(rows[i:i + 1], w, c, alpha, beta, trans_b)
        np.testing.assert_allclose(one, want, rtol=1e-6, atol=1e-6)
    if c_shape is not None and beta != 0.0:
        with pytest.raises(ValueError, match="does not broadcast"):
            kernel.compute(rows[:1], w, np.ones((2, 5), np.float32))


def onnxruntime_gemm(a, w, c, alpha, beta, trans_b):
    import onnxruntime as ort
    from onnx import TensorProto

    inputs = [helper.make_tensor_value_info("a", TensorProto.FLOAT, list(a.shape))]
    feeds = {"a": a}
    names = ["a", "w"]
    if c is not None:
        inputs.append(helper.make_tensor_value_info("c", TensorProto.FLOAT, list(c.shape)))
        feeds["c"] = c
        names.append("c")
    graph = helper.make_graph([helper.make_node("Gemm", names, ["y"], alpha=alpha, beta=beta, transB=trans_b)],
                              "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [helper.make_tensor("w", TensorProto.FLOAT, w.shape, w.ravel())])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=9)
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
