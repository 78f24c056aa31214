"""Transformer pattern fusions (extended level): layer normalization and GELU.

Exporters write these as chains of elementwise operators; each fused node does the same
arithmetic in one kernel with one output buffer instead of six to nine.

* ``ReduceMean → Sub → Pow 2 → ReduceMean → Add eps → Sqrt → Div [→ Mul scale] [→ Add bias]``
  over the last axis → ``LayerNormalization`` (``ai.onyxrt`` below opset 17).
* ``x * 0.5 * (1 + Erf(x / sqrt 2))`` → ``Gelu``, and the tanh form
  ``0.5 x (1 + Tanh(sqrt(2/pi) (x + 0.044715 x^3)))`` → ``Gelu(approximate="tanh")``
  (``ai.onyxrt`` below opset 20).

Constants are matched to float32 precision (they are usually stored as float32).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import onnx
from onnx import helper

from .rewrite import DEFAULT_DOMAINS, Rewrite, has_op, other_input
from .support import FUSED_DOMAIN, FUSED_DOMAIN_VERSION, PassContext

__all__ = ["fuse_layer_norm", "fuse_gelu"]


def _close(value: float | None, target: float) -> bool:
    return value is not None and math.isclose(value, target, rel_tol=1e-6, abs_tol=1e-7)


def _next(rw: Rewrite, name: str, op_type: str) -> onnx.NodeProto | None:
    """The sole reader of ``name`` if it is a default-domain ``op_type`` node."""
    node = rw.sole_consumer(name)
    if node is None or node.op_type != op_type or node.domain not in DEFAULT_DOMAINS:
        return None
    return node


def _target(rw: Rewrite, ctx: PassContext, op_type: str, since: int) -> str | None:
    """The domain to emit ``op_type`` in: the default one from the opset that defines it,
    else the fused domain; ``None`` when some provider of the session cannot run it."""
    if rw.opset() >= since:
        return "" if ctx.can_run("", op_type) else None
    return FUSED_DOMAIN if ctx.can_run(FUSED_DOMAIN, op_type) else None


def _emit(rw: Rewrite, pattern: Sequence[onnx.NodeProto], node: onnx.NodeProto) -> None:
    rw.replace(pattern, [node])
    if node.domain == FUSED_DOMAIN:
        rw.require_domain(FUSED_DOMAIN, FUSED_DOMAIN_VERSION)


def _reduces_last_axis(rw: Rewrite, node: onnx.NodeProto, rank: int | None) -> bool:
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    if int(attrs.get("keepdims", 1)) != 1:
        return False
    if len(node.input) > 1 and node.input[1]:
        axes_value = rw.array(node.input[1])
        axes = None if axes_value is None else [int(v) for v in axes_value.ravel()]
    else:
        axes = [int(v) for v in attrs["axes"]] if "axes" in attrs else None
    return axes is not None and len(axes) == 1 and (axes[0] == -1 or (rank is not None and axes[0] == rank - 1))


def fuse_layer_norm(model: onnx.ModelProto, ctx: PassContext) -> onnx.ModelProto:
    """The decomposed layer normalization over the last axis → ``LayerNormalization``."""
    if not has_op(model.graph, "ReduceMean"):
        return model
    rw = Rewrite(model, ctx.arrays)
    domain = _target(rw, ctx, "LayerNormalization", 17)
    if domain is None:
        return model
    for mean in model.graph.node:
        if mean.op_type != "ReduceMean" or mean.domain not in DEFAULT_DOMAINS or rw.is_removed(mean):
            continue
        x = mean.input[0]
        shape = rw.shape(x)
        dtype = rw.dtype(x)
        if shape is None or dtype is None or dtype.kind != "f" or not _reduces_last_axis(rw, mean, len(shape)):
            continue
        sub = _next(rw, mean.output[0], "Sub")
        if sub is None or sub.input[0] != x or sub.input[1] != mean.output[0]:
            continue
        centered = sub.output[0]
        readers = rw.consumers.get(centered, [])
        if centered in rw.pinned or len(readers) != 2:
            continue
        pow_ = next((r for r in readers if r.op_type == "Pow" and r.input[0] == centered), None)
        div = next((r for r in readers if r.op_type == "Div" and r.input[0] == centered), None)
        if pow_ is None or div is None or not _close(rw.scalar(pow_.input[1]), 2.0):
            continue
        var = _next(rw, pow_.output[0], "ReduceMean")
        if var is None or not _reduces_last_axis(rw, var, len(shape)):
            continue
        add_eps = _next(rw, var.output[0], "Add")
        eps = None if add_eps is None else rw.scalar(other_input(add_eps, var.output[0]))
        sqrt = None if add_eps is None else _next(rw, add_eps.output[0], "Sqrt")
        if eps is None or sqrt is None or _next(rw, sqrt.output[0], "Div") is not div:
            continue
        pattern = [mean, sub, pow_, var, add_eps, sqrt, div]
        out = div.output[0]
        inputs = [x]
        for op_type in ("Mul", "Add"):
            node = _next(rw, out, op_type)
            param = "" if node is None else other_input(node, out)
            if node is None or rw.shape(param) != (shape[-1],):
                break
            pattern.append(node)
            inputs.append(param)
            out = node.output[0]
        if len(inputs) == 1 or not rw.claimable(pattern):
            continue  # without a scale LayerNormalization needs a ones tensor; keep it plain
        if rw.shape(out) != shape:
            continue  # a constant of higher rank broadcast the result: not a plain LayerNorm
        fused = helper.make_node(
            "LayerNormalization", inputs, [out], name=mean.name or out, domain=domain,
            axis=-1, epsilon=float(eps),
        )
        _emit(rw, pattern, fused)
    return rw.commit()


def fuse_gelu(model: onnx.ModelProto, ctx: PassContext) -> onnx.ModelProto:
    """Both GELU spellings → ``Gelu`` (``approximate`` "none" or "tanh")."""
    if not has_op(model.graph, "Erf", "Tanh"):
        return model
    rw = Rewrite(model, ctx.arrays)
    domain = _target(rw, ctx, "Gelu", 20)
    if domain is None:
        return model
    for node in model.graph.node:
        if node.domain not in DEFAULT_DOMAINS or rw.is_removed(node):
            continue
        found = None
        if node.op_type == "Erf":
            found = _match_erf_gelu(rw, node)
        elif node.op_type == "Tanh":
            found = _match_tanh_gelu(rw, node)
        if found is None:
            continue
        x, pattern, out, approximate = found
        dtype = rw.dtype(x)
        if dtype is None or dtype.kind != "f" or not rw.claimable(pattern):
            continue
        if rw.shape(x) is None or rw.shape(out) != rw.shape(x):
            continue  # a constant of higher rank broadcast the result: not a plain GELU
        fused = helper.make_node(
            "Gelu", [x], [out], name=node.name or out, domain=domain, approximate=approximate
        )
        _emit(rw, pattern, fused)
    return rw.commit()


def _half_times(rw: Rewrite, prod: onnx.NodeProto, x: str) -> tuple[list[onnx.NodeProto], str] | None:
    """``prod`` multiplies by x or by (0.5 * x); return the extra nodes and the output of
    ``0.5 * x * (...)``."""
    if x in prod.input:  # prod = x * (1 + f): the half comes next
        half = _next(rw, prod.output[0], "Mul")
        if half is None or not _close(rw.scalar(other_input(half, prod.output[0])), 0.5):
            return None
        return [prod, half], half.output[0]
    for name in prod.input:  # prod = (0.5 * x) * (1 + f)
        pre = rw.produced_by(name, "Mul")
        if (
            pre is not None and x in pre.input and _close(rw.scalar(other_input(pre, x)), 0.5)
            and rw.feeds_only(name, prod)
        ):
            return [pre, prod], prod.output[0]
    return None


def _match_erf_gelu(
    rw: Rewrite, erf: onnx.NodeProto
) -> tuple[str, list[onnx.NodeProto], str, str] | None:
    scaled = erf.input[0]
    pre = rw.produced_by(scaled, "Div") or rw.produced_by(scaled, "Mul")
    if pre is None or not rw.feeds_only(scaled, erf):
        return None
    if pre.op_type == "Div":
        if not _close(rw.scalar(pre.input[1]), math.sqrt(2.0)):
            return None
        x = pre.input[0]
    else:
        found = [c for c in pre.input if _close(rw.scalar(other_input(pre, c)), 1.0 / math.sqrt(2.0))]
        if not found:
            return None
        x = found[0]
    add = _next(rw, erf.output[0], "Add")
    if add is None or not _close(rw.scalar(other_input(add, erf.output[0])), 1.0):
        return None
    prod = _next(rw, add.output[0], "Mul")
    if prod is None:
        return None
    tail = _half_times(rw, prod, x)
    if tail is None:
        return None
    extra, out = tail
    return x, [pre, erf, add, *extra], out, "none"


def _match_tanh_gelu(
    rw: Rewrite, tanh: onnx.NodeProto
) -> tuple[str, list[onnx.NodeProto], str, str] | None:
    mul_sqrt = rw.produced_by(tanh.input[0], "Mul")
    if mul_sqrt is None or not rw.feeds_only(tanh.input[0], tanh):
        return None
    inner = next(
        (i for i in mul_sqrt.input if _close(rw.scalar(other_input(mul_sqrt, i)), math.sqrt(2.0 / math.pi))),
        None,
    )
    if inner is None or not rw.feeds_only(inner, mul_sqrt):
        return None
    add_cube = rw.produced_by(inner, "Add")
    if add_cube is None:
        return None
    for x, cubed in (add_cube.input, reversed(add_cube.input)):
        mul_coef = rw.produced_by(cubed, "Mul")
        if mul_coef is None or not rw.feeds_only(cubed, add_cube):
            continue
        for cube in mul_coef.input:
            pow_ = rw.produced_by(cube, "Pow")
            if (
                pow_ is not None and pow_.input[0] == x and rw.feeds_only(cube, mul_coef)
                and _close(rw.scalar(pow_.input[1]), 3.0)
                and _close(rw.scalar(other_input(mul_coef, cube)), 0.044715)
            ):
                add_one = _next(rw, tanh.output[0], "Add")
                if add_one is None or not _close(rw.scalar(other_input(add_one, tanh.output[0])), 1.0):
                    return None
                prod = _next(rw, add_one.output[0], "Mul")
                tail = None if prod is None else _half_times(rw, prod, x)
                if tail is None:
                    return None
                extra, out = tail
                return x, [pow_, mul_coef, add_cube, mul_sqrt, tanh, add_one, *extra], out, "tanh"
    return None
