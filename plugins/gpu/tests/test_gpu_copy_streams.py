"""``do_copy_in_default_stream=False`` (issue 25 item 1): copies run on a stream of their
own, which must be ordered after the compute stream's work — on a real device a
non-blocking stream is not, and a download would read outputs before the kernels that
write them finish. The simulated CuPy runs work eagerly, so the test checks the order a
device needs: every copy on the copy stream is preceded by a wait on an event of the
compute stream, and one copy stream serves a thread's copies."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onyxrt as ort

CUDA = "CUDAExecutionProvider"
CPU = "CPUExecutionProvider"



def _model() -> bytes:
    w = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model.SerializeToString()


@pytest.mark.parametrize("default_stream", [False, True])
def test_copies_on_their_own_stream_wait_for_the_compute_stream(cuda_sim, default_stream):
    assert CUDA in ort.get_available_providers()
    session = ort.InferenceSession(
        _model(), providers=[(CUDA, {"do_copy_in_default_stream": default_stream}), CPU])
    x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)
    with cuda_sim.record_events() as events:
        (y,) = session.run(None, {"x": x})
        session.run(None, {"x": x})
    np.testing.assert_allclose(y, np.maximum(x @ np.arange(12, dtype=np.float32).reshape(4, 3), 0), rtol=1e-6)
    copies = [i for i, e in enumerate(events) if e in ("h2d", "d2h", "d2d")]
    assert copies, events  # the input goes up, the output comes down
    if default_stream:  # one stream: ordered by construction, nothing to wait for
        assert "wait" not in events, events
        return
    for i in copies:
        assert i > 0 and events[i - 1] == "wait", events
    transfer = session._providers[0].transfer
    assert len(transfer._copy_streams.by_device) == 1  # made once for this thread, reused
