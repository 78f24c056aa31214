"""The GPU's one-kernel QuantizeLinear/DequantizeLinear (kernels/quantization.py) against
the operator library's own compute over the same (simulated) CuPy, bit for bit: the fused
kernel runs the library's steps in the same order and types, so no value may differ —
halfway values (round half to even), NaN, infinities, out-of-range values, per tensor
and per axis, with and without a zero point, int8 and uint8. A QDQ group runs as one
launch per node."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onyxrt as ort
from onyxrt_gpu.kernels.quantization import DequantizeLinear, QuantizeLinear

CUDA = "CUDAExecutionProvider"
CPU = "CPUExecutionProvider"


def _model(nodes, inputs, outputs, inits, opset=21):
    graph = helper.make_graph(nodes, "g", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10).SerializeToString()


def _kernel(session, cls):
    """The node's GPU kernel (inside the provider's device-scope wrapper)."""
    (kernel,) = [k for k in (getattr(s.kernel, "inner", None) for s in session._plan.steps) if isinstance(k, cls)]
    return kernel


def _hard_floats(shape, scale):
    """Values whose quotient by ``scale`` lands on .5 (ties), NaN, +-inf, far out of range."""
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(shape) * 200 * scale).astype(np.float32)
    flat = x.reshape(-1)
    flat[:8] = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 127.5, -128.5], np.float32) * np.float32(scale)
    flat[8:12] = [np.nan, np.inf, -np.inf, 1e30]
    return x


@pytest.mark.parametrize("out", [np.uint8, np.int8])
@pytest.mark.parametrize("per_axis", [False, True])
@pytest.mark.parametrize("zero_point", [False, True])
def test_quantize_is_the_librarys_bit_for_bit(cuda_sim, out, per_axis, zero_point):
    cp = cuda_sim.cupy
    shape = (2, 3, 4, 5)
    scale = (np.array([0.5, 0.25, 0.125], np.float32) if per_axis else np.float32(0.25))
    zp = (np.array([3, 0, 250 if out is np.uint8 else -7], out) if per_axis else np.asarray(5, out))
    inits = [numpy_helper.from_array(np.asarray(scale), "s")]
    ins = ["x", "s"]
    if zero_point:
        inits.append(numpy_helper.from_array(np.asarray(zp), "zp"))
        ins.append("zp")
    attrs = {"axis": 1} if per_axis else {}
    otype = TensorProto.UINT8 if out is np.uint8 else TensorProto.INT8
    node = helper.make_node("QuantizeLinear", ins, ["y"], **attrs,
                            **({} if zero_point else {"output_dtype": otype}))
    model = _model([node], [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                   [helper.make_tensor_value_info("y", otype, None)], inits)
    session = ort.InferenceSession(model, providers=[CUDA, CPU])
    kernel = _kernel(session, QuantizeLinear)
    x = cp.asarray(_hard_floats(shape, 0.125))
    args = [x, cp.asarray(scale)] + ([cp.asarray(zp)] if zero_point else [])
    (fast,) = kernel.compute(*args)
    (library,) = super(QuantizeLinear, kernel).compute(*args)
    assert fast.dtype == library.dtype == np.dtype(out)
    np.testing.assert_array_equal(cp.asnumpy(fast), cp.asnumpy(library))
    # through the session too (the parameters laid out once, reused on the next run)
    host = cp.asnumpy(x)
    for _ in range(2):
        np.testing.assert_array_equal(session.run(None, {"x": host})[0], cp.asnumpy(library))


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("per_axis", [False, True])
@pytest.mark.parametrize("zero_point", [False, True])
def test_dequantize_is_the_librarys_bit_for_bit(cuda_sim, dtype, per_axis, zero_point):
    cp = cuda_sim.cupy
    info = np.iinfo(dtype)
    x = np.random.default_rng(1).integers(info.min, info.max + 1, size=(2, 3, 7)).astype(dtype)
    scale = np.array([0.5, 1e-3, 3.0], np.float32) if per_axis else np.float32(0.0625)
    zp = np.array([1, info.max, info.min], dtype) if per_axis else np.asarray(info.max // 3, dtype)
    inits = [numpy_helper.from_array(np.asarray(scale), "s")]
    ins = ["x", "s"]
    if zero_point:
        inits.append(numpy_helper.from_array(np.asarray(zp), "zp"))
        ins.append("zp")
    itype = TensorProto.UINT8 if dtype is np.uint8 else TensorProto.INT8
    node = helper.make_node("DequantizeLinear", ins, ["y"], **({"axis": 1} if per_axis else {}))
    model = _model([node], [helper.make_tensor_value_info("x", itype, list(x.shape))],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    session = ort.InferenceSession(model, providers=[CUDA, CPU])
    kernel = _kernel(session, DequantizeLinear)
    args = [cp.asarray(x), cp.asarray(scale)] + ([cp.asarray(zp)] if zero_point else [])
    (fast,) = kernel.compute(*args)
    (library,) = super(DequantizeLinear, kernel).compute(*args)
    assert fast.dtype == library.dtype == np.float32
    np.testing.assert_array_equal(cp.asnumpy(fast), cp.asnumpy(library))
    np.testing.assert_array_equal(session.run(None, {"x": x})[0], cp.asnumpy(library))


def test_a_qdq_pair_is_one_launch_a_node_and_other_cases_are_the_librarys(cuda_sim):
    """DequantizeLinear(QuantizeLinear(x)) with constant parameters: one launch per node
    from the second run (the parameters laid out on the first); a float16 input and an
    int16 output take the library's path and still give its result."""
    cp = cuda_sim.cupy
    x_info = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "s", "zp"], ["y"])]
    inits = [numpy_helper.from_array(np.asarray(np.float32(0.1)), "s"),
             numpy_helper.from_array(np.asarray(np.uint8(128)), "zp")]
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(_model(nodes, [x_info], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                                          inits), so, providers=[CUDA, CPU])
    x = np.linspace(-20, 20, 8, dtype=np.float32).reshape(1, 8)
    session.run(None, {"x": x})
    with cuda_sim.record_events() as events:
        (y,) = session.run(None, {"x": x})
    # the feed's upload and the output's download, and one launch for each node
    assert events.count("launch") == 2, events
    np.testing.assert_allclose(y, np.clip(np.rint(x / np.float32(0.1)) + 128, 0, 255).astype(np.float32) * 0.1
                               - np.float32(12.8), rtol=0, atol=1e-5)
    kernel = _kernel(session, QuantizeLinear)
    half = cp.asarray(x.astype(np.float16))
    wide = cp.asarray(np.asarray(np.int16(7)))
    for args in ([half, cp.asarray(np.float16(0.1)), cp.asarray(np.uint8(128))],
                 [cp.asarray(x), cp.asarray(np.float32(0.1)), wide]):
        (fast,) = kernel.compute(*args)
        (library,) = super(QuantizeLinear, kernel).compute(*args)
        assert fast.dtype == library.dtype
        np.testing.assert_array_equal(cp.asnumpy(fast), cp.asnumpy(library))
