"""com.microsoft operators of recent LLM architectures (linear attention, Engram,
hyper-connections), with onnxruntime's CPU kernels' semantics, checked against it in the tests.

* GatedAdd: ``X + round_T(Y * gate)`` (plain mode; the projected ``gate_weight`` mode is
  CUDA-only in onnxruntime and is a run-time error here too).
* LinearAttentionGate: ``decay = decay_scale * Softplus(a + dt_bias)`` and
  ``beta = Sigmoid(b)``, in float32, rounded once to the input type.
* HyperConnectionPreMix / HyperConnectionPostMix: the stream reduction and the stream mixing
  of hyper-connections, grouped (..., C, H) or flattened (..., C * H) streams, gates of any
  of the documented shapes; computed in float32 and rounded once.
* EngramGate: ``sigmoid(sign(d) sqrt(max(|d|, 1e-6))) * value`` with ``d`` the scaled dot
  product of the RMS-normalized key and query, and its optional RMS-normalized output.
* CausalConvWithState: the 1-D stateful causal depthwise convolution (channels first or
  ``channels_last``, ``dilation``, fused SiLU), written as a sum of shifted
  slices of [past_state | input].
* VarlenCausalConvWithState: the same over packed variable-length sequences, with the
  compact ``state_update`` capture.
* VarlenNGramHashMapping: contrib_misc's NGramHashMapping run request by request (the
  packed op equals it on each request alone, as checked against onnxruntime).
* LinearAttention: the recurrent linear / gated / delta / gated-delta attention, token by
  token over the sequence (the recurrence is sequential by definition; each step is batched
  over batch and heads on the backend), with GQA and inverse GQA.
* GatedDeltaNet: the same recurrence over packed requests (``cu_seqlens`` on the host, or
  uniform packing), value-major float32 states, fused softplus/sigmoid gates, beta sigmoid,
  q/k L2 normalization, packed QKV and the rank-4 spelling.

Known gaps (unregistered, or refused with InvalidGraph): ``state_window`` of
CausalConvWithState and LinearAttention (onnxruntime's CPU kernels refuse it: CUDA only);
CausalConvWithState with ndim 2/3 (onnxruntime's CPU kernel refuses them too) and its CUDA-only
extended attributes (state_update_capacity, state_length, state_channels_last, input_channels, input_channel_offset); VarlenCausalConvWithState's
CUDA dynamic mode (kernel_delta, previous_mask); VarlenNGramHashMapping's past_segment_ids,
present_segment_ids and compact capture, and GatedDeltaNet's compact ``state_update``
capture (their layouts were not pinned down against onnxruntime in the time at hand).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from onyxrt.errors import InvalidGraph
from onyxrt.kernels import KernelInfo

from .activation import _sigmoid
from .contrib_misc import NGramHashMapping
from .contrib_moe import _str_attr
from .library import OpKernel, library

MS = "com.microsoft"
_HALF = (np.float32, np.float16)


def _softplus(xp: Any, x: Any) -> Any:
    """log(1 + e^x) without overflow."""
    return xp.maximum(x, xp.asarray(0.0, dtype=x.dtype)) + xp.log1p(xp.exp(-xp.abs(x)))


@library.define("GatedAdd", 1, domain=MS, signature=(("T",) * 4, ("T",)), types={"T": _HALF})
class GatedAdd(OpKernel):
    """``X + round_T(Y * gate)``, gate (..., 1) broadcast over the last axis; float16 rounds
    the product before the add, as separate Mul and Add would."""

    def compute(self, x, y, gate, gate_weight=None):
        if gate_weight is not None:
            raise ValueError("gate_weight (projected mode) is CUDA-only in onnxruntime")
        if tuple(x.shape) != tuple(y.shape) or tuple(gate.shape) != tuple(x.shape[:-1]) + (1,):
            raise ValueError(f"X {x.shape} and Y {y.shape} must match, gate {gate.shape} be X's shape with last dim 1")
        prod = self.narrow(self.widen(y) * self.widen(gate), y)
        return (self.narrow(self.widen(x) + self.widen(prod), x),)


@library.define("LinearAttentionGate", 1, domain=MS, signature=(("T", "TF", "TF", "T"), ("T", "T")),
                types={"T": _HALF, "TF": (np.float32,)})
class LinearAttentionGate(OpKernel):
    """decay = decay_scale * Softplus(a + dt_bias), beta = Sigmoid(b), in float32."""

    def compute(self, a, dt_bias, decay_scale, b=None):
        xp = self.xp
        decay = decay_scale * _softplus(xp, self.widen(a) + dt_bias)
        beta = None if b is None else self.narrow(_sigmoid(xp, self.widen(b)), b)
        return (self.narrow(decay, a), beta)


class _HyperConnection(OpKernel):
    """Grouped/flattened streams and gate shapes of the hyper-connection operators."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.branches = int(info.attr("num_branches", 0))
        if self.branches < 0:
            raise InvalidGraph(f"{self.where()}: num_branches={self.branches} must be >= 0")

    def grouped(self, streams: Any) -> Any:
        """streams as float32 (..., C, H)."""
        s = self.widen(streams)
        if self.branches:
            if s.shape[-1] % self.branches:
                raise ValueError(f"streams' last dim {s.shape[-1]} is not a multiple of num_branches={self.branches}")
            s = self.xp.reshape(s, tuple(s.shape[:-1]) + (self.branches, s.shape[-1] // self.branches))
        return s

    def gate(self, g: Any, s: Any) -> Any:
        """A gate of shape (..., C), (..., C, 1), (..., C, H) or (..., C * H) as (..., C, 1|H)."""
        lead, c, h = tuple(s.shape[:-2]), s.shape[-2], s.shape[-1]
        g = self.xp.astype(g, s.dtype)
        shape = tuple(g.shape)
        if shape == lead + (c,):
            return self.xp.reshape(g, lead + (c, 1))
        if shape == lead + (c * h,) and self.branches:
            return self.xp.reshape(g, lead + (c, h))
        if shape in (lead + (c, 1), lead + (c, h)):
            return g
        raise ValueError(f"gate {shape} must be (..., C), (..., C, 1), (..., C, H) or flattened (..., C*H) for "
                         f"streams {lead + (c, h)}")


@library.define("HyperConnectionPreMix", 1, domain=MS, signature=(("T", "M"), ("T",)),
                types={"T": _HALF, "M": _HALF})
class HyperConnectionPreMix(_HyperConnection):
    """Y[..., h] = reduction_scale * sum_c X[..., c, h] * pre_mix[..., c, (h)]."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.scale = float(info.attr("reduction_scale", 1.0))

    def compute(self, streams, pre_mix):
        s = self.grouped(streams)
        y = self.scale * self.xp.sum(s * self.gate(pre_mix, s), axis=-2)
        return (self.narrow(y, streams),)


@library.define("HyperConnectionPostMix", 1, domain=MS, signature=(("T", "T", "M", "M"), ("T",)),
                types={"T": _HALF, "M": _HALF})
class HyperConnectionPostMix(_HyperConnection):
    """Y[..., k, h] = sum_c stream_mix[..., c, k] X[..., c, h] + post_mix[..., k, (h)] B[..., h]."""

    def compute(self, streams, block_output, post_mix, stream_mix=None):
        xp = self.xp
        s = self.grouped(streams)
        b = self.widen(block_output)
        if tuple(b.shape) != tuple(s.shape[:-2]) + (s.shape[-1],):
            raise ValueError(f"block_output {block_output.shape} must be {tuple(s.shape[:-2]) + (s.shape[-1],)}")
        mixed = s if stream_mix is None else xp.matmul(
            xp.permute_dims(xp.astype(stream_mix, s.dtype), tuple(range(s.ndim - 2)) + (s.ndim - 1, s.ndim - 2)), s)
        y = mixed + self.gate(post_mix, s) * b[..., None, :]
        return (self.narrow(xp.reshape(y, tuple(streams.shape)), streams),)


@library.define("EngramGate", 1, domain=MS, signature=(("T",) * 6, ("T", "T")), types={"T": _HALF})
class EngramGate(OpKernel):
    """Engram gate: gate * value over the hyper-connections (see the module docstring)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.eps = float(info.attr("epsilon", 1e-5))

    def rms(self, v: Any, scale: Any) -> Any:
        xp = self.xp
        return v / xp.sqrt(xp.mean(v * v, axis=-1, keepdims=True) + self.eps) * self.widen(scale)

    def compute(self, key, query, value, key_norm_scale, query_norm_scale, conv_norm_scale=None):
        xp = self.xp
        if key.ndim != 4 or tuple(query.shape) != tuple(key.shape) or tuple(value.shape) != (
                key.shape[0], key.shape[1], key.shape[3]):
            raise ValueError(f"key {key.shape} / query {query.shape} must be (B, S, C, H), value {value.shape} (B, S, H)")
        dot = xp.sum(self.rms(self.widen(key), key_norm_scale) * self.rms(self.widen(query), query_norm_scale),
                     axis=-1, keepdims=True) / math.sqrt(key.shape[-1])
        gate = _sigmoid(xp, xp.sign(dot) * xp.sqrt(xp.maximum(xp.abs(dot), xp.asarray(1e-6, dtype=dot.dtype))))
        out = gate * self.widen(value)[:, :, None, :]
        normed = None
        if conv_norm_scale is not None:
            normed = self.narrow(self.rms(out, conv_norm_scale), key)
        return (self.narrow(out, key), normed)


@library.define("CausalConvWithState", 1, domain=MS, signature=(("T",) * 4, ("T", "T", "T")),
                types={"T": (np.float32,)})
class CausalConvWithState(OpKernel):
    """Stateful causal depthwise 1-D convolution (see the module docstring)."""

    CUDA_ONLY = (("state_window", 0), ("state_update_capacity", 0), ("state_length", 0),
                 ("state_channels_last", -1), ("input_channels", 0), ("input_channel_offset", 0))

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.dilation = int(info.attr("dilation", 1))
        self.act = _str_attr(info, "activation", "none")
        self.last = int(info.attr("channels_last", 0))
        if int(info.attr("ndim", 1)) != 1:
            raise InvalidGraph(f"{self.where()}: ndim={info.attr('ndim')}; only 1 is supported")
        if self.dilation < 1 or self.act not in ("none", "silu", "swish"):
            raise InvalidGraph(f"{self.where()}: dilation={self.dilation} must be >= 1, activation "
                               f"{self.act!r} none/silu/swish")
        for name, default in self.CUDA_ONLY:
            if int(info.attr(name, default)) != default:
                raise InvalidGraph(f"{self.where()}: attribute {name} is CUDA-only")

    def conv(self, xf: Any, weight: Any, bias: Any, past: Any) -> tuple[Any, Any]:
        """The convolution of channels-first ``xf`` (B, C, L) after ``past`` (B, C, S):
        the output (B, C, L) and the new state (B, C, S)."""
        xp = self.xp
        b, c, length = xf.shape
        k = weight.shape[2]
        s = (k - 1) * self.dilation
        if weight.shape[0] != c:
            raise ValueError(f"weight {weight.shape} must have {c} channels")
        if tuple(past.shape) != (b, c, s):
            raise ValueError(f"past_state {past.shape} does not hold ({b}, {c}, {s})")
        v = xp.concat([past, xf], axis=2)
        y = xp.zeros((b, c, length), dtype=xf.dtype)
        for j in range(k):
            y = y + weight[:, 0, j][None, :, None] * v[:, :, j * self.dilation:j * self.dilation + length]
        if bias is not None:
            y = y + bias[None, :, None]
        if self.act != "none":
            y = y * _sigmoid(xp, y)
        return y, v[:, :, length:]

    def compute(self, x, weight, bias=None, past_state=None):
        xp = self.xp
        if x.ndim < 3 or weight.ndim != 3 or weight.shape[1] != 1:
            raise ValueError(f"input {x.shape} must be (B, C, L) or channels-last (B, L, d...), weight "
                             f"{weight.shape} (C, 1, K)")
        b = x.shape[0]
        if self.last:  # (B, L, d...) → (B, C, L)
            chan = tuple(x.shape[2:])
            xf = xp.permute_dims(xp.reshape(x, (b, x.shape[1], -1)), (0, 2, 1))
        elif x.ndim != 3:
            raise ValueError(f"channels-first input {x.shape} must be (B, C, L) for ndim=1")
        else:
            xf = x
        c = xf.shape[1]
        s = (weight.shape[2] - 1) * self.dilation
        if past_state is None:
            past = xp.zeros((b, c, s), dtype=x.dtype)
        else:
            past = past_state
            if self.last:
                past = xp.permute_dims(xp.reshape(past, (b, past.shape[1], -1)), (0, 2, 1))
        y, state = self.conv(xf, weight, bias, past)
        if self.last:
            y = xp.reshape(xp.permute_dims(y, (0, 2, 1)), tuple(x.shape))
            state = xp.reshape(xp.permute_dims(state, (0, 2, 1)), (b, s) + chan)
        return (y, state, None)


@library.define("VarlenCausalConvWithState", 1, domain=MS, signature=(("T", "T", "M", "T", "T", "M", "T", "T"),
                                                                     ("T", "T", "T")),
                types={"T": _HALF, "M": (np.int32,)}, host_inputs=(2, 5))
class VarlenCausalConvWithState(CausalConvWithState):
    """CausalConvWithState over packed token-major sequences (total_tokens, C): sequence i is
    rows [cu[i], cu[i + 1]) with its own ``initial_state`` row; ``final_state`` is each
    sequence's state after its last token. ``state_update`` (B, state_update_capacity, C)
    holds each sequence's first clamp(capture_count, 0, min(capacity, length)) tokens, zeros
    after. The sequence boundaries (a host input) drive a loop over the sequences; the CUDA
    dynamic mode (kernel_delta, previous_mask) is refused, as onnxruntime's CPU kernel.
    float16 is computed in float32 and rounded once."""

    CUDA_ONLY = ()

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.capacity = int(info.attr("state_update_capacity", 0))
        if not 0 <= self.capacity <= 8:
            raise InvalidGraph(f"{self.where()}: state_update_capacity={self.capacity} must be in [0, 8]")

    def compute(self, x, weight, cu_seqlens, bias=None, initial_state=None, capture_count=None,
                kernel_delta=None, previous_mask=None):
        xp = self.xp
        if kernel_delta is not None or previous_mask is not None:
            raise ValueError("the dynamic mode (kernel_delta, previous_mask) is CUDA-only")
        if initial_state is None:
            raise ValueError("initial_state is required")
        if (capture_count is None) != (self.capacity == 0):
            raise ValueError("capture_count is required exactly when state_update_capacity > 0")
        cu = self.host_ints(cu_seqlens)
        n = len(cu) - 1
        if x.ndim != 2 or n < 1 or cu[0] != 0 or cu[-1] != x.shape[0] or any(
                e <= s for s, e in zip(cu, cu[1:])):
            raise ValueError(f"cumulative_sequence_length {cu} must rise strictly from 0 to the {x.shape[0]} "
                             f"tokens of input {x.shape} (total_tokens, channels)")
        xw, w = self.widen(x), self.widen(weight)
        bw = None if bias is None else self.widen(bias)
        state = self.widen(initial_state)
        ys, finals = [], []
        for i in range(n):
            seq = xp.permute_dims(xw[cu[i]:cu[i + 1], :], (1, 0))[None, ...]
            y, st = self.conv(seq, w, bw, state[i:i + 1, ...])
            ys.append(xp.permute_dims(y[0, ...], (1, 0)))
            finals.append(st)
        out = (self.narrow(xp.concat(ys, axis=0), x), self.narrow(xp.concat(finals, axis=0), x))
        if not self.capacity:
            return out + (None,)
        counts = self.host_ints(capture_count)
        rows = []
        for i in range(n):
            m = max(0, min(counts[i], self.capacity, cu[i + 1] - cu[i]))
            rows.append(xp.concat([x[cu[i]:cu[i] + m, :], xp.zeros((self.capacity - m, x.shape[1]), dtype=x.dtype)],
                                  axis=0))
        return out + (xp.stack(rows, axis=0),)


def recurrence(xp: Any, q: Any, k: Any, v: Any, st: Any, g: Any, beta: Any, smap: Any, scale: float
               ) -> tuple[Any, Any]:
    """The linear-attention recurrence, token by token (each step batched over batch and
    heads): q (B, T, Ho, dk) at the output heads, k (B, T, Hs, dk) and v (B, T, Hs, dv) at
    the state heads, st (B, Hs, dk, dv); g: exp(decay) (B, T, Hs, dk or 1, 1) or None;
    beta (B, T, Hs or 1, 1, 1) or None (no delta retrieval); smap: the state head of each
    output head (None: the same). Returns the outputs (B, T, Ho, dv) and the last state."""
    b, t, ho, dv = q.shape[0], q.shape[1], q.shape[2], v.shape[3]
    outs = []
    for i in range(t):
        kt, vt = k[:, i, :, :, None], v[:, i, :, None, :]  # (B, H, dk, 1), (B, H, 1, dv)
        if g is not None:
            st = g[:, i, ...] * st
        if beta is not None:
            pred = xp.sum(st * kt, axis=2, keepdims=True)  # S^T k: (B, H, 1, dv)
            st = st + beta[:, i, ...] * kt * (vt - pred)
        else:
            st = st + kt * vt
        read = st if smap is None else xp.take(st, smap, axis=1)
        outs.append(scale * xp.sum(q[:, i, :, :, None] * read, axis=2))  # (B, Ho, dv)
    out = xp.stack(outs, axis=1) if t else xp.zeros((b, 0, ho, dv), dtype=q.dtype)
    return out, st


@library.define("LinearAttention", 1, domain=MS, signature=(("T",) * 6, ("T", "T")), types={"T": (np.float32,)})
class LinearAttention(OpKernel):
    """Recurrent linear attention (see the module docstring), token by token."""

    RULES = ("linear", "gated", "delta", "gated_delta")

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.hq = int(info.attr("q_num_heads", 0))
        self.hkv = int(info.attr("kv_num_heads", 0))
        self.rule = _str_attr(info, "update_rule", "gated_delta")
        self.scale = float(info.attr("scale", 0.0))
        if self.hq < 1 or self.hkv < 1 or self.rule not in self.RULES:
            raise InvalidGraph(f"{self.where()}: q_num_heads/kv_num_heads ({self.hq}, {self.hkv}) must be >= 1, "
                               f"update_rule {self.rule!r} one of {self.RULES}")
        if int(info.attr("state_window", 0)):
            raise InvalidGraph(f"{self.where()}: state_window is CUDA-only (as onnxruntime's CPU kernel)")
        if max(self.hq, self.hkv) % min(self.hq, self.hkv):
            raise InvalidGraph(f"{self.where()}: heads {self.hq} and {self.hkv} must divide one another")

    def compute(self, query, key, value, past_state=None, decay=None, beta=None):
        xp = self.xp
        b, t = query.shape[0], query.shape[1]
        dk, dv = query.shape[2] // self.hq, value.shape[2] // self.hkv
        if key.shape[2] != self.hkv * dk or tuple(key.shape[:2]) != (b, t) or tuple(value.shape[:2]) != (b, t):
            raise ValueError(f"query {query.shape}, key {key.shape}, value {value.shape} do not fit "
                             f"q_num_heads={self.hq}, kv_num_heads={self.hkv}")
        gated, delta = self.rule in ("gated", "gated_delta"), self.rule in ("delta", "gated_delta")
        if (gated and decay is None) or (delta and beta is None):
            raise ValueError(f"update_rule {self.rule!r} needs {'decay' if gated else ''} {'beta' if delta else ''}")
        scale = self.scale or 1.0 / math.sqrt(dk)
        q = xp.reshape(query, (b, t, self.hq, dk))
        k = xp.reshape(key, (b, t, self.hkv, dk))
        v = xp.reshape(value, (b, t, self.hkv, dv))
        if gated:  # per key dimension, or per head (broadcast over d_k)
            g = xp.exp(xp.reshape(decay, (b, t, self.hkv, -1)))[..., None]
            if g.shape[3] not in (1, dk):
                raise ValueError(f"decay {decay.shape} must be (B, T, {self.hkv * dk}) or (B, T, {self.hkv})")
        if delta:
            bt = xp.reshape(beta, (b, t, -1))
            if bt.shape[2] not in (1, self.hkv):
                raise ValueError(f"beta {beta.shape} must be (B, T, {self.hkv}) or (B, T, 1)")
            bt = bt[..., None, None]
        if past_state is None:
            st = xp.zeros((b, self.hkv, dk, dv), dtype=query.dtype)
        else:
            st = past_state
            if tuple(st.shape) != (b, self.hkv, dk, dv):
                raise ValueError(f"past_state {past_state.shape} does not hold ({b}, {self.hkv}, {dk}, {dv}) per slot")
        heads = max(self.hq, self.hkv)
        # the query head and the state (kv) head of each output head
        q = xp.take(q, xp.asarray(np.arange(heads) // (heads // self.hq)), axis=2)
        smap = None if heads == self.hkv else xp.asarray(np.arange(heads) // (heads // self.hkv))
        out, st = recurrence(xp, q, k, v, st, g if gated else None, bt if delta else None, smap, scale)
        return (xp.reshape(out, (b, t, heads * dv)), st)


@library.define("VarlenNGramHashMapping", 1, domain=MS,
                signature=(("M", "M", "M", "S", "M", "M", "M", "S", "S", "S"), ("M", "M", "S", "M")),
                types={"M": (np.int32, np.int64), "S": (np.int32,)}, host_inputs=(3, 6, 9))
class VarlenNGramHashMapping(NGramHashMapping):
    """NGramHashMapping over packed variable-length requests: request i is ids [cu[i],
    cu[i + 1]) with its own past_ids row; the result is NGramHashMapping's run on each
    request alone (checked against onnxruntime), so it delegates request by request. Not
    supported (refused): past_segment_ids, present_segment_ids and the compact capture
    (capture_count, state_update)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        outs = tuple(info.output_names) + ("", "")
        if outs[2] or outs[3] or int(info.attr("state_update_capacity", 0)):
            raise InvalidGraph(f"{self.where()}: present_segment_ids and the state_update capture are not supported")

    def compute(self, ids, multipliers, vocab_sizes, cu_seqlens, past_ids=None, head_offsets=None,
                eos_token_id=None, segment_ids=None, past_segment_ids=None, capture_count=None):
        xp = self.xp
        if past_segment_ids is not None or capture_count is not None:
            raise ValueError("past_segment_ids and capture_count are not supported")
        cu = self.host_ints(cu_seqlens)
        if ids.ndim != 1 or len(cu) < 2 or cu[0] != 0 or cu[-1] != ids.shape[0] or any(
                e <= s for s, e in zip(cu, cu[1:])):
            raise ValueError(f"cumulative_sequence_length {cu} must rise strictly from 0 to the {ids.shape[0]} "
                             f"tokens of input_ids {ids.shape}")
        hashes, present = [], []
        for i, (s, e) in enumerate(zip(cu, cu[1:])):
            y, p = super().compute(ids[None, s:e], multipliers, vocab_sizes,
                                   None if past_ids is None else past_ids[i:i + 1, ...], head_offsets, eos_token_id,
                                   None if segment_ids is None else segment_ids[None, s:e])
            hashes.append(y[0, ...])
            present.append(p)
        return (xp.concat(hashes, axis=0), xp.concat(present, axis=0), None, None)


@library.define("GatedDeltaNet", 1, domain=MS,
                signature=(("T", "T", "T", "TI", "TG", "TG", "TS", "TS", "TS", "TI", "TI"), ("T", "TS", "TS")),
                types={"T": _HALF, "TI": (np.int32,), "TG": _HALF, "TS": (np.float32,)}, host_inputs=(3, 9, 10))
class GatedDeltaNet(OpKernel):
    """Packed (token-major) gated delta network: :func:`recurrence` per request, with
    value-major states (B, Hv, dv, dk), inverse GQA (each query/key head shared by Hv / Hq
    value heads), rank-3 (tokens, H, d) or rank-4 (B, S, H, d) spelling, packed QKV, ragged
    requests (``cu_seqlens``, a host input) or uniform packing, the fused gate activations
    (softplus, sigmoid/kda), ``beta_activation`` and ``qk_l2_norm``; gates and state in
    float32, the output rounded once to the input type. The compact ``state_update`` capture
    is refused (InvalidGraph)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.rule = _str_attr(info, "update_rule", "gated_delta")
        self.gate_act = _str_attr(info, "gate_activation", "none")
        self.beta_act = _str_attr(info, "beta_activation", "none")
        self.scale = float(info.attr("scale", 0.0))
        self.l2 = bool(info.attr("qk_l2_norm", 0))
        self.lower = float(info.attr("gate_lower_bound", -5.0))
        if (self.rule not in LinearAttention.RULES or self.gate_act not in ("none", "softplus", "qwen", "sigmoid", "kda")
                or self.beta_act not in ("none", "sigmoid")):
            raise InvalidGraph(f"{self.where()}: update_rule {self.rule!r}, gate_activation {self.gate_act!r} or "
                               f"beta_activation {self.beta_act!r} is not one onnxruntime defines")
        if int(info.attr("state_update_capacity", 0)):
            raise InvalidGraph(f"{self.where()}: the compact state_update capture is not supported")

    def l2norm(self, x: Any) -> Any:
        xp = self.xp
        return x / xp.sqrt(xp.maximum(xp.sum(x * x, axis=-1, keepdims=True), xp.asarray(1e-12, dtype=x.dtype)))

    def gates(self, decay: Any, beta: Any, a_log: Any, dt_bias: Any, tokens: int, hv: int, dk: int) -> tuple[Any, Any]:
        """exp(g) (tokens, Hv, dk or 1, 1) and beta (tokens, Hv, 1, 1), float32 (None when unused)."""
        xp = self.xp
        gated, delta = self.rule in ("gated", "gated_delta"), self.rule in ("delta", "gated_delta")
        if gated != (decay is not None) or delta != (beta is not None):  # as onnxruntime: exactly those
            raise ValueError(f"decay and beta presence must match update_rule {self.rule!r}")
        g = bt = None
        if gated:
            d = xp.reshape(self.widen(decay), (tokens, hv, -1))
            if d.shape[2] not in (1, dk):
                raise ValueError(f"decay {decay.shape} must be (tokens, {hv}) or (tokens, {hv}, {dk})")
            if self.gate_act != "none":
                if a_log is None or dt_bias is None:
                    raise ValueError(f"gate_activation {self.gate_act!r} needs a_log and dt_bias")
                bias = xp.reshape(dt_bias, (1, hv, -1))
                a = xp.reshape(xp.exp(a_log), (1, hv, 1))
                if self.gate_act in ("softplus", "qwen"):
                    d = -a * _softplus(xp, d + bias)
                else:
                    d = self.lower * _sigmoid(xp, a * (d + bias))
            g = xp.exp(d)[..., None]
        if delta:
            bt = xp.reshape(self.widen(beta), (tokens, hv))
            if self.beta_act == "sigmoid":
                bt = _sigmoid(xp, bt)
            bt = bt[..., None, None]
        return g, bt

    def compute(self, query, key=None, value=None, cu_seqlens=None, decay=None, beta=None, initial_state=None,
                a_log=None, dt_bias=None, capture_count=None, state_update_active=None):
        xp = self.xp
        rank4 = query.ndim == 4
        if rank4 and cu_seqlens is not None:
            raise ValueError("cu_seqlens needs the rank-3 (tokens, heads, size) spelling")
        tokens = query.shape[0] * query.shape[1] if rank4 else query.shape[0]
        qw = self.widen(query)
        if key is None and value is None:  # packed QKV: head sizes from the state
            if initial_state is None:
                raise ValueError("packed QKV needs initial_state")
            hv, dv, dk = initial_state.shape[1:]
            flat = xp.reshape(qw, (tokens, -1))
            hq = (flat.shape[1] - hv * dv) // (2 * dk)
            if 2 * hq * dk + hv * dv != flat.shape[1] or hq < 1:
                raise ValueError(f"packed QKV width {flat.shape[1]} does not fit the state {initial_state.shape}")
            q = xp.reshape(flat[:, :hq * dk], (tokens, hq, dk))
            k = xp.reshape(flat[:, hq * dk:2 * hq * dk], (tokens, hq, dk))
            v = xp.reshape(flat[:, 2 * hq * dk:], (tokens, hv, dv))
        elif key is None or value is None:
            raise ValueError("give key and value, or neither (packed QKV)")
        else:
            q = xp.reshape(qw, (tokens,) + tuple(query.shape[-2:]))
            k = xp.reshape(self.widen(key), (tokens,) + tuple(key.shape[-2:]))
            v = xp.reshape(self.widen(value), (tokens,) + tuple(value.shape[-2:]))
        hq, dk, hv, dv = q.shape[1], q.shape[2], v.shape[1], v.shape[2]
        if k.shape[1] != hq or k.shape[2] != dk or hv % hq:
            raise ValueError(f"heads: query {hq}, key {k.shape[1]}, value {hv}: num_heads_q must equal "
                             f"num_heads_k and divide num_heads_v")
        if self.l2:
            q, k = self.l2norm(q), self.l2norm(k)
        heads = xp.asarray(np.arange(hv) // (hv // hq))
        q, k = xp.take(q, heads, axis=1), xp.take(k, heads, axis=1)  # at the value heads
        g, bt = self.gates(decay, beta, a_log, dt_bias, tokens, hv, dk)
        if cu_seqlens is not None:
            cu = self.host_ints(cu_seqlens)
        else:
            if initial_state is None and not rank4:
                raise ValueError("uniform packing (no cu_seqlens) needs initial_state for the batch size")
            n = query.shape[0] if rank4 else initial_state.shape[0]
            if tokens % n:
                raise ValueError(f"{tokens} tokens do not split evenly over {n} requests")
            cu = list(range(0, tokens + 1, tokens // n)) if tokens else [0] * (n + 1)
        n = len(cu) - 1
        if cu[0] != 0 or cu[-1] != tokens or any(e < s for s, e in zip(cu, cu[1:])):
            raise ValueError(f"cu_seqlens {cu} must rise from 0 to the {tokens} tokens")
        if initial_state is None:
            state = xp.zeros((n, hv, dk, dv), dtype=self.backend.dtype(np.float32))
        else:
            if tuple(initial_state.shape) != (n, hv, dv, dk):
                raise ValueError(f"initial_state {initial_state.shape} must be ({n}, {hv}, {dv}, {dk})")
            state = xp.permute_dims(initial_state, (0, 1, 3, 2))  # key-major for the recurrence
        scale = self.scale or 1.0 / math.sqrt(dk)
        outs, finals = [], []
        for i in range(n):
            s, e = cu[i], cu[i + 1]

            def part(a, s=s, e=e):
                return None if a is None else a[None, s:e, ...]

            o, st = recurrence(xp, part(q), part(k), part(v), state[i:i + 1, ...], part(g), part(bt), None, scale)
            outs.append(o[0, ...])
            finals.append(st)
        out = xp.concat(outs, axis=0) if outs else xp.zeros((0, hv, dv), dtype=qw.dtype)
        out = xp.reshape(out, tuple(query.shape[:2]) + (hv, dv) if rank4 else (tokens, hv, dv))
        final = xp.permute_dims(xp.concat(finals, axis=0), (0, 1, 3, 2))
        return (self.narrow(out, query), final, None)
