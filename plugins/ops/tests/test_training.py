"""Tests of the library's ai.onnx.preview.training optimizers (onyxrt_ops.training): Adam,
Adagrad and Momentum over numpy, array_api_strict and the GPU providers' backend (under the
simulated CuPy), against the update formulas of the operator docs written out in numpy
(onnxruntime's default build has no kernels for this domain; the CPU provider's tests,
plugins/cpu/tests/test_kernels_training.py, cover more attribute combinations)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from library_harness import Bound, bind, onnx_versions
from onnx import helper

from onyxrt.errors import InvalidGraph
from onyxrt_ops import library

DOMAIN = "ai.onnx.preview.training"


def randn(*shape: int, seed: int, dtype: Any = np.float32) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def step(b: Bound, op: str, n_out: int, r: float, t: int, *tensors: np.ndarray, **attrs: Any) -> list[np.ndarray]:
    """One optimizer step over bound ``b``: the outputs on the host."""
    n = helper.make_node(op, ["R", "T", *[f"in{i}" for i in range(len(tensors))]],
                         [f"out{i}" for i in range(n_out)], name=f"{op}_node", domain=DOMAIN, **attrs)
    host = (np.asarray(r, tensors[0].dtype), np.asarray(t, np.int64))  # host_inputs: R and T
    return [b.host(o) for o in b.kernel(n, 1).compute(*host, *(b.array(x) for x in tensors))]


def adam_truth(x, g, v, h, r, t, alpha=0.9, beta=0.999, eps=1e-6):
    r = r * np.sqrt(1 - beta**t) / (1 - alpha**t) if t > 0 else r
    v = alpha * v + (1 - alpha) * g
    h = beta * h + (1 - beta) * g * g
    return x - r * v / (np.sqrt(h) + eps), v, h


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("t", [0, 4])
def test_adam(bound: Bound, dtype, t):
    x, g, v = (randn(2, 3, seed=s, dtype=dtype) for s in (0, 1, 2))
    h = np.abs(randn(2, 3, seed=3, dtype=dtype))
    got = step(bound, "Adam", 3, 0.1, t, x, g, v, h)
    for out, want in zip(got, adam_truth(*(a.astype(np.float64) for a in (x, g, v, h)), 0.1, t)):
        assert out.dtype == dtype
        np.testing.assert_allclose(out, want, rtol=1e-5 if dtype == np.float32 else 1e-12)


def test_adagrad_and_momentum_update_two_tensors(bound: Bound):
    xs = [randn(3, seed=0), randn(2, 2, seed=1)]
    gs = [randn(3, seed=2), randn(2, 2, seed=3)]
    hs = [np.abs(randn(3, seed=4)), np.abs(randn(2, 2, seed=5))]
    got = step(bound, "Adagrad", 4, 0.2, 3, *xs, *gs, *hs, decay_factor=0.1, epsilon=1e-5)
    rate = 0.2 / (1 + 3 * 0.1)
    for i in range(2):
        h = hs[i] + gs[i] * gs[i]
        np.testing.assert_allclose(got[2 + i], h, rtol=1e-6)
        np.testing.assert_allclose(got[i], xs[i] - rate * gs[i] / (np.sqrt(h) + 1e-5), rtol=1e-5)
    got = step(bound, "Momentum", 4, 0.05, 0, *xs, *gs, *hs, norm_coefficient=0.0, alpha=0.5, beta=0.1,
               mode="nesterov")
    for i in range(2):  # the first step (T == 0) takes beta as 1
        v = 0.5 * hs[i] + gs[i]
        np.testing.assert_allclose(got[2 + i], v, rtol=1e-6)
        np.testing.assert_allclose(got[i], xs[i] - 0.05 * (gs[i] + 0.5 * v), rtol=1e-5)


def test_over_the_gpu_backend(numpy_bound: Bound):
    """The GPU providers bind the optimizers over CuPy, R and T on the host: the numpy
    backend's results."""
    from onyxrt_gpu.kernels._common import BACKEND
    from onyxrt_gpu.testing.simulated_cupy import install

    x, g, v, h = (np.abs(randn(4, seed=s)) for s in range(4))
    want = step(numpy_bound, "Adam", 3, 0.1, 2, x, g, v, h)
    with install():
        import cupy

        gpu = bind("cupy", BACKEND)
        gpu.array = cupy.asarray  # type: ignore[method-assign]
        gpu.host = lambda value: value.get()  # type: ignore[method-assign]
        got = step(gpu, "Adam", 3, 0.1, 2, x, g, v, h)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-6)


def test_every_version_is_defined_and_bad_nodes_are_invalid_graph(numpy_bound: Bound):
    for op in ("Adam", "Adagrad", "Momentum"):
        assert {v for d in library.definitions if d.op_type == op and d.domain == DOMAIN for v in d.versions} \
            == onnx_versions(op, DOMAIN) == {1}
    with pytest.raises(InvalidGraph, match="Momentum node 'Momentum_node': required attribute 'alpha'"):
        step(numpy_bound, "Momentum", 2, 0.1, 1, randn(2, seed=0), randn(2, seed=1), randn(2, seed=2),
             beta=0.1, norm_coefficient=0.0, mode="standard")
    with pytest.raises(InvalidGraph, match="expects R, T and 4 equal groups"):
        step(numpy_bound, "Adam", 2, 0.1, 1, randn(2, seed=0), randn(2, seed=1))
