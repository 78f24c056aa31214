"""Tests of the CPU resize kernels (onyxrt_cpu/kernels/resize.py): Resize and Upsample.

The ONNX node conformance cases run straight through the kernel registry; targeted tests
compare 4-D mode / coordinate-transformation combinations, antialiasing, axes,
keep_aspect_ratio_policy, dtypes and the old versions against onnxruntime, and N-D inputs
against onnx's reference evaluator.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import onnx
import pytest
from kernel_cases import (
    assert_all_versions_registered,
    conformance_params,
    one_node,
    one_node_model,
    run_case,
    run_onnxruntime,
    run_ours,
)
from onnx.reference import ReferenceEvaluator

from onyxrt.errors import InvalidGraph
from onyxrt.kernels import KernelInfo
from onyxrt_cpu.kernels import registry

OPS = ["Resize", "Upsample"]

#: Conformance cases this module cannot pass, with the reason. (None at present.)
EXPECTED_FAILURES: dict[str, str] = {}


@pytest.mark.parametrize("case", conformance_params(OPS, EXPECTED_FAILURES))
def test_conformance(case) -> None:
    run_case(case)


def test_every_schema_version_registered() -> None:
    assert_all_versions_registered(OPS)


# ----------------------------------------------------------------------------- helpers


def _node(op: str = "Resize", inputs: tuple[str, ...] = ("X", "", "scales"), **attrs):
    return one_node(op, inputs, ["Y"], **attrs)


def ours(node: onnx.NodeProto, opset: int, *inputs: Any) -> np.ndarray:
    (y,) = run_ours(node, opset, *inputs)
    return y


def _as_exported(inputs: tuple[Any, ...]) -> dict[str, Any]:
    """Model options for a Resize/Upsample node: Y typed like X, and scales/sizes/roi as
    initializers, as exporters write them."""
    return {"output_types": [np.asarray(inputs[0]).dtype], "constants": range(1, len(inputs))}


def theirs(node: onnx.NodeProto, opset: int, *inputs: Any) -> np.ndarray:
    return run_onnxruntime(node, opset, inputs, **_as_exported(inputs))[0]


def reference(node: onnx.NodeProto, opset: int, *inputs: Any) -> np.ndarray:
    model, feeds = one_node_model(node, opset, inputs, **_as_exported(inputs))
    return ReferenceEvaluator(model).run(None, feeds)[0]


def check(node, opset, *inputs, oracle=theirs, rtol=1e-5, atol=1e-5) -> np.ndarray:
    got = ours(node, opset, *inputs)
    want = oracle(node, opset, *inputs)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape, (got.shape, want.shape)
    if got.dtype.kind in "fV":
        np.testing.assert_allclose(
            got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol
        )
    else:
        np.testing.assert_array_equal(got, want)
    return got


RNG = np.random.default_rng(99)
X4 = RNG.standard_normal((2, 3, 5, 7)).astype(np.float32)


def _f32(v) -> np.ndarray:
    return np.array(v, dtype=np.float32)


def _i64(v) -> np.ndarray:
    return np.array(v, dtype=np.int64)


# ----------------------------------------------------------------------------- 4-D vs ORT

SCALE_SETS = [(1, 1, 2, 3), (1, 1, 0.5, 0.25), (1, 1, 1.7, 0.8), (1, 1, 3, 1)]
SIZE_SETS = [(2, 3, 10, 21), (2, 3, 7, 5), (2, 3, 2, 3)]


@pytest.mark.parametrize(
    "nearest_mode", ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]
)
@pytest.mark.parametrize("ctm", ["half_pixel", "asymmetric", "pytorch_half_pixel", "align_corners"])
def test_nearest_4d_vs_ort(ctm, nearest_mode) -> None:
    node = _node(
        inputs=("X", "", "", "sizes"), coordinate_transformation_mode=ctm, nearest_mode=nearest_mode
    )
    for sizes in SIZE_SETS:
        check(node, 19, X4, None, None, _i64(sizes))
    if ctm != "align_corners":  # with scales, align_corners follows the spec (see below)
        node = _node(coordinate_transformation_mode=ctm, nearest_mode=nearest_mode)
        for scales in [(1, 1, 2, 3), (1, 1, 0.5, 0.25), (1, 1, 3, 1)]:
            check(node, 13, X4, None, _f32(scales))


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize(
    "ctm", ["half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "asymmetric"]
)
def test_linear_cubic_4d_scales_vs_ort(mode, ctm) -> None:
    node = _node(mode=mode, coordinate_transformation_mode=ctm)
    for scales in SCALE_SETS:
        check(node, 19, X4, None, _f32(scales))


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("ctm", ["half_pixel", "align_corners", "asymmetric"])
def test_linear_cubic_4d_sizes_vs_ort(mode, ctm) -> None:
    node = _node(inputs=("X", "", "", "sizes"), mode=mode, coordinate_transformation_mode=ctm)
    for sizes in SIZE_SETS:
        check(node, 13, X4, None, None, _i64(sizes))


@pytest.mark.parametrize("a", [-0.5, -0.75])
@pytest.mark.parametrize("exclude_outside", [0, 1])
def test_cubic_coeff_and_exclude_outside_vs_ort(a, exclude_outside) -> None:
    node = _node(
        inputs=("X", "roi", "scales"),
        mode="cubic",
        cubic_coeff_a=a,
        exclude_outside=exclude_outside,
    )
    for scales in SCALE_SETS:
        check(node, 11, X4, np.zeros(0, np.float32), _f32(scales))


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("exclude_outside", [0, 1])
def test_antialias_vs_ort_and_reference(mode, exclude_outside) -> None:
    x = RNG.standard_normal((2, 3, 9, 11)).astype(np.float32)
    node = _node(mode=mode, antialias=1, exclude_outside=exclude_outside)
    for scales in [(1, 1, 0.5, 0.35), (1, 1, 0.25, 1.5), (1, 1, 2, 0.75)]:
        check(node, 19, x, None, _f32(scales))
        check(node, 18, x, None, _f32(scales), oracle=reference)


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_tf_crop_and_resize_vs_ort(mode) -> None:
    node = _node(
        inputs=("X", "roi", "", "sizes"),
        mode=mode,
        coordinate_transformation_mode="tf_crop_and_resize",
        extrapolation_value=-7.0,
    )
    roi = _f32([0, 0, 0.2, -0.3, 1, 1, 0.7, 1.4])
    for sizes in [(2, 3, 4, 9), (2, 3, 8, 3), (2, 3, 1, 1)]:
        got = check(node, 19, X4, roi, None, _i64(sizes))
        assert (got == -7.0).any() or sizes[2] == 1


def test_align_corners_and_crop_with_scales_follow_spec() -> None:
    """With scales, the spec resizes to the unrounded length in_size * scale (onnx's
    reference does; onnxruntime uses the rounded output size)."""
    x = np.arange(1, 17, dtype=np.float32).reshape(1, 1, 4, 4)
    node = _node(mode="linear", coordinate_transformation_mode="align_corners")
    y = ours(node, 19, x, None, _f32([1, 1, 0.6, 0.6]))
    np.testing.assert_allclose(y.ravel(), [1, 3 + 1 / 7, 9 + 4 / 7, 11 + 5 / 7], rtol=1e-6)
    for mode in ["linear", "cubic"]:
        for ctm in ["align_corners", "tf_crop_and_resize"]:
            roi = _f32([0, 0, 0.1, 0.2, 1, 1, 0.9, 1.0])
            node = _node(
                inputs=("X", "roi", "scales"), mode=mode, coordinate_transformation_mode=ctm
            )
            check(node, 19, X4, roi, _f32([1, 1, 1.7, 0.8]), oracle=reference, rtol=1e-4)


@pytest.mark.parametrize("policy", ["stretch", "not_larger", "not_smaller"])
@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_axes_and_keep_aspect_ratio_vs_ort(policy, mode) -> None:
    x = RNG.standard_normal((2, 3, 9, 11)).astype(np.float32)
    node = _node(
        inputs=("X", "", "", "sizes"), mode=mode, axes=[3, 2], keep_aspect_ratio_policy=policy
    )
    want = check(node, 19, x, None, None, _i64([4, 20]))
    # Negative axes mean the same (onnxruntime 1.31 ignores them in keep_aspect_ratio).
    neg = _node(
        inputs=("X", "", "", "sizes"), mode=mode, axes=[-1, -2], keep_aspect_ratio_policy=policy
    )
    np.testing.assert_array_equal(ours(neg, 19, x, None, None, _i64([4, 20])), want)
    node = _node(mode=mode, axes=[2, 3])
    check(node, 18, x, None, _f32([1.5, 0.5]))


def test_keep_aspect_ratio_shapes() -> None:
    x = np.zeros((1, 1, 2, 4), np.float32)
    for policy, shape in [("not_larger", (1, 1, 1, 2)), ("not_smaller", (1, 1, 2, 3))]:
        node = _node(inputs=("X", "", "", "sizes"), axes=[2, 3], keep_aspect_ratio_policy=policy)
        assert ours(node, 19, x, None, None, _i64([1, 3])).shape == shape


# ----------------------------------------------------------------------------- dtypes


@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("dtype", [np.float16, np.uint8, np.int8, np.int32])
def test_dtypes_vs_ort(mode, dtype) -> None:
    if dtype in (np.uint8, np.int8):
        x = RNG.integers(-100 if dtype == np.int8 else 0, 100, (1, 2, 5, 6)).astype(dtype)
    else:
        x = (RNG.standard_normal((1, 2, 5, 6)) * 50).astype(dtype)
    node = _node(mode=mode)
    tol = 2e-2 if dtype == np.float16 else 1e-6
    # Exact-binary scales keep integer results away from truncation ties.
    check(node, 13, x, None, _f32([1, 1, 2, 4]), rtol=tol, atol=tol)


def test_other_dtypes() -> None:
    x = RNG.standard_normal((1, 1, 3, 4)).astype(ml_dtypes.bfloat16)
    for mode in ["nearest", "linear", "cubic"]:
        y = ours(_node(mode=mode), 19, x, None, _f32([1, 1, 2, 2]))
        assert y.dtype == x.dtype and y.shape == (1, 1, 6, 8)
        y32 = ours(_node(mode=mode), 19, x.astype(np.float32), None, _f32([1, 1, 2, 2]))
        np.testing.assert_allclose(y.astype(np.float32), y32, rtol=2e-2, atol=2e-2)
    s = np.array([["a", "b"], ["c", "d"]], dtype=object)
    y = ours(_node(mode="nearest"), 19, s, None, _f32([1, 2]))
    assert y.tolist() == [["a", "a", "b", "b"], ["c", "c", "d", "d"]]
    b = np.array([[True, False]])
    y = ours(_node(mode="nearest"), 13, b, None, _f32([2, 1.5]))
    assert y.dtype == np.bool_ and y.tolist() == [[True, True, False]] * 2
    y = ours(_node(mode="cubic"), 19, X4.astype(np.float64), None, _f32([1, 1, 2, 0.5]))
    assert y.dtype == np.float64
    y32 = ours(_node(mode="cubic"), 19, X4, None, _f32([1, 1, 2, 0.5]))
    np.testing.assert_allclose(y, y32, rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------- N-D


@pytest.mark.parametrize(
    ("shape", "scales"),
    [((7,), (1.6,)), ((3, 5, 6), (1, 2, 0.5)), ((2, 3, 4, 5, 6), (1, 1.5, 2, 0.5, 1.4))],
)
@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_nd_vs_reference(shape, scales, mode) -> None:
    x = RNG.standard_normal(shape).astype(np.float32)
    for ctm in ["half_pixel", "asymmetric", "pytorch_half_pixel"]:
        node = _node(mode=mode, coordinate_transformation_mode=ctm)
        check(node, 19, x, None, _f32(scales), oracle=reference, rtol=1e-4, atol=1e-5)


def test_nearest_integer_upsample_is_repeat() -> None:
    x = RNG.standard_normal((2, 3, 4, 5, 6)).astype(np.float32)
    node = _node(coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    y = ours(node, 13, x, None, _f32([1, 2, 1, 3, 2]))
    np.testing.assert_array_equal(y, x.repeat(2, 1).repeat(3, 3).repeat(2, 4))


# ----------------------------------------------------------------------------- old versions


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_resize10_and_upsample_vs_ort(mode) -> None:
    for scales in [(1, 1, 2, 3), (1, 1, 0.5, 0.7), (1, 1, 1.5, 0.6), (1, 1, 2.5, 1.3)]:
        check(_node(inputs=("X", "scales"), mode=mode), 10, X4, _f32(scales))
        if min(scales) >= 1:
            up9 = check(_node("Upsample", ("X", "scales"), mode=mode), 9, X4, _f32(scales))
            up7 = ours(_node("Upsample", ("X",), mode=mode, scales=list(scales)), 7, X4)
            np.testing.assert_array_equal(up7, up9)


def test_upsample_v1_attributes() -> None:
    x = np.array([[[[1, 2], [3, 4]]]], np.float32)
    node = _node("Upsample", ("X",), mode="nearest", height_scale=2.0, width_scale=3.0)
    np.testing.assert_array_equal(ours(node, 1, x), x.repeat(2, 2).repeat(3, 3))
    node = _node("Upsample", ("X",), mode="bilinear", height_scale=2.0, width_scale=2.0)
    y = ours(node, 1, x)
    np.testing.assert_allclose(y[0, 0, 0], [1, 1.5, 2, 2])


# ----------------------------------------------------------------------------- behaviour


def test_cache_reused_and_keyed_by_shape() -> None:
    kdef, _ = registry.lookup("", "Resize", 19)
    node = _node(mode="linear")
    kernel = kdef.factory(KernelInfo.from_node(node, 19, since_version=kdef.since_version))
    sc = _f32([1, 1, 2, 2])
    a = RNG.standard_normal((1, 2, 3, 4)).astype(np.float32)
    b = RNG.standard_normal((1, 2, 5, 3)).astype(np.float32)
    for x in (a, b, a):
        (y,) = kernel.compute(x, None, sc)
        np.testing.assert_allclose(y, ours(node, 19, x, None, sc))
        assert y.shape == (1, 2, 2 * x.shape[2], 2 * x.shape[3])
    assert len(kernel._cache) == 2


def test_identity_and_no_input_modification() -> None:
    x = X4.copy()
    y = ours(_node(mode="cubic"), 19, x, None, _f32([1, 1, 1, 1]))
    np.testing.assert_array_equal(y, X4)
    ours(_node(mode="linear"), 19, x, None, _f32([1, 1, 2, 0.5]))
    np.testing.assert_array_equal(x, X4)


def test_inf_stays_local() -> None:
    x = np.zeros((1, 1, 8, 8), np.float32)
    x[0, 0, 0, 0] = np.inf
    y = ours(_node(mode="linear"), 19, x, None, _f32([1, 1, 2, 2]))
    assert np.isinf(y[0, 0, 0, 0]) and np.isfinite(y[0, 0, 4:, 4:]).all()


def test_bad_attributes_and_inputs() -> None:
    with pytest.raises(InvalidGraph, match="mode"):
        ours(_node(mode="bicubic"), 19, X4, None, _f32([1, 1, 2, 2]))
    with pytest.raises(InvalidGraph, match="coordinate_transformation_mode"):
        ours(
            _node(coordinate_transformation_mode="tf_half_pixel_for_nn"),
            13,
            X4,
            None,
            _f32([1, 1, 2, 2]),
        )
    with pytest.raises(ValueError, match="exactly one"):
        ours(
            _node(inputs=("X", "", "scales", "sizes")),
            13,
            X4,
            None,
            _f32([1, 1, 2, 2]),
            _i64([2, 3, 4, 4]),
        )
    with pytest.raises(ValueError, match="scales"):
        ours(_node(), 13, X4, None, _f32([2, 2]))
