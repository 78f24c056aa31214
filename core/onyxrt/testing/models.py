"""Builders for realistic ONNX models, made with ``onnx.helper`` alone (no torch).

Each builder returns an ``onnx.ModelProto`` laid out the way ``torch.onnx.export`` lays out
the corresponding network: the same operators in the same patterns (Conv + BatchNormalization +
Relu, MatMul + Add linear layers, the Erf and Tanh spellings of GELU, additive and ``Where``
attention masks, ``Reshape`` shapes with ``0``/``-1`` so the batch dimension stays dynamic),
with node and initializer names that follow the module paths of the reference implementations
(``layer1.0.conv1``, ``encoder.layer.0.attention.self.query.matmul``, ``h.0.attn.c_attn``).

Weights are float32, drawn from ``numpy.random.default_rng(seed)``, so a builder called twice
with the same arguments returns the same model. Models use IR version 10 and, by default,
opset 17; any opset from 13 up is accepted (below 17, layer normalization is written out as
the ReduceMean/Sub/Pow/Sqrt/Div pattern that older exports use). The batch dimension of every
graph input and output is the symbolic ``"batch"`` unless an integer is given.

Every model passes ``onnx.checker.check_model(model, full_check=True)`` and runs in
onnxruntime.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = [
    "add_chain",
    "bert_encoder",
    "gpt2",
    "mobilenet_v2",
    "resnet",
    "tiny_cnn",
    "vit",
]

IR_VERSION = 10
DEFAULT_OPSET = 17
MIN_OPSET = 13

_F32_MIN = float(np.finfo(np.float32).min)

# torchvision's MobileNetV2 table: (expand ratio t, channels c, repeats n, first stride s).
_MOBILENET_V2_BLOCKS: tuple[tuple[int, int, int, int], ...] = (
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
)


class _Graph:
    """Accumulates nodes and initializers for one model; names must be unique."""

    def __init__(self, seed: int, opset: int) -> None:
        if opset < MIN_OPSET:
            raise ValueError(f"opset {opset} is not supported; use {MIN_OPSET} or later")
        self.rng = np.random.default_rng(seed)
        self.opset = opset
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._node_names: set[str] = set()
        self._tensor_names: set[str] = set()
        self._consts: dict[str, np.ndarray] = {}

    def _claim_tensor(self, name: str) -> None:
        if name in self._tensor_names:
            raise ValueError(f"tensor name {name!r} is already used")
        self._tensor_names.add(name)

    def op(self, op_type: str, inputs: Sequence[str], name: str, **attrs: object) -> str:
        """Add a single-output node; its output tensor is named after the node."""
        return self.op_n(op_type, inputs, name, 1, **attrs)[0]

    def op_n(
        self, op_type: str, inputs: Sequence[str], name: str, n_out: int, **attrs: Any
    ) -> list[str]:
        """Add a node with ``n_out`` outputs, named ``name`` or ``name:i``."""
        if name in self._node_names:
            raise ValueError(f"node name {name!r} is already used")
        self._node_names.add(name)
        outputs = [name] if n_out == 1 else [f"{name}:{i}" for i in range(n_out)]
        for out in outputs:
            self._claim_tensor(out)
        self.nodes.append(helper.make_node(op_type, list(inputs), outputs, name=name, **attrs))
        return outputs

    def param(self, name: str, array: np.ndarray) -> str:
        """Add an initializer holding ``array`` (kept in its dtype)."""
        self._claim_tensor(name)
        self.initializers.append(numpy_helper.from_array(np.array(array, order="C"), name))
        return name

    def normal(self, name: str, shape: Sequence[int], std: float, mean: float = 0.0) -> str:
        """Add a float32 initializer drawn from N(mean, std^2)."""
        values = self.rng.standard_normal(tuple(shape), dtype=np.float32)
        return self.param(name, values * np.float32(std) + np.float32(mean))

    def uniform(self, name: str, shape: Sequence[int], low: float, high: float) -> str:
        """Add a float32 initializer drawn uniformly from [low, high)."""
        return self.param(name, self.rng.uniform(low, high, tuple(shape)).astype(np.float32))

    def const(self, name: str, value: object, dtype: type = np.float32) -> str:
        """A shared constant initializer; asking again for the same name reuses it."""
        array: np.ndarray = np.asarray(value, dtype=dtype)
        if name in self._consts:
            if not np.array_equal(self._consts[name], array):
                raise ValueError(f"constant {name!r} redefined with a different value")
            return name
        self._consts[name] = array
        return self.param(name, array)

    def rename(self, old: str, new: str) -> str:
        """Rename tensor ``old`` (typically a node output that becomes a graph output)."""
        self._claim_tensor(new)
        self._tensor_names.discard(old)
        for node in self.nodes:
            for seq in (node.input, node.output):
                for i, tensor in enumerate(seq):
                    if tensor == old:
                        seq[i] = new
        return new

    def model(
        self,
        name: str,
        inputs: Sequence[onnx.ValueInfoProto],
        outputs: Sequence[onnx.ValueInfoProto],
        doc: str,
    ) -> onnx.ModelProto:
        """Assemble the accumulated graph into a model."""
        graph = helper.make_graph(
            self.nodes, name, list(inputs), list(outputs), self.initializers, doc_string=doc
        )
        return helper.make_model(
            graph,
            opset_imports=[helper.make_opsetid("", self.opset)],
            ir_version=IR_VERSION,
            producer_name="onyxrt.testing",
            doc_string=doc,
        )


def _tensor(name: str, elem_type: int, dims: Sequence[int | str]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem_type, list(dims))


# --------------------------------------------------------------------------- shared layers


def _linear(g: _Graph, x: str, name: str, n_in: int, n_out: int, std: float = 0.02) -> str:
    """``nn.Linear`` on a 3-D input as exported: MatMul by the transposed weight, then Add."""
    weight = g.normal(f"{name}.weight", (n_in, n_out), std)
    bias = g.normal(f"{name}.bias", (n_out,), std)
    y = g.op("MatMul", [x, weight], f"{name}.matmul")
    return g.op("Add", [y, bias], f"{name}.add")


def _gemm(g: _Graph, x: str, name: str, n_in: int, n_out: int) -> str:
    """``nn.Linear`` on a 2-D input as exported: Gemm with ``transB=1``."""
    bound = 1.0 / math.sqrt(n_in)
    weight = g.uniform(f"{name}.weight", (n_out, n_in), -bound, bound)
    bias = g.uniform(f"{name}.bias", (n_out,), -bound, bound)
    return g.op("Gemm", [x, weight, bias], name, alpha=1.0, beta=1.0, transB=1)


def _reduce_mean_last(g: _Graph, x: str, name: str) -> str:
    if g.opset >= 18:
        axes = g.const("const.axes_last", [-1], np.int64)
        return g.op("ReduceMean", [x, axes], name, keepdims=1)
    return g.op("ReduceMean", [x], name, axes=[-1], keepdims=1)


def _layer_norm(g: _Graph, x: str, name: str, dim: int, eps: float) -> str:
    """LayerNormalization over the last axis (the decomposed pattern below opset 17)."""
    scale = g.normal(f"{name}.weight", (dim,), 0.05, mean=1.0)
    bias = g.normal(f"{name}.bias", (dim,), 0.02)
    if g.opset >= 17:
        return g.op("LayerNormalization", [x, scale, bias], name, axis=-1, epsilon=eps)
    mean = _reduce_mean_last(g, x, f"{name}.mean")
    centered = g.op("Sub", [x, mean], f"{name}.sub")
    square = g.op("Pow", [centered, g.const("const.two", 2.0)], f"{name}.pow")
    var = _reduce_mean_last(g, square, f"{name}.var")
    var_eps = g.op("Add", [var, g.const(f"const.eps_{eps:g}", eps)], f"{name}.add_eps")
    std = g.op("Sqrt", [var_eps], f"{name}.sqrt")
    normed = g.op("Div", [centered, std], f"{name}.div")
    scaled = g.op("Mul", [normed, scale], f"{name}.mul")
    return g.op("Add", [scaled, bias], f"{name}.add")


def _gelu_erf(g: _Graph, x: str, name: str) -> str:
    """Exact GELU as torch exports it: ``x * 0.5 * (1 + Erf(x / sqrt(2)))``."""
    scaled = g.op("Div", [x, g.const("const.sqrt2", math.sqrt(2.0))], f"{name}.div")
    erf = g.op("Erf", [scaled], f"{name}.erf")
    one_plus = g.op("Add", [erf, g.const("const.one", 1.0)], f"{name}.add")
    prod = g.op("Mul", [x, one_plus], f"{name}.mul")
    return g.op("Mul", [prod, g.const("const.half", 0.5)], f"{name}.mul_half")


def _gelu_tanh(g: _Graph, x: str, name: str) -> str:
    """GPT-2's GELU: ``0.5 * x * (1 + Tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))``."""
    half_x = g.op("Mul", [g.const("const.half", 0.5), x], f"{name}.mul_half")
    cube = g.op("Pow", [x, g.const("const.three", 3.0)], f"{name}.pow")
    cube = g.op("Mul", [g.const("const.gelu_coef", 0.044715), cube], f"{name}.mul_coef")
    inner = g.op("Add", [x, cube], f"{name}.add_cube")
    sqrt_2_pi = g.const("const.sqrt_2_over_pi", math.sqrt(2.0 / math.pi))
    inner = g.op("Mul", [sqrt_2_pi, inner], f"{name}.mul_sqrt")
    tanh = g.op("Tanh", [inner], f"{name}.tanh")
    one_plus = g.op("Add", [g.const("const.one", 1.0), tanh], f"{name}.add_one")
    return g.op("Mul", [half_x, one_plus], f"{name}.mul")


def _attention(
    g: _Graph,
    q: str,
    k: str,
    v: str,
    name: str,
    hidden: int,
    heads: int,
    *,
    additive_mask: str | None = None,
    causal_mask: str | None = None,
) -> str:
    """Scaled dot-product attention over [batch, seq, hidden] projections; returns the same."""
    head_dim = hidden // heads
    split = g.const(
        f"const.shape_split_heads_{heads}x{head_dim}", [0, 0, heads, head_dim], np.int64
    )
    merge = g.const(f"const.shape_merge_heads_{hidden}", [0, 0, hidden], np.int64)

    def heads_of(t: str, tag: str, perm: list[int]) -> str:
        r = g.op("Reshape", [t, split], f"{name}.{tag}.reshape")
        return g.op("Transpose", [r], f"{name}.{tag}.transpose", perm=perm)

    qh = heads_of(q, "q", [0, 2, 1, 3])  # [b, h, s, d]
    kt = heads_of(k, "k", [0, 2, 3, 1])  # [b, h, d, s]
    vh = heads_of(v, "v", [0, 2, 1, 3])  # [b, h, s, d]
    scores = g.op("MatMul", [qh, kt], f"{name}.qk")
    scale = g.const(f"const.sqrt_head_dim_{head_dim}", math.sqrt(head_dim))
    scores = g.op("Div", [scores, scale], f"{name}.scale")
    if additive_mask is not None:
        scores = g.op("Add", [scores, additive_mask], f"{name}.add_mask")
    if causal_mask is not None:
        fill = g.const("const.mask_fill", _F32_MIN)
        scores = g.op("Where", [causal_mask, scores, fill], f"{name}.causal_mask")
    probs = g.op("Softmax", [scores], f"{name}.softmax", axis=-1)
    ctx = g.op("MatMul", [probs, vh], f"{name}.context")
    ctx = g.op("Transpose", [ctx], f"{name}.context.transpose", perm=[0, 2, 1, 3])
    return g.op("Reshape", [ctx, merge], f"{name}.context.reshape")


def _conv_bn(
    g: _Graph,
    x: str,
    names: tuple[str, str, str | None],
    c_in: int,
    c_out: int,
    kernel: int,
    stride: int = 1,
    group: int = 1,
    act: str | None = None,
) -> str:
    """Conv (no bias) + BatchNormalization [+ Relu or Clip(0, 6)]; ``names`` = conv, bn, act."""
    conv_name, bn_name, act_name = names
    fan_in = (c_in // group) * kernel * kernel
    weight = g.normal(
        f"{conv_name}.weight", (c_out, c_in // group, kernel, kernel), math.sqrt(2.0 / fan_in)
    )
    pad = kernel // 2
    y = g.op(
        "Conv",
        [x, weight],
        conv_name,
        kernel_shape=[kernel, kernel],
        strides=[stride, stride],
        pads=[pad, pad, pad, pad],
        dilations=[1, 1],
        group=group,
    )
    stats = [
        g.uniform(f"{bn_name}.weight", (c_out,), 0.5, 1.0),
        g.normal(f"{bn_name}.bias", (c_out,), 0.05),
        g.normal(f"{bn_name}.running_mean", (c_out,), 0.1),
        g.uniform(f"{bn_name}.running_var", (c_out,), 0.5, 1.5),
    ]
    y = g.op("BatchNormalization", [y, *stats], bn_name, epsilon=1e-5, momentum=0.9)
    if act is None:
        return y
    if act_name is None:
        raise ValueError(f"{conv_name}: an activation needs a node name")
    if act == "relu":
        return g.op("Relu", [y], act_name)
    if act == "relu6":
        low, high = g.const("const.relu6_min", 0.0), g.const("const.relu6_max", 6.0)
        return g.op("Clip", [y, low, high], act_name)
    raise ValueError(f"unknown activation {act!r}")


def _classifier_head(g: _Graph, x: str, n_in: int, num_classes: int, fc_name: str) -> str:
    """GlobalAveragePool, Flatten, Gemm; returns the ``logits`` tensor."""
    pooled = g.op("GlobalAveragePool", [x], "avgpool")
    flat = g.op("Flatten", [pooled], "flatten", axis=1)
    return g.rename(_gemm(g, flat, fc_name, n_in, num_classes), "logits")


def _check_heads(hidden: int, heads: int) -> None:
    if hidden % heads:
        raise ValueError(f"hidden size {hidden} is not divisible by {heads} heads")


# --------------------------------------------------------------------------- CNNs


def _bottleneck(g: _Graph, x: str, name: str, c_in: int, planes: int, stride: int) -> str:
    c_out = planes * 4
    h = _conv_bn(
        g, x, (f"{name}.conv1", f"{name}.bn1", f"{name}.relu1"), c_in, planes, 1, act="relu"
    )
    h = _conv_bn(
        g,
        h,
        (f"{name}.conv2", f"{name}.bn2", f"{name}.relu2"),
        planes,
        planes,
        3,
        stride,
        act="relu",
    )
    h = _conv_bn(g, h, (f"{name}.conv3", f"{name}.bn3", None), planes, c_out, 1)
    shortcut = x
    if stride != 1 or c_in != c_out:
        names = (f"{name}.downsample.0", f"{name}.downsample.1", None)
        shortcut = _conv_bn(g, x, names, c_in, c_out, 1, stride)
    h = g.op("Add", [h, shortcut], f"{name}.add")
    return g.op("Relu", [h], f"{name}.relu3")


def resnet(
    depth_blocks: Sequence[int] = (3, 4, 6, 3),
    width: int = 64,
    num_classes: int = 1000,
    image: int = 224,
    batch: int | str = "batch",
    seed: int = 0,
    opset: int = DEFAULT_OPSET,
) -> onnx.ModelProto:
    """A ResNet with bottleneck blocks (ResNet-50 by default), laid out as torchvision exports it.

    Stem: 7x7 stride-2 Conv + BatchNormalization + Relu, 3x3 stride-2 MaxPool. Stage ``i`` has
    ``depth_blocks[i]`` bottleneck blocks of ``width * 2**i`` planes (1x1, 3x3 with the stage's
    stride, 1x1 expanding by 4; a Conv + BatchNormalization projection shortcut where the shape
    changes), each closed by Add + Relu. Head: GlobalAveragePool, Flatten, Gemm.

    Input ``input`` float32 [batch, 3, image, image]; output ``logits`` [batch, num_classes].
    """
    g = _Graph(seed, opset)
    h = _conv_bn(g, "input", ("conv1", "bn1", "relu"), 3, width, 7, stride=2, act="relu")
    h = g.op("MaxPool", [h], "maxpool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    c_in = width
    for stage, n_blocks in enumerate(depth_blocks):
        planes = width * 2**stage
        for block in range(n_blocks):
            stride = 2 if stage > 0 and block == 0 else 1
            h = _bottleneck(g, h, f"layer{stage + 1}.{block}", c_in, planes, stride)
            c_in = planes * 4
    _classifier_head(g, h, c_in, num_classes, "fc")
    doc = f"ResNet bottleneck depth_blocks={tuple(depth_blocks)} width={width} image={image}"
    return g.model(
        "resnet",
        [_tensor("input", TensorProto.FLOAT, [batch, 3, image, image])],
        [_tensor("logits", TensorProto.FLOAT, [batch, num_classes])],
        doc,
    )


def _make_divisible(value: float, divisor: int = 8) -> int:
    """torchvision's channel rounding: nearest multiple of ``divisor``, never below 90%."""
    rounded = max(divisor, int(value + divisor / 2) // divisor * divisor)
    if rounded < 0.9 * value:
        rounded += divisor
    return rounded


def _inverted_residual(
    g: _Graph, x: str, name: str, c_in: int, c_out: int, stride: int, expand: int
) -> str:
    hidden = int(round(c_in * expand))
    h, i = x, 0
    if expand != 1:
        names = (f"{name}.conv.0.0", f"{name}.conv.0.1", f"{name}.conv.0.2")
        h, i = _conv_bn(g, h, names, c_in, hidden, 1, act="relu6"), 1
    names = (f"{name}.conv.{i}.0", f"{name}.conv.{i}.1", f"{name}.conv.{i}.2")
    h = _conv_bn(g, h, names, hidden, hidden, 3, stride, group=hidden, act="relu6")
    h = _conv_bn(g, h, (f"{name}.conv.{i + 1}", f"{name}.conv.{i + 2}", None), hidden, c_out, 1)
    if stride == 1 and c_in == c_out:
        h = g.op("Add", [x, h], f"{name}.add")
    return h


def mobilenet_v2(
    width_mult: float = 1.0,
    num_classes: int = 1000,
    image: int = 224,
    batch: int | str = "batch",
    seed: int = 0,
    opset: int = DEFAULT_OPSET,
    blocks: Sequence[tuple[int, int, int, int]] | None = None,
) -> onnx.ModelProto:
    """MobileNetV2 laid out as torchvision exports it.

    A 3x3 stride-2 Conv + BatchNormalization + Clip(0, 6) stem, then inverted residual blocks:
    1x1 expand Conv + BN + Clip, 3x3 depthwise Conv (``group`` = channels) + BN + Clip, 1x1
    project Conv + BN, and a residual Add when the stride is 1 and the channels match. Clip
    takes its bounds as initializer inputs. Head: 1x1 Conv to 1280 channels (scaled up when
    ``width_mult > 1``) + BN + Clip, GlobalAveragePool, Flatten, Gemm.

    ``blocks`` replaces torchvision's table of (expand ratio, channels, repeats, first stride)
    rows, e.g. ``blocks=[(1, 16, 1, 1), (6, 24, 2, 2)]`` for a quick test model.

    Input ``input`` float32 [batch, 3, image, image]; output ``logits`` [batch, num_classes].
    """
    table = _MOBILENET_V2_BLOCKS if blocks is None else tuple(tuple(b) for b in blocks)
    g = _Graph(seed, opset)
    c_in = _make_divisible(32 * width_mult)
    last = _make_divisible(1280 * max(1.0, width_mult))
    names = ("features.0.0", "features.0.1", "features.0.2")
    h = _conv_bn(g, "input", names, 3, c_in, 3, stride=2, act="relu6")
    index = 1
    for expand, channels, repeats, stride in table:
        c_out = _make_divisible(channels * width_mult)
        for r in range(repeats):
            h = _inverted_residual(
                g, h, f"features.{index}", c_in, c_out, stride if r == 0 else 1, expand
            )
            c_in, index = c_out, index + 1
    names = (f"features.{index}.0", f"features.{index}.1", f"features.{index}.2")
    h = _conv_bn(g, h, names, c_in, last, 1, act="relu6")
    _classifier_head(g, h, last, num_classes, "classifier.1")
    doc = f"MobileNetV2 width_mult={width_mult} blocks={table} image={image}"
    return g.model(
        "mobilenet_v2",
        [_tensor("input", TensorProto.FLOAT, [batch, 3, image, image])],
        [_tensor("logits", TensorProto.FLOAT, [batch, num_classes])],
        doc,
    )


def tiny_cnn(
    num_classes: int = 10,
    image: int = 28,
    seed: int = 0,
    batch: int | str = "batch",
    opset: int = DEFAULT_OPSET,
) -> onnx.ModelProto:
    """A small MNIST-style classifier for demos.

    Two rounds of 3x3 Conv (8 then 16 channels, with bias) + Relu + 2x2 MaxPool, then Flatten,
    Gemm and Softmax. Input ``input`` float32 [batch, 1, image, image]; output
    ``probabilities`` [batch, num_classes].
    """
    g = _Graph(seed, opset)
    h, c_in, side = "input", 1, image
    for i, c_out in enumerate((8, 16), start=1):
        std = math.sqrt(2.0 / (c_in * 9))
        weight = g.normal(f"conv{i}.weight", (c_out, c_in, 3, 3), std)
        bias = g.normal(f"conv{i}.bias", (c_out,), 0.05)
        h = g.op("Conv", [h, weight, bias], f"conv{i}", kernel_shape=[3, 3], pads=[1, 1, 1, 1])
        h = g.op("Relu", [h], f"relu{i}")
        h = g.op("MaxPool", [h], f"pool{i}", kernel_shape=[2, 2], strides=[2, 2])
        c_in, side = c_out, side // 2
    h = g.op("Flatten", [h], "flatten", axis=1)
    h = _gemm(g, h, "fc", c_in * side * side, num_classes)
    g.rename(g.op("Softmax", [h], "softmax", axis=1), "probabilities")
    return g.model(
        "tiny_cnn",
        [_tensor("input", TensorProto.FLOAT, [batch, 1, image, image])],
        [_tensor("probabilities", TensorProto.FLOAT, [batch, num_classes])],
        f"tiny CNN classifier image={image} num_classes={num_classes}",
    )


# --------------------------------------------------------------------------- transformers


def _bert_layer(
    g: _Graph, x: str, name: str, hidden: int, heads: int, intermediate: int, mask: str
) -> str:
    a = f"{name}.attention"
    q = _linear(g, x, f"{a}.self.query", hidden, hidden)
    k = _linear(g, x, f"{a}.self.key", hidden, hidden)
    v = _linear(g, x, f"{a}.self.value", hidden, hidden)
    ctx = _attention(g, q, k, v, f"{a}.self", hidden, heads, additive_mask=mask)
    out = _linear(g, ctx, f"{a}.output.dense", hidden, hidden)
    out = g.op("Add", [out, x], f"{a}.output.residual")
    h = _layer_norm(g, out, f"{a}.output.LayerNorm", hidden, 1e-12)
    f = _linear(g, h, f"{name}.intermediate.dense", hidden, intermediate)
    f = _gelu_erf(g, f, f"{name}.intermediate.gelu")
    f = _linear(g, f, f"{name}.output.dense", intermediate, hidden)
    f = g.op("Add", [f, h], f"{name}.output.residual")
    return _layer_norm(g, f, f"{name}.output.LayerNorm", hidden, 1e-12)


def bert_encoder(
    layers: int = 12,
    hidden: int = 768,
    heads: int = 12,
    intermediate: int = 3072,
    seq: int = 128,
    vocab: int = 30522,
    batch: int | str = "batch",
    seed: int = 0,
    opset: int = DEFAULT_OPSET,
) -> onnx.ModelProto:
    """A BERT encoder (BERT-base by default) laid out as Hugging Face's BertModel exports.

    Embeddings: Gather of word, position (ids held as an initializer) and token-type (all
    zeros) embeddings, Add, LayerNormalization. The additive mask is built from
    ``attention_mask`` with Unsqueeze, Cast, Sub from 1 and Mul by float32's most negative value.
    Each layer: Q/K/V MatMul + Add, Reshape/Transpose into heads, MatMul by K^T, Div by
    sqrt(head_dim), Add mask, Softmax, MatMul by V, Transpose/Reshape back, output MatMul + Add,
    residual Add + LayerNormalization, then an MLP with the Erf GELU, residual Add and
    LayerNormalization.

    Inputs ``input_ids`` and ``attention_mask``, int64 [batch, seq]; output
    ``last_hidden_state`` float32 [batch, seq, hidden].
    """
    _check_heads(hidden, heads)
    g = _Graph(seed, opset)
    word = g.normal("embeddings.word_embeddings.weight", (vocab, hidden), 0.02)
    pos = g.normal("embeddings.position_embeddings.weight", (max(512, seq), hidden), 0.02)
    types = g.normal("embeddings.token_type_embeddings.weight", (2, hidden), 0.02)
    pos_ids = g.param("embeddings.position_ids", np.arange(seq, dtype=np.int64)[None, :])
    type_ids = g.param("embeddings.token_type_ids", np.zeros((1, seq), dtype=np.int64))
    h = g.op("Gather", [word, "input_ids"], "embeddings.word_embeddings", axis=0)
    t = g.op("Gather", [types, type_ids], "embeddings.token_type_embeddings", axis=0)
    h = g.op("Add", [h, t], "embeddings.add_token_type")
    p = g.op("Gather", [pos, pos_ids], "embeddings.position_embeddings", axis=0)
    h = g.op("Add", [h, p], "embeddings.add_position")
    h = _layer_norm(g, h, "embeddings.LayerNorm", hidden, 1e-12)

    axes = g.const("const.axes_1_2", [1, 2], np.int64)
    m = g.op("Unsqueeze", ["attention_mask", axes], "extended_attention_mask.unsqueeze")
    m = g.op("Cast", [m], "extended_attention_mask.cast", to=TensorProto.FLOAT)
    m = g.op("Sub", [g.const("const.one", 1.0), m], "extended_attention_mask.invert")
    mask = g.op("Mul", [m, g.const("const.mask_fill", _F32_MIN)], "extended_attention_mask.scale")

    for i in range(layers):
        h = _bert_layer(g, h, f"encoder.layer.{i}", hidden, heads, intermediate, mask)
    g.rename(h, "last_hidden_state")
    doc = f"BERT encoder layers={layers} hidden={hidden} heads={heads} seq={seq} vocab={vocab}"
    return g.model(
        "bert_encoder",
        [
            _tensor("input_ids", TensorProto.INT64, [batch, seq]),
            _tensor("attention_mask", TensorProto.INT64, [batch, seq]),
        ],
        [_tensor("last_hidden_state", TensorProto.FLOAT, [batch, seq, hidden])],
        doc,
    )


def _gpt2_block(g: _Graph, x: str, name: str, hidden: int, heads: int, causal: str) -> str:
    a = _layer_norm(g, x, f"{name}.ln_1", hidden, 1e-5)
    qkv = _linear(g, a, f"{name}.attn.c_attn", hidden, 3 * hidden)
    sizes = g.const(f"const.split_qkv_{hidden}", [hidden] * 3, np.int64)
    q, k, v = g.op_n("Split", [qkv, sizes], f"{name}.attn.split", 3, axis=2)
    ctx = _attention(g, q, k, v, f"{name}.attn", hidden, heads, causal_mask=causal)
    out = _linear(g, ctx, f"{name}.attn.c_proj", hidden, hidden)
    h = g.op("Add", [x, out], f"{name}.attn.residual")
    m = _layer_norm(g, h, f"{name}.ln_2", hidden, 1e-5)
    m = _linear(g, m, f"{name}.mlp.c_fc", hidden, 4 * hidden)
    m = _gelu_tanh(g, m, f"{name}.mlp.act")
    m = _linear(g, m, f"{name}.mlp.c_proj", 4 * hidden, hidden)
    return g.op("Add", [h, m], f"{name}.mlp.residual")


def gpt2(
    layers: int = 6,
    hidden: int = 768,
    heads: int = 12,
    seq: int = 128,
    vocab: int = 50257,
    batch: int | str = "batch",
    seed: int = 0,
    opset: int = DEFAULT_OPSET,
) -> onnx.ModelProto:
    """A GPT-2 language model (6 layers of GPT-2 small by default) as Hugging Face exports it.

    Token and position embeddings (Gather, Add). Each block: LayerNormalization, fused QKV
    MatMul + Add, Split into q, k, v, Reshape/Transpose into heads, MatMul by K^T, Div by
    sqrt(head_dim), a causal mask applied with Where (a lower-triangular bool initializer;
    masked scores become float32's most negative value), Softmax, MatMul by V, output projection,
    residual Add, LayerNormalization, an MLP with the Tanh GELU (Pow/Mul/Add/Tanh), residual
    Add. A final LayerNormalization, then logits = MatMul by the Transpose of the (tied) token
    embedding.

    Input ``input_ids`` int64 [batch, seq]; output ``logits`` float32 [batch, seq, vocab].
    """
    _check_heads(hidden, heads)
    g = _Graph(seed, opset)
    wte = g.normal("wte.weight", (vocab, hidden), 0.02)
    wpe = g.normal("wpe.weight", (max(1024, seq), hidden), 0.01)
    pos_ids = g.param("position_ids", np.arange(seq, dtype=np.int64)[None, :])
    causal = g.param("causal_mask", np.tril(np.ones((seq, seq), dtype=bool))[None, None])
    tok = g.op("Gather", [wte, "input_ids"], "wte", axis=0)
    pos = g.op("Gather", [wpe, pos_ids], "wpe", axis=0)
    h = g.op("Add", [tok, pos], "embeddings.add")
    for i in range(layers):
        h = _gpt2_block(g, h, f"h.{i}", hidden, heads, causal)
    h = _layer_norm(g, h, "ln_f", hidden, 1e-5)
    wte_t = g.op("Transpose", [wte], "lm_head.transpose", perm=[1, 0])
    g.rename(g.op("MatMul", [h, wte_t], "lm_head"), "logits")
    doc = f"GPT-2 layers={layers} hidden={hidden} heads={heads} seq={seq} vocab={vocab}"
    return g.model(
        "gpt2",
        [_tensor("input_ids", TensorProto.INT64, [batch, seq])],
        [_tensor("logits", TensorProto.FLOAT, [batch, seq, vocab])],
        doc,
    )


def _vit_layer(g: _Graph, x: str, name: str, hidden: int, heads: int, mlp: int) -> str:
    a = _layer_norm(g, x, f"{name}.layernorm_before", hidden, 1e-12)
    q = _linear(g, a, f"{name}.attention.attention.query", hidden, hidden)
    k = _linear(g, a, f"{name}.attention.attention.key", hidden, hidden)
    v = _linear(g, a, f"{name}.attention.attention.value", hidden, hidden)
    ctx = _attention(g, q, k, v, f"{name}.attention.attention", hidden, heads)
    out = _linear(g, ctx, f"{name}.attention.output.dense", hidden, hidden)
    h = g.op("Add", [out, x], f"{name}.attention.residual")
    m = _layer_norm(g, h, f"{name}.layernorm_after", hidden, 1e-12)
    m = _linear(g, m, f"{name}.intermediate.dense", hidden, mlp)
    m = _gelu_erf(g, m, f"{name}.intermediate.gelu")
    m = _linear(g, m, f"{name}.output.dense", mlp, hidden)
    return g.op("Add", [m, h], f"{name}.output.residual")


def vit(
    image: int = 224,
    patch: int = 16,
    hidden: int = 768,
    layers: int = 12,
    heads: int = 12,
    mlp: int = 3072,
    num_classes: int = 1000,
    batch: int | str = "batch",
    seed: int = 0,
    opset: int = DEFAULT_OPSET,
) -> onnx.ModelProto:
    """A Vision Transformer (ViT-B/16 by default) as Hugging Face's ViTForImageClassification.

    Patch embedding: Conv with kernel and stride ``patch``, Reshape to [batch, hidden, patches]
    and Transpose to tokens; the class token is Expanded to the batch (Shape, Gather, Concat,
    Expand) and Concatenated in front, then position embeddings are Added. Pre-LN encoder
    blocks: LayerNormalization, unmasked multi-head attention, residual Add,
    LayerNormalization, MLP with the Erf GELU, residual Add. A final LayerNormalization, Gather
    of the class token and a Gemm head.

    Input ``pixel_values`` float32 [batch, 3, image, image]; output ``logits``
    [batch, num_classes].
    """
    _check_heads(hidden, heads)
    if image % patch:
        raise ValueError(f"image size {image} is not a multiple of the patch size {patch}")
    tokens = (image // patch) ** 2
    g = _Graph(seed, opset)
    e = "embeddings"
    proj = f"{e}.patch_embeddings.projection"
    std = math.sqrt(1.0 / (3 * patch * patch))
    weight = g.normal(f"{proj}.weight", (hidden, 3, patch, patch), std)
    bias = g.normal(f"{proj}.bias", (hidden,), 0.02)
    h = g.op(
        "Conv",
        ["pixel_values", weight, bias],
        proj,
        kernel_shape=[patch, patch],
        strides=[patch, patch],
        pads=[0, 0, 0, 0],
    )
    flat = g.const(f"const.shape_flatten_{hidden}", [0, hidden, -1], np.int64)
    h = g.op("Reshape", [h, flat], f"{e}.patch_embeddings.flatten")
    h = g.op("Transpose", [h], f"{e}.patch_embeddings.transpose", perm=[0, 2, 1])

    shape = g.op("Shape", ["pixel_values"], f"{e}.shape")
    n = g.op("Gather", [shape, g.const("const.index_0", [0], np.int64)], f"{e}.batch_size", axis=0)
    rest = g.const(f"const.shape_1_{hidden}", [1, hidden], np.int64)
    cls_shape = g.op("Concat", [n, rest], f"{e}.cls_token.shape", axis=0)
    cls = g.normal(f"{e}.cls_token", (1, 1, hidden), 0.02)
    cls = g.op("Expand", [cls, cls_shape], f"{e}.cls_token.expand")
    h = g.op("Concat", [cls, h], f"{e}.concat", axis=1)
    pos = g.normal(f"{e}.position_embeddings", (1, tokens + 1, hidden), 0.02)
    h = g.op("Add", [h, pos], f"{e}.add_position")

    for i in range(layers):
        h = _vit_layer(g, h, f"encoder.layer.{i}", hidden, heads, mlp)
    h = _layer_norm(g, h, "layernorm", hidden, 1e-12)
    first = g.const("const.scalar_0", 0, np.int64)
    h = g.op("Gather", [h, first], "cls_token.select", axis=1)
    g.rename(_gemm(g, h, "classifier", hidden, num_classes), "logits")
    doc = f"ViT image={image} patch={patch} hidden={hidden} layers={layers} heads={heads}"
    return g.model(
        "vit",
        [_tensor("pixel_values", TensorProto.FLOAT, [batch, 3, image, image])],
        [_tensor("logits", TensorProto.FLOAT, [batch, num_classes])],
        doc,
    )


# --------------------------------------------------------------------------- micro


def add_chain(
    n: int = 500, shape: Sequence[int] = (1,), opset: int = DEFAULT_OPSET
) -> onnx.ModelProto:
    """``n`` chained Add nodes, for measuring per-node dispatch overhead.

    ``y_0 = x + c_0`` and ``y_i = y_{i-1} + c_i``, where each ``c_i`` is its own initializer
    filled with ``(i + 1) * 1e-3``; so ``y = x + 1e-3 * n * (n + 1) / 2``. Input ``x`` and
    output ``y`` are float32 of the fixed ``shape``.
    """
    if n < 1:
        raise ValueError("add_chain needs at least one node")
    g = _Graph(0, opset)
    h = "x"
    for i in range(n):
        c = g.param(f"c.{i}", np.full(tuple(shape), (i + 1) * 1e-3, dtype=np.float32))
        h = g.op("Add", [h, c], f"add.{i}")
    g.rename(h, "y")
    return g.model(
        "add_chain",
        [_tensor("x", TensorProto.FLOAT, shape)],
        [_tensor("y", TensorProto.FLOAT, shape)],
        f"{n} chained Add nodes on shape {tuple(shape)}",
    )
