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

from .rewrite import DEFAULT_DOMAINS, Rewrite, has_op, other_input
from .support import FUSED_DOMAIN, FUSED_DOMAIN_VERSION, PassContext

__all__ = ["fold_batch_norm_into_conv", "fuse_conv_activation", "fuse_gemm_activation", "ACTIVATIONS"]


def _attr(node: onnx.NodeProto, name: str, default: float) -> float:
    for a in node.attribute:
        if a.name == name:
            return float(helper.get_attribute_value(a))
    return default


def _bn_attrs(bn: onnx.NodeProto) -> tuple[float, bool]:
    """A BatchNormalization's epsilon, and whether it normalizes with its stored
    statistics (inference mode): ``training_mode`` 0, or ``is_test`` 1 before opset 7
    (read only when given: the loader checked each against the node's schema)."""
    epsilon, inference = 1e-5, True
    for a in bn.attribute:
        if a.name == "epsilon":
            epsilon = float(a.f)
        elif a.name == "training_mode":
            inference = inference and a.i == 0
        elif a.name == "is_test":
            inference = inference and a.i != 0
    return epsilon, inference


def fold_batch_norm_into_conv(model: onnx.ModelProto, ctx: PassContext) -> onnx.ModelProto:
    """``Conv(X, W, B) → BatchNormalization(scale, bias, mean, var)`` with constant
    parameters → ``Conv(X, W * s, (B - mean) * s + bias)``, ``s = scale / sqrt(var + eps)``.

    The per-channel factors are computed in float64; the weights are scaled in their type.
    The new weights go to ``ctx.arrays`` (see :mod:`.support`).
    """
    if not has_op(model.graph, "BatchNormalization"):
        return model
    rw = Rewrite(model, ctx.arrays)
    old_is_test = 0 < rw.opset() < 7  # before opset 7, is_test=0 (the default) meant training
    for bn in model.graph.node:
        if bn.op_type != "BatchNormalization" or bn.domain not in DEFAULT_DOMAINS:
            continue
        if not bn.output[0] or any(bn.output[1:]):
            continue  # training outputs (running statistics) are read
        epsilon, inference = _bn_attrs(bn)
        if not inference or (old_is_test and not any(a.name == "is_test" for a in bn.attribute)):
            continue
        conv = rw.produced_by(bn.input[0], "Conv")
        if conv is None or not rw.feeds_only(conv.output[0], bn):
            continue
        folded = _folded_weights(rw, conv, bn, epsilon)
        if folded is None:
            continue
        new_w, new_b = folded
        base = conv.name or "conv"
        fused = helper.make_node(
            "Conv",
            [conv.input[0], rw.add_initializer(f"{base}.W", new_w), rw.add_initializer(f"{base}.B", new_b)],
            [bn.output[0]],
            name=conv.name,
        )
        fused.attribute.extend(conv.attribute)
        rw.replace([conv, bn], [fused])
    return rw.commit()


def _folded_weights(
    rw: Rewrite, conv: onnx.NodeProto, bn: onnx.NodeProto, epsilon: float
) -> tuple[np.ndarray, np.ndarray] | None:
    """The rescaled weights and new bias of ``conv`` with ``bn`` folded in, or ``None``
    when a parameter is not a constant or has the wrong type or shape."""
    params = [rw.array(n) for n in bn.input[1:5]]
    w = rw.array(conv.input[1])
    has_b = len(conv.input) > 2 and bool(conv.input[2])
    b = rw.array(conv.input[2]) if has_b else None
    if w is None or (has_b and b is None) or w.dtype.kind != "f" or w.ndim == 0:
        return None
    channels = (w.shape[0],)
    for p in params:
        if p is None or p.dtype.kind != "f" or p.shape != channels:
            return None
    if b is not None and b.shape != channels:
        return None  # a Conv bias must be 1-D [M]: leave a malformed one to the kernel to refuse
    scale, bias, mean, var = (p.astype(np.float64) for p in params)  # type: ignore[union-attr]
    s = scale / np.sqrt(var + epsilon)
    # The per-channel factor in float64, the big product in the weights' own type
    # (float32 products are correctly rounded too; float16 goes through float32).
    wdt = np.float32 if w.dtype.itemsize < 4 else w.dtype
    factor = s.astype(wdt).reshape(channels + (1,) * (w.ndim - 1))
    new_w = np.multiply(w, factor, dtype=wdt).astype(w.dtype, copy=False)
    new_b = (((b.astype(np.float64) - mean) if b is not None else -mean) * s + bias).astype(w.dtype)
    return new_w, new_b


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


def _fusable_activation(rw: Rewrite, node: onnx.NodeProto | None) -> list[float] | None:
    """The parameters of ``node`` when it is an activation a fused node can apply (a
    default-domain :data:`ACTIVATIONS` operator with constant parameters), else None."""
    if node is None or node.op_type not in ACTIVATIONS or node.domain not in DEFAULT_DOMAINS:
        return None
    return _activation_params(rw, node)


def _activation_attributes(name: str, params: list[float]) -> list[onnx.AttributeProto]:
    """FusedConv's/FusedGemm's ``activation`` (and ``activation_params``) attributes."""
    attrs = [helper.make_attribute("activation", name)]
    if params:
        attrs.append(helper.make_attribute("activation_params", params))
    return attrs


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


def fuse_gemm_activation(model: onnx.ModelProto, ctx: PassContext) -> onnx.ModelProto:
    """``Gemm → activation`` → ``ai.onyxrt::FusedGemm(A, B, C)``: Gemm's attributes plus
    ``activation``/``activation_params`` as FusedConv's (onnxruntime's FusedGemm), the
    activation applied in place on the product. An MLP layer's Relu, on a [1, 256] row, cost
    as much dispatch as the product's own Python steps. Float Gemms only, where every
    provider of the session has FusedGemm."""
    if not has_op(model.graph, "Gemm") or not ctx.can_run(FUSED_DOMAIN, "FusedGemm"):
        return model
    rw = Rewrite(model, ctx.arrays)
    for gemm in model.graph.node:
        if gemm.op_type != "Gemm" or gemm.domain not in DEFAULT_DOMAINS or rw.is_removed(gemm):
            continue
        dtype = rw.dtype(gemm.output[0])
        act = rw.sole_consumer(gemm.output[0])
        params = _fusable_activation(rw, act)
        if dtype is None or dtype.kind != "f" or act is None or params is None or not rw.claimable([gemm, act]):
            continue
        fused = helper.make_node("FusedGemm", list(gemm.input), [act.output[0]], name=gemm.name,
                                 domain=FUSED_DOMAIN)
        fused.attribute.extend(gemm.attribute)
        fused.attribute.extend(_activation_attributes(act.op_type, params))
        rw.replace([gemm, act], [fused])
    if rw.changed:
        rw.require_domain(FUSED_DOMAIN, FUSED_DOMAIN_VERSION)
    return rw.commit()


def fuse_conv_activation(model: onnx.ModelProto, ctx: PassContext) -> onnx.ModelProto:
    """``Conv [→ Add(Z)] → activation`` → ``ai.onyxrt::FusedConv(X, W, B, Z)``.

    Z (a residual of the convolution's output shape) is optional, as is the activation
    when Z is present. Only float convolutions fuse, and only when every provider in the
    session has a FusedConv kernel.
    """
    if not has_op(model.graph, "Conv") or not ctx.can_run(FUSED_DOMAIN, "FusedConv"):
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
            other = other_input(nxt, out)
            shape = rw.shape(out)
            if shape is not None and None not in shape and rw.shape(other) == shape and rw.dtype(other) == dtype:
                residual = other
                pattern.append(nxt)
                out = nxt.output[0]
                nxt = rw.sole_consumer(out)
        activation, params = "", []
        found = _fusable_activation(rw, nxt)
        if nxt is not None and found is not None:
            activation, params = nxt.op_type, found
            pattern.append(nxt)
            out = nxt.output[0]
        if len(pattern) == 1 or not rw.claimable(pattern):
            continue
        inputs = [conv.input[0], conv.input[1], conv.input[2] if len(conv.input) > 2 else ""]
        if residual:
            inputs.append(residual)
        fused = helper.make_node("FusedConv", inputs, [out], name=conv.name, domain=FUSED_DOMAIN)
        fused.attribute.extend(_activation_attributes(activation, params))
        fused.attribute.extend(conv.attribute)
        rw.replace(pattern, [fused])
    if rw.changed:
        rw.require_domain(FUSED_DOMAIN, FUSED_DOMAIN_VERSION)
    return rw.commit()
