"""Tests for the CPU activation kernels: the operator library's (onyxrt_ops.activation)
bound over numpy, with the CPU fast paths of onyxrt_cpu.kernels.activation.

The onnx node conformance cases run straight through the registry; targeted tests cover what
they leave out (old opset versions, float16/bfloat16, integer Clip/Relu/PRelu, erf accuracy),
checked against onnxruntime or numpy truth.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
from kernel_cases import BF16, conformance_params, randn, run_case
from kernel_cases import op_output as ours
from kernel_cases import op_output_onnxruntime as onnxrt
from onnx import helper

from onyxrt.errors import InvalidGraph
from onyxrt.kernels import KernelInfo
from onyxrt_cpu.kernels import registry
from onyxrt_cpu.kernels._special import erf

OPS = [
    "Relu", "LeakyRelu", "PRelu", "Elu", "Selu", "Celu", "ThresholdedRelu", "Clip", "Sigmoid",
    "HardSigmoid", "HardSwish", "Tanh", "Gelu", "Softplus", "Softsign", "Mish", "Swish",
    "Softmax", "LogSoftmax", "Hardmax",
]  # fmt: skip

# Conformance cases these kernels cannot pass, with the reason. None today.
XFAIL: dict[str, str] = {}


@pytest.mark.parametrize("case", conformance_params(OPS, XFAIL))
def test_conformance(case):
    run_case(case)


# ----------------------------------------------------------------- helpers


_randn = functools.partial(randn, scale=3.0)


# ---------------------------------------------------------------------- erf


def test_erf_accuracy_against_math_erf():
    x = np.concatenate(
        [np.linspace(-7, 7, 200_001), [0.0, -0.0, 2.5, -2.5, 6.0, 1e-300, -1e-12, 40.0]]
    )
    want = np.array([math.erf(v) for v in x])
    got = erf(x)
    assert got.dtype == np.float64 and got.shape == x.shape
    assert np.max(np.abs(got - want)) < 1e-7
    assert np.max(np.abs(got - want)) < 1e-13  # in fact close to float64 rounding


def test_erf_special_values_and_shape():
    got = erf(np.array([[np.nan, np.inf], [-np.inf, -0.0]]))
    assert got.shape == (2, 2)
    assert np.isnan(got[0, 0]) and got[0, 1] == 1.0 and got[1, 0] == -1.0
    assert got[1, 1] == 0.0 and math.copysign(1.0, got[1, 1]) == -1.0
    assert erf(0.5) == pytest.approx(math.erf(0.5), abs=1e-14)
    assert isinstance(erf(0.5), np.ndarray)


# ------------------------------------------------------------- elementwise

ELEMENTWISE = [
    ("Relu", {}, 14),
    ("LeakyRelu", {"alpha": 0.2}, 16),
    ("Elu", {"alpha": 0.7}, 22),
    ("Selu", {}, 22),
    ("Celu", {"alpha": 1.5}, 12),
    ("ThresholdedRelu", {"alpha": 0.5}, 22),
    ("Sigmoid", {}, 13),
    ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}, 22),
    ("HardSwish", {}, 22),
    ("Tanh", {}, 13),
    ("Softplus", {}, 22),
    ("Softsign", {}, 22),
    ("Mish", {}, 22),
    ("Gelu", {}, 20),
    ("Gelu", {"approximate": "tanh"}, 20),
]


@pytest.mark.parametrize(("op", "attrs", "opset"), ELEMENTWISE)
def test_elementwise_float32_and_float64_vs_ort(op, attrs, opset):
    x = _randn((3, 4, 50), seed=1, scale=4.0)
    x[0, 0, :6] = [0.0, -0.0, 30.0, -30.0, 100.0, -100.0]
    got = ours(op, [x], opset, **attrs)
    assert got.dtype == np.float32 and got.shape == x.shape
    np.testing.assert_allclose(got, onnxrt(op, [x], opset, **attrs), rtol=1e-5, atol=1e-6)
    x64 = x.astype(np.float64)
    got64 = ours(op, [x64], opset, **attrs)
    assert got64.dtype == np.float64
    np.testing.assert_allclose(got64, got, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("op", "attrs", "opset"), ELEMENTWISE)
@pytest.mark.parametrize("half", [np.float16, BF16], ids=["float16", "bfloat16"])
def test_elementwise_half_types_keep_their_dtype(op, attrs, opset, half):
    if op == "Celu":
        opset = 28  # half types arrive in Celu-28
    x = _randn((200,), seed=2, scale=3.0).astype(half)
    got = ours(op, [x], opset, **attrs)
    assert got.dtype == half and got.shape == x.shape
    # Oracle: the float32 op on the same (exactly representable) values.
    want = onnxrt(op, [x.astype(np.float32)], min(opset, 22), **attrs)
    tol = 1e-2 if half is BF16 else 2e-3
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=tol, atol=tol)


def test_swish_matches_x_times_sigmoid():
    x = _randn((100,), seed=3, scale=5.0, dtype=np.float64)
    got = ours("Swish", [x], 24, alpha=0.75)
    np.testing.assert_allclose(got, x / (1 + np.exp(-0.75 * x)), rtol=1e-12)
    got16 = ours("Swish", [x.astype(np.float16)], 24, alpha=0.75)
    assert got16.dtype == np.float16


# Overflow, invalid and division by zero raise; underflow to 0 is an exact result, which
# numpy ignores by default (the library's kernels are written without np.errstate).
_STRICT = {"over": "raise", "invalid": "raise", "divide": "raise"}


def test_sigmoid_and_softplus_do_not_overflow():
    x = np.array([-1000.0, -100.0, 0.0, 100.0, 1000.0], dtype=np.float32)
    with np.errstate(**_STRICT):
        s = ours("Sigmoid", [x], 13)
        sp = ours("Softplus", [x], 22)
    np.testing.assert_allclose(s, [0.0, 0.0, 0.5, 1.0, 1.0], atol=1e-30)
    np.testing.assert_allclose(
        sp, [0.0, math.exp(-100), math.log(2.0), 100.0, 1000.0], rtol=1e-6, atol=1e-40
    )


@pytest.mark.parametrize("op", ["Relu", "Sigmoid", "Tanh", "LeakyRelu", "Elu"])
@pytest.mark.parametrize("opset", [6, 9])
def test_old_versions_vs_ort(op, opset):
    x = _randn((2, 3, 5), seed=4)
    np.testing.assert_allclose(ours(op, [x], opset), onnxrt(op, [x], opset), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.int64])
def test_relu_integer_types(dtype):
    x = np.array([[-128, -1, 0, 1, 127]], dtype=dtype)
    got = ours("Relu", [x], 14)
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, [[0, 0, 0, 1, 127]])


def test_gelu_float32_wide_range_vs_ort():
    x = np.linspace(-12, 12, 4801, dtype=np.float32)
    for approx in ("none", "tanh"):
        got = ours("Gelu", [x], 20, approximate=approx)
        want = onnxrt("Gelu", [x], 20, approximate=approx)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    x64 = np.linspace(-8, 8, 1601)
    want64 = np.array([0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in x64])
    np.testing.assert_allclose(ours("Gelu", [x64], 20), want64, rtol=1e-12, atol=1e-13)


def test_gelu_rejects_unknown_approximation():
    node = helper.make_node("Gelu", ["x"], ["y"], name="g1", approximate="fast")
    kdef, _ = registry.lookup("", "Gelu", 20)
    with pytest.raises(InvalidGraph) as ei:
        kdef.factory(KernelInfo.from_node(node, 20, since_version=20))
    assert "g1" in str(ei.value) and "approximate" in str(ei.value)


# --------------------------------------------------------------------- PRelu


def test_prelu_channel_slope_broadcast_vs_ort():
    x = _randn((2, 3, 4, 5), seed=5)
    slope = np.array([0.1, 0.2, 0.3], dtype=np.float32).reshape(3, 1, 1)
    for opset in (9, 16):
        np.testing.assert_allclose(
            ours("PRelu", [x, slope], opset), onnxrt("PRelu", [x, slope], opset), rtol=1e-6
        )


def test_prelu_old_version_per_channel_slope():
    x = _randn((2, 3, 4, 5), seed=6)
    slope = np.array([0.1, 0.2, 0.3], dtype=np.float32)
    got = ours("PRelu", [x, slope], 6)
    want = np.where(x < 0, x * slope.reshape(3, 1, 1), x)
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_prelu_int_and_float16():
    x = np.array([[-4, -1, 0, 3]], dtype=np.int32)
    slope = np.array([2, 3, 4, 5], dtype=np.int32)
    got = ours("PRelu", [x, slope], 16)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, [[-8, -3, 0, 3]])
    xh = x.astype(np.float16)
    goth = ours("PRelu", [xh, np.array([0.5], dtype=np.float16)], 16)
    assert goth.dtype == np.float16
    np.testing.assert_array_equal(goth, [[-2, -0.5, 0, 3]])


def test_prelu_rejects_slope_that_grows_x():
    with pytest.raises(ValueError, match="slope"):
        ours("PRelu", [np.zeros((3,), np.float32), np.zeros((2, 3), np.float32)], 16)


# ---------------------------------------------------------------------- Clip


@pytest.mark.parametrize("opset", [6, 10])
def test_clip_attribute_versions_vs_ort(opset):
    x = _randn((4, 6), seed=7)
    for attrs in ({}, {"min": -1.0}, {"max": 0.5}, {"min": -0.5, "max": 2.0}):
        got = ours("Clip", [x], opset, **attrs)
        np.testing.assert_array_equal(got, onnxrt("Clip", [x], opset, **attrs))
    xh = x.astype(np.float16)
    goth = ours("Clip", [xh], opset, min=-1.0, max=1.0)
    assert goth.dtype == np.float16
    np.testing.assert_array_equal(goth, np.clip(xh, -1, 1))


def test_clip_input_versions_vs_ort():
    x = _randn((4, 6), seed=8)
    lo = np.array(-1.0, dtype=np.float32)
    hi = np.array(0.5, dtype=np.float32)
    for opset in (11, 12, 13):
        for ins in ([x, lo, hi], [x, lo], [x, None, hi], [x]):
            np.testing.assert_array_equal(ours("Clip", ins, opset), onnxrt("Clip", ins, opset))


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int32, np.int64, np.uint64])
def test_clip_integer_types_vs_ort(dtype):
    info = np.iinfo(dtype)
    x = np.array([info.min, 0, 5, 10, 100, info.max], dtype=dtype)
    lo = np.array(3, dtype=dtype)
    hi = np.array(50, dtype=dtype)
    for ins in ([x, lo, hi], [x, lo], [x, None, hi], [x]):
        got = ours("Clip", ins, 13)
        assert got.dtype == dtype
        np.testing.assert_array_equal(got, onnxrt("Clip", ins, 13))


def test_clip_bfloat16():
    x = np.array([-3, -1, 0, 2, 9], dtype=BF16)
    got = ours("Clip", [x, np.array(-1, dtype=BF16), np.array(4, dtype=BF16)], 13)
    assert got.dtype == BF16
    np.testing.assert_array_equal(got.astype(np.float32), [-1, -1, 0, 2, 4])


# ------------------------------------------------------------ softmax family


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
@pytest.mark.parametrize("opset", [10, 12, 13])
@pytest.mark.parametrize("axis", [None, 0, 1, 2, -1, -2])
def test_softmax_family_vs_ort(op, opset, axis):
    # Versions < 13 coerce to 2D at axis; 13 works along the one axis.
    x = _randn((2, 3, 4), seed=9)
    x[1, 2, 1] = x[1, 2, 3] = 50.0  # a tie for Hardmax
    attrs = {} if axis is None else {"axis": axis}
    if opset == 10 and axis is not None and axis < 0:
        pytest.skip("negative axes start in version 11")
    got = ours(op, [x], opset, **attrs)
    assert got.dtype == np.float32 and got.shape == x.shape
    np.testing.assert_allclose(got, onnxrt(op, [x], opset, **attrs), rtol=1e-5, atol=1e-6)


def test_softmax_v1_and_v13_differ():
    x = _randn((2, 3, 4), seed=10)
    v1 = ours("Softmax", [x], 10, axis=1)
    v13 = ours("Softmax", [x], 13, axis=1)
    np.testing.assert_allclose(v1.reshape(2, 12).sum(axis=1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(v13.sum(axis=1), 1.0, rtol=1e-6)
    assert not np.allclose(v1, v13)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_softmax_large_values_are_stable(op):
    x = np.array([[1000.0, 1001.0, 1002.0], [-1e30, 0.0, 1e30]], dtype=np.float32)
    with np.errstate(**_STRICT):
        got = ours(op, [x], 13)
    want = onnxrt(op, [x], 13)
    assert np.isfinite(got[0]).all()
    np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
@pytest.mark.parametrize("half", [np.float16, BF16], ids=["float16", "bfloat16"])
def test_softmax_family_half_types(op, half):
    x = _randn((3, 16), seed=11).astype(half)
    got = ours(op, [x], 13)
    assert got.dtype == half
    want = onnxrt(op, [x.astype(np.float32)], 13)
    tol = 2e-2 if half is BF16 else 3e-3
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=tol, atol=tol)


def test_hardmax_first_maximum_wins():
    x = np.array([[1, 3, 3, 2], [5, 5, 5, 5]], dtype=np.float32)
    np.testing.assert_array_equal(ours("Hardmax", [x], 13), [[0, 1, 0, 0], [1, 0, 0, 0]])


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
def test_softmax_family_empty_input(op):
    x = np.zeros((2, 0), dtype=np.float32)
    got = ours(op, [x], 13)
    assert got.shape == (2, 0) and got.dtype == np.float32


def test_softmax_rejects_bad_axis():
    with pytest.raises(ValueError, match="axis"):
        ours("Softmax", [np.zeros((2, 3), np.float32)], 13, axis=2)


@pytest.mark.parametrize("size", [4095, 4096, 100003])
def test_clip_and_relu_on_large_float32_match_numpy_and_onnxruntime(size):
    """Large float32 arrays take one compiled pass (numpy's maximum against a scalar is
    slow there): the same values as maximum then minimum, NaN passed through, a lower
    bound above the upper one giving the upper; a NaN bound and a strided view take the
    library's path."""
    from onyxrt_cpu import native
    from onyxrt_cpu.kernels import activation

    x = _randn((size,), seed=size) * 4
    x[::97] = np.nan
    x[1::89] = np.inf
    x[2::83] = -np.inf
    x[3::79] = -0.0
    cases = [
        (np.float32(-1.5), np.float32(2.0)), (np.float32(0.0), np.float32(6.0)),
        (None, np.float32(0.5)), (np.float32(-0.25), None), (np.float32(3.0), np.float32(-1.0)),
        (None, None), (np.float32(np.nan), np.float32(1.0)),
    ]
    for lo, hi in cases:
        ins = [x, None if lo is None else np.array(lo), None if hi is None else np.array(hi)]
        while ins[-1] is None:
            ins.pop()
        want = x
        if lo is not None:
            want = np.maximum(want, lo)
        if hi is not None:
            want = np.minimum(want, hi)
        got = ours("Clip", ins, 13)
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, want)
        if lo is not None and hi is not None and not np.isnan(lo):
            # (a missing bound: onnxruntime clamps infinities to the largest finite float,
            # the spec's numeric_limits default, where onyxrt's library clips nothing; a NaN
            # bound: onnxruntime ignores it, numpy's maximum spreads it — both as before)
            np.testing.assert_array_equal(got, onnxrt("Clip", ins, 13))
    np.testing.assert_array_equal(ours("Relu", [x], 14), np.maximum(x, np.float32(0)))
    np.testing.assert_array_equal(ours("Relu", [x[::2]], 14), np.maximum(x[::2], np.float32(0)))
    if native.ENABLED and size >= activation._COMPILED_CLIP_MIN:
        assert activation._compiled_clip(x, 0.0, 6.0) is not None  # the compiled path ran
