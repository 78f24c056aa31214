"""onnx's shape inference, kept from taking the process down.

onnx's C++ shape inference is built with assertions: a few malformed models make it abort
the whole process instead of raising. The known one (found by fuzzing, onnx 1.23): a
``Pad`` whose negative pads crop more than a dimension infers a negative size, and a
``Slice`` on that axis then fails ``std::clamp``'s assertion. Such a model must fail with a
clear error or run without the inference, never kill the caller.

:func:`infer_shapes` therefore runs the inference in a child process when the model has
the shape that can trigger it — a ``Pad`` with a negative constant pad (cropping) — and
in-process otherwise (every ordinary model: no cost). A child that dies is reported as
:class:`InferenceAborted`, a ``RuntimeError`` the callers already treat as "inference
failed": the session carries on without inferred shapes, and the ``Pad`` kernel rejects
the impossible crop with a typed error when the model runs.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import numpy as np
import onnx
import onnx.shape_inference
from onnx import numpy_helper

__all__ = ["InferenceAborted", "infer_shapes", "may_abort"]

# The child reads a serialized model and its options on stdin and writes the inferred
# model on stdout.
_CHILD = """
import json, sys, onnx, onnx.shape_inference
options = json.loads(sys.stdin.buffer.readline())
model = onnx.ModelProto.FromString(sys.stdin.buffer.read())
sys.stdout.buffer.write(onnx.shape_inference.infer_shapes(model, **options).SerializeToString())
"""

#: Seconds the child may take (the inference of a large skeleton takes well under one).
CHILD_TIMEOUT_S = 120.0


class InferenceAborted(RuntimeError):
    """onnx's shape inference died (a C++ assertion) on this model, in a child process."""


def may_abort(model: onnx.ModelProto) -> bool:
    """Whether ``model`` holds the pattern that can abort onnx's shape inference: a ``Pad``
    (in any graph, subgraphs included) with a negative constant pad."""
    constants = {t.name: t for t in model.graph.initializer}
    nodes = list(_nodes(model.graph))
    for node in nodes:  # Constant nodes' values count as constants too
        if node.op_type == "Constant" and node.output:
            for attr in node.attribute:
                if attr.name == "value" and attr.type == onnx.AttributeProto.TENSOR:
                    constants[node.output[0]] = attr.t
    return any(_crops(node, constants) for node in nodes)


def infer_shapes(model: onnx.ModelProto, **options: bool) -> onnx.ModelProto:
    """``onnx.shape_inference.infer_shapes(model, **options)`` (keyword flags such as
    ``strict_mode``), in a child process when :func:`may_abort` says it could kill this
    one. Raises what onnx raises, or :class:`InferenceAborted`."""
    if not may_abort(model):
        return onnx.shape_inference.infer_shapes(model, **options)
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _CHILD],
            input=json.dumps(options).encode() + b"\n" + model.SerializeToString(),
            capture_output=True,
            timeout=CHILD_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise InferenceAborted(f"shape inference did not finish in {CHILD_TIMEOUT_S:.0f} s") from None
    if proc.returncode != 0:
        last = proc.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["(no message)"]
        raise InferenceAborted(
            f"onnx's shape inference failed in a child process (exit code {proc.returncode}): "
            f"{last[0][:300]}"
        )
    return onnx.ModelProto.FromString(proc.stdout)


def _nodes(graph: onnx.GraphProto) -> Any:
    for node in graph.node:
        yield node
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from _nodes(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for g in attr.graphs:
                    yield from _nodes(g)


def _crops(node: onnx.NodeProto, constants: dict[str, onnx.TensorProto]) -> bool:
    """Whether a Pad node has a negative pad in its constant ``pads`` (input or, before
    opset 11, attribute). Pads that are not constants cannot be inferred anyway."""
    if node.op_type != "Pad" or node.domain not in ("", "ai.onnx"):
        return False
    for attr in node.attribute:
        if attr.name == "pads" and any(p < 0 for p in attr.ints):
            return True
    if len(node.input) > 1 and node.input[1] in constants:
        try:
            pads = numpy_helper.to_array(constants[node.input[1]])
        except Exception:  # unreadable: the loader reports it
            return False
        return bool(np.any(pads < 0))
    return False
