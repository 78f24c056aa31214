"""Entry point of onyxrt-cpu: declares the CPU provider to the core.

Only a spec is returned here; the provider module (and its kernels) is imported when a
session or a listing first needs it.
"""

from __future__ import annotations

import importlib.util

from onyxrt.hookspecs import ProviderSpec, hookimpl
from onyxrt.protocol import PROTOCOL_VERSION

from . import __version__


def _load():  # type: ignore[no-untyped-def]
    from .provider import CPUExecutionProvider

    return CPUExecutionProvider


def _description() -> str:
    """What the provider is, with which build is installed: the compiled kernels
    (``onyxrt_cpu._native``) or the numpy-only build. Found without importing the compiled
    module, so that declaring the provider stays cheap; ``onyxrt providers`` shows it."""
    if importlib.util.find_spec(f"{__package__}._native") is not None:
        return "numpy kernels with compiled inner loops on the host CPU (compiled build)"
    return ("numpy kernels on the host CPU (numpy-only build: the compiled kernels are not "
            "installed; `onyxrt doctor` says how to get them)")


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
            description=_description(),
        )
    ]
