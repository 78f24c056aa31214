"""Matrix-product fusions (extended level).

``[Transpose/Mul/Div by a scalar →] MatMul [→ Mul/Div by a scalar] [→ Add(bias)]`` becomes
one node (the scales of either operand and of the product multiplied into ``alpha``):

* ``Gemm(A, B, bias, alpha, transA, transB)`` when A and B are 2-D (standard ONNX);
* ``ai.onyxrt::FusedMatMul(A, B, bias)`` with the same attributes otherwise (batched
  operands, as in every transformer's linear layers and attention scores).

Folding a Transpose that swaps the last two axes saves a copy (BLAS reads the transposed
operand in place); folding the scale and the bias saves one pass over the product each.
The bias must be a constant whose shape broadcasts along the last axis only.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import helper

from .rewrite import DEFAULT_DOMAINS, Rewrite, has_op, other_input
from .support import FUSED_DOMAIN, FUSED_DOMAIN_VERSION, PassContext

__all__ = ["fuse_matmul"]


def _swaps_last_two(node: onnx.NodeProto, rank: int | None) -> bool:
    perm = next((list(a.ints) for a in node.attribute if a.name == "perm"), None)
    if perm is None:
        return rank == 2  # no perm reverses the axes: a swap for 2-D operands
    n = len(perm)
    return n >= 2 and perm == list(range(n - 2)) + [n - 1, n - 2]


def _rank(rw: Rewrite, name: str) -> int | None:
    shape = rw.shape(name)
    return None if shape is None else len(shape)


def _is_bias(rw: Rewrite, name: str, out_rank: int | None) -> bool:
    """A constant that broadcasts along the last axis only (shape (N,) or (1, ..., 1, N))."""
    value = rw.array(name)
    if value is None or value.ndim == 0 or value.dtype.kind != "f":
        return False
    if out_rank is None or value.ndim > out_rank:
        return False
    return all(d == 1 for d in value.shape[:-1])


def _input_scale(
    rw: Rewrite, name: str, consumer: onnx.NodeProto, dtype: np.dtype[Any]
) -> tuple[onnx.NodeProto, float, str] | None:
    """``name`` = ``Mul(x, c)`` (either side) or ``Div(x, c)`` of a scalar constant ``c``,
    read by ``consumer`` alone: (that node, the factor it applies, x). Attention's exports
    scale Q and Kᵀ by sqrt(1/sqrt(d)) each before the product (two passes over strided
    views, 70-80 µs each per GPT-2 layer here); folded into FusedMatMul's alpha as
    onnxruntime's MatMulScaleFusion folds them (the product is then scaled once: the same
    values to a rounding)."""
    node = rw.produced_by(name, "Mul") or rw.produced_by(name, "Div")
    if node is None or not rw.feeds_only(name, consumer) or len(node.input) != 2:
        return None
    for source in node.input:
        factor = _scale_factor(rw, node, source)
        if factor is None or rw.array(source) is not None:
            continue
        rank = _rank(rw, source)
        if rank is None or rank != _rank(rw, name) or rw.dtype(source) != dtype:
            continue  # a scalar that broadcast the operand to a higher rank, or another type
        return node, factor, source
    return None


def _scale_factor(rw: Rewrite, node: onnx.NodeProto, source: str) -> float | None:
    """The factor ``node`` (a default-domain Mul or Div of two inputs) applies to its input
    ``source``: the other input when it is a scalar constant (for Div, the divisor: its
    reciprocal, and not 0), else None."""
    if node.op_type not in ("Mul", "Div") or node.domain not in DEFAULT_DOMAINS or len(node.input) != 2:
        return None
    constant = other_input(node, source)
    if node.op_type == "Div" and (constant != node.input[1] or source != node.input[0]):
        return None
    value = rw.scalar(constant)
    if value is None or (node.op_type == "Div" and value == 0):
        return None
    return value if node.op_type == "Mul" else 1.0 / value


def fuse_matmul(model: onnx.ModelProto, ctx: PassContext) -> onnx.ModelProto:
    """Fold transposes, a scalar scale and a bias into the matrix products they surround."""
    if not has_op(model.graph, "MatMul"):
        return model
    rw = Rewrite(model, ctx.arrays)
    fused_any = False
    for mm in model.graph.node:
        if mm.op_type != "MatMul" or mm.domain not in DEFAULT_DOMAINS or rw.is_removed(mm):
            continue
        dtype = rw.dtype(mm.output[0])
        if dtype is None or dtype.kind != "f":
            continue
        pattern = [mm]
        trans = [0, 0]
        operands = [mm.input[0], mm.input[1]]
        alpha = 1.0
        for i in range(2):
            consumer = mm
            for _ in range(2):  # a transpose and a scale, in either order
                name = operands[i]
                tr = rw.produced_by(name, "Transpose")
                if (not trans[i] and tr is not None and rw.feeds_only(name, consumer)
                        and _swaps_last_two(tr, _rank(rw, tr.input[0]))):
                    trans[i], operands[i], consumer = 1, tr.input[0], tr
                    pattern.append(tr)
                    continue
                scaled = _input_scale(rw, name, consumer, dtype)
                if scaled is None:
                    break
                scale, value, source = scaled
                alpha *= value
                operands[i], consumer = source, scale
                pattern.append(scale)
        out = mm.output[0]
        nxt = rw.sole_consumer(out)
        factor = None if nxt is None else _scale_factor(rw, nxt, out)
        if nxt is not None and factor is not None:
            alpha *= factor
            pattern.append(nxt)
            out = nxt.output[0]
            nxt = rw.sole_consumer(out)
        bias = ""
        if nxt is not None and nxt.op_type == "Add" and nxt.domain in DEFAULT_DOMAINS:
            other = other_input(nxt, out)
            if _is_bias(rw, other, _rank(rw, out)) and rw.dtype(other) == dtype:
                bias = other
                pattern.append(nxt)
                out = nxt.output[0]
        if len(pattern) == 1 or not rw.claimable(pattern):
            continue
        if any(r is None or r < 2 for r in (_rank(rw, operands[0]), _rank(rw, operands[1]))):
            continue  # FusedMatMul and Gemm take rank >= 2; MatMul's 1-D promotion stays MatMul's
        if out != mm.output[0] and (rw.shape(out) is None or rw.shape(out) != rw.shape(mm.output[0])):
            continue  # a scale or bias of higher rank broadcast the product: keep it plain
        inputs = [*operands, bias] if bias else operands
        two_d = _rank(rw, operands[0]) == 2 and _rank(rw, operands[1]) == 2
        if two_d and rw.opset() >= 11 and ctx.can_run("", "Gemm"):
            node = helper.make_node("Gemm", inputs, [out], name=mm.name)
        elif ctx.can_run(FUSED_DOMAIN, "FusedMatMul"):
            node = helper.make_node("FusedMatMul", inputs, [out], name=mm.name, domain=FUSED_DOMAIN)
            fused_any = True
        else:
            continue
        node.attribute.extend([
            helper.make_attribute("alpha", alpha),
            helper.make_attribute("transA", trans[0]),
            helper.make_attribute("transB", trans[1]),
        ])
        rw.replace(pattern, [node])
    if fused_any:
        rw.require_domain(FUSED_DOMAIN, FUSED_DOMAIN_VERSION)
    return rw.commit()
