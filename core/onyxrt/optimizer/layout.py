"""The layout pass (``ORT_ENABLE_LAYOUT``): float32 convolutions to the blocked layout NCHWc.

In NCHWc a tensor (N, C, H, W) is held as (N, ceil(C/16), H, W, 16): the 16 channels of a
pixel are one vector register, so a convolution reads its input in place instead of
packing columns, and a depthwise convolution is one vector multiply-add per tap at any
stride (onnxruntime's layout for the same reason; the CPU provider's kernels say more).

Every ``Conv`` / ``FusedConv`` with constant float32 4-D weights and ``group`` 1 or one
filter per channel becomes ``ai.onyxrt::NchwcConv``, reading the blocked twin of its
input (and residual) and writing a blocked twin of its output. Twins come from the
producer when it was converted too; otherwise a ``ReorderInput`` makes one, except that a
``group`` 1 convolution of fewer than 16 channels (a network's first layer, reading an
image) reads the NCHW input as it is. A ``GlobalAveragePool`` or a ``MaxPool`` (2-D,
without Indices) of a blocked value stays blocked, and so do the elementwise operators of
QDQ models between convolutions: a per-tensor QuantizeLinear → DequantizeLinear pair, and
an ``Add`` of two blocked values of one shape (a residual). Wherever a converted value is read by an operator left in NCHW, or is a graph
output, a ``ReorderOutput`` right after its producer restores it under its own name, so
the rest of the graph is untouched.

The operators exist only in the CPU provider, which offers them where its compiled
kernels are on and the CPU has AVX-512 (``onyxrt_cpu.native.NCHWC_ENABLED``): the pass runs
when every provider of the session can run them (see :class:`~.support.PassContext`).
"""

from __future__ import annotations

from collections.abc import Sequence

import onnx
from onnx import helper

from .rewrite import DEFAULT_DOMAINS, Rewrite, has_op
from .support import FUSED_DOMAIN, FUSED_DOMAIN_VERSION, PassContext

__all__ = ["convert_to_nchwc", "NCHWC_BLOCK"]

#: Channels per block.
NCHWC_BLOCK = 16

_REQUIRED = ("NchwcConv", "ReorderInput", "ReorderOutput")


def _int_attr(node: onnx.NodeProto, name: str, default: int) -> int:
    for a in node.attribute:
        if a.name == name:
            return int(helper.get_attribute_value(a))
    return default


def _convertible_conv(rw: Rewrite, node: onnx.NodeProto) -> bool:
    """A float32 2-D Conv/FusedConv with constant weights (and bias), group 1 or depthwise."""
    plain = node.op_type == "Conv" and node.domain in DEFAULT_DOMAINS
    fused = node.op_type == "FusedConv" and node.domain == FUSED_DOMAIN
    if not (plain or fused) or rw.is_removed(node):
        return False
    # shapes and types from the initializers' headers: reading the weights themselves
    # would convert every one of them, for nothing but their dims
    w = node.input[1]
    w_shape = rw.shape(w)
    if not rw.is_constant(w) or w_shape is None or len(w_shape) != 4 or str(rw.dtype(w)) != "float32":
        return False
    has_bias = len(node.input) > 2 and node.input[2]
    if has_bias and not rw.is_constant(node.input[2]):
        return False
    if any(str(rw.dtype(v)) != "float32" for v in (node.input[0], node.output[0])):
        return False
    group = _int_attr(node, "group", 1)
    return group == 1 or (w_shape[1] == 1 and group == w_shape[0])


#: Standard operators that run on blocked values unchanged (see :func:`_blocked_qdq_pair`).
_ELEMENTWISE = ("QuantizeLinear", "DequantizeLinear", "Add")


def _per_tensor(rw: Rewrite, node: onnx.NodeProto) -> bool:
    """Whether a QuantizeLinear/DequantizeLinear has one constant scale (and zero point)."""
    params = [i for i in node.input[1:3] if i]
    return bool(params) and all(rw.is_constant(i) and rw.shape(i) in ((), (1,)) for i in params)


def _blocked_qdq_pair(
    rw: Rewrite, node: onnx.NodeProto, channels: dict[str, int]
) -> tuple[onnx.NodeProto, onnx.NodeProto] | None:
    """``node`` (a QuantizeLinear of a blocked float32 value) and the DequantizeLinear that
    alone reads it, when both are per tensor: elementwise, so the pair runs on the blocked
    twin. Zero padding channels stay finite (quantized and back), and the convolutions'
    packed filters are zero for them."""
    if (node.op_type != "QuantizeLinear" or node.domain not in DEFAULT_DOMAINS or rw.is_removed(node)
            or node.input[0] not in channels or not _per_tensor(rw, node)):
        return None
    dq = rw.sole_consumer(node.output[0])
    if (dq is None or dq.op_type != "DequantizeLinear" or dq.domain not in DEFAULT_DOMAINS
            or dq.input[0] != node.output[0] or not _per_tensor(rw, dq)
            or str(rw.dtype(dq.output[0])) != "float32"):
        return None
    return node, dq


def _same_shape(rw: Rewrite, names: Sequence[str]) -> bool:
    """Whether the values have one known shape (a symbolic dimension, as a free batch, is
    the same size wherever the same name appears)."""
    shapes = [rw.shape(n) for n in names]
    first = shapes[0]
    return first is not None and None not in first and all(s == first for s in shapes[1:])


def convert_to_nchwc(model: onnx.ModelProto, ctx: PassContext) -> onnx.ModelProto:
    """Rewrite the convertible convolutions (see the module docstring) to NCHWc."""
    if not (has_op(model.graph, "Conv") or has_op(model.graph, "FusedConv", domains=(FUSED_DOMAIN,))) or not all(
        ctx.can_run(FUSED_DOMAIN, op) for op in _REQUIRED
    ):
        return model
    blocked_pools = {op: f"Nchwc{op}" for op in ("GlobalAveragePool", "MaxPool")
                     if ctx.can_run(FUSED_DOMAIN, f"Nchwc{op}")}
    rw = Rewrite(model, ctx.arrays)
    twin: dict[str, str] = {}       # NCHW value -> its blocked twin
    channels: dict[str, int] = {}   # NCHW value with a twin -> its channel count
    converted: set[int] = set()     # ids of the nodes being replaced

    # Which nodes convert depends only on the node (an input without a twin gets one from
    # a ReorderInput), and pools only on their producer: decide all first, so that each
    # value knows whether any reader stays in NCHW.
    for node in model.graph.node:
        if _convertible_conv(rw, node):
            converted.add(id(node))
            channels[node.output[0]] = int(rw.shape(node.input[1])[0])  # type: ignore[index,arg-type]
        elif (pair := _blocked_qdq_pair(rw, node, channels)) is not None:
            # A per-tensor QuantizeLinear → DequantizeLinear pair (a QDQ model's activation)
            # is elementwise: it runs on the blocked twin as it is.
            for member in pair:
                converted.add(id(member))
                channels[member.output[0]] = channels[node.input[0]]
        elif (
            node.op_type == "Add" and node.domain in DEFAULT_DOMAINS and not rw.is_removed(node)
            and all(i in channels for i in node.input) and _same_shape(rw, node.input)
            and channels[node.input[0]] == channels[node.input[1]]
        ):
            converted.add(id(node))  # a residual sum of two blocked values of one shape
            channels[node.output[0]] = channels[node.input[0]]
        elif (
            node.op_type in blocked_pools and node.domain in DEFAULT_DOMAINS
            and node.input[0] in channels and not rw.is_removed(node)
            and len([o for o in node.output if o]) == 1  # MaxPool's Indices stay NCHW
        ):
            converted.add(id(node))
            channels[node.output[0]] = channels[node.input[0]]
    if not converted:
        return model

    def blocked_input(name: str, before: list[onnx.NodeProto]) -> str:
        if name not in twin:
            twin[name] = rw.fresh_name(f"{name}_nchwc")
            before.append(helper.make_node("ReorderInput", [name], [twin[name]],
                                           name=rw.fresh_name(f"{name}_reorder_in"),
                                           domain=FUSED_DOMAIN))
        return twin[name]

    for node in model.graph.node:
        if id(node) not in converted:
            continue
        new: list[onnx.NodeProto] = []
        out = node.output[0]
        twin[out] = rw.fresh_name(f"{out}_nchwc")
        if node.op_type in blocked_pools:
            pool = helper.make_node(blocked_pools[node.op_type], [twin[node.input[0]]], [twin[out]],
                                    name=node.name, domain=FUSED_DOMAIN)
            pool.attribute.extend(node.attribute)
            new.append(pool)
        elif node.op_type in _ELEMENTWISE:
            # The same operator on the twins: data inputs swapped, scales and zero points kept.
            data = 2 if node.op_type == "Add" else 1
            inputs = [twin[i] if k < data else i for k, i in enumerate(node.input)]
            same = helper.make_node(node.op_type, inputs, [twin[out]], name=node.name)
            same.attribute.extend(node.attribute)
            new.append(same)
        else:
            x = node.input[0]
            c_in = rw.shape(node.input[1])[1]  # type: ignore[index]
            plain_ok = _int_attr(node, "group", 1) == 1 and int(c_in) < NCHWC_BLOCK  # type: ignore[arg-type]
            inputs = [x if (plain_ok and x not in twin) else blocked_input(x, new),
                      node.input[1], node.input[2] if len(node.input) > 2 else ""]
            if len(node.input) > 3 and node.input[3]:
                inputs.append(blocked_input(node.input[3], new))
            conv = helper.make_node("NchwcConv", inputs, [twin[out]], name=node.name, domain=FUSED_DOMAIN)
            conv.attribute.extend(a for a in node.attribute)
            new.append(conv)
        readers = rw.consumers.get(out, [])
        if out in rw.pinned or any(id(r) not in converted for r in readers):
            new.append(helper.make_node("ReorderOutput", [twin[out]], [out],
                                        name=rw.fresh_name(f"{out}_reorder_out"),
                                        domain=FUSED_DOMAIN, channels=channels[out]))
        rw.replace([node], new)
    rw.require_domain(FUSED_DOMAIN, FUSED_DOMAIN_VERSION)
    return rw.commit()
