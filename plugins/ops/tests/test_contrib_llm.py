"""The operator library's LLM com.microsoft operators (:mod:`onyxrt_ops.contrib_llm`),
against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from library_harness import bind, domain_node, ort_outputs, run_node
from onnx import TensorProto, helper

import onyxrt
from onyxrt.errors import InvalidGraph

RNG = np.random.default_rng(2133)


def rand(*shape, dtype=np.float32, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(dtype)


def check(bound, n, inputs, rtol=1e-5, atol=1e-6):
    """``n`` through ``bound`` matches onnxruntime on every output onnxruntime gives."""
    got = run_node(bound, n, inputs)
    want = ort_outputs(n, inputs)
    assert len(want) == len(n.output)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, w.dtype, g.shape, w.shape)
        np.testing.assert_allclose(g.astype(np.float32), w.astype(np.float32), rtol=rtol, atol=atol)
    return got


HALF_TOL = dict(rtol=1e-3, atol=1e-3)  # one float16 rounding of the result


def over(bound, numpy_bound, dtype):
    """The bound to test ``dtype`` on: array_api_strict holds no float16."""
    return numpy_bound if np.dtype(dtype) == np.float16 else bound


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("shape", [(2, 3, 5), (4, 1), (0, 3)])
def test_gated_add(bound, numpy_bound, dtype, shape):
    x, y, g = rand(*shape, dtype=dtype), rand(*shape, dtype=dtype), rand(*shape[:-1], 1, dtype=dtype)
    check(over(bound, numpy_bound, dtype), domain_node("GatedAdd", [x, y, g]), [x, y, g])


def test_gated_add_errors(numpy_bound):
    x = rand(2, 3)
    with pytest.raises(ValueError, match="CUDA"):
        run_node(numpy_bound, domain_node("GatedAdd", [x, x, rand(2, 4), rand(4, 1)]), [x, x, rand(2, 4), rand(4, 1)])
    with pytest.raises(ValueError, match="gate"):
        run_node(numpy_bound, domain_node("GatedAdd", [x, x, rand(2, 3)]), [x, x, rand(2, 3)])


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("with_b", [False, True])
def test_linear_attention_gate(bound, numpy_bound, dtype, with_b):
    a = rand(2, 3, 4, dtype=dtype, scale=10)  # large: Softplus' linear and exp regimes
    inputs = [a, rand(4), -np.exp(rand(4)), rand(2, 3, 4, dtype=dtype) if with_b else None]
    n = domain_node("LinearAttentionGate", inputs, 2 if with_b else 1)
    check(over(bound, numpy_bound, dtype), n, inputs, **(HALF_TOL if dtype == np.float16 else {}))


PRE_CASES = [  # streams shape, pre_mix shape, num_branches
    ((2, 3, 4, 5), (2, 3, 4), 0), ((2, 3, 4, 5), (2, 3, 4, 1), 0), ((2, 3, 4, 5), (2, 3, 4, 5), 0),
    ((2, 3, 20), (2, 3, 4), 4), ((2, 3, 20), (2, 3, 20), 4), ((3, 4, 5), (3, 4), 0),
]


@pytest.mark.parametrize("xs,ps,nb", PRE_CASES)
@pytest.mark.parametrize("dtype,mdtype", [(np.float32, np.float32), (np.float16, np.float32),
                                          (np.float16, np.float16)])
def test_hyper_connection_pre_mix(bound, numpy_bound, xs, ps, nb, dtype, mdtype):
    inputs = [rand(*xs, dtype=dtype), rand(*ps, dtype=mdtype)]
    n = domain_node("HyperConnectionPreMix", inputs, num_branches=nb, reduction_scale=0.7)
    check(over(bound, numpy_bound, dtype), n, inputs, **(HALF_TOL if dtype == np.float16 else dict(atol=1e-5)))


POST_CASES = [  # streams, block_output, post_mix, stream_mix, num_branches
    ((2, 3, 4, 5), (2, 3, 5), (2, 3, 4), (2, 3, 4, 4), 0), ((2, 3, 4, 5), (2, 3, 5), (2, 3, 4, 1), None, 0),
    ((2, 3, 4, 5), (2, 3, 5), (2, 3, 4, 5), (2, 3, 4, 4), 0), ((2, 3, 20), (2, 3, 5), (2, 3, 4), (2, 3, 4, 4), 4),
    ((3, 4, 5), (3, 5), (3, 4), None, 0),
]


@pytest.mark.parametrize("xs,bs,ps,ms,nb", POST_CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_hyper_connection_post_mix(bound, numpy_bound, xs, bs, ps, ms, nb, dtype):
    inputs = [rand(*xs, dtype=dtype), rand(*bs, dtype=dtype), rand(*ps), None if ms is None else rand(*ms)]
    n = domain_node("HyperConnectionPostMix", inputs, num_branches=nb)
    check(over(bound, numpy_bound, dtype), n, inputs, **(HALF_TOL if dtype == np.float16 else dict(atol=1e-5)))


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("normed", [False, True])
def test_engram_gate(bound, numpy_bound, dtype, normed):
    b, s, c, h = 2, 3, 4, 8
    inputs = [rand(b, s, c, h, dtype=dtype), rand(b, s, c, h, dtype=dtype), rand(b, s, h, dtype=dtype),
              rand(c, h, dtype=dtype), rand(c, h, dtype=dtype), rand(c, h, dtype=dtype) if normed else None]
    n = domain_node("EngramGate", inputs, 2 if normed else 1, epsilon=1e-4)
    check(over(bound, numpy_bound, dtype), n, inputs, **(HALF_TOL if dtype == np.float16 else dict(atol=1e-5)))


# ------------------------------------------------------------------ CausalConvWithState


def conv_inputs(b=2, c=6, length=5, k=4, dil=1, bias=True, past=True, last=False, chan=None):
    s = (k - 1) * dil
    x = rand(b, length, *(chan or (c,))) if last else rand(b, c, length)
    slot = (b, s, *(chan or (c,))) if last else (b, c, s)
    state = rand(*slot) if past else None
    return [x, rand(c, 1, k), rand(c) if bias else None, state]


@pytest.mark.parametrize("k,dil", [(4, 1), (3, 2), (1, 1)])
@pytest.mark.parametrize("act", ["none", "silu", "swish"])
@pytest.mark.parametrize("bias,past", [(True, True), (False, False)])
def test_causal_conv(bound, k, dil, act, bias, past):
    inputs = conv_inputs(k=k, dil=dil, bias=bias, past=past)
    check(bound, domain_node("CausalConvWithState", inputs, 2, dilation=dil, activation=act), inputs, atol=1e-5)


@pytest.mark.parametrize("chan", [(6,), (2, 3)])
@pytest.mark.parametrize("past", [False, True])
def test_causal_conv_channels_last(bound, chan, past):
    inputs = conv_inputs(last=True, chan=chan, past=past, dil=2)
    n = domain_node("CausalConvWithState", inputs, 2, channels_last=1, dilation=2, activation="silu")
    check(bound, n, inputs, atol=1e-5)


@pytest.mark.parametrize("length", [1, 2])
def test_causal_conv_decode_steps(bound, length):
    # a chunk shorter than the state: the new state keeps part of the old one
    inputs = conv_inputs(length=length, k=4, dil=2)
    check(bound, domain_node("CausalConvWithState", inputs, 2, dilation=2), inputs, atol=1e-5)


def test_causal_conv_errors(numpy_bound):
    inputs = conv_inputs()
    for attrs in (dict(ndim=2), dict(state_update_capacity=2), dict(state_window=2), dict(dilation=0), dict(activation="relu")):
        with pytest.raises(InvalidGraph, match="CausalConvWithState node"):
            run_node(numpy_bound, domain_node("CausalConvWithState", inputs, 2, **attrs), inputs)
    with pytest.raises(ValueError, match="past_state"):
        bad = inputs[:3] + [rand(2, 6, 2)]
        run_node(numpy_bound, domain_node("CausalConvWithState", bad, 2), bad)


def varlen_inputs(lengths, c=4, k=3, dil=1, bias=True, counts=None, dtype=np.float32):
    cu = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    return [rand(int(cu[-1]), c, dtype=dtype), rand(c, 1, k, dtype=dtype), cu, rand(c, dtype=dtype) if bias else None,
            rand(len(lengths), c, (k - 1) * dil, dtype=dtype),
            None if counts is None else np.array(counts, np.int32)]


@pytest.mark.parametrize("lengths", [[3, 1, 5], [1], [2, 2]])
@pytest.mark.parametrize("k,dil,act", [(3, 1, "none"), (4, 2, "silu"), (1, 1, "swish")])
def test_varlen_causal_conv(bound, lengths, k, dil, act):
    inputs = varlen_inputs(lengths, k=k, dil=dil)
    n = domain_node("VarlenCausalConvWithState", inputs, 2, dilation=dil, activation=act)
    check(bound, n, inputs, atol=1e-5)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_varlen_causal_conv_capture_float16(bound, numpy_bound, dtype):
    inputs = varlen_inputs([3, 1, 5, 2], bias=False, counts=[2, 5, 0, -1], dtype=dtype)
    n = domain_node("VarlenCausalConvWithState", inputs, 3, state_update_capacity=2)
    check(over(bound, numpy_bound, dtype), n, inputs, **(HALF_TOL if dtype == np.float16 else dict(atol=1e-5)))


def test_varlen_causal_conv_errors(numpy_bound):
    inputs = varlen_inputs([2, 3])
    for bad_cu in ([0, 3, 6], [0, 0, 5], [1, 2, 5]):
        bad = inputs[:2] + [np.array(bad_cu, np.int32)] + inputs[3:]
        with pytest.raises(ValueError, match="cumulative_sequence_length"):
            run_node(numpy_bound, domain_node("VarlenCausalConvWithState", bad, 2), bad)
    with pytest.raises(ValueError, match="capture_count"):
        run_node(numpy_bound, domain_node("VarlenCausalConvWithState", inputs, 3, state_update_capacity=2), inputs)
    with pytest.raises(InvalidGraph, match="VarlenCausalConvWithState node"):
        run_node(numpy_bound, domain_node("VarlenCausalConvWithState", inputs, 2, state_update_capacity=9), inputs)


# ------------------------------------------------------------------ LinearAttention


def la_inputs(rule, b=2, t=4, hq=2, hkv=2, dk=4, dv=3, past=True, per_key=False, beta_one=False):
    q, k, v = rand(b, t, hq * dk), rand(b, t, hkv * dk), rand(b, t, hkv * dv)
    k = k / np.linalg.norm(k.reshape(b, t, hkv, dk), axis=-1).repeat(dk, -1).reshape(k.shape)
    state = rand(b, hkv, dk, dv, scale=0.5) if past else None
    decay = -np.abs(rand(b, t, hkv * dk if per_key else hkv, scale=0.3)) if "gated" in rule else None
    beta = RNG.random((b, t, 1 if beta_one else hkv)).astype(np.float32) if "delta" in rule else None
    return [q, k, v, state, decay, beta]


@pytest.mark.parametrize("rule", ["linear", "gated", "delta", "gated_delta"])
@pytest.mark.parametrize("heads", [(2, 2), (4, 2), (2, 4)])
@pytest.mark.parametrize("past", [False, True])
def test_linear_attention(bound, rule, heads, past):
    inputs = la_inputs(rule, hq=heads[0], hkv=heads[1], past=past)
    n = domain_node("LinearAttention", inputs, 2, update_rule=rule, q_num_heads=heads[0], kv_num_heads=heads[1])
    check(bound, n, inputs, atol=1e-5)


@pytest.mark.parametrize("rule", ["gated", "gated_delta"])
def test_linear_attention_per_key_decay_scale_beta_one(bound, rule):
    inputs = la_inputs(rule, per_key=True, beta_one=True)
    n = domain_node("LinearAttention", inputs, 2, update_rule=rule, q_num_heads=2, kv_num_heads=2, scale=0.3)
    check(bound, n, inputs, atol=1e-5)


@pytest.mark.parametrize("rule", ["linear", "gated_delta"])
def test_linear_attention_decode_step_and_batch_one(bound, rule):
    inputs = la_inputs(rule, b=1, t=1, hq=4, hkv=1, dk=8, dv=5)
    n = domain_node("LinearAttention", inputs, 2, update_rule=rule, q_num_heads=4, kv_num_heads=1)
    check(bound, n, inputs, atol=1e-5)


def test_linear_attention_errors(numpy_bound):
    inputs = la_inputs("gated_delta")
    with pytest.raises(InvalidGraph, match="LinearAttention node"):
        run_node(numpy_bound, domain_node("LinearAttention", inputs, 2, q_num_heads=2, kv_num_heads=2,
                                          update_rule="bad"), inputs)
    with pytest.raises(InvalidGraph, match="CUDA"):
        run_node(numpy_bound, domain_node("LinearAttention", inputs, 2, q_num_heads=2, kv_num_heads=2,
                                          state_window=2), inputs)
    with pytest.raises(ValueError, match="needs"):
        run_node(numpy_bound, domain_node("LinearAttention", inputs[:4], 2, q_num_heads=2, kv_num_heads=2),
                 inputs[:4])


def ngram_inputs(lengths, dtype=np.int64, past=False, offsets=False, eos=False, seg=False):
    cu = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    ids = RNG.integers(0, 40, int(cu[-1])).astype(dtype)
    ids[::3] = 7  # EOS tokens
    return [ids, np.array([3, 5, 7, 11], dtype), np.array([13, 17, 19, 23, 29, 31], dtype), cu,
            RNG.integers(0, 40, (len(lengths), 3)).astype(dtype) if past else None,
            (np.arange(6) * 100).astype(dtype) if offsets else None, np.array(7, dtype) if eos else None,
            RNG.integers(0, 2, int(cu[-1])).astype(np.int32) if seg else None]


@pytest.mark.parametrize("lengths", [[3, 1, 5], [1], [6]])
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("opts", [{}, dict(past=True, offsets=True), dict(eos=True, seg=True),
                                  dict(past=True, eos=True, seg=True)])
@pytest.mark.parametrize("reset", [0, 1])
def test_varlen_ngram_hash_mapping(bound, lengths, dtype, opts, reset):
    inputs = ngram_inputs(lengths, dtype, **opts)
    while inputs[-1] is None:
        inputs.pop()
    n = domain_node("VarlenNGramHashMapping", inputs, 2, max_ngram_size=4, n_head_per_ngram=2, pad_id=1,
                    reset_on_eos=reset)
    got = run_node(bound, n, inputs, host_inputs=(3, 6))
    want = ort_outputs(n, inputs)
    for g, w in zip(got[:2], want, strict=True):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)


def test_varlen_ngram_hash_mapping_errors(numpy_bound):
    inputs = ngram_inputs([2, 3])[:4]
    with pytest.raises(InvalidGraph, match="VarlenNGramHashMapping node"):
        run_node(numpy_bound, domain_node("VarlenNGramHashMapping", inputs, 3, max_ngram_size=3, n_head_per_ngram=3,
                                          pad_id=0), inputs, host_inputs=(3,))
    bad = inputs[:3] + [np.array([0, 2, 4], np.int32)]
    with pytest.raises(ValueError, match="cumulative_sequence_length"):
        run_node(numpy_bound, domain_node("VarlenNGramHashMapping", bad, 2, max_ngram_size=3, n_head_per_ngram=3,
                                          pad_id=0), bad, host_inputs=(3,))


# ------------------------------------------------------------------ GatedDeltaNet


def gdn_inputs(lengths=(3, 1, 4), hq=2, hv=4, dk=4, dv=3, per_key=False, dtype=np.float32, gdtype=np.float32,
               cu=True, state=True, raw_gates=False):
    tokens = int(sum(lengths))
    q, k, v = rand(tokens, hq, dk, dtype=dtype), rand(tokens, hq, dk, dtype=dtype), rand(tokens, hv, dv, dtype=dtype)
    k = (k / np.linalg.norm(k.astype(np.float32), axis=-1, keepdims=True)).astype(dtype)
    cus = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32) if cu else None
    decay = rand(tokens, hv, *((dk,) if per_key else ()), scale=0.3)
    decay = (decay if raw_gates else -np.abs(decay)).astype(gdtype)
    beta = (rand(tokens, hv) if raw_gates else RNG.random((tokens, hv))).astype(gdtype)
    st = rand(len(lengths), hv, dv, dk, scale=0.5) if state else None
    return [q, k, v, cus, decay, beta, st]


@pytest.mark.parametrize("rule", ["linear", "gated", "delta", "gated_delta"])
@pytest.mark.parametrize("heads", [(2, 2), (2, 4), (1, 3)])
@pytest.mark.parametrize("per_key", [False, True])
def test_gated_delta_net(bound, rule, heads, per_key):
    inputs = gdn_inputs(hq=heads[0], hv=heads[1], per_key=per_key)
    inputs[4] = inputs[4] if "gated" in rule else None
    inputs[5] = inputs[5] if "delta" in rule else None
    check(bound, domain_node("GatedDeltaNet", inputs, 2, update_rule=rule), inputs, atol=1e-5)


@pytest.mark.parametrize("gate", ["softplus", "qwen", "sigmoid", "kda"])
@pytest.mark.parametrize("per_key_bias", [False, True])
def test_gated_delta_net_fused_gates(bound, gate, per_key_bias):
    inputs = gdn_inputs(raw_gates=True, per_key=per_key_bias)
    hv, dk = 4, 4
    inputs += [rand(hv), rand(hv, dk) if per_key_bias else rand(hv)]
    n = domain_node("GatedDeltaNet", inputs, 2, gate_activation=gate, beta_activation="sigmoid", qk_l2_norm=1,
                    gate_lower_bound=-3.0, scale=0.4)
    check(bound, n, inputs, atol=1e-5)


def test_gated_delta_net_uniform_rank4_packed_qkv(bound):
    inputs = gdn_inputs(lengths=(3, 3), cu=False)
    check(bound, domain_node("GatedDeltaNet", inputs, 2), inputs, atol=1e-5)
    r4 = [a.reshape((2, 3) + a.shape[1:]) for a in inputs[:3]] + [None] + \
        [a.reshape((2, 3) + a.shape[1:]) for a in inputs[4:6]] + [inputs[6]]
    check(bound, domain_node("GatedDeltaNet", r4, 2), r4, atol=1e-5)
    q, k, v = inputs[:3]
    packed = [np.concatenate([q.reshape(6, -1), k.reshape(6, -1), v.reshape(6, -1)], axis=1), None, None, None] + \
        inputs[4:7]
    check(bound, domain_node("GatedDeltaNet", packed, 2), packed, atol=1e-5)
    # no initial state (zeros) with cu_seqlens; output only
    inputs = gdn_inputs(state=False)
    check(bound, domain_node("GatedDeltaNet", inputs, 1), inputs, atol=1e-5)


@pytest.mark.parametrize("gdtype", [np.float32, np.float16])
def test_gated_delta_net_float16(numpy_bound, gdtype):
    inputs = gdn_inputs(dtype=np.float16, gdtype=gdtype)
    check(numpy_bound, domain_node("GatedDeltaNet", inputs, 2), inputs, **HALF_TOL)


def test_gated_delta_net_errors(numpy_bound):
    inputs = gdn_inputs()
    for attrs in (dict(update_rule="x"), dict(gate_activation="relu"), dict(state_update_capacity=2)):
        with pytest.raises(InvalidGraph, match="GatedDeltaNet node"):
            run_node(numpy_bound, domain_node("GatedDeltaNet", inputs, 2, **attrs), inputs, host_inputs=(3,))
    with pytest.raises(ValueError, match="needs"):
        run_node(numpy_bound, domain_node("GatedDeltaNet", inputs, 2, gate_activation="softplus"), inputs,
                 host_inputs=(3,))
    with pytest.raises(ValueError, match="presence"):
        run_node(numpy_bound, domain_node("GatedDeltaNet", inputs, 2, update_rule="delta"), inputs, host_inputs=(3,))
    bad = inputs[:3] + [np.array([0, 2, 9, 8], np.int32)] + inputs[4:]
    with pytest.raises(ValueError, match="cu_seqlens"):
        run_node(numpy_bound, domain_node("GatedDeltaNet", bad, 2), bad, host_inputs=(3,))


def test_simulated_cupy_matches_numpy(numpy_bound):
    from onyxrt_gpu.kernels._common import BACKEND
    from onyxrt_gpu.testing.simulated_cupy import install

    la = la_inputs("gated_delta", hq=4, hkv=2)
    conv = conv_inputs(last=True, chan=(2, 3))
    pre = [rand(2, 3, 4, 5), rand(2, 3, 4)]
    post = [rand(2, 3, 20), rand(2, 3, 5), rand(2, 3, 4), rand(2, 3, 4, 4)]
    eng = [rand(1, 2, 3, 4), rand(1, 2, 3, 4), rand(1, 2, 4), rand(3, 4), rand(3, 4), rand(3, 4)]
    gate = [rand(2, 3, 4), rand(4), rand(4), rand(2, 3, 4)]
    varlen = varlen_inputs([2, 3], counts=[1, 4])
    gdn = gdn_inputs(raw_gates=True) + [rand(4), rand(4)]
    ngram = ngram_inputs([2, 4], np.int32, past=True, eos=True, seg=True)
    cases = [(domain_node("LinearAttention", la, 2, q_num_heads=4, kv_num_heads=2), la),
             (domain_node("CausalConvWithState", conv, 2, channels_last=1, activation="silu"), conv),
             (domain_node("HyperConnectionPreMix", pre), pre),
             (domain_node("HyperConnectionPostMix", post, num_branches=4), post),
             (domain_node("EngramGate", eng, 2), eng),
             (domain_node("LinearAttentionGate", gate, 2), gate),
             (domain_node("GatedAdd", [gate[0], gate[0], rand(2, 3, 1)]), [gate[0], gate[0], rand(2, 3, 1)]),
             (domain_node("GatedDeltaNet", gdn, 2, gate_activation="softplus", qk_l2_norm=1), gdn, (3,)),
             (domain_node("VarlenNGramHashMapping", ngram, 2, max_ngram_size=4, n_head_per_ngram=2, pad_id=1,
                          reset_on_eos=1), ngram, (3, 6)),
             (domain_node("VarlenCausalConvWithState", varlen, 3, state_update_capacity=2, activation="silu"),
              varlen, (2, 5))]
    with install():
        import cupy

        gpu = bind("cupy", BACKEND)
        gpu.array = cupy.asarray
        gpu.host = lambda v: v.get()
        for n, inputs, *hosts in cases:
            host = hosts[0] if hosts else ()
            got = run_node(gpu, n, inputs, host_inputs=host)
            want = run_node(numpy_bound, n, inputs, host_inputs=host)
            for g, w in zip(got, want):
                if w is not None:
                    np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)


def test_session_runs_llm_model():
    import onnxruntime as ort

    b, t, h, dk = 1, 5, 2, 4
    c = 3 * h * dk
    w, a_bias, scale = rand(c, 1, 4), rand(h), -np.exp(rand(h))
    inits = [helper.make_tensor(name, TensorProto.FLOAT, v.shape, v.tobytes(), raw=True)
             for name, v in [("w", w), ("dt", a_bias), ("ds", scale)]]
    ms = "com.microsoft"
    nodes = [
        helper.make_node("CausalConvWithState", ["x", "w", "", "past"], ["conv", "present"], domain=ms,
                         channels_last=1, activation="silu"),
        helper.make_node("Split", ["conv"], ["q", "k", "v"], axis=2, num_outputs=3),
        helper.make_node("LinearAttentionGate", ["a", "dt", "ds", "bb"], ["decay", "beta"], domain=ms),
        helper.make_node("LinearAttention", ["q", "k", "v", "", "decay", "beta"], ["y", "state"], domain=ms,
                         q_num_heads=h, kv_num_heads=h),
    ]
    graph = helper.make_graph(
        nodes, "llm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [b, "t", c]),
         helper.make_tensor_value_info("past", TensorProto.FLOAT, [b, 3, c]),
         helper.make_tensor_value_info("a", TensorProto.FLOAT, [b, "t", h]),
         helper.make_tensor_value_info("bb", TensorProto.FLOAT, [b, "t", h])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in ("y", "state", "present")], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid(ms, 1)],
                              ir_version=10)
    data = model.SerializeToString()
    feeds = {"x": rand(b, t, c, scale=0.3), "past": rand(b, 3, c), "a": rand(b, t, h), "bb": rand(b, t, h)}
    got = onyxrt.InferenceSession(data).run(None, feeds)
    want = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)
    for g, w_ in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w_, rtol=1e-5, atol=1e-5)
