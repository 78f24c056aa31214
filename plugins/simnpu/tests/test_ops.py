"""The NPU op set: numerics against onnx.reference, refusals with reasons, costs.

Every op is compiled as a one-node (or few-node) group and run as a program, so the test
goes through check → lower → prepack → run exactly as a session would. fp32 must match
``onnx.reference.ReferenceEvaluator`` to 1e-5; fp16 (float16 storage, float32
accumulation) to 1e-2 relative.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from onyxrt.graph import Graph
from onyxrt.protocol import FusedSubgraph
from onyxrt_simnpu.compiler import CompileError, compile_group
from onyxrt_simnpu.ops import NPU_OPS, check_node, storage_dtype, to_storage

RNG = np.random.default_rng(1234)


# -- helpers ----------------------------------------------------------------------------
def _rand(*shape: int, dtype: type = np.float32) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


def make_model(nodes, feeds, outputs, inits=None, opset=17) -> onnx.ModelProto:
    """A model whose inputs are typed like ``feeds``; outputs typed by shape inference."""
    inputs = [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
        for n, a in feeds.items()
    ]
    graph = helper.make_graph(
        nodes, "t", inputs, [helper.make_empty_tensor_value_info(o) for o in outputs],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in (inits or {}).items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)
    return onnx.shape_inference.infer_shapes(model)


def make_group(model: onnx.ModelProto) -> FusedSubgraph:
    """All nodes of ``model`` as one fused group."""
    opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    graph = Graph.from_proto(model.graph, {"": opset})
    produced = {o for n in graph.nodes for o in n.outputs}
    inputs = list(dict.fromkeys(i for n in graph.nodes for i in n.inputs if i and i not in produced))
    return FusedSubgraph("npu_group", tuple(graph.nodes), tuple(inputs), tuple(graph.outputs), graph)


def run_npu(model, feeds, precision):
    group = make_group(model)
    program = compile_group(group, precision)
    args = [to_storage(feeds[n], precision) for n in program.inputs]
    return program.run(args)


def reference(model, feeds, oracle="onnx"):
    if oracle == "onnxruntime":
        import onnxruntime

        session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        return session.run(None, feeds)
    with np.errstate(all="ignore"):  # onnx.reference's Sigmoid overflows exp on purpose
        return ReferenceEvaluator(model).run(None, feeds)


def assert_matches(model, feeds, precision="fp32", oracle="onnx"):
    expected = reference(model, feeds, oracle)
    got = run_npu(model, feeds, precision)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        e = np.asarray(e)
        assert g.shape == e.shape
        if e.dtype.kind == "f":
            assert g.dtype == storage_dtype(e.dtype, precision)
            scale = float(np.abs(e).max()) if e.size else 1.0
            if precision == "fp32":
                np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5 * max(scale, 1e-3))
            else:
                np.testing.assert_allclose(g.astype(np.float32), e, rtol=1e-2, atol=1e-2 * max(scale, 1e-3))
        else:
            np.testing.assert_array_equal(g, e)


def node(op, inputs, outputs, **attrs):
    return helper.make_node(op, inputs, outputs, name=f"{op.lower()}_node", **attrs)


# -- numerics: one case per op (and per interesting attribute) ------------------------
def _conv(w_shape, x_shape, bias=True, **attrs):
    inits = {"W": _rand(*w_shape)}
    ins = ["x", "W"]
    if bias:
        inits["B"] = _rand(w_shape[0])
        ins.append("B")
    return [node("Conv", ins, ["y"], **attrs)], {"x": _rand(*x_shape)}, ["y"], inits, 17


def _single(op, feeds, inits=None, opset=17, outputs=("y",), **attrs):
    names = [*feeds, *(inits or {})]
    return [node(op, names, list(outputs), **attrs)], feeds, list(outputs), inits or {}, opset


CASES = {
    "conv_3x3_pad": lambda: _conv((8, 3, 3, 3), (2, 3, 9, 9), pads=[1, 1, 1, 1]),
    "conv_stride_dilation_asym_pads": lambda: _conv(
        (4, 3, 3, 2), (1, 3, 11, 10), bias=False, strides=[2, 3], dilations=[2, 1], pads=[0, 1, 2, 0]
    ),
    "conv_group2": lambda: _conv((6, 2, 3, 3), (2, 4, 7, 7), group=2, pads=[1, 1, 1, 1]),
    "conv_depthwise": lambda: _conv((8, 1, 3, 3), (1, 8, 8, 8), group=8, strides=[2, 2], pads=[1, 1, 1, 1]),
    "conv_depthwise_multiplier": lambda: _conv((8, 1, 3, 3), (1, 4, 6, 6), group=4),
    "conv_1x1": lambda: _conv((16, 8, 1, 1), (2, 8, 5, 5)),
    "conv_runtime_weight": lambda: (
        [node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])],
        {"x": _rand(1, 3, 6, 6), "w": _rand(5, 3, 3, 3)}, ["y"], {}, 17,
    ),
    "gemm_transB_const": lambda: _single(
        "Gemm", {"a": _rand(4, 6)}, {"B": _rand(5, 6), "C": _rand(5)}, transB=1, alpha=0.5, beta=2.0
    ),
    "gemm_transA_runtime": lambda: _single(
        "Gemm", {"a": _rand(6, 4), "b": _rand(6, 3)}, {"C": _rand(4, 3)}, transA=1
    ),
    "gemm_no_c": lambda: _single("Gemm", {"a": _rand(3, 4)}, {"B": _rand(4, 2)}),
    "matmul_3d_2d": lambda: _single("MatMul", {"a": _rand(2, 3, 8)}, {"B": _rand(8, 5)}),
    "matmul_batched": lambda: _single("MatMul", {"a": _rand(2, 3, 4, 8), "b": _rand(2, 3, 8, 4)}),
    "add_broadcast": lambda: _single("Add", {"a": _rand(2, 3, 4), "b": _rand(4)}),
    "sub_broadcast": lambda: _single("Sub", {"a": _rand(2, 1, 4), "b": _rand(3, 1)}),
    "mul_const": lambda: _single("Mul", {"a": _rand(2, 3, 4)}, {"s": _rand(1, 3, 1)}),
    "div": lambda: _single("Div", {"a": _rand(3, 4), "b": np.abs(_rand(3, 4)) + 0.5}),
    "relu": lambda: _single("Relu", {"x": _rand(3, 5)}),
    "leaky_relu": lambda: _single("LeakyRelu", {"x": _rand(3, 5)}, alpha=0.2),
    "clip_inputs": lambda: _single(
        "Clip", {"x": 3 * _rand(4, 5)}, {"lo": np.float32(-1.0), "hi": np.float32(2.0)}
    ),
    "clip_only_max": lambda: (
        [node("Clip", ["x", "", "hi"], ["y"])], {"x": 3 * _rand(4, 5)}, ["y"],
        {"hi": np.float32(0.5)}, 17,
    ),
    "clip_opset6_attrs": lambda: _single("Clip", {"x": 3 * _rand(4, 5)}, opset=6, min=-0.5, max=1.5),
    "sigmoid": lambda: _single("Sigmoid", {"x": np.concatenate([4 * _rand(20), [-100.0, 100.0]]).astype(np.float32)}),
    "tanh": lambda: _single("Tanh", {"x": 2 * _rand(3, 7)}),
    "hardswish": lambda: _single("HardSwish", {"x": 4 * _rand(3, 7)}),
    "gelu_none": lambda: _single("Gelu", {"x": 3 * _rand(4, 9)}, opset=20),
    "gelu_tanh": lambda: _single("Gelu", {"x": 3 * _rand(4, 9)}, opset=20, approximate="tanh"),
    "softmax_last": lambda: _single("Softmax", {"x": 3 * _rand(2, 3, 6)}),
    "softmax_axis1": lambda: _single("Softmax", {"x": 3 * _rand(2, 3, 6)}, axis=1),
    "softmax_opset11_coerced": lambda: _single("Softmax", {"x": 3 * _rand(2, 3, 6)}, opset=11, axis=1),
    "layernorm_last": lambda: _single(
        "LayerNormalization", {"x": _rand(2, 5, 8)}, {"g": _rand(8), "b": _rand(8)}
    ),
    "layernorm_axis1_stats": lambda: _single(
        "LayerNormalization", {"x": _rand(2, 3, 4)}, {"g": _rand(3, 4)},
        outputs=("y", "mean", "inv"), axis=1, epsilon=1e-3,
    ),
    "batchnorm_folded": lambda: _single(
        "BatchNormalization", {"x": _rand(2, 4, 5, 5)},
        {"s": _rand(4), "b": _rand(4), "m": _rand(4), "v": np.abs(_rand(4)) + 0.1},
    ),
    "batchnorm_runtime_stats": lambda: _single(
        "BatchNormalization",
        {"x": _rand(2, 4, 3), "s": _rand(4), "b": _rand(4), "m": _rand(4), "v": np.abs(_rand(4)) + 0.1},
        epsilon=1e-3,
    ),
    "maxpool": lambda: _single("MaxPool", {"x": _rand(2, 3, 9, 9)}, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
    "maxpool_ceil": lambda: _single("MaxPool", {"x": _rand(1, 2, 8, 8)}, kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1),
    "avgpool_exclude_pad": lambda: _single(
        "AveragePool", {"x": _rand(2, 3, 7, 7)}, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]
    ),
    "avgpool_include_pad": lambda: _single(
        "AveragePool", {"x": _rand(2, 3, 7, 7)}, kernel_shape=[3, 3], pads=[1, 0, 1, 2], count_include_pad=1
    ),
    "avgpool_ceil": lambda: _single(
        "AveragePool", {"x": _rand(1, 2, 8, 8)}, kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1
    ),
    "avgpool_ceil_include_pad": lambda: _single(
        "AveragePool", {"x": _rand(1, 2, 8, 8)}, kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1,
        pads=[1, 1, 1, 1], count_include_pad=1,
    ),
    "global_avgpool": lambda: _single("GlobalAveragePool", {"x": _rand(2, 5, 4, 6)}),
    "concat": lambda: _single("Concat", {"a": _rand(2, 3, 4), "b": _rand(2, 1, 4)}, {"c": _rand(2, 2, 4)}, axis=1),
    "concat_negative_axis": lambda: _single("Concat", {"a": _rand(2, 3), "b": _rand(2, 4)}, axis=-1),
    "reshape_zero_minus_one": lambda: _single(
        "Reshape", {"x": _rand(2, 3, 4)}, {"shape": np.array([0, -1], np.int64)}
    ),
    "reshape_allowzero": lambda: _single(
        "Reshape", {"x": _rand(2, 3, 4)}, {"shape": np.array([4, 6], np.int64)}, opset=14, allowzero=1
    ),
    "flatten": lambda: _single("Flatten", {"x": _rand(2, 3, 4, 5)}, axis=2),
    "flatten_negative": lambda: _single("Flatten", {"x": _rand(2, 3, 4)}, axis=-1),
    "transpose": lambda: _single("Transpose", {"x": _rand(2, 3, 4)}, perm=[1, 2, 0]),
    "transpose_default": lambda: _single("Transpose", {"x": _rand(2, 3, 4)}),
    "resize_scales_half_pixel": lambda: (
        [node("Resize", ["x", "", "scales"], ["y"], mode="nearest")],
        {"x": _rand(1, 2, 3, 4)}, ["y"], {"scales": np.array([1, 1, 2, 2], np.float32)}, 17,
    ),
    "resize_sizes_asymmetric_floor": lambda: (
        [node("Resize", ["x", "", "", "sizes"], ["y"], mode="nearest",
              coordinate_transformation_mode="asymmetric", nearest_mode="floor")],
        {"x": _rand(1, 2, 4, 5)}, ["y"], {"sizes": np.array([1, 2, 7, 3], np.int64)}, 17,
    ),
    "resize_downscale_ceil": lambda: (
        [node("Resize", ["x", "", "scales"], ["y"], mode="nearest", nearest_mode="ceil")],
        {"x": _rand(1, 1, 6, 6)}, ["y"], {"scales": np.array([1, 1, 0.5, 0.5], np.float32)}, 17,
    ),
    "resize_axes_opset18": lambda: (
        [node("Resize", ["x", "", "scales"], ["y"], mode="nearest", axes=[2, 3],
              nearest_mode="round_prefer_ceil")],
        {"x": _rand(1, 2, 3, 3)}, ["y"], {"scales": np.array([1.5, 3.0], np.float32)}, 18,
    ),
    "chain_conv_bn_relu_pool_gemm": lambda: (
        [
            node("Conv", ["x", "W"], ["c"], pads=[1, 1, 1, 1]),
            helper.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["n"], name="bn"),
            helper.make_node("Relu", ["n"], ["r"], name="relu"),
            helper.make_node("GlobalAveragePool", ["r"], ["p"], name="gap"),
            helper.make_node("Flatten", ["p"], ["f"], name="flat"),
            helper.make_node("Gemm", ["f", "fc", "fcb"], ["y"], name="fc", transB=1),
        ],
        {"x": _rand(2, 3, 8, 8)}, ["y"],
        {"W": _rand(6, 3, 3, 3), "s": _rand(6), "b": _rand(6), "m": _rand(6),
         "v": np.abs(_rand(6)) + 0.5, "fc": _rand(4, 6), "fcb": _rand(4)},
        17,
    ),
}


#: Cases where onnx.reference departs from the ONNX spec: Softmax before opset 13 must
#: flatten to 2-D at ``axis`` (onnx.reference normalizes over ``axis`` alone), so
#: onnxruntime is the oracle there.
ORT_ORACLE = {"softmax_opset11_coerced"}


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_op_matches_reference(case, precision):
    nodes, feeds, outputs, inits, opset = CASES[case]()
    model = make_model(nodes, feeds, outputs, inits, opset)
    assert_matches(model, feeds, precision, "onnxruntime" if case in ORT_ORACLE else "onnx")


def test_every_op_has_a_case():
    covered = {n.op_type for build in CASES.values() for n in build()[0]}
    assert set(NPU_OPS) - covered == {"QuantizeLinear", "DequantizeLinear"}  # tested below


def test_op_set_is_exactly_the_issue_list():
    assert set(NPU_OPS) == {
        "Conv", "Gemm", "MatMul", "Add", "Sub", "Mul", "Div", "Relu", "LeakyRelu", "Clip",
        "Sigmoid", "Tanh", "HardSwish", "Gelu", "Softmax", "LayerNormalization",
        "BatchNormalization", "MaxPool", "AveragePool", "GlobalAveragePool", "Concat",
        "Reshape", "Flatten", "Transpose", "Resize", "QuantizeLinear", "DequantizeLinear",
    }
    for op in ("Erf", "Pow", "Sqrt", "ReduceMean", "Gather"):
        assert op not in NPU_OPS


# -- precision --------------------------------------------------------------------------
def test_fp16_accumulates_in_float32():
    # 4096 products of 1: a float16 accumulator would stop at 2048 (2048 + 1 rounds back).
    model = make_model(
        [node("MatMul", ["a", "b"], ["y"])],
        {"a": np.ones((1, 4096), np.float32), "b": np.ones((4096, 1), np.float32)}, ["y"],
    )
    (y,) = run_npu(model, {"a": np.ones((1, 4096), np.float32), "b": np.ones((4096, 1), np.float32)}, "fp16")
    assert y.dtype == np.float16 and float(y[0, 0]) == 4096.0


def test_fp16_differs_from_fp32_like_hardware():
    feeds = {"x": _rand(4, 64)}
    model = make_model([node("Tanh", ["x"], ["y"])], feeds, ["y"])
    (y16,) = run_npu(model, feeds, "fp16")
    (y32,) = run_npu(model, feeds, "fp32")
    assert y16.dtype == np.float16 and y32.dtype == np.float32
    assert np.any(y16.astype(np.float32) != y32)
    np.testing.assert_allclose(y16.astype(np.float32), y32, atol=1e-3)


def test_float16_storage_saturates_instead_of_overflowing():
    # BERT's additive mask: (1 - mask) * float32.min. As float16, float32.min must become
    # -65504 (not -inf), or the unmasked positions compute 0 * -inf = NaN.
    feeds = {"keep": np.array([0.0, 1.0, 0.0], np.float32)}
    fill = np.float32(np.finfo(np.float32).min)
    model = make_model([node("Mul", ["keep", "fill"], ["y"])], feeds, ["y"], {"fill": fill})
    (y,) = run_npu(model, feeds, "fp16")
    np.testing.assert_array_equal(y, np.array([0.0, -65504.0, 0.0], np.float16))
    big = {"a": np.array([60000.0, -60000.0], np.float32)}
    model = make_model([node("Add", ["a", "a"], ["y"])], big, ["y"])
    (y,) = run_npu(model, big, "fp16")
    np.testing.assert_array_equal(y, np.array([65504.0, -65504.0], np.float16))


def test_float16_model_runs_in_fp32_storage():
    feeds = {"a": _rand(3, 4, dtype=np.float16), "b": _rand(3, 4, dtype=np.float16)}
    model = make_model([node("Add", ["a", "b"], ["y"])], feeds, ["y"])
    (y,) = run_npu(model, feeds, "fp32")
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, feeds["a"].astype(np.float32) + feeds["b"], rtol=1e-6)


def test_storage_dtype_rules():
    assert storage_dtype(np.float32, "fp16") == np.float16
    assert storage_dtype(np.float32, "int8") == np.float16
    assert storage_dtype(np.float16, "fp32") == np.float32
    assert storage_dtype(np.int64, "fp16") == np.int64
    assert storage_dtype(np.int8, "int8") == np.int8
    group = make_group(make_model([node("Relu", ["x"], ["y"])], {"x": _rand(2)}, ["y"]))
    with pytest.raises(ValueError, match="precision"):
        NPU_OPS["Relu"].check(group.nodes[0], group.graph, "fp64")


# -- quantization (int8 precision) ------------------------------------------------------
#: onnx.reference implements QuantizeLinear/DequantizeLinear from opset 19 on.
QDQ_OPSET = 19


def _qdq_model(per_axis: bool):
    w = _rand(4, 3, 3, 3)
    if per_axis:
        w_scale = (np.abs(w).reshape(4, -1).max(axis=1) / 127).astype(np.float32)
        wq = np.clip(np.rint(w / w_scale[:, None, None, None]), -127, 127).astype(np.int8)
        w_zp = np.zeros(4, np.int8)
    else:
        w_scale = np.float32(np.abs(w).max() / 127)
        wq = np.clip(np.rint(w / w_scale), -127, 127).astype(np.int8)
        w_zp = np.int8(0)
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"], name="q_x"),
        helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"], name="dq_x"),
        helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wd"], name="dq_w", axis=0),
        helper.make_node("Conv", ["xd", "wd"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["y"], name="relu"),
    ]
    inits = {"xs": np.float32(0.02), "xz": np.uint8(128), "wq": wq, "ws": w_scale, "wz": w_zp}
    feeds = {"x": _rand(1, 3, 6, 6)}
    return make_model(nodes, feeds, ["y"], inits, QDQ_OPSET), feeds


@pytest.mark.parametrize("per_axis", [False, True])
def test_qdq_runs_on_the_npu_in_int8(per_axis):
    model, feeds = _qdq_model(per_axis)
    group = make_group(model)
    for n in group.nodes:
        assert check_node(n, group.graph, "int8") == ("", "")
    program = compile_group(group, "int8")
    assert program.constants["wq"].dtype == np.int8  # quantized weights stay int8
    assert program.constants["xz"].dtype == np.uint8
    assert program.constants["ws"].dtype == np.float16
    (y,) = program.run([to_storage(feeds["x"], "int8")])
    (expected,) = reference(model, feeds)
    assert y.dtype == np.float16
    # fp16 storage and the fp16 copy of the scales may move x by one quantization step
    # (rarely); the result stays within fp16 tolerance of the float32 reference.
    scale = float(np.abs(expected).max())
    np.testing.assert_allclose(y.astype(np.float32), expected, rtol=1e-2, atol=1e-2 * scale)
    assert np.abs(y.astype(np.float32) - expected).mean() < 1e-3 * scale


def test_quantize_linear_saturates_and_rounds_half_even():
    x = np.array([-1000.0, -0.5, 0.5, 1.5, 2.5, 1000.0], np.float32)
    model = make_model(
        [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"], name="q")],
        {"x": x}, ["y"], {"s": np.float32(1.0), "z": np.int8(0)}, QDQ_OPSET,
    )
    (y,) = run_npu(model, {"x": x}, "int8")
    assert y.dtype == np.int8
    np.testing.assert_array_equal(y, [-128, 0, 0, 2, 2, 127])
    np.testing.assert_array_equal(y, reference(model, {"x": x})[0])


def test_dequantize_int32_bias_constant_accepted():
    feeds = {"x": _rand(2, 3)}
    model = make_model(
        [helper.make_node("DequantizeLinear", ["b", "s"], ["bd"], name="dq"),
         helper.make_node("Add", ["x", "bd"], ["y"], name="add")],
        feeds, ["y"], {"b": np.array([100, -200, 300], np.int32), "s": np.float32(0.01)}, QDQ_OPSET,
    )
    group = make_group(model)
    assert check_node(group.nodes[0], group.graph, "int8") == ("", "")
    assert_matches(model, feeds, "int8")


@pytest.mark.parametrize("precision", ["fp16", "fp32"])
def test_qdq_refused_outside_int8(precision):
    model, _ = _qdq_model(False)
    group = make_group(model)
    reason, category = check_node(group.nodes[0], group.graph, precision)
    assert category == "op" and "int8" in reason and "QuantizeLinear" in reason


def test_dequantize_runtime_int32_refused():
    model = make_model(
        [helper.make_node("DequantizeLinear", ["x", "s"], ["y"], name="dq")],
        {"x": np.arange(4, dtype=np.int32)}, ["y"], {"s": np.float32(0.1)},
    )
    group = make_group(model)
    reason, category = check_node(group.nodes[0], group.graph, "int8")
    assert category == "dtype" and "int32" in reason


# -- refusals ---------------------------------------------------------------------------
def _check(nodes, feeds, inits=None, opset=17, precision="fp16", outputs=("y",), index=0):
    group = make_group(make_model(nodes, feeds, list(outputs), inits, opset))
    return check_node(group.nodes[index], group.graph, precision)


def _dynamic_model():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])
    graph = helper.make_graph([node("Relu", ["x"], ["y"])], "t", [x], [helper.make_empty_tensor_value_info("y")])
    return onnx.shape_inference.infer_shapes(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    )


def test_refuses_dynamic_shape():
    group = make_group(_dynamic_model())
    reason, category = check_node(group.nodes[0], group.graph, "fp16")
    assert category == "shape" and reason.startswith("dynamic shape") and "batch" in reason


def test_refuses_unknown_shape():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, None)
    graph = helper.make_graph([node("Relu", ["x"], ["y"])], "t", [x], [helper.make_empty_tensor_value_info("y")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    group = make_group(model)
    reason, category = check_node(group.nodes[0], group.graph, "fp16")
    assert category == "shape" and reason.startswith("dynamic shape")


def test_compile_refuses_what_check_refuses():
    with pytest.raises(CompileError, match="dynamic shape"):
        compile_group(make_group(_dynamic_model()), "fp16")


def test_refuses_resize_linear_naming_the_mode():
    reason, category = _check(
        [node("Resize", ["x", "", "scales"], ["y"], mode="linear")],
        {"x": _rand(1, 1, 2, 2)}, {"scales": np.array([1, 1, 2, 2], np.float32)},
    )
    assert category == "attribute" and "'linear'" in reason and "nearest" in reason


def test_refuses_resize_align_corners():
    reason, category = _check(
        [node("Resize", ["x", "", "scales"], ["y"], coordinate_transformation_mode="align_corners")],
        {"x": _rand(1, 1, 2, 2)}, {"scales": np.array([1, 1, 2, 2], np.float32)},
    )
    assert category == "attribute" and "align_corners" in reason


def test_refuses_resize_opset10():
    reason, category = _check(
        [node("Resize", ["x", "scales"], ["y"])],
        {"x": _rand(1, 1, 2, 2)}, {"scales": np.array([1, 1, 2, 2], np.float32)}, opset=10,
    )
    assert category == "op" and "opset 10" in reason


def test_refuses_1d_conv():
    reason, category = _check([node("Conv", ["x", "W"], ["y"])], {"x": _rand(1, 3, 10)}, {"W": _rand(4, 3, 3)})
    assert category == "shape" and "1-D" in reason


def test_refuses_conv_auto_pad():
    reason, category = _check(
        [node("Conv", ["x", "W"], ["y"], auto_pad="SAME_UPPER")], {"x": _rand(1, 3, 5, 5)}, {"W": _rand(4, 3, 3, 3)}
    )
    assert category == "attribute" and "auto_pad=SAME_UPPER" in reason


def test_refuses_pool_dilations():
    reason, category = _check(
        [node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], dilations=[2, 2])], {"x": _rand(1, 1, 6, 6)}
    )
    assert category == "attribute" and "dilations" in reason


def test_refuses_maxpool_indices():
    reason, category = _check(
        [node("MaxPool", ["x"], ["y", "idx"], kernel_shape=[2, 2])], {"x": _rand(1, 1, 4, 4)},
        outputs=("y", "idx"),
    )
    assert category == "attribute" and "Indices" in reason


def test_refuses_int32_dtype():
    reason, category = _check(
        [node("Add", ["a", "b"], ["y"])], {"a": np.ones(3, np.int32), "b": np.ones(3, np.int32)}
    )
    assert category == "dtype" and "int32" in reason


def test_refuses_float64_dtype():
    reason, category = _check([node("Relu", ["x"], ["y"])], {"x": np.ones(3, np.float64)})
    assert category == "dtype" and "float64" in reason


def test_refuses_runtime_reshape_shape():
    reason, category = _check(
        [node("Reshape", ["x", "s"], ["y"])], {"x": _rand(2, 3), "s": np.array([3, 2], np.int64)}
    )
    assert category == "shape" and reason.startswith("dynamic shape") and "constant" in reason


def test_refuses_runtime_clip_bounds():
    reason, category = _check(
        [node("Clip", ["x", "lo"], ["y"])], {"x": _rand(2, 3), "lo": np.float32(0.0)}
    )
    assert category == "attribute" and "min" in reason


def test_refuses_training_batchnorm():
    reason, category = _check(
        [node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y", "rm", "rv"], training_mode=1)],
        {"x": _rand(2, 3, 4)}, {"s": _rand(3), "b": _rand(3), "m": _rand(3), "v": np.ones(3, np.float32)},
        outputs=("y", "rm", "rv"),
    )
    assert category == "attribute" and "training_mode" in reason


@pytest.mark.parametrize("op", ["Erf", "Sqrt"])
def test_refuses_ops_outside_the_set(op):
    reason, category = _check([node(op, ["x"], ["y"])], {"x": _rand(3)})
    assert category == "op" and op in reason


def test_refuses_other_domains():
    n = helper.make_node("Relu", ["x"], ["y"], name="r", domain="com.example")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])
    graph = helper.make_graph([n], "t", [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)], ir_version=10
    )
    group = make_group(model)
    reason, category = check_node(group.nodes[0], group.graph, "fp16")
    assert category == "op" and "com.example" in reason


def test_accepts_any_softmax_axis_and_gemm_coefficients():
    assert _check([node("Softmax", ["x"], ["y"], axis=0)], {"x": _rand(3, 4)}) == ("", "")
    assert _check(
        [node("Gemm", ["a", "B"], ["y"], alpha=3.0, beta=0.0)], {"a": _rand(2, 3)}, {"B": _rand(3, 2)}
    ) == ("", "")


# -- lowering, prepacking and cost ------------------------------------------------------
def test_gemm_prepacks_transposed_weight():
    nodes, feeds, outputs, inits, opset = CASES["gemm_transB_const"]()
    program = compile_group(make_group(make_model(nodes, feeds, outputs, inits, opset)), "fp16")
    (ins,) = program.instructions
    assert ins.attrs["transB"] == 0
    packed = program.constants[ins.inputs[1]]
    assert packed.shape == (6, 5) and packed.dtype == np.float16
    np.testing.assert_array_equal(packed, inits["B"].T.astype(np.float16))


def test_batchnorm_is_folded_into_scale_and_shift():
    nodes, feeds, outputs, inits, opset = CASES["batchnorm_folded"]()
    program = compile_group(make_group(make_model(nodes, feeds, outputs, inits, opset)), "fp16")
    (ins,) = program.instructions
    assert ins.attrs["folded"] == 1 and len(ins.inputs) == 3
    assert program.weight_bytes() == 2 * 4 * 2  # two per-channel vectors of 4 float16


def test_clip_and_resize_parameters_become_attributes():
    nodes, feeds, outputs, inits, opset = CASES["clip_inputs"]()
    program = compile_group(make_group(make_model(nodes, feeds, outputs, inits, opset)), "fp16")
    # Lowered to Clip-6, whose bounds are attributes (the library runs it).
    assert program.instructions[0].attrs == {"since": 6, "attributes": {"min": -1.0, "max": 2.0}}
    assert program.instructions[0].inputs == ["x"] and program.constants == {}
    nodes, feeds, outputs, inits, opset = CASES["resize_scales_half_pixel"]()
    program = compile_group(make_group(make_model(nodes, feeds, outputs, inits, opset)), "fp16")
    assert program.instructions[0].attrs["sizes"] == [1, 2, 6, 8]


def test_reshape_shape_constant_stays_int64():
    nodes, feeds, outputs, inits, opset = CASES["reshape_zero_minus_one"]()
    program = compile_group(make_group(make_model(nodes, feeds, outputs, inits, opset)), "fp16")
    assert program.constants["shape"].dtype == np.int64


def test_conv_cost_and_zero_copy_reshape():
    conv = NPU_OPS["Conv"]
    macs, moved = conv.cost([(1, 3, 8, 8), (4, 3, 3, 3), (4,)], [(1, 4, 8, 8)], {}, [2, 2, 2, 2])
    assert macs == 4 * 8 * 8 * 3 * 3 * 3
    assert moved == 2 * (3 * 64 + 4 * 27 + 4 + 4 * 64)
    assert NPU_OPS["Reshape"].cost([(2, 3), (2,)], [(3, 2)], {}) == (0, 0)
    mm = NPU_OPS["MatMul"].cost([(2, 5, 7), (7, 3)], [(2, 5, 3)], {})
    assert mm == (2 * 5 * 3 * 7, 2 * (70 + 21 + 30))


def test_instruction_costs_use_storage_itemsize():
    nodes, feeds, outputs, inits, opset = CASES["relu"]()
    model = make_model(nodes, feeds, outputs, inits, opset)
    p16 = compile_group(make_group(model), "fp16")
    p32 = compile_group(make_group(model), "fp32")
    assert p16.instructions[0].bytes == 2 * 15 * 2
    assert p32.instructions[0].bytes == 2 * 15 * 4
    assert p16.instructions[0].macs == 15
