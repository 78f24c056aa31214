"""What a GPU session does once, at creation: upload the weights and wait for them.

Uploads are asynchronous on a real GPU; the provider synchronizes once after the last of
a session's creation uploads, when the session tells it creation is over
(``on_session_created``), and never again per run for them.
The simulated CuPy records copies, launches and synchronizations in order. (Capability:
training-mode Dropout refusals are checked in ``test_gpu_kernels.py``.)
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

import onyxrt as ort

CUDA = "CUDAExecutionProvider"
CPU = "CPUExecutionProvider"



def _model() -> bytes:
    rng = np.random.default_rng(0)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w1"], ["h"], name="mm1"),
         helper.make_node("Add", ["h", "b1"], ["a"], name="add"),
         helper.make_node("MatMul", ["a", "w2"], ["y"], name="mm2")],
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        [numpy_helper.from_array(rng.standard_normal((4, 5)).astype(np.float32), "w1"),
         numpy_helper.from_array(rng.standard_normal(5).astype(np.float32), "b1"),
         numpy_helper.from_array(rng.standard_normal((5, 3)).astype(np.float32), "w2")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def test_one_synchronization_after_the_creation_uploads(cuda_sim):
    assert CUDA in ort.get_available_providers()  # the probe's own work is not counted
    x = np.ones((2, 4), np.float32)
    with cuda_sim.record_events() as events:
        session = ort.InferenceSession(_model(), providers=[CUDA, CPU])
        created = len(events)
        session.run(None, {"x": x})
        first_run = len(events)
        session.run(None, {"x": x})
    assert set(session.placement.nodes_by_provider()) == {CUDA}
    uploads = [i for i, e in enumerate(events[:created]) if e == "h2d"]
    assert len(uploads) >= 3, events[:created]  # the three weights
    syncs = [i for i, e in enumerate(events) if e == "synchronize"]
    assert len(syncs) == 1, events  # once for the session, not once per run
    (sync,) = syncs
    assert uploads[-1] < sync < created  # after the uploads, within the creation
    run_launches = [i for i, e in enumerate(events[created:first_run], created) if e == "launch"]
    assert run_launches  # the run computes on the device
