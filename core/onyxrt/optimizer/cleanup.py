"""Clean-up passes: Constant nodes to initializers, Identity/Dropout removal, Cast folding,
dead-node elimination. They only remove or simplify nodes, never add operators.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from ..kernels import parse_attribute
from .rewrite import DEFAULT_DOMAINS, Rewrite, has_op, remove_initializers, subgraph_reads

__all__ = ["fold_constant_nodes", "eliminate_identities", "fold_casts", "eliminate_dead_nodes"]


def fold_constant_nodes(model: onnx.ModelProto) -> onnx.ModelProto:
    """Turn top-level ``Constant`` nodes with a tensor value into initializers."""
    graph = model.graph
    keep = []
    outputs = {o.name for o in graph.output}
    for node in graph.node:
        if (
            node.op_type == "Constant"
            and node.domain in ("", "ai.onnx")
            and len(node.attribute) == 1
            and node.output[0] not in outputs
            and node.attribute[0].name != "sparse_value"
        ):
            attr = node.attribute[0]
            value = parse_attribute(attr)

            if attr.name == "value":
                arr = value
            elif attr.name in ("value_float", "value_floats"):
                arr = np.asarray(value, dtype=np.float32)
            elif attr.name in ("value_int", "value_ints"):
                arr = np.asarray(value, dtype=np.int64)
            else:  # value_string(s)
                arr = np.asarray(value, dtype=object)
            tensor = numpy_helper.from_array(np.asarray(arr), name=node.output[0])
            graph.initializer.append(tensor)
        else:
            keep.append(node)
    if len(keep) != len(graph.node):
        del graph.node[:]
        graph.node.extend(keep)
    return model


def eliminate_identities(model: onnx.ModelProto) -> onnx.ModelProto:
    """Remove Identity and inference Dropout nodes, rewiring their readers.

    A node whose output is a graph output is kept (the output name must survive), as is
    a Dropout whose mask output is read or whose ``training_mode`` input is given.
    """
    graph = model.graph
    # Outputs read inside subgraphs (from the outer scope) keep their names.
    outputs = {o.name for o in graph.output} | subgraph_reads(graph.node)
    rename: dict[str, str] = {}
    keep = []
    for node in graph.node:
        removable = node.domain in ("", "ai.onnx") and node.output[0] not in outputs and (
            node.op_type == "Identity"
            or (
                node.op_type == "Dropout"
                and (len(node.output) < 2 or not node.output[1])
                and len(node.input) < 3
            )
        )
        if removable and node.input and node.input[0]:
            src = node.input[0]
            rename[node.output[0]] = rename.get(src, src)
        else:
            keep.append(node)
    if not rename:
        return model
    for node in keep:
        for i, name in enumerate(node.input):
            if name in rename:
                node.input[i] = rename[name]
    del graph.node[:]
    graph.node.extend(keep)
    return model


# Casts A -> B -> A that give back every value of A exactly (B holds all of A's values).
_LOSSLESS_WIDENING: dict[int, set[int]] = {
    onnx.TensorProto.FLOAT16: {onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE},
    onnx.TensorProto.BFLOAT16: {onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE},
    onnx.TensorProto.FLOAT: {onnx.TensorProto.DOUBLE},
    onnx.TensorProto.INT8: {onnx.TensorProto.INT16, onnx.TensorProto.INT32, onnx.TensorProto.INT64},
    onnx.TensorProto.INT16: {onnx.TensorProto.INT32, onnx.TensorProto.INT64},
    onnx.TensorProto.INT32: {onnx.TensorProto.INT64, onnx.TensorProto.DOUBLE},
    onnx.TensorProto.UINT8: {
        onnx.TensorProto.INT16, onnx.TensorProto.INT32, onnx.TensorProto.INT64,
        onnx.TensorProto.UINT16, onnx.TensorProto.UINT32, onnx.TensorProto.UINT64,
    },
}


def fold_casts(model: onnx.ModelProto) -> onnx.ModelProto:
    """Remove Casts that change nothing: to the type the value already has, and
    round trips through a wider type (``Cast(Cast(x, to=wider), to=type(x))``).

    Needs the inferred element types; a Cast whose input type is unknown is kept.
    """
    if not has_op(model.graph, "Cast"):
        return model
    rw = Rewrite(model)
    for node in model.graph.node:
        if node.op_type != "Cast" or node.domain not in DEFAULT_DOMAINS or rw.is_removed(node):
            continue
        to = next((int(a.i) for a in node.attribute if a.name == "to"), None)
        src = node.input[0]
        out = node.output[0]
        if to is None or out in rw.pinned:
            continue
        inner = rw.produced_by(src, "Cast")
        if rw.elem_type(src) == to:
            rw.rename_input(out, src)
            rw.remove(node)
        elif (
            inner is not None
            and rw.elem_type(inner.input[0]) == to
            and rw.elem_type(src) in _LOSSLESS_WIDENING.get(to, set())
        ):
            rw.rename_input(out, inner.input[0])
            rw.remove(node)
    return eliminate_dead_nodes(rw.commit())


def eliminate_dead_nodes(model: onnx.ModelProto) -> onnx.ModelProto:
    """Remove nodes none of whose outputs reaches a graph output (ONNX operators have no
    side effects), and initializers nothing reads any more."""
    graph = model.graph
    producer = {o: node for node in graph.node for o in node.output if o}
    live: set[str] = set()
    live_nodes: set[int] = set()
    # A worklist over producers, not a reverse scan: an unsorted (even cyclic) graph must
    # keep its nodes so that the structural check can name the real problem.
    work = [o.name for o in graph.output] + sorted(subgraph_reads(graph.node))
    while work:
        name = work.pop()
        if name in live:
            continue
        live.add(name)
        node = producer.get(name)
        if node is not None and id(node) not in live_nodes:
            live_nodes.add(id(node))
            work.extend(i for i in node.input if i)
    keep = [node for node in graph.node if id(node) in live_nodes]
    if len(keep) == len(graph.node):
        return model
    del graph.node[:]
    graph.node.extend(keep)
    inputs = {i.name for i in graph.input}
    remove_initializers(graph, {t.name for t in graph.initializer} - live - inputs)
    return model
