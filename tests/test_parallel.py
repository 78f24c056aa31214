"""ExecutionMode.ORT_PARALLEL: independent branches run concurrently, results unchanged."""

from __future__ import annotations

import numpy as np
import pytest
from model_helpers import make_model, tensor
from onnx import helper

import onyxrt as ort
from onyxrt.errors import KernelError, RunTerminated


def _two_towers(depth: int = 6):
    """x → two independent MatMul/Tanh towers → Add."""
    rng = np.random.default_rng(0)
    nodes, inits = [], {}
    for tower in ("a", "b"):
        h = "x"
        for i in range(depth):
            w = f"{tower}_w{i}"
            inits[w] = (rng.standard_normal((64, 64)) / 8).astype(np.float32)
            nodes.append(helper.make_node("MatMul", [h, w], [f"{tower}_m{i}"], name=f"{tower}.mm{i}"))
            nodes.append(helper.make_node("Tanh", [f"{tower}_m{i}"], [f"{tower}_t{i}"], name=f"{tower}.tanh{i}"))
            h = f"{tower}_t{i}"
    nodes.append(helper.make_node("Add", [f"a_t{depth - 1}", f"b_t{depth - 1}"], ["y"], name="join"))
    return make_model(nodes, [tensor("x", ["N", 64])], [tensor("y", ["N", 64])], inits)


def _parallel_options(threads: int = 2) -> ort.SessionOptions:
    so = ort.SessionOptions()
    so.execution_mode = ort.ExecutionMode.ORT_PARALLEL
    so.inter_op_num_threads = threads
    return so


def test_parallel_results_equal_sequential():
    model = _two_towers()
    x = np.random.default_rng(1).standard_normal((32, 64)).astype(np.float32)
    (expected,) = ort.InferenceSession(model).run(None, {"x": x})
    parallel = ort.InferenceSession(model, _parallel_options())
    for _ in range(20):
        (got,) = parallel.run(None, {"x": x})
        np.testing.assert_array_equal(got, expected)


def test_parallel_session_from_several_threads():
    import threading

    model = _two_towers(3)
    parallel = ort.InferenceSession(model, _parallel_options(3))
    xs = [np.random.default_rng(i).standard_normal((4, 64)).astype(np.float32) for i in range(4)]
    expected = [ort.InferenceSession(model).run(None, {"x": x})[0] for x in xs]
    errors = []

    def worker(k):
        try:
            for _ in range(10):
                np.testing.assert_array_equal(parallel.run(None, {"x": xs[k]})[0], expected[k])
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


def test_parallel_kernel_error_names_the_node():
    model = make_model(
        [
            helper.make_node("Relu", ["x"], ["r"], name="relu"),
            helper.make_node("Reshape", ["x", "shape"], ["bad"], name="bad_reshape"),
            helper.make_node("Add", ["r", "bad"], ["y"], name="join"),
        ],
        [tensor("x", ["N", 4]), tensor("shape", [2], 7)],
        [tensor("y", None)],
    )
    parallel = ort.InferenceSession(model, _parallel_options())
    with pytest.raises(KernelError, match="bad_reshape"):
        parallel.run(None, {"x": np.ones((2, 4), np.float32), "shape": np.array([3, 3], np.int64)})
    y = parallel.run(None, {"x": np.ones((2, 4), np.float32), "shape": np.array([2, 4], np.int64)})[0]
    np.testing.assert_array_equal(y, np.full((2, 4), 2.0, np.float32))


def test_parallel_run_honours_terminate():
    parallel = ort.InferenceSession(_two_towers(), _parallel_options())
    ro = ort.RunOptions()
    ro.terminate = True
    with pytest.raises(RunTerminated):
        parallel.run(None, {"x": np.ones((2, 64), np.float32)}, ro)
    assert parallel.run(None, {"x": np.ones((2, 64), np.float32)})[0].shape == (2, 64)
