"""Shape inference through the com.microsoft operators other people's tools write.

onnx's shape inference knows only the operators onnx defines: the output of a
``com.microsoft::MatMulNBits`` (what onnxruntime's 4-bit quantizer writes) gets no shape,
and neither does anything computed from it — so the shapes of every later value stay
unknown, the bias ``Add`` and the GELU spelled out after each product are not known to be
float32 of one shape, and the fusions leave them as they are (a 4-bit BERT ran its 12
GELUs as ``Div → Erf → Add → Mul → Mul``).

:func:`stand_in` rewrites such nodes, in the throw-away copy inference runs on, into the
standard operator whose inference gives the same output type and shape — MatMulNBits
into a MatMul with a placeholder (K, N) weight, a GELU into Relu, BiasGelu into Add — so
one run of onnx's inference types the whole graph (a per-operator pass between runs would
need a run per product in sequence: 48 for BERT-base).
"""

from __future__ import annotations

import onnx

__all__ = ["CONTRIB_DOMAIN", "stand_in"]

CONTRIB_DOMAIN = "com.microsoft"


def _attr_int(node: onnx.NodeProto, name: str) -> int | None:
    return next((a.i for a in node.attribute if a.name == name), None)


def stand_in(skeleton: onnx.ModelProto) -> int:
    """Replace ``skeleton``'s top-level com.microsoft nodes that have a standard stand-in
    (see the module docstring) by it, in place; the number replaced. Only for a copy that
    shape inference runs on: the stand-ins do not compute what the operators do."""
    graph = skeleton.graph
    replaced = 0
    for index, node in enumerate(graph.node):
        if node.domain != CONTRIB_DOMAIN or not node.input or not node.output:
            continue
        op, inputs = node.op_type, list(node.input)
        if op == "MatMulNBits":
            k, n = _attr_int(node, "K"), _attr_int(node, "N")
            if k is None or n is None:
                continue
            weight = f"{node.output[0]}::onyxrt_inference_weight"
            # no data: inference reads a large weight's type and dims only
            graph.initializer.add(name=weight, data_type=onnx.TensorProto.FLOAT, dims=[k, n])
            new = onnx.helper.make_node("MatMul", [inputs[0], weight], [node.output[0]])
        elif op in ("Gelu", "QuickGelu") or (op == "FastGelu" and len(inputs) == 1):
            new = onnx.helper.make_node("Relu", inputs[:1], [node.output[0]])
        elif op in ("BiasGelu", "FastGelu") and len(inputs) >= 2 and inputs[1]:
            new = onnx.helper.make_node("Add", inputs[:2], [node.output[0]])
        else:
            continue
        new.name = node.name
        graph.node[index].CopyFrom(new)
        replaced += 1
    return replaced
