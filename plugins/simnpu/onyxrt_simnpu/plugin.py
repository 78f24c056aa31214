"""Entry point of onyxrt-simnpu: declares ``SimNPUExecutionProvider`` to onyxrt.

Registration is cheap: the provider module is imported only when a listing or a session
needs it.
"""

from __future__ import annotations

from onyxrt.hookspecs import ProviderSpec, hookimpl
from onyxrt.protocol import PROTOCOL_VERSION

from . import __version__


def _load():  # type: ignore[no-untyped-def]
    from .provider import SimNPUExecutionProvider

    return SimNPUExecutionProvider


@hookimpl
def onyxrt_providers() -> list[ProviderSpec]:
    """The simulated NPU: a virtual npu device, preferred over GPU and CPU."""
    return [
        ProviderSpec(
            name="SimNPUExecutionProvider",
            factory=_load,
            priority=200,
            protocol_version=PROTOCOL_VERSION,
            package="onyxrt-simnpu",
            package_version=__version__,
            device_types=("npu",),
            description="a simulated NPU: fused subgraphs compiled to programs, own memory",
        )
    ]
