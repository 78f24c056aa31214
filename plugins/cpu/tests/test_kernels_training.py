"""Tests of the ai.onnx.preview.training optimizers on the CPU provider (the operator library's, onyxrt_ops.training, bound over numpy).

The onnx node conformance cases run straight through the registry; the targeted tests check
float64 tensors, the first step (T == 0), regularization terms and several tensors per node
against the update formulas of the operator docs written out in numpy (onnxruntime's default
build has no kernels for this domain).
"""

from __future__ import annotations

import numpy as np
import pytest
from kernel_cases import assert_all_versions_registered, conformance_params, randn, run_case
from kernel_cases import run_ours as _run_ours
from onnx import helper

from onyxrt.errors import InvalidGraph
from onyxrt.kernels import KernelInfo
from onyxrt_cpu.kernels import registry

DOMAIN = "ai.onnx.preview.training"
OPS = ["Adam", "Adagrad", "Momentum"]

# Conformance cases these kernels cannot pass, with the reason. None today.
XFAIL: dict[str, str] = {}


@pytest.mark.parametrize("case", conformance_params(OPS, XFAIL))
def test_conformance(case):
    run_case(case)


def test_all_versions_registered():
    assert_all_versions_registered(OPS, domain=DOMAIN)


def run(op, n_out, r, t, *tensors, **attrs):
    node = helper.make_node(
        op,
        ["R", "T", *[f"in{i}" for i in range(len(tensors))]],
        [f"out{i}" for i in range(n_out)],
        name=f"test_{op}",
        domain=DOMAIN,
        **attrs,
    )
    return _run_ours(node, 1, np.asarray(r), np.asarray(t, dtype=np.int64), *tensors)


def tensors(n, dtype, seed=0, shapes=((3,), (2, 2))):
    return [randn(shapes[i % len(shapes)], seed=seed + i, dtype=dtype) for i in range(n)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("t", [0, 3])
def test_adagrad_two_tensors(dtype, t):
    xs, gs = tensors(2, dtype, 0), tensors(2, dtype, 10)
    hs = [np.abs(h) for h in tensors(2, dtype, 20)]
    attrs = dict(norm_coefficient=0.01, decay_factor=0.1, epsilon=1e-5)
    outs = run("Adagrad", 4, np.float32(0.2), t, *xs, *gs, *hs, **attrs)
    r = 0.2 / (1 + t * 0.1)
    for i in range(2):
        g = 0.01 * xs[i] + gs[i]
        h = hs[i] + g * g
        x = xs[i] - r * g / (np.sqrt(h) + 1e-5)
        assert outs[i].dtype == dtype and outs[2 + i].dtype == dtype
        np.testing.assert_allclose(outs[i], x, rtol=1e-5)
        np.testing.assert_allclose(outs[2 + i], h, rtol=1e-5)


@pytest.mark.parametrize("mode", ["standard", "nesterov"])
@pytest.mark.parametrize("t", [0, 2])
def test_momentum_modes_and_first_step(mode, t):
    xs, gs, vs = tensors(2, np.float64, 0), tensors(2, np.float64, 5), tensors(2, np.float64, 9)
    attrs = dict(norm_coefficient=0.001, alpha=0.9, beta=0.1, mode=mode)
    outs = run("Momentum", 4, np.float64(0.05), t, *xs, *gs, *vs, **attrs)
    # Attributes are float32 in the model: the truth uses their float32 values.
    alpha, beta, norm = (float(np.float32(v)) for v in (0.9, 0.1, 0.001))
    beta = beta if t > 0 else 1.0
    for i in range(2):
        g = norm * xs[i] + gs[i]
        v = alpha * vs[i] + beta * g
        step = g + alpha * v if mode == "nesterov" else v
        np.testing.assert_allclose(outs[i], xs[i] - 0.05 * step, rtol=1e-12)
        np.testing.assert_allclose(outs[2 + i], v, rtol=1e-12)
        assert outs[i].dtype == np.float64


@pytest.mark.parametrize("t", [0, 1, 5])
def test_adam_bias_correction_and_post_norm(t):
    xs, gs, vs = tensors(2, np.float32, 0), tensors(2, np.float32, 3), tensors(2, np.float32, 6)
    hs = [np.abs(h) for h in tensors(2, np.float32, 12)]
    attrs = dict(alpha=0.85, beta=0.95, epsilon=1e-4, norm_coefficient=0.02,
                 norm_coefficient_post=0.1)  # fmt: skip
    outs = run("Adam", 6, np.float32(0.1), t, *xs, *gs, *vs, *hs, **attrs)
    r = 0.1 * np.sqrt(1 - 0.95**t) / (1 - 0.85**t) if t > 0 else 0.1
    for i in range(2):
        g = 0.02 * xs[i] + gs[i]
        v = 0.85 * vs[i] + 0.15 * g
        h = 0.95 * hs[i] + 0.05 * g * g
        x = (1 - 0.1) * (xs[i] - r * v / (np.sqrt(h) + 1e-4))
        np.testing.assert_allclose(outs[i], x, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(outs[2 + i], v, rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(outs[4 + i], h, rtol=1e-5, atol=1e-7)
        assert all(o.dtype == np.float32 for o in outs)


@pytest.mark.parametrize(
    ("op", "n_inputs", "attrs"),
    [
        ("Adam", 7, {}),
        ("Adagrad", 4, {}),
        ("Momentum", 5, dict(alpha=0.9, beta=0.1, norm_coefficient=0.0, mode="bogus")),
        ("Momentum", 5, dict(alpha=0.9, norm_coefficient=0.0, mode="standard")),
    ],
)
def test_bad_nodes_are_invalid_graph(op, n_inputs, attrs):
    node = helper.make_node(
        op, [f"in{i}" for i in range(n_inputs)], ["out0"], name="bad", domain=DOMAIN, **attrs
    )
    kdef, _ = registry.lookup(DOMAIN, op, 1)
    with pytest.raises(InvalidGraph, match="bad"):
        kdef.factory(KernelInfo.from_node(node, 1, since_version=1))
