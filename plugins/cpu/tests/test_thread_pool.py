"""The shared thread pool (csrc/threads.c, onyxrt_cpu.blas_threads): OpenBLAS's GEMMs and
the compiled kernels on one set of workers.

Our compiled kernels must give the same bits split as unsplit (every piece does the same
arithmetic on its own outputs), OpenBLAS must compute the same products on our threads as
on its own threads at the same thread count, and the pool must survive what users do around
it: several Python threads at once, a fork, more BLAS threads than cores,
``intra_op_num_threads``.

OpenBLAS's products at *different* thread counts are not bit-identical on every machine
(with ``OPENBLAS_CORETYPE``/``OPENBLAS_L2_SIZE`` set, its threaded sgemm splits K
differently from the single-threaded one), and OpenBLAS never promised they would be: a
BLAS product computed at another thread count is checked against the float64 product
within the float32 rounding bound of a K-term dot product instead (``_assert_gemm_right``).
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import os

import numpy as np
import pytest
from threadpoolctl import threadpool_info, threadpool_limits

import onyxrt
from onyxrt_cpu import blas_threads, native

pytestmark = pytest.mark.skipif(
    not native.ENABLED, reason="needs the compiled kernels (ONYXRT_CPU_PURE=1 or ONYXRT_CPU_NATIVE=0)"
)


def _openblas_with_callback() -> bool:
    """Whether numpy links a pthreads OpenBLAS new enough to take the callback (0.3.27)."""
    for info in threadpool_info():
        if info.get("internal_api") == "openblas" and info.get("threading_layer") == "pthreads":
            version = tuple(int(p) for p in info["version"].split(".")[:3])
            return version >= (0, 3, 27)
    return False


@pytest.fixture(scope="module")
def pool():
    """The pool installed (as the CPU provider does when first created)."""
    state = blas_threads.share_pool()
    if not _openblas_with_callback():
        pytest.skip(f"no pthreads OpenBLAS >= 0.3.27 in this numpy: {state}")
    assert state.startswith("one pool for OpenBLAS and the compiled kernels"), state
    return state


def test_openblas_found_from_the_memory_map_as_threadpoolctl_finds_it():
    """The memory-map scan (Linux) names the libraries threadpoolctl reports, with their
    versions; elsewhere it is threadpoolctl's record itself."""
    expected = sorted((os.path.realpath(i["filepath"]), i.get("version")) for i in threadpool_info()
                      if i.get("internal_api") == "openblas" and i.get("threading_layer") == "pthreads")
    found = sorted((os.path.realpath(path), version) for path, version, _ in blas_threads._openblas_libraries())
    assert found == expected


def test_provider_installs_the_pool_and_reports_it(pool):
    onyxrt.InferenceSession(_tiny_model(), providers=["CPUExecutionProvider"])
    assert blas_threads.pool_state() == pool
    from onyxrt_cpu.provider import CPUExecutionProvider

    assert CPUExecutionProvider.probe().details["threads"].startswith(pool)


def test_kernels_follow_the_blas_thread_count(pool):
    size, split = native.threads()
    assert size == len(os.sched_getaffinity(0))
    with threadpool_limits(limits=1, user_api="blas"):
        assert native.threads()[1] == 1
    assert native.threads()[1] == split


def _tiny_model() -> bytes:
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


GEMM_SHAPES = [(96, 16, 12544), (576, 96, 196), (128, 768, 3072), (1, 512, 1000), (257, 129, 65)]


@pytest.mark.parametrize("m,k,n", GEMM_SHAPES)
def test_gemm_on_the_pool_equals_openblas_on_its_own_threads(pool, m, k, n):
    """The same jobs on other threads: the products are bit for bit OpenBLAS's own."""
    rng = np.random.default_rng(m * n)
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    pooled = a @ b
    with blas_threads.openblas_own_threads():
        own = a @ b
    np.testing.assert_array_equal(pooled, own)


def _assert_gemm_right(got, a, b):
    """``got`` is ``a @ b`` up to float32 rounding, whatever order the BLAS summed in:
    each element within K * 2**-23 * (|a| @ |b|) of the float64 product (twice the
    textbook bound for a K-term float32 dot product; a wrong block or a lost panel is
    off by whole products)."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    exact = a64 @ b64
    bound = a.shape[-1] * 2.0**-23 * (np.abs(a64) @ np.abs(b64))
    error = np.abs(got.astype(np.float64) - exact)
    worst = np.unravel_index(np.argmax(error - bound), error.shape)
    assert np.all(error <= bound), (
        f"product off by {error[worst]:.3g} at {worst}, bound {bound[worst]:.3g}"
    )


def _kernel_calls(rng):
    """(name, call returning a fresh output) for each compiled kernel that splits its work."""
    x = rng.standard_normal((2, 48, 30, 30), dtype=np.float32)
    w = rng.standard_normal((48, 1, 9), dtype=np.float32)
    bias = rng.standard_normal(48, dtype=np.float32)
    rows = rng.standard_normal((300, 257), dtype=np.float32) * 8
    scale = rng.standard_normal(257, dtype=np.float32)

    def depthwise():
        y = np.empty((2, 48, 15, 15), np.float32)
        z = np.ones_like(y)
        assert native.depthwise2d(x, w, y, (3, 3), (2, 2), (1, 1), (1, 1),
                                  (bias, z, native.ACT_CLIP, 0.0, 6.0))
        return y

    def maxpool():
        y = np.empty((2, 48, 15, 15), np.float32)
        assert native.maxpool2d(x, y, (3, 3), (2, 2), (1, 1), (1, 1))
        return y

    def epilogue():
        y = x.copy()
        assert native.epilogue(y, bias, x, native.ACT_RELU)
        return y

    def im2col():
        cols = np.empty((48, 9, 2, 30, 30), np.float32)
        assert native.im2col2d(x, cols, (3, 3), (30, 30), (1, 1), (1, 1), (1, 1), 0)
        return cols

    def softmax():
        return native.softmax_last_axis(rows)

    def layernorm():
        return native.layernorm_last_axis(rows, scale, None, 1e-5)

    def gelu():
        return native.gelu_tanh(rows)

    a = rng.standard_normal((200, 300), dtype=np.float32)
    b = rng.standard_normal((300, 999), dtype=np.float32)
    packed_b = native.pack_gemm_b(b)
    tall = rng.standard_normal((3000, 20), dtype=np.float32)

    def gemm():
        y = np.empty((200, 999), np.float32)   # split by column panels
        assert native.gemm(a, packed_b, y)
        z = np.empty((3000, 30), np.float32)  # one column panel, 375 row panels
        assert native.gemm(tall, b[:20, :30], z)
        return y, z

    return [depthwise, maxpool, epilogue, im2col, softmax, layernorm, gelu, gemm]


@pytest.mark.parametrize("index", range(8), ids=["depthwise", "maxpool", "epilogue", "im2col",
                                                  "softmax", "layernorm", "gelu", "gemm"])
def test_split_kernels_equal_unsplit(pool, index):
    call = _kernel_calls(np.random.default_rng(index))[index]
    assert native.threads()[1] > 1 or os.cpu_count() == 1
    split = call()
    with threadpool_limits(limits=1, user_api="blas"):
        assert native.threads()[1] == 1
        whole = call()
    for got, want in zip(_arrays(split), _arrays(whole)):
        np.testing.assert_array_equal(got, want)


def _arrays(result):
    return result if isinstance(result, tuple) else (result,)


def test_winograd_transforms_split_equal_unsplit(pool):
    """The compiled input and output transforms give the same bits split as unsplit; the
    whole convolution (their GEMMs are OpenBLAS's) is right at any thread count."""
    from onyxrt_cpu.kernels import winograd
    from onyxrt_cpu.kernels.conv import pack_conv_weight

    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 64, 28, 28), dtype=np.float32)
    w = rng.standard_normal((64, 64, 3, 3), dtype=np.float32)
    u = winograd.transform_filters(pack_conv_weight(w, 1, np.dtype(np.float32)))
    bias = rng.standard_normal(64, dtype=np.float32)
    geometry = native.window_geometry(x.shape, (3, 3), (28, 28), (1, 1), (1, 1), (1, 1))
    tiles = 14 * 14
    products = rng.standard_normal((16, 64, tiles), dtype=np.float32)

    def transforms():
        v = np.empty((16, 64, tiles), np.float32)
        native.winograd_input(x, v, geometry)
        y = np.empty((1, 64, 28, 28), np.float32)
        native.winograd_output(products, y, geometry, 64, bias, None, native.ACT_RELU, 0.0, 0.0)
        return v, y

    def run():
        y, applied = winograd.convolve(x, u, (28, 28), (1, 1), (bias, None, native.ACT_RELU, 0, 0))
        assert applied
        return y

    split_transforms, split = transforms(), run()
    with threadpool_limits(limits=1, user_api="blas"):
        whole_transforms, whole = transforms(), run()
    for got, want in zip(split_transforms, whole_transforms):
        np.testing.assert_array_equal(got, want)
    want, scale = _direct_conv_relu(x, w, bias)
    for y in (split, whole):
        # Winograd F(2x2, 3x3) in float32 against float64 direct convolution: within
        # K * 2**-23 of the sum of the magnitudes of each output's K = 576 products.
        assert np.all(np.abs(y - want) <= 576 * 2.0**-23 * scale)


def _direct_conv_relu(x, w, bias):
    """A 3x3, pad-1 convolution plus bias and ReLU in float64, and the sum of the
    magnitudes of each output's products (for rounding bounds)."""
    n, c, h, wd = x.shape
    cols = np.lib.stride_tricks.sliding_window_view(
        np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1))), (3, 3), axis=(2, 3)
    )  # (n, c, h, wd, 3, 3)
    w64 = w.astype(np.float64)
    y = np.einsum("nchwij,mcij->nmhw", cols, w64) + bias.astype(np.float64)[None, :, None, None]
    scale = np.einsum("nchwij,mcij->nmhw", np.abs(cols), np.abs(w64)) + np.abs(bias)[None, :, None, None]
    return np.maximum(y, 0.0), scale


def test_many_python_threads_share_the_pool(pool):
    """Sessions in several Python threads call GEMMs and kernels at once: the pool serves
    one call at a time and the others run on temporary threads or their caller; every
    result stays right and nothing hangs."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((200, 300), dtype=np.float32)
    b = rng.standard_normal((300, 400), dtype=np.float32)
    calls = _kernel_calls(rng)
    with threadpool_limits(limits=1, user_api="blas"):
        want = [c() for c in calls]

    def worker(seed: int) -> bool:
        order = np.random.default_rng(seed).permutation(len(calls))
        for _ in range(20):
            _assert_gemm_right(a @ b, a, b)
            for i in order:
                for got, expected in zip(_arrays(calls[i]()), _arrays(want[i])):
                    np.testing.assert_array_equal(got, expected)
        return True

    _in_four_threads(worker)


def _in_four_threads(worker) -> None:
    """``worker(i)`` for i in 0..3 on four Python threads at once; each must return True
    within 120 s (a deadlocked pool fails the test instead of hanging it)."""
    with concurrent.futures.ThreadPoolExecutor(4) as executor:
        futures = [executor.submit(worker, i) for i in range(4)]
        done, not_done = concurrent.futures.wait(futures, timeout=120)
    assert not not_done, "a thread did not finish within 120 s: the pool deadlocked"
    assert all(f.result() for f in done)


def test_float32_and_float64_products_at_once(pool):
    """sgemm and dgemm from several Python threads at once stay right: OpenBLAS gives job
    i of every parallel call the same work buffer, so the pool runs one OpenBLAS call at a
    time (each type's GEMM driver serializes only its own calls; two at once wrote into
    each other's buffers)."""
    rng = np.random.default_rng(3)
    a = rng.standard_normal((200, 300), dtype=np.float32)
    b = rng.standard_normal((300, 400), dtype=np.float32)
    pairs = [(a, b), (a.astype(np.float64), b.astype(np.float64))]

    def worker(index: int) -> bool:
        x, y = pairs[index % 2]
        for _ in range(30):
            _assert_gemm_right(x @ y, a, b)
        return True

    _in_four_threads(worker)


def test_workers_late_or_asleep_never_lose_or_repeat_work(pool):
    """Thousands of small split calls, some after pauses long enough for the workers to
    fall asleep: the caller takes back pieces no worker started, a worker that wakes late
    runs only what is still its own, and every output is written exactly once (an
    accumulating epilogue would show a range done twice or not at all)."""
    import time

    rng = np.random.default_rng(9)
    y0 = rng.standard_normal((1, 64, 24, 24), dtype=np.float32)
    bias = np.ones(64, np.float32)
    want = y0 + 1
    for i in range(3000):
        y = y0.copy()
        assert native.epilogue(y, bias, None)
        np.testing.assert_array_equal(y, want)
        if i % 100 == 0:
            time.sleep(0.001)  # longer than the workers' polling: they go to sleep


def test_more_blas_threads_than_cores(pool):
    """OPENBLAS_NUM_THREADS above the core count: each of OpenBLAS's jobs still gets a
    thread of its own (its level-3 jobs wait for each other)."""
    rng = np.random.default_rng(1)
    a = rng.standard_normal((512, 512), dtype=np.float32)
    b = rng.standard_normal((512, 512), dtype=np.float32)
    with threadpool_limits(limits=2 * (os.cpu_count() or 1) + 1, user_api="blas"):
        got = a @ b
    _assert_gemm_right(got, a, b)


def _child_gemm(queue) -> None:
    rng = np.random.default_rng(2)
    a = rng.standard_normal((256, 256), dtype=np.float32)
    y = np.empty((2, 48, 15, 15), np.float32)
    x = rng.standard_normal((2, 48, 30, 30), dtype=np.float32)
    native.maxpool2d(x, y, (3, 3), (2, 2), (1, 1), (1, 1))
    queue.put((float((a @ a).sum()), float(y.sum())))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is POSIX-only")
def test_forked_child_gets_new_workers(pool):
    """The parent's workers do not exist in a forked child: its first parallel call starts
    new ones instead of waiting for threads that are gone."""
    rng = np.random.default_rng(2)
    a = rng.standard_normal((256, 256), dtype=np.float32)
    a @ a  # the parent's workers are started and polling
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_child_gemm, args=(queue,))
    child.start()
    child.join(timeout=60)
    if child.is_alive():
        child.kill()
        pytest.fail("the forked child hung on its first BLAS call")
    assert child.exitcode == 0
    gemm_sum, pool_sum = queue.get(timeout=5)
    assert gemm_sum == pytest.approx(float((a @ a).sum()), rel=1e-6)
    assert np.isfinite(pool_sum)
