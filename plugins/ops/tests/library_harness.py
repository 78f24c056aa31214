"""Helpers for the operator library's tests: the library bound over a backend in a
registry of its own (:class:`Bound`, :func:`bind`), and an oracle.

``Bound.run`` runs a node through the bound library: inputs are given as numpy arrays, moved
into the backend's arrays, and the outputs come back as numpy arrays. ``oracle`` runs the
same node through onnxruntime, or onnx's reference evaluator where onnxruntime has no
kernel for it (an opset newer than it knows, an element type it lacks).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
import onnx.defs
from onnx import helper

from onyxrt.dtypes import onnx_elem_type
from onyxrt.kernels import Kernel, KernelInfo, KernelRegistry
from onyxrt_ops import Backend, library

_erf_scalar = np.vectorize(math.erf, otypes=[np.float64])


def numpy_erf(x: np.ndarray) -> np.ndarray:
    """erf of a numpy array, in its dtype (exact: math.erf per element; tests only)."""
    return _erf_scalar(x).astype(x.dtype)


def strict_erf(x: Any) -> Any:
    """erf over array_api_strict: a round trip through numpy (tests only)."""
    import array_api_strict as xp

    return xp.asarray(numpy_erf(np.from_dlpack(x)))


def onnx_versions(op: str, domain: str = "") -> set[int]:
    """Every since_version the installed onnx defines for ``op`` in ``domain``."""
    return {s.since_version for s in onnx.defs.get_all_schemas_with_history()
            if s.name == op and s.domain == domain}


def unbound_versions(registry: KernelRegistry, ops: Any) -> list[str]:
    """``"Op-version"`` for each ONNX version of ``ops`` that ``registry`` has no kernel for."""
    return [f"{op}-{v}" for op in sorted(ops) for v in sorted(onnx_versions(op))
            if ("", op, v) not in registry]


def _trimmed(values: list[Any]) -> list[Any]:
    """``values`` without its trailing absent entries (``""`` names, None values): ONNX
    leaves trailing optional inputs out."""
    while values and (values[-1] is None or isinstance(values[-1], str) and not values[-1]):
        values.pop()
    return values


def node(op: str, n_inputs: int, absent: Sequence[int] = (), **attrs: Any) -> onnx.NodeProto:
    """A one-output node of ``op`` named ``"<op>_node"``; ``absent`` inputs are ``""``."""
    names = _trimmed(["" if i in absent else f"in{i}" for i in range(n_inputs)])
    return helper.make_node(op, names, ["y"], name=f"{op}_node", **attrs)


@dataclass
class Bound:
    """The operator library bound over one backend, in a registry of its own."""

    name: str
    backend: Backend
    registry: KernelRegistry
    missing: dict[str, str]

    def array(self, value: Any) -> Any:
        """A numpy value as an array of the backend."""
        value = np.asarray(value)
        return value if self.backend.xp is np else self.backend.xp.asarray(value)

    def host(self, value: Any) -> np.ndarray:
        """A backend array as a numpy array."""
        return value if isinstance(value, np.ndarray) else np.from_dlpack(value)

    def kernel(self, n: onnx.NodeProto, opset: int) -> Kernel:
        """The bound kernel for node ``n`` at ``opset``, built."""
        kdef, reason = self.registry.lookup(n.domain, n.op_type, opset)
        assert kdef is not None, reason
        return kdef.factory(KernelInfo.from_node(n, opset, since_version=kdef.since_version))

    def run(self, op: str, inputs: Sequence[Any], opset: int, **attrs: Any) -> np.ndarray:
        """The output of ``op`` on numpy ``inputs`` (``None``: absent), back on the host."""
        absent = [i for i, v in enumerate(inputs) if v is None]
        kernel = self.kernel(node(op, len(inputs), absent, **attrs), opset)
        outs = kernel.compute(*_trimmed([None if v is None else self.array(v) for v in inputs]))
        assert isinstance(outs, tuple) and len(outs) == 1
        return self.host(outs[0])


def bind(name: str, backend: Backend) -> Bound:
    """The library bound over ``backend`` in a new registry."""
    registry = KernelRegistry(f"library over {name}")
    return Bound(name, backend, registry, library.bind(backend, registry))


def oracle(op: str, inputs: Sequence[Any], opset: int, **attrs: Any) -> np.ndarray:
    """``op``'s output on ``inputs`` by onnxruntime, else onnx's reference evaluator (the
    output declared of the first input's type)."""
    return typed_oracle(op, inputs, opset, np.asarray(inputs[0]).dtype, **attrs)


def reference_output(op: str, inputs: Sequence[Any], opset: int, **attrs: Any) -> np.ndarray:
    """``op``'s output by onnx's reference evaluator alone (where onnxruntime is known to
    differ from ONNX's definition), declared of the first input's type."""
    return typed_oracle(op, inputs, opset, np.asarray(inputs[0]).dtype, reference=True, **attrs)


def typed_oracle(op: str, inputs: Sequence[Any], opset: int, out_dtype: Any, *,
                 reference: bool = False, **attrs: Any) -> np.ndarray:
    """As :func:`oracle`, for an operator whose output type is not its first input's (a
    comparison's bool, Where's X): the output is declared ``out_dtype``. ``reference``:
    onnx's reference evaluator only."""
    absent = [i for i, v in enumerate(inputs) if v is None]
    n = node(op, len(inputs), absent, **attrs)
    feeds = {name: np.asarray(v) for name, v in zip(n.input, inputs) if name}
    graph = helper.make_graph(
        [n], "oracle",
        [helper.make_tensor_value_info(k, onnx_elem_type(v.dtype), list(v.shape))
         for k, v in feeds.items()],
        [helper.make_tensor_value_info("y", onnx_elem_type(np.dtype(out_dtype)), None)],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              ir_version=10)
    try:
        if reference:
            raise LookupError("the reference evaluator is asked for")
        import onnxruntime as ort

        sess = ort.InferenceSession(model.SerializeToString(),
                                    providers=["CPUExecutionProvider"])
        return sess.run(None, feeds)[0]
    except Exception:  # no onnxruntime, or no kernel of it for this opset or type
        from onnx.reference import ReferenceEvaluator

        return ReferenceEvaluator(model).run(None, feeds)[0]


def assert_matches(got: Any, expected: np.ndarray, tolerances: Any) -> None:
    """``got`` has ``expected``'s dtype and shape and its values: within
    ``tolerances[dtype]`` = (rtol, atol) for floats, exactly otherwise."""
    assert got.dtype == expected.dtype and got.shape == expected.shape
    if expected.dtype.kind == "f":
        rtol, atol = tolerances[expected.dtype]
        np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol)
    else:
        np.testing.assert_array_equal(got, expected)


# ------------------------------------------------------------- any domain, several outputs


def domain_node(op: str, inputs: Sequence[Any], n_out: int = 1, *, domain: str = "com.microsoft",
                **attrs: Any) -> onnx.NodeProto:
    """A node of ``op`` in ``domain`` named ``"<op>_node"``, inputs ``in0..`` (``""`` where
    the value is None: an absent optional input) and outputs ``out0..``."""
    names = _trimmed(["" if v is None else f"in{i}" for i, v in enumerate(inputs)])
    return helper.make_node(op, names, [f"out{i}" for i in range(n_out)], name=f"{op}_node",
                            domain=domain, **attrs)


def run_node(bound: Bound, n: onnx.NodeProto, inputs: Sequence[Any], opset: int = 1,
             host_inputs: Sequence[int] = ()) -> list[Any]:
    """Every output of node ``n`` run through ``bound`` on numpy ``inputs`` (None: absent),
    back on the host (a non-array output — a sequence, a map — as the kernel gave it).
    Inputs at ``host_inputs`` stay numpy arrays, as a device provider's plan keeps them."""
    # A map (dict) or sequence (list) input is passed as it is, as the executor passes it.
    args = [v if v is None or isinstance(v, dict | list) else
            np.asarray(v) if i in host_inputs or not isinstance(v, np.ndarray | np.generic) else bound.array(v)
            for i, v in enumerate(inputs)]
    outs = bound.kernel(n, opset).compute(*_trimmed(args))
    assert isinstance(outs, tuple)
    return [bound.host(o) if hasattr(o, "__dlpack__") or isinstance(o, np.ndarray) else o for o in outs]


def ort_outputs(n: onnx.NodeProto, inputs: Sequence[Any], opset: int = 1, *, onnx_opset: int = 21,
                input_types: Sequence[onnx.TypeProto | None] | None = None) -> list[Any]:
    """Every output of node ``n`` by onnxruntime's CPU provider alone (no fallback: its
    com.microsoft and ai.onnx.ml kernels are the reference), on numpy ``inputs``
    (None: absent). ``n``'s domain is imported at ``opset``, the default domain at
    ``onnx_opset``. ``input_types`` gives inputs that are not tensors (maps, sequences)."""
    import onnxruntime as ort

    feeds = {name: v for name, v in zip(n.input, inputs) if name}
    infos = []
    for i, (name, v) in enumerate(zip(n.input, inputs)):
        if not name:
            continue
        given = input_types[i] if input_types is not None and i < len(input_types) else None
        if given is not None:
            infos.append(helper.make_value_info(name, given))
        else:
            arr = np.asarray(v)
            feeds[name] = arr
            infos.append(helper.make_tensor_value_info(name, onnx_elem_type(arr.dtype), list(arr.shape)))
    graph = helper.make_graph([n], "oracle", infos, [helper.make_empty_tensor_value_info(o) for o in n.output if o])
    imports = [helper.make_opsetid("", onnx_opset)]
    if n.domain not in ("", "ai.onnx"):
        imports.append(helper.make_opsetid(n.domain, opset))
    model = helper.make_model(graph, opset_imports=imports, ir_version=10)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)
