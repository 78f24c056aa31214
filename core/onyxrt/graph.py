"""A light graph IR over ``onnx.GraphProto``: nodes in topological order, values, types.

The partitioner, the providers' capability calls and the execution plan all read the
graph through :class:`Graph`. Providers receive it as a read-only view (they are given
the object but must not mutate it; :class:`GraphView` is the documented surface).
"""

from __future__ import annotations

import heapq
import math
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import field
from functools import cached_property
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from .errors import InvalidGraph, OnyxError
from .kernels import ValueType, parse_attribute
from .records import record

__all__ = ["Node", "Graph", "GraphView", "read_initializers", "subgraph_outer_names", "check_structure",
           "node_subgraphs", "SUBGRAPH_OPS", "tensor_array"]


@record(eq=False)
class Node:
    """One node of the graph, in topological position ``index``."""

    index: int
    name: str
    op_type: str
    domain: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    proto: onnx.NodeProto
    #: Outer-scope names read by this node's subgraphs (If/Loop/Scan bodies).
    implicit_inputs: tuple[str, ...] = ()

    @cached_property
    def attributes(self) -> dict[str, Any]:
        """Attributes parsed to Python values.

        Raises :class:`~onyxrt.errors.InvalidGraph` naming the node and attribute when one
        cannot be read (a tensor attribute whose data does not match its declared shape).
        """
        parsed = {}
        for a in self.proto.attribute:
            try:
                parsed[a.name] = parse_attribute(a)
            except Exception as exc:
                detail = _size_mismatch(a.t) if a.type == onnx.AttributeProto.TENSOR else ""
                raise InvalidGraph(
                    f"node {self.name!r} ({self.op_type}): attribute {a.name!r} cannot be read: "
                    f"{detail or exc}. The model file may be truncated or corrupt."
                ) from exc
        return parsed

    @property
    def qualified_op(self) -> str:
        """``domain::op_type`` for non-default domains, else ``op_type``."""
        return f"{self.domain}::{self.op_type}" if self.domain not in ("", "ai.onnx") else self.op_type

    def __repr__(self) -> str:
        return f"Node({self.index}, {self.name!r}, {self.qualified_op})"


def subgraph_outer_names(graph: onnx.GraphProto) -> set[str]:
    """Names a (sub)graph reads but does not define itself: its outer-scope references."""
    defined = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    defined |= {t.values.name for t in graph.sparse_initializer}
    used: set[str] = set()
    for node in graph.node:
        used.update(n for n in node.input if n)
        for g in node_subgraphs(node):
            used |= subgraph_outer_names(g)
        defined.update(node.output)
    used.update(o.name for o in graph.output)
    return used - defined


# The default-domain operators with graph attributes. The loader checks every
# default-domain node's attributes against its schema, so no other default-domain node
# carries a graph and its attributes need not be read (building the attribute wrappers
# of every node, for each pass of the optimizer, cost MobileNetV2's creation ~3 ms).
# Nodes of other domains (custom operators) may carry graphs.
SUBGRAPH_OPS = frozenset({"If", "Loop", "Scan", "SequenceMap"})


def node_subgraphs(node: onnx.NodeProto) -> list[onnx.GraphProto]:
    """The graphs held by ``node``'s attributes (bodies of If/Loop/Scan/SequenceMap, or
    of a custom operator), in attribute order; a list, not a generator: it is asked of
    every node by every pass, and nearly always answers ``[]``."""
    if node.op_type not in SUBGRAPH_OPS and node.domain in ("", "ai.onnx"):
        return []
    graphs: list[onnx.GraphProto] = []
    for attr in node.attribute:
        if attr.type == onnx.AttributeProto.GRAPH:
            graphs.append(attr.g)
        elif attr.type == onnx.AttributeProto.GRAPHS:
            graphs.extend(attr.graphs)
    return graphs


#: Element types whose raw bytes are the array as numpy reads it (little-endian here).
RAW_DTYPES: dict[int, np.dtype[Any]] = {
    onnx.TensorProto.FLOAT: np.dtype(np.float32), onnx.TensorProto.DOUBLE: np.dtype(np.float64),
    onnx.TensorProto.FLOAT16: np.dtype(np.float16),
    onnx.TensorProto.INT64: np.dtype(np.int64), onnx.TensorProto.INT32: np.dtype(np.int32),
    onnx.TensorProto.INT16: np.dtype(np.int16), onnx.TensorProto.INT8: np.dtype(np.int8),
    onnx.TensorProto.UINT64: np.dtype(np.uint64), onnx.TensorProto.UINT32: np.dtype(np.uint32),
    onnx.TensorProto.UINT16: np.dtype(np.uint16), onnx.TensorProto.UINT8: np.dtype(np.uint8),
}


def tensor_array(tensor: onnx.TensorProto) -> np.ndarray:
    """The value of a tensor: a read-only view of its raw bytes for the common numeric
    types (``numpy_helper.to_array`` copies them once more and costs ~20 µs per call;
    a session reads every weight of a model, the optimizer some of them again), else
    ``numpy_helper.to_array``. Raises what ``to_array`` raises for unreadable bytes."""
    if tensor.data_location == onnx.TensorProto.EXTERNAL:
        # The loader reads every external tensor (onyxrt.external_data); one still
        # external was not loaded, and onnx would read it relative to the working directory.
        raise ValueError("it refers to external data that was not loaded with the model")
    dtype = RAW_DTYPES.get(tensor.data_type)
    if dtype is not None and sys.byteorder == "little":
        raw = tensor.raw_data  # (a copy: upb hands out bytes fields as new objects)
        if raw:
            flat = np.frombuffer(raw, dtype=dtype) if len(raw) % dtype.itemsize == 0 else None
            dims = tuple(tensor.dims)
            if flat is not None and flat.size == math.prod(dims):
                return flat.reshape(dims)
    return numpy_helper.to_array(tensor)


def read_initializers(
    graph: onnx.GraphProto, arrays: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The values of ``graph``'s initializers (dense and sparse) by name, as arrays;
    ``arrays`` supplies values already read. Raises :class:`~onyxrt.errors.InvalidGraph`
    naming an initializer whose bytes cannot be read."""
    initializers: dict[str, Any] = {}
    for t in graph.initializer:
        if arrays is not None and t.name in arrays:
            initializers[t.name] = arrays[t.name]
            continue
        try:
            initializers[t.name] = tensor_array(t)
        except Exception as exc:  # a tensor whose bytes do not match its declared shape
            raise InvalidGraph(
                f"initializer {t.name!r} cannot be read: {_size_mismatch(t) or exc}. The "
                "model file may be truncated or its external data missing."
            ) from exc
    for st in graph.sparse_initializer:
        try:
            initializers[st.values.name] = _sparse_to_dense(st)
        except OnyxError:
            raise
        except Exception as exc:
            raise InvalidGraph(
                f"sparse initializer {st.values.name!r} cannot be read: {exc}. Its "
                "indices must lie inside its dims and match its values."
            ) from exc
    return initializers


@record(eq=False)
class Graph:
    """A graph ready for partitioning: topologically sorted nodes plus value facts.

    ``inputs`` are the graph inputs a caller may feed (initializers excluded unless they
    are also declared inputs, in which case they are overridable); ``initializers`` hold
    constant values as numpy arrays; ``value_types`` holds every type known statically.
    """

    name: str
    nodes: list[Node]
    inputs: list[str]
    outputs: list[str]
    initializers: dict[str, Any]
    value_types: dict[str, ValueType]
    opsets: dict[str, int]
    #: Inputs that also have an initializer (defaults a caller may override).
    overridable: list[str] = field(default_factory=list)
    #: Names the graph reads from an enclosing graph (subgraphs only).
    outer_names: list[str] = field(default_factory=list)
    #: During partitioning: node name → the provider it already belongs to (or is pinned
    #: to). Set by the partitioner before each provider's ``get_capability``.
    assigned: dict[str, str] = field(default_factory=dict)

    # -- construction ----------------------------------------------------------------
    @classmethod
    def from_proto(
        cls,
        graph: onnx.GraphProto,
        opsets: Mapping[str, int],
        *,
        value_types: Mapping[str, ValueType] | None = None,
        outer_scope: Iterable[str] = (),
        arrays: Mapping[str, Any] | None = None,
    ) -> Graph:
        """Read ``graph``; check it is a DAG whose every input is defined.

        ``outer_scope`` lists names visible from an enclosing graph (for subgraphs).
        ``arrays`` supplies initializer values already read (the session keeps the model
        proto without its weights' bytes once they are arrays).
        Raises :class:`~onyxrt.errors.InvalidGraph` naming the node and value at fault.
        """
        initializers = read_initializers(graph, arrays)
        declared_inputs = [i.name for i in graph.input]
        inputs = [n for n in declared_inputs if n not in initializers]
        overridable = [n for n in declared_inputs if n in initializers]

        types: dict[str, ValueType] = dict(value_types or {})
        for vi in [*graph.input, *graph.output, *graph.value_info]:
            if vi.HasField("type"):
                types.setdefault(vi.name, ValueType.from_proto(vi.type))
        for name, arr in initializers.items():
            if isinstance(arr, np.ndarray) and name not in types:
                from .dtypes import onnx_elem_type

                try:
                    types[name] = ValueType("tensor", onnx_elem_type(arr.dtype), arr.shape)
                except TypeError:
                    pass

        outer = set(outer_scope)
        available = set(inputs) | set(initializers) | outer | {""}
        nodes = _topological_nodes(graph, available)
        outer_names = sorted(
            (subgraph_outer_names(graph) & outer) - set(initializers) - set(inputs)
        )
        return cls(
            name=graph.name,
            nodes=nodes,
            inputs=inputs,
            outputs=[o.name for o in graph.output],
            initializers=initializers,
            value_types=types,
            opsets=dict(opsets),
            overridable=overridable,
            outer_names=outer_names,
        )

    # -- queries ---------------------------------------------------------------------
    @cached_property
    def producers(self) -> dict[str, Node]:
        """Value name → the node that produces it."""
        return {out: node for node in self.nodes for out in node.outputs if out}

    @cached_property
    def consumers(self) -> dict[str, list[Node]]:
        """Value name → nodes that read it (explicitly or from a subgraph)."""
        result: dict[str, list[Node]] = {}
        for node in self.nodes:
            for name in dict.fromkeys([*node.inputs, *node.implicit_inputs]):
                if name:
                    result.setdefault(name, []).append(node)
        return result

    def opset(self, domain: str) -> int:
        """The model's opset for ``domain`` ("" and "ai.onnx" are the default domain)."""
        if domain in ("", "ai.onnx"):
            return self.opsets.get("", self.opsets.get("ai.onnx", 1))
        return self.opsets.get(domain, 1)

    def value_type(self, name: str) -> ValueType | None:
        """What is statically known about value ``name``, if anything."""
        return self.value_types.get(name)

    def assigned_provider(self, node: str) -> str | None:
        """The provider that already owns ``node`` (or it is pinned to), if any: a
        provider asked for its capability should form its groups from free nodes only."""
        return self.assigned.get(node)

    def is_constant(self, name: str) -> bool:
        """Whether ``name`` is an initializer that a caller cannot override."""
        return name in self.initializers and name not in self.overridable

    def __iter__(self) -> Iterator[Node]:
        return iter(self.nodes)

    def __len__(self) -> int:
        return len(self.nodes)


#: The read-only surface providers use; the same class, named for its role.
GraphView = Graph


def _size_mismatch(t: onnx.TensorProto) -> str:
    """'holds N bytes but shape S of T needs M bytes', when the raw data is short."""
    from .dtypes import np_dtype

    try:
        itemsize = np_dtype(t.data_type).itemsize
    except TypeError:
        return ""
    if not t.HasField("raw_data") or t.data_type == onnx.TensorProto.STRING:
        return ""
    needed = math.prod(t.dims) * itemsize  # Python ints: huge dims must not wrap
    if len(t.raw_data) == needed:
        return ""
    return (
        f"its data holds {len(t.raw_data)} bytes but shape {tuple(t.dims)} of "
        f"{np_dtype(t.data_type)} needs {needed} bytes"
    )


def _sparse_to_dense(st: onnx.SparseTensorProto) -> np.ndarray:
    """A sparse initializer's dense array. Raises :class:`~onyxrt.errors.InvalidGraph`
    naming it and the index at fault for indices outside its dims (as onnxruntime does;
    numpy would wrap -1 round to the last element) or of the wrong shape; unsorted
    indices are fine and a repeated one keeps its last value, as in onnxruntime."""
    # Imported here, not at the top, only to keep it out of `import onyxrt`: few models
    # have sparse initializers (sparse_coo imports nothing above this module).
    from .sparse_coo import dense_from_proto

    return dense_from_proto(st, f"sparse initializer {st.values.name!r}")


def check_structure(graph: onnx.GraphProto) -> None:
    """Check the structure :meth:`Graph.from_proto` checks (every input defined, one
    producer per value, no cycle) without reading any weight.

    The session calls it before optimizing, so that every optimization level refuses the
    same models: a pass that drops a dead node must not make a broken graph runnable at
    one level and not at another (onnxruntime, too, checks the graph before optimizing).
    Raises :class:`~onyxrt.errors.InvalidGraph` naming the node and value at fault.
    """
    available = {i.name for i in graph.input} | {t.name for t in graph.initializer} | {""}
    available |= {st.values.name for st in graph.sparse_initializer}
    _topological_order(list(graph.node), available)


def _topological_nodes(graph: onnx.GraphProto, available: set[str]) -> list[Node]:
    """Nodes in a topological order that keeps the model's order where it is free to.

    Raises InvalidGraph for an undefined input, a value produced twice, or a cycle.
    """
    protos = list(graph.node)
    order, implicit = _topological_order(protos, available)
    nodes: list[Node] = []
    used_names: set[str] = set()
    for pos, i in enumerate(order):
        proto = protos[i]
        name = proto.name or f"{proto.op_type}_{i}"
        if name in used_names:
            name = f"{name}_{i}"
        used_names.add(name)
        nodes.append(
            Node(
                index=pos,
                name=name,
                op_type=proto.op_type,
                domain="" if proto.domain == "ai.onnx" else proto.domain,
                inputs=tuple(proto.input),
                outputs=tuple(proto.output),
                proto=proto,
                implicit_inputs=implicit[i],
            )
        )
    return nodes


def _topological_order(
    protos: list[onnx.NodeProto], available: set[str]
) -> tuple[list[int], list[tuple[str, ...]]]:
    """The positions of ``protos`` in topological order (the model's order where it is
    free to), and each node's implicit inputs (outer-scope names its subgraphs read).

    Raises InvalidGraph for an undefined input, a value produced twice, or a cycle.
    """
    producer: dict[str, int] = {}
    for i, node in enumerate(protos):
        for out in node.output:
            if not out:
                continue
            if out in producer or out in available:
                other = protos[producer[out]].name if out in producer else "a graph input"
                raise InvalidGraph(
                    f"value {out!r} is produced twice (by node {node.name or node.op_type!r} "
                    f"and {other!r}); every value must have exactly one producer"
                )
            producer[out] = i

    implicit: list[tuple[str, ...]] = []
    deps: list[set[int]] = []
    for node in protos:
        outer: set[str] = set()
        for g in node_subgraphs(node):
            outer |= subgraph_outer_names(g)
        implicit.append(tuple(sorted(outer - set(node.input))) if outer else ())
        d: set[int] = set()
        for name in [*node.input, *implicit[-1]]:
            if name in available:
                continue
            if name not in producer:
                where = "its subgraph reads" if name in outer else "input"
                raise InvalidGraph(
                    f"node {node.name or node.op_type!r} ({node.op_type}): {where} {name!r} "
                    "is not a graph input, an initializer or the output of any node"
                )
            d.add(producer[name])
        deps.append(d)

    dependents: list[list[int]] = [[] for _ in protos]
    indegree = [len(d) for d in deps]
    for i, d in enumerate(deps):
        for j in d:
            dependents[j].append(i)
    ready = [i for i, n in enumerate(indegree) if n == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for j in dependents[i]:
            indegree[j] -= 1
            if indegree[j] == 0:
                heapq.heappush(ready, j)
    if len(order) != len(protos):
        stuck = [protos[i].name or protos[i].op_type for i in range(len(protos)) if indegree[i]]
        raise InvalidGraph(
            f"the graph is not a DAG: nodes {stuck[:8]} form or depend on a cycle"
        )

    return order, implicit

