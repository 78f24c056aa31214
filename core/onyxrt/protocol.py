"""The execution provider protocol: what a provider package implements.

Every ability is an explicit method of :class:`ExecutionProvider`; the core never probes
with ``hasattr``. A provider is one of two styles:

* **kernel-registry** (CPU, CUDA, ROCm): claims single nodes and builds one kernel per
  node from a :class:`~onyxrt.kernels.KernelRegistry`. Subclass
  :class:`KernelRegistryProvider`, set ``registry`` and you are done.
* **compile** (an NPU, TensorRT-like): claims whole connected subgraphs with
  :class:`FusedClaim` and turns each into one kernel in :meth:`ExecutionProvider.compile`.

Lifecycle: the core calls the class's :meth:`~ExecutionProvider.probe` (is it usable
here?), validates the user's options against ``option_schema``, instantiates the class
with the effective options, asks :meth:`~ExecutionProvider.get_capability`, then builds
kernels (or compiles) once, and calls kernels on every run between
:meth:`~ExecutionProvider.on_run_start` and :meth:`~ExecutionProvider.on_run_end`.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import field
from typing import Any, ClassVar, Protocol

import numpy as np

from .allocator import Allocator, AllocatorStats
from .devices import Device
from .graph import Graph, GraphView, Node
from .graph_replay import GraphCapture
from .kernels import Kernel, KernelInfo, KernelRegistry
from .options import OptionSchema
from .records import record

__all__ = [
    "PROTOCOL_VERSION",
    "SUPPORTED_PROTOCOL_VERSIONS",
    "ProbeResult",
    "NodeClaim",
    "FusedClaim",
    "Refusal",
    "Capability",
    "FusedSubgraph",
    "DataTransfer",
    "HostOnlyTransfer",
    "ExecutionProvider",
    "KernelRegistryProvider",
]

#: The protocol version this core implements.
PROTOCOL_VERSION = 1
#: Versions a plugin may declare and still be loaded by this core.
SUPPORTED_PROTOCOL_VERSIONS = frozenset({1})


@record(frozen=True)
class ProbeResult:
    """Whether a provider can run here, and if not exactly why and how to fix it.

    ``details`` carries versions and driver or library messages for ``onyxrt doctor``.
    """

    usable: bool
    reason: str = ""
    fix: str = ""
    details: Mapping[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        if self.usable:
            return "usable"
        return self.reason + (f" (fix: {self.fix})" if self.fix else "")


@record(frozen=True)
class NodeClaim:
    """A claim on one node, run by the provider's kernel for it."""

    node: str


@record(frozen=True)
class FusedClaim:
    """A claim on a connected group of nodes, compiled into one kernel.

    The partitioner rejects the claim whole if any node is already taken, or if fusing
    the group would create a cycle through nodes outside it.
    """

    nodes: tuple[str, ...]

    def __post_init__(self) -> None:
        if not self.nodes:
            raise ValueError("a FusedClaim needs at least one node")


@record(frozen=True)
class Refusal:
    """A node the provider will not run, and why (shown in the placement report).

    ``category`` is one of ``op``, ``version``, ``dtype``, ``shape``, ``attribute``,
    ``memory``, ``policy`` or ``other``.
    """

    node: str
    reason: str
    category: str = "other"


@record(frozen=True)
class Capability:
    """A provider's answer to :meth:`ExecutionProvider.get_capability`."""

    claims: Sequence[NodeClaim | FusedClaim] = ()
    refusals: Sequence[Refusal] = ()


@record(frozen=True)
class FusedSubgraph:
    """A fused group accepted by the partitioner, handed to ``compile``.

    ``inputs`` are the values entering the group, ``outputs`` the values it must return
    (read outside the group, or graph outputs), ``nodes`` the group in topological order.
    Constant inputs (initializers) are given to the compiler once, through
    :meth:`constant_inputs`, to bake into the program; the compiled kernel's ``compute``
    receives only :attr:`runtime_inputs`, in that order, and returns ``outputs`` in order.
    """

    name: str
    nodes: tuple[Node, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    graph: GraphView

    def constant_inputs(self) -> dict[str, Any]:
        """Initializer values among the inputs (weights the compiler bakes in)."""
        return {n: self.graph.initializers[n] for n in self.inputs if self.graph.is_constant(n)}

    @property
    def runtime_inputs(self) -> tuple[str, ...]:
        """The inputs that change from run to run: what the kernel's ``compute`` takes."""
        return tuple(n for n in self.inputs if not self.graph.is_constant(n))


class DataTransfer(Protocol):
    """Moves values between memory spaces."""

    def can_copy(self, src: Device, dst: Device) -> bool:
        """Whether :meth:`copy` handles ``src`` → ``dst`` directly."""
        ...

    def copy(self, value: Any, src: Device, dst: Device) -> Any:
        """Return ``value`` (living on ``src``) as a value living on ``dst``."""
        ...


class HostOnlyTransfer:
    """The transfer of a provider whose values are host numpy values: nothing to move."""

    def can_copy(self, src: Device, dst: Device) -> bool:
        """Only host → host."""
        return src.is_host and dst.is_host

    def copy(self, value: Any, src: Device, dst: Device) -> Any:
        """Host values need no copy."""
        return value


class ExecutionProvider(abc.ABC):
    """Base class of every execution provider.

    Class attributes a subclass sets: ``name`` (e.g. ``"CPUExecutionProvider"``),
    ``vendor``, ``version`` (its package version), ``protocol_version`` and
    ``option_schema``. The constructor receives the *validated* effective options.
    """

    name: ClassVar[str] = ""
    vendor: ClassVar[str] = ""
    version: ClassVar[str] = "0"
    protocol_version: ClassVar[int] = PROTOCOL_VERSION
    option_schema: ClassVar[OptionSchema] = OptionSchema()
    #: Device names users pass to ``OrtValue``/``IOBinding`` for this provider's memory
    #: (e.g. ``("cuda",)``); the provider's device type ("gpu", "npu") always works too.
    device_names: ClassVar[tuple[str, ...]] = ()
    #: The DLPack device type of this provider's memory (2 CUDA, 10 ROCm), if it has one.
    dlpack_device_type: ClassVar[int | None] = None
    #: Whether the provider reads a QDQ model's QuantizeLinear/DequantizeLinear groups to
    #: run quantized arithmetic (an NPU's int8 mode). When no provider of a session does,
    #: the optimizer folds the DequantizeLinear of constant weights into float constants at
    #: creation (a float kernel then sees a constant weight: packed once, not dequantized
    #: and repacked on every run); when one does, those nodes are kept for it.
    uses_qdq_groups: ClassVar[bool] = False
    #: Whether the provider runs a QDQ model's groups faster as integer operators
    #: (``QLinearConv``) than its float kernels run the dequantized group. The optimizer
    #: fuses DequantizeLinear → Conv → QuantizeLinear into QLinearConv only when every
    #: provider of the session says so, as onnxruntime's QDQ transformer fuses only for the
    #: providers with integer kernels (its CPU provider). The CPU provider sets it where its
    #: int8 kernels run (AVX-512 VNNI).
    integer_qdq: ClassVar[bool] = False

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        self.options: dict[str, Any] = (
            dict(options) if options is not None else self.option_schema.defaults()
        )

    # -- discovery -------------------------------------------------------------------
    @classmethod
    def probe(cls) -> ProbeResult:
        """Whether the provider can run on this machine (libraries import, a device is
        present). Cheap and side-effect free; called before instantiation."""
        return ProbeResult(True)

    @abc.abstractmethod
    def devices(self) -> Sequence[Device]:
        """The devices this provider instance drives; the first one runs its nodes."""

    @property
    def device(self) -> Device:
        """The device this instance places values on."""
        return self.devices()[0]

    def effective_options(self) -> Mapping[str, Any]:
        """The options in force (defaults filled in), as ``get_provider_options`` reports."""
        return self.options

    # -- partitioning and kernels ----------------------------------------------------
    @abc.abstractmethod
    def get_capability(self, graph: GraphView) -> Capability:
        """Claim the nodes this provider will run; give a reason for each it refuses.

        Called once per graph (and once per control-flow subgraph), in priority order.
        Nodes already taken by a higher-priority provider, or pinned to another one, are
        marked: ``graph.assigned_provider(name)`` is not None; claims on them are ignored
        (single-node) or rejected whole (fused), so compile-style providers should group
        free nodes only.
        """

    def create_kernel(self, node: Node, info: KernelInfo) -> Kernel:
        """Build the kernel for a node claimed with :class:`NodeClaim`."""
        raise NotImplementedError(f"{self.name} claims no single nodes")

    def host_input_indices(self, node: Node, graph: GraphView) -> frozenset[int]:
        """Inputs of a claimed node that its kernel reads from host memory (shapes, axes)
        even though the provider's device is elsewhere; the plan does not copy them."""
        return frozenset()

    def compile(self, subgraphs: Sequence[FusedSubgraph]) -> Sequence[Kernel]:
        """Turn each fused group into one kernel, in one batched call.

        Each returned kernel's ``compute`` takes the group's ``runtime_inputs`` in order
        (constants come from ``constant_inputs()`` at compile time) and returns its
        ``outputs`` in order.
        """
        raise NotImplementedError(f"{self.name} claims no fused subgraphs")

    # -- memory ----------------------------------------------------------------------
    def data_transfer(self) -> DataTransfer:
        """How values reach and leave this provider's memory."""
        return HostOnlyTransfer()

    def allocator(self) -> Allocator | None:
        """The allocator for buffers on this provider's device (``None``: numpy's)."""
        return None

    def memory_stats(self) -> AllocatorStats | None:
        """Statistics of the provider's allocator, when it has one."""
        alloc = self.allocator()
        return alloc.stats() if alloc is not None else None

    def release_cached_memory(self) -> int:
        """Give cached device memory back; return the bytes released."""
        alloc = self.allocator()
        return alloc.release_cached() if alloc is not None else 0

    def from_dlpack(self, obj: Any) -> Any:
        """Adopt a DLPack tensor living on this provider's device, without a copy
        (``OrtValue.from_dlpack``). Providers whose devices DLPack cannot name keep this."""
        raise NotImplementedError(f"{self.name} does not take DLPack tensors")

    def describe(self, value: Any) -> tuple[tuple[int, ...], np.dtype[Any]]:
        """Shape and dtype of a tensor value living on this provider's device."""
        return tuple(value.shape), np.dtype(value.dtype)

    # -- running -------------------------------------------------------------------
    def supports_concurrent_runs(self) -> bool:
        """Whether two threads may run kernels of this provider at once. If ``False``
        the session serialises its runs."""
        return True

    def on_session_created(self) -> None:
        """Called once when a session whose plan uses this provider has been created (its
        kernels built, its constants placed): the place to wait for work queued during
        creation, such as asynchronous weight uploads."""

    def on_run_start(self, run_options: Any) -> None:
        """Called before each run that uses this provider."""

    def on_run_end(self, run_options: Any) -> None:
        """Called after each run that uses this provider (also after a failed run)."""

    def sync(self) -> None:
        """Wait until work queued on the device has finished."""

    def graph_capture(self) -> GraphCapture | None:
        """How to record this provider's work for a run into a device graph and replay it
        (CUDA graphs), or ``None`` (the default): sessions whose plan qualifies then run as
        one launch per run (see :mod:`onyxrt.graph_replay`)."""
        return None

    def device_time_us(self, kernel: Kernel) -> float | None:
        """Simulated or measured device time of the kernel's last compute, if known."""
        return None


class KernelRegistryProvider(ExecutionProvider):
    """A provider that claims single nodes it has a registered kernel for."""

    registry: ClassVar[KernelRegistry]

    def get_capability(self, graph: GraphView) -> Capability:
        """Claim each node with a kernel for its op, opset version and input types."""
        claims: list[NodeClaim | FusedClaim] = []
        refusals: list[Refusal] = []
        for node in graph.nodes:
            reason, category = self.refusal_reason(graph, node)
            if reason:
                refusals.append(Refusal(node.name, reason, category))
            else:
                claims.append(NodeClaim(node.name))
        return Capability(claims, refusals)

    def refusal_reason(self, graph: Graph, node: Node) -> tuple[str, str]:
        """Why this provider cannot run ``node`` (empty when it can), and the category."""
        kdef, why = self.registry.lookup(node.domain, node.op_type, graph.opset(node.domain))
        if kdef is None:
            return why, ("version" if "version" in why else "op")
        bad_type = kdef.unsupported_type(
            [graph.value_type(n) if n else None for n in node.inputs],
            [graph.value_type(n) if n else None for n in node.outputs],
        )
        if bad_type:
            return bad_type, "dtype"
        refused = kdef.unsupported_node(graph, node)
        return (refused, "attribute") if refused else ("", "")

    def host_input_indices(self, node: Node, graph: GraphView) -> frozenset[int]:
        """The registered kernel's ``host_inputs``."""
        kdef, _ = self.registry.lookup(node.domain, node.op_type, graph.opset(node.domain))
        return kdef.host_inputs if kdef is not None else frozenset()

    def create_kernel(self, node: Node, info: KernelInfo) -> Kernel:
        """Build the registered kernel for ``node``."""
        kdef, why = self.registry.lookup(node.domain, node.op_type, info.opset)
        if kdef is None:
            raise NotImplementedError(why)
        if kdef.since_version != info.since_version:
            info = dataclasses.replace(info, since_version=kdef.since_version)
        return kdef.factory(info)
