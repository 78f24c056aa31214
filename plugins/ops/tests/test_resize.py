"""Tests of the library's Resize and Upsample (onyxrt_ops.resize).

Each mode runs over numpy and over array_api_strict and is compared with onnxruntime (or
onnx's reference evaluator): nearest with each nearest_mode, linear and cubic with the
coordinate transformation modes, antialias, exclude_outside, tf_crop_and_resize with
extrapolation, sizes with keep_aspect_ratio_policy and axes, integer inputs, Resize-10 and
Upsample. Strings are refused at capability time; bad attributes are InvalidGraph, bad
data ValueError.
"""

from __future__ import annotations

import numpy as np
import pytest
from library_harness import Bound, node, oracle, unbound_versions
from onnx import TensorProto

from onyxrt.errors import InvalidGraph
from onyxrt.kernels import KernelInfo, ValueType
from onyxrt_ops import library

X = np.random.default_rng(0).standard_normal((1, 2, 4, 5)).astype(np.float32)
UP = np.array([1, 1, 2, 2], np.float32)
DOWN = np.array([1, 1, 0.6, 0.5], np.float32)
NONE = None

CASES = [
    ([X, NONE, UP], 19, {"mode": "nearest"}),
    ([X, NONE, DOWN], 19, {"mode": "nearest", "nearest_mode": "ceil"}),
    ([X, NONE, UP], 13, {"mode": "nearest", "nearest_mode": "floor",
                         "coordinate_transformation_mode": "asymmetric"}),
    ([X, NONE, UP], 19, {"mode": "linear"}),
    ([X, NONE, DOWN], 19, {"mode": "linear", "antialias": 1}),
    ([X, NONE, UP], 19, {"mode": "linear", "coordinate_transformation_mode": "align_corners"}),
    ([X, NONE, UP], 19, {"mode": "cubic", "exclude_outside": 1}),
    ([X, NONE, DOWN], 19, {"mode": "cubic", "coordinate_transformation_mode": "pytorch_half_pixel"}),
    ([X, NONE, UP], 19, {"mode": "linear", "coordinate_transformation_mode": "half_pixel_symmetric"}),
    ([X, np.array([0, 0, 0.2, -0.1, 1, 1, 0.8, 1.2], np.float32), UP], 13,
     {"mode": "linear", "coordinate_transformation_mode": "tf_crop_and_resize",
      "extrapolation_value": 7.0}),
    ([X, NONE, NONE, np.array([7, 3], np.int64)], 19, {"mode": "linear", "axes": [2, 3],
                                                       "keep_aspect_ratio_policy": "not_larger"}),
    ([X, NONE, NONE, np.array([1, 2, 9, 7], np.int64)], 11, {"mode": "nearest"}),
    ([(X * 40).astype(np.int8), NONE, UP], 19, {"mode": "linear"}),
    ([(X * 40 + 100).astype(np.uint8), NONE, DOWN], 19, {"mode": "nearest"}),
]


@pytest.mark.parametrize(("inputs", "opset", "attrs"), CASES, ids=[str(i) for i in range(len(CASES))])
def test_same_as_onnxruntime(bound: Bound, inputs, opset, attrs):
    inputs = [np.zeros(0, np.float32) if v is None and i == 1 else v for i, v in enumerate(inputs)]
    got = bound.run("Resize", inputs, opset, **attrs)
    want = oracle("Resize", inputs, opset, **attrs)
    assert got.dtype == want.dtype and got.shape == want.shape
    if want.dtype.kind == "f":
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    else:
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_old_versions(bound: Bound, mode):
    for op, opset in (("Resize", 10), ("Upsample", 9)):
        got = bound.run(op, [X, UP], opset, mode=mode)
        want = oracle(op, [X, UP], opset, mode=mode)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    got = bound.run("Upsample", [X], 7, mode=mode, scales=[1.0, 1.0, 2.0, 2.0])
    np.testing.assert_allclose(got, bound.run("Resize", [X, UP], 10, mode=mode), rtol=0, atol=0)


def test_every_onnx_version_is_bound(numpy_bound: Bound):
    assert not unbound_versions(numpy_bound.registry, ("Resize", "Upsample"))
    assert {"Resize", "Upsample"} <= library.op_types()


def test_strings_are_refused_at_capability_time(bound: Bound):
    kdef, _ = bound.registry.lookup("", "Resize", 19)
    text, f = ValueType("tensor", TensorProto.STRING), ValueType("tensor", TensorProto.FLOAT)
    assert kdef.unsupported_type([f, f, f], [f]) is None
    assert kdef.unsupported_type([text, f, f], [text]) is not None


@pytest.mark.parametrize("attrs", [{"mode": "area"}, {"nearest_mode": "simple"},
                                   {"coordinate_transformation_mode": "tf_half_pixel_for_nn"},
                                   {"keep_aspect_ratio_policy": "fit"}, {"axes": [1, 1]}])
def test_bad_attributes_are_invalid_graph(numpy_bound: Bound, attrs):
    kdef, _ = numpy_bound.registry.lookup("", "Resize", 19)
    with pytest.raises(InvalidGraph, match="Resize_node"):
        kdef.factory(KernelInfo.from_node(node("Resize", 3, **attrs), 19, since_version=19))


@pytest.mark.parametrize(("inputs", "match"), [
    ([X, None, np.array([2, 2], np.float32)], "expected 4"),
    ([X, None, np.array([1, 1, -2, 2], np.float32)], "positive"),
    ([X, None, UP, np.array([1, 2, 3, 4], np.int64)], "exactly one"),
])
def test_bad_data_is_a_value_error(bound: Bound, inputs, match):
    with pytest.raises(ValueError, match=match):
        bound.run("Resize", inputs, 19)
