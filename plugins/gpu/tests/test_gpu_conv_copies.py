"""Convolution copies and launches (issue 25, item 8), under the simulated CuPy.

A Conv used to pad its input with a fill kernel, view it through two view calls, run a
depthwise convolution as a multiply-add per tap (about five CuPy calls and one temporary
each) and a grouped convolution of several images as one small GEMM per image. Each case
below counts what one Conv asks of CuPy once warm (its geometry and the views of its
constant W and B made by a first call): CuPy calls (``launches``: the simulation counts
every call, views included — each is host time on a device), allocator calls, bytes
allocated besides the output, and GEMM calls. ``BEFORE`` holds the numbers the previous
``kernels/conv.py`` gave (measured with this file's ``_measure`` on that code); every case
must now be lower in the quantities it names, no higher than ``AFTER`` (today's numbers)
in any, and equal to onnxruntime.
"""

from __future__ import annotations

import itertools
from typing import Any, NamedTuple

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onyxrt as ort
from onyxrt.kernels import KernelInfo
from onyxrt_gpu.kernels import registry
from onyxrt_gpu.testing.simulated_cupy import SimulatedCupy

CUDA, CPU = "CUDAExecutionProvider", "CPUExecutionProvider"


class Counts(NamedTuple):
    """What one warm Conv asked of the simulated CuPy."""

    launches: int
    allocator_calls: int
    scratch_bytes: int  # allocated besides the output
    gemms: int


def _rand(*shape: int, seed: int = 0, dtype: Any = np.float32) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def _node(attrs: dict[str, Any], bias: bool = True):
    inputs = ["x", "w", "b"] if bias else ["x", "w"]
    return helper.make_node("Conv", inputs, ["y"], name="conv", **attrs)


def _kernel(node, w: np.ndarray, b: np.ndarray | None, constant: bool = True):
    kdef, reason = registry.lookup("", "Conv", 17)
    assert kdef is not None, reason
    consts = {1: w} if b is None else {1: w, 2: b}
    info = KernelInfo.from_node(
        node, 17, since_version=kdef.since_version, constants=consts if constant else {}
    )
    return kdef.factory(info)


def _onnxruntime(node, x: np.ndarray, w: np.ndarray, b: np.ndarray | None) -> np.ndarray:
    onnxruntime = pytest.importorskip("onnxruntime")
    inits = [numpy_helper.from_array(w, "w")] + (
        [] if b is None else [numpy_helper.from_array(b, "b")]
    )
    elem = TensorProto.FLOAT16 if x.dtype == np.float16 else TensorProto.FLOAT
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", elem, list(x.shape))],
        [helper.make_tensor_value_info("y", elem, None)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return onnxruntime.InferenceSession(model.SerializeToString(), providers=[CPU]).run(
        None, {"x": x}
    )[0]


def _measure(sim: SimulatedCupy, kernel: Any, args: list[Any]) -> tuple[Counts, np.ndarray]:
    """One warm compute's counts, and its output on the host."""
    cp = sim.cupy
    kernel.compute(*args)  # warm: geometry cached, constant views made
    pool = sim.default_pool
    sizes: list[int] = []

    def counting(nbytes: int) -> Any:
        sizes.append(nbytes)
        return pool.malloc(nbytes)

    sim.reset_counters()
    with cp.cuda.using_allocator(counting):
        (y,) = kernel.compute(*args)
    counts = Counts(sim.launches, sim.allocator_calls, sum(sizes) - y.nbytes, len(sim.gemm_calls))
    return counts, y.get()


#: name: (X shape, W shape, attributes, the quantities that must drop).
CASES: dict[str, tuple[tuple[int, ...], tuple[int, ...], dict[str, Any], tuple[str, ...]]] = {
    "1x1-b1": ((1, 16, 9, 9), (32, 16, 1, 1), {}, ("launches",)),
    "1x1-b8": ((8, 16, 9, 9), (32, 16, 1, 1), {}, ("launches",)),
    "1x1-stride2-b8": ((8, 16, 8, 8), (32, 16, 1, 1), {"strides": [2, 2]}, ("launches",)),
    "3x3-pad1-b1": ((1, 16, 9, 9), (32, 16, 3, 3), {"pads": [1, 1, 1, 1]}, ("launches",)),
    "3x3-pad1-b8": ((8, 16, 9, 9), (32, 16, 3, 3), {"pads": [1, 1, 1, 1]}, ("launches",)),
    # An even size: the windows never read the last padded row and column.
    "3x3-pad1-stride2-b1": (
        (1, 16, 8, 8),
        (32, 16, 3, 3),
        {"pads": [1, 1, 1, 1], "strides": [2, 2]},
        ("launches", "scratch_bytes"),
    ),
    "3x3-pad1-stride2-b8": (
        (8, 16, 8, 8),
        (32, 16, 3, 3),
        {"pads": [1, 1, 1, 1], "strides": [2, 2]},
        ("launches", "scratch_bytes"),
    ),
    "depthwise-b1": (
        (1, 16, 9, 9),
        (16, 1, 3, 3),
        {"pads": [1, 1, 1, 1], "group": 16},
        ("launches", "allocator_calls"),
    ),
    "depthwise-b8": (
        (8, 16, 9, 9),
        (16, 1, 3, 3),
        {"pads": [1, 1, 1, 1], "group": 16},
        ("launches", "allocator_calls"),
    ),
    "depthwise-stride2-b1": (
        (1, 16, 8, 8),
        (16, 1, 3, 3),
        {"pads": [1, 1, 1, 1], "group": 16, "strides": [2, 2]},
        ("launches", "allocator_calls", "scratch_bytes"),
    ),
    "grouped-b8": (
        (8, 16, 9, 9),
        (32, 4, 3, 3),
        {"pads": [1, 1, 1, 1], "group": 4},
        ("launches", "gemms"),
    ),
}

#: Measured on the previous kernels/conv.py (git HEAD before this change) with ``_measure``:
#: (launches, allocator calls, scratch bytes, GEMM calls).
BEFORE: dict[str, Counts] = {
    "1x1-b1": Counts(7, 1, 0, 1),
    "1x1-b8": Counts(7, 1, 0, 1),
    "1x1-stride2-b8": Counts(8, 2, 8192, 1),
    "3x3-pad1-b1": Counts(11, 3, 54400, 1),
    "3x3-pad1-b8": Counts(11, 3, 435200, 1),
    "3x3-pad1-stride2-b1": Counts(11, 3, 15616, 1),
    "3x3-pad1-stride2-b8": Counts(11, 3, 124928, 1),
    "depthwise-b1": Counts(52, 10, 49216, 0),
    "depthwise-b8": Counts(52, 10, 393728, 0),
    "depthwise-stride2-b1": Counts(52, 10, 14592, 0),
    "grouped-b8": Counts(18, 3, 435200, 8),
}

#: Measured on the current code: a regression in any quantity fails.
AFTER: dict[str, Counts] = {
    "1x1-b1": Counts(5, 1, 0, 1),
    "1x1-b8": Counts(5, 1, 0, 1),
    "1x1-stride2-b8": Counts(6, 2, 8192, 1),
    "3x3-pad1-b1": Counts(8, 3, 54400, 1),
    "3x3-pad1-b8": Counts(8, 3, 435200, 1),
    "3x3-pad1-stride2-b1": Counts(8, 3, 14400, 1),
    "3x3-pad1-stride2-b8": Counts(8, 3, 115200, 1),
    "depthwise-b1": Counts(8, 3, 54400, 1),
    "depthwise-b8": Counts(9, 4, 476672, 1),
    "depthwise-stride2-b1": Counts(8, 3, 14400, 1),
    "grouped-b8": Counts(9, 4, 518144, 1),
}


@pytest.mark.parametrize("name", list(CASES))
def test_conv_makes_fewer_copies_and_launches(sim_cupy, name):
    x_shape, w_shape, attrs, dropped = CASES[name]
    x, w, b = _rand(*x_shape), _rand(*w_shape, seed=1), _rand(w_shape[0], seed=2)
    node = _node(attrs)
    cp = sim_cupy.cupy
    kernel = _kernel(node, w, b)
    counts, y = _measure(sim_cupy, kernel, [cp.asarray(x), cp.asarray(w), cp.asarray(b)])
    np.testing.assert_allclose(y, _onnxruntime(node, x, w, b), rtol=1e-5, atol=1e-5)
    before, after = BEFORE[name], AFTER[name]
    for field in Counts._fields:
        assert getattr(counts, field) <= getattr(after, field), (field, counts)
        if field in dropped:
            assert getattr(counts, field) < getattr(before, field), (field, counts, before)
    # The rest is held to AFTER; some of it grew by design. A depthwise convolution is now a
    # GEMM (0 -> 1) whose column matrix holds every tap at once (54400 scratch bytes where
    # nine one-tap temporaries made 49216); a grouped or depthwise batch of images is one
    # GEMM over the groups whose result is transposed into the output by the bias add: one
    # more output-sized buffer (an allocator call) for 7 fewer GEMM calls.


def test_depthwise_and_grouped_batches_are_one_gemm_call(sim_cupy):
    """A grouped or depthwise convolution of 8 images: one strided-batched GEMM over the
    groups (it was one GEMM per image, or none and a multiply-add per tap)."""
    cp = sim_cupy.cupy
    for w_shape, group in (((32, 4, 3, 3), 4), ((32, 1, 3, 3), 16)):
        x, w = _rand(8, 16, 9, 9), _rand(*w_shape, seed=1)
        node = _node({"pads": [1, 1, 1, 1], "group": group}, bias=False)
        counts, y = _measure(sim_cupy, _kernel(node, w, None), [cp.asarray(x), cp.asarray(w)])
        assert counts.gemms == 1
        (call,) = sim_cupy.gemm_calls
        assert call.batch == group  # the groups are the batch; the images share each GEMM
        np.testing.assert_allclose(y, _onnxruntime(node, x, w, None), rtol=1e-5, atol=1e-5)


def _grid():
    """Odd shapes: channels 3/5/17 (10 for two groups), sizes 7 and 9, batches 1 and 3,
    groups 1/2/depthwise, strides 1/2, pads 0/1, dilation 2, 1x1 and 3x3, 1-D."""
    geometries = [  # (kernel, stride, pad, dilation)
        (1, 1, 0, 1),
        (1, 2, 0, 1),
        (3, 1, 1, 1),
        (3, 2, 1, 1),
        (3, 1, 1, 2),
        (3, 2, 0, 2),
        (1, 1, 1, 1),
    ]
    modes = [("g1", 1), ("g2", 2), ("dw", 0)]
    params = []
    for i, ((mode, group), n, (k, s, p, dil)) in enumerate(
        itertools.product(modes, (1, 3), geometries)
    ):
        c = {"g1": (3, 5, 17)[i % 3], "g2": 10, "dw": (17, 5)[i % 2]}[mode]
        group = c if mode == "dw" else group
        m = {"g1": 4, "g2": 6, "dw": c * (1 + i % 2)}[mode]
        hw = ((7, 9), (9, 7), (9, 9), (7, 7))[i % 4]
        bias = i % 3 != 0
        params.append(
            pytest.param(
                n,
                c,
                hw,
                m,
                k,
                group,
                s,
                p,
                dil,
                bias,
                id=f"{mode}-n{n}-c{c}-{hw[0]}x{hw[1]}-k{k}-s{s}-p{p}-d{dil}"
                f"{'-bias' if bias else ''}",
            )
        )
    return params


@pytest.mark.parametrize(("n", "c", "hw", "m", "k", "group", "s", "p", "dil", "bias"), _grid())
def test_conv_equals_onnxruntime_on_odd_shapes(sim_cupy, n, c, hw, m, k, group, s, p, dil, bias):
    x, w = _rand(n, c, *hw), _rand(m, c // group, k, k, seed=1)
    b = _rand(m, seed=2) if bias else None
    node = _node(
        {"pads": [p] * 4, "strides": [s, s], "dilations": [dil, dil], "group": group}, bias=bias
    )
    cp = sim_cupy.cupy
    args = [cp.asarray(x), cp.asarray(w)] + ([cp.asarray(b)] if bias else [])
    want = _onnxruntime(node, x, w, b)
    for constant in (True, False):
        (y,) = _kernel(node, w, b, constant=constant).compute(*args)
        assert y.shape == want.shape and y.flags.c_contiguous
        np.testing.assert_allclose(y.get(), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("x_shape", "w_shape", "attrs"),
    [
        ((3, 5, 9), (4, 5, 3), {"pads": [1, 2], "strides": [2]}),
        ((3, 6, 9), (6, 1, 3), {"pads": [0, 1], "group": 6, "dilations": [2]}),
        (
            (2, 4, 5, 6, 4),
            (6, 2, 2, 3, 2),
            {"group": 2, "strides": [1, 2, 1], "pads": [1, 0, 1, 0, 1, 1]},
        ),
        ((3, 5, 7, 9), (4, 5, 3, 3), {"pads": [0, 1, 1, 0]}),
        ((3, 5, 7, 9), (4, 5, 3, 3), {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
        ((3, 4, 7, 9), (8, 2, 3, 3), {"auto_pad": "SAME_LOWER", "group": 2}),
    ],
)
def test_conv_equals_onnxruntime_in_other_ranks_and_pads(sim_cupy, x_shape, w_shape, attrs):
    x, w, b = _rand(*x_shape), _rand(*w_shape, seed=1), _rand(w_shape[0], seed=2)
    node = _node(attrs)
    cp = sim_cupy.cupy
    (y,) = _kernel(node, w, b).compute(cp.asarray(x), cp.asarray(w), cp.asarray(b))
    np.testing.assert_allclose(y.get(), _onnxruntime(node, x, w, b), rtol=1e-5, atol=1e-5)


def test_a_runtime_weight_is_read_anew_each_run(sim_cupy):
    """Views of W are kept only for a constant W; a runtime W is read on every call."""
    cp = sim_cupy.cupy
    x = _rand(2, 4, 7, 7)
    node = _node({"pads": [1, 1, 1, 1], "group": 2}, bias=False)
    kernel = _kernel(node, _rand(6, 2, 3, 3), None, constant=False)
    for seed in (1, 2):
        w = _rand(6, 2, 3, 3, seed=seed)
        (y,) = kernel.compute(cp.asarray(x), cp.asarray(w))
        np.testing.assert_allclose(y.get(), _onnxruntime(node, x, w, None), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("group", [1, 2, 6])
def test_large_batches_build_their_columns_in_pieces(sim_cupy, monkeypatch, group):
    from onyxrt_gpu.kernels import conv

    x, w, b = _rand(5, 6, 6, 6), _rand(12, 6 // group, 3, 3, seed=1), _rand(12, seed=2)
    node = _node({"pads": [1, 1, 1, 1], "group": group})
    monkeypatch.setattr(conv, "COLUMN_BUDGET", 6 * 9 * 36 * 4 * 2)  # two images at a time
    cp = sim_cupy.cupy
    (y,) = _kernel(node, w, b).compute(cp.asarray(x), cp.asarray(w), cp.asarray(b))
    np.testing.assert_allclose(y.get(), _onnxruntime(node, x, w, b), rtol=1e-5, atol=1e-5)


def test_float16_depthwise_convolution_is_a_float16_gemm(cuda_sim):
    """A float16 depthwise convolution reads float16 into cuBLAS and accumulates in float32
    (the multiply-add per tap accumulated in float16)."""
    x, w, b = (
        _rand(2, 8, 9, 9, dtype=np.float16),
        _rand(8, 1, 3, 3, seed=1, dtype=np.float16),
        _rand(8, seed=2, dtype=np.float16),
    )
    node = _node({"pads": [1, 1, 1, 1], "group": 8})
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT16, list(x.shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, None)],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17)]
    ).SerializeToString()
    session = ort.InferenceSession(model, providers=[CUDA, CPU])
    assert list(session.placement.nodes_by_provider()) == [CUDA]
    cuda_sim.reset_counters()
    (y,) = session.run(None, {"x": x})
    assert cuda_sim.matmul_upcasts == 0
    assert [(g.data_type, g.compute_type, g.batch) for g in cuda_sim.gemm_calls] == [
        (np.dtype(np.float16), "32F", 8)
    ]
    want = _onnxruntime(node, x.astype(np.float32), w.astype(np.float32), b.astype(np.float32))
    np.testing.assert_allclose(y.astype(np.float32), want, rtol=3e-3, atol=3e-3)


def test_rocm_takes_the_same_layouts_through_cupy_matmul(sim_hip):
    cp = sim_hip.cupy
    for w_shape, group in (((6, 2, 3, 3), 2), ((4, 1, 3, 3), 4), ((6, 4, 1, 1), 1)):
        x, w = _rand(3, 4, 7, 9), _rand(*w_shape, seed=1)
        node = _node({"pads": [1, 1, 1, 1], "group": group, "strides": [2, 1]}, bias=False)
        (y,) = _kernel(node, w, None).compute(cp.asarray(x), cp.asarray(w))
        np.testing.assert_allclose(y.get(), _onnxruntime(node, x, w, None), rtol=1e-5, atol=1e-5)
