"""Helpers the core tests share: building small models, checking provider order.

(A module of its own rather than conftest.py: several test folders have a conftest, and
importing "conftest" by name picks whichever was imported first.)
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def assert_priority_order(available: list[str]) -> None:
    """Providers are listed by descending priority with CPU last (other installed plugins
    may appear too: the core's tests must not depend on which ones are installed)."""
    from onyxrt.discovery import catalog

    assert available[-1] == "CPUExecutionProvider"
    priorities = [catalog().specs[name].priority for name in available[:-1]]
    assert priorities == sorted(priorities, reverse=True), list(zip(available, priorities))


def make_model(
    nodes,
    inputs,
    outputs,
    initializers=(),
    opset: int = 17,
    ir_version: int = 10,
    name: str = "test_graph",
) -> onnx.ModelProto:
    """A model from onnx.helper pieces; ``initializers`` is a dict name -> array."""
    inits = [numpy_helper.from_array(np.asarray(v), k) for k, v in dict(initializers).items()]
    graph = helper.make_graph(list(nodes), name, list(inputs), list(outputs), inits)
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=ir_version
    )
    return model


def tensor(name: str, shape, elem=TensorProto.FLOAT):
    """A tensor value info."""
    return helper.make_tensor_value_info(name, elem, shape)
