"""The one-call paths small tensors take (a tiny model's run is mostly per-call cost):
constants of lower rank aligned once for numpy's broadcasting, Sigmoid/Tanh/Softmax as one
compiled call, the one-row arg-max of the ai.onnx.ml classifiers. Each is checked through
a session (the paths depend on the input types known when a kernel is built) against the
general path's result, and the arg-max against onnxruntime."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onyxrt
from onyxrt_cpu import native

ML = "ai.onnx.ml"


def _session(nodes, inputs, outputs, inits=(), opset=17, ml=False):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    opsets = [helper.make_opsetid("", opset)] + ([helper.make_opsetid(ML, 1)] if ml else [])
    model = helper.make_model(graph, opset_imports=opsets, ir_version=10)
    so = onyxrt.SessionOptions()
    so.graph_optimization_level = onyxrt.GraphOptimizationLevel.ORT_DISABLE_ALL
    return onyxrt.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]), model


def _f32(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


@pytest.mark.parametrize("op,fn", [("Add", np.add), ("Sub", np.subtract), ("Mul", np.multiply),
                                   ("Div", np.divide), ("Max", np.maximum), ("Min", np.minimum)])
@pytest.mark.parametrize("constant_first", [False, True])
def test_lower_rank_constant_is_aligned_once(op, fn, constant_first):
    rng = np.random.default_rng(3)
    w = rng.standard_normal(7).astype(np.float32) + 3
    inputs = ["w", "x"] if constant_first else ["x", "w"]
    s, _ = _session([helper.make_node(op, inputs, ["y"])], [_f32("x", ["batch", 5, 7])], [_f32("y", None)],
                    [numpy_helper.from_array(w, "w")])
    kernel = s._plan.steps[0].kernel
    assert "aligned" in kernel.compute.__code__.co_freevars, "the rank-aligned compute was not built"
    for batch in (1, 3):
        x = rng.standard_normal((batch, 5, 7)).astype(np.float32)
        (y,) = s.run(None, {"x": x})
        want = fn(w, x) if constant_first else fn(x, w)
        np.testing.assert_array_equal(y, want)
        assert y.shape == (batch, 5, 7) and y.dtype == np.float32


def test_an_overridden_initializer_is_used_as_fed():
    """An initializer that is also a graph input may be fed: the aligned copy of the
    initializer must not stand in for the fed value."""
    w = np.arange(4, dtype=np.float32)
    s, _ = _session([helper.make_node("Add", ["x", "w"], ["y"])], [_f32("x", [2, 4]), _f32("w", [4])],
                    [_f32("y", None)], [numpy_helper.from_array(w, "w")])
    x = np.ones((2, 4), np.float32)
    np.testing.assert_array_equal(s.run(None, {"x": x})[0], x + w)
    other = np.full(4, 10, np.float32)
    np.testing.assert_array_equal(s.run(None, {"x": x, "w": other})[0], x + other)


pytestmark_native = pytest.mark.skipif(not native.ENABLED, reason="needs the compiled kernels")


@pytestmark_native
@pytest.mark.parametrize("op,reference", [
    ("Sigmoid", lambda x: native.logistic(np.ascontiguousarray(x))),
    ("Tanh", lambda x: native.tanh(np.ascontiguousarray(x))),
    ("Softmax", lambda x: native.softmax_last_axis(np.ascontiguousarray(x))),
])
def test_activation_is_one_compiled_call_with_the_same_result(op, reference):
    s, _ = _session([helper.make_node(op, ["x"], ["y"])], [_f32("x", ["batch", 64])], [_f32("y", None)], opset=13)
    rng = np.random.default_rng(1)
    wide = (rng.standard_normal((3, 128)) * 4).astype(np.float32)
    wide[0, :3] = [np.nan, np.inf, -np.inf]
    for x in (wide[:1, :64].copy(), wide[:, :64].copy()):
        (y,) = s.run(None, {"x": x})
        np.testing.assert_array_equal(y, reference(x))  # bit for bit: the same compiled function
    # a non-contiguous feed takes the general path (numpy's functions, as before)
    x = wide[:, ::2]
    (y,) = s.run(None, {"x": x})
    np.testing.assert_allclose(y, reference(x), rtol=1e-5, atol=1e-6)
    (y,) = s.run(None, {"x": np.empty((0, 64), np.float32)})
    assert y.shape == (0, 64)


@pytest.mark.parametrize("row", [[0.5, -1.0, 2.0, 0.1], [np.nan, 1.0, 2.0, 0.0], [1.0, np.nan, 3.0, 0.0],
                                 [np.nan, np.nan, np.nan, np.nan], [2.0, 2.0, 1.0, 2.0]],
                         ids=["plain", "nan-first", "nan-inside", "all-nan", "tie"])
@pytest.mark.parametrize("post", ["NONE", "SOFTMAX"])
def test_one_row_classifier_label_matches_onnxruntime(row, post):
    """The one-row arg-max (numpy's, with the row's pick tested for NaN) keeps
    onnxruntime's rule: a NaN never wins, except in the first column."""
    node = helper.make_node("LinearClassifier", ["x"], ["label", "scores"], domain=ML,
                            coefficients=list(np.eye(4, dtype=np.float32).ravel()), intercepts=[0.0] * 4,
                            classlabels_ints=[10, 11, 12, 13], post_transform=post)
    x = np.array([row], np.float32)
    s, model = _session([node], [_f32("x", [1, 4])],
                        [helper.make_tensor_value_info("label", TensorProto.INT64, None), _f32("scores", None)], ml=True)
    got = s.run(None, {"x": x})
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_allclose(got[1], want[1], rtol=1e-6, atol=1e-7)


_SINGLE_OPS = [("Add", 2), ("Sub", 2), ("Mul", 2), ("Div", 2), ("Max", 2), ("Min", 2), ("Sqrt", 1),
               ("Exp", 1), ("Log", 1), ("Abs", 1), ("Neg", 1), ("Relu", 1)]


@pytest.mark.parametrize("op,arity", _SINGLE_OPS)
def test_single_output_kernels_give_the_loops_results(op, arity):
    """Small plans call a ufunc kernel's ``single_output`` (no tuple, no wrapper frame): the
    outputs equal the generic loop's (RunOptions take it), with a constant of lower rank,
    special values (nan, inf, zero, negatives: errors are results in both) and a batch."""
    rng = np.random.default_rng(5)
    w = np.array([0.0, -1.5, 2.0, np.inf, np.nan, 3.0, -0.0], np.float32)
    x_info = _f32("x", ["batch", 7])
    inputs, inits = (["x", "w"], [numpy_helper.from_array(w, "w")]) if arity == 2 else (["x"], [])
    s, _ = _session([helper.make_node(op, inputs, ["y"])], [x_info], [_f32("y", None)], inits)
    kernel = s._plan.steps[0].kernel
    assert kernel.single_output is not None, f"{op} has no single_output"
    for batch in (1, 4):
        x = rng.standard_normal((batch, 7)).astype(np.float32)
        x[0, :3] = [np.nan, -np.inf, 0.0]
        (fast,) = s.run(None, {"x": x})
        (loop,) = s.run(None, {"x": x}, onyxrt.RunOptions())
        np.testing.assert_array_equal(fast, loop)
        assert type(fast) is np.ndarray and fast.dtype == np.float32 and fast.shape == (batch, 7)


def test_single_output_is_not_used_where_a_ufunc_would_return_a_scalar():
    """0-d operands: a ufunc returns a numpy scalar, so those kernels keep their compute,
    and the run still returns 0-d arrays."""
    s, _ = _session([helper.make_node("Add", ["a", "b"], ["c"]), helper.make_node("Sqrt", ["c"], ["y"])],
                    [_f32("a", []), _f32("b", [])], [_f32("y", None)])
    assert all(step.kernel.single_output is None for step in s._plan.steps)
    (y,) = s.run(None, {"a": np.array(3, np.float32), "b": np.array(1, np.float32)})
    assert type(y) is np.ndarray and y.shape == () and y == 2


def test_single_output_sees_an_overridden_initializer_and_a_wrapped_compute():
    """The rank-aligned constant in ``single_output`` stands in only for the initializer
    itself (a fed override is used as fed); a step whose compute was replaced (profiling
    hooks, tests) is called through the replacement, not the kernel's single_output."""
    w = np.arange(4, dtype=np.float32)
    s, _ = _session([helper.make_node("Mul", ["x", "w"], ["y"])], [_f32("x", [2, 4]), _f32("w", [4])],
                    [_f32("y", None)], [numpy_helper.from_array(w, "w")])
    x = np.full((2, 4), 2, np.float32)
    np.testing.assert_array_equal(s.run(None, {"x": x})[0], x * w)
    other = np.full(4, 10, np.float32)
    np.testing.assert_array_equal(s.run(None, {"x": x, "w": other})[0], x * other)
    calls = []
    step = s._plan.steps[0]
    real = step.fn

    def wrapped(*args):
        calls.append(1)
        return real(*args)

    step.fn = wrapped
    s._plan.finalize()
    np.testing.assert_array_equal(s.run(None, {"x": x})[0], x * w)
    assert calls == [1]
