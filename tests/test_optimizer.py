"""The graph optimizer: every pass keeps outputs equal (equivalence tests), rewrites what it
claims to, respects the optimization level and the session's providers, and writes the
optimized model when asked."""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from model_helpers import make_model, tensor
from onnx import TensorProto, helper

import onyxrt
from onyxrt.errors import InvalidArgument
from onyxrt.optimizer import FUSED_DOMAIN, PASSES
from onyxrt.testing import models

LEVEL = onyxrt.GraphOptimizationLevel


def _session(model: onnx.ModelProto, level=LEVEL.ORT_ENABLE_ALL, path: str = "", providers=None, extra=""):
    so = onyxrt.SessionOptions()
    so.graph_optimization_level = level
    if extra:
        so.add_session_config_entry("session.extra_optimizers", extra)
    if path:
        so.optimized_model_filepath = path
    return onyxrt.InferenceSession(
        model.SerializeToString(), so, providers=providers or ["CPUExecutionProvider"]
    )


def _optimized_ops(model: onnx.ModelProto, tmp_path, level=LEVEL.ORT_ENABLE_ALL, providers=None,
                   extra="") -> list[str]:
    path = str(tmp_path / "optimized.onnx")
    _session(model, level, path, providers, extra)
    return [n.op_type for n in onnx.load(path).graph.node]


def _assert_equivalent(model: onnx.ModelProto, feeds: dict, rtol: float = 1e-5) -> None:
    """Optimized and unoptimized sessions agree (and onnxruntime agrees with both)."""
    plain = _session(model, LEVEL.ORT_DISABLE_ALL).run(None, feeds)
    optimized = _session(model).run(None, feeds)
    for p, o in zip(plain, optimized, strict=True):
        assert p.shape == o.shape and p.dtype == o.dtype
        np.testing.assert_allclose(o, p, rtol=rtol, atol=rtol * max(1.0, float(np.abs(p).max())))


def _randn(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# -- clean-up passes ----------------------------------------------------------------------


def test_constant_folding_folds_constant_subgraphs_and_static_shapes(tmp_path):
    nodes = [
        helper.make_node("Add", ["c1", "c2"], ["c3"], name="const_add"),
        helper.make_node("Shape", ["x"], ["xs"], name="shape"),
        helper.make_node("Reshape", ["x", "xs"], ["xr"], name="reshape"),
        helper.make_node("Mul", ["xr", "c3"], ["y"], name="mul"),
    ]
    model = make_model(
        nodes, [tensor("x", [2, 3])], [tensor("y", [2, 3])],
        {"c1": np.ones(3, np.float32), "c2": np.full(3, 2.0, np.float32)},
    )
    assert _optimized_ops(model, tmp_path) == ["Reshape", "Mul"]
    _assert_equivalent(model, {"x": _randn(2, 3)})


def test_a_big_folded_value_is_kept_as_an_array_and_still_saved_with_its_bytes(tmp_path):
    # A weight computed at creation (a QDQ model's dequantized filters) stays a numpy array
    # with a data-less tensor in the model, not copied into the protobuf and read back; the
    # optimized model written to disk still holds its bytes, and a later pass reads it.
    w = _randn(64, 64, seed=1)
    nodes = [
        helper.make_node("Mul", ["w", "two"], ["w2"], name="scale_weight"),
        helper.make_node("MatMul", ["x", "w2"], ["m"], name="matmul"),
        helper.make_node("Add", ["m", "b"], ["y"], name="bias"),  # MatMul + Add: a later pass reads w2
    ]
    model = make_model(nodes, [tensor("x", [3, 64])], [tensor("y", [3, 64])],
                       {"w": w, "two": np.float32(2), "b": _randn(64, seed=2)})
    path = str(tmp_path / "optimized.onnx")
    _session(model, path=path)
    saved = onnx.load(path)
    assert "Mul" not in [n.op_type for n in saved.graph.node]  # folded
    folded = {t.name: onnx.numpy_helper.to_array(t) for t in saved.graph.initializer}
    assert any(v.shape == (64, 64) and np.array_equal(v, w * 2) for v in folded.values())
    _assert_equivalent(model, {"x": _randn(3, 64)})


def test_constant_folding_and_shape_inference_alternate_to_a_fixpoint(tmp_path):
    """A shape computed by an operator onnx's data propagation does not follow (ReduceProd)
    folds in the first round; inference then knows the Reshape's output shape, and the
    Shape → Concat → Reshape reading it folds in the next."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("ReduceProd", ["s"], ["p"], keepdims=1),
        helper.make_node("Reshape", ["x", "p"], ["flat"]),
        helper.make_node("Shape", ["flat"], ["s2"]),
        helper.make_node("Concat", ["s2", "one"], ["s3"], axis=0),
        helper.make_node("Reshape", ["flat", "s3"], ["y"]),
    ]
    model = make_model(nodes, [tensor("x", [2, 3, 4])], [tensor("y", None)], {"one": np.ones(1, np.int64)},
                       opset=18)
    assert _optimized_ops(model, tmp_path) == ["Reshape", "Reshape"]
    sess = _session(model)
    assert sess.get_outputs()[0].shape == [24, 1]
    _assert_equivalent(model, {"x": _randn(2, 3, 4)})


def _pad_model(target: str, *, mode: str = "constant", value: float | None = 0.0,
               padding=(0, 0, 1, 2, 0, 0, 2, 1), opset: int = 17, **attrs) -> onnx.ModelProto:
    """x [1, 3, 8, 8] → Pad(``padding``) → Conv (3x3, 4 filters) or a 3x3 pool (``attrs``)."""
    inits = {"pads": np.asarray(padding, np.int64)}
    pad_inputs = ["x", "pads"]
    if value is not None:
        inits["value"] = np.float32(value)
        pad_inputs.append("value")
    nodes = [helper.make_node("Pad", pad_inputs, ["p"], mode=mode)]
    if target == "Conv":
        inits["w"] = _randn(4, 3, 3, 3, seed=1)
        nodes.append(helper.make_node("Conv", ["p", "w"], ["y"], kernel_shape=[3, 3], **attrs))
    else:
        nodes.append(helper.make_node(target, ["p"], ["y"], kernel_shape=[3, 3], **attrs))
    return make_model(nodes, [tensor("x", [1, 3, 8, 8])], [tensor("y", None)], inits, opset=opset)


@pytest.mark.parametrize(("target", "attrs"), [
    ("Conv", {}), ("Conv", {"pads": [1, 0, 0, 1], "strides": [2, 2]}), ("Conv", {"auto_pad": "VALID"}),
    ("AveragePool", {"count_include_pad": 1}),
], ids=["conv", "conv-own-pads", "conv-valid", "avgpool-counting-pads"])
def test_zero_pad_folds_into_the_conv_or_pool_it_feeds(tmp_path, target, attrs):
    model = _pad_model(target, **attrs)
    assert _optimized_ops(model, tmp_path, LEVEL.ORT_ENABLE_BASIC) == [target]
    _assert_equivalent(model, {"x": _randn(1, 3, 8, 8)})


@pytest.mark.parametrize(("target", "kwargs"), [
    ("MaxPool", {}),  # its own padding is -inf, not 0
    ("AveragePool", {}),  # count_include_pad 0: the Pad's zeros would be averaged in
    ("Conv", {"value": 1.0}),
    ("Conv", {"mode": "reflect", "value": None}),
    ("Conv", {"padding": (1, 0, 0, 0, 0, 0, 0, 0)}),  # pads the batch axis
    ("Conv", {"padding": (0, 0, -1, 0, 0, 0, 0, 0)}),  # crops
    ("Conv", {"auto_pad": "SAME_UPPER"}),
], ids=["maxpool", "avgpool-not-counting", "nonzero-value", "reflect", "batch-pad", "crop", "same-upper"])
def test_pads_that_would_change_the_result_stay(tmp_path, target, kwargs):
    attrs = {k: v for k, v in kwargs.items() if k == "auto_pad"}
    model = _pad_model(target, **{k: v for k, v in kwargs.items() if k != "auto_pad"}, **attrs)
    assert _optimized_ops(model, tmp_path, LEVEL.ORT_ENABLE_BASIC) == ["Pad", target]
    _assert_equivalent(model, {"x": _randn(1, 3, 8, 8)})


def test_constant_folding_leaves_big_outputs_and_random_ops_alone(tmp_path):
    nodes = [
        helper.make_node("ConstantOfShape", ["shape"], ["big"], name="big"),
        helper.make_node("ReduceSum", ["big"], ["s"], name="sum", keepdims=0),
        helper.make_node("RandomUniform", [], ["r"], name="rand", shape=[1], dtype=1),
        helper.make_node("Add", ["x", "s"], ["t"], name="add"),
        helper.make_node("Add", ["t", "r"], ["y"], name="add_r"),
    ]
    # 8192 x 1024 float32 = 32 MiB: over the folding cap, so ConstantOfShape stays a node.
    model = make_model(
        nodes, [tensor("x", [1])], [tensor("y", [1])],
        {"shape": np.array([8192, 1024], np.int64)},
    )
    ops = _optimized_ops(model, tmp_path)
    assert "ConstantOfShape" in ops and "RandomUniform" in ops


def _group_model() -> onnx.ModelProto:
    """Every group operator once, with scalar, per-position and left-hand constants, a value
    read by a member and a non-member (a group must not swallow it), a graph output mid-way
    and a member of two dynamic operands (the final square)."""
    rng = np.random.default_rng(2)
    names = ["add", "mul", "sig", "sub", "tanh", "relu", "div", "abs", "sqrt", "max", "neg", "exp", "min", "log"]
    nodes = [
        helper.make_node("Add", ["x", "row"], ["add"]),            # per position of the last axis
        helper.make_node("Mul", ["half", "add"], ["mul"]),          # constant on the left
        helper.make_node("Sigmoid", ["mul"], ["sig"]),
        helper.make_node("Sub", ["one", "sig"], ["sub"]),           # swapped: 1 - v
        helper.make_node("Tanh", ["sub"], ["tanh"]),
        helper.make_node("Relu", ["tanh"], ["relu"]),
        helper.make_node("Div", ["relu", "row"], ["div"]),
        helper.make_node("Abs", ["div"], ["abs"]),
        helper.make_node("Sqrt", ["abs"], ["sqrt"]),
        helper.make_node("Max", ["sqrt", "half"], ["max"]),
        helper.make_node("Neg", ["max"], ["neg"]),
        helper.make_node("Exp", ["neg"], ["exp"]),
        helper.make_node("Min", ["row3", "exp"], ["min"]),          # (1, 1, N) constant, swapped
        helper.make_node("Log", ["min"], ["log"]),
        helper.make_node("Mul", ["log", "log"], ["y"]),             # two dynamic operands
        helper.make_node("Relu", ["sig"], ["side"]),                # sig has two readers
    ]
    inits = {
        "row": (rng.random(16) + 0.5).astype(np.float32), "half": np.array(0.5, np.float32),
        "one": np.array([1.0], np.float32), "row3": (rng.random((1, 1, 16)) + 0.1).astype(np.float32),
    }
    assert [n.output[0] for n in nodes[:14]] == names
    return make_model(nodes, [tensor("x", [2, 3, 16])], [tensor("y", [2, 3, 16]), tensor("side", [2, 3, 16]),
                                                         tensor("tanh", [2, 3, 16])], inits)


def test_elementwise_groups_fuse(tmp_path):
    model = _group_model()
    # Off by default: onnxruntime leaves such graphs as they are, and users compare their
    # per-node profiles and provider assignments with onnxruntime's.
    assert "FusedElementwise" not in _optimized_ops(model, tmp_path)
    ops = _optimized_ops(model, tmp_path, extra="fuse_elementwise")
    # relu..y (tanh, a graph output, ends it), sub..tanh (sig is read by the side Relu too),
    # add..sig; the side Relu alone stays.
    assert ops.count("FusedElementwise") == 3, ops
    assert ops.count("Relu") == 1 and "Mul" not in ops and "Sigmoid" not in ops, ops
    x = _randn(2, 3, 16)
    x[0, 0, :4] = [np.nan, np.inf, -np.inf, -0.0]
    plain = _session(model, LEVEL.ORT_DISABLE_ALL).run(None, {"x": x})
    fused = _session(model, extra="fuse_elementwise").run(None, {"x": x})
    # The groups without Exp and Log compute exactly what the unfused kernels compute.
    for p, f in zip(plain[1:], fused[1:], strict=True):
        np.testing.assert_array_equal(f, p)
    # Exp and Log are the C library's in the fused group, numpy's alone: an ulp apart, which
    # Log turns into ~1e-7 absolute and the final square into 4e-7 relative.
    np.testing.assert_allclose(fused[0], plain[0], rtol=1e-6, atol=1e-6, equal_nan=True)
    assert np.array_equal(np.isnan(fused[0]), np.isnan(plain[0]))


def test_silu_fuses_into_one_node(tmp_path):
    # x * Sigmoid(x): x read twice, from outside the group.
    nodes = [helper.make_node("Sigmoid", ["x"], ["s"]), helper.make_node("Mul", ["x", "s"], ["y"])]
    model = make_model(nodes, [tensor("x", [2, 300])], [tensor("y", [2, 300])])
    assert _optimized_ops(model, tmp_path, extra="fuse_elementwise") == ["FusedElementwise"]
    feeds = {"x": _randn(2, 300)}
    np.testing.assert_array_equal(_session(model, extra="fuse_elementwise").run(None, feeds)[0],
                                  _session(model, LEVEL.ORT_DISABLE_ALL).run(None, feeds)[0])


def test_elementwise_groups_with_free_dimensions_fuse_and_still_broadcast(tmp_path):
    """What skl2onnx writes per tree of an IsolationForest: values of a free batch size
    that shape inference names differently (each Reshape gets a fresh symbol). The group
    is fused; where the runtime shapes are not one shape, the kernel broadcasts as the
    unfused operators would."""
    nodes = [
        helper.make_node("Reshape", ["a", "col"], ["ra"]),
        helper.make_node("Reshape", ["b", "col"], ["rb"]),
        helper.make_node("Mul", ["ra", "two"], ["m"]),
        helper.make_node("Max", ["m", "one"], ["mx"]),
        helper.make_node("Log", ["mx"], ["lg"]),
        helper.make_node("Add", ["lg", "rb"], ["s"]),
        helper.make_node("Sub", ["s", "one"], ["y"]),
    ]
    inits = {"col": np.array([-1, 1], np.int64), "two": np.array([2.0], np.float32),
             "one": np.array(1.0, np.float32)}
    model = make_model(nodes, [tensor("a", ["n"]), tensor("b", ["m"])], [tensor("y", None)], inits)
    ops = _optimized_ops(model, tmp_path, extra="fuse_elementwise")
    assert ops == ["Reshape", "Reshape", "FusedElementwise"], ops
    fused = _session(model, extra="fuse_elementwise")
    plain = _session(model, LEVEL.ORT_DISABLE_ALL)
    for a, b in [(_randn(5), _randn(5)), (_randn(1), _randn(4)), (_randn(4), _randn(1))]:
        feeds = {"a": a, "b": b}
        (want,), (got,) = plain.run(None, feeds), fused.run(None, feeds)
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    with pytest.raises(onyxrt.errors.OnyxError):  # (3, 1) + (4, 1) broadcast no more than unfused
        fused.run(None, {"a": _randn(3), "b": _randn(4)})


def test_a_group_of_scalars_keeps_its_shape(tmp_path):
    """0-d values and constants (DynamicQuantizeLinear's scale, spelled out): the output
    stays 0-d."""
    nodes = [
        helper.make_node("ReduceMax", ["x"], ["hi"], keepdims=0),
        helper.make_node("ReduceMin", ["x"], ["lo"], keepdims=0),
        helper.make_node("Sub", ["hi", "lo"], ["d"]),
        helper.make_node("Div", ["d", "q"], ["y"]),
    ]
    model = make_model(nodes, [tensor("x", [6])], [tensor("y", [])], {"q": np.array(255.0, np.float32)})
    assert "FusedElementwise" in _optimized_ops(model, tmp_path, extra="fuse_elementwise")
    x = _randn(6)
    (got,) = _session(model, extra="fuse_elementwise").run(None, {"x": x})
    assert got.shape == () and got == np.float32((x.max() - x.min()) / np.float32(255.0))


def test_elementwise_groups_need_the_fused_kernel(tmp_path):
    # A provider without FusedElementwise in the session (the simulated NPU) keeps them.
    if "SimNPUExecutionProvider" not in onyxrt.get_available_providers():
        pytest.skip("needs a second provider without the fused kernel")
    ops = _optimized_ops(_group_model(), tmp_path, providers=["SimNPUExecutionProvider", "CPUExecutionProvider"],
                         extra="fuse_elementwise")
    assert "FusedElementwise" not in ops


def _qdq_conv_model() -> onnx.ModelProto:
    """x → Q → DQ → Conv(W = DQ(int8 constant)) → y: a QDQ model's convolution."""
    rng = np.random.default_rng(3)
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"], name="q_x"),
        helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"], name="dq_x"),
        helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["w"], name="dq_w", axis=0),
        helper.make_node("Conv", ["xd", "w"], ["y"], name="conv", pads=[1, 1, 1, 1]),
    ]
    inits = {
        "xs": np.array(0.02, np.float32), "xz": np.array(128, np.uint8),
        "wq": rng.integers(-127, 128, (4, 3, 3, 3)).astype(np.int8),
        "ws": np.array([0.01, 0.02, 0.015, 0.03], np.float32), "wz": np.zeros(4, np.int8),
    }
    return make_model(nodes, [tensor("x", [1, 3, 8, 8])], [tensor("y", [1, 4, 8, 8])], inits, opset=17)


def test_extra_optimizers_names_are_checked():
    so = onyxrt.SessionOptions()
    so.add_session_config_entry("session.extra_optimizers", "fuse_elementwise, nope")
    with pytest.raises(InvalidArgument, match="nope.*fuse_elementwise"):
        onyxrt.InferenceSession(_group_model().SerializeToString(), so, providers=["CPUExecutionProvider"])


def test_weight_dequantize_folds_unless_a_provider_reads_qdq_groups(tmp_path):
    model = _qdq_conv_model()
    feeds = {"x": _randn(1, 3, 8, 8)}
    # CPU only: the weights' DequantizeLinear becomes a float constant (the activations'
    # QuantizeLinear/DequantizeLinear pair stays: it changes values).
    ops = _optimized_ops(model, tmp_path)
    assert ops.count("DequantizeLinear") == 1 and ops.count("QuantizeLinear") == 1, ops
    _assert_equivalent(model, feeds)
    # With the simulated NPU (its int8 mode absorbs QDQ groups, weights included) it stays.
    if "SimNPUExecutionProvider" in onyxrt.get_available_providers():
        ops = _optimized_ops(model, tmp_path, providers=["SimNPUExecutionProvider", "CPUExecutionProvider"])
        assert ops.count("DequantizeLinear") == 2, ops


def _qdq_conv_group_model(*, bias_scale: float | None = None, x_type=np.uint8, per_channel=True,
                          expose_conv: bool = False) -> onnx.ModelProto:
    """A whole QDQ convolution group as ``quantize_static`` writes it: x → Q → DQ →
    Conv(DQ(int8 w), DQ(int32 b)) → Q → DQ → y. ``bias_scale``: the bias's scale, when not
    x_scale * w_scale; ``expose_conv``: the Conv's float output is a graph output too."""
    rng = np.random.default_rng(5)
    xs, ys = np.float32(0.02), np.float32(0.05)
    ws = (np.array([0.01, 0.02, 0.015, 0.03, 0.012], np.float32) if per_channel
          else np.array(0.01, np.float32))
    zx, zy = (np.array(128, np.uint8), np.array(120, np.uint8)) if x_type == np.uint8 else \
        (np.array(3, np.int8), np.array(-2, np.int8))
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"], name="q_x"),
        helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"], name="dq_x"),
        # per tensor: without a zero point (the fusion writes QLinearConv's required one)
        helper.make_node("DequantizeLinear", ["wq", "ws", "wz"] if per_channel else ["wq", "ws"], ["w"],
                         name="dq_w", axis=0),
        helper.make_node("DequantizeLinear", ["bq", "bs", "bz"], ["b"], name="dq_b", axis=0),
        helper.make_node("Conv", ["xd", "w", "b"], ["c"], name="conv", pads=[1, 0, 1, 2], strides=[1, 2]),
        helper.make_node("QuantizeLinear", ["c", "ys", "yz"], ["yq"], name="q_y"),
        helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"], name="dq_y"),
    ]
    inits = {
        "xs": np.array(xs), "xz": zx, "ys": np.array(ys), "yz": zy,
        "wq": rng.integers(-127, 128, (5, 3, 3, 3)).astype(np.int8), "ws": ws,
        "bq": rng.integers(-3000, 3000, 5).astype(np.int32),
        "bs": (np.full(5, bias_scale, np.float32) if bias_scale is not None
               else (xs * np.broadcast_to(ws, (5,))).astype(np.float32)),
        "bz": np.zeros(5, np.int32),
    }
    if per_channel:
        inits["wz"] = np.zeros(ws.shape, np.int8)
    outputs = [tensor("y", [1, 5, 9, 4])] + ([tensor("c", [1, 5, 9, 4])] if expose_conv else [])
    return make_model(nodes, [tensor("x", [1, 3, 9, 9])], outputs, inits, opset=17)


@pytest.fixture
def integer_cpu(monkeypatch):
    """The CPU provider offering integer QDQ kernels, as it does with AVX-512 VNNI (without,
    QLinearConv runs its numpy path: slower, the same results)."""
    from onyxrt_cpu.provider import CPUExecutionProvider

    monkeypatch.setattr(CPUExecutionProvider, "integer_qdq", True)


@pytest.mark.parametrize("x_type", [np.uint8, np.int8])
@pytest.mark.parametrize("per_channel", [True, False])
def test_qdq_convolution_group_becomes_qlinearconv(tmp_path, x_type, per_channel, integer_cpu):
    model = _qdq_conv_group_model(x_type=x_type, per_channel=per_channel)
    ops = _optimized_ops(model, tmp_path)
    assert ops == ["QuantizeLinear", "QLinearConv", "DequantizeLinear"], ops
    feeds = {"x": _randn(1, 3, 9, 9) * 2}
    plain = _session(model, LEVEL.ORT_DISABLE_ALL).run(None, feeds)[0]
    fused = _session(model).run(None, feeds)[0]
    # the same exact integer sums, rounded to y's grid once instead of twice: at most one
    # step of y (0.05) apart, and mostly equal
    assert np.abs(fused - plain).max() <= 0.05 * 1.0001
    assert np.mean(fused == plain) > 0.9
    ort = pytest.importorskip("onnxruntime")
    theirs = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    assert np.abs(fused - theirs).max() <= 0.05 * 1.0001


def test_qdq_residual_add_becomes_qlinearadd(tmp_path, integer_cpu):
    """Two QDQ branches added and quantized again (a residual connection): one QLinearAdd,
    at most one step of y from the float graph and from onnxruntime."""
    nodes = []
    inits = {"ys": np.array(0.04, np.float32), "yz": np.array(-3, np.int8)}
    for i, (s, z) in enumerate(((0.02, 5), (0.03, -7))):
        inits[f"s{i}"], inits[f"z{i}"] = np.array(s, np.float32), np.array(z, np.int8)
        nodes += [helper.make_node("QuantizeLinear", [f"x{i}", f"s{i}", f"z{i}"], [f"q{i}"], name=f"q{i}"),
                  helper.make_node("DequantizeLinear", [f"q{i}", f"s{i}", f"z{i}"], [f"d{i}"], name=f"dq{i}")]
    nodes += [helper.make_node("Add", ["d0", "d1"], ["sum"], name="add"),
              helper.make_node("QuantizeLinear", ["sum", "ys", "yz"], ["yq"], name="q_y"),
              helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"], name="dq_y")]
    model = make_model(nodes, [tensor("x0", [2, 8, 5, 5]), tensor("x1", [2, 8, 5, 5])], [tensor("y", [2, 8, 5, 5])],
                       inits, opset=17)
    ops = _optimized_ops(model, tmp_path)
    assert ops.count("QLinearAdd") == 1 and "Add" not in ops, ops
    feeds = {"x0": _randn(2, 8, 5, 5), "x1": _randn(2, 8, 5, 5, seed=1)}
    plain = _session(model, LEVEL.ORT_DISABLE_ALL).run(None, feeds)[0]
    fused = _session(model).run(None, feeds)[0]
    assert np.abs(fused - plain).max() <= 0.04 * 1.0001
    ort = pytest.importorskip("onnxruntime")
    theirs = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    assert np.abs(fused - theirs).max() <= 0.04 * 1.0001


def test_qdq_convolution_groups_that_stay_float(tmp_path, integer_cpu, monkeypatch):
    # a bias quantized with another scale than x_scale * w_scale: QLinearConv cannot take it
    assert "QLinearConv" not in _optimized_ops(_qdq_conv_group_model(bias_scale=0.5), tmp_path)
    # the Conv's float output is read elsewhere (a graph output)
    model = _qdq_conv_group_model(expose_conv=True)
    assert "QLinearConv" not in _optimized_ops(model, tmp_path)
    _assert_equivalent(model, {"x": _randn(1, 3, 9, 9)})
    # the basic level, or onnxruntime's name for the transformer disabled
    assert "QLinearConv" not in _optimized_ops(_qdq_conv_group_model(), tmp_path, LEVEL.ORT_ENABLE_BASIC)
    so = onyxrt.SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "disabled.onnx")
    onyxrt.InferenceSession(_qdq_conv_group_model().SerializeToString(), so, providers=["CPUExecutionProvider"],
                            disabled_optimizers=["QDQSelectorActionTransformer"])
    assert "QLinearConv" not in [n.op_type for n in onnx.load(str(tmp_path / "disabled.onnx")).graph.node]
    # a provider that reads QDQ groups itself (the simulated NPU's int8 mode) keeps them
    if "SimNPUExecutionProvider" in onyxrt.get_available_providers():
        ops = _optimized_ops(_qdq_conv_group_model(), tmp_path,
                             providers=["SimNPUExecutionProvider", "CPUExecutionProvider"])
        assert "QLinearConv" not in ops and "Conv" in ops, ops
    # a provider without integer kernels for them (a GPU; the CPU without VNNI)
    from onyxrt_cpu.provider import CPUExecutionProvider

    monkeypatch.setattr(CPUExecutionProvider, "integer_qdq", False)
    assert "QLinearConv" not in _optimized_ops(_qdq_conv_group_model(), tmp_path)


def test_identity_cast_and_dead_nodes_are_removed(tmp_path):
    nodes = [
        helper.make_node("Identity", ["x"], ["i"], name="identity"),
        helper.make_node("Cast", ["i"], ["same"], name="cast_same", to=TensorProto.FLOAT),
        helper.make_node("Cast", ["same"], ["wide"], name="widen", to=TensorProto.DOUBLE),
        helper.make_node("Cast", ["wide"], ["back"], name="narrow", to=TensorProto.FLOAT),
        helper.make_node("Relu", ["back"], ["y"], name="relu"),
        helper.make_node("Neg", ["x"], ["unused"], name="dead"),
    ]
    model = make_model(nodes, [tensor("x", [4])], [tensor("y", [4])])
    assert _optimized_ops(model, tmp_path) == ["Relu"]
    _assert_equivalent(model, {"x": _randn(4)})


def test_lossy_cast_round_trip_is_kept(tmp_path):
    nodes = [
        helper.make_node("Cast", ["x"], ["h"], name="to_half", to=TensorProto.FLOAT16),
        helper.make_node("Cast", ["h"], ["y"], name="back", to=TensorProto.FLOAT),
    ]
    model = make_model(nodes, [tensor("x", [4])], [tensor("y", [4])])
    assert _optimized_ops(model, tmp_path) == ["Cast", "Cast"]
    _assert_equivalent(model, {"x": np.array([1.0001, 2.5, -3.3333, 1e-8], np.float32)})


def test_repeated_computations_are_computed_once(tmp_path):
    """What skl2onnx writes for an IsolationForest: the same Gather once per tree, each
    tree's value cast twice; a repeated chain collapses in one pass."""
    nodes = [
        helper.make_node("Gather", ["x", "cols"], ["g1"], name="g1", axis=1),
        helper.make_node("Gather", ["x", "cols"], ["g2"], name="g2", axis=1),
        helper.make_node("Gather", ["x", "cols"], ["g3"], name="other_axis", axis=0),
        helper.make_node("Cast", ["g1"], ["c1"], name="c1", to=TensorProto.DOUBLE),
        helper.make_node("Cast", ["g2"], ["c2"], name="c2", to=TensorProto.DOUBLE),
        helper.make_node("Cast", ["g2"], ["c3"], name="c3", to=TensorProto.FLOAT16),
        helper.make_node("Add", ["c1", "c2"], ["s"], name="add"),
        helper.make_node("Cast", ["c3"], ["h"], name="back", to=TensorProto.DOUBLE),
        helper.make_node("Add", ["s", "h"], ["t"], name="add2"),
        helper.make_node("Cast", ["g3"], ["y2"], name="y2", to=TensorProto.DOUBLE),
    ]
    model = make_model(nodes, [tensor("x", [3, 3])], [tensor("t", [3, 2], TensorProto.DOUBLE),
                                                      tensor("y2", [2, 3], TensorProto.DOUBLE)],
                       initializers={"cols": np.array([0, 2], np.int64)})
    # One Gather on axis 1, one of its Casts to double (and the float16 one), the other axis's.
    assert sorted(_optimized_ops(model, tmp_path)) == sorted(["Gather", "Gather", "Cast", "Cast", "Cast", "Cast",
                                                               "Add", "Add"])
    _assert_equivalent(model, {"x": _randn(3, 3)})


def test_random_operators_and_named_outputs_are_not_merged(tmp_path):
    nodes = [
        helper.make_node("RandomUniformLike", ["x"], ["r1"], name="r1", seed=1.0),
        helper.make_node("RandomUniformLike", ["x"], ["r2"], name="r2", seed=1.0),
        helper.make_node("Add", ["r1", "r2"], ["s"], name="add"),
        helper.make_node("Neg", ["x"], ["n1"], name="n1"),
        helper.make_node("Neg", ["x"], ["n2"], name="n2"),
    ]
    model = make_model(nodes, [tensor("x", [4])], [tensor("s", [4]), tensor("n1", [4]), tensor("n2", [4])])
    assert sorted(_optimized_ops(model, tmp_path)) == ["Add", "Neg", "Neg", "RandomUniformLike", "RandomUniformLike"]
    x = _randn(4)
    s, n1, n2 = _session(model).run(None, {"x": x})
    np.testing.assert_array_equal(n1, -x)
    np.testing.assert_array_equal(n2, -x)


def test_common_subexpressions_keep_a_value_a_subgraph_reads(tmp_path):
    then_branch = helper.make_graph([helper.make_node("Identity", ["n2"], ["o"], name="inner")], "then", [],
                                    [helper.make_tensor_value_info("o", TensorProto.FLOAT, [4])])
    else_branch = helper.make_graph([helper.make_node("Identity", ["n1"], ["o2"], name="inner2")], "else", [],
                                    [helper.make_tensor_value_info("o2", TensorProto.FLOAT, [4])])
    nodes = [
        helper.make_node("Neg", ["x"], ["n1"], name="n1"),
        helper.make_node("Neg", ["x"], ["n2"], name="n2"),
        helper.make_node("If", ["c"], ["y"], name="if", then_branch=then_branch, else_branch=else_branch),
    ]
    model = make_model(nodes, [tensor("x", [4]), tensor("c", [], TensorProto.BOOL)], [tensor("y", [4])])
    x = _randn(4)
    for c in (True, False):
        (y,) = _session(model).run(None, {"x": x, "c": np.array(c)})
        np.testing.assert_array_equal(y, -x)


def test_common_subexpression_elimination_is_disabled_by_onnxruntime_name(tmp_path):
    nodes = [helper.make_node("Neg", ["x"], ["n1"], name="n1"), helper.make_node("Neg", ["x"], ["n2"], name="n2"),
             helper.make_node("Add", ["n1", "n2"], ["y"], name="add")]
    model = make_model(nodes, [tensor("x", [4])], [tensor("y", [4])])
    path = str(tmp_path / "kept.onnx")
    so = onyxrt.SessionOptions()
    so.optimized_model_filepath = path
    onyxrt.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"],
                            disabled_optimizers=["CommonSubexpressionElimination"])
    assert [n.op_type for n in onnx.load(path).graph.node] == ["Neg", "Neg", "Add"]
    assert _optimized_ops(model, tmp_path) == ["Neg", "Add"]


def test_cyclic_graph_still_reports_the_cycle():
    nodes = [
        helper.make_node("Add", ["x", "b"], ["a"], name="ping"),
        helper.make_node("Add", ["a", "x"], ["b"], name="pong"),
    ]
    model = make_model(nodes, [tensor("x", [1])], [tensor("a", [1])])
    with pytest.raises(onyxrt.errors.InvalidGraph):
        _session(model)


# -- convolution fusions ------------------------------------------------------------------


def _conv_bn_model(activation: str | None, residual: bool, opset: int = 17) -> onnx.ModelProto:
    rng = np.random.default_rng(3)
    c_in, c_out = 3, 8
    inits = {
        "w": rng.standard_normal((c_out, c_in, 3, 3)).astype(np.float32),
        "b": rng.standard_normal(c_out).astype(np.float32),
        "scale": rng.uniform(0.5, 1.5, c_out).astype(np.float32),
        "bias": rng.standard_normal(c_out).astype(np.float32),
        "mean": rng.standard_normal(c_out).astype(np.float32),
        "var": rng.uniform(0.5, 2.0, c_out).astype(np.float32),
        "lo": np.array(0.0, np.float32),
        "hi": np.array(6.0, np.float32),
    }
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["bn"], name="bn", epsilon=1e-3),
    ]
    out = "bn"
    if residual:
        nodes.append(helper.make_node("Add", ["bn", "z"], ["sum"], name="residual"))
        out = "sum"
    if activation == "Clip":
        nodes.append(helper.make_node("Clip", [out, "lo", "hi"], ["y"], name="act"))
    elif activation == "LeakyRelu":
        nodes.append(helper.make_node("LeakyRelu", [out], ["y"], name="act", alpha=0.2))
    elif activation == "HardSigmoid":
        nodes.append(helper.make_node("HardSigmoid", [out], ["y"], name="act", alpha=0.3, beta=0.4))
    elif activation:
        nodes.append(helper.make_node(activation, [out], ["y"], name="act"))
    else:
        nodes.append(helper.make_node("Identity", [out], ["y"], name="out"))
    inputs = [tensor("x", [2, c_in, 6, 6])] + ([tensor("z", [2, c_out, 6, 6])] if residual else [])
    return make_model(nodes, inputs, [tensor("y", [2, c_out, 6, 6])], inits, opset=opset)


def test_batch_norm_folds_into_conv_at_the_basic_level(tmp_path):
    model = _conv_bn_model(None, residual=False)
    assert _optimized_ops(model, tmp_path, LEVEL.ORT_ENABLE_BASIC) == ["Conv", "Identity"]
    _assert_equivalent(model, {"x": _randn(2, 3, 6, 6)})


@pytest.mark.parametrize("activation", ["Relu", "Clip", "LeakyRelu", "Sigmoid", "Tanh", "HardSigmoid"])
@pytest.mark.parametrize("residual", [False, True])
def test_conv_activation_and_residual_fuse(tmp_path, activation, residual):
    model = _conv_bn_model(activation, residual)
    assert _optimized_ops(model, tmp_path, LEVEL.ORT_ENABLE_EXTENDED) == ["FusedConv"]
    feeds = {"x": _randn(2, 3, 6, 6)}
    if residual:
        feeds["z"] = _randn(2, 8, 6, 6, seed=1)
    _assert_equivalent(model, feeds)


def test_extended_fusions_wait_for_the_extended_level(tmp_path):
    model = _conv_bn_model("Relu", residual=False)
    assert _optimized_ops(model, tmp_path, LEVEL.ORT_ENABLE_BASIC) == ["Conv", "Relu"]
    assert _optimized_ops(model, tmp_path, LEVEL.ORT_DISABLE_ALL) == ["Conv", "BatchNormalization", "Relu"]


def test_fusions_are_skipped_when_a_session_provider_lacks_the_fused_kernel(tmp_path):
    # The NPU compiles plain operators; a FusedConv would push the block to the CPU. The
    # standard-ONNX BatchNormalization folding still applies.
    pytest.importorskip("onyxrt_simnpu")
    model = _conv_bn_model("Relu", residual=False)
    ops = _optimized_ops(model, tmp_path, providers=["SimNPUExecutionProvider", "CPUExecutionProvider"])
    assert ops == ["Conv", "Relu"]


def test_conv_whose_output_is_also_read_elsewhere_is_not_fused(tmp_path):
    model = _conv_bn_model("Relu", residual=False)
    model.graph.output.append(tensor("bn", [2, 8, 6, 6]))
    ops = _optimized_ops(model, tmp_path)
    assert "Relu" in ops and "FusedConv" not in ops
    _assert_equivalent(model, {"x": _randn(2, 3, 6, 6)})


# -- matrix products ----------------------------------------------------------------------


def _matmul_model(a_shape, b_shape, *, trans_b=False, scale=None, bias=True, w_input=False):
    """x @ [Transpose](w) [/ scale] [+ bias]; ``w`` is a graph input when ``w_input`` (a
    constant w's Transpose is folded into a transposed constant instead)."""
    rng = np.random.default_rng(4)
    n = b_shape[0] if trans_b else b_shape[-1]
    inits = {"bias": rng.standard_normal(n).astype(np.float32)}
    if not w_input:
        inits["w"] = rng.standard_normal(b_shape).astype(np.float32)
    nodes = []
    w = "w"
    if trans_b:
        nodes.append(helper.make_node("Transpose", ["w"], ["wt"], name="t", perm=[1, 0]))
        w = "wt"
    nodes.append(helper.make_node("MatMul", ["x", w], ["m"], name="mm"))
    out = "m"
    if scale is not None:
        inits["s"] = np.array(scale, np.float32)
        nodes.append(helper.make_node("Div", [out, "s"], ["scaled"], name="scale"))
        out = "scaled"
    if bias:
        nodes.append(helper.make_node("Add", [out, "bias"], ["y"], name="bias"))
    else:
        nodes.append(helper.make_node("Identity", [out], ["y"], name="out"))
    out_shape = list(a_shape[:-1]) + [n]
    inputs = [tensor("x", list(a_shape))] + ([tensor("w", list(b_shape))] if w_input else [])
    return make_model(nodes, inputs, [tensor("y", out_shape)], inits)


def test_2d_matmul_add_becomes_gemm(tmp_path):
    model = _matmul_model((5, 6), (7, 6), trans_b=True, scale=2.0)
    assert _optimized_ops(model, tmp_path) == ["Gemm"]
    _assert_equivalent(model, {"x": _randn(5, 6)})


@pytest.mark.parametrize("scale", [None, 8.0])
def test_batched_matmul_bias_scale_and_transpose_become_fused_matmul(tmp_path, scale):
    model = _matmul_model((2, 5, 6), (7, 6), trans_b=True, scale=scale, w_input=True)
    path = tmp_path / "optimized.onnx"
    _session(model, path=str(path))
    (node,) = onnx.load(str(path)).graph.node
    assert (node.domain, node.op_type) == (FUSED_DOMAIN, "FusedMatMul")
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    assert attrs["transB"] == 1 and math.isclose(attrs["alpha"], 1.0 / (scale or 1.0))
    _assert_equivalent(model, {"x": _randn(2, 5, 6), "w": _randn(7, 6, seed=2)})


@pytest.mark.parametrize(("act", "attrs", "extra"), [
    ("Relu", {}, []), ("LeakyRelu", {"alpha": 0.2}, []), ("Clip", {}, ["lo", "hi"]), ("Sigmoid", {}, []),
])
def test_gemm_and_its_activation_fuse(tmp_path, act, attrs, extra):
    rng = np.random.default_rng(4)
    nodes = [
        helper.make_node("Gemm", ["x", "w", "b"], ["g"], name="layer", transB=1),
        helper.make_node(act, ["g", *extra], ["y"], name="act", **attrs),
    ]
    inits = {"w": rng.standard_normal((7, 5)).astype(np.float32), "b": rng.standard_normal(7).astype(np.float32),
             "lo": np.array(-0.5, np.float32), "hi": np.array(0.75, np.float32)}
    model = make_model(nodes, [tensor("x", [3, 5])], [tensor("y", [3, 7])], inits)
    assert _optimized_ops(model, tmp_path) == ["FusedGemm"]
    feeds = {"x": _randn(3, 5)}
    plain = _session(model, LEVEL.ORT_ENABLE_BASIC).run(None, feeds)[0]
    fused = _session(model).run(None, feeds)[0]
    if act == "Sigmoid":  # the standalone kernel is onnxruntime's approximation, the epilogue exact
        np.testing.assert_allclose(fused, plain, rtol=1e-6, atol=1e-7)
    else:
        np.testing.assert_array_equal(fused, plain)


def test_matmul_with_a_1d_operand_stays_matmul(tmp_path):
    # MatMul promotes a 1-D operand (numpy semantics); FusedMatMul and Gemm take rank >= 2.
    # Found by the fuzzer: x[4] @ w[4, 1] + bias was fused, and the kernel refused it.
    model = _matmul_model((4,), (4, 1))
    assert _optimized_ops(model, tmp_path) == ["MatMul", "Add"]
    _assert_equivalent(model, {"x": _randn(4)})


def test_attention_scores_fold_the_transpose_and_scale(tmp_path):
    # q @ k^T / sqrt(d) where k^T swaps the last two axes of a 4-D tensor.
    nodes = [
        helper.make_node("Transpose", ["k"], ["kt"], name="kt", perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", ["q", "kt"], ["s"], name="qk"),
        helper.make_node("Div", ["s", "d"], ["y"], name="scale"),
    ]
    model = make_model(
        nodes, [tensor("q", [1, 2, 4, 8]), tensor("k", [1, 2, 4, 8])], [tensor("y", [1, 2, 4, 4])],
        {"d": np.array(math.sqrt(8), np.float32)},
    )
    assert _optimized_ops(model, tmp_path) == ["FusedMatMul"]
    _assert_equivalent(model, {"q": _randn(1, 2, 4, 8), "k": _randn(1, 2, 4, 8, seed=1)})


def _scaled_attention(q_scale_op: str = "Mul", k_consumers: int = 1, k_scale_shape=()):
    """q (scaled) @ kᵀ (transposed from [1, H, D, T] by the export's perm, then scaled): how
    transformers' SDPA exports scale both operands by sqrt(1/sqrt(d)), then a Div."""
    q_inputs = ["sq", "q"] if q_scale_op == "MulLeft" else ["q", "sq"]
    nodes = [
        helper.make_node("Transpose", ["k"], ["kt"], name="kt", perm=[0, 1, 3, 2]),
        helper.make_node("Div" if q_scale_op == "Div" else "Mul", q_inputs, ["qs"], name="qs"),
        helper.make_node("Mul", ["kt", "sk"], ["ks"], name="ks"),
        helper.make_node("MatMul", ["qs", "ks"], ["s"], name="qk"),
        helper.make_node("Div", ["s", "d"], ["y"], name="out_scale"),
    ]
    outputs = [tensor("y", [1, 2, 4, 4])]
    if k_consumers > 1:
        nodes.append(helper.make_node("Identity", ["ks"], ["ks_out"], name="keep"))
        outputs.append(tensor("ks_out", [1, 2, 8, 4]))
    inits = {"sq": np.array(0.3535534, np.float32), "sk": np.full(k_scale_shape, 0.5, np.float32),
             "d": np.array(2.0, np.float32)}
    return make_model(nodes, [tensor("q", [1, 2, 4, 8]), tensor("k", [1, 2, 4, 8])], outputs, inits)


@pytest.mark.parametrize("q_scale_op", ["Mul", "MulLeft", "Div"])
def test_scaled_operands_fold_into_alpha(tmp_path, q_scale_op):
    """MatMulScaleFusion on the inputs: both operands' scalar scales and the product's
    Div become FusedMatMul's alpha (transposes folded under and over the scales)."""
    model = _scaled_attention(q_scale_op)
    path = tmp_path / "optimized.onnx"
    _session(model, path=str(path))
    (node,) = onnx.load(str(path)).graph.node
    assert (node.domain, node.op_type) == (FUSED_DOMAIN, "FusedMatMul")
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    q_factor = 1 / 0.3535534 if q_scale_op == "Div" else 0.3535534
    assert attrs["transB"] == 1 and math.isclose(attrs["alpha"], q_factor * 0.5 / 2.0, rel_tol=1e-6)
    _assert_equivalent(model, {"q": _randn(1, 2, 4, 8), "k": _randn(1, 2, 4, 8, seed=1)})


@pytest.mark.parametrize(("k_consumers", "k_scale_shape"), [(2, ()), (1, (1, 2, 8, 4))])
def test_scales_stay_where_they_are_read_twice_or_are_not_scalars(tmp_path, k_consumers, k_scale_shape):
    model = _scaled_attention(k_consumers=k_consumers, k_scale_shape=k_scale_shape)
    ops = _optimized_ops(model, tmp_path)
    assert "FusedMatMul" in ops and "Mul" in ops  # q's scale folded, k's kept
    _assert_equivalent(model, {"q": _randn(1, 2, 4, 8), "k": _randn(1, 2, 4, 8, seed=1)})


# -- transformer patterns -----------------------------------------------------------------


def _graph_model(g, x: str, y: str, shape: list[int]) -> onnx.ModelProto:
    return g.model(
        "pattern", [tensor(x, shape)], [helper.make_tensor_value_info(y, TensorProto.FLOAT, None)], ""
    )


@pytest.mark.parametrize("opset", [13, 17])
def test_decomposed_layer_norm_becomes_layer_normalization(tmp_path, opset):
    # Below opset 17 the models builder writes the decomposed pattern; from 17 it emits the
    # operator itself, so build the pattern by hand at both opsets.
    g = models._Graph(0, 16)  # the builder writes the pattern out below opset 17
    y = models._layer_norm(g, "x", "ln", 16, 1e-5)
    model = _graph_model(g, "x", y, [2, 3, 16])
    model.opset_import[0].version = opset
    path = tmp_path / "optimized.onnx"
    _session(model, path=str(path))
    (node,) = onnx.load(str(path)).graph.node
    assert node.op_type == "LayerNormalization"
    assert node.domain == ("" if opset >= 17 else FUSED_DOMAIN)
    _assert_equivalent(model, {"x": _randn(2, 3, 16)})


@pytest.mark.parametrize("form", ["erf", "tanh"])
@pytest.mark.parametrize("opset", [17, 20])
def test_gelu_patterns_become_gelu(tmp_path, form, opset):
    g = models._Graph(0, opset)
    y = (models._gelu_erf if form == "erf" else models._gelu_tanh)(g, "x", "gelu")
    model = _graph_model(g, "x", y, [4, 32])
    path = tmp_path / "optimized.onnx"
    _session(model, path=str(path))
    (node,) = onnx.load(str(path)).graph.node
    assert node.op_type == "Gelu" and node.domain == ("" if opset >= 20 else FUSED_DOMAIN)
    assert helper.get_attribute_value(node.attribute[0]) == (b"none" if form == "erf" else b"tanh")
    _assert_equivalent(model, {"x": _randn(4, 32) * 3})


# -- whole models and the pass list ---------------------------------------------------------

SMALL_MODELS = {
    "resnet": lambda: models.resnet(depth_blocks=(1, 1), width=8, num_classes=10, image=32),
    "mobilenet_v2": lambda: models.mobilenet_v2(width_mult=0.25, num_classes=10, image=32),
    "bert": lambda: models.bert_encoder(layers=2, hidden=32, heads=4, intermediate=64, seq=8, vocab=50),
    "gpt2": lambda: models.gpt2(layers=2, hidden=32, heads=4, seq=8, vocab=50),
    "vit": lambda: models.vit(image=32, patch=8, hidden=32, layers=2, heads=4, mlp=64, num_classes=10),
}


def _feeds(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    feeds = {}
    for inp in model.graph.input:
        dims = [d.dim_value or 2 for d in inp.type.tensor_type.shape.dim]
        if inp.type.tensor_type.elem_type == TensorProto.INT64:
            feeds[inp.name] = np.ones(dims, np.int64) if "mask" in inp.name else rng.integers(0, 50, dims)
        else:
            feeds[inp.name] = rng.standard_normal(dims).astype(np.float32)
    return feeds


@pytest.mark.parametrize("name", sorted(SMALL_MODELS))
def test_architectures_keep_their_outputs_and_lose_nodes(tmp_path, name):
    model = SMALL_MODELS[name]()
    ops = _optimized_ops(model, tmp_path)
    assert len(ops) < len(model.graph.node)
    assert "BatchNormalization" not in ops and "Erf" not in ops and "Pow" not in ops
    _assert_equivalent(model, _feeds(model), rtol=1e-4)
    # The optimized file is itself a model onyxrt runs (fused ops and all).
    again = onyxrt.InferenceSession(str(tmp_path / "optimized.onnx"))
    np.testing.assert_allclose(
        again.run(None, _feeds(model))[0], _session(model).run(None, _feeds(model))[0], rtol=1e-5, atol=1e-5
    )


def test_set_providers_reoptimizes_for_the_new_providers(tmp_path):
    pytest.importorskip("onyxrt_simnpu")
    model = _conv_bn_model("Relu", residual=False)
    session = _session(model, LEVEL.ORT_ENABLE_EXTENDED)
    assert [n.op_type for n in session.placement.nodes] == ["FusedConv"]
    session.set_providers(["SimNPUExecutionProvider", "CPUExecutionProvider"])
    assert [n.op_type for n in session.placement.nodes] == ["Conv", "Relu"]


def test_every_pass_is_named_and_levelled():
    names = [p.name for p in PASSES]
    assert len(set(names)) == len(names)
    assert all(p.level in (LEVEL.ORT_ENABLE_BASIC, LEVEL.ORT_ENABLE_EXTENDED, LEVEL.ORT_ENABLE_LAYOUT)
               for p in PASSES)


def test_constants_of_higher_rank_that_broadcast_block_the_fusion(tmp_path):
    # x * 0.5 * (1 + erf(x / sqrt 2)) with a (1, 1, 1) "0.5": the result has rank 3, not
    # x's rank 1, so it is not a Gelu of x; the same for a matmul scale of higher rank.
    g = models._Graph(0, 17)
    y = models._gelu_erf(g, "x", "gelu")
    model = _graph_model(g, "x", y, [6])
    half = next(t for t in model.graph.initializer if t.name == "const.half")
    half.dims[:] = [1, 1, 1]
    ops = _optimized_ops(model, tmp_path)
    assert "Gelu" not in ops
    _assert_equivalent(model, {"x": _randn(6)})
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
        helper.make_node("Mul", ["m", "s"], ["y"], name="scale"),
    ]
    model = make_model(
        nodes, [tensor("x", [2, 3])], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        {"w": np.ones((3, 4), np.float32), "s": np.full((1, 1, 1), 2.0, np.float32)},
    )
    assert _optimized_ops(model, tmp_path) == ["MatMul", "Mul"]
    _assert_equivalent(model, {"x": _randn(2, 3)})


# -- layout: NCHWc ------------------------------------------------------------------------

def _nchwc_kernels_offered() -> bool:
    try:
        from onyxrt_cpu import native
    except ImportError:
        return False
    return native.NCHWC_ENABLED


# CI's `nox -s tests` sets ONYXRT_CPU_NCHWC=1, so these run there on any CPU.
nchwc_kernels = pytest.mark.skipif(
    not _nchwc_kernels_offered(),
    reason="the CPU provider offers its NCHWc kernels only with the compiled module on a CPU "
    "with AVX-512; set ONYXRT_CPU_NCHWC=1 to test them anyway",
)


def _mobile_block_model(c_in: int = 3, extra_output: bool = False) -> onnx.ModelProto:
    """A first conv on the image, a depthwise conv, a pointwise projection with a residual,
    a pool and a classifier: every way the layout pass converts and leaves NCHW."""
    rng = np.random.default_rng(7)
    inits = {
        "w0": rng.standard_normal((24, c_in, 3, 3)).astype(np.float32) * 0.3,
        "b0": rng.standard_normal(24).astype(np.float32),
        "wd": rng.standard_normal((24, 1, 3, 3)).astype(np.float32) * 0.3,
        "wp": rng.standard_normal((24, 24, 1, 1)).astype(np.float32) * 0.3,
        "bp": rng.standard_normal(24).astype(np.float32),
        "lo": np.array(0.0, np.float32),
        "hi": np.array(6.0, np.float32),
        "fc": rng.standard_normal((24, 5)).astype(np.float32),
    }
    nodes = [
        helper.make_node("Conv", ["x", "w0", "b0"], ["c0"], name="stem", pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["c0"], ["r0"], name="relu0"),
        helper.make_node("Conv", ["r0", "wd"], ["d"], name="dw", group=24, auto_pad="SAME_UPPER"),
        helper.make_node("Clip", ["d", "lo", "hi"], ["dc"], name="clip"),
        helper.make_node("Conv", ["dc", "wp", "bp"], ["p"], name="project"),
        helper.make_node("Add", ["p", "r0"], ["s"], name="residual"),
        helper.make_node("GlobalAveragePool", ["s"], ["g"], name="pool"),
        helper.make_node("Flatten", ["g"], ["f"], name="flatten"),
        helper.make_node("MatMul", ["f", "fc"], ["y"], name="fc"),
    ]
    outputs = [tensor("y", [2, 5])] + ([tensor("r0", [2, 24, 9, 9])] if extra_output else [])
    return make_model(nodes, [tensor("x", [2, c_in, 17, 17])], outputs, inits)


@nchwc_kernels
@pytest.mark.parametrize("extra_output", [False, True])
def test_layout_pass_runs_conv_chains_in_nchwc(tmp_path, extra_output):
    model = _mobile_block_model(extra_output=extra_output)
    ops = _optimized_ops(model, tmp_path)
    # the stem reads the 3-channel image as it is: no ReorderInput; one ReorderOutput after
    # the pool (and one for the extra output, which stays in NCHW under its name)
    assert ops.count("NchwcConv") == 3 and "NchwcGlobalAveragePool" in ops
    assert "ReorderInput" not in ops and ops.count("ReorderOutput") == 1 + extra_output
    assert "Conv" not in ops and "FusedConv" not in ops
    _assert_equivalent(model, {"x": _randn(2, 3, 17, 17)})
    # the saved model runs as it is, and the layout waits for its level
    again = onyxrt.InferenceSession(str(tmp_path / "optimized.onnx"))
    feeds = {"x": _randn(2, 3, 17, 17, seed=2)}
    for a, b in zip(again.run(None, feeds), _session(model).run(None, feeds), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
    assert "NchwcConv" not in _optimized_ops(model, tmp_path, LEVEL.ORT_ENABLE_EXTENDED)


@nchwc_kernels
def test_layout_pass_keeps_qdq_activations_blocked(tmp_path):
    """A QDQ model's per-tensor QuantizeLinear → DequantizeLinear pairs and residual Add run
    on the blocked values: no reorder between the convolutions, one at the end."""
    rng = np.random.default_rng(5)
    inits = {
        "w1": rng.standard_normal((20, 3, 3, 3)).astype(np.float32) * 0.2,
        "w2": rng.standard_normal((20, 20, 3, 3)).astype(np.float32) * 0.01,
        "s1": np.array(0.02, np.float32), "z1": np.array(128, np.uint8),
        "s2": np.array(0.05, np.float32), "z2": np.array(0, np.int8),
    }
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("QuantizeLinear", ["c1", "s1", "z1"], ["q1"], name="q1"),
        helper.make_node("DequantizeLinear", ["q1", "s1", "z1"], ["a"], name="dq1"),
        helper.make_node("Conv", ["a", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c2", "a"], ["r"], name="residual"),
        helper.make_node("QuantizeLinear", ["r", "s2", "z2"], ["q2"], name="q2"),
        helper.make_node("DequantizeLinear", ["q2", "s2", "z2"], ["y"], name="dq2"),
    ]
    model = make_model(nodes, [tensor("x", [1, 3, 9, 9])], [tensor("y", [1, 20, 9, 9])], inits)
    ops = _optimized_ops(model, tmp_path)
    assert ops.count("NchwcConv") == 2 and ops.count("ReorderOutput") == 1, ops
    assert ops.index("ReorderOutput") == len(ops) - 1, ops  # after the last DequantizeLinear
    feeds = {"x": _randn(1, 3, 9, 9)}
    blocked = _session(model).run(None, feeds)[0]
    plain = _session(model, LEVEL.ORT_ENABLE_EXTENDED).run(None, feeds)[0]
    # The blocked convolutions round differently in the last bits: a value on a rounding
    # boundary may quantize one step apart (0.02 into conv2's sums of < 0.01 * 180 weights,
    # then 0.05 at the end): at most two steps of the last scale, almost everywhere equal.
    assert np.abs(blocked - plain).max() <= 2 * 0.05 + 1e-6
    assert np.mean(blocked == plain) > 0.98


@nchwc_kernels
def test_layout_pass_reorders_a_wide_graph_input(tmp_path):
    model = _mobile_block_model(c_in=20)
    ops = _optimized_ops(model, tmp_path)
    assert ops[0] == "ReorderInput" and ops.count("NchwcConv") == 3
    _assert_equivalent(model, {"x": _randn(2, 20, 17, 17)})


@nchwc_kernels
def test_layout_pass_leaves_what_it_cannot_run(tmp_path):
    rng = np.random.default_rng(0)
    w = rng.standard_normal((8, 4, 3, 3))
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["a"], name="double"),            # float64
        helper.make_node("Conv", ["x32", "w_in"], ["b"], name="fed_weights"),  # W not constant
        helper.make_node("Conv", ["x32", "wg"], ["c"], name="grouped", group=2),  # 2 channels per group
    ]
    model = make_model(
        nodes,
        [tensor("x", [1, 4, 6, 6], TensorProto.DOUBLE), tensor("x32", [1, 4, 6, 6]), tensor("w_in", [8, 4, 3, 3])],
        [tensor("a", [1, 8, 4, 4], TensorProto.DOUBLE), tensor("b", [1, 8, 4, 4]), tensor("c", [1, 8, 4, 4])],
        {"w": w, "wg": rng.standard_normal((8, 2, 3, 3)).astype(np.float32)},
    )
    assert _optimized_ops(model, tmp_path) == ["Conv", "Conv", "Conv"]


def test_layout_pass_is_skipped_when_a_session_provider_lacks_the_kernels(tmp_path):
    pytest.importorskip("onyxrt_simnpu")
    model = _mobile_block_model()
    ops = _optimized_ops(model, tmp_path, providers=["SimNPUExecutionProvider", "CPUExecutionProvider"])
    assert not any(op.startswith(("Nchwc", "Reorder")) for op in ops)


@nchwc_kernels
@pytest.mark.parametrize("indices", [False, True])
def test_layout_pass_keeps_a_max_pool_between_convs_blocked(tmp_path, indices):
    rng = np.random.default_rng(4)
    inits = {"w0": rng.standard_normal((32, 3, 7, 7)).astype(np.float32) * 0.2,
             "w1": rng.standard_normal((16, 32, 1, 1)).astype(np.float32) * 0.2}
    pool_outputs = ["p", "i"] if indices else ["p"]
    nodes = [
        helper.make_node("Conv", ["x", "w0"], ["c"], name="stem", pads=[3, 3, 3, 3], strides=[2, 2]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("MaxPool", ["r"], pool_outputs, name="pool", kernel_shape=[3, 3], strides=[2, 2],
                         pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["p", "w1"], ["y"], name="next"),
    ]
    outputs = [tensor("y", [1, 16, 6, 6])] + ([tensor("i", [1, 32, 6, 6], TensorProto.INT64)] if indices else [])
    model = make_model(nodes, [tensor("x", [1, 3, 23, 23])], outputs, inits)
    ops = _optimized_ops(model, tmp_path)
    if indices:  # Indices exist only in NCHW: the pool stays, between two reorders
        assert "MaxPool" in ops and ops.count("ReorderInput") == 1
    else:
        assert "NchwcMaxPool" in ops and "ReorderInput" not in ops and ops.count("ReorderOutput") == 1
    _assert_equivalent(model, {"x": _randn(1, 3, 23, 23)})


# -- feature products (skl2onnx's PolynomialFeatures) --------------------------------------


@pytest.mark.parametrize("opset", [17, 18])
@pytest.mark.parametrize("degree", [2, 3])
def test_polynomial_feature_columns_fuse_with_the_same_bits(tmp_path, opset, degree):
    """skl2onnx's PolynomialFeatures (ArrayFeatureExtractor → ReduceProd per column) as a
    Gather/Reshape/ReduceProd per run of columns: the same bits as the unfused graph, the
    same results as onnxruntime, and a handful of nodes instead of two per column."""
    pytest.importorskip("skl2onnx")
    import onnxruntime as ort
    from skl2onnx import to_onnx
    from sklearn.preprocessing import PolynomialFeatures

    x = _randn(40, 5, seed=degree)
    model = to_onnx(PolynomialFeatures(degree).fit(x), x[:1], target_opset={"": opset, "ai.onnx.ml": 3})
    columns = sum(1 for n in model.graph.node if n.op_type == "ReduceProd")
    ops = _optimized_ops(model, tmp_path)
    assert ops.count("Gather") == degree and ops.count("ReduceProd") <= degree + 1 < columns
    so = onyxrt.SessionOptions()
    plain = onyxrt.InferenceSession(model.SerializeToString(), so, disabled_optimizers=["fuse_feature_products"])
    fused = _session(model)
    for rows in (x, x[:1]):
        want = plain.run(None, {"X": rows})[0]
        got = fused.run(None, {"X": rows})[0]
        assert got.dtype == want.dtype and np.array_equal(got, want)
        theirs = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        np.testing.assert_allclose(got, theirs.run(None, {"X": rows})[0], rtol=1e-6)


def test_feature_products_that_stay(tmp_path):
    """A negative index (ArrayFeatureExtractor rejects it, Gather would wrap around), an
    extracted block read twice, and a lone column stay as they are."""
    x_info = helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, 4])
    nodes, inits = [], []
    for i, idx in enumerate([[0, 1], [1, 2], [-1, 2], [2, 3], [3, 3]]):
        inits.append(helper.make_tensor(f"i{i}", TensorProto.INT64, [len(idx)], idx))
        nodes.append(helper.make_node("ArrayFeatureExtractor", ["X", f"i{i}"], [f"c{i}"], domain="ai.onnx.ml"))
        nodes.append(helper.make_node("ReduceProd", [f"c{i}"], [f"p{i}"], axes=[1]))
    nodes.append(helper.make_node("Concat", [f"p{i}" for i in range(5)], ["Y"], axis=1))
    nodes.append(helper.make_node("Identity", ["c3"], ["Z"]))  # column 3's block read twice
    graph = helper.make_graph(nodes, "g", [x_info], [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None),
                                                    helper.make_tensor_value_info("Z", TensorProto.FLOAT, None)],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)])
    ops = _optimized_ops(model, tmp_path)
    # Columns 0 and 1 fuse; 2 (negative index), 3 (block read twice) and 4 (alone) stay.
    assert ops.count("Gather") == 1 and ops.count("ArrayFeatureExtractor") == 3
    feeds = {"X": _randn(3, 4)}
    with pytest.raises(Exception, match="out of range"):
        _session(model).run(None, feeds)
