"""ONNX functions: model-local functions and operators defined by a function body.

Many operators (the losses, RMSNormalization, Attention from opset 23, Shrink, the
window functions...) are specified by the ONNX standard as a *function*: a body of
simpler operators. When no provider in a session claims such a node, the session expands
it into its body (the schema's function, or its context-dependent function built for the
node's attributes and input types) and partitions again — so a provider that lacks the
fused kernel still runs the model. Model-local functions (``ModelProto.functions``) are
inlined when the model is loaded.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import onnx
import onnx.defs
import onnx.inliner

from .errors import InvalidModel
from .loader import opset_versions

__all__ = ["inline_local_functions", "function_body", "expand_nodes", "EXPANDED_DOMAIN"]

#: Domain the expanded nodes are renamed into just before inlining.
EXPANDED_DOMAIN = "onyxrt.expanded"


#: Most nodes inlining model-local functions may produce: functions calling each other
#: twice per level would otherwise expand 40 small functions into 2**40 nodes.
MAX_INLINED_NODES = 1_000_000


def inline_local_functions(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with its local functions inlined (unchanged when it has none).

    Raises :class:`~onyxrt.errors.InvalidModel` for recursive functions and for calls that
    would expand past :data:`MAX_INLINED_NODES` nodes.
    """
    if not model.functions:
        return model
    try:
        _check_inlined_size(model)
    except RecursionError:
        raise InvalidModel(
            "model-local functions call each other too many levels deep to inline "
            "(a chain of several hundred functions); flatten the chain"
        ) from None
    try:
        return onnx.inliner.inline_local_functions(model)
    except Exception as exc:  # onnx's ValidationError (e.g. a recursive function)
        raise InvalidModel(f"model-local functions cannot be inlined: {exc}") from None


def _check_inlined_size(model: onnx.ModelProto) -> None:
    bodies = {(f.domain, f.name): f for f in model.functions}
    sizes: dict[tuple[str, str], int] = {}
    visiting: set[tuple[str, str]] = set()

    def count(nodes: Iterable[onnx.NodeProto]) -> int:
        total = 0
        for node in nodes:
            key = (node.domain, node.op_type)
            total += size(key) if key in bodies else 1
            for attr in node.attribute:
                for g in [attr.g] if attr.type == onnx.AttributeProto.GRAPH else attr.graphs:
                    total += count(g.node)
            if total > MAX_INLINED_NODES:
                break
        return total

    def size(key: tuple[str, str]) -> int:
        if key not in sizes:
            if key in visiting:
                raise InvalidModel(
                    f"model-local function {key[0]}::{key[1]} calls itself (directly or "
                    "through other functions); functions must not be recursive"
                )
            visiting.add(key)
            sizes[key] = count(bodies[key].node)
            visiting.discard(key)
        return sizes[key]

    total = count(model.graph.node)
    if total > MAX_INLINED_NODES:
        raise InvalidModel(
            f"inlining the model-local functions would create more than {MAX_INLINED_NODES:,} "
            "nodes (functions calling each other several times per level multiply); "
            "this model is not runnable as written"
        )


def function_body(
    node: onnx.NodeProto, opset: int, input_types: Iterable[onnx.TypeProto | None]
) -> onnx.FunctionProto | None:
    """The ONNX function defining ``node``'s operator at ``opset``, if the standard has one."""
    domain = "" if node.domain == "ai.onnx" else node.domain
    try:
        # Any: several OpSchema members used here are missing from onnx's type stubs.
        schema: Any = onnx.defs.get_schema(node.op_type, max_inclusive_version=opset, domain=domain)
    except onnx.defs.SchemaError:
        return None
    data: bytes | None = None
    if schema.has_function:
        versions = [v for v in schema.function_opset_versions if v <= opset]
        if versions:
            data = schema.get_function_with_opset_version(max(versions))
    if data is None and schema.has_context_dependent_function:
        versions = [v for v in schema.context_dependent_function_opset_versions if v <= opset]
        types = [t.SerializeToString() if t is not None else onnx.TypeProto().SerializeToString()
                 for t in input_types]
        if versions:
            try:
                data = schema.get_context_dependent_function_with_opset_version(
                    max(versions), node.SerializeToString(), types
                )
            except Exception:  # the builder rejects this node's attributes or types
                data = None
    if not data:
        return None
    body = onnx.FunctionProto()
    body.ParseFromString(data)
    return body


def with_default_attributes(node: onnx.NodeProto, opset: int) -> None:
    """Add the schema's default for every attribute ``node`` leaves unset: a function
    body refers to attributes by name, and the inliner substitutes only those present."""
    domain = "" if node.domain == "ai.onnx" else node.domain
    try:
        schema = onnx.defs.get_schema(node.op_type, max_inclusive_version=opset, domain=domain)
    except onnx.defs.SchemaError:
        return
    present = {a.name for a in node.attribute}
    for name, attr in schema.attributes.items():
        default = attr.default_value
        if name not in present and default is not None and default.type != onnx.AttributeProto.UNDEFINED:
            copy = onnx.AttributeProto()
            copy.CopyFrom(default)
            copy.name = name
            node.attribute.append(copy)


def _node_names(graph: onnx.GraphProto) -> list[str]:
    """Node names as :class:`~onyxrt.graph.Graph` assigns them (model order)."""
    names: list[str] = []
    used: set[str] = set()
    for i, node in enumerate(graph.node):
        name = node.name or f"{node.op_type}_{i}"
        if name in used:
            name = f"{name}_{i}"
        used.add(name)
        names.append(name)
    return names


def expand_nodes(
    model: onnx.ModelProto, names: Iterable[str], types: Mapping[str, onnx.TypeProto]
) -> tuple[onnx.ModelProto, list[str]]:
    """A copy of ``model`` with the named top-level nodes replaced by their function
    bodies; also returns the names actually expanded (nodes without a body are kept)."""
    wanted = set(names)
    result = onnx.ModelProto()
    result.CopyFrom(model)
    opsets = opset_versions(result)
    expanded: list[str] = []
    selected: list[tuple[str, str]] = []
    for name, node in zip(_node_names(result.graph), result.graph.node):
        if name not in wanted:
            continue
        domain = "" if node.domain == "ai.onnx" else node.domain
        opset = opsets.get(domain, 1)
        body = function_body(node, opset, [types.get(i) for i in node.input])
        if body is None:
            continue
        with_default_attributes(node, opset)
        body.domain = EXPANDED_DOMAIN
        body.name = f"{node.op_type}__{len(expanded)}"
        node.domain, node.op_type = EXPANDED_DOMAIN, body.name
        for imp in body.opset_import:  # the body may use domains the model does not import
            key = "" if imp.domain == "ai.onnx" else imp.domain
            if key not in opsets:
                result.opset_import.append(onnx.helper.make_opsetid(imp.domain, imp.version))
                opsets[key] = imp.version
        result.functions.append(body)
        selected.append((EXPANDED_DOMAIN, body.name))
        expanded.append(name)
    if not expanded:
        return model, []
    if EXPANDED_DOMAIN not in opsets:
        result.opset_import.append(onnx.helper.make_opsetid(EXPANDED_DOMAIN, 1))
    result = onnx.inliner.inline_selected_functions(result, selected, exclude=False)
    # Drop the now-unused import of the expansion domain.
    keep = [o for o in result.opset_import if o.domain != EXPANDED_DOMAIN]
    del result.opset_import[:]
    result.opset_import.extend(keep)
    return result, expanded
