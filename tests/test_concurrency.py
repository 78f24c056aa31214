"""Many threads, one session (and several sessions sharing a cache): same answers, no races.

Figures (2-core CI machine): 8 threads x 200 runs on a small CNN and a small BERT, in
sequential and ORT_PARALLEL execution mode (4 x 1,600 runs), every output identical to the
single-thread result for its input.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pytest
from faulty_provider import SERIAL_PLUGIN, SerialExecutionProvider
from model_helpers import make_model, tensor
from onnx import TensorProto, helper

import onyxrt as ort
from onyxrt.errors import RunTerminated
from onyxrt.testing.models import bert_encoder, tiny_cnn

THREADS = 8
RUNS = 200
CPU = "CPUExecutionProvider"


def _in_threads(work: Callable[[int], None], threads: int = THREADS) -> None:
    """Run ``work(t)`` on ``threads`` threads started together; re-raise the first error."""
    barrier = threading.Barrier(threads)
    errors: list[BaseException] = []

    def body(t: int) -> None:
        try:
            barrier.wait()
            work(t)
        except BaseException as exc:
            errors.append(exc)

    pool = [threading.Thread(target=body, args=(t,)) for t in range(threads)]
    for th in pool:
        th.start()
    for th in pool:
        th.join(120)
        assert not th.is_alive(), "a worker thread hung"
    if errors:
        raise errors[0]


def _hammer(sess: ort.InferenceSession, feeds: Sequence[Mapping[str, np.ndarray]]) -> int:
    """THREADS x RUNS runs on inputs chosen per (thread, run); each output must equal the
    single-thread result for that input. Returns the number of runs checked."""
    expected = [sess.run(None, dict(f)) for f in feeds]
    checked = [0] * THREADS

    def work(t: int) -> None:
        for i in range(RUNS):
            k = (t * 5 + i) % len(feeds)
            outs = sess.run(None, dict(feeds[k]))
            for got, want in zip(outs, expected[k], strict=True):
                np.testing.assert_array_equal(got, want, err_msg=f"thread {t} run {i} input {k}")
            checked[t] += 1

    _in_threads(work)
    return sum(checked)


def _cnn_feeds(n: int = 16) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    return [{"input": rng.standard_normal((1 + i % 2, 1, 28, 28)).astype(np.float32)} for i in range(n)]


def _bert_feeds(n: int = 16) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(1)
    feeds = []
    for i in range(n):
        ids = rng.integers(0, 100, (1, 16), dtype=np.int64)
        mask = np.ones((1, 16), np.int64)
        mask[0, 16 - i % 5 :] = 0
        feeds.append({"input_ids": ids, "attention_mask": mask})
    return feeds


def _bert():
    return bert_encoder(layers=2, hidden=32, heads=2, intermediate=64, seq=16, vocab=100)


@pytest.mark.parametrize("mode", ["sequential", "parallel"])
@pytest.mark.parametrize(("build", "feeds"), [(tiny_cnn, _cnn_feeds), (_bert, _bert_feeds)], ids=["cnn", "bert"])
def test_eight_threads_match_the_single_thread_results(build, feeds, mode):
    so = ort.SessionOptions()
    if mode == "parallel":
        so.execution_mode = ort.ExecutionMode.ORT_PARALLEL
    sess = ort.InferenceSession(build(), so)
    assert _hammer(sess, feeds()) == THREADS * RUNS


def test_provider_without_concurrent_runs_is_serialised(plugin_site, add_relu_model):
    plugin_site.add_distribution("onyxrt-serial", {"serial": "serial_plugin"}, {"serial_plugin": SERIAL_PLUGIN})
    SerialExecutionProvider.inside = SerialExecutionProvider.max_inside = SerialExecutionProvider.runs = 0
    sess = ort.InferenceSession(add_relu_model, providers=["SerialExecutionProvider", CPU])
    assert {n.provider for n in sess.placement.nodes} == {"SerialExecutionProvider"}
    w = np.array([1.0, -2.0, 3.0], np.float32)

    def work(t: int) -> None:
        for i in range(50):
            x = np.full((2, 3), t + i / 100, np.float32)
            np.testing.assert_array_equal(sess.run(None, {"x": x})[0], np.maximum(x + w, 0))

    _in_threads(work)
    assert SerialExecutionProvider.runs == THREADS * 50
    assert SerialExecutionProvider.max_inside == 1  # never two runs inside the provider at once


def _counting_loop_model() -> Any:
    """y = the number of iterations run: Loop(M, cond=true) { i += 1 } — M is an input."""
    one = helper.make_tensor("one", TensorProto.INT64, [], [1])
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"], name="keep_going"),
            helper.make_node("Constant", [], ["one_c"], name="one_c", value=one),
            helper.make_node("Add", ["count_in", "one_c"], ["count_out"], name="count"),
        ],
        "body",
        [
            helper.make_tensor_value_info("iter", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("count_in", TensorProto.INT64, []),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("count_out", TensorProto.INT64, []),
        ],
    )
    return make_model(
        [helper.make_node("Loop", ["M", "cond", "zero"], ["y"], name="loop", body=body)],
        [tensor("M", [], TensorProto.INT64)],
        [tensor("y", [], TensorProto.INT64)],
        {"cond": np.array(True), "zero": np.array(0, np.int64)},
    )


@pytest.mark.parametrize("mode", ["sequential", "parallel"])
def test_terminate_from_another_thread_stops_a_long_loop(mode):
    so = ort.SessionOptions()
    if mode == "parallel":
        so.execution_mode = ort.ExecutionMode.ORT_PARALLEL
    sess = ort.InferenceSession(_counting_loop_model(), so)
    ro = ort.RunOptions()
    outcome: list[Any] = []
    started = time.perf_counter()

    def long_run() -> None:
        try:
            outcome.append(sess.run(None, {"M": np.array(10**9, np.int64)}, ro))
        except BaseException as exc:
            outcome.append(exc)

    worker = threading.Thread(target=long_run)
    worker.start()
    time.sleep(0.2)  # let the loop get going (not an assertion)
    ro.terminate = True
    worker.join(30)
    assert not worker.is_alive(), "terminate did not stop the loop"
    assert time.perf_counter() - started < 5.0
    assert len(outcome) == 1 and isinstance(outcome[0], RunTerminated), outcome
    assert "RunOptions.terminate" in str(outcome[0])
    # The session (and a cleared RunOptions) work afterwards.
    assert sess.run(None, {"M": np.array(7, np.int64)})[0] == 7
    ro.terminate = False
    assert sess.run(None, {"M": np.array(3, np.int64)}, ro)[0] == 3


def test_sessions_sharing_a_simnpu_compile_cache_from_threads(tmp_path):
    """Four sessions created at once on one cache_dir (racing to store the same programs),
    then run from eight threads, give the results of a session made alone."""
    model = tiny_cnn(batch=1)
    npu = [("SimNPUExecutionProvider", {"cache_dir": str(tmp_path)}), CPU]
    sessions: list[Any] = [None] * 4

    def create(t: int) -> None:
        sessions[t] = ort.InferenceSession(model, providers=npu)

    _in_threads(create, threads=4)
    assert all(s.get_providers()[0] == "SimNPUExecutionProvider" for s in sessions)
    assert list(tmp_path.glob("*.tmp")) == []  # no half-written entry left behind
    reference = ort.InferenceSession(model, providers=npu)  # loads from the cache
    feeds = [{"input": f["input"][:1]} for f in _cnn_feeds(8)]
    expected = [reference.run(None, f)[0] for f in feeds]
    cpu = ort.InferenceSession(model)
    for f, want in zip(feeds, expected):
        np.testing.assert_allclose(want, cpu.run(None, f)[0], atol=2e-2)  # fp16 on the NPU
    baseline = [s.memory_stats()["SimNPUExecutionProvider"]["in_use"] for s in sessions]

    def work(t: int) -> None:
        for i in range(50):
            k = (t + i) % len(feeds)
            sess = sessions[(t + i) % len(sessions)]
            np.testing.assert_array_equal(sess.run(None, feeds[k])[0], expected[k])

    _in_threads(work)
    # Every run's device buffers went back to its session's arena.
    assert [s.memory_stats()["SimNPUExecutionProvider"]["in_use"] for s in sessions] == baseline


def test_profiling_from_threads_records_every_run(tmp_path):
    so = ort.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = str(tmp_path / "prof")
    sess = ort.InferenceSession(tiny_cnn(), so)
    feeds = _cnn_feeds(4)

    def work(t: int) -> None:
        for i in range(25):
            sess.run(None, feeds[(t + i) % 4])

    _in_threads(work)
    summary = sess.profile_summary()
    with open(sess.end_profiling()) as f:
        events = json.load(f)
    runs = [e for e in events if e.get("name") == "model_run"]
    nodes = [e for e in events if e.get("cat") == "Node"]
    assert len(runs) == THREADS * 25
    assert len(nodes) == THREADS * 25 * len(sess.placement.nodes)
    assert summary is not None


def test_resize_plan_cache_shared_by_threads_never_fails():
    """Regression: Resize's LRU of per-shape plans raised KeyError when one thread evicted
    an entry between another thread's lookup and its move to the front."""
    from onyxrt_ops.resize import _CACHE_SIZE, ResizeBase, _Plan

    kernel = ResizeBase.__new__(ResizeBase)
    kernel._cache = OrderedDict()
    kernel._make_plan = lambda *args: _Plan((1,), (0,), None)  # type: ignore[method-assign]
    kernel._steps = lambda *args: None  # type: ignore[method-assign]
    scales = np.array([2.0], np.float32)
    shapes = _CACHE_SIZE + 4  # more shapes than the cache holds: constant eviction
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible
    try:
        def work(t: int) -> None:
            for i in range(100_000):
                kernel._plan(((i * 7 + t) % shapes,), scales, None, None, np.dtype(np.float32), None)

        _in_threads(work)
    finally:
        sys.setswitchinterval(old)
    assert len(kernel._cache) <= _CACHE_SIZE + THREADS


def test_arena_free_from_the_garbage_collector_inside_allocate_does_not_deadlock():
    """Regression: a device buffer in a reference cycle is freed by its weakref finalizer
    when the garbage collector runs — possibly inside ``allocate`` on the thread holding
    the arena's lock, which then waited for itself forever (and every other thread with it)."""
    import gc
    import weakref

    from onyxrt.allocator import ArenaAllocator, HostMemory

    arena = ArenaAllocator(HostMemory(), initial_region=1 << 16)

    class CyclicBuffer:
        def __init__(self) -> None:
            block = arena.allocate(256)
            self.me = self  # only the garbage collector frees it
            weakref.finalize(self, arena.free, block)

    done = threading.Event()

    def work() -> None:
        for _ in range(2000):
            CyclicBuffer()
        done.set()

    thresholds = gc.get_threshold()
    gc.set_threshold(1, 1, 1)  # collect on nearly every allocation
    try:
        worker = threading.Thread(target=work, daemon=True)
        worker.start()
        assert done.wait(30), "allocate deadlocked on a finalizer's free"
    finally:
        gc.set_threshold(*thresholds)
    gc.collect()
    stats = arena.stats()
    assert stats.in_use == 0 and stats.allocations == stats.frees == 2000


def test_simnpu_transfer_counters_add_up_under_threads():
    # The byte counters of SimNPU's transfer are updated from every run's thread: with 8
    # threads copying at once, none of the additions may be lost.
    pytest.importorskip("onyxrt_simnpu")
    from onyxrt_simnpu.provider import SimNPUExecutionProvider

    transfer = SimNPUExecutionProvider().transfer
    x = np.ones(16, np.float32)
    stored = transfer.to_device(x).nbytes  # at the storage precision (fp16 by default)
    transfer.to_device_bytes = 0

    def copy_many():
        for _ in range(500):
            transfer.to_device(x)

    threads = [threading.Thread(target=copy_many) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert transfer.to_device_bytes == 8 * 500 * stored
