"""Tests for the CPU logical kernels (onyxrt_cpu.kernels.logical).

The onnx node conformance cases run straight through the registry; targeted tests cover what
they leave out (legacy broadcasting of opset 1, float16/bfloat16 and every integer type,
string equality, Where over strings and three-way broadcasting), checked against
onnxruntime or numpy truth.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
from kernel_cases import (
    BF16,
    assert_all_versions_registered,
    conformance_params,
    op_output_onnxruntime,
    run_case,
)
from kernel_cases import op_output as ours
from onnx import TensorProto

import onyxrt
from onyxrt.dtypes import onnx_elem_type

OPS = [
    "Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "Not", "And", "Or", "Xor",
    "Where",
]  # fmt: skip

# Conformance cases these kernels cannot pass, with the reason. None today.
XFAIL: dict[str, str] = {}


@pytest.mark.parametrize("case", conformance_params(OPS, XFAIL))
def test_conformance(case):
    run_case(case)


def test_every_schema_version_is_registered():
    assert_all_versions_registered(OPS)


# ----------------------------------------------------------------- helpers


# onnxruntime's output (the oracle), declared bool unless ``out_type`` says otherwise.
onnxrt = functools.partial(op_output_onnxruntime, out_type=TensorProto.BOOL)


def _values(shape, dtype, seed):
    rng = np.random.default_rng(seed)
    v = rng.integers(0, 4, size=shape)  # few distinct values, so ties are common
    return v.astype(dtype)


COMPARE = {
    "Equal": (np.equal, 19),
    "Less": (np.less, 13),
    "LessOrEqual": (np.less_equal, 16),
    "Greater": (np.greater, 13),
    "GreaterOrEqual": (np.greater_equal, 16),
}
TYPES = [np.float16, np.float32, np.float64, np.int8, np.int16, np.int32, np.int64, np.uint8,
         np.uint16, np.uint32, np.uint64, BF16]  # fmt: skip


@pytest.mark.parametrize("op", sorted(COMPARE))
@pytest.mark.parametrize("dtype", TYPES, ids=lambda d: np.dtype(d).name)
def test_comparisons_all_types_broadcast(op, dtype):
    fn, opset = COMPARE[op]
    a = _values((2, 3, 4), dtype, 1)
    b = _values((3, 1), dtype, 2)
    got = ours(op, [a, b], opset)
    assert got.dtype == np.bool_ and got.shape == (2, 3, 4)
    np.testing.assert_array_equal(got, fn(a.astype(np.float64), b.astype(np.float64)))


@pytest.mark.parametrize("op", sorted(COMPARE))
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64, np.float64])
def test_comparisons_vs_ort(op, dtype):
    _, opset = COMPARE[op]
    a = _values((4, 5), dtype, 3)
    b = _values((5,), dtype, 4)
    np.testing.assert_array_equal(ours(op, [a, b], opset), onnxrt(op, [a, b], opset))


def test_comparisons_with_nan():
    a = np.array([np.nan, 1.0, np.nan], dtype=np.float32)
    b = np.array([np.nan, np.nan, 1.0], dtype=np.float32)
    for op, (_, opset) in COMPARE.items():
        np.testing.assert_array_equal(ours(op, [a, b], opset), [False] * 3)


def test_equal_strings():
    a = np.array([["x", "y"], ["z", ""]], dtype=object)
    b = np.array(["x", ""], dtype=object)
    got = ours("Equal", [a, b], 19)
    assert got.dtype == np.bool_
    np.testing.assert_array_equal(got, [[True, False], [False, True]])
    np.testing.assert_array_equal(got, onnxrt("Equal", [a, b], 19))
    mixed = ours("Equal", [np.array([b"x", b"q"], dtype=object), b], 19)
    np.testing.assert_array_equal(mixed, [True, False])


@pytest.mark.parametrize("opset", [1, 6])
def test_legacy_broadcast_comparisons_and_logic(opset):
    a = _values((2, 3, 4), np.int32, 5)
    b = _values((3,), np.int32, 6)
    got = ours("Greater", [a, b], opset, broadcast=1, axis=1)
    np.testing.assert_array_equal(got, a > b[None, :, None])
    got = ours("Equal", [a, b[:1].reshape(1, 1)], opset, broadcast=1)
    np.testing.assert_array_equal(got, a == b[0])
    x = a > 1
    y = b > 1
    np.testing.assert_array_equal(
        ours("And", [x, y], opset, broadcast=1, axis=-2), x & y[None, :, None]
    )
    yz = _values((4,), np.int32, 7) > 1
    np.testing.assert_array_equal(ours("Xor", [x, yz], opset, broadcast=1), x ^ yz)
    with pytest.raises(ValueError, match="broadcast"):
        ours("Or", [x, yz], opset)


@pytest.mark.parametrize("op", ["And", "Or", "Xor"])
def test_logic_broadcast_vs_ort(op):
    a = _values((3, 4, 5), np.int32, 8) > 1
    b = _values((4, 1), np.int32, 9) > 1
    got = ours(op, [a, b], 7)
    assert got.dtype == np.bool_ and got.shape == (3, 4, 5)
    np.testing.assert_array_equal(got, onnxrt(op, [a, b], 7))


def test_not():
    x = np.array([[True, False]])
    got = ours("Not", [x], 1)
    np.testing.assert_array_equal(got, [[False, True]])
    assert ours("Not", [np.array(True)], 1).shape == ()


@pytest.mark.parametrize(
    "dtype", [np.float32, np.float16, np.int64, np.uint8, np.bool_, BF16], ids=str
)
def test_where_three_way_broadcast(dtype):
    c = _values((2, 1, 4), np.int32, 10) > 1
    x = _values((3, 1), dtype, 11)
    y = _values((4,), dtype, 12)
    got = ours("Where", [c, x, y], 16)
    assert got.dtype == np.dtype(dtype) and got.shape == (2, 3, 4)
    np.testing.assert_array_equal(got, np.where(c, x, y))
    if dtype in (np.float32, np.int64, np.uint8):
        out_type = onnx_elem_type(np.dtype(dtype))
        np.testing.assert_array_equal(got, onnxrt("Where", [c, x, y], 16, out_type=out_type))


def test_where_strings_and_old_version():
    c = np.array([True, False, True])
    x = np.array(["a", "b", "c"], dtype=object)
    y = np.array(["z"], dtype=object)
    got = ours("Where", [c, x, y], 9)
    assert got.dtype == object and got.tolist() == ["a", "z", "c"]
    want = onnxrt("Where", [c, x, y], 9, out_type=TensorProto.STRING)
    assert got.tolist() == want.tolist()


@pytest.mark.parametrize(("cond", "x", "y"), [
    ((1, 12, 4, 4), (), (1, 12, 4, 4)),        # a NaN guard: Where(IsNaN(p), 0, p)
    ((1, 1, 1, 4), (1, 12, 4, 4), ()),         # a mask over scores, the fill a scalar
    ((3, 1), (1, 4), (3, 4)),
    ((4,), (3, 4), (3, 4)),
    ((3, 1), (1, 4), (1,)),                    # neither has the output's shape: numpy's where
    ((1, 12, 16, 16), (1,), (1, 12, 16, 16)),  # large enough for the compiled select
    ((1, 12, 16, 16), (1, 12, 16, 16), ()),
])
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64, np.uint8])
def test_where_copy_path_is_numpys_where(cond, x, y, dtype):
    from onnx import helper

    rng = np.random.default_rng(1)
    c = rng.random(cond) < 0.5
    xv = (rng.standard_normal(x) * 10).astype(dtype)
    yv = (rng.standard_normal(y) * 10).astype(dtype)
    if dtype == np.float32 and xv.size:
        xv.flat[0] = np.nan
    t = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    graph = helper.make_graph(
        [helper.make_node("Where", ["c", "x", "y"], ["o"])], "g",
        [helper.make_tensor_value_info("c", TensorProto.BOOL, list(cond)),
         helper.make_tensor_value_info("x", t, list(x)), helper.make_tensor_value_info("y", t, list(y))],
        [helper.make_tensor_value_info("o", t, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)])
    out = onyxrt.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"c": c, "x": xv, "y": yv})[0]
    want = np.where(c, xv, yv)
    assert out.dtype == want.dtype and out.shape == want.shape
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("op", sorted(COMPARE))
def test_comparisons_of_numbers_are_one_ufunc_inside_sessions(op):
    """Operands of one number type known when built: the kernel's compute is the ufunc
    alone (an instance attribute over the library's method), with a lower-rank constant
    and 0-d operands giving what numpy and onnxruntime give."""
    from onnx import helper

    fn, opset = COMPARE[op]
    row = np.array([0.5, np.nan, -1.0], np.float32)
    cases = [([2, 3], [helper.make_node(op, ["a", "row"], ["y"])], {"row": row}, {"a": np.array(
        [[0.5, 1.0, -2.0], [np.nan, 0.0, -1.0]], np.float32)}, lambda f: fn(f["a"], row)),
        ([], [helper.make_node(op, ["a", "b"], ["y"])], {}, {"a": np.array(1.0, np.float32),
                                                             "b": np.array(1.0, np.float32)},
         lambda f: fn(f["a"], f["b"]))]
    for shape, nodes, inits, feeds, want in cases:
        inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n in feeds]
        graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("y", TensorProto.BOOL, None)],
                                  [helper.make_tensor(k, TensorProto.FLOAT, v.shape, v.ravel()) for k, v in
                                   inits.items()])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)
        session = onyxrt.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        assert "compute" in vars(session._plan.steps[-1].kernel)
        for _ in range(2):  # the first run and the compiled run path
            (y,) = session.run(None, feeds)
            assert type(y) is np.ndarray and y.dtype == np.bool_
            np.testing.assert_array_equal(y, want(feeds))
