"""10,000 runs in constant memory: nothing a run allocates outlives it.

Each test warms a session up, then runs a small MLP 10,000 times on varying inputs and
compares, before and after: the Python heap (``tracemalloc``, which numpy reports its
array buffers to), the resident set size (``VmRSS``), and for device providers their
arena statistics (``session.memory_stats()``), which must be identical. The figures are
printed (``pytest -s``) for docs/reliability.md.
"""

from __future__ import annotations

import gc
import sys
import time
import tracemalloc
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from model_helpers import make_model, tensor
from onnx import helper

import onyxrt as ort

RUNS = 10_000
WARMUP = 200
CPU = "CPUExecutionProvider"
#: Python-heap growth tolerated over all the runs (caches that fill once, interned
#: objects); a leak of even one small array per run would be ~10,000 x its size.
HEAP_BOUND = 64 << 10
#: Resident set growth tolerated (allocator noise and pages touched for the first time).
RSS_BOUND = 8 << 20


def _mlp(batch: int | str = "N") -> Any:
    """softmax(relu(x @ w1 + b1) @ w2): five nodes, x float32 [batch, 16]."""
    rng = np.random.default_rng(0)
    return make_model(
        [
            helper.make_node("MatMul", ["x", "w1"], ["h"], name="fc1"),
            helper.make_node("Add", ["h", "b1"], ["hb"], name="bias1"),
            helper.make_node("Relu", ["hb"], ["r"], name="relu"),
            helper.make_node("MatMul", ["r", "w2"], ["logits"], name="fc2"),
            helper.make_node("Softmax", ["logits"], ["y"], name="softmax", axis=-1),
        ],
        [tensor("x", [batch, 16])],
        [tensor("y", [batch, 4])],
        {
            "w1": rng.standard_normal((16, 32)).astype(np.float32),
            "b1": rng.standard_normal(32).astype(np.float32),
            "w2": rng.standard_normal((32, 4)).astype(np.float32),
        },
    )


def _rss() -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return -1  # not Linux


@pytest.fixture
def simulated_cuda() -> Iterator[Any]:
    from onyxrt_gpu.testing.provider_tests import simulated_gpu

    yield from simulated_gpu(hip=False)


def _long_run(
    sess: ort.InferenceSession, device: str | None, runs: int = RUNS, fixed_batch: int | None = None
) -> dict[str, Any]:
    """``runs`` runs of ``sess`` after a warm-up; the memory figures before and after.
    The Python heap is traced (``tracemalloc``, several times slower) for CPU sessions; a
    device session is judged by its arena, which every device buffer comes from."""
    rng = np.random.default_rng(1)
    feeds = [rng.standard_normal((fixed_batch or 1 + i % 3, 16)).astype(np.float32) for i in range(8)]
    expected = [ort.InferenceSession(_mlp()).run(None, {"x": x})[0] for x in feeds]
    for i in range(WARMUP):
        sess.run(None, {"x": feeds[i % len(feeds)]})
    trace = device is None
    spot: list[np.ndarray] = [np.empty(0)] * (runs // 1000 + 1)  # answers every 1,000 runs
    gc.collect()
    arena_before = sess.memory_stats().get(device) if device else None
    rss_before = _rss()
    if trace:
        tracemalloc.start()
    heap_before = tracemalloc.get_traced_memory()[0]
    start = time.perf_counter()
    for i in range(runs):
        (y,) = sess.run(None, {"x": feeds[i % len(feeds)]})
        if i % 1000 == 0:
            spot[i // 1000] = y
    elapsed = time.perf_counter() - start
    del y
    gc.collect()
    heap_after, heap_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    rss_after = _rss()
    arena_after = sess.memory_stats().get(device) if device else None
    for k, y in enumerate(spot[: (runs - 1) // 1000 + 1]):  # the answers stayed right too
        np.testing.assert_allclose(y, expected[(k * 1000) % len(feeds)], rtol=2e-2, atol=2e-3)
    figures = {
        "runs": runs,
        "seconds": round(elapsed, 2),
        "heap_before": heap_before,
        "heap_after": heap_after,
        "heap_peak": heap_peak,
        "rss_before": rss_before,
        "rss_after": rss_after,
        "arena_before": arena_before,
        "arena_after": arena_after,
    }
    print(f"\nlong run on {sess.get_providers()[0]}: {figures}", file=sys.stderr)
    assert heap_after - heap_before < HEAP_BOUND, figures
    if rss_before > 0:
        assert rss_after - rss_before < RSS_BOUND, figures
    return figures


def test_ten_thousand_cpu_runs_in_constant_memory():
    _long_run(ort.InferenceSession(_mlp()), None)


def test_ten_thousand_simnpu_runs_leave_the_device_arena_unchanged():
    sess = ort.InferenceSession(_mlp(batch=2), providers=["SimNPUExecutionProvider", CPU])
    assert {n.provider for n in sess.placement.nodes} == {"SimNPUExecutionProvider"}
    figures = _long_run(sess, "SimNPUExecutionProvider", fixed_batch=2)
    before, after = figures["arena_before"], figures["arena_after"]
    for key in ("in_use", "reserved", "regions", "peak_in_use"):
        assert after[key] == before[key], (key, before, after)
    # Every allocation of the 10,000 runs was freed.
    assert after["allocations"] - before["allocations"] == after["frees"] - before["frees"] > 0


def test_ten_thousand_gpu_runs_leave_the_device_arena_unchanged(simulated_cuda):
    # The simulation's own GEMM log (one entry per product, ~2.7 MB over these runs) is
    # the test double's memory, not onyxrt's: off, so the RSS bound measures onyxrt.
    simulated_cuda.record_gemms = False
    sess = ort.InferenceSession(_mlp(), providers=["CUDAExecutionProvider", CPU])
    assert "CUDAExecutionProvider" in {n.provider for n in sess.placement.nodes}
    figures = _long_run(sess, "CUDAExecutionProvider")
    before, after = figures["arena_before"], figures["arena_after"]
    for key in ("in_use", "reserved", "regions", "peak_in_use"):
        assert after[key] == before[key], (key, before, after)
    assert after["allocations"] - before["allocations"] == after["frees"] - before["frees"] > 0
