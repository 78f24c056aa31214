"""Scan bodies computing pairwise distances (skl2onnx's ``cdist``, behind scikit-learn's
nearest neighbours) run as whole blocks of rows instead of row by row
(``Scan._distances`` in kernels/controlflow.py): the same bits as the row loop, the same
results as onnxruntime, and any other body left to the loop."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onyxrt


def _model(body_nodes, initializers=(), opset=17, dtype=TensorProto.FLOAT, sub_order=("s", "y")):
    body = helper.make_graph(
        [helper.make_node("Identity", ["s"], ["s_out"]),
         helper.make_node("Sub", list(sub_order), ["d"]), *body_nodes],
        "body",
        [helper.make_tensor_value_info("s", dtype, None), helper.make_tensor_value_info("y", dtype, None)],
        [helper.make_tensor_value_info("s_out", dtype, None), helper.make_tensor_value_info("out", dtype, None)],
        list(initializers),
    )
    scan = helper.make_node("Scan", ["X", "Y"], ["S", "D"], num_scan_inputs=1, body=body)
    graph = helper.make_graph(
        [scan], "g", [helper.make_tensor_value_info("X", dtype, [None, None]),
                      helper.make_tensor_value_info("Y", dtype, [None, None])],
        [helper.make_tensor_value_info("S", dtype, None), helper.make_tensor_value_info("D", dtype, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]).SerializeToString()


def _axes_input(name="axes"):
    return numpy_helper.from_array(np.array([1], np.int64), name)


BODIES = {
    "squared, axes attribute": dict(body_nodes=[
        helper.make_node("ReduceSumSquare", ["d"], ["r"], axes=[1], keepdims=0),
        helper.make_node("Identity", ["r"], ["out"])]),
    "squared, axes input": dict(body_nodes=[
        helper.make_node("ReduceSumSquare", ["d", "axes"], ["r"], keepdims=0),
        helper.make_node("Identity", ["r"], ["out"])], initializers=[_axes_input()], opset=18),
    "squared, reversed Sub, square root": dict(body_nodes=[
        helper.make_node("ReduceSumSquare", ["d"], ["r"], axes=[1], keepdims=0),
        helper.make_node("Sqrt", ["r"], ["out"])], sub_order=("y", "s")),
    "absolute": dict(body_nodes=[
        helper.make_node("Abs", ["d"], ["a"]),
        helper.make_node("ReduceSum", ["a", "axes"], ["r"], keepdims=0),
        helper.make_node("Identity", ["r"], ["out"])], initializers=[_axes_input()], opset=13),
}


def _scan_kernel(session):
    return next(step.kernel for step in session._plan.steps if step.op_type == "Scan")


@pytest.mark.parametrize("body", list(BODIES))
@pytest.mark.parametrize("shape", [(1, 20, 400), (300, 40, 200), (7, 3, 1)])  # points, features, rows
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_distance_bodies_run_as_blocks_with_the_loops_bits(body, shape, dtype):
    spec = dict(BODIES[body])
    if dtype == np.float64:
        spec["dtype"] = TensorProto.DOUBLE
    model = _model(**spec)
    n, f, t = shape  # (300, 40, 200): blocks of 87 rows
    rng = np.random.default_rng(n + f + t)
    feeds = {"X": rng.standard_normal((n, f)).astype(dtype), "Y": rng.standard_normal((t, f)).astype(dtype)}
    session = onyxrt.InferenceSession(model)
    kernel = _scan_kernel(session)
    assert kernel.distance is not None
    fast = session.run(None, feeds)
    kernel.distance = None  # the row-by-row loop through the body
    loop = session.run(None, feeds)
    assert fast[1].shape == loop[1].shape == (t, n) and fast[1].dtype == loop[1].dtype == dtype
    assert np.array_equal(fast[0], feeds["X"]) and np.array_equal(loop[0], feeds["X"])
    assert np.array_equal(fast[1], loop[1])
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)
    np.testing.assert_allclose(fast[1], want[1], rtol=1e-5 if dtype == np.float32 else 1e-12)


def test_other_bodies_and_no_rows_take_the_loop():
    """keepdims=1, another axis, another op: the loop (and the same results as
    onnxruntime); no rows: the loop's own empty result."""
    keep = _model([helper.make_node("ReduceSumSquare", ["d"], ["out"], axes=[1], keepdims=1)])
    axis0 = _model([helper.make_node("ReduceSumSquare", ["d"], ["out"], axes=[0], keepdims=0)])
    other = _model([helper.make_node("ReduceMax", ["d"], ["out"], axes=[1], keepdims=0)])
    rng = np.random.default_rng(0)
    feeds = {"X": rng.standard_normal((5, 3)).astype(np.float32), "Y": rng.standard_normal((4, 3)).astype(np.float32)}
    for model in (keep, axis0, other):
        session = onyxrt.InferenceSession(model)
        assert _scan_kernel(session).distance is None
        got = session.run(None, feeds)
        want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)
        np.testing.assert_allclose(got[1], want[1], rtol=1e-6)
    session = onyxrt.InferenceSession(_model(**BODIES["squared, axes attribute"]))
    empty = session.run(None, {"X": feeds["X"], "Y": np.zeros((0, 3), np.float32)})
    _scan_kernel(session).distance = None
    assert np.array_equal(empty[1], session.run(None, {"X": feeds["X"], "Y": np.zeros((0, 3), np.float32)})[1])


def test_distance_blocks_honour_the_tensor_limit():
    """The rows' results count against session.max_tensor_bytes as the loop's collected
    outputs do: a limit below them is the loop's ResourceLimitExceeded."""
    from onyxrt.errors import ResourceLimitExceeded

    options = onyxrt.SessionOptions()
    options.add_session_config_entry("session.max_tensor_bytes", str(64 * 1024))
    session = onyxrt.InferenceSession(_model(**BODIES["squared, axes attribute"]), options)
    feeds = {"X": np.ones((100, 4), np.float32), "Y": np.ones((1000, 4), np.float32)}  # 400 KB of results
    with pytest.raises(ResourceLimitExceeded, match="scan output 0"):
        session.run(None, feeds)
    _scan_kernel(session).distance = None
    with pytest.raises(ResourceLimitExceeded, match="scan output 0"):
        session.run(None, feeds)
