"""Stream-ordered reuse of the device arena (issue 25 item 2).

Python frees an array as soon as the work reading it is queued, not when it has run. With
more than one stream (a user's stream, per-thread default streams, concurrent runs) a
block freed on one stream and handed at once to another can be overwritten while the
first stream's queued work still uses it. The simulated CuPy queues work issued on a
non-default stream until something orders it, so such a reuse shows up as wrong data.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onyxrt as ort
from onyxrt.allocator import ArenaAllocator
from onyxrt_gpu.memory import ArenaCupyAllocator, CupyDeviceMemory

CUDA = "CUDAExecutionProvider"
CPU = "CPUExecutionProvider"
N = 1024


@pytest.fixture
def arena_allocator(cuda_sim):
    cp = cuda_sim.cupy
    arena = ArenaAllocator(CupyDeviceMemory(cp, 0), strategy="kSameAsRequested", name="test arena")
    return ArenaCupyAllocator(cp, arena, 0)


def test_queued_work_runs_only_when_ordered(cuda_sim):
    """The simulation's model: a non-blocking stream's work waits for an ordering point and
    reads its inputs when it runs; the legacy default stream waits for blocking streams."""
    cp = cuda_sim.cupy
    x = cp.zeros(4, cp.float32)
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        y = x + 1
    event = s.record()
    assert not event.done and not s.done
    x[...] = 5  # the default stream runs now; the non-blocking stream is not ordered with it
    s.synchronize()
    assert event.done and y.get().tolist() == [6, 6, 6, 6]
    blocking = cp.cuda.Stream()
    with blocking:
        z = x + 1
    x[...] = 0  # the legacy default stream first waits for the blocking stream's work
    assert z.get().tolist() == [6, 6, 6, 6]


def _overlap_round(cp, s1, s2, x, factor: float, fill: float):
    """On s1: tmp = x * factor; y = tmp + 1; drop tmp (its work is only queued). Then on
    s2: a new array of the same size, filled with ``fill``."""
    with s1:
        tmp = x * cp.float32(factor)
        y = tmp + cp.float32(1)
        del tmp
    with s2:
        z = cp.full(N, fill, dtype=cp.float32)
    s2.synchronize()
    s1.synchronize()
    return y, z


def test_a_block_freed_on_one_stream_is_not_reused_early_by_another(cuda_sim, arena_allocator):
    cp = cuda_sim.cupy
    host = np.linspace(-1, 1, N, dtype=np.float32)
    x = cp.asarray(host)
    s1, s2 = cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)
    with cp.cuda.using_allocator(arena_allocator):
        # First round: s2 is new to the arena; second round: both streams are known and
        # the freed block itself remembers s1.
        for factor, fill in ((2.0, 7.0), (3.0, 5.0)):
            y, z = _overlap_round(cp, s1, s2, x, factor, fill)
            np.testing.assert_array_equal(z.get(), np.full(N, fill, np.float32))
            np.testing.assert_allclose(y.get(), host * factor + 1, rtol=1e-6)
            del y, z
    assert arena_allocator.stream_waits >= 2  # ordered on the device, not by host syncs


def test_reuse_on_the_same_stream_is_immediate_and_free_of_waits(cuda_sim, arena_allocator):
    cp = cuda_sim.cupy
    host = np.arange(N, dtype=np.float32)
    x = cp.asarray(host)
    s = cp.cuda.Stream(non_blocking=True)
    cuda_sim.reset_counters()
    with cp.cuda.using_allocator(arena_allocator), s:
        tmp = x * cp.float32(2)
        first = tmp.data.ptr
        y = tmp + cp.float32(1)
        del tmp
        again = x * cp.float32(4)  # same stream: the freed block is reused at once
        assert again.data.ptr == first
    s.synchronize()
    np.testing.assert_array_equal(y.get(), host * 2 + 1)
    np.testing.assert_array_equal(again.get(), host * 4)
    assert arena_allocator.stream_waits == 0 and cuda_sim.stream_waits == 0
    assert arena_allocator.arena.stats().reserved == 2 * N * 4  # tmp and y only


def test_a_session_runs_on_the_callers_stream(cuda_sim):
    """Kernels run on the current stream: a session used inside a user's stream computes
    there, and its output copy waits for that stream."""
    w = np.arange(12, dtype=np.float32).reshape(4, 3)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
         helper.make_node("Add", ["r", "r"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    session = ort.InferenceSession(model.SerializeToString(), providers=[CUDA, CPU])
    cp = cuda_sim.cupy
    x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)
    want = 2 * np.maximum(x @ w, 0)
    for stream in (cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)):
        with stream:
            (y,) = session.run(None, {"x": x})
        np.testing.assert_allclose(y, want, rtol=1e-6)


def test_every_new_stream_waits_once_for_the_frees_made_before_tracking(cuda_sim, arena_allocator):
    """Frees made while one stream was alone are not tracked: a stream that first
    allocates later still waits (once) for the work issued before tracking began."""
    cp = cuda_sim.cupy
    x = cp.asarray(np.ones(N, np.float32))
    streams = [cp.cuda.Stream(non_blocking=True) for _ in range(3)]
    with cp.cuda.using_allocator(arena_allocator):
        with streams[0]:
            tmp = x * cp.float32(2)
            del tmp  # freed while streams[0] is alone: untracked
        waits, keep = [], []
        for stream in streams[1:]:
            with stream:
                before = arena_allocator.stream_waits
                # Too large for tmp's block; kept, so no stream reuses another's memory.
                keep += [cp.full(2 * N, 1.0, dtype=cp.float32) for _ in range(2)]
                waits.append(arena_allocator.stream_waits - before)
    assert waits == [1, 1]  # one wait per new stream, none for its second allocation
