"""Shape specialization (onyxrt.specialization): a session whose NPU refused nodes for their
dynamic shapes runs each new set of free-dimension sizes on a session specialized for them,
up to a limit, and says so in the placement report."""

from __future__ import annotations

import logging

import numpy as np
import pytest

import onyxrt as ort
from onyxrt.errors import InvalidArgument
from onyxrt.specialization import SHAPE_SPECIALIZATIONS_KEY, signature_of
from onyxrt.testing import models

NPU, CPU = "SimNPUExecutionProvider", "CPUExecutionProvider"
pytestmark = pytest.mark.skipif(NPU not in ort.get_available_providers(), reason="onyxrt-simnpu is not installed")


@pytest.fixture(scope="module")
def model_bytes() -> bytes:
    """A small ResNet with a free batch dimension."""
    return models.resnet(depth_blocks=(1, 1), width=8, num_classes=10, image=32).SerializeToString()


def _image(batch: int) -> dict[str, np.ndarray]:
    return {"input": np.random.default_rng(batch).standard_normal((batch, 3, 32, 32)).astype(np.float32)}


def _session(data: bytes, limit: str | None = None) -> ort.InferenceSession:
    so = ort.SessionOptions()
    if limit is not None:
        so.add_session_config_entry(SHAPE_SPECIALIZATIONS_KEY, limit)
    return ort.InferenceSession(data, so, providers=[NPU, CPU])


def _cpu(data: bytes, feeds: dict[str, np.ndarray]) -> np.ndarray:
    return ort.InferenceSession(data, providers=[CPU]).run(None, feeds)[0]


def test_a_run_with_new_sizes_builds_a_specialized_session(model_bytes):
    sess = _session(model_bytes)
    generic = sess.placement
    assert set(generic.nodes_by_provider()) == {CPU}  # the batch is free: the NPU declines
    assert any(r.category == "shape" and r.provider == NPU for r in generic.refusals)
    for batch in (2, 2, 1):
        got = sess.run(None, _image(batch))[0]
        # The NPU computes in float16 storage: its documented accuracy (docs/simnpu.md).
        np.testing.assert_allclose(got, _cpu(model_bytes, _image(batch)), rtol=2e-3, atol=2e-3)
    report = sess.placement
    assert list(report.specializations) == ["batch=2", "batch=1"]  # the repeated batch 2 reused its own
    for special in report.specializations.values():
        assert set(special.nodes_by_provider()) == {NPU} and special.partitions == 1
    text = str(report)
    assert "shape specialization batch=2: 22 nodes (SimNPUExecutionProvider: 22)" in text
    assert report.to_dict()["specializations"]["batch=1"]["partitions"] == 1


def test_beyond_the_limit_sizes_run_on_the_generic_plan(model_bytes, caplog):
    sess = _session(model_bytes, "1")
    sess.run(None, _image(1))
    with caplog.at_level(logging.WARNING):
        for batch in (2, 3):
            np.testing.assert_allclose(sess.run(None, _image(batch))[0], _cpu(model_bytes, _image(batch)),
                                       rtol=1e-5, atol=1e-6)  # the generic plan: all on the CPU
    assert list(sess.placement.specializations) == ["batch=1"]
    warnings = [r.getMessage() for r in caplog.records if "shape specialization" in r.getMessage()]
    assert len(warnings) == 1 and "batch=2" in warnings[0], warnings


def test_zero_turns_it_off_and_a_bad_limit_is_refused(model_bytes):
    sess = _session(model_bytes, "0")
    sess.run(None, _image(1))
    assert not sess.placement.specializations
    with pytest.raises(InvalidArgument, match=SHAPE_SPECIALIZATIONS_KEY):
        _session(model_bytes, "many")


def test_sessions_without_shape_refusals_do_not_specialize(model_bytes):
    sess = ort.InferenceSession(model_bytes, providers=[CPU])
    sess.run(None, _image(1))
    assert not sess.placement.specializations
    so = ort.SessionOptions()
    so.add_free_dimension_override_by_name("batch", 1)  # static already: the NPU takes it all
    fixed = ort.InferenceSession(model_bytes, so, providers=[NPU, CPU])
    fixed.run(None, _image(1))
    assert set(fixed.placement.nodes_by_provider()) == {NPU} and not fixed.placement.specializations


def test_host_bound_io_binding_runs_are_specialized_too(model_bytes):
    """Values bound in host memory are plain feeds: the run takes its specialization (only
    values bound to a device stay with the session's own provider instances)."""
    sess = _session(model_bytes)
    binding = sess.io_binding()
    binding.bind_cpu_input("input", _image(2)["input"])
    binding.bind_output("logits")
    sess.run_with_iobinding(binding)
    np.testing.assert_allclose(binding.copy_outputs_to_cpu()[0], _cpu(model_bytes, _image(2)), rtol=2e-3, atol=2e-3)
    assert list(sess.placement.specializations) == ["batch=2"]


def test_signature():
    declared = {"ids": ["batch", "seq"], "mask": ["batch", "seq"], "x": [3]}
    feeds = {"ids": np.zeros((2, 7)), "mask": np.zeros((2, 7)), "x": np.zeros(3)}
    assert signature_of(declared, feeds) == (("batch", 2), ("seq", 7))
    assert signature_of(declared, {**feeds, "mask": np.zeros((3, 7))}) is None  # batch both 2 and 3
    assert signature_of({"x": [3]}, {"x": np.zeros(3)}) is None  # nothing free
