"""CUDA graphs (issue 25, item 6): the simulation's capture semantics, cuBLAS through its C
API inside a capture, and sessions with ``enable_cuda_graph=1`` — one launch per replayed
run, results equal to plain runs, and a plain run with a warning where a model cannot be
captured."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from onnx import TensorProto, helper

import onyxrt as ort
from onyxrt.testing.models import bert_encoder, resnet
from onyxrt_gpu.cublas_direct import direct_cublas

CUDA, CPU = "CUDAExecutionProvider", "CPUExecutionProvider"
GRAPH = {"enable_cuda_graph": "1"}


# -- the simulated CuPy's capture ------------------------------------------------------


def test_capture_records_and_a_launch_reads_the_inputs_as_they_are_then(sim_cupy):
    cp = sim_cupy.cupy
    x = cp.asarray(np.arange(6, dtype=np.float32))
    out = cp.zeros(6, np.float32)
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        stream.begin_capture()
        assert stream.is_capturing()
        cp.copyto(out, cp.exp(x) * 2)
        graph = stream.end_capture()
    assert not stream.is_capturing()
    np.testing.assert_array_equal(out.get(), 0)  # recorded, not run
    x.set(np.full(6, 0.5, np.float32))
    sim_cupy.reset_counters()
    graph.launch(stream)
    stream.synchronize()
    assert (sim_cupy.launches, sim_cupy.graph_launches) == (1, 1)
    np.testing.assert_allclose(out.get(), np.exp(np.float32(0.5)) * 2, rtol=1e-6)
    x.set(np.zeros(6, np.float32))
    graph.launch(stream)
    # A non-blocking stream is not ordered with the default one: unsynchronized, a read
    # sees the last launch's result, as on a device.
    np.testing.assert_allclose(out.get(), np.exp(np.float32(0.5)) * 2, rtol=1e-6)
    stream.synchronize()
    np.testing.assert_allclose(out.get(), 2.0)


def test_capture_refuses_host_work_and_is_invalidated(sim_cupy):
    cp = sim_cupy.cupy
    runtime_error = cp.cuda.runtime.CUDARuntimeError
    x = cp.asarray(np.ones(4, np.float32))
    with pytest.raises(runtime_error, match="StreamCaptureUnsupported"):
        cp.cuda.Stream.null.begin_capture()
    stream = cp.cuda.Stream(non_blocking=True)
    refusals = [
        lambda: cp.exp(x).get(),  # a read back
        lambda: cp.asarray(np.ones(3, np.float32)),  # an upload from pageable host memory
        lambda: stream.synchronize(),
        lambda: cp.nonzero(x),  # a result whose shape depends on the data
    ]
    for refused in refusals:
        with stream:
            stream.begin_capture()
            with pytest.raises(runtime_error, match="StreamCaptureUnsupported"):
                refused()
            with pytest.raises(runtime_error, match="StreamCaptureInvalidated"):
                stream.end_capture()
    with stream:  # the stream captures again after a failed capture
        stream.begin_capture()
        y = x + 1
        graph = stream.end_capture()
    graph.launch(stream)
    stream.synchronize()
    np.testing.assert_array_equal(y.get(), 2)


def test_a_capture_does_not_read_indices_it_has_not_written_yet(sim_cupy):
    # At capture time the indices' memory holds anything (here: out of range); only the
    # launch reads them, as on a device.
    cp = sim_cupy.cupy
    data = cp.asarray(np.arange(12, dtype=np.float32).reshape(1, 12))
    idx = cp.asarray(np.full((1, 5), 10**6, np.int64))
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        stream.begin_capture()
        out = cp.take_along_axis(data, idx, axis=1)
        graph = stream.end_capture()
    idx.set(np.array([[11, 0, 3, 3, 7]], np.int64))
    graph.launch(stream)
    stream.synchronize()
    np.testing.assert_array_equal(out.get(), [[11, 0, 3, 3, 7]])


def test_cupy_cublas_is_refused_in_a_capture_but_the_c_api_captures(sim_cupy):
    cp = sim_cupy.cupy
    a = cp.asarray(np.ones((2, 3), np.float32))
    b = cp.asarray(np.ones((3, 4), np.float32))
    c = cp.zeros((2, 4), np.float32)
    blas = direct_cublas(cp)
    assert blas is not None
    stream = cp.cuda.Stream(non_blocking=True)
    one, zero = np.ones(1, np.float32), np.zeros(1, np.float32)
    with stream:
        stream.begin_capture()
        with pytest.raises(NotImplementedError, match="cuBLAS API during stream capture"):
            cp.matmul(a, b)
        # Row-major C = A @ B as column-major C^T = B^T @ A^T.
        blas.gemm_strided_batched_ex(0, 0, 4, 2, 3, one.ctypes.data, b.data.ptr, 0, 4, 0,
                                     a.data.ptr, 0, 3, 0, zero.ctypes.data, c.data.ptr, 0, 4, 0,
                                     1, 68, -1)
        graph = stream.end_capture()
    np.testing.assert_array_equal(c.get(), 0)
    a.set(np.full((2, 3), 2, np.float32))
    graph.launch(stream)
    stream.synchronize()
    np.testing.assert_array_equal(c.get(), 6)


# -- sessions ------------------------------------------------------------------------------


def _feeds(session, rng, n):
    feeds = {}
    for arg in session.get_inputs():
        shape = [d if isinstance(d, int) else n for d in arg.shape]
        if "int" in arg.type:
            feeds[arg.name] = rng.integers(0, 2, size=shape).astype(np.int64)
        else:
            feeds[arg.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


@pytest.mark.parametrize("build", [
    pytest.param(lambda: resnet(depth_blocks=(1, 1), width=8, num_classes=10, image=32), id="cnn"),
    pytest.param(lambda: bert_encoder(layers=2, hidden=64, heads=4, intermediate=128, seq=16, vocab=100),
                 id="bert"),
])
def test_replays_equal_plain_runs_with_one_launch_each(cuda_sim, build):
    blob = build().SerializeToString()
    plain = ort.InferenceSession(blob, providers=[CUDA, CPU])
    graph = ort.InferenceSession(blob, providers=[(CUDA, GRAPH), CPU])
    replay = graph._plan.graph_replay
    assert replay is not None
    rng = np.random.default_rng(0)
    for n in (1, 3):  # two input signatures: one graph each
        for i in range(4):
            feeds = _feeds(plain, rng, n)
            want = plain.run(None, feeds)
            cuda_sim.reset_counters()
            got = graph.run(None, feeds)
            for w, g in zip(want, got):
                np.testing.assert_array_equal(g, w)
            if i >= 2:  # run 1 plain, run 2 captured, then replays
                assert cuda_sim.launches == 1 and cuda_sim.graph_launches == 1
                assert cuda_sim.allocator_calls == 0 and cuda_sim.gemm_calls == []
    assert (replay.captures, replay.failures, replay.replays) == (2, 0, 6)
    graph.release_captured_graph()  # onnxruntime's call: the graphs go, runs capture anew
    for _ in range(3):
        feeds = _feeds(plain, rng, 1)
        np.testing.assert_array_equal(graph.run(None, feeds)[0], plain.run(None, feeds)[0])
    assert (replay.captures, replay.replays) == (3, 8)


def test_outputs_kept_on_the_device_are_copies_the_next_replay_leaves_alone(cuda_sim):
    blob = resnet(depth_blocks=(1,), width=8, num_classes=10, image=16).SerializeToString()
    session = ort.InferenceSession(blob, providers=[(CUDA, GRAPH), CPU])
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 3, 16, 16)).astype(np.float32)
    for _ in range(2):
        session.run(None, {"input": x})
    binding = session.io_binding()
    binding.bind_cpu_input("input", x)
    binding.bind_output(session.get_outputs()[0].name, "cuda")
    session.run_with_iobinding(binding)
    kept = binding.get_outputs()[0]
    before = kept.numpy()
    other = session.run(None, {"input": x * 3})[0]
    assert session._plan.graph_replay.replays == 3
    np.testing.assert_array_equal(kept.numpy(), before)
    assert not np.array_equal(other, before)


def test_a_capture_that_fails_warns_once_and_that_signature_runs_plainly(cuda_sim, caplog):
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("NonZero", ["r"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 3])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, None)])
    blob = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    session = ort.InferenceSession(blob, providers=[(CUDA, GRAPH), CPU])
    assert session.placement.nodes_by_provider() == {CUDA: ["Relu_0", "NonZero_1"]}
    rng = np.random.default_rng(2)
    with caplog.at_level(logging.WARNING):
        for _ in range(4):
            x = rng.standard_normal((4, 3)).astype(np.float32)
            np.testing.assert_array_equal(session.run(None, {"x": x})[0], np.array(np.nonzero(np.maximum(x, 0))))
    replay = session._plan.graph_replay
    assert (replay.captures, replay.failures, replay.replays) == (0, 1, 0)
    said = [r.getMessage() for r in caplog.records if "without graph replay" in r.getMessage()]
    assert len(said) == 1 and "NonZero_1" in said[0] and "StreamCaptureUnsupported" in said[0]


def test_shape_of_a_device_value_is_read_where_it_lives_and_captured(cuda_sim):
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Shape", ["r"], ["s"]),
         helper.make_node("Size", ["r"], ["n"]),
         helper.make_node("Cast", ["s"], ["y"], to=TensorProto.FLOAT), helper.make_node("Add", ["r", "y"], ["z"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 2])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("n", TensorProto.INT64, None)])
    blob = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    session = ort.InferenceSession(blob, providers=[(CUDA, GRAPH), CPU])
    # Shape and Size run on the CPU and read r's shape on the device: no copy of r.
    assert [c.value for c in session.placement.copies if c.per_run and c.dst == "cpu"] == ["z"]
    for rows in (3, 3, 3, 5, 5, 5):
        x = np.full((rows, 2), -1.0 if rows == 5 else 1.0, np.float32)
        z, n = session.run(None, {"x": x})
        np.testing.assert_array_equal(z, np.maximum(x, 0) + np.array([rows, 2], np.float32))
        assert n == rows * 2
    replay = session._plan.graph_replay
    assert (replay.captures, replay.replays, replay.failures) == (2, 4, 0)


def test_a_model_that_reads_back_every_run_is_not_captured_and_says_why(cuda_sim, caplog):
    # TfIdfVectorizer runs on the CPU only, on the data of a value the GPU computed.
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "x"], ["d"]),
         helper.make_node("TfIdfVectorizer", ["d"], ["y"], mode="TF", min_gram_length=1, max_gram_length=1,
                          max_skip_count=0, ngram_counts=[0], ngram_indexes=[0, 1], pool_int64s=[2, 4])],
        "g", [helper.make_tensor_value_info("x", TensorProto.INT64, [4, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    blob = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    with caplog.at_level(logging.WARNING):
        session = ort.InferenceSession(blob, providers=[(CUDA, GRAPH), CPU])
    assert session.placement.nodes_by_provider() == {CUDA: ["Add_0"], CPU: ["TfIdfVectorizer_1"]}
    x = np.arange(128, dtype=np.int64).reshape(4, 32) % 3
    want = ort.InferenceSession(blob, providers=[CPU]).run(None, {"x": x})[0]
    for _ in range(3):
        np.testing.assert_array_equal(session.run(None, {"x": x})[0], want)
    assert session._plan.graph_replay is None
    said = [r.getMessage() for r in caplog.records if "runs without it" in r.getMessage()]
    assert len(said) == 1 and "Memcpy_d_cuda:0_to_cpu" in said[0] and "back to the host" in said[0]


def test_off_by_default_and_not_on_rocm(cuda_sim):
    blob = resnet(depth_blocks=(1,), width=8, num_classes=10, image=16).SerializeToString()
    assert ort.InferenceSession(blob, providers=[CUDA, CPU])._plan.graph_replay is None
    session = ort.InferenceSession(blob, providers=[(CUDA, GRAPH), CPU])
    assert session.get_provider_options()[CUDA]["enable_cuda_graph"] == "1"


def test_threads_sharing_a_session_get_their_own_results(cuda_sim):
    from concurrent.futures import ThreadPoolExecutor

    blob = resnet(depth_blocks=(1,), width=8, num_classes=10, image=16).SerializeToString()
    plain = ort.InferenceSession(blob, providers=[CUDA, CPU])
    session = ort.InferenceSession(blob, providers=[(CUDA, GRAPH), CPU])
    inputs = [np.random.default_rng(i).standard_normal((1, 3, 16, 16)).astype(np.float32) for i in range(24)]
    want = [plain.run(None, {"input": x})[0] for x in inputs]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda x: session.run(None, {"input": x})[0], inputs))
    for w, g in zip(want, got):
        np.testing.assert_array_equal(g, w)
    assert session._plan.graph_replay.failures == 0


def test_torch_style_shape_arithmetic_stays_on_the_cpu_and_the_model_is_captured(cuda_sim):
    """torch exports compute an Expand's shape with Equal/Where over Shape's result (bool
    beside int64 shape vectors): that stays on the CPU, and nothing is copied back."""
    one = helper.make_tensor("minus_one", TensorProto.INT64, [2], [-1, -1])
    ones = helper.make_tensor("ones", TensorProto.INT64, [2], [1, 1])
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Shape", ["r"], ["s"]),
         helper.make_node("Equal", ["s", "minus_one"], ["eq"]),
         helper.make_node("Where", ["eq", "ones", "s"], ["w"]),
         helper.make_node("Expand", ["b", "w"], ["e"]), helper.make_node("Add", ["r", "e"], ["z"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4]),
              helper.make_tensor_value_info("b", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)], [one, ones])
    blob = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    session = ort.InferenceSession(blob, providers=[(CUDA, GRAPH), CPU])
    placed = session.placement.nodes_by_provider()
    assert sorted(placed[CPU]) == ["Equal_2", "Shape_1", "Where_3"]
    assert [c.value for c in session.placement.copies if c.per_run and c.dst == "cpu"] == ["z"]
    b = np.arange(4, dtype=np.float32).reshape(1, 4)
    for rows in (2, 2, 2, 7):
        x = np.random.default_rng(rows).standard_normal((rows, 4)).astype(np.float32)
        np.testing.assert_array_equal(session.run(None, {"x": x, "b": b})[0], np.maximum(x, 0) + b)
    assert session._plan.graph_replay.replays == 2  # the captured run and one replay


def test_an_input_with_a_default_may_be_fed_or_not(cuda_sim):
    from onnx import numpy_helper

    scale = np.full((1, 4), 2.0, np.float32)
    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "scale"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4]),
         helper.make_tensor_value_info("scale", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(scale, "scale")])
    blob = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString()
    session = ort.InferenceSession(blob, providers=[(CUDA, GRAPH), CPU])
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    other = np.full((1, 4), 3.0, np.float32)
    for _ in range(3):  # plain, captured, replayed: the default scale
        np.testing.assert_array_equal(session.run(None, {"x": x})[0], x * 2)
    for _ in range(3):  # another signature: scale fed
        np.testing.assert_array_equal(session.run(None, {"x": x, "scale": other})[0], x * 3)
    np.testing.assert_array_equal(session.run(None, {"x": x + 1})[0], (x + 1) * 2)
    assert session._plan.graph_replay.replays == 5


def test_a_terminated_run_is_refused_as_without_graphs(cuda_sim):
    blob = resnet(depth_blocks=(1,), width=8, num_classes=10, image=16).SerializeToString()
    session = ort.InferenceSession(blob, providers=[(CUDA, GRAPH), CPU])
    x = np.zeros((1, 3, 16, 16), np.float32)
    for _ in range(3):
        session.run(None, {"input": x})
    options = ort.RunOptions()
    options.terminate = True
    with pytest.raises(ort.errors.RunTerminated):
        session.run(None, {"input": x}, options)
    # onnxruntime's "no CUDA graph for this run"
    plain = ort.RunOptions()
    plain.add_run_config_entry("gpu_graph_id", "-1")
    replays = session._plan.graph_replay.replays
    session.run(None, {"input": x}, plain)
    assert session._plan.graph_replay.replays == replays
    session.run(None, {"input": x})
    assert session._plan.graph_replay.replays == replays + 1


def test_device_inputs_bound_with_iobinding_are_read_on_every_replay(cuda_sim):
    blob = resnet(depth_blocks=(1,), width=8, num_classes=10, image=16).SerializeToString()
    plain = ort.InferenceSession(blob, providers=[CUDA, CPU])
    session = ort.InferenceSession(blob, providers=[(CUDA, GRAPH), CPU])
    rng = np.random.default_rng(7)
    x = rng.standard_normal((1, 3, 16, 16)).astype(np.float32)
    value = ort.OrtValue.ortvalue_from_numpy(x, "cuda", 0)
    binding = session.io_binding()
    binding.bind_ortvalue_input("input", value)
    binding.bind_output(session.get_outputs()[0].name, "cpu")
    for _ in range(4):
        x = rng.standard_normal((1, 3, 16, 16)).astype(np.float32)
        value.update_inplace(x)  # new data in the same device buffer
        session.run_with_iobinding(binding)
        np.testing.assert_array_equal(binding.copy_outputs_to_cpu()[0], plain.run(None, {"input": x})[0])
    replay = session._plan.graph_replay
    assert (replay.captures, replay.replays, replay.failures) == (1, 3, 0)


def test_the_cublas_library_is_found_among_the_loaded_ones(sim_cupy):
    import os

    from onyxrt_gpu import cublas_direct

    # The lookup reads the process's memory map: any library loaded here is found by name.
    path = cublas_direct._loaded_library_path("libpython3") or cublas_direct._loaded_library_path("libc.so")
    assert path is not None and os.path.exists(path)
    assert cublas_direct._loaded_library_path("libnot-a-library-onyxrt.so") is None
    # The simulation stands in for libcublas.
    assert cublas_direct.direct_cublas(sim_cupy.cupy).library is sim_cupy.cublas_library


def test_rocm_keeps_cupys_blas_bindings(sim_hip):
    from onyxrt_gpu import cublas_direct

    assert cublas_direct.direct_cublas(sim_hip.cupy) is None
