"""Splitting a graph between providers (onnxruntime's rules, for any number of devices).

Providers are asked in the session's priority order (CPU last). Each returns claims:
a single-node claim takes the node if it is still free; a fused claim is rejected whole
if any of its nodes is taken, if it names nodes that do not exist, or if contracting it
into one unit would create a cycle with the units formed so far. Nodes pinned by the user
go to their provider first. A node nobody claims is an error naming every refusal.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Mapping, Sequence
from dataclasses import field

from .discovery import provider_label
from .errors import NotImplementedOp, PartitionError, ProviderError
from .graph import Graph, Node
from .placement import RefusalRecord
from .protocol import Capability, ExecutionProvider, FusedClaim, FusedSubgraph, NodeClaim
from .records import record

__all__ = ["Unit", "Partition", "Partitioner"]

logger = logging.getLogger("onyxrt.partitioner")


@record(eq=False)
class Unit:
    """What the plan schedules: one node, or one fused group, on one provider."""

    provider: int
    node: Node | None = None
    group: FusedSubgraph | None = None

    @property
    def nodes(self) -> tuple[Node, ...]:
        """The graph nodes this unit runs."""
        if self.group is not None:
            return self.group.nodes
        assert self.node is not None
        return (self.node,)


@record
class Partition:
    """The partitioner's result: units in execution order plus what was refused."""

    units: list[Unit]
    assignment: dict[str, int]
    refusals: list[RefusalRecord] = field(default_factory=list)
    partitions: int = 0


class Partitioner:
    """Assigns every node of a graph to one of ``providers`` (priority order)."""

    def __init__(
        self,
        providers: Sequence[ExecutionProvider],
        *,
        pins: Mapping[str, str] | None = None,
        raise_provider_errors: bool = False,
    ) -> None:
        self.providers = list(providers)
        #: node name or op type → provider name the user pinned it to
        self.pins = dict(pins or {})
        #: A provider whose get_capability fails raises ProviderError naming it (a
        #: session then leaves it out and warns) instead of being skipped with refusals.
        self.raise_provider_errors = raise_provider_errors

    def partition(self, graph: Graph) -> Partition:
        """Partition ``graph``; raise NotImplementedOp if a node has no provider."""
        by_name = {n.name: n for n in graph.nodes}
        unit_of: dict[str, int] = {}  # node name → index into `pending_units`
        units: list[Unit] = []
        refusals: list[RefusalRecord] = []
        index_of = {p.name: i for i, p in enumerate(self.providers)}
        pinned = self._pinned_nodes(graph, index_of)

        for pi, provider in enumerate(self.providers):
            # Show the provider what is taken (or pinned elsewhere) so that compile-style
            # providers group free nodes only.
            graph.assigned = {name: self.providers[units[u].provider].name for name, u in unit_of.items()}
            graph.assigned.update(
                (name, self.providers[p].name) for name, p in pinned.items() if p != pi and name not in unit_of
            )
            try:
                capability = provider.get_capability(graph)
                if not isinstance(capability, Capability):
                    raise TypeError(f"get_capability returned {type(capability).__name__}, expected Capability")
            except Exception as exc:  # a faulty plugin must not take the session down
                why = str(exc) if isinstance(exc, TypeError) and str(exc).startswith("get_capability returned") \
                    else f"get_capability raised {type(exc).__name__}: {exc}"
                if self.raise_provider_errors:
                    graph.assigned = {}
                    raise ProviderError(f"{provider_label(provider.name)}: {why}", provider.name) from exc
                logger.warning("%s: %s", provider.name, why)
                for free in graph.nodes:
                    if free.name not in unit_of:
                        refusals.append(RefusalRecord(free.name, free.op_type, provider.name, why, "other"))
                continue
            for r in capability.refusals:
                refused = by_name.get(r.node)
                if refused is not None and r.node not in unit_of:
                    refusals.append(RefusalRecord(r.node, refused.op_type, provider.name, r.reason, r.category))
            for claim in capability.claims:
                if isinstance(claim, NodeClaim):
                    claimed = by_name.get(claim.node)
                    if claimed is None or claimed.name in unit_of:
                        continue
                    if claimed.name in pinned and pinned[claimed.name] != pi:
                        continue
                    unit_of[claimed.name] = len(units)
                    units.append(Unit(pi, node=claimed))
                elif isinstance(claim, FusedClaim):
                    why = self._fused_claim_problem(graph, claim, by_name, unit_of, units, pinned, pi)
                    if why:
                        logger.info("%s: fused claim rejected: %s", provider.name, why)
                        for name in claim.nodes:
                            if name in by_name and name not in unit_of:
                                refusals.append(RefusalRecord(
                                    name, by_name[name].op_type, provider.name,
                                    f"fused claim rejected: {why}", "policy"))
                        continue
                    members = tuple(sorted((by_name[n] for n in claim.nodes), key=lambda n: n.index))
                    group = _make_group(graph, provider.name, members, sum(u.group is not None for u in units))
                    for n in members:
                        unit_of[n.name] = len(units)
                    units.append(Unit(pi, group=group))

        graph.assigned = {}
        missing = [n for n in graph.nodes if n.name not in unit_of]
        if missing:
            lines = []
            for lost in missing[:10]:
                reasons = [f"{r.provider}: {r.reason}" for r in refusals if r.node == lost.name]
                if lost.name in pinned:
                    reasons.append(f"pinned to {self.providers[pinned[lost.name]].name}, which did not claim it")
                lines.append(f"node {lost.name!r} ({lost.qualified_op}): " + ("; ".join(reasons) or "no provider claimed it"))
            more = f" (and {len(missing) - 10} more)" if len(missing) > 10 else ""
            raise NotImplementedOp(
                "no provider in this session can run: " + " | ".join(lines) + more,
                tuple(n.name for n in missing),
            )

        ordered = _order_units(graph, units, unit_of)
        return Partition(
            units=ordered,
            assignment={name: units[i].provider for name, i in unit_of.items()},
            refusals=refusals,
            partitions=_count_partitions(graph, units, unit_of),
        )

    def _pinned_nodes(self, graph: Graph, index_of: Mapping[str, int]) -> dict[str, int]:
        pinned: dict[str, int] = {}
        for key, provider in self.pins.items():
            if provider not in index_of:
                raise PartitionError(
                    f"node pin {key!r} → {provider!r}: that provider is not in this session "
                    f"({', '.join(index_of)})"
                )
            matched = [n for n in graph.nodes if n.name == key or n.op_type == key]
            for n in matched:
                pinned[n.name] = index_of[provider]
        return pinned

    def _fused_claim_problem(
        self,
        graph: Graph,
        claim: FusedClaim,
        by_name: Mapping[str, Node],
        unit_of: Mapping[str, int],
        units: Sequence[Unit],
        pinned: Mapping[str, int],
        pi: int,
    ) -> str:
        names = set(claim.nodes)
        if len(names) != len(claim.nodes):
            return "it names a node twice"
        unknown = [n for n in claim.nodes if n not in by_name]
        if unknown:
            return f"it names nodes that do not exist: {unknown[:5]}"
        taken = [n for n in claim.nodes if n in unit_of]
        if taken:
            return f"nodes already assigned: {taken[:5]}"
        against_pin = [n for n in claim.nodes if n in pinned and pinned[n] != pi]
        if against_pin:
            return f"nodes pinned to another provider: {against_pin[:5]}"
        if _would_cycle(graph, names, unit_of, units):
            return "fusing these nodes would create a cycle through nodes outside the group"
        return ""


def _make_group(graph: Graph, provider: str, members: tuple[Node, ...], n: int) -> FusedSubgraph:
    inside = {o for node in members for o in node.outputs if o}
    inputs: list[str] = []
    for node in members:
        for name in [*node.inputs, *node.implicit_inputs]:
            if name and name not in inside and name not in inputs:
                inputs.append(name)
    member_names = {m.name for m in members}
    graph_outputs = set(graph.outputs)
    outputs = [
        o for node in members for o in node.outputs
        if o and (o in graph_outputs or any(c.name not in member_names for c in graph.consumers.get(o, ())))
    ]
    return FusedSubgraph(
        name=f"{provider}_{graph.name or 'graph'}_{n}",
        nodes=members,
        inputs=tuple(inputs),
        outputs=tuple(outputs),
        graph=graph,
    )


def _consumers(graph: Graph, node: Node) -> list[str]:
    """Names of the nodes reading any output of ``node``."""
    return [c.name for o in node.outputs if o for c in graph.consumers.get(o, ())]


def _would_cycle(
    graph: Graph, names: set[str], unit_of: Mapping[str, int], units: Sequence[Unit]
) -> bool:
    """Whether a path leaves the new group and comes back into it (contracted units
    count as single vertices, so cycles through earlier groups are found too)."""
    by_name = {n.name: n for n in graph.nodes}
    frontier = [c for name in names for c in _consumers(graph, by_name[name]) if c not in names]
    seen: set[str] = set()
    while frontier:
        name = frontier.pop()
        if name in seen:
            continue
        seen.add(name)
        # Entering a fused unit reaches all of its nodes at once.
        members = [m.name for m in units[unit_of[name]].nodes] if name in unit_of else [name]
        for m in members:
            seen.add(m)
            for c in _consumers(graph, by_name[m]):
                if c in names:
                    return True
                if c not in seen:
                    frontier.append(c)
    return False


def _order_units(graph: Graph, units: list[Unit], unit_of: Mapping[str, int]) -> list[Unit]:
    """Units in an order where each runs after the units producing its inputs."""
    producer = {o: unit_of[n.name] for n in graph.nodes for o in n.outputs if o}
    deps: list[set[int]] = [set() for _ in units]
    for ui, unit in enumerate(units):
        for node in unit.nodes:
            for name in [*node.inputs, *node.implicit_inputs]:
                p = producer.get(name)
                if p is not None and p != ui:
                    deps[ui].add(p)
    indegree = [len(d) for d in deps]
    dependents: list[list[int]] = [[] for _ in units]
    for ui, d in enumerate(deps):
        for p in d:
            dependents[p].append(ui)
    # Keep model order where free: key each unit by its first node's topological index.
    first = [min(n.index for n in u.nodes) for u in units]
    ready = [(first[i], i) for i in range(len(units)) if indegree[i] == 0]
    heapq.heapify(ready)
    order: list[Unit] = []
    while ready:
        _, ui = heapq.heappop(ready)
        order.append(units[ui])
        for nxt in dependents[ui]:
            indegree[nxt] -= 1
            if indegree[nxt] == 0:
                heapq.heappush(ready, (first[nxt], nxt))
    if len(order) != len(units):
        raise PartitionError("the fused groups form a cycle; this is a partitioner bug, please report it")
    return order


def _count_partitions(graph: Graph, units: Sequence[Unit], unit_of: Mapping[str, int]) -> int:
    """Connected runs of units on the same provider (what onnxruntime calls partitions)."""
    parent = list(range(len(units)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for node in graph.nodes:
        u = unit_of[node.name]
        for o in node.outputs:
            for c in graph.consumers.get(o, ()) if o else ():
                v = unit_of[c.name]
                if units[u].provider == units[v].provider:
                    parent[find(u)] = find(v)
    return len({find(i) for i in range(len(units))})
