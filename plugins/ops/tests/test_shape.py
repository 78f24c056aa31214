"""Tests of the library's shape family (onyxrt_ops.shape).

Every operator runs over numpy and over array_api_strict and is compared with onnxruntime
(or onnx's reference evaluator where onnxruntime has no kernel): old versions with their
attributes, constant and runtime steering inputs, the view operators' remembered target
shapes. Split and Dropout (several outputs) are compared with numpy directly; Pad's
reflect/edge/wrap modes also with ``numpy.pad`` for pads longer than the axis. Strings
(numpy only: the standard has no string dtype) are filled with "". Bad attributes are
InvalidGraph when the kernel is built, bad data ValueError from compute.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from library_harness import Bound, node, oracle, unbound_versions
from onnx import helper

from onyxrt.errors import InvalidGraph, ResourceLimitExceeded
from onyxrt.kernels import KernelInfo
from onyxrt.limits import RunLimits, run_limits
from onyxrt_ops import library

SHAPE = {d.op_type for d in library.definitions if d.cls.__module__ == "onyxrt_ops.shape"}


def values(*shape: int, seed: int = 0, dtype: Any = np.float32) -> np.ndarray:
    """Seeded values in [0, 10)."""
    return np.random.default_rng(seed).integers(0, 10, shape).astype(dtype)


def i64(*v: int) -> np.ndarray:
    return np.array(v, np.int64)


def case(op: str, inputs: list[Any], opset: int, *, id: str | None = None,
         want: Any = None, **attrs: Any) -> Any:
    """One case: ``want`` (a function of the inputs) replaces the oracle where neither
    onnxruntime nor the reference evaluator runs the node (opsets before 7)."""
    return pytest.param(op, inputs, opset, attrs, want, id=id or f"{op}-{opset}")


X = values(2, 3, 4)
IMG = values(1, 8, 2, 3)
CASES = [
    case("Reshape", [X, i64(4, -1)], 21),
    case("Reshape", [X, i64(0, 0, 2, 2)], 13, id="Reshape-copy-zero"),
    case("Reshape", [values(0, 3), i64(3, 0)], 14, allowzero=1, id="Reshape-allowzero"),
    case("Reshape", [X], 1, shape=[6, 4], id="Reshape-1-attr"),
    case("Transpose", [X], 21, perm=[1, 2, 0]),
    case("Transpose", [X], 1, id="Transpose-reverse"),
    case("Flatten", [X], 21, axis=2),
    case("Flatten", [X], 13, axis=-1, id="Flatten-negative"),
    case("Flatten", [X], 1, axis=0, id="Flatten-1-axis0"),
    case("Squeeze", [values(2, 1, 3, 1), i64(-1)], 21),
    case("Squeeze", [values(2, 1, 3, 1)], 13, id="Squeeze-all"),
    case("Squeeze", [values(1, 3, 1)], 11, axes=[0], id="Squeeze-11-attr"),
    case("Unsqueeze", [X, i64(0, -1)], 21),
    case("Unsqueeze", [X], 11, axes=[1, -1], id="Unsqueeze-11-attr"),
    case("Unsqueeze", [X], 1, axes=[0, 4], id="Unsqueeze-1-attr"),
    case("Concat", [X, values(2, 1, 4, seed=1), values(2, 2, 4, seed=2)], 13, axis=1),
    case("Concat", [X, X], 4, axis=-1, id="Concat-4-negative"),
    case("Concat", [values(3, 2, dtype=np.int64), values(3, 1, dtype=np.int64)], 1,
         id="Concat-1-default-axis", want=lambda a, b: np.concatenate([a, b], axis=1)),
    case("Expand", [values(3, 1), i64(2, 1, 4)], 13),
    case("Expand", [values(1, 4, dtype=np.int32), i64(3, 1)], 8, id="Expand-8-int32"),
    case("Tile", [X, i64(2, 1, 3)], 13),
    case("Tile", [values(2, 2, dtype=np.bool_), i64(3, 2)], 6, id="Tile-6-bool"),
    case("Identity", [X], 21),
    case("Identity", [values(3, dtype=np.uint8)], 1, id="Identity-1-uint8"),
    case("Pad", [X, i64(0, 1, 2, 1, 0, 3)], 21),
    case("Pad", [X, i64(1, -1, 0, 0, -2, 2), np.float32(5)], 13, id="Pad-negative-value"),
    case("Pad", [X, i64(1, 2, 2, 3), None, i64(1, 2)], 18, mode="reflect", id="Pad-reflect-axes"),
    case("Pad", [X, i64(0, 3, 2, 1, 1, 0)], 13, mode="edge", id="Pad-edge"),
    case("Pad", [X, i64(0, 2, 1, 1, 3, 4)], 19, mode="wrap", id="Pad-wrap"),
    case("Pad", [values(2, 3, dtype=np.int32), i64(1, 1, 0, 2), np.int32(-7)], 11, id="Pad-11-int"),
    case("Pad", [X], 2, pads=[0, 1, 0, 1, 0, 2], value=1.5, id="Pad-2-attr"),
    case("Pad", [X], 2, pads=[1, 0, 1, 0, 2, 1], mode="reflect", id="Pad-2-reflect"),
    case("Trilu", [values(2, 4, 5)], 14),
    case("Trilu", [values(4, 5, dtype=np.int64), i64(-1)], 14, upper=0, id="Trilu-lower-k"),
    case("Trilu", [values(3, 3), i64(2)], 14, id="Trilu-upper-k"),
    case("DepthToSpace", [IMG], 13, blocksize=2),
    case("DepthToSpace", [IMG], 11, blocksize=2, mode="CRD", id="DepthToSpace-CRD"),
    case("DepthToSpace", [IMG], 1, blocksize=2, id="DepthToSpace-1"),
    case("SpaceToDepth", [values(1, 2, 4, 6)], 13, blocksize=2),
    case("SpaceToDepth", [values(2, 1, 3, 3, dtype=np.int32)], 1, blocksize=3, id="SpaceToDepth-1"),
    case("CenterCropPad", [values(5, 4, 3), i64(3, 6, 3)], 18),
    case("CenterCropPad", [values(5, 4, 3), i64(2, 7)], 18, axes=[0, -1], id="CenterCropPad-axes"),
    case("Compress", [X, np.array([True, False, True])], 11, axis=1),
    case("Compress", [X, np.array([False, True, True, False, True])], 9, id="Compress-flat"),
    case("Compress", [X, np.array([True, False])], 11, axis=-1, id="Compress-short-condition"),
    case("ReverseSequence", [values(4, 3, 2), i64(4, 1, 2)], 10),
    case("ReverseSequence", [values(3, 5, 2), i64(5, 0, 3)], 10, batch_axis=0, time_axis=1,
         id="ReverseSequence-batch-first"),
    case("Dropout", [X], 13, id="Dropout-13-inference"),
    case("Dropout", [X], 7, ratio=0.3, id="Dropout-7"),
    case("Dropout", [X], 6, is_test=1, id="Dropout-6-is-test", want=lambda x: x),
]


def _present(inputs: list[Any]) -> list[Any]:
    while inputs and inputs[-1] is None:
        inputs = inputs[:-1]
    return inputs


@pytest.mark.parametrize(("op", "inputs", "opset", "attrs", "want"), CASES)
def test_same_as_onnxruntime(bound: Bound, op, inputs, opset, attrs, want):
    got = bound.run(op, inputs, opset, **attrs)
    expected = np.asarray(want(*inputs) if want else oracle(op, _present(inputs), opset, **attrs))
    assert got.dtype == expected.dtype and got.shape == expected.shape
    np.testing.assert_array_equal(got, expected)


def test_every_operator_has_a_case():
    assert {p.values[0] for p in CASES} | {"Split"} == SHAPE


def test_every_onnx_version_is_bound(numpy_bound: Bound):
    assert not unbound_versions(numpy_bound.registry, SHAPE)


def outputs(bound: Bound, op: str, inputs: list[Any], opset: int, n_out: int,
            consts: dict[int, Any] | None = None, **attrs: Any) -> list[Any]:
    """Every output of a node with ``n_out`` outputs, back on the host."""
    names = [f"in{i}" if v is not None else "" for i, v in enumerate(inputs)]
    n = helper.make_node(op, names, [f"y{i}" for i in range(n_out)], name=f"{op}_node", **attrs)
    kdef, reason = bound.registry.lookup("", op, opset)
    assert kdef is not None, reason
    kernel = kdef.factory(KernelInfo.from_node(n, opset, since_version=kdef.since_version,
                                               constants=consts or {}))
    outs = kernel.compute(*[None if v is None else bound.array(v) for v in inputs])
    return [None if o is None else bound.host(o) for o in outs]


# ------------------------------------------------------------------------------ Split


@pytest.mark.parametrize(("inputs", "opset", "n_out", "attrs", "want"), [
    ([X, i64(1, 2)], 13, 2, {"axis": 1}, [X[:, :1], X[:, 1:]]),
    ([X], 13, 2, {"axis": -1}, [X[..., :2], X[..., 2:]]),
    ([values(7, 2)], 18, 3, {"num_outputs": 3}, np.split(values(7, 2), [3, 6])),
    ([X], 11, 3, {"axis": 1, "split": [1, 1, 1]}, np.split(X, 3, axis=1)),
    ([X, i64(3, 1)], 1, 2, {"axis": 2}, np.split(X, [3], axis=2)),
    ([X], 2, 2, {}, np.split(X, 2)),
    ([X, i64(0, 4)], 13, 2, {"axis": 2}, [X[..., :0], X]),
], ids=["input", "even", "uneven-18", "attr-11", "input-1", "even-2", "empty-part"])
def test_split(bound: Bound, inputs, opset, n_out, attrs, want):
    got = outputs(bound, "Split", inputs, opset, n_out, **attrs)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize(("inputs", "opset", "n_out", "attrs", "match"), [
    ([X, i64(1, 1)], 13, 2, {"axis": 1}, "do not add up"),
    ([X, i64(4, -1)], 13, 2, {"axis": 2}, "must be >= 0"),
    ([values(7, 2)], 13, 3, {}, "cannot be split evenly"),
])
def test_split_bad_sizes_are_value_errors(bound: Bound, inputs, opset, n_out, attrs, match):
    with pytest.raises(ValueError, match=match):
        outputs(bound, "Split", inputs, opset, n_out, **attrs)


# ---------------------------------------------------------------------------- Dropout


def test_dropout_masks(bound: Bound):
    """The mask is bool from v10 and of T before; an output left unnamed is not made."""
    y, mask = outputs(bound, "Dropout", [X, np.float32(0.5), np.array(False)], 13, 2)
    np.testing.assert_array_equal(y, X)
    assert mask.dtype == np.bool_ and mask.all()
    y, mask = outputs(bound, "Dropout", [X], 7, 2)
    assert mask.dtype == X.dtype and (mask == 1).all()
    n = helper.make_node("Dropout", ["x"], ["y", ""], name="d")
    kdef, _ = bound.registry.lookup("", "Dropout", 13)
    assert kdef.factory(KernelInfo.from_node(n, 13)).compute(bound.array(X))[1] is None


@pytest.mark.parametrize(("opset", "inputs", "attrs"), [
    (13, [X, np.float32(0.25), np.array(True)], {"seed": 7}),
    (22, [X, np.float32(0.75), np.array(True)], {"seed": 3}),
    (6, [X], {"ratio": 0.25, "seed": 7, "is_test": 0}),
])
def test_training_dropout_draws_as_onnx_describes(bound: Bound, monkeypatch, opset, inputs,
                                                  attrs):
    """RandomState(seed).uniform(...) >= ratio keeps an element; kept ones are scaled."""
    ratio = float(inputs[1]) if len(inputs) > 1 else attrs["ratio"]
    attrs = dict(attrs)
    seed = attrs.pop("seed")
    if opset >= 12:
        attrs["seed"] = seed
    else:  # v1/v6 have no seed attribute: onyxrt.set_seed's seed decides
        monkeypatch.setattr("onyxrt.seeding._seed", seed)
    y, mask = outputs(bound, "Dropout", inputs, opset, 2, **attrs)
    keep = np.random.RandomState(seed).uniform(0.0, 1.0, X.shape) >= ratio
    np.testing.assert_array_equal(mask, keep if opset >= 10 else keep.astype(X.dtype))
    np.testing.assert_allclose(y, X * keep / np.float32(1 - ratio), rtol=1e-6)


def test_dropout_ratio_out_of_range(bound: Bound):
    with pytest.raises(ValueError, match="ratio"):
        outputs(bound, "Dropout", [X, np.float32(1.5)], 13, 1)
    with pytest.raises(InvalidGraph, match="ratio"):
        outputs(bound, "Dropout", [X], 6, 1, ratio=2.0)


# ------------------------------------------------------------------------------- Pad


@pytest.mark.parametrize("mode", ["reflect", "edge", "wrap"])
@pytest.mark.parametrize("pads", [(5, 0, 7, 2), (0, 9, 1, 0), (4, 4, 4, 4)])
def test_pads_longer_than_the_axis_repeat_as_numpy_pad(bound: Bound, mode, pads):
    x = values(3, 2, seed=4)
    got = bound.run("Pad", [x, i64(*pads)], 19, mode=mode)
    np.testing.assert_array_equal(got, np.pad(x, [(pads[0], pads[2]), (pads[1], pads[3])], mode=mode))


@pytest.mark.parametrize("mode", ["reflect", "edge", "wrap"])
def test_pad_of_a_length_one_axis(bound: Bound, mode):
    x = values(1, 3)
    got = bound.run("Pad", [x, i64(2, 1, 3, 1)], 19, mode=mode)
    np.testing.assert_array_equal(got, np.pad(x, [(2, 3), (1, 1)], mode=mode))


# --------------------------------------------------------------------- strings (numpy)

TEXT = np.array([["a", "bb", "c"], ["d", "e", "ff"]], dtype=object)


def test_strings_fill_with_empty_strings(numpy_bound: Bound):
    got = numpy_bound.run("Pad", [TEXT, i64(1, 0, 0, 1)], 21)
    assert got.tolist() == [["", "", "", ""], ["a", "bb", "c", ""], ["d", "e", "ff", ""]]
    got = numpy_bound.run("Trilu", [TEXT], 14)
    assert got.tolist() == [["a", "bb", "c"], ["", "e", "ff"]]
    got = numpy_bound.run("CenterCropPad", [TEXT, i64(4, 3)], 18)
    assert got.tolist() == [["", "", ""], ["a", "bb", "c"], ["d", "e", "ff"], ["", "", ""]]
    got = numpy_bound.run("Concat", [TEXT, TEXT], 13, axis=0)
    assert got.tolist() == TEXT.tolist() * 2


# ------------------------------------------------------------------ the view operators


def test_view_operators_give_views_and_remember_targets(numpy_bound: Bound):
    """Over numpy the result shares the input's memory; a constant shape is read once
    and the last target is reused, but a new input shape is checked again."""
    n = node("Reshape", 2)
    kdef, _ = numpy_bound.registry.lookup("", "Reshape", 21)
    kernel = kdef.factory(KernelInfo.from_node(n, 21, constants={1: i64(-1, 4)}))
    (y,) = kernel.compute(X, None)
    assert y.shape == (6, 4) and np.shares_memory(y, X)
    (y,) = kernel.compute(values(2, 8), None)
    assert y.shape == (4, 4)
    with pytest.raises(ValueError, match="cannot reshape"):
        kernel.compute(values(3, 3), None)
    (y,) = numpy_bound.kernel(node("Transpose", 1), 21).compute(X)
    assert y.shape == (4, 3, 2) and np.shares_memory(y, X)


def test_steering_constants_are_read_at_build_time(bound: Bound):
    for op, inputs, opset in (("Expand", [values(3, 1), i64(2, 3, 4)], 13),
                              ("Tile", [X, i64(1, 2, 1)], 13),
                              ("Pad", [X, i64(1, 0, 0, 0, 1, 0)], 21)):
        kdef, _ = bound.registry.lookup("", op, opset)
        kernel = kdef.factory(KernelInfo.from_node(node(op, 2), opset, constants={1: inputs[1]}))
        (y,) = kernel.compute(bound.array(inputs[0]), None)
        np.testing.assert_array_equal(bound.host(y), oracle(op, inputs, opset))


# ----------------------------------------------------------------------------- errors


@pytest.mark.parametrize(("op", "opset", "attrs", "match"), [
    ("Reshape", 1, {}, "'shape' is required"),
    ("Transpose", 21, {"perm": [0, 0, 1]}, "not a permutation"),
    ("Flatten", 9, {"axis": -1}, "must be >= 0"),
    ("Unsqueeze", 11, {}, "'axes' is required"),
    ("Unsqueeze", 1, {"axes": [-1]}, "must be >= 0"),
    ("Concat", 13, {}, "'axis' is required"),
    ("Split", 18, {"num_outputs": 0}, "num_outputs must be >= 1"),
    ("Split", 18, {"num_outputs": 10**12}, "num_outputs is"),
    ("Pad", 2, {}, "'pads' is required"),
    ("Pad", 2, {"pads": [1, 2, 3]}, "even length"),
    ("Pad", 18, {"mode": "wrap"}, "not supported"),
    ("DepthToSpace", 13, {"blocksize": 0}, "blocksize"),
    ("DepthToSpace", 13, {"blocksize": 2, "mode": "XYZ"}, "'DCR' or 'CRD'"),
    ("ReverseSequence", 10, {"batch_axis": 1, "time_axis": 1}, "batch_axis"),
])
def test_bad_attributes_are_invalid_graph(bound: Bound, op, opset, attrs, match):
    with pytest.raises(InvalidGraph, match=match) as info:
        bound.kernel(node(op, 1), opset) if not attrs else bound.kernel(
            helper.make_node(op, ["x"], ["y"], name=f"{op}_node", **attrs), opset)
    assert f"{op}_node" in str(info.value)


@pytest.mark.parametrize(("op", "inputs", "opset", "attrs", "match"), [
    ("Reshape", [X, i64(5, -1)], 21, {}, "cannot reshape"),
    ("Reshape", [X, i64(-1, -1)], 21, {}, "more than one -1"),
    ("Reshape", [X, i64(0, -1)], 14, {"allowzero": 1}, "both 0 and -1"),
    ("Reshape", [X, i64(0, 0, 0, 0)], 21, {}, "copies dimension 3"),
    ("Transpose", [X], 21, {"perm": [1, 0]}, "does not match input rank"),
    ("Flatten", [X], 21, {"axis": 4}, "out of range"),
    ("Squeeze", [X, i64(1)], 21, {}, "is not 1"),
    ("Squeeze", [X, i64(3)], 21, {}, "out of range"),
    ("Unsqueeze", [X, i64(1, 1)], 21, {}, "duplicate"),
    ("Concat", [X, X], 13, {"axis": 3}, "out of range"),
    ("Expand", [values(3, 2), i64(4, 3)], 13, {}, "do not broadcast"),
    ("Tile", [X, i64(1, 2)], 13, {}, "one entry per input axis"),
    ("Tile", [X, i64(1, -2, 1)], 13, {}, "must be >= 0"),
    ("Pad", [X, i64(1, 2)], 21, {}, "must have 2 \\* 3 entries"),
    ("Pad", [X, i64(0, -3, 0, 0, -2, 0)], 21, {}, "remove more than"),
    ("Pad", [values(0, 2), i64(1, 0, 0, 0)], 21, {"mode": "edge"}, "empty axis"),
    ("Trilu", [values(3)], 14, {}, "rank >= 2"),
    ("DepthToSpace", [values(1, 3, 2, 2)], 13, {"blocksize": 2}, "not divisible"),
    ("SpaceToDepth", [values(1, 3, 3, 2)], 13, {"blocksize": 2}, "not divisible"),
    ("CenterCropPad", [X, i64(2, 2)], 18, {}, "does not match axes"),
    ("Compress", [X, np.array([True, False, False, True])], 11, {"axis": 1}, "beyond dimension"),
    ("ReverseSequence", [values(4, 3), i64(1, 2)], 10, {}, "entries, batch is 3"),
    ("ReverseSequence", [values(4, 3), i64(1, 5, 2)], 10, {}, "must be in"),
])
def test_bad_data_is_a_value_error(bound: Bound, op, inputs, opset, attrs, match):
    with pytest.raises(ValueError, match=match):
        bound.run(op, inputs, opset, **attrs)


@pytest.mark.parametrize(("op", "inputs", "opset", "attrs"), [
    ("Concat", [X] * 64, 13, {"axis": 0}),
    ("Expand", [X, i64(64, 2, 3, 4)], 13, {}),
    ("Tile", [X, i64(64, 1, 1)], 13, {}),
    ("Pad", [X, i64(0, 0, 0, 0, 0, 900)], 21, {}),
    ("Pad", [X, i64(0, 0, 0, 0, 0, 900)], 21, {"mode": "edge"}),
    ("CenterCropPad", [X, i64(2, 3, 900)], 18, {}),
])
def test_outputs_over_the_tensor_limit_are_refused(bound: Bound, op, inputs, opset, attrs):
    with run_limits(RunLimits(max_tensor_bytes=4096)), pytest.raises(ResourceLimitExceeded, match=f"{op}_node"):
        bound.run(op, inputs, opset, **attrs)
