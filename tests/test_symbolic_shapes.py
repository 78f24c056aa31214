"""Symbolic dimensions through computed shapes (onyxrt.symbolic_shapes), and the shape
computations folding away once the free dimensions are fixed.

Checked against facts, not against onyxrt itself: every symbolic output dimension is
evaluated with the run's actual sizes and must equal the output's actual dimension; the
optimized session must agree with the unoptimized one (and with onnxruntime); with the
free dimensions fixed no Shape node may be left. Random graphs of shape computations
(hypothesis) exercise the same three facts.
"""

from __future__ import annotations

import re

import numpy as np
import onnx
import onnxruntime
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

import onyxrt
from onyxrt.symbolic_shapes import Expr

LEVEL = onyxrt.GraphOptimizationLevel


def _evaluate(dim: int | str | None, sizes: dict[str, int]) -> int | None:
    """A NodeArg dimension ('seq*8', 'batch*seq', 'seq-1') with the symbols' sizes."""
    if dim is None or isinstance(dim, int):
        return dim
    assert re.fullmatch(r"[A-Za-z_][\w]*([*+-]([A-Za-z_]\w*|\d+))*|\d+", dim), dim
    return int(eval(dim, {"__builtins__": {}}, dict(sizes)))  # the pattern above: names, ints, * + -


class Builder:
    """A graph over x [batch, seq, hidden] with shape computations, named nodes."""

    def __init__(self, hidden: int) -> None:
        self.hidden = hidden
        self.nodes: list[onnx.NodeProto] = []
        self.inits: dict[str, np.ndarray] = {}
        self.outputs: list[str] = []
        self._n = 0

    def name(self, base: str) -> str:
        self._n += 1
        return f"{base}{self._n}"

    def const(self, value, dtype=np.int64) -> str:
        name = self.name("c")
        self.inits[name] = np.asarray(value, dtype)
        return name

    def node(self, op: str, inputs: list[str], **attrs) -> str:
        out = self.name(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    def dim(self, x: str, axis: int) -> str:
        """Dimension ``axis`` of ``x`` as a 1-element int64 tensor (Shape → Gather → Unsqueeze)."""
        s = self.node("Shape", [x])
        g = self.node("Gather", [s, self.const(axis)], axis=0)
        return self.node("Unsqueeze", [g, self.const([0])])

    def model(self) -> onnx.ModelProto:
        inits = [onnx.numpy_helper.from_array(v, k) for k, v in self.inits.items()]
        graph = helper.make_graph(
            self.nodes, "shapes", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", self.hidden])],
            [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in self.outputs], inits)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])

    # -- the blocks real exports are made of ----------------------------------------------
    def split_heads(self, x: str, heads: int) -> str:
        """[b, s, h] → [b, heads, s, h / heads] (the attention reshape + transpose)."""
        shape = self.node("Concat", [self.dim(x, 0), self.dim(x, 1), self.const([heads]),
                                     self.const([self.hidden // heads])], axis=0)
        return self.node("Transpose", [self.node("Reshape", [x, shape])], perm=[0, 2, 1, 3])

    def flatten_tokens(self, x: str) -> str:
        """[b, s, h] → [b * s, h] with the product computed."""
        b, s = self.dim(x, 0), self.dim(x, 1)
        return self.node("Reshape", [x, self.node("Concat", [self.node("Mul", [b, s]), self.const([self.hidden])],
                                                  axis=0)])

    def merge_minus_one(self, x: str) -> str:
        """[b, s, h] → [b, s * h] through Reshape's 0 and -1."""
        return self.node("Reshape", [x, self.const([0, -1])])

    def positions(self, x: str) -> str:
        """A [1, 64] position table sliced to the sequence, expanded to [b, s] (BERT's
        position ids), added to the first feature as floats."""
        table = self.const(np.arange(64, dtype=np.float32)[None], np.float32)
        sliced = self.node("Slice", [table, self.const([0]), self.dim(x, 1), self.const([1])])
        wide = self.node("Expand", [sliced, self.node("Concat", [self.dim(x, 0), self.dim(x, 1)], axis=0)])
        return wide

    def arange(self, x: str) -> str:
        """Range(0, seq) as floats (a causal mask's index vector)."""
        seq = self.node("Gather", [self.node("Shape", [x]), self.const(1)], axis=0)
        return self.node("Cast", [self.node("Range", [self.const(0), seq, self.const(1)])], to=TensorProto.FLOAT)

    def halving_level(self, x: str, width: int) -> str:
        """[n, width] → [n * 2, width / 2], the new first dimension computed from x's shape
        (a product onnx's inference cannot name), then through Transpose, MatMul, Softmax,
        Split, Concat, a reduction and gathers: the next level's Reshape reads the shape of
        this one's output, which is carried through those operators."""
        n = self.node("Mul", [self.dim(x, 0), self.const([2])])
        half = width // 2
        y = self.node("Reshape", [x, self.node("Concat", [n, self.const([half])], axis=0)])       # [2n, half]
        y = self.node("Transpose", [self.node("Transpose", [y], perm=[1, 0])], perm=[1, 0])
        y = self.node("MatMul", [self.node("Softmax", [y], axis=-1),
                                 self.const(np.eye(half, dtype=np.float32), np.float32)])
        if half > 1:
            left, right = (f"{self.name('split')}_{i}" for i in range(2))
            self.nodes.append(helper.make_node("Split", [y, self.const([1, half - 1])], [left, right], axis=1))
            y = self.node("Concat", [right, left], axis=1)
        y = self.node("Sub", [y, self.node("ReduceMean", [y], axes=[-1], keepdims=1)])
        index = self.node("Cast", [self.node("Relu", [self.node("Mul", [y, self.const(0.0, np.float32)])])],
                          to=TensorProto.INT64)                            # zeros like y
        y = self.node("GatherElements", [y, index], axis=1)
        return self.node("Add", [self.node("Gather", [self.const(np.ones((1, 1), np.float32), np.float32),
                                                      self.const(0)], axis=0), y])

    def quantized_projection(self, x: str) -> str:
        """[b, s, h] flattened to [b * s, h], projected as quantize_dynamic writes it
        (DynamicQuantizeLinear → MatMulInteger → Cast) and unsqueezed to [1, b * s, h];
        then reshaped by a target read from that value's shape, so its dimensions must be
        carried through the integer operators and the Unsqueeze within the round."""
        flat = self.flatten_tokens(x)
        q, scale, zero = (f"{self.name('dql')}_{i}" for i in range(3))
        self.nodes.append(helper.make_node("DynamicQuantizeLinear", [flat], [q, scale, zero]))
        weights = self.const(np.arange(self.hidden * self.hidden).reshape(self.hidden, self.hidden) % 7, np.uint8)
        product = self.node("MatMulInteger", [q, weights, zero, self.const(3, np.uint8)])
        wide = self.node("Unsqueeze", [self.node("Cast", [product], to=TensorProto.FLOAT), self.const([0])])
        rows = self.node("Unsqueeze", [self.node("Gather", [self.node("Shape", [wide]), self.const(1)], axis=0),
                                       self.const([0])])
        return self.node("Reshape", [wide, self.node("Concat", [rows, self.const([self.hidden])], axis=0)])

    def halving_levels(self, x: str) -> str:
        """x flattened to [batch * seq, 8], then three halving levels: [batch*seq*8, 1]."""
        x = self.flatten_tokens(x)
        for width in (8, 4, 2):
            x = self.halving_level(x, width)
        return x


BLOCKS = ("split_heads", "flatten_tokens", "merge_minus_one", "positions", "arange", "halving_levels",
          "quantized_projection")


def _build(blocks: list[str], hidden: int = 8, heads: int = 2) -> onnx.ModelProto:
    b = Builder(hidden)
    x = b.node("Relu", ["x"])
    for block in blocks:
        out = b.split_heads(x, heads) if block == "split_heads" else getattr(b, block)(x)
        b.outputs.append(b.node("Identity", [out]))
    return b.model()


def _session(model: onnx.ModelProto, level=LEVEL.ORT_ENABLE_ALL, dims=None) -> onyxrt.InferenceSession:
    so = onyxrt.SessionOptions()
    so.graph_optimization_level = level
    for k, v in (dims or {}).items():
        so.add_free_dimension_override_by_name(k, v)
    return onyxrt.InferenceSession(model.SerializeToString(), so)


def _check(model: onnx.ModelProto, batch: int, seq: int, tmp_path) -> None:
    x = np.random.default_rng(0).standard_normal((batch, seq, 8)).astype(np.float32)
    sess = _session(model)
    got = sess.run(None, {"x": x})
    sizes = {"batch": batch, "seq": seq}
    for arg, value in zip(sess.get_outputs(), got, strict=True):
        assert len(arg.shape) == value.ndim, (arg.name, arg.shape)
        for dim, actual in zip(arg.shape, value.shape):
            assert dim is not None, f"{arg.name}: {arg.shape} has an unknown dimension"
            assert _evaluate(dim, sizes) == actual, (arg.name, arg.shape, value.shape)
    plain = _session(model, LEVEL.ORT_DISABLE_ALL).run(None, {"x": x})
    reference = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": x})
    for g, p, r in zip(got, plain, reference, strict=True):
        np.testing.assert_allclose(g, p, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-6)
    # With the free dimensions fixed, every shape computation folds away.
    path = str(tmp_path / "fixed.onnx")
    so = onyxrt.SessionOptions()
    so.add_free_dimension_override_by_name("batch", batch)
    so.add_free_dimension_override_by_name("seq", seq)
    so.optimized_model_filepath = path
    fixed = onyxrt.InferenceSession(model.SerializeToString(), so)
    ops = [n.op_type for n in onnx.load(path).graph.node]
    assert "Shape" not in ops and "Range" not in ops, ops
    for g, f in zip(got, fixed.run(None, {"x": x}), strict=True):
        np.testing.assert_allclose(f, g, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("block", "expected"), [
    ("split_heads", ["batch", 2, "seq", 4]),
    ("flatten_tokens", ["batch*seq", 8]),
    ("merge_minus_one", ["batch", "seq*8"]),
    ("positions", ["batch", "seq"]),
    ("arange", ["seq"]),
])
def test_computed_shapes_get_symbolic_dimensions(tmp_path, block, expected):
    model = _build([block])
    assert _session(model).get_outputs()[0].shape == expected
    _check(model, 2, 3, tmp_path)


def test_shapes_carried_through_a_pass_resolve_chained_reshapes_in_one_round(tmp_path, monkeypatch):
    # Each level's Reshape reads the shape of the previous one's output through Transpose,
    # MatMul, Softmax, Split, Concat, a reduction and gathers: without carrying those
    # shapes along, every level took one more round of onnx's inference (BERT took seven;
    # here four rounds found the dimensions and a fifth confirmed).
    from onyxrt import symbolic_shapes

    model = _build(["halving_levels"])
    rounds = []
    propagate = symbolic_shapes.propagate
    monkeypatch.setattr(symbolic_shapes, "propagate", lambda m: rounds.append(propagate(m)) or rounds[-1])
    sess = _session(model, LEVEL.ORT_DISABLE_ALL)
    assert sess.get_outputs()[0].shape == ["batch*seq*8", 1]
    assert rounds == [True, False]  # everything found in the first; the second confirms
    _check(model, 2, 3, tmp_path)


def test_quantized_projection_shapes(tmp_path):
    model = _build(["quantized_projection"])
    assert _session(model).get_outputs()[0].shape == ["batch*seq", 8]
    _check(model, 2, 3, tmp_path)


@pytest.mark.parametrize(("op", "inputs", "attrs", "expected"), [
    ("DynamicQuantizeLinear", [["n", 8]], {}, ["n", 8]),
    ("QuantizeLinear", [["n", 8], [], []], {}, ["n", 8]),
    ("DequantizeLinear", [["n", 8], [], []], {}, ["n", 8]),
    ("MatMulInteger", [["b", "n", 8], [8, 4]], {}, ["b", "n", 4]),
    ("Unsqueeze", [["b", "n"]], {"axes": [1, -1]}, ["b", 1, "n", 1]),
    ("Unsqueeze", [["b", "n"]], {"axes": [0, 0]}, None),  # repeated axis: not a shape
])
def test_shapes_carried_through_quantization_operators_and_unsqueeze(op, inputs, attrs, expected):
    """What a round carries in memory through a dynamically quantized export's
    projections (DynamicQuantizeLinear → MatMulInteger) and its attention mask's
    Unsqueezes (opset 11, axes an attribute): with them a quantized BERT's dimensions
    are all found in one round of onnx's inference (three before, ~80 ms of creation)."""
    from onyxrt import symbolic_shapes

    names = [f"in{i}" for i in range(len(inputs))]
    node = helper.make_node(op, names, ["out"], **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape)
                                            for n, shape in zip(names, inputs)], [])
    state = symbolic_shapes._State(graph)
    symbolic_shapes._carry(state, node)
    found = state.shapes.get("out")
    dims = None if found is None else [d.constant if d.constant is not None else str(d) for d in found]
    assert dims == expected


def test_a_written_expression_is_read_back_as_one_only_over_the_free_dimensions():
    from onyxrt.symbolic_shapes import _parse

    free = frozenset({"batch", "seq"})
    assert _parse("batch*seq*2*2", free) == Expr.of("batch") * Expr.of("seq") * Expr.of(4)
    assert _parse("seq*12-4", free) == Expr.of("seq") * Expr.of(12) - Expr.of(4)
    # A model's own names stay single symbols: not over the free dimensions, or no operator.
    assert _parse("max-len", free) is None and _parse("batch*x", free) is None
    assert _parse("seq", free) is None and _parse("batch*seq", frozenset()) is None


def test_a_division_that_is_not_exact_stays_unknown():
    b = Builder(8)
    half = b.node("Div", [b.dim("x", 1), b.const([2])])
    b.outputs.append(b.node("Reshape", ["x", b.node("Concat", [b.dim("x", 0), half, b.const([-1])], axis=0)]))
    shape = _session(b.model()).get_outputs()[0].shape
    assert shape[0] == "batch" and shape[1] is None  # seq // 2 is not a symbol's exact multiple


def test_expressions():
    seq, batch = Expr.of("seq"), Expr.of("batch")
    assert str(seq * Expr.of(12)) == "seq*12"
    assert str(batch * seq) == "batch*seq" == str(seq * batch)
    assert (seq * Expr.of(12)).exact_div(Expr.of(4)) == seq * Expr.of(3)
    assert (seq * Expr.of(12)).exact_div(Expr.of(5)) is None
    assert (batch * seq * Expr.of(8)).exact_div(batch * Expr.of(8)) == seq
    assert str(seq - Expr.of(1)) == "seq-1" and (seq + Expr.of(1) - seq).constant == 1


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(blocks=st.lists(st.sampled_from(BLOCKS), min_size=1, max_size=4), batch=st.integers(1, 3),
       seq=st.integers(1, 6))
def test_random_graphs_of_shape_computations(tmp_path, blocks, batch, seq):
    _check(_build(blocks), batch, seq, tmp_path)
