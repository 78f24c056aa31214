"""Shape inference through com.microsoft operators (core/onyxrt/contrib_shapes.py) and the
fusions it opens: a 4-bit layer as onnxruntime's quantizer writes it — MatMulNBits, its
bias Add, the GELU spelled out — becomes MatMulNBits with a bias and Gelu, computing what
onnxruntime computes."""

from __future__ import annotations

import collections

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

import onyxrt
from onyxrt import contrib_shapes

MS = "com.microsoft"


def _layer(k: int = 64, n: int = 96, block: int = 32, gelu: bool = True) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    kb = k // block
    q = rng.integers(0, 16, (n, k)).astype(np.uint8)
    b = (q[:, 0::2] | (q[:, 1::2] << 4)).reshape(n, kb, block // 2)
    scales = (rng.random(n * kb) * 0.05 + 0.01).astype(np.float32)
    inits = [numpy_helper.from_array(b, "b"), numpy_helper.from_array(scales, "s"),
             numpy_helper.from_array(rng.standard_normal(n).astype(np.float32), "bias"),
             numpy_helper.from_array(np.array(1.4142135, np.float32), "sqrt2"),
             numpy_helper.from_array(np.array(1.0, np.float32), "one"),
             numpy_helper.from_array(np.array(0.5, np.float32), "half")]
    nodes = [helper.make_node("MatMulNBits", ["x", "b", "s"], ["mm"], domain=MS, K=k, N=n, bits=4,
                              block_size=block, name="fc"),
             helper.make_node("Add", ["bias", "mm"], ["h"])]
    out = "h"
    if gelu:
        nodes += [helper.make_node("Div", ["h", "sqrt2"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
                  helper.make_node("Add", ["e", "one"], ["e1"]), helper.make_node("Mul", ["h", "e1"], ["m"]),
                  helper.make_node("Mul", ["m", "half"], ["y"])]
        out = "y"
    graph = helper.make_graph(nodes, "layer", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", k])],
                              [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)],
                             ir_version=10)


def test_inference_goes_through_matmul_nbits_and_the_layer_fuses():
    model = _layer()
    s = onyxrt.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    ops = collections.Counter(step.op_type for step in s._plan.steps)
    assert ops == {"MatMulNBits": 1, "Gelu": 1}, ops
    (nbits,) = [st for st in s._plan.steps if st.op_type == "MatMulNBits"]
    assert len(nbits.ins) == 6  # the bias is its input 5
    assert s.get_outputs()[0].shape == ["batch", "seq", 96]  # inferred through MatMulNBits
    x = np.random.default_rng(1).standard_normal((2, 3, 64)).astype(np.float32)
    ours = s.run(None, {"x": x})[0]
    theirs = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[0]
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)


def test_without_the_optimizer_the_layer_runs_as_written():
    model = _layer()
    so = onyxrt.SessionOptions()
    so.graph_optimization_level = onyxrt.GraphOptimizationLevel.ORT_DISABLE_ALL
    s = onyxrt.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    assert [st.op_type for st in s._plan.steps] == ["MatMulNBits", "Add", "Div", "Erf", "Add", "Mul", "Mul"]
    x = np.ones((1, 2, 64), np.float32)
    optimized = onyxrt.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(s.run(None, {"x": x})[0], optimized.run(None, {"x": x})[0], rtol=1e-5, atol=1e-6)


def test_a_bias_that_broadcasts_beyond_one_row_is_not_fused():
    """Only a (N,) bias folds into MatMulNBits; a (2, N) one changes the product's shape."""
    model = _layer(gelu=False)
    wide = np.random.default_rng(2).standard_normal((2, 96)).astype(np.float32)
    for t in model.graph.initializer:
        if t.name == "bias":
            t.CopyFrom(numpy_helper.from_array(wide, "bias"))
    s = onyxrt.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    assert [st.op_type for st in s._plan.steps] == ["MatMulNBits", "Add"]


@pytest.mark.parametrize("op,inputs,stand_in", [
    ("MatMulNBits", ["x", "b", "s"], "MatMul"), ("Gelu", ["x"], "Relu"), ("QuickGelu", ["x"], "Relu"),
    ("FastGelu", ["x"], "Relu"), ("FastGelu", ["x", "bias"], "Add"), ("BiasGelu", ["x", "bias"], "Add"),
    ("Attention", ["x", "w", "bias"], None),
])
def test_stand_ins_are_standard_operators_with_the_same_output(op, inputs, stand_in):
    attrs = {"K": 8, "N": 5, "bits": 4, "block_size": 16} if op == "MatMulNBits" else {}
    node = helper.make_node(op, inputs, ["y"], domain=MS, name="n", **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph)
    replaced = contrib_shapes.stand_in(model)
    assert replaced == (stand_in is not None)
    assert model.graph.node[0].op_type == (stand_in or op)
    assert list(model.graph.node[0].output) == ["y"] and model.graph.node[0].name == "n"
    if op == "MatMulNBits":
        inferred = onnx.shape_inference.infer_shapes(model)
        dims = [d.dim_value for d in inferred.graph.output[0].type.tensor_type.shape.dim]
        assert dims == [2, 5]
