"""Tests of the library's convolutions and pools (onyxrt_ops.spatial).

Every operator runs over numpy and over array_api_strict and is compared with onnxruntime
(or onnx's reference evaluator where onnxruntime has no kernel): strides, dilations,
pads, every auto_pad, ceil_mode, count_include_pad, groups (depthwise too), 1-d to 3-d
windows, old versions, integer types. MaxPool's Indices output (both storage orders) is
compared too. Half-precision types (which the array API standard lacks) run over numpy.
Attribute errors are InvalidGraph when the kernel is built; errors in the data are
ValueError from compute.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from library_harness import (
    Bound,
    assert_matches,
    node,
    oracle,
    typed_oracle,
    unbound_versions,
)
from onnx import TensorProto, helper

from onyxrt.dtypes import np_dtype, onnx_elem_type
from onyxrt.errors import InvalidGraph
from onyxrt.kernels import KernelInfo
from onyxrt_ops import library

BF16 = np_dtype(TensorProto.BFLOAT16)
SPATIAL = {d.op_type for d in library.definitions if d.cls.__module__ == "onyxrt_ops.spatial"}
TOL = {np.dtype(np.float32): (1e-5, 1e-5), np.dtype(np.float64): (1e-12, 1e-12)}


def randn(*shape: int, seed: int = 0, dtype: Any = np.float32) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def ints(*shape: int, seed: int = 0, dtype: Any = np.uint8, lo: int = 0, hi: int = 255) -> np.ndarray:
    return np.random.default_rng(seed).integers(lo, hi, shape).astype(dtype)


def case(op: str, inputs: list[Any], opset: int, *, id: str, reference: bool = False,
         **attrs: Any) -> Any:
    """One case; ``reference``: onnx's reference evaluator is the oracle (onnxruntime's
    SAME padding ignores dilations)."""
    return pytest.param(op, inputs, opset, attrs, reference, id=id)


X = randn(2, 4, 7, 7)
W = randn(6, 4, 3, 3, seed=1)
B = randn(6, seed=2)
P1 = [1, 1, 1, 1]
CASES = [
    # Conv
    case("Conv", [X, W, B], 22, pads=P1, id="Conv-pads-bias"),
    case("Conv", [X, W], 11, strides=[2, 2], dilations=[2, 1], id="Conv-11-stride-dilation"),
    case("Conv", [X, W], 1, kernel_shape=[3, 3], id="Conv-1-kernel-shape"),
    case("Conv", [X, randn(6, 2, 3, 3, seed=1)], 11, group=2, pads=[0, 1, 2, 1], id="Conv-group"),
    case("Conv", [X, randn(8, 1, 3, 3, seed=1), randn(8)], 22, group=4, pads=P1, id="Conv-depthwise"),
    case("Conv", [X, W], 22, auto_pad="SAME_UPPER", strides=[2, 2], id="Conv-same-upper"),
    case("Conv", [X, W], 22, auto_pad="SAME_LOWER", id="Conv-same-lower"),
    case("Conv", [X, W], 22, auto_pad="VALID", strides=[2, 3], id="Conv-valid"),
    case("Conv", [X, randn(6, 4, 1, 1, seed=1)], 22, id="Conv-1x1"),
    case("Conv", [randn(2, 3, 10), randn(5, 3, 4, seed=1)], 22, pads=[2, 1], id="Conv-1d"),
    case("Conv", [randn(1, 2, 5, 6, 4), randn(3, 2, 2, 3, 2, seed=1)], 22, strides=[1, 2, 1],
         id="Conv-3d"),
    case("Conv", [X.astype(np.float64), W.astype(np.float64)], 22, pads=P1, id="Conv-f64"),
    # ConvInteger
    case("ConvInteger", [ints(1, 3, 6, 6), ints(4, 3, 3, 3, seed=1)], 10, pads=P1,
         id="ConvInteger-pads"),
    case("ConvInteger", [ints(1, 3, 6, 6), ints(4, 3, 3, 3, seed=1), np.array(7, np.uint8),
                         np.array(130, np.uint8)], 10, strides=[2, 2], id="ConvInteger-zero-points"),
    case("ConvInteger", [ints(1, 4, 5, 5), ints(4, 2, 2, 2, seed=1), np.array(3, np.uint8)], 10,
         group=2, id="ConvInteger-group"),
    # ConvTranspose
    case("ConvTranspose", [randn(2, 3, 4, 4), randn(3, 2, 3, 3, seed=1), randn(2)], 22,
         id="ConvTranspose-bias"),
    case("ConvTranspose", [randn(1, 4, 3, 5), randn(4, 3, 3, 2, seed=1)], 11, group=2,
         strides=[2, 1], pads=[1, 0, 0, 1], id="ConvTranspose-group-pads"),
    case("ConvTranspose", [randn(1, 2, 4, 4), randn(2, 3, 3, 3, seed=1)], 11, strides=[2, 2],
         output_padding=[1, 1], id="ConvTranspose-output-padding"),
    case("ConvTranspose", [randn(1, 2, 4, 4), randn(2, 3, 3, 3, seed=1)], 11, strides=[2, 2],
         output_shape=[10, 9], id="ConvTranspose-output-shape"),
    case("ConvTranspose", [randn(1, 2, 5), randn(2, 3, 3, seed=1)], 22, strides=[2],
         auto_pad="SAME_UPPER", id="ConvTranspose-1d-same"),
    case("ConvTranspose", [randn(1, 2, 4, 4), randn(2, 2, 2, 3, seed=1)], 1, dilations=[2, 2],
         id="ConvTranspose-1-dilations"),
    case("ConvTranspose", [randn(1, 2, 3, 3, 2), randn(2, 2, 2, 2, 2, seed=1)], 22,
         strides=[2, 1, 2], id="ConvTranspose-3d"),
    # MaxPool
    case("MaxPool", [X], 22, kernel_shape=[3, 3], strides=[2, 2], pads=P1, id="MaxPool-pads"),
    case("MaxPool", [X], 12, kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1, id="MaxPool-ceil"),
    case("MaxPool", [X], 11, kernel_shape=[2, 3], dilations=[2, 1], auto_pad="SAME_LOWER",
         reference=True, id="MaxPool-dilation-same"),
    case("MaxPool", [X], 8, kernel_shape=[2, 2], auto_pad="VALID", id="MaxPool-8"),
    case("MaxPool", [X], 1, kernel_shape=[3, 3], pads=P1, id="MaxPool-1"),
    case("MaxPool", [randn(1, 2, 9)], 10, kernel_shape=[3], strides=[2], pads=[1, 2], ceil_mode=1,
         id="MaxPool-1d"),
    case("MaxPool", [randn(1, 2, 4, 5, 6)], 12, kernel_shape=[2, 2, 3], strides=[2, 1, 2],
         id="MaxPool-3d"),
    case("MaxPool", [ints(1, 2, 5, 5, dtype=np.int8, lo=-128, hi=127)], 12, kernel_shape=[2, 2],
         pads=P1, id="MaxPool-int8"),
    case("MaxPool", [ints(1, 2, 5, 5)], 12, kernel_shape=[3, 3], strides=[2, 2], id="MaxPool-uint8"),
    # AveragePool
    case("AveragePool", [X], 22, kernel_shape=[3, 3], pads=P1, id="AveragePool-pads-exclude"),
    case("AveragePool", [X], 22, kernel_shape=[3, 3], pads=P1, count_include_pad=1,
         id="AveragePool-pads-include"),
    case("AveragePool", [X], 19, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 0, 0, 1],
         ceil_mode=1, count_include_pad=1, id="AveragePool-ceil-include"),
    case("AveragePool", [X], 10, kernel_shape=[3, 2], strides=[2, 2], ceil_mode=1,
         id="AveragePool-10-ceil"),
    case("AveragePool", [X], 19, kernel_shape=[2, 2], dilations=[2, 2], pads=[1, 0, 1, 1],
         id="AveragePool-dilation"),
    case("AveragePool", [X], 19, kernel_shape=[2, 2], dilations=[2, 2], pads=[1, 0, 1, 1],
         count_include_pad=1, id="AveragePool-dilation-include"),
    case("AveragePool", [X], 11, kernel_shape=[2, 3], strides=[2, 2], auto_pad="SAME_UPPER",
         id="AveragePool-same-upper"),
    case("AveragePool", [X], 7, kernel_shape=[2, 2], id="AveragePool-7"),
    case("AveragePool", [X], 1, kernel_shape=[3, 3], strides=[3, 3], id="AveragePool-1"),
    case("AveragePool", [randn(1, 3, 8)], 11, kernel_shape=[3], pads=[2, 1], id="AveragePool-1d"),
    case("AveragePool", [X.astype(np.float64)], 22, kernel_shape=[2, 2], id="AveragePool-f64"),
    # LpPool
    case("LpPool", [X], 22, kernel_shape=[3, 3], pads=P1, id="LpPool-p2"),
    case("LpPool", [X], 18, kernel_shape=[2, 2], strides=[2, 2], p=3, ceil_mode=1, id="LpPool-p3"),
    case("LpPool", [X], 11, kernel_shape=[2, 2], p=1, auto_pad="SAME_UPPER", id="LpPool-11-p1"),
    case("LpPool", [X], 2, kernel_shape=[3, 3], id="LpPool-2"),
    # the global pools
    case("GlobalMaxPool", [X], 22, id="GlobalMaxPool"),
    case("GlobalMaxPool", [randn(2, 3, 5)], 1, id="GlobalMaxPool-1d"),
    case("GlobalAveragePool", [X], 22, id="GlobalAveragePool"),
    case("GlobalAveragePool", [randn(1, 2, 3, 4, 5, dtype=np.float64)], 1,
         id="GlobalAveragePool-3d-f64"),
    case("GlobalLpPool", [X], 2, id="GlobalLpPool-2"),
    case("GlobalLpPool", [randn(2, 3, 5)], 2, p=3, id="GlobalLpPool-2-p3"),
]


@pytest.mark.parametrize(("op", "inputs", "opset", "attrs", "reference"), CASES)
def test_same_as_onnxruntime(bound: Bound, op, inputs, opset, attrs, reference):
    got = bound.run(op, inputs, opset, **attrs)
    out_dtype = np.int32 if op == "ConvInteger" else np.asarray(inputs[0]).dtype
    expected = typed_oracle(op, inputs, opset, out_dtype, reference=reference, **attrs)
    assert_matches(got, np.asarray(expected), TOL)


def test_every_operator_has_a_case():
    assert {p.values[0] for p in CASES} == SPATIAL


def test_every_onnx_version_is_bound(numpy_bound: Bound):
    assert not unbound_versions(numpy_bound.registry, SPATIAL)


@pytest.mark.parametrize(("opset", "p"), [(22, 1), (22, 2), (22, 3), (1, 1.0), (1, 3.0)])
def test_global_lp_pool_is_lp_pool_over_the_whole_image(bound: Bound, opset, p):
    """Neither onnxruntime nor the reference evaluator runs GlobalLpPool-1 or -22 (version 1
    takes a float p)."""
    got = bound.run("GlobalLpPool", [X], opset, p=p)
    assert_matches(got, oracle("LpPool", [X], 22, p=int(p), kernel_shape=[7, 7]), TOL)


@pytest.mark.parametrize("op", ["GlobalMaxPool", "GlobalAveragePool", "GlobalLpPool"])
def test_global_pools_of_a_rank_2_input_reduce_no_axis(bound: Bound, op):
    """(N, C) has no spatial axis: a copy of X (|X| for GlobalLpPool); onnxruntime refuses it."""
    x = randn(2, 3)
    assert_matches(bound.run(op, [x], 22), np.abs(x) if op == "GlobalLpPool" else x, TOL)


def test_constant_weights_are_packed_once(bound: Bound):
    """ConvTranspose packs a constant W when built; the result is the runtime-W one."""
    x, w = randn(1, 4, 3, 3), randn(4, 2, 3, 3, seed=1)
    n = node("ConvTranspose", 2, group=2, strides=[2, 2])
    kdef, _ = bound.registry.lookup("", "ConvTranspose", 22)
    kernel = kdef.factory(KernelInfo.from_node(n, 22, since_version=22, constants={1: w}))
    assert kernel._packed is not None
    (got,) = kernel.compute(bound.array(x), bound.array(w))
    np.testing.assert_allclose(bound.host(got), bound.run("ConvTranspose", [x, w], 22, group=2,
                               strides=[2, 2]), rtol=1e-6, atol=1e-6)


# ------------------------------------------------------------------ MaxPool Indices


def _maxpool_with_indices(x: np.ndarray, opset: int, **attrs: Any) -> tuple[np.ndarray, ...]:
    import onnxruntime as ort

    n = helper.make_node("MaxPool", ["x"], ["y", "i"], **attrs)
    graph = helper.make_graph(
        [n], "g", [helper.make_tensor_value_info("x", onnx_elem_type(x.dtype), list(x.shape))],
        [helper.make_tensor_value_info("y", onnx_elem_type(x.dtype), None),
         helper.make_tensor_value_info("i", TensorProto.INT64, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)
    return tuple(ort.InferenceSession(model.SerializeToString(),
                                      providers=["CPUExecutionProvider"]).run(None, {"x": x}))


@pytest.mark.parametrize(
    "attrs",
    [
        {"kernel_shape": [3, 3], "strides": [2, 2], "pads": P1},
        {"kernel_shape": [2, 2], "storage_order": 1},
        {"kernel_shape": [3, 2], "strides": [2, 2], "ceil_mode": 1, "dilations": [1, 2]},
        {"kernel_shape": [2, 3], "auto_pad": "SAME_UPPER", "storage_order": 1},
    ],
    ids=["pads", "column-major", "ceil-dilation", "same-column-major"],
)
def test_maxpool_indices(bound: Bound, attrs):
    x = randn(2, 3, 6, 7)
    n = helper.make_node("MaxPool", ["in0"], ["y", "i"], name="MaxPool_node", **attrs)
    kdef, _ = bound.registry.lookup("", "MaxPool", 12)
    kernel = kdef.factory(KernelInfo.from_node(n, 12, since_version=12))
    y, idx = (bound.host(v) for v in kernel.compute(bound.array(x)))
    want_y, want_idx = _maxpool_with_indices(x, 12, **attrs)
    np.testing.assert_array_equal(y, want_y)
    assert idx.dtype == np.int64
    np.testing.assert_array_equal(idx, want_idx)


# ------------------------------------------------------------------- half precision


@pytest.mark.parametrize("half", [np.float16, BF16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize(
    ("op", "inputs", "attrs"),
    [
        ("Conv", [randn(1, 3, 6, 6), randn(4, 3, 3, 3, seed=1), randn(4, seed=2)], {"pads": P1}),
        ("ConvTranspose", [randn(1, 3, 4, 4), randn(3, 2, 3, 3, seed=1)], {"strides": [2, 2]}),
        ("AveragePool", [randn(1, 3, 6, 6)], {"kernel_shape": [3, 3], "pads": P1}),
        ("LpPool", [randn(1, 3, 6, 6)], {"kernel_shape": [2, 2]}),
        ("MaxPool", [randn(1, 3, 6, 6)], {"kernel_shape": [3, 3], "pads": P1}),
        ("GlobalAveragePool", [randn(1, 3, 6, 6)], {}),
        ("GlobalLpPool", [randn(1, 3, 6, 6)], {}),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_half_types_compute_in_float32(numpy_bound: Bound, op, inputs, attrs, half):
    """float16/bfloat16 give their type, rounded once from the float32 result (numpy:
    the standard has neither type)."""
    low = [v.astype(half) for v in inputs]
    got = numpy_bound.run(op, low, 22, **attrs)
    want = numpy_bound.run(op, [v.astype(np.float32) for v in low], 22, **attrs).astype(half)
    assert got.dtype == half
    np.testing.assert_array_equal(got.astype(np.float32), want.astype(np.float32))


# -------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("op", "n_inputs", "attrs", "constants", "match"),
    [
        ("Conv", 2, {"group": 0}, {}, "group=0 must be >= 1"),
        ("Conv", 2, {"group": 4}, {1: randn(6, 1, 3, 3)}, "6 output channels, not divisible"),
        ("ConvTranspose", 2, {"group": 2}, {1: randn(3, 2, 3, 3)}, "3 input channels, not divisible"),
        ("ConvTranspose", 2, {"output_padding": [-1, 0]}, {}, "output_padding"),
        ("Conv", 2, {"auto_pad": "SAME"}, {}, "auto_pad='SAME'"),
        ("Conv", 2, {"kernel_shape": [3, 3], "strides": [1]}, {}, "strides=\\[1\\] has 1 values"),
        ("Conv", 2, {"pads": [1, 1, 1]}, {}, "even number"),
        ("Conv", 2, {"dilations": [0, 1]}, {}, "below 1"),
        ("MaxPool", 1, {}, {}, "kernel_shape is required"),
        ("MaxPool", 1, {"kernel_shape": [2, 2], "storage_order": 2}, {}, "storage_order=2"),
        ("AveragePool", 1, {"kernel_shape": [2, 2], "pads": [-1, 0, 0, 0]}, {}, "below 0"),
        ("LpPool", 1, {"kernel_shape": [2, 2], "p": 0}, {}, "p=0 must be positive"),
        ("GlobalLpPool", 1, {"p": -1}, {}, "p=-1 must be positive"),
    ],
)
def test_bad_attributes_are_invalid_graph(numpy_bound: Bound, op, n_inputs, attrs, constants, match):
    n = node(op, n_inputs, **attrs)
    kdef, _ = numpy_bound.registry.lookup("", op, 22 if op != "ConvInteger" else 10)
    with pytest.raises(InvalidGraph, match=match) as err:
        kdef.factory(KernelInfo.from_node(n, 22, since_version=kdef.since_version,
                                          constants=constants))
    assert f"{op}_node" in str(err.value)


@pytest.mark.parametrize(
    ("op", "inputs", "opset", "attrs", "match"),
    [
        ("Conv", [randn(4, 7), randn(6, 4, 3)], 22, {}, "rank >= 3"),
        ("Conv", [X, randn(6, 4, 3)], 22, {}, "W has rank 3, X has rank 4"),
        ("Conv", [X, randn(6, 3, 3, 3)], 22, {}, "W expects 3 input channels"),
        ("Conv", [X, randn(6, 2, 3, 3)], 22, {"group": 3}, "4 channels, not divisible by group=3"),
        ("Conv", [X, randn(5, 2, 3, 3)], 22, {"group": 2}, "5 output channels, not divisible"),
        ("Conv", [X, W], 22, {"kernel_shape": [2, 2]}, "does not match W's spatial shape"),
        ("Conv", [X, W, randn(4)], 22, {}, "B has 4 values"),
        ("Conv", [X, randn(6, 4, 9, 9)], 22, {}, "does not fit"),
        ("ConvInteger", [ints(1, 3, 6, 6), ints(4, 3, 3, 3), ints(2)], 10, {}, "per-tensor"),
        ("ConvInteger", [ints(1, 3, 6, 6), ints(4, 3, 3, 3), None, ints(3)], 10, {},
         "w_zero_point has 3 values"),
        ("ConvTranspose", [X, randn(3, 2, 3, 3)], 22, {}, "W has 3 input channels, X has 4"),
        ("ConvTranspose", [X, randn(4, 2, 3, 3)], 22, {"group": 3}, "not divisible by group=3"),
        ("ConvTranspose", [X, randn(4, 2, 3, 3)], 22, {"pads": [5, 5, 5, 5]}, "not positive"),
        ("ConvTranspose", [X, randn(4, 2, 3, 3)], 22, {"output_padding": [1]}, "output_padding has 1"),
        ("MaxPool", [randn(4, 7)], 22, {"kernel_shape": [2]}, "rank >= 3"),
        ("MaxPool", [X], 22, {"kernel_shape": [2]}, "kernel has 1 spatial dims"),
        ("AveragePool", [X], 22, {"kernel_shape": [9, 9]}, "does not fit"),
        ("GlobalAveragePool", [randn(4)], 22, {}, "rank >= 2"),
    ],
    ids=lambda v: v if isinstance(v, str) and " " not in v and "_" not in v else None,
)
def test_bad_data_is_a_value_error(bound: Bound, op, inputs, opset, attrs, match):
    with pytest.raises(ValueError, match=match):
        bound.run(op, inputs, opset, **attrs)
