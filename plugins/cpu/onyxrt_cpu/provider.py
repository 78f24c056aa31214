"""``CPUExecutionProvider``: a kernel-registry provider running numpy kernels on the host."""

from __future__ import annotations

import os
import platform
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from onyxrt.devices import HOST_MEMORY, Device
from onyxrt.options import Option, OptionSchema
from onyxrt.protocol import KernelRegistryProvider, ProbeResult

from . import __version__, fast_run, memory_guard, native
from .blas_threads import ENV_VAR as POOL_ENV_VAR
from .blas_threads import pool_state, share_pool
from .kernels import registry
from .malloc_tuning import ENV_VAR as MALLOC_ENV_VAR
from .malloc_tuning import prefault_heap, tune_malloc

_NO_ARENA = ("the CPU provider keeps no arena: numpy allocates its buffers, and large ones are "
             "reused through the C heap (see docs/performance.md)")

#: onnxruntime's CPU provider options (its arena settings, as libraries pass them:
#: ``("CPUExecutionProvider", {"arena_extend_strategy": "kSameAsRequested"})``). All are
#: accepted without effect, and logged as such; unknown keys warn (onnxruntime ignores
#: them silently), and fail in strict mode.
CPU_OPTIONS = OptionSchema([
    Option("use_arena", bool, True, "whether buffers come from an arena", no_effect=_NO_ARENA),
    Option("arena_extend_strategy", str, "kNextPowerOfTwo", "how the arena grows",
           choices=("kNextPowerOfTwo", "kSameAsRequested"), no_effect=_NO_ARENA),
    Option("max_mem", int, 0, "arena size limit in bytes (0: none)", minimum=0, no_effect=_NO_ARENA),
    Option("initial_chunk_size_bytes", int, -1, "first arena region (-1: default)", minimum=-1,
           no_effect=_NO_ARENA),
    Option("initial_growth_chunk_size_bytes", int, -1, "first growth (-1: default)", minimum=-1,
           no_effect=_NO_ARENA),
    Option("max_dead_bytes_per_chunk", int, -1, "split threshold (-1: default)", minimum=-1,
           no_effect=_NO_ARENA),
    Option("max_power_of_two_extend_bytes", int, -1, "largest doubling step (-1: default)",
           minimum=-1, no_effect=_NO_ARENA),
], unknown="warn")


class CPUExecutionProvider(KernelRegistryProvider):
    """Runs every node it has a numpy kernel for, in host memory.

    It has no arena: numpy allocates what its kernels produce. onnxruntime's arena options
    (``arena_extend_strategy``, ``use_arena``...) are accepted without effect, so code that
    passes them runs unchanged (see ``CPU_OPTIONS``).
    """

    name: ClassVar[str] = "CPUExecutionProvider"
    vendor: ClassVar[str] = "onyxrt"
    version: ClassVar[str] = __version__
    device_names: ClassVar[tuple[str, ...]] = ("cpu",)
    # QDQ convolutions as QLinearConv: integer kernels where the CPU has AVX-512 VNNI
    # (elsewhere the dequantized float convolutions are faster than its numpy path)
    integer_qdq: ClassVar[bool] = native.QGEMM
    registry = registry
    option_schema: ClassVar[OptionSchema] = CPU_OPTIONS

    @classmethod
    def probe(cls) -> ProbeResult:
        """Always usable: numpy is a dependency of the core."""
        import numpy

        return ProbeResult(True, details={
            "numpy": numpy.__version__,
            "cpus": str(os.cpu_count()),
            "malloc": f"large buffers reused from the heap unless {MALLOC_ENV_VAR}=0 "
                      "(see docs/performance.md)",
            "kernels": native.status(),
            "threads": f"{pool_state()} (see docs/performance.md; {POOL_ENV_VAR}=0 opts out)",
        })

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(options)
        self._devices: tuple[Device, ...] | None = None
        tune_malloc()  # once per process: see malloc_tuning for why
        share_pool()  # once per process: see blas_threads for why
        memory_guard.install()  # the session's memory limits on every numpy allocation
        fast_run.install()  # InferenceSession.run's usual call in one compiled call
        #: the bytes of the outputs of the kernels made so far whose sizes are known (a
        #: free dimension counted as 1): what on_session_created faults in ahead
        self._output_bytes = 0

    def create_kernel(self, node: Any, info: Any) -> Any:
        """The registry's kernel for the node; its outputs' sizes are counted for
        :meth:`on_session_created`."""
        kernel = super().create_kernel(node, info)
        for value_type in info.output_types:
            dtype = None if value_type is None else value_type.dtype
            if dtype is not None and value_type.shape is not None:
                count = 1
                for dim in value_type.shape:
                    count *= dim if isinstance(dim, int) else 1
                self._output_bytes += count * dtype.itemsize
        return kernel

    def on_session_created(self) -> None:
        """Grow the heap the first run will allocate its outputs from (see
        :func:`~onyxrt_cpu.malloc_tuning.prefault_heap`): its page faults at creation
        rather than in the first run."""
        prefault_heap(self._output_bytes)

    def devices(self) -> Sequence[Device]:
        """The host CPU."""
        # Made once: every run asks for it (where each output lives).
        if self._devices is None:
            # platform.machine(), not platform.processor(): on Linux the latter runs
            # `uname -p` in a subprocess (2 ms of every process's first session)
            self._devices = (Device("cpu", platform.machine() or "generic", memory_space=HOST_MEMORY),)
        return self._devices
