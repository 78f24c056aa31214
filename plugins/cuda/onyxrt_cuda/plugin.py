"""Entry point of onyxrt-cuda: declares ``CUDAExecutionProvider`` to onyxrt (imported lazily)."""

from __future__ import annotations

from onyxrt.hookspecs import ProviderSpec, hookimpl
from onyxrt.protocol import PROTOCOL_VERSION

from . import __version__


def _load():  # type: ignore[no-untyped-def]
    from .provider import CUDAExecutionProvider

    return CUDAExecutionProvider


@hookimpl
def onyxrt_providers() -> list[ProviderSpec]:
    """NVIDIA GPUs through CuPy (cuBLAS via cupy.matmul)."""
    return [
        ProviderSpec(
            name="CUDAExecutionProvider",
            factory=_load,
            priority=100,
            protocol_version=PROTOCOL_VERSION,
            package="onyxrt-cuda",
            package_version=__version__,
            device_types=("gpu",),
            description="NVIDIA GPUs through CuPy (cuBLAS via cupy.matmul)",
        )
    ]
