"""intra_op_num_threads sizes the BLAS pool for the duration of a session's runs."""

from __future__ import annotations

import numpy as np
import pytest
from model_helpers import make_model, tensor
from onnx import helper

import onyxrt
from onyxrt.threads import intra_op_limit

threadpoolctl = pytest.importorskip("threadpoolctl")


def _blas_threads() -> list[int]:
    return [i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"]


def test_limit_applies_inside_and_restores_after():
    before = _blas_threads()
    if not before:
        pytest.skip("numpy is linked to no BLAS that threadpoolctl can see")
    with intra_op_limit(1):
        assert _blas_threads() == [1] * len(before)
    assert _blas_threads() == before
    with intra_op_limit(0):  # 0 keeps the library's own setting
        assert _blas_threads() == before


def test_limit_restores_after_an_error_and_when_nested():
    before = _blas_threads()
    if not before:
        pytest.skip("numpy is linked to no BLAS that threadpoolctl can see")
    with pytest.raises(RuntimeError), intra_op_limit(1):
        raise RuntimeError("a failing run")
    assert _blas_threads() == before
    with intra_op_limit(1):
        with intra_op_limit(2):
            assert _blas_threads() == [2] * len(before)
        assert _blas_threads() == [1] * len(before)
    assert _blas_threads() == before


def test_session_runs_under_its_intra_op_limit(monkeypatch):
    seen = []
    import onyxrt.session as session_module

    def recording_limit(threads):
        seen.append(threads)
        return intra_op_limit(threads)

    monkeypatch.setattr(session_module, "intra_op_limit", recording_limit)
    model = make_model(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")],
        [tensor("x", [4, 8])], [tensor("y", [4, 3])], {"w": np.ones((8, 3), np.float32)},
    )
    so = onyxrt.SessionOptions()
    so.intra_op_num_threads = 1
    session = onyxrt.InferenceSession(model.SerializeToString(), so)
    assert set(seen) <= {1}  # the warm-up's runs at creation (if any) ran under it too
    seen.clear()
    x = np.arange(32, dtype=np.float32).reshape(4, 8)
    (y,) = session.run(None, {"x": x})
    np.testing.assert_allclose(y, x @ np.ones((8, 3), np.float32))
    assert seen == [1]
