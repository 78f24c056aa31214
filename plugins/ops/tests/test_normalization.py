"""Tests of the library's normalizations (onyxrt_ops.normalization).

Every operator runs over numpy and over array_api_strict and is compared with onnxruntime
(or onnx's reference evaluator where onnxruntime has no kernel): attribute variants, old
versions, float32/float64; the extra outputs (LayerNormalization's Mean and InvStdDev,
BatchNormalization's training outputs) against numpy. Half-precision types (which the
array API standard lacks) run over numpy. Attribute errors are InvalidGraph naming the
node; errors in the data are ValueError.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pytest
from library_harness import Bound, assert_matches, oracle, unbound_versions
from onnx import TensorProto, helper

from onyxrt.dtypes import np_dtype
from onyxrt.errors import InvalidGraph
from onyxrt.kernels import KernelInfo
from onyxrt_ops import library

BF16 = np_dtype(TensorProto.BFLOAT16)


def randn(*shape: int, seed: int = 0, dtype: Any = np.float32) -> np.ndarray:
    """Seeded standard-normal values."""
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def positive(*shape: int, seed: int = 0, dtype: Any = np.float32) -> np.ndarray:
    """Seeded values in [0.5, 1.5) (scales, variances)."""
    return (np.random.default_rng(seed).random(shape) + 0.5).astype(dtype)


f64 = functools.partial(randn, dtype=np.float64)


def bn_inputs(shape: tuple[int, ...], dtype: Any = np.float32) -> list[np.ndarray]:
    """X, scale, B, mean, var for BatchNormalization, statistics per channel."""
    c = shape[1]
    return [randn(*shape, dtype=dtype), positive(c, seed=1, dtype=dtype), randn(c, seed=2, dtype=dtype),
            randn(c, seed=3, dtype=dtype), positive(c, seed=4, dtype=dtype)]


def lrn(x: np.ndarray, size: int, alpha: float = 1e-4, beta: float = 0.75, bias: float = 1.0) -> np.ndarray:
    """LRN by its definition, in float64: onnxruntime takes odd sizes only, and onnx's
    reference evaluator loops over the batch axis where it means the channels."""
    before, after = (size - 1) // 2, size // 2
    c = x.shape[1]
    sq = np.stack([(x[:, max(0, i - before):min(c, i + after + 1)].astype(np.float64) ** 2).sum(axis=1)
                   for i in range(c)], axis=1)
    return (x / (bias + alpha / size * sq) ** beta).astype(x.dtype)


def case(op: str, inputs: list[Any], opset: int, *, id: str | None = None,
         want: Any = None, **attrs: Any) -> Any:
    """One case: ``want`` (a function of the inputs) replaces the oracle where it has
    no kernel for the case."""
    return pytest.param(op, inputs, opset, attrs, want, id=id or f"{op}-{opset}")


CASES = [
    case("BatchNormalization", bn_inputs((2, 3, 4, 5)), 15),
    case("BatchNormalization", bn_inputs((2, 3, 4), np.float64), 14, epsilon=1e-3, id="BN-14-f64"),
    case("BatchNormalization", bn_inputs((4, 3)), 9, id="BN-9-2d"),
    case("BatchNormalization", bn_inputs((2, 3, 4, 5)), 7, momentum=0.5, id="BN-7"),
    case("BatchNormalization", bn_inputs((2, 3, 4)), 6, is_test=1, id="BN-6-is-test"),
    case("LayerNormalization", [randn(2, 3, 8), positive(8), randn(8, seed=1)], 17),
    case("LayerNormalization", [randn(2, 3, 8), positive(3, 8)], 17, axis=1, epsilon=1e-3,
         id="LN-axis1-no-bias"),
    case("LayerNormalization", [f64(4, 6), positive(6, dtype=np.float64)], 17, stash_type=11,
         id="LN-f64-stash-f64"),
    case("LayerNormalization", [randn(2, 5, 6), positive(6), randn(6, seed=1)], 17, axis=-1),
    case("InstanceNormalization", [randn(2, 3, 4, 5), positive(3), randn(3, seed=1)], 22),
    case("InstanceNormalization", [f64(2, 3, 6), positive(3, dtype=np.float64),
                                   randn(3, seed=1, dtype=np.float64)], 6, epsilon=1e-2,
         id="IN-6-f64"),
    case("GroupNormalization", [randn(2, 6, 4, 4), positive(6), randn(6, seed=1)], 21, num_groups=3),
    case("GroupNormalization", [randn(2, 6, 5), positive(2), randn(2, seed=1)], 18, num_groups=2,
         id="GN-18-per-group"),
    case("GroupNormalization", [randn(2, 4, 3), positive(4), randn(4, seed=1)], 21, num_groups=4,
         stash_type=11, id="GN-stash-f64"),
    case("LRN", [randn(2, 7, 3, 3)], 13, size=3),
    case("LRN", [randn(1, 5, 4, 4)], 13, size=4, alpha=1e-2, beta=0.5, bias=2.0, id="LRN-even",
         want=lambda x: lrn(x, 4, 1e-2, 0.5, 2.0)),
    case("LRN", [f64(2, 3, 4)], 1, size=7, id="LRN-1-wider-than-C", want=lambda x: lrn(x, 7)),
    case("MeanVarianceNormalization", [randn(2, 3, 4, 5)], 13),
    case("MeanVarianceNormalization", [randn(2, 3, 4)], 9, axes=[1, -1], id="MVN-9-axes"),
    case("LpNormalization", [randn(3, 4, 5)], 22),
    case("LpNormalization", [randn(3, 4)], 1, p=1, axis=0, id="Lp-1-p1-axis0"),
    case("LpNormalization", [np.array([[0, 0, 0], [3, 4, 0]], np.float32)], 22, id="Lp-zero-row"),
]  # fmt: skip

_TOL = {np.dtype(np.float32): (1e-5, 1e-5), np.dtype(np.float64): (1e-9, 1e-12)}


@pytest.mark.parametrize(("op", "inputs", "opset", "attrs", "want"), CASES)
def test_same_as_onnxruntime(bound: Bound, op, inputs, opset, attrs, want):
    got = run_outputs(bound, op, inputs, opset, 1, **attrs)[0]
    assert_matches(got, want(*inputs) if want else oracle(op, inputs, opset, **attrs), _TOL)


def test_every_operator_has_a_case():
    defined = {d.op_type for d in library.definitions if d.cls.__module__ == "onyxrt_ops.normalization"}
    assert {p.values[0] for p in CASES} == defined


def run_outputs(bound: Bound, op: str, inputs: list[Any], opset: int, n_out: int, **attrs: Any):
    """Every output of a node with ``n_out`` outputs, on the host."""
    n = helper.make_node(op, [f"in{i}" for i in range(len(inputs))], [f"out{i}" for i in range(n_out)],
                         name=f"{op}_node", **attrs)
    kdef, reason = bound.registry.lookup("", op, opset)
    assert kdef is not None, reason
    kernel = kdef.factory(KernelInfo.from_node(n, opset, since_version=kdef.since_version))
    return [bound.host(y) for y in kernel.compute(*[bound.array(v) for v in inputs])]


# --------------------------------------------------------------------- extra outputs


def test_layernorm_mean_and_inv_std(bound: Bound):
    x, scale, b = randn(2, 3, 8), positive(3, 8), randn(3, 8, seed=1)
    y, mean, inv_std = run_outputs(bound, "LayerNormalization", [x, scale, b], 17, 3, axis=1)
    want_mean = x.mean(axis=(1, 2), keepdims=True)
    want_inv = 1 / np.sqrt(((x - want_mean) ** 2).mean(axis=(1, 2), keepdims=True) + 1e-5)
    np.testing.assert_allclose(mean, want_mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(inv_std, want_inv, rtol=1e-5)
    np.testing.assert_allclose(y, (x - want_mean) * want_inv * scale + b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("opset", [15, 9])
def test_batchnorm_training_outputs(bound: Bound, opset):
    x, scale, b, mean, var = bn_inputs((4, 3, 5))
    attrs = {"training_mode": 1} if opset >= 14 else {}
    n_out = 3 if opset >= 14 else 5
    outs = run_outputs(bound, "BatchNormalization", [x, scale, b, mean, var], opset, n_out,
                       momentum=0.8, **attrs)
    cur_mean, cur_var = x.mean(axis=(0, 2)), x.var(axis=(0, 2))
    want_y = (x - cur_mean[:, None]) / np.sqrt(cur_var[:, None] + 1e-5) * scale[:, None] + b[:, None]
    np.testing.assert_allclose(outs[0], want_y, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(outs[1], mean * 0.8 + cur_mean * 0.2, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(outs[2], var * 0.8 + cur_var * 0.2, rtol=1e-5, atol=1e-6)
    if opset < 14:
        np.testing.assert_allclose(outs[3], cur_mean, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(outs[4], 1 / np.sqrt(cur_var + 1e-5), rtol=1e-5)


def test_batchnorm_folds_constant_statistics_once(bound: Bound):
    """Constant statistics are folded when the kernel is built: the runtime values are not
    read again (they are the same constants in a real graph)."""
    x, scale, b, mean, var = bn_inputs((2, 3, 4))
    n = helper.make_node("BatchNormalization", [f"in{i}" for i in range(5)], ["y"], name="bn")
    kdef, _ = bound.registry.lookup("", "BatchNormalization", 15)
    info = KernelInfo.from_node(n, 15, since_version=15, constants={1: scale, 2: b, 3: mean, 4: var})
    kernel = kdef.factory(info)
    assert kernel.folded is not None
    (y,) = kernel.compute(*[bound.array(v) for v in (x, scale, b, mean, var)])
    assert_matches(bound.host(y), oracle("BatchNormalization", [x, scale, b, mean, var], 15), _TOL)


def test_batchnorm_non_spatial_v7(bound: Bound):
    x = randn(2, 3, 4)
    stats = [positive(3, 4, seed=1), randn(3, 4, seed=2), randn(3, 4, seed=3), positive(3, 4, seed=4)]
    y = bound.run("BatchNormalization", [x, *stats], 7, spatial=0)
    scale, b, mean, var = stats
    np.testing.assert_allclose(y, (x - mean) / np.sqrt(var + 1e-5) * scale + b, rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------- half precision

HALF_CASES = [
    ("BatchNormalization", lambda h: bn_inputs((2, 3, 4), h), 15, {}),
    ("LayerNormalization", lambda h: [randn(2, 8, dtype=h), positive(8, dtype=h)], 17, {}),
    ("InstanceNormalization", lambda h: [randn(2, 3, 5, dtype=h), positive(3, dtype=h),
                                         randn(3, dtype=h)], 22, {}),
    ("GroupNormalization", lambda h: [randn(2, 4, 3, dtype=h), positive(4, dtype=h),
                                      randn(4, dtype=h)], 21, {"num_groups": 2}),
    ("LRN", lambda h: [randn(2, 5, 3, dtype=h)], 13, {"size": 3}),
    ("MeanVarianceNormalization", lambda h: [randn(2, 3, 4, 4, dtype=h)], 13, {}),
    ("LpNormalization", lambda h: [randn(3, 6, dtype=h)], 22, {}),
]  # fmt: skip


@pytest.mark.parametrize(("op", "make", "opset", "attrs"), HALF_CASES, ids=[c[0] for c in HALF_CASES])
@pytest.mark.parametrize("half", [np.float16, BF16], ids=["float16", "bfloat16"])
def test_half_types_keep_their_dtype(numpy_bound: Bound, op, make, opset, attrs, half):
    """float16/bfloat16 are computed in float32 and rounded once (numpy: the standard has
    neither type)."""
    inputs = make(half)
    got = run_outputs(numpy_bound, op, inputs, opset, 1, **attrs)[0]
    assert got.dtype == half and got.shape == inputs[0].shape
    want = run_outputs(numpy_bound, op, [v.astype(np.float32) for v in inputs], opset, 1, **attrs)[0]
    tol = 5e-2 if half is BF16 else 5e-3
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=tol, atol=tol)


# -------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("op", "opset", "attrs", "match"),
    [
        ("BatchNormalization", 15, {"epsilon": -1.0}, "epsilon=-1.0 must be >= 0"),
        ("BatchNormalization", 15, {"momentum": "fast"}, "'momentum' must be a float"),
        ("LayerNormalization", 17, {"stash_type": 6}, "stash_type=6 is not a floating-point"),
        ("LayerNormalization", 17, {"stash_type": 99}, "stash_type=99 is not an ONNX element type"),
        ("InstanceNormalization", 22, {"epsilon": -0.5}, "epsilon"),
        ("GroupNormalization", 21, {}, "num_groups=None must be set"),
        ("GroupNormalization", 21, {"num_groups": 0}, "num_groups=0"),
        ("LRN", 13, {}, "size=None must be set"),
        ("LRN", 13, {"size": 3, "beta": "big"}, "'beta' must be a float"),
        ("LpNormalization", 22, {"p": 3}, "p=3 must be 1 or 2"),
    ],
)  # fmt: skip
def test_bad_attributes_are_invalid_graph_naming_the_node(bound: Bound, op, opset, attrs, match):
    n = helper.make_node(op, ["x"], ["y"], name=f"{op}_node", **attrs)
    kdef, _ = bound.registry.lookup("", op, opset)
    with pytest.raises(InvalidGraph, match=match) as err:
        kdef.factory(KernelInfo.from_node(n, opset, since_version=kdef.since_version))
    assert f"{op}_node" in str(err.value)


def test_stash_type_the_backend_cannot_hold_is_refused(strict_bound: Bound):
    n = helper.make_node("LayerNormalization", ["x", "s"], ["y"], name="ln", stash_type=TensorProto.FLOAT16)
    kdef, _ = strict_bound.registry.lookup("", "LayerNormalization", 17)
    with pytest.raises(InvalidGraph, match="array_api_strict holds"):
        kdef.factory(KernelInfo.from_node(n, 17, since_version=17))


@pytest.mark.parametrize(
    ("op", "inputs", "opset", "attrs", "match"),
    [
        ("BatchNormalization", [randn(3), *bn_inputs((1, 3))[1:]], 15, {}, "rank >= 2"),
        ("LayerNormalization", [randn(2, 3), positive(3)], 17, {"axis": 2}, "axis 2 is out of range"),
        ("InstanceNormalization", [randn(2, 3), positive(3), randn(3)], 22, {}, "rank >= 3"),
        ("GroupNormalization", [randn(2, 6, 4), positive(6), randn(6)], 21, {"num_groups": 4},
         "num_groups=4 does not divide the 6 channels"),
        ("GroupNormalization", [randn(2, 6, 4), positive(6), randn(6)], 18, {"num_groups": 3},
         "num_groups=3 values"),
        ("GroupNormalization", [randn(2, 6, 4), positive(3), randn(3)], 21, {"num_groups": 3},
         "C=6 values"),
        ("LRN", [randn(4)], 13, {"size": 3}, "rank >= 2"),
        ("MeanVarianceNormalization", [randn(2, 3)], 13, {}, "out of range for rank 2"),
        ("LpNormalization", [randn(2, 3)], 22, {"axis": 2}, "axis 2 is out of range"),
    ],
)  # fmt: skip
def test_bad_data_is_a_value_error(bound: Bound, op, inputs, opset, attrs, match):
    with pytest.raises(ValueError, match=match):
        run_outputs(bound, op, inputs, opset, 1, **attrs)


def test_lpnorm_zero_slice_gives_no_warning(numpy_bound: Bound):
    with np.errstate(all="raise"):
        y = numpy_bound.run("LpNormalization", [np.zeros((2, 3), np.float32)], 22)
    np.testing.assert_array_equal(y, np.zeros((2, 3), np.float32))


def test_every_onnx_version_is_bound(numpy_bound: Bound):
    assert not unbound_versions(numpy_bound.registry, {p.values[0] for p in CASES})
