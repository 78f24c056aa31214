"""Tests of the CPU shape kernels (onyxrt_cpu/kernels/shape.py).

The ONNX node conformance cases for every op of the module run straight through the kernel
registry; targeted tests cover dtypes, versions and edge cases the conformance cases miss,
against onnxruntime or numpy truth.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from kernel_cases import assert_every_op_has_cases, conformance_params, one_node, run_case, run_ours
from kernel_cases import assert_same_as_onnxruntime as check

from onyxrt.errors import InvalidGraph

OPS = [
    "Reshape",
    "Transpose",
    "Flatten",
    "Squeeze",
    "Unsqueeze",
    "Concat",
    "Split",
    "Expand",
    "Tile",
    "Shape",
    "Size",
    "Identity",
    "Dropout",
    "Trilu",
    "Pad",
    "DepthToSpace",
    "SpaceToDepth",
    "ReverseSequence",
    "Compress",
    "CenterCropPad",
]

#: Conformance cases this module cannot pass, with the reason. (None at present.)
EXPECTED_FAILURES: dict[str, str] = {}


@pytest.mark.parametrize("case", conformance_params(OPS, EXPECTED_FAILURES))
def test_conformance(case) -> None:
    run_case(case)


def test_every_op_has_cases() -> None:
    assert_every_op_has_cases(OPS)


# ----------------------------------------------------------------------------- helpers


RNG = np.random.default_rng(1234)


def _arr(shape, dtype=np.float32):
    return (RNG.standard_normal(shape) * 10).astype(dtype)


# ----------------------------------------------------------------------------- Reshape & co.


@pytest.mark.parametrize("opset", [5, 13, 14, 21])
@pytest.mark.parametrize(
    ("in_shape", "target"),
    [((2, 3, 4), [0, -1]), ((2, 3, 4), [-1]), ((2, 3, 4), [4, 0, 2]), ((6,), [2, 1, 3])],
)
def test_reshape_vs_ort(opset, in_shape, target) -> None:
    check(one_node("Reshape", 2), opset, _arr(in_shape, np.int32), np.array(target, np.int64))


def test_reshape_allowzero() -> None:
    x = np.zeros((0, 3), np.float32)
    node = one_node("Reshape", 2, allowzero=1)
    check(node, 14, x, np.array([3, 0], np.int64))
    (y,) = run_ours(one_node("Reshape", 2), 14, _arr((2, 3)), np.array([0, 3], np.int64))
    assert y.shape == (2, 3)


def test_reshape_v1_attribute() -> None:
    x = _arr((2, 3, 4))
    (y,) = run_ours(one_node("Reshape", 1, shape=[0, -1]), 1, x)
    np.testing.assert_array_equal(y, x.reshape(2, 12))


def test_reshape_bad_shape_raises() -> None:
    with pytest.raises(ValueError):
        run_ours(one_node("Reshape", 2), 14, _arr((2, 3)), np.array([4, -1], np.int64))


@pytest.mark.parametrize(
    "dtype", [np.float16, ml_dtypes.bfloat16, np.int8, np.uint64, np.bool_, object]
)
def test_transpose_dtypes(dtype) -> None:
    x = _arr((2, 3, 4)).astype(dtype)
    (y,) = run_ours(one_node("Transpose", 1), 13, x)
    assert y.dtype == x.dtype
    np.testing.assert_array_equal(y, x.transpose(2, 1, 0))
    (y,) = run_ours(one_node("Transpose", 1, perm=[1, 0, 2]), 21, x)
    np.testing.assert_array_equal(y, x.transpose(1, 0, 2))


def test_transpose_bad_perm() -> None:
    with pytest.raises(InvalidGraph, match="perm"):
        run_ours(one_node("Transpose", 1, perm=[0, 0]), 13, _arr((2, 2)))


@pytest.mark.parametrize("axis", [-3, -1, 0, 2, 3])
def test_flatten_vs_ort(axis) -> None:
    check(one_node("Flatten", 1, axis=axis), 13, _arr((2, 3, 4), np.int64))


def test_squeeze_versions() -> None:
    x = _arr((1, 3, 1, 2))
    check(one_node("Squeeze", 1, axes=[-2, 0]), 11, x)
    check(one_node("Squeeze", 1), 11, x)
    check(one_node("Squeeze", 2), 13, x, np.array([-4], np.int64))
    check(one_node("Squeeze", 1), 13, x)
    check(one_node("Squeeze", 2), 13, x, np.array([], np.int64))
    with pytest.raises(ValueError):
        run_ours(one_node("Squeeze", 2), 13, x, np.array([1], np.int64))


def test_unsqueeze_versions() -> None:
    x = _arr((3, 2))
    check(one_node("Unsqueeze", 1, axes=[0, 3]), 1, x)
    check(one_node("Unsqueeze", 1, axes=[-1, 1]), 11, x)
    check(one_node("Unsqueeze", 2), 13, x, np.array([-1, 0, 2], np.int64))
    with pytest.raises(ValueError):
        run_ours(one_node("Unsqueeze", 2), 13, x, np.array([0, 0], np.int64))


def test_concat_strings_and_empty() -> None:
    a = np.array([["a", "b"]], dtype=object)
    b = np.array([["c", "d"], ["e", "f"]], dtype=object)
    (y,) = run_ours(one_node("Concat", 2, axis=-2), 13, a, b)
    assert y.tolist() == [["a", "b"], ["c", "d"], ["e", "f"]]
    check(one_node("Concat", 3, axis=1), 13, _arr((2, 0)), _arr((2, 3)), _arr((2, 1)))


def test_split_versions() -> None:
    x = _arr((6, 4), np.int32)
    check(one_node("Split", 1, 3, axis=0), 11, x)
    check(one_node("Split", 1, 2, axis=1, split=[1, 3]), 11, x)
    check(one_node("Split", 2, 3, axis=-2), 13, x, np.array([1, 2, 3], np.int64))
    check(one_node("Split", 1, 2, axis=1), 13, x)
    check(one_node("Split", 1, 3, axis=0, num_outputs=3), 18, x)
    check(one_node("Split", 1, 4, axis=1, num_outputs=4), 18, x)
    check(one_node("Split", 1, 3, axis=0, num_outputs=3), 18, _arr((7, 2)))  # 3, 3, 1
    with pytest.raises(ValueError):
        run_ours(one_node("Split", 1, 4, axis=0), 13, x)  # 6 does not split evenly into 4


def test_split_uneven_sizes() -> None:
    x = np.arange(7)
    ys = run_ours(one_node("Split", 1, 3, num_outputs=3), 18, x)
    assert [y.tolist() for y in ys] == [[0, 1, 2], [3, 4, 5], [6]]
    # ceil(4 / 3) = 2 per chunk leaves an empty last chunk (as onnx.reference does;
    # onnxruntime rejects this case).
    ys = run_ours(one_node("Split", 1, 3, num_outputs=3), 18, np.arange(4))
    assert [y.tolist() for y in ys] == [[0, 1], [2, 3], []]


def test_expand_bidirectional() -> None:
    x = _arr((3, 1), np.int16)
    check(one_node("Expand", 2), 13, x, np.array([2, 1, 4], np.int64))
    check(one_node("Expand", 2), 8, x, np.array([1, 1], np.int64))
    (y,) = run_ours(one_node("Expand", 2), 13, x, np.array([2, 3, 4], np.int64))
    assert y.flags.writeable and y.flags.c_contiguous


def test_tile() -> None:
    check(one_node("Tile", 2), 13, _arr((2, 3), np.int64), np.array([2, 3], np.int64))
    check(one_node("Tile", 2), 6, _arr((2, 3)).astype(bool), np.array([1, 0], np.int64))
    x = _arr((2, 3))
    (y,) = run_ours(one_node("Tile", 3), 1, x, np.float32(3), np.float32(1))
    np.testing.assert_array_equal(y, np.tile(x, (1, 3)))


@pytest.mark.parametrize(("start", "end"), [(0, None), (1, None), (-1, None), (-10, 2), (2, 1)])
def test_shape_start_end(start, end) -> None:
    attrs = {"start": start} if end is None else {"start": start, "end": end}
    check(one_node("Shape", 1, **attrs), 15, _arr((2, 3, 4, 5)))


def test_shape_size_scalar_input() -> None:
    x = np.array(3.0, np.float32)
    (s,) = run_ours(one_node("Shape", 1), 13, x)
    assert s.dtype == np.int64 and s.shape == (0,)
    (n,) = run_ours(one_node("Size", 1), 13, _arr((2, 5)))
    assert n.dtype == np.int64 and n.shape == () and int(n) == 10


def test_identity_passes_objects_through() -> None:
    seq = [np.ones(2), np.zeros(3)]
    (y,) = run_ours(one_node("Identity", 1), 16, seq)
    assert y is seq
    (y,) = run_ours(one_node("Identity", 1), 16, None)
    assert y is None


# ----------------------------------------------------------------------------- Dropout


@pytest.mark.parametrize("opset", [7, 10, 12, 13, 22])
def test_dropout_inference(opset) -> None:
    x = _arr((3, 4)).astype(np.float16)
    y, mask = run_ours(one_node("Dropout", 1, 2), opset, x)
    np.testing.assert_array_equal(y, x)
    assert y.dtype == np.float16
    assert mask.shape == x.shape and bool(np.all(mask))
    assert mask.dtype == (np.float16 if opset == 7 else np.bool_)


def test_dropout_legacy_is_test() -> None:
    x = _arr((50, 40))
    y, _ = run_ours(one_node("Dropout", 1, 2, is_test=1, ratio=0.5), 6, x)
    np.testing.assert_array_equal(y, x)
    y, mask = run_ours(one_node("Dropout", 1, 2, ratio=0.5), 6, x)
    assert mask.dtype == np.float32
    np.testing.assert_allclose(y, x * mask * 2.0, rtol=1e-6)
    assert 0.3 < mask.mean() < 0.7


@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16])
def test_dropout_training(dtype) -> None:
    x = (np.abs(_arr((64, 64))) + 1).astype(dtype)
    node = one_node("Dropout", 3, 2, seed=7)
    y, mask = run_ours(node, 22, x, np.float32(0.25), np.array(True))
    assert y.dtype == x.dtype and mask.dtype == np.bool_
    np.testing.assert_allclose(
        y.astype(np.float32),
        (x.astype(np.float32) * mask / 0.75).astype(dtype).astype(np.float32),
        rtol=1e-2,
    )
    assert 0.7 < mask.mean() < 0.8
    # The same seed gives the same mask in a fresh kernel.
    _, mask2 = run_ours(node, 22, x, np.float32(0.25), np.array(True))
    np.testing.assert_array_equal(mask, mask2)
    # training_mode false: identity.
    y3, mask3 = run_ours(node, 22, x, np.float32(0.25), np.array(False))
    np.testing.assert_array_equal(y3, x)
    assert mask3.all()


def test_dropout_ratio_one() -> None:
    x = _arr((4, 4))
    y, mask = run_ours(one_node("Dropout", 3, 2), 13, x, np.float32(1.0), np.array(True))
    assert not y.any() and not mask.any()


# ----------------------------------------------------------------------------- Trilu


@pytest.mark.parametrize("upper", [0, 1])
@pytest.mark.parametrize("k", [-2, 0, 1, 5])
def test_trilu_vs_ort(upper, k) -> None:
    check(
        one_node("Trilu", 2, upper=upper), 14, _arr((2, 3, 4, 5), np.int64), np.array(k, np.int64)
    )


def test_trilu_types() -> None:
    x = _arr((3, 3)).astype(ml_dtypes.bfloat16)
    (y,) = run_ours(one_node("Trilu", 1), 14, x)
    assert y.dtype == x.dtype
    np.testing.assert_array_equal(y.astype(np.float32), np.triu(x.astype(np.float32)))
    s = np.array([["a", "b"], ["c", "d"]], dtype=object)
    (y,) = run_ours(one_node("Trilu", 1, upper=0), 14, s)
    assert y.tolist() == [["a", ""], ["c", "d"]]


# ----------------------------------------------------------------------------- Pad


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
@pytest.mark.parametrize("pads", [[1, 2, 2, 1], [0, -1, 2, 0], [-1, 1, 0, -2]])
def test_pad_modes_vs_ort(mode, pads) -> None:
    x = _arr((4, 5), np.int32)
    check(one_node("Pad", 2, mode=mode), 19, x, np.array(pads, np.int64))


def test_pad_constant_value_and_axes() -> None:
    x = _arr((2, 3, 4))
    node = one_node("Pad", 4, mode="constant")
    check(node, 18, x, np.array([1, 2, 0, 3], np.int64), np.float32(-1.5), np.array([-1, 0]))
    check(one_node("Pad", 3), 11, x.astype(np.float64), np.array([0, 1, 1, 1, 0, 0]), np.float64(7))
    check(one_node("Pad", 2), 13, x.astype(np.uint8), np.array([0, 1, 1, 1, 0, 0], np.int64))


def test_pad_attribute_versions() -> None:
    x = _arr((2, 3))
    (y,) = run_ours(one_node("Pad", 1, pads=[0, 1, 1, 2], value=2.0), 2, x)
    np.testing.assert_array_equal(y, np.pad(x, [(0, 1), (1, 2)], constant_values=2.0))
    (y,) = run_ours(one_node("Pad", 1, paddings=[1, 0, 0, 0], mode="edge"), 1, x)
    np.testing.assert_array_equal(y, np.pad(x, [(1, 0), (0, 0)], mode="edge"))


def test_pad_wrap_needs_v19() -> None:
    with pytest.raises(InvalidGraph, match="wrap"):
        run_ours(one_node("Pad", 2, mode="wrap"), 18, _arr((2, 2)), np.array([1, 1, 1, 1]))


def test_pad_strings_and_bool() -> None:
    s = np.array(["a", "b"], dtype=object)
    (y,) = run_ours(one_node("Pad", 2), 13, s, np.array([1, 1], np.int64))
    assert y.tolist() == ["", "a", "b", ""]
    b = np.array([True, True])
    (y,) = run_ours(one_node("Pad", 2), 13, b, np.array([1, 0], np.int64))
    assert y.dtype == np.bool_ and y.tolist() == [False, True, True]


# ----------------------------------------------------------------------------- Depth/Space


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_depth_to_space_vs_ort(mode) -> None:
    check(one_node("DepthToSpace", 1, blocksize=2, mode=mode), 13, _arr((2, 8, 3, 2)))


def test_space_to_depth_vs_ort_and_roundtrip() -> None:
    x = _arr((2, 3, 4, 6))
    check(one_node("SpaceToDepth", 1, blocksize=2), 13, x)
    for mode in ("DCR", "CRD"):
        (d,) = run_ours(one_node("SpaceToDepth", 1, blocksize=2, mode=mode), 28, x)
        (back,) = run_ours(one_node("DepthToSpace", 1, blocksize=2, mode=mode), 28, d)
        np.testing.assert_array_equal(back, x)


# ----------------------------------------------------------------------------- misc


@pytest.mark.parametrize(("batch_axis", "time_axis"), [(0, 1), (1, 0)])
def test_reverse_sequence_vs_ort(batch_axis, time_axis) -> None:
    x = _arr((4, 5, 3))
    lens = np.array([1, 4, 0, 3, 2][: x.shape[batch_axis]], np.int64)
    if len(lens) < x.shape[batch_axis]:
        lens = np.resize(lens, x.shape[batch_axis])
    lens = np.minimum(lens, x.shape[time_axis])
    node = one_node("ReverseSequence", 2, batch_axis=batch_axis, time_axis=time_axis)
    check(node, 10, x, lens)


def test_compress_vs_ort() -> None:
    x = _arr((3, 4), np.int32)
    check(one_node("Compress", 2), 11, x, np.array([True, False, True]))
    check(one_node("Compress", 2, axis=-1), 11, x, np.array([False, True, True, False]))
    check(one_node("Compress", 2, axis=0), 11, x, np.array([False, True]))


@pytest.mark.parametrize("target", [[5, 3], [2, 8], [3, 4], [0, 1]])
def test_center_crop_pad_odd(target) -> None:
    x = _arr((4, 5), np.int32)
    (y,) = run_ours(one_node("CenterCropPad", 2), 18, x, np.array(target, np.int64))
    # numpy truth: crop start floor((d - t) / 2); pad left floor((t - d) / 2).
    want = np.zeros(target, np.int32)
    src, dst = [], []
    for d, t in zip(x.shape, target, strict=True):
        if t <= d:
            s = (d - t) // 2
            src.append(slice(s, s + t))
            dst.append(slice(0, t))
        else:
            s = (t - d) // 2
            src.append(slice(0, d))
            dst.append(slice(s, s + d))
    want[tuple(dst)] = x[tuple(src)]
    np.testing.assert_array_equal(y, want)
    assert y.dtype == np.int32
