"""Which nodes the NPU takes: per-node checks, maximal groups, and the memory budget.

1. **Per node**: the op must be in the NPU's op set and pass its check (dtype, static
   shapes, attribute values) — otherwise a refusal with the reason and its category.
2. **Groups**: supported nodes are grouped, in topological order, into maximal connected
   groups. A node joins the group of one of its producers unless that group already
   reaches it through a node *outside* the group (through the host): fusing it then would
   make the group both feed and consume the host node — a cycle. That is tracked with two
   sets per node: the groups it depends on, and the groups it depends on through outside
   nodes ("tainted").
3. **Size**: groups smaller than ``min_subgraph_size`` stay on CPU (partition thrash costs
   more than it saves), with that reason.
4. **Memory**: weights of every accepted group stay resident in device memory, next to the
   activations of a run. Groups are admitted while their weights fit the budget
   (``memory_limit`` minus a reserve for activations); a group that does not fit is cut
   into consecutive pieces that do, and a node whose own weights do not fit stays on CPU
   with a "memory" refusal — never an out-of-memory error at run time.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from typing import Any

import numpy as np

from onyxrt.graph import Graph, Node
from onyxrt.protocol import Capability, FusedClaim, Refusal
from onyxrt.records import record

from .ops import NPU_OPS, storage_dtype

__all__ = ["plan_capability", "ACTIVATION_RESERVE_FACTOR"]

#: Device memory kept free for activations: this many times the largest tensor a group
#: produces or reads (inputs, outputs and one temporary can be live at once).
ACTIVATION_RESERVE_FACTOR = 3


@record
class _Group:
    index: int
    nodes: list[Node] = field(default_factory=list)


def node_refusal(node: Node, graph: Graph, precision: str) -> tuple[str, str]:
    """Why the NPU cannot run ``node`` (``("", "")`` when it can)."""
    if node.domain not in ("", "ai.onnx"):
        return f"the NPU runs only default-domain ops, not {node.qualified_op}", "op"
    op = NPU_OPS.get(node.op_type)
    if op is None:
        return f"the NPU has no {node.op_type} unit", "op"
    return op.check(node, graph, precision)


class _Reach:
    """Per node: the groups it depends on, and those it depends on *through the host*
    (through a node outside the group) — joining such a group would make a cycle."""

    def __init__(self) -> None:
        self.group_of: dict[str, int] = {}
        self.depends: dict[str, set[int]] = {}
        self.tainted: dict[str, set[int]] = {}

    def upstream(self, pred: Node) -> set[int]:
        """Groups ``pred`` depends on, including its own."""
        own = {self.group_of[pred.name]} if pred.name in self.group_of else set()
        return self.depends[pred.name] | own

    def taint_if_joining(self, preds: list[Node], group: int | None) -> set[int]:
        """Groups a node with producers ``preds`` would reach through the host if it
        joined ``group`` (None: no group)."""
        result: set[int] = set()
        for p in preds:
            result |= self.tainted[p.name]
            result |= self.upstream(p) - ({group} if group is not None else set())
        return result


def _group_nodes(graph: Graph, supported: set[str]) -> list[_Group]:
    reach = _Reach()
    groups: list[_Group] = []
    for node in graph.nodes:
        preds = [graph.producers[i] for i in [*node.inputs, *node.implicit_inputs] if i in graph.producers]
        chosen: int | None = None
        if node.name in supported:
            candidates = [reach.group_of[p.name] for p in preds if p.name in reach.group_of]
            for g in dict.fromkeys(candidates):  # producers' groups, first one that is safe
                if g not in reach.taint_if_joining(preds, g):
                    chosen = g
                    break
            if chosen is None:
                groups.append(_Group(len(groups)))
                chosen = groups[-1].index
            reach.group_of[node.name] = chosen
            groups[chosen].nodes.append(node)
        reach.tainted[node.name] = reach.taint_if_joining(preds, chosen)
        reach.depends[node.name] = set().union(*(reach.upstream(p) for p in preds))
    return groups


def _weight_names(nodes: list[Node], graph: Graph) -> list[str]:
    seen: dict[str, None] = {}
    for node in nodes:
        for name in node.inputs:
            if name and graph.is_constant(name):
                seen.setdefault(name, None)
    return list(seen)


def _stored_bytes(value: Any, precision: str) -> int:
    arr = np.asarray(value)
    return int(arr.size) * storage_dtype(arr.dtype, precision).itemsize


def _largest_tensor(nodes: list[Node], graph: Graph, precision: str) -> int:
    largest = 0
    for node in nodes:
        for name in [*node.inputs, *node.outputs]:
            vt = graph.value_type(name) if name else None
            if vt is not None and vt.static_size is not None and vt.dtype is not None:
                largest = max(largest, vt.static_size * storage_dtype(vt.dtype, precision).itemsize)
    return largest


def plan_capability(graph: Graph, options: Mapping[str, Any]) -> Capability:
    """The NPU's claims on ``graph`` (fused groups) and its refusals, with reasons."""
    precision = str(options["precision"])
    refusals: list[Refusal] = []
    supported: set[str] = set()
    for node in graph.nodes:
        if graph.assigned_provider(node.name) is not None:
            continue  # taken by a higher-priority provider (or pinned elsewhere)
        reason, category = node_refusal(node, graph, precision)
        if reason:
            refusals.append(Refusal(node.name, reason, category))
        else:
            supported.add(node.name)

    min_size = int(options["min_subgraph_size"])
    groups = []
    for group in _group_nodes(graph, supported):
        if len(group.nodes) < min_size:
            why = (f"its NPU group has {len(group.nodes)} node(s), below min_subgraph_size="
                   f"{min_size}; it stays on CPU")
            refusals.extend(Refusal(n.name, why, "policy") for n in group.nodes)
        else:
            groups.append(group)

    claims: list[FusedClaim] = []
    all_nodes = [n for g in groups for n in g.nodes]
    reserve = ACTIVATION_RESERVE_FACTOR * _largest_tensor(all_nodes, graph, precision)
    budget = int(options["memory_limit"]) - reserve
    resident: set[str] = set()  # weights already counted (shared between groups)
    for group in groups:
        piece: list[Node] = []
        for node in group.nodes:
            new = [w for w in _weight_names([node], graph) if w not in resident]
            need = sum(_stored_bytes(graph.initializers[w], precision) for w in new)
            if need > budget:
                # Close the current piece; this node itself may still fit on its own later,
                # but its weights exceed what is left: it stays on CPU.
                claims.extend(_claim(piece, min_size, refusals))
                piece = []
                refusals.append(Refusal(
                    node.name,
                    f"its weights need {need} bytes of NPU memory but only {max(budget, 0)} of "
                    f"memory_limit={options['memory_limit']} remain (after {reserve} bytes "
                    "reserved for activations); it stays on CPU",
                    "memory",
                ))
                continue
            budget -= need
            resident.update(new)
            piece.append(node)
        claims.extend(_claim(piece, min_size, refusals))
    return Capability(claims=claims, refusals=refusals)


def _claim(piece: list[Node], min_size: int, refusals: list[Refusal]) -> list[FusedClaim]:
    if not piece:
        return []
    if len(piece) < min_size:
        why = (f"after splitting for memory its NPU group has {len(piece)} node(s), below "
               f"min_subgraph_size={min_size}; it stays on CPU")
        refusals.extend(Refusal(n.name, why, "memory") for n in piece)
        return []
    return [FusedClaim(tuple(n.name for n in piece))]
