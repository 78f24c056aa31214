"""Tests of the library's generators (onyxrt_ops.generator): Constant, ConstantOfShape,
EyeLike, Range and the random operators.

The deterministic operators run over numpy and over array_api_strict and are compared with
onnxruntime (or onnx's reference evaluator): every ``value*`` attribute, fill types, off-main
diagonals, integer and float ranges, old versions. Half-precision types and strings (which
the array API standard lacks) run over numpy. Over both backends a random operator's seed
gives exactly the numbers of ``numpy.random.default_rng(seed)`` (the CPU provider's
numbers), ``set_seed`` seeds the nodes without a ``seed``, and a backend's own ``random``
extra is used where it has one. The kernels also run over the GPU providers' backend under the
simulated CuPy. Attribute errors are InvalidGraph naming the node; errors in the data are
ValueError.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx.defs
import pytest
from library_harness import Bound, assert_matches, bind, node, onnx_versions, oracle, typed_oracle
from onnx import TensorProto, helper, numpy_helper

from onyxrt import seeding
from onyxrt.dtypes import np_dtype
from onyxrt.errors import InvalidGraph
from onyxrt_ops import library, numpy_backend

BF16 = np_dtype(TensorProto.BFLOAT16)
GENERATORS = {d.op_type for d in library.definitions if d.cls.__module__ == "onyxrt_ops.generator"}
RANDOM = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial", "Bernoulli"}


class CountingGenerator:
    """A backend's ``random`` extra (tests): numpy's generator of the seed, counting draws
    and giving recognizable values."""

    calls = 0

    def __init__(self, seed: int | None) -> None:
        self.rng = np.random.default_rng(seed)

    def normal(self, mean: float, scale: float, shape: tuple[int, ...]) -> np.ndarray:
        CountingGenerator.calls += 1
        return np.full(shape, 42.0)


def tensor(value: Any) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value))


def scalars(*values: Any, dtype: Any) -> list[np.ndarray]:
    return [np.array(v, dtype) for v in values]


# ----------------------------------------------------------------- deterministic

def case(op: str, inputs: list[Any], opset: int, out: Any = None, *, id: str, **attrs: Any) -> Any:
    """One case; ``out`` is the output dtype where it is not the first input's."""
    return pytest.param(op, inputs, opset, out, attrs, id=id)


CASES = [
    case("Constant", [], 21, np.float32, value=tensor(np.arange(6, dtype=np.float32).reshape(2, 3)), id="value"),
    case("Constant", [], 13, np.float32, value_float=2.5, id="value_float"),
    case("Constant", [], 13, np.float32, value_floats=[1.0, -2.0], id="value_floats"),
    case("Constant", [], 13, np.int64, value_int=-3, id="value_int"),
    case("Constant", [], 13, np.int64, value_ints=[4, 5, 6], id="value_ints"),
    case("Constant", [], 9, np.uint8, value=tensor(np.array([1, 2], np.uint8)), id="constant-9-uint8"),
    case("ConstantOfShape", [np.array([2, 3], np.int64)], 21, np.float32, id="default-zero"),
    case("ConstantOfShape", [np.array([3, 1, 2], np.int64)], 21, np.int32,
         value=tensor(np.array([7], np.int32)), id="int32-fill"),
    case("ConstantOfShape", [np.array([4], np.int64)], 9, np.float64,
         value=tensor(np.array([-1.5])), id="9-float64"),
    case("ConstantOfShape", [np.array([2, 0], np.int64)], 20, np.bool_,
         value=tensor(np.array([True])), id="empty-bool"),
    case("ConstantOfShape", [np.array([], np.int64)], 21, np.int64,
         value=tensor(np.array([9], np.int64)), id="scalar"),
    case("EyeLike", [np.zeros((4, 4), np.float32)], 22, id="square"),
    case("EyeLike", [np.zeros((3, 5), np.int32)], 9, k=2, id="9-k2"),
    case("EyeLike", [np.zeros((5, 3), np.float64)], 22, k=-1, id="k-1"),
    case("EyeLike", [np.zeros((3, 4), np.float32)], 22, np.int64, k=-3, dtype=TensorProto.INT64, id="dtype-int64"),
    case("EyeLike", [np.zeros((2, 3), np.int64)], 22, k=7, id="k-outside"),
    case("EyeLike", [np.zeros((0, 3), np.float32)], 22, id="empty"),
    case("Range", scalars(0, 10, 3, dtype=np.int32), 11, id="int32"),
    case("Range", scalars(10, -7, -4, dtype=np.int64), 11, id="int64-negative"),
    case("Range", scalars(5, 1, 1, dtype=np.int16), 11, id="int16-empty"),
    case("Range", scalars(0.5, 7.3, 0.9, dtype=np.float32), 11, id="float32"),
    case("Range", scalars(1.0, -2.0, -0.25, dtype=np.float64), 11, id="float64"),
]


@pytest.mark.parametrize(("op", "inputs", "opset", "out", "attrs"), CASES)
def test_same_as_onnxruntime(bound: Bound, op, inputs, opset, out, attrs):
    got = bound.run(op, inputs, opset, **attrs)
    want = (typed_oracle(op, inputs, opset, out, **attrs) if out is not None
            else oracle(op, inputs, opset, **attrs))
    # Exact, but for float ranges: onnxruntime accumulates delta, the library (as the CPU
    # provider always has) computes start + i * delta.
    assert_matches(got, want, {np.dtype(np.float32): (1e-6, 0), np.dtype(np.float64): (1e-15, 0)})


def test_every_operator_has_a_case():
    assert {p.values[0] for p in CASES} | RANDOM == GENERATORS


def test_every_onnx_version_is_bound(numpy_bound: Bound):
    host = {"ConstantOfShape": {0}, "Range": {0, 1, 2}}
    for op in GENERATORS - RANDOM:
        for v in onnx_versions(op):
            kdef, _ = numpy_bound.registry.lookup("", op, v)
            assert kdef is not None and kdef.since_version == v, f"{op}-{v}"
            assert set(kdef.host_inputs) == host.get(op, set()), op


def test_numpy_only_constants(numpy_bound: Bound):
    """Strings, sparse values and bfloat16 (which the standard cannot hold) over numpy."""
    strings = numpy_bound.run("Constant", [], 13, value_strings=["a", "bc"])
    assert strings.dtype == object and list(strings) == ["a", "bc"]
    assert numpy_bound.run("Constant", [], 13, value_string="x")[()] == "x"
    sparse = helper.make_sparse_tensor(tensor(np.array([5.0, 6.0], np.float32)),
                                       tensor(np.array([1, 3], np.int64)), [4])
    np.testing.assert_array_equal(numpy_bound.run("Constant", [], 13, sparse_value=sparse), [0, 5, 0, 6])
    got = numpy_bound.run("Constant", [], 21, value=tensor(np.array([1.5], BF16)))
    assert got.dtype == BF16 and float(got[0]) == 1.5
    got = numpy_bound.run("ConstantOfShape", [np.array([2], np.int64)], 21, value=tensor(np.array([0.5], BF16)))
    assert got.dtype == BF16 and list(got.astype(np.float32)) == [0.5, 0.5]


def test_constant_value_is_read_only(numpy_bound: Bound):
    y = numpy_bound.run("Constant", [], 13, value_ints=[1, 2])
    with pytest.raises(ValueError):
        y[0] = 5


@pytest.mark.parametrize("half", [np.float16, BF16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("stash", [0, 1])
def test_range_27_half_types(numpy_bound: Bound, half, stash):
    """stash_type 1 computes in float32 and rounds once; 0 accumulates in the half type."""
    start, limit, delta = scalars(0.1, 3.0, 0.3, dtype=half)
    got = numpy_bound.run("Range", [start, limit, delta], 27, stash_type=stash)
    assert got.dtype == half
    if stash:
        want = (np.float32(start) + np.arange(len(got), dtype=np.float32) * np.float32(delta)).astype(half)
    else:
        want = np.cumsum(np.r_[start, np.full(len(got) - 1, delta, half)].astype(half), dtype=half)
    np.testing.assert_array_equal(got.astype(np.float32), want.astype(np.float32))
    assert len(got) == int(np.ceil((np.float32(limit) - np.float32(start)) / np.float32(delta)))
    got = numpy_bound.run("Range", [start, limit, delta], 11)
    assert got.dtype == half


def test_over_the_gpu_backend():
    """The GPU providers bind these kernels over CuPy: under the simulated CuPy they give
    the numpy backend's results, with the steering inputs on the host."""
    from onyxrt_gpu.kernels._common import BACKEND
    from onyxrt_gpu.testing.simulated_cupy import install

    host = bind("numpy", numpy_backend())
    with install():
        import cupy

        gpu = bind("cupy", BACKEND)
        gpu.host = lambda value: value.get()  # type: ignore[method-assign]
        gpu.array = lambda value: cupy.asarray(value)  # type: ignore[method-assign]
        for p in CASES:
            op, inputs, opset, _, attrs = p.values
            if op in ("ConstantOfShape", "Range"):  # host inputs stay numpy arrays
                kernel = gpu.kernel(node(op, len(inputs), **attrs), opset)
                got = kernel.compute(*inputs)[0].get()
            else:
                got = gpu.run(op, inputs, opset, **attrs)
            want = host.run(op, inputs, opset, **attrs)
            assert got.dtype == want.dtype, p.id
            np.testing.assert_array_equal(got, want, err_msg=p.id)
        # Without a random extra (the simulated CuPy has no cupy.random), draws are made
        # on the host: the CPU provider's numbers.
        for op, inputs in (("RandomUniform", []), ("RandomNormalLike", [np.zeros((2, 3), np.float32)]),
                           ("Multinomial", [np.zeros((2, 3), np.float32)])):
            attrs = {"seed": 9.0, "shape": [4]} if op == "RandomUniform" else {"seed": 9.0}
            got, want = gpu.run(op, inputs, 22, **attrs), host.run(op, inputs, 22, **attrs)
            assert got.dtype == want.dtype
            np.testing.assert_array_equal(got, want)


# ------------------------------------------------------------------------ random


@pytest.mark.parametrize(
    ("op", "inputs", "attrs", "draw"),
    [
        ("RandomNormal", [], {"shape": [3, 4], "mean": 1.0, "scale": 2.0},
         lambda rng: rng.normal(1.0, 2.0, (3, 4)).astype(np.float32)),
        ("RandomUniform", [], {"shape": [5], "low": -1.0, "high": 3.0, "dtype": TensorProto.DOUBLE},
         lambda rng: rng.uniform(-1.0, 3.0, (5,))),
        ("RandomNormalLike", [np.zeros((2, 3), np.float64)], {},
         lambda rng: rng.normal(0.0, 1.0, (2, 3))),
        ("RandomUniformLike", [np.zeros((2, 2), np.int32)], {"dtype": TensorProto.FLOAT},
         lambda rng: rng.uniform(0.0, 1.0, (2, 2)).astype(np.float32)),
    ],
    ids=["normal", "uniform-double", "normal-like", "uniform-like-dtype"],
)
def test_a_seed_gives_the_cpu_providers_numbers(bound: Bound, op, inputs, attrs, draw):
    """numpy's default_rng of the seed, drawn in float64 and cast (the CPU provider's
    stream); a float seed that is not an integer is seeded by its bits."""
    got = bound.run(op, inputs, 22, seed=7.0, **attrs)
    want = draw(np.random.default_rng(7))
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    odd = bound.run(op, inputs, 22, seed=0.5, **attrs)
    np.testing.assert_array_equal(odd, draw(np.random.default_rng(0x3FE0000000000000)))


def test_a_kernel_continues_its_stream(bound: Bound):
    kernel = bound.kernel(node("RandomUniform", 0, shape=[4], seed=3.0), 22)
    first, second = (bound.host(kernel.compute()[0]) for _ in range(2))
    rng = np.random.default_rng(3)
    np.testing.assert_array_equal(first, rng.uniform(0, 1, 4).astype(np.float32))
    np.testing.assert_array_equal(second, rng.uniform(0, 1, 4).astype(np.float32))


def test_set_seed_seeds_nodes_without_one(bound: Bound, monkeypatch):
    monkeypatch.setattr(seeding, "_seed", None)
    seeding.set_seed(11)
    got = bound.run("RandomNormal", [], 22, shape=[3])
    np.testing.assert_array_equal(got, np.random.default_rng(11).normal(0, 1, 3).astype(np.float32))


def test_half_types_are_rounded_draws(numpy_bound: Bound):
    got = numpy_bound.run("RandomNormal", [], 22, shape=[6], seed=1.0,
                     dtype=TensorProto.BFLOAT16)
    assert got.dtype == BF16
    np.testing.assert_array_equal(got, np.random.default_rng(1).normal(0, 1, 6).astype(BF16))


def test_multinomial(bound: Bound):
    """Samples follow the probabilities; the same seed gives the same samples on every
    backend; the output type is int32 unless ``dtype`` says int64."""
    logits = np.log(np.array([[0.7, 0.2, 0.1, 0.0], [0.0, 0.0, 0.5, 0.5]], np.float32) + 1e-30)
    got = bound.run("Multinomial", [logits], 7, sample_size=4000, seed=5.0)
    assert got.dtype == np.int32 and got.shape == (2, 4000)
    np.testing.assert_allclose(np.bincount(got[0], minlength=4) / 4000, [0.7, 0.2, 0.1, 0.0], atol=0.03)
    assert set(np.unique(got[1])) == {2, 3}
    again = bound.run("Multinomial", [logits.astype(np.float64)], 22, sample_size=4000,
                       seed=5.0, dtype=TensorProto.INT64)
    assert again.dtype == np.int64
    np.testing.assert_array_equal(again, got)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_bernoulli(bound: Bound, dtype):
    """1 where the node's uniform draw is below p (the CPU provider's stream for a seed),
    in the input's type or the ``dtype`` attribute's; 0 and 1 are certain."""
    p = np.concatenate([np.zeros(50), np.ones(50), np.full(4000, 0.3)]).astype(dtype)
    got = bound.run("Bernoulli", [p], 22, seed=4.0)
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, (np.random.default_rng(4).random(p.shape) < p).astype(dtype))
    assert got[:50].sum() == 0 and got[50:100].sum() == 50
    assert abs(got[100:].mean() - 0.3) < 0.03
    as_bool = bound.run("Bernoulli", [p], 15, seed=4.0, dtype=TensorProto.BOOL)
    assert as_bool.dtype == np.bool_
    np.testing.assert_array_equal(as_bool, got.astype(bool))


def test_bernoulli_over_the_gpu_backend():
    """Drawn on the host (CuPy's namespace has no random numbers): the CPU's numbers."""
    from onyxrt_gpu.kernels._common import BACKEND
    from onyxrt_gpu.testing.simulated_cupy import install

    p = np.linspace(0, 1, 64).astype(np.float32)
    want = bind("numpy", numpy_backend()).run("Bernoulli", [p], 22, seed=2.0, dtype=TensorProto.INT32)
    with install():
        import cupy

        gpu = bind("cupy", BACKEND)
        gpu.array = cupy.asarray  # type: ignore[method-assign]
        gpu.host = lambda value: value.get()  # type: ignore[method-assign]
        got = gpu.run("Bernoulli", [p], 22, seed=2.0, dtype=TensorProto.INT32)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, want)


def test_a_backends_random_extra_is_used():
    b = bind("numpy", numpy_backend(extras={"random": CountingGenerator}))
    got = b.run("RandomNormal", [], 22, shape=[2], seed=1.0)
    assert CountingGenerator.calls == 1
    np.testing.assert_array_equal(got, [42.0, 42.0])


# ------------------------------------------------------------------------ errors


@pytest.mark.parametrize(
    ("op", "attrs", "match"),
    [
        ("Constant", {}, "exactly one"),
        ("Constant", {"value_int": 1, "value_float": 1.0}, "exactly one"),
        ("ConstantOfShape", {"value": tensor(np.array([1, 2], np.int32))}, "exactly one element"),
        ("EyeLike", {"dtype": 12345}, "dtype"),
        ("Range", {"stash_type": 2}, "stash_type"),
        ("RandomNormal", {}, "'shape' is required"),
        ("RandomUniform", {"shape": [2, -1]}, "negative"),
        ("RandomNormal", {"shape": [2], "dtype": TensorProto.INT32}, "not allowed"),
        ("RandomUniformLike", {"dtype": TensorProto.INT64}, "not allowed"),
        ("Multinomial", {"sample_size": 0}, "sample_size"),
        ("Multinomial", {"dtype": TensorProto.FLOAT}, "not allowed"),
    ],
)
def test_bad_attributes_are_invalid_graph(numpy_bound: Bound, op, attrs, match):
    opset = 27 if op == "Range" else 22
    n_inputs = {"ConstantOfShape": 1, "EyeLike": 1, "Range": 3, "RandomUniformLike": 1, "Multinomial": 1}
    with pytest.raises(InvalidGraph, match=f"'{op}_node'.*{match}"):
        numpy_bound.kernel(node(op, n_inputs.get(op, 0), **attrs), opset)


@pytest.mark.parametrize(
    ("op", "inputs", "match"),
    [
        ("ConstantOfShape", [np.array([2, -1], np.int64)], "negative"),
        ("EyeLike", [np.zeros((2, 2, 2), np.float32)], "2-D"),
        ("Range", scalars(0, 5, 0, dtype=np.int32), "delta"),
        ("Range", scalars(0.0, 5.0, 0.0, dtype=np.float32), "delta"),
        ("Range", [np.array([0, 1], np.int64), *scalars(5, 1, dtype=np.int64)], "scalars"),
        ("RandomNormalLike", [np.zeros(2, np.int32)], "not a float"),
        ("Multinomial", [np.zeros(3, np.float32)], r"\[batch, classes\]"),
        ("Multinomial", [np.zeros((2, 0), np.float32)], "no classes"),
    ],
)
def test_bad_data_are_value_errors(bound: Bound, op, inputs, match):
    attrs = {"seed": 1.0} if op in RANDOM else {}
    with pytest.raises(ValueError, match=match):
        bound.run(op, inputs, 11 if op == "Range" else 22, **attrs)
