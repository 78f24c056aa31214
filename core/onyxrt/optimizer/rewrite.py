"""A read-mostly view of a model's top-level graph for the optimizer's passes.

A pass builds one :class:`Rewrite` over the graph, looks for its patterns through the
view (who produces a value, who reads it, which values are constants, what shape
inference said), records replacements, and :meth:`Rewrite.commit` applies them all in one
go: removed nodes disappear, each new node takes the place of the last node of the pattern
it replaces (so the node list stays topologically sorted), new initializers are added.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import onnx

from ..dtypes import np_dtype, onnx_elem_type
from ..graph import node_subgraphs, tensor_array
from ..loader import opset_versions

__all__ = ["Rewrite", "subgraph_reads", "remove_initializers", "has_op", "other_input", "DEFAULT_DOMAINS"]

DEFAULT_DOMAINS = ("", "ai.onnx")

# Constants up to this many elements are cached by Rewrite.array (scalars, biases, shapes).
_CACHED_ELEMENTS = 4096


def subgraph_reads(nodes: Iterable[onnx.NodeProto]) -> set[str]:
    """Every name read inside the graph attributes of ``nodes`` (at any depth).

    Such names may come from the outer scope, so a pass must neither remove nor rename
    the values behind them.
    """
    names: set[str] = set()
    for node in nodes:
        for g in node_subgraphs(node):
            for inner in g.node:
                names.update(inner.input)
            names.update(subgraph_reads(g.node))
            names.update(o.name for o in g.output)
    return names


def has_op(graph: onnx.GraphProto, *op_types: str, domains: Sequence[str] = DEFAULT_DOMAINS) -> bool:
    """Whether a top-level node of ``graph`` runs one of ``op_types`` (in ``domains``).

    A pass tests for the operator its patterns start from before building its
    :class:`Rewrite` (~0.7 ms for a 150-node model): most models have nothing for most
    passes."""
    return any(n.op_type in op_types and n.domain in domains for n in graph.node)


def other_input(node: onnx.NodeProto, name: str) -> str:
    """The input of a two-input ``node`` that is not ``name`` (a binary operator's other
    operand, whichever side ``name`` is on)."""
    return node.input[1] if node.input[0] == name else node.input[0]


def dataless_tensor(name: str, value: np.ndarray) -> onnx.TensorProto:
    """An initializer with ``value``'s type and dims and no data: the value itself is held
    as an array beside the model (:attr:`~.support.PassContext.arrays`)."""
    return onnx.TensorProto(name=name, data_type=onnx_elem_type(value.dtype), dims=value.shape)


def remove_initializers(graph: onnx.GraphProto, names: set[str]) -> None:
    """Delete the initializers called ``names``, by position: ``RepeatedField.remove``
    compares whole tensors, and rebuilding the field would copy every weight."""
    for i in reversed(range(len(graph.initializer))):
        if graph.initializer[i].name in names:
            del graph.initializer[i]


class Rewrite:
    """Producers, consumers, constants and types of one graph, plus pending edits."""

    def __init__(self, model: onnx.ModelProto, arrays: dict[str, np.ndarray] | None = None) -> None:
        self.model = model
        # Values of data-less initializers created by earlier passes (PassContext.arrays);
        # new ones are added here too.
        self.created = arrays if arrays is not None else {}
        graph = model.graph
        self.graph = graph
        self.producer: dict[str, onnx.NodeProto] = {}
        self.consumers: dict[str, list[onnx.NodeProto]] = {}
        for node in graph.node:
            for name in node.output:
                if name:
                    self.producer[name] = node
            for name in node.input:
                if name:
                    self.consumers.setdefault(name, []).append(node)
        self.graph_outputs = {o.name for o in graph.output}
        # Names that must keep their values: graph outputs and outer-scope reads.
        self.pinned = self.graph_outputs | subgraph_reads(graph.node)
        inputs = {i.name for i in graph.input}
        self.initializers = {t.name: t for t in graph.initializer}
        self.constants = {n for n in self.initializers if n not in inputs}
        self._arrays: dict[str, np.ndarray] = {}
        self.types = {vi.name: vi.type for vi in [*graph.input, *graph.value_info, *graph.output]}
        self.opsets = opset_versions(model)
        self._removed: set[int] = set()
        self._inserted: dict[int, list[onnx.NodeProto]] = {}
        self._new_initializers: list[onnx.TensorProto] = []
        self._names: set[str] | None = None  # every name in the graph, built on first need
        self._counter = itertools.count()
        self._order: dict[int, int] | None = None

    # -- queries -----------------------------------------------------------------------
    def is_constant(self, name: str) -> bool:
        """An initializer the caller cannot override by feeding an input of that name."""
        return name in self.constants

    def array(self, name: str) -> np.ndarray | None:
        """The value of constant ``name``, or ``None`` if it is not a constant.

        Small values are cached; weights are read on each call and not kept, so that a
        pass rewriting many weights (BatchNormalization folding) holds one at a time.
        """
        if name not in self.constants:
            return None
        if name in self._arrays:
            return self._arrays[name]
        if name in self.created:
            return self.created[name]
        try:
            value = tensor_array(self.initializers[name])
        except Exception:
            # Unreadable (bytes that do not match its type and shape, an undefined type):
            # no pattern matches it, and building the graph reports it naming the value.
            return None
        if value.size <= _CACHED_ELEMENTS:
            self._arrays[name] = value
        return value

    def scalar(self, name: str) -> float | None:
        """The value of a one-element floating or integer constant, else ``None``."""
        value = self.array(name)
        if value is None or value.size != 1 or value.dtype.kind not in "fiu":
            return None
        return float(value.reshape(()))

    def sole_consumer(self, name: str) -> onnx.NodeProto | None:
        """The only node reading ``name`` when nothing else needs it (no graph output,
        no subgraph read, one reader, read once); else ``None``."""
        readers = self.consumers.get(name, [])
        if name in self.pinned or len(readers) != 1:
            return None
        node = readers[0]
        if sum(1 for i in node.input if i == name) != 1 or self.is_removed(node):
            return None
        return node

    def feeds_only(self, name: str, node: onnx.NodeProto) -> bool:
        """Whether ``node`` is the :meth:`sole_consumer` of ``name``."""
        return self.sole_consumer(name) is node

    def produced_by(self, name: str, op_type: str) -> onnx.NodeProto | None:
        """The default-domain node of ``op_type`` producing ``name``, if any."""
        node = self.producer.get(name)
        if node is None or node.op_type != op_type or node.domain not in DEFAULT_DOMAINS:
            return None
        return None if self.is_removed(node) else node

    def shape(self, name: str) -> tuple[int | str | None, ...] | None:
        """The inferred shape of ``name`` (ints, symbolic names, None for unknown dims)."""
        if name in self.initializers:
            return tuple(int(d) for d in self.initializers[name].dims)
        tp = self.types.get(name)
        if tp is None or not tp.HasField("tensor_type") or not tp.tensor_type.HasField("shape"):
            return None
        return tuple(
            d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
            for d in tp.tensor_type.shape.dim
        )

    def elem_type(self, name: str) -> int | None:
        """The ONNX element type of ``name`` when known."""
        if name in self.initializers:
            return int(self.initializers[name].data_type)
        tp = self.types.get(name)
        if tp is None or not tp.HasField("tensor_type") or not tp.tensor_type.elem_type:
            return None
        return int(tp.tensor_type.elem_type)

    def dtype(self, name: str) -> np.dtype[Any] | None:
        """The numpy dtype of ``name`` when known."""
        et = self.elem_type(name)
        if et is None:
            return None
        try:
            return np_dtype(et)
        except TypeError:  # a corrupt type code: no pattern matches; the session reports it
            return None

    def opset(self, domain: str = "") -> int:
        """The model's opset version for ``domain`` (0 when not imported)."""
        return self.opsets.get(domain, 0)

    def is_removed(self, node: onnx.NodeProto) -> bool:
        """Whether ``node`` is already part of a recorded replacement."""
        return id(node) in self._removed

    def claimable(self, nodes: Sequence[onnx.NodeProto]) -> bool:
        """Whether none of ``nodes`` belongs to a replacement recorded earlier."""
        return not any(self.is_removed(n) for n in nodes)

    # -- edits -------------------------------------------------------------------------
    def fresh_name(self, base: str) -> str:
        """A value or node name not used anywhere in the graph."""
        if self._names is None:
            self._names = {n for node in self.graph.node for n in [*node.input, *node.output]}
            self._names.update(self.initializers)
        while True:
            name = f"{base}__onyxrt{next(self._counter)}"
            if name not in self._names:
                self._names.add(name)
                return name

    def add_initializer(self, base: str, value: np.ndarray) -> str:
        """A new constant holding ``value``; returns its (fresh) name. The model's tensor
        carries name, type and dims; the value itself goes to :attr:`created`."""
        name = self.fresh_name(base)
        value = np.asarray(value)
        tensor = dataless_tensor(name, value)
        self.created[name] = value
        self._new_initializers.append(tensor)
        self.initializers[name] = tensor
        self.constants.add(name)
        return name

    def replace(self, pattern: Sequence[onnx.NodeProto], new_nodes: Sequence[onnx.NodeProto]) -> None:
        """Remove ``pattern`` and put ``new_nodes`` where its last node (in graph order)
        was. The caller guarantees the pattern's intermediate values have no other readers."""
        if not self.claimable(pattern):
            raise ValueError("overlapping rewrites")
        if self._order is None:  # the node list does not change before commit
            self._order = {id(n): i for i, n in enumerate(self.graph.node)}
        order = self._order
        last = max(pattern, key=lambda n: order[id(n)])
        self._removed.update(id(n) for n in pattern)
        self._inserted.setdefault(id(last), []).extend(new_nodes)

    def remove(self, node: onnx.NodeProto) -> None:
        """Drop ``node`` without a replacement (its outputs must be unused or renamed)."""
        self._removed.add(id(node))

    def rename_input(self, old: str, new: str) -> None:
        """Make every reader of ``old`` read ``new`` instead."""
        for node in self.consumers.get(old, []):
            for i, name in enumerate(node.input):
                if name == old:
                    node.input[i] = new
        self.consumers.setdefault(new, []).extend(self.consumers.pop(old, []))

    @property
    def changed(self) -> bool:
        """Whether any edit was recorded."""
        return bool(self._removed or self._new_initializers)

    def commit(self) -> onnx.ModelProto:
        """Apply the recorded edits to the model and return it."""
        if not self.changed:
            return self.model
        nodes: list[onnx.NodeProto] = []
        for node in self.graph.node:
            key = id(node)
            if key not in self._removed:
                nodes.append(node)
            nodes.extend(self._inserted.get(key, []))
        del self.graph.node[:]
        self.graph.node.extend(nodes)
        self.graph.initializer.extend(self._new_initializers)
        used = {n for node in nodes for n in node.input} | subgraph_reads(nodes) | self.graph_outputs
        # Constants only the removed nodes read are dropped with them.
        remove_initializers(self.graph, self.constants - used)
        return self.model

    def require_domain(self, domain: str, version: int) -> None:
        """Import ``domain`` at ``version`` (fused operators live in their own domain)."""
        if domain not in self.opsets:
            self.model.opset_import.append(onnx.helper.make_opsetid(domain, version))
            self.opsets[domain] = version
