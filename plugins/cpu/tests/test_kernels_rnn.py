"""Tests for the CPU recurrent kernels (onyxrt_cpu.kernels.rnn): RNN, GRU, LSTM.

The onnx node conformance cases run straight through the registry; targeted tests compare
with onnxruntime what they leave out: clip, activations with alpha/beta, ragged
sequence_lens in every direction, layout 1 with initial states, linear_before_reset,
input_forget, peepholes, float64 and float16.
"""

from __future__ import annotations

import numpy as np
import pytest
from kernel_cases import (
    assert_all_versions_registered,
    conformance_params,
    one_node,
    randn,
    run_case,
    run_onnxruntime,
    run_ours,
)
from onnx import TensorProto

from onyxrt.errors import InvalidGraph
from onyxrt.kernels import KernelInfo
from onyxrt_cpu import native
from onyxrt_cpu.kernels import registry, rnn

OPS = ["RNN", "GRU", "LSTM"]

# Conformance cases these kernels cannot pass, with the reason. None today.
XFAIL: dict[str, str] = {}


@pytest.mark.parametrize("case", conformance_params(OPS, XFAIL))
def test_conformance(case):
    run_case(case)


def test_all_versions_registered():
    assert_all_versions_registered(OPS)


# ----------------------------------------------------------------- helpers

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def _inputs(op, seq, batch, inp, hidden, dirs, *, lens=None, init=False, peep=False,
            layout=0, dtype=np.float32, seed=0):  # fmt: skip
    g = GATES[op] * hidden
    x_shape = (batch, seq, inp) if layout else (seq, batch, inp)
    s_shape = (batch, dirs, hidden) if layout else (dirs, batch, hidden)
    vals = [
        randn(x_shape, seed, dtype=dtype),
        randn((dirs, g, inp), seed + 1, scale=0.5, dtype=dtype),
        randn((dirs, g, hidden), seed + 2, scale=0.5, dtype=dtype),
        randn((dirs, 2 * g), seed + 3, scale=0.5, dtype=dtype),
        None if lens is None else np.array(lens, dtype=np.int32),
        randn(s_shape, seed + 4, dtype=dtype) if init else None,
    ]
    if op == "LSTM":
        vals.append(randn(s_shape, seed + 5, dtype=dtype) if init else None)
        vals.append(randn((dirs, 3 * hidden), seed + 6, scale=0.5, dtype=dtype) if peep else None)
    while vals[-1] is None:
        vals.pop()
    return vals


def _compare(op, inputs, opset=22, rtol=1e-5, atol=1e-5, **attrs):
    names = [f"in{i}" if v is not None else "" for i, v in enumerate(inputs)]
    n_out = 3 if op == "LSTM" else 2
    node = one_node(op, names, n_out, **attrs)
    got = run_ours(node, opset, *inputs)
    dt = inputs[0].dtype
    if attrs.get("layout") == 1:  # onnxruntime only runs layout 0: transpose around it
        attrs = {**attrs, "layout": 0}
        node0 = one_node(op, names, n_out, **attrs)
        ins0 = [v if v is None or k in (1, 2, 3, 4, 7) else np.swapaxes(v, 0, 1)
                for k, v in enumerate(inputs)]  # fmt: skip
        want = run_onnxruntime(node0, opset, ins0, [dt] * n_out)
        want = [want[0].transpose(2, 0, 1, 3)] + [np.swapaxes(w, 0, 1) for w in want[1:]]
    else:
        want = run_onnxruntime(node, opset, inputs, [dt] * n_out)
    for g, w in zip(got[:n_out], want):
        assert g.dtype == w.dtype and g.shape == w.shape, (g.shape, w.shape)
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol, atol)


# ------------------------------------------------------------------ cases


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("layout", [0, 1])
def test_ragged_sequences_with_initial_state(op, direction, layout):
    dirs = 2 if direction == "bidirectional" else 1
    ins = _inputs(op, 5, 4, 3, 6, dirs, lens=[5, 2, 3, 1], init=True, layout=layout)
    _compare(op, ins, direction=direction, hidden_size=6, layout=layout)


@pytest.mark.parametrize("op", OPS)
def test_clip(op):
    ins = _inputs(op, 4, 2, 3, 5, 2, init=True)
    ins[0] = ins[0] * 4
    _compare(op, ins, direction="bidirectional", hidden_size=5, clip=0.7)


ACTS = {
    "RNN": (["LeakyRelu", "HardSigmoid"], [0.2, 0.3], [0.6]),
    "GRU": (["HardSigmoid", "Affine", "Sigmoid", "LeakyRelu"], [0.3, 0.5, 0.1], [0.4, 0.2]),
    "LSTM": (
        ["HardSigmoid", "Tanh", "Softsign", "Sigmoid", "Affine", "Elu"],
        [0.3, 0.8, 0.7], [0.4, 0.1],
    ),
}  # fmt: skip


@pytest.mark.parametrize("op", OPS)
def test_activations_with_alpha_beta(op):
    names, alphas, betas = ACTS[op]
    ins = _inputs(op, 4, 3, 2, 4, 2, init=True)
    _compare(
        op, ins, direction="bidirectional", hidden_size=4,
        activations=names, activation_alpha=alphas, activation_beta=betas,
    )  # fmt: skip


@pytest.mark.parametrize("lbr", [0, 1])
def test_gru_linear_before_reset(lbr):
    ins = _inputs("GRU", 5, 3, 4, 5, 2, lens=[5, 3, 4], init=True)
    _compare("GRU", ins, direction="bidirectional", hidden_size=5, linear_before_reset=lbr)


@pytest.mark.parametrize("input_forget", [0, 1])
def test_lstm_peepholes_input_forget(input_forget):
    ins = _inputs("LSTM", 5, 3, 4, 5, 2, lens=[4, 5, 2], init=True, peep=True)
    _compare("LSTM", ins, direction="bidirectional", hidden_size=5, input_forget=input_forget)


@pytest.mark.parametrize("op", OPS)
def test_float64(op):
    # onnxruntime has no double RNNs: compare with its float32 run of the same values.
    ins = _inputs(op, 6, 2, 3, 4, 1, init=True, dtype=np.float64)
    names = [f"in{i}" if v is not None else "" for i, v in enumerate(ins)]
    node = one_node(op, names, 2, hidden_size=4)
    got = run_ours(node, 22, *ins)
    want = run_onnxruntime(
        node, 22, [None if v is None else v.astype(np.float32) for v in ins], [np.float32] * 2
    )
    for g, w in zip(got, want):
        assert g.dtype == np.float64
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op", OPS)
def test_float16_matches_float32(op):
    ins32 = _inputs(op, 4, 2, 3, 4, 1, init=True)
    ins16 = [None if v is None else v.astype(np.float16) for v in ins32]
    names = [f"in{i}" if v is not None else "" for i, v in enumerate(ins32)]
    node = one_node(op, names, 2, hidden_size=4)
    got = run_ours(node, 22, *ins16)
    want = run_ours(node, 22, *[None if v is None else v.astype(np.float32) for v in ins16])
    assert got[0].dtype == np.float16 and got[1].dtype == np.float16
    np.testing.assert_allclose(got[1].astype(np.float32), want[1], atol=2e-3)


@pytest.mark.parametrize("opset", [7, 14])
def test_older_versions(opset):
    ins = _inputs("LSTM", 3, 2, 3, 4, 1, init=True)
    _compare("LSTM", ins, opset=opset, hidden_size=4)


def test_y_zero_past_sequence_end():
    ins = _inputs("RNN", 4, 2, 3, 3, 1, lens=[2, 4])
    y, y_h = run_ours(one_node("RNN", ["in0", "in1", "in2", "in3", "in4"], 2, hidden_size=3), 22,
                      *ins)  # fmt: skip
    assert not y[2:, 0, 0].any()
    np.testing.assert_array_equal(y_h[0, 0], y[1, 0, 0])
    np.testing.assert_array_equal(y_h[0, 1], y[3, 0, 1])


@pytest.mark.parametrize(
    "attrs",
    [
        {"direction": "sideways", "hidden_size": 3},
        {"hidden_size": 0},
        {"hidden_size": 3, "activations": ["Tanh", "Tanh"]},
        {"hidden_size": 3, "activations": ["Nope"]},
        {"hidden_size": 3, "layout": 2},
    ],
)
def test_bad_attributes(attrs):
    node = one_node("RNN", 3, 2, **attrs)
    kdef, _ = registry.lookup("", "RNN", 22)
    with pytest.raises(InvalidGraph, match="RNN"):
        kdef.factory(KernelInfo.from_node(node, 22, since_version=22))


def test_output_dtype_tensorproto():
    # float32 in, float32 out (the declared output type is T).
    ins = _inputs("GRU", 2, 1, 2, 3, 1)
    node = one_node("GRU", 3, 2, hidden_size=3)
    got = run_ours(node, 22, *ins[:3])
    want = run_onnxruntime(node, 22, ins[:3], [TensorProto.FLOAT] * 2)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-6)


# ------------------------------------------------- the compiled recurrence (csrc/recurrent.c)

needs_recurrent = pytest.mark.skipif(not native.RECURRENT, reason="compiled module not built")


def _kernel(op, opset=22, constants=None, **attrs):
    names = [f"in{i}" for i in range(8 if op == "LSTM" else 6)]
    node = one_node(op, names, 3 if op == "LSTM" else 2, **attrs)
    kdef, reason = registry.lookup("", op, opset)
    assert kdef is not None, reason
    return kdef.factory(KernelInfo.from_node(node, opset, since_version=kdef.since_version,
                                             constants=constants or {}))


def _spy(monkeypatch):
    calls = []
    real = native.recurrent

    def spy(*args, **kwargs):
        done = real(*args, **kwargs)
        calls.append(done)
        return done

    monkeypatch.setattr(native, "recurrent", spy)
    return calls


# (op, attrs, lens, init, peep): hidden sizes 17, 33, 70 and 80 leave every tail of the
# 64- and 16-float GEMV blocks; batch rows of different lengths, both layouts.
COMPILED_CASES = [
    ("RNN", {"hidden_size": 17}, None, False, False),
    ("RNN", {"hidden_size": 33, "direction": "bidirectional", "clip": 0.5}, [7, 3, 0], True, False),
    ("GRU", {"hidden_size": 70, "linear_before_reset": 1, "direction": "bidirectional"}, [7, 2, 5], True, False),
    ("GRU", {"hidden_size": 17, "linear_before_reset": 0, "direction": "reverse"}, [1, 7, 4], True, False),
    ("GRU", {"hidden_size": 33, "layout": 1, "clip": 0.9}, None, True, False),
    ("LSTM", {"hidden_size": 80, "direction": "bidirectional"}, None, False, False),
    ("LSTM", {"hidden_size": 17, "direction": "bidirectional", "layout": 1}, [2, 7, 6], True, True),
    ("LSTM", {"hidden_size": 33, "input_forget": 1, "clip": 0.8, "direction": "reverse"}, [5, 1, 7], True, True),
]  # fmt: skip


@needs_recurrent
@pytest.mark.parametrize("op,attrs,lens,init,peep", COMPILED_CASES)
def test_compiled_recurrence_matches_library_and_onnxruntime(op, attrs, lens, init, peep, monkeypatch):
    dirs = 2 if attrs.get("direction") == "bidirectional" else 1
    layout = attrs.get("layout", 0)
    ins = _inputs(op, 7, 3, 5, attrs["hidden_size"], dirs, lens=lens, init=init, peep=peep,
                  layout=layout, seed=11)
    ins += [None] * ((8 if op == "LSTM" else 6) - len(ins))
    kernel = _kernel(op, constants={2: ins[2]}, **attrs)
    calls = _spy(monkeypatch)
    got = kernel.compute(*ins)
    assert calls == [True], "the compiled recurrence did not run"
    # The library's kernel (numpy, step by step) on the same inputs: the two differ only in
    # the order of the GEMV's sums, which seven steps of recurrence amplify to a few ulps of
    # the [-1, 1] outputs (3.7e-6 at most here): the tolerance of the onnxruntime comparisons.
    library_outs = super(rnn._CompiledRecurrence, kernel).compute(*ins)
    for g, w in zip(got, library_outs, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    # And onnxruntime's, through the shared comparison (which handles layout 1).
    while ins[-1] is None:
        ins.pop()
    _compare(op, ins, **attrs)


@needs_recurrent
def test_compiled_recurrence_reuses_constant_r(monkeypatch):
    ins = _inputs("LSTM", 4, 1, 3, 5, 1)
    kernel = _kernel("LSTM", constants={2: ins[2]}, hidden_size=5)
    first = kernel.compute(*ins)
    rt = kernel._rt
    assert rt is not None
    np.testing.assert_array_equal(rt, native.recurrent_panels(ins[2].transpose(0, 2, 1), 20))
    second = kernel.compute(*ins)
    assert kernel._rt is rt
    for a, b in zip(first, second, strict=True):
        np.testing.assert_array_equal(a, b)


@needs_recurrent
@pytest.mark.parametrize("op,hidden", [("RNN", 520), ("GRU", 171), ("LSTM", 130), ("LSTM", 33)])
def test_constant_w_takes_the_packed_projection(op, hidden, monkeypatch):
    """A constant W is packed at creation and its projections run on the compiled GEMM
    with the folded biases where it is the faster one (AVX-512; 512 gates and more, see
    native.compiled_gemm_wins); another W given at run time, or narrower gates, take
    numpy's matmul. Both agree with the library's kernel."""
    attrs = {"hidden_size": hidden, "direction": "bidirectional"}
    ins = _inputs(op, 9, 2, 70, hidden, 2, seed=3)
    # weights scaled by their fan-in: a wide random recurrence is otherwise chaotic, and
    # the two summation orders' last-bit differences grow past any tolerance
    ins[1] = (ins[1] / np.sqrt(70)).astype(np.float32)
    ins[2] = (ins[2] / np.sqrt(hidden)).astype(np.float32)
    ins += [None] * ((8 if op == "LSTM" else 6) - len(ins))
    kernel = _kernel(op, constants={1: ins[1], 2: ins[2], 3: ins[3]}, **attrs)
    assert (kernel._w_packed is not None) == native.GEMM_PREFERRED
    calls = []
    real = native.gemm
    monkeypatch.setattr(native, "gemm", lambda *a, **k: calls.append(1) or real(*a, **k))
    got = kernel.compute(*ins)
    compiled = native.GEMM_PREFERRED and native.compiled_gemm_wins(18, 70, kernel.gates * hidden)
    assert compiled == (op != "LSTM" or hidden == 130) or not native.GEMM_PREFERRED
    assert len(calls) == (2 if compiled else 0)
    library_outs = super(rnn._CompiledRecurrence, kernel).compute(*ins)
    for g, w in zip(got, library_outs, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    # a W that is not the constant: numpy's product, the same values within rounding
    calls.clear()
    other = list(ins)
    other[1] = ins[1].copy()
    again = kernel.compute(*other)
    assert calls == []
    for g, w in zip(again, got, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


@needs_recurrent
@pytest.mark.parametrize("op,attrs", [
    ("RNN", {"activations": ["Relu"]}),
    ("GRU", {"activations": ["HardSigmoid", "Tanh"]}),
])  # fmt: skip
def test_other_activations_take_the_library_path(op, attrs, monkeypatch):
    ins = _inputs(op, 3, 2, 3, 4, 1)
    calls = _spy(monkeypatch)
    _compare(op, ins, hidden_size=4, **attrs)
    assert calls == []
