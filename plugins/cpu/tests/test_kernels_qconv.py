"""Tests for QLinearConv's integer kernels (csrc/qconv.c through
onyxrt_cpu.kernels.quantization.QLinearConv): with constant weights they must give the
numpy path's bytes exactly (the same exact accumulator, the same float requantization
steps), and onnxruntime's within one quantization step (its requantization rounds its own
way), on odd shapes: every 8-bit type pairing, per-tensor and per-channel weights with and
without zero points, groups, depthwise, strides, dilations, asymmetric and "same" padding,
1-D, batches, widths that are no multiple of sixteen.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onyxrt
from onyxrt_cpu import native

needs_vnni = pytest.mark.skipif(not native.QGEMM, reason="the integer kernels need AVX-512 VNNI")

_TYPES = {np.dtype(np.int8): TensorProto.INT8, np.dtype(np.uint8): TensorProto.UINT8}


def _ints(rng, dtype, size):
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, size=size, dtype=dtype)


def _model(x_dtype, w, w_scale, w_zero, y_dtype, bias, constant_w, **attrs):
    """QLinearConv with x, x_scale, x_zero_point, y_scale, y_zero_point as inputs and w
    (an initializer when ``constant_w``), its scale and zero point, the bias constants."""
    inits = [numpy_helper.from_array(w_scale, "ws"), numpy_helper.from_array(w_zero, "wz")]
    inputs = ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"]
    graph_inputs = [
        helper.make_tensor_value_info("x", _TYPES[np.dtype(x_dtype)], None),
        helper.make_tensor_value_info("xs", TensorProto.FLOAT, []),
        helper.make_tensor_value_info("xz", _TYPES[np.dtype(x_dtype)], []),
        helper.make_tensor_value_info("ys", TensorProto.FLOAT, []),
        helper.make_tensor_value_info("yz", _TYPES[np.dtype(y_dtype)], []),
    ]
    if constant_w:
        inits.append(numpy_helper.from_array(w, "w"))
    else:
        graph_inputs.append(helper.make_tensor_value_info("w", _TYPES[w.dtype], None))
    if bias is not None:
        inits.append(numpy_helper.from_array(bias, "b"))
        inputs.append("b")
    node = helper.make_node("QLinearConv", inputs, ["y"], **attrs)
    graph = helper.make_graph([node], "qconv", graph_inputs,
                              [helper.make_tensor_value_info("y", _TYPES[np.dtype(y_dtype)], None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _case(seed, x_dtype, w_dtype, x_shape, w_shape, per_channel, w_zero, with_bias, **attrs):
    rng = np.random.default_rng(seed)
    y_dtype = x_dtype
    m = w_shape[0]
    x = _ints(rng, x_dtype, x_shape)
    w = _ints(rng, w_dtype, w_shape)
    n_scales = m if per_channel else 1
    w_scale = rng.uniform(0.001, 0.01, size=n_scales).astype(np.float32)
    if w_zero:
        lo, hi = (-5, 5) if w_dtype == np.int8 else (100, 150)
        wz = rng.integers(lo, hi, size=n_scales).astype(w_dtype)
    else:
        wz = np.zeros(n_scales, w_dtype)
    if not per_channel:
        w_scale, wz = w_scale.reshape(()), wz.reshape(())
    bias = rng.integers(-5000, 5000, size=m).astype(np.int32) if with_bias else None
    info = np.iinfo(x_dtype)
    feeds = {
        "x": x,
        "xs": np.array(rng.uniform(0.01, 0.05), np.float32),
        "xz": np.array(rng.integers(info.min // 2 + 5, info.max // 2), x_dtype),
        "ys": np.array(rng.uniform(0.05, 0.5), np.float32),
        "yz": np.array(3 if y_dtype == np.int8 else 120, y_dtype),
    }
    models = {c: _model(x_dtype, w, w_scale, wz, y_dtype, bias, c, **attrs) for c in (True, False)}
    return models, feeds, w


def _run(model, feeds):
    sess = onyxrt.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)[0]


@pytest.fixture
def integer_calls(monkeypatch):
    """Counts of the integer kernels' calls (GEMM path, depthwise path)."""
    calls = {"gemm": 0, "depthwise": 0}

    def counted(name, fn):
        def wrapper(*args, **kwargs):
            calls[name] += 1
            return fn(*args, **kwargs)
        return wrapper

    monkeypatch.setattr(native, "qconv", counted("gemm", native.qconv))
    monkeypatch.setattr(native, "qconv_depthwise", counted("depthwise", native.qconv_depthwise))
    return calls


# (x shape, w shape, attributes): odd sizes, every geometry the kernels distinguish.
GEOMETRIES = [
    ((2, 3, 17, 19), (8, 3, 3, 3), dict(pads=[1, 1, 1, 1])),
    ((1, 16, 14, 14), (32, 16, 1, 1), {}),  # 1x1: x read as its own im2col matrix
    ((2, 5, 9, 23), (7, 5, 3, 3), dict(strides=[2, 2], pads=[0, 0, 1, 1])),
    ((1, 8, 11, 13), (8, 1, 3, 3), dict(group=8, pads=[1, 1, 1, 1])),  # depthwise
    ((2, 8, 12, 12), (8, 1, 3, 3), dict(group=8, strides=[2, 2], pads=[1, 1, 1, 1])),
    ((1, 6, 7, 9), (6, 1, 3, 3), dict(group=6, strides=[3, 2], pads=[0, 2, 1, 0])),
    ((1, 6, 10, 10), (12, 2, 3, 3), dict(group=3, dilations=[2, 2], pads=[2, 2, 2, 2])),
    ((1, 4, 7, 7), (6, 2, 5, 5), dict(group=2, pads=[2, 2, 2, 2])),
    ((1, 4, 6, 6), (8, 1, 3, 3), dict(group=4, pads=[1, 1, 1, 1])),  # channel multiplier 2
    ((1, 3, 33, 1), (5, 3, 7, 1), dict(pads=[3, 0, 3, 0])),
    ((1, 9, 13, 13), (9, 1, 3, 3), dict(group=9, dilations=[2, 2], auto_pad="SAME_UPPER")),
    ((1, 10, 15, 15), (20, 10, 3, 3), dict(strides=[2, 2], auto_pad="SAME_LOWER")),
    ((2, 4, 37), (6, 4, 5), dict(strides=[2], pads=[1, 2])),  # 1-D
    ((1, 2, 40), (3, 2, 21), dict(pads=[10, 10])),  # wider than the shifted packing takes: im2col
    ((1, 64, 20, 20), (64, 64, 3, 3), dict(pads=[1, 1, 1, 1])),
    # depthwise stride 2 (its phase planes made straight from the bytes): rows of several
    # 16-column chunks, asymmetric and large pads, a one-row kernel, "same" padding
    ((1, 5, 37, 70), (5, 1, 3, 3), dict(group=5, strides=[2, 2], pads=[0, 1, 1, 0])),
    ((2, 3, 9, 8), (3, 1, 3, 3), dict(group=3, strides=[2, 2], pads=[2, 0, 0, 2])),
    ((1, 4, 5, 33), (4, 1, 1, 3), dict(group=4, strides=[2, 2])),
    ((1, 7, 16, 31), (7, 1, 3, 3), dict(group=7, strides=[2, 2], auto_pad="SAME_UPPER")),
]
TYPE_PAIRS = [(np.uint8, np.int8), (np.int8, np.int8), (np.uint8, np.uint8)]


@needs_vnni
@pytest.mark.parametrize("geometry", GEOMETRIES, ids=lambda g: "x".join(map(str, g[1])) + str(sorted(g[2])))
@pytest.mark.parametrize("types", TYPE_PAIRS, ids=lambda t: f"{np.dtype(t[0])}-{np.dtype(t[1])}")
@pytest.mark.parametrize("per_channel,w_zero", [(False, False), (True, True)])
def test_integer_kernel_is_bit_identical_to_the_numpy_path(geometry, types, per_channel, w_zero, integer_calls):
    x_shape, w_shape, attrs = geometry
    models, feeds, w = _case(len(x_shape) + w_shape[0], *types, x_shape, w_shape, per_channel, w_zero,
                             True, **attrs)
    fast = _run(models[True], feeds)
    assert sum(integer_calls.values()) == 1, "the integer kernel did not run"
    depthwise = attrs.get("group", 1) == x_shape[1] == w_shape[0]
    assert integer_calls["depthwise" if depthwise else "gemm"] == 1
    reference = _run(models[False], {**feeds, "w": w})
    assert fast.dtype == reference.dtype and fast.shape == reference.shape
    np.testing.assert_array_equal(fast, reference)


@needs_vnni
@pytest.mark.parametrize("geometry", GEOMETRIES[:6] + GEOMETRIES[-2:], ids=lambda g: "x".join(map(str, g[1])))
def test_integer_kernel_against_onnxruntime(geometry):
    ort = pytest.importorskip("onnxruntime")
    x_shape, w_shape, attrs = geometry
    models, feeds, _ = _case(7, np.uint8, np.int8, x_shape, w_shape, False, False, True, **attrs)
    ours = _run(models[True], feeds)
    theirs = ort.InferenceSession(models[True].SerializeToString(),
                                  providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    # onnxruntime requantizes with its own float steps: at most one step apart
    assert np.abs(ours.astype(np.int32) - theirs.astype(np.int32)).max() <= 1
    assert np.mean(ours == theirs) > 0.95


@needs_vnni
def test_integer_kernel_without_bias_and_extreme_values(integer_calls):
    """Saturation at both ends and zero points at the type's limits."""
    rng = np.random.default_rng(3)
    x = np.where(rng.random((1, 8, 9, 9)) < 0.5, 0, 255).astype(np.uint8)
    w = np.where(rng.random((16, 8, 3, 3)) < 0.5, -128, 127).astype(np.int8)
    model = _model(np.uint8, w, np.array(0.5, np.float32), np.array(0, np.int8), np.uint8, None, True,
                   pads=[1, 1, 1, 1])
    feeds = {"x": x, "xs": np.array(0.02, np.float32), "xz": np.array(255, np.uint8),
             "ys": np.array(0.01, np.float32), "yz": np.array(0, np.uint8)}
    fast = _run(model, feeds)
    assert integer_calls["gemm"] == 1
    slow = _run(_model(np.uint8, w, np.array(0.5, np.float32), np.array(0, np.int8), np.uint8, None, False,
                       pads=[1, 1, 1, 1]), {**feeds, "w": w})
    np.testing.assert_array_equal(fast, slow)
    assert fast.min() == 0 and fast.max() == 255  # both ends saturate


def test_without_the_kernel_the_numpy_path_runs(monkeypatch):
    """Where the CPU has no VNNI (or the weights are no constant) QLinearConv still runs."""
    monkeypatch.setattr(native, "QGEMM", False)
    models, feeds, w = _case(1, np.uint8, np.int8, (1, 3, 8, 8), (4, 3, 3, 3), False, False, True, pads=[1, 1, 1, 1])
    np.testing.assert_array_equal(_run(models[True], feeds), _run(models[False], {**feeds, "w": w}))



def test_a_weight_zero_point_fed_at_run_time_is_honoured(integer_calls):
    """Constant weights with a zero point that is a graph input: the prepared integer
    weights cannot assume it, so the numpy path runs, with the fed value."""
    models, feeds, w = _case(4, np.uint8, np.int8, (1, 3, 8, 8), (4, 3, 3, 3), False, True, True, pads=[1, 1, 1, 1])
    for model in models.values():
        wz = next(t for t in model.graph.initializer if t.name == "wz")
        model.graph.initializer.remove(wz)
        model.graph.input.append(helper.make_tensor_value_info("wz", TensorProto.INT8, []))
    fed = {**feeds, "wz": np.array(3, np.int8)}
    got = _run(models[True], fed)
    assert integer_calls["gemm"] == 0
    np.testing.assert_array_equal(got, _run(models[False], {**fed, "w": w}))
    assert not np.array_equal(got, _run(models[True], {**fed, "wz": np.array(0, np.int8)}))


@needs_vnni
def test_a_depthwise_filter_too_wide_for_exact_float_sums_takes_the_gemm(integer_calls):
    """The depthwise kernel's float32 sums are exact up to 258 taps; a 17 x 17 filter (289)
    with extreme values runs through the GEMM instead, bit-identical to the numpy path."""
    rng = np.random.default_rng(11)
    x = np.where(rng.random((1, 2, 20, 20)) < 0.5, 0, 255).astype(np.uint8)
    w = np.where(rng.random((2, 1, 17, 17)) < 0.5, -128, 127).astype(np.int8)
    args = (np.uint8, w, np.array(1e-4, np.float32), np.array(0, np.int8), np.uint8, None)
    feeds = {"x": x, "xs": np.array(0.02, np.float32), "xz": np.array(255, np.uint8),
             "ys": np.array(0.5, np.float32), "yz": np.array(128, np.uint8)}
    fast = _run(_model(*args, True, group=2, pads=[8, 8, 8, 8]), feeds)
    assert integer_calls == {"gemm": 1, "depthwise": 0}
    np.testing.assert_array_equal(fast, _run(_model(*args, False, group=2, pads=[8, 8, 8, 8]), {**feeds, "w": w}))


# ------------------------------------------------------------------ ConvInteger


def _conv_integer_model(x_dtype, w, w_zero, constant_w, with_x_zero, **attrs):
    """ConvInteger(x, w[, x_zero_point][, w_zero_point]) -> int32; x and its zero point fed
    (as DynamicQuantizeLinear feeds them), w an initializer when ``constant_w``."""
    inits, graph_inputs = [], [helper.make_tensor_value_info("x", _TYPES[np.dtype(x_dtype)], None)]
    inputs = ["x", "w", "xz" if with_x_zero else "", "wz" if w_zero is not None else ""]
    while inputs[-1] == "":
        inputs.pop()
    if with_x_zero:
        graph_inputs.append(helper.make_tensor_value_info("xz", _TYPES[np.dtype(x_dtype)], []))
    if w_zero is not None:
        inits.append(numpy_helper.from_array(w_zero, "wz"))
    if constant_w:
        inits.append(numpy_helper.from_array(w, "w"))
    else:
        graph_inputs.append(helper.make_tensor_value_info("w", _TYPES[w.dtype], None))
    node = helper.make_node("ConvInteger", inputs, ["y"], **attrs)
    graph = helper.make_graph([node], "convinteger", graph_inputs,
                              [helper.make_tensor_value_info("y", TensorProto.INT32, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 10)])


def _conv_integer_case(seed, geometry, types, w_zero_kind, with_x_zero):
    x_shape, w_shape, attrs = geometry
    x_dtype, w_dtype = types
    rng = np.random.default_rng(seed)
    x, w = _ints(rng, x_dtype, x_shape), _ints(rng, w_dtype, w_shape)
    w_zero = {"none": None,
              "tensor": np.array(rng.integers(-5, 5) if w_dtype == np.int8 else rng.integers(100, 150), w_dtype),
              "channel": _ints(rng, w_dtype, w_shape[0])}[w_zero_kind]
    feeds = {"x": x}
    if with_x_zero:
        info = np.iinfo(x_dtype)
        feeds["xz"] = np.array(rng.integers(info.min, info.max + 1), x_dtype)
    models = {c: _conv_integer_model(x_dtype, w, w_zero, c, with_x_zero, **attrs) for c in (True, False)}
    return models, feeds, w


@needs_vnni
@pytest.mark.parametrize("geometry", GEOMETRIES, ids=lambda g: "x".join(map(str, g[1])) + str(sorted(g[2])))
@pytest.mark.parametrize("types", TYPE_PAIRS, ids=lambda t: f"{np.dtype(t[0])}-{np.dtype(t[1])}")
@pytest.mark.parametrize("w_zero_kind,with_x_zero", [("tensor", True), ("channel", True), ("none", False)])
def test_conv_integer_kernel_equals_the_exact_path(geometry, types, w_zero_kind, with_x_zero, integer_calls):
    """ConvInteger with constant weights runs QLinearConv's integer kernels with their int32
    output: the same int32 values as the float64 path a fed W takes (both exact), extreme
    zero points included."""
    models, feeds, w = _conv_integer_case(11, geometry, types, w_zero_kind, with_x_zero)
    ours = _run(models[True], feeds)
    assert integer_calls["gemm"] + integer_calls["depthwise"] == 1
    exact = _run(models[False], {**feeds, "w": w})
    assert ours.dtype == exact.dtype == np.int32
    np.testing.assert_array_equal(ours, exact)


@needs_vnni
@pytest.mark.parametrize("geometry", GEOMETRIES[:6] + GEOMETRIES[12:], ids=lambda g: "x".join(map(str, g[1])) + str(sorted(g[2])))
def test_conv_integer_kernel_against_onnxruntime(geometry):
    ort = pytest.importorskip("onnxruntime")
    models, feeds, _ = _conv_integer_case(5, geometry, (np.uint8, np.uint8), "tensor", True)
    want = ort.InferenceSession(models[True].SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_array_equal(_run(models[True], feeds), want)


@needs_vnni
def test_conv_integer_with_a_fed_weight_zero_point_takes_the_exact_path(integer_calls):
    """A weight zero point fed at run time cannot be folded into prepared weights."""
    rng = np.random.default_rng(2)
    w = _ints(rng, np.uint8, (4, 3, 3, 3))
    x = _ints(rng, np.uint8, (1, 3, 8, 8))
    node = helper.make_node("ConvInteger", ["x", "w", "", "wz"], ["y"])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.UINT8, None),
                                            helper.make_tensor_value_info("wz", TensorProto.UINT8, [])],
                              [helper.make_tensor_value_info("y", TensorProto.INT32, None)],
                              [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 10)])
    y = _run(model, {"x": x, "wz": np.array(7, np.uint8)})
    assert integer_calls["gemm"] + integer_calls["depthwise"] == 0
    want = np.zeros((1, 4, 6, 6), np.int64)
    for i in range(6):
        for j in range(6):
            patch = x[0, :, i:i + 3, j:j + 3].astype(np.int64)
            want[0, :, i, j] = ((w.astype(np.int64) - 7) * patch).reshape(4, -1).sum(axis=1)
    np.testing.assert_array_equal(y, want)
