"""Small plans run as one straight-line function (core/onyxrt/straight_line.py): the same
results, releases and errors as the generic run loop, which large plans and runs with
RunOptions keep."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import onyxrt
from onyxrt.errors import KernelError, ProviderError
from onyxrt.straight_line import MAX_STEPS, straight_line_runner
from onyxrt.testing.models import add_chain


def _session(model: onnx.ModelProto) -> onyxrt.InferenceSession:
    so = onyxrt.SessionOptions()
    so.graph_optimization_level = onyxrt.GraphOptimizationLevel.ORT_DISABLE_ALL
    return onyxrt.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def test_small_plans_get_the_straight_line_runner_and_large_ones_the_loop():
    small, large = _session(add_chain(8)), _session(add_chain(MAX_STEPS + 1))
    assert small._plan._straight is not None
    assert large._plan._straight is None
    x = np.array([1.5], np.float32)
    for s in (small, large):
        (y,) = s.run(None, {"x": x})
        # the loop's result, with RunOptions (which always take the generic loop)
        (y_loop,) = s.run(None, {"x": x}, onyxrt.RunOptions())
        np.testing.assert_array_equal(y, y_loop)
        assert y.dtype == np.float32 and y.shape == (1,)


def test_straight_line_results_equal_the_loop_on_a_branching_graph():
    # two outputs, a value read twice, a node with two outputs (TopK), an absent optional input
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5])
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Add", ["r", "x"], ["s"]),
        helper.make_node("Mul", ["s", "r"], ["m"]),
        helper.make_node("TopK", ["m", "k"], ["vals", "idx"], axis=1),
        helper.make_node("Clip", ["s", "", "hi"], ["c"]),
    ]
    graph = helper.make_graph(
        nodes, "g", [x],
        [helper.make_tensor_value_info(n, t, None) for n, t in
         (("vals", TensorProto.FLOAT), ("idx", TensorProto.INT64), ("c", TensorProto.FLOAT), ("m", TensorProto.FLOAT))],
        [helper.make_tensor("k", TensorProto.INT64, [1], [3]), helper.make_tensor("hi", TensorProto.FLOAT, [], [0.5])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    s = _session(model)
    assert s._plan._straight is not None
    feed = {"x": np.random.default_rng(0).standard_normal((2, 5)).astype(np.float32)}
    fast = s.run(None, feed)
    loop = s.run(None, feed, onyxrt.RunOptions())
    assert len(fast) == 4
    for a, b in zip(fast, loop):
        np.testing.assert_array_equal(a, b)


def test_intermediates_are_released_during_a_straight_line_run():
    # the first Add's result must be dropped once the second has read it, as in the loop
    seen: list[weakref.ref] = []

    def first(x):
        y = x + 1
        seen.append(weakref.ref(y))
        return (y,)

    def second(y):
        return (y * 2,)

    def check(z):
        gc.collect()
        assert seen[-1]() is None, "the first step's output outlived its last reader"
        return (z,)

    run = straight_line_runner([(first, (1,), (2,), (), None), (second, (2,), (3,), (2,), None),
                                (check, (3,), (4,), (), None)])
    assert run is not None
    vals = [None, np.ones(3), None, None, None]
    run(vals)
    np.testing.assert_array_equal(vals[4], np.full(3, 4.0))
    assert vals[2] is None


def test_a_failure_is_returned_with_its_step_and_whether_the_kernel_or_its_results_failed():
    def boom(x):
        raise ValueError("bad")

    def nothing(x):
        return ()

    ok = (lambda x: (x,), (1,), (2,), (), None)
    for steps, (want_i, want_results, kind) in (([ok, (boom, (2,), (3,), (), None)], (1, None, ValueError)),
                                                ([ok, (nothing, (2,), (3,), (), None)], (~1, (), IndexError))):
        run = straight_line_runner(steps)
        assert run is not None
        assert run([None, 1.0, None, None]) is not None
        i, results, exc = run([None, 1.0, None, None])
        assert i == want_i and type(exc) is kind
        if want_results is not None:
            assert results == want_results
        # the first step's result is kept (no rollback), as in the loop
    assert straight_line_runner([ok])([None, 2.0, None]) is None


def test_a_failed_run_leaves_no_reference_cycle_holding_its_values():
    """The values of a failed run are freed when the error is dropped, without waiting for
    the garbage collector (a device arena's blocks would otherwise stay in use)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [None])
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Reshape", ["r", "shape"], ["y"])],
        "g", [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [helper.make_tensor("shape", TensorProto.INT64, [2], [3, 3])],
    )
    s = _session(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    feed = np.ones(1000, np.float32)
    gc.collect()
    gc.disable()
    try:
        refs = []
        real = s._plan.steps[0].fn

        def relu(v):
            out = real(v)
            refs.append(weakref.ref(out[0]))
            return out

        s._plan.steps[0].fn = relu
        s._plan.finalize()
        with pytest.raises(KernelError):
            s.run(None, {"x": feed})
        assert refs and refs[0]() is None, "the failed run's intermediate is still alive"
    finally:
        gc.enable()


def test_kernel_errors_read_the_same_from_the_straight_line_runner_and_the_loop():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [None])
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"], name="relu"),
         helper.make_node("Reshape", ["r", "shape"], ["y"], name="bad_reshape")],
        "g", [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [helper.make_tensor("shape", TensorProto.INT64, [2], [3, 3])],
    )
    s = _session(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    assert s._plan._straight is not None
    messages = []
    for options in (None, onyxrt.RunOptions()):
        with pytest.raises(KernelError) as err:
            s.run(None, {"x": np.ones(5, np.float32)}, options)
        messages.append(str(err.value))
    assert "bad_reshape" in messages[0] and "Reshape" in messages[0]
    assert messages[0] == messages[1]


def test_plan_straight_runner_maps_too_few_results_to_the_provider_error():
    s = _session(add_chain(2))
    plan = s._plan
    original = plan.steps[0].fn
    plan.steps[0].fn = lambda *args: ()
    plan.finalize()
    try:
        with pytest.raises(ProviderError, match=r"returned 0 value\(s\) but it has 1 output"):
            s.run(None, {"x": np.ones(1, np.float32)})
    finally:
        plan.steps[0].fn = original
        plan.finalize()
    np.testing.assert_array_equal(s.run(None, {"x": np.ones(1, np.float32)})[0].shape, (1,))
