"""ONNX functions: model-local functions and operators defined by a function body.

Many operators (the losses, RMSNormalization, Attention from opset 23, Shrink, the
window functions...) are specified by the ONNX standard as a *function*: a body of
simpler operators. When no provider in a session claims such a node, the session expands
it into its body (the schema's function, or its context-dependent function built for the
node's attributes and input types) and partitions again — so a provider that lacks the
fused kernel still runs the model. Model-local functions (``ModelProto.functions``) are
inlined when the model is loaded.

A body is written against one version of the ONNX opset (AffineGrid's against opset 20,
say) while the model may import a later one. Inlined as is, the body's nodes would be read
at the model's version; so a body is first brought to the model's version: relabelled when
every operator it uses is the same at both versions, otherwise converted by onnx's version
converter, which rewrites the operators that changed (as onnx's reference evaluator runs a
function at its own version). A context-dependent body is built from the types of all the
node's inputs, weights included, and a published body known to be wrong is corrected
(:data:`BODY_CORRECTIONS`).

A model-local function never replaces a standard operator: one declared in a standard
domain is ignored, as onnxruntime ignores it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import onnx
import onnx.defs
import onnx.inliner

from .errors import InvalidModel
from .loader import opset_versions

__all__ = [
    "BODY_CORRECTIONS",
    "EXPANDED_DOMAIN",
    "STANDARD_DOMAINS",
    "expand_nodes",
    "function_body",
    "inline_local_functions",
]

logger = logging.getLogger("onyxrt.functions")

#: Domain the expanded nodes are renamed into just before inlining.
EXPANDED_DOMAIN = "onyxrt.expanded"


#: Most nodes inlining model-local functions may produce: functions calling each other
#: twice per level would otherwise expand 40 small functions into 2**40 nodes.
MAX_INLINED_NODES = 1_000_000


#: Domains whose nodes are always the standard operators: onnxruntime ignores a
#: model-local function declared in them (it does use one in the preview domains).
STANDARD_DOMAINS = ("", "ai.onnx.ml")


def _domain(domain: str) -> str:
    """The domain with the default domain spelled ""."""
    return "" if domain == "ai.onnx" else domain


def inline_local_functions(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with its local functions inlined (unchanged when it has none).

    A function declared in a standard domain (:data:`STANDARD_DOMAINS`) is ignored: a
    node there always runs the standard operator, as in onnxruntime and onnx's reference
    evaluator, even when a local function has its name. A function importing another
    version of the ONNX opset than the model is brought to the model's version first
    (see the module's docstring).

    Raises :class:`~onyxrt.errors.InvalidModel` for recursive functions, for calls that
    would expand past :data:`MAX_INLINED_NODES` nodes, and for calls to a function whose
    opset imports cannot be reconciled with the model's.
    """
    if not model.functions:
        return model
    opsets = opset_versions(model)
    standard = [f for f in model.functions if _domain(f.domain) in STANDARD_DOMAINS]
    kept = [f for f in model.functions if _domain(f.domain) not in STANDARD_DOMAINS]
    relabelled = [_relabelled(f, opsets) for f in kept]
    result = model
    if standard or any(r is not None for r in relabelled):
        # Copy the model only when its functions change (the inliner copies it anyway).
        result = onnx.ModelProto()
        result.CopyFrom(model)
        del result.functions[:]
        result.functions.extend(r if r is not None else f for f, r in zip(kept, relabelled))
    if standard:
        names = ", ".join(sorted({f"{f.domain or 'ai.onnx'}::{f.name}" for f in standard}))
        # onnxruntime drops these silently (an INFO line about pruned functions).
        logger.info(
            "ignoring model-local function(s) %s: nodes of a standard ONNX domain run the "
            "standard operator", names,
        )
        if not kept:
            return result
    try:
        _check_inlined_size(result)
    except RecursionError:
        raise InvalidModel(
            "model-local functions call each other too many levels deep to inline "
            "(a chain of several hundred functions); flatten the chain"
        ) from None
    try:
        # convert_version: a function still at another ONNX version is converted.
        inlined = onnx.inliner.inline_local_functions(result, convert_version=True)
    except Exception as exc:  # onnx's ValidationError (e.g. a recursive function)
        raise InvalidModel(f"model-local functions cannot be inlined: {exc}") from None
    _check_no_calls_left(inlined, opsets)
    return inlined


def _check_inlined_size(model: onnx.ModelProto) -> None:
    bodies = {(_domain(f.domain), f.name): f for f in model.functions}
    sizes: dict[tuple[str, str], int] = {}
    visiting: set[tuple[str, str]] = set()

    def count(nodes: Iterable[onnx.NodeProto]) -> int:
        total = 0
        for node in nodes:
            key = (_domain(node.domain), node.op_type)
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


def _check_no_calls_left(model: onnx.ModelProto, opsets: Mapping[str, int]) -> None:
    """onnx leaves a function it cannot inline (another version of a domain other than
    ONNX's, which its converter does not handle) in place; a call to it would otherwise
    surface later as a missing kernel."""
    left = {(_domain(f.domain), f.name): f for f in model.functions}
    if not left:
        return
    for node in _walk(model.graph.node):
        function = left.get((_domain(node.domain), node.op_type))
        if function is None:
            continue
        theirs = {_domain(i.domain): int(i.version) for i in function.opset_import}
        clashes = ", ".join(
            f"{d or 'ai.onnx'} {v} (the model imports {opsets[d]})"
            for d, v in sorted(theirs.items()) if d in opsets and opsets[d] != v
        )
        raise InvalidModel(
            f"node {node.name or '(unnamed)'!r} calls model-local function "
            f"{function.domain}::{function.name}, which imports {clashes or 'other opsets'}; "
            "only the ONNX domain can be converted between versions. Make the function's "
            "opset imports match the model's"
        )


def _walk(nodes: Iterable[onnx.NodeProto]) -> Iterator[onnx.NodeProto]:
    """Every node of ``nodes`` and of their subgraphs, depth first."""
    for node in nodes:
        yield node
        for attr in node.attribute:
            for g in [attr.g] if attr.type == onnx.AttributeProto.GRAPH else attr.graphs:
                yield from _walk(g.node)


def _same_operators(nodes: Iterable[onnx.NodeProto], version: int, target: int) -> bool:
    """Whether every ONNX-domain operator in ``nodes`` (subgraphs included) has the same
    schema at opset ``version`` and at ``target`` — onnx's own test before it serves a
    function at a later opset, extended to subgraphs."""
    for node in _walk(nodes):
        if _domain(node.domain) != "":
            continue
        try:
            old = onnx.defs.get_schema(node.op_type, max_inclusive_version=version, domain="")
            new = onnx.defs.get_schema(node.op_type, max_inclusive_version=target, domain="")
        except onnx.defs.SchemaError:
            return False
        if old.since_version != new.since_version:
            return False
    return True


def _relabel_if_unchanged(function: onnx.FunctionProto, opsets: Mapping[str, int]) -> bool:
    """Set ``function``'s ONNX import to the model's version when its operators mean the
    same at both; True when the versions now agree."""
    target = opsets.get("")
    for imp in function.opset_import:
        if _domain(imp.domain) != "" or target is None or imp.version == target:
            continue
        if not _same_operators(function.node, int(imp.version), target):
            return False
        imp.version = target
    return True


def _relabelled(function: onnx.FunctionProto, opsets: Mapping[str, int]) -> onnx.FunctionProto | None:
    """A copy of ``function`` importing the model's ONNX version, when it imports another
    and its operators mean the same at both (None otherwise: nothing to change, or a
    conversion for onnx's inliner to do)."""
    target = opsets.get("")
    if target is None or all(_domain(i.domain) != "" or i.version == target for i in function.opset_import):
        return None
    copy = onnx.FunctionProto()
    copy.CopyFrom(function)
    return copy if _relabel_if_unchanged(copy, opsets) else None


# -- corrections of published function bodies ---------------------------------------------


def _affine_grid_squeeze_rows(body: onnx.FunctionProto) -> None:
    """AffineGrid-20's 2-D branch squeezes each [N, 1, 3] row of theta without axes, so
    for N == 1 the batch axis goes too and the next ``Split(axis=1)`` fails on a rank-1
    tensor (onnxruntime's native kernel returns the grid). Squeeze axis 1 only."""
    for node in _walk(body.node):
        for attr in node.attribute:
            if attr.type != onnx.AttributeProto.GRAPH:
                continue
            graph = attr.g
            rows = [n for n in graph.node if n.op_type == "Squeeze" and list(n.input) in (["r1"], ["r2"])]
            if not rows:
                continue
            axis = "onyxrt_row_axis"
            for n in rows:
                n.input.append(axis)
            nodes = [onnx.helper.make_node("Constant", [], [axis], value_ints=[1]), *graph.node]
            del graph.node[:]
            graph.node.extend(nodes)


#: Published bodies that compute the wrong thing, by (domain, op_type, function version);
#: each correction leaves a body it does not recognise unchanged (a fixed onnx release).
BODY_CORRECTIONS: dict[tuple[str, str, int], Callable[[onnx.FunctionProto], None]] = {
    ("", "AffineGrid", 20): _affine_grid_squeeze_rows,
}


# -- expansion of operators into their bodies ---------------------------------------------


def _known(t: onnx.TypeProto | None) -> bool:
    if t is None or t.WhichOneof("value") is None:
        return False
    return t.WhichOneof("value") != "tensor_type" or t.tensor_type.elem_type != 0


def function_body(
    node: onnx.NodeProto, opset: int, input_types: Iterable[onnx.TypeProto | None]
) -> onnx.FunctionProto | None:
    """The ONNX function defining ``node``'s operator at ``opset``, if the standard has one.

    The body imports the opset it was written for, which may be older than ``opset``. A
    context-dependent body is built only when the type of every input the node gives is
    known: the builder reads them, and an unknown one makes it build a body for another
    signature (an input taken as absent).
    """
    domain = _domain(node.domain)
    try:
        # Any: several OpSchema members used here are missing from onnx's type stubs.
        schema: Any = onnx.defs.get_schema(node.op_type, max_inclusive_version=opset, domain=domain)
    except onnx.defs.SchemaError:
        return None
    data: bytes | None = None
    version = 0
    if schema.has_function:
        versions = [v for v in schema.function_opset_versions if v <= opset]
        if versions:
            version = max(versions)
            data = schema.get_function_with_opset_version(version)
    if data is None and schema.has_context_dependent_function:
        versions = [v for v in schema.context_dependent_function_opset_versions if v <= opset]
        types = list(input_types)
        missing = [name for name, t in zip(node.input, types) if name and not _known(t)]
        if missing:
            logger.info(
                "not expanding node %r (%s): the type of input(s) %s is unknown, and its "
                "function body depends on it", node.name, node.op_type, missing,
            )
            return None
        if versions:
            version = max(versions)
            serialized = [t.SerializeToString() if t is not None else b"" for t in types]
            try:
                data = schema.get_context_dependent_function_with_opset_version(
                    version, node.SerializeToString(), serialized
                )
            except Exception:  # the builder rejects this node's attributes or types
                data = None
    if not data:
        return None
    body = onnx.FunctionProto()
    body.ParseFromString(data)
    correction = BODY_CORRECTIONS.get((domain, node.op_type, version))
    if correction is not None:
        correction(body)
    return body


def with_default_attributes(node: onnx.NodeProto, opset: int) -> None:
    """Add the schema's default for every attribute ``node`` leaves unset: a function
    body refers to attributes by name, and the inliner substitutes only those present."""
    domain = _domain(node.domain)
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


def _with_initializer_types(
    graph: onnx.GraphProto, types: Mapping[str, onnx.TypeProto]
) -> dict[str, onnx.TypeProto]:
    """``types`` plus the type of every initializer it lacks (shape inference records
    none for them, and a context-dependent body needs the type of a weight input)."""
    result = dict(types)
    for tensor in graph.initializer:
        if not _known(result.get(tensor.name)):
            result[tensor.name] = onnx.helper.make_tensor_type_proto(tensor.data_type, list(tensor.dims))
    for st in graph.sparse_initializer:  # densified: the dims, not the values' [NNZ]
        if not _known(result.get(st.values.name)):
            result[st.values.name] = onnx.helper.make_tensor_type_proto(st.values.data_type, list(st.dims))
    return result


def _at_model_opsets(
    body: onnx.FunctionProto,
    call: onnx.NodeProto,
    opsets: Mapping[str, int],
    types: Mapping[str, onnx.TypeProto],
) -> onnx.FunctionProto | None:
    """``body`` (called by ``call``, whose attributes include the defaults) with its
    opset imports equal to the model's, or None when they cannot be made so."""
    for imp in body.opset_import:
        domain = _domain(imp.domain)
        if domain and domain in opsets and opsets[domain] != imp.version:
            logger.info(
                "not expanding node %r (%s): its body imports %s version %d, the model %d",
                call.name, call.op_type, domain, imp.version, opsets[domain],
            )
            return None
    if _relabel_if_unchanged(body, opsets):
        return body
    in_types = [types.get(n) if n else None for n in call.input]
    out_types = [types.get(n) if n else None for n in call.output]
    given = [*zip(call.input, in_types), *zip(call.output, out_types)]
    if not all(_known(t) for n, t in given if n):
        logger.info(
            "not expanding node %r (%s): its body needs converting to the model's opset, "
            "which needs the type of every input and output", call.name, call.op_type,
        )
        return None
    key = b"\0".join([
        body.SerializeToString(),
        *(a.SerializeToString() for a in call.attribute),
        *(t.SerializeToString() if t is not None else b"-" for t in [*in_types, *out_types]),
        repr(sorted(opsets.items())).encode(),
    ])
    converted = _CONVERTED.get(key)
    if converted is None:
        converted = _converted(body, call, in_types, out_types, opsets[""])
        if len(_CONVERTED) >= _CONVERTED_MAX:
            _CONVERTED.clear()
        _CONVERTED[key] = converted
    if isinstance(converted, str):
        logger.info("not expanding node %r (%s): %s", call.name, call.op_type, converted)
        return None
    result = onnx.FunctionProto()
    result.CopyFrom(converted)
    return result


#: Bodies converted to another opset (or why they could not be), by body, attributes,
#: parameter types and opsets: a model repeats the same layer many times, and each
#: conversion costs about 10 ms.
_CONVERTED: dict[bytes, onnx.FunctionProto | str] = {}
_CONVERTED_MAX = 256


def _converted(
    body: onnx.FunctionProto,
    call: onnx.NodeProto,
    in_types: list[onnx.TypeProto | None],
    out_types: list[onnx.TypeProto | None],
    target: int,
) -> onnx.FunctionProto | str:
    """``body`` converted to ONNX opset ``target`` by onnx's version converter, or why not.

    The converter works on a model whose values are typed, so the call is inlined into a
    model of its own, with parameters named by position (``p_in_0``...) and typed as in
    the session; the converted nodes become a body taking those parameters, attributes
    already bound.
    """
    ins = [f"p_in_{i}" if n else "" for i, n in enumerate(call.input)]
    outs = [f"p_out_{i}" if n else "" for i, n in enumerate(call.output)]
    local = onnx.FunctionProto()
    local.CopyFrom(body)
    local.domain, local.name = EXPANDED_DOMAIN, "Body"
    node = onnx.NodeProto()
    node.CopyFrom(call)
    node.domain, node.op_type = EXPANDED_DOMAIN, "Body"
    del node.input[:], node.output[:]
    node.input.extend(ins)
    node.output.extend(outs)
    graph = onnx.helper.make_graph(
        [node],
        "call",
        [onnx.helper.make_value_info(n, t) for n, t in zip(ins, in_types) if n and t is not None],
        [onnx.helper.make_value_info(n, t) for n, t in zip(outs, out_types) if n and t is not None],
    )
    imports = {_domain(i.domain): int(i.version) for i in body.opset_import}
    imports.update({"": target, EXPANDED_DOMAIN: 1})
    model = onnx.helper.make_model(
        graph,
        opset_imports=[onnx.helper.make_opsetid(d, v) for d, v in imports.items()],
        functions=[local],
        ir_version=onnx.IR_VERSION,
    )
    try:
        inlined = onnx.inliner.inline_local_functions(model, convert_version=True)
    except Exception as exc:  # the converter has no adapter for an operator
        return f"converting its body to opset {target} failed: {exc}"
    if inlined.functions:
        return f"onnx could not convert its body to opset {target}"
    result = onnx.FunctionProto()
    result.domain, result.name = local.domain, local.name
    # Absent optional parameters get a name no node reads: the inliner binds it to "".
    result.input.extend(n or f"p_absent_in_{i}" for i, n in enumerate(ins))
    result.output.extend(n or f"p_absent_out_{i}" for i, n in enumerate(outs))
    # Initializers the converter added become Constant nodes of the body.
    result.node.extend(
        onnx.helper.make_node("Constant", [], [t.name], value=t) for t in inlined.graph.initializer
    )
    result.node.extend(inlined.graph.node)
    result.opset_import.extend(i for i in inlined.opset_import if i.domain != EXPANDED_DOMAIN)
    return result


def expand_nodes(
    model: onnx.ModelProto, names: Iterable[str], types: Mapping[str, onnx.TypeProto]
) -> tuple[onnx.ModelProto, list[str]]:
    """A copy of ``model`` with the named top-level nodes replaced by their function
    bodies; also returns the names actually expanded (nodes without a usable body are
    kept, and so is the whole model when onnx's inliner fails)."""
    wanted = set(names)
    result = onnx.ModelProto()
    result.CopyFrom(model)
    opsets = opset_versions(result)
    types = _with_initializer_types(result.graph, types)
    # onnx's selective inliner refuses a model holding any function at other opsets than
    # the model's, even one it is not asked to inline: set the model's own aside.
    own_functions = list(result.functions)
    del result.functions[:]
    expanded: list[str] = []
    selected: list[tuple[str, str]] = []
    for name, node in zip(_node_names(result.graph), result.graph.node):
        if name not in wanted:
            continue
        domain = _domain(node.domain)
        opset = opsets.get(domain, 1)
        body = function_body(node, opset, [types.get(i) for i in node.input])
        if body is None:
            continue
        if len(node.input) > len(body.input) or len(node.output) > len(body.output):
            logger.info("not expanding node %r: its body takes fewer parameters than the node gives", name)
            continue
        with_default_attributes(node, opset)
        fitted = _at_model_opsets(body, node, opsets, types)
        if fitted is None:
            continue
        fitted.domain = EXPANDED_DOMAIN
        fitted.name = f"{node.op_type}__{len(expanded)}"
        node.domain, node.op_type = EXPANDED_DOMAIN, fitted.name
        for imp in fitted.opset_import:  # the body may use domains the model does not import
            key = _domain(imp.domain)
            if key not in opsets:
                result.opset_import.append(onnx.helper.make_opsetid(imp.domain, imp.version))
                opsets[key] = imp.version
        result.functions.append(fitted)
        selected.append((EXPANDED_DOMAIN, fitted.name))
        expanded.append(name)
    if not expanded:
        return model, []
    if EXPANDED_DOMAIN not in opsets:
        result.opset_import.append(onnx.helper.make_opsetid(EXPANDED_DOMAIN, 1))
    try:
        result = onnx.inliner.inline_selected_functions(result, selected, exclude=False)
    except Exception as exc:  # the caller reports the nodes as not runnable
        logger.warning("expanding %s into their function bodies failed: %s", ", ".join(expanded), exc)
        return model, []
    result.functions.extend(own_functions)
    # Drop the now-unused import of the expansion domain.
    keep = [o for o in result.opset_import if o.domain != EXPANDED_DOMAIN]
    del result.opset_import[:]
    result.opset_import.extend(keep)
    return result, expanded
