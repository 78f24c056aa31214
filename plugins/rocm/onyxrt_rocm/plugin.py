"""Entry point of onyxrt-rocm: declares ``ROCMExecutionProvider`` to onyxrt (imported lazily)."""

from __future__ import annotations

from onyxrt.hookspecs import ProviderSpec, hookimpl
from onyxrt.protocol import PROTOCOL_VERSION

from . import __version__


def _load():  # type: ignore[no-untyped-def]
    from .provider import ROCMExecutionProvider

    return ROCMExecutionProvider


@hookimpl
def onyxrt_providers() -> list[ProviderSpec]:
    """AMD GPUs through CuPy's HIP build (hipBLAS via cupy.matmul)."""
    return [
        ProviderSpec(
            name="ROCMExecutionProvider",
            factory=_load,
            priority=90,
            protocol_version=PROTOCOL_VERSION,
            package="onyxrt-rocm",
            package_version=__version__,
            device_types=("gpu",),
            description="AMD GPUs through CuPy's HIP build (hipBLAS via cupy.matmul)",
        )
    ]
