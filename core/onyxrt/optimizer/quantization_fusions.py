"""Integer matrix-product fusions (extended level), as onnxruntime's
MatMulIntegerToFloatFusion and DynamicQuantizeMatMulFusion make them.

onnxruntime's ``quantize_dynamic`` writes every linear layer as

    A_q, A_scale, A_zp = DynamicQuantizeLinear(A)
    Y = Cast(MatMulInteger(A_q, B_q, A_zp, B_zp), to=float) * Mul(A_scale, B_scale) [+ bias]

— five nodes and four passes over the product besides the product itself (in a dynamically
quantized BERT-base: DynamicQuantizeLinear 22 ms, the Cast/Mul/Add 34 ms, against 82 ms of
integer products). They become one node:

* ``com.microsoft::MatMulIntegerToFloat(A_q, B_q, A_scale, B_scale, A_zp, B_zp, bias)``;
* ``com.microsoft::DynamicQuantizeMatMul(A, B_q, B_scale, B_zp, bias)`` when the
  DynamicQuantizeLinear feeds that product alone (the query/key/value projections share
  one, so they keep it and become MatMulIntegerToFloat).

Only where every provider of the session runs the fused operator (``PassContext.can_run``),
with ``B_scale`` and the bias constants (the bias 1-D, one value per column). The fused
kernels compute the same exact integer sums and the same float32 scaling and bias addition.
"""

from __future__ import annotations

from typing import TypeGuard

import onnx
from onnx import helper

from .rewrite import DEFAULT_DOMAINS, Rewrite, has_op, other_input
from .support import PassContext

__all__ = ["fuse_integer_matmul", "fuse_matmul_nbits_bias"]

_MS = "com.microsoft"
_FLOAT = onnx.TensorProto.FLOAT


def _default(node: onnx.NodeProto | None, op_type: str) -> TypeGuard[onnx.NodeProto]:
    """Whether ``node`` is a default-domain ``op_type`` node."""
    return node is not None and node.op_type == op_type and node.domain in DEFAULT_DOMAINS


def fuse_integer_matmul(model: onnx.ModelProto, ctx: PassContext) -> onnx.ModelProto:
    """Fold the dequantizing Cast/Mul (and bias Add, and the sole DynamicQuantizeLinear)
    around each MatMulInteger into MatMulIntegerToFloat / DynamicQuantizeMatMul."""
    if not has_op(model.graph, "MatMulInteger") or not ctx.can_run(_MS, "MatMulIntegerToFloat"):
        return model
    dynamic_ok = ctx.can_run(_MS, "DynamicQuantizeMatMul")
    rw = Rewrite(model, ctx.arrays)
    fused = False
    for mm in model.graph.node:
        if not _default(mm, "MatMulInteger") or rw.is_removed(mm):
            continue
        a_q, b_q = mm.input[0], mm.input[1]
        a_zp = mm.input[2] if len(mm.input) > 2 else ""
        b_zp = mm.input[3] if len(mm.input) > 3 else ""
        cast = rw.sole_consumer(mm.output[0])
        if not _default(cast, "Cast") or helper.get_attribute_value(cast.attribute[0]) != _FLOAT:
            continue
        mul = rw.sole_consumer(cast.output[0])
        if not _default(mul, "Mul"):
            continue
        scales = rw.produced_by(other_input(mul, cast.output[0]), "Mul")
        dql = rw.produced_by(a_q, "DynamicQuantizeLinear")
        if scales is None or dql is None or not rw.feeds_only(scales.output[0], mul):
            continue
        # A's scale from A's DynamicQuantizeLinear, B's a constant (per tensor or column).
        a_scale = dql.output[1]
        if a_scale not in scales.input or (a_zp and a_zp != dql.output[2]):
            continue
        b_scale = other_input(scales, a_scale)
        if not rw.is_constant(b_scale) or (b_zp and not rw.is_constant(b_zp)):
            continue
        pattern = [mm, cast, mul, scales]
        out, bias = mul.output[0], ""
        add = rw.sole_consumer(out)
        if _default(add, "Add"):
            value = rw.array(other_input(add, out))
            if value is not None and value.ndim == 1 and value.dtype.kind == "f":
                bias, out = other_input(add, out), add.output[0]
                pattern.append(add)
        quantized = dql.output
        alone = (dynamic_ok and rw.feeds_only(quantized[0], mm) and rw.feeds_only(quantized[1], scales)
                 and (rw.feeds_only(quantized[2], mm) if a_zp else not rw.consumers.get(quantized[2])))
        if alone:
            pattern.append(dql)
            inputs = [dql.input[0], b_q, b_scale, b_zp, bias]
            op = "DynamicQuantizeMatMul"
        else:
            inputs = [a_q, b_q, a_scale, b_scale, a_zp, b_zp, bias]
            op = "MatMulIntegerToFloat"
        if not rw.claimable(pattern):
            continue
        while inputs and not inputs[-1]:
            inputs.pop()
        rw.replace(pattern, [helper.make_node(op, inputs, [out], name=mm.name, domain=_MS)])
        fused = True
    if fused:
        rw.require_domain(_MS, 1)
    return rw.commit()


#: MatMulNBits's bias: input 5, after (A, B, scales, zero_points, g_idx)
_NBITS_BIAS = 5


def fuse_matmul_nbits_bias(model: onnx.ModelProto, ctx: PassContext) -> onnx.ModelProto:
    """``com.microsoft::MatMulNBits`` → ``Add`` of a constant 1-D bias (one value per
    column, in A's float type) → the MatMulNBits with that bias as its input 5, as
    onnxruntime's quantizer leaves every linear layer of a 4-bit model (the bias added in
    another pass over the product; the CPU adds it to each tile of the product instead).
    Only where every provider of the session runs MatMulNBits, and no bias is set yet."""
    if not has_op(model.graph, "MatMulNBits", domains=(_MS,)) or not ctx.can_run(_MS, "MatMulNBits"):
        return model
    rw = Rewrite(model, ctx.arrays)
    for mm in model.graph.node:
        if mm.domain != _MS or mm.op_type != "MatMulNBits" or rw.is_removed(mm) or len(mm.input) > _NBITS_BIAS:
            continue
        add = rw.sole_consumer(mm.output[0])
        if not _default(add, "Add"):
            continue
        bias = other_input(add, mm.output[0])
        value = rw.array(bias)
        n = next((a.i for a in mm.attribute if a.name == "N"), None)
        if (value is None or value.ndim != 1 or value.shape[0] != n or value.dtype != rw.dtype(mm.input[0])
                or rw.shape(add.output[0]) != rw.shape(mm.output[0]) or not rw.claimable([mm, add])):
            continue
        inputs = [*mm.input, *[""] * (_NBITS_BIAS - len(mm.input)), bias]
        fused = helper.make_node("MatMulNBits", inputs, [add.output[0]], name=mm.name, domain=_MS)
        fused.attribute.extend(mm.attribute)
        rw.replace([mm, add], [fused])
    return rw.commit()
