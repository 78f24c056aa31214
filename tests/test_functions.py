"""Operators defined by ONNX function bodies, and model-local functions."""

from __future__ import annotations

import numpy as np
import onnx
from model_helpers import make_model, tensor
from onnx import helper

import onyxrt as ort


def test_operator_without_a_kernel_runs_as_its_function_body():
    # RMSNormalization has no CPU kernel; ONNX defines it as a function of simpler ops.
    model = make_model(
        [helper.make_node("RMSNormalization", ["x", "scale"], ["y"], name="rms", epsilon=1e-5)],
        [tensor("x", [2, 4]), tensor("scale", [4])],
        [tensor("y", [2, 4])],
        opset=23,
    )
    session = ort.InferenceSession(model.SerializeToString())
    x = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
    scale = np.array([1.0, 2.0, 0.5, -1.0], np.float32)
    (y,) = session.run(None, {"x": x, "scale": scale})
    expected = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + 1e-5) * scale
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-6)
    assert "RMSNormalization" not in {n.op_type for n in session.placement.nodes}  # expanded


def test_context_dependent_function_uses_default_attributes():
    # HannWindow's body depends on its attributes; the defaults must reach the body.
    model = make_model(
        [helper.make_node("HannWindow", ["n"], ["w"], name="hann")],
        [tensor("n", [], onnx.TensorProto.INT64)],
        [tensor("w", [None])],
        opset=17,
    )
    (w,) = ort.InferenceSession(model.SerializeToString()).run(None, {"n": np.array(8, np.int64)})
    k = np.arange(8)
    np.testing.assert_allclose(w, (np.sin(np.pi * k / 8) ** 2).astype(np.float32), atol=1e-6)


def test_model_local_functions_are_inlined():
    double_relu = helper.make_function(
        "custom.fn", "DoubleRelu", ["a"], ["b"],
        [helper.make_node("Relu", ["a"], ["r"]), helper.make_node("Add", ["r", "r"], ["b"])],
        [helper.make_opsetid("", 17)],
    )
    graph = helper.make_graph(
        [helper.make_node("DoubleRelu", ["x"], ["y"], domain="custom.fn", name="f")],
        "g", [tensor("x", [3])], [tensor("y", [3])],
    )
    model = helper.make_model(
        graph, functions=[double_relu], ir_version=10,
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("custom.fn", 1)],
    )
    (y,) = ort.InferenceSession(model.SerializeToString()).run(
        None, {"x": np.array([-1.0, 0.5, 2.0], np.float32)}
    )
    np.testing.assert_allclose(y, [0.0, 1.0, 4.0])


def test_gradient_node_runs_as_its_backward_graph():
    """ai.onnx.preview.training::Gradient becomes ordinary nodes before partitioning."""
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["a", "w"], ["m"], name="mm"),
            helper.make_node("Tanh", ["m"], ["t"], name="tanh"),
            helper.make_node("Mul", ["t", "a2"], ["y"], name="mul"),
            helper.make_node("Gradient", ["a", "w"], ["da", "dw"], name="grad",
                             domain="ai.onnx.preview.training", xs=["a", "w"], y="y"),
        ],
        "g",
        [tensor("a", [2, 3]), tensor("w", [3, 2]), tensor("a2", [2, 2])],
        [tensor("y", [2, 2]), tensor("da", [2, 3]), tensor("dw", [3, 2])],
    )
    model = helper.make_model(graph, ir_version=10, opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.preview.training", 1)])
    rng = np.random.default_rng(0)
    a, w, a2 = (rng.standard_normal(s).astype(np.float32) for s in ((2, 3), (3, 2), (2, 2)))
    y, da, dw = ort.InferenceSession(model.SerializeToString()).run(None, {"a": a, "w": w, "a2": a2})
    g = a2 * (1 - np.tanh(a @ w) ** 2)  # dy/dm for a seed of ones
    np.testing.assert_allclose(da, g @ w.T, rtol=1e-5)
    np.testing.assert_allclose(dw, a.T @ g, rtol=1e-5)


def test_expanded_body_keeps_the_meaning_of_the_opset_it_was_written_for():
    # AffineGrid's body is written against opset 20; several of its operators gained
    # versions since, so at opset 21 it is converted, not merely relabelled.
    from onyxrt.functions import _same_operators

    body = onnx.defs.get_schema("AffineGrid", 20).function_body
    assert not _same_operators(body.node, 20, 21)
    model = make_model(
        [helper.make_node("AffineGrid", ["theta", "size"], ["grid"], name="grid", align_corners=1)],
        [tensor("theta", [1, 2, 3]), tensor("size", [4], onnx.TensorProto.INT64)],
        [tensor("grid", None)],
        opset=21,
    )
    session = ort.InferenceSession(model.SerializeToString())
    theta = np.array([[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]], np.float32)  # the identity
    (grid,) = session.run(None, {"theta": theta, "size": np.array([1, 1, 2, 3], np.int64)})
    xs, ys = np.meshgrid(np.linspace(-1, 1, 3), np.linspace(-1, 1, 2))
    np.testing.assert_allclose(grid[0], np.stack([xs, ys], axis=-1), atol=1e-6)
    assert "AffineGrid" not in {n.op_type for n in session.placement.nodes}  # expanded


def test_body_correction_leaves_a_body_it_does_not_recognise_alone():
    from onyxrt.functions import BODY_CORRECTIONS

    # A later onnx may fix the body: without the squeezes of rows r1 and r2, no change.
    fixed = onnx.FunctionProto()
    fixed.CopyFrom(onnx.defs.get_schema("AffineGrid", 20).function_body)
    for node in fixed.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                for sub in attr.g.node:
                    if sub.op_type == "Squeeze" and list(sub.input) in (["r1"], ["r2"]):
                        sub.input[0] = "renamed"
    untouched = onnx.FunctionProto()
    untouched.CopyFrom(fixed)
    BODY_CORRECTIONS[("", "AffineGrid", 20)](fixed)
    assert fixed == untouched


def test_ignored_standard_domain_function_is_logged(caplog):
    relu = helper.make_function("", "Relu", ["x"], ["y"], [helper.make_node("Neg", ["x"], ["y"])],
                                [helper.make_opsetid("", 17)])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [tensor("x", [2])], [tensor("y", [2])])
    model = helper.make_model(graph, functions=[relu], ir_version=10, opset_imports=[helper.make_opsetid("", 17)])
    with caplog.at_level("INFO", logger="onyxrt.functions"):
        (y,) = ort.InferenceSession(model.SerializeToString()).run(None, {"x": np.array([-1.0, 2.0], np.float32)})
    np.testing.assert_array_equal(y, [0.0, 2.0])
    assert "ignoring model-local function(s) ai.onnx::Relu" in caplog.text
