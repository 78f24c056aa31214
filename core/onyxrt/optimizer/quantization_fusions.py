"""Integer matrix-product fusions (extended level), as onnxruntime's
MatMulIntegerToFloatFusion, DynamicQuantizeMatMulFusion and QDQ transformer make them.

QDQ models (``quantize_static`` in QDQ format) write every convolution as
DequantizeLinear(x_q), DequantizeLinear(w_q), DequantizeLinear(b_q) → Conv → QuantizeLinear;
:func:`fuse_qdq_groups` makes that group one ``QLinearConv`` whose kernel runs in integers
(and a residual DequantizeLinear, DequantizeLinear → Add → QuantizeLinear one
``QLinearAdd``).

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

import numpy as np
import onnx
from onnx import helper

from .rewrite import DEFAULT_DOMAINS, Rewrite, has_op, other_input
from .support import PassContext

__all__ = ["fuse_integer_matmul", "fuse_matmul_nbits_bias", "fuse_qdq_groups"]

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


def _per_tensor(rw: Rewrite, scale: str, zero_point: str) -> bool:
    """A constant float32 scalar scale and a constant 8-bit scalar zero point."""
    s, z = rw.array(scale), rw.array(zero_point) if zero_point else None
    return (s is not None and s.size == 1 and s.dtype == np.float32 and z is not None and z.size == 1
            and z.dtype in (np.int8, np.uint8))


def _dtype(rw: Rewrite, name: str) -> np.dtype | None:
    """The type of constant ``name``."""
    value = rw.array(name)
    return None if value is None else value.dtype


def _float_steps(*nodes: onnx.NodeProto) -> bool:
    """Whether Q/DQ ``nodes`` compute in float32 as the fused kernels do: no blocks, no
    other output type (DequantizeLinear-21's output_dtype), no other division precision
    (QuantizeLinear-25's precision)."""
    return all(_attribute(n, "block_size", 0) == 0 and _attribute(n, "output_dtype", 0) in (0, _FLOAT)
               and _attribute(n, "precision", 0) in (0, _FLOAT) for n in nodes)


def _dq_inputs(dq: onnx.NodeProto) -> tuple[str, str, str]:
    return dq.input[0], dq.input[1], dq.input[2] if len(dq.input) > 2 else ""


def _attribute(node: onnx.NodeProto, name: str, default: int) -> int:
    return next((int(a.i) for a in node.attribute if a.name == name), default)


def fuse_qdq_groups(model: onnx.ModelProto, ctx: PassContext) -> onnx.ModelProto:
    """A QDQ model's groups into integer operators, as onnxruntime's QDQ transformer makes
    them: convolutions into ``QLinearConv`` (:func:`_fuse_qdq_conv`), residual additions
    into ``com.microsoft::QLinearAdd`` (:func:`_fuse_qdq_add`).

    Only where every provider of the session runs them in integers
    (``PassContext.fuse_qdq_groups``: the CPU with its int8 kernels; a GPU would trade its
    float kernels for slower ones) and none reads QDQ groups itself (an NPU quantizing from
    them), and each operator only where every provider has it. Run before constant
    folding, which would dequantize the weights into float constants."""
    if not ctx.fold_dequantized_weights or not ctx.fuse_qdq_groups or not has_op(model.graph, "QuantizeLinear"):
        return model
    rw = Rewrite(model, ctx.arrays)
    if ctx.can_run("", "QLinearConv"):
        _fuse_qdq_conv(rw)
    if ctx.can_run(_MS, "QLinearAdd") and _fuse_qdq_add(rw):
        rw.require_domain(_MS, 1)
    return rw.commit()


def _fuse_qdq_conv(rw: Rewrite) -> None:
    """DequantizeLinear(x) → Conv(·, DequantizeLinear(w), [DequantizeLinear(b)]) →
    QuantizeLinear → ``QLinearConv(x_q, x_scale, x_zp, w_q, w_scale, w_zp, y_scale, y_zp,
    [b_q])``, with: x and y per tensor (constant float32 scale, 8-bit zero point);
    constant 8-bit weights, per tensor or per output channel (axis 0); an int32 bias whose
    scale is x_scale * w_scale (as the quantizer writes it), or none; the Conv's output
    read by that QuantizeLinear alone. The fused kernel accumulates the same integer
    products exactly; rounding the product once instead of twice may move an output by
    one step, as it does in onnxruntime."""
    for conv in rw.graph.node:
        if not _default(conv, "Conv") or rw.is_removed(conv) or len(conv.input) < 2:
            continue
        dqx = rw.produced_by(conv.input[0], "DequantizeLinear")
        dqw = rw.produced_by(conv.input[1], "DequantizeLinear")
        q = rw.sole_consumer(conv.output[0])
        if dqx is None or dqw is None or not _default(q, "QuantizeLinear") or len(q.input) < 3:
            continue
        x_q, x_scale, x_zp = _dq_inputs(dqx)
        w_q, w_scale, w_zp = _dq_inputs(dqw)
        if (not _per_tensor(rw, x_scale, x_zp) or not _per_tensor(rw, q.input[1], q.input[2])
                or not _float_steps(dqx, dqw, q)):
            continue
        w, ws = rw.array(w_q), rw.array(w_scale)
        if w is None or ws is None or w.dtype not in (np.int8, np.uint8) or ws.dtype != np.float32:
            continue
        channels = w.shape[0] if w.ndim else 0
        if ws.size != 1 and not (ws.ndim == 1 and ws.size == channels
                                 and _attribute(dqw, "axis", 1) in (0, -w.ndim)):
            continue
        wz = rw.array(w_zp) if w_zp else None
        if w_zp and (wz is None or wz.dtype != w.dtype or wz.shape != ws.shape):
            continue
        pattern = [conv, q]
        bias_input: list[str] = []
        if len(conv.input) > 2 and conv.input[2]:
            bias = _integer_bias(rw, conv, rw.scalar(x_scale) or 0.0, ws, channels)
            if bias is None:
                continue
            bias_input.append(bias[0])
            pattern += bias[1]
        for dq in (dqx, dqw):
            if rw.feeds_only(dq.output[0], conv) and dq not in pattern:
                pattern.append(dq)
        if not rw.claimable(pattern):
            continue
        w_zp = w_zp or rw.add_initializer(f"{w_q}_zero_point", np.zeros(ws.shape, w.dtype))
        inputs = [x_q, x_scale, x_zp, w_q, w_scale, w_zp, q.input[1], q.input[2], *bias_input]
        fused = helper.make_node("QLinearConv", inputs, [q.output[0]], name=conv.name)
        fused.attribute.extend(conv.attribute)
        rw.replace(pattern, [fused])


def _fuse_qdq_add(rw: Rewrite) -> bool:
    """DequantizeLinear(a), DequantizeLinear(b) → Add → QuantizeLinear →
    ``com.microsoft::QLinearAdd(a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp)``, all
    per tensor and of one 8-bit type (a residual connection of a QDQ model): each operand
    scaled by its ratio to y's scale, added and rounded once, as onnxruntime's QLinearAdd
    does. Whether anything fused."""
    fused = False
    for add in rw.graph.node:
        if not _default(add, "Add") or rw.is_removed(add) or len(add.input) != 2 or add.input[0] == add.input[1]:
            continue
        dqs = [rw.produced_by(name, "DequantizeLinear") for name in add.input]
        q = rw.sole_consumer(add.output[0])
        if any(dq is None for dq in dqs) or not _default(q, "QuantizeLinear") or len(q.input) < 3:
            continue
        params = [_dq_inputs(dq) for dq in dqs if dq is not None]
        if (not _float_steps(q, *[dq for dq in dqs if dq is not None])
                or not all(_per_tensor(rw, scale, zp) for _, scale, zp in params)
                or not _per_tensor(rw, q.input[1], q.input[2])
                or len({_dtype(rw, zp) for zp in (params[0][2], params[1][2], q.input[2])}) != 1):
            continue
        pattern = [add, q] + [dq for dq in dqs if dq is not None and rw.feeds_only(dq.output[0], add)]
        if not rw.claimable(pattern):
            continue
        inputs = [*params[0], *params[1], q.input[1], q.input[2]]
        rw.replace(pattern, [helper.make_node("QLinearAdd", inputs, [q.output[0]], name=add.name, domain=_MS)])
        fused = True
    return fused


def _integer_bias(rw: Rewrite, conv: onnx.NodeProto, x_scale: float, w_scale: np.ndarray,
                  channels: int) -> tuple[str, list[onnx.NodeProto]] | None:
    """The int32 constant behind ``conv``'s bias (a DequantizeLinear of it with zero point
    0 and scale x_scale * w_scale) and the nodes that go with the fusion."""
    dqb = rw.produced_by(conv.input[2], "DequantizeLinear")
    if dqb is None:
        return None
    b_q, b_scale, b_zp = _dq_inputs(dqb)
    b, bs = rw.array(b_q), rw.array(b_scale)
    bz = rw.array(b_zp) if b_zp else np.zeros((), np.int32)
    if b is None or bs is None or bz is None or b.dtype != np.int32 or b.shape != (channels,) or np.any(bz):
        return None
    expected = (np.float32(x_scale) * w_scale.astype(np.float32)).reshape(-1)
    if bs.size not in (1, channels) or not np.allclose(bs.reshape(-1), expected, rtol=1e-6, atol=0):
        return None
    return b_q, [dqb] if rw.feeds_only(dqb.output[0], conv) else []
