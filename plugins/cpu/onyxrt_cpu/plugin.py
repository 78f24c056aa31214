"""Entry point of onyxrt-cpu: declares the CPU provider to the core.

Only a spec is returned here; the provider module (and its kernels) is imported when a
session or a listing first needs it.
"""

from __future__ import annotations

from onyxrt.hookspecs import ProviderSpec, hookimpl
from onyxrt.protocol import PROTOCOL_VERSION

from . import __version__


def _load():  # type: ignore[no-untyped-def]
    from .provider import CPUExecutionProvider

    return CPUExecutionProvider


@hookimpl
def onyxrt_providers() -> list[ProviderSpec]:
    """The CPU provider: lowest priority, always usable."""
    return [
        ProviderSpec(
            name="CPUExecutionProvider",
            factory=_load,
            priority=0,
            protocol_version=PROTOCOL_VERSION,
            package="onyxrt-cpu",
            package_version=__version__,
            device_types=("cpu",),
            description="numpy kernels on the host CPU",
        )
    ]
