"""Profiling summaries and placement limits (partition thrash)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from model_helpers import make_model, tensor
from onnx import helper

import onyxrt as ort
from onyxrt.errors import InvalidArgument, PartitionError


def _chain():
    return make_model(
        [
            helper.make_node("Add", ["x", "w"], ["a"], name="add"),
            helper.make_node("Relu", ["a"], ["r"], name="relu"),
            helper.make_node("Softmax", ["r"], ["s"], name="softmax", axis=-1),
            helper.make_node("Mul", ["s", "w"], ["y"], name="mul"),
        ],
        [tensor("x", [2, 4])],
        [tensor("y", [2, 4])],
        {"w": np.array([1.0, -2.0, 3.0, -4.0], np.float32)},
    )


def test_profile_summary_adds_up_per_provider_and_op(tmp_path, toy_provider):
    so = ort.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = str(tmp_path / "p")
    session = ort.InferenceSession(_chain().SerializeToString(), so,
                                   providers=[toy_provider, "CPUExecutionProvider"])
    for _ in range(3):
        session.run(None, {"x": np.ones((2, 4), np.float32)})
    summary = session.profile_summary()
    assert summary.runs == 3
    assert set(summary.per_provider) == {toy_provider, "CPUExecutionProvider"}
    assert set(summary.per_op_type) == {"Add", "Relu", "Softmax", "Mul"}
    assert summary.copy_us > 0  # four copies per run between cpu and the toy device
    assert summary.run_us >= sum(summary.per_provider.values())
    assert "3 run(s)" in str(summary) and "top ops" in str(summary)


def test_profile_summary_needs_profiling():
    session = ort.InferenceSession(_chain().SerializeToString())
    with pytest.raises(InvalidArgument, match="enable_profiling"):
        session.profile_summary()


def test_partition_and_copy_limits_warn_or_fail_in_strict_mode(toy_provider):
    so = ort.SessionOptions()
    so.add_session_config_entry("session.max_partitions", "2")
    so.add_session_config_entry("session.max_copies_per_run", "1")
    with pytest.warns(ort.PlacementWarning, match="3 partitions exceed session.max_partitions=2"):
        ort.InferenceSession(_chain().SerializeToString(), so,
                             providers=[toy_provider, "CPUExecutionProvider"])
    so.add_session_config_entry("session.strict_providers", "1")
    with pytest.raises(PartitionError, match="4 copies per run exceed"):
        ort.InferenceSession(_chain().SerializeToString(), so,
                             providers=[toy_provider, "CPUExecutionProvider"])
    quiet = ort.SessionOptions()
    quiet.add_session_config_entry("session.max_partitions", "3")
    with warnings.catch_warnings():
        warnings.simplefilter("error", ort.PlacementWarning)  # at the limit: no warning
        ort.InferenceSession(_chain().SerializeToString(), quiet,
                             providers=[toy_provider, "CPUExecutionProvider"])
