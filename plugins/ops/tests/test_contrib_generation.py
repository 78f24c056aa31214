"""Tests of the com.microsoft generation loops (GreedySearch, BeamSearch, Sampling) against onnxruntime.

The decoder is a tiny GPT-2 style graph (embedding Gather, a tanh layer, logits MatMul)
whose logits depend on the current token, its position and a masked sum over the past
state, which every step concatenates to — so wrong positions, masks or beam reordering of
the past change the sequences. The loops run through sessions (the decoder is a subgraph
run by the session's providers), onyxrt's and onnxruntime's.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from library_harness import bind
from onnx import TensorProto, helper, numpy_helper

import onyxrt
from onyxrt.errors import InvalidGraph
from onyxrt.kernels import KernelInfo, SubgraphRunner

V, H, HS, MAXPOS = 12, 1, 3, 16  # vocab, heads, head size, position table
EOS, PAD = 3, 0


def _decoder(seed: int = 0, n_layers: int = 1, outer_weights: bool = False) -> tuple[onnx.GraphProto, list]:
    """The decoder graph, and the initializers to put in the main graph when
    ``outer_weights`` (as onnxruntime's convert tool hoists them; the body then reads them
    from the outer scope)."""
    rng = np.random.default_rng(seed)
    d = 2 * H * HS
    w = {
        "emb": rng.normal(0, 1.5, (V, d)).astype(np.float32),
        "pos": rng.normal(0, 1.0, (MAXPOS, d)).astype(np.float32),
        "w1": rng.normal(0, 1.0, (d, d)).astype(np.float32),
        "w2": rng.normal(0, 2.0, (d, V)).astype(np.float32),
        "b2": np.where(np.arange(V) == PAD, -30.0, 0.0).astype(np.float32),  # pad is never chosen
        "shape5": np.array([0, 0, 2, H, HS], np.int64),
    }
    inits = [numpy_helper.from_array(v, k) for k, v in w.items()]
    nodes = [
        helper.make_node("Gather", ["emb", "input_ids"], ["tok"]),
        helper.make_node("Gather", ["pos", "position_ids"], ["posv"]),
        helper.make_node("Add", ["tok", "posv"], ["h0"]),  # (B, S, d)
        # new state (2, B, H, S, HS) from h0
        helper.make_node("Reshape", ["h0", "shape5"], ["h5"]),  # (B, S, 2, H, HS)
        helper.make_node("Transpose", ["h5"], ["kv"], perm=[2, 0, 3, 1, 4]),
        helper.make_node("Cast", ["attention_mask"], ["maskf"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["maskf", "mask_axes"], ["mask5"]),  # (1, B, 1, T, 1)
    ]
    inits.append(numpy_helper.from_array(np.array([0, 2, 4], np.int64), "mask_axes"))
    inputs = [
        helper.make_tensor_value_info("input_ids", TensorProto.INT32, ["B", "S"]),
        helper.make_tensor_value_info("position_ids", TensorProto.INT32, ["B", "S"]),
        helper.make_tensor_value_info("attention_mask", TensorProto.INT32, ["B", "T"]),
    ]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["B", "S", V])]
    ctx = []
    for i in range(n_layers):
        inputs.append(helper.make_tensor_value_info(f"past_{i}", TensorProto.FLOAT, [2, "B", H, "P", HS]))
        outputs.append(helper.make_tensor_value_info(f"present_{i}", TensorProto.FLOAT, [2, "B", H, "T", HS]))
        nodes += [
            helper.make_node("Concat", [f"past_{i}", "kv"], [f"present_{i}"], axis=3),
            helper.make_node("Mul", [f"present_{i}", "mask5"], [f"masked_{i}"]),
            helper.make_node("ReduceSum", [f"masked_{i}", "axis3"], [f"ctx5_{i}"], keepdims=0),  # (2, B, H, HS)
            helper.make_node("Transpose", [f"ctx5_{i}"], [f"ctxt_{i}"], perm=[1, 0, 2, 3]),
            helper.make_node("Reshape", [f"ctxt_{i}", "ctx_shape"], [f"ctx_{i}"]),  # (B, 1, d)
        ]
        ctx.append(f"ctx_{i}")
    inits += [numpy_helper.from_array(np.array([3], np.int64), "axis3"),
              numpy_helper.from_array(np.array([0, 1, -1], np.int64), "ctx_shape")]
    scale = numpy_helper.from_array(np.array(0.3, np.float32), "scale")
    inits.append(scale)
    nodes.append(helper.make_node("Sum", ctx, ["ctx"]))
    nodes += [
        helper.make_node("Mul", ["ctx", "scale"], ["ctxs"]),
        helper.make_node("Add", ["h0", "ctxs"], ["h1"]),
        helper.make_node("MatMul", ["h1", "w1"], ["h2"]),
        helper.make_node("Tanh", ["h2"], ["h3"]),
        helper.make_node("MatMul", ["h3", "w2"], ["z"]),
        helper.make_node("Add", ["z", "b2"], ["logits"]),
    ]
    body_inits = [] if outer_weights else inits
    graph = helper.make_graph(nodes, "decoder", inputs, outputs, initializer=body_inits)
    return graph, (inits if outer_weights else [])


def _wrap(op: str, order: list[str], feeds: dict, outs: list[str], outer=(), **attrs) -> bytes:
    """A model of one generation node: the feeds given, in the operator's input ``order``
    (absent ones ""), and ``outs``; ``attrs`` include its subgraphs."""
    names = [n if n in feeds else "" for n in order]
    while names[-1] == "":
        names.pop()
    node = helper.make_node(op, names, outs, name="gen", domain="com.microsoft", **attrs)
    elem = {np.dtype(np.int32): TensorProto.INT32, np.dtype(np.float32): TensorProto.FLOAT}
    graph = helper.make_graph(
        [node], "gen",
        [helper.make_tensor_value_info(k, elem[np.asarray(v).dtype], list(np.shape(v))) for k, v in feeds.items()],
        [helper.make_empty_tensor_value_info(o) for o in outs], initializer=list(outer))
    model = helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 17),
                                                                    helper.make_opsetid("com.microsoft", 1)])
    return model.SerializeToString()


def _model(op: str, feeds: dict, decoder=None, outer=(), n_out: int = 1, **attrs) -> bytes:
    """The generation node over ``decoder`` in a model; BeamSearch feeds get what
    onnxruntime requires in practice (as convert_generation writes them): the length and
    repetition penalties (its type inference reads them; 1.0 when not given) and
    min_length (without it onnxruntime fails with "Node input max_length is required")."""
    if op == "BeamSearch":
        feeds.setdefault("min_length", np.array([1], np.int32))
        feeds.setdefault("length_penalty", np.array([1.0], np.float32))
        feeds.setdefault("repetition_penalty", np.array([1.0], np.float32))
    decoder = decoder if decoder is not None else _decoder()[0]
    order = (["input_ids", "max_length", "min_length", "repetition_penalty", "vocab_mask", "prefix_vocab_mask",
              "attention_mask", "presence_mask", "seed"] if op in ("GreedySearch", "Sampling") else
             ["input_ids", "max_length", "min_length", "num_beams", "num_return_sequences", "length_penalty",
              "repetition_penalty", "vocab_mask", "prefix_vocab_mask", "attention_mask"])
    outs = (["sequences", "filtered_logits"] if op == "Sampling" else ["sequences", "sequences_scores", "scores"])[:n_out]
    return _wrap(op, order, feeds, outs, outer, decoder=decoder,
                 **{"eos_token_id": EOS, "pad_token_id": PAD, "model_type": 0, **attrs})


def _run_both(model: bytes, feeds: dict) -> tuple[list, list]:
    import onnxruntime as ort

    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)
    got = onyxrt.InferenceSession(model).run(None, feeds)
    return got, want


def _check(model: bytes, feeds: dict) -> list:
    got, want = _run_both(model, feeds)
    _assert_same(got, want, feeds)
    return got


def _assert_same(got: list, want: list, feeds: dict) -> None:
    assert len(got) == len(want)
    seqs, ref = got[0], want[0]
    if seqs.ndim == 2:
        # GreedySearch: onnxruntime leaves the columns after the loop stopped (every row
        # ended by eos) unwritten; onyxrt pads them. The decoder never picks the pad token,
        # so a pad column in the generated part marks a finished row.
        prompt = feeds["input_ids"].shape[1]
        ended = (seqs[:, prompt:] == PAD).all(axis=0)
        stop = prompt + int(np.argmax(ended)) + 1 if ended.any() else seqs.shape[1]
        assert (seqs[:, stop:] == PAD).all()
        seqs, ref = seqs[:, :stop], ref[:, :stop]
    np.testing.assert_array_equal(seqs, ref)  # sequences: exactly
    for k, (g, w) in enumerate(zip(got[1:], want[1:])):
        if w is None:  # Sampling's filtered_logits: never written by onnxruntime's CPU kernel
            assert g is None
            continue
        assert g.dtype == w.dtype and g.shape == w.shape
        if k == 1:
            # BeamSearch's per-step scores: onnxruntime leaves the steps after the loop
            # stopped unwritten, onyxrt writes zeros there (a step run is never all zero).
            ran = (g != 0).reshape(g.shape[0], -1).any(axis=1)
            n_ran = int(ran.sum())
            assert ran[:n_ran].all() and n_ran > 0
            g, w = g[:n_ran], w[:n_ran]
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def i32(*v):
    return np.array(v, np.int32)


PROMPT = np.array([[5, 7, 2]], np.int32)
PROMPT2 = np.array([[PAD, 5, 9], [4, 7, 2]], np.int32)  # left padding in row 0
MASK2 = (PROMPT2 != PAD).astype(np.int32)


# ------------------------------------------------------------------------- GreedySearch
@pytest.mark.parametrize("extra", [
    {},
    {"min_length": i32(7)},
    {"repetition_penalty": np.array([1.7], np.float32)},
    {"vocab_mask": np.array([1, 1, 1, 1, 0, 1, 0, 1, 1, 1, 1, 1], np.int32)},
    {"prefix_vocab_mask": np.array([[1, 0, 0, 1, 1, 0, 1, 1, 0, 1, 1, 1]], np.int32)},
], ids=["plain", "min_length", "repetition", "vocab_mask", "prefix_mask"])
@pytest.mark.parametrize("seed", [0, 1, 2, 5])
def test_greedy_search(extra, seed):
    feeds = {"input_ids": PROMPT, "max_length": i32(10), **extra}
    _check(_model("GreedySearch", feeds, _decoder(seed)[0]), feeds)


@pytest.mark.parametrize("seed", [0, 3, 4])
@pytest.mark.parametrize("with_mask", [False, True])
def test_greedy_search_batch_left_padding(seed, with_mask):
    feeds = {"input_ids": PROMPT2, "max_length": i32(9)}
    if with_mask:
        feeds["attention_mask"] = MASK2
    _check(_model("GreedySearch", feeds, _decoder(seed)[0]), feeds)


def test_greedy_search_no_repeat_ngram_two_layers_outer_weights():
    dec, outer = _decoder(7, n_layers=2, outer_weights=True)
    feeds = {"input_ids": PROMPT2, "max_length": i32(12)}
    for ngram in (1, 2):
        _check(_model("GreedySearch", feeds, dec, outer, no_repeat_ngram_size=ngram), feeds)


def test_greedy_search_eos_early():
    # find a seed whose greedy run emits eos early, then check padding after it
    hit = 0
    for seed in range(40):
        feeds = {"input_ids": PROMPT2, "max_length": i32(14)}
        got = _check(_model("GreedySearch", feeds, _decoder(seed)[0]), feeds)
        hit += int((got[0][:, 3:] == PAD).any())
    assert hit >= 3


# ------------------------------------------------------------------------- BeamSearch
@pytest.mark.parametrize("beams,n_return", [(1, 1), (2, 1), (2, 2), (4, 1), (4, 3)])
@pytest.mark.parametrize("seed", [0, 1, 6])
def test_beam_search(beams, n_return, seed):
    feeds = {"input_ids": PROMPT, "max_length": i32(9), "num_beams": i32(beams),
             "num_return_sequences": i32(n_return)}
    _check(_model("BeamSearch", feeds, _decoder(seed)[0], n_out=2), feeds)


@pytest.mark.parametrize("extra", [
    {"length_penalty": np.array([0.6], np.float32)},
    {"length_penalty": np.array([2.0], np.float32), "min_length": i32(8)},
    {"repetition_penalty": np.array([1.5], np.float32)},
    {"vocab_mask": np.array([1, 1, 1, 1, 0, 1, 0, 1, 1, 1, 1, 1], np.int32)},
], ids=["lp0.6", "lp2_min", "repetition", "vocab_mask"])
@pytest.mark.parametrize("early", [0, 1])
def test_beam_search_options(extra, early):
    feeds = {"input_ids": PROMPT, "max_length": i32(10), "num_beams": i32(3), "num_return_sequences": i32(2),
             **extra}
    _check(_model("BeamSearch", feeds, _decoder(2)[0], n_out=2, early_stopping=early), feeds)


@pytest.mark.parametrize("seed", [0, 3, 8])
@pytest.mark.parametrize("with_mask", [False, True])
@pytest.mark.parametrize("beams", [3, 5])
def test_beam_search_batch_left_padding(seed, with_mask, beams):
    feeds = {"input_ids": PROMPT2, "max_length": i32(10), "num_beams": i32(beams), "num_return_sequences": i32(2),
             "prefix_vocab_mask": np.array([[1] * 12, [1, 1, 0, 1, 0, 1, 1, 1, 1, 1, 1, 1]], np.int32)}
    if with_mask:
        feeds["attention_mask"] = MASK2
    dec, outer = _decoder(seed, n_layers=2, outer_weights=True)
    _check(_model("BeamSearch", feeds, dec, outer, n_out=3, no_repeat_ngram_size=2), feeds)


def test_beam_search_eos_hypotheses():
    # seeds whose beams finish through eos before max_length (hypotheses without the eos
    # token, padded), including batches done early
    finished = 0
    for seed in range(30):
        feeds = {"input_ids": PROMPT2, "max_length": i32(12), "num_beams": i32(2),
                 "num_return_sequences": i32(2)}
        got = _check(_model("BeamSearch", feeds, _decoder(seed)[0], n_out=3), feeds)
        finished += int((got[0][:, :, 3:] == PAD).any())
    assert finished >= 3


# ------------------------------------------------------------------------- Sampling
@pytest.mark.parametrize("attrs", [
    {"top_p": 0.9, "temperature": 1.5},
    {"top_p": 0.95, "temperature": 0.5, "min_tokens_to_keep": 3},
    {"top_p": 0.7, "custom": 1},
    {"top_p": 0.8, "filter_value": -1000.0, "no_repeat_ngram_size": 2},
], ids=["t1.5", "t0.5_keep3", "custom", "filter_value_ngram"])
@pytest.mark.parametrize("seed", [None, 0, 7, 123456])
def test_sampling(attrs, seed):
    feeds = {"input_ids": PROMPT2, "max_length": i32(12)}
    if seed is not None:
        feeds["seed"] = i32(seed)
    _check(_model("Sampling", feeds, _decoder(1)[0], n_out=2, **attrs), feeds)


@pytest.mark.parametrize("extra", [
    {"repetition_penalty": np.array([1.4], np.float32), "min_length": i32(8)},
    {"vocab_mask": np.array([1, 1, 1, 1, 0, 1, 0, 1, 1, 1, 1, 1], np.int32), "attention_mask": MASK2},
    {"prefix_vocab_mask": np.array([[1] * 12, [1, 1, 0, 1, 0, 1, 1, 1, 1, 0, 0, 1]], np.int32)},
], ids=["repetition_min", "vocab_mask", "prefix_mask"])
@pytest.mark.parametrize("dec_seed", [2, 5])
def test_sampling_processors(extra, dec_seed):
    feeds = {"input_ids": PROMPT2, "max_length": i32(11), "seed": i32(42), **extra}
    _check(_model("Sampling", feeds, _decoder(dec_seed)[0], top_p=0.9), feeds)


def test_sampling_presence_penalty():
    # onnxruntime applies every presence term to the very first score (see the module docstring)
    presence = np.zeros((2, V), np.int32)
    presence[0, [0, 4, 7]] = 1
    presence[1, [2, 9]] = 1
    for penalty in (0.0, 0.8, 3.0):
        feeds = {"input_ids": PROMPT2, "max_length": i32(11), "presence_mask": presence, "seed": i32(5)}
        _check(_model("Sampling", feeds, _decoder(3)[0], top_p=0.9, presence_penalty=penalty), feeds)


def test_sampling_top_p_zero_samples_everything():
    # onnxruntime's result for top_p=0 (its default) reads unwritten memory and changes from
    # run to run: onyxrt samples the whole distribution then, deterministically per seed.
    feeds = {"input_ids": PROMPT, "max_length": i32(15), "seed": i32(11)}
    model = _model("Sampling", feeds, _decoder(1)[0])
    first = onyxrt.InferenceSession(model).run(None, feeds)[0]
    again = onyxrt.InferenceSession(model).run(None, feeds)[0]
    np.testing.assert_array_equal(first, again)
    assert (first >= 0).all() and (first < V).all()
    greedy = onyxrt.InferenceSession(_model("GreedySearch", {k: v for k, v in feeds.items() if k != "seed"},
                                            _decoder(1)[0])).run(None, {"input_ids": PROMPT, "max_length": i32(15)})[0]
    assert not np.array_equal(first, greedy)


def test_random_engine_matches_libstdcxx():
    from onyxrt_ops.contrib_generation import _MinStd0

    # std::minstd_rand0 with the default seed 1: its 10000th value is 1043618065 (C++11 §26.5.5)
    engine = _MinStd0(1)
    for _ in range(9999):
        engine._next()
    assert engine._next() == 1043618065
    assert _MinStd0(0).state == 1 and 0.0 <= _MinStd0(3).uniform() < 1.0


# ------------------------------------------------------------------------- BeamSearch model_type=1
# A T5-style pair in onnxruntime's encoder format with decoder_input_ids: the encoder embeds
# the prompt (hidden states, cross-attention key/values per layer) and runs the first
# decoder step; the decoder's logits depend on its token, the masked cross state, the
# hidden states, the self state summed over positions and the previous token's key (so the
# order of the generated tokens matters, and beams rarely tie).
T5H, T5HS, T5_START = 2, 2, 1
T5D = T5H * T5HS


def _t5_weights(seed, eos_bias=0.0):
    rng = np.random.default_rng(100 + seed)
    return {
        "enc_emb": rng.normal(0, 1.0, (V, T5D)).astype(np.float32),
        "dec_emb": rng.normal(0, 1.5, (V, T5D)).astype(np.float32),
        "wk": rng.normal(0, 1.0, (T5D, T5D)).astype(np.float32),
        "wv": rng.normal(0, 1.0, (T5D, T5D)).astype(np.float32),
        "ck": rng.normal(0, 1.0, (T5D, T5D)).astype(np.float32),
        "cv": rng.normal(0, 1.0, (T5D, T5D)).astype(np.float32),
        "w1": rng.normal(0, 1.0, (T5D, T5D)).astype(np.float32),
        "w2": rng.normal(0, 2.0, (T5D, V)).astype(np.float32),
        "b2": (np.where(np.arange(V) == PAD, -30.0, 0.0) + np.where(np.arange(V) == EOS, eos_bias, 0.0)).astype(np.float32),
        "heads4": np.array([0, 0, T5H, T5HS], np.int64),
        "flat3": np.array([0, 1, T5D], np.int64),
        "ax1": np.array([1], np.int64), "ax2": np.array([2], np.int64),
        "ax13": np.array([1, 3], np.int64), "ax2only": np.array([2], np.int64),
        "c03": np.array(0.3, np.float32), "c05": np.array(0.5, np.float32), "c02": np.array(0.2, np.float32),
        "last_s": np.array([-1], np.int64), "last_e": np.array([2**31], np.int64),
        "prev_s": np.array([-2], np.int64), "prev_e": np.array([-1], np.int64),
    }


def _t5_heads(x, out, w):
    """(B, S, D) @ w -> (B, T5H, S, HS)"""
    return [helper.make_node("MatMul", [x, w], [out + "_m"]),
            helper.make_node("Reshape", [out + "_m", "heads4"], [out + "_r"]),
            helper.make_node("Transpose", [out + "_r"], [out], perm=[0, 2, 1, 3])]


def _t5_flat(x, out):
    """(B, T5H, T, HS) summed over T -> (B, 1, D)"""
    return [helper.make_node("ReduceSum", [x, "ax2only"], [out + "_s"], keepdims=1),  # (B,H,1,HS)
            helper.make_node("Transpose", [out + "_s"], [out + "_t"], perm=[0, 2, 1, 3]),
            helper.make_node("Reshape", [out + "_t", "flat3"], [out])]


def _t5_step(n_layers, ids, pre, hidden, mask, past_self, past_cross, present_names, logits, seq_input=False):
    """Nodes of one decoder step: token ``ids`` (B,1) -> logits and presents."""
    nodes = []
    if seq_input:
        nodes.append(helper.make_node("Slice", [ids, "last_s", "last_e", "ax1"], [pre + "ids1"]))
        ids = pre + "ids1"
    nodes += [helper.make_node("Gather", ["dec_emb", ids], [pre + "e"]),  # (B,1,D)
              helper.make_node("Cast", [mask], [pre + "mf"], to=TensorProto.FLOAT),
              helper.make_node("Unsqueeze", [pre + "mf", "ax13"], [pre + "m4"]),  # (B,1,S,1)
              helper.make_node("Unsqueeze", [pre + "mf", "ax2"], [pre + "m3"])]  # (B,S,1)
    acc = pre + "e"
    if hidden:
        # only the shape of encoder_hidden_states (its frame count): onnxruntime feeds the
        # decoder an expanded buffer it never fills (ExpandBuffer with only_copy_shape), as
        # the decoders its convert tools export use it for its shape only
        nodes += [helper.make_node("Shape", [hidden], [pre + "hshape"], start=1, end=2),
                  helper.make_node("Cast", [pre + "hshape"], [pre + "hsf"], to=TensorProto.FLOAT),
                  helper.make_node("Mul", [pre + "hsf", "c02"], [pre + "hs2"]),
                  helper.make_node("Add", [pre + "e", pre + "hs2"], [pre + "acc0"])]
        acc = pre + "acc0"
    for i in range(n_layers):
        p = f"{pre}l{i}_"
        nodes += _t5_heads(pre + "e", p + "kn", "wk") + _t5_heads(pre + "e", p + "vn", "wv")
        nodes += [helper.make_node("Concat", [past_self[2 * i], p + "kn"], [present_names[2 * i]], axis=2),
                  helper.make_node("Concat", [past_self[2 * i + 1], p + "vn"], [present_names[2 * i + 1]], axis=2),
                  helper.make_node("Mul", [past_cross[2 * i], pre + "m4"], [p + "ckm"]),
                  helper.make_node("Mul", [past_cross[2 * i + 1], pre + "m4"], [p + "cvm"]),
                  helper.make_node("Mul", [present_names[2 * i], present_names[2 * i + 1]], [p + "kv"])]
        # the previous token's key (none at the first step) makes the logits depend on the order
        nodes.append(helper.make_node("Slice", [present_names[2 * i], "prev_s", "prev_e", "ax2"], [p + "prev"]))
        nodes += _t5_flat(p + "kv", p + "sf") + _t5_flat(p + "ckm", p + "cf") + _t5_flat(p + "cvm", p + "vf")
        nodes += _t5_flat(p + "prev", p + "pf")
        acc_in = [p + "pf"]
        nodes += [helper.make_node("Mul", [p + "sf", "c03"], [p + "sf3"]),
                  helper.make_node("Mul", [p + "cf", "c05"], [p + "cf5"]),
                  helper.make_node("Sum", [acc, p + "sf3", p + "cf5", p + "vf", *acc_in], [p + "acc"])]
        acc = p + "acc"
    nodes += [helper.make_node("MatMul", [acc, "w1"], [pre + "h2"]),
              helper.make_node("Tanh", [pre + "h2"], [pre + "h3"]),
              helper.make_node("MatMul", [pre + "h3", "w2"], [pre + "z"]),
              helper.make_node("Add", [pre + "z", "b2"], [logits])]
    return nodes


def _f32(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _i32v(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.INT32, shape)


def _t5_graphs(seed=0, n_layers=1, outer_weights=False, seq_input=False, with_hidden=True, eos_bias=0.0):
    """(encoder, decoder, outer initializers): a T5-style pair in onnxruntime's old
    encoder format (the encoder also runs the first decoder step)."""
    inits = [numpy_helper.from_array(v, k) for k, v in _t5_weights(seed, eos_bias).items()]
    selfk = [f"{kv}_self_{i}" for i in range(n_layers) for kv in ("key", "value")]
    crossk = [f"{kv}_cross_{i}" for i in range(n_layers) for kv in ("key", "value")]
    # encoder
    enodes = [helper.make_node("Gather", ["enc_emb", "encoder_input_ids"], ["eh0"]),
              helper.make_node("Tanh", ["eh0"], ["encoder_hidden_states"])]
    for i in range(n_layers):
        enodes += _t5_heads("encoder_hidden_states", f"present_key_cross_{i}", "ck")
        enodes += _t5_heads("encoder_hidden_states", f"present_value_cross_{i}_pre", "cv")
        enodes.append(helper.make_node("Mul", [f"present_value_cross_{i}_pre", "c05"], [f"present_value_cross_{i}"]))
    enodes.append(helper.make_node("Slice", ["present_key_cross_0", "ax1", "ax1", "ax2"], ["empty_self"]))  # (B,H,0,HS)
    enodes += _t5_step(n_layers, "decoder_input_ids", "s_", "encoder_hidden_states", "encoder_attention_mask",
                    ["empty_self"] * (2 * n_layers), ["present_" + c for c in crossk],
                    ["present_" + s for s in selfk], "logits")
    enc_in = [_i32v("encoder_input_ids", ["B", "S"]), _i32v("encoder_attention_mask", ["B", "S"]),
              _i32v("decoder_input_ids", ["B", 1])]
    enc_out = [_f32("logits", ["B", 1, V]), _f32("encoder_hidden_states", ["B", "S", T5D])]
    enc_out += [_f32("present_" + s, ["B", T5H, 1, T5HS]) for s in selfk]
    enc_out += [_f32("present_" + c, ["B", T5H, "S", T5HS]) for c in crossk]
    body = [] if outer_weights else inits
    encoder = helper.make_graph(enodes, "encoder", enc_in, enc_out, initializer=list(body))
    # decoder
    dnodes = _t5_step(n_layers, "input_ids", "d_", "encoder_hidden_states" if with_hidden else "", "encoder_attention_mask",
                   ["past_" + s for s in selfk], ["past_" + c for c in crossk], ["present_" + s for s in selfk],
                   "logits", seq_input)
    dec_in = [_i32v("input_ids", ["B", "T" if seq_input else 1]), _i32v("encoder_attention_mask", ["B", "S"])]
    if with_hidden:
        dec_in.append(_f32("encoder_hidden_states", ["B", "S", T5D]))
    dec_in += [_f32("past_" + s, ["B", T5H, "P", T5HS]) for s in selfk]
    dec_in += [_f32("past_" + c, ["B", T5H, "S", T5HS]) for c in crossk]
    dec_out = [_f32("logits", ["B", 1, V])] + [_f32("present_" + s, ["B", T5H, "P1", T5HS]) for s in selfk]
    decoder = helper.make_graph(dnodes, "decoder", dec_in, dec_out, initializer=list(body))
    return encoder, decoder, (inits if outer_weights else [])


def _t5_model(op, feeds, seed=0, n_out=2, encoder=None, decoder=None, outer=(), **attrs):
    """The generation node (model_type=1) over the T5-style pair in a model."""
    if encoder is None:
        encoder, decoder, outer = _t5_graphs(seed)
    order = (["input_ids", "max_length", "min_length", "num_beams", "num_return_sequences", "length_penalty",
              "repetition_penalty", "vocab_mask", "prefix_vocab_mask", "attention_mask"] if op == "BeamSearch" else
             ["input_ids", "max_length", "min_length", "repetition_penalty", "vocab_mask", "prefix_vocab_mask",
              "attention_mask"])
    outs = ["sequences", "sequences_scores", "scores"][:n_out]
    return _wrap(op, order, feeds, outs, outer, encoder=encoder, decoder=decoder,
                 **{"eos_token_id": EOS, "pad_token_id": PAD, "model_type": 1, "decoder_start_token_id": T5_START,
                    **attrs})

T5_PROMPT = np.array([[PAD, 5, 9, 4], [4, 7, 2, PAD]], np.int32)  # left padding, and a trailing pad token
T5_MASK = np.array([[0, 1, 1, 1], [1, 1, 1, 1]], np.int32)


def _t5_feeds(beams: int, n_return: int, max_length: int, **extra) -> dict:
    return {"input_ids": T5_PROMPT, "max_length": i32(max_length), "min_length": i32(1), "num_beams": i32(beams),
            "num_return_sequences": i32(n_return), "length_penalty": np.array([1.0], np.float32),
            "repetition_penalty": np.array([1.0], np.float32), **extra}


@pytest.mark.parametrize("beams,n_return", [(1, 1), (2, 2), (4, 2)])
@pytest.mark.parametrize("max_length", [3, 8])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_t5_beam_search(beams, n_return, max_length, seed):
    feeds = _t5_feeds(beams, n_return, max_length)
    _check(_t5_model("BeamSearch", feeds, seed, n_out=3), feeds)


@pytest.mark.parametrize("extra", [
    {},
    {"min_length": i32(5)},
    {"repetition_penalty": np.array([1.6], np.float32)},
    {"attention_mask": T5_MASK},
    {"length_penalty": np.array([0.5], np.float32)},
], ids=["plain", "min_length", "repetition", "attention_mask", "lp0.5"])
@pytest.mark.parametrize("early", [0, 1])
@pytest.mark.parametrize("beams", [1, 2, 4])
def test_t5_beam_search_eos_and_options(extra, early, beams):
    # the eos token's logit raised so that beams and whole batches finish early
    finished = 0
    for seed in range(4):
        encoder, decoder, outer = _t5_graphs(seed, eos_bias=3.0 if beams == 1 else 5.0)
        feeds = _t5_feeds(beams, min(2, beams), 9, **extra)
        got = _check(_t5_model("BeamSearch", feeds, n_out=3, encoder=encoder, decoder=decoder, outer=outer,
                               early_stopping=early), feeds)
        finished += int((got[0][..., 2:] == PAD).any())
        if "min_length" in extra:  # eos barred while the sequence (start token included) is shorter than 5
            assert (got[0][..., :5] != PAD).all()
    assert finished >= 1 or "min_length" in extra


@pytest.mark.parametrize("seed", [0, 2, 3])  # seed 1 leads the toy model to beams tied within float rounding
@pytest.mark.parametrize("beams", [1, 3])
@pytest.mark.parametrize("with_hidden", [True, False])
def test_t5_whole_sequence_two_layers_outer_weights(seed, beams, with_hidden):
    # a decoder whose input_ids is (batch, sequence) gets the whole sequence each step
    # (onnxruntime's use_sequence_as_input_ids); weights in the main graph; masks and n-grams;
    # with and without the decoder's encoder_hidden_states input
    encoder, decoder, outer = _t5_graphs(seed, n_layers=2, outer_weights=True, seq_input=True, eos_bias=2.0,
                                         with_hidden=with_hidden)
    feeds = _t5_feeds(beams, 1, 10, vocab_mask=np.array([1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 0, 1], np.int32),
                      prefix_vocab_mask=np.array([[1] * 12, [1, 1, 0, 1, 1, 0, 1, 1, 1, 1, 1, 1]], np.int32))
    _check(_t5_model("BeamSearch", feeds, n_out=3, encoder=encoder, decoder=decoder, outer=outer,
                     no_repeat_ngram_size=2), feeds)


def test_t5_max_length_two_is_the_encoder_step():
    # onnxruntime skips the encoder's step when max_length == 2 and runs the decoder on
    # feeds it never wrote (garbage, or an out-of-range Gather); onyxrt takes the encoder's step
    got = onyxrt.InferenceSession(_t5_model("BeamSearch", _t5_feeds(1, 1, 2))).run(None, _t5_feeds(1, 1, 2))
    ref = onyxrt.InferenceSession(_t5_model("BeamSearch", _t5_feeds(1, 1, 3))).run(None, _t5_feeds(1, 1, 3))
    assert got[0].shape == (2, 1, 2)
    np.testing.assert_array_equal(got[0], ref[0][..., :2])
    assert (got[0][..., 0] == T5_START).all()


def test_gpt_one_beam_done_batch_keeps_its_past():
    # with one beam onnxruntime passes the past state on without reordering it, while the
    # sequences of a finished batch copy row 0 (what the repetition penalty then reads)
    finished = 0
    for seed in range(12):
        feeds = {"input_ids": PROMPT2, "max_length": i32(12), "num_beams": i32(1), "num_return_sequences": i32(1),
                 "repetition_penalty": np.array([1.5], np.float32)}
        got = _check(_model("BeamSearch", feeds, _decoder(seed)[0], n_out=3), feeds)
        finished += int((got[0][:, :, 3:] == PAD).any())
    assert finished >= 2


def test_t5_refusals():
    feeds = {"input_ids": T5_PROMPT, "max_length": i32(8)}
    encoder, decoder, _ = _t5_graphs()
    with pytest.raises(InvalidGraph, match="GreedySearch and Sampling run only model_type=0"):
        onyxrt.InferenceSession(_t5_model("GreedySearch", feeds, n_out=1))
    bfeeds = _t5_feeds(2, 1, 8)
    with pytest.raises(InvalidGraph, match="model_type=3 is not supported"):
        onyxrt.InferenceSession(_t5_model("BeamSearch", bfeeds, model_type=3))
    with pytest.raises(InvalidGraph, match="the encoder must take encoder_input_ids, decoder_input_ids"):
        onyxrt.InferenceSession(_t5_model("BeamSearch", bfeeds, model_type=2))  # T5 graphs as Whisper's
    with pytest.raises(InvalidGraph, match="decoder_start_token_id"):
        onyxrt.InferenceSession(_t5_model("BeamSearch", bfeeds, decoder_start_token_id=-1))
    two = onnx.GraphProto()
    two.CopyFrom(encoder)
    del two.input[2]  # the newer format (its encoder makes no first step): here a constant start token
    two.node.insert(0, helper.make_node("Constant", [], ["decoder_input_ids"],
                                        value=numpy_helper.from_array(np.ones((2, 1), np.int32))))
    with pytest.raises(InvalidGraph, match="format without decoder_input_ids"):
        onyxrt.InferenceSession(_t5_model("BeamSearch", bfeeds, encoder=two, decoder=decoder))
    bad = onnx.GraphProto()
    bad.CopyFrom(decoder)
    bad.input.append(helper.make_tensor_value_info("past_sequence_length", TensorProto.INT32, [1]))
    with pytest.raises(InvalidGraph, match="the decoder must take"):
        onyxrt.InferenceSession(_t5_model("BeamSearch", bfeeds, encoder=encoder, decoder=bad))
    model = onnx.load_from_string(_t5_model("BeamSearch", bfeeds))
    attrs = model.graph.node[0].attribute
    del attrs[[a.name for a in attrs].index("encoder")]
    with pytest.raises(InvalidGraph, match="needs the encoder"):
        onyxrt.InferenceSession(model.SerializeToString())


# ------------------------------------------------------------------------- Whisper (model_type=2)
WF = 5  # audio features per frame


def _whisper_graphs(seed: int = 0, eos_bias: float = 0.0) -> tuple[onnx.GraphProto, onnx.GraphProto]:
    """The T5-style pair made Whisper's: the encoder embeds audio features (batch, WF,
    frames) and takes decoder_input_ids of any length; neither graph has a mask input (the
    decoder makes one from the hidden states' shape)."""
    encoder, decoder, _ = _t5_graphs(seed, eos_bias=eos_bias)
    rng = np.random.default_rng(seed + 7)
    del encoder.input[:]
    encoder.input.extend([helper.make_tensor_value_info("encoder_input_ids", TensorProto.FLOAT, ["B", WF, "S"]),
                          _i32v("decoder_input_ids", ["B", "L"])])
    for o in encoder.output:  # one position per decoder_input_ids token
        if o.name == "logits" or "self" in o.name:
            dim = o.type.tensor_type.shape.dim[1 if o.name == "logits" else 2]
            dim.Clear()
            dim.dim_param = "L"
    nodes = [n for n in encoder.node if n.output[0] != "eh0"]
    del encoder.node[:]
    encoder.node.extend([
        helper.make_node("Transpose", ["encoder_input_ids"], ["feat_t"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["feat_t", "wf"], ["eh0"]),
        helper.make_node("Shape", ["feat_t"], ["fshape"], start=0, end=2),
        helper.make_node("ConstantOfShape", ["fshape"], ["encoder_attention_mask"],
                         value=numpy_helper.from_array(np.ones(1, np.int32))),
        *nodes])
    encoder.initializer.append(numpy_helper.from_array(rng.normal(0, 1, (WF, T5D)).astype(np.float32), "wf"))
    del decoder.input[1]
    decoder.node.insert(0, helper.make_node("Shape", ["encoder_hidden_states"], ["hshape2"], start=0, end=2))
    decoder.node.insert(1, helper.make_node("ConstantOfShape", ["hshape2"], ["encoder_attention_mask"],
                                            value=numpy_helper.from_array(np.ones(1, np.int32))))
    return encoder, decoder


def _whisper_model(op: str, feeds: dict, encoder, decoder, n_out: int = 3, **attrs) -> bytes:
    order = ["input_ids", "max_length", "min_length", "num_beams", "num_return_sequences", "length_penalty",
             "repetition_penalty", "vocab_mask", "prefix_vocab_mask", "attention_mask", "decoder_input_ids",
             "logits_processor", "cross_qk_layer_head", "extra_decoding_ids", "temperature"]
    outs = ["sequences", "sequences_scores", "scores", "cross_qk", "non_speech_probs"][:n_out]
    return _wrap(op, order, feeds, outs, encoder=encoder, decoder=decoder,
                 **{"eos_token_id": EOS, "pad_token_id": PAD, "model_type": 2, "decoder_start_token_id": T5_START,
                    **attrs})


FEATURES = np.random.default_rng(0).normal(0, 1, (2, WF, 4)).astype(np.float32)


def _whisper_feeds(beams: int, **extra) -> dict:
    return {"input_ids": FEATURES, "max_length": i32(9), "min_length": i32(1), "num_beams": i32(beams),
            "num_return_sequences": i32(min(2, beams)), "length_penalty": np.array([1.0], np.float32),
            "repetition_penalty": np.array([1.0], np.float32), **extra}


_WHISPER_EXTRAS = {
    "plain": {},
    "prompt": {"decoder_input_ids": np.array([[1, 6, 7], [1, 2, 9]], np.int32)},
    "min_length": {"min_length": i32(5)},
    "repetition": {"repetition_penalty": np.array([1.5], np.float32)},
    "temperature": {"temperature": np.array([0.5], np.float32)},  # WhisperBeamSearch's input only
}


@pytest.mark.parametrize("op,case", [(op, case) for op in ("WhisperBeamSearch", "BeamSearch") for case in _WHISPER_EXTRAS
                                     if op == "WhisperBeamSearch" or case != "temperature"])
@pytest.mark.parametrize("beams", [1, 2, 4])
def test_whisper_beam_search(op, case, beams):
    extra = _WHISPER_EXTRAS[case]
    finished = 0
    for seed in range(3):
        for bias in (0.0, 5.0):
            encoder, decoder = _whisper_graphs(seed, eos_bias=bias)
            feeds = _whisper_feeds(beams, **extra)
            got = _check(_whisper_model(op, feeds, encoder, decoder), feeds)
            finished += int((got[0][..., 2:] == PAD).any())
    assert finished >= 1 or "min_length" in extra


def test_whisper_refusals():
    encoder, decoder = _whisper_graphs()
    with pytest.raises(InvalidGraph, match="cross_qk output"):
        onyxrt.InferenceSession(_whisper_model("WhisperBeamSearch", _whisper_feeds(2), encoder, decoder, n_out=4))
    feeds = _whisper_feeds(2, extra_decoding_ids=np.array([[5]], np.int32))
    with pytest.raises(InvalidGraph, match="extra_decoding_ids"):
        onyxrt.InferenceSession(_whisper_model("WhisperBeamSearch", feeds, encoder, decoder))
    feeds = _whisper_feeds(2, logits_processor=i32(1))
    with pytest.raises(Exception, match="logits_processor"):
        onyxrt.InferenceSession(_whisper_model("WhisperBeamSearch", feeds, encoder, decoder)).run(None, feeds)
    feeds = _whisper_feeds(2, temperature=np.array([0.0], np.float32))
    with pytest.raises(Exception, match="temperature must be positive"):
        onyxrt.InferenceSession(_whisper_model("WhisperBeamSearch", feeds, encoder, decoder)).run(None, feeds)
    feeds = _whisper_feeds(2, decoder_input_ids=np.array([[1, 2]], np.int32))
    with pytest.raises(Exception, match="decoder_input_ids must be shaped"):
        onyxrt.InferenceSession(_whisper_model("WhisperBeamSearch", feeds, encoder, decoder)).run(None, feeds)


# ------------------------------------------------------------------------- errors
def test_refusals():
    feeds = {"input_ids": PROMPT, "max_length": i32(3)}
    with pytest.raises(Exception, match="max_length"):
        onyxrt.InferenceSession(_model("GreedySearch", feeds)).run(None, feeds)
    feeds = {"input_ids": PROMPT, "max_length": i32(8), "num_beams": i32(2), "num_return_sequences": i32(3)}
    with pytest.raises(Exception, match="num_return_sequences"):
        onyxrt.InferenceSession(_model("BeamSearch", feeds)).run(None, feeds)
    feeds = {"input_ids": PROMPT, "max_length": i32(8), "min_length": i32(5)}
    with pytest.raises(Exception, match="eos_token_id 40 is outside"):
        onyxrt.InferenceSession(_model("GreedySearch", feeds, eos_token_id=40)).run(None, feeds)
    feeds = {"input_ids": PROMPT, "max_length": i32(8), "vocab_mask": i32(1, 0)}
    with pytest.raises(Exception, match="vocab_mask must be shaped"):
        onyxrt.InferenceSession(_model("GreedySearch", feeds)).run(None, feeds)
    feeds = {"input_ids": PROMPT, "max_length": i32(8)}
    with pytest.raises(InvalidGraph, match="model_type=1 is not supported"):
        onyxrt.InferenceSession(_model("GreedySearch", feeds, model_type=1))
    bad = _decoder()[0]
    bad.input[0].name = "ids"
    with pytest.raises(InvalidGraph, match="the decoder must take"):
        onyxrt.InferenceSession(_model("GreedySearch", feeds, bad))
    shared = _decoder()[0]
    shared.input.append(helper.make_tensor_value_info("past_sequence_length", TensorProto.INT32, [1]))
    with pytest.raises(InvalidGraph, match="past_sequence_length"):
        onyxrt.InferenceSession(_model("BeamSearch", dict(feeds, num_beams=i32(2), num_return_sequences=i32(1)),
                                       shared))


# ------------------------------------------------------------------------- GPU backend
class _SessionRunner(SubgraphRunner):
    """Runs a body (weights inside it) as its own onyxrt session (CPU)."""

    def __init__(self, body: onnx.GraphProto) -> None:
        model = helper.make_model(body, ir_version=10, opset_imports=[helper.make_opsetid("", 17)])
        self.sess = onyxrt.InferenceSession(model.SerializeToString())
        self.input_names = tuple(i.name for i in body.input)
        self.output_names = tuple(o.name for o in body.output)

    def run(self, inputs, outer):
        return self.sess.run(None, dict(zip(self.input_names, inputs)))


@pytest.mark.parametrize("op", ["GreedySearch", "BeamSearch", "Sampling", "BeamSearchT5", "WhisperBeamSearch"])
def test_simulated_cupy_matches_numpy(numpy_bound, op):
    from onyxrt_gpu.kernels._common import BACKEND
    from onyxrt_gpu.testing.simulated_cupy import install

    feeds = {"input_ids": PROMPT2, "max_length": i32(9), "min_length": i32(6)}
    attrs = {}
    if op == "BeamSearch":
        feeds.update(num_beams=i32(3), num_return_sequences=i32(2))
    if op == "Sampling":
        feeds["seed"] = i32(9)
        attrs["top_p"] = 0.9
    if op == "BeamSearchT5":  # the encoder and decoder each run as their own session
        feeds = _t5_feeds(3, 2, 8, repetition_penalty=np.array([1.3], np.float32))
        encoder, decoder, _ = _t5_graphs(2, eos_bias=2.0)
        model = onnx.load_from_string(_t5_model("BeamSearch", feeds, n_out=3, encoder=encoder, decoder=decoder))
    elif op == "WhisperBeamSearch":
        feeds = _whisper_feeds(3, temperature=np.array([0.7], np.float32),
                               decoder_input_ids=np.array([[1, 6], [1, 2]], np.int32))
        model = onnx.load_from_string(_whisper_model(op, feeds, *_whisper_graphs(1, eos_bias=3.0)))
    else:
        model = onnx.load_from_string(_model(op, feeds, n_out={"GreedySearch": 1, "BeamSearch": 3}.get(op, 1),
                                             **attrs))
    node = model.graph.node[0]

    def run(bound):
        info = KernelInfo.from_node(node, 1, subgraph_builder=_SessionRunner)
        kdef, reason = bound.registry.lookup(node.domain, node.op_type, 1)
        assert kdef is not None, reason
        kernel = kdef.factory(info)
        args = [bound.array(feeds[n]) if n else None for n in node.input]
        return [bound.host(o) for o in kernel.compute(*args)]

    want = run(numpy_bound)
    with install():
        import cupy

        gpu = bind("cupy", BACKEND)
        gpu.array = cupy.asarray
        gpu.host = lambda v: v.get()
        got = run(gpu)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    _assert_same(want, _run_both(model.SerializeToString(), feeds)[1], feeds)
