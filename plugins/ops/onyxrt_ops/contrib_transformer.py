"""com.microsoft transformer operators (what onnxruntime's transformer optimizer and
its newer fusions emit), written once over an array namespace.

* activations: Gelu, BiasGelu, FastGelu (tanh form, optional bias), QuickGelu,
  ScaledSiLU — the library's :class:`~onyxrt_ops.activation.Gelu` subclassed;
* normalizations: SkipLayerNormalization, SkipSimplifiedLayerNormalization (with the
  optional mean / inv_std_var / input_skip_bias_sum outputs), SimplifiedLayerNormalization
  (RMS norm; onnxruntime registers it in the *default* domain, version 1, where onnx has
  no schema), EmbedLayerNormalization (word + position (+ segment) embeddings, layer norm,
  mask index = the number of ones in each mask row), GatedRMSNorm, BranchwiseRMSNorm;
* attention: Attention (merged QKV projection, every mask_index form onnxruntime's CPU
  takes plus the 4-D Megatron mask of its CUDA kernel, past/present, unidirectional,
  qkv_hidden_sizes), MultiHeadAttention (separate, packed-KV, packed-QKV or (B, N, L, H)
  key/value, bias, key_padding_mask, attention_bias, past/present key and value),
  DecoderMaskedMultiHeadAttention (shared past/present buffers, beam cache_indirection,
  cross attention) and GroupQueryAttention (kv_num_heads < num_heads, past KV with
  seqlens_k, rotary with cos/sin caches, local_window_size, softcap, attention_bias)
  share one core, :meth:`AttentionCore.attend` (scaled dot product + additive mask +
  softmax); rotary embedding (:meth:`RotaryMixin.rotate`) is shared by RotaryEmbedding,
  MRotaryEmbedding and GroupQueryAttention;
* CUDA-provider fusions (no CPU kernel in onnxruntime; written from the spec): BiasAdd,
  BiasSplitGelu, GemmFastGelu, BiasSoftmax, GroupNorm, SkipGroupNorm.

Semantics are onnxruntime's CPU kernels': masks are *added* to the scaled scores
(``mask_filter_value`` where a mask says 0, the float32 lowest value where causality
forbids), so a row that its mask forbids entirely falls back to the unmasked softmax as
onnxruntime's does; GroupQueryAttention forbids keys outright (causal, window, beyond an
entry's total). float16 inputs (registered where onnxruntime's CPU or CUDA provider
registers them) are computed in float32 and rounded once (ScaledSiLU rounds at each of
its three steps, as its schema says). Where onnxruntime's CPU refuses a form its CUDA
kernel takes (packed KV/QKV in MultiHeadAttention and DecoderMaskedMultiHeadAttention,
the 4-D Attention mask) it is computed here.

Known gaps (refused with a clear error, never computed wrongly): Attention's
past_present_share_buffer, do_rotary and the (3 * batch + 2) mask_index form (onnxruntime's
CPU refuses them too); MultiHeadAttention's cache_indirection and qk output;
DecoderMaskedMultiHeadAttention's output_qk and self attention without a shared buffer
(as onnxruntime's CPU); GroupQueryAttention's quantized KV cache, head_sink /
smooth_softmax, q/k norm weights, query_seqlens, sliding_window_cache and qk_output;
(M)RotaryEmbedding's is_packed_batching. SparseAttention is not offered: onnxruntime's
CPU kernel (the oracle) needs its caches bound as one buffer, and under IO binding its
outputs did not match a block-masked GroupQueryAttention here, so its semantics are not
established.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from onyxrt.errors import InvalidGraph
from onyxrt.kernels import KernelInfo

from .activation import FloatAttrs, Gelu, _sigmoid
from .library import library

# The operators are reached through ``library`` (this module registers them on import).
__all__: list[str] = []

_MS = "com.microsoft"
_F = (np.float32, np.float16)
_LOWEST = float(np.finfo(np.float32).min)


def _bf16() -> tuple[Any, ...]:
    try:
        import ml_dtypes

        return (ml_dtypes.bfloat16,)
    except ImportError:  # pragma: no cover - ml_dtypes ships with onnx
        return ()


_F4 = (np.float32, np.float64, np.float16) + _bf16()
# onnxruntime's CPU registers float64 skip norms, but their schema refuses a double node.
_F3 = (np.float32, np.float16) + _bf16()


# ------------------------------------------------------------------------ activations


@library.define("Gelu", 1, domain=_MS, types={"T": _F}, needs=("erf",), signature=(("T",), ("T",)))
class ContribGelu(Gelu):
    """y = 0.5 x (1 + erf(x / sqrt 2)): the ONNX Gelu without the ``approximate`` form."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.approximate = "none"

    def compute(self, x, bias=None):
        if bias is None:
            return super().compute(x)
        if bias.ndim != 1 or bias.shape[0] != (x.shape[-1] if x.ndim else -1):
            raise ValueError(f"bias must be 1-D of the input's last dimension, got {tuple(bias.shape)}")
        return (self.narrow(super().compute(self.widen(x) + self.widen(bias))[0], x),)


@library.define("BiasGelu", 1, domain=_MS, types={"T": _F}, needs=("erf",), signature=(("T", "T"), ("T",)))
class BiasGelu(ContribGelu):
    """y = Gelu(a + b), ``b`` a 1-D bias along the last axis."""


# The tanh form: no erf needed (each definition declares its own needs).
@library.define("FastGelu", 1, domain=_MS, types={"T": _F}, signature=(("T", "T"), ("T",)))
class FastGelu(ContribGelu):
    """y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) of x (+ the optional bias)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.approximate = "tanh"


@library.define("QuickGelu", 1, domain=_MS, types={"T": _F}, signature=(("T",), ("T",)))
class QuickGelu(FloatAttrs):
    """y = x * sigmoid(alpha x) (alpha defaults to 1.702)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.alpha = self.float_attr("alpha", 1.702)

    def compute(self, x):
        w = self.widen(x)
        return (self.narrow(w * _sigmoid(self.xp, self.alpha * w), x),)


# --------------------------------------------------------------------- normalizations


class Norm(FloatAttrs):
    """Base of the layer norms: ``epsilon`` and :meth:`normalize` over the last axes."""

    simplified = False
    default_epsilon = 1e-12  # the com.microsoft norms' default; ONNX-style ones use 1e-5

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.epsilon = self.float_attr("epsilon", self.default_epsilon)
        if self.epsilon < 0:
            raise InvalidGraph(f"{self.where()}: epsilon={self.epsilon} must be >= 0")

    def vector(self, v: Any, h: int, name: str) -> Any:
        """A per-hidden-unit parameter widened, or ValueError when it is not (h,)."""
        if v.ndim != 1 or v.shape[0] != h:
            raise ValueError(f"{name} must have shape ({h},), got {tuple(v.shape)}")
        return self.widen(v)

    def normalize(self, w: Any, axes: tuple[int, ...], gamma: Any, beta: Any = None) -> tuple[Any, Any, Any]:
        """(y, mean, inv_std) of float32/64 ``w`` over ``axes``: a layer norm, or the RMS
        norm when :attr:`simplified` (mean is then the mean square's complement: 0)."""
        xp = self.xp
        if self.simplified:
            mean = xp.zeros((), dtype=w.dtype)
            d = w
        else:
            mean = xp.mean(w, axis=axes, keepdims=True)
            d = w - mean
        inv_std = 1.0 / xp.sqrt(xp.mean(d * d, axis=axes, keepdims=True) + self.epsilon)
        y = d * inv_std * gamma
        return (y if beta is None else y + beta), mean, inv_std


class SkipNorm(Norm):
    """input + skip (+ bias), then a layer norm over the last axis; the sum itself is the
    fourth output."""

    def compute(self, x, skip, gamma, beta=None, bias=None):
        if self.simplified:  # SkipSimplifiedLayerNormalization has no beta
            beta, bias = None, beta
        if x.ndim not in (2, 3):
            raise ValueError(f"input must be 2-D or 3-D, got shape {tuple(x.shape)}")
        h = x.shape[-1]
        if skip.shape != x.shape and (skip.ndim < 2 or skip.shape[-2:] != x.shape[-2:] or math.prod(skip.shape[:-2]) != 1):
            raise ValueError(f"skip {tuple(skip.shape)} does not match input {tuple(x.shape)}")
        w = self.widen(x) + self.widen(skip)
        if bias is not None:
            w = w + self.vector(bias, h, "bias")
        g = self.vector(gamma, h, "gamma")
        b = None if beta is None else self.vector(beta, h, "beta")
        y, mean, inv_std = self.normalize(w, (-1,), g, b)
        f32 = self.backend.dtype(np.float32)
        stat_shape = tuple(x.shape[:-1]) + (1,)
        mean = self.xp.broadcast_to(mean, stat_shape)
        return (self.narrow(y, x), self.xp.astype(mean, f32), self.xp.astype(inv_std, f32), self.narrow(w, x))


_SKIP_SIG = (("T", "T", "T", "T", "T"), ("T", "U", "U", "T"))


@library.define("SkipLayerNormalization", 1, domain=_MS, types={"T": _F3, "U": (np.float32,)}, signature=_SKIP_SIG)
class SkipLayerNormalization(SkipNorm):
    """LayerNorm(input + skip + bias) * gamma + beta, over the hidden (last) axis."""


@library.define("SkipSimplifiedLayerNormalization", 1, domain=_MS, types={"T": _F3, "U": (np.float32,)},
                signature=(_SKIP_SIG[0][:4], _SKIP_SIG[1]))
class SkipSimplifiedLayerNormalization(SkipNorm):
    """RMSNorm(input + skip + bias) * gamma; the mean output is 0 (no centring)."""

    simplified = True


@library.define("SimplifiedLayerNormalization", 1, domain="", types={"T": _F4, "U": (np.float32,)},
                signature=(("T", "T"), ("T", "U")))
class SimplifiedLayerNormalization(Norm):
    """RMS norm over axes [axis, rank): y = x / sqrt(mean(x^2) + epsilon) * scale;
    inv_std_var the second output (float32)."""

    simplified = True
    default_epsilon = 1e-5

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.axis = int(info.attr("axis", -1))

    def compute(self, x, scale):
        r = x.ndim
        axis = self.axis + r if self.axis < 0 else self.axis
        if not 0 <= axis < r:
            raise ValueError(f"axis {self.axis} is out of range for rank {r}")
        axes = tuple(range(axis, r))
        if tuple(scale.shape) != tuple(x.shape[axis:]) and math.prod(scale.shape) != math.prod(x.shape[axis:]):
            raise ValueError(f"scale {tuple(scale.shape)} does not match the normalized shape {tuple(x.shape[axis:])}")
        g = self.xp.reshape(self.widen(scale), tuple(x.shape[axis:]))
        y, _, inv_std = self.normalize(self.widen(x), axes, g)
        return self.narrow(y, x), self.xp.astype(inv_std, self.backend.dtype(np.float32))


@library.define("EmbedLayerNormalization", 1, domain=_MS, types={"T": _F, "T1": (np.int32,)},
                signature=(("T1", "T1", "T", "T", "T", "T", "T", "T1", "T1"), ("T", "T1", "T")))
class EmbedLayerNormalization(Norm):
    """LayerNorm(word[input_ids] + position[position_ids or 0..S-1] + segment[segment_ids])
    * gamma + beta; mask_index the number of ones in each row of the mask (0 without a
    mask); embedding_sum the sum before normalization."""

    def lookup(self, table: Any, ids: Any, name: str) -> Any:
        """Rows ``ids`` of ``table`` (ValueError for an id out of range)."""
        xp = self.xp
        if table.ndim != 2:
            raise ValueError(f"{name} must be 2-D, got shape {tuple(table.shape)}")
        if math.prod(ids.shape) and (bool(xp.any(ids < 0)) or bool(xp.any(ids >= table.shape[0]))):
            raise ValueError(f"{name} ids must be in [0, {table.shape[0]})")
        rows = xp.take(self.widen(table), xp.reshape(ids, (-1,)), axis=0)
        return xp.reshape(rows, tuple(ids.shape) + (table.shape[1],))

    def compute(self, input_ids, segment_ids, word, position, segment, gamma, beta, mask=None, position_ids=None):
        xp = self.xp
        if input_ids.ndim != 2:
            raise ValueError(f"input_ids must be 2-D (batch, sequence), got shape {tuple(input_ids.shape)}")
        b, s = input_ids.shape
        h = word.shape[-1]
        if position_ids is None:
            position_ids = xp.reshape(xp.arange(s, dtype=input_ids.dtype), (1, s))
        w = self.lookup(word, input_ids, "word_embedding") + self.lookup(position, position_ids, "position_embedding")
        if (segment_ids is None) != (segment is None):
            raise ValueError("segment_ids and segment_embedding must be given together")
        if segment is not None:
            w = w + self.lookup(segment, segment_ids, "segment_embedding")
        w = xp.broadcast_to(w, (b, s, h))
        y, _, _ = self.normalize(w, (-1,), self.vector(gamma, h, "gamma"), self.vector(beta, h, "beta"))
        i32 = self.backend.dtype(np.int32)
        index = xp.zeros((b,), dtype=i32) if mask is None else xp.astype(xp.sum(xp.astype(mask != 0, i32), axis=1), i32)
        return self.narrow(y, word), index, self.narrow(w, word)


# -------------------------------------------------------------------------- attention


class AttentionCore(FloatAttrs):
    """The shared attention: ``num_heads``, ``scale``, ``mask_filter_value`` and
    ``unidirectional`` attributes, :meth:`attend`, and the additive masks."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.num_heads = int(info.attr("num_heads", 0))
        if self.num_heads < 1:
            raise InvalidGraph(f"{self.where()}: num_heads={self.num_heads} must be set and >= 1")
        self.scale = self.float_attr("scale", 0.0)
        self.mask_filter_value = self.float_attr("mask_filter_value", -10000.0)
        self.causal = bool(info.attr("unidirectional", 0))

    def heads(self, x: Any, n: int) -> Any:
        """(B, S, n*H) → (B, n, S, H)."""
        b, s, d = x.shape
        if d % n:
            raise ValueError(f"hidden size {d} is not a multiple of the {n} heads")
        return self.xp.permute_dims(self.xp.reshape(x, (b, s, n, d // n)), (0, 2, 1, 3))

    def attend(self, q: Any, k: Any, v: Any, bias: Any = None, allowed: Any = None,
               softcap: float = 0.0) -> Any:
        """softmax(scale q kᵀ (softcapped) + bias, masked where not ``allowed``) v for q
        (B, N, S, H), k (B, Nk, T, H), v (B, Nk, T, Hv) (each kv head serving N / Nk query
        heads), float32; returns (B, S, N * Hv)."""
        xp = self.xp
        b, n, s, hd = q.shape
        nk, t = k.shape[1], k.shape[2]
        if nk != n:  # grouped query: kv head j serves query heads j*g .. j*g + g - 1
            g = n // nk
            k = xp.reshape(xp.broadcast_to(k[:, :, None, ...], (b, nk, g, t, hd)), (b, n, t, hd))
            v = xp.reshape(xp.broadcast_to(v[:, :, None, ...], (b, nk, g, t, v.shape[3])), (b, n, t, v.shape[3]))
        scale = self.scale if self.scale != 0.0 else 1.0 / math.sqrt(hd)
        scores = xp.matmul(q, xp.permute_dims(k, (0, 1, 3, 2))) * scale
        if softcap > 0.0:
            scores = softcap * xp.tanh(scores / softcap)
        if bias is not None:
            scores = scores + bias
        if allowed is not None:
            scores = xp.where(allowed, scores, -xp.inf)
        if t:
            e = xp.exp(scores - xp.max(scores, axis=-1, keepdims=True))
            scores = e / xp.sum(e, axis=-1, keepdims=True)
        out = xp.matmul(scores, v)
        return xp.reshape(xp.permute_dims(out, (0, 2, 1, 3)), (b, s, n * v.shape[3]))

    def key_mask(self, mask: Any, b: int, s: int, t: int, past: int) -> Any:
        """The additive mask (B, 1, S, T) (float32, 0 where attended) of a mask_index /
        key_padding_mask and of ``unidirectional``; None when neither applies."""
        xp = self.xp
        f32 = self.backend.dtype(np.float32)
        add = None
        if mask is not None:
            shape = tuple(mask.shape)
            if mask.ndim == 1 and shape[0] in (b, 2 * b):
                pos = xp.reshape(xp.arange(t, dtype=mask.dtype), (1, t))
                end = xp.reshape(mask[:b], (b, 1))
                bad = pos >= end
                if shape[0] == 2 * b:  # left padding: the start positions follow
                    bad = bad | (pos < xp.reshape(mask[b:], (b, 1)))
                bad = xp.reshape(bad, (b, 1, 1, t))
            elif mask.ndim == 2 and shape == (b, t):
                bad = xp.reshape(mask == 0, (b, 1, 1, t))
            elif mask.ndim == 3 and shape == (b, s, t):
                bad = xp.reshape(mask == 0, (b, 1, s, t))
            elif mask.ndim == 4 and shape[:2] == (b, 1) and shape[2] >= past + s and shape[3] >= t:
                # Megatron's (B, 1, max, max) mask: the rows of this step's queries.
                bad = mask[:, :, past:past + s, :t] == 0
            else:
                raise ValueError(f"mask of shape {shape} fits none of the forms for batch {b}, "
                                 f"sequence {s}, total sequence {t}")
            add = xp.where(bad, xp.asarray(self.mask_filter_value, dtype=f32), xp.asarray(0.0, dtype=f32))
        if self.causal:
            later = (xp.reshape(xp.arange(t), (1, t)) > xp.reshape(xp.arange(s), (s, 1)) + past)
            low = xp.asarray(_LOWEST, dtype=f32)
            add = (xp.where(later, low, xp.asarray(0.0, dtype=f32)) if add is None else xp.where(later, low, add))
            add = xp.reshape(add, (-1, 1, s, t)) if add.ndim != 4 else add
        return add

    def with_bias(self, add: Any, attention_bias: Any, s: int, t: int) -> Any:
        """``add`` plus the attention_bias input (B or 1, N or 1, S, T), widened."""
        if attention_bias is None:
            return add
        shape = tuple(attention_bias.shape)
        if attention_bias.ndim != 4 or shape[2:] != (s, t):
            raise ValueError(f"attention_bias must be (batch or 1, heads or 1, {s}, {t}), got {shape}")
        w = self.widen(attention_bias)
        return w if add is None else add + w


@library.define("Attention", 1, domain=_MS, types={"T": _F, "M": (np.int32,)},
                signature=(("T", "T", "T", "M", "T", "T", "M"), ("T", "T")))
class Attention(AttentionCore):
    """Self attention with the Q/K/V projection merged into one weight (input_hidden,
    hidden + hidden + v_hidden) and bias; past (2, B, N, P, H) prepended to this step's
    keys and values, which with them are the present output."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        sizes = [int(v) for v in info.attr("qkv_hidden_sizes", [])]
        if sizes and (len(sizes) != 3 or any(v <= 0 or v % self.num_heads for v in sizes) or sizes[0] != sizes[1]):
            raise InvalidGraph(f"{self.where()}: qkv_hidden_sizes={sizes} must be three positive multiples "
                               f"of num_heads={self.num_heads}, the first two equal")
        self.sizes = sizes
        for name in ("do_rotary", "past_present_share_buffer"):
            if int(info.attr(name, 0)):
                raise InvalidGraph(f"{self.where()}: {name}=1 is not supported (onnxruntime's CPU neither)")

    def compute(self, x, weights, bias=None, mask_index=None, past=None, attention_bias=None,
                past_sequence_length=None):
        xp = self.xp
        if x.ndim != 3 or weights.ndim != 2 or weights.shape[0] != x.shape[2]:
            raise ValueError(f"input (B, S, D) {tuple(x.shape)} and weights (D, 3H) {tuple(weights.shape)} do not match")
        sizes = self.sizes or [weights.shape[1] // 3] * 3
        if sum(sizes) != weights.shape[1] or (not self.sizes and weights.shape[1] % 3):
            raise ValueError(f"weights' second dimension {weights.shape[1]} is not the sum of Q/K/V sizes {sizes}")
        b, s, _ = x.shape
        qkv = xp.matmul(self.widen(x), self.widen(weights))
        if bias is not None:
            if tuple(bias.shape) != (weights.shape[1],):
                raise ValueError(f"bias must have shape ({weights.shape[1]},), got {tuple(bias.shape)}")
            qkv = qkv + self.widen(bias)
        hq, hk = sizes[0], sizes[0] + sizes[1]
        n = self.num_heads
        q, k, v = (self.heads(qkv[..., lo:hi], n) for lo, hi in ((0, hq), (hq, hk), (hk, sum(sizes))))
        p = 0
        if past is not None:
            if past.ndim != 5 or past.shape[0] != 2 or tuple(past.shape[1:3]) != (b, n) or past.shape[4] != k.shape[3]:
                raise ValueError(f"past must be (2, {b}, {n}, P, {k.shape[3]}), got {tuple(past.shape)}")
            p = past.shape[3]
            wp = self.widen(past)
            k, v = xp.concat((wp[0, ...], k), axis=2), xp.concat((wp[1, ...], v), axis=2)
        t = p + s
        add = self.with_bias(self.key_mask(mask_index, b, s, t, p), attention_bias, s, t)
        out = self.attend(q, k, v, add)
        present = xp.stack((k, v)) if past is not None or len(self.info.output_names) > 1 else None
        return (self.narrow(out, x),) + (() if present is None else (self.narrow(present, x),))


@library.define("MultiHeadAttention", 1, domain=_MS, types={"T": _F, "QK": _F, "M": (np.int32,)},
                signature=(("T", "T", "T", "T", "M", "T", "T", "T", "M", "M"), ("T", "T", "T", "QK")))
class MultiHeadAttention(AttentionCore):
    """Attention over projected Q, K, V: separate (B, S|L, D), packed KV (B, L, N, 2, H)
    in ``key``, packed QKV (B, S, N, 3, H) in ``query``, or key and value already in
    (B, N, L, H); bias (3D) added to the projections; past_key / past_value prepended and
    the present outputs."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        outs = list(info.output_names)
        if len(outs) > 3 and outs[3]:
            raise InvalidGraph(f"{self.where()}: the qk output is not supported")

    def compute(self, query, key=None, value=None, bias=None, key_padding_mask=None, attention_bias=None,
                past_key=None, past_value=None, past_sequence_length=None, cache_indirection=None):
        xp = self.xp
        n = self.num_heads
        if cache_indirection is not None:
            raise ValueError("cache_indirection is not supported")
        q = self.widen(query)
        b, s = q.shape[:2]
        if q.ndim == 5:  # packed QKV (B, S, N, 3, H)
            if key is not None or value is not None or q.shape[2:4] != (n, 3):
                raise ValueError(f"packed QKV must be (B, S, {n}, 3, H) with no key or value, got {tuple(q.shape)}")
            q, k, v = (xp.permute_dims(q[:, :, :, i, :], (0, 2, 1, 3)) for i in range(3))
            bnsh = True
        else:
            if q.ndim != 3 or key is None:
                raise ValueError(f"query must be (B, S, D) with a key, got {tuple(q.shape)}")
            k = self.widen(key)
            bnsh = k.ndim == 4
            if k.ndim == 5:  # packed KV (B, L, N, 2, H)
                if value is not None or tuple(k.shape[2:4]) != (n, 2):
                    raise ValueError(f"packed KV must be (B, L, {n}, 2, H) with no value, got {tuple(k.shape)}")
                k, v = (xp.permute_dims(k[:, :, :, i, :], (0, 2, 1, 3)) for i in range(2))
                bnsh = True
            elif value is None:
                raise ValueError("value is required with an unpacked key")
            else:
                v = self.widen(value)
        d = q.shape[2] if q.ndim == 3 else n * q.shape[3]
        if bias is not None:
            wb = self.widen(bias)
            dv = bias.shape[0] - 2 * d
            bq, bk, bv = wb[:d], wb[d:2 * d], wb[2 * d:]
            if q.ndim == 3:
                q = q + bq
            else:
                q = q + xp.reshape(bq, (1, n, 1, -1))
            if k.ndim == 3:
                k, v = k + bk, v + bv
            elif key is None or key.ndim == 5:  # packed QKV or KV: bias per head
                k, v = k + xp.reshape(bk, (1, n, 1, -1)), v + xp.reshape(bv, (1, n, 1, dv // n))
        if q.ndim == 3:
            q = self.heads(q, n)
        if not bnsh:
            k, v = self.heads(k, n), self.heads(v, n)
        p = 0
        if past_key is not None and past_value is not None and not (key is not None and key.ndim == 4):
            p = past_key.shape[2]
            k = xp.concat((self.widen(past_key), k), axis=2)
            v = xp.concat((self.widen(past_value), v), axis=2)
        t = k.shape[2]
        add = self.with_bias(self.key_mask(key_padding_mask, b, s, t, p if self.causal else t - s), attention_bias, s, t)
        out = self.attend(q, k, v, add)
        return self.narrow(out, query), self.narrow(k, query), self.narrow(v, query)


@library.define("DecoderMaskedMultiHeadAttention", 1, domain=_MS, types={"T": _F, "QK": _F, "M": (np.int32,)},
                signature=(("T", "T", "T", "M", "T", "T", "T", "M", "M", "M", "T"), ("T", "T", "T", "QK")),
                host_inputs=(7, 8, 9))
class DecoderMaskedMultiHeadAttention(AttentionCore):
    """One decoding step (sequence length 1). Self attention: the new key/value written at
    row ``past_sequence_length`` of the shared (B, N, max, H) past buffers (the present
    outputs), attending to rows [0, past + 1) — through ``cache_indirection`` (which beam
    each earlier row came from) when beams are used; cross attention: key and value are
    (B, N, L, H) already."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.causal = False
        self.share = bool(info.attr("past_present_share_buffer", 0))
        if int(info.attr("output_qk", 0)):
            raise InvalidGraph(f"{self.where()}: output_qk is not supported")

    def compute(self, query, key=None, value=None, mask_index=None, attention_bias=None, past_key=None,
                past_value=None, past_sequence_length=None, beam_width=None, cache_indirection=None, bias=None):
        xp = self.xp
        n = self.num_heads
        q = self.widen(query)
        if q.ndim != 3 or q.shape[1] != 1:
            raise ValueError(f"query must be (B, 1, D), got {tuple(q.shape)}")
        b = q.shape[0]
        cross = key is not None and key.ndim == 4
        if key is None:  # packed QKV (B, 1, 2D + Dv): D from the past buffers' head size
            if past_key is None:
                raise ValueError("packed QKV needs past_key")
            d = n * past_key.shape[3]
            q, k, v = q[..., :d], q[..., d:2 * d], q[..., 2 * d:]
        else:
            k, v = self.widen(key), self.widen(value)
        d = q.shape[2]
        if bias is not None:
            wb = self.widen(bias)
            q = q + wb[:d]
            if not cross:
                k, v = k + wb[d:2 * d], v + wb[2 * d:]
        q = self.heads(q, n)
        if cross:
            out = self.attend(q, k, v, self.with_bias(self.key_mask(mask_index, b, 1, k.shape[2], 0),
                                                      attention_bias, 1, k.shape[2]))
            return self.narrow(out, query), self.narrow(k, query), self.narrow(v, query)
        if not self.share or past_key is None or past_sequence_length is None:
            raise ValueError("self attention needs past_present_share_buffer=1 with past_key, past_value and "
                             "past_sequence_length (as onnxruntime's CPU kernel)")
        k, v = self.heads(k, n), self.heads(v, n)
        p = self.host_ints(past_sequence_length)[0]
        m = past_key.shape[2]
        if not 0 <= p < m:
            raise ValueError(f"past_sequence_length {p} leaves no room in the {m}-row buffers")
        pk, pv = self.widen(past_key), self.widen(past_value)
        present_k = xp.concat((pk[:, :, :p, :], k, pk[:, :, p + 1:, :]), axis=2)
        present_v = xp.concat((pv[:, :, :p, :], v, pv[:, :, p + 1:, :]), axis=2)
        keys, vals = present_k[:, :, :p + 1, :], present_v[:, :, :p + 1, :]
        beams = 1 if beam_width is None else self.host_ints(beam_width)[0]
        if cache_indirection is not None and beams > 1 and p:
            ci = self.host(cache_indirection).astype(np.int64)  # (B / beams, beams, max)
            src = (np.arange(b)[:, None] // beams) * beams + ci.reshape(b, -1)[:, :p]  # (B, p) source rows
            idx = np.concatenate([src * m + np.arange(p)[None, :], (np.arange(b) * m + p)[:, None]], axis=1)
            idx = xp.asarray(idx.reshape(-1))

            def gather(t: Any) -> Any:
                flat = xp.reshape(xp.permute_dims(t, (0, 2, 1, 3)), (b * m, n, t.shape[3]))
                return xp.permute_dims(xp.reshape(xp.take(flat, idx, axis=0), (b, p + 1, n, t.shape[3])), (0, 2, 1, 3))

            keys, vals = gather(present_k), gather(present_v)
        add = self.with_bias(self.key_mask(mask_index, b, 1, p + 1, p), attention_bias, 1, p + 1)
        out = self.attend(q, keys, vals, add)
        return self.narrow(out, query), self.narrow(present_k, query), self.narrow(present_v, query)


class RotaryMixin(FloatAttrs):
    """Rotary position embedding of (B, N, S, H) float32 arrays."""

    def cos_sin(self, cos_cache: Any, sin_cache: Any, positions: np.ndarray) -> tuple[Any, Any]:
        """The cache rows at host ``positions`` (B|1, S) as (B|1, 1, S, R/2), widened."""
        xp = self.xp
        if cos_cache.ndim != 2 or tuple(sin_cache.shape) != tuple(cos_cache.shape):
            raise ValueError(f"cos_cache and sin_cache must be 2-D of one shape, got "
                             f"{tuple(cos_cache.shape)} and {tuple(sin_cache.shape)}")
        if positions.size and (positions.min() < 0 or positions.max() >= cos_cache.shape[0]):
            raise ValueError(f"position ids must be in [0, {cos_cache.shape[0]}) (the caches' rows)")
        idx = xp.asarray(positions.reshape(-1).astype(np.int64))
        shape = (positions.shape[0], 1, positions.shape[1], cos_cache.shape[1])
        return tuple(xp.reshape(xp.take(self.widen(c), idx, axis=0), shape) for c in (cos_cache, sin_cache))

    def rotate(self, x: Any, cos: Any, sin: Any, interleaved: bool) -> Any:
        """``x`` with its first R = 2 * cos.shape[-1] features of each head rotated: pairs
        (2i, 2i + 1) when ``interleaved``, else (i, i + R/2)."""
        xp = self.xp
        half = cos.shape[-1]
        rot = 2 * half
        if rot > x.shape[-1]:
            raise ValueError(f"the rotary dimension {rot} exceeds the head size {x.shape[-1]}")
        if interleaved:
            x1, x2 = x[..., 0:rot:2], x[..., 1:rot:2]
            r = xp.reshape(xp.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), axis=-1), tuple(x.shape[:-1]) + (rot,))
        else:
            x1, x2 = x[..., :half], x[..., half:rot]
            r = xp.concat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), axis=-1)
        return r if rot == x.shape[-1] else xp.concat((r, x[..., rot:]), axis=-1)


@library.define("RotaryEmbedding", 1, domain=_MS, types={"T": _F, "M": (np.int64,)},
                signature=(("T", "M", "T", "T"), ("T",)), host_inputs=(1,))
class RotaryEmbedding(RotaryMixin):
    """RoPE of a (B, S, D) or (B, N, S, H) input; position_ids (B, S), or one start
    position (1,) for positions start .. start + S - 1."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.interleaved = bool(info.attr("interleaved", 0))
        self.num_heads = int(info.attr("num_heads", 0))
        self.rotary_dim = int(info.attr("rotary_embedding_dim", 0))
        if int(info.attr("is_packed_batching", 0)):
            raise InvalidGraph(f"{self.where()}: is_packed_batching=1 is not supported")
        if self.rotary_dim and not self.num_heads:
            raise InvalidGraph(f"{self.where()}: rotary_embedding_dim needs num_heads")

    def positions(self, position_ids: Any, cos_cache: Any, sin_cache: Any, b: int, s: int,
                  rank: int) -> tuple[Any, Any]:
        """(cos, sin) as (B|1, 1, S, R/2) for the ``position_ids`` input (of a rank-``rank`` X)."""
        pid = self.host(position_ids).astype(np.int64)
        if pid.ndim == 2 and pid.shape in ((b, s), (1, s)):
            pos = pid
        elif pid.size == 1:
            pos = (np.arange(s) + int(pid.reshape(-1)[0]))[None, :]
        else:
            raise ValueError(f"position_ids must be (1,) or ({b}, {s}), got {pid.shape}")
        return self.cos_sin(cos_cache, sin_cache, pos)

    def compute(self, x, position_ids, cos_cache, sin_cache):
        xp = self.xp
        w = self.widen(x)
        if x.ndim == 4:
            b, _, s, h = x.shape
            t = w
        elif x.ndim == 3:
            b, s, d = x.shape
            n = self.num_heads or d // (2 * cos_cache.shape[1])
            if not n or d % n:
                raise ValueError(f"hidden size {d} does not split into heads of the caches' rotary size")
            t = xp.permute_dims(xp.reshape(w, (b, s, n, d // n)), (0, 2, 1, 3))
        else:
            raise ValueError(f"input must be 3-D or 4-D, got shape {tuple(x.shape)}")
        if self.rotary_dim and 2 * cos_cache.shape[1] != self.rotary_dim:
            raise ValueError(f"rotary_embedding_dim={self.rotary_dim} is not twice the caches' width")
        cos, sin = self.positions(position_ids, cos_cache, sin_cache, b, s, x.ndim)
        y = self.rotate(t, cos, sin, self.interleaved)
        if x.ndim == 3:
            y = xp.reshape(xp.permute_dims(y, (0, 2, 1, 3)), tuple(x.shape))
        return (self.narrow(y, x),)


@library.define("MRotaryEmbedding", 1, domain=_MS, types={"T": _F, "M": (np.int64,)},
                signature=(("T", "M", "T", "T"), ("T",)), host_inputs=(1,))
class MRotaryEmbedding(RotaryEmbedding):
    """Multimodal RoPE (Qwen-VL): position_ids (3, B, S) — temporal, height, width —
    each feeding its ``mrope_section`` of the caches' half width, sectioned
    (``mrope_layout`` 0) or interleaved every third entry (1)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        sec = [int(v) for v in info.attr("mrope_section", [])]
        layout = int(info.attr("mrope_layout", 0))
        if len(sec) != 3 or min(sec) < 0 or layout not in (0, 1):
            raise InvalidGraph(f"{self.where()}: mrope_section={sec} must be 3 non-negative ints and "
                               f"mrope_layout={layout} 0 or 1")
        half = sum(sec)
        if layout == 0:
            stream = np.repeat(np.arange(3), sec)
        else:
            j = np.arange(half)
            stream = np.zeros(half, np.int64)
            stream[(j % 3 == 1) & (j < 3 * sec[1])] = 1
            stream[(j % 3 == 2) & (j < 3 * sec[2])] = 2
        #: (3, 1, 1, 1, half) 0/1: which position stream fills each cache column.
        self.select = (np.arange(3)[:, None] == stream[None, :]).astype(np.float32).reshape(3, 1, 1, 1, half)

    def positions(self, position_ids, cos_cache, sin_cache, b, s, rank):
        xp = self.xp
        if not self.num_heads and rank == 3:
            raise ValueError("num_heads must be set for a 3-D input (as onnxruntime requires)")
        pid = self.host(position_ids).astype(np.int64)
        if pid.shape != (3, b, s):
            raise ValueError(f"position_ids must be (3, {b}, {s}), got {pid.shape}")
        if self.select.shape[-1] != cos_cache.shape[1]:
            raise ValueError(f"mrope_section sums to {self.select.shape[-1]}, not the caches' width {cos_cache.shape[1]}")
        cos, sin = self.cos_sin(cos_cache, sin_cache, pid.reshape(3 * b, s))
        sel = xp.asarray(self.select)
        return tuple(xp.sum(xp.reshape(c, (3, b, 1, s, c.shape[-1])) * sel, axis=0) for c in (cos, sin))


@library.define("GroupQueryAttention", 1, domain=_MS,
                types={"T": _F, "T_CACHE": _F, "T_KV_SCALE": (np.float32,), "M": (np.int32,), "P": (np.int64,)},
                signature=(("T", "T", "T", "T_CACHE", "T_CACHE", "M", "M", "T", "T", "P", "T", "T",
                            "T_KV_SCALE", "T_KV_SCALE", "T", "T", "M"), ("T", "T_CACHE", "T_CACHE", "T")),
                host_inputs=(5, 6, 9))
class GroupQueryAttention(RotaryMixin, AttentionCore):
    """Causal attention of ``num_heads`` query heads over ``kv_num_heads`` key/value heads
    (B, Nk, P, H) past caches; per batch entry ``seqlens_k + 1`` tokens in all, the new
    ones written after the entry's past; rotary of the new Q and K with the cos/sin
    caches; ``local_window_size``; ``softcap``."""

    _UNSUPPORTED = ("kv_cache_bit_width", "sliding_window_cache", "qk_output", "smooth_softmax")

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.kv_heads = int(info.attr("kv_num_heads", 0))
        if self.kv_heads < 1 or self.num_heads % self.kv_heads:
            raise InvalidGraph(f"{self.where()}: kv_num_heads={self.kv_heads} must divide num_heads={self.num_heads}")
        self.window = int(info.attr("local_window_size", -1))
        self.softcap = self.float_attr("softcap", 0.0)
        self.rotary = bool(info.attr("do_rotary", 0))
        self.interleaved = bool(info.attr("rotary_interleaved", 0))
        self.causal = bool(info.attr("causal", 1))
        if not self.causal and self.window != -1:
            raise InvalidGraph(f"{self.where()}: local_window_size must be -1 when causal=0")
        for name in self._UNSUPPORTED:
            if int(info.attr(name, 0)) not in (0, 8 if name == "kv_cache_bit_width" else 0):
                raise InvalidGraph(f"{self.where()}: {name} is not supported")
        for name in ("k_quant_type", "v_quant_type"):
            if info.attr(name, "NONE") not in ("NONE", b"NONE"):
                raise InvalidGraph(f"{self.where()}: a quantized KV cache ({name}) is not supported")

    def compute(self, query, key, value, past_key, past_value, seqlens_k, total_sequence_length,
                cos_cache=None, sin_cache=None, position_ids=None, attention_bias=None, head_sink=None,
                k_scale=None, v_scale=None, q_norm_weight=None, k_norm_weight=None, query_seqlens=None):
        for name, val in (("head_sink", head_sink), ("k_scale", k_scale), ("v_scale", v_scale),
                          ("q_norm_weight", q_norm_weight), ("query_seqlens", query_seqlens)):
            if val is not None:
                raise ValueError(f"the {name} input is not supported")
        q, k, v = self.split_qkv(query, key, value)
        b, s = q.shape[0], q.shape[2]
        seqlens = [v_ + 1 for v_ in self.host_ints(seqlens_k)]
        total = self.host_ints(total_sequence_length)[0]
        if len(seqlens) != b:
            raise ValueError(f"seqlens_k must have {b} values, got {len(seqlens)}")
        first = s == total  # the first prompt: no past is read
        past_lens = [0 if first else t - s for t in seqlens]
        pos = None if position_ids is None else self.host(position_ids).astype(np.int64).reshape(b, s)
        q, k = self.rotary_qk(q, k, cos_cache, sin_cache, past_lens, pos)
        outs, keys, vals = self.cached_attention(q, k, v, past_key, past_value, past_lens, seqlens,
                                                 max(total, 0 if past_key is None else past_key.shape[2]),
                                                 attention_bias)
        cache = query if past_key is None else past_key
        return self.narrow(outs, query), self.narrow(keys, cache), self.narrow(vals, cache)

    def split_qkv(self, query: Any, key: Any, value: Any) -> tuple[Any, Any, Any]:
        """Q (B, N, S, H), K and V (B, Nk, S, H) from separate or packed inputs, widened."""
        n, nk = self.num_heads, self.kv_heads
        w = self.widen(query)
        if w.ndim != 3:
            raise ValueError(f"query must be (B, S, D), got {tuple(w.shape)}")
        b, s, d = w.shape
        if key is None:  # packed QKV: (N + 2 Nk) heads
            hd = d // (n + 2 * nk)
            q, k, v = w[..., :n * hd], w[..., n * hd:(n + nk) * hd], w[..., (n + nk) * hd:]
        else:
            q, k, v = w, self.widen(key), self.widen(value)
            if k.shape[:2] != (b, s) or v.shape[:2] != (b, s):
                raise ValueError("key and value must be (B, S, kv_hidden) with the query's B and S")
        return self.heads(q, n), self.heads(k, nk), self.heads(v, nk)

    def rotary_qk(self, q: Any, k: Any, cos_cache: Any, sin_cache: Any, past_lens: list[int],
                  pos: np.ndarray | None) -> tuple[Any, Any]:
        """Q and K rotated (when ``do_rotary``) at ``pos``, else at each entry's past
        length + 0 .. S - 1."""
        if not self.rotary:
            return q, k
        if cos_cache is None or sin_cache is None:
            raise ValueError("do_rotary needs cos_cache and sin_cache")
        if pos is None:
            pos = np.asarray([[p + i for i in range(q.shape[2])] for p in past_lens], dtype=np.int64)
        cos, sin = self.cos_sin(cos_cache, sin_cache, pos)
        return self.rotate(q, cos, sin, self.interleaved), self.rotate(k, cos, sin, self.interleaved)

    def allowed(self, p: int, s: int, t: int, total: int) -> np.ndarray:
        """(1, 1|N, S, T) host mask of the keys each query of an entry with ``p`` past
        rows attends: none past the entry's ``total`` (a right-padded first prompt),
        causal, within the local window."""
        qpos = np.arange(s)[:, None] + p
        kpos = np.arange(t)[None, :]
        ok = np.broadcast_to(kpos < total, (s, t))
        if self.causal:
            ok = ok & (kpos <= qpos)
        if self.window >= 0:
            ok = ok & (kpos > qpos - self.window)
        return ok[None, None]

    def cached_attention(self, q: Any, k: Any, v: Any, past_key: Any, past_value: Any, past_lens: list[int],
                         totals: list[int], present_len: int, attention_bias: Any = None) -> tuple[Any, Any, Any]:
        """(output, present_key, present_value) float32: per batch entry ``i`` the first
        ``past_lens[i]`` rows of the past caches then the new K and V, attended through
        :meth:`allowed`; presents ``present_len`` rows (zero past the entry's)."""
        xp = self.xp
        b, _, s, _ = q.shape
        cap = 0 if past_key is None else past_key.shape[2]
        if any(p < 0 or p > cap for p in past_lens):
            raise ValueError(f"total lengths {totals} do not fit the past ({cap}) and sequence ({s})")
        outs, keys, vals = [], [], []
        for i in range(b):
            p = past_lens[i]
            ki, vi = k[i:i + 1, ...], v[i:i + 1, ...]
            if p:
                ki = xp.concat((self.widen(past_key[i:i + 1, :, :p, :]), ki), axis=2)
                vi = xp.concat((self.widen(past_value[i:i + 1, :, :p, :]), vi), axis=2)
            t = ki.shape[2]
            bias = None
            if attention_bias is not None:
                ab = self.widen(attention_bias)
                j = min(i, ab.shape[0] - 1)
                bias = ab[j:j + 1, :, :, :t]
            allowed = xp.asarray(self.allowed(p, s, t, totals[i]))
            outs.append(self.attend(q[i:i + 1, ...], ki, vi, bias, allowed, self.softcap))
            if present_len > t:
                pad = xp.zeros((1, ki.shape[1], present_len - t, ki.shape[3]), dtype=ki.dtype)
                ki, vi = xp.concat((ki, pad), axis=2), xp.concat((vi, pad), axis=2)
            keys.append(ki[:, :, :present_len, :])
            vals.append(vi[:, :, :present_len, :])
        return xp.concat(outs, axis=0), xp.concat(keys, axis=0), xp.concat(vals, axis=0)



# ---------------------------------------------------- newer and CUDA-provider fusions


@library.define("ScaledSiLU", 1, domain=_MS, types={"T": _F + _bf16(), "M": _F + _bf16()},
                signature=(("T", "M"), ("T",)))
class ScaledSiLU(FloatAttrs):
    """z = T(scale x), y = T(z T(sigmoid(z))) — rounded to X's type at each of the three
    steps, as the schema says; scale is the optional scalar input, else ``alpha``."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.alpha = self.float_attr("alpha", 1.0)

    def compute(self, x, scale=None):
        w = self.widen(x)
        if scale is None:
            z = self.widen(self.narrow(self.alpha * w, x))
        else:
            if scale.ndim:  # as onnxruntime: not even a (1,) tensor
                raise ValueError(f"scale must be a scalar (0-D), got shape {tuple(scale.shape)}")
            z = self.widen(self.narrow(w * self.xp.reshape(self.widen(scale), ()), x))
        sig = self.widen(self.narrow(_sigmoid(self.xp, z), x))
        return (self.narrow(z * sig, x),)


class RMSGroups(Norm):
    """RMS norm over groups of the last axis (float32 throughout, one rounding)."""

    simplified = True
    default_epsilon = 1e-5

    def grouped(self, w: Any, c: int) -> Any:
        """(..., K*c) → (..., K, c); ValueError when c does not divide the last axis."""
        if not w.ndim or w.shape[-1] % c or not c:
            raise ValueError(f"the last dimension of {tuple(w.shape)} is not a multiple of {c}")
        return self.xp.reshape(w, tuple(w.shape[:-1]) + (w.shape[-1] // c, c))


@library.define("GatedRMSNorm", 1, domain=_MS, types={"T": _F + _bf16()}, signature=(("T", "T", "T"), ("T",)))
class GatedRMSNorm(RMSGroups):
    """y = RMSNorm(x over groups of C = len(scale)) * scale * act(gate), act SiLU (alias
    swish) or sigmoid."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        act = info.attr("activation", "silu")
        self.activation = act.decode() if isinstance(act, bytes) else str(act)
        if self.activation not in ("silu", "swish", "sigmoid"):
            raise InvalidGraph(f"{self.where()}: activation={self.activation!r} must be silu, swish or sigmoid")

    def compute(self, x, scale, gate):
        if tuple(gate.shape) != tuple(x.shape) or scale.ndim != 1:
            raise ValueError(f"gate must have X's shape {tuple(x.shape)} and scale be 1-D")
        c = scale.shape[0]
        g = self.widen(gate)
        act = _sigmoid(self.xp, g)
        if self.activation != "sigmoid":
            act = g * act
        y, _, _ = self.normalize(self.grouped(self.widen(x), c), (-1,), self.widen(scale))
        return (self.narrow(self.xp.reshape(y, tuple(x.shape)) * act, x),)


@library.define("BranchwiseRMSNorm", 1, domain=_MS, types={"T": _F + _bf16(), "M": _F + _bf16()},
                signature=(("T", "M"), ("T",)))
class BranchwiseRMSNorm(RMSGroups):
    """RMS norm of each branch: X (..., C, H), or (..., C * H) with ``num_branches`` = C;
    optional scale (C * H), (C, H) or (H)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.branches = int(info.attr("num_branches", 0))
        if self.branches < 0:
            raise InvalidGraph(f"{self.where()}: num_branches={self.branches} must be >= 0")

    def compute(self, x, scale=None):
        w = self.widen(x)
        if self.branches:
            if not x.ndim or x.shape[-1] % self.branches:
                raise ValueError(f"the last dimension of {tuple(x.shape)} is not a multiple of {self.branches}")
            w = self.grouped(w, x.shape[-1] // self.branches)
        elif x.ndim < 2:
            raise ValueError(f"grouped input must be (..., C, H), got {tuple(x.shape)}")
        c, h = w.shape[-2:]
        g = 1.0
        if scale is not None:
            if math.prod(scale.shape) not in (h, c * h) or scale.shape[-1] != h and scale.ndim != 1:
                raise ValueError(f"scale must be ({c * h}), ({c}, {h}) or ({h}), got {tuple(scale.shape)}")
            g = self.xp.reshape(self.widen(scale), (-1, h))
        y, _, _ = self.normalize(w, (-1,), g)
        return (self.narrow(self.xp.reshape(y, tuple(x.shape)), x),)


def _channel_vector(kernel: Any, v: Any, c: int, name: str) -> Any:
    """A (c,) parameter widened; ValueError otherwise."""
    if v.ndim != 1 or v.shape[0] != c:
        raise ValueError(f"{name} must have shape ({c},), got {tuple(v.shape)}")
    return kernel.widen(v)


@library.define("BiasAdd", 1, domain=_MS, types={"T": _F}, signature=(("T", "T", "T"), ("T",)))
class BiasAdd(FloatAttrs):
    """y = x + bias + skip for x and skip (N, S, C), bias (C) (CUDA's diffusion fusion)."""

    def compute(self, x, bias, skip):
        if x.ndim != 3 or tuple(skip.shape) != tuple(x.shape):
            raise ValueError(f"x and skip must be (N, S, C) of one shape, got {tuple(x.shape)}, {tuple(skip.shape)}")
        return (self.narrow(self.widen(x) + _channel_vector(self, bias, x.shape[2], "bias") + self.widen(skip), x),)


@library.define("BiasSplitGelu", 1, domain=_MS, types={"T": _F}, needs=("erf",), signature=(("T", "T"), ("T",)))
class BiasSplitGelu(ContribGelu):
    """(x + bias) split in halves along the last axis: left * Gelu(right) (CUDA's
    diffusion fusion)."""

    def compute(self, x, bias):
        if x.ndim != 3 or x.shape[2] % 2:
            raise ValueError(f"x must be (N, S, D) with D even, got {tuple(x.shape)}")
        w = self.widen(x) + _channel_vector(self, bias, x.shape[2], "bias")
        half = x.shape[2] // 2
        return (self.narrow(w[..., :half] * super().compute(w[..., half:])[0], x),)


@library.define("GemmFastGelu", 1, domain=_MS, types={"T": _F + _bf16()}, signature=(("T", "T", "T"), ("T",)))
class GemmFastGelu(FastGelu):
    """FastGelu(x @ w + bias) (CUDA/ROCm fusion of MatMul and FastGelu)."""

    def compute(self, x, w, bias=None):
        if x.ndim < 1 or w.ndim != 2 or x.shape[-1] != w.shape[0]:
            raise ValueError(f"x {tuple(x.shape)} and w {tuple(w.shape)} do not multiply")
        y = self.xp.matmul(self.widen(x), self.widen(w))
        return (self.narrow(super().compute(y, bias)[0], x),)


@library.define("BiasSoftmax", 1, domain=_MS, types={"T": (np.float32, np.float16, np.float64)},
                signature=(("T", "T"), ("T",)))
class BiasSoftmax(FloatAttrs):
    """softmax(data + bias) over the dimensions [axis, rank) taken as one; bias broadcast
    (either way ``is_inner_broadcast`` says, both are numpy broadcasting of a bias of the
    data's rank)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.axis = int(info.attr("axis", 1))

    def compute(self, data, bias):
        xp = self.xp
        r = data.ndim
        axis = self.axis + r if self.axis < 0 else self.axis
        if not 0 <= axis < r:
            raise ValueError(f"axis {self.axis} is out of range for rank {r}")
        try:
            w = self.widen(data) + self.widen(bias)
        except ValueError:
            raise ValueError(f"bias {tuple(bias.shape)} does not broadcast to data {tuple(data.shape)}") from None
        if tuple(w.shape) != tuple(data.shape):
            raise ValueError(f"bias {tuple(bias.shape)} does not broadcast to data {tuple(data.shape)}")
        flat = xp.reshape(w, (math.prod(data.shape[:axis]), -1)) if math.prod(data.shape) else w
        if math.prod(data.shape):
            e = xp.exp(flat - xp.max(flat, axis=1, keepdims=True))
            flat = xp.reshape(e / xp.sum(e, axis=1, keepdims=True), tuple(data.shape))
        return (self.narrow(flat, data),)


@library.define("GroupNorm", 1, domain=_MS, types={"T": _F, "M": _F}, signature=(("T", "M", "M"), ("T",)))
class GroupNorm(Norm):
    """Group normalization of (N, H, W, C) (``channels_last``, the default) or (N, C, H, W)
    with per-channel gamma and beta, then SiLU when ``activation`` = 1 (CUDA's diffusion
    fusion)."""

    default_epsilon = 1e-5

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.groups = int(info.attr("groups", 0))
        self.channels_last = bool(info.attr("channels_last", 1))
        self.silu = int(info.attr("activation", 0))
        if self.groups < 1 or self.silu not in (0, 1):
            raise InvalidGraph(f"{self.where()}: groups={self.groups} must be >= 1 and activation 0 or 1")

    def group_norm(self, w: Any, gamma: Any, beta: Any) -> Any:
        """The normalized float32 ``w`` (X's layout), activation applied."""
        xp = self.xp
        if w.ndim < 2:
            raise ValueError(f"input must have rank >= 2, got {tuple(w.shape)}")
        c = w.shape[-1] if self.channels_last else w.shape[1]
        g = self.groups
        if c % g:
            raise ValueError(f"groups={g} does not divide the {c} channels")
        n = w.shape[0]
        if self.channels_last:  # (N, spatial, G, C/G): statistics over spatial and C/G
            v = xp.reshape(w, (n, -1, g, c // g))
            axes, shape = (1, 3), (c,)
        else:
            v = xp.reshape(w, (n, g, -1))
            axes, shape = (2,), (c,) + (1,) * (w.ndim - 2)
        mean = xp.mean(v, axis=axes, keepdims=True)
        d = v - mean
        y = xp.reshape(d / xp.sqrt(xp.mean(d * d, axis=axes, keepdims=True) + self.epsilon), tuple(w.shape))
        y = y * xp.reshape(_channel_vector(self, gamma, c, "gamma"), shape)
        y = y + xp.reshape(_channel_vector(self, beta, c, "beta"), shape)
        return y * _sigmoid(xp, y) if self.silu else y

    def compute(self, x, gamma, beta):
        return (self.narrow(self.group_norm(self.widen(x), gamma, beta), x),)


@library.define("SkipGroupNorm", 1, domain=_MS, types={"T": _F, "M": _F},
                signature=(("T", "M", "M", "T", "T"), ("T", "T")))
class SkipGroupNorm(GroupNorm):
    """GroupNorm(x + skip + bias) (NHWC by default); skip (N, H, W, C), (N, 1, 1, C) or
    (N, C); the sum is the second output."""

    def compute(self, x, gamma, beta, skip, bias=None):
        xp = self.xp
        w = self.widen(x)
        sk = self.widen(skip)
        if sk.ndim == 2 and w.ndim == 4:  # (N, C): one value per sample and channel
            sk = xp.reshape(sk, (sk.shape[0], 1, 1, sk.shape[1]) if self.channels_last else tuple(sk.shape) + (1, 1))
        try:
            w = w + sk
        except ValueError:
            raise ValueError(f"skip {tuple(skip.shape)} does not broadcast to x {tuple(x.shape)}") from None
        if bias is not None:
            c = x.shape[-1] if self.channels_last else x.shape[1]
            b = _channel_vector(self, bias, c, "bias")
            w = w + (b if self.channels_last else xp.reshape(b, (c,) + (1,) * (x.ndim - 2)))
        return self.narrow(self.group_norm(w, gamma, beta), x), self.narrow(w, x)
