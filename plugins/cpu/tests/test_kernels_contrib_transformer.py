"""The CPU provider's com.microsoft Gelu, BiasGelu and FastGelu: float32 through the
compiled GELU passes, against onnxruntime in sessions (with and without bias, a batched
input, float16 through the library)."""

from __future__ import annotations

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

import onyxrt
from onyxrt_cpu.kernels import contrib_transformer, registry

MS = "com.microsoft"


@pytest.mark.parametrize("op", ["Gelu", "BiasGelu", "FastGelu"])
def test_the_overrides_are_registered(op):
    kdef, reason = registry.lookup(MS, op, 1)
    assert kdef is not None and kdef.factory is getattr(contrib_transformer, op), reason


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize(("op", "with_bias"), [("Gelu", False), ("BiasGelu", True), ("FastGelu", False),
                                               ("FastGelu", True)])
def test_same_as_onnxruntime(op, with_bias, dtype):
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((2, 64, 300)) * 3).astype(dtype)
    bias = rng.standard_normal(300).astype(dtype)
    node = helper.make_node(op, ["x", "bias"] if with_bias else ["x"], ["y"], domain=MS)
    elem = TensorProto.FLOAT if dtype == np.float32 else TensorProto.FLOAT16
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", elem, list(x.shape))],
                              [helper.make_tensor_value_info("y", elem, list(x.shape))],
                              [numpy_helper.from_array(bias, "bias")] if with_bias else [])
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)],
                             ir_version=10).SerializeToString()
    ours = onyxrt.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    theirs = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert ours.dtype == dtype
    tol = 1e-5 if dtype == np.float32 else 1e-3  # float16: one rounding of the float32 result
    np.testing.assert_allclose(ours.astype(np.float32), theirs.astype(np.float32), rtol=tol, atol=tol)
