"""com.microsoft.nchwc operators (onyxrt_ops.contrib_nchwc) against onnxruntime.

Three levels: single nodes against onnxruntime's own nchwc kernels (at this machine's block
size, which is onnxruntime's); single nodes on hand-blocked tensors for block sizes 8 AND
16 (set through ONYXRT_NCHWC_BLOCK) against onnxruntime's standard operators on the
logical tensors; and models saved by onnxruntime at ORT_ENABLE_ALL (so they hold nchwc
operators and pre-reordered weights) run through onyxrt.InferenceSession.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from library_harness import bind, domain_node, ort_outputs, run_node
from onnx import helper, numpy_helper

import onyxrt
from onyxrt.errors import InvalidGraph
from onyxrt.testing.models import mobilenet_v2, resnet, tiny_cnn
from onyxrt_ops.contrib_nchwc import host_block_size

NCHWC = "com.microsoft.nchwc"
HB = host_block_size()  # onnxruntime's block size on this machine (no override set here)
RTOL, ATOL = 1e-5, 1e-5
# Convolutions sum up to 9 * 32 products of values near 1 into results up to ~30 in a
# different order than MLAS's kernels: a few float32 ulps of the largest partial sums.
CONV_ATOL = 1e-4
rng = np.random.default_rng(0)


def f32(*shape):
    return rng.standard_normal(shape).astype(np.float32)


# Independent numpy reference of the layout (reshape/transpose, not the library's code).
def to_blocked(x, b):
    n, c, h, w = x.shape
    cp = -(-c // b) * b
    xp = np.zeros((n, cp, h, w), np.float32)
    xp[:, :c] = x
    return np.ascontiguousarray(xp.reshape(n, cp // b, b, h, w).transpose(0, 1, 3, 4, 2)).reshape(n, cp, h, w)


def from_blocked(x, b, c=None):
    n, cp, h, w = x.shape
    y = x.reshape(n, cp // b, h, w, b).transpose(0, 1, 4, 2, 3).reshape(n, cp, h, w)
    return y[:, : (c or cp)]


def filters_oihwbibo(w, b):
    o, i, kh, kw = w.shape
    return np.ascontiguousarray(w.reshape(o // b, b, i // b, b, kh, kw).transpose(0, 2, 4, 5, 3, 1)).reshape(w.shape)


def filters_oihwbo(w, b):
    o, i, kh, kw = w.shape
    return np.ascontiguousarray(w.reshape(o // b, b, i, kh, kw).transpose(0, 2, 3, 4, 1)).reshape(w.shape)


def ort_standard(op, inputs, **attrs):
    """onnxruntime's default-domain ``op`` on ``inputs`` (opset 21)."""
    n = domain_node(op, inputs, domain="", **attrs)
    return ort_outputs(n, inputs)[0]


def check(bound, n, inputs, want, atol=ATOL):
    got = run_node(bound, n, inputs)[0]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=CONV_ATOL if n.op_type == "Conv" else atol)


ACTS = {
    "Relu": ([], lambda y: np.maximum(y, 0)),
    "Tanh": ([], np.tanh),
    "Sigmoid": ([], lambda y: 1 / (1 + np.exp(-y))),
    "LeakyRelu": ([0.1], lambda y: np.where(y >= 0, y, 0.1 * y)),
    "Clip": ([-0.5, 0.7], lambda y: np.clip(y, -0.5, 0.7)),
    "HardSigmoid": ([0.3, 0.4], lambda y: np.clip(0.3 * y + 0.4, 0, 1)),
}


# ------------------------------------------------------------ onnxruntime's own kernels


@pytest.mark.parametrize("channels,last", [(3 * HB // 2, 0), (2 * HB, 0), (HB + 4, 1), (4, 0)])
def test_reorder_input_output_vs_ort(bound, channels, last):
    x = f32(2, 5, 6, channels) if last else f32(2, channels, 5, 6)
    n = domain_node("ReorderInput", [x], domain=NCHWC, channels_last=last)
    want = ort_outputs(n, [x])[0]
    check(bound, n, [x], want)
    back = domain_node("ReorderOutput", [want], domain=NCHWC, channels=channels, channels_last=last)
    check(bound, back, [want], ort_outputs(back, [want])[0])
    np.testing.assert_array_equal(run_node(bound, back, [want])[0], x)


CONV_CASES = [
    dict(),
    dict(strides=[2, 2], pads=[1, 0, 2, 1]),
    dict(dilations=[2, 1], pads=[2, 1, 2, 1]),
    dict(auto_pad="SAME_UPPER", strides=[2, 2]),
    dict(auto_pad="SAME_LOWER"),
    dict(auto_pad="VALID", strides=[1, 2]),
]


@pytest.mark.parametrize("attrs", CONV_CASES)
@pytest.mark.parametrize("kind", ["blocked", "plain", "depthwise", "grouped"])
def test_conv_vs_ort(numpy_bound, strict_bound, kind, attrs):
    b, c, m = HB, 2 * HB, 2 * HB
    group = {"depthwise": c, "grouped": 2}.get(kind, 1)
    cin = 3 if kind == "plain" else c
    x = f32(2, cin, 7, 8) if kind == "plain" else to_blocked(f32(2, c, 7, 8), b)
    w = f32(m, 1 if kind == "depthwise" else cin // group, 3, 3)
    wb = filters_oihwbo(w, b) if kind in ("plain", "depthwise") else filters_oihwbibo(w, b)
    bias = f32(m)
    n = domain_node("Conv", [x, wb, bias], domain=NCHWC, group=group, **attrs)
    want = ort_outputs(n, [x, wb, bias])[0]
    check(numpy_bound, n, [x, wb, bias], want)
    check(strict_bound, n, [x, wb, bias], want)


@pytest.mark.parametrize("act", sorted(ACTS))
def test_conv_activation_and_sum_vs_ort(numpy_bound, act):
    params, _ = ACTS[act]
    x, w, z = to_blocked(f32(1, HB, 5, 5), HB), f32(HB, HB, 3, 3), f32(1, HB, 5, 5)
    wb = filters_oihwbibo(w, HB)
    extra = dict(activation_params=params) if params else {}
    n = domain_node("Conv", [x, wb, None, z], domain=NCHWC, pads=[1, 1, 1, 1], activation=act, **extra)
    check(numpy_bound, n, [x, wb, None, z], ort_outputs(n, [x, wb, None, z])[0])


POOLS = [
    ("MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2])),
    ("MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    ("MaxPool", dict(kernel_shape=[2, 3], pads=[1, 1, 0, 1], dilations=[2, 1])),
    ("MaxPool", dict(kernel_shape=[3, 3], auto_pad="SAME_UPPER", strides=[2, 2])),
    ("AveragePool", dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1])),
    ("AveragePool", dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=1)),
    ("AveragePool", dict(kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)),
    ("AveragePool", dict(kernel_shape=[3, 2], auto_pad="SAME_LOWER")),
    ("GlobalMaxPool", {}),
    ("GlobalAveragePool", {}),
]


@pytest.mark.parametrize("op,attrs", POOLS)
def test_pools_vs_ort(bound, op, attrs):
    x = to_blocked(f32(2, 2 * HB, 7, 6), HB)
    n = domain_node(op, [x], domain=NCHWC, **attrs)
    check(bound, n, [x], ort_outputs(n, [x])[0])


@pytest.mark.parametrize("mode,transform", [("nearest", None), ("linear", None), ("linear", "asymmetric"),
                                            ("linear", "align_corners"), ("linear", "half_pixel")])
@pytest.mark.parametrize("scales", [[1, 1, 2, 3], [1, 1, 1, 2], [1, 1, 3, 1]])
def test_upsample_vs_ort(bound, mode, transform, scales):
    x = to_blocked(f32(1, HB, 4, 5), HB)
    extra = {"coordinate_transformation_mode": transform} if transform else {}
    n = domain_node("Upsample", [x], domain=NCHWC, scales=scales, mode=mode, **extra)
    check(bound, n, [x], ort_outputs(n, [x])[0])


# ------------------------------------------------- hand-blocked tensors, block sizes 8 and 16


@pytest.fixture(params=[8, 16])
def bs(request, monkeypatch):
    monkeypatch.setenv("ONYXRT_NCHWC_BLOCK", str(request.param))
    return request.param


@pytest.mark.parametrize("kind", ["blocked", "plain", "depthwise", "grouped"])
def test_conv_block_sizes(bound, bs, kind):
    c, m = 32, 32
    group = {"depthwise": c, "grouped": 2}.get(kind, 1)
    cin = 3 if kind == "plain" else c
    xl, w, bias = f32(1, cin, 6, 7), f32(m, 1 if kind == "depthwise" else cin // group, 3, 3), f32(m)
    attrs = dict(strides=[2, 1], pads=[1, 1, 1, 1], group=group)
    want = ort_standard("Conv", [xl, w, bias], **attrs)
    zl = f32(*want.shape)
    x = xl if kind == "plain" else to_blocked(xl, bs)
    wb = filters_oihwbo(w, bs) if kind in ("plain", "depthwise") else filters_oihwbibo(w, bs)
    n = domain_node("Conv", [x, wb, bias, to_blocked(zl, bs)], domain=NCHWC, activation="LeakyRelu",
                    activation_params=[0.2], **attrs)
    y = want + zl
    check(bound, n, [x, wb, bias, to_blocked(zl, bs)], to_blocked(np.where(y >= 0, y, 0.2 * y), bs))


@pytest.mark.parametrize("op,attrs", POOLS)
def test_pools_block_sizes(bound, bs, op, attrs):
    xl = f32(2, 32, 7, 6)
    want = ort_standard(op, [xl], **attrs)
    check(bound, domain_node(op, [to_blocked(xl, bs)], domain=NCHWC, **attrs), [to_blocked(xl, bs)],
          to_blocked(want, bs))


def test_reorder_and_upsample_block_sizes(bound, bs):
    xl = f32(1, 20, 3, 4)
    blocked = to_blocked(xl, bs)
    check(bound, domain_node("ReorderInput", [xl], domain=NCHWC), [xl], blocked)
    check(bound, domain_node("ReorderOutput", [blocked], domain=NCHWC, channels=20), [blocked], xl)
    nearest = np.repeat(np.repeat(xl, 2, axis=2), 3, axis=3)
    check(bound, domain_node("Upsample", [blocked], domain=NCHWC, scales=[1, 1, 2, 3]), [blocked],
          to_blocked(nearest, bs))


def test_block_size_derived_from_the_tensors(numpy_bound):
    """Where one block size alone fits a node's tensors, it is used whatever this machine's."""
    xl, w = f32(1, 24, 5, 5), f32(24, 24, 1, 1)  # 24 channels: 8 only
    n = domain_node("Conv", [to_blocked(xl, 8), filters_oihwbibo(w, 8)], domain=NCHWC)
    check(numpy_bound, n, [to_blocked(xl, 8), filters_oihwbibo(w, 8)],
          to_blocked(ort_standard("Conv", [xl, w]), 8))
    x12, w12 = f32(1, 12, 5, 5), f32(16, 12, 3, 3)  # a plain 12-channel input: 16 only
    n = domain_node("Conv", [x12, filters_oihwbo(w12, 16)], domain=NCHWC)
    check(numpy_bound, n, [x12, filters_oihwbo(w12, 16)], to_blocked(ort_standard("Conv", [x12, w12]), 16))
    blocked = to_blocked(f32(1, 20, 2, 2), 16)  # 32 padded channels for 20: 16 only
    out = domain_node("ReorderOutput", [blocked], domain=NCHWC, channels=20)
    check(numpy_bound, out, [blocked], from_blocked(blocked, 16, 20))
    pool = domain_node("MaxPool", [to_blocked(xl, 8)], domain=NCHWC, kernel_shape=[2, 2])
    check(numpy_bound, pool, [to_blocked(xl, 8)], to_blocked(ort_standard("MaxPool", [xl], kernel_shape=[2, 2]), 8))


def test_errors(numpy_bound):
    x = to_blocked(f32(1, 16, 4, 4), 16)
    for n in (domain_node("ReorderOutput", [x], domain=NCHWC),
              domain_node("Upsample", [x], domain=NCHWC, scales=[1, 2, 2, 2]),
              domain_node("Upsample", [x], domain=NCHWC, scales=[1, 1, 2, 2], mode="cubic"),
              domain_node("Conv", [x, f32(16, 16, 3, 3)], domain=NCHWC, activation="Gelu"),
              domain_node("Conv", [x, f32(16, 16, 3, 3)], domain=NCHWC, activation="Clip", activation_params=[0.0])):
        with pytest.raises(InvalidGraph, match="node"):
            run_node(numpy_bound, n, [x])
    with pytest.raises(ValueError, match="block size"):  # 20 channels: no block size fits
        run_node(numpy_bound, domain_node("MaxPool", [f32(1, 20, 4, 4)], domain=NCHWC, kernel_shape=[2, 2]),
                 [f32(1, 20, 4, 4)])
    with pytest.raises(ValueError, match="rank"):
        run_node(numpy_bound, domain_node("GlobalMaxPool", [f32(16, 4)], domain=NCHWC), [f32(16, 4)])


def test_gpu_backend_matches_numpy(numpy_bound):
    from onyxrt_gpu.kernels._common import BACKEND
    from onyxrt_gpu.testing.simulated_cupy import install

    x, w, bias = to_blocked(f32(1, 32, 6, 6), HB), filters_oihwbibo(f32(32, 32, 3, 3), HB), f32(32)
    nodes = [
        (domain_node("Conv", [x, w, bias, x], domain=NCHWC, pads=[1, 1, 1, 1], activation="Sigmoid"), [x, w, bias, x]),
        (domain_node("MaxPool", [x], domain=NCHWC, kernel_shape=[3, 3], ceil_mode=1, strides=[2, 2]), [x]),
        (domain_node("AveragePool", [x], domain=NCHWC, kernel_shape=[3, 3], pads=[1, 1, 1, 1]), [x]),
        (domain_node("GlobalAveragePool", [x], domain=NCHWC), [x]),
        (domain_node("Upsample", [x], domain=NCHWC, scales=[1, 1, 2, 2], mode="linear"), [x]),
        (domain_node("ReorderOutput", [x], domain=NCHWC, channels=30, channels_last=1), [x]),
        (domain_node("ReorderInput", [f32(1, 20, 3, 3)], domain=NCHWC), None),
    ]
    with install():
        import cupy

        gpu = bind("cupy", BACKEND)
        gpu.array = cupy.asarray
        gpu.host = lambda v: v.get()
        for n, inputs in nodes:
            inputs = inputs or [f32(1, 20, 3, 3)]
            np.testing.assert_allclose(run_node(gpu, n, inputs)[0], run_node(numpy_bound, n, inputs)[0],
                                       rtol=1e-6, atol=1e-6)


# ------------------------------------------------------------ models saved by onnxruntime


def ort_optimized(model: onnx.ModelProto, tmp_path) -> bytes:
    """``model`` as onnxruntime saves it at ORT_ENABLE_ALL: holding nchwc operators."""
    path = str(tmp_path / "optimized.onnx")
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.optimized_model_filepath = path
    ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    saved = onnx.load(path)
    ops = {(n.domain, n.op_type) for n in saved.graph.node}
    assert (NCHWC, "Conv") in ops or (NCHWC, "MaxPool") in ops, ops
    return saved.SerializeToString()


def compare(data: bytes, feeds: dict, rtol=1e-4, atol=1e-5) -> set:
    want = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)
    got = onyxrt.InferenceSession(data).run(None, feeds)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
    return {n.op_type for n in onnx.load_from_string(data).graph.node if n.domain == NCHWC}


def _conv(nodes, inits, x, name, cin, cout, k=3, **attrs):
    w = numpy_helper.from_array(f32(cout, cin // attrs.get("group", 1), k, k) * 0.3, name + "_w")
    bias = numpy_helper.from_array(f32(cout), name + "_b")
    inits += [w, bias]
    nodes.append(helper.make_node("Conv", [x, w.name, bias.name], [name], **attrs))
    return name


def _model(nodes, inits, shape, opset=13):
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", 1, shape)],
                          [helper.make_tensor_value_info(nodes[-1].output[0], 1, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


@pytest.mark.parametrize("act", [None, "Relu", "Sigmoid", "Tanh"])
def test_saved_cnn_convs_pools_resize(tmp_path, act):
    """Plain first conv (3 channels), stride/dilation/auto_pad, depthwise, grouped, a
    residual Add (Sum fusion), an activation, MaxPool ceil_mode, AveragePool, Resize
    nearest (nchwc Upsample), Concat, BatchNormalization, global pools."""
    nodes, inits = [], []
    h = _conv(nodes, inits, "x", "c1", 3, 32, pads=[1, 1, 1, 1], strides=[2, 2])
    if act:
        nodes.append(helper.make_node(act, [h], ["a1"]))
        h = "a1"
    d = _conv(nodes, inits, h, "dw", 32, 32, pads=[2, 2, 2, 2], dilations=[2, 2], group=32)
    gr = _conv(nodes, inits, d, "gr", 32, 32, auto_pad="SAME_UPPER", group=2)
    nodes.append(helper.make_node("Add", [gr, h], ["res"]))
    nodes.append(helper.make_node("MaxPool", ["res"], ["mp"], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1))
    nodes.append(helper.make_node("AveragePool", ["mp"], ["ap"], kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                                  count_include_pad=1))
    inits.append(numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales"))
    nodes.append(helper.make_node("Resize", ["ap", "", "scales"], ["up"], mode="nearest",
                                  coordinate_transformation_mode="asymmetric", nearest_mode="floor"))
    c2 = _conv(nodes, inits, "up", "c2", 32, 16, k=1)
    nodes.append(helper.make_node("Concat", ["up", c2], ["cat"], axis=1))
    bn = [numpy_helper.from_array(v, f"bn_{i}") for i, v in
          enumerate([f32(48), f32(48), f32(48), np.abs(f32(48)) + 0.5])]
    inits += bn
    nodes.append(helper.make_node("BatchNormalization", ["cat"] + [t.name for t in bn], ["bn"]))
    nodes.append(helper.make_node("GlobalMaxPool", ["bn"], ["gmp"]))
    nodes.append(helper.make_node("GlobalAveragePool", ["bn"], ["gap"]))
    nodes.append(helper.make_node("Add", ["gmp", "gap"], ["y"]))
    data = ort_optimized(_model(nodes, inits, [2, 3, 19, 17]), tmp_path)
    ops = compare(data, {"x": f32(2, 3, 19, 17)})
    assert {"Conv", "ReorderOutput"} <= ops, ops


@pytest.mark.parametrize("act,params", [("LeakyRelu", [0.1]), ("Clip", [0.0, 6.0]), ("HardSigmoid", [0.2, 0.5])])
def test_saved_fused_activations(tmp_path, act, params):
    """Conv + LeakyRelu/Clip/HardSigmoid: onnxruntime fuses them into the nchwc Conv's
    activation/activation_params; channels 20 (not a multiple of 8 or 16)."""
    nodes, inits = [], []
    h = _conv(nodes, inits, "x", "c1", 4, 20, pads=[1, 1, 1, 1])
    if act == "Clip":
        inits += [numpy_helper.from_array(np.float32(v), f"clip{i}") for i, v in enumerate(params)]
        nodes.append(helper.make_node("Clip", [h, "clip0", "clip1"], ["a"]))
    else:
        kw = {"alpha": params[0]} if act == "LeakyRelu" else {"alpha": params[0], "beta": params[1]}
        nodes.append(helper.make_node(act, [h], ["a"], **kw))
    _conv(nodes, inits, "a", "c2", 20, 36, k=3, pads=[0, 1, 1, 0])
    data = ort_optimized(_model(nodes, inits, [1, 4, 9, 11]), tmp_path)
    saved = onnx.load_from_string(data)
    acts = [helper.get_attribute_value(a) for n in saved.graph.node if n.domain == NCHWC
            for a in n.attribute if a.name == "activation"]
    assert act.encode() in acts
    compare(data, {"x": f32(1, 4, 9, 11)})


@pytest.mark.parametrize("build,shape", [
    (lambda: tiny_cnn(image=16, batch=2), [2, 1, 16, 16]),
    (lambda: resnet(depth_blocks=(1, 1), width=8, num_classes=5, image=32, batch=1), [1, 3, 32, 32]),
    (lambda: mobilenet_v2(width_mult=0.35, num_classes=5, image=32, batch=1), [1, 3, 32, 32]),
])
def test_saved_library_models(tmp_path, build, shape):
    data = ort_optimized(build(), tmp_path)
    other = {(n.domain, n.op_type) for n in onnx.load_from_string(data).graph.node
             if n.domain not in ("", NCHWC)}
    assert not other, f"the saved model holds other domains' operators: {other}"
    assert "Conv" in compare(data, {onnx.load_from_string(data).graph.input[0].name: f32(*shape)})
