"""The com.microsoft transformer operators (onyxrt_ops.contrib_transformer) against
onnxruntime's CPU kernels, over numpy and array_api_strict, the simulated CuPy, and one
transformer-optimizer-style model through onyxrt.InferenceSession."""

from __future__ import annotations

import numpy as np
import pytest
from library_harness import bind, domain_node, ort_outputs, run_node
from onnx import TensorProto, helper

R = np.random.default_rng(21)
F32 = dict(rtol=1e-5, atol=1e-6)
# Attention: onnxruntime's MLAS GEMMs and softmax sum in another order than numpy's
# matmul; float32 rounding of ~H products then differs by a few ulps.
ATT = dict(rtol=1e-5, atol=2e-6)


def f32(*shape, scale=1.0):
    return (R.standard_normal(shape) * scale).astype(np.float32)


def check(bound, n, inputs, tol=F32, host_inputs=(), skip=()):
    """Every output ``n`` asks for, ``bound`` vs onnxruntime (outputs in ``skip`` unchecked)."""
    got = run_node(bound, n, inputs, host_inputs=host_inputs)
    want = ort_outputs(n, inputs)
    for i, w in enumerate(want):
        if i in skip or not n.output[i]:
            continue
        assert got[i].dtype == w.dtype and got[i].shape == w.shape, (i, got[i].dtype, got[i].shape, w.shape)
        np.testing.assert_allclose(got[i], w, **tol, err_msg=f"output {i}")
    return got


def half_matches_float(bound, n, inputs, tol=(2e-3, 2e-3), host_inputs=()):
    """float16 inputs give the float32 result (onnxruntime's CPU takes only float32),
    rounded once: within float16's resolution of it."""
    wide = [v.astype(np.float32) if isinstance(v, np.ndarray) and v.dtype == np.float16 else v for v in inputs]
    got = run_node(bound, n, inputs, host_inputs=host_inputs)
    want = run_node(bound, n, wide, host_inputs=host_inputs)
    for g, w in zip(got, want):
        if w.dtype == np.float32 and g.dtype == np.float16:
            np.testing.assert_allclose(g.astype(np.float32), w, rtol=tol[0], atol=tol[1])


# ------------------------------------------------------------------------ activations


@pytest.mark.parametrize("op,bias", [("Gelu", False), ("BiasGelu", True), ("FastGelu", False), ("FastGelu", True)])
def test_gelus(bound, op, bias):
    x = f32(2, 3, 8, scale=3)
    inputs = [x, f32(8)] if bias else [x]
    check(bound, domain_node(op, inputs), inputs)


@pytest.mark.parametrize("alpha", [None, 1.0, -0.5])
def test_quick_gelu(bound, alpha):
    x = f32(4, 7, scale=4)
    attrs = {} if alpha is None else {"alpha": alpha}
    check(bound, domain_node("QuickGelu", [x], **attrs), [x])


def test_gelus_zero_size_and_half(numpy_bound):
    x = np.zeros((0, 8), np.float32)
    for op, inputs in (("Gelu", [x]), ("FastGelu", [x, f32(8)]), ("QuickGelu", [x])):
        check(numpy_bound, domain_node(op, inputs), inputs)
    h = f32(3, 8).astype(np.float16)
    for op, inputs in (("Gelu", [h]), ("BiasGelu", [h, f32(8).astype(np.float16)]),
                       ("FastGelu", [h, f32(8).astype(np.float16)]), ("QuickGelu", [h])):
        half_matches_float(numpy_bound, domain_node(op, inputs), inputs)


# --------------------------------------------------------------------- normalizations


@pytest.mark.parametrize("beta,bias,outs", [(True, True, 4), (False, False, 1), (True, False, 2), (False, True, 4)])
def test_skip_layer_norm(bound, beta, bias, outs):
    x, skip = f32(2, 5, 16), f32(2, 5, 16)
    inputs = [x, skip, f32(16), f32(16) if beta else None, f32(16) if bias else None]
    check(bound, domain_node("SkipLayerNormalization", inputs, outs, epsilon=1e-5), inputs)


@pytest.mark.parametrize("skip_shape", [(1, 5, 16), (5, 16)])
def test_skip_layer_norm_broadcast_skip(numpy_bound, skip_shape):
    inputs = [f32(3, 5, 16), f32(*skip_shape), f32(16), f32(16)]
    check(numpy_bound, domain_node("SkipLayerNormalization", inputs, 4), inputs)


@pytest.mark.parametrize("bias,outs", [(True, 4), (False, 1)])
def test_skip_simplified_layer_norm(bound, bias, outs):
    inputs = [f32(2, 5, 16), f32(2, 5, 16), f32(16), f32(16) if bias else None]
    # mean (output 1) is not computed by the RMS norm: onnxruntime leaves it unwritten.
    check(bound, domain_node("SkipSimplifiedLayerNormalization", inputs, outs, epsilon=1e-6), inputs, skip=(1,))


def test_skip_norms_half(numpy_bound):
    for dt in (np.float16,):
        inputs = [f32(2, 3, 8).astype(dt), f32(2, 3, 8).astype(dt), f32(8).astype(dt), f32(8).astype(dt)]
        tol = dict(rtol=1e-3, atol=2e-3) if dt == np.float16 else dict(rtol=1e-10, atol=1e-12)
        check(numpy_bound, domain_node("SkipLayerNormalization", inputs, 4), inputs, tol=tol)
        check(numpy_bound, domain_node("SkipSimplifiedLayerNormalization", inputs, 4), inputs, tol=tol, skip=(1,))


@pytest.mark.parametrize("axis", [-1, 1])
def test_simplified_layer_norm(bound, axis):
    x = f32(2, 3, 8)
    scale = f32(*x.shape[axis:]) if axis != -1 else f32(8)
    n = domain_node("SimplifiedLayerNormalization", [x, scale], 2, domain="", axis=axis, epsilon=1e-5)
    check(bound, n, [x, scale])


@pytest.mark.parametrize("dtype", [np.float16, np.float64])
def test_simplified_layer_norm_half_double(numpy_bound, dtype):
    x, scale = f32(4, 8).astype(dtype), f32(8).astype(dtype)
    n = domain_node("SimplifiedLayerNormalization", [x, scale], 2, domain="")
    tol = dict(rtol=1e-3, atol=2e-3) if dtype == np.float16 else dict(rtol=1e-12, atol=1e-12)
    check(numpy_bound, n, [x, scale], tol=tol)


def _embed_inputs(b=2, s=5, h=8, segment=True, mask=True, pos_ids=None):
    ids = R.integers(0, 11, (b, s)).astype(np.int32)
    seg = R.integers(0, 2, (b, s)).astype(np.int32) if segment else None
    m = None
    if mask:
        m = np.ones((b, s), np.int32)
        m[0, 3:] = 0
    return [ids, seg, f32(11, h), f32(9, h), f32(2, h) if segment else None, f32(h), f32(h), m, pos_ids]


@pytest.mark.parametrize("segment,mask", [(True, True), (False, True), (True, False), (False, False)])
def test_embed_layer_norm(bound, segment, mask):
    inputs = _embed_inputs(segment=segment, mask=mask)
    check(bound, domain_node("EmbedLayerNormalization", inputs, 3, epsilon=1e-5), inputs)


@pytest.mark.parametrize("shape", [(2, 5), (1, 5)])
def test_embed_layer_norm_position_ids(numpy_bound, shape):
    inputs = _embed_inputs(pos_ids=R.integers(0, 9, shape).astype(np.int32))
    check(numpy_bound, domain_node("EmbedLayerNormalization", inputs, 3), inputs)


def test_embed_layer_norm_bad_id(numpy_bound):
    inputs = _embed_inputs()
    inputs[0][0, 0] = 11
    with pytest.raises(ValueError, match="word_embedding ids"):
        run_node(numpy_bound, domain_node("EmbedLayerNormalization", inputs, 3), inputs)


# -------------------------------------------------------------------------- attention


def _attention(b=2, s=4, d=16, n=2, v_hidden=None, bias=True, mask=None, past=None, attention_bias=None, outs=1, **attrs):
    hv = v_hidden or d
    inputs = [f32(b, s, d), f32(d, 2 * d + hv, scale=0.3), f32(2 * d + hv) if bias else None, mask, past, attention_bias]
    while inputs and inputs[-1] is None:
        inputs.pop()
    if v_hidden:
        attrs["qkv_hidden_sizes"] = [d, d, hv]
    return domain_node("Attention", inputs, outs, num_heads=n, **attrs), inputs


MASKS = {
    "none": None,
    "lengths": np.array([3, 4], np.int32),
    "start_end": np.array([4, 3, 1, 0], np.int32),
    "raw2d": np.array([[1, 1, 0, 1], [1, 1, 1, 0]], np.int32),
    "raw3d": (R.random((2, 4, 4)) > 0.3).astype(np.int32),
    "all_masked": np.array([[0, 0, 0, 0], [1, 1, 1, 1]], np.int32),
}


@pytest.mark.parametrize("mask", sorted(MASKS))
@pytest.mark.parametrize("unidirectional", [0, 1])
def test_attention_masks(bound, mask, unidirectional):
    n, inputs = _attention(mask=MASKS[mask], unidirectional=unidirectional)
    check(bound, n, inputs, tol=ATT)


@pytest.mark.parametrize("attrs", [dict(mask_filter_value=-5.0), dict(scale=0.1), dict(v_hidden=8), dict(bias=False)])
def test_attention_attributes(bound, attrs):
    n, inputs = _attention(mask=MASKS["raw2d"], **attrs)
    check(bound, n, inputs, tol=ATT)


@pytest.mark.parametrize("unidirectional", [0, 1])
def test_attention_past_present(bound, unidirectional):
    past = f32(2, 2, 2, 3, 8)
    mask = np.ones((2, 4), np.int32)
    mask[1, 0] = 0
    for m in (None, mask):
        n, inputs = _attention(s=1, mask=m, past=past, outs=2, unidirectional=unidirectional)
        check(bound, n, inputs, tol=ATT)
    n, inputs = _attention(s=3, past=past, outs=2, unidirectional=unidirectional)
    check(bound, n, inputs, tol=ATT)


def test_attention_bias_input(numpy_bound):
    for shape in ((2, 2, 4, 4), (1, 1, 4, 4), (1, 2, 4, 4)):
        n, inputs = _attention(mask=MASKS["lengths"], attention_bias=f32(*shape))
        check(numpy_bound, n, inputs, tol=ATT)


def test_attention_4d_mask(numpy_bound):
    # onnxruntime's CPU refuses the 4-D (Megatron) mask; its CUDA kernel reads rows
    # [past, past + S) and columns [0, total) of (B, 1, max, max): check against the
    # equivalent 3-D mask.
    m4 = (R.random((2, 1, 6, 6)) > 0.3).astype(np.int32)
    n4, inputs = _attention(mask=m4)
    got = run_node(numpy_bound, n4, inputs)[0]
    inputs[3] = m4[:, 0, :4, :4].copy()
    np.testing.assert_array_equal(got, run_node(numpy_bound, n4, inputs)[0])
    np.testing.assert_allclose(got, ort_outputs(n4, inputs)[0], **ATT)


def test_attention_half_and_errors(numpy_bound):
    n, inputs = _attention(mask=MASKS["raw2d"])
    half = [v.astype(np.float16) if v is not None and v.dtype == np.float32 else v for v in inputs]
    half_matches_float(numpy_bound, n, half)
    from onyxrt.errors import InvalidGraph

    with pytest.raises(InvalidGraph, match="num_heads"):
        numpy_bound.kernel(domain_node("Attention", inputs[:2], num_heads=0), 1)
    with pytest.raises(InvalidGraph, match="qkv_hidden_sizes"):
        numpy_bound.kernel(domain_node("Attention", inputs[:2], num_heads=2, qkv_hidden_sizes=[16, 8, 16]), 1)
    bad = list(inputs[:3]) + [np.ones((3,), np.int32)]
    with pytest.raises(ValueError, match="mask of shape"):
        run_node(numpy_bound, domain_node("Attention", bad, num_heads=2), bad)


def _mha(b=2, s=3, L=4, n=2, h=4, hv=None, form="separate", bias=False, mask=None, attention_bias=None,
         past=0, outs=1, **attrs):
    hv = hv or h
    d, dv = n * h, n * hv
    if form == "separate":
        q, k, v = f32(b, s, d), f32(b, L, d), f32(b, L, dv)
    elif form == "packed_kv":
        q, k, v = f32(b, s, d), f32(b, L, n, 2, h), None
    else:  # packed_qkv
        q, k, v = f32(b, s, n, 3, h), None, None
    inputs = [q, k, v, f32(2 * d + dv) if bias else None, mask, attention_bias,
              f32(b, n, past, h) if past else None, f32(b, n, past, hv) if past else None]
    while inputs and inputs[-1] is None:
        inputs.pop()
    return domain_node("MultiHeadAttention", inputs, outs, num_heads=n, **attrs), inputs


@pytest.mark.parametrize("bias", [False, True])
def test_mha_separate(bound, bias):
    n, inputs = _mha(bias=bias)
    check(bound, n, inputs, tol=ATT)


@pytest.mark.parametrize("bias", [False, True])
def test_mha_packed_equals_separate(bound, bias):
    # onnxruntime's CPU refuses packed KV and packed QKV ("not implemented for CPU"; its
    # CUDA kernel takes them): the packed forms must give the separate inputs' result.
    nb, h = 2, 4
    sep_node, (q, k, v, *rest) = _mha(s=4, L=4, bias=True)
    if not bias:
        rest[0] = None
    sep = [q, k, v] + rest
    heads = lambda x: x.reshape(2, 4, nb, h)  # noqa: E731
    kv = [q, np.stack([heads(k), heads(v)], axis=3), None] + rest
    qkv = [np.stack([heads(q), heads(k), heads(v)], axis=3), None, None] + rest
    want = run_node(bound, domain_node("MultiHeadAttention", sep, num_heads=nb), sep)[0]
    for packed in (kv, qkv):
        got = run_node(bound, domain_node("MultiHeadAttention", packed, num_heads=nb), packed)[0]
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(want, ort_outputs(domain_node("MultiHeadAttention", sep, num_heads=nb), sep)[0], **ATT)


@pytest.mark.parametrize("mask", ["lengths", "raw2d", "raw3d"])
def test_mha_key_padding_mask(bound, mask):
    m = {"lengths": np.array([2, 4], np.int32), "raw2d": np.array([[1, 0, 1, 1], [1, 1, 1, 0]], np.int32),
         "raw3d": (R.random((2, 3, 4)) > 0.3).astype(np.int32)}[mask]
    n, inputs = _mha(mask=m)
    check(bound, n, inputs, tol=ATT)


@pytest.mark.parametrize("unidirectional", [0, 1])
def test_mha_past_and_attention_bias(bound, unidirectional):
    n, inputs = _mha(s=2, L=2, past=3, outs=3, bias=True, attention_bias=f32(1, 2, 2, 5),
                     unidirectional=unidirectional)
    check(bound, n, inputs, tol=ATT)


def test_mha_unidirectional_and_values(numpy_bound):
    n, inputs = _mha(s=4, L=4, hv=6, unidirectional=1, mask_filter_value=-100.0, scale=0.3)
    check(numpy_bound, n, inputs, tol=ATT)
    half = [v.astype(np.float16) if v is not None else v for v in inputs]
    half_matches_float(numpy_bound, n, half)


# -------------------------------------------------------------------- rotary and GQA


def _caches(rows, half):
    pos = np.arange(rows)[:, None] * (10000.0 ** (-np.arange(half) / half))[None, :]
    return np.cos(pos).astype(np.float32), np.sin(pos).astype(np.float32)


@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("positions", ["scalar", "tensor"])
@pytest.mark.parametrize("layout", ["3d", "4d", "partial"])
def test_rotary_embedding(bound, interleaved, positions, layout):
    b, s, n, h = 2, 3, 2, 8
    cos, sin = _caches(16, h // 4 if layout == "partial" else h // 2)
    x = f32(b, n, s, h) if layout == "4d" else f32(b, s, n * h)
    pid = np.array([2], np.int64) if positions == "scalar" else R.integers(0, 16, (b, s)).astype(np.int64)
    attrs = dict(interleaved=interleaved)
    if layout == "partial":
        attrs.update(num_heads=n, rotary_embedding_dim=h // 2)
    inputs = [x, pid, cos, sin]
    check(bound, domain_node("RotaryEmbedding", inputs, **attrs), inputs, host_inputs=(1,))


def test_rotary_half(numpy_bound):
    cos, sin = _caches(8, 4)
    inputs = [f32(1, 3, 16).astype(np.float16), np.array([0], np.int64), cos.astype(np.float16), sin.astype(np.float16)]
    check(numpy_bound, domain_node("RotaryEmbedding", inputs), inputs, tol=dict(rtol=1e-3, atol=1e-3),
          host_inputs=(1,))


def _gqa(b=2, s=3, n=4, nk=2, h=16, past=0, seqlens=None, packed=False, rotary=False, interleaved=0,
         half=None, dtype=np.float32, **attrs):
    b = 1 if past and s > 1 else b  # onnxruntime: a multi-token step with a past is batch 1
    total = past + s
    seqlens = np.full((b,), total - 1, np.int32) if seqlens is None else np.asarray(seqlens, np.int32)
    if packed:
        q, k, v = f32(b, s, (n + 2 * nk) * h), None, None
    else:
        q, k, v = f32(b, s, n * h), f32(b, s, nk * h), f32(b, s, nk * h)
    inputs = [q, k, v, f32(b, nk, past, h), f32(b, nk, past, h), seqlens, np.array(total, np.int32)]
    if rotary:
        cos, sin = _caches(32, half or h // 2)
        inputs += [cos, sin]
        attrs.update(do_rotary=1, rotary_interleaved=interleaved)
    inputs = [x.astype(dtype) if x is not None and x.dtype == np.float32 else x for x in inputs]
    return domain_node("GroupQueryAttention", inputs, 3, num_heads=n, kv_num_heads=nk, **attrs), inputs


GQA_HOST = (5, 6, 9)


@pytest.mark.parametrize("case", [dict(), dict(past=4), dict(past=4, s=1), dict(nk=4), dict(nk=1, past=2),
                                  dict(packed=True, past=2), dict(local_window_size=2, s=5),
                                  dict(local_window_size=1, past=4, s=1), dict(softcap=2.0, past=3),
                                  dict(scale=0.2)])
def test_gqa(bound, case):
    n, inputs = _gqa(**case)
    check(bound, n, inputs, tol=ATT, host_inputs=GQA_HOST)


@pytest.mark.parametrize("case", [dict(), dict(past=4), dict(past=4, s=1, interleaved=1), dict(half=8, h=32, past=2),
                                  dict(packed=True, past=3, s=1)])
def test_gqa_rotary(bound, case):
    n, inputs = _gqa(rotary=True, **case)
    check(bound, n, inputs, tol=ATT, host_inputs=GQA_HOST)


def test_gqa_ragged_past(numpy_bound):
    # Token generation over a batch whose entries have different past lengths: the past
    # buffer holds 5 rows, entry 0 uses 2 of them, entry 1 all 5; the present rows past
    # each entry's total are unspecified (onnxruntime leaves them unwritten).
    n, inputs = _gqa(s=1, past=5, seqlens=[2, 5], rotary=True)
    got = run_node(numpy_bound, n, inputs, host_inputs=GQA_HOST)
    want = ort_outputs(n, inputs)
    np.testing.assert_allclose(got[0], want[0], **ATT)
    for i, t in enumerate((3, 6)):
        for o in (1, 2):
            np.testing.assert_allclose(got[o][i, :, :t], want[o][i, :, :t], **ATT)


def test_gqa_half(numpy_bound):
    n, inputs = _gqa(past=3, rotary=True, dtype=np.float16)
    check(numpy_bound, n, inputs, tol=dict(rtol=2e-3, atol=2e-3), host_inputs=GQA_HOST)


def test_gqa_attention_bias(numpy_bound):
    n, inputs = _gqa(past=2, s=2)
    inputs += [None, None, None, f32(1, 4, 2, 4)]
    n = domain_node("GroupQueryAttention", inputs, 3, num_heads=4, kv_num_heads=2)
    check(numpy_bound, n, inputs, tol=ATT, host_inputs=GQA_HOST)


# -------------------------------------------------- the GPU backend (simulated CuPy)


def test_simulated_cupy_matches_numpy(numpy_bound):
    from onyxrt_gpu.kernels._common import BACKEND
    from onyxrt_gpu.testing.simulated_cupy import install

    x = f32(2, 4, 16)
    cos, sin = _caches(16, 4)
    cases = [
        (domain_node("FastGelu", [x, f32(16)]), [x, f32(16)], ()),
        (domain_node("Gelu", [x]), [x], ()),
        (domain_node("QuickGelu", [x]), [x], ()),
        (domain_node("SkipLayerNormalization", [x, x, f32(16), f32(16), f32(16)], 4),
         [x, f32(2, 4, 16), f32(16), f32(16), f32(16)], ()),
        (domain_node("SimplifiedLayerNormalization", [x, f32(16)], 2, domain=""), [x, f32(16)], ()),
        (domain_node("EmbedLayerNormalization", _embed_inputs(), 3), _embed_inputs(), ()),
        (*_attention(mask=MASKS["start_end"], unidirectional=1), ()),
        (*_attention(s=1, past=f32(2, 2, 2, 3, 8), outs=2), ()),
        (*_mha(s=2, L=2, past=3, outs=3, bias=True, mask=np.array([[1, 1, 0, 1, 1], [1] * 5], np.int32)), ()),
        (domain_node("RotaryEmbedding", [x, None, cos, sin], interleaved=1),
         [x, np.array([1], np.int64), cos, sin], (1,)),
        (*_gqa(past=4, s=1, rotary=True, local_window_size=3, softcap=1.5), GQA_HOST),
        (*_dmmha(b=4, beams=2, bias=True), DM_HOST),
        (domain_node("MRotaryEmbedding", [x, None, cos, sin], mrope_section=[2, 1, 1], mrope_layout=1, num_heads=2),
         [x, R.integers(0, 16, (3, 2, 4)).astype(np.int64), cos, sin], (1,)),
        (domain_node("ScaledSiLU", [x]), [x], ()),
        (domain_node("GatedRMSNorm", [x, x, x]), [x, f32(4), f32(2, 4, 16)], ()),
        (domain_node("BranchwiseRMSNorm", [x, x], num_branches=4), [x, f32(4)], ()),
        (domain_node("BiasSplitGelu", [x, x]), [x, f32(16)], ()),
        (domain_node("GemmFastGelu", [x, x, x]), [x, f32(16, 3), f32(3)], ()),
        (domain_node("BiasSoftmax", [x, x], axis=2), [x, f32(2, 1, 16)], ()),
        (domain_node("SkipGroupNorm", [x] * 5, 2, groups=4), [f32(2, 2, 2, 16), f32(16), f32(16), f32(2, 16), f32(16)],
         ()),
    ]
    with install():
        import cupy

        gpu = bind("cupy", BACKEND)
        gpu.array = cupy.asarray
        gpu.host = lambda v: v.get()
        for n, inputs, host in cases:
            want = run_node(numpy_bound, n, inputs, host_inputs=host)
            got = run_node(gpu, n, inputs, host_inputs=host)
            for g, w in zip(got, want):
                np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6, err_msg=n.op_type)


# --------------------------------------------------------------- through a session


def _bert_layer() -> bytes:
    """EmbedLayerNormalization → Attention → SkipLayerNormalization → MatMul → BiasGelu →
    MatMul → SkipLayerNormalization (+ FastGelu, QuickGelu, RotaryEmbedding and
    SkipSimplifiedLayerNormalization on the side), as the transformer optimizer writes a
    BERT layer. (Not SimplifiedLayerNormalization: the loader refuses a default-domain
    operator onnx has no schema for, before any provider is asked.)"""
    h, ff, vocab = 16, 32, 20
    init = {"word": f32(vocab, h), "pos": f32(8, h), "seg": f32(2, h), "g0": f32(h), "b0": f32(h),
            "wqkv": f32(h, 3 * h, scale=0.3), "bqkv": f32(3 * h), "g1": f32(h), "b1": f32(h),
            "w1": f32(h, ff, scale=0.3), "bias1": f32(ff), "w2": f32(ff, h, scale=0.3), "g2": f32(h),
            "b2": f32(h), "bias2": f32(h), "rms": f32(h)}
    cos, sin = _caches(8, 4)
    init.update(cos=cos, sin=sin, pid=np.array([0], np.int64))
    ms = "com.microsoft"
    nodes = [
        helper.make_node("EmbedLayerNormalization", ["ids", "segs", "word", "pos", "seg", "g0", "b0", "mask"],
                         ["emb", "mask_index"], domain=ms, epsilon=1e-12),
        helper.make_node("Attention", ["emb", "wqkv", "bqkv", "mask_index"], ["att"], domain=ms, num_heads=2),
        helper.make_node("SkipLayerNormalization", ["att", "emb", "g1", "b1"], ["ln1"], domain=ms),
        helper.make_node("MatMul", ["ln1", "w1"], ["mm1"]),
        helper.make_node("BiasGelu", ["mm1", "bias1"], ["act"], domain=ms),
        helper.make_node("MatMul", ["act", "w2"], ["mm2"]),
        helper.make_node("SkipLayerNormalization", ["mm2", "ln1", "g2", "b2", "bias2"], ["ln2"], domain=ms),
        helper.make_node("FastGelu", ["ln2"], ["fg"], domain=ms),
        helper.make_node("QuickGelu", ["fg"], ["qg"], domain=ms),
        helper.make_node("RotaryEmbedding", ["qg", "pid", "cos", "sin"], ["rot"], domain=ms),
        helper.make_node("SkipSimplifiedLayerNormalization", ["rot", "ln2", "rms"], ["y"], domain=ms, epsilon=1e-6),
    ]
    graph = helper.make_graph(
        nodes, "bert_layer",
        [helper.make_tensor_value_info(n, TensorProto.INT32, ["B", "S"]) for n in ("ids", "segs", "mask")],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("ln2", TensorProto.FLOAT, None)],
        [helper.make_tensor(k, TensorProto.INT64 if v.dtype == np.int64 else TensorProto.FLOAT, v.shape, v.ravel())
         for k, v in init.items()],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(ms, 1)],
                              ir_version=10)
    return model.SerializeToString()


def test_bert_layer_through_session():
    import onnxruntime as ort

    import onyxrt

    model = _bert_layer()
    feeds = {"ids": R.integers(0, 20, (2, 6)).astype(np.int32), "segs": R.integers(0, 2, (2, 6)).astype(np.int32),
             "mask": np.array([[1] * 6, [1, 1, 1, 1, 0, 0]], np.int32)}
    got = onyxrt.InferenceSession(model).run(None, feeds)
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------------------ edge cases


def test_attention_present_without_past(bound):
    n, inputs = _attention(outs=2, mask=MASKS["lengths"])
    check(bound, n, inputs, tol=ATT)


def test_mha_bnsh_key_value(bound):
    # key and value already in (B, N, L, H) (cross attention over a cached projection):
    # no bias is added to them, and they are the present outputs.
    for bias in (None, f32(24)):
        inputs = [f32(2, 3, 8), f32(2, 2, 4, 4), f32(2, 2, 4, 4), bias]
        check(bound, domain_node("MultiHeadAttention", inputs, 3 if bias is None else 1, num_heads=2), inputs,
              tol=ATT)


@pytest.mark.parametrize("mask,uni", [(np.array([[1, 0, 1, 1], [1, 1, 1, 1]], np.int32), 0),
                                      (np.array([2, 4], np.int32), 0), (np.array([[1, 0, 1, 1], [1, 1, 1, 0]]), 1)])
def test_mha_mask_with_past(bound, mask, uni):
    n, inputs = _mha(s=1, L=1, past=3, outs=3, mask=mask.astype(np.int32), unidirectional=uni)
    check(bound, n, inputs, tol=ATT)


def test_gqa_padded_first_prompt(bound):
    # A right-padded prompt: entry 1 has 2 tokens of 4; its padding rows attend to its
    # valid keys only (rows and cache entries past them are unspecified).
    n, inputs = _gqa(b=2, s=4, seqlens=[3, 1])
    got = run_node(bound, n, inputs, host_inputs=GQA_HOST)
    want = ort_outputs(n, inputs)
    np.testing.assert_allclose(got[0], want[0], **ATT)
    for o in (1, 2):
        np.testing.assert_allclose(got[o][0], want[o][0], **ATT)
        np.testing.assert_allclose(got[o][1, :, :2], want[o][1, :, :2], **ATT)


def test_gqa_bidirectional_and_position_ids(bound):
    n, inputs = _gqa(causal=0)
    check(bound, n, inputs, tol=ATT, host_inputs=GQA_HOST)
    n, inputs = _gqa(past=4, s=1, rotary=True)
    inputs += [np.array([[7], [9]], np.int64)]
    n = domain_node("GroupQueryAttention", inputs, 3, num_heads=4, kv_num_heads=2, do_rotary=1)
    check(bound, n, inputs, tol=ATT, host_inputs=GQA_HOST)


def test_embed_mask_with_holes_and_zero_size_norms(numpy_bound):
    inputs = _embed_inputs()
    inputs[7] = np.array([[1, 0, 1, 1, 1], [0, 0, 0, 0, 0]], np.int32)  # mask_index counts the ones
    check(numpy_bound, domain_node("EmbedLayerNormalization", inputs, 3), inputs)
    inputs = [np.zeros((0, 3, 8), np.float32)] * 2 + [f32(8), f32(8)]
    check(numpy_bound, domain_node("SkipLayerNormalization", inputs, 4), inputs)
    x = np.zeros((0, 8), np.float32)
    check(numpy_bound, domain_node("SimplifiedLayerNormalization", [x, f32(8)], 2, domain=""), [x, f32(8)])


def test_refusals(numpy_bound):
    from onyxrt.errors import InvalidGraph

    x = f32(2, 3, 16)
    for n in (domain_node("Attention", [x, f32(16, 48)], num_heads=2, do_rotary=1),
              domain_node("GroupQueryAttention", [x] * 7, num_heads=4, kv_num_heads=3),
              domain_node("GroupQueryAttention", [x] * 7, num_heads=4, kv_num_heads=2, causal=0,
                          local_window_size=2),
              domain_node("RotaryEmbedding", [x] * 4, rotary_embedding_dim=8)):
        with pytest.raises(InvalidGraph, match="node"):
            numpy_bound.kernel(n, 1)
    cos, sin = _caches(4, 4)
    inputs = [f32(1, 3, 16), np.array([3], np.int64), cos, sin]
    with pytest.raises(ValueError, match="position ids"):
        run_node(numpy_bound, domain_node("RotaryEmbedding", inputs), inputs, host_inputs=(1,))


# ------------------------------------------------- newer operators (onnxruntime's CPU)


@pytest.mark.parametrize("scale", [None, np.array(0.7, np.float32)])
def test_scaled_silu(bound, scale):
    x = f32(3, 5, scale=3)
    inputs = [x, scale]
    check(bound, domain_node("ScaledSiLU", inputs, alpha=1.3), inputs)
    # onnxruntime refuses a scale of shape (1,) ("scale must be a scalar"): so does onyxrt
    inputs = [x, np.array([1.5], np.float32)]
    with pytest.raises(ValueError, match="scalar"):
        run_node(bound, domain_node("ScaledSiLU", inputs), inputs)


def test_scaled_silu_half(numpy_bound):
    x = f32(3, 5, scale=3).astype(np.float16)
    for scale in (None, np.array(0.7, np.float16)):
        inputs = [x, scale]
        # rounded at each step, as onnxruntime does: equal to its float16 result
        check(numpy_bound, domain_node("ScaledSiLU", inputs, alpha=1.3), inputs, tol=dict(rtol=1e-3, atol=1e-3))


@pytest.mark.parametrize("act", [None, "silu", "swish", "sigmoid"])
@pytest.mark.parametrize("c", [8, 4])
def test_gated_rms_norm(bound, act, c):
    x, gate = f32(2, 3, 8), f32(2, 3, 8)
    attrs = {} if act is None else {"activation": act}
    check(bound, domain_node("GatedRMSNorm", [x, f32(c), gate], epsilon=1e-6, **attrs), [x, f32(c), gate])


def test_gated_rms_norm_half(numpy_bound):
    inputs = [f32(2, 8).astype(np.float16), f32(4).astype(np.float16), f32(2, 8).astype(np.float16)]
    check(numpy_bound, domain_node("GatedRMSNorm", inputs), inputs, tol=dict(rtol=1e-3, atol=1e-3))


@pytest.mark.parametrize("flat", [False, True])
@pytest.mark.parametrize("scale_shape", [None, (4,), (3, 4), (12,)])
def test_branchwise_rms_norm(bound, flat, scale_shape):
    x = f32(2, 12) if flat else f32(2, 3, 4)
    inputs = [x, None if scale_shape is None else f32(*scale_shape)]
    attrs = {"num_branches": 3} if flat else {}
    check(bound, domain_node("BranchwiseRMSNorm", inputs, **attrs), inputs)


@pytest.mark.parametrize("layout,section", [(0, [2, 1, 1]), (1, [2, 1, 1]), (0, [4, 0, 0]), (1, [1, 2, 1])])
@pytest.mark.parametrize("interleaved", [0, 1])
def test_mrotary_embedding(bound, layout, section, interleaved):
    b, s = 2, 3
    cos, sin = _caches(16, 4)
    pid = R.integers(0, 16, (3, b, s)).astype(np.int64)
    for x in (f32(b, s, 16), f32(b, 2, s, 8)):
        inputs = [x, pid, cos, sin]
        heads = {"num_heads": 2} if x.ndim == 3 else {}  # onnxruntime requires it for 3-D input
        n = domain_node("MRotaryEmbedding", inputs, mrope_section=section, mrope_layout=layout,
                        interleaved=interleaved, **heads)
        check(bound, n, inputs, host_inputs=(1,))


def test_mrotary_reduces_to_rotary(numpy_bound):
    cos, sin = _caches(16, 4)
    x, pos = f32(2, 3, 16), R.integers(0, 16, (2, 3)).astype(np.int64)
    m = run_node(numpy_bound, domain_node("MRotaryEmbedding", [x, pos, cos, sin], mrope_section=[4, 0, 0],
                                          num_heads=2),
                 [x, np.stack([pos] * 3), cos, sin], host_inputs=(1,))[0]
    r = run_node(numpy_bound, domain_node("RotaryEmbedding", [x, pos, cos, sin]), [x, pos, cos, sin],
                 host_inputs=(1,))[0]
    np.testing.assert_array_equal(m, r)


# --------------------- CUDA-provider fusions: no CPU oracle, a numpy transcription of the spec


def _np_gelu(x):
    from library_harness import numpy_erf

    return 0.5 * x * (1 + numpy_erf(x / np.sqrt(2)))


def _np_group_norm(x, gamma, beta, groups, eps, silu, channels_last):
    if not channels_last:
        x = np.moveaxis(x, 1, -1)
    n, c = x.shape[0], x.shape[-1]
    v = x.reshape(n, -1, groups, c // groups).astype(np.float64)
    mean = v.mean(axis=(1, 3), keepdims=True)
    var = v.var(axis=(1, 3), keepdims=True)
    y = ((v - mean) / np.sqrt(var + eps)).reshape(x.shape) * gamma + beta
    y = y * (1 / (1 + np.exp(-y))) if silu else y
    return (y if channels_last else np.moveaxis(y, -1, 1)).astype(np.float32)


def test_bias_add(bound):
    x, bias, skip = f32(2, 3, 4), f32(4), f32(2, 3, 4)
    got = run_node(bound, domain_node("BiasAdd", [x, bias, skip]), [x, bias, skip])[0]
    np.testing.assert_allclose(got, x + bias + skip, **F32)


def test_bias_split_gelu(bound):
    x, bias = f32(2, 3, 8), f32(8)
    got = run_node(bound, domain_node("BiasSplitGelu", [x, bias]), [x, bias])[0]
    w = (x + bias).astype(np.float64)
    np.testing.assert_allclose(got, w[..., :4] * _np_gelu(w[..., 4:]), **F32)


@pytest.mark.parametrize("bias", [False, True])
def test_gemm_fast_gelu(bound, bias):
    x, w, b = f32(2, 3, 8), f32(8, 5), f32(5)
    inputs = [x, w, b if bias else None]
    got = run_node(bound, domain_node("GemmFastGelu", inputs), inputs)[0]
    # the FastGelu of MatMul (+ bias) as onnxruntime's CPU computes them, node by node
    mm = x @ w + (b if bias else 0)
    want = ort_outputs(domain_node("FastGelu", [mm]), [mm.astype(np.float32)])[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-6)


@pytest.mark.parametrize("axis,bias_shape", [(1, (2, 3, 4, 5)), (3, (2, 1, 1, 5)), (2, (1, 3, 4, 5)), (-1, (5,))])
def test_bias_softmax(bound, axis, bias_shape):
    x, bias = f32(2, 3, 4, 5), f32(*bias_shape)
    got = run_node(bound, domain_node("BiasSoftmax", [x, bias], axis=axis), [x, bias])[0]
    a = axis % 4
    w = (x + bias).astype(np.float64).reshape(int(np.prod(x.shape[:a])), -1)
    e = np.exp(w - w.max(axis=1, keepdims=True))
    np.testing.assert_allclose(got, (e / e.sum(axis=1, keepdims=True)).reshape(x.shape), **F32)


@pytest.mark.parametrize("channels_last", [1, 0])
@pytest.mark.parametrize("silu", [0, 1])
def test_group_norm_and_skip(bound, channels_last, silu):
    shape = (2, 3, 3, 8) if channels_last else (2, 8, 3, 3)
    x, gamma, beta = f32(*shape), f32(8), f32(8)
    attrs = dict(groups=4, activation=silu, channels_last=channels_last, epsilon=1e-5)
    got = run_node(bound, domain_node("GroupNorm", [x, gamma, beta], **attrs), [x, gamma, beta])[0]
    np.testing.assert_allclose(got, _np_group_norm(x, gamma, beta, 4, 1e-5, silu, channels_last), rtol=1e-5, atol=1e-5)
    skip2d, bias = f32(2, 8), f32(8)
    chan = (lambda v: v.reshape(-1, 1, 1, 8)) if channels_last else (lambda v: v.reshape(-1, 8, 1, 1))
    for skip in (f32(*shape), skip2d):
        for b in (None, bias):
            inputs = [x, gamma, beta, skip, b]
            y, s = run_node(bound, domain_node("SkipGroupNorm", inputs, 2, **attrs), inputs)
            total = x + (chan(skip) if skip.ndim == 2 else skip) + (0 if b is None else chan(b))
            np.testing.assert_allclose(s, total, **F32)
            np.testing.assert_allclose(y, _np_group_norm(total, gamma, beta, 4, 1e-5, silu, channels_last),
                                       rtol=1e-5, atol=1e-5)


def _dmmha(b=2, n=2, h=4, p=3, m=6, packed=False, bias=False, mask=None, beams=1, attention_bias=None, **attrs):
    d = n * h
    q, k, v = f32(b, 1, d), f32(b, 1, d), f32(b, 1, d)
    if packed:
        q, k, v = np.concatenate([q, k, v], axis=2), None, None
    ci = None
    if beams > 1:
        ci = R.integers(0, beams, (b // beams, beams, m)).astype(np.int32)
    inputs = [q, k, v, mask, attention_bias, f32(b, n, m, h), f32(b, n, m, h), np.array(p, np.int32),
              np.array(beams, np.int32) if beams > 1 else None, ci, f32(3 * d) if bias else None]
    while inputs[-1] is None:
        inputs.pop()
    n_ = domain_node("DecoderMaskedMultiHeadAttention", inputs, 3, num_heads=n, past_present_share_buffer=1, **attrs)
    return n_, inputs


DM_HOST = (7, 8, 9)


@pytest.mark.parametrize("case", [dict(), dict(p=0), dict(p=5), dict(bias=True),
                                  dict(mask=np.array([[1, 0, 1, 1], [1, 1, 1, 1]])), dict(attention_bias=f32(2, 2, 1, 4)), dict(scale=0.3),
                                  dict(b=4, beams=2), dict(b=6, beams=3, p=4, bias=True)])
def test_decoder_masked_mha(bound, case):
    if case.get("mask") is not None:
        case = dict(case, mask=case["mask"].astype(np.int32))
    n, inputs = _dmmha(**case)
    check(bound, n, inputs, tol=ATT, host_inputs=DM_HOST)


@pytest.mark.parametrize("bias", [False, True])
def test_decoder_masked_mha_cross(bound, bias):
    inputs = [f32(2, 1, 8), f32(2, 2, 5, 4), f32(2, 2, 5, 4), np.array([[1, 1, 0, 1, 1], [1] * 5], np.int32)]
    if bias:
        inputs += [None, None, None, None, None, None, f32(24)]
    n = domain_node("DecoderMaskedMultiHeadAttention", inputs, 1, num_heads=2)
    check(bound, n, inputs, tol=ATT, host_inputs=DM_HOST)


@pytest.mark.parametrize("bias", [False, True])
def test_decoder_masked_mha_packed(bound, bias):
    # onnxruntime's CPU fails on packed QKV (a reshape of the wrong size; its CUDA kernel
    # takes it): the packed query must give the separate inputs' result.
    n, inputs = _dmmha(bias=bias)
    packed = [np.concatenate(inputs[:3], axis=2), None, None] + inputs[3:]
    want = run_node(bound, n, inputs, host_inputs=DM_HOST)
    got = run_node(bound, domain_node(n.op_type, packed, 3, num_heads=2, past_present_share_buffer=1), packed,
                   host_inputs=DM_HOST)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)


def test_decoder_masked_mha_needs_shared_buffer(numpy_bound):
    n, inputs = _dmmha()
    n = domain_node("DecoderMaskedMultiHeadAttention", inputs, 3, num_heads=2)
    with pytest.raises(ValueError, match="past_present_share_buffer"):
        run_node(numpy_bound, n, inputs, host_inputs=DM_HOST)


def test_decoder_step_through_session():
    """MultiHeadAttention with past → GroupQueryAttention with rotary → SkipSimplified
    norm, with graph inputs for the caches, through both sessions."""
    import onnxruntime as ort

    import onyxrt

    ms = "com.microsoft"
    cos, sin = _caches(32, 8)
    init = [helper.make_tensor(k, TensorProto.FLOAT, v.shape, v.ravel())
            for k, v in {"cos": cos, "sin": sin, "g": f32(32)}.items()]
    nodes = [
        helper.make_node("MultiHeadAttention", ["q", "k", "v", "", "", "", "pk", "pv"], ["mha", "prk", "prv"],
                         domain=ms, num_heads=2),
        helper.make_node("GroupQueryAttention", ["mha", "k2", "v2", "gk", "gv", "seqlens", "total", "cos", "sin"],
                         ["gqa", "gpk", "gpv"], domain=ms, num_heads=2, kv_num_heads=1, do_rotary=1),
        helper.make_node("SkipSimplifiedLayerNormalization", ["gqa", "mha", "g"], ["y"], domain=ms),
    ]
    feeds = {"q": f32(2, 1, 32), "k": f32(2, 1, 32), "v": f32(2, 1, 32), "pk": f32(2, 2, 3, 16),
             "pv": f32(2, 2, 3, 16), "k2": f32(2, 1, 16), "v2": f32(2, 1, 16), "gk": f32(2, 1, 4, 16),
             "gv": f32(2, 1, 4, 16), "seqlens": np.array([4, 2], np.int32), "total": np.array(5, np.int32)}
    graph = helper.make_graph(
        nodes, "decoder_step",
        [helper.make_tensor_value_info(k, TensorProto.INT32 if v.dtype == np.int32 else TensorProto.FLOAT, v.shape)
         for k, v in feeds.items()],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in ("y", "prk", "prv", "gqa")], init)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(ms, 1)],
                              ir_version=10).SerializeToString()
    got = onyxrt.InferenceSession(model).run(None, feeds)
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def test_cuda_fusions_half(numpy_bound):
    h = lambda *s: f32(*s).astype(np.float16)  # noqa: E731
    for op, inputs, attrs in (("BiasAdd", [h(2, 3, 4), h(4), h(2, 3, 4)], {}), ("BiasSplitGelu", [h(2, 3, 8), h(8)], {}),
                              ("GemmFastGelu", [h(3, 8), h(8, 4), h(4)], {}), ("BiasSoftmax", [h(2, 3, 4), h(2, 3, 4)], {}),
                              ("GroupNorm", [h(2, 2, 2, 8), h(8), h(8)], {"groups": 2})):
        half_matches_float(numpy_bound, domain_node(op, inputs, **attrs), inputs)
