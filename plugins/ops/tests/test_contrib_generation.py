"""Tests of the com.microsoft generation loops (GreedySearch, BeamSearch) against onnxruntime.

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
    names = [n if n in feeds else "" for n in order]
    while names[-1] == "":
        names.pop()
    outs = (["sequences", "filtered_logits"] if op == "Sampling" else ["sequences", "sequences_scores", "scores"])[:n_out]
    attrs = {"eos_token_id": EOS, "pad_token_id": PAD, "model_type": 0, **attrs}
    node = helper.make_node(op, names, outs, name="gen", domain="com.microsoft", decoder=decoder, **attrs)
    elem = {np.dtype(np.int32): TensorProto.INT32, np.dtype(np.float32): TensorProto.FLOAT}
    graph = helper.make_graph(
        [node], "gen",
        [helper.make_tensor_value_info(k, elem[np.asarray(v).dtype], list(np.shape(v))) for k, v in feeds.items()],
        [helper.make_empty_tensor_value_info(o) for o in outs], initializer=list(outer))
    model = helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 17),
                                                                    helper.make_opsetid("com.microsoft", 1)])
    return model.SerializeToString()


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
    with pytest.raises(InvalidGraph, match="model_type"):
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


@pytest.mark.parametrize("op", ["GreedySearch", "BeamSearch", "Sampling"])
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
    model = onnx.load_from_string(_model(op, feeds, n_out={"GreedySearch": 1, "BeamSearch": 3}.get(op, 1), **attrs))
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
