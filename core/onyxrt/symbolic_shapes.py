"""Symbolic dimensions through the shape computations of real exports.

onnx's shape inference knows ``batch`` and ``seq`` where a model declares them, but a
Reshape whose target shape is computed at run time (``Shape → Gather → Mul → Concat →
Reshape``, as torch exports every attention reshape) gets an unknown dimension, named
``unk__N``, and so does everything downstream. This module evaluates those computations
on symbols instead: the values of small integer tensors (a Shape's output, a Gather of it,
``seq * 12``) are tracked as polynomials over the free dimensions, and the output shapes of
Reshape, Expand and ConstantOfShape are derived from them (a Reshape's ``-1`` divided out
symbolically). :func:`propagate` writes the dimensions it finds into the model's
``value_info``; onnx's inference, run again, carries them through the elementwise, matrix
and layout operators. A dimension is then reported as ``seq``, ``batch*seq`` or
``seq*12`` — in ``NodeArg.shape`` and in the shapes providers and the partitioner see —
rather than ``unk__3`` or ``None``.

Only exact facts are written: an integer division that does not divide, a value this
module does not follow, or a dimension inference already knows leaves the dimension as it
was.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .graph import tensor_array
from .records import record

__all__ = ["Expr", "propagate", "forget_invented"]

#: Integer tensors up to this many elements are tracked as values (shapes, indices).
_MAX_TRACKED = 64
_INT_TYPES = {onnx.TensorProto.INT64, onnx.TensorProto.INT32}


@record(frozen=True)
class Expr:
    """A polynomial with integer coefficients over dimension symbols: monomial (a sorted
    tuple of symbols) → coefficient. ``Expr.of(3)``, ``Expr.of("seq")``."""

    terms: tuple[tuple[tuple[str, ...], int], ...]

    @staticmethod
    def of(value: int | str) -> Expr:
        """The constant ``value``, or the symbol ``value``."""
        # Interned: a model's shapes repeat a few sizes thousands of times, and building
        # a frozen dataclass costs about a microsecond (Expr is immutable, so sharing is safe).
        found = _INTERNED.get(value)
        if found is None:
            found = Expr((((value,), 1),)) if isinstance(value, str) else Expr((((), int(value)),) if value else ())
            if len(_INTERNED) < _MAX_INTERNED:
                _INTERNED[value] = found
        return found

    @staticmethod
    def _make(terms: dict[tuple[str, ...], int]) -> Expr:
        # Canonical order, highest degree first and the constant last: "seq-1", not "-1+seq".
        return Expr(tuple(sorted(((k, v) for k, v in terms.items() if v), key=lambda t: (-len(t[0]), t[0]))))

    @property
    def constant(self) -> int | None:
        """The value when the expression has no symbol."""
        if not self.terms:
            return 0
        if len(self.terms) == 1 and self.terms[0][0] == ():
            return self.terms[0][1]
        return None

    def __add__(self, other: Expr) -> Expr:
        terms = dict(self.terms)
        for k, v in other.terms:
            terms[k] = terms.get(k, 0) + v
        return Expr._make(terms)

    def __neg__(self) -> Expr:
        return Expr(tuple((k, -v) for k, v in self.terms))

    def __sub__(self, other: Expr) -> Expr:
        return self + (-other)

    def __mul__(self, other: Expr) -> Expr:
        terms: dict[tuple[str, ...], int] = {}
        for ka, va in self.terms:
            for kb, vb in other.terms:
                key = tuple(sorted(ka + kb))
                terms[key] = terms.get(key, 0) + va * vb
        return Expr._make(terms)

    def exact_div(self, other: Expr) -> Expr | None:
        """``self / other`` when ``other`` is one monomial dividing every term exactly."""
        if len(other.terms) != 1:
            return None
        (symbols, coef), = other.terms
        if coef == 0:
            return None
        out: dict[tuple[str, ...], int] = {}
        for key, value in self.terms:
            rest = list(key)
            for s in symbols:
                if s not in rest:
                    return None
                rest.remove(s)
            if value % coef:
                return None
            out[tuple(rest)] = value // coef
        return Expr._make(out)

    def __str__(self) -> str:
        if not self.terms:
            return "0"
        parts = []
        for symbols, coef in self.terms:
            factors = [*symbols] + ([str(coef)] if coef != 1 or not symbols else [])
            parts.append("*".join(factors) if coef != -1 or not symbols else "-" + "*".join(symbols))
        return "+".join(parts).replace("+-", "-")


Dim = Expr | None

#: Expr.of's results, by value (at most _MAX_INTERNED of them).
_INTERNED: dict[int | str, Expr] = {}
_MAX_INTERNED = 4096
Value = list[Dim]


class _Shapes:
    """Name → dimensions, read from a ``ValueInfoProto`` only when asked for: a round of
    :func:`propagate` asks for the shapes of a few hundred names (the inputs of shape
    computations) of the thousands a transformer export's ``value_info`` holds, and
    :func:`propagate` runs once per round of onnx's inference."""

    __slots__ = ("_known", "_declared", "symbols")

    def __init__(self, symbols: frozenset[str]) -> None:
        self._known: dict[str, list[Dim] | None] = {}
        self._declared: dict[str, tuple[Any, bool | None]] = {}
        self.symbols = symbols

    def declare(self, name: str, tensor_type: onnx.TypeProto.Tensor, is_input: bool) -> None:
        """``name``'s shape is ``tensor_type``'s (read on first use; see :func:`_dims`)."""
        self._known.pop(name, None)
        self._declared[name] = (tensor_type, is_input)

    def declare_initializer(self, tensor: onnx.TensorProto) -> None:
        """An initializer's shape is its dims (read on first use)."""
        self._known.pop(tensor.name, None)
        self._declared[tensor.name] = (tensor, None)

    def __setitem__(self, name: str, dims: list[Dim] | None) -> None:
        self._declared.pop(name, None)
        self._known[name] = dims

    def learn(self, name: str, found: list[Dim]) -> None:
        """Take ``found`` as ``name``'s dimensions where those known so far are unknown;
        nothing when the two disagree on the rank (left to onnx's inference)."""
        known = self.get(name)
        if known is not None:
            if len(known) != len(found):
                return
            found = [k if k is not None else f for k, f in zip(known, found)]
        self[name] = found

    def get(self, name: str) -> list[Dim] | None:
        """``name``'s dimensions (None where a dimension is unknown), or None."""
        if name in self._known:
            return self._known[name]
        declared = self._declared.pop(name, None)
        if declared is None:
            return None
        source, is_input = declared
        if is_input is None:  # an initializer
            dims: list[Dim] | None = [Expr.of(int(d)) for d in source.dims]
        else:
            dims = _dims(source, is_input, self.symbols) if source.HasField("shape") else None
        self._known[name] = dims
        return dims


class _State:
    """Shapes and tracked values of one graph's names."""

    def __init__(self, graph: onnx.GraphProto) -> None:
        self.values: dict[str, tuple[Value, bool]] = {}  # name → (elements, is a scalar)
        self.types: dict[str, int] = {}
        inputs = {vi.name for vi in graph.input}
        # The free dimensions: what an expression written by an earlier round is made of.
        self.shapes = _Shapes(frozenset(
            d.dim_param for vi in graph.input if vi.type.HasField("tensor_type")
            for d in vi.type.tensor_type.shape.dim if d.dim_param))
        for vi in [*graph.input, *graph.value_info, *graph.output]:
            if vi.type.HasField("tensor_type"):
                tt = vi.type.tensor_type
                self.types[vi.name] = tt.elem_type
                # A name the model itself gives an input (tf2onnx writes unk__214) is a symbol.
                self.shapes.declare(vi.name, tt, vi.name in inputs)
        # Small integer initializers are tracked values, read when a computation asks.
        self._constants: dict[str, onnx.TensorProto] = {}
        for t in graph.initializer:
            self.shapes.declare_initializer(t)
            self.types[t.name] = t.data_type
            if t.data_type in _INT_TYPES and math.prod(t.dims) <= _MAX_TRACKED:
                self._constants[t.name] = t

    def _track_array(self, name: str, array: np.ndarray) -> None:
        self.values[name] = ([Expr.of(int(v)) for v in array.reshape(-1)], array.ndim == 0)

    def value(self, name: str) -> tuple[Value, bool] | None:
        if not name:
            return None
        found = self.values.get(name)
        if found is None and name in self._constants:
            self._track_array(name, tensor_array(self._constants.pop(name)))
            found = self.values[name]
        return found

    def ints(self, name: str) -> list[int] | None:
        """A tracked value's elements when all are known integers."""
        found = self.value(name)
        if found is None or any(e is None or e.constant is None for e in found[0]):
            return None
        return [e.constant for e in found[0]]  # type: ignore[union-attr,misc]


def _dims(tensor_type: onnx.TypeProto.Tensor, declared: bool = False,
          symbols: frozenset[str] = frozenset()) -> list[Dim]:
    """The dimensions of a tensor type; ``unk__N`` names are onnx's placeholders for
    unknown dimensions unless ``declared`` (a graph input's, as the model wrote them). A
    name that is an expression over ``symbols`` (``batch*seq*2``, as an earlier round
    wrote it) is read back as that expression, not as a new opaque symbol."""
    dims: list[Dim] = []
    for d in tensor_type.shape.dim:
        if d.HasField("dim_value"):
            dims.append(Expr.of(int(d.dim_value)))
        elif d.dim_param and (declared or not d.dim_param.startswith("unk__")):
            text = d.dim_param
            parsed = None if declared or text in symbols else _parse(text, symbols)
            dims.append(parsed if parsed is not None else Expr.of(text))
        else:
            dims.append(None)
    return dims


_TERM = re.compile(r"([+-]?)([^+-]+)")
_FACTOR = re.compile(r"[A-Za-z_]\w*|\d+")


def _parse(text: str, symbols: frozenset[str]) -> Expr | None:
    """``text`` in :meth:`Expr.__str__`'s form over ``symbols`` only, as an Expr; None
    for anything else (a model's own name such as ``max-len`` stays one symbol)."""
    if not symbols or not any(c in text for c in "*+-"):
        return None
    total = Expr.of(0)
    for sign, body in _TERM.findall(text):
        term = Expr.of(-1 if sign == "-" else 1)
        for factor in body.split("*"):
            if not _FACTOR.fullmatch(factor) or not (factor.isdigit() or factor in symbols):
                return None
            term = term * Expr.of(int(factor) if factor.isdigit() else factor)
        total = total + term
    return total if "".join(s + b for s, b in _TERM.findall(text)) == text else None


def _attr(node: onnx.NodeProto, name: str, default: object = None) -> object:
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def _ints_attr(node: onnx.NodeProto, name: str) -> list[int] | None:
    """An INTS attribute as Python ints, or None when the node does not have it."""
    for a in node.attribute:
        if a.name == name:
            return [int(v) for v in a.ints]
    return None


def _elementwise(op: str, a: Dim, b: Dim) -> Dim:
    if a is None or b is None:
        return None
    if op == "Add":
        return a + b
    if op == "Sub":
        return a - b
    if op == "Mul":
        return a * b
    if op == "Div":  # integer division of non-negative sizes: exact only
        ca, cb = a.constant, b.constant
        if ca is not None and cb:
            return Expr.of(ca // cb)
        return a.exact_div(b)
    if op == "Equal":  # 1 or 0; a size is never negative, so never equal to a negative constant
        if a == b:
            return Expr.of(1)
        ca, cb = a.constant, b.constant
        if (ca is not None and cb is not None) or (ca is not None and ca < 0) or (cb is not None and cb < 0):
            return Expr.of(0)
    return None


def _broadcast(values: Sequence[Value]) -> list[tuple[Dim, ...]] | None:
    n = max(len(v) for v in values)
    if any(len(v) not in (1, n) for v in values):
        return None
    return [tuple(v[i] if len(v) > 1 else v[0] for v in values) for i in range(n)]


def _track(state: _State, node: onnx.NodeProto) -> None:
    """Track the value of ``node``'s output when it is a shape computation."""
    op, out = node.op_type, node.output[0] if node.output else ""
    if not out:
        return
    if op == "Shape":
        shape = state.shapes.get(node.input[0])
        if shape is not None:
            start, end = int(_attr(node, "start", 0)), _attr(node, "end", None)  # type: ignore[call-overload]
            state.values[out] = (shape[slice(start, None if end is None else int(end))], False)  # type: ignore[call-overload]
    elif op == "Size":
        total = _product(state.shapes.get(node.input[0]))
        if total is not None:
            state.values[out] = ([total], True)
    elif op == "Constant":
        tensor = _attr(node, "value")
        if isinstance(tensor, onnx.TensorProto) and tensor.data_type in _INT_TYPES \
                and math.prod(tensor.dims) <= _MAX_TRACKED:
            state._track_array(out, numpy_helper.to_array(tensor))
    elif op in ("Identity", "Cast"):
        found = state.value(node.input[0])
        if found is not None and (op == "Identity" or _attr(node, "to") in _INT_TYPES):
            state.values[out] = found
    elif op == "Gather":
        data, idx = state.value(node.input[0]), state.ints(node.input[1])
        found = state.value(node.input[1])
        if data is not None and idx is not None and found is not None and int(_attr(node, "axis", 0)) == 0:  # type: ignore[call-overload]
            n = len(data[0])
            if all(-n <= i < n for i in idx):
                state.values[out] = ([data[0][i] for i in idx], found[1])
    elif op == "Reshape":  # a shape value flattened or made a scalar
        found, target = state.value(node.input[0]), state.ints(node.input[1])
        if found is not None and target is not None and (target in ([-1], [len(found[0])]) or
                                                          (target == [] and len(found[0]) == 1)):
            state.values[out] = (found[0], target == [])
    elif op == "ConstantOfShape":
        sizes, fill = state.ints(node.input[0]), _attr(node, "value")
        if sizes is not None and len(sizes) <= 1 and math.prod(sizes) <= _MAX_TRACKED \
                and isinstance(fill, onnx.TensorProto) and fill.data_type in _INT_TYPES:
            element = Expr.of(int(numpy_helper.to_array(fill).reshape(-1)[0]))
            state.values[out] = ([element] * math.prod(sizes), not sizes)
    elif op in ("Unsqueeze", "Squeeze"):
        found = state.value(node.input[0])
        if found is not None:
            state.values[out] = (found[0], op == "Squeeze" and len(found[0]) == 1)
    elif op == "Concat":
        parts = [state.value(i) for i in node.input]
        if all(p is not None for p in parts):
            state.values[out] = ([e for p in parts for e in p[0]], False)  # type: ignore[index]
    elif op == "Slice":
        data = state.value(node.input[0])
        bounds = [state.ints(name) if name else None for name in _slice_inputs(node)]
        starts, ends = bounds[1], bounds[2]
        axes, steps = bounds[3] or [0], bounds[4] or [1]
        if data is not None and starts and ends and axes in ([0], [-1]):
            state.values[out] = (data[0][slice(starts[0], ends[0], steps[0])], False)
    elif op in ("Add", "Sub", "Mul", "Div", "Equal"):
        a, b = state.value(node.input[0]), state.value(node.input[1])
        if a is not None and b is not None:
            pairs = _broadcast([a[0], b[0]])
            if pairs is not None:
                state.values[out] = ([_elementwise(op, x, y) for x, y in pairs], a[1] and b[1])
    elif op == "Where":
        parts = [state.value(i) for i in node.input[:3]]
        if all(p is not None for p in parts):
            triples = _broadcast([p[0] for p in parts])  # type: ignore[index]
            if triples is not None:
                state.values[out] = ([None if c is None or c.constant is None else (x if c.constant else y)
                                      for c, x, y in triples], all(p[1] for p in parts))  # type: ignore[index]


#: Operators whose first output has their first input's shape.
_SAME_SHAPE = frozenset({
    "Identity", "Cast", "CastLike", "Relu", "LeakyRelu", "Elu", "Selu", "Gelu", "Sigmoid", "HardSigmoid",
    "HardSwish", "Tanh", "Erf", "Sqrt", "Exp", "Log", "Neg", "Abs", "Reciprocal", "Floor", "Ceil",
    "Round", "Sin", "Cos", "Not", "IsNaN", "Softplus", "Softsign", "Clip", "Softmax", "LogSoftmax",
    "Dropout", "LayerNormalization", "BatchNormalization", "InstanceNormalization",
    # quantized models (quantize_dynamic's DynamicQuantizeLinear before every MatMulInteger)
    "DynamicQuantizeLinear", "QuantizeLinear", "DequantizeLinear",
})
#: Operators whose output is their inputs broadcast (numpy's rule).
_BROADCASTING = frozenset({
    "Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Equal", "Less", "LessOrEqual", "Greater",
    "GreaterOrEqual", "And", "Or", "Xor", "Where", "Mod", "PRelu",
})


#: Reductions whose axes are an attribute (opset < 18, ReduceSum < 13) or their second input.
_REDUCING = frozenset({"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL2"})
#: Operators :func:`_carry` has a shape rule for.
_CARRIED = _SAME_SHAPE | _BROADCASTING | _REDUCING | {"Transpose", "MatMul", "MatMulInteger", "Gather",
                                                     "GatherElements", "Concat", "Split", "Unsqueeze"}


def _carry(state: _State, node: onnx.NodeProto) -> None:
    """Carry shapes through the elementwise, Transpose and MatMul nodes of the pass, in
    memory, where ``value_info`` does not know them yet: a Reshape whose target is computed
    from a shape two or three such nodes downstream of another Reshape (every attention
    block of an export) is then resolved in this pass, instead of one more round of onnx's
    inference per level (BERT took seven rounds). Nothing is written from here: onnx's
    next inference writes these shapes itself."""
    op = node.op_type
    if op not in _CARRIED:
        return
    out = node.output[0]
    known = state.shapes.get(out)
    if known is not None and all(d is not None for d in known):
        return
    found: list[Dim] | None = None
    if op in _SAME_SHAPE:
        found = state.shapes.get(node.input[0])
    elif op in _BROADCASTING:
        found = _broadcast_shapes([state.shapes.get(i) for i in node.input if i])
    elif op == "Transpose":
        shape = state.shapes.get(node.input[0])
        if shape is not None:
            perm = _ints_attr(node, "perm")
            perm = list(range(len(shape)))[::-1] if perm is None else perm
            if sorted(perm) == list(range(len(shape))):
                found = [shape[p] for p in perm]
    elif op in ("MatMul", "MatMulInteger"):
        found = _matmul_shape(state.shapes.get(node.input[0]), state.shapes.get(node.input[1]))
    elif op == "Gather" and len(node.input) == 2:
        data, idx = state.shapes.get(node.input[0]), state.shapes.get(node.input[1])
        axis = int(_attr(node, "axis", 0))  # type: ignore[call-overload]
        if data is not None and idx is not None and -len(data) <= axis < len(data):
            axis %= len(data)
            found = [*data[:axis], *idx, *data[axis + 1:]]
    elif op == "GatherElements" and len(node.input) == 2:
        found = state.shapes.get(node.input[1])
    elif op in _REDUCING:
        found = _reduced_shape(state, node)
    elif op == "Concat":
        found = _concat_shape([state.shapes.get(i) for i in node.input], int(_attr(node, "axis", 0)))  # type: ignore[call-overload]
    elif op == "Split":
        _carry_split(state, node)
    elif op == "Unsqueeze":  # an attention mask made [batch, 1, 1, seq]
        found = _unsqueezed_shape(state, node)
    if found is not None:
        state.shapes.learn(out, found)


def _reduced_shape(state: _State, node: onnx.NodeProto) -> list[Dim] | None:
    shape = state.shapes.get(node.input[0])
    if shape is None:
        return None
    axes = _ints_attr(node, "axes")
    if axes is None:  # opset 18's input, or none: every axis
        axes = state.ints(node.input[1]) if len(node.input) > 1 and node.input[1] else []
    if axes is None or any(not -len(shape) <= a < len(shape) for a in axes):
        return None
    if not axes:
        if int(_attr(node, "noop_with_empty_axes", 0)):  # type: ignore[call-overload]
            return list(shape)
        axes = list(range(len(shape)))
    reduced = {a % len(shape) for a in axes}
    keep = int(_attr(node, "keepdims", 1))  # type: ignore[call-overload]
    return [Expr.of(1) if i in reduced else d for i, d in enumerate(shape) if keep or i not in reduced]


def _concat_shape(shapes: Sequence[list[Dim] | None], axis: int) -> list[Dim] | None:
    if not shapes or any(s is None for s in shapes) or len({len(s) for s in shapes}) != 1:  # type: ignore[arg-type]
        return None
    rank = len(shapes[0])  # type: ignore[arg-type]
    if not -rank <= axis < rank:
        return None
    axis %= rank
    out: list[Dim] = []
    for i in range(rank):
        dims = [s[i] for s in shapes]  # type: ignore[index]
        if i == axis:
            out.append(None if any(d is None for d in dims) else sum(dims[1:], dims[0]))  # type: ignore[arg-type]
        else:
            known = {d for d in dims if d is not None}
            out.append(known.pop() if len(known) == 1 else None)
    return out


def _carry_split(state: _State, node: onnx.NodeProto) -> None:
    """Split's outputs, when the sizes are constant (an attribute, a tracked input, or
    equal parts of a constant length)."""
    shape = state.shapes.get(node.input[0])
    axis = int(_attr(node, "axis", 0))  # type: ignore[call-overload]
    if shape is None or not -len(shape) <= axis < len(shape):
        return
    axis %= len(shape)
    sizes = _ints_attr(node, "split")
    if sizes is None and len(node.input) > 1 and node.input[1]:  # opset 13's input
        sizes = state.ints(node.input[1])
    elif sizes is None:
        length, parts = shape[axis], len(node.output)
        if length is None or length.constant is None or length.constant % parts:
            return  # (an uneven split's last part, opset 18's num_outputs: left to onnx)
        sizes = [length.constant // parts] * parts
    if sizes is None or len(sizes) != len(node.output):
        return
    for name, size in zip(node.output, sizes):
        if name:
            state.shapes.learn(name, [*shape[:axis], Expr.of(size), *shape[axis + 1:]])


def _broadcast_shapes(shapes: Sequence[list[Dim] | None]) -> list[Dim] | None:
    """numpy's broadcast of ``shapes``; a dimension is None where it cannot be decided."""
    if not shapes or any(s is None for s in shapes):
        return None
    rank = max(len(s) for s in shapes)  # type: ignore[arg-type]
    out: list[Dim] = []
    for i in range(rank):
        dims = [s[i - rank + len(s)] for s in shapes if i - rank + len(s) >= 0]  # type: ignore[arg-type,index]
        rest = [d for d in dims if d is None or d.constant != 1]
        if not rest:
            out.append(Expr.of(1))
        elif any(d is None for d in rest) or any(d != rest[0] for d in rest):
            out.append(None)
        else:
            out.append(rest[0])
    return out


def _unsqueezed_shape(state: _State, node: onnx.NodeProto) -> list[Dim] | None:
    """Unsqueeze's output: ones inserted at the axes (an attribute before opset 13, then a
    constant input), counted in the output's rank."""
    shape = state.shapes.get(node.input[0])
    axes = _ints_attr(node, "axes")
    if axes is None and len(node.input) > 1 and node.input[1]:
        axes = state.ints(node.input[1])
    if shape is None or not axes:
        return None
    rank = len(shape) + len(axes)
    at = {a + rank if a < 0 else a for a in axes}
    if len(at) != len(axes) or any(not 0 <= a < rank for a in at):
        return None
    rest = iter(shape)
    return [Expr.of(1) if i in at else next(rest) for i in range(rank)]


def _matmul_shape(a: list[Dim] | None, b: list[Dim] | None) -> list[Dim] | None:
    """numpy's matmul shape rule (1-D operands promoted, batch dimensions broadcast)."""
    if a is None or b is None or not a or not b:
        return None
    if len(b) == 1:
        return list(a[:-1])
    if len(a) == 1:
        return [*b[:-2], b[-1]]
    batch = _broadcast_shapes([list(a[:-2]), list(b[:-2])]) if len(a) > 2 or len(b) > 2 else []
    return None if batch is None else [*batch, a[-2], b[-1]]


#: Operators whose output shape :func:`_output_shape` derives from tracked values.
_SHAPE_DETERMINING = frozenset({"Reshape", "Expand", "ConstantOfShape", "Slice", "Range"})


def _output_shape(state: _State, node: onnx.NodeProto) -> list[Dim] | None:
    """The output shape of a shape-determining node from tracked values."""
    op = node.op_type
    if op == "ConstantOfShape":
        found = state.value(node.input[0])
        return list(found[0]) if found is not None else None
    if op == "Expand":
        found, shape = state.value(node.input[1]), state.shapes.get(node.input[0])
        if found is None or shape is None:
            return None
        rank = max(len(shape), len(found[0]))
        a = [Expr.of(1)] * (rank - len(shape)) + list(shape)
        b = [Expr.of(1)] * (rank - len(found[0])) + list(found[0])
        return [y if x is not None and x.constant == 1 else x if y is not None and y.constant == 1 else
                (x if x == y else None) for x, y in zip(a, b)]
    if op == "Slice":
        return _slice_shape(state, node)
    if op == "Range":  # with a step of 1 the length is limit - start (torch's arange(n))
        start, limit, delta = (state.value(i) for i in node.input[:3])
        if start is None or limit is None or delta is None or start[0][0] is None or limit[0][0] is None \
                or delta[0][0] is None or delta[0][0].constant != 1:
            return None
        return [limit[0][0] - start[0][0]]
    if op == "Reshape":
        found, shape = state.value(node.input[1]), state.shapes.get(node.input[0])
        if found is None:
            return None
        allow_zero = bool(_attr(node, "allowzero", 0))
        dims: list[Dim] = []
        for i, d in enumerate(found[0]):
            if d is not None and d.constant == 0 and not allow_zero:
                d = shape[i] if shape is not None and i < len(shape) else None
            dims.append(d)
        holes = [i for i, d in enumerate(dims) if d is not None and d.constant == -1]
        if len(holes) == 1:
            dims[holes[0]] = _infer_hole(shape, [d for i, d in enumerate(dims) if i != holes[0]])
        return dims
    return None


#: An end at or beyond this means "to the end of the axis" (exporters write INT64_MAX).
_TO_THE_END = 1 << 31


def _slice_shape(state: _State, node: onnx.NodeProto) -> list[Dim] | None:
    """Slice's output shape (opset 10+: starts, ends, axes, steps as inputs). A symbolic end
    on an axis of constant length is taken to lie within it — a position table sliced to
    ``seq`` gives ``seq`` (a longer sequence fails where the table is read anyway)."""
    shape = state.shapes.get(node.input[0])
    if shape is None or len(node.input) < 3:
        return None
    inputs = _slice_inputs(node)
    starts, ends = state.value(inputs[1]), state.value(inputs[2])
    axes = state.ints(inputs[3]) if inputs[3] else list(range(len(starts[0]) if starts else 0))
    steps = state.ints(inputs[4]) if inputs[4] else [1] * len(axes or [])
    if starts is None or ends is None or axes is None or steps is None:
        return None
    out = list(shape)
    for axis, start, end, step in zip(axes, starts[0], ends[0], steps):
        axis += len(shape) if axis < 0 else 0
        if not 0 <= axis < len(shape):
            return None
        dim = shape[axis]
        out[axis] = _slice_length(dim, start, end, step)
    return out


def _slice_length(dim: Dim, start: Dim, end: Dim, step: int) -> Dim:
    if start is None or end is None or step != 1 or start.constant is None or start.constant < 0:
        return None
    begin = start.constant
    if end.constant is not None and end.constant >= _TO_THE_END:  # to the end of the axis
        if dim is None:
            return None
        return dim - Expr.of(begin) if dim.constant is None else Expr.of(max(dim.constant - begin, 0))
    if end.constant is not None:
        if end.constant < 0 or dim is None or dim.constant is None:
            return None
        return Expr.of(max(min(end.constant, dim.constant) - begin, 0))
    # A symbolic end (``seq``) within an axis of constant length, or equal to the axis.
    if dim is not None and (dim.constant is not None or dim == end):
        return end - Expr.of(begin)
    return None


def _slice_inputs(node: onnx.NodeProto) -> list[str]:
    """Slice's data, starts, ends, axes and steps input names (``""`` when absent)."""
    return (list(node.input) + [""] * 5)[:5]


def _product(dims: Sequence[Dim] | None) -> Dim:
    """The product of ``dims``, or None when one is unknown (or there are none given)."""
    if dims is None or any(d is None for d in dims):
        return None
    total = Expr.of(1)
    for d in dims:
        total = total * d  # type: ignore[operator]
    return total


def _infer_hole(shape: Sequence[Dim] | None, others: Sequence[Dim]) -> Dim:
    total, known = _product(shape), _product(others)
    if total is None or known is None or known.constant == 0:
        return None
    return total.exact_div(known)


def _write(vi: onnx.ValueInfoProto, dims: Sequence[Dim]) -> bool:
    """Fill ``vi``'s unknown dimensions from ``dims``; whether anything changed."""
    tt = vi.type.tensor_type
    if not tt.HasField("shape"):
        if any(d is None for d in dims):
            return False
        for _ in dims:
            tt.shape.dim.add()
    if len(tt.shape.dim) != len(dims):
        return False
    changed = False
    for slot, d in zip(tt.shape.dim, dims):
        known = slot.HasField("dim_value") or (slot.dim_param and not slot.dim_param.startswith("unk__"))
        if known or d is None:
            continue
        value = d.constant
        if value is not None:
            if value < 0:
                continue
            slot.dim_value = value
        else:
            slot.dim_param = str(d)
        changed = True
    return changed


def propagate(model: onnx.ModelProto, only: Iterable[str] = ("", "ai.onnx")) -> bool:
    """Write the dimensions the shape computations of ``model``'s top-level graph give
    into its ``value_info`` and outputs (see the module docstring); ``True`` when a
    dimension was filled in (onnx's inference should run again to carry it on)."""
    graph = model.graph
    state = _State(graph)
    infos = {vi.name: vi for vi in [*graph.value_info, *graph.output]}
    domains = set(only)
    changed = False
    for node in graph.node:
        if node.domain not in domains:
            continue
        _track(state, node)
        if node.op_type not in _SHAPE_DETERMINING or not node.output[0]:
            if node.output and node.output[0]:
                _carry(state, node)
            continue
        dims = _output_shape(state, node)
        if dims is None:
            continue
        name = node.output[0]
        vi = infos.get(name)
        if vi is None:
            elem = state.types.get(node.input[0]) if node.op_type not in ("ConstantOfShape", "Range") else None
            if not elem:
                continue
            vi = graph.value_info.add()
            vi.name = name
            vi.type.tensor_type.elem_type = elem
            infos[name] = vi
        if _write(vi, dims):
            changed = True
            # The dimensions as found (exact expressions), where inference knew none.
            written = _dims(vi.type.tensor_type, symbols=state.shapes.symbols)
            state.shapes.learn(name, [d if d is not None else w for d, w in zip(dims, written)])
    if changed:
        forget_invented(graph)
    return changed


def forget_invented(graph: onnx.GraphProto) -> None:
    """Clear the ``unk__N`` names onnx's inference invented, so that its next run fills
    those dimensions from what :func:`propagate` found (it keeps a name it sees)."""
    for vi in [*graph.value_info, *graph.output]:
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape"):
            for d in vi.type.tensor_type.shape.dim:
                if d.dim_param.startswith("unk__"):
                    d.ClearField("dim_param")
