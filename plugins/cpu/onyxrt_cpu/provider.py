"""``CPUExecutionProvider``: a kernel-registry provider running numpy kernels on the host."""

from __future__ import annotations

import os
import platform
from collections.abc import Sequence
from typing import Any, ClassVar

from onyxrt.allocator import EXTEND_STRATEGIES, Allocator, ArenaAllocator, HostMemory
from onyxrt.devices import HOST_MEMORY, Device
from onyxrt.options import Option, OptionSchema
from onyxrt.protocol import KernelRegistryProvider, ProbeResult

from . import __version__
from .kernels import registry


class CPUExecutionProvider(KernelRegistryProvider):
    """Runs every node it has a numpy kernel for, in host memory.

    Its allocator (an arena over host memory) backs ``OrtValue`` buffers the runtime
    allocates; kernels themselves produce numpy arrays.
    """

    name: ClassVar[str] = "CPUExecutionProvider"
    vendor: ClassVar[str] = "onyxrt"
    version: ClassVar[str] = __version__
    device_names: ClassVar[tuple[str, ...]] = ("cpu",)
    registry = registry
    option_schema: ClassVar[OptionSchema] = OptionSchema([
        Option("arena_extend_strategy", str, "kNextPowerOfTwo", "how the host arena grows",
               choices=EXTEND_STRATEGIES),
        Option("memory_limit", "size", 0, "bytes the host arena may reserve (0: no limit)",
               minimum=0),
        Option("use_arena", bool, True, "allocate runtime-owned buffers from an arena",
               aliases=("enable_cpu_mem_arena",)),
    ])

    def __init__(self, options: Any = None) -> None:
        super().__init__(options)
        self._allocator = ArenaAllocator(
            HostMemory(),
            strategy=self.options["arena_extend_strategy"],
            limit=self.options["memory_limit"] or None,
            name="CPUExecutionProvider arena",
        )

    @classmethod
    def probe(cls) -> ProbeResult:
        """Always usable: numpy is a dependency of the core."""
        import numpy

        return ProbeResult(True, details={"numpy": numpy.__version__, "cpus": str(os.cpu_count())})

    def devices(self) -> Sequence[Device]:
        """The host CPU."""
        return (Device("cpu", platform.processor() or platform.machine() or "generic",
                       memory_space=HOST_MEMORY),)

    def allocator(self) -> Allocator:
        """The host arena."""
        return self._allocator
