"""A provider that misbehaves on request, for tests of how the core isolates broken plugins.

``FaultyExecutionProvider`` is the toy device provider (its own memory space, Add, Mul and
Relu on float32) plus a set of switches: a test puts fault names into :data:`FAULTS`
before creating a session (creation-time faults) or between runs (run-time faults), and
the fixture in ``test_plugin_failures.py`` empties it afterwards.

Creation-time faults: ``probe_raises``, ``probe_exits`` (``sys.exit()`` from the probe),
``probe_hangs`` (until :data:`RELEASE` is set),
``capability_raises``, ``capability_returns_none``, ``claims_unknown_nodes``,
``fused_overlap``, ``fused_all`` (one fused claim on every node it can run),
``compile_raises``, ``compile_wrong_count``, ``create_kernel_raises``.
Run-time faults: ``compute_raises``, ``compute_too_few``, ``compute_too_many``,
``compute_returns_none``, ``run_start_raises``, ``run_end_raises``,
``transfer_to_device_raises``, ``transfer_to_host_raises``.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
from toy_provider import ToyBuffer, ToyDeviceExecutionProvider, ToyTransfer, plugin_module

from onyxrt.devices import Device
from onyxrt.graph import GraphView, Node
from onyxrt.kernels import Kernel, KernelInfo
from onyxrt.protocol import Capability, FusedClaim, FusedSubgraph, NodeClaim, ProbeResult

FAULTS: set[str] = set()
#: A hung probe waits for this (the test sets it at teardown so no thread is left behind).
RELEASE = threading.Event()

NAME = "FaultyExecutionProvider"
_OPS = {"Add": np.add, "Mul": np.multiply, "Relu": lambda x: np.maximum(x, 0)}


class SpaceTransfer(ToyTransfer):
    """The toy transfer for a device with its own memory space name."""

    def __init__(self, arena: Any, space: str) -> None:
        super().__init__(arena)
        self.space = space

    def can_copy(self, src: Device, dst: Device) -> bool:
        spaces = {src.memory_space, dst.memory_space}
        return spaces == {"cpu", self.space}

    def copy(self, value: Any, src: Device, dst: Device) -> Any:
        if not dst.is_host:
            self.to_device += 1
            return ToyBuffer(np.asarray(value), self.arena)
        self.to_host += 1
        return value._data.copy()


class FaultyTransfer(SpaceTransfer):
    """The transfer of the faulty device, failing one direction on request."""

    def copy(self, value: Any, src: Device, dst: Device) -> Any:
        if "transfer_to_device_raises" in FAULTS and not dst.is_host:
            raise OSError("DMA engine timeout copying to the device")
        if "transfer_to_host_raises" in FAULTS and dst.is_host:
            raise OSError("DMA engine timeout copying to the host")
        return super().copy(value, src, dst)


class _FaultyKernel(Kernel):
    """Wraps a working kernel and fails at compute time as :data:`FAULTS` says."""

    def __init__(self, inner: Kernel, n_outputs: int) -> None:
        self.inner = inner
        self.n_outputs = n_outputs

    def compute(self, *inputs: Any) -> Any:
        if "compute_raises" in FAULTS:
            raise RuntimeError("device fault: illegal instruction")
        if "compute_returns_none" in FAULTS:
            return None
        outs = tuple(self.inner.compute(*inputs))
        if "compute_too_few" in FAULTS:
            return outs[: self.n_outputs - 1]
        if "compute_too_many" in FAULTS:
            return (*outs, outs[0])
        return outs


class _GroupKernel(Kernel):
    """A 'compiled' fused group: interprets its Add/Mul/Relu nodes on toy buffers."""

    def __init__(self, group: FusedSubgraph, provider: FaultyExecutionProvider) -> None:
        self.group = group
        self.arena = provider.arena
        self.constants = group.constant_inputs()

    def compute(self, *inputs: ToyBuffer) -> tuple[ToyBuffer, ...]:
        env: dict[str, np.ndarray] = dict(self.constants)
        env.update(zip(self.group.runtime_inputs, (b._data for b in inputs)))
        for node in self.group.nodes:
            env[node.outputs[0]] = _OPS[node.op_type](*(env[n] for n in node.inputs))
        return tuple(ToyBuffer(np.asarray(env[o]), self.arena) for o in self.group.outputs)


class FaultyExecutionProvider(ToyDeviceExecutionProvider):
    """The toy device provider with switchable faults (see the module docstring)."""

    name: ClassVar[str] = NAME
    device_names: ClassVar[tuple[str, ...]] = ("faulty",)

    def __init__(self, options: Any = None) -> None:
        super().__init__(options)
        self.transfer = FaultyTransfer(self.arena, "faulty:0")

    @classmethod
    def probe(cls) -> ProbeResult:
        if "probe_raises" in FAULTS:
            raise RuntimeError("libfaulty.so: symbol lookup error")
        if "probe_exits" in FAULTS:
            sys.exit("libfaulty.so: fatal driver error, exiting")
        if "probe_hangs" in FAULTS:
            RELEASE.wait(60)
        return ProbeResult(True)

    def devices(self) -> Sequence[Device]:
        return (Device("npu", "faulty", virtual=True, memory_space="faulty:0"),)

    def get_capability(self, graph: GraphView) -> Capability:
        if "capability_raises" in FAULTS:
            raise KeyError("capability table corrupt")
        if "capability_returns_none" in FAULTS:
            return None  # type: ignore[return-value]
        base = super().get_capability(graph)
        mine = [c.node for c in base.claims if isinstance(c, NodeClaim)]
        if "claims_unknown_nodes" in FAULTS:
            return Capability([*base.claims, NodeClaim("ghost"), FusedClaim(("ghost", "phantom"))],
                              base.refusals)
        if "fused_overlap" in FAULTS:
            # add+relu is accepted; relu+mul overlaps it and is rejected whole; the repeated
            # single-node claim on add is ignored.
            claims = [FusedClaim(("add", "relu")), FusedClaim(("relu", "mul")), NodeClaim("add")]
            return Capability(claims, base.refusals)
        if FAULTS & {"fused_all", "compile_raises", "compile_wrong_count"}:
            return Capability([FusedClaim(tuple(mine))] if mine else [], base.refusals)
        return base

    def compile(self, subgraphs: Sequence[FusedSubgraph]) -> Sequence[Kernel]:
        if "compile_raises" in FAULTS:
            raise RuntimeError("compiler crashed: internal error in pass 'tile'")
        kernels = [_GroupKernel(g, self) for g in subgraphs]
        return kernels[:-1] if "compile_wrong_count" in FAULTS else kernels

    def create_kernel(self, node: Node, info: KernelInfo) -> Kernel:
        if "create_kernel_raises" in FAULTS:
            raise MemoryError("no free kernel slots on the device")
        return _FaultyKernel(super().create_kernel(node, info), len(node.outputs))

    def on_run_start(self, run_options: Any) -> None:
        if "run_start_raises" in FAULTS:
            raise RuntimeError("device lost before the run")

    def on_run_end(self, run_options: Any) -> None:
        if "run_end_raises" in FAULTS:
            raise RuntimeError("device lost after the run")


class SerialExecutionProvider(ToyDeviceExecutionProvider):
    """A toy-device provider that cannot run two runs at once, and records whether it
    ever had to: :attr:`max_inside` is the most threads seen inside a run at one time."""

    name: ClassVar[str] = "SerialExecutionProvider"
    device_names: ClassVar[tuple[str, ...]] = ("serial",)
    inside = 0
    max_inside = 0
    runs = 0
    _lock = threading.Lock()

    def __init__(self, options: Any = None) -> None:
        super().__init__(options)
        self.transfer = SpaceTransfer(self.arena, "serial:0")

    def devices(self) -> Sequence[Device]:
        return (Device("npu", "serial", virtual=True, memory_space="serial:0"),)

    def supports_concurrent_runs(self) -> bool:
        return False

    def on_run_start(self, run_options: Any) -> None:
        cls = type(self)
        with cls._lock:
            cls.inside += 1
            cls.runs += 1
            cls.max_inside = max(cls.max_inside, cls.inside)
        time.sleep(0.0005)  # widen the window in which an overlap would be seen

    def on_run_end(self, run_options: Any) -> None:
        cls = type(self)
        with cls._lock:
            cls.inside -= 1


# The plugin modules of fake distributions offering these providers.
FAULTY_PLUGIN = plugin_module("faulty_provider", "FaultyExecutionProvider", 60)
SERIAL_PLUGIN = plugin_module("faulty_provider", "SerialExecutionProvider", 55)
