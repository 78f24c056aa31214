"""Elementwise chains (extended level): runs of float32 elementwise operators, each the
only reader of the one before, become one ``ai.onyxrt::FusedElementwise`` node.

On small tensors every operator costs its dispatch (about a microsecond in the run loop
and the kernel) for a few nanoseconds of arithmetic: a 16-node chain on [1, 64] took
38 µs a run against onnxruntime's 17 µs; on large ones every step is a pass over memory.
The fused node runs the whole chain over each block of the tensor while it is in cache.

A chain step is a unary operator (:data:`UNARY`) or a binary one (:data:`BINARY`) whose
other operand is a float32 constant that does not change the value's shape: one value, or
one per position of the last axis (shape ``(N,)`` or ``(1, ..., 1, N)``, no higher rank
than the value's). The node's inputs are the chain's input and those constants; its
attributes list the steps: ``ops`` (operator names), ``operands`` (the input index of each
step's constant, -1 for none) and ``swapped`` (1 where the constant is the left operand).
Chains of at least :data:`MIN_CHAIN` steps are fused, where every provider of the session
runs ``FusedElementwise`` (:class:`~.support.PassContext`).
"""

from __future__ import annotations

import onnx
from onnx import helper

from .rewrite import DEFAULT_DOMAINS, Rewrite, has_op
from .support import FUSED_DOMAIN, FUSED_DOMAIN_VERSION, PassContext

__all__ = ["fuse_elementwise", "UNARY", "BINARY", "MIN_CHAIN"]

#: Unary operators a chain may hold (float32 in, float32 out, no attributes).
UNARY = ("Relu", "Sigmoid", "Tanh", "Abs", "Neg", "Exp", "Log", "Sqrt")
#: Binary operators a chain may hold, with a constant as the other operand.
BINARY = ("Add", "Sub", "Mul", "Div", "Max", "Min")
#: Fewer steps gain nothing worth a fused node.
MIN_CHAIN = 2


def _step(rw: Rewrite, node: onnx.NodeProto, value: str | None) -> tuple[str, str, int] | None:
    """(data input, constant operand or "", swapped) when ``node`` can be a chain step
    reading ``value`` (any data input when None), else None."""
    if node.domain not in DEFAULT_DOMAINS or rw.is_removed(node) or node.attribute:
        return None
    if node.op_type in UNARY and len(node.input) == 1:
        data, const, swapped = node.input[0], "", 0
    elif node.op_type in BINARY and len(node.input) == 2:
        a, b = node.input
        if rw.is_constant(b) and not rw.is_constant(a) and (value is None or a == value):
            data, const, swapped = a, b, 0
        elif rw.is_constant(a) and not rw.is_constant(b) and (value is None or b == value):
            data, const, swapped = b, a, 1
        else:
            return None
    else:
        return None
    if value is not None and data != value:
        return None
    if str(rw.dtype(data)) != "float32" or str(rw.dtype(node.output[0])) != "float32":
        return None
    if const and not _keeps_shape(rw, const, data):
        return None
    return data, const, swapped


def _keeps_shape(rw: Rewrite, const: str, data: str) -> bool:
    """A float32 constant of one value, or one per position of ``data``'s last axis, no
    higher in rank than ``data``: broadcasting it leaves ``data``'s shape."""
    shape, data_shape = rw.shape(const), rw.shape(data)
    if shape is None or data_shape is None or len(shape) > len(data_shape) or str(rw.dtype(const)) != "float32":
        return False
    if all(d == 1 for d in shape):
        return True
    last = data_shape[-1] if data_shape else None
    return all(d == 1 for d in shape[:-1]) and isinstance(last, int) and shape[-1] == last


def fuse_elementwise(model: onnx.ModelProto, ctx: PassContext) -> onnx.ModelProto:
    """Replace every chain of :data:`MIN_CHAIN` or more elementwise steps (see the module
    docstring) by one FusedElementwise node."""
    if not has_op(model.graph, *UNARY, *BINARY) or not ctx.can_run(FUSED_DOMAIN, "FusedElementwise"):
        return model
    rw = Rewrite(model, ctx.arrays)
    fused = False
    claimed: set[int] = set()
    for head in model.graph.node:
        if id(head) in claimed:
            continue
        first = _step(rw, head, None)
        if first is None:
            continue
        chain, steps = [head], [first]
        node = head
        while True:
            nxt = rw.sole_consumer(node.output[0])
            step = None if nxt is None or id(nxt) in claimed else _step(rw, nxt, node.output[0])
            if step is None:
                break
            chain.append(nxt)
            steps.append(step)
            node = nxt
        if len(chain) < MIN_CHAIN or not rw.claimable(chain):
            continue
        inputs = [first[0]]
        operands, swapped = [], []
        for _, const, swap in steps:
            if const:
                if const not in inputs[1:]:
                    inputs.append(const)
                operands.append(inputs.index(const, 1))
            else:
                operands.append(-1)
            swapped.append(swap)
        fused_node = helper.make_node(
            "FusedElementwise", inputs, [chain[-1].output[0]], name=head.name or chain[-1].name,
            domain=FUSED_DOMAIN, ops=[n.op_type for n in chain], operands=operands, swapped=swapped,
        )
        rw.replace(chain, [fused_node])
        claimed.update(id(n) for n in chain)
        fused = True
    if fused:
        rw.require_domain(FUSED_DOMAIN, FUSED_DOMAIN_VERSION)
    return rw.commit()
