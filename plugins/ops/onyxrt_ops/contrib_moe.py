"""Mixture-of-experts com.microsoft operators — MoE (float experts), QMoE (weight-only
integer-quantized experts), MoEGroupRouter (group-limited sigmoid routing) — and two other
com.microsoft operators of the same brief: GatherPacked (gathered ggml-packed embedding rows)
and AttnLSTM (an LSTM in a Bahdanau attention wrapper). Semantics are onnxruntime's CPU
kernels', checked against it in the tests.

MoE/QMoE routing: ``router_probs`` are logits; their softmax over the experts picks the top
``k`` experts of each token (ties go to the HIGHER expert index, as onnxruntime's sort of
(probability, index) pairs). Each token's output is the sum over its experts of
weight * FC2(act(FC1(x))). Weights: the softmax values of the chosen experts — renormalized
to sum 1 when ``normalize_routing_weights`` (MoE); QMoE's CPU kernel ALWAYS renormalizes
(the attribute is ignored), unless ``router_weights`` is given, whose raw values at the
chosen experts are the weights. ``use_sparse_mixer`` only requires k = 2 on the CPU (its
routing is then the plain softmax top-2, as onnxruntime's CPU kernel).

Activations: relu, gelu (the tanh approximation, as onnxruntime's CPU kernel), silu,
identity, and swiglu with fused interleaved FC1 rows (``swiglu_fusion`` = 1: g0, l0, g1,
l1...): ``min(g, limit) * sigmoid(alpha * min(g, limit)) * (clip(l, -limit, limit) + beta)``.
The CPU kernel refuses the other fusions and FC3 weights; so does this one.

The routing plan (which tokens go to which expert) is built on the host from the top-k
indices, a few integers per token; the tokens are then gathered, each used expert's two
matmuls run on the backend over its own tokens only, and the results are put back in token
order and mixed — all on the device.

QMoE weights: ``expert_weight_bits`` 2, 4 or 8, packed little end first in uint8 along K
(one width for every projection: per-projection overrides that differ from it are refused,
as the CPU kernel's "mixed-width" error), per row (column-wise) or per ``block_size`` block
scales, optional packed zero points (default 2**(bits-1)); float16 inputs are computed in
float32 and rounded once (onnxruntime rounds some float16 intermediates: the tests allow
float16 tolerance there).

GatherPacked decodes ggml blocks with integer and float arithmetic on the backend (the
half-float block scales decoded from their bits): F32, F16, BF16, Q4_0, Q5_0, Q8_0, IQ4_NL,
Q6_K — bit-exact against onnxruntime. AttnLSTM subclasses the library's LSTM (gates,
peepholes, activations, clip) and adds the attention step.

Known gaps (refused at load with InvalidGraph): QMoE's INT3 profile and float quantization
types (fp4, nvfp4, fp8, wfp4afp8: numpy holds no float8/float4 types); MoEGroupRouter's
``projection_weight``; GatherPacked's ggml types Q5_K, IQ2_XXS, IQ2_XS, IQ3_XXS, IQ2_S and
IQ4_XS (their code books and grids are not at hand); AttnLSTM in double (onnxruntime's
double kernel fails at run time).
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from onyxrt.errors import InvalidGraph
from onyxrt.kernels import KernelInfo

from .activation import _sigmoid
from .contrib_quantization import _Blocks
from .contrib_transformer import _bf16
from .library import OpKernel, library
from .recurrent import LSTM

MS = "com.microsoft"
_ACTS = ("relu", "gelu", "silu", "identity", "swiglu")


def _str_attr(info: KernelInfo, name: str, default: str) -> str:
    """A string attribute (bytes or str) as str."""
    v = info.attr(name, default)
    return v.decode() if isinstance(v, bytes) else str(v)


class _Router(OpKernel):
    """Attributes and computation shared by MoE and QMoE (see the module docstring).
    Subclasses pass :meth:`mix` how to get one expert's (dequantized) weights."""

    #: whether the routing weights are always renormalized (QMoE's CPU kernel)
    always_normalize = False

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.k = int(info.attr("k", 1))
        self.act = _str_attr(info, "activation_type", "relu")
        self.fusion = int(info.attr("swiglu_fusion", 0))
        self.alpha = float(info.attr("activation_alpha", 1.0))
        self.beta = float(info.attr("activation_beta", 0.0))
        self.limit = info.attr("swiglu_limit")
        self.normalize = self.always_normalize or bool(info.attr("normalize_routing_weights", 0))
        if self.k < 1:
            raise InvalidGraph(f"{self.where()}: k={self.k} must be >= 1")
        if self.act not in _ACTS:
            raise InvalidGraph(f"{self.where()}: activation_type {self.act!r}; one of {', '.join(_ACTS)}")
        if self.act == "swiglu" and self.fusion != 1:
            raise InvalidGraph(f"{self.where()}: swiglu needs swiglu_fusion=1 (interleaved gate/up rows), "
                               f"got {self.fusion}, as onnxruntime's CPU kernel")
        if int(info.attr("use_sparse_mixer", 0)) and self.k != 2:
            raise InvalidGraph(f"{self.where()}: use_sparse_mixer needs k=2, got k={self.k}")
        if int(info.attr("swiglu_limit_after_activation", 0)):
            raise InvalidGraph(f"{self.where()}: swiglu_limit_after_activation is CUDA only")

    def activate(self, h: Any) -> Any:
        """The activation of FC1's output (T, N) (swiglu halves N)."""
        xp = self.xp
        if self.act == "relu":
            return xp.maximum(h, xp.asarray(0.0, dtype=h.dtype))
        if self.act == "gelu":  # the tanh approximation (onnxruntime's CPU MoE)
            return 0.5 * h * (1.0 + xp.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * h * h * h)))
        if self.act == "silu":
            return h * _sigmoid(xp, h)
        if self.act == "identity":
            return h
        g, up = h[:, 0::2], h[:, 1::2]
        if self.limit is not None:
            lim = float(self.limit)
            g = xp.clip(g, max=lim)
            up = xp.clip(up, min=-lim, max=lim)
        return g * _sigmoid(xp, self.alpha * g) * (up + self.beta)

    def route(self, logits: Any, router_weights: Any) -> tuple[Any, Any]:
        """The chosen experts (T, k) of each token, and their mixing weights (T, k)."""
        xp = self.xp
        n_exp = logits.shape[1]
        if self.k > n_exp:
            raise ValueError(f"attribute k={self.k} must be <= num_experts={n_exp}")
        z = logits - xp.max(logits, axis=1, keepdims=True)
        p = xp.exp(z)
        p = p / xp.sum(p, axis=1, keepdims=True)
        # Ties go to the higher index: a stable ascending sort of the reversed experts, negated.
        idx = (n_exp - 1) - xp.argsort(-xp.flip(p, axis=1), axis=1, stable=True)[:, :self.k]
        source = p if router_weights is None else self.widen(router_weights)
        onehot = xp.astype(idx[:, :, None] == xp.arange(n_exp, dtype=idx.dtype)[None, None, :], source.dtype)
        w = xp.sum(onehot * source[:, None, :], axis=2)
        if self.normalize and router_weights is None:
            w = w / xp.sum(w, axis=1, keepdims=True)
        return idx, w

    def mix(self, x: Any, router_probs: Any, biases: tuple[Any, Any], weight: Any, router_weights: Any = None) -> Any:
        """The operator's output (see the module docstring); ``weight(which, e)`` is expert
        ``e``'s FC``which`` (1 or 2) weight, float32 (N, K)."""
        xp = self.xp
        hidden = x.shape[-1]
        if x.ndim not in (2, 3):
            raise ValueError(f"input must be 2-D (tokens, hidden) or 3-D (batch, seq, hidden), got {x.shape}")
        xw = xp.reshape(self.widen(x), (-1, hidden))
        tokens = xw.shape[0]
        if router_probs.ndim != 2 or router_probs.shape[0] != tokens:
            raise ValueError(f"router_probs {router_probs.shape} must be ({tokens}, num_experts)")
        if router_weights is not None and tuple(router_weights.shape) != tuple(router_probs.shape):
            raise ValueError(f"router_weights {router_weights.shape} must match router_probs {router_probs.shape}")
        if tokens == 0:
            return self.narrow(xp.zeros(x.shape, dtype=xw.dtype), x)
        idx, w = self.route(self.widen(router_probs), router_weights)
        # The plan, on the host: slots (token, j) sorted by expert.
        flat = self.host(idx).reshape(-1)
        order = np.argsort(flat, kind="stable")
        counts = np.bincount(flat, minlength=router_probs.shape[1])
        xs = xp.take(xw, xp.asarray(order // self.k), axis=0)
        outs, start = [], 0
        for e in np.nonzero(counts)[0]:
            seg = xs[start:start + int(counts[e]), :]
            start += int(counts[e])
            h = self.linear(seg, weight(1, int(e)), biases[0], int(e))
            outs.append(self.linear(self.activate(h), weight(2, int(e)), biases[1], int(e)))
        ys = xp.take(xp.concat(outs, axis=0), xp.asarray(np.argsort(order)), axis=0)
        y = xp.sum(xp.reshape(ys, (tokens, self.k, hidden)) * w[:, :, None], axis=1)
        return self.narrow(xp.reshape(y, x.shape), x)

    def linear(self, x: Any, w: Any, bias: Any, e: int) -> Any:
        """x @ w^T (+ bias[e])."""
        if w.shape[1] != x.shape[1]:
            raise ValueError(f"expert {e}'s weights {w.shape} take {w.shape[1]} features, "
                             f"the input has {x.shape[1]}")
        y = self.xp.matmul(x, self.xp.permute_dims(w, (1, 0)))
        return y if bias is None else y + self.widen(bias[e, :])[None, :]

    @staticmethod
    def no_fc3(fc3: Any) -> None:
        if fc3 is not None:
            raise ValueError("FC3 weights are not implemented by onnxruntime's CPU kernel (use swiglu "
                             "with fused FC1)")


@library.define("MoE", 1, domain=MS, signature=(("T",) * 8, ("T",)), types={"T": (np.float32,)})
class MoE(_Router):
    """Mixture of float experts: FC1 weights (E, N, H), FC2 (E, H, I), optional biases."""

    def compute(self, x, router_probs, fc1_w, fc1_b=None, fc2_w=None, fc2_b=None, fc3_w=None, fc3_b=None):
        self.no_fc3(fc3_w)
        n_exp = router_probs.shape[-1]
        if fc1_w.ndim != 3 or fc2_w.ndim != 3 or not fc1_w.shape[0] == fc2_w.shape[0] == n_exp:
            raise ValueError(f"fc1 {fc1_w.shape} / fc2 {fc2_w.shape} weights must be (num_experts, N, K) with "
                             f"num_experts = router_probs' {router_probs.shape[-1]}")
        ws = {1: fc1_w, 2: fc2_w}
        return (self.mix(x, router_probs, (fc1_b, fc2_b), lambda which, e: self.widen(ws[which][e, ...])),)


_QSIG = ("T", "T", "T1", "T2", "T", "T1", "T2", "T", "T1", "T2", "T", "T1", "T1", "T1", "T",
         "T4", "T4", "T4", "T4", "T2", "T2")


@library.define("QMoE", 1, domain=MS, signature=(_QSIG, ("T",)),
                types={"T": (np.float32, np.float16), "T1": (np.uint8,), "T2": (np.float32, np.float16),
                       "T4": (np.float32,)})
class QMoE(_Router, _Blocks):
    """Mixture of weight-only quantized experts (see the module docstring): FC weights
    (E, N, K * bits / 8) uint8, scales (E, N) or (E, N, K / block_size), zero points packed
    like the weights (along N, or along the blocks)."""

    always_normalize = True

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        qt = _str_attr(info, "quant_type", "int")
        base = int(info.attr("expert_weight_bits", 4))
        self.bits = {i: int(info.attr(f"fc{i}_expert_weight_bits", base)) for i in (1, 2, 3)}
        self.block = int(info.attr("block_size", 0))
        if qt != "int":
            raise InvalidGraph(f"{self.where()}: quant_type {qt!r} is not supported (only 'int')")
        if any(b not in (2, 4, 8) for b in self.bits.values()):
            raise InvalidGraph(f"{self.where()}: expert weight bits {sorted(set(self.bits.values()))}; "
                               "2, 4 and 8 are supported (INT3 is not)")
        if set(self.bits.values()) != {base}:
            raise InvalidGraph(f"{self.where()}: FC1/FC2/FC3 widths {list(self.bits.values())} != {base}: mixed "
                               "widths are not implemented (as onnxruntime's CPU kernel)")
        if self.block and (self.block < 16 or self.block & (self.block - 1)):
            raise InvalidGraph(f"{self.where()}: block_size={self.block} must be a power of 2 >= 16")

    def weight(self, which: int, e: int, w: Any, s: Any, z: Any) -> Any:
        """Expert ``e``'s FC``which`` weight dequantized, float32 (N, K)."""
        xp, bits = self.xp, self.bits[which]
        q = xp.astype(self.unpack(w[e, ...], bits), self.f32)  # (N, K)
        n, k = q.shape
        nb = k // self.block if self.block else 1
        if self.block and (k % self.block or tuple(s.shape[1:]) != (n, nb)):
            raise ValueError(f"fc{which}_scales {s.shape} must be (E, {n}, {k}/{self.block}) with "
                             f"K divisible by block_size")
        if not self.block and tuple(s.shape[1:]) != (n,):
            raise ValueError(f"fc{which}_scales {s.shape} must be (E, {n})")
        scale = xp.reshape(xp.astype(s[e, ...], self.f32), (n, nb, 1))
        if z is None:
            zp = xp.asarray(float(1 << (bits - 1)), dtype=self.f32)
        elif self.block:
            zp = xp.reshape(xp.astype(self.unpack(z[e, ...], bits)[:, :nb], self.f32), (n, nb, 1))
        else:
            zp = xp.reshape(xp.astype(self.unpack(z[e, :], bits)[:n], self.f32), (n, 1, 1))
        return xp.reshape((xp.reshape(q, (n, nb, k // nb)) - zp) * scale, (n, k))

    def compute(self, x, router_probs, fc1_w, fc1_s=None, fc1_b=None, fc2_w=None, fc2_s=None, fc2_b=None,
                fc3_w=None, fc3_s=None, fc3_b=None, fc1_zp=None, fc2_zp=None, fc3_zp=None, router_weights=None,
                *extra):
        self.no_fc3(fc3_w)
        if fc1_s is None or fc2_s is None:
            raise ValueError("fc1_scales and fc2_scales are required for integer quantization")
        if any(v is not None for v in extra):
            raise ValueError("global / activation scales belong to the float quantization types")
        qs = {1: (fc1_w, fc1_s, fc1_zp), 2: (fc2_w, fc2_s, fc2_zp)}
        return (self.mix(x, router_probs, (fc1_b, fc2_b), lambda which, e: self.weight(which, e, *qs[which]),
                         router_weights),)


@library.define("MoEGroupRouter", 1, domain=MS, signature=(("T", "TF", "T"), ("T", "TF", "TF")),
                types={"T": (np.float32, np.float16), "TF": (np.float32,)})
class MoEGroupRouter(OpKernel):
    """Group-limited sigmoid router (noaux_tc): s = sigmoid(logits); the ``topk_group``
    groups with the largest sum of their top ``group_topk`` values of s + expert_bias, then
    the ``top_k`` experts of those groups by s + expert_bias; router_probs holds
    log(max(s, 1e-20)) at the chosen experts and ``router_sentinel`` elsewhere, (tokens,
    num_experts). The full-score outputs (selection_scores, router_weights) are s +
    expert_bias and s in float32, given instead of router_probs (not with it). Ties go to the lower index (a stable sort); the
    ``projection_weight`` input is refused."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.top_k = int(info.attr("top_k", 0))
        self.n_group = int(info.attr("n_group", 1))
        self.topk_group = int(info.attr("topk_group", 1))
        self.group_topk = int(info.attr("group_topk", 2))
        self.sentinel = float(info.attr("router_sentinel", -10000.0))
        if min(self.top_k, self.n_group, self.topk_group, self.group_topk) < 1 or self.topk_group > self.n_group:
            raise InvalidGraph(f"{self.where()}: top_k, n_group, topk_group, group_topk must be positive and "
                               f"topk_group <= n_group")
        outs = tuple(info.output_names) + ("",) * 3
        self.legacy = bool(outs[0])
        self.full = bool(outs[1] or outs[2])
        if self.legacy == self.full or bool(outs[1]) != bool(outs[2]):
            raise InvalidGraph(f"{self.where()}: give router_probs alone, or selection_scores and router_weights")
        if self.full and (self.n_group, self.topk_group) != (1, 1):
            raise InvalidGraph(f"{self.where()}: the full-score outputs need n_group = topk_group = 1")

    def compute(self, logits, expert_bias, projection_weight=None):
        xp = self.xp
        if projection_weight is not None:
            raise ValueError("projection_weight is not supported")
        n_exp = logits.shape[-1]
        if n_exp % self.n_group or self.top_k > n_exp or tuple(expert_bias.shape) != (n_exp,):
            raise ValueError(f"num_experts {n_exp} must be a multiple of n_group={self.n_group}, >= top_k="
                             f"{self.top_k}, and expert_bias {expert_bias.shape} ({n_exp},)")
        s = _sigmoid(xp, xp.reshape(xp.astype(logits, expert_bias.dtype), (-1, n_exp)))
        sel = s + expert_bias
        if self.full:
            return (None, sel, s)
        tokens, per = s.shape[0], n_exp // self.n_group
        grouped = xp.reshape(sel, (tokens, self.n_group, per))
        gk = min(self.group_topk, per)
        score = xp.sum(-xp.sort(-grouped, axis=2, stable=True)[:, :, :gk], axis=2)  # (T, G)
        gidx = xp.argsort(-score, axis=1, stable=True)[:, :self.topk_group]
        gmask = xp.any(gidx[:, :, None] == xp.arange(self.n_group, dtype=gidx.dtype)[None, None, :], axis=1)
        emask = xp.reshape(xp.broadcast_to(gmask[:, :, None], (tokens, self.n_group, per)), (tokens, n_exp))
        masked = xp.where(emask, sel, xp.asarray(-xp.inf, dtype=sel.dtype))
        eidx = xp.argsort(-masked, axis=1, stable=True)[:, :self.top_k]
        chosen = xp.any(eidx[:, :, None] == xp.arange(n_exp, dtype=eidx.dtype)[None, None, :], axis=1)
        logs = xp.log(xp.maximum(s, xp.asarray(1e-20, dtype=s.dtype)))
        probs = xp.where(chosen, logs, xp.asarray(self.sentinel, dtype=s.dtype))
        return (xp.astype(probs, logits.dtype), None, None)


# ------------------------------------------------------------------ GatherPacked

#: IQ4_NL's non-linear 4-bit code book (ggml's kvalues_iq4nl).
_IQ4NL = (-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113)
#: ggml type id → (values per block, bytes per block) of the formats decoded here.
_GGML = {0: (1, 4), 1: (1, 2), 30: (1, 2), 2: (32, 18), 6: (32, 22), 8: (32, 34), 20: (32, 18), 14: (256, 210)}


_OUT_TYPES = {1: np.float32, 10: np.float16, **({16: _bf16()[0]} if _bf16() else {})}


@library.define("GatherPacked", 1, domain=MS, signature=(("T1", "Tind"), ("T2",)),
                types={"T1": (np.uint8,), "T2": (np.float32, np.float16) + _bf16(), "Tind": (np.int32, np.int64)})
class GatherPacked(OpKernel):
    """Rows of a 2-D block-packed table (``packed_type``: a ggml type id) gathered and
    dequantized to ``output_dtype``: F32 (0), F16 (1), BF16 (30), Q4_0 (2), Q5_0 (6),
    Q8_0 (8), IQ4_NL (20), Q6_K (14), each with ggml's little-endian block layout. Indices
    outside [0, vocab) select row 0, as onnxruntime. The rows are gathered first, then
    decoded with integer and float arithmetic on the backend (half floats decoded from their
    bits). Not decoded (refused at load): the other ids onnxruntime takes (Q5_K, the IQ2/IQ3
    grids, IQ4_XS)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.kind = int(info.attr("packed_type", -1))
        self.k = int(info.attr("K", 0))
        self.out = int(info.attr("output_dtype", 16))
        if self.kind not in _GGML:
            raise InvalidGraph(f"{self.where()}: packed_type {self.kind} is not supported; one of {sorted(_GGML)}")
        if self.out not in _OUT_TYPES:
            raise InvalidGraph(f"{self.where()}: output_dtype {self.out}; one of {sorted(_OUT_TYPES)} (float, float16, "
                               "bfloat16)")
        if self.k <= 0 or self.k % _GGML[self.kind][0]:
            raise InvalidGraph(f"{self.where()}: K={self.k} must be a positive multiple of the block size "
                               f"{_GGML[self.kind][0]}")

    def ints(self, u: Any) -> Any:
        return self.xp.astype(u, self.backend.dtype(np.int32))

    def signed(self, u: Any) -> Any:
        """uint8 bytes read as int8, as int32."""
        v = self.ints(u)
        return self.xp.where(v >= 128, v - 256, v)

    def word(self, b: Any, n: int) -> Any:
        """The little-endian unsigned ``n``-byte words at the last axis of ``b`` (..., n), as int64."""
        xp = self.xp
        v = xp.astype(b, self.backend.dtype(np.int64))
        return sum(v[..., i] * (1 << (8 * i)) for i in range(n))

    def real(self, bits: Any, exp_bits: int, mant_bits: int) -> Any:
        """IEEE floats from their bit patterns (int64), as float64."""
        xp = self.xp
        f64 = self.backend.dtype(np.float64)
        bias = (1 << (exp_bits - 1)) - 1
        mant = xp.astype(bits % (1 << mant_bits), f64)
        exp = (bits >> mant_bits) % (1 << exp_bits)
        sign = 1.0 - 2.0 * xp.astype((bits >> (mant_bits + exp_bits)) % 2, f64)
        e = xp.astype(exp, f64)
        normal = (1.0 + mant / (1 << mant_bits)) * xp.pow(2.0, e - bias)
        sub = mant * 2.0 ** (1 - bias - mant_bits)
        special = xp.where(mant == 0, xp.asarray(math.inf, dtype=f64), xp.asarray(math.nan, dtype=f64))
        v = xp.where(exp == 0, sub, xp.where(exp == (1 << exp_bits) - 1, special, normal))
        return sign * v

    def half(self, b: Any) -> Any:
        """float16 at the last axis (2 bytes) of ``b``, float32 (..., 1)."""
        return self.xp.astype(self.real(self.word(b, 2), 5, 10), self.backend.dtype(np.float32))[..., None]

    def decode(self, blk: Any) -> Any:
        """Blocks (M, nb, bytes) → values (M, nb, block), float32."""
        xp, kind = self.xp, self.kind
        f32 = self.backend.dtype(np.float32)
        if kind in (0, 1, 30):
            exp_mant = {0: (8, 23), 1: (5, 10), 30: (8, 7)}[kind]
            return xp.astype(self.real(self.word(blk, blk.shape[-1]), *exp_mant), f32)[..., None]
        d = self.half(blk[..., 0:2]) if kind != 14 else self.half(blk[..., 208:210])
        if kind == 8:
            return d * xp.astype(self.signed(blk[..., 2:]), f32)
        if kind in (2, 20):
            qs = self.ints(blk[..., 2:18])
            q = xp.concat([qs % 16, qs // 16], axis=-1)
            if kind == 20:  # the code book's value of each nibble
                book = xp.asarray(np.array(_IQ4NL, np.float32))
                return d * xp.reshape(xp.take(book, xp.reshape(q, (-1,))), q.shape)
            return d * xp.astype(q - 8, f32)
        if kind == 6:
            qh = self.word(blk[..., 2:6], 4)[..., None]  # bit j: the high bit of value j
            qs = self.ints(blk[..., 6:22])
            shifts = xp.asarray(np.arange(32, dtype=np.int64))
            high = xp.astype((qh >> shifts) % 2, qs.dtype) * 16
            q = xp.concat([qs % 16, qs // 16], axis=-1) + high
            return d * xp.astype(q - 16, f32)
        # Q6_K: two halves of 128 values; ql low/high nibbles, qh 2-bit pairs, a scale per 16
        m, nb = blk.shape[0], blk.shape[1]
        ql = xp.reshape(self.ints(blk[..., 0:128]), (m, nb, 2, 64))
        qh = xp.reshape(self.ints(blk[..., 128:192]), (m, nb, 2, 32))
        sc = xp.reshape(xp.astype(self.signed(blk[..., 192:208]), f32), (m, nb, 2, 8, 1))
        low = xp.concat([ql[..., :32] % 16, ql[..., 32:] % 16, ql[..., :32] // 16, ql[..., 32:] // 16], axis=-1)
        high = xp.concat([qh % 4, (qh // 4) % 4, (qh // 16) % 4, qh // 64], axis=-1)
        q = xp.reshape(xp.astype(low + high * 16 - 32, f32), (m, nb, 2, 8, 16)) * sc
        return d * xp.reshape(q, (m, nb, 256))

    def compute(self, data, indices):
        xp = self.xp
        block, nbytes = _GGML[self.kind]
        nb = self.k // block
        if data.ndim != 2 or data.shape[1] != nb * nbytes or data.shape[0] < 1:
            raise ValueError(f"data {data.shape} must be (vocab_size >= 1, {nb * nbytes}) for packed_type "
                             f"{self.kind} and K={self.k}")
        idx = xp.reshape(indices, (-1,))
        idx = xp.where((idx < 0) | (idx >= data.shape[0]), xp.zeros_like(idx), idx)
        rows = xp.take(data, idx, axis=0)
        vals = xp.reshape(self.decode(xp.reshape(rows, (rows.shape[0], nb, nbytes))), (rows.shape[0], self.k))
        y = xp.astype(vals, self.backend.dtype(_OUT_TYPES[self.out]))
        return (xp.reshape(y, tuple(indices.shape) + (self.k,)),)


# ------------------------------------------------------------------ AttnLSTM


@library.define("AttnLSTM", 1, domain=MS,
                signature=(("T", "T", "T", "T", "T1", "T", "T", "T", "T", "T", "T", "T", "T1", "T"), ("T", "T", "T")),
                types={"T": (np.float32,), "T1": (np.int32,)}, host_inputs=(4, 12))
class AttnLSTM(LSTM):
    """An LSTM wrapped in a Bahdanau attention: at each step the cell reads
    concat(X_t, ATTN_{t-1}) (W's columns: input, then attention), then the attention
    mechanism scores the memory with the new H: ``align = softmax(sum(V * tanh(KEYS + H QW)))``
    over each batch entry's ``memory_seq_lens`` steps (KEYS = M MW), ``CONTEXT = align @ M``;
    ATTN_t = concat(H_t, CONTEXT_t) AW when AW is given, else CONTEXT_t (zero at first).
    Gates, peepholes, clip, activations and ``input_forget`` are the library's LSTM's
    (subclassed); entries past their ``sequence_lens`` keep their state and output zeros.
    float only: onnxruntime registers a double kernel that fails at run time."""

    def compute(self, X, W, R, B=None, sequence_lens=None, initial_h=None, initial_c=None, P=None, QW=None,
                MW=None, V=None, M=None, memory_seq_lens=None, AW=None):
        xp = self.xp
        if QW is None or MW is None or V is None or M is None:
            raise ValueError("the attention mechanism needs QW, MW, V and M")
        x = self.widen(X)
        work = x.dtype
        seq, batch, isz = x.shape
        hs, dirs = self.hidden, self.num_dirs
        steps, depth = M.shape[1], M.shape[2]
        attn = depth if AW is None else AW.shape[2]
        if tuple(W.shape) != (dirs, 4 * hs, isz + attn) or tuple(R.shape) != (dirs, 4 * hs, hs):
            raise ValueError(f"W {tuple(W.shape)} must be ({dirs}, {4 * hs}, {isz}+{attn}) and R "
                             f"{tuple(R.shape)} ({dirs}, {4 * hs}, {hs})")
        if QW.shape[:2] != (dirs, hs) or MW.shape[:2] != (dirs, depth) or M.shape[0] != batch:
            raise ValueError(f"QW {QW.shape} / MW {MW.shape} / M {M.shape} do not fit hidden_size {hs}, "
                             f"memory depth {depth} and batch {batch}")
        b = None if B is None else self._shaped(B, "B", (dirs, 8 * hs), work)
        p = None if P is None else self._shaped(P, "P", (dirs, 3 * hs), work)
        mask, _ = self._mask(sequence_lens, seq, batch)
        if memory_seq_lens is None:
            mem_len = np.full(batch, steps)
        else:
            mem_len = self.host(memory_seq_lens).astype(np.int64).reshape(-1)
            if mem_len.shape != (batch,) or (mem_len < 0).any() or (mem_len > steps).any():
                raise ValueError(f"memory_seq_lens must be {batch} values in [0, {steps}]")
        valid = xp.asarray(np.arange(steps)[None, :] < mem_len[:, None])  # (B, steps)
        memory = xp.where(valid[..., None], self.widen(M), xp.zeros((), dtype=work))  # VALUES
        ys, y_hs, y_cs = [], [], []
        for d in range(dirs):
            w = self._shaped(W[d, ...], None, (), work)
            folded, params = self._prepare(d, self._shaped(R[d, ...], None, (), work),
                                           xp.zeros((4 * hs,), dtype=work) if b is None else b[d, 4 * hs:],
                                           None if p is None else p[d, ...])
            xw = xp.matmul(x, w[:, :isz].T) + (folded if b is None else b[d, :4 * hs] + folded)
            wa = w[:, isz:].T
            keys = xp.matmul(memory, self._shaped(MW[d, ...], None, (), work))  # (B, steps, A)
            qw, v = self._shaped(QW[d, ...], None, (), work), self._shaped(V[d, ...], None, (), work)
            aw = None if AW is None else self._shaped(AW[d, ...], None, (), work)
            h = self._state(initial_h, "initial_h", batch, work, d)
            c = self._state(initial_c, "initial_c", batch, work, d)
            state = xp.zeros((batch, attn), dtype=work)
            out: list[Any] = [None] * seq
            for t in (range(seq - 1, -1, -1) if self.reverse[d] else range(seq)):
                h_new, c_new = self._step(d, xw[t, ...] + state @ wa, h, c, params)
                score = xp.sum(v * xp.tanh(keys + xp.matmul(h_new, qw)[:, None, :]), axis=2)
                score = xp.where(valid, score, xp.asarray(-xp.inf, dtype=work))
                e = xp.exp(score - xp.max(score, axis=1, keepdims=True))
                align = e / xp.sum(e, axis=1, keepdims=True)
                context = xp.sum(align[..., None] * memory, axis=1)
                s_new = context if aw is None else xp.matmul(xp.concat([h_new, context], axis=1), aw)
                if mask is None:
                    h, c, state = h_new, c_new, s_new
                    out[t] = h_new
                else:
                    m = mask[t, ...]
                    h, c, state = xp.where(m, h_new, h), xp.where(m, c_new, c), xp.where(m, s_new, state)
                    out[t] = xp.where(m, h_new, xp.zeros_like(h_new))
            ys.append(xp.stack(out, axis=0) if seq else xp.zeros((0, batch, hs), dtype=work))
            y_hs.append(h)
            y_cs.append(c)
        outs = (xp.stack(ys, axis=1), xp.stack(y_hs, axis=0), xp.stack(y_cs, axis=0))
        return tuple(self.narrow(o, X) for o in outs)
