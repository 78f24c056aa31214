"""Constant folding: nodes whose inputs are all constants are computed once, at session
creation, and replaced by initializers holding their outputs.

``Shape`` and ``Size`` of a value whose shape inference found fully static also fold,
which lets the shape arithmetic exported models carry (Shape → Gather → Concat → Reshape)
fold away. The folded nodes run through onyxrt itself — one CPU-only session over all of
them, with the optimizer off, which the session hands the pass as
:attr:`~.support.PassContext.evaluate` — so folding computes exactly what running would.

Outputs larger than :data:`MAX_FOLDED_BYTES` (by inferred shape; unknown shapes do not
fold) stay as nodes: folding must not turn a small model into a huge one, nor let a
crafted ``ConstantOfShape`` allocate gigabytes before the first run.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import helper

from ..errors import OnyxError
from ..graph import node_subgraphs
from .rewrite import DEFAULT_DOMAINS, Rewrite, dataless_tensor
from .support import Evaluate, PassContext

__all__ = ["fold_constants", "MAX_FOLDED_BYTES", "MAX_ROUNDS"]

MAX_FOLDED_BYTES = 16 << 20

#: Folded values larger than this stay numpy arrays (:attr:`PassContext.arrays`); smaller
#: ones (the shape computations' constants, which shape inference reads) become tensors.
KEPT_AS_ARRAY_BYTES = 4096

# Operators never folded: those whose outputs are not a function of their inputs, and
# the quantization pair, whose QDQ groups around an operator tell providers that run
# quantized arithmetic (the NPU's int8 mode) what to quantize — onnxruntime keeps them too.
# The exception: DequantizeLinear of constants (a QDQ model's weights) folds when no
# provider of the session reads QDQ groups (``PassContext.fold_dequantized_weights``), so
# that the float kernels which run the model see constant weights. Measured on onnxruntime's
# static QDQ quantization of a MobileNetV2 export (per profiled run): the convolutions took
# 107 ms with their weights dequantized and repacked every run, 11.5 ms once folded (the
# NCHWc kernels then take them).
_NEVER_FOLDED = frozenset(
    {
        "RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike",
        "Multinomial", "Bernoulli", "Dropout", "QuantizeLinear", "DequantizeLinear",
    }
)


def _never_folded(node: onnx.NodeProto, ctx: PassContext | None) -> bool:
    if node.op_type == "DequantizeLinear" and ctx is not None and ctx.fold_dequantized_weights:
        return False
    return node.op_type in _NEVER_FOLDED


def _static_shape(rw: Rewrite, name: str) -> tuple[int, ...] | None:
    shape = rw.shape(name)
    if shape is None or not all(isinstance(d, int) for d in shape):
        return None
    return tuple(int(d) for d in shape)  # type: ignore[arg-type]


def _fits(rw: Rewrite, name: str) -> bool:
    """Whether output ``name`` has a known shape and type within the size cap."""
    shape = _static_shape(rw, name)
    dtype = rw.dtype(name)
    if shape is None or dtype is None or dtype.kind == "O":
        return False
    return math.prod(shape) * dtype.itemsize <= MAX_FOLDED_BYTES


#: Rounds of folding and re-inference at most (real exports settle in two or three).
MAX_ROUNDS = 8


def fold_constants(model: onnx.ModelProto, ctx: PassContext | None = None) -> onnx.ModelProto:
    """Replace constant-input nodes (and Shape/Size of static shapes) by initializers;
    the nodes are computed by ``ctx.evaluate`` (without one, only Shape/Size fold).

    With ``ctx.infer_shapes``, folding and shape inference alternate to a fixpoint: a
    folded shape computation makes a Reshape's shape a constant, inference then knows the
    Reshape's output shape, and the Shape nodes reading that output fold in the next round."""
    for _ in range(MAX_ROUNDS):
        before = len(model.graph.node)
        model = _fold_round(model, ctx)
        if len(model.graph.node) == before or ctx is None or ctx.infer_shapes is None:
            break
        model = ctx.infer_shapes(model)
    return model


def _fold_round(model: onnx.ModelProto, ctx: PassContext | None) -> onnx.ModelProto:
    """One round of :func:`fold_constants`."""
    evaluate = ctx.evaluate if ctx is not None else None
    rw = Rewrite(model, ctx.arrays if ctx is not None else None)
    known: set[str] = set(rw.constants)
    folded: list[onnx.NodeProto] = []
    static: dict[str, np.ndarray] = {}  # Shape/Size outputs computed right here
    for node in model.graph.node:
        if node.domain not in DEFAULT_DOMAINS or _never_folded(node, ctx):
            continue
        if node_subgraphs(node):
            continue
        outputs = [o for o in node.output if o]
        if not outputs or any(o in rw.graph_outputs for o in outputs):
            continue  # a graph output keeps its producer (its name must come from a node)
        if node.op_type in ("Shape", "Size") and node.input[0] not in known:
            value = _shape_value(rw, node)
            if value is not None:
                static[outputs[0]] = value
                known.add(outputs[0])
                folded.append(node)
            continue
        if (evaluate is not None and all(not i or i in known for i in node.input)
                and all(_fits(rw, o) for o in outputs)):
            folded.append(node)
            known.update(outputs)
    if not folded:
        return model
    try:
        values = _evaluate(rw, folded, static, evaluate)
    except OnyxError:
        # A node that cannot run now will fail the same way at run time, where the error
        # names it in the user's graph; folding is only an optimization.
        return model
    # Only values something outside the folded set reads become initializers.
    folded_ids = {id(n) for n in folded}
    for node in folded:
        rw.remove(node)
        for out in node.output:
            if not out:
                continue
            readers = [c for c in rw.consumers.get(out, []) if id(c) not in folded_ids]
            if readers or out in rw.pinned:
                value = values[out]
                if ctx is not None and value.nbytes > KEPT_AS_ARRAY_BYTES and value.dtype.kind in "fiub":
                    # A weight (a QDQ model's dequantized filters): the model gets its
                    # name, type and dims; the bytes stay in ctx.arrays, not copied into
                    # the protobuf and read back out (~60 ms for a QDQ ResNet-50).
                    rw.graph.initializer.append(dataless_tensor(out, value))
                    ctx.arrays[out] = value
                else:
                    rw.graph.initializer.append(onnx.numpy_helper.from_array(value, name=out))
    return rw.commit()


def _shape_value(rw: Rewrite, node: onnx.NodeProto) -> np.ndarray | None:
    shape = _static_shape(rw, node.input[0])
    if shape is None:
        return None
    if node.op_type == "Size":
        return np.array(math.prod(shape), dtype=np.int64)
    start, end = 0, len(shape)
    for attr in node.attribute:
        if attr.name == "start":
            start = int(attr.i)
        elif attr.name == "end":
            end = int(attr.i)
    return np.array(shape[slice(start, end)], dtype=np.int64)


def _evaluate(
    rw: Rewrite, folded: list[onnx.NodeProto], static: dict[str, np.ndarray], evaluate: Evaluate | None
) -> dict[str, np.ndarray]:
    """Run the folded nodes (except those computed statically) as one model."""
    values = dict(static)
    nodes = [n for n in folded if not all(o in static for o in n.output if o)]
    if not nodes:
        return values
    assert evaluate is not None  # without it only Shape/Size, computed here, are folded
    produced = {o for n in nodes for o in n.output if o}
    needed = {i for n in nodes for i in n.input if i and i not in produced}
    # Values held as arrays (weights read apart from the model, values earlier passes
    # computed) go to the evaluation as arrays beside data-less tensors: serializing them
    # into its model and parsing them back cost a QDQ ResNet-50 ~0.15 s.
    arrays = {n: rw.created[n] for n in needed
              if n in rw.initializers and n in rw.created and rw.created[n].dtype.kind in "fiub"}
    initializers = [
        dataless_tensor(n, arrays[n]) if n in arrays else onnx.numpy_helper.from_array(rw.created[n], name=n) if n in rw.created
        else rw.initializers[n]
        for n in needed if n in rw.initializers
    ]
    initializers += [onnx.numpy_helper.from_array(static[n], name=n) for n in needed if n in static]
    outputs = [helper.make_empty_tensor_value_info(o) for o in sorted(produced)]
    graph = helper.make_graph(nodes, "constant_folding", [], outputs, initializers)
    sub = helper.make_model(graph, opset_imports=list(rw.model.opset_import))
    sub.ir_version = rw.model.ir_version
    names = [o.name for o in outputs]
    values.update(zip(names, evaluate(sub, arrays), strict=True))
    return values
