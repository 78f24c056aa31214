"""Tests of the library's sampling and detection operators (onyxrt_ops.detection).

Every operator runs over numpy and over array_api_strict and is compared with onnxruntime
(or onnx's reference evaluator where onnxruntime has no kernel): GridSample's every mode,
padding mode and align_corners, 2-D and 3-D, the v16 names; RoiAlign avg/max, both
coordinate transformation modes, sampling ratios, regions with different sampling grids;
NonMaxSuppression with corner and center boxes, several classes and batches, optional
thresholds; Col2Im with strides, dilations, pads; MaxUnpool with and without
output_shape; DeformConv with groups, offset groups, masks and bias. Half-precision types
(which the array API standard lacks) run over numpy. Attribute errors are InvalidGraph when
the kernel is built; errors in the data are ValueError from compute.
"""

from __future__ import annotations

import itertools
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

from onyxrt.errors import InvalidGraph
from onyxrt.kernels import KernelInfo
from onyxrt_ops import library

DETECTION = {d.op_type for d in library.definitions if d.cls.__module__ == "onyxrt_ops.detection"}
TOL = {np.dtype(np.float32): (1e-5, 1e-5), np.dtype(np.float64): (1e-12, 1e-12),
       np.dtype(np.float16): (1e-3, 1e-3)}


def randn(*shape: int, seed: int = 0, dtype: Any = np.float32, scale: float = 1.0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(dtype)


def i64(*values: Any) -> np.ndarray:
    return np.array(values, np.int64)


def case(op: str, inputs: list[Any], opset: int, *, id: str, reference: bool = False,
         **attrs: Any) -> Any:
    """One case; ``reference``: onnx's reference evaluator is the oracle (onnxruntime's
    MaxUnpool reads the indices in output_shape's tensor, the onnx conformance data in the
    attributes' one)."""
    return pytest.param(op, inputs, opset, attrs, reference, id=id)


ROIS = np.array([[0, 0, 4, 4], [1, 2, 7.5, 6], [-2, -1, 3, 9], [2, 2, 2.2, 2.3]], np.float32)
ROI_BATCH = i64(0, 1, 1, 0)
BOXES = np.abs(randn(2, 12, 4, seed=3)) * 5
SCORES = np.abs(randn(2, 3, 12, seed=4))
UNPOOL_X = randn(1, 2, 2, 2)
UNPOOL_I = i64([[[0, 3], [10, 15]], [[16, 18], [25, 31]]]).reshape(1, 2, 2, 2)

GRID_CASES = [
    case("GridSample", [randn(2, 3, 5, 6), randn(2, 4, 3, 2, seed=1, scale=1.3)], 22,
         mode=mode, padding_mode=pad, align_corners=align, id=f"GridSample-{mode}-{pad}-{align}")
    for mode, pad, align in itertools.product(("linear", "nearest", "cubic"),
                                              ("zeros", "border", "reflection"), (0, 1))
]
CASES = GRID_CASES + [
    case("GridSample", [randn(1, 2, 4, 5, 3), randn(1, 2, 3, 4, 3, seed=1, scale=1.3)], 22,
         padding_mode="reflection", id="GridSample-3d"),
    case("GridSample", [randn(1, 2, 4, 5, 3), randn(1, 2, 3, 4, 3, seed=1, scale=1.3)], 20,
         mode="nearest", align_corners=1, id="GridSample-20-3d-nearest"),
    case("GridSample", [randn(1, 2, 5, 6), randn(1, 3, 3, 2, seed=1)], 16, id="GridSample-16"),
    case("GridSample", [randn(1, 2, 5, 6), randn(1, 3, 3, 2, seed=1)], 16, mode="bicubic",
         padding_mode="border", id="GridSample-16-bicubic"),
    case("GridSample", [randn(1, 2, 5, 6, dtype=np.float64), randn(1, 3, 3, 2, seed=1,
                        dtype=np.float64)], 20, id="GridSample-f64"),
    # RoiAlign
    *[case("RoiAlign", [randn(2, 3, 8, 9), ROIS, ROI_BATCH], 16, mode=mode,
           coordinate_transformation_mode=ctm, sampling_ratio=ratio, output_height=3,
           output_width=2, spatial_scale=0.9, id=f"RoiAlign-{mode}-{ctm}-{ratio}")
      for mode, ctm, ratio in itertools.product(("avg", "max"),
                                                ("half_pixel", "output_half_pixel"), (0, 2))],
    case("RoiAlign", [randn(2, 3, 8, 9, dtype=np.float64), ROIS.astype(np.float64), ROI_BATCH],
         10, output_height=2, output_width=2, id="RoiAlign-10-f64"),
    case("RoiAlign", [randn(1, 2, 8, 8), ROIS[:1], i64(0)], 22, id="RoiAlign-22"),
    # NonMaxSuppression (int64 output)
    case("NonMaxSuppression", [BOXES, SCORES, i64(3), np.array([0.3], np.float32),
                               np.array([0.2], np.float32)], 11, id="NonMaxSuppression"),
    case("NonMaxSuppression", [BOXES, SCORES, i64(4), np.array([0.4], np.float32)], 11,
         center_point_box=1, id="NonMaxSuppression-center"),
    case("NonMaxSuppression", [BOXES, SCORES, i64(5), np.array([0.5], np.float32)], 10,
         id="NonMaxSuppression-10"),
    case("NonMaxSuppression", [BOXES, SCORES], 11, id="NonMaxSuppression-no-limit"),
    # Col2Im
    case("Col2Im", [randn(1, 5 * 4, 12), i64(4, 5), i64(2, 2)], 18, id="Col2Im"),
    case("Col2Im", [randn(2, 2 * 6, 12), i64(5, 5), i64(2, 3)], 18, strides=[2, 1],
         pads=[1, 0, 1, 1], id="Col2Im-strides-pads"),
    case("Col2Im", [randn(1, 4, 9, dtype=np.float64), i64(5, 5), i64(2, 2)], 18,
         dilations=[2, 2], strides=[1, 1], id="Col2Im-dilations-f64"),
    case("Col2Im", [randn(1, 8, 24), i64(3, 4, 5), i64(2, 2, 2)], 18, id="Col2Im-3d"),
    # MaxUnpool
    case("MaxUnpool", [UNPOOL_X, UNPOOL_I], 11, kernel_shape=[2, 2], strides=[2, 2],
         id="MaxUnpool"),
    case("MaxUnpool", [UNPOOL_X, UNPOOL_I, i64(1, 2, 5, 5)], 11, kernel_shape=[2, 2],
         strides=[2, 2], reference=True, id="MaxUnpool-output-shape"),
    case("MaxUnpool", [UNPOOL_X, UNPOOL_I], 9, kernel_shape=[2, 2], strides=[2, 2],
         id="MaxUnpool-9"),
    case("MaxUnpool", [randn(1, 1, 3), i64(0, 2, 3).reshape(1, 1, 3)], 22, kernel_shape=[2],
         id="MaxUnpool-1d"),
]

DEFORM_X = randn(2, 4, 6, 5)


def _deform(group: int, offset_group: int, masked: bool, bias: bool) -> list[Any]:
    w = randn(4, 4 // group, 3, 2, seed=1)
    off = randn(2, offset_group * 6 * 2, 6, 2, seed=2)
    mask = np.abs(randn(2, offset_group * 6, 6, 2, seed=3)) if masked else None
    return [DEFORM_X, w, off, randn(4, seed=4) if bias else None, mask]


DEFORM_CASES = [
    pytest.param(_deform(1, 1, False, False), 19, {}, id="DeformConv"),
    pytest.param(_deform(2, 2, True, True), 22, {"group": 2, "offset_group": 2},
                 id="DeformConv-groups-mask-bias"),
    pytest.param(_deform(1, 2, True, False), 19, {"offset_group": 2}, id="DeformConv-offset-group"),
    pytest.param([DEFORM_X.astype(np.float64), randn(3, 4, 3, 2, seed=1, dtype=np.float64),
                  randn(2, 12, 6, 2, seed=2, dtype=np.float64)], 22, {}, id="DeformConv-f64"),
]


@pytest.mark.parametrize(("op", "inputs", "opset", "attrs", "reference"), CASES)
def test_same_as_onnxruntime(bound: Bound, op, inputs, opset, attrs, reference):
    got = bound.run(op, inputs, opset, **attrs)
    out_dtype = np.int64 if op == "NonMaxSuppression" else np.asarray(inputs[0]).dtype
    expected = typed_oracle(op, inputs, opset, out_dtype, reference=reference, **attrs)
    assert_matches(got, np.asarray(expected), TOL)


@pytest.mark.parametrize(("inputs", "opset", "attrs"), DEFORM_CASES)
def test_deform_conv_same_as_the_reference(bound: Bound, inputs, opset, attrs):
    """Pads [1, 0, 1, 0] and strides [1, 2] make the output 6x2 (onnxruntime runs 2-D
    DeformConv only; where it has none, onnx's reference evaluator is the oracle)."""
    attrs = {**attrs, "pads": [1, 0, 1, 0], "strides": [1, 2]}
    got = bound.run("DeformConv", inputs, opset, **attrs)
    assert_matches(got, np.asarray(oracle("DeformConv", inputs, opset, **attrs)), TOL)


def test_deform_conv_1d_is_2d_with_a_unit_axis(bound: Bound):
    """Neither oracle runs a 1-D DeformConv: it equals the 2-D one over a height-1 image
    with a height-1 kernel and zero offsets on the height axis."""
    x, w = randn(1, 2, 7), randn(3, 2, 3, seed=1)
    off = randn(1, 3, 3, seed=2, scale=0.7)
    got = bound.run("DeformConv", [x, w, off], 22, dilations=[2])
    off2d = np.stack([np.zeros_like(off), off], axis=2).reshape(1, 6, 1, 3)
    want = bound.run("DeformConv", [x[:, :, None], w[:, :, None], off2d], 22, dilations=[1, 2])
    assert_matches(got, want[:, :, 0], TOL)


def test_every_operator_has_a_case():
    assert {p.values[0] for p in CASES} | {"DeformConv"} == DETECTION


def test_every_onnx_version_is_bound(numpy_bound: Bound):
    assert not unbound_versions(numpy_bound.registry, DETECTION)


def test_steering_inputs_are_host_inputs(numpy_bound: Bound):
    host = {("RoiAlign", 22): {1, 2}, ("NonMaxSuppression", 11): {2, 3, 4},
            ("Col2Im", 18): {1, 2}, ("MaxUnpool", 22): {2}, ("GridSample", 22): set(),
            ("DeformConv", 22): set()}
    for (op, opset), want in host.items():
        kdef, _ = numpy_bound.registry.lookup("", op, opset)
        assert set(kdef.host_inputs) == want, op


@pytest.mark.parametrize(("op", "inputs", "opset", "attrs"), [
    ("GridSample", [randn(1, 2, 5, 6), randn(1, 3, 3, 2, seed=1)], 22, {"mode": "cubic"}),
    ("RoiAlign", [randn(2, 3, 8, 9), ROIS, ROI_BATCH], 16, {"output_height": 2}),
    ("Col2Im", [randn(1, 5 * 4, 12), i64(4, 5), i64(2, 2)], 18, {}),
    ("MaxUnpool", [UNPOOL_X, UNPOOL_I], 11, {"kernel_shape": [2, 2], "strides": [2, 2]}),
], ids=["GridSample", "RoiAlign", "Col2Im", "MaxUnpool"])
def test_half_precision_rounds_the_float32_result(numpy_bound: Bound, op, inputs, opset, attrs):
    """float16 computes in float32 and rounds once (numpy only: the standard has no float16)."""
    half = [v.astype(np.float16) if v.dtype == np.float32 else v for v in inputs]
    got = numpy_bound.run(op, half, opset, **attrs)
    want = numpy_bound.run(op, [v.astype(np.float32) if v.dtype == np.float16 else v
                                for v in half], opset, **attrs)
    assert_matches(got, want.astype(np.float16), TOL)


def test_integer_grid_sample_rounds(bound: Bound):
    x = np.random.default_rng(0).integers(-9, 9, (1, 2, 5, 6)).astype(np.int32)
    grid = randn(1, 3, 3, 2, seed=1)
    got = bound.run("GridSample", [x, grid], 22)
    want = np.rint(bound.run("GridSample", [x.astype(np.float64), grid.astype(np.float64)], 22))
    assert_matches(got, want.astype(np.int32), TOL)


def test_roi_align_without_regions(bound: Bound):
    got = bound.run("RoiAlign", [randn(1, 3, 8, 8), np.zeros((0, 4), np.float32), i64()], 16,
                    output_height=2, output_width=3)
    assert_matches(got, np.zeros((0, 3, 2, 3), np.float32), TOL)


def test_max_unpool_last_duplicate_wins(bound: Bound):
    x = np.array([1, 2, 3, 4], np.float32).reshape(1, 1, 2, 2)
    idx = i64(5, 5, 0, 5).reshape(1, 1, 2, 2)
    got = bound.run("MaxUnpool", [x, idx], 11, kernel_shape=[2, 2], strides=[2, 2])
    want = np.zeros(16, np.float32)
    want[[0, 5]] = [3, 4]
    assert_matches(got, want.reshape(1, 1, 4, 4), TOL)


def test_max_unpool_output_shape_crops(bound: Bound):
    """A smaller output_shape crops the unpooled tensor (neither oracle runs it)."""
    attrs = {"kernel_shape": [2, 2], "strides": [2, 2]}
    full = bound.run("MaxUnpool", [UNPOOL_X, UNPOOL_I], 22, **attrs)
    got = bound.run("MaxUnpool", [UNPOOL_X, UNPOOL_I, i64(1, 2, 3, 4)], 22, **attrs)
    assert_matches(got, full[:, :, :3, :], TOL)


def test_non_max_suppression_selects_nothing_without_a_limit(bound: Bound):
    got = bound.run("NonMaxSuppression", [BOXES, SCORES, i64(0)], 11)
    assert_matches(got, np.zeros((0, 3), np.int64), TOL)


# -------------------------------------------------------------------------- errors


def _build(bound: Bound, op: str, n_inputs: int, opset: int, **attrs: Any) -> Any:
    kdef, _ = bound.registry.lookup("", op, opset)
    n = node(op, n_inputs, **attrs)
    return kdef.factory(KernelInfo.from_node(n, opset, since_version=kdef.since_version))


@pytest.mark.parametrize(("op", "n_inputs", "opset", "attrs"), [
    ("GridSample", 2, 22, {"mode": "bilinear"}),  # a v16 name
    ("GridSample", 2, 16, {"mode": "linear"}),  # a v20 name
    ("GridSample", 2, 22, {"padding_mode": "wrap"}),
    ("GridSample", 2, 22, {"align_corners": 2}),
    ("RoiAlign", 3, 16, {"mode": "sum"}),
    ("RoiAlign", 3, 16, {"coordinate_transformation_mode": "asymmetric"}),
    ("RoiAlign", 3, 16, {"output_height": 0}),
    ("RoiAlign", 3, 16, {"sampling_ratio": -1}),
    ("NonMaxSuppression", 2, 11, {"center_point_box": 2}),
    ("DeformConv", 3, 19, {"group": 0}),
    ("MaxUnpool", 2, 11, {}),  # kernel_shape is required
])
def test_bad_attributes_are_invalid_graphs(bound: Bound, op, n_inputs, opset, attrs):
    with pytest.raises(InvalidGraph, match=f"{op}_node"):
        _build(bound, op, n_inputs, opset, **attrs)


@pytest.mark.parametrize(("op", "inputs", "opset", "attrs", "match"), [
    ("GridSample", [randn(1, 2, 5, 6), randn(1, 3, 3, 3)], 22, {}, "does not fit"),
    ("GridSample", [randn(1, 2, 5, 6), randn(2, 3, 3, 2)], 22, {}, "does not fit"),
    ("RoiAlign", [randn(1, 3, 8, 9), ROIS, ROI_BATCH], 16, {}, "batch_indices"),
    ("RoiAlign", [randn(3, 8, 9), ROIS, ROI_BATCH], 16, {}, "must be 4-D"),
    ("NonMaxSuppression", [BOXES[..., :3], SCORES, i64(3)], 11, {}, "must be"),
    ("NonMaxSuppression", [BOXES, SCORES[:, :, :5], i64(3)], 11, {}, "do not match"),
    ("Col2Im", [randn(1, 7, 12), i64(4, 5), i64(2, 2)], 18, {}, "not a multiple"),
    ("Col2Im", [randn(1, 8, 11), i64(4, 5), i64(2, 2)], 18, {}, "blocks"),
    ("Col2Im", [randn(1, 8, 12), np.array([4.0, 5.0]), i64(2, 2)], 18, {}, "int64"),
    ("MaxUnpool", [UNPOOL_X, UNPOOL_I * 2], 11, {"kernel_shape": [2, 2], "strides": [2, 2]},
     "outside"),
    ("MaxUnpool", [UNPOOL_X, UNPOOL_I[..., :1]], 11, {"kernel_shape": [2, 2]}, "must match"),
    ("MaxUnpool", [UNPOOL_X, UNPOOL_I, i64(1, 3, 4, 4)], 11,
     {"kernel_shape": [2, 2], "strides": [2, 2]}, "does not fit"),
    ("DeformConv", [randn(1, 2, 5, 5), randn(3, 2, 2, 2), randn(1, 7, 4, 4)], 19, {}, "offset"),
    ("DeformConv", [randn(1, 3, 5, 5), randn(4, 3, 2, 2), randn(1, 8, 4, 4)], 19,
     {"group": 2}, "channels"),
], ids=lambda v: v if isinstance(v, str) and not v.startswith(("does", "must", "do ", "not")) else None)
def test_bad_data_is_a_value_error(bound: Bound, op, inputs, opset, attrs, match):
    with pytest.raises(ValueError, match=match):
        bound.run(op, inputs, opset, **attrs)
