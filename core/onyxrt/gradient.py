"""``ai.onnx.preview.training::Gradient``: reverse-mode differentiation as a graph rewrite.

A Gradient node asks for dy/dx for each x in ``xs`` where y is computed from them by the
enclosing graph. Before partitioning, the session replaces the node by the backward graph:
the forward nodes between ``xs`` and ``y`` are walked in reverse, each op's derivative rule
emits ordinary ONNX nodes, and contributions to one value are summed. So the gradient runs
on any provider, like the forward graph.

Supported ops: Add, Sub, Mul, Div, Neg, Identity, Relu, Exp, Log, Tanh, Sigmoid and 2-D
MatMul, with broadcasting undone by ReduceSum where the shapes are known statically. A
Gradient over anything else raises :class:`~onyxrt.errors.NotImplementedOp` naming the op.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .errors import NotImplementedOp
from .shape_inference import infer_shapes

__all__ = ["expand_gradients", "TRAINING_DOMAIN"]

TRAINING_DOMAIN = "ai.onnx.preview.training"


class _Backward:
    """Accumulates the backward nodes of one Gradient node."""

    def __init__(self, prefix: str, shapes: Mapping[str, tuple[int, ...] | None]) -> None:
        self.prefix = prefix
        self.shapes = shapes
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.grads: dict[str, str] = {}
        self._ids = itertools.count()

    def fresh(self, hint: str) -> str:
        return f"{self.prefix}/{hint}_{next(self._ids)}"

    def op(self, op_type: str, inputs: list[str], **attrs: Any) -> str:
        out = self.fresh(op_type.lower())
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=out, **attrs))
        return out

    def const(self, value: np.ndarray) -> str:
        name = self.fresh("const")
        self.initializers.append(numpy_helper.from_array(value, name))
        return name

    def add_grad(self, value: str, grad: str) -> None:
        previous = self.grads.get(value)
        self.grads[value] = grad if previous is None else self.op("Add", [previous, grad])

    def unbroadcast(self, grad: str, value: str, result: str) -> str:
        """Sum ``grad`` (shaped like ``result``) down to ``value``'s shape."""
        vs, rs = self.shapes.get(value), self.shapes.get(result)
        if vs is None or rs is None:
            raise NotImplementedOp(
                f"Gradient through {result!r}: the shapes of {value!r} and {result!r} must be "
                "known statically to undo broadcasting"
            )
        if vs == rs:
            return grad
        lead = len(rs) - len(vs)
        axes = list(range(lead)) + [lead + i for i, d in enumerate(vs) if d == 1 and rs[lead + i] != 1]
        summed = self.op("ReduceSum", [grad, self.const(np.array(axes, np.int64))], keepdims=1)
        return self.op("Reshape", [summed, self.const(np.array(vs, np.int64))])


Rule = Callable[[_Backward, onnx.NodeProto, str], None]


def _binary(backward: _Backward, node: onnx.NodeProto, g: str) -> None:
    a, b = node.input[0], node.input[1]
    y = node.output[0]
    op = node.op_type
    if op == "Add":
        ga, gb = g, g
    elif op == "Sub":
        ga, gb = g, backward.op("Neg", [g])
    elif op == "Mul":
        ga, gb = backward.op("Mul", [g, b]), backward.op("Mul", [g, a])
    else:  # Div: d(a/b) = g/b, -g*a/b^2
        ga = backward.op("Div", [g, b])
        gb = backward.op("Neg", [backward.op("Div", [backward.op("Mul", [g, a]), backward.op("Mul", [b, b])])])
    backward.add_grad(a, backward.unbroadcast(ga, a, y))
    backward.add_grad(b, backward.unbroadcast(gb, b, y))


def _unary(backward: _Backward, node: onnx.NodeProto, g: str) -> None:
    x, y = node.input[0], node.output[0]
    op = node.op_type
    if op == "Identity":
        gx = g
    elif op == "Neg":
        gx = backward.op("Neg", [g])
    elif op == "Exp":
        gx = backward.op("Mul", [g, y])
    elif op == "Log":
        gx = backward.op("Div", [g, x])
    elif op == "Tanh":
        one = backward.const(np.array(1, np.float32))
        gx = backward.op("Mul", [g, backward.op("Sub", [one, backward.op("Mul", [y, y])])])
    elif op == "Sigmoid":
        one = backward.const(np.array(1, np.float32))
        gx = backward.op("Mul", [g, backward.op("Mul", [y, backward.op("Sub", [one, y])])])
    else:  # Relu
        zero = backward.const(np.array(0, np.float32))
        mask = backward.op("Cast", [backward.op("Greater", [x, zero])], to=onnx.TensorProto.FLOAT)
        gx = backward.op("Mul", [g, mask])
    backward.add_grad(x, gx)


def _matmul(backward: _Backward, node: onnx.NodeProto, g: str) -> None:
    a, b = node.input[0], node.input[1]
    if len(backward.shapes.get(a) or ()) != 2 or len(backward.shapes.get(b) or ()) != 2:
        raise NotImplementedOp("Gradient through MatMul is supported for 2-D operands only")
    backward.add_grad(a, backward.op("MatMul", [g, backward.op("Transpose", [b])]))
    backward.add_grad(b, backward.op("MatMul", [backward.op("Transpose", [a]), g]))


_RULES: dict[str, Rule] = {
    **dict.fromkeys(("Add", "Sub", "Mul", "Div"), _binary),
    **dict.fromkeys(("Identity", "Neg", "Exp", "Log", "Tanh", "Sigmoid", "Relu"), _unary),
    "MatMul": _matmul,
}


def _shapes(model: onnx.ModelProto) -> dict[str, tuple[int, ...] | None]:
    inferred = infer_shapes(model)
    result: dict[str, tuple[int, ...] | None] = {}
    for vi in [*inferred.graph.input, *inferred.graph.output, *inferred.graph.value_info]:
        dims = vi.type.tensor_type.shape.dim
        if vi.type.tensor_type.HasField("shape") and all(d.HasField("dim_value") for d in dims):
            result[vi.name] = tuple(int(d.dim_value) for d in dims)
        else:
            result[vi.name] = None
    for t in inferred.graph.initializer:
        result[t.name] = tuple(t.dims)
    return result


def expand_gradients(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with every top-level Gradient node replaced by its backward graph."""
    if not any(n.op_type == "Gradient" and n.domain == TRAINING_DOMAIN for n in model.graph.node):
        return model
    shapes = _shapes(model)
    producers = {o: n for n in model.graph.node for o in n.output if o}
    result = onnx.ModelProto()
    result.CopyFrom(model)
    del result.graph.node[:]
    for index, node in enumerate(model.graph.node):
        if not (node.op_type == "Gradient" and node.domain == TRAINING_DOMAIN):
            result.graph.node.append(node)
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        xs = [x.decode() for x in attrs["xs"]]
        y = attrs["y"].decode()
        backward = _Backward(node.name or f"Gradient_{index}", shapes)
        # Forward nodes on paths from xs to y, in reverse topological (model) order.
        path, stack, seen = [], [y], set()
        while stack:
            value = stack.pop()
            producer = producers.get(value)
            if value in xs or producer is None or id(producer) in seen:
                continue
            seen.add(id(producer))
            path.append(producer)
            stack.extend(i for i in producer.input if i)
        order = {id(n): i for i, n in enumerate(model.graph.node)}
        path.sort(key=lambda n: order[id(n)], reverse=True)
        y_shape = shapes.get(y)
        ones = np.ones(y_shape if y_shape is not None else (), np.float32)
        backward.grads[y] = backward.const(ones)
        for forward in path:
            grad = backward.grads.get(forward.output[0])
            if grad is None:
                continue
            rule = _RULES.get(forward.op_type)
            if rule is None or forward.domain not in ("", "ai.onnx"):
                raise NotImplementedOp(
                    f"Gradient node {node.name or index!r}: no derivative rule for "
                    f"{forward.op_type} (node {forward.name or forward.op_type!r})"
                )
            rule(backward, forward, grad)
        result.graph.node.extend(backward.nodes)
        result.graph.initializer.extend(backward.initializers)
        for x, out in zip(xs, node.output):
            grad = backward.grads.get(x)
            if grad is None:  # y does not depend on x
                x_shape = shapes.get(x)
                grad = backward.const(np.zeros(x_shape if x_shape is not None else (), np.float32))
                result.graph.initializer.append(backward.initializers[-1])
            result.graph.node.append(helper.make_node("Identity", [grad], [out], name=f"{backward.prefix}/{out}"))
    return result
