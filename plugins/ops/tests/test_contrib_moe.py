"""The operator library's mixture-of-experts com.microsoft operators
(:mod:`onyxrt_ops.contrib_moe`: MoE, QMoE), against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from library_harness import bind, domain_node, ort_outputs, run_node
from onnx import TensorProto, helper

import onyxrt
from onyxrt.errors import InvalidGraph

RNG = np.random.default_rng(2132)
T, H, I, E = 6, 32, 16, 4


def rand(*shape, dtype=np.float32, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(dtype)


def check(bound, n, inputs, rtol=1e-5, atol=1e-5):
    """``n`` through ``bound`` matches onnxruntime (dtype, shape, values). The expert sums
    run in another order than onnxruntime's MLAS GEMMs: atol 1e-5 on outputs of order 1."""
    got = run_node(bound, n, inputs)
    want = ort_outputs(n, inputs)
    # (outputs the node does not ask for are not compared)
    for g, w in zip(got[:len(want)], want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, w.dtype, g.shape, w.shape)
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
    return got


def moe_inputs(act="relu", bias=True, shape=(T, H), router=None):
    n1 = 2 * I if act == "swiglu" else I
    tokens = int(np.prod(shape[:-1]))
    return [rand(*shape), rand(tokens, E) if router is None else router, rand(E, n1, H, scale=0.3),
            rand(E, n1) if bias else None, rand(E, H, I, scale=0.3), rand(E, H) if bias else None]


@pytest.mark.parametrize("act", ["relu", "gelu", "silu", "identity", "swiglu"])
@pytest.mark.parametrize("k,normalize", [(1, 0), (2, 0), (2, 1), (3, 1)])
def test_moe_activations_routing(bound, act, k, normalize):
    inputs = moe_inputs(act)
    attrs = dict(swiglu_fusion=1) if act == "swiglu" else {}
    check(bound, domain_node("MoE", inputs, k=k, activation_type=act, normalize_routing_weights=normalize,
                             **attrs), inputs)


@pytest.mark.parametrize("alpha,beta,limit", [(1.702, 1.0, 7.0), (1.702, 1.0, 0.5), (0.5, -0.2, None)])
def test_moe_swiglu_parameters(bound, alpha, beta, limit):
    inputs = moe_inputs("swiglu")
    extra = {} if limit is None else dict(swiglu_limit=limit)
    check(bound, domain_node("MoE", inputs, k=2, activation_type="swiglu", swiglu_fusion=1,
                             activation_alpha=alpha, activation_beta=beta, **extra), inputs)


def test_moe_3d_no_biases_sparse_mixer_and_ties(bound):
    inputs = moe_inputs(bias=False, shape=(2, 3, H))
    check(bound, domain_node("MoE", inputs, k=2), inputs)
    # the CPU kernel's sparse mixer: only k = 2 is required, routing is the plain top-2
    check(bound, domain_node("MoE", inputs, k=2, use_sparse_mixer=1), inputs)
    # tied router logits: onnxruntime takes the higher expert index first
    tied = np.array([[0, 0, 0, 0], [1, 0, 1, 0], [0, 1, 1, 1], [2, 1, 1, 0], [3, 3, 3, 3], [0, 5, 0, 5]],
                    np.float32)
    inputs = moe_inputs(router=tied)
    check(bound, domain_node("MoE", inputs, k=2), inputs)
    check(bound, domain_node("MoE", inputs, k=1), inputs)


def test_moe_zero_tokens_and_k_all(bound):
    inputs = moe_inputs(shape=(0, H), router=np.zeros((0, E), np.float32))
    check(bound, domain_node("MoE", inputs, k=2), inputs)
    inputs = moe_inputs()
    check(bound, domain_node("MoE", inputs, k=E, normalize_routing_weights=1), inputs)


def test_moe_errors(numpy_bound):
    inputs = moe_inputs()
    with pytest.raises(ValueError, match="k=5"):
        run_node(numpy_bound, domain_node("MoE", inputs, k=5), inputs)
    with pytest.raises(ValueError, match="FC3"):
        run_node(numpy_bound, domain_node("MoE", inputs + [rand(E, I, H)], k=1), inputs + [rand(E, I, H)])
    for attrs in (dict(activation_type="swiglu", swiglu_fusion=2), dict(activation_type="tanh"),
                  dict(k=1, use_sparse_mixer=1)):
        with pytest.raises(InvalidGraph, match="MoE node"):
            run_node(numpy_bound, domain_node("MoE", inputs, **attrs), inputs)
    with pytest.raises(ValueError, match="router_probs"):
        run_node(numpy_bound, domain_node("MoE", inputs), [inputs[0], rand(T + 1, E)] + inputs[2:])


# ------------------------------------------------------------------ QMoE


def pack(q, bits):
    """uint8 values (..., n) packed ``bits`` a value, little end first (pads n to a byte)."""
    per = 8 // bits
    pad = -q.shape[-1] % per
    q = np.pad(q, [(0, 0)] * (q.ndim - 1) + [(0, pad)]).reshape(q.shape[:-1] + (-1, per)).astype(np.uint8)
    return sum((q[..., i] << (bits * i)) for i in range(per)).astype(np.uint8)


def qmoe_inputs(bits=4, block=0, zp=True, act="relu", dtype=np.float32, router_weights=False, shape=(T, H)):
    n1 = 2 * I if act == "swiglu" else I

    def proj(n, k):
        q = RNG.integers(0, 1 << bits, (E, n, k)).astype(np.uint8)
        nb = k // block if block else 1
        s = (RNG.random((E, n, nb)) * 0.05 + 0.01).astype(dtype)
        z = pack(RNG.integers(0, 1 << bits, (E, n, nb)).astype(np.uint8) if block else
                 RNG.integers(0, 1 << bits, (E, n)).astype(np.uint8), bits) if zp else None
        return pack(q, bits), s if block else s[..., 0], z

    w1, s1, z1 = proj(n1, H)
    w2, s2, z2 = proj(H, I)
    tokens = int(np.prod(shape[:-1]))
    return [rand(*shape, dtype=dtype), rand(tokens, E, dtype=dtype), w1, s1, rand(E, n1, dtype=dtype), w2, s2,
            rand(E, H, dtype=dtype), None, None, None, z1, z2, None,
            RNG.random((tokens, E)).astype(dtype) if router_weights else None]


@pytest.mark.parametrize("bits", [2, 4, 8])
@pytest.mark.parametrize("block", [0, 16])
@pytest.mark.parametrize("zp", [False, True])
def test_qmoe_quantizations(bound, bits, block, zp):
    inputs = qmoe_inputs(bits, block, zp)
    # 8-bit weights give outputs of order 1e3: the summation order shows at rtol 1e-5
    check(bound, domain_node("QMoE", inputs, k=2, expert_weight_bits=bits, block_size=block), inputs,
          atol=1e-5 if bits < 8 else 1e-3)


@pytest.mark.parametrize("act", ["relu", "gelu", "silu", "identity", "swiglu"])
@pytest.mark.parametrize("k,normalize", [(1, 0), (2, 0), (3, 1)])
def test_qmoe_activations_always_normalized(bound, act, k, normalize):
    inputs = qmoe_inputs(4, 16, act=act)
    attrs = dict(swiglu_fusion=1, activation_alpha=1.702, activation_beta=1.0, swiglu_limit=7.0) \
        if act == "swiglu" else {}
    check(bound, domain_node("QMoE", inputs, k=k, activation_type=act, normalize_routing_weights=normalize,
                             block_size=16, **attrs), inputs)


def test_qmoe_router_weights_bit_overrides_3d(bound):
    inputs = qmoe_inputs(4, 0, router_weights=True)
    check(bound, domain_node("QMoE", inputs, k=2), inputs)
    inputs = qmoe_inputs(4, 16, zp=False, shape=(2, 3, H))
    check(bound, domain_node("QMoE", inputs, k=2, block_size=16), inputs)
    # per-projection overrides (onnxruntime's CPU kernel takes one width for both)
    inputs = qmoe_inputs(2, 16)
    check(bound, domain_node("QMoE", inputs, k=2, block_size=16, expert_weight_bits=2, fc1_expert_weight_bits=2,
                             fc2_expert_weight_bits=2), inputs)


def test_qmoe_float16_and_zero_tokens(numpy_bound):
    inputs = qmoe_inputs(4, 16, dtype=np.float16)
    # onnxruntime rounds the float16 intermediates; this computes in float32 and rounds once
    check(numpy_bound, domain_node("QMoE", inputs, k=2, block_size=16), inputs, rtol=2e-3, atol=2e-3)
    inputs = qmoe_inputs(4, 0, shape=(0, H))
    check(numpy_bound, domain_node("QMoE", inputs, k=2), inputs)


def test_qmoe_errors(numpy_bound):
    inputs = qmoe_inputs()
    for attrs in (dict(expert_weight_bits=3), dict(fc2_expert_weight_bits=8), dict(fc1_expert_weight_bits=2, fc2_expert_weight_bits=2), dict(quant_type="fp8"), dict(block_size=24)):
        with pytest.raises(InvalidGraph, match="QMoE node"):
            run_node(numpy_bound, domain_node("QMoE", inputs, **attrs), inputs)
    with pytest.raises(ValueError, match="fc1_scales"):
        run_node(numpy_bound, domain_node("QMoE", inputs, k=2, block_size=16), inputs)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("attrs", [dict(top_k=2), dict(top_k=3, n_group=4, topk_group=2, group_topk=2),
                                   dict(top_k=8, n_group=2, topk_group=2, group_topk=9, router_sentinel=-5.0),
                                   dict(top_k=1, n_group=8, topk_group=3, group_topk=1)])
def test_moe_group_router(bound, numpy_bound, dtype, attrs):
    x, b = rand(2, 3, 8, dtype=dtype), rand(8, scale=0.1)
    n = domain_node("MoEGroupRouter", [x, b], **attrs)
    check(numpy_bound if dtype == np.float16 else bound, n, [x, b], rtol=1e-3 if dtype == np.float16 else 1e-5)


def test_moe_group_router_full_scores_and_errors(bound, numpy_bound):
    x, b = rand(5, 8), rand(8, scale=0.1)
    n = domain_node("MoEGroupRouter", [x, b], 3, top_k=2)
    n.output[0] = ""
    got = run_node(bound, n, [x, b])
    want = ort_outputs(n, [x, b])
    for g, w in zip(got[1:], want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    for attrs, outs in ((dict(top_k=2), 3), (dict(top_k=2, n_group=2), 3), (dict(top_k=0), 1),
                        (dict(top_k=1, n_group=2, topk_group=3), 1)):
        m = domain_node("MoEGroupRouter", [x, b], outs, **attrs)
        if outs == 3 and "n_group" in attrs:
            m.output[0] = ""
        with pytest.raises(InvalidGraph, match="MoEGroupRouter node"):
            run_node(numpy_bound, m, [x, b])


def test_simulated_cupy_matches_numpy(numpy_bound):
    from onyxrt_gpu.kernels._common import BACKEND
    from onyxrt_gpu.testing.simulated_cupy import install

    cases = [(domain_node("MoE", moe_inputs("swiglu"), k=2, activation_type="swiglu", swiglu_fusion=1,
                          swiglu_limit=1.0), moe_inputs("swiglu")),
             (domain_node("MoE", moe_inputs("gelu"), k=3, activation_type="gelu", normalize_routing_weights=1),
              moe_inputs("gelu")),
             (domain_node("QMoE", qmoe_inputs(4, 16), k=2, block_size=16), qmoe_inputs(4, 16)),
             (domain_node("QMoE", qmoe_inputs(2, 0, router_weights=True), k=2, expert_weight_bits=2),
              qmoe_inputs(2, 0, router_weights=True)),
             (domain_node("GatherPacked", [packed_table(14, 3, 256), np.array([2, 0])], packed_type=14, K=256,
                          output_dtype=1), [packed_table(14, 3, 256), np.array([2, 0])]),
             (domain_node("GatherPacked", [packed_table(6, 3, 64), np.array([2, 0])], packed_type=6, K=64,
                          output_dtype=1), [packed_table(6, 3, 64), np.array([2, 0])]),
             (domain_node("AttnLSTM", attn_inputs(2, True), 3, hidden_size=6, direction="bidirectional"),
              attn_inputs(2, True)),
             (domain_node("MoEGroupRouter", [rand(3, 8), rand(8)], top_k=3, n_group=4, topk_group=2),
              [rand(3, 8), rand(8)])]
    with install():
        import cupy

        gpu = bind("cupy", BACKEND)
        gpu.array = cupy.asarray
        gpu.host = lambda v: v.get()
        for n, inputs in cases:
            got = run_node(gpu, n, inputs)
            want = run_node(numpy_bound, n, inputs)
            np.testing.assert_allclose(got[0], want[0], rtol=1e-6, atol=1e-6)


def test_session_runs_moe_model():
    import onnxruntime as ort

    moe = moe_inputs("swiglu")
    q = qmoe_inputs(4, 16)
    inits = [helper.make_tensor(name, TensorProto.UINT8 if v.dtype == np.uint8 else TensorProto.FLOAT,
                                v.shape, v.tobytes(), raw=True)
             for name, v in [("w1", moe[2]), ("b1", moe[3]), ("w2", moe[4]), ("b2", moe[5]),
                             ("qw1", q[2]), ("qs1", q[3]), ("qb1", q[4]), ("qw2", q[5]), ("qs2", q[6]),
                             ("qb2", q[7]), ("qz1", q[11]), ("qz2", q[12])]]
    table = packed_table(8, 10, H)  # Q8_0 embeddings
    inits.append(helper.make_tensor("table", TensorProto.UINT8, table.shape, table.tobytes(), raw=True))
    nodes = [
        helper.make_node("GatherPacked", ["table", "ids"], ["x"], domain="com.microsoft", packed_type=8, K=H,
                         output_dtype=1),
        helper.make_node("MatMul", ["x", "wr"], ["logits"]),
        helper.make_node("MoE", ["x", "logits", "w1", "b1", "w2", "b2"], ["m"], domain="com.microsoft", k=2,
                         activation_type="swiglu", swiglu_fusion=1, swiglu_limit=7.0),
        helper.make_node("MoEGroupRouter", ["logits", "eb"], ["rp"], domain="com.microsoft", top_k=2, n_group=2,
                         topk_group=1),
        helper.make_node("QMoE", ["m", "rp", "qw1", "qs1", "qb1", "qw2", "qs2", "qb2", "", "", "", "qz1",
                                  "qz2"], ["y"], domain="com.microsoft", k=2, block_size=16),
    ]
    wr, eb = rand(H, E), rand(E, scale=0.1)
    inits += [helper.make_tensor(name, TensorProto.FLOAT, v.shape, v.tobytes(), raw=True)
              for name, v in (("wr", wr), ("eb", eb))]
    graph = helper.make_graph(nodes, "moe", [helper.make_tensor_value_info("ids", TensorProto.INT64, ["t"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)],
                              ir_version=10)
    data = model.SerializeToString()
    feeds = {"ids": np.array([3, 0, 9, 12, 3], np.int64)}
    got = onyxrt.InferenceSession(data).run(None, feeds)
    want = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-4)


# ------------------------------------------------------------------ GatherPacked

GGML = {0: (1, 4), 1: (1, 2), 30: (1, 2), 2: (32, 18), 6: (32, 22), 8: (32, 34), 20: (32, 18), 14: (256, 210)}


def packed_table(kind, vocab, k):
    """A random table of ggml type ``kind``: real floats for the float types, random bytes
    with valid float16 block scales for the block formats."""
    block, nbytes = GGML[kind]
    if kind == 0:
        return rand(vocab, k).view(np.uint8)
    if kind == 1:
        return rand(vocab, k, dtype=np.float16).view(np.uint8)
    if kind == 30:
        return (rand(vocab, k).view(np.uint32) >> 16).astype(np.uint16).view(np.uint8)
    n = k // block
    b = RNG.integers(0, 256, (vocab, n, nbytes)).astype(np.uint8)
    d = (RNG.random((vocab, n)) * 0.1 + 0.01).astype(np.float16).view(np.uint8).reshape(vocab, n, 2)
    if kind == 14:
        b[..., 208:210] = d
    else:
        b[..., 0:2] = d
    return b.reshape(vocab, -1)


@pytest.mark.parametrize("kind", sorted(GGML))
@pytest.mark.parametrize("out", [1, 10])
@pytest.mark.parametrize("itype", [np.int32, np.int64])
def test_gather_packed(bound, numpy_bound, kind, out, itype):
    k = 512 if kind == 14 else 64
    data = packed_table(kind, 6, k)
    idx = np.array([[1, 5, -1], [9, 0, 2]], itype)  # out of range: row 0
    n = domain_node("GatherPacked", [data, idx], packed_type=kind, K=k, output_dtype=out)
    # exact: the decoding is exact in float32, float16 output rounds once as onnxruntime
    check(numpy_bound if out == 10 else bound, n, [data, idx], rtol=0, atol=0)


def test_gather_packed_bfloat16_and_scalar_index(numpy_bound):
    import onnxruntime as ort

    data, idx = packed_table(2, 4, 64), np.array(3, np.int64)
    n = domain_node("GatherPacked", [data, idx], packed_type=2, K=64)  # default output: bfloat16
    got = run_node(numpy_bound, n, [data, idx])[0]
    assert got.dtype.name == "bfloat16" and got.shape == (64,)
    # onnxruntime's Python API cannot return bfloat16: a Cast to float after the node
    graph = helper.make_graph(
        [n, helper.make_node("Cast", ["out0"], ["f"], to=TensorProto.FLOAT)], "bf16",
        [helper.make_tensor_value_info("in0", TensorProto.UINT8, data.shape),
         helper.make_tensor_value_info("in1", TensorProto.INT64, [])],
        [helper.make_tensor_value_info("f", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)],
                              ir_version=10)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"in0": data, "in1": idx})[0]
    np.testing.assert_array_equal(got.astype(np.float32), want)


def test_gather_packed_zero_indices(bound):
    data, idx = packed_table(20, 3, 64), np.zeros((2, 0), np.int64)
    check(bound, domain_node("GatherPacked", [data, idx], packed_type=20, K=64, output_dtype=1), [data, idx])


def test_gather_packed_errors(numpy_bound):
    data, idx = packed_table(2, 4, 64), np.array([0], np.int64)
    for attrs in (dict(packed_type=13, K=256), dict(packed_type=2, K=48), dict(packed_type=2, K=64, output_dtype=11)):
        with pytest.raises(InvalidGraph, match="GatherPacked node"):
            run_node(numpy_bound, domain_node("GatherPacked", [data, idx], **attrs), [data, idx])
    with pytest.raises(ValueError, match="data"):
        run_node(numpy_bound, domain_node("GatherPacked", [data, idx], packed_type=8, K=64), [data, idx])


# ------------------------------------------------------------------ AttnLSTM


def attn_inputs(dirs=1, aw=False, seq_lens=True, mem_lens=True, optional=True, dtype=np.float32, seq=4):
    b, i, h, tm, d, a, aws = 3, 5, 6, 7, 4, 3, 5
    att = aws if aw else d

    def r(*s):
        return rand(*s, dtype=dtype, scale=0.5)

    return [r(seq, b, i), r(dirs, 4 * h, i + att), r(dirs, 4 * h, h), r(dirs, 8 * h) if optional else None,
            np.array([4, 2, 3], np.int32) if seq_lens else None, r(dirs, b, h) if optional else None,
            r(dirs, b, h) if optional else None, r(dirs, 3 * h) if optional else None,
            r(dirs, h, a), r(dirs, d, a), r(dirs, a), r(b, tm, d),
            np.array([7, 3, 5], np.int32) if mem_lens else None, r(dirs, d + h, aws) if aw else None]


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("aw", [False, True])
@pytest.mark.parametrize("lens", [True, False])
def test_attn_lstm(bound, direction, aw, lens):
    inputs = attn_inputs(2 if direction == "bidirectional" else 1, aw, seq_lens=lens, mem_lens=lens)
    check(bound, domain_node("AttnLSTM", inputs, 3, hidden_size=6, direction=direction), inputs)


def test_attn_lstm_options(bound):
    inputs = attn_inputs(optional=False)
    check(bound, domain_node("AttnLSTM", inputs, 3, hidden_size=6), inputs)
    inputs = attn_inputs(aw=True)
    check(bound, domain_node("AttnLSTM", inputs, 3, hidden_size=6, clip=0.3, input_forget=1,
                             activations=["HardSigmoid", "Tanh", "Softsign"], activation_alpha=[0.3],
                             activation_beta=[0.4]), inputs)
    # Y_h alone
    check(bound, domain_node("AttnLSTM", inputs, 2, hidden_size=6), inputs)


def test_attn_lstm_double_refused(numpy_bound):
    # onnxruntime registers a double kernel that fails at run time ("LSTM operator does not
    # support double yet"): the library takes float only
    kdef, reason = numpy_bound.registry.lookup("com.microsoft", "AttnLSTM", 1)
    assert kdef is not None, reason
    assert kdef.types["T"] == {np.dtype(np.float32)}


def test_attn_lstm_errors(numpy_bound):
    inputs = attn_inputs()
    with pytest.raises(ValueError, match="QW, MW, V and M"):
        bad = inputs[:8]
        run_node(numpy_bound, domain_node("AttnLSTM", bad, 3, hidden_size=6), bad)
    with pytest.raises(ValueError, match="memory_seq_lens"):
        bad = inputs[:12] + [np.array([8, 1, 1], np.int32)]
        run_node(numpy_bound, domain_node("AttnLSTM", bad, 3, hidden_size=6), bad)
    with pytest.raises(InvalidGraph, match="AttnLSTM node"):
        run_node(numpy_bound, domain_node("AttnLSTM", inputs, 3, hidden_size=6, direction="up"), inputs)


def test_session_runs_attn_lstm_model():
    import onnxruntime as ort

    inputs = attn_inputs(2, True)
    names = ["X", "W", "R", "B", "seq", "h0", "c0", "P", "QW", "MW", "V", "M", "mem", "AW"]
    inits = [helper.make_tensor(nm, TensorProto.INT32 if v.dtype == np.int32 else TensorProto.FLOAT, v.shape,
                                v.tobytes(), raw=True) for nm, v in zip(names, inputs) if nm not in ("X", "M")]
    nodes = [helper.make_node("AttnLSTM", names, ["Y", "Y_h", "Y_c"], domain="com.microsoft", hidden_size=6,
                              direction="bidirectional"),
             helper.make_node("Relu", ["Y"], ["y"])]
    graph = helper.make_graph(
        nodes, "attn",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["s", 3, 5]),
         helper.make_tensor_value_info("M", TensorProto.FLOAT, [3, 7, 4])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in ("y", "Y_h", "Y_c")], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)],
                              ir_version=10)
    data = model.SerializeToString()
    feeds = {"X": inputs[0], "M": inputs[11]}
    got = onyxrt.InferenceSession(data).run(None, feeds)
    want = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
