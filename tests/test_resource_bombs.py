"""Resource bombs: small models that ask for absurd amounts of memory or time.

Each must fail fast with a typed error that names the node (or initializer) at fault and
says how to proceed — before any large allocation: a bomb that allocated first would make
this file slow or get the test process killed, so the file's speed is part of the test.
The tensor limit is ``session.max_tensor_bytes`` (default min(16 GiB, physical memory));
a few tests lower it to keep their inputs small.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import onnx
import pytest
from model_helpers import make_model, tensor
from onnx import TensorProto, helper

import onyxrt as ort
from onyxrt.errors import (
    InvalidArgument,
    InvalidGraph,
    InvalidModel,
    OutOfMemory,
    ResourceLimitExceeded,
    RunTerminated,
)
from onyxrt.limits import DEFAULT_MAX_TENSOR_BYTES, MAX_TENSOR_BYTES_KEY
from onyxrt.testing.models import tiny_cnn

BIG = 10**6  # [BIG, BIG] float32 is 4 TB


def _session(model: onnx.ModelProto, limit: str | None = None, **options) -> ort.InferenceSession:
    so = ort.SessionOptions()
    if limit is not None:
        so.add_session_config_entry(MAX_TENSOR_BYTES_KEY, limit)
    for name, value in options.items():
        setattr(so, name, value)
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def _assert_limit_error(exc: pytest.ExceptionInfo[ResourceLimitExceeded], node: str) -> None:
    message = str(exc.value)
    assert f"node {node!r}" in message
    assert MAX_TENSOR_BYTES_KEY in message and "add_session_config_entry" in message
    assert exc.value.requested > exc.value.limit
    assert f"{exc.value.limit:,}" in message


def _i64(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int64)


# ------------------------------------------------------------------- tensor-size bombs

# (name, nodes, graph inputs, feeds, opset, attribute-free description)
_BOMBS = {
    "ConstantOfShape": (
        [helper.make_node("ConstantOfShape", ["s"], ["y"], name="bomb")],
        [tensor("s", [2], TensorProto.INT64)],
        {"s": _i64(BIG, BIG)},
        17,
    ),
    "Expand": (
        [helper.make_node("Expand", ["x", "s"], ["y"], name="bomb")],
        [tensor("x", [1]), tensor("s", [2], TensorProto.INT64)],
        {"x": np.ones(1, np.float32), "s": _i64(BIG, BIG)},
        17,
    ),
    "Tile": (
        [helper.make_node("Tile", ["x", "r"], ["y"], name="bomb")],
        [tensor("x", [2, 2]), tensor("r", [2], TensorProto.INT64)],
        {"x": np.ones((2, 2), np.float32), "r": _i64(BIG, BIG)},
        17,
    ),
    "Pad": (
        [helper.make_node("Pad", ["x", "p"], ["y"], name="bomb")],
        [tensor("x", [1, 1]), tensor("p", [4], TensorProto.INT64)],
        {"x": np.ones((1, 1), np.float32), "p": _i64(BIG, BIG, 0, 0)},
        17,
    ),
    "Resize": (
        [helper.make_node("Resize", ["x", "", "sc"], ["y"], name="bomb", mode="linear")],
        [tensor("x", [1, 1, 2, 2]), tensor("sc", [4])],
        {"x": np.ones((1, 1, 2, 2), np.float32), "sc": np.array([1, 1, 1e7, 1e7], np.float32)},
        19,
    ),
    "Upsample": (
        [helper.make_node("Upsample", ["x", "sc"], ["y"], name="bomb")],
        [tensor("x", [1, 1, 2, 2]), tensor("sc", [4])],
        {"x": np.ones((1, 1, 2, 2), np.float32), "sc": np.array([1, 1, 1e7, 1e7], np.float32)},
        9,
    ),
    "Range": (
        [helper.make_node("Range", ["a", "b", "d"], ["y"], name="bomb")],
        [tensor(n, [], TensorProto.INT64) for n in "abd"],
        {"a": np.array(0, np.int64), "b": np.array(10**15, np.int64), "d": np.array(1, np.int64)},
        17,
    ),
    "OneHot": (
        [helper.make_node("OneHot", ["i", "depth", "v"], ["y"], name="bomb")],
        [tensor("i", [4], TensorProto.INT64), tensor("depth", [], TensorProto.INT64), tensor("v", [2])],
        {"i": _i64(0, 1, 2, 3), "depth": np.array(10**12, np.int64), "v": np.array([0, 1], np.float32)},
        17,
    ),
    "RandomNormal": (
        [helper.make_node("RandomNormal", [], ["y"], name="bomb", shape=[BIG, BIG])],
        [],
        {},
        17,
    ),
    "Multinomial": (
        [helper.make_node("Multinomial", ["x"], ["y"], name="bomb", sample_size=10**12)],
        [tensor("x", [1, 2])],
        {"x": np.zeros((1, 2), np.float32)},
        17,
    ),
    "CenterCropPad": (
        [helper.make_node("CenterCropPad", ["x", "s"], ["y"], name="bomb")],
        [tensor("x", [1, 1]), tensor("s", [2], TensorProto.INT64)],
        {"x": np.ones((1, 1), np.float32), "s": _i64(BIG, BIG)},
        18,
    ),
}


@pytest.mark.parametrize("op", sorted(_BOMBS))
def test_size_bomb_fails_before_allocating(op):
    nodes, inputs, feeds, opset = _BOMBS[op]
    # Multinomial's output is int32 by default (a float declaration is a type error that
    # onnxruntime refuses at load, and the kernel's type check refuses too).
    out = tensor("y", None, TensorProto.INT32 if op == "Multinomial" else TensorProto.FLOAT)
    session = _session(make_model(nodes, inputs, [out], opset=opset))
    with pytest.raises(ResourceLimitExceeded) as exc:
        session.run(None, feeds)
    _assert_limit_error(exc, "bomb")
    assert isinstance(exc.value, OutOfMemory) and isinstance(exc.value, MemoryError)


def test_constant_shape_bomb_is_not_folded_at_creation():
    # The shape is an initializer: constant folding must leave the node alone (its output
    # is over the folding cap) so creation is instant and the run reports the node.
    model = make_model(
        [helper.make_node("ConstantOfShape", ["s"], ["y"], name="bomb")],
        [],
        [tensor("y", None)],
        {"s": _i64(BIG, BIG)},
    )
    session = _session(model)
    with pytest.raises(ResourceLimitExceeded) as exc:
        session.run(None, {})
    _assert_limit_error(exc, "bomb")


def test_concat_of_one_input_many_times():
    # Inputs can repeat: 200 references to a 40 KB value ask for 8 MB.
    x = np.ones(10_000, np.float32)
    model = make_model(
        [helper.make_node("Concat", ["x"] * 200, ["y"], name="bomb", axis=0)],
        [tensor("x", [10_000])],
        [tensor("y", None)],
    )
    with pytest.raises(ResourceLimitExceeded) as exc:
        _session(model, limit="1MiB").run(None, {"x": x})
    _assert_limit_error(exc, "bomb")
    assert "[2000000]" in str(exc.value)


def _loop_model(body_nodes, body_outputs, carried=(), outputs=()) -> onnx.ModelProto:
    body = helper.make_graph(
        body_nodes,
        "body",
        [tensor("i", [], TensorProto.INT64), tensor("cond_in", [], TensorProto.BOOL), *carried],
        body_outputs,
    )
    loop = helper.make_node("Loop", ["trip", "cond", *[c.name + "_init" for c in carried]],
                            [*outputs], name="loop", body=body)
    return make_model(
        [loop],
        [tensor("trip", [], TensorProto.INT64), tensor("cond", [], TensorProto.BOOL),
         *[tensor(c.name + "_init", None) for c in carried]],
        [tensor(outputs[-1], None)],
    )


def test_loop_scan_output_growing_past_the_limit_stops_the_loop():
    # 10**15 iterations each emitting a scalar: stopped once the collected scan output
    # (data plus per-element overhead) would pass the limit, not after filling memory.
    model = _loop_model(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Cast", ["i"], ["s"], to=TensorProto.FLOAT)],
        [tensor("cond_out", [], TensorProto.BOOL), tensor("s", [])],
        outputs=["scan"],
    )
    session = _session(model, limit="256KiB")
    with pytest.raises(ResourceLimitExceeded) as exc:
        session.run(None, {"trip": np.array(10**15, np.int64), "cond": np.array(True)})
    _assert_limit_error(exc, "loop")
    assert "scan output 0" in str(exc.value)


def test_sequence_grown_in_a_loop_then_concatenated():
    # The body appends the same 4 KB tensor each iteration; ConcatFromSequence sizes the
    # result from the sequence before concatenating.
    seq = helper.make_tensor_sequence_value_info("seq", TensorProto.FLOAT, None)
    body_nodes = [
        helper.make_node("Identity", ["cond_in"], ["cond_out"]),
        helper.make_node("SequenceInsert", ["seq", "x"], ["seq_out"]),
    ]
    body = helper.make_graph(
        body_nodes, "body",
        [tensor("i", [], TensorProto.INT64), tensor("cond_in", [], TensorProto.BOOL), seq],
        [tensor("cond_out", [], TensorProto.BOOL),
         helper.make_tensor_sequence_value_info("seq_out", TensorProto.FLOAT, None)],
    )
    model = make_model(
        [
            helper.make_node("SequenceEmpty", [], ["empty"], dtype=TensorProto.FLOAT),
            helper.make_node("Loop", ["trip", "cond", "empty"], ["grown"], name="loop", body=body),
            helper.make_node("ConcatFromSequence", ["grown"], ["y"], name="bomb", axis=0),
        ],
        [tensor("trip", [], TensorProto.INT64), tensor("cond", [], TensorProto.BOOL), tensor("x", [1024])],
        [tensor("y", None)],
    )
    feeds = {"trip": np.array(1000, np.int64), "cond": np.array(True), "x": np.ones(1024, np.float32)}
    with pytest.raises(ResourceLimitExceeded) as exc:
        _session(model, limit="1MiB").run(None, feeds)
    _assert_limit_error(exc, "bomb")


class _TerminateAfter(ort.RunOptions):
    """RunOptions whose ``terminate`` turns true on its ``reads``-th read, as if another
    thread had set it mid-run (deterministic, unlike a timer)."""

    def __init__(self, reads: int) -> None:
        self.reads_left = reads
        super().__init__()

    @property  # type: ignore[override]
    def terminate(self) -> bool:
        self.reads_left -= 1
        return self.reads_left <= 0

    @terminate.setter
    def terminate(self, value: bool) -> None:
        pass


def _endless_loop() -> onnx.ModelProto:
    """A Loop with no scan output and a condition that stays true: only terminate (or the
    2**62 trip count) ends it."""
    return _loop_model(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Identity", ["v"], ["v_out"])],
        [tensor("cond_out", [], TensorProto.BOOL), tensor("v_out", None)],
        carried=[tensor("v", None)],
        outputs=["v_final"],
    )


_ENDLESS_FEEDS = {"trip": np.array(2**62, np.int64), "cond": np.array(True), "v_init": np.ones(1, np.float32)}


def test_endless_loop_stops_on_run_options_terminate():
    # The Loop checks RunOptions.terminate between iterations, not only before the node.
    session = _session(_endless_loop())
    feeds = _ENDLESS_FEEDS
    run_options = _TerminateAfter(reads=500)
    with pytest.raises(RunTerminated, match="inside node 'loop'"):
        session.run(None, feeds, run_options)
    assert run_options.reads_left == 0


def test_endless_loop_stops_when_another_thread_sets_terminate():
    session = _session(_endless_loop())
    run_options = ort.RunOptions()
    timer = threading.Timer(0.2, lambda: setattr(run_options, "terminate", True))
    t0 = time.perf_counter()
    timer.start()
    with pytest.raises(RunTerminated):
        session.run(None, _ENDLESS_FEEDS, run_options)
    timer.join()
    assert time.perf_counter() - t0 < 30  # a generous hang bound; it stops within milliseconds


# ------------------------------------------------------------------- model-file bombs


def _huge_tensor(name: str, raw: bytes | None = b"\0\0\0\0", floats=None) -> onnx.TensorProto:
    t = onnx.TensorProto(name=name, data_type=TensorProto.FLOAT, dims=[BIG, BIG])
    if raw is not None:
        t.raw_data = raw
    if floats is not None:
        t.float_data.extend(floats)
    return t


@pytest.mark.parametrize(
    ("data", "why"),
    [
        ({"raw": b"\0\0\0\0"}, "holds 4 bytes but shape (1000000, 1000000) of float32 needs 4000000000000 bytes"),
        ({"raw": None, "floats": [1.0]}, "cannot be read"),
        ({"raw": None}, "cannot be read"),
    ],
    ids=["raw_data", "float_data", "no_data"],
)
def test_initializer_declaring_huge_dims_with_little_data(data, why):
    graph = helper.make_graph([helper.make_node("Identity", ["w"], ["y"], name="id")], "g", [],
                              [tensor("y", None)], [_huge_tensor("w", **data)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    with pytest.raises(InvalidGraph) as exc:
        _session(model)
    assert "initializer 'w'" in str(exc.value) and why in str(exc.value)


def test_constant_node_declaring_huge_dims_with_little_data():
    # Was a bare ValueError from numpy while parsing the attribute.
    node = helper.make_node("Constant", [], ["y"], name="c", value=_huge_tensor("v"))
    model = helper.make_model(helper.make_graph([node], "g", [], [tensor("y", None)]),
                              opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    with pytest.raises(InvalidGraph) as exc:
        _session(model)
    assert "node 'c' (Constant): attribute 'value'" in str(exc.value)
    assert "needs 4000000000000 bytes" in str(exc.value)


def test_sparse_initializer_declaring_huge_dims():
    values = helper.make_tensor("w", TensorProto.FLOAT, [1], [1.0])
    indices = helper.make_tensor("w_idx", TensorProto.INT64, [1], [0])
    sparse = helper.make_sparse_tensor(values, indices, [BIG, BIG])
    graph = helper.make_graph([helper.make_node("Identity", ["w"], ["y"], name="id")], "g", [],
                              [tensor("y", None)], sparse_initializer=[sparse])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    with pytest.raises(ResourceLimitExceeded) as exc:
        _session(model)
    assert "sparse initializer 'w'" in str(exc.value) and MAX_TENSOR_BYTES_KEY in str(exc.value)


def test_split_with_absurd_num_outputs():
    node = helper.make_node("Split", ["x"], ["a", "b", "c"], name="split", axis=0, num_outputs=10**12)
    model = make_model([node], [tensor("x", [6])], [tensor(n, None) for n in "abc"], opset=18)
    with pytest.raises(InvalidModel) as exc:
        _session(model)
    assert "'split'" in str(exc.value) and "num_outputs" in str(exc.value)


def test_reshape_with_huge_dims_is_rejected_without_allocating():
    # Reshape never adds data; dims whose product wraps int64 must not slip through.
    model = make_model([helper.make_node("Reshape", ["x", "s"], ["y"], name="rs")],
                       [tensor("x", [4]), tensor("s", [3], TensorProto.INT64)], [tensor("y", None)])
    session = _session(model)
    for shape in ([2**32, 2**32, 4], [2**32, 2**32, -1], [2**40, 2**40, 0]):
        with pytest.raises(ort.errors.KernelError, match="node 'rs' \\(Reshape\\)"):
            session.run(None, {"x": np.zeros(4, np.float32), "s": _i64(*shape)})


# ------------------------------------------------------------------- nesting bombs


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | 0x80 if n else byte)
        if not n:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    return _varint((number << 3) | 2) + _varint(len(payload)) + payload


def _nested_if_bytes(depth: int) -> bytes:
    """``depth`` Ifs nested in then-branches, serialized by hand: onnx.helper cannot even
    build a message nested deeper than protobuf's own limit (~100 messages)."""
    body = helper.make_graph([helper.make_node("Identity", ["x"], ["o0"], name="leaf")], "b0", [],
                             [tensor("o0", [1])]).SerializeToString()
    for d in range(1, depth + 1):
        other = helper.make_graph([helper.make_node("Identity", ["x"], [f"e{d}"])], f"e{d}", [],
                                  [tensor(f"e{d}", [1])])
        node = helper.make_node("If", ["c"], [f"o{d}"], name=f"if{d}", else_branch=other).SerializeToString()
        then = _field(1, b"then_branch") + _varint(20 << 3) + _varint(onnx.AttributeProto.GRAPH) + _field(6, body)
        node += _field(5, then)
        body = _field(1, node) + _field(2, f"b{d}".encode()) + _field(12, tensor(f"o{d}", [1]).SerializeToString())
    graph = body + _field(11, tensor("c", [], TensorProto.BOOL).SerializeToString())
    graph += _field(11, tensor("x", [1]).SerializeToString())
    model = helper.make_model(helper.make_graph([], "m", [], []), opset_imports=[helper.make_opsetid("", 17)],
                              ir_version=10)
    model.ClearField("graph")
    return model.SerializeToString() + _field(7, graph)


def test_deepest_nesting_protobuf_accepts_runs():
    # 30 nested Ifs (each inner If also reads the outer condition `c`, which the
    # enclosing If takes explicitly — that used to fail with KeyError 'c').
    session = ort.InferenceSession(_nested_if_bytes(30), providers=["CPUExecutionProvider"])
    (y,) = session.run(None, {"c": np.array(True), "x": np.full(1, 7, np.float32)})
    assert y.tolist() == [7.0]


def test_nesting_200_deep_is_an_invalid_model():
    with pytest.raises(InvalidModel, match="nests messages deeper than protobuf allows"):
        ort.InferenceSession(_nested_if_bytes(200), providers=["CPUExecutionProvider"])


_LOCAL = [helper.make_opsetid("", 17), helper.make_opsetid("local", 1)]


def _function_model(functions, top: str) -> onnx.ModelProto:
    graph = helper.make_graph([helper.make_node(top, ["x"], ["y"], domain="local", name="call")], "g",
                              [tensor("x", [1])], [tensor("y", [1])])
    return helper.make_model(graph, opset_imports=_LOCAL, functions=functions, ir_version=10)


def test_recursive_local_function():
    # Was onnx's ValidationError escaping from the inliner.
    f = helper.make_function("local", "F", ["a"], ["b"], [helper.make_node("F", ["a"], ["b"], domain="local")], _LOCAL)
    with pytest.raises(InvalidModel, match="local::F calls itself"):
        _session(_function_model([f], "F"))


def test_local_functions_doubling_per_level():
    # F_i calls F_{i-1} twice: 40 levels would inline into 2**40 nodes.
    fs = [helper.make_function("local", "F0", ["a"], ["b"], [helper.make_node("Relu", ["a"], ["b"])], _LOCAL)]
    for i in range(1, 41):
        calls = [helper.make_node(f"F{i - 1}", ["a"], ["t"], domain="local"),
                 helper.make_node(f"F{i - 1}", ["t"], ["b"], domain="local")]
        fs.append(helper.make_function("local", f"F{i}", ["a"], ["b"], calls, _LOCAL))
    with pytest.raises(InvalidModel, match="more than 1,000,000 nodes"):
        _session(_function_model(fs, "F40"))
    (y,) = _session(_function_model(fs[:4], "F3")).run(None, {"x": np.array([-1.0], np.float32)})
    assert y.tolist() == [0.0]  # a few levels still inline and run


# ------------------------------------------------------------------- the limit itself


def test_default_limit_is_sane():
    assert 1 << 30 <= DEFAULT_MAX_TENSOR_BYTES <= 16 << 30


def test_normal_model_is_unaffected_by_a_tight_limit():
    model = tiny_cnn()
    x = np.random.default_rng(0).standard_normal((2, 1, 28, 28)).astype(np.float32)
    expected = _session(model).run(None, {"input": x})
    got = _session(model, limit="1MiB").run(None, {"input": x})
    np.testing.assert_array_equal(got[0], expected[0])


def test_raising_the_limit_lets_a_larger_tensor_through():
    model = make_model([helper.make_node("ConstantOfShape", ["s"], ["y"], name="fill")],
                       [tensor("s", [2], TensorProto.INT64)], [tensor("y", None)])
    feeds = {"s": _i64(512, 1024)}  # 2 MiB of float32
    with pytest.raises(ResourceLimitExceeded) as exc:
        _session(model, limit="1MiB").run(None, feeds)
    _assert_limit_error(exc, "fill")
    assert exc.value.requested == 2 << 20 and exc.value.limit == 1 << 20
    (y,) = _session(model, limit=str(4 << 20)).run(None, feeds)
    assert y.shape == (512, 1024)


def test_limit_reaches_parallel_executor_threads():
    # ORT_PARALLEL runs steps on pool threads: the session's limit must apply there too.
    nodes = [helper.make_node("ConstantOfShape", ["s"], [f"y{i}"], name=f"fill{i}") for i in range(2)]
    model = make_model(nodes, [tensor("s", [2], TensorProto.INT64)], [tensor("y0", None), tensor("y1", None)])
    session = _session(model, limit="1MiB", execution_mode=ort.ExecutionMode.ORT_PARALLEL)
    with pytest.raises(ResourceLimitExceeded, match="node 'fill[01]'"):
        session.run(None, {"s": _i64(512, 1024)})
    assert [y.shape for y in session.run(None, {"s": _i64(4, 4)})] == [(4, 4), (4, 4)]


@pytest.mark.parametrize("value", ["lots", "0", "-5"])
def test_malformed_limit_is_an_invalid_argument(value):
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [tensor("x", [1])], [tensor("y", [1])])
    with pytest.raises(InvalidArgument, match=MAX_TENSOR_BYTES_KEY):
        _session(model, limit=value)
