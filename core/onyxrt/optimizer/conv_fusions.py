"""Convolution fusions.

* :func:`fold_batch_norm_into_conv` (basic level): ``Conv → BatchNormalization`` in
  inference mode becomes one ``Conv`` with rescaled weights and a new bias — standard ONNX,
  so every provider can take it.
* :func:`fuse_conv_activation` (extended level): ``Conv [→ Add(residual)] → activation``
  becomes ``ai.onyxrt::FusedConv``, whose kernel adds the residual and applies the
  activation in place on the convolution's output buffer: two full passes over the
  activations and two buffers fewer per block.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from .rewrite import Rewrite
from .support import FUSED_DOMAIN, FUSED_DOMAIN_VERSION, PassContext

__all__ = ["fold_batch_norm_into_conv", "fuse_conv_activation", "ACTIVATIONS"]


def _attr(node: onnx.NodeProto, name: str, default: float) -> float:
    for a in node.attribute:
        if a.name == name:
            return float(helper.get_attribute_value(a))
    return default


def fold_batch_norm_into_conv(model: onnx.ModelProto, ctx: PassContext) -> onnx.ModelProto:
    """``Conv(X, W, B) → BatchNormalization(scale, bias, mean, var)`` with constant
    parameters → ``Conv(X, W * s, (B - mean) * s + bias)``, ``s = scale / sqrt(var + eps)``.

    The per-channel factors are computed in float64; the weights are scaled in their type.
    The new weights go to ``ctx.arrays`` (see :mod:`.support`).
    """
    rw = Rewrite(model, ctx.arrays)
    for bn in model.graph.node:
        if bn.op_type != "BatchNormalization" or bn.domain not in ("", "ai.onnx"):
            continue
        if len([o for o in bn.output if o]) != 1 or _attr(bn, "training_mode", 0) != 0:
            continue
        if rw.opset() < 7 and _attr(bn, "is_test", 0) == 0 and rw.opset() > 0:
            continue  # old versions: is_test=0 means training statistics
        conv = rw.produced_by(bn.input[0], "Conv")
        if conv is None:
            continue
        if not rw.feeds_only(conv.output[0], bn):
            continue
        params = [rw.array(n) for n in bn.input[1:5]]
        w = rw.array(conv.input[1])
        b = rw.array(conv.input[2]) if len(conv.input) > 2 and conv.input[2] else None
        if w is None or any(p is None for p in params) or (len(conv.input) > 2 and conv.input[2] and b is None):
            continue
        if w.dtype.kind != "f" or any(p.dtype.kind != "f" or p.ndim != 1 for p in params):  # type: ignore[union-attr]
            continue
        scale, bias, mean, var = (p.astype(np.float64) for p in params)  # type: ignore[union-attr]
        if not scale.shape == bias.shape == mean.shape == var.shape == (w.shape[0],):
            continue
        if b is not None and b.shape != (w.shape[0],):
            continue  # a Conv bias must be 1-D [M]: leave a malformed one to the kernel to refuse
        s = scale / np.sqrt(var + _attr(bn, "epsilon", 1e-5))
        # The per-channel factor in float64, the big product in the weights' own type
        # (float32 products are correctly rounded too; float16 goes through float32).
        wdt = np.float32 if w.dtype.itemsize < 4 else w.dtype
        new_w = (w.astype(wdt, copy=False) * s.astype(wdt).reshape((-1,) + (1,) * (w.ndim - 1))).astype(w.dtype, copy=False)
        old_b = b.astype(np.float64) if b is not None else np.zeros_like(mean)
        new_b = ((old_b - mean) * s + bias).astype(w.dtype)
        fused = helper.make_node(
            "Conv",
            [conv.input[0], rw.add_initializer(f"{conv.name or 'conv'}.W", new_w),
             rw.add_initializer(f"{conv.name or 'conv'}.B", new_b)],
            [bn.output[0]],
            name=conv.name,
        )
        fused.attribute.extend(conv.attribute)
        rw.replace([conv, bn], [fused])
    return rw.commit()


# Activations FusedConv applies in place, and their parameters (attribute, default) in the
# order the kernel reads ``activation_params``.
ACTIVATIONS: dict[str, tuple[tuple[str, float], ...]] = {
    "Relu": (),
    "Sigmoid": (),
    "Tanh": (),
    "LeakyRelu": (("alpha", 0.01),),
    "HardSigmoid": (("alpha", 0.2), ("beta", 0.5)),
    "Clip": (),  # min/max come from inputs (or attributes before opset 11)
}


def _activation_params(rw: Rewrite, act: onnx.NodeProto) -> list[float] | None:
    """The activation's parameters as floats, or ``None`` when they are not constants."""
    if act.op_type != "Clip":
        return [_attr(act, name, default) for name, default in ACTIVATIONS[act.op_type]]
    if rw.opset() < 11:
        return [_attr(act, "min", -np.inf), _attr(act, "max", np.inf)]
    bounds = []
    for i, default in ((1, -np.inf), (2, np.inf)):
        if len(act.input) > i and act.input[i]:
            value = rw.scalar(act.input[i])
            if value is None:
                return None
            bounds.append(value)
        else:
            bounds.append(default)
    return bounds


def fuse_conv_activation(model: onnx.ModelProto, ctx: PassContext) -> onnx.ModelProto:
    """``Conv [→ Add(Z)] → activation`` → ``ai.onyxrt::FusedConv(X, W, B, Z)``.

    Z (a residual of the convolution's output shape) is optional, as is the activation
    when Z is present. Only float convolutions fuse, and only when every provider in the
    session has a FusedConv kernel.
    """
    if not ctx.can_run(FUSED_DOMAIN, "FusedConv"):
        return model
    rw = Rewrite(model, ctx.arrays)
    for conv in model.graph.node:
        if conv.op_type != "Conv" or conv.domain not in ("", "ai.onnx") or rw.is_removed(conv):
            continue
        dtype = rw.dtype(conv.output[0])
        if dtype is None or dtype.kind != "f":
            continue
        pattern = [conv]
        out = conv.output[0]
        residual = ""
        nxt = rw.sole_consumer(out)
        if nxt is not None and nxt.op_type == "Add" and nxt.domain in ("", "ai.onnx"):
            other = nxt.input[1] if nxt.input[0] == out else nxt.input[0]
            shape = rw.shape(out)
            if shape is not None and None not in shape and rw.shape(other) == shape and rw.dtype(other) == dtype:
                residual = other
                pattern.append(nxt)
                out = nxt.output[0]
                nxt = rw.sole_consumer(out)
        activation, params = "", []
        if nxt is not None and nxt.op_type in ACTIVATIONS and nxt.domain in ("", "ai.onnx"):
            found = _activation_params(rw, nxt)
            if found is not None:
                activation, params = nxt.op_type, found
                pattern.append(nxt)
                out = nxt.output[0]
        if len(pattern) == 1 or not rw.claimable(pattern):
            continue
        inputs = [conv.input[0], conv.input[1], conv.input[2] if len(conv.input) > 2 else ""]
        if residual:
            inputs.append(residual)
        fused = helper.make_node("FusedConv", inputs, [out], name=conv.name, domain=FUSED_DOMAIN)
        fused.attribute.append(helper.make_attribute("activation", activation))
        if params:
            fused.attribute.append(helper.make_attribute("activation_params", params))
        fused.attribute.extend(conv.attribute)
        rw.replace(pattern, [fused])
    if rw.changed:
        rw.require_domain(FUSED_DOMAIN, FUSED_DOMAIN_VERSION)
    return rw.commit()
