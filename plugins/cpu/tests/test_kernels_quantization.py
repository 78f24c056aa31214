"""Tests for the CPU quantization kernels (onyxrt_cpu.kernels.quantization).

The onnx node conformance cases run straight through the registry (their float8, 4-bit and
2-bit data come as ``TensorProto`` objects and are turned into arrays first). The rest
compare with onnxruntime where it runs the node (8/16-bit ints, per-axis and blocked
parameters, float16 scales, QLinearMatMul/QLinearConv geometry) and with onnx's reference
evaluator where it does not (float8/float4/int4/int2 types, bfloat16, ``precision``), plus
numpy truth for cases neither oracle takes (per-row QLinearMatMul parameters, float8 matmul).
"""

from __future__ import annotations

import dataclasses

import ml_dtypes
import numpy as np
import onnx
import pytest
from kernel_cases import (
    BF16,
    assert_all_versions_registered,
    conformance_params,
    input_names,
    one_node,
    one_node_model,
    op_output,
    op_output_onnxruntime,
    randn,
    run_case,
    run_op,
    run_op_onnxruntime,
)
from onnx import TensorProto, numpy_helper
from onnx.reference import ReferenceEvaluator

from onyxrt.errors import InvalidGraph
from onyxrt.kernels import KernelInfo
from onyxrt_cpu import native
from onyxrt_cpu.kernels import registry
from onyxrt_cpu.kernels.quantization import dequantize, quantize

OPS = [
    "QuantizeLinear",
    "DequantizeLinear",
    "DynamicQuantizeLinear",
    "QLinearMatMul",
    "QLinearConv",
]

# Conformance cases these kernels cannot pass, with the reason. None today.
XFAIL: dict[str, str] = {}

F8 = [
    ml_dtypes.float8_e4m3fn,
    ml_dtypes.float8_e4m3fnuz,
    ml_dtypes.float8_e5m2,
    ml_dtypes.float8_e5m2fnuz,
]


def _to_numpy(value):
    return numpy_helper.to_array(value) if isinstance(value, onnx.TensorProto) else value


def _numpy_case(case):
    """The case with its ``TensorProto`` data (types numpy lacks) turned into arrays."""
    data = [([_to_numpy(v) for v in i], [_to_numpy(v) for v in o]) for i, o in case.data_sets]
    return dataclasses.replace(case, data_sets=data)


@pytest.mark.parametrize("case", conformance_params(OPS, XFAIL))
def test_conformance(case):
    run_case(_numpy_case(case))


def test_every_schema_version_is_registered():
    assert_all_versions_registered(OPS)


# ----------------------------------------------------------------- helpers


def reference(op, inputs, opset, out_types, **attrs):
    """onnx's reference evaluator on the node ``run_op`` builds (for types onnxruntime's
    Python API cannot feed: float8, 4-bit, 2-bit, bfloat16)."""
    node = one_node(op, input_names(inputs), len(out_types), **attrs)
    model, feeds = one_node_model(node, opset, inputs, out_types)
    return ReferenceEvaluator(model).run(None, feeds)


def check(op, inputs, opset, out_types, oracle="onnxruntime", **attrs):
    """Our outputs equal the oracle's exactly: dtype, shape and values (NaN == NaN)."""
    got = run_op(op, inputs, opset, len(out_types), **attrs)
    run = run_op_onnxruntime if oracle == "onnxruntime" else reference
    want = run(op, inputs, opset, out_types, **attrs)
    for g, w in zip(got, want, strict=False):
        w = np.asarray(w)
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape, w.dtype, w.shape)
        np.testing.assert_array_equal(g.astype(np.float64), w.astype(np.float64))


def ints(shape, dtype, seed=0):
    info = ml_dtypes.iinfo(dtype)
    return np.random.default_rng(seed).integers(info.min, info.max + 1, shape).astype(dtype)


X = randn((2, 3, 5), scale=100.0)


# ---------------------------------------------------------------- QuantizeLinear


@pytest.mark.parametrize("opset", [10, 13, 19, 21])
@pytest.mark.parametrize("zdt", [np.uint8, np.int8])
def test_quantize_per_tensor(opset, zdt):
    check("QuantizeLinear", [X, np.float32(0.7), zdt(3)], opset, [zdt])
    check("QuantizeLinear", [X, np.float32(0.7)], opset, [np.uint8])


@pytest.mark.parametrize("opset", [13, 19, 21])
def test_quantize_per_axis_negative_axis(opset):
    scale = np.array([0.5, 1, 2, 3, 4], np.float32)
    check("QuantizeLinear", [X, scale, np.arange(5, dtype=np.uint8)], opset, [np.uint8], axis=-1)
    scale0 = np.array([0.5, 2], np.float32)
    check("QuantizeLinear", [X, scale0, np.array([1, -2], np.int8)], opset, [np.int8], axis=0)


def test_quantize_rounds_half_to_even_and_saturates():
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, 300.0, -300.0, 126.5], np.float32)
    got = run_op("QuantizeLinear", [x, np.float32(1), np.int8(0)], 21)[0]
    np.testing.assert_array_equal(got, np.array([0, 2, 2, 0, -2, 127, -128, 126], np.int8))


@pytest.mark.parametrize("zdt", [np.uint16, np.int16])
def test_quantize_16_bit(zdt):
    check("QuantizeLinear", [X * 1000, np.float32(0.3), zdt(7)], 21, [zdt])


@pytest.mark.parametrize("axis", [1, -1])
def test_quantize_blocked(axis):
    shape = (2, 2, 5) if axis == 1 else (2, 3, 3)  # 3 → 2 blocks of 2, 5 → 3 blocks of 2
    scale = np.abs(randn(shape, 1)) + 0.1
    zp = ints(shape, np.uint8, 2)
    check("QuantizeLinear", [X, scale, zp], 21, [np.uint8], axis=axis, block_size=2)


def test_quantize_output_dtype_without_zero_point():
    check("QuantizeLinear", [X, np.float32(3)], 21, [np.int8], output_dtype=TensorProto.INT8)
    got = run_op("QuantizeLinear", [X, np.float32(3)], 25, output_dtype=TensorProto.UINT4)[0]
    assert got.dtype == ml_dtypes.uint4


@pytest.mark.parametrize("opset", [19, 21])
def test_quantize_float16_divides_in_float16(opset):
    # onnxruntime divides in float32 (one value differs); the spec and onnx's reference
    # divide in the scale's type.
    x16 = X.astype(np.float16)
    check("QuantizeLinear", [x16, np.float16(0.7), np.uint8(3)], opset, [np.uint8], "ref")


def test_quantize_bfloat16_and_int32_inputs():
    check(
        "QuantizeLinear",
        [X.astype(BF16), np.asarray(0.7, BF16), np.uint8(3)],
        21,
        [np.uint8],
        "ref",
    )
    xi = ints((2, 3, 5), np.int16).astype(np.int32)
    check("QuantizeLinear", [xi, np.float32(300.0), np.int8(1)], 21, [np.int8], "ref")


@pytest.mark.parametrize("opset", [23, 25])
def test_quantize_precision_and_mixed_types(opset):
    check(
        "QuantizeLinear",
        [X, np.float32(0.7), np.uint8(3)],
        opset,
        [np.uint8],
        "ref",
        precision=TensorProto.FLOAT16,
    )
    check(
        "QuantizeLinear",
        [X.astype(np.float16), np.float32(0.7), np.uint8(3)],
        opset,
        [np.uint8],
        "ref",
    )


@pytest.mark.parametrize("saturate", [0, 1])
@pytest.mark.parametrize("fdt", F8, ids=lambda t: t.__name__)
def test_quantize_float8_saturate(fdt, saturate):
    special = np.array([1e6, -1e6, np.inf, -np.inf, np.nan], np.float32)
    x = np.concatenate([X.ravel(), special])
    check(
        "QuantizeLinear",
        [x, np.float32(0.01), np.zeros((), fdt)],
        21,
        [fdt],
        "ref",
        saturate=saturate,
    )


@pytest.mark.parametrize(
    ("zdt", "opset", "scale"),
    [
        (ml_dtypes.int4, 21, 10.0),
        (ml_dtypes.uint4, 21, 10.0),
        (ml_dtypes.int2, 25, 40.0),
        (ml_dtypes.uint2, 25, 40.0),
        (ml_dtypes.float4_e2m1fn, 23, 7.0),
    ],
    ids=lambda v: getattr(v, "__name__", str(v)),
)
def test_quantize_small_types(zdt, opset, scale):
    scales = np.array([scale, scale / 2, scale * 2], np.float32)
    zp = np.array([1, 0, 1], zdt)
    check("QuantizeLinear", [X, scales, zp], opset, [zdt], "ref", axis=1)


def test_quantize_blocked_4_bit():
    scale = np.full((2, 3, 2), 3.0, np.float32)
    zp = np.ones((2, 3, 2), ml_dtypes.uint4)
    check("QuantizeLinear", [X, scale, zp], 21, [ml_dtypes.uint4], "ref", axis=2, block_size=3)


def test_quantize_bad_scale_shape_is_an_error():
    with pytest.raises(ValueError, match="per-axis"):
        run_op("QuantizeLinear", [X, np.ones(4, np.float32), np.zeros(4, np.uint8)], 21)
    with pytest.raises(ValueError, match="blocked"):
        run_op("QuantizeLinear", [X, np.ones((2, 3, 5), np.float32)], 21, block_size=2)


def test_quantize_bad_attributes():
    node = one_node("QuantizeLinear", 2, block_size=-1)
    with pytest.raises(InvalidGraph, match="block_size"):
        registry.lookup("", "QuantizeLinear", 21)[0].factory(KernelInfo.from_node(node, 21))
    node = one_node("QuantizeLinear", 2, output_dtype=TensorProto.FLOAT)
    with pytest.raises(InvalidGraph, match="output_dtype"):
        registry.lookup("", "QuantizeLinear", 21)[0].factory(KernelInfo.from_node(node, 21))


# -------------------------------------------------------------- DequantizeLinear


@pytest.mark.parametrize("opset", [10, 13, 19, 21])
@pytest.mark.parametrize("dt", [np.uint8, np.int8])
def test_dequantize_per_tensor(opset, dt):
    check("DequantizeLinear", [ints((2, 3, 5), dt), np.float32(0.7), dt(3)], opset, [np.float32])


@pytest.mark.parametrize("opset", [10, 21])
def test_dequantize_int32(opset):
    x = ints((2, 3, 5), np.int32)
    check("DequantizeLinear", [x, np.float32(0.7)], opset, [np.float32])


def test_dequantize_per_axis_and_blocked():
    x = ints((2, 3, 5), np.int8)
    scale = np.array([0.5, 1, 2], np.float32)
    check("DequantizeLinear", [x, scale, np.array([1, 2, 3], np.int8)], 21, [np.float32], axis=-2)
    bscale = np.abs(randn((2, 3, 3), 1)) + 0.1
    check(
        "DequantizeLinear",
        [x, bscale, ints((2, 3, 3), np.int8, 3)],
        21,
        [np.float32],
        axis=-1,
        block_size=2,
    )


def test_dequantize_half_precision_outputs():
    x = ints((2, 3, 5), np.uint8)
    check("DequantizeLinear", [x, np.float16(0.7), np.uint8(3)], 21, [np.float16])
    check("DequantizeLinear", [x, np.asarray(0.7, BF16), np.uint8(3)], 21, [BF16], "ref")
    check(
        "DequantizeLinear",
        [x, np.float32(0.7), np.uint8(3)],
        23,
        [np.float16],
        output_dtype=TensorProto.FLOAT16,
    )


def test_dequantize_e8m0_scale():
    x = ints((2, 3, 5), np.uint8)
    scale = np.asarray(0.25, ml_dtypes.float8_e8m0fnu)
    check(
        "DequantizeLinear",
        [x, scale, np.uint8(3)],
        24,
        [np.float32],
        "ref",
        output_dtype=TensorProto.FLOAT,
    )


@pytest.mark.parametrize("fdt", F8, ids=lambda t: t.__name__)
def test_dequantize_float8(fdt):
    check("DequantizeLinear", [X.astype(fdt), np.float32(2.0)], 21, [np.float32], "ref")
    # A float8 zero point (onnx's reference only takes 0) is subtracted like any other.
    got = run_op("DequantizeLinear", [X.astype(fdt), np.float32(2.0), np.asarray(1.0, fdt)], 21)
    np.testing.assert_array_equal(got[0], (X.astype(fdt).astype(np.float32) - 1) * 2)


@pytest.mark.parametrize(
    ("dt", "opset"),
    [(ml_dtypes.int4, 21), (ml_dtypes.uint4, 21), (ml_dtypes.int2, 25), (ml_dtypes.uint2, 25)],
    ids=lambda v: getattr(v, "__name__", str(v)),
)
def test_dequantize_sub_byte(dt, opset):
    x = ints((2, 3, 5), dt)
    check("DequantizeLinear", [x, np.float32(3), np.asarray(1, dt)], opset, [np.float32], "ref")


def test_dequantize_float4():
    x = X.astype(ml_dtypes.float4_e2m1fn)
    check("DequantizeLinear", [x, np.float32(3)], 23, [np.float32], "ref")


# --------------------------------------------------------- DynamicQuantizeLinear


@pytest.mark.parametrize(
    "x",
    [
        randn((4, 7), 3, scale=5.0),
        np.abs(randn(9, 4)),
        -np.abs(randn(9, 5)),
        randn((2, 3, 4), 6, scale=1e-3),
    ],
    ids=["mixed", "positive", "negative", "tiny"],
)
def test_dynamic_quantize(x):
    check("DynamicQuantizeLinear", [x], 11, [np.uint8, np.float32, np.uint8])


def test_dynamic_quantize_all_zeros_like_onnxruntime():
    check("DynamicQuantizeLinear", [np.zeros(3, np.float32)], 11, [np.uint8, np.float32, np.uint8])


# ----------------------------------------------------------------- QLinearMatMul


def qmm_inputs(a, b, dt, scales=(0.02, 0.03, 0.4), sdt=np.float32):
    sa, sb, sy = (sdt(s) for s in scales)
    return [a, sa, dt(3), b, sb, dt(5), sy, dt(7)]


@pytest.mark.parametrize("opset", [10, 21])
@pytest.mark.parametrize("dt", [np.uint8, np.int8])
def test_qlinearmatmul_shapes(dt, opset):
    a, b = ints((3, 5, 7), dt, 1), ints((7, 4), dt, 2)
    check("QLinearMatMul", qmm_inputs(a, b, dt), opset, [dt])
    b3 = np.stack([b, b[::-1]])
    check("QLinearMatMul", qmm_inputs(a[0], b3, dt), opset, [dt])


@pytest.mark.parametrize("dt", [np.uint8, np.int8])
def test_qlinearmatmul_float16_scales_and_long_rows(dt):
    a, b = ints((2, 4), dt, 1), ints((4, 3), dt, 2)
    check("QLinearMatMul", qmm_inputs(a, b, dt, sdt=np.float16), 21, [dt])
    # K = 600 products overflow float32's exact range: accumulate in float64.
    a, b = ints((3, 600), dt, 3), ints((600, 2), dt, 4)
    check("QLinearMatMul", qmm_inputs(a, b, dt, (0.02, 0.03, 40.0)), 21, [dt])


def test_qlinearmatmul_per_row_and_per_column():
    a, b = ints((5, 7), np.uint8, 1), ints((7, 4), np.uint8, 2)
    sa = (np.arange(5) * 0.01 + 0.01).astype(np.float32)
    za = np.arange(5, dtype=np.uint8)
    sb = (np.arange(4) * 0.01 + 0.02).astype(np.float32)
    zb = np.arange(4, dtype=np.uint8)
    got = run_op("QLinearMatMul", [a, sa, za, b, sb, zb, np.float32(0.4), np.uint8(7)], 21)[0]
    real = ((a - za[:, None].astype(np.float64)) * sa[:, None]) @ ((b - zb.astype(np.float64)) * sb)
    want = np.clip(np.rint(real / np.float32(0.4)) + 7, 0, 255).astype(np.uint8)
    np.testing.assert_array_equal(got, want)
    # N-D parameters: [..., M, 1] for a, [..., 1, N] for b (onnx's reference as the oracle).
    a3 = ints((3, 5, 7), np.int8, 5)
    ins = [
        a3,
        np.linspace(0.01, 0.1, 15, dtype=np.float32).reshape(3, 5, 1),
        np.arange(15, dtype=np.int8).reshape(3, 5, 1),
        ints((7, 4), np.int8, 6),
        sb.reshape(1, 4),
        zb.astype(np.int8).reshape(1, 4),
        np.float32(0.4),
        np.int8(7),
    ]
    check("QLinearMatMul", ins, 21, [np.int8], "ref")


def test_qlinearmatmul_float8():
    f8 = ml_dtypes.float8_e4m3fn
    a, b = randn((3, 4)).astype(f8), randn((4, 2), 1).astype(f8)
    z = np.asarray(0, f8)
    ins = [a, np.float32(0.5), z, b, np.float32(0.25), z, np.float32(0.1), z]
    got = run_op("QLinearMatMul", ins, 21)[0]
    real = (a.astype(np.float64) * 0.5) @ (b.astype(np.float64) * 0.25)
    assert got.dtype == f8
    np.testing.assert_array_equal(got, (real / np.float32(0.1)).astype(np.float32).astype(f8))


# ------------------------------------------------------------------- QLinearConv


@pytest.mark.parametrize("dt", [np.uint8, np.int8])
def test_qlinearconv_per_channel_bias_groups(dt):
    x = ints((2, 4, 9, 8), dt, 1)
    w = ints((6, 2, 3, 3), np.int8, 2)
    bias = np.random.default_rng(3).integers(-5000, 5000, 6).astype(np.int32)
    ws = (np.arange(6) * 0.003 + 0.01).astype(np.float32)
    ins = [x, np.float32(0.05), dt(3), w, ws, np.zeros(6, np.int8), np.float32(0.7), dt(9), bias]
    check(
        "QLinearConv", ins, 10, [dt], group=2, pads=[1, 0, 2, 1], strides=[2, 1], dilations=[1, 2]
    )


@pytest.mark.parametrize("dt", [np.uint8, np.int8])
def test_qlinearconv_per_tensor_auto_pad(dt):
    x, w = ints((2, 4, 9, 8), dt, 4), ints((6, 2, 3, 3), dt, 5)
    ins = [x, np.float32(0.05), dt(3), w, np.float32(0.01), dt(4), np.float32(0.7), dt(9)]
    check("QLinearConv", ins, 10, [dt], group=2, auto_pad="SAME_UPPER")


def test_qlinearconv_depthwise_1d_and_deep_3d():
    x, w = ints((1, 4, 7), np.uint8, 6), ints((4, 1, 3), np.int8, 7)
    ins = [
        x,
        np.float32(0.05),
        np.uint8(3),
        w,
        np.float32(0.02),
        np.int8(0),
        np.float32(0.3),
        np.uint8(1),
    ]
    check("QLinearConv", ins, 10, [np.uint8], group=4, pads=[1, 1])
    # 40 channels x 27 taps = 1080 products per output: the float64 accumulator.
    x, w = ints((1, 40, 5, 5, 4), np.int8, 8), ints((3, 40, 3, 3, 3), np.int8, 9)
    ins = [
        x,
        np.float32(0.05),
        np.int8(-3),
        w,
        np.float32(0.02),
        np.int8(1),
        np.float32(30.0),
        np.int8(2),
    ]
    check("QLinearConv", ins, 10, [np.int8], pads=[1, 1, 1, 1, 1, 1])


# ---------------------------------------- per-tensor 8-bit QuantizeLinear/DequantizeLinear


def _edge_values(n, seed):
    """Random values at several scales plus what rounding and saturation must get right:
    halves (ties to even), NaN, infinities, huge values, negative zero."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(n) * rng.choice([0.5, 3.0, 40.0, 400.0], n)).astype(np.float32)
    special = np.array([np.nan, np.inf, -np.inf, 0.5, 1.5, 2.5, -0.5, -1.5, 254.5, 127.5,
                        -128.5, 1e30, -1e30, -0.0], np.float32)
    x[: special.size] = special
    return x


@pytest.mark.skipif(not native.ENABLED, reason="compiled module not built")
@pytest.mark.parametrize(("zp_dtype", "zp_value"), [
    (np.uint8, None), (np.uint8, 0), (np.uint8, 3), (np.uint8, 200),
    (np.int8, None), (np.int8, 0), (np.int8, 3), (np.int8, -7),
])  # fmt: skip
@pytest.mark.parametrize("scale_shape", [(), (1,)])
def test_compiled_quantize_dequantize_match_numpy_and_onnxruntime(zp_dtype, zp_value, scale_shape, monkeypatch):
    x = _edge_values(1003, seed=5).reshape(17, 59)  # odd sizes: no whole vector rows
    scale = np.full(scale_shape, 0.37, np.float32)
    zp = None if zp_value is None else np.full(scale_shape, zp_value, zp_dtype)
    calls = []
    for name in ("quantize8", "dequantize8"):
        real = getattr(native, name)
        monkeypatch.setattr(native, name, lambda *a, _real=real, _n=name: calls.append(_n) or _real(*a))
    out_type = np.dtype(zp_dtype)
    attrs = {} if zp is not None else {"output_dtype": 3 if zp_dtype == np.int8 else 2}
    q = op_output("QuantizeLinear", [x, scale, zp], 21, **attrs)
    dq = op_output("DequantizeLinear", [q, scale, zp], 21)
    assert calls == ["quantize8", "dequantize8"]
    monkeypatch.undo()
    assert q.dtype == out_type
    np.testing.assert_array_equal(q, quantize(x, scale, zp, out_type))
    np.testing.assert_array_equal(dq, dequantize(q, scale, zp, np.dtype(np.float32)))
    q_ort = op_output_onnxruntime("QuantizeLinear", [x, scale, zp], 21, out_type, **attrs)
    np.testing.assert_array_equal(q, q_ort)
    np.testing.assert_array_equal(dq, op_output_onnxruntime("DequantizeLinear", [q, scale, zp], 21, np.float32))
