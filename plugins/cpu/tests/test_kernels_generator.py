"""Tests of the CPU provider's generator operators (the operator library's, bound over numpy).

Runs the ONNX node conformance cases of Constant, ConstantOfShape, Range, EyeLike and the
random ops through the kernel registry, plus targeted tests against onnxruntime or numpy
truth. Random ops are checked for shape, dtype, range, seeding and rough statistics.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import onnx
import pytest
from kernel_cases import (
    conformance_params,
    iter_cases,
    one_node,
    run_case,
    run_onnxruntime,
    run_ours,
)
from onnx import TensorProto, helper, numpy_helper

from onyxrt.errors import InvalidGraph
from onyxrt.kernels import KernelInfo
from onyxrt_cpu.kernels import registry

OPS = [
    "Constant",
    "ConstantOfShape",
    "Range",
    "EyeLike",
    "RandomNormal",
    "RandomUniform",
    "RandomNormalLike",
    "RandomUniformLike",
    "Bernoulli",
    "Multinomial",
]

#: Conformance cases this module cannot pass, with the reason.
EXPECTED_FAILURES: dict[str, str] = {
    "test_bernoulli_seed": (
        "expected values are np.random.binomial draws continuing numpy's global stream "
        "after the test generated its input; the spec says Bernoulli output is "
        "implementation-defined even with a seed, so a seeded kernel cannot reproduce them"
    ),
}

#: Cases whose expected values are random draws from an unseeded generator: an exact
#: comparison would pass or fail by chance (about 0.6% chance of a match), so they are
#: skipped here and checked for shape, dtype and 0/1 values by test_random_case_outputs.
RANDOM_VALUE_CASES: dict[str, str] = {
    "test_bernoulli": "unseeded Bernoulli: output values are random",
    "test_bernoulli_double": "unseeded Bernoulli: output values are random",
}


@pytest.mark.parametrize("case", conformance_params(OPS, EXPECTED_FAILURES, RANDOM_VALUE_CASES))
def test_conformance(case) -> None:
    run_case(case)


_BERNOULLI_CASES = [
    c for c in iter_cases(["Bernoulli"]) if c.name in {*RANDOM_VALUE_CASES, *EXPECTED_FAILURES}
]


@pytest.mark.parametrize("case", _BERNOULLI_CASES, ids=[c.name for c in _BERNOULLI_CASES])
def test_random_case_outputs(case) -> None:
    """The random cases: the kernel gives the expected shape and dtype, and 0/1 values."""
    node = case.model.graph.node[0]
    opset = case.model.opset_import[0].version
    for inputs, expected in case.data_sets:
        (got,) = run_ours(node, opset, *inputs)
        assert got.dtype == expected[0].dtype
        assert got.shape == expected[0].shape
        assert set(np.unique(got).tolist()) <= {0, 1}


# ----------------------------------------------------------------------------- helpers


def check(node: onnx.NodeProto, opset: int, *inputs: Any) -> None:
    (got,) = run_ours(node, opset, *inputs)
    (want,) = run_onnxruntime(node, opset, inputs)
    got = np.asarray(got)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape, (got.shape, want.shape)
    if got.dtype.kind == "f":
        # onnxruntime's Range accumulates (x += delta); the spec's start + i * delta can
        # differ from it in the last bit.
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    else:
        np.testing.assert_array_equal(got, want)


# ----------------------------------------------------------------------------- Constant


@pytest.mark.parametrize(
    ("attrs", "want"),
    [
        ({"value_float": 1.5}, np.array(1.5, np.float32)),
        ({"value_floats": [1.0, 2.5]}, np.array([1.0, 2.5], np.float32)),
        ({"value_int": 7}, np.array(7, np.int64)),
        ({"value_ints": [1, -2, 3]}, np.array([1, -2, 3], np.int64)),
        ({"value_ints": []}, np.zeros(0, np.int64)),
    ],
)
def test_constant_value_attrs(attrs, want) -> None:
    node = one_node("Constant", [])
    for name, value in attrs.items():
        kind = onnx.AttributeProto.INTS if name == "value_ints" else None
        node.attribute.append(helper.make_attribute(name, value, attr_type=kind))
    (y,) = run_ours(node, 13)
    assert y.dtype == want.dtype and y.shape == want.shape
    np.testing.assert_array_equal(y, want)


def test_constant_strings() -> None:
    (y,) = run_ours(one_node("Constant", [], value_string="héllo"), 13)
    assert y.shape == () and y.dtype == object and y[()] == "héllo"
    (y,) = run_ours(one_node("Constant", [], value_strings=["a", "bc"]), 13)
    assert y.dtype == object and y.tolist() == ["a", "bc"]


@pytest.mark.parametrize(
    "arr",
    [
        np.arange(6, dtype=np.int8).reshape(2, 3),
        np.array([1.5, -2.0], dtype=np.float16),
        np.array([1.0, 3.0], dtype=ml_dtypes.bfloat16),
        np.array(True),
        np.array([["x", "y"]], dtype=object),
    ],
)
def test_constant_value_tensor(arr) -> None:
    node = one_node("Constant", [], value=numpy_helper.from_array(arr))
    (y,) = run_ours(node, 21)
    assert y.dtype == arr.dtype and y.shape == arr.shape
    assert y.tolist() == arr.tolist()
    assert not y.flags.writeable  # the same array is handed out on every run


def test_constant_sparse_and_missing() -> None:
    def sparse(indices: list[int]) -> onnx.SparseTensorProto:
        return helper.make_sparse_tensor(
            numpy_helper.from_array(np.arange(1, len(indices) + 1, dtype=np.float32)),
            numpy_helper.from_array(np.array(indices, np.int64)),
            [3],
        )

    # Densified as onnxruntime does: unsorted indices, a repeat keeps its last value.
    (y,) = run_ours(one_node("Constant", [], sparse_value=sparse([2, 0, 2])), 13)
    np.testing.assert_array_equal(y, np.array([2.0, 0.0, 3.0], np.float32))
    assert y.dtype == np.float32
    # An index outside the dense shape names the node and the index (onnxruntime refuses too).
    with pytest.raises(InvalidGraph, match=r"'test_Constant'.*holds -1, outside 0\.\.2"):
        run_ours(one_node("Constant", [], sparse_value=sparse([-1])), 13)
    with pytest.raises(InvalidGraph, match="exactly one"):
        run_ours(one_node("Constant", []), 13)


# ----------------------------------------------------------------------------- ConstantOfShape


def test_constant_of_shape() -> None:
    (y,) = run_ours(one_node("ConstantOfShape", ["s"]), 9, np.array([2, 3], np.int64))
    assert y.dtype == np.float32 and y.shape == (2, 3) and not y.any()
    (y,) = run_ours(one_node("ConstantOfShape", ["s"]), 9, np.array([], np.int64))
    assert y.shape == () and y.dtype == np.float32
    value = numpy_helper.from_array(np.array([-4], np.int64))
    check(one_node("ConstantOfShape", ["s"], value=value), 20, np.array([3, 1, 2], np.int64))
    value = numpy_helper.from_array(np.array([True]))
    check(one_node("ConstantOfShape", ["s"], value=value), 20, np.array([4], np.int64))
    value = numpy_helper.from_array(np.array([2.5], np.float16))
    check(one_node("ConstantOfShape", ["s"], value=value), 20, np.array([], np.int64))


# ----------------------------------------------------------------------------- Range


@pytest.mark.parametrize(
    ("dtype", "start", "limit", "delta"),
    [
        (np.int64, 0, 10, 3),
        (np.int64, 10, -5, -4),
        (np.int64, 3, 3, 1),
        (np.int64, 5, 1, 1),
        (np.int32, -7, 20, 5),
        (np.int16, 100, -100, -33),
        (np.float32, 0.0, 1.0, 0.1),
        (np.float32, 2.5, -1.0, -0.7),
        (np.float64, 1.0, 2.0, 0.25),
        (np.float64, 0.0, 1.0, 1.0 / 3.0),
    ],
)
def test_range_vs_ort(dtype, start, limit, delta) -> None:
    check(
        one_node("Range", ["a", "b", "c"]),
        11,
        np.array(start, dtype),
        np.array(limit, dtype),
        np.array(delta, dtype),
    )


def test_range_float_is_start_plus_i_delta() -> None:
    args = [np.array(v, np.float32) for v in (2.5, -1.0, -0.7)]
    (y,) = run_ours(one_node("Range", ["a", "b", "c"]), 11, *args)
    want = args[0] + np.arange(6, dtype=np.float32) * args[2]  # ceil(3.5 / 0.7f) = 6
    assert y.dtype == np.float32
    np.testing.assert_array_equal(y, want)


def test_range_int64_exact() -> None:
    big = 2**62
    (y,) = run_ours(
        one_node("Range", ["a", "b", "c"]),
        11,
        np.array(big, np.int64),
        np.array(big + 10, np.int64),
        np.array(3, np.int64),
    )
    assert y.dtype == np.int64 and y.tolist() == [big, big + 3, big + 6, big + 9]


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
def test_range_low_precision(dtype) -> None:
    args = (np.array(1000.0, dtype), np.array(1100.0, dtype), np.array(7.0, dtype))
    (y,) = run_ours(one_node("Range", ["a", "b", "c"]), 27, *args)
    assert y.dtype == np.dtype(dtype)
    want = (np.float32(1000.0) + np.arange(15, dtype=np.float32) * 7).astype(dtype)
    np.testing.assert_array_equal(y.astype(np.float32), want.astype(np.float32))
    (y0,) = run_ours(one_node("Range", ["a", "b", "c"], stash_type=0), 27, *args)
    acc = [np.asarray(args[0])]
    for _ in range(14):
        acc.append((acc[-1] + args[2]).astype(dtype))
    np.testing.assert_array_equal(y0.astype(np.float32), np.array(acc, np.float32))


def test_range_zero_delta_raises() -> None:
    with pytest.raises(ValueError, match="delta"):
        run_ours(
            one_node("Range", ["a", "b", "c"]), 11, *(np.array(v, np.int32) for v in (0, 5, 0))
        )


# ----------------------------------------------------------------------------- EyeLike


@pytest.mark.parametrize("k", [-5, -1, 0, 2, 7])
@pytest.mark.parametrize("shape", [(3, 5), (5, 3), (4, 4), (0, 3)])
def test_eyelike_vs_ort(k, shape) -> None:
    check(one_node("EyeLike", ["x"], k=k), 9, np.zeros(shape, np.float32))


def test_eyelike_dtypes() -> None:
    x = np.zeros((3, 4), np.float32)
    for code, dt in [(TensorProto.BOOL, np.bool_), (TensorProto.INT64, np.int64)]:
        (y,) = run_ours(one_node("EyeLike", ["x"], dtype=code, k=-1), 9, x)
        assert y.dtype == dt
        np.testing.assert_array_equal(y, np.eye(3, 4, -1, dtype=dt))
    (y,) = run_ours(one_node("EyeLike", ["x"], dtype=TensorProto.BFLOAT16), 22, x)
    assert y.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(y.astype(np.float32), np.eye(3, 4, dtype=np.float32))


# ----------------------------------------------------------------------------- random


@pytest.mark.parametrize("op", ["RandomNormal", "RandomUniform"])
@pytest.mark.parametrize(
    ("code", "dtype"),
    [
        (None, np.float32),
        (TensorProto.FLOAT16, np.float16),
        (TensorProto.DOUBLE, np.float64),
        (TensorProto.BFLOAT16, ml_dtypes.bfloat16),
    ],
)
def test_random_shape_dtype(op, code, dtype) -> None:
    attrs = {"shape": [3, 0, 2]} if code is None else {"shape": [40, 50], "dtype": code}
    (y,) = run_ours(one_node(op, [], **attrs), 22 if dtype is ml_dtypes.bfloat16 else 1)
    assert y.dtype == np.dtype(dtype)
    assert y.shape == tuple(attrs["shape"])


def test_random_normal_stats_and_seed() -> None:
    node = one_node("RandomNormal", [], shape=[200, 200], mean=3.0, scale=0.5, seed=11.0)
    (a,) = run_ours(node, 22)
    (b,) = run_ours(node, 22)
    np.testing.assert_array_equal(a, b)  # same seed, fresh kernel: same values
    assert abs(a.mean() - 3.0) < 0.02 and abs(a.std() - 0.5) < 0.02
    # One kernel gives new values on each run.
    kdef, _ = registry.lookup("", "RandomNormal", 22)
    kernel = kdef.factory(KernelInfo.from_node(node, 22, since_version=kdef.since_version))
    (c,) = kernel.compute()
    (d,) = kernel.compute()
    assert not np.array_equal(c, d)
    # Without a seed two kernels differ.
    unseeded = one_node("RandomNormal", [], shape=[10])
    assert not np.array_equal(run_ours(unseeded, 22)[0], run_ours(unseeded, 22)[0])


def test_random_uniform_range() -> None:
    (y,) = run_ours(one_node("RandomUniform", [], shape=[10000], low=-2.0, high=5.0, seed=1.5), 22)
    assert y.min() >= -2.0 and y.max() < 5.0
    assert abs(y.mean() - 1.5) < 0.1


@pytest.mark.parametrize("op", ["RandomNormalLike", "RandomUniformLike"])
def test_random_like(op) -> None:
    x = np.zeros((4, 5), np.float16)
    (y,) = run_ours(one_node(op, ["x"]), 1, x)
    assert y.dtype == np.float16 and y.shape == (4, 5)
    (y,) = run_ours(one_node(op, ["x"], dtype=TensorProto.DOUBLE), 1, np.zeros((2, 3), np.int32))
    assert y.dtype == np.float64 and y.shape == (2, 3)
    with pytest.raises(ValueError, match="float"):
        run_ours(one_node(op, ["x"]), 1, np.zeros((2,), np.int32))
    with pytest.raises(InvalidGraph, match="dtype"):
        run_ours(one_node(op, ["x"], dtype=TensorProto.INT32), 1, x)


def test_bernoulli() -> None:
    p = np.array([0.0, 1.0, 0.0, 1.0] * 25, np.float32)
    (y,) = run_ours(one_node("Bernoulli", ["p"]), 15, p)
    assert y.dtype == np.float32
    np.testing.assert_array_equal(y, p)
    (y,) = run_ours(one_node("Bernoulli", ["p"], dtype=TensorProto.INT32), 22, p)
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y, p.astype(np.int32))
    half = np.full((100, 100), 0.3, np.float64)
    (y,) = run_ours(one_node("Bernoulli", ["p"], seed=3.0, dtype=TensorProto.BOOL), 22, half)
    assert y.dtype == np.bool_ and abs(y.mean() - 0.3) < 0.03


def test_multinomial() -> None:
    logits = np.log(np.array([[0.1, 0.2, 0.7], [1.0, 0.0, 0.0]], np.float32) + 1e-30)
    (y,) = run_ours(one_node("Multinomial", ["x"], sample_size=20000, seed=5.0), 7, logits)
    assert y.dtype == np.int32 and y.shape == (2, 20000)
    freq = np.bincount(y[0], minlength=3) / y.shape[1]
    np.testing.assert_allclose(freq, [0.1, 0.2, 0.7], atol=0.02)
    assert (y[1] == 0).all()
    (y,) = run_ours(one_node("Multinomial", ["x"], dtype=TensorProto.INT64), 22, logits)
    assert y.dtype == np.int64 and y.shape == (2, 1)
    assert y.min() >= 0 and y.max() < 3
    with pytest.raises(InvalidGraph, match="dtype"):
        run_ours(one_node("Multinomial", ["x"], dtype=TensorProto.FLOAT), 7, logits)
