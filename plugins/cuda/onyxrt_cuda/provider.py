"""``CUDAExecutionProvider``: the shared GPU provider, on the CUDA build of CuPy."""

from __future__ import annotations

from typing import ClassVar

from onyxrt_gpu.cupy_loader import CUDA
from onyxrt_gpu.provider import GPUExecutionProvider

from . import __version__


class CUDAExecutionProvider(GPUExecutionProvider):
    """NVIDIA GPUs through CuPy (cuBLAS via cupy.matmul)."""

    name: ClassVar[str] = "CUDAExecutionProvider"
    vendor: ClassVar[str] = "NVIDIA"
    version: ClassVar[str] = __version__
    vendor_id: ClassVar[int] = 0x10DE
    build: ClassVar[str] = CUDA
    memory_prefix: ClassVar[str] = "cuda"
    dlpack_device_type: ClassVar[int | None] = 2  # kDLCUDA
    device_names: ClassVar[tuple[str, ...]] = ("cuda", "gpu")
