"""Check an installed provider package as its users would meet it.

    python plugins/_template/check_installed.py MyAccelExecutionProvider onyxrt-myaccel

The provider must be listed by ``onyxrt.get_available_providers()`` and come from that
distribution, and a model of Add → Relu → Softmax must run split between it (Add, Relu)
and the CPU provider (Softmax), with the right result. ``nox -s template`` runs it after
``pip install`` of a generated package and of the guide's package.
"""

from __future__ import annotations

import sys

import numpy as np
from onnx import TensorProto, helper, numpy_helper

import onyxrt as ort
from onyxrt.discovery import catalog


def main(provider: str, dist: str) -> None:
    available = ort.get_available_providers()
    print("available:", available)
    assert provider in available, f"{provider} is not listed after installing {dist}"
    assert catalog().status(provider).package == dist, catalog().status(provider)

    b = numpy_helper.from_array(np.array([0.5, -1.0, 2.0], np.float32), "b")
    graph = helper.make_graph(
        [
            helper.make_node("Add", ["x", "b"], ["s"], name="add"),
            helper.make_node("Relu", ["s"], ["r"], name="relu"),
            helper.make_node("Softmax", ["r"], ["y"], name="softmax", axis=-1),
        ],
        "beside_cpu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        [b],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    sess = ort.InferenceSession(
        model.SerializeToString(), providers=[provider, "CPUExecutionProvider"]
    )
    x = np.array([[1, 2, -3], [-1, 0, 1]], np.float32)
    (y,) = sess.run(None, {"x": x})
    print(sess.placement)
    assert set(sess.placement.providers_used) == {provider, "CPUExecutionProvider"}
    assert sess.placement.provider_of("relu") == provider
    assert sess.placement.provider_of("softmax") == "CPUExecutionProvider"
    r = np.maximum(x + numpy_helper.to_array(b), 0)
    np.testing.assert_allclose(y, np.exp(r) / np.exp(r).sum(axis=-1, keepdims=True), rtol=1e-6)
    ran = sess.placement.nodes_by_provider()[provider]
    print(f"ok: {provider} ({dist}) ran {ran} beside the CPU provider")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: check_installed.py PROVIDER DISTRIBUTION")
    main(sys.argv[1], sys.argv[2])
