"""The compiled run path (core/onyxrt/fast_run.py, the CPU provider's csrc/fast_run.c):
``InferenceSession.run``'s usual call in one call, with the same results, copies, errors,
limits and context as the Python path (``session._run``), which everything else takes."""

from __future__ import annotations

import gc
import threading
import warnings
import weakref

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import onyxrt
from onyxrt.errors import InvalidArgument, InvalidInput, KernelError, ResourceLimitExceeded
from onyxrt.testing.models import add_chain

native = pytest.importorskip("onyxrt_cpu.native")
if native.compiled_module() is None or not hasattr(native.compiled_module(), "fast_run"):
    pytest.skip("the CPU provider's compiled module (with fast_run) is not built", allow_module_level=True)


def _model(nodes, inputs, outputs, initializers=(), opset=17) -> bytes:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]).SerializeToString()


def _session(model: bytes, **config: str) -> onyxrt.InferenceSession:
    so = onyxrt.SessionOptions()
    for key, value in config.items():
        so.add_session_config_entry(key, value)
    return onyxrt.InferenceSession(model, so, providers=["CPUExecutionProvider"])


def _branching() -> bytes:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 5])
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Add", ["r", "x"], ["s"]),
        helper.make_node("TopK", ["s", "k"], ["vals", "idx"], axis=1),
        helper.make_node("Identity", ["x"], ["same"]),
    ]
    outputs = [helper.make_tensor_value_info(n, t, None) for n, t in
               (("vals", TensorProto.FLOAT), ("idx", TensorProto.INT64), ("s", TensorProto.FLOAT),
                ("same", TensorProto.FLOAT))]
    return _model(nodes, [x], outputs, [helper.make_tensor("k", TensorProto.INT64, [1], [3])])


def test_a_cpu_session_takes_the_compiled_path_with_the_python_paths_results():
    s = _session(_branching())
    assert s._fast_run is not None
    feed = {"x": np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)}
    fast = s.run(None, feed)
    slow = s._run(None, feed, None)
    assert len(fast) == 4
    for a, b in zip(fast, slow):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)
    # a subset, in the order asked for, and the same name twice as two arrays
    idx, vals = s.run(["idx", "vals"], feed)
    np.testing.assert_array_equal(idx, slow[1])
    np.testing.assert_array_equal(vals, slow[0])
    first, second = s.run(("s", "s"), feed)
    assert first is not second
    np.testing.assert_array_equal(first, second)


def test_an_output_that_is_the_feed_comes_back_as_a_copy():
    s = _session(_branching())
    x = np.ones((2, 5), np.float32)
    (same,) = s.run(["same"], {"x": x})
    assert same is not x and not np.shares_memory(same, x)
    same[:] = 7
    assert (x == 1).all()


def test_an_initializer_passed_through_is_never_handed_out():
    w = helper.make_tensor("w", TensorProto.FLOAT, [2], [1.0, 2.0])
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    model = _model([helper.make_node("Add", ["x", "x"], ["y"]), helper.make_node("Identity", ["w"], ["z"])],
                   [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
                         helper.make_tensor_value_info("z", TensorProto.FLOAT, None)], [w])
    s = _session(model)
    _, z = s.run(None, {"x": np.ones(2, np.float32)})
    z[:] = 0
    _, z2 = s.run(None, {"x": np.ones(2, np.float32)})
    np.testing.assert_array_equal(z2, [1.0, 2.0])


def test_views_of_a_feed_are_copied_by_the_python_rules():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    model = _model([helper.make_node("Reshape", ["x", "shape"], ["y"])], [x],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                   [helper.make_tensor("shape", TensorProto.INT64, [1], [6])])
    s = _session(model)
    feed = np.arange(6, dtype=np.float32).reshape(2, 3)
    (y,) = s.run(None, {"x": feed})
    assert not np.shares_memory(y, feed)
    np.testing.assert_array_equal(y, np.arange(6))


def test_feeds_it_does_not_take_go_the_python_way_with_its_conversions_and_errors():
    s = _session(_branching())
    # a list is converted, as the Python path converts it
    out = s.run(["s"], {"x": [[1.0, -2.0, 3.0, 4.0, 5.0]]})
    np.testing.assert_array_equal(out[0], [[2.0, -2.0, 6.0, 8.0, 10.0]])
    with pytest.raises(InvalidInput, match="unexpected data type"):
        s.run(None, {"x": np.ones((1, 5), np.float64)})
    with pytest.raises(InvalidInput):
        s.run(None, {"x": np.ones((1, 4), np.float32)})
    with pytest.raises(InvalidInput, match="missing"):
        s.run(None, {})
    with pytest.raises(InvalidInput, match="unknown input name"):
        s.run(None, {"x": np.ones((1, 5), np.float32), "y": np.ones(1, np.float32)})
    with pytest.raises(InvalidArgument, match="unknown output name"):
        s.run(["nope"], {"x": np.ones((1, 5), np.float32)})
    with pytest.raises(InvalidArgument, match="output_names"):
        s.run("vals", {"x": np.ones((1, 5), np.float32)})


def test_a_failing_kernel_raises_the_python_paths_typed_error():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [None])
    model = _model([helper.make_node("Relu", ["x"], ["r"], name="relu"),
                    helper.make_node("Reshape", ["r", "shape"], ["y"], name="bad_reshape")],
                   [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                   [helper.make_tensor("shape", TensorProto.INT64, [2], [3, 3])])
    s = _session(model)
    assert s._fast_run is not None
    messages = []
    for options in (None, onyxrt.RunOptions()):
        with pytest.raises(KernelError) as err:
            s.run(None, {"x": np.ones(5, np.float32)}, options)
        messages.append(str(err.value))
    assert "bad_reshape" in messages[0]
    assert messages[0] == messages[1]


def test_an_interrupt_in_a_kernel_passes_as_it_is_without_a_second_run():
    s = _session(add_chain(2))
    calls = []
    real = s._plan.steps[0].fn

    def interrupted(*args):
        calls.append(1)
        raise KeyboardInterrupt

    s._plan.steps[0].fn = interrupted
    s._plan.finalize()
    # the first call after finalize goes the Python way and rebuilds the compiled path
    with pytest.raises(KeyboardInterrupt):
        s.run(None, {"x": np.ones(1, np.float32)})
    assert s._fast_run is not None and not s._fast_run.stale()
    calls.clear()
    with pytest.raises(KeyboardInterrupt):
        s.run(None, {"x": np.ones(1, np.float32)})
    assert calls == [1]
    s._plan.steps[0].fn = real
    s._plan.finalize()
    np.testing.assert_allclose(s.run(None, {"x": np.ones(1, np.float32)})[0], [1.003], rtol=1e-6)


def test_changed_steps_make_the_compiled_path_stale_and_then_new():
    s = _session(add_chain(2))
    fast = s._fast_run
    assert fast is not None and not fast.stale()
    real = s._plan.steps[0].fn
    s._plan.steps[0].fn = lambda v, c: (v * 10,)
    s._plan.finalize()
    assert fast.stale()
    (y,) = s.run(None, {"x": np.ones(1, np.float32)})
    np.testing.assert_allclose(y, [10.002], rtol=1e-6)  # 1 * 10 (the new step) + 0.002
    assert s._fast_run is not fast and not s._fast_run.stale()
    np.testing.assert_allclose(s.run(None, {"x": np.ones(1, np.float32)})[0], [10.002], rtol=1e-6)
    s._plan.steps[0].fn = real
    s._plan.finalize()


def test_memory_limits_hold_on_the_compiled_path():
    x = helper.make_tensor_value_info("x", TensorProto.INT64, [1])
    model = _model([helper.make_node("ConstantOfShape", ["x"], ["y"])], [x],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    s = _session(model, **{"session.max_tensor_bytes": "4096"})
    assert s._fast_run is not None
    assert s.run(None, {"x": np.array([100], np.int64)})[0].shape == (100,)
    with pytest.raises(ResourceLimitExceeded, match="session.max_tensor_bytes"):
        s.run(None, {"x": np.array([10_000], np.int64)})
    # and a later run is not limited by what the refused one left behind
    assert s.run(None, {"x": np.array([1000], np.int64)})[0].shape == (1000,)


def test_floating_point_errors_are_results_not_warnings():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    model = _model([helper.make_node("Div", ["x", "zero"], ["y"])], [x],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                   [helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0])])
    s = _session(model)
    before = np.geterr()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (y,) = s.run(None, {"x": np.array([1.0, 0.0], np.float32)})
    assert np.isinf(y[0]) and np.isnan(y[1])
    assert np.geterr() == before
    with np.errstate(all="raise"):
        (y,) = s.run(None, {"x": np.array([1.0, 0.0], np.float32)})
        assert np.isinf(y[0])
        with pytest.raises(FloatingPointError):
            np.float32(1.0) / np.float32(0.0)


def test_an_intra_op_thread_count_is_entered_and_left_per_run():
    so = onyxrt.SessionOptions()
    so.intra_op_num_threads = 1
    s = onyxrt.InferenceSession(add_chain(3).SerializeToString(), so, providers=["CPUExecutionProvider"])
    assert s._fast_run is not None
    from threadpoolctl import threadpool_info

    before = [lib.get("num_threads") for lib in threadpool_info()]
    np.testing.assert_allclose(s.run(None, {"x": np.ones(1, np.float32)})[0], [1.006], rtol=1e-6)
    assert [lib.get("num_threads") for lib in threadpool_info()] == before


def test_sessions_needing_the_python_path_do_not_get_the_compiled_one():
    so = onyxrt.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = "onyxrt_fast_run_test"
    s = onyxrt.InferenceSession(add_chain(2).SerializeToString(), so, providers=["CPUExecutionProvider"])
    try:
        assert s._fast_run is None
        assert s.run(None, {"x": np.ones(1, np.float32)})[0].shape == (1,)
    finally:
        import os

        os.remove(s.end_profiling())
    so = onyxrt.SessionOptions()
    so.execution_mode = onyxrt.ExecutionMode.ORT_PARALLEL
    assert onyxrt.InferenceSession(add_chain(2).SerializeToString(), so,
                                   providers=["CPUExecutionProvider"])._fast_run is None


def test_run_options_take_the_python_path():
    s = _session(add_chain(2))
    options = onyxrt.RunOptions()
    options.terminate = True
    with pytest.raises(onyxrt.errors.RunTerminated):
        s.run(None, {"x": np.ones(1, np.float32)}, options)


def test_the_compiled_path_keeps_no_session_alive():
    s = _session(add_chain(2))
    s.run(None, {"x": np.ones(1, np.float32)})
    ref = weakref.ref(s)
    gc.disable()
    try:
        del s
        assert ref() is None, "the compiled path keeps its session in a reference cycle"
    finally:
        gc.enable()


def test_concurrent_runs_on_the_compiled_path_each_get_their_own_results():
    s = _session(_branching())
    errors: list[BaseException] = []

    def work(seed: int) -> None:
        rng = np.random.default_rng(seed)
        try:
            for _ in range(200):
                x = rng.standard_normal((2, 5)).astype(np.float32)
                (sum_,) = s.run(["s"], {"x": x})
                np.testing.assert_array_equal(sum_, np.maximum(x, 0) + x)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


def test_text_feeds_and_overridable_initializers_go_through_their_checks():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    b = helper.make_tensor_value_info("b", TensorProto.FLOAT, [2])
    graph = helper.make_graph([helper.make_node("Add", ["x", "b"], ["y"])], "g", [x, b],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [helper.make_tensor("b", TensorProto.FLOAT, [2], [1.0, 2.0])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    s = _session(model.SerializeToString())
    x0 = np.zeros(2, np.float32)
    np.testing.assert_array_equal(s.run(None, {"x": x0})[0], [1.0, 2.0])
    np.testing.assert_array_equal(s.run(None, {"x": x0, "b": np.full(2, 5, np.float32)})[0], [5.0, 5.0])
    with pytest.raises(InvalidInput):
        s.run(None, {"b": np.full(2, 5, np.float32)})  # the required input is missing
    t = helper.make_tensor_value_info("t", TensorProto.STRING, [None])
    text = _model([helper.make_node("Identity", ["t"], ["u"])], [t],
                  [helper.make_tensor_value_info("u", TensorProto.STRING, None)])
    s = _session(text)
    (u,) = s.run(None, {"t": np.array(["a", "bc"])})
    assert u.dtype == object and list(u) == ["a", "bc"]


def test_a_numpy_scalar_output_comes_back_as_an_array():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])
    model = _model([helper.make_node("Gather", ["x", "i"], ["y"], axis=0)], [x],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                   [helper.make_tensor("i", TensorProto.INT64, [], [1])])
    (y,) = _session(model).run(None, {"x": np.array([1.0, 2.0, 3.0], np.float32)})
    assert isinstance(y, np.ndarray) and y.shape == () and y == 2.0


def test_many_inputs_to_one_step_are_passed():
    n = 20  # more than the compiled path keeps on its stack
    inputs = [helper.make_tensor_value_info(f"x{i}", TensorProto.FLOAT, [1]) for i in range(n)]
    model = _model([helper.make_node("Sum", [f"x{i}" for i in range(n)], ["y"])], inputs,
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    s = _session(model)
    (y,) = s.run(None, {f"x{i}": np.full(1, i, np.float32) for i in range(n)})
    np.testing.assert_array_equal(y, [sum(range(n))])


def test_a_model_file_loaded_with_onnx_runs_the_same_either_way(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(add_chain(4), str(path))
    s = onyxrt.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    x = {"x": np.array([0.5], np.float32)}
    np.testing.assert_array_equal(s.run(None, x)[0], s._run(None, x, None)[0])


def test_views_of_the_runs_own_arrays_are_handed_out_and_views_of_feeds_copied():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    model = _model([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Reshape", ["r", "shape"], ["y"]),
                    helper.make_node("Reshape", ["x", "shape"], ["z"])], [x],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
                    helper.make_tensor_value_info("z", TensorProto.FLOAT, None)],
                   [helper.make_tensor("shape", TensorProto.INT64, [1], [6])])
    s = _session(model)
    big = np.arange(-6, 6, dtype=np.float32).reshape(4, 3)
    feed = big[1:3]  # a view of the caller's larger array
    y, z = s.run(None, {"x": feed})
    np.testing.assert_array_equal(y, np.maximum(feed, 0).reshape(6))
    np.testing.assert_array_equal(z, feed.reshape(6))
    assert not np.shares_memory(z, big) and not np.shares_memory(y, big)
    z[:] = 100
    assert (big[1:3] == np.arange(-3, 3).reshape(2, 3)).all()
    y2, z2 = s._run(None, {"x": feed}, None)
    np.testing.assert_array_equal(y, y2)


def test_a_kernel_returning_another_sequence_is_read_as_the_loop_reads_it():
    import collections

    pair = collections.namedtuple("pair", "y")
    s = _session(add_chain(2))
    real = s._plan.steps[0].fn
    calls = []

    def named(*args):
        calls.append(1)
        return pair(*real(*args))

    s._plan.steps[0].fn = named
    s._plan.finalize()
    s.run(None, {"x": np.ones(1, np.float32)})  # rebuilds the compiled path
    calls.clear()
    (y,) = s.run(None, {"x": np.ones(1, np.float32)})
    np.testing.assert_allclose(y, [1.003], rtol=1e-6)
    assert calls == [1]  # one run, not a compiled attempt and a Python one
    s._plan.steps[0].fn = real
    s._plan.finalize()
