"""``SimNPUExecutionProvider``: the protocol methods of a compile-style provider.

Everything device-specific lives in the modules this one wires together:
``capability`` decides what to claim, ``compiler`` and ``cache`` turn each claimed group
into a :class:`~onyxrt_simnpu.program.Program`, ``memory`` holds tensors in device memory.
A vendor writing a real NPU provider keeps this shape and replaces those modules.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from functools import partial
from typing import Any, ClassVar

import numpy as np

from onyxrt.allocator import EXTEND_STRATEGIES, ArenaAllocator
from onyxrt.devices import Device
from onyxrt.graph import GraphView
from onyxrt.kernels import Kernel
from onyxrt.options import Option, OptionSchema
from onyxrt.progress import Progress
from onyxrt.protocol import Capability, ExecutionProvider, FusedSubgraph, ProbeResult

from . import __version__
from .cache import ENTRY_OVERHEAD_BYTES, ProgramCache
from .capability import plan_capability
from .compiler import cache_key, compile_group, program_mismatch
from .memory import NPU_MEMORY_SPACE, DeviceTensor, NpuMemory, SimNPUTransfer
from .program import Program

__all__ = ["SimNPUExecutionProvider", "NpuProgramKernel"]

PRECISIONS = ("fp16", "int8", "fp32")


class NpuProgramKernel(Kernel):
    """One compiled group: runs its program on device tensors.

    The program's weights are charged to device memory for as long as the kernel lives.
    """

    def __init__(self, group: FusedSubgraph, program: Program, provider: SimNPUExecutionProvider) -> None:
        self.group = group
        self.program = program
        self.arena = provider.arena
        # compute receives the group's runtime inputs; the program may take a subset.
        runtime = list(group.runtime_inputs)
        self._take = [runtime.index(name) for name in program.inputs]
        self._logical = [_logical_dtype(group, name) for name in program.outputs]
        weights = program.weight_bytes()
        if weights:
            block = self.arena.allocate(weights)
            weakref.finalize(self, self.arena.free, block)
        self.device_time_us = program.device_time_us(
            float(provider.options["tops"]), float(provider.options["bandwidth_gbps"])
        )

    def compute(self, *inputs: DeviceTensor) -> tuple[DeviceTensor, ...]:
        """Run the program: device tensors in, device tensors out."""
        outs = self.program.run([inputs[i].storage() for i in self._take])
        return tuple(DeviceTensor(o, dt, self.arena) for o, dt in zip(outs, self._logical))


def _logical_dtype(group: FusedSubgraph, name: str) -> np.dtype[Any]:
    vt = group.graph.value_type(name)
    if vt is None or vt.dtype is None:
        raise ValueError(f"{group.name}: output {name!r} has no static type")
    return vt.dtype


class SimNPUExecutionProvider(ExecutionProvider):
    """A simulated NPU: claims maximal groups of supported nodes, compiles each into a
    program with a cost model, keeps tensors in its own memory (a virtual npu device)."""

    name: ClassVar[str] = "SimNPUExecutionProvider"
    vendor: ClassVar[str] = "onyxrt"
    version: ClassVar[str] = __version__
    device_names: ClassVar[tuple[str, ...]] = ("npu", "simnpu")
    # Its int8 mode absorbs QDQ groups, weights' DequantizeLinear included.
    uses_qdq_groups: ClassVar[bool] = True
    option_schema: ClassVar[OptionSchema] = OptionSchema([
        Option("device_id", int, 0, "which NPU (the simulation has one)", minimum=0, maximum=0),
        Option("precision", str, "fp16", "storage and math precision", choices=PRECISIONS),
        Option("memory_limit", "size", 1 << 30, "device memory capacity in bytes", minimum=1,
               aliases=("npu_mem_limit",)),
        Option("arena_extend_strategy", str, "kNextPowerOfTwo", "how the device arena grows",
               choices=EXTEND_STRATEGIES),
        Option("min_subgraph_size", int, 1, "smallest group worth offloading", minimum=1),
        Option("tops", float, 10.0, "simulated compute rate, tera-operations per second",
               minimum=1e-6),
        Option("bandwidth_gbps", float, 50.0, "simulated memory bandwidth, GB/s", minimum=1e-6),
        Option("cache_dir", str, "", "folder for compiled programs ('' disables the cache)",
               aliases=("engine_cache_path",)),
    ])

    def __init__(self, options: Any = None) -> None:
        super().__init__(options)
        self.arena = ArenaAllocator(
            NpuMemory(),
            strategy=self.options["arena_extend_strategy"],
            limit=int(self.options["memory_limit"]),
            initial_region=1 << 20,
            name="SimNPU device memory",
        )
        self.transfer = SimNPUTransfer(self.arena, self.options["precision"])
        # A program's baked weights stay resident, so they fit memory_limit: a bigger
        # cache entry is not one this session could use, and is rejected unread.
        self.cache = ProgramCache(
            self.options["cache_dir"] or None,
            max_entry_bytes=int(self.options["memory_limit"]) + ENTRY_OVERHEAD_BYTES,
        )

    @classmethod
    def probe(cls) -> ProbeResult:
        """Always usable: the device is simulated."""
        return ProbeResult(True, details={"device": "simulated NPU", "version": __version__})

    def devices(self) -> Sequence[Device]:
        """One virtual NPU with its own memory space."""
        return (Device("npu", "onyxrt", virtual=True, memory_space=NPU_MEMORY_SPACE,
                       metadata={"precision": self.options["precision"]}),)

    def get_capability(self, graph: GraphView) -> Capability:
        """Fused claims on maximal supported groups; a reason for every node refused."""
        return plan_capability(graph, self.options)

    def compile(self, subgraphs: Sequence[FusedSubgraph]) -> Sequence[Kernel]:
        """Compile each group (or load it from the cache) into a program kernel, with a
        progress display on stderr when there are many groups (see ``onyxrt.progress``)."""
        kernels = []
        with Progress(len(subgraphs), f"{self.name}: compiling groups") as progress:
            for group in subgraphs:
                key = cache_key(group, self.options, __version__)
                precision = self.options["precision"]
                program = self.cache.load(
                    key, verify=partial(program_mismatch, group=group, precision=precision)
                )
                if program is None:
                    program = compile_group(group, precision)
                    self.cache.store(key, program)
                kernels.append(NpuProgramKernel(group, program, self))
                progress.advance()
        return kernels

    def data_transfer(self) -> SimNPUTransfer:
        """Host ↔ NPU copies (with conversion to storage precision)."""
        return self.transfer

    def allocator(self) -> ArenaAllocator:
        """The device memory arena."""
        return self.arena

    def describe(self, value: Any) -> tuple[tuple[int, ...], np.dtype[Any]]:
        """Shape and logical dtype of a device tensor."""
        return tuple(value.shape), np.dtype(value.dtype)

    def device_time_us(self, kernel: Kernel) -> float | None:
        """The cost model's time for one run of the kernel's program."""
        return kernel.device_time_us if isinstance(kernel, NpuProgramKernel) else None
