"""Tests of the com.microsoft quantization and weight-only operators
(:mod:`onyxrt_ops.contrib_quantization`) against onnxruntime's CPU kernels."""

from __future__ import annotations

import numpy as np
import pytest
from library_harness import bind, domain_node, ort_outputs, run_node
from onnx import TensorProto, helper

RNG = np.random.default_rng(21)
U8, I8 = np.uint8, np.int8


def q8(shape, dt=U8):
    ii = np.iinfo(dt)
    return RNG.integers(ii.min, int(ii.max) + 1, size=shape).astype(dt)


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def s(v):
    return np.float32(v)


def z(v, dt=U8):
    return np.array(v, dtype=dt)


def shift(v, dt):
    """A uint8 parameter ``v`` moved to ``dt``'s range."""
    return v if dt == U8 else v - 128


def check_exact(bound, n, inputs, host_inputs=()):
    got = run_node(bound, n, inputs, host_inputs=host_inputs)
    want = ort_outputs(n, inputs)
    assert got[0].dtype == want[0].dtype and got[0].shape == want[0].shape
    np.testing.assert_array_equal(got[0], want[0])
    return got[0]


def off_by_one(got, want, limit):
    """Elements one unit away (onnxruntime's float path differs in the last bit); none
    further away, at most ``limit`` of them."""
    d = np.abs(got.astype(np.int32) - want.astype(np.int32))
    assert d.max(initial=0) <= 1, d.max()
    assert int((d == 1).sum()) <= limit, int((d == 1).sum())


# ------------------------------------------------------------ QuantizeLinear / Dequantize


@pytest.mark.parametrize("dt", [U8, I8, np.int16, np.uint16])
def test_quantize_dequantize_per_tensor_and_axis(bound, dt):
    x = (f32(2, 3, 4) * 50).astype(np.float32)
    x[0, 0, :2] = [0.5, 1.5]  # ties round half to even
    for scale, zp, axis in ((s(0.5), z(3, dt), 1), (np.array([0.5, 1, 2], np.float32), z([1, 2, 3], dt), 1),
                            (np.array([0.25, 4, 1, 2], np.float32), z([0, 1, 2, 3], dt), -1)):
        n = domain_node("QuantizeLinear", [x, scale, zp], axis=axis)
        q = check_exact(bound, n, [x, scale, zp])
        n = domain_node("DequantizeLinear", [q, scale, zp], axis=axis)
        got, want = run_node(bound, n, [q, scale, zp])[0], ort_outputs(n, [q, scale, zp])[0]
        np.testing.assert_array_equal(got, want)
    n = domain_node("QuantizeLinear", [x, s(0.3)])  # no zero point: uint8
    assert check_exact(bound, n, [x, s(0.3)]).dtype == U8


def test_dequantize_int32(bound):
    x = RNG.integers(-(1 << 20), 1 << 20, size=(3, 5)).astype(np.int32)
    n = domain_node("DequantizeLinear", [x, s(0.01), z(7, np.int32)])
    got, want = run_node(bound, n, [x, s(0.01), z(7, np.int32)])[0], ort_outputs(n, [x, s(0.01), z(7, np.int32)])[0]
    np.testing.assert_array_equal(got, want)


def test_4bit_quantize_dequantize_session():
    """int4/uint4 (the CPU provider's override; onnxruntime's Python API takes no 4-bit
    feeds): x → QuantizeLinear → DequantizeLinear, per-axis and per-tensor, in a session."""
    import ml_dtypes
    import onnxruntime as ort
    from onnx import numpy_helper

    import onyxrt

    x = (f32(3, 4) * 6).astype(np.float32)
    x[0, :2] = [0.5, -1.5]  # ties
    for scale, zp in ((np.array([0.5, 1, 2], np.float32), np.array([1, -2, 0], ml_dtypes.int4)),
                      (np.array(0.7, np.float32), np.array(8, ml_dtypes.uint4))):
        graph = helper.make_graph(
            [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], domain="com.microsoft", axis=0),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], domain="com.microsoft", axis=0)],
            "q4", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])],
            [numpy_helper.from_array(scale, "s"), numpy_helper.from_array(zp, "z")])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid(
            "com.microsoft", 1)], ir_version=10).SerializeToString()
        got = onyxrt.InferenceSession(model).run(None, {"x": x})[0]
        want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
        np.testing.assert_array_equal(got, want)


# -------------------------------------------------------------------- lookup-table unary


@pytest.mark.parametrize("dt", [U8, I8])
def test_qlinear_leaky_relu_all_levels(bound, dt):
    x = np.arange(np.iinfo(dt).min, int(np.iinfo(dt).max) + 1).astype(dt).reshape(16, 16)
    for alpha, xz, yz in ((0.01, 128 if dt == U8 else 0, 100 if dt == U8 else -5), (0.37, 3, 9)):
        ins = [x, s(0.05), z(xz, dt), s(0.03), z(yz, dt)]
        check_exact(bound, domain_node("QLinearLeakyRelu", ins, alpha=alpha), ins)
    # (onnxruntime 1.32 aborts the process when the zero points are absent: not compared.)


@pytest.mark.parametrize("dt", [U8, I8])
def test_qlinear_sigmoid_all_levels(bound, dt):
    x = np.arange(np.iinfo(dt).min, int(np.iinfo(dt).max) + 1).astype(dt).reshape(2, 128)
    for xs, xz, ys, yz in ((0.05, 120, 1 / 256, 0), (0.2, 7, 1 / 200, 3)):
        ins = [x, s(xs), z(shift(xz, dt), dt), s(ys), z(shift(yz, dt), dt)]
        n = domain_node("QLinearSigmoid", ins)
        got, want = run_node(bound, n, ins)[0], ort_outputs(n, ins)[0]
        # onnxruntime's table holds MLAS's polynomial logistic, not the exact one: a level
        # whose value lies within an ulp of a rounding boundary may land one unit away.
        off_by_one(got, want, limit=2)


# ------------------------------------------------------------------------- binary ops


@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
@pytest.mark.parametrize("dt", [U8, I8])
def test_qlinear_binary(bound, op, dt):
    a, b = q8((3, 4, 5), dt), q8((4, 1), dt)  # broadcasting
    for params in ((0.02, 3, 0.03, 250, 0.05, 10), (0.1, 0, 0.1, 0, 0.1, 0), (0.013, 128, 0.021, 64, 0.007, 200)):
        sa, za, sb, zb, sc, zc = params
        ins = [a, s(sa), z(shift(za, dt), dt), b, s(sb), z(shift(zb, dt), dt), s(sc), z(shift(zc, dt), dt)]
        check_exact(bound, domain_node(op, ins), ins)
    # (Zero points absent: onnxruntime's type inference refuses the node, not compared.)


# ---------------------------------------------------------------------------- softmax


@pytest.mark.parametrize("dt", [U8, I8])
@pytest.mark.parametrize("opset,axis", [(13, -1), (13, 1), (12, 1), (12, 2), (13, None)])
def test_qlinear_softmax(bound, dt, opset, axis):
    x = q8((2, 3, 16), dt)
    yz = z(0 if dt == U8 else -128, dt)
    ins = [x, s(0.1), z(5 if dt == U8 else -3, dt), s(1 / 256), yz]
    attrs = {"opset": opset} if axis is None else {"opset": opset, "axis": axis}
    n = domain_node("QLinearSoftmax", ins, **attrs)
    got, want = run_node(bound, n, ins)[0], ort_outputs(n, ins)[0]
    # onnxruntime sums a row's table values one by one in float32; the backend's sum may
    # be pairwise: a quotient within an ulp of .5 may round the other way.
    off_by_one(got, want, limit=2)


# --------------------------------------------------------------------- concat, where


@pytest.mark.parametrize("dt", [U8, I8])
def test_qlinear_concat(bound, dt):
    a, b, c = q8((2, 3, 4), dt), q8((2, 1, 4), dt), q8((2, 2, 4), dt)
    yz = z(10, dt)
    ins = [s(0.05), yz, a, s(0.05), yz, b, s(0.1), z(3, dt), c, s(0.013), z(-4 if dt == I8 else 200, dt)]
    check_exact(bound, domain_node("QLinearConcat", ins, axis=1), ins)
    ins2 = [s(0.05), yz, a, s(0.02), z(0, dt), a, s(0.07), z(1, dt)]
    check_exact(bound, domain_node("QLinearConcat", ins2, axis=-1), ins2)


@pytest.mark.parametrize("dt", [U8, I8])
def test_qlinear_where(bound, dt):
    cond = RNG.random((3, 1, 5)) > 0.5
    x, y = q8((1, 4, 5), dt), q8((3, 4, 1), dt)
    ins = [cond, x, s(0.05), z(3, dt), y, s(0.2), z(7, dt), s(0.1), z(1, dt)]
    check_exact(bound, domain_node("QLinearWhere", ins), ins)
    ins = [cond, x, s(0.1), z(1, dt), y, s(0.1), z(1, dt), s(0.1), z(1, dt)]  # same parameters
    check_exact(bound, domain_node("QLinearWhere", ins), ins)


# ------------------------------------------------------------------------------ pools


@pytest.mark.parametrize("dt", [U8, I8])
@pytest.mark.parametrize("channels_last", [0, 1])
@pytest.mark.parametrize("attrs", [
    {"kernel_shape": [3, 3]},
    {"kernel_shape": [2, 3], "strides": [2, 1], "pads": [1, 0, 1, 1]},
    {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1},
    {"kernel_shape": [2, 2], "strides": [2, 2], "auto_pad": "SAME_UPPER"},
])
def test_qlinear_average_pool(bound, dt, channels_last, attrs):
    x = q8((2, 3, 7, 6), dt)
    if channels_last:
        x = np.ascontiguousarray(np.moveaxis(x, 1, -1))
    ins = [x, s(0.03), z(5, dt), s(0.05), z(9, dt)]
    check_exact(bound, domain_node("QLinearAveragePool", ins, channels_last=channels_last, **attrs), ins)


def test_qlinear_average_pool_1d(bound):
    x = q8((1, 2, 9))
    ins = [x, s(0.03), z(5), s(0.02), None]
    check_exact(bound, domain_node("QLinearAveragePool", ins, kernel_shape=[4], strides=[2]), ins)


@pytest.mark.parametrize("dt", [U8, I8])
@pytest.mark.parametrize("channels_last", [0, 1])
def test_qlinear_global_average_pool(bound, dt, channels_last):
    for shape in ((2, 3, 5, 7), (1, 4, 9), (1, 2, 3, 3, 2)):
        x = q8(shape, dt)
        for xs, xz, ys, yz in ((0.03, 5, 0.05, 9), (0.1, 0, 0.013, -3 if dt == I8 else 128)):
            ins = [x, s(xs), z(xz, dt), s(ys), z(yz, dt)]
            check_exact(bound, domain_node("QLinearGlobalAveragePool", ins, channels_last=channels_last), ins)


# ------------------------------------------------------------------------------ conv


@pytest.mark.parametrize("wdt", [U8, I8])
@pytest.mark.parametrize("channels_last", [0, 1])
def test_qlinear_conv(bound, wdt, channels_last):
    x, w = q8((1, 4, 6, 5)), q8((6, 2, 3, 3), wdt)
    bias = RNG.integers(-500, 500, size=6).astype(np.int32)
    if channels_last:
        x = np.ascontiguousarray(np.moveaxis(x, 1, -1))
    ws = (RNG.random(6).astype(np.float32) * 0.01 + 0.001)
    ins = [x, s(0.02), z(7), w, ws, z(np.zeros(6), wdt), s(0.3), z(100), bias]
    check_exact(bound, domain_node("QLinearConv", ins, group=2, pads=[1, 1, 1, 1], channels_last=channels_last), ins)
    ins = [x, s(0.02), z(7), w, s(0.004), z(0, wdt), s(0.25), z(120)]  # per-tensor, no bias
    check_exact(bound, domain_node("QLinearConv", ins, group=2, strides=[2, 1], channels_last=channels_last), ins)


def test_qlinear_conv_int8(bound):
    x, w = q8((2, 3, 5, 5), I8), q8((4, 3, 2, 2), I8)
    ins = [x, s(0.02), z(-3, I8), w, s(0.005), z(0, I8), s(0.1), z(2, I8)]
    check_exact(bound, domain_node("QLinearConv", ins, dilations=[2, 2]), ins)


# ------------------------------------------------------------------- integer products


def test_matmul_integer_to_float(bound):
    a = q8((2, 3, 8))
    for bdt in (U8, I8):
        b = q8((8, 5), bdt)
        bs = (RNG.random(5) * 0.1).astype(np.float32)
        ins = [a, b, s(0.02), bs, z(128), z(RNG.integers(0, 100, size=5), bdt), f32(5)]
        got, want = run_node(bound, domain_node("MatMulIntegerToFloat", ins), ins)[0], ort_outputs(
            domain_node("MatMulIntegerToFloat", ins), ins)[0]
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
        ins = [a, b, s(0.02), s(0.03)]  # per-tensor, zero points and bias absent
        n = domain_node("MatMulIntegerToFloat", ins)
        np.testing.assert_allclose(run_node(bound, n, ins)[0], ort_outputs(n, ins)[0], rtol=1e-6, atol=1e-6)
    ai, bi = q8((4, 8), I8), q8((8, 3), I8)
    ins = [ai, bi, s(0.02), s(0.03), z(-2, I8), z(1, I8), f32(3)]
    n = domain_node("MatMulIntegerToFloat", ins)
    np.testing.assert_allclose(run_node(bound, n, ins)[0], ort_outputs(n, ins)[0], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("bdt", [U8, I8])
def test_dynamic_quantize_matmul(bound, bdt):
    b = q8((16, 6), bdt)
    bs = (RNG.random(6) * 0.05 + 0.01).astype(np.float32)
    for a in (f32(3, 16), np.abs(f32(2, 2, 16)), -np.abs(f32(3, 16)), np.zeros((2, 16), np.float32)):
        for ins in ([a, b, bs, z(RNG.integers(0, 50, size=6), bdt), f32(6)], [a, b, s(0.02)]):
            n = domain_node("DynamicQuantizeMatMul", ins)
            got, want = run_node(bound, n, ins)[0], ort_outputs(n, ins)[0]
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_matmul_integer16(bound):
    a = RNG.integers(-32768, 32767, size=(2, 3, 7)).astype(np.int16)
    b = RNG.integers(-32768, 32767, size=(7, 4)).astype(np.int16)
    check_exact(bound, domain_node("MatMulInteger16", [a, b]), [a, b])


@pytest.mark.parametrize("adt,bdt", [(U8, U8), (U8, I8), (I8, I8)])
@pytest.mark.parametrize("trans", [(0, 0), (1, 1)])
def test_qgemm(bound, adt, bdt, trans):
    ta, tb = trans
    a = q8((8, 5) if ta else (5, 8), adt)
    b = q8((6, 8) if tb else (8, 6), bdt)
    c = RNG.integers(-1000, 1000, size=(6,)).astype(np.int32)
    bs = (RNG.random(6) * 0.02 + 0.001).astype(np.float32)
    bz = z(np.zeros(6), bdt) if bdt == I8 else z(RNG.integers(100, 150, size=6), bdt)
    for extra in ([c], [None], [c, s(0.05), z(3, adt)], [None, s(0.2), z(-1 if adt == I8 else 128, adt)]):
        ins = [a, s(0.03), z(2, adt), b, bs, bz, *extra]
        n = domain_node("QGemm", ins, transA=ta, transB=tb, alpha=0.7)
        got, want = run_node(bound, n, ins)[0], ort_outputs(n, ins)[0]
        if want.dtype == np.float32:
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
        else:
            np.testing.assert_array_equal(got, want)
    ins = [a, s(0.03), z(2, adt), b, s(0.01), z(0, bdt), None, s(0.1), z(0, adt)]  # per-tensor B
    check_exact(bound, domain_node("QGemm", ins, transA=ta, transB=tb), ins)


# ----------------------------------------------------------------- weight-only: NBits


def quantize_nbits(w, bits, block, *, zp_kind="packed"):
    """Blockwise-quantize w (K, N) like onnxruntime's quantizer: B [N, kb, blob] packed
    low bits first, scales [N, kb], zero points packed uint8 / float / None."""
    k, n = w.shape
    kb = -(-k // block)
    wt = np.zeros((n, kb * block), np.float32)
    wt[:, :k] = w.T
    blocks = wt.reshape(n, kb, block)
    qmax = (1 << bits) - 1
    lo, hi = np.minimum(blocks.min(-1), 0), np.maximum(blocks.max(-1), 0)
    scale = ((hi - lo) / qmax).astype(np.float32)
    scale[scale == 0] = 1
    zp = np.clip(np.round(-lo / scale), 0, qmax).astype(np.uint8)
    if zp_kind == "none":
        zp = np.full_like(zp, 1 << (bits - 1))
    q = np.clip(np.round(blocks / scale[..., None]) + zp[..., None], 0, qmax).astype(np.uint8)
    per = 8 // bits

    def pack(v):
        v = v.reshape(v.shape[0], -1)
        pad = (-v.shape[1]) % per
        v = np.concatenate([v, np.zeros((v.shape[0], pad), np.uint8)], axis=1).reshape(v.shape[0], -1, per)
        return sum((v[..., i].astype(np.uint16) << (bits * i)) for i in range(per)).astype(np.uint8)

    packed = pack(q.reshape(n, -1)).reshape(n, kb, block * bits // 8)
    zps = {"packed": pack(zp).reshape(-1), "float": zp.astype(np.float32).reshape(-1) * 1.0, "none": None}[zp_kind]
    return packed, scale.reshape(-1), zps


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("block", [16, 32, 64, 128])
@pytest.mark.parametrize("zp_kind", ["packed", "float", "none"])
def test_matmul_nbits(bound, bits, block, zp_kind):
    if bits == 8 and zp_kind == "float":
        # onnxruntime's CPU kernel refuses float zero points with 8 bits (onyxrt computes them).
        bits = 4
    k, n = 80, 7  # K not a multiple of the block
    w = f32(k, n)
    b, scales, zps = quantize_nbits(w, bits, block, zp_kind=zp_kind)
    a = f32(2, 3, k)
    bias = f32(n)
    for ins in ([a, b, scales, zps, None, bias], [a, b, scales, zps]):
        n_ = domain_node("MatMulNBits", ins, K=k, N=n, bits=bits, block_size=block, accuracy_level=0)
        got, want = run_node(bound, n_, ins)[0], ort_outputs(n_, ins)[0]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_matmul_nbits_float16(numpy_bound):
    k, n = 64, 5
    b, scales, zps = quantize_nbits(f32(k, n), 4, 32)
    a = f32(3, k).astype(np.float16)
    ins = [a, b, scales.astype(np.float16), zps]
    node = domain_node("MatMulNBits", ins, K=k, N=n, bits=4, block_size=32)
    got, want = run_node(numpy_bound, node, ins)[0], ort_outputs(node, ins)[0]
    assert got.dtype == np.float16
    # onnxruntime's fp16 path rounds the dequantized weights to float16 before the
    # product; onyxrt computes in float32 and rounds once: within float16's precision.
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=1e-2, atol=1e-2)


# -------------------------------------------------------- weight-only: GatherBlockQuantized


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("with_zp", [True, False])
@pytest.mark.parametrize("block", [16, 32])
def test_gather_block_quantized(bound, bits, with_zp, block):
    per = 8 // bits
    rows, cols = 10, 48
    q = RNG.integers(0, 1 << bits, size=(rows, cols)).astype(np.uint8)
    packed = q.reshape(rows, cols // per, per)
    data = sum((packed[..., i].astype(np.uint16) << (bits * i)) for i in range(per)).astype(np.uint8)
    kb = -(-cols // block)
    scales = (RNG.random((rows, kb)) * 0.1 + 0.01).astype(np.float32)
    zq = RNG.integers(0, 1 << bits, size=(rows, kb)).astype(np.uint8)
    if bits == 4:
        zq = np.concatenate([zq, np.zeros((rows, kb % 2), np.uint8)], axis=1).reshape(rows, -1, 2)
        zq = (zq[..., 0] | (zq[..., 1] << 4)).astype(np.uint8)
    idx = np.array([[0, 9, -1], [3, 3, 5]], np.int64)
    for idt in (np.int64, np.int32):
        ins = [data, idx.astype(idt), scales] + ([zq] if with_zp else [])
        n = domain_node("GatherBlockQuantized", ins, bits=bits, block_size=block, gather_axis=0, quantize_axis=1)
        got, want = run_node(bound, n, ins)[0], ort_outputs(n, ins)[0]
        np.testing.assert_array_equal(got, want)


def test_gather_block_quantized_float16(numpy_bound):
    data = RNG.integers(0, 256, size=(6, 16)).astype(np.uint8)
    scales = (RNG.random((6, 1)) * 0.1).astype(np.float16)
    ins = [data, np.array([1, 5, 0], np.int32), scales]
    n = domain_node("GatherBlockQuantized", ins, bits=4, block_size=32)
    got, want = run_node(numpy_bound, n, ins)[0], ort_outputs(n, ins)[0]
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got, want)


# ------------------------------------------------------------------------ GPU backend


def test_simulated_cupy_matches_numpy(numpy_bound):
    from onyxrt_gpu.kernels._common import BACKEND
    from onyxrt_gpu.testing.simulated_cupy import install

    b, scales, zps = quantize_nbits(f32(40, 6), 4, 16)
    cases = [
        (domain_node("MatMulNBits", [0, 0, 0, 0], K=40, N=6, bits=4, block_size=16), [f32(3, 40), b, scales, zps]),
        (domain_node("QLinearSoftmax", [0] * 5, opset=13), [q8((2, 8)), s(0.1), z(3), s(1 / 256), z(0)]),
        (domain_node("QLinearAdd", [0] * 8), [q8((2, 4)), s(0.1), z(3), q8((4,)), s(0.2), z(1), s(0.3), z(2)]),
        (domain_node("QLinearSigmoid", [0] * 5), [q8((3, 4), I8), s(0.1), z(3, I8), s(1 / 256), z(-128, I8)]),
        (domain_node("QGemm", [0] * 9), [q8((2, 4)), s(0.1), z(3), q8((4, 3), I8), s(0.2), z(0, I8), None,
                                         s(0.3), z(2)]),
        (domain_node("GatherBlockQuantized", [0] * 3, block_size=16), [q8((4, 8)), np.array([2, 0]),
                                                                       np.ones((4, 1), np.float32)]),
        (domain_node("QLinearGlobalAveragePool", [0] * 5, channels_last=1),
         [q8((1, 3, 3, 4)), s(0.1), z(3), s(0.05), z(1)]),
    ]
    with install():
        import cupy

        gpu = bind("cupy", BACKEND)
        gpu.array = cupy.asarray
        gpu.host = lambda v: v.get()
        for n, ins in cases:
            got = run_node(gpu, n, ins, host_inputs=(1, 3) if n.op_type == "QLinearSoftmax" else ())
            want = run_node(numpy_bound, n, ins)
            np.testing.assert_array_equal(got[0], want[0])


# ------------------------------------------------------------------------ errors


def test_errors(numpy_bound):
    from onyxrt.errors import InvalidGraph

    with pytest.raises(InvalidGraph, match="block_size"):
        run_node(numpy_bound, domain_node("MatMulNBits", [0] * 3, K=8, N=2, block_size=12), [None] * 3)
    with pytest.raises(InvalidGraph, match="opset"):
        run_node(numpy_bound, domain_node("QLinearSoftmax", [0] * 5), [None] * 5)
    n = domain_node("MatMulNBits", [0] * 3, K=32, N=2, block_size=16)
    with pytest.raises(ValueError, match="B has shape"):
        run_node(numpy_bound, n, [f32(1, 32), np.zeros((2, 3, 8), np.uint8), np.ones(4, np.float32)])
    n = domain_node("QLinearAdd", [0] * 8)
    with pytest.raises(ValueError, match="scalar"):
        run_node(numpy_bound, n, [q8(3), np.ones(3, np.float32), z(0), q8(3), s(1), z(0), s(1), z(0)])


# ----------------------------------------------------------------------- end to end


def _session_outputs(model_bytes, feeds):
    import onnxruntime as ort

    import onyxrt

    got = onyxrt.InferenceSession(model_bytes).run(None, feeds)[0]
    outs = []
    for level in (ort.GraphOptimizationLevel.ORT_DISABLE_ALL, ort.GraphOptimizationLevel.ORT_ENABLE_ALL):
        opts = ort.SessionOptions()
        opts.graph_optimization_level = level
        outs.append(ort.InferenceSession(model_bytes, opts, providers=["CPUExecutionProvider"]).run(None, feeds)[0])
    return got, outs


def _mlp(tmp_path, k=32, h=48, n=8):
    w1, b1, w2, b2 = f32(k, h), f32(h), f32(h, n), f32(n)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w1"], ["m1"]), helper.make_node("Add", ["m1", "b1"], ["a1"]),
         helper.make_node("Relu", ["a1"], ["r1"]), helper.make_node("MatMul", ["r1", "w2"], ["m2"]),
         helper.make_node("Add", ["m2", "b2"], ["y"])],
        "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", n])],
        [helper.make_tensor(nm, TensorProto.FLOAT, v.shape, v.reshape(-1)) for nm, v in
         (("w1", w1), ("b1", b1), ("w2", w2), ("b2", b2))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    path = tmp_path / "mlp.onnx"
    path.write_bytes(model.SerializeToString())
    return path


def test_end_to_end_quantize_dynamic(tmp_path):
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    src = _mlp(tmp_path)
    dst = tmp_path / "mlp.int8.onnx"
    quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8)
    # The optimized onnxruntime graph fuses into com.microsoft DynamicQuantizeMatMul /
    # MatMulIntegerToFloat: save it too, so both forms run through onyxrt.
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.optimized_model_filepath = str(tmp_path / "mlp.int8.opt.onnx")
    ort.InferenceSession(str(dst), opts, providers=["CPUExecutionProvider"])
    x = f32(4, 32)
    for path in (dst, tmp_path / "mlp.int8.opt.onnx"):
        model = onnx.load(str(path))
        got, (plain, optimized) = _session_outputs(model.SerializeToString(), {"x": x})
        spread = float(np.abs(plain - optimized).max())
        assert np.abs(got - plain).max() <= max(spread, 1e-5), (path.name, np.abs(got - plain).max(), spread)
    ops = {nd.op_type for nd in onnx.load(str(tmp_path / "mlp.int8.opt.onnx")).graph.node}
    assert ops & {"DynamicQuantizeMatMul", "MatMulIntegerToFloat"}, ops


def test_end_to_end_matmul_nbits(tmp_path):
    import onnx
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    model = onnx.load(str(_mlp(tmp_path, k=64, h=64, n=32)))
    quant = MatMulNBitsQuantizer(model, block_size=32, is_symmetric=False)
    quant.process()
    qmodel = quant.model.model
    assert "MatMulNBits" in {nd.op_type for nd in qmodel.graph.node}
    x = f32(3, 64)
    got, (plain, optimized) = _session_outputs(qmodel.SerializeToString(), {"x": x})
    spread = float(np.abs(plain - optimized).max())
    assert np.abs(got - plain).max() <= max(spread, 1e-4)


def test_zero_size(bound):
    a = np.zeros((0, 4), U8)
    ins = [a, s(0.1), z(3), q8((4,)), s(0.2), z(1), s(0.3), z(2)]
    check_exact(bound, domain_node("QLinearAdd", ins), ins)
    ins = [a, s(0.1), z(3), s(1 / 256), z(0)]
    check_exact(bound, domain_node("QLinearSigmoid", ins), ins)
    b, scales, zps = quantize_nbits(f32(32, 3), 4, 16)
    ins = [np.zeros((0, 32), np.float32), b, scales, zps]
    n = domain_node("MatMulNBits", ins, K=32, N=3, bits=4, block_size=16)
    got, want = run_node(bound, n, ins)[0], ort_outputs(n, ins)[0]
    assert got.shape == want.shape == (0, 3)


def test_end_to_end_qlinear_chain():
    """QLinearConv (NHWC) → QLinearLeakyRelu → QLinearAveragePool → QLinearGlobalAveragePool →
    QLinearSoftmax in one session (inputs uint8 X; everything else initializers)."""
    import onnxruntime as ort
    from onnx import numpy_helper

    import onyxrt

    w = q8((4, 3, 3, 3), I8)
    inits = {"xs": s(0.02), "xz": z(128), "w": w, "ws": s(0.01), "wz": z(0, I8), "ys": s(0.5), "yz": z(100),
             "ls": s(0.3), "lz": z(90), "ps": s(0.25), "pz": z(80), "gs": s(0.2), "gz": z(70), "ss": s(1 / 256),
             "sz": z(0)}
    ms = "com.microsoft"
    nodes = [
        helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["c"], domain=ms,
                         channels_last=1, pads=[1, 1, 1, 1]),
        helper.make_node("QLinearLeakyRelu", ["c", "ys", "yz", "ls", "lz"], ["l"], domain=ms, alpha=0.1),
        helper.make_node("QLinearAveragePool", ["l", "ls", "lz", "ps", "pz"], ["p"], domain=ms, channels_last=1,
                         kernel_shape=[2, 2]),
        helper.make_node("QLinearGlobalAveragePool", ["p", "ps", "pz", "gs", "gz"], ["g"], domain=ms, channels_last=1),
        helper.make_node("QLinearSoftmax", ["g", "gs", "gz", "ss", "sz"], ["y"], domain=ms, opset=13),
    ]
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.UINT8, [2, 6, 6, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.UINT8, None)],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(ms, 1)],
                              ir_version=8).SerializeToString()
    x = q8((2, 6, 6, 3))
    got = onyxrt.InferenceSession(model).run(None, {"x": x})[0]
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert got.shape == want.shape == (2, 1, 1, 4) and len(np.unique(want)) > 2
    off_by_one(got, want, limit=1)  # the softmax's row-sum order (see test_qlinear_softmax)
