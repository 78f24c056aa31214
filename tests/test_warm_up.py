"""Warm-up runs at session creation (core/onyxrt/warm_up.py): small host models run a few
times on synthetic feeds so that their first runs are at speed; never where a run could
be observed or differ, and never with an error or warning reaching the caller."""

from __future__ import annotations

import time
import warnings

import numpy as np
import pytest
from onnx import TensorProto, helper

import onyxrt
import onyxrt.session as session_module
from onyxrt import warm_up as warm
from onyxrt.errors import InvalidArgument
from onyxrt.testing.models import add_chain


def _model(nodes, inputs, outputs, initializers=()) -> bytes:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


@pytest.fixture
def warm_ups(monkeypatch):
    """The (feeds, runs, completed) of each warm-up sessions make."""
    calls = []
    real = session_module.warm_up

    def spy(run, feeds, runs):
        done = real(run, feeds, runs)
        calls.append((feeds, runs, done))
        return done

    monkeypatch.setattr(session_module, "warm_up", spy)
    return calls


def _session(model: bytes, **config: str) -> onyxrt.InferenceSession:
    so = onyxrt.SessionOptions()
    for key, value in config.items():
        so.add_session_config_entry(key, value)
    return onyxrt.InferenceSession(model, so, providers=["CPUExecutionProvider"])


def test_a_small_model_is_warmed_up_on_ones_with_free_dimensions_of_one(warm_ups):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])
    i = helper.make_tensor_value_info("i", TensorProto.INT64, [2])
    model = _model([helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Neg", ["i"], ["j"])], [x, i],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
                    helper.make_tensor_value_info("j", TensorProto.INT64, None)])
    s = _session(model)
    ((feeds, runs, done),) = warm_ups
    assert runs == warm.DEFAULT_RUNS and 1 <= done <= runs
    assert feeds["x"].shape == (1, 4) and feeds["x"].dtype == np.float32 and (feeds["x"] == 1).all()
    assert feeds["i"].shape == (2,) and feeds["i"].dtype == np.int64
    # the session runs as before, on the caller's feeds
    y, j = s.run(None, {"x": np.array([[-1, 2, -3, 4]], np.float32), "i": np.array([1, -2], np.int64)})
    np.testing.assert_array_equal(y, [[0, 2, 0, 4]])
    np.testing.assert_array_equal(j, [-1, 2])


def test_the_config_entry_sets_the_runs_or_turns_warm_up_off(warm_ups):
    _session(add_chain(2).SerializeToString(), **{"session.warm_up_runs": "3"})
    assert warm_ups[-1][1] == 3 and warm_ups[-1][2] == 3
    _session(add_chain(2).SerializeToString(), **{"session.warm_up_runs": "0"})
    assert len(warm_ups) == 1
    with pytest.raises(InvalidArgument, match="session.warm_up_runs"):
        _session(add_chain(2).SerializeToString(), **{"session.warm_up_runs": "some"})


def test_random_operators_and_control_flow_are_never_warmed_up(warm_ups):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    random = _model([helper.make_node("RandomNormalLike", ["x"], ["r"], seed=1.0),
                     helper.make_node("Add", ["x", "r"], ["y"])], [x],
                    [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    s = _session(random)
    assert warm_ups == []
    first = s.run(None, {"x": np.zeros(2, np.float32)})[0]
    # the caller's first run is the generator's first draw, as without a warm-up
    fresh = _session(random, **{"session.warm_up_runs": "0"}).run(None, {"x": np.zeros(2, np.float32)})[0]
    np.testing.assert_array_equal(first, fresh)
    body = helper.make_graph([helper.make_node("Identity", ["x"], ["z"])], "body", [],
                             [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)])
    c = helper.make_tensor_value_info("c", TensorProto.BOOL, [])
    branching = _model([helper.make_node("If", ["c"], ["y"], then_branch=body, else_branch=body)], [c, x],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    _session(branching)
    assert warm_ups == []


def test_profiled_sessions_are_not_warmed_up(warm_ups):
    so = onyxrt.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = "onyxrt_warm_up_test"
    s = onyxrt.InferenceSession(add_chain(2).SerializeToString(), so, providers=["CPUExecutionProvider"])
    import os

    os.remove(s.end_profiling())
    assert warm_ups == []


def test_a_synthetic_feed_that_fails_stops_the_warm_up_quietly(warm_ups):
    # ones as indices into an axis of one: the warm-up's first run fails
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    i = helper.make_tensor_value_info("i", TensorProto.INT64, [1])
    model = _model([helper.make_node("Gather", ["x", "i"], ["y"])], [x, i],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        s = _session(model)
    assert warm_ups[-1][2] == 0
    np.testing.assert_array_equal(s.run(None, {"x": np.array([5.0], np.float32), "i": np.array([0])})[0], [5.0])


def test_warm_up_stops_at_a_slow_run_and_within_its_budget():
    calls = []

    def slow(feeds):
        calls.append(1)
        time.sleep(warm.SLOW_RUN_S * 1.5)

    assert warm.warm_up(slow, {}, 10) == 2  # the first run may be slower; the second ends it
    assert len(calls) == 2
    calls.clear()

    def fast(feeds):
        calls.append(1)

    assert warm.warm_up(fast, {}, 7) == 7 and len(calls) == 7


def test_inputs_it_cannot_make_leave_the_model_cold(warm_ups):
    seq = helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, None)
    model = _model([helper.make_node("SequenceLength", ["s"], ["n"])], [seq],
                   [helper.make_tensor_value_info("n", TensorProto.INT64, None)])
    _session(model)
    big = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1024, 1024])
    _session(_model([helper.make_node("Relu", ["x"], ["y"])], [big],
                    [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]))
    assert warm_ups == []


def test_text_inputs_are_warmed_up_with_empty_strings(warm_ups):
    t = helper.make_tensor_value_info("t", TensorProto.STRING, [None])
    _session(_model([helper.make_node("Identity", ["t"], ["u"])], [t],
                    [helper.make_tensor_value_info("u", TensorProto.STRING, None)]))
    ((feeds, _, done),) = warm_ups
    assert feeds["t"].dtype == object and list(feeds["t"]) == [""] and done >= 1
