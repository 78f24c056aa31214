"""Constant folding's evaluation without a session (onyxrt.node_evaluation.run_nodes): the
same values as a session of the nodes, and None (the session then) for what it leaves."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from onyxrt.discovery import CPU_PROVIDER, catalog
from onyxrt.node_evaluation import run_nodes
from onyxrt.optimizer.rewrite import dataless_tensor
from onyxrt.session import _evaluate_constants


@pytest.fixture(scope="module")
def cpu():
    cls = catalog().provider_class(CPU_PROVIDER)
    return cls(cls.option_schema.defaults())


def _model(nodes, initializers, outputs, opset=17):
    graph = helper.make_graph(nodes, "folded", [], [helper.make_empty_tensor_value_info(o) for o in outputs],
                              initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _same_as_a_session(model, arrays, cpu):
    direct = run_nodes(model, arrays, cpu)
    assert direct is not None
    session = _evaluate_constants(model, arrays)  # no provider given: a session
    assert len(direct) == len(session)
    for d, s in zip(direct, session, strict=True):
        assert d.dtype == s.dtype and d.shape == s.shape
        np.testing.assert_array_equal(d, s)
    return direct


def test_same_padding_arithmetic(cpu):
    """The TF "same" padding of a torch export: integer arithmetic on a shape (Div of
    negative integers included, which must truncate as the kernel does), then Concat."""
    shape = numpy_helper.from_array(np.array([1, 32, 113, 57], np.int64), "shape")
    consts = [numpy_helper.from_array(np.array(v, np.int64), n)
              for n, v in [("two", [2]), ("idx", [2, 3]), ("stride", [2, 2]), ("k", [3, 3]), ("zero", [0])]]
    nodes = [
        helper.make_node("Gather", ["shape", "idx"], ["hw"], axis=0),
        helper.make_node("Sub", ["k", "hw"], ["neg"]),
        helper.make_node("Div", ["neg", "stride"], ["q"]),
        helper.make_node("Mod", ["hw", "stride"], ["r"]),
        helper.make_node("Max", ["q", "zero"], ["m"]),
        helper.make_node("Div", ["m", "two"], ["half"]),
        helper.make_node("Concat", ["half", "r", "q"], ["pads"], axis=0),
        helper.make_node("Cast", ["pads"], ["padsf"], to=TensorProto.FLOAT),
        helper.make_node("ConstantOfShape", ["idx"], ["ones"], value=helper.make_tensor("v", TensorProto.FLOAT, [1], [1.5])),
        helper.make_node("Range", ["zero_s", "ten", "three"], ["rng"]),
    ]
    scalars = [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in [("zero_s", 0), ("ten", 10), ("three", 3)]]
    out = _same_as_a_session(_model(nodes, [shape, *consts, *scalars], ["pads", "padsf", "ones", "rng", "q"]), {}, cpu)
    np.testing.assert_array_equal(out[4], [-55, -27])  # (3 - 113) / 2: truncated


def test_weights_and_views(cpu):
    """Transposed weights (a view of the initializer: returned as an array of its own), a
    data-less initializer's array, an Identity of an initializer, float math."""
    w = np.random.default_rng(0).standard_normal((8, 5)).astype(np.float32)
    b = np.random.default_rng(1).standard_normal(5).astype(np.float32)
    nodes = [
        helper.make_node("Transpose", ["w"], ["wt"], perm=[1, 0]),
        helper.make_node("Identity", ["b"], ["bi"]),
        helper.make_node("Mul", ["b", "b"], ["bb"]),
        helper.make_node("Sqrt", ["bb"], ["root"]),
        helper.make_node("Softmax", ["wt"], ["sm"], axis=1),
    ]
    inits = [dataless_tensor("w", w), numpy_helper.from_array(b, "b")]
    out = _same_as_a_session(_model(nodes, inits, ["wt", "bi", "root", "sm"]), {"w": w}, cpu)
    assert not np.shares_memory(out[0], w) and out[0].flags.owndata
    out[1][0] = 99.0  # the caller's to change: not the initializer's array
    assert not np.shares_memory(out[1], w)


def test_what_needs_a_session(cpu):
    one = numpy_helper.from_array(np.array([1.0], np.float32), "one")
    branch = helper.make_graph([helper.make_node("Identity", ["one"], ["y"])], "b", [],
                               [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    cond = numpy_helper.from_array(np.array(True), "cond")
    with_subgraph = _model([helper.make_node("If", ["cond"], ["out"], then_branch=branch, else_branch=branch)],
                           [cond, one], ["out"])
    assert run_nodes(with_subgraph, {}, cpu) is None
    np.testing.assert_array_equal(_evaluate_constants(with_subgraph, {}, cpu)[0], [1.0])  # the session's
    unknown = _model([helper.make_node("NoSuchOp", ["one"], ["out"], domain="example.custom")], [one], ["out"])
    unknown.opset_import.append(helper.make_opsetid("example.custom", 1))
    assert run_nodes(unknown, {}, cpu) is None
    # a kernel that raises: the session reports it, with the node's context
    bad = _model([helper.make_node("Reshape", ["one", "shape"], ["out"])],
                 [one, numpy_helper.from_array(np.array([3], np.int64), "shape")], ["out"])
    assert run_nodes(bad, {}, cpu) is None
    with pytest.raises(Exception, match="Reshape"):
        _evaluate_constants(bad, {}, cpu)
    # nodes out of order
    swapped = _model([helper.make_node("Neg", ["a"], ["out"]), helper.make_node("Neg", ["one"], ["a"])], [one], ["out"])
    assert run_nodes(swapped, {}, cpu) is None


def test_folding_a_real_pattern_end_to_end():
    """A model whose Pad amounts are computed from its (static) input shape: folded, then
    run, it matches onnxruntime."""
    ort = pytest.importorskip("onnxruntime")
    import onyxrt

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 7, 9])
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Slice", ["s", "st", "en"], ["hw"]),
        helper.make_node("Sub", ["hw", "one"], ["hw1"]),
        helper.make_node("Div", ["hw1", "two"], ["half"]),
        helper.make_node("Concat", ["zeros", "half", "zeros", "half"], ["pads"], axis=0),
        helper.make_node("Pad", ["x", "pads"], ["y"], mode="reflect"),
    ]
    inits = [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in
             [("st", [2]), ("en", [4]), ("one", [1]), ("two", [2]), ("zeros", [0, 0])]]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [helper.make_empty_tensor_value_info("y")], inits),
                              opset_imports=[helper.make_opsetid("", 17)])
    data = np.random.default_rng(3).standard_normal((1, 2, 7, 9)).astype(np.float32)
    ours = onyxrt.InferenceSession(model.SerializeToString()).run(None, {"x": data})[0]
    theirs = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": data})[0]
    np.testing.assert_array_equal(ours, theirs)


def test_runs_under_memory_limits(cpu, monkeypatch):
    """The nodes run under a run's memory limits, as the session they replace did: an
    allocation over the limit makes the kernel raise, and the session path takes over."""
    from onyxrt import limits, node_evaluation
    from onyxrt_cpu import native

    if not native.AVAILABLE:
        pytest.skip("the memory guard is part of onyxrt-cpu's compiled build")
    shape = numpy_helper.from_array(np.array([64, 64], np.int64), "shape")
    model = _model([helper.make_node("ConstantOfShape", ["shape"], ["out"])], [shape], ["out"])
    assert run_nodes(model, {}, cpu)[0].shape == (64, 64)
    monkeypatch.setattr(node_evaluation, "RunLimits", lambda: limits.RunLimits(max_tensor_bytes=1024))
    assert run_nodes(model, {}, cpu) is None
    assert _evaluate_constants(model, {}, cpu)[0].shape == (64, 64)  # the session's own limits
