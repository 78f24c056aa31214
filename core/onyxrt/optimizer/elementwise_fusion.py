"""Elementwise groups (extended level): connected float32 elementwise operators whose
intermediate values nothing else reads become one ``ai.onyxrt::FusedElementwise`` node.

On small tensors every operator costs its dispatch (about a microsecond in the run loop
and the kernel) for a few nanoseconds of arithmetic: a 16-node graph on [1, 64] took
38 µs a run against onnxruntime's 17 µs; on large ones every operator is a pass over
memory (SiLU, ``x * Sigmoid(x)``, reads and writes its tensor three times). The fused node
runs the whole group over each block of the tensor while it is in cache.

A member is a unary operator (:data:`UNARY`) or a binary one (:data:`BINARY`) whose
operands are values of the member's own shape, or float32 constants that do not change
it: one value, or one per position of the last axis (shape ``(N,)`` or ``(1, ..., 1, N)``,
no higher rank than the value's). A dimension may be unknown (a free batch size): the
kernel checks the shapes on every call and, where they are not what the group assumed,
runs the steps one by one with numpy's broadcasting, as the unfused operators would.
Groups grow from their output backwards: a producer joins when every reader of its value
is in the group already and the value is no graph output, so a group is convex and has
one output. Groups of at least :data:`MIN_GROUP` members are fused, where every provider
of the session runs ``FusedElementwise`` (:class:`~.support.PassContext`).

The node's inputs are the group's external values, dynamic and constant, in order of
first use. Its attributes hold the program, one step per member in graph order: ``ops``
(the operator names) and ``args`` (two per step: the operands, -1 for a unary step's
second; an operand ``i`` below the node's input count is input ``i``, else the result of
step ``i - inputs``). The last step's result is the output.
"""

from __future__ import annotations

import onnx
from onnx import helper

from .rewrite import DEFAULT_DOMAINS, Rewrite, has_op
from .support import FUSED_DOMAIN, FUSED_DOMAIN_VERSION, PassContext

__all__ = ["fuse_elementwise", "UNARY", "BINARY", "MIN_GROUP"]

#: Unary operators a group may hold (float32 in, float32 out, no attributes).
UNARY = ("Relu", "Sigmoid", "Tanh", "Abs", "Neg", "Exp", "Log", "Sqrt")
#: Binary operators a group may hold.
BINARY = ("Add", "Sub", "Mul", "Div", "Max", "Min")
#: Fewer members gain nothing worth a fused node.
MIN_GROUP = 2
#: At most this many members and external inputs (csrc/elementwise_group.c's limits); a
#: longer run is cut into several groups.
MAX_GROUP = 256
MAX_INPUTS = 64


def _member_shape(rw: Rewrite, node: onnx.NodeProto) -> tuple[int | str | None, ...] | None:
    """The shape of ``node``'s value when it can be a group member (see the module
    docstring), else None."""
    if node.domain not in DEFAULT_DOMAINS or rw.is_removed(node) or node.attribute:
        return None
    if not ((node.op_type in UNARY and len(node.input) == 1) or (node.op_type in BINARY and len(node.input) == 2)):
        return None
    shape = rw.shape(node.output[0])
    if shape is None or str(rw.dtype(node.output[0])) != "float32":
        return None
    dynamic = 0
    for name in node.input:
        if rw.is_constant(name):
            if not _keeps_shape(rw, name, shape):
                return None
        elif _same_shape(rw.shape(name), shape) and str(rw.dtype(name)) == "float32":
            dynamic += 1
        else:
            return None
    return shape if dynamic else None


def _same_shape(a: tuple[int | str | None, ...] | None, b: tuple[int | str | None, ...] | None) -> bool:
    """Whether two values may have one shape: the same rank, and the same size wherever
    both sizes are known. Symbols count as unknown (shape inference gives each Reshape of
    a free dimension a fresh one); the kernel checks the actual shapes on every call."""
    if a is None or b is None or len(a) != len(b):
        return False
    return all(x == y or not isinstance(x, int) or not isinstance(y, int) for x, y in zip(a, b))


def _keeps_shape(rw: Rewrite, const: str, shape: tuple[int | str | None, ...]) -> bool:
    """A float32 constant of one value, or one per position of the last axis of
    ``shape``, no higher in rank: broadcasting it leaves ``shape`` as it is."""
    cshape = rw.shape(const)
    if cshape is None or len(cshape) > len(shape) or str(rw.dtype(const)) != "float32":
        return False
    if all(d == 1 for d in cshape):
        return True
    last = shape[-1] if shape else None
    return all(d == 1 for d in cshape[:-1]) and isinstance(last, int) and cshape[-1] == last


def fuse_elementwise(model: onnx.ModelProto, ctx: PassContext) -> onnx.ModelProto:
    """Replace every group of :data:`MIN_GROUP` or more elementwise members (see the
    module docstring) by one FusedElementwise node."""
    if not has_op(model.graph, *UNARY, *BINARY) or not ctx.can_run(FUSED_DOMAIN, "FusedElementwise"):
        return model
    if not _sorted(model.graph):
        return model  # groups are placed where their last member is: only in sorted graphs
    rw = Rewrite(model, ctx.arrays)
    order = {id(n): i for i, n in enumerate(model.graph.node)}
    shapes = {id(n): s for n in model.graph.node if (s := _member_shape(rw, n)) is not None}
    assigned: set[int] = set()
    fused = False
    for sink in reversed(model.graph.node):
        if id(sink) not in shapes or id(sink) in assigned:
            continue
        group = _grow(rw, sink, shapes, assigned)
        if len(group) < MIN_GROUP or not rw.claimable(group):
            continue
        group.sort(key=lambda n: order[id(n)])
        node = _fused_node(group)
        if len(node.input) > MAX_INPUTS:
            continue
        rw.replace(group, [node])
        assigned.update(id(n) for n in group)
        fused = True
    if fused:
        rw.require_domain(FUSED_DOMAIN, FUSED_DOMAIN_VERSION)
    return rw.commit()


def _grow(
    rw: Rewrite, sink: onnx.NodeProto, shapes: dict[int, tuple[int | str | None, ...]], assigned: set[int]
) -> list[onnx.NodeProto]:
    """The group ending at ``sink``: producers of its members' values join while every
    reader of the value is a member (and the value no graph output)."""
    group = [sink]
    members = {id(sink)}
    frontier = [sink]
    while frontier and len(group) < MAX_GROUP:
        node = frontier.pop()
        for name in node.input:
            producer = rw.producer.get(name)
            if (producer is None or id(producer) in members or id(producer) in assigned
                    or not _same_shape(shapes.get(id(producer)), shapes[id(sink)]) or name in rw.pinned):
                continue
            readers = rw.consumers.get(name, [])
            if all(id(r) in members for r in readers) and len(group) < MAX_GROUP:
                group.append(producer)
                members.add(id(producer))
                frontier.append(producer)
    return group


def _sorted(graph: onnx.GraphProto) -> bool:
    """Whether every node reads only values produced before it (or graph inputs,
    initializers and outer-scope names: anything no node of this graph produces)."""
    produced = {o for n in graph.node for o in n.output if o}
    seen: set[str] = set()
    for node in graph.node:
        if any(i in produced and i not in seen for i in node.input if i):
            return False
        seen.update(o for o in node.output if o)
    return True


def _fused_node(group: list[onnx.NodeProto]) -> onnx.NodeProto:
    """The FusedElementwise node computing ``group`` (in graph order, the last its output)."""
    produced = {n.output[0]: i for i, n in enumerate(group)}
    inputs: list[str] = []
    for node in group:
        for name in node.input:
            if name not in produced and name not in inputs:
                inputs.append(name)
    args: list[int] = []
    for node in group:
        refs = [len(inputs) + produced[n] if n in produced else inputs.index(n) for n in node.input]
        args.extend(refs + [-1] * (2 - len(refs)))
    last = group[-1]
    return helper.make_node("FusedElementwise", inputs, [last.output[0]], name=last.name or group[0].name,
                            domain=FUSED_DOMAIN, ops=[n.op_type for n in group], args=args)
