"""The operator library's miscellaneous com.microsoft operators and the legacy
experimental default-domain ones (:mod:`onyxrt_ops.contrib_misc`), against onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from library_harness import bind, domain_node, ort_outputs, run_node
from onnx import TensorProto, helper

import onyxrt

RNG = np.random.default_rng(21)


def rand(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def check(bound, n, inputs, host_inputs=(), rtol=1e-5, atol=1e-6, opset=1, onnx_opset=None):
    """``n`` through ``bound`` matches onnxruntime on every output (dtype, shape, values)."""
    got = run_node(bound, n, inputs, opset=opset, host_inputs=host_inputs)
    # onnxruntime knows the legacy experimental operators up to opset 9 only (they left
    # onnx at 10); its kernels are the same at every opset.
    if onnx_opset is None:
        onnx_opset = 9 if n.domain == "" else 21
    want = ort_outputs(n, inputs, opset=opset, onnx_opset=onnx_opset)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        g = np.asarray(g)
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, w.dtype, g.shape, w.shape)
        if w.dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
        else:
            np.testing.assert_array_equal(g, w)
    return got


def legacy_node(op, inputs, **attrs):
    return domain_node(op, inputs, domain="", **attrs)


# ------------------------------------------------------------------ fused operators

ACTS = [("", []), ("Relu", []), ("Tanh", []), ("Sigmoid", []), ("LeakyRelu", [0.2]),
        ("Clip", [-0.5, 0.7]), ("HardSigmoid", [0.3, 0.4])]


@pytest.mark.parametrize("act,params", ACTS)
@pytest.mark.parametrize("with_z", [False, True])
def test_fused_conv(bound, act, params, with_z):
    x, w, b = rand(2, 4, 7, 6), rand(6, 2, 3, 3), rand(6)
    z = rand(2, 6, 4, 3) if with_z else None
    attrs = dict(activation=act, activation_params=params) if params else dict(activation=act) if act else {}
    n = domain_node("FusedConv", [x, w, b, z], group=2, strides=[2, 2], pads=[1, 1, 1, 0], **attrs)
    check(bound, n, [x, w, b, z])


def test_fused_conv_no_bias_dilated(bound):
    x, w = rand(1, 3, 9, 9), rand(4, 3, 2, 2)
    n = domain_node("FusedConv", [x, w], dilations=[2, 3], pads=[1, 2, 0, 1], activation="Relu")
    check(bound, n, [x, w])


@pytest.mark.parametrize("attrs", [dict(activation="Relu"), dict(activation="Tanh"),
                                   dict(activation="Sigmoid"), dict(activation="LeakyRelu", activation_alpha=0.3),
                                   dict(activation="HardSigmoid", activation_alpha=0.3, activation_beta=0.4)])
def test_fused_gemm(bound, attrs):
    a, b, c = rand(4, 3), rand(5, 4), rand(5)
    n = domain_node("FusedGemm", [a, b, c], transA=1, transB=1, alpha=0.7, beta=1.5, **attrs)
    check(bound, n, [a, b, c])
    a, b = rand(3, 4), rand(4, 2)  # no C
    check(bound, domain_node("FusedGemm", [a, b], **attrs), [a, b])


@pytest.mark.parametrize("attrs", [{}, dict(activation="Clip", activation_alpha=0.0, activation_beta=1.0),
                                   dict(activation="LeakyRelu"), dict(activation="HardSigmoid", activation_alpha=0.2)])
def test_fused_gemm_refusals(numpy_bound, attrs):
    """No activation, Clip, and missing parameters: onnxruntime refuses the node too."""
    a = rand(2, 2)
    n = domain_node("FusedGemm", [a, a], **attrs)
    with pytest.raises(onyxrt.errors.InvalidGraph, match="activation"):
        run_node(numpy_bound, n, [a, a])
    with pytest.raises(Exception, match="FusedGemm|alpha|beta|unknown"):
        ort_outputs(n, [a, a])


MATMUL_CASES = [
    (((3, 4), (4, 5)), {}),
    (((4, 3), (5, 4)), dict(transA=1, transB=1, alpha=0.5)),
    (((2, 3, 4), (4, 5)), dict(alpha=2.0)),
    (((2, 1, 3, 4), (3, 5, 4)), dict(transB=1)),
    (((3, 2, 4), (2, 4, 5)), dict(transBatchA=1)),
    (((4, 2, 3), (2, 4, 5)), dict(transA=1, transBatchA=1)),
    (((2, 3, 4), (4, 2, 5)), dict(transBatchB=1)),
    (((2, 3, 4), (5, 2, 4)), dict(transBatchB=1, transB=1)),
    (((0, 3, 4), (4, 5)), {}),
]


@pytest.mark.parametrize("op,shapes,attrs", [("FusedMatMul", *c) for c in MATMUL_CASES]
                         + [("TransposeMatMul", s, a) for s, a in MATMUL_CASES if not any("Batch" in k for k in a)])
def test_fused_matmul(bound, op, shapes, attrs):
    a, b = rand(*shapes[0]), rand(*shapes[1])
    check(bound, domain_node(op, [a, b], **attrs), [a, b])


def test_fused_matmul_double(numpy_bound):
    a, b = rand(2, 3, dtype=np.float64), rand(3, 4, dtype=np.float64)
    check(numpy_bound, domain_node("FusedMatMul", [a, b], alpha=3.0), [a, b])


# ---------------------------------------------------------------------------- pools


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
@pytest.mark.parametrize("attrs", [dict(kernel_shape=[2, 2]),
                                   dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
                                   dict(kernel_shape=[3, 2], ceil_mode=1, strides=[2, 2]),
                                   dict(kernel_shape=[2, 2], dilations=[2, 1])])
def test_nhwc_max_pool(bound, dtype, attrs):
    info = np.iinfo(dtype)
    x = RNG.integers(info.min, info.max, (2, 7, 6, 3)).astype(dtype)
    check(bound, domain_node("NhwcMaxPool", [x], **attrs), [x])


@pytest.mark.parametrize("spatial,kernel", [((6, 6), [2, 2]), ((7,), [3]), ((4, 5, 3), [2, 3, 2])])
@pytest.mark.parametrize("mask_nc", [(1, 1), (2, 1), (1, 3), (2, 3), (5, 7)])
def test_maxpool_with_mask(bound, spatial, kernel, mask_nc):
    x = rand(2, 3, *spatial)
    m = (RNG.random(mask_nc + spatial) > 0.3).astype(np.int32)
    nsp = len(spatial)
    n = domain_node("MaxpoolWithMask", [x, m], kernel_shape=kernel, strides=[2] * nsp)
    check(bound, n, [x, m])
    n = domain_node("MaxpoolWithMask", [x, m], kernel_shape=kernel, pads=[1] * (2 * nsp))
    check(bound, n, [x, m])


# -------------------------------------------------------------- standard reuses


@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [0, 1])
def test_grid_sample(bound, mode, padding, align):
    x = rand(2, 3, 5, 6)
    g = RNG.uniform(-1.3, 1.3, (2, 4, 3, 2)).astype(np.float32)
    n = domain_node("GridSample", [x, g], mode=mode, padding_mode=padding, align_corners=align)
    check(bound, n, [x, g], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backend,dtype", [(b, t) for b in ("numpy_bound", "strict_bound")
                                           for t in (np.float32, np.float64)] + [("numpy_bound", np.float16)])
def test_inverse(request, backend, dtype):
    bound = request.getfixturevalue(backend)  # array_api_strict has no float16
    x = (rand(2, 3, 3) + 3 * np.eye(3)).astype(dtype)
    rtol = {np.float16: 1e-3, np.float32: 1e-5, np.float64: 1e-10}[dtype]  # float16: one rounding
    check(bound, domain_node("Inverse", [x]), [x], rtol=rtol, atol=rtol)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
@pytest.mark.parametrize("upper", [0, 1])
@pytest.mark.parametrize("k", [None, -1, 2])
def test_trilu(bound, dtype, upper, k):
    x = (rand(2, 4, 5) * 10).astype(dtype)
    kk = None if k is None else np.array(k, np.int64)
    check(bound, domain_node("Trilu", [x, kk], upper=upper), [x, kk], host_inputs=(1,))


@pytest.mark.parametrize("backend,dtype", [(b, t) for b in ("numpy_bound", "strict_bound")
                                           for t in (np.float32, np.int64, np.bool_)] + [("numpy_bound", np.float16)])
@pytest.mark.parametrize("itype", [np.int32, np.int64])
def test_gather_nd(request, backend, dtype, itype):
    bound = request.getfixturevalue(backend)  # array_api_strict has no float16
    x = (rand(3, 4, 5) * 5).astype(dtype)
    for idx in ([[0, 1], [2, -1]], [[[1]], [[0]]], [[0, 1, 2]], np.zeros((0, 2))):
        i = np.asarray(idx).astype(itype)
        check(bound, domain_node("GatherND", [x, i]), [x, i])


def test_gather_nd_strings(numpy_bound):
    x = np.array([["a", "b"], ["c", "d"]], dtype=object)
    i = np.array([[1, 0], [0, 1]], np.int64)
    check(numpy_bound, domain_node("GatherND", [x, i]), [x, i])


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
@pytest.mark.parametrize("pads", [[1, 0, 2, 2, 1, 0], [[0, 2, 1, 1, 0, 3]], [0, -1, 1, 1, 0, 0]])
@pytest.mark.parametrize("value", [None, 2.5])
def test_pad(bound, mode, pads, value):
    x = rand(3, 4, 5)  # reflect pads stay below each dim (onnxruntime refuses more)
    p = np.array(pads, np.int64)
    v = None if value is None else np.array([value], np.float32)
    check(bound, domain_node("Pad", [x, p, v], mode=mode), [x, p, v], host_inputs=(1, 2))


INT_RANGES = [(0, 10, 3), (5, -3, -2), (1, 4, None), (4, 4, 1), (3, 1, None)]


@pytest.mark.parametrize("values,dtype", [(v, t) for v in INT_RANGES for t in (np.int16, np.int32, np.int64)]
                         + [(v, t) for v in [*INT_RANGES, (2.5, 7.0, 0.5), (3.0, 1.0, -0.25)]
                            for t in (np.float32, np.float64)])
def test_range(bound, values, dtype):
    inputs = [None if v is None else np.array(v, dtype) for v in values]
    check(bound, domain_node("Range", inputs), inputs, host_inputs=(0, 1, 2))


@pytest.mark.parametrize("x", [[2.0, 1.0, 1.0, 3.0, 4.0, 3.0], [5.0], [], [1.0, 1.0, 1.0], [-0.0, 0.0, 2.0, -1.0]])
def test_unique(bound, x):
    xs = np.array(x, np.float32)
    check(bound, domain_node("Unique", [xs], 3), [xs])


@pytest.mark.parametrize("axis", [0, 1, 3, -1, -4, -2])
@pytest.mark.parametrize("dtype", [np.float32, np.int8, np.bool_])
def test_expand_dims(bound, axis, dtype):
    x = (rand(2, 3, 4) > 0).astype(dtype)
    a = np.array(axis, np.int32)
    check(bound, domain_node("ExpandDims", [x, a]), [x, a], host_inputs=(1,))


def test_expand_dims_bad_axis(numpy_bound):
    x, a = rand(2, 3), np.array(3, np.int32)
    with pytest.raises(ValueError, match="axis 3"):
        run_node(numpy_bound, domain_node("ExpandDims", [x, a]), [x, a], host_inputs=(1,))


@pytest.mark.parametrize("metric", ["euclidean", "sqeuclidean"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_cdist(bound, metric, dtype):
    a, b = rand(4, 3, dtype=dtype), rand(5, 3, dtype=dtype)
    # onnxruntime computes |a|^2 + |b|^2 - 2 a.b (a GEMM): a few ulps off the direct sum.
    check(bound, domain_node("CDist", [a, b], metric=metric), [a, b], rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------ convolution variants


@pytest.mark.parametrize("pads", [[0, 0, 0, 0], [1, 0, 1, 2], [1, 1, 0, 0]])
@pytest.mark.parametrize("with_bias", [False, True])
def test_conv_transpose_with_dynamic_pads(bound, pads, with_bias):
    x, w = rand(1, 3, 4, 5), rand(3, 2, 3, 3)
    p = np.array(pads, np.int64)
    b = rand(2) if with_bias else None
    n = domain_node("ConvTransposeWithDynamicPads", [x, w, p, b], strides=[2, 1])
    check(bound, n, [x, w, p, b], host_inputs=(2,))


# ----------------------------------------------------------------- crops and RoIs


@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
@pytest.mark.parametrize("crop", [(3, 4), (1, 1), (5, 2)])
def test_crop_and_resize(bound, mode, crop):
    x = rand(2, 3, 6, 7)
    rois = np.array([[0.1, 0.2, 0.8, 0.9], [0.0, 0.0, 1.0, 1.0], [-0.2, 0.3, 1.2, 0.6],
                     [0.7, 0.6, 0.2, 0.1]], np.float32)
    bi = np.array([0, 1, 1, 0], np.int32)
    cs = np.array(crop, np.int32)
    n = domain_node("CropAndResize", [x, rois, bi, cs], mode=mode, extrapolation_value=-3.0)
    check(bound, n, [x, rois, bi, cs], host_inputs=(1, 2, 3))


@pytest.mark.parametrize("opset", [21, 22])
@pytest.mark.parametrize("scale", [1.0, 0.5])
def test_max_roi_pool(bound, opset, scale):
    x = rand(2, 3, 8, 9)
    rois = np.array([[0, 1, 1, 6, 5], [1, 0, 0, 8, 7], [1, 3, 2, 3, 2], [0, 12, 14, 20, 20]], np.float32)
    n = domain_node("MaxRoiPool", [x, rois], domain="", pooled_shape=[2, 3], spatial_scale=scale)
    got = run_node(bound, n, [x, rois], opset=opset, host_inputs=(1,))
    # onnxruntime has MaxRoiPool-1 only: version 22 (more element types) keeps its semantics
    want = ort_outputs(n, [x, rois], onnx_opset=21)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6)


# ---------------------------------------------------------------- host algorithms


@pytest.mark.parametrize("positive", [0, 1])
@pytest.mark.parametrize("seed", [0, 42])
@pytest.mark.parametrize("x", [np.array([0, 1, -7, 2 ** 30], np.int32), np.array([3, 2 ** 40], np.int64),
                               np.array([1, 9], np.uint32), np.array([1, 2 ** 63], np.uint64),
                               np.array([1.5, -2.0], np.float32), np.array([0.25], np.float64),
                               np.array(["", "a", "hello world", "héllo"], dtype=object)])
@pytest.mark.parametrize("backend", ["numpy_bound", "strict_bound"])
def test_murmur_hash3(request, backend, positive, seed, x):
    if x.dtype == object and backend == "strict_bound":
        backend = "numpy_bound"  # strings exist on numpy only
    n = domain_node("MurmurHash3", [x], positive=positive, seed=seed)
    out_type = TensorProto.UINT32 if positive else TensorProto.INT32
    got = run_node(request.getfixturevalue(backend), n, [x])[0]
    graph = helper.make_graph([n], "g", [helper.make_tensor_value_info("in0", _elem(x), list(x.shape))],
                              [helper.make_tensor_value_info("out0", out_type, None)])
    want = _ort(graph, {"in0": x})[0]
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def _elem(x):
    return TensorProto.STRING if x.dtype == object else helper.np_dtype_to_tensor_dtype(x.dtype)


def _ort(graph, feeds, domains=("com.microsoft",)):
    import onnxruntime as ort

    model = helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 21)]
                              + [helper.make_opsetid(d, 1) for d in domains])
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


@pytest.mark.parametrize("ngram", [1, 2, 3])
def test_ngram_repeat_block(bound, ngram):
    ids = np.array([[1, 2, 3, 1, 2], [4, 4, 4, 4, 4], [0, 1, 2, 3, 4]], np.int64)
    scores = rand(3, 6)
    n = domain_node("NGramRepeatBlock", [ids, scores], ngram_size=ngram)
    check(bound, n, [ids, scores], host_inputs=(0,))


# ------------------------------------------------- legacy default-domain operators


@pytest.mark.parametrize("op,attrs", [
    ("ImageScaler", dict(scale=2.0, bias=[0.5, -1.0, 3.0])), ("ImageScaler", dict(bias=[1.0, 2.0, 3.0])),
    ("ParametricSoftplus", dict(alpha=0.5, beta=30.0)), ("ParametricSoftplus", dict(alpha=1.0, beta=-2.0)),
    ("Scale", dict(scale=-3.5)), ("Scale", {}),
    ("ScaledTanh", dict(alpha=2.0, beta=0.5)), ("Affine", dict(alpha=-2.0, beta=0.25)), ("Affine", {}),
    ("Crop", dict(border=[1, 2, 0, 1])), ("Crop", dict(border=[1, 0, 0, 1], scale=[2, 1])),
])
def test_legacy_elementwise(bound, op, attrs):
    x = rand(2, 3, 4, 2) * 3
    check(bound, legacy_node(op, [x], **attrs), [x], opset=21)


@pytest.mark.parametrize("op,attrs", [("ImageScaler", dict(scale=2.0)), ("ParametricSoftplus", dict(alpha=1.0)),
                                      ("ScaledTanh", dict(beta=1.0)), ("Crop", dict(scale=[1, 1]))])
def test_legacy_required_attributes(numpy_bound, op, attrs):
    """onnxruntime refuses these nodes without the attributes (no defaults): so does the library."""
    x = rand(1, 3, 2, 2)
    n = legacy_node(op, [x], **attrs)
    with pytest.raises(onyxrt.errors.InvalidGraph, match="required|border"):
        run_node(numpy_bound, n, [x], opset=21)
    with pytest.raises(Exception, match="ttribute"):
        ort_outputs(n, [x], onnx_opset=9)


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.bool_])
@pytest.mark.parametrize("bounds", [([1], [3], None), ([0, 1], [-1, 10], [2, 0]), ([-3], [2 ** 40], [-1])])
def test_dynamic_slice(bound, dtype, bounds):
    x = (rand(4, 5, 6) > 0).astype(dtype)
    starts, ends, axes = (None if v is None else np.array(v, np.int64) for v in bounds)
    check(bound, legacy_node("DynamicSlice", [x, starts, ends, axes]), [x, starts, ends, axes], opset=21,
          host_inputs=(1, 2, 3))


# -------------------------------------------------- the GPU backend (simulated CuPy)


def test_simulated_cupy_matches_numpy(numpy_bound):
    from onyxrt_gpu.kernels._common import BACKEND
    from onyxrt_gpu.testing.simulated_cupy import install

    x4, w = rand(1, 4, 6, 6), rand(4, 2, 3, 3)
    rois = np.array([[0.1, 0.2, 0.8, 0.9]], np.float32)
    cases = [
        (domain_node("FusedConv", [x4, w, None, rand(1, 4, 4, 4)], group=2, activation="LeakyRelu",
                     activation_params=[0.1]), [x4, w, None, rand(1, 4, 4, 4)], ()),
        (domain_node("FusedGemm", [rand(2, 3), rand(3, 4)], activation="Sigmoid"), [rand(2, 3), rand(3, 4)], ()),
        (domain_node("FusedMatMul", [rand(3, 2, 4), rand(2, 4, 5)], transBatchA=1, alpha=0.5),
         [rand(3, 2, 4), rand(2, 4, 5)], ()),
        (domain_node("Inverse", [rand(3, 3) + 3 * np.eye(3, dtype=np.float32)]),
         [rand(3, 3) + 3 * np.eye(3, dtype=np.float32)], ()),
        (domain_node("CDist", [rand(3, 2), rand(4, 2)], metric="euclidean"), [rand(3, 2), rand(4, 2)], ()),
        (domain_node("Unique", [np.array([3, 1, 3, 2], np.float32)], 3), [np.array([3, 1, 3, 2], np.float32)], ()),
        (domain_node("CropAndResize", [x4, rois, np.zeros(1, np.int32), np.array([2, 3], np.int32)]),
         [x4, rois, np.zeros(1, np.int32), np.array([2, 3], np.int32)], (1, 2, 3)),
        (domain_node("NGramRepeatBlock", [np.array([[1, 2, 1]], np.int64), rand(1, 4)], ngram_size=2),
         [np.array([[1, 2, 1]], np.int64), rand(1, 4)], (0,)),
        (legacy_node("ScaledTanh", [x4], alpha=2.0, beta=0.5), [x4], ()),
        (legacy_node("Crop", [x4], border=[1, 0, 2, 1]), [x4], ()),
        (legacy_node("DynamicSlice", [x4, np.array([1]), np.array([3]), np.array([2])]),
         [x4, np.array([1]), np.array([3]), np.array([2])], (1, 2, 3)),
        (legacy_node("MaxRoiPool", [x4, np.array([[0, 1, 1, 4, 5]], np.float32)], pooled_shape=[2, 2]),
         [x4, np.array([[0, 1, 1, 4, 5]], np.float32)], (1,)),
        (domain_node("GridSample", [x4, rand(1, 3, 2, 2)], mode="bicubic"), [x4, rand(1, 3, 2, 2)], ()),
        (domain_node("NhwcMaxPool", [np.arange(72, dtype=np.int8).reshape(1, 6, 4, 3)], kernel_shape=[2, 2]),
         [np.arange(72, dtype=np.int8).reshape(1, 6, 4, 3)], ()),
        (domain_node("Trilu", [x4, np.array(1)], upper=0), [x4, np.array(1)], (1,)),
        (domain_node("GatherND", [x4, np.array([[0, 1]])]), [x4, np.array([[0, 1]])], ()),
        (domain_node("Pad", [x4, np.array([0, 1, 1, 0, 0, 0, 2, 1])], mode="reflect"),
         [x4, np.array([0, 1, 1, 0, 0, 0, 2, 1])], (1,)),
        (domain_node("ExpandDims", [x4, np.array(-1, np.int32)]), [x4, np.array(-1, np.int32)], (1,)),
        (domain_node("Range", [np.array(1.0, np.float32), np.array(4.0, np.float32)]),
         [np.array(1.0, np.float32), np.array(4.0, np.float32)], (0, 1)),
        (domain_node("ConvTransposeWithDynamicPads", [x4, rand(4, 2, 3, 3), np.array([1, 0, 0, 1])]),
         [x4, rand(4, 2, 3, 3), np.array([1, 0, 0, 1])], (2,)),
        (domain_node("UnfoldTensor", [x4], dim=2, size=3, step=2), [x4], ()),
        (domain_node("WordConvEmbedding", [np.array([[1, 2, 0], [0, 1, 1]], np.int32), rand(3, 1, 2, 4), rand(3),
                                           rand(5, 4)]),
         [np.array([[1, 2, 0], [0, 1, 1]], np.int32), rand(3, 1, 2, 4), rand(3), rand(5, 4)], ()),
        (domain_node("DynamicTimeWarping", [np.abs(rand(3, 4))]), [np.abs(rand(3, 4))], ()),
        (domain_node("BifurcationDetector", [np.array([1, 2, 3]), np.array([1]), np.array([0]), np.array([1, 2, 9, 9])],
                     2, min_ngram_size=1, max_ngram_size=2),
         [np.array([1, 2, 3]), np.array([1]), np.array([0]), np.array([1, 2, 9, 9])], (0, 1, 2, 3)),
        (domain_node("MurmurHash3", [np.array([1, 2], np.int32)], seed=3), [np.array([1, 2], np.int32)], ()),
        (domain_node("MaxpoolWithMask", [x4, np.ones((1, 1, 6, 6), np.int32)], kernel_shape=[2, 2]),
         [x4, (rand(1, 1, 6, 6) > 0).astype(np.int32)], ()),
    ]
    with install():
        import cupy

        gpu = bind("cupy", BACKEND)
        gpu.array = cupy.asarray
        gpu.host = lambda v: v.get()
        for n, inputs, host in cases:
            # the legacy domain is imported at opset 21, the com.microsoft one at 1
            opset = 21 if n.domain == "" else 1
            got = run_node(gpu, n, [None if v is None else v for v in inputs], opset=opset, host_inputs=host)
            want = run_node(numpy_bound, n, inputs, opset=opset, host_inputs=host)
            for g, w_ in zip(got, want):
                np.testing.assert_allclose(g, w_, rtol=1e-6, atol=1e-6)


# ------------------------------------------------------------------ end to end


def _session_pair(model: onnx.ModelProto, feeds):
    import onnxruntime as ort

    data = model.SerializeToString()
    got = onyxrt.InferenceSession(data).run(None, feeds)
    want = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_session_runs_contrib_ops():
    x, w, b = rand(1, 3, 8, 8), rand(4, 3, 3, 3), rand(4)
    nodes = [
        helper.make_node("FusedConv", ["x", "w", "b"], ["c"], domain="com.microsoft", pads=[1, 1, 1, 1],
                         activation="Relu"),
        helper.make_node("Flatten", ["c"], ["f"]),
        helper.make_node("FusedMatMul", ["f", "m"], ["y"], domain="com.microsoft", alpha=0.1),
        helper.make_node("Unique", ["u"], ["uy", "ui", "uc"], domain="com.microsoft"),
    ]
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8]),
         helper.make_tensor_value_info("u", TensorProto.FLOAT, [None])],
        [helper.make_tensor_value_info(o, t, None) for o, t in
         (("y", TensorProto.FLOAT), ("uy", TensorProto.FLOAT), ("ui", TensorProto.INT64), ("uc", TensorProto.INT64))],
        [onnx.numpy_helper.from_array(w, "w"), onnx.numpy_helper.from_array(b, "b"),
         onnx.numpy_helper.from_array(rand(256, 5), "m")])
    model = helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 21),
                                                                   helper.make_opsetid("com.microsoft", 1)])
    _session_pair(model, {"x": x, "u": np.array([2, 5, 2, 1], np.float32)})


def test_session_runs_legacy_ops():
    """The legacy default-domain operators through a session (an opset-9 model, the last
    opset onnxruntime knows them at)."""
    from onnx import numpy_helper

    x = rand(1, 3, 8, 8)
    rois = np.array([[0, 1, 1, 5, 4]], np.float32)
    nodes = [helper.make_node("ImageScaler", ["x"], ["s"], scale=2.0, bias=[1.0, 0.0, -1.0]),
             helper.make_node("ScaledTanh", ["s"], ["t"], alpha=1.5, beta=0.5),
             helper.make_node("Affine", ["t"], ["a"], alpha=0.5, beta=0.1),
             helper.make_node("ParametricSoftplus", ["a"], ["p"], alpha=2.0, beta=3.0),
             helper.make_node("Scale", ["p"], ["q"], scale=-1.5),
             helper.make_node("Crop", ["q"], ["c"], border=[1, 1, 0, 2]),
             helper.make_node("DynamicSlice", ["c", "st", "en", "ax"], ["d"]),
             helper.make_node("MaxRoiPool", ["d", "rois"], ["y"], pooled_shape=[2, 2])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, k) for k, v in (("st", np.array([1], np.int64)), ("en", np.array([7], np.int64)),
                                                     ("ax", np.array([3], np.int64)), ("rois", rois))])
    _session_pair(helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 9)]), {"x": x})


def _mlp() -> onnx.ModelProto:
    """Gemm + LeakyRelu and MatMul * scalar: onnxruntime fuses them into FusedGemm and
    FusedMatMul."""
    from onnx import numpy_helper

    inits = [numpy_helper.from_array(v, k) for k, v in
             (("W1", rand(8, 16)), ("b1", rand(16)), ("W2", rand(16, 4)), ("s", np.array(0.5, np.float32)))]
    nodes = [helper.make_node("Gemm", ["input", "W1", "b1"], ["h"]),
             helper.make_node("LeakyRelu", ["h"], ["a"], alpha=0.2),
             helper.make_node("MatMul", ["a", "W2"], ["m"]), helper.make_node("Mul", ["m", "s"], ["y"])]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["b", 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def _models():
    from onyxrt.testing import models

    return {"tiny_cnn": lambda: models.tiny_cnn(batch=2),
            "resnet": lambda: models.resnet(depth_blocks=(1, 1), width=8, num_classes=10, image=32, batch=2),
            "mobilenet_v2": lambda: models.mobilenet_v2(width_mult=0.25, num_classes=10, image=32, batch=2),
            "mlp": _mlp}


# The com.microsoft operators onnxruntime writes into each saved optimized model (checked,
# so a change in onnxruntime's optimizer shows here); ORT_ENABLE_ALL adds the
# com.microsoft.nchwc layout operators on the CNNs instead.
EXPECTED_FUSED = {"tiny_cnn": {"FusedConv"}, "resnet": {"FusedConv"}, "mobilenet_v2": {"FusedConv"},
                  "mlp": {"FusedGemm", "FusedMatMul"}}


@pytest.mark.parametrize("level", ["EXTENDED", "ALL"])
@pytest.mark.parametrize("name", ["tiny_cnn", "resnet", "mobilenet_v2", "mlp"])
def test_onnxruntime_saved_optimized_model(tmp_path, name, level):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, f"ORT_ENABLE_{level}")
    path = str(tmp_path / f"{name}_{level}.onnx")
    so.optimized_model_filepath = path
    ort.InferenceSession(_models()[name]().SerializeToString(), so, providers=["CPUExecutionProvider"])
    saved = onnx.load(path)
    ms_ops = {n.op_type for n in saved.graph.node if n.domain == "com.microsoft"}
    if level == "EXTENDED" or name == "mlp":
        assert ms_ops == EXPECTED_FUSED[name]
    else:
        assert {n.domain for n in saved.graph.node} >= {"com.microsoft.nchwc"}
    shape = [d.dim_value or 2 for d in saved.graph.input[0].type.tensor_type.shape.dim]
    feeds = {saved.graph.input[0].name: RNG.standard_normal(shape).astype(np.float32)}
    got = onyxrt.InferenceSession(path).run(None, feeds)
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


TOKENIZER_TEXT = np.array([["abc def1 gh", "xy  z", "a-b-c"], ["", "héllo wörld", "c c"]], dtype=object)


@pytest.mark.parametrize("attrs", [
    dict(separators=[" "]), dict(separators=[" "], mincharnum=2), dict(separators=[""]),
    dict(separators=["ab", "abc"]), dict(separators=["b-", "-"]), dict(separators=["-", "b-"]),
    dict(separators=[" ", "c "]), dict(separators=["[a-c]"]), dict(tokenexp="[a-z]+", mincharnum=2),
    dict(tokenexp="[a-zé]"), dict(separators=[" "], tokenexp="[a-z]+"), dict(tokenexp="q"),
    dict(separators=[" ", "-", "c"], mincharnum=1),
])
@pytest.mark.parametrize("mark", [0, 1])
@pytest.mark.parametrize("rank", [1, 2])
def test_tokenizer(numpy_bound, attrs, mark, rank):
    x = TOKENIZER_TEXT if rank == 2 else TOKENIZER_TEXT[1]
    attrs = {"mincharnum": 1, **attrs}
    n = domain_node("Tokenizer", [x], mark=mark, pad_value="#", **attrs)
    got = run_node(numpy_bound, n, [x])[0]
    want = ort_outputs(n, [x])[0]
    assert got.shape == want.shape
    assert got.tolist() == want.tolist()


def test_tokenizer_refusals(numpy_bound):
    x = TOKENIZER_TEXT[0]
    # (onnxruntime 1.32 accepts an empty separator among others and then returns no token
    # at all; the library refuses that node instead.)
    for attrs in (dict(separators=[""], mincharnum=2), dict(mincharnum=1)):
        n = domain_node("Tokenizer", [x], mark=0, pad_value="#", **attrs)
        with pytest.raises(onyxrt.errors.InvalidGraph):
            run_node(numpy_bound, n, [x])
        with pytest.raises(Exception):  # noqa: B017 - onnxruntime refuses it too, its own error
            ort_outputs(n, [x])


# ------------------------------------------------------------ SparseToDenseMatMul

SPARSE_DENSE = np.array([[0, 2, 0, 1], [0, 0, 0, 0], [3, 0, 0, 4]])


def _sparse_pair(fmt, dtype):
    """The same sparse A in onnxruntime's and onyxrt's SparseTensor (COO (row, col) pairs,
    which onnxruntime's kernel requires, or CSR)."""
    import onnxruntime as ort

    d = SPARSE_DENSE.astype(dtype)
    vals = np.ascontiguousarray(d[d != 0])
    out = []
    for mod in (ort, onyxrt):
        dev = mod.OrtDevice.make("cpu", 0)
        if fmt == "coo":
            idx = np.ascontiguousarray(np.argwhere(d != 0).astype(np.int64).reshape(-1))
            out.append(mod.SparseTensor.sparse_coo_from_numpy([3, 4], vals, idx, dev))
        else:
            inner, outer = np.array([1, 3, 0, 3], np.int64), np.array([0, 2, 2, 4], np.int64)
            out.append(mod.SparseTensor.sparse_csr_from_numpy([3, 4], vals, inner, outer, dev))
    return out


@pytest.mark.parametrize("fmt", ["coo", "csr"])
@pytest.mark.parametrize("dtype,elem", [(np.float32, TensorProto.FLOAT), (np.float64, TensorProto.DOUBLE),
                                        (np.int32, TensorProto.INT32), (np.int64, TensorProto.INT64),
                                        (np.uint32, TensorProto.UINT32), (np.uint64, TensorProto.UINT64)])
@pytest.mark.parametrize("attrs", [{}, dict(alpha=2.5), dict(transA=1), dict(transB=1, alpha=-0.5)])
def test_sparse_to_dense_matmul_session(fmt, dtype, elem, attrs):
    """Through both sessions with sparse feeds (onnxruntime applies alpha to float32 only)."""
    import onnxruntime as ort

    n = helper.make_node("SparseToDenseMatMul", ["A", "B"], ["Y"], domain="com.microsoft", **attrs)
    graph = helper.make_graph([n], "g", [helper.make_sparse_tensor_value_info("A", elem, [3, 4]),
                                         helper.make_tensor_value_info("B", elem, None)],
                              [helper.make_tensor_value_info("Y", elem, None)])
    model = helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 21),
                                                                   helper.make_opsetid("com.microsoft", 1)])
    rows = 3 if attrs.get("transA") else 4
    b = np.arange(rows * 2).reshape((2, rows) if attrs.get("transB") else (rows, 2)).astype(dtype)
    results = []
    for mod, a, kwargs in ((ort, _sparse_pair(fmt, dtype)[0], {"providers": ["CPUExecutionProvider"]}),
                           (onyxrt, _sparse_pair(fmt, dtype)[1], {})):
        sess = mod.InferenceSession(model.SerializeToString(), **kwargs)
        feeds = {"A": mod.OrtValue.ort_value_from_sparse_tensor(a), "B": mod.OrtValue.ortvalue_from_numpy(b)}
        results.append(sess.run_with_ort_values(["Y"], feeds)[0].numpy())
    assert results[0].dtype == results[1].dtype
    np.testing.assert_array_equal(results[1], results[0])


def test_sparse_to_dense_matmul_strict(strict_bound):
    """The kernel over array_api_strict: the sparse A stays on the host, the product not."""
    _, a = _sparse_pair("coo", np.float32)
    n = domain_node("SparseToDenseMatMul", [None, None], alpha=2.0)
    n.input[:] = ["in0", "in1"]
    b = np.arange(8, dtype=np.float32).reshape(4, 2)
    kdef, _ = strict_bound.registry.lookup(n.domain, n.op_type, 1)
    from onyxrt.kernels import KernelInfo

    kernel = kdef.factory(KernelInfo.from_node(n, 1, since_version=1))
    (y,) = kernel.compute(a, strict_bound.array(b))
    np.testing.assert_array_equal(strict_bound.host(y), 2.0 * SPARSE_DENSE.astype(np.float32) @ b)


@pytest.mark.parametrize("fw", [1, 2, 3])
def test_word_conv_embedding(bound, fw):
    seq = np.array([[3, 1, 4, 1, 5], [2, 7, 0, 0, 0], [6, 0, 2, 0, 0], [1, 2, 3, 4, 5], [5, 0, 0, 0, 0],
                    [0, 3, 2, 0, 0]], np.int32)
    c, w, b = rand(8, 4), rand(6, 1, fw, 4), rand(6)
    n = domain_node("WordConvEmbedding", [seq, w, b, c], embedding_size=6, conv_window_size=fw, char_embedding_size=4)
    got = run_node(bound, n, [seq, w, b, c])[0]
    want = ort_outputs(n, [seq, w, b, c])[0]
    # The last word starts with id 0 (length 0): onnxruntime leaves its row unwritten
    # (uninitialized memory); the library writes zeros there.
    np.testing.assert_allclose(got[:-1], want[:-1], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(got[-1], np.zeros(6, np.float32))


@pytest.mark.parametrize("act,params", ACTS)
def test_cpu_fused_conv_override(act, params):
    """The CPU provider runs com.microsoft FusedConv with its compiled convolution (its
    override): through a session, against onnxruntime, with a residual Z."""
    from onyxrt_cpu.kernels import registry
    from onyxrt_cpu.kernels.contrib_misc import FusedConv

    kdef, _ = registry.lookup("com.microsoft", "FusedConv", 1)
    assert kdef.factory is FusedConv
    x, w, b, z = rand(2, 4, 9, 9), rand(8, 4, 3, 3), rand(8), rand(2, 8, 5, 5)
    attrs = dict(activation=act, activation_params=params) if params else dict(activation=act) if act else {}
    n = helper.make_node("FusedConv", ["x", "w", "b", "z"], ["y"], domain="com.microsoft", strides=[2, 2],
                         pads=[1, 1, 1, 1], **attrs)
    graph = helper.make_graph([n], "g", [helper.make_tensor_value_info(k, TensorProto.FLOAT, None) for k in "xwbz"],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 21),
                                                                   helper.make_opsetid("com.microsoft", 1)])
    _session_pair(model, {"x": x, "w": w, "b": b, "z": z})


# ------------------------------------------------------------------ the THEN list


@pytest.mark.parametrize("case", [
    ([1, 2, 3, 4, 5, 6], [9, 9], 0, None), ([1, 2, 3, 4, 5, 6], [9, 2], 1, [2, 3, 7, 8, 9, 1]),
    ([1, 2, 3, 4, 5, 6], [9], 2, [3, 4, 5, 6, 0]), ([1, 2, 1, 2, 1, 2], [1, 2], 0, [1, 2, 1, 2, 1, 2, 3]),
    ([5, 6, 7, 5, 6, 8], [0, 5, 6], 6, [9]), ([4, 4, 4], [4], 3, [1]), ([1, 2, 3], [3, 1], 0, [1, 2, 3, 4]),
])
@pytest.mark.parametrize("grams", [(1, 1), (1, 3), (2, 3)])
def test_bifurcation_detector(bound, case, grams):
    src, cur, prev, pred = case
    inputs = [np.array(src, np.int64), np.array(cur, np.int64), np.array([prev], np.int64),
              None if pred is None else np.array(pred, np.int64)]
    n = domain_node("BifurcationDetector", inputs, 2, min_ngram_size=grams[0], max_ngram_size=grams[1])
    check(bound, n, inputs, host_inputs=(0, 1, 2, 3))


@pytest.mark.parametrize("shape", [(4, 6), (1, 5, 3), (1, 1), (3, 1)])
def test_dynamic_time_warping(bound, shape):
    x = np.abs(rand(*shape))
    check(bound, domain_node("DynamicTimeWarping", [x]), [x])
    ties = np.ones(shape, np.float32)  # equal costs: the tie rules decide the path
    check(bound, domain_node("DynamicTimeWarping", [ties]), [ties])


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
@pytest.mark.parametrize("attrs", [dict(size=2), dict(dim=1, size=3, step=2), dict(dim=0, size=1),
                                   dict(dim=-2, size=4, step=1), dict(dim=2, size=5, step=3)])
def test_unfold_tensor(bound, dtype, attrs):
    x = (rand(3, 4, 5) * 10).astype(dtype)
    check(bound, domain_node("UnfoldTensor", [x], **attrs), [x])


def test_sample_op(bound):
    x = rand(2, 3)
    check(bound, domain_node("SampleOp", [x]), [x])


NGRAM_IDS = np.array([[4, 2, 9, 2, 5, 2], [7, 7, 1, 2, 3, 8]])


@pytest.mark.parametrize("dtype", [np.int64, np.int32])
@pytest.mark.parametrize("n,heads", [(2, 1), (3, 1), (3, 2), (4, 2)])
@pytest.mark.parametrize("extras", ["", "past", "eos", "eos_reset", "offsets", "segments", "segments_eos", "all"])
def test_ngram_hash_mapping(bound, dtype, n, heads, extras):
    ids = NGRAM_IDS.astype(dtype)
    mult = np.array([3, -5, 7, 2 ** 29 + 11][:n], dtype)
    vocab = np.array([101, 103, 97, 89, 83, 79][:(n - 1) * heads], dtype)
    past = np.array([[6, 8, 2][:n - 1], [1, 2, 3][:n - 1]], dtype) if extras in ("past", "all") else None
    offsets = (np.arange((n - 1) * heads) * 1000).astype(dtype) if extras in ("offsets", "all") else None
    eos = np.array(2, dtype) if "eos" in extras or extras == "all" else None
    seg = np.array([[0, 0, 1, 1, 1, 2], [0, 1, 1, 1, 0, 0]], np.int32) if "segments" in extras or extras == "all" \
        else None
    attrs = dict(reset_on_eos=1) if extras in ("eos_reset", "all") else {}
    inputs = [ids, mult, vocab, past, offsets, eos, seg]
    node_ = domain_node("NGramHashMapping", inputs, 2, pad_id=1, n_head_per_ngram=heads, max_ngram_size=n, **attrs)
    check(bound, node_, inputs, host_inputs=(5,))


def test_ngram_hash_mapping_wraps(bound):
    """Products wrap in the ids' type and the modulo is a floor modulo (as onnxruntime)."""
    for dtype, m in ((np.int64, 2 ** 33 + 3), (np.int32, 2 ** 20 + 3)):
        inputs = [np.array([[2 ** 30 + 7, -5, 3]], dtype), np.array([m, -7], dtype), np.array([1000], dtype)]
        node_ = domain_node("NGramHashMapping", inputs, 2, pad_id=0, n_head_per_ngram=1, max_ngram_size=2)
        check(bound, node_, inputs)
