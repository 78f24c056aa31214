"""onyxrt.float_errors: a run ignores floating-point errors (inf and nan are results, as
in onnxruntime) without np.errstate's cost, and leaves the caller's numpy settings as
they were."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from onnx import TensorProto, helper

import onyxrt as ort
from onyxrt.float_errors import ignore_float_errors, quiet_float_errors, restore_float_errors


def _divide_model() -> bytes:
    node = helper.make_node("Div", ["a", "b"], ["y"])
    vi = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [3]) for n in ("a", "b", "y")]
    graph = helper.make_graph([node], "g", vi[:2], vi[2:])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model.SerializeToString()


def test_ignore_and_restore_bring_back_the_callers_settings():
    before = np.geterr()
    with np.errstate(divide="raise", over="warn"):
        outer = np.geterr()
        token = ignore_float_errors()
        assert set(np.geterr().values()) == {"ignore"}
        assert np.float32(1) / np.float32(0) == np.inf  # no FloatingPointError
        restore_float_errors(token)
        assert np.geterr() == outer
    assert np.geterr() == before


def test_ignoring_keeps_other_numpy_settings():
    old = np.getbufsize()
    try:
        np.setbufsize(16384)
        token = ignore_float_errors()
        assert np.getbufsize() == 16384
        restore_float_errors(token)
    finally:
        np.setbufsize(old)


def test_quiet_inside_and_outside_an_ignoring_context():
    with np.errstate(all="raise"):
        with quiet_float_errors():
            assert np.isnan(np.float32(0) / np.float32(0))
        with pytest.raises(FloatingPointError):
            np.float32(0) / np.float32(0)
        token = ignore_float_errors()
        with quiet_float_errors():  # already ignoring: the same state, untouched
            assert set(np.geterr().values()) == {"ignore"}
        assert set(np.geterr().values()) == {"ignore"}
        nested = ignore_float_errors()  # already ignoring: a token restoring the same
        restore_float_errors(nested)
        assert set(np.geterr().values()) == {"ignore"}
        restore_float_errors(token)
        assert np.geterr()["divide"] == "raise"


def test_a_run_gives_inf_and_nan_whatever_the_callers_settings():
    sess = ort.InferenceSession(_divide_model(), providers=["CPUExecutionProvider"])
    a = np.array([1, 0, -1], np.float32)
    b = np.zeros(3, np.float32)
    with np.errstate(all="raise"), warnings.catch_warnings():
        warnings.simplefilter("error")
        (y,) = sess.run(None, {"a": a, "b": b})
        assert np.geterr()["divide"] == "raise"  # the caller's settings are back
    np.testing.assert_array_equal(y, np.array([np.inf, np.nan, -np.inf], np.float32))
