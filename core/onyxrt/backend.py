"""``onyxrt.backend``: the ONNX backend API, so onnx's own test runner can drive onyxrt.

    import onnx.backend.test
    import onyxrt.backend
    onnx.backend.test.BackendTest(onyxrt.backend, __name__)

Mirrors ``onnxruntime.backend``: ``prepare`` builds a session, ``run_model`` and
``run_node`` run once, ``supports_device`` answers for "CPU" and any device type a usable
provider drives.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
import onnx.shape_inference
from onnx.backend.base import Backend, BackendRep

from .discovery import catalog
from .session import InferenceSession
from .session_options import SessionOptions

__all__ = ["OnyxBackend", "OnyxBackendRep", "prepare", "run_model", "run_node", "supports_device", "is_compatible"]


def _providers_for(device: str) -> list[str]:
    kind = device.split(":")[0].lower()
    if kind == "cpu":
        return ["CPUExecutionProvider"]
    cat = catalog()
    chosen = [n for n in cat.available() if kind in cat.specs[n].device_types or kind in cat.provider_class(n).device_names]
    return chosen + ["CPUExecutionProvider"]


class OnyxBackendRep(BackendRep):
    """A prepared model: a session plus the input order."""

    def __init__(self, session: InferenceSession) -> None:
        self.session = session
        self._inputs = [i.name for i in session.get_inputs()]

    def run(self, inputs: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Run with a list of inputs (graph input order), a dict, or a single array."""
        if isinstance(inputs, dict):
            feed = dict(inputs)
        elif isinstance(inputs, (list, tuple)):
            feed = dict(zip(self._inputs, inputs))
        else:
            feed = {self._inputs[0]: inputs}
        return tuple(self.session.run(None, feed))


class OnyxBackend(Backend):
    """onyxrt as an ``onnx.backend.base.Backend``."""

    @classmethod
    def is_compatible(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> bool:
        """Whether ``model`` can run on ``device`` (checked by preparing it)."""
        return cls.supports_device(device)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        """``"CPU"`` always; ``"CUDA"``/``"GPU"``/``"NPU"`` when a usable provider drives one."""
        return len(_providers_for(device)) > 1 or device.split(":")[0].upper() == "CPU"

    @classmethod
    def prepare(cls, model: Any, device: str = "CPU", **kwargs: Any) -> OnyxBackendRep:
        """Build a session for ``model`` (a ModelProto, bytes or path) on ``device``."""
        options = SessionOptions()
        for key, value in kwargs.items():
            if hasattr(options, key):
                setattr(options, key, value)
        session = InferenceSession(model, options, providers=_providers_for(device))
        return OnyxBackendRep(session)

    @classmethod
    def run_model(cls, model: Any, inputs: Any, device: str = "CPU", **kwargs: Any) -> tuple[Any, ...]:
        """Prepare and run once."""
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(
        cls,
        node: onnx.NodeProto,
        inputs: Sequence[Any],
        device: str = "CPU",
        outputs_info: Sequence[tuple[Any, Any]] | None = None,
        **kwargs: Any,
    ) -> tuple[Any, ...]:
        """Run a single node on ``inputs`` by wrapping it in a one-node model."""
        from onnx import helper

        from .dtypes import onnx_elem_type

        arrays = [np.asarray(x) for x in inputs]
        graph_inputs = [
            helper.make_tensor_value_info(name, onnx_elem_type(a.dtype), a.shape)
            for name, a in zip(node.input, arrays) if name
        ]
        opset = kwargs.pop("opset_version", onnx.defs.onnx_opset_version())
        graph_outputs = _node_output_infos(node, graph_inputs, opset, outputs_info)
        graph = helper.make_graph([node], "run_node", graph_inputs, graph_outputs)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid(node.domain, opset)])
        feeds = {name: a for name, a in zip(node.input, arrays) if name}
        return tuple(InferenceSession(model, providers=_providers_for(device)).run(None, feeds))


def _node_output_infos(
    node: onnx.NodeProto,
    inputs: Sequence[onnx.ValueInfoProto],
    opset: int,
    outputs_info: Sequence[tuple[Any, Any]] | None,
) -> list[onnx.ValueInfoProto]:
    """Typed value infos for a node's outputs: from ``outputs_info`` (dtype, shape) when
    given, else from onnx's per-node type inference (onnx's checker needs types)."""
    from onnx import helper

    from .dtypes import onnx_elem_type

    names = [n for n in node.output if n]
    if outputs_info:
        return [
            helper.make_tensor_value_info(n, onnx_elem_type(np.dtype(dt)), shape)
            for n, (dt, shape) in zip(names, outputs_info)
        ]
    try:
        schema = onnx.defs.get_schema(node.op_type, max_inclusive_version=opset, domain=node.domain)
        inferred = onnx.shape_inference.infer_node_outputs(
            schema, node, {vi.name: vi.type for vi in inputs}
        )
    except Exception:  # inference is a convenience; fall back to the first input's type
        inferred = {}
    result = []
    for n in names:
        if n in inferred:
            result.append(helper.make_value_info(n, inferred[n]))
        else:
            elem = inputs[0].type.tensor_type.elem_type if inputs else onnx.TensorProto.FLOAT
            result.append(helper.make_tensor_value_info(n, elem, None))
    return result


prepare = OnyxBackend.prepare
run_model = OnyxBackend.run_model
run_node = OnyxBackend.run_node
supports_device = OnyxBackend.supports_device
is_compatible = OnyxBackend.is_compatible

