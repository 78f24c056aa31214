"""``ROCMExecutionProvider``: the shared GPU provider, on the HIP build of CuPy."""

from __future__ import annotations

from typing import ClassVar

from onyxrt_gpu.cupy_loader import HIP
from onyxrt_gpu.provider import GPUExecutionProvider

from . import __version__


class ROCMExecutionProvider(GPUExecutionProvider):
    """AMD GPUs through CuPy's HIP build (hipBLAS via cupy.matmul)."""

    name: ClassVar[str] = "ROCMExecutionProvider"
    vendor: ClassVar[str] = "AMD"
    version: ClassVar[str] = __version__
    vendor_id: ClassVar[int] = 0x1002
    build: ClassVar[str] = HIP
    memory_prefix: ClassVar[str] = "rocm"
    dlpack_device_type: ClassVar[int | None] = 10  # kDLROCM
    device_names: ClassVar[tuple[str, ...]] = ("rocm", "gpu")
