"""Tests of the library's recurrent layers (onyxrt_ops.recurrent): RNN, GRU, LSTM.

Every operator runs over numpy and over array_api_strict and is compared with onnxruntime
(or onnx's reference evaluator where onnxruntime has no kernel): every direction, both
layouts, ``sequence_lens``, initial states, peepholes, ``clip``, ``linear_before_reset``,
``input_forget``, activations with alpha/beta, float32/float64 and the old versions.
Half-precision types (which the array API standard lacks) run over numpy. The kernels also
run over the GPU providers' backend under the simulated CuPy. Attribute errors are
InvalidGraph naming the node; inputs of the wrong shape are ValueError.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx.defs
import pytest
from library_harness import Bound, bind, onnx_versions
from onnx import TensorProto, helper

from onyxrt.dtypes import np_dtype, onnx_elem_type
from onyxrt.errors import InvalidGraph
from onyxrt.kernels import KernelInfo

BF16 = np_dtype(TensorProto.BFLOAT16)
RECURRENT = {"RNN", "GRU", "LSTM"}
GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
TOL = {np.dtype(np.float32): (1e-4, 1e-5), np.dtype(np.float64): (1e-9, 1e-12)}
INPUTS = ["X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P"]


def randn(*shape: int, seed: int = 0, scale: float = 0.5, dtype: Any = np.float32) -> np.ndarray:
    """Seeded standard-normal values times ``scale``."""
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(dtype)


def inputs(op: str, *, seq: int = 4, batch: int = 3, size: int = 5, hidden: int = 4,
           dirs: int = 1, layout: int = 0, bias: bool = True, lens: Any = None,
           h0: bool = False, c0: bool = False, peep: bool = False, dtype: Any = np.float32) -> list[Any]:
    """The node's inputs (None: absent), trailing absent ones dropped."""
    g = GATES[op]
    x = randn(seq, batch, size, seed=1, scale=1.0, dtype=dtype)
    state = (dirs, batch, hidden) if layout == 0 else (batch, dirs, hidden)
    values = [
        x if layout == 0 else np.ascontiguousarray(x.transpose(1, 0, 2)),
        randn(dirs, g * hidden, size, seed=2, dtype=dtype),
        randn(dirs, g * hidden, hidden, seed=3, dtype=dtype),
        randn(dirs, 2 * g * hidden, seed=4, dtype=dtype) if bias else None,
        None if lens is None else np.array(lens, np.int32),
        randn(*state, seed=5, dtype=dtype) if h0 else None,
        randn(*state, seed=6, dtype=dtype) if c0 else None,
        randn(dirs, 3 * hidden, seed=7, dtype=dtype) if peep else None,
    ]
    while values[-1] is None:
        values.pop()
    return values


def rnn_node(op: str, values: list[Any], **attrs: Any) -> onnx.NodeProto:
    """The node with every output, for ``values`` (absent inputs named ``""``)."""
    names = [INPUTS[i] if v is not None else "" for i, v in enumerate(values)]
    outs = ["Y", "Y_h"] + (["Y_c"] if op == "LSTM" else [])
    return helper.make_node(op, names, outs, name=f"{op}_node", **attrs)


def oracle(op: str, values: list[Any], opset: int, **attrs: Any) -> list[np.ndarray]:
    """Every output by onnxruntime, else onnx's reference evaluator. onnxruntime has no
    layout 1 (and the reference evaluator ignores ``sequence_lens`` there): a layout-1
    node is run as its layout-0 form, inputs and outputs transposed."""
    if attrs.get("layout", 0) == 1:
        swap = [np.swapaxes(v, 0, 1) if v is not None and i in (0, 5, 6) else v
                for i, v in enumerate(values)]
        outs = oracle(op, swap, opset, **{**attrs, "layout": 0})
        return [np.ascontiguousarray(np.moveaxis(outs[0], (0, 1, 2), (1, 2, 0))),
                *(np.swapaxes(o, 0, 1) for o in outs[1:])]
    n = rnn_node(op, values, **attrs)
    feeds = {name: v for name, v in zip(n.input, values) if name}
    elem = onnx_elem_type(values[0].dtype)
    graph = helper.make_graph(
        [n], "oracle",
        [helper.make_tensor_value_info(k, onnx_elem_type(v.dtype), list(v.shape)) for k, v in feeds.items()],
        [helper.make_tensor_value_info(o, elem, None) for o in n.output],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)
    try:
        import onnxruntime as ort

        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        return sess.run(None, feeds)
    except Exception:  # no kernel of onnxruntime for this opset, layout or type
        from onnx.reference import ReferenceEvaluator

        return ReferenceEvaluator(model).run(None, feeds)


def run(b: Bound, op: str, values: list[Any], opset: int, **attrs: Any) -> list[np.ndarray]:
    """Every output of the bound kernel, back on the host."""
    n = rnn_node(op, values, **attrs)
    kdef, reason = b.registry.lookup("", op, opset)
    assert kdef is not None, reason
    kernel = kdef.factory(KernelInfo.from_node(n, opset, since_version=kdef.since_version))
    args = [None if v is None else (v if i in kdef.host_inputs else b.array(v))
            for i, v in enumerate(values)]
    return [b.host(o) for o in kernel.compute(*args)]


def case(op: str, opset: int = 22, *, id: str, attrs: dict[str, Any] | None = None,
         **shape: Any) -> Any:
    return pytest.param(op, opset, shape, attrs or {}, id=id)


CASES = [
    case("RNN", id="rnn-defaults", bias=False),
    case("RNN", 14, id="rnn-14-reverse-h0", h0=True, attrs={"direction": "reverse"}),
    case("RNN", id="rnn-bidirectional-lens", dirs=2, lens=[4, 2, 1], h0=True,
         attrs={"direction": "bidirectional"}),
    case("RNN", id="rnn-layout1-lens", layout=1, lens=[3, 4, 1], h0=True, attrs={"layout": 1}),
    case("RNN", 7, id="rnn-7-relu-clip", attrs={"activations": ["Relu"], "clip": 0.5}),
    case("RNN", id="rnn-bidirectional-two-activations", dirs=2,
         attrs={"direction": "bidirectional", "activations": ["Tanh", "Sigmoid"]}),
    case("RNN", id="rnn-f64-bidirectional", dirs=2, dtype=np.float64,
         attrs={"direction": "bidirectional"}),
    case("GRU", id="gru-defaults"),
    case("GRU", id="gru-linear-before-reset", h0=True, attrs={"linear_before_reset": 1}),
    case("GRU", 14, id="gru-14-bidirectional-lens", dirs=2, lens=[1, 4, 3],
         attrs={"direction": "bidirectional", "linear_before_reset": 1}),
    case("GRU", id="gru-reverse-layout1-lens", layout=1, lens=[2, 4, 3], h0=True,
         attrs={"direction": "reverse", "layout": 1}),
    case("GRU", 7, id="gru-7-no-bias-clip", bias=False, attrs={"clip": 1.0}),
    case("GRU", id="gru-f64", dtype=np.float64, h0=True),
    case("LSTM", id="lstm-defaults"),
    case("LSTM", id="lstm-peepholes-states", h0=True, c0=True, peep=True),
    case("LSTM", 14, id="lstm-14-bidirectional-lens-peepholes", dirs=2, lens=[4, 1, 2], h0=True,
         c0=True, peep=True, attrs={"direction": "bidirectional"}),
    case("LSTM", id="lstm-reverse-layout1", layout=1, h0=True, c0=True,
         attrs={"direction": "reverse", "layout": 1}),
    case("LSTM", id="lstm-input-forget-clip", peep=True, attrs={"input_forget": 1, "clip": 0.7}),
    case("LSTM", 7, id="lstm-7-f64-no-bias", bias=False, dtype=np.float64),
]


@pytest.mark.parametrize(("op", "opset", "shape", "attrs"), CASES)
def test_same_as_onnxruntime(bound: Bound, op, opset, shape, attrs):
    values = inputs(op, **shape)
    hidden = values[2].shape[-1]
    got = run(bound, op, values, opset, hidden_size=hidden, **attrs)
    want = oracle(op, values, opset, hidden_size=hidden, **attrs)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        rtol, atol = TOL[w.dtype]
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


ACTIVATIONS = [
    ("RNN", ["Relu"]), ("RNN", ["LeakyRelu"]), ("RNN", ["ThresholdedRelu"]), ("RNN", ["Elu"]),
    ("RNN", ["Softsign"]), ("RNN", ["Softplus"]), ("RNN", ["Affine"]), ("RNN", ["ScaledTanh"]),
    ("RNN", ["HardSigmoid"]), ("GRU", ["HardSigmoid", "Softsign"]),
    ("LSTM", ["HardSigmoid", "Elu", "ScaledTanh"]),
]  # fmt: skip


@pytest.mark.parametrize(("op", "acts"), ACTIVATIONS, ids=lambda v: "-".join(v) if isinstance(v, list) else v)
def test_activations_with_alpha_and_beta(bound: Bound, op, acts):
    """alpha/beta are consumed in order by the activations that take them."""
    values = inputs(op, h0=True)
    attrs = {"hidden_size": 4, "activations": acts, "activation_alpha": [0.3, 0.6, 0.9],
             "activation_beta": [0.2, 0.4, 0.6]}
    got = run(bound, op, values, 22, **attrs)
    want = oracle(op, values, 22, **attrs)
    for g, w in zip(got, want):
        rtol, atol = TOL[w.dtype]
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


@pytest.mark.parametrize(("op", "old"), [("RNN", 1), ("GRU", 1), ("GRU", 3), ("LSTM", 1)])
def test_old_versions_compute_as_version_7(bound: Bound, op, old):
    values = inputs(op, lens=[4, 2, 3], h0=True)
    got = run(bound, op, values, old, hidden_size=4)
    want = run(bound, op, values, 7, hidden_size=4)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("op", sorted(RECURRENT))
def test_an_empty_sequence_ends_in_zeros(bound: Bound, op):
    """A batch entry with ``sequence_lens`` 0 runs no step: its Y rows are zero and so are
    its Y_h/Y_c, as onnxruntime gives them (not its initial state, which the CPU provider
    gave before 2026-11-26)."""
    values = inputs(op, lens=[2, 0, 4], h0=True, c0=op == "LSTM")
    assert values[5][:, 1].any()
    outs = run(bound, op, values, 22, hidden_size=4)
    np.testing.assert_array_equal(outs[0][:, :, 1], 0)
    np.testing.assert_array_equal(outs[1][:, 1], 0)
    np.testing.assert_array_equal(outs[1][:, 0] != 0, True)
    if op == "LSTM":
        np.testing.assert_array_equal(outs[2][:, 1], 0)


def test_every_onnx_version_is_bound(numpy_bound: Bound):
    for op in RECURRENT:
        for v in onnx_versions(op):
            kdef, _ = numpy_bound.registry.lookup("", op, v)
            assert kdef is not None and kdef.since_version == v, f"{op}-{v}"
            assert set(kdef.host_inputs) == {4}  # sequence_lens steers the loop


@pytest.mark.parametrize("half", [np.float16, BF16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("op", sorted(RECURRENT))
def test_half_types_run_in_float32(numpy_bound: Bound, op, half):
    values = [v.astype(half) if v.dtype.kind == "f" else v
              for v in inputs(op, lens=[4, 1, 3], h0=True)]
    got = run(numpy_bound, op, values, 22, hidden_size=4)
    want = run(numpy_bound, op, [v.astype(np.float32) if v.dtype == half else v for v in values],
               22, hidden_size=4)
    for g, w in zip(got, want):
        assert g.dtype == half
        np.testing.assert_array_equal(g, w.astype(half))


def test_runs_over_the_gpu_backend():
    """The GPU providers bind these kernels over CuPy: under the simulated CuPy (which has
    only CuPy's names) they give the numpy backend's results."""
    from onyxrt_gpu.kernels._common import BACKEND
    from onyxrt_gpu.testing.simulated_cupy import install
    from onyxrt_ops import numpy_backend

    host = bind("numpy", numpy_backend())
    with install():
        gpu = bind("cupy", BACKEND)
        gpu.host = lambda value: value.get()  # type: ignore[method-assign]
        gpu.array = lambda value: __import__("cupy").asarray(value)  # type: ignore[method-assign]
        for op, attrs, shape in (
            ("RNN", {"direction": "reverse", "activations": ["Softplus"]}, {"lens": [3, 4, 1]}),
            ("GRU", {"linear_before_reset": 1, "layout": 1}, {"layout": 1, "h0": True}),
            ("LSTM", {"direction": "bidirectional", "clip": 0.5}, {"dirs": 2, "peep": True, "lens": [2, 4, 0]}),
        ):
            values = inputs(op, **shape)
            for g, w in zip(run(gpu, op, values, 22, hidden_size=4, **attrs),
                            run(host, op, values, 22, hidden_size=4, **attrs)):
                np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-7)


# -------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("op", "attrs", "match"),
    [
        ("RNN", {"hidden_size": 0}, "hidden_size"),
        ("RNN", {"direction": "sideways"}, "direction"),
        ("GRU", {"layout": 2}, "layout"),
        ("LSTM", {"clip": -1.0}, "clip"),
        ("RNN", {"activations": ["Tanh", "Tanh"]}, "expected 1 activations"),
        ("GRU", {"activations": ["Sigmoid", "Gelu"]}, "unsupported activation"),
        ("GRU", {"linear_before_reset": 2}, "linear_before_reset"),
        ("LSTM", {"input_forget": 3}, "input_forget"),
    ],
)
def test_bad_attributes_are_invalid_graph(numpy_bound: Bound, op, attrs, match):
    attrs = {"hidden_size": 4, **attrs}
    kdef, _ = numpy_bound.registry.lookup("", op, 22)
    with pytest.raises(InvalidGraph, match=f"{op}_node.*{match}|{match}.*{op}_node"):
        kdef.factory(KernelInfo.from_node(rnn_node(op, inputs(op), **attrs), 22, since_version=22))


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (lambda v: [v[0][0], *v[1:]], "rank 3"),
        (lambda v: [v[0], v[1][:, :-1], *v[2:]], "do not match"),
        (lambda v: [*v[:3], v[3][:, :-1], *v[4:]], "B must have shape"),
        (lambda v: [*v[:4], np.array([5, 1, 1], np.int32), *v[5:]], "sequence_lens"),
        (lambda v: [*v[:5], v[5][:, :2], *v[6:]], "initial_h must have shape"),
        (lambda v: [*v[:7], v[7][:, :-1]], "P must have shape"),
    ],
    ids=["X-rank", "W-shape", "B-shape", "lens-range", "initial_h-shape", "P-shape"],
)
def test_bad_inputs_are_value_errors(bound: Bound, change, match):
    values = change(inputs("LSTM", lens=[4, 4, 4], h0=True, c0=True, peep=True))
    with pytest.raises(ValueError, match=match):
        run(bound, "LSTM", values, 22, hidden_size=4)
