"""``CPUExecutionProvider``: a kernel-registry provider running numpy kernels on the host."""

from __future__ import annotations

import os
import platform
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from onyxrt.devices import HOST_MEMORY, Device
from onyxrt.options import OptionSchema
from onyxrt.protocol import KernelRegistryProvider, ProbeResult

from . import __version__, native
from .blas_threads import ENV_VAR as POOL_ENV_VAR
from .blas_threads import pool_state, share_pool
from .kernels import registry
from .malloc_tuning import ENV_VAR as MALLOC_ENV_VAR
from .malloc_tuning import tune_malloc


class CPUExecutionProvider(KernelRegistryProvider):
    """Runs every node it has a numpy kernel for, in host memory.

    It has no options and no arena: numpy allocates what its kernels produce, so an
    arena option here could only be a silent no-op. (Arena options belong to providers
    that manage device memory; see ``onyxrt.allocator.ArenaAllocator``.)
    """

    name: ClassVar[str] = "CPUExecutionProvider"
    vendor: ClassVar[str] = "onyxrt"
    version: ClassVar[str] = __version__
    device_names: ClassVar[tuple[str, ...]] = ("cpu",)
    registry = registry
    option_schema: ClassVar[OptionSchema] = OptionSchema()

    @classmethod
    def probe(cls) -> ProbeResult:
        """Always usable: numpy is a dependency of the core."""
        import numpy

        return ProbeResult(True, details={
            "numpy": numpy.__version__,
            "cpus": str(os.cpu_count()),
            "malloc": f"large buffers reused from the heap unless {MALLOC_ENV_VAR}=0 "
                      "(see onyxrt_cpu/malloc_tuning.py)",
            "kernels": native.status(),
            "threads": f"{pool_state()} (see onyxrt_cpu/blas_threads.py; {POOL_ENV_VAR}=0 opts out)",
        })

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(options)
        tune_malloc()  # once per process: see malloc_tuning for why
        share_pool()  # once per process: see blas_threads for why

    def devices(self) -> Sequence[Device]:
        """The host CPU."""
        return (Device("cpu", platform.processor() or platform.machine() or "generic",
                       memory_space=HOST_MEMORY),)
