"""Tests of the com.microsoft quantization and weight-only operators
(:mod:`onyxrt_ops.contrib_quantization`) against onnxruntime's CPU kernels."""

from __future__ import annotations

import numpy as np
import pytest
from library_harness import bind, domain_node, ort_outputs, run_node
from onnx import TensorProto, helper, numpy_helper

from onyxrt.errors import InvalidGraph

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


# ------------------------------------------------------------------ DynamicQuantizeLSTM


def ort_serial(n, inputs, opset=1):
    """onnxruntime's outputs on one thread: its batch-parallel paths (LSTM) quantize each
    thread's rows separately, so its results depend on the thread count."""
    import onnxruntime as ort

    feeds = {name: np.asarray(v) for name, v in zip(n.input, inputs) if name}
    infos = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape))
             for k, v in feeds.items()]
    graph = helper.make_graph([n], "oracle", infos, [helper.make_empty_tensor_value_info(o) for o in n.output if o])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid(n.domain, opset)],
                              ir_version=10)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def lstm_case(seq=4, batch=3, isz=5, hs=3, dirs=1, wdt=I8, per_column=True, bias=True, peep=False,
              states=False, lens=None):
    """DynamicQuantizeLSTM inputs: float weights quantized per column (or per tensor)."""
    def quantize(w):  # [dirs, K, 4H]
        axis = (1,) if per_column else (1, 2)
        amax = np.abs(w).max(axis=axis, keepdims=True)
        scale = (amax / (127 if wdt == I8 else 100)).astype(np.float32)
        zp = np.zeros(scale.shape, np.uint8 if wdt == U8 else np.int8) + (128 if wdt == U8 else 0)
        q = np.clip(np.round(w / scale) + zp.astype(np.float32), *(-128, 127) if wdt == I8 else (0, 255)).astype(wdt)
        shape = (dirs, 4 * hs) if per_column else (dirs,)
        return q, scale.reshape(shape), np.broadcast_to(zp, scale.shape).reshape(shape).astype(wdt)

    w, ws, wz = quantize(f32(dirs, isz, 4 * hs) * 0.5)
    r, rs, rz = quantize(f32(dirs, hs, 4 * hs) * 0.5)
    return [f32(seq, batch, isz), w, r, f32(dirs, 8 * hs) * 0.1 if bias else None,
            None if lens is None else np.array(lens, np.int32),
            f32(dirs, batch, hs) if states else None, f32(dirs, batch, hs) if states else None,
            f32(dirs, 3 * hs) * 0.1 if peep else None, ws, wz, rs, rz]


def lstm_node(inputs, outs=("Y", "Y_h", "Y_c"), **attrs):
    names = ["X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P",
             "W_scale", "W_zero_point", "R_scale", "R_zero_point"]
    return helper.make_node("DynamicQuantizeLSTM", [nm if v is not None else "" for nm, v in zip(names, inputs)],
                            list(outs), domain="com.microsoft", **attrs)


# Quantizing H at every step amplifies onnxruntime's approximate sigmoid/tanh (MLAS, ~1e-7)
# when a value sits on a rounding boundary: one quantization step of H (~1e-3 of its range)
# then moves a gate by about ``scale_h * scale_r * |R|``. The bound below allows that, far
# below what a wrong quantization range, zero point or step order would give.
LSTM_TOL = dict(rtol=1e-4, atol=2e-4)


def check_lstm(bound, inputs, outs=("Y", "Y_h", "Y_c"), **attrs):
    n = lstm_node(inputs, outs, hidden_size=inputs[2].shape[1], **attrs)
    got = run_node(bound, n, inputs, host_inputs=(4,))
    got = [g for g, o in zip(got, outs) if o]  # the kernel computes Y even when unrequested
    want = ort_serial(n, inputs)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, **LSTM_TOL)
    return got


@pytest.mark.parametrize("wdt", [I8, U8])
@pytest.mark.parametrize("per_column", [True, False])
def test_dynamic_quantize_lstm(bound, wdt, per_column):
    check_lstm(bound, lstm_case(wdt=wdt, per_column=per_column))


# Without Y, onnxruntime quantizes H from its Y_h buffer, whose row of an empty sequence it
# never writes: uninitialized memory (its results vary run to run), hence no such case.
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize(("lens", "outs"), [(None, ("Y", "Y_h", "Y_c")), ([4, 2, 0], ("Y", "Y_h", "Y_c")),
                                            ([3, 1, 2], ("Y", "Y_h", "Y_c")), (None, ("", "Y_h", "Y_c")),
                                            ([3, 1, 2], ("", "Y_h", "Y_c")), ([2, 2, 2], ("Y", "", "Y_c"))])
def test_dynamic_quantize_lstm_directions_lengths(bound, direction, lens, outs):
    dirs = 2 if direction == "bidirectional" else 1
    check_lstm(bound, lstm_case(dirs=dirs, lens=lens, states=True, peep=True), outs, direction=direction)


def test_dynamic_quantize_lstm_attributes(numpy_bound):
    check_lstm(numpy_bound, lstm_case(bias=False, hs=4, isz=300), clip=0.8)  # K > 258: float64 sums
    check_lstm(numpy_bound, lstm_case(states=True), input_forget=1)
    check_lstm(numpy_bound, lstm_case(dirs=2), direction="bidirectional",
               activations=["HardSigmoid", "Tanh", "Relu", "Sigmoid", "Tanh", "Tanh"])
    check_lstm(numpy_bound, lstm_case(batch=1, seq=1))


def test_dynamic_quantize_lstm_zero_size(bound):
    check_lstm(bound, lstm_case(batch=2, lens=[0, 0], states=True), direction="reverse")
    # An empty batch aborts onnxruntime 1.32's process (a min/max over no rows) and an empty
    # sequence leaves its Y_h/Y_c uninitialized: shapes, and the zero states of ``lens == 0``.
    for seq, batch, shapes in ((4, 0, [(4, 2, 0, 3), (2, 0, 3), (2, 0, 3)]), (0, 2, [(0, 2, 2, 3), (2, 2, 3), (2, 2, 3)])):
        inputs = lstm_case(seq=seq, batch=batch, dirs=2, states=True)
        got = run_node(bound, lstm_node(inputs, hidden_size=3, direction="bidirectional"), inputs, host_inputs=(4,))
        assert [g.shape for g in got] == shapes
        assert not any(g.any() for g in got)


def test_dynamic_quantize_lstm_errors(numpy_bound):
    inputs = lstm_case()
    bad_zp = list(inputs)
    bad_zp[9] = np.arange(12, dtype=np.int8).reshape(1, 12)  # int8 weights need zero points 0
    with pytest.raises(ValueError, match="zero point"):
        run_node(numpy_bound, lstm_node(bad_zp, hidden_size=3), bad_zp, host_inputs=(4,))
    with pytest.raises(ValueError, match="W"):
        bad_w = [inputs[0], inputs[1][:, :2], *inputs[2:]]
        run_node(numpy_bound, lstm_node(bad_w, hidden_size=3), bad_w, host_inputs=(4,))
    with pytest.raises(InvalidGraph):
        run_node(numpy_bound, lstm_node(inputs, hidden_size=3, layout=1), inputs, host_inputs=(4,))


def test_dynamic_quantize_lstm_simulated_cupy(numpy_bound):
    from onyxrt_gpu.kernels._common import BACKEND
    from onyxrt_gpu.testing.simulated_cupy import install

    inputs = lstm_case(dirs=2, lens=[4, 1, 3], states=True, peep=True)
    n = lstm_node(inputs, hidden_size=3, direction="bidirectional")
    want = run_node(numpy_bound, n, inputs, host_inputs=(4,))
    with install():
        import cupy

        gpu = bind("cupy", BACKEND)
        gpu.array = cupy.asarray
        gpu.host = lambda v: v.get()
        got = run_node(gpu, n, inputs, host_inputs=(4,))
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-7)


def test_end_to_end_dynamic_quantize_lstm():
    """A quantized-LSTM OCR head (DynamicQuantizeLSTM → MatMul → Softmax), as onnxruntime's
    dynamic quantization writes it, through onyxrt's session vs onnxruntime."""
    import onnxruntime as ort

    import onyxrt

    inputs = lstm_case(seq=6, batch=1, isz=8, hs=4, dirs=2)
    names = ["X", "W", "R", "B", "", "", "", "", "W_scale", "W_zero_point", "R_scale", "R_zero_point"]
    inits = [numpy_helper.from_array(v, nm) for nm, v in zip(names, inputs) if nm and nm != "X"]
    inits.append(numpy_helper.from_array(f32(8, 5), "proj"))
    nodes = [helper.make_node("DynamicQuantizeLSTM", names, ["Y", "", ""], domain="com.microsoft",
                              hidden_size=4, direction="bidirectional"),
             helper.make_node("Transpose", ["Y"], ["Yt"], perm=[0, 2, 1, 3]),
             helper.make_node("Reshape", ["Yt", "shape"], ["Yr"]),
             helper.make_node("MatMul", ["Yr", "proj"], ["logits"]),
             helper.make_node("Softmax", ["logits"], ["probs"], axis=-1)]
    inits.append(numpy_helper.from_array(np.array([0, 0, 8], np.int64), "shape"))
    graph = helper.make_graph(nodes, "ocr", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, 1, 8])],
                              [helper.make_tensor_value_info("probs", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
                              ir_version=9).SerializeToString()
    x = f32(6, 1, 8)
    got = onyxrt.InferenceSession(model).run(None, {"X": x})[0]
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    want = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"]).run(None, {"X": x})[0]
    assert got.shape == want.shape == (6, 1, 5)
    np.testing.assert_allclose(got, want, **LSTM_TOL)


# ------------------------------------------------------------------------ QAttention


def qattention_case(b=2, s=3, d=8, wdt=I8, per_column=False, mask=None, past=0, heads=2):
    x, w = q8((b, s, d)), q8((d, 3 * d), wdt)
    wscale = (RNG.random(3 * d) * 0.01 + 0.002).astype(np.float32) if per_column else np.array(0.004, np.float32)
    wzp = (shift(q8(3 * d) // 16 + 120, wdt).astype(wdt) if per_column else z(shift(130, wdt), wdt)) \
        if wdt == U8 else (np.zeros(3 * d, I8) if per_column else z(0, I8))
    pst = f32(2, b, heads, past, d // heads) if past else None
    return [x, w, f32(3 * d) * 0.1, np.array(0.02, np.float32), wscale, mask, z(128), wzp, pst]


# onnxruntime scales the exact integer sums where this dequantizes first: float32 rounding
# of the projection, carried through the softmax.
QATT_TOL = dict(rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("wdt", [I8, U8])
@pytest.mark.parametrize("per_column", [False, True])
def test_qattention(bound, wdt, per_column):
    inputs = qattention_case(wdt=wdt, per_column=per_column)
    n = domain_node("QAttention", inputs, num_heads=2)
    got, want = run_node(bound, n, inputs), ort_outputs(n, inputs)
    np.testing.assert_allclose(got[0], want[0], **QATT_TOL)


@pytest.mark.parametrize(("mask", "attrs"), [
    (np.array([3, 1], np.int32), {}),
    (np.array([3, 2, 0, 1], np.int32), {}),
    (np.array([[1, 1, 0, 1, 0], [1, 0, 1, 1, 1]], np.int32), {}),
    (None, {"unidirectional": 1}),
    (np.array([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]], np.int32), {"unidirectional": 1, "mask_filter_value": -1e4}),
    (None, {"scale": 0.5}),
])
def test_qattention_masks_past(bound, mask, attrs):
    inputs = qattention_case(mask=mask, past=2 if mask is None or mask.ndim == 2 else 0)
    if mask is not None and mask.ndim == 1:
        inputs[8] = None
    n = domain_node("QAttention", inputs, 2, num_heads=2, **attrs)
    got, want = run_node(bound, n, inputs), ort_outputs(n, inputs)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, **QATT_TOL)


def test_qattention_optional_absent_and_zero_batch(bound):
    inputs = qattention_case(b=1)
    inputs[6] = inputs[7] = None  # zero points default to 0
    n = domain_node("QAttention", inputs, num_heads=2)
    np.testing.assert_allclose(run_node(bound, n, inputs)[0], ort_outputs(n, inputs)[0], **QATT_TOL)
    # An empty batch kills onnxruntime 1.32's process (SIGFPE): the shape only.
    inputs = qattention_case(b=0)
    assert run_node(bound, domain_node("QAttention", inputs, num_heads=2), inputs)[0].shape == (0, 3, 8)


def test_end_to_end_qattention():
    """QAttention on a quantized input through onyxrt's session vs onnxruntime."""
    import onnxruntime as ort

    import onyxrt

    inputs = qattention_case(b=2, s=4, per_column=True)
    names = ["input", "weight", "bias", "input_scale", "weight_scale", "", "input_zero_point", "weight_zero_point"]
    inits = [numpy_helper.from_array(v, nm) for nm, v in zip(names, inputs) if nm and nm != "input"]
    nodes = [helper.make_node("QAttention", names, ["out"], domain="com.microsoft", num_heads=2),
             helper.make_node("ReduceMean", ["out"], ["pooled"], axes=[1])]
    graph = helper.make_graph(nodes, "qatt", [helper.make_tensor_value_info("input", TensorProto.UINT8, [None, None, 8])],
                              [helper.make_tensor_value_info("pooled", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.microsoft", 1)],
                              ir_version=9).SerializeToString()
    feeds = {"input": inputs[0]}
    got = onyxrt.InferenceSession(model).run(None, feeds)[0]
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    assert got.shape == want.shape == (2, 1, 8)
    np.testing.assert_allclose(got, want, **QATT_TOL)


# ---------------------------------------------------------- QEmbedLayerNormalization


def qembed_case(b=2, s=4, h=8, dt=U8, segment=True, mask=True):
    sc = lambda: np.array(RNG.random() * 0.05 + 0.01, np.float32)  # noqa: E731
    zp = lambda: z(shift(int(RNG.integers(100, 150)), dt), dt)  # noqa: E731
    ids = RNG.integers(0, 10, (b, s)).astype(np.int32)
    seg = RNG.integers(0, 2, (b, s)).astype(np.int32) if segment else None
    m = RNG.integers(0, 3, (b, s)).astype(np.int32) if mask else None  # 2s are not counted
    return [ids, seg, q8((10, h), dt), q8((6, h), dt), q8((2, h), dt) if segment else None, q8(h, dt), q8(h, dt), m,
            sc(), sc(), sc() if segment else None, sc(), sc(), zp(), zp(), zp() if segment else None, zp(), zp()]


@pytest.mark.parametrize("dt", [U8, I8])
@pytest.mark.parametrize(("segment", "mask"), [(True, True), (False, False), (True, False)])
def test_qembed_layer_normalization(bound, dt, segment, mask):
    inputs = qembed_case(dt=dt, segment=segment, mask=mask)
    n = domain_node("QEmbedLayerNormalization", inputs, 2, epsilon=1e-5)
    got, want = run_node(bound, n, inputs), ort_outputs(n, inputs)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5)  # normalized: O(1) values
    np.testing.assert_array_equal(got[1], want[1])


def test_qembed_layer_normalization_edges(bound):
    inputs = qembed_case(b=0)  # an empty batch
    n = domain_node("QEmbedLayerNormalization", inputs, 2)
    got, want = run_node(bound, n, inputs), ort_outputs(n, inputs)
    assert got[0].shape == want[0].shape == (0, 4, 8) and got[1].shape == want[1].shape == (0,)
    inputs = qembed_case(s=7)  # more positions than the table holds
    with pytest.raises(ValueError, match="position_embedding"):
        run_node(bound, domain_node("QEmbedLayerNormalization", inputs, 2), inputs)


def test_end_to_end_quantized_bert_layer():
    """onnxruntime's quantized BERT front: QEmbedLayerNormalization → DynamicQuantizeLinear →
    QAttention (with the mask index), through onyxrt's session vs onnxruntime."""
    import onnxruntime as ort

    import onyxrt

    emb = qembed_case(b=2, s=4, h=8)
    att = qattention_case(b=2, s=4, d=8, per_column=True)
    enames = ["input_ids", "segment_ids", "word", "pos", "seg", "gamma", "beta", "mask", "ws", "ps", "ss", "gs", "bs",
              "wz", "pz", "sz", "gz", "bz"]
    anames = ["xq", "weight", "bias", "xs", "weight_scale", "mask_index", "xz", "weight_zero_point"]
    inits = [numpy_helper.from_array(v, nm) for nm, v in zip(enames, emb) if nm not in ("input_ids", "segment_ids", "mask")]
    inits += [numpy_helper.from_array(v, nm) for nm, v in zip(anames, att) if nm in ("weight", "bias", "weight_scale",
                                                                                     "weight_zero_point")]
    nodes = [helper.make_node("QEmbedLayerNormalization", enames, ["emb", "mask_index"], domain="com.microsoft"),
             helper.make_node("DynamicQuantizeLinear", ["emb"], ["xq", "xs", "xz"]),
             helper.make_node("QAttention", anames, ["out"], domain="com.microsoft", num_heads=2)]
    ids = [helper.make_tensor_value_info(nm, TensorProto.INT32, [None, None]) for nm in ("input_ids", "segment_ids", "mask")]
    graph = helper.make_graph(nodes, "qbert", ids, [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.microsoft", 1)],
                              ir_version=9).SerializeToString()
    feeds = {"input_ids": emb[0], "segment_ids": emb[1], "mask": emb[7]}
    got = onyxrt.InferenceSession(model).run(None, feeds)[0]
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    assert got.shape == want.shape == (2, 4, 8)
    np.testing.assert_allclose(got, want, **QATT_TOL)


def test_quantized_transformer_simulated_cupy(numpy_bound):
    from onyxrt_gpu.kernels._common import BACKEND
    from onyxrt_gpu.testing.simulated_cupy import install

    att = qattention_case(mask=np.array([[1, 1, 0, 1, 1], [1, 0, 1, 1, 1]], np.int32), past=2, per_column=True)
    emb = qembed_case()
    cases = [(domain_node("QAttention", att, 2, num_heads=2, unidirectional=1), att),
             (domain_node("QEmbedLayerNormalization", emb, 2), emb)]
    with install():
        import cupy

        gpu = bind("cupy", BACKEND)
        gpu.array = cupy.asarray
        gpu.host = lambda v: v.get()
        for n, inputs in cases:
            for g, w in zip(run_node(gpu, n, inputs), run_node(numpy_bound, n, inputs)):
                np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-7)


# ------------------------------------------------------------------------ MatMulBnb4


def bnb4_case(n, k, block, a_shape):
    numel = n * k
    return [f32(*a_shape, k), q8((numel + 1) // 2), (RNG.random(-(-numel // block)) + 0.5).astype(np.float32)]


@pytest.mark.parametrize("quant_type", [0, 1])
@pytest.mark.parametrize(("n", "k", "block"), [(8, 32, 16), (7, 9, 16), (5, 77, 64), (3, 100, 256), (16, 64, 32),
                                               (4, 40, 128)])
def test_matmul_bnb4(bound, quant_type, n, k, block):
    for a_shape in ((3,), (2, 3), (0,), (2, 1, 4)):
        inputs = bnb4_case(n, k, block, a_shape)
        node = domain_node("MatMulBnb4", inputs, K=k, N=n, block_size=block, quant_type=quant_type)
        got, want = run_node(bound, node, inputs)[0], ort_outputs(node, inputs)[0]
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_matmul_bnb4_errors_and_cupy(numpy_bound):
    from onyxrt_gpu.kernels._common import BACKEND
    from onyxrt_gpu.testing.simulated_cupy import install

    with pytest.raises(InvalidGraph, match="quant_type"):
        run_node(numpy_bound, domain_node("MatMulBnb4", [0] * 3, K=4, N=4, block_size=16, quant_type=2), [None] * 3)
    with pytest.raises(InvalidGraph, match="block_size"):
        run_node(numpy_bound, domain_node("MatMulBnb4", [0] * 3, K=4, N=4, block_size=8, quant_type=0), [None] * 3)
    inputs = bnb4_case(7, 9, 16, (2, 3))
    node = domain_node("MatMulBnb4", inputs, K=9, N=7, block_size=16, quant_type=1)
    with pytest.raises(ValueError, match="absmax"):
        run_node(numpy_bound, node, inputs[:2] + [inputs[2][:1]])
    want = run_node(numpy_bound, node, inputs)[0]
    with install():
        import cupy

        gpu = bind("cupy", BACKEND)
        gpu.array = cupy.asarray
        gpu.host = lambda v: v.get()
        np.testing.assert_allclose(run_node(gpu, node, inputs)[0], want, rtol=1e-6, atol=1e-7)


def test_end_to_end_matmul_bnb4():
    import onnxruntime as ort

    import onyxrt

    x, b, absmax = bnb4_case(12, 40, 32, (2, 5))
    nodes = [helper.make_node("MatMulBnb4", ["x", "b", "absmax"], ["y"], domain="com.microsoft", K=40, N=12,
                              block_size=32, quant_type=1),
             helper.make_node("Relu", ["y"], ["out"])]
    graph = helper.make_graph(nodes, "bnb4", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, None, 40])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(b, "b"), numpy_helper.from_array(absmax, "absmax")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.microsoft", 1)],
                              ir_version=9).SerializeToString()
    got = onyxrt.InferenceSession(model).run(None, {"x": x})[0]
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert got.shape == want.shape == (2, 5, 12)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------ MatMulFpQ4


def fpq4_blob(k, n, zp8):
    """A random MLAS 4-bit blob: per column, blocks of 32 along K, each [float32 scale]
    [uint8 zero point with Zp8][16 bytes]."""
    kb, head = -(-k // 32), 5 if zp8 else 4
    blob = q8((n, kb, 16 + head))
    blob[..., :4] = ((RNG.random((n, kb)) + 0.5) * 0.05).astype(np.float32).view(np.uint8).reshape(n, kb, 4)
    if zp8:
        blob[..., 4] = RNG.integers(0, 16, (n, kb))
    return blob.reshape(-1)


@pytest.mark.parametrize("blk_quant_type", [0, 1, 3])
@pytest.mark.parametrize(("k", "n"), [(32, 8), (40, 5), (70, 3), (1, 4), (96, 16)])
def test_matmul_fpq4(numpy_bound, blk_quant_type, k, n):
    blob = fpq4_blob(k, n, blk_quant_type != 0)
    for a_shape in ((3,), (2, 3), (0,), (2, 1, 4)):
        inputs = [f32(*a_shape, k), blob, np.array([k, n], np.int64)]
        node = domain_node("MatMulFpQ4", inputs, blk_quant_type=blk_quant_type)
        got, want = run_node(numpy_bound, node, inputs, host_inputs=(2,))[0], ort_outputs(node, inputs)[0]
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_matmul_fpq4_errors_cupy_and_session(numpy_bound):
    import onnxruntime as ort

    import onyxrt
    from onyxrt_gpu.kernels._common import BACKEND
    from onyxrt_gpu.testing.simulated_cupy import install

    blob = fpq4_blob(40, 6, True)
    inputs = [f32(2, 40), blob, np.array([40, 6], np.int64)]
    node = domain_node("MatMulFpQ4", inputs)
    with pytest.raises(ValueError, match="bytes"):
        run_node(numpy_bound, node, [inputs[0], blob[:-1], inputs[2]], host_inputs=(2,))
    with pytest.raises(ValueError, match="K=40"):
        run_node(numpy_bound, node, [f32(2, 41), blob, inputs[2]], host_inputs=(2,))
    want = run_node(numpy_bound, node, inputs, host_inputs=(2,))[0]
    with install():
        import cupy

        gpu = bind("cupy", BACKEND)
        gpu.array = cupy.asarray
        gpu.host = lambda v: v.get()
        np.testing.assert_allclose(run_node(gpu, node, inputs, host_inputs=(2,))[0], want, rtol=1e-6, atol=1e-7)
    # The session path: the blob and its shape as initializers.
    nodes = [helper.make_node("MatMulFpQ4", ["x", "blob", "shape"], ["y"], domain="com.microsoft"),
             helper.make_node("Tanh", ["y"], ["out"])]
    graph = helper.make_graph(nodes, "fpq4", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 40])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(blob, "blob"), numpy_helper.from_array(inputs[2], "shape")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.microsoft", 1)],
                              ir_version=9).SerializeToString()
    x = f32(3, 40)
    got = onyxrt.InferenceSession(model).run(None, {"x": x})[0]
    ref = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert got.shape == ref.shape == (3, 6)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
