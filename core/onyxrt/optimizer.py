"""Graph optimizations applied before partitioning, by ``graph_optimization_level``.

Each pass takes and returns an ``onnx.ModelProto`` and must keep outputs equal. The
basic level folds ``Constant`` nodes into initializers and removes ``Identity`` and
inference-mode ``Dropout`` nodes whose output is not a graph output. Further passes
(constant folding, fusions) belong to the extended and all levels.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
from onnx import numpy_helper

from .kernels import parse_attribute
from .session_options import GraphOptimizationLevel

__all__ = ["optimize", "PASSES"]

Pass = Callable[[onnx.ModelProto], onnx.ModelProto]


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
    if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
           for n in graph.node for a in n.attribute):
        return model  # subgraphs may read an Identity's output from the outer scope
    outputs = {o.name for o in graph.output}
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


PASSES: dict[GraphOptimizationLevel, list[Pass]] = {
    GraphOptimizationLevel.ORT_ENABLE_BASIC: [fold_constant_nodes, eliminate_identities],
}


def optimize(model: onnx.ModelProto, level: GraphOptimizationLevel) -> onnx.ModelProto:
    """Apply every pass enabled at ``level`` (in level order)."""
    for pass_level, passes in sorted(PASSES.items()):
        if level >= pass_level:
            for p in passes:
                model = p(model)
    return model
