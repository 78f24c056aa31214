"""The placement report: which provider runs each node, and what crossing devices costs.

Every session has one (``session.placement``). It answers the questions onnxruntime
users ask most (USER_PAINS #2–#4): which node ran where, which providers were asked for
and which were used, why a provider refused a node, how many partitions the graph was
split into, and every copy between memory spaces with its size.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from dataclasses import asdict, field
from typing import Any

from .records import record

__all__ = [
    "NodePlacement",
    "FusedGroupRecord",
    "CopyRecord",
    "RefusalRecord",
    "FallbackRecord",
    "PlacementReport",
    "OrtEpAssignedNode",
    "OrtEpAssignedSubgraph",
    "assigned_subgraphs",
]


@record(frozen=True)
class NodePlacement:
    """One node and the provider that runs it (``group`` names its fused group, if any)."""

    node: str
    op_type: str
    provider: str
    group: str | None = None


@record(frozen=True)
class FusedGroupRecord:
    """A fused subgraph compiled by a provider into one kernel."""

    name: str
    provider: str
    nodes: tuple[str, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


@record(frozen=True)
class CopyRecord:
    """A value moved between memory spaces.

    ``per_run`` copies happen on every run (activations, feeds, fetched outputs);
    the others happen once at session creation (initializers placed on a device).
    ``nbytes`` is ``None`` when the value's shape is not known statically.
    """

    value: str
    src: str
    dst: str
    src_provider: str
    dst_provider: str
    nbytes: int | None
    per_run: bool = True


@record(frozen=True)
class RefusalRecord:
    """A node a provider declined, with its reason and category."""

    node: str
    op_type: str
    provider: str
    reason: str
    category: str


@record(frozen=True)
class FallbackRecord:
    """A provider the user asked for that the session could not use."""

    provider: str
    reason: str
    fix: str = ""


@record(frozen=True)
class PlacementReport:
    """Where a session's nodes run and what moves between devices.

    >>> report = session.placement                                   # doctest: +SKIP
    >>> report.nodes_by_provider()                                   # doctest: +SKIP
    {'CPUExecutionProvider': ['conv1', 'relu1', ...]}
    >>> print(report)                                                # doctest: +SKIP
    """

    providers_requested: tuple[str, ...]
    providers_session: tuple[str, ...]
    nodes: tuple[NodePlacement, ...]
    groups: tuple[FusedGroupRecord, ...] = ()
    copies: tuple[CopyRecord, ...] = ()
    refusals: tuple[RefusalRecord, ...] = ()
    fallbacks: tuple[FallbackRecord, ...] = ()
    partitions: int = 0
    #: Provider options the user set that were accepted without effect, as sentences.
    option_notes: tuple[str, ...] = ()
    #: Placement of control-flow bodies, keyed by "<node>/<attribute>".
    subgraphs: Mapping[str, PlacementReport] = field(default_factory=dict)
    #: Shape specializations built so far ("batch=1, seq=128" → their placement): see
    #: :mod:`onyxrt.specialization`.
    specializations: Mapping[str, PlacementReport] = field(default_factory=dict)

    @property
    def providers_used(self) -> tuple[str, ...]:
        """Providers that own at least one node (in session priority order)."""
        used = {n.provider for n in self.nodes}
        for sub in self.subgraphs.values():
            used.update(sub.providers_used)
        return tuple(p for p in self.providers_session if p in used)

    def provider_of(self, node: str) -> str:
        """The provider that runs ``node``."""
        for n in self.nodes:
            if n.node == node:
                return n.provider
        raise KeyError(node)

    def nodes_by_provider(self) -> dict[str, list[str]]:
        """Provider → node names, in execution order."""
        result: dict[str, list[str]] = {}
        for n in self.nodes:
            result.setdefault(n.provider, []).append(n.node)
        return result

    def refusals_for(self, node: str) -> list[RefusalRecord]:
        """Every provider's refusal of ``node``."""
        return [r for r in self.refusals if r.node == node]

    @property
    def copies_per_run(self) -> tuple[CopyRecord, ...]:
        """Copies that happen on every run."""
        return tuple(c for c in self.copies if c.per_run)

    @property
    def copy_bytes_per_run(self) -> int:
        """Bytes copied per run, counting copies whose size is known statically."""
        return sum(c.nbytes or 0 for c in self.copies_per_run)

    def to_dict(self) -> dict[str, Any]:
        """The report as plain data (for JSON, the CLI and tests)."""
        data = asdict(self)
        data["providers_used"] = list(self.providers_used)
        data["copy_bytes_per_run"] = self.copy_bytes_per_run
        data["subgraphs"] = {k: v.to_dict() for k, v in self.subgraphs.items()}
        data["specializations"] = {k: v.to_dict() for k, v in self.specializations.items()}
        return data

    def to_json(self, indent: int | None = 2) -> str:
        """The report as JSON text."""
        return json.dumps(self.to_dict(), indent=indent)

    def summary_lines(self) -> list[str]:
        """A short human-readable summary (what ``str(report)`` prints)."""
        counts = Counter(n.provider for n in self.nodes)
        lines = [
            f"providers requested: {', '.join(self.providers_requested) or '(default)'}",
            f"providers in session: {', '.join(self.providers_session)}",
            f"providers used: {', '.join(self.providers_used)}",
            f"nodes: {len(self.nodes)} ("
            + ", ".join(f"{p}: {c}" for p, c in counts.items())
            + f"), partitions: {self.partitions}",
        ]
        for fb in self.fallbacks:
            lines.append(f"fallback: {fb.provider} not used: {fb.reason}")
        for note in self.option_notes:
            lines.append(f"option without effect: {note}")
        for g in self.groups:
            lines.append(f"fused group {g.name} on {g.provider}: {len(g.nodes)} nodes")
        per_run = self.copies_per_run
        if per_run:
            total = sum(c.nbytes or 0 for c in per_run)
            unknown = sum(1 for c in per_run if c.nbytes is None)
            lines.append(
                f"copies per run: {len(per_run)} ({total} bytes"
                + (f", {unknown} of dynamic size" if unknown else "")
                + ")"
            )
            for c in per_run:
                size = f"{c.nbytes} bytes" if c.nbytes is not None else "dynamic size"
                lines.append(f"  copy {c.value!r}: {c.src} -> {c.dst} ({size})")
        once = [c for c in self.copies if not c.per_run]
        if once:
            lines.append(
                f"initializers copied at creation: {len(once)} "
                f"({sum(c.nbytes or 0 for c in once)} bytes)"
            )
        for sizes, special in self.specializations.items():
            counts_s = Counter(n.provider for n in special.nodes)
            lines.append(f"shape specialization {sizes}: {len(special.nodes)} nodes ("
                         + ", ".join(f"{p}: {c}" for p, c in counts_s.items())
                         + f"), partitions: {special.partitions}, copies per run: {len(special.copies_per_run)}")
        placed = {n.node: n.provider for n in self.nodes}
        for r in self.refusals:
            lines.append(
                f"refused: {r.node} ({r.op_type}) by {r.provider} [{r.category}]: {r.reason}"
                f" -> ran on {placed.get(r.node, '?')}"
            )
        return lines

    def __str__(self) -> str:
        return "\n".join(self.summary_lines())


@record(frozen=True)
class OrtEpAssignedNode:
    """A node in onnxruntime's graph-assignment report: name, domain, operator."""

    name: str
    domain: str
    op_type: str


@record(frozen=True)
class OrtEpAssignedSubgraph:
    """Nodes one provider runs as one unit (a fused group, or a single kernel), as
    ``InferenceSession.get_provider_graph_assignment_info()`` reports them."""

    ep_name: str
    nodes: tuple[OrtEpAssignedNode, ...]

    def get_nodes(self) -> list[OrtEpAssignedNode]:
        """The nodes of this subgraph, in execution order."""
        return list(self.nodes)


def assigned_subgraphs(report: PlacementReport, domains: Mapping[str, str]) -> list[OrtEpAssignedSubgraph]:
    """The placement as onnxruntime's assignment report: one subgraph per fused group,
    one per node a kernel runs alone. ``domains`` gives each node's operator domain."""
    result: list[OrtEpAssignedSubgraph] = []
    seen_groups: dict[str, int] = {}
    for placed in report.nodes:
        node = OrtEpAssignedNode(placed.node, domains.get(placed.node, ""), placed.op_type)
        if placed.group is None:
            result.append(OrtEpAssignedSubgraph(placed.provider, (node,)))
            continue
        index = seen_groups.get(placed.group)
        if index is None:
            seen_groups[placed.group] = len(result)
            result.append(OrtEpAssignedSubgraph(placed.provider, (node,)))
        else:
            current = result[index]
            result[index] = OrtEpAssignedSubgraph(current.ep_name, (*current.nodes, node))
    return result
