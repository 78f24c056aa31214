"""Tests of the library's linear quantization (onyxrt_ops.quantization).

QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear and QLinearMatMul run over numpy
and over array_api_strict and are compared with onnxruntime (or onnx's reference evaluator
where onnxruntime has no kernel): per-tensor, per-axis and blocked parameters, old and new
versions, half-to-even rounding and saturation. float8/4-bit types, which the standard
cannot hold, are refused when the node's types are checked; bad attributes are
InvalidGraph, bad data ValueError.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from library_harness import Bound, node, oracle, unbound_versions
from onnx import TensorProto, helper

from onyxrt.errors import InvalidGraph
from onyxrt.kernels import KernelInfo, ValueType
from onyxrt_ops import library

QUANT = {d.op_type for d in library.definitions if d.cls.__module__ == "onyxrt_ops.quantization"}
RNG = np.random.default_rng(0)
X = (RNG.standard_normal((2, 3, 4)) * 4).astype(np.float32)
TIES = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 300.0, -300.0], np.float32)
Q8 = RNG.integers(-128, 128, (2, 3, 4)).astype(np.int8)
S = np.array(0.5, np.float32)


def f32(*v: float) -> np.ndarray:
    return np.array(v, np.float32)


CASES = [
    ("QuantizeLinear", [TIES, f32(1.0), np.array(0, np.int8)], 10, {}),
    ("QuantizeLinear", [TIES, f32(1.0), np.array(10, np.uint8)], 13, {}),
    ("QuantizeLinear", [X, f32(0.5, 0.25, 1.0), np.array([0, 3, -3], np.int8)], 13, {}),
    ("QuantizeLinear", [X, S, np.array(7, np.uint16)], 21, {}),
    ("QuantizeLinear", [X, S], 19, {}),
    ("QuantizeLinear", [X, np.full((2, 3, 2), 0.3, np.float32), np.zeros((2, 3, 2), np.int16)],
     21, {"axis": 2, "block_size": 2}),
    ("QuantizeLinear", [X.astype(np.float64), S.astype(np.float64), np.array(1, np.int8)], 23, {}),
    ("DequantizeLinear", [Q8, S, np.array(3, np.int8)], 10, {}),
    ("DequantizeLinear", [Q8, f32(0.5, 0.25, 1.0), np.array([0, 3, -3], np.int8)], 13, {}),
    ("DequantizeLinear", [np.array([2**31 - 1, -(2**31)], np.int32), f32(0.5)], 13, {}),
    ("DequantizeLinear", [Q8.astype(np.uint16), np.full((2, 2, 4), 0.3, np.float32)], 21,
     {"axis": 1, "block_size": 2}),
    ("DequantizeLinear", [Q8, S.astype(np.float64), np.array(3, np.int8)], 24, {}),
]


@pytest.mark.parametrize(("op", "inputs", "opset", "attrs"), CASES,
                         ids=[f"{c[0]}-{c[2]}-{i}" for i, c in enumerate(CASES)])
def test_same_as_onnxruntime(bound: Bound, op, inputs, opset, attrs):
    if op == "QuantizeLinear":
        out = inputs[2].dtype if len(inputs) > 2 else np.dtype(np.uint8)
    else:
        out = inputs[1].dtype
    got = bound.run(op, inputs, opset, **attrs)
    want = _typed(op, inputs, opset, out, **attrs)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def _typed(op: str, inputs: list[Any], opset: int, out: Any, **attrs: Any) -> np.ndarray:
    from library_harness import typed_oracle

    return typed_oracle(op, inputs, opset, out, **attrs)


def test_rounding_is_half_to_even(bound: Bound):
    got = bound.run("QuantizeLinear", [TIES, f32(1.0), np.array(0, np.int8)], 13)
    assert got.tolist() == [-2, -2, 0, 0, 2, 2, 127, -128]


def test_dynamic_quantize_linear(bound: Bound):
    n = node("DynamicQuantizeLinear", 1)
    n.output[:] = ["y", "s", "z"]
    for x in (X, np.zeros((3,), np.float32), np.abs(X)):
        kernel = bound.kernel(n, 11)
        y, s, z = (bound.host(v) for v in kernel.compute(bound.array(x)))
        sess = _session(n, x)
        wy, ws, wz = sess.run(None, {"in0": x})
        np.testing.assert_array_equal(y, wy)
        assert s.dtype == np.float32 and z.dtype == np.uint8
        if x.any():
            np.testing.assert_array_equal(s, ws)
            np.testing.assert_array_equal(z, wz)


def _session(n: Any, x: np.ndarray) -> Any:
    import onnxruntime as ort

    graph = helper.make_graph(
        [n], "g", [helper.make_tensor_value_info("in0", TensorProto.FLOAT, list(x.shape))],
        [helper.make_tensor_value_info(o, t, None)
         for o, t in zip(n.output, (TensorProto.UINT8, TensorProto.FLOAT, TensorProto.UINT8))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)], ir_version=10)
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("opset", [10, 21])
@pytest.mark.parametrize("k", [8, 300])  # 300: sums past 2**24, accumulated in float64
def test_qlinear_matmul(bound: Bound, opset, k):
    a = RNG.integers(0, 256, (2, 5, k)).astype(np.uint8)
    b = RNG.integers(-128, 128, (k, 3)).astype(np.int8)
    inputs = [a, f32(0.02), np.array(128, np.uint8), b, f32(0.01), np.array(-2, np.int8),
              f32(0.3), np.array(120, np.uint8)]
    got = bound.run("QLinearMatMul", inputs, opset)
    want = oracle("QLinearMatMul", inputs, opset)
    np.testing.assert_array_equal(got, want)


def test_qlinear_matmul_per_row_and_column(bound: Bound):
    a = RNG.integers(-128, 128, (4, 6)).astype(np.int8)
    b = RNG.integers(0, 256, (6, 3)).astype(np.uint8)
    inputs = [a, f32(0.1, 0.2, 0.3, 0.4), np.array([0, 1, 2, 3], np.int8), b, f32(0.01, 0.02, 0.03),
              np.array([1, 2, 3], np.uint8), f32(0.3), np.array(-5, np.int8)]
    got = bound.run("QLinearMatMul", inputs, 10)
    a0 = a.astype(np.float64) - inputs[2].reshape(-1, 1)
    real = (a0 @ (b.astype(np.float64) - inputs[5])) * (inputs[1].reshape(-1, 1) * inputs[4]).astype(
        np.float64)
    want = np.clip(np.rint(real.astype(np.float32) / np.float32(0.3)) - 5, -128, 127).astype(np.int8)
    np.testing.assert_array_equal(got, want)


def test_every_onnx_version_is_bound(numpy_bound: Bound):
    assert not unbound_versions(numpy_bound.registry, QUANT)


def test_float8_and_int4_are_refused_at_capability_time(numpy_bound: Bound):
    f = ValueType("tensor", TensorProto.FLOAT)
    for code in (TensorProto.FLOAT8E4M3FN, TensorProto.INT4):
        t = ValueType("tensor", code)
        kdef, _ = numpy_bound.registry.lookup("", "QuantizeLinear", 21)
        assert kdef.unsupported_type([f, f, t], [t]) is not None
        assert kdef.unsupported_type([f, f, ValueType("tensor", TensorProto.INT8)],
                                     [ValueType("tensor", TensorProto.INT8)]) is None
        kdef, _ = numpy_bound.registry.lookup("", "DequantizeLinear", 21)
        assert kdef.unsupported_type([t, f, t], [f]) is not None


def test_bad_attributes_are_invalid_graph(numpy_bound: Bound):
    for attrs in ({"block_size": -1}, {"output_dtype": TensorProto.FLOAT}, {"output_dtype": 999}):
        n = node("QuantizeLinear", 2, **attrs)
        kdef, _ = numpy_bound.registry.lookup("", "QuantizeLinear", 21)
        with pytest.raises(InvalidGraph, match="QuantizeLinear_node"):
            kdef.factory(KernelInfo.from_node(n, 21, since_version=21))


@pytest.mark.parametrize(("op", "inputs", "attrs", "match"), [
    ("QuantizeLinear", [X, f32(1, 2), np.array([0, 0], np.int8)], {}, "per-axis"),
    ("QuantizeLinear", [X, np.ones((2, 3, 3), np.float32)], {"axis": 2, "block_size": 2}, "blocked"),
    ("QuantizeLinear", [X, S, np.array(0, np.int8)], {"output_dtype": TensorProto.UINT8},
     "output_dtype"),
    ("DequantizeLinear", [Q8, S, np.array(0, np.uint8)], {}, "must match"),
    ("DequantizeLinear", [Q8, f32(1, 2, 3)], {"axis": 5}, "out of range"),
])
def test_bad_data_is_a_value_error(bound: Bound, op, inputs, attrs, match):
    with pytest.raises(ValueError, match=match):
        bound.run(op, inputs, 21, **attrs)
