"""Pad fusion (basic level): a zero ``Pad`` in front of a ``Conv`` or an ``AveragePool``
that counts padding becomes that node's own ``pads``, as onnxruntime's PadFusion does.

Exports of TF-style "same" padding (transformers' MobileNetV2 with ``tf_padding``) put an
explicit ``Pad`` before each convolution, with pads computed from shapes; once the free
dimensions are fixed and constant folding has made those pads constants, every such Pad
folds here. The result is standard ONNX: one node fewer per convolution, no padded copy of
the activations, and accelerators that have no Pad unit keep the whole chain.

Fused only when the result is the same: the Pad is mode ``constant`` with value 0 (absent
or a zero constant), its pads are constants, non-negative and zero on the batch and
channel axes, it has no ``axes`` input, and its output feeds the Conv/AveragePool alone;
the Conv/AveragePool has explicit pads (``auto_pad`` NOTSET or VALID) and, for an
AveragePool, ``count_include_pad=1`` (the padded zeros are averaged in either way).
MaxPool is left alone: its own padding is -inf, not the Pad's 0.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import helper

from ..kernels import parse_attribute
from .rewrite import DEFAULT_DOMAINS, Rewrite, has_op
from .support import PassContext

__all__ = ["fuse_pad"]

_TARGETS = ("Conv", "AveragePool")


def _attrs(node: onnx.NodeProto) -> dict[str, Any]:
    return {a.name: parse_attribute(a) for a in node.attribute}  # strings decoded


def _zero_pads(rw: Rewrite, pad: onnx.NodeProto) -> np.ndarray | None:
    """The Pad's pads as ``[begin..., end...]`` when it is a zero constant padding of the
    spatial axes only, else None."""
    attrs = _attrs(pad)
    if attrs.get("mode", "constant") != "constant":
        return None
    if rw.opset() < 11:
        pads = np.asarray(attrs.get("pads", []), np.int64)
        if float(attrs.get("value", 0.0)) != 0.0:
            return None
    else:
        if len(pad.input) < 2 or not pad.input[1] or (len(pad.input) > 3 and pad.input[3]):
            return None
        value = rw.array(pad.input[1])
        if value is None:
            return None
        pads = value.astype(np.int64).reshape(-1)
        if len(pad.input) > 2 and pad.input[2]:
            fill = rw.array(pad.input[2])
            if fill is None or fill.size != 1 or float(fill.reshape(())) != 0.0:
                return None
    rank = pads.size // 2
    if pads.size % 2 or rank < 3 or np.any(pads < 0) or np.any(pads[[0, 1, rank, rank + 1]] != 0):
        return None
    return pads


def fuse_pad(model: onnx.ModelProto, ctx: PassContext) -> onnx.ModelProto:
    """Fold zero Pads into the Conv/AveragePool they feed (see the module docstring)."""
    if not has_op(model.graph, "Pad"):
        return model
    rw = Rewrite(model, ctx.arrays)
    for pad in model.graph.node:
        if pad.op_type != "Pad" or pad.domain not in DEFAULT_DOMAINS or not rw.claimable([pad]):
            continue
        target = rw.sole_consumer(pad.output[0])
        if target is None or target.op_type not in _TARGETS or target.domain not in DEFAULT_DOMAINS \
                or target.input[0] != pad.output[0] or not rw.claimable([target]):
            continue
        pads = _zero_pads(rw, pad)
        attrs = _attrs(target)
        auto_pad = attrs.get("auto_pad", "NOTSET")
        if pads is None or auto_pad not in ("NOTSET", "VALID"):
            continue
        if target.op_type == "AveragePool" and attrs.get("count_include_pad", 0) != 1:
            continue
        rank = pads.size // 2
        spatial = rank - 2
        own = list(attrs.get("pads", [0] * (2 * spatial))) if auto_pad == "NOTSET" else [0] * (2 * spatial)
        if len(own) != 2 * spatial:
            continue
        merged = [int(own[i]) + int(pads[2 + i]) for i in range(spatial)]
        merged += [int(own[spatial + i]) + int(pads[rank + 2 + i]) for i in range(spatial)]
        fused = onnx.NodeProto()
        fused.CopyFrom(target)
        fused.input[0] = pad.input[0]
        kept = [a for a in fused.attribute if a.name not in ("pads", "auto_pad")]
        del fused.attribute[:]
        fused.attribute.extend(kept)
        fused.attribute.append(helper.make_attribute("pads", merged))
        rw.replace([pad, target], [fused])
    return rw.commit()
