"""A few nodes run on one provider's kernels directly, without a session.

Constant folding computes the nodes it folds with the CPU provider's kernels, exactly as a
run would (:attr:`~onyxrt.optimizer.PassContext.evaluate`). Building a whole session for
that — loading and checking the model, shape inference, partitioning, planning — cost
MobileNetV2's torch export ~80 ms of its creation for 364 small integer nodes (the "same"
padding's arithmetic on shapes), where creating and calling the kernels costs a fraction.
:func:`run_nodes` does just that: each node's registered kernel, built with the node's
constant inputs and the actual values' types, called in order. Anything beyond plain nodes
(a subgraph, a node the registry has no kernel for, a kernel that raises, a value that is
not an array) answers ``None``, and the caller builds the session, which handles (and
reports) it as for any model.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from .dtypes import onnx_elem_type
from .float_errors import ignore_float_errors, restore_float_errors
from .kernels import KernelInfo, ValueType
from .limits import RunLimits, run_limits
from .protocol import KernelRegistryProvider

__all__ = ["run_nodes"]

_SUBGRAPHS = (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)


def run_nodes(
    model: onnx.ModelProto, arrays: Mapping[str, Any], provider: KernelRegistryProvider
) -> list[np.ndarray] | None:
    """The outputs of ``model`` — no inputs, its nodes in order, ``arrays`` the values of
    its data-less initializers — computed by ``provider``'s kernels; ``None`` where the
    model needs a session (see the module doc). Each output is an array of its own (never
    one of the initializers' arrays, nor a view of one)."""
    graph = model.graph
    opsets = {("" if o.domain == "ai.onnx" else o.domain): int(o.version) for o in model.opset_import}
    values: dict[str, Any] = {
        t.name: arrays[t.name] if t.name in arrays else numpy_helper.to_array(t) for t in graph.initializer
    }
    constants = frozenset(values)
    given = {id(v) for v in values.values()}
    quiet = ignore_float_errors()
    try:
        # under a run's default memory limits, as the session this replaces ran them (a
        # refused allocation raises in the kernel: None, and the session reports it)
        with run_limits(RunLimits(), guard_memory=True):
            for node in graph.node:
                outputs = _run_node(node, values, constants, opsets, provider)
                if outputs is None:
                    return None
                values.update(outputs)
    finally:
        restore_float_errors(quiet)
    results = []
    for out in graph.output:
        value = values.get(out.name)
        if isinstance(value, np.generic):
            value = np.asarray(value)
        if not isinstance(value, np.ndarray):
            return None
        if id(value) in given or not value.flags.owndata or not value.flags.writeable:
            value = value.copy()
        results.append(value)
    return results


def _run_node(
    node: onnx.NodeProto, values: Mapping[str, Any], constants: frozenset[str],
    opsets: Mapping[str, int], provider: KernelRegistryProvider,
) -> dict[str, Any] | None:
    """The named outputs of one node, or None where it needs a session."""
    if any(a.type in _SUBGRAPHS for a in node.attribute):
        return None
    if any(name and name not in values for name in node.input):
        return None  # not in order, or a value from outside
    domain = "" if node.domain == "ai.onnx" else node.domain
    opset = opsets.get(domain)
    if opset is None:
        return None
    kdef, _ = provider.registry.lookup(domain, node.op_type, opset)
    if kdef is None:
        return None
    inputs = [values[name] if name else None for name in node.input]
    types = tuple(_value_type(v) for v in inputs)
    if kdef.unsupported_type(types, ()):
        return None
    info = KernelInfo.from_node(
        node, opset, since_version=kdef.since_version,
        constants={i: values[name] for i, name in enumerate(node.input) if name in constants},
        input_types=types, provider_options=provider.effective_options(),
    )
    try:
        outputs = kdef.factory(info).compute(*inputs)
    except Exception:  # the session reports it, with the node's context
        return None
    if len(outputs) < len(node.output):
        return None
    return {name: value for name, value in zip(node.output, outputs) if name}


def _value_type(value: Any) -> ValueType | None:
    """What a run's kernel is told of an array input: its element type and shape."""
    if not isinstance(value, np.ndarray):
        return None
    try:
        return ValueType("tensor", onnx_elem_type(value.dtype), tuple(int(d) for d in value.shape))
    except (TypeError, KeyError, ValueError):
        return ValueType("tensor", None, tuple(int(d) for d in value.shape))
