"""The cyclic garbage collector is paused while a session is built, and left as it was."""

from __future__ import annotations

import gc
import threading

import pytest
from model_helpers import make_model, tensor
from onnx import helper

import onyxrt
from onyxrt.collector import collector_paused


@pytest.fixture(autouse=True)
def _restore_collector():
    enabled = gc.isenabled()
    yield
    (gc.enable if enabled else gc.disable)()


def test_paused_inside_and_on_again_after_even_on_error():
    gc.enable()
    with pytest.raises(RuntimeError), collector_paused():
        assert not gc.isenabled()
        raise RuntimeError("boom")
    assert gc.isenabled()


def test_nested_pauses_end_with_the_outermost():
    gc.enable()
    with collector_paused():
        with collector_paused():
            pass
        assert not gc.isenabled()  # the inner one (a constant-folding session) ended first
    assert gc.isenabled()


def test_a_collector_the_application_turned_off_stays_off():
    gc.disable()
    with collector_paused():
        pass
    assert not gc.isenabled()


def test_sessions_built_on_threads_leave_it_on():
    gc.enable()
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [tensor("x", [2])], [tensor("y", [2])])
    seen = []

    def build():
        onyxrt.InferenceSession(model.SerializeToString())
        seen.append(True)

    threads = [threading.Thread(target=build) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(seen) == 4 and gc.isenabled()


def test_a_session_is_built_with_it_paused(monkeypatch):
    gc.enable()
    states = []
    real = onyxrt.InferenceSession._create

    def create(self, *args):
        states.append(gc.isenabled())
        return real(self, *args)

    monkeypatch.setattr(onyxrt.InferenceSession, "_create", create)
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [tensor("x", [2])], [tensor("y", [2])])
    onyxrt.InferenceSession(model.SerializeToString())
    assert states == [False] and gc.isenabled()
