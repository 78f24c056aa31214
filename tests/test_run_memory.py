"""The run's memory limits, enforced in one place for every kernel (issue 19, items 6-8),
and outputs that never alias feeds (item 16).

``session.max_tensor_bytes`` bounds any single tensor, ``session.max_run_bytes`` the bytes
a run holds at once; the memory guard (onyxrt-cpu's compiled build: a numpy allocator)
refuses a request over either before any memory is touched. The bombs here have no
explicit check in their kernels: broadcasting binary ops, MatMul, Einsum, Gather,
ConvTranspose strides, MaxUnpool's output_shape, DFT's dft_length, MelWeightMatrix,
NonZero. They run in a child process with an address-space cap, so a regression is a
failed test (an untyped MemoryError) instead of a machine out of memory.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import onnx
import pytest
from model_helpers import make_model, tensor
from onnx import TensorProto, helper

import onyxrt as ort
from onyxrt import limits
from onyxrt.errors import ResourceLimitExceeded
from onyxrt.limits import MAX_RUN_BYTES_KEY, MAX_TENSOR_BYTES_KEY

native = pytest.importorskip("onyxrt_cpu.native")
pytestmark = pytest.mark.skipif(
    not native.AVAILABLE, reason="the memory guard is part of onyxrt-cpu's compiled build"
)

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def _model(nodes, inputs, outputs, opset: int = 20) -> onnx.ModelProto:
    return make_model(nodes, inputs, outputs, opset=opset)


def _bombs() -> dict[str, tuple[onnx.ModelProto, dict[str, np.ndarray]]]:
    """Small models and feeds whose one output would be 40 GB to terabytes."""
    long_col = np.zeros((100_000, 1), np.float32)
    long_row = np.zeros((1, 100_000), np.float32)
    binary = {}
    for op in ("Add", "Equal", "Mul"):
        binary[op] = (
            _model([helper.make_node(op, ["a", "b"], ["y"], name=f"big_{op.lower()}")],
                   [tensor("a", [None, 1]), tensor("b", [1, None])], [tensor("y", None, B if op == "Equal" else F)]),
            {"a": long_col, "b": long_row},
        )
    return {
        **binary,
        "Where": (
            _model([helper.make_node("Where", ["c", "a", "b"], ["y"], name="big_where")],
                   [tensor("c", [None], B), tensor("a", [None, 1]), tensor("b", [1, None])], [tensor("y", None)]),
            {"c": np.ones(1, bool), "a": long_col, "b": long_row},
        ),
        "MatMul": (
            _model([helper.make_node("MatMul", ["a", "b"], ["y"], name="big_matmul")],
                   [tensor("a", [None, 1]), tensor("b", [1, None])], [tensor("y", None)]),
            {"a": long_col, "b": long_row},
        ),
        "Einsum": (
            _model([helper.make_node("Einsum", ["a", "b"], ["y"], name="big_einsum", equation="i,j->ij")],
                   [tensor("a", [None]), tensor("b", [None])], [tensor("y", None)]),
            {"a": np.zeros(100_000, np.float32), "b": np.zeros(100_000, np.float32)},
        ),
        "Gather": (
            _model([helper.make_node("Gather", ["d", "i"], ["y"], name="big_gather", axis=0)],
                   [tensor("d", [None, None]), tensor("i", [None], I64)], [tensor("y", None)]),
            {"d": np.zeros((1, 100_000), np.float32), "i": np.zeros(100_000, np.int64)},
        ),
        "ConvTranspose": (
            _model([helper.make_node("ConvTranspose", ["x", "w"], ["y"], name="big_convt", strides=[100_000, 100_000])],
                   [tensor("x", [1, 1, 8, 8]), tensor("w", [1, 1, 1, 1])], [tensor("y", None)]),
            {"x": np.ones((1, 1, 8, 8), np.float32), "w": np.ones((1, 1, 1, 1), np.float32)},
        ),
        "MaxUnpool": (
            _model([helper.make_node("MaxUnpool", ["x", "i", "s"], ["y"], name="big_unpool", kernel_shape=[2, 2])],
                   [tensor("x", [1, 1, 1, 1]), tensor("i", [1, 1, 1, 1], I64), tensor("s", [4], I64)],
                   [tensor("y", None)]),
            {"x": np.ones((1, 1, 1, 1), np.float32), "i": np.zeros((1, 1, 1, 1), np.int64),
             "s": np.array([1, 1, 100_000, 100_000], np.int64)},
        ),
        "DFT": (
            _model([helper.make_node("DFT", ["x", "n", ""], ["y"], name="big_dft")],
                   [tensor("x", [1, 4, 1]), tensor("n", [], I64)], [tensor("y", None)]),
            {"x": np.ones((1, 4, 1), np.float32), "n": np.array(10**11, np.int64)},
        ),
        "MelWeightMatrix": (
            _model([helper.make_node("MelWeightMatrix", ["bins", "n", "rate", "lo", "hi"], ["y"], name="big_mel")],
                   [tensor("bins", [], I64), tensor("n", [], I64), tensor("rate", [], I64),
                    tensor("lo", []), tensor("hi", [])], [tensor("y", None)]),
            {"bins": np.array(100_000, np.int64), "n": np.array(200_000, np.int64),
             "rate": np.array(16000, np.int64), "lo": np.array(0, np.float32), "hi": np.array(8000, np.float32)},
        ),
        "NonZero": (
            _model([helper.make_node("NonZero", ["x"], ["y"], name="big_nonzero")],
                   [tensor("x", [None, None], B)], [tensor("y", None, I64)]),
            # 2 x 16M int64 indices = 256 MiB, under a 64 MiB per-tensor limit below
            {"x": np.ones((4096, 4096), bool)},
        ),
    }


_CHILD = """
import json, resource, sys
resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))  # a regression: MemoryError, not OOM
sys.path.insert(0, {tests!r})
import test_run_memory as t
import onyxrt as ort
from onyxrt.errors import ResourceLimitExceeded
results = {{}}
for name, (model, feeds) in t._bombs().items():
    so = ort.SessionOptions()
    so.add_session_config_entry("session.max_tensor_bytes", "64MiB")
    if {parallel}:
        so.execution_mode = ort.ExecutionMode.ORT_PARALLEL
    try:
        sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        sess.run(None, feeds)
        results[name] = ["ran", ""]
    except Exception as exc:
        results[name] = [type(exc).__name__, str(exc)]
print(json.dumps(results))
"""


@pytest.mark.parametrize("parallel", [False, True], ids=["sequential", "parallel"])
def test_shape_derived_outputs_are_refused_before_allocating(parallel):
    code = _CHILD.format(tests=os.path.dirname(__file__), parallel=parallel)
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(results) == set(_bombs())
    for name, (kind, message) in results.items():
        assert kind == "ResourceLimitExceeded", (name, kind, message)
        assert "node 'big_" in message, (name, message)
        assert MAX_TENSOR_BYTES_KEY in message or MAX_RUN_BYTES_KEY in message, (name, message)


def test_the_refusal_names_node_bytes_limit_and_the_entry_to_raise_it():
    model, feeds = _bombs()["Add"]
    so = ort.SessionOptions()
    so.add_session_config_entry(MAX_TENSOR_BYTES_KEY, "64MiB")
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    with pytest.raises(ResourceLimitExceeded) as err:
        sess.run(None, feeds)
    message = str(err.value)
    assert "node 'big_add' (Add)" in message
    assert f"{64 << 20:,}" in message and MAX_TENSOR_BYTES_KEY in message
    assert err.value.requested == 100_000 * 100_000 * 4 and err.value.limit == 64 << 20
    # The session still works, and numpy's own allocator is back once the run is over.
    small = {"a": np.ones((3, 1), np.float32), "b": np.ones((1, 2), np.float32)}
    np.testing.assert_array_equal(sess.run(None, small)[0], np.full((3, 2), 2, np.float32))
    multiarray = getattr(np, "_core", None) or np.core
    assert multiarray.multiarray.get_handler_name() == "default_allocator"


# -- 7. a per-run budget ----------------------------------------------------------------------


def _many_outputs(count: int, elements: int) -> onnx.ModelProto:
    shape = helper.make_tensor("shape", I64, [1], [elements])
    nodes = [helper.make_node("Constant", [], ["s"], name="shape", value=shape)]
    outputs = []
    for i in range(count):
        value = helper.make_tensor(f"v{i}", F, [1], [float(i)])
        nodes.append(helper.make_node("ConstantOfShape", ["s"], [f"y{i}"], name=f"fill{i}", value=value))
        outputs.append(tensor(f"y{i}", [elements]))
    return make_model(nodes, [], outputs, opset=17)


def test_outputs_that_each_fit_but_together_pass_the_run_budget_are_refused():
    """8 outputs of 32 MB under a 48 MiB per-tensor limit: 256 MB, over a 128 MiB budget."""
    model = _many_outputs(8, 8 << 20)
    so = ort.SessionOptions()
    so.add_session_config_entry(MAX_TENSOR_BYTES_KEY, "48MiB")
    so.add_session_config_entry(MAX_RUN_BYTES_KEY, "128MiB")
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    with pytest.raises(ResourceLimitExceeded) as err:
        sess.run(None, {})
    message = str(err.value)
    assert MAX_RUN_BYTES_KEY in message and "bytes per run" in message and "node 'fill" in message
    # With room for all of them the same session runs.
    roomy = ort.SessionOptions()
    roomy.add_session_config_entry(MAX_RUN_BYTES_KEY, "512MiB")
    outs = ort.InferenceSession(model.SerializeToString(), roomy, providers=["CPUExecutionProvider"]).run(None, {})
    assert [float(o[0]) for o in outs] == [float(i) for i in range(8)]


def test_a_sequence_grown_in_a_loop_counts_against_the_run_budget():
    """Each iteration appends 4 MB to a loop-carried sequence: 1000 iterations = 4 GB."""
    chunk = helper.make_tensor("chunk_shape", I64, [1], [1 << 20])
    body = helper.make_graph(
        [
            helper.make_node("Constant", [], ["shape"], value=chunk),
            helper.make_node("ConstantOfShape", ["shape"], ["piece"], value=helper.make_tensor("one", F, [1], [1.0])),
            helper.make_node("SequenceInsert", ["seq_in", "piece"], ["seq_out"]),
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
        ],
        "body",
        [tensor("i", [], I64), tensor("cond_in", [], B),
         helper.make_tensor_sequence_value_info("seq_in", F, None)],
        [tensor("cond_out", [], B), helper.make_tensor_sequence_value_info("seq_out", F, None)],
    )
    graph = helper.make_graph(
        [
            helper.make_node("SequenceEmpty", [], ["empty"], dtype=F),
            helper.make_node("Loop", ["n", "cond", "empty"], ["seq"], name="grow", body=body),
            helper.make_node("SequenceLength", ["seq"], ["count"]),
        ],
        "g",
        [tensor("n", [], I64), tensor("cond", [], B)],
        [tensor("count", [], I64)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    so = ort.SessionOptions()
    so.add_session_config_entry(MAX_RUN_BYTES_KEY, "64MiB")
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    assert int(sess.run(None, {"n": np.array(4, np.int64), "cond": np.array(True)})[0]) == 4
    with pytest.raises(ResourceLimitExceeded, match=MAX_RUN_BYTES_KEY):
        sess.run(None, {"n": np.array(1000, np.int64), "cond": np.array(True)})


# -- 8. defaults a server can live with ------------------------------------------------------


def test_default_limits():
    memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    assert min(4 << 30, memory // 4) == limits.DEFAULT_MAX_TENSOR_BYTES
    assert memory // 2 == limits.DEFAULT_MAX_RUN_BYTES


def test_one_feed_of_a_tiny_model_cannot_ask_for_gigabytes_by_default():
    """A shape feed asking ConstantOfShape for 6 GB is refused under the defaults."""
    model = make_model(
        [helper.make_node("ConstantOfShape", ["s"], ["y"], name="fill")],
        [tensor("s", [1], I64)],
        [tensor("y", None)],
        opset=17,
    )
    assert len(model.SerializeToString()) < 200
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    with pytest.raises(ResourceLimitExceeded, match="node 'fill'"):
        sess.run(None, {"s": np.array([1_500_000_000], np.int64)})


def test_bad_run_budget_entry_is_a_typed_error():
    so = ort.SessionOptions()
    so.add_session_config_entry(MAX_RUN_BYTES_KEY, "lots")
    with pytest.raises(ort.errors.InvalidArgument, match=MAX_RUN_BYTES_KEY):
        ort.InferenceSession(_many_outputs(1, 4).SerializeToString(), so, providers=["CPUExecutionProvider"])


def test_guard_is_off_outside_runs_and_outputs_are_not_limited_afterwards():
    model = _many_outputs(1, 1 << 20)
    so = ort.SessionOptions()
    so.add_session_config_entry(MAX_TENSOR_BYTES_KEY, "8MiB")
    (out,) = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, {})
    out.resize(4 << 20, refcheck=False)  # 16 MiB: the run is over, its guard disarmed
    assert out.nbytes == 16 << 20


# -- 16. outputs never alias feeds -----------------------------------------------------------


def test_identity_output_is_a_copy_of_the_feed_not_the_feed():
    model = make_model(
        [helper.make_node("Identity", ["x"], ["y"], name="id"),
         helper.make_node("Identity", ["x"], ["z"], name="id2")],
        [tensor("x", [3])],
        [tensor("y", [3]), tensor("z", [3])],
    )
    x = np.array([1.0, 2.0, 3.0], np.float32)
    for mode in (ort.ExecutionMode.ORT_SEQUENTIAL, ort.ExecutionMode.ORT_PARALLEL):
        so = ort.SessionOptions()
        so.execution_mode = mode
        y, z = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, {"x": x})
        y[0] = 100.0
        assert x[0] == 1.0 and z[0] == 1.0  # neither the feed nor the other output changed
        assert not np.may_share_memory(y, x) and not np.may_share_memory(y, z)


def test_the_overlap_test_of_outputs_is_numpys_bounds_test():
    # Output views are checked against the initializers' and feeds' memory extents, sorted
    # once (a constant-folding evaluation hands out hundreds of views over hundreds of
    # initializers: a may_share_memory call per pair cost ~90 ms).
    from onyxrt.plan import _Extents

    base = np.zeros((40, 50), np.float32)
    protected = [base[3:5], base[:, 10:12], np.zeros(3), np.zeros(0), base.T[::-1][5:7]]
    views = [base[i:i + 2, j:j + 3][::a, ::b] for i in range(0, 40, 7) for j in range(0, 50, 9)
             for a in (1, -1) for b in (1, -1)]
    views += [np.zeros(4)[1:], base[::-1][::2], base.reshape(-1)[::-3], base[0:0]]
    for k in range(1, len(protected) + 1):
        extents = _Extents(protected[:k])
        for v in views:
            assert extents.overlaps(v) == any(np.may_share_memory(v, p) for p in protected[:k])


def test_slices_of_initializers_come_back_as_copies():
    w = np.arange(24, dtype=np.float32).reshape(4, 6)
    nodes = [helper.make_node("Reshape", ["w", "shape"], [f"y{i}"], name=f"r{i}") for i in range(3)]
    model = make_model(nodes, [], [tensor(f"y{i}", [24]) for i in range(3)],
                       {"w": w, "shape": np.array([24], np.int64)})
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    outs = ort.InferenceSession(model.SerializeToString(), so).run(None, {})
    outs[0][0] = -1.0
    assert outs[1][0] == 0.0 and outs[2][0] == 0.0  # neither the weight nor a sibling changed
    assert not any(np.may_share_memory(a, b) for i, a in enumerate(outs) for b in outs[i + 1:])


@pytest.mark.parametrize("op", ["Reshape", "Cast", "Squeeze"])
def test_no_op_kernels_do_not_hand_back_the_feed(op):
    nodes = {
        "Reshape": [helper.make_node("Constant", [], ["s"], value=helper.make_tensor("s", I64, [1], [3])),
                    helper.make_node("Reshape", ["x", "s"], ["y"])],
        "Cast": [helper.make_node("Cast", ["x"], ["y"], to=F)],
        "Squeeze": [helper.make_node("Squeeze", ["x"], ["y"])],
    }[op]
    model = make_model(nodes, [tensor("x", [3])], [tensor("y", [3])])
    x = np.array([1.0, 2.0, 3.0], np.float32)
    (y,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    y[...] = 0
    assert x.tolist() == [1.0, 2.0, 3.0]
