"""Module-level functions of onnxruntime's API: provider and device listings, versions."""

from __future__ import annotations

from .devices import EpDevice
from .discovery import catalog

__all__ = [
    "get_available_providers",
    "get_all_providers",
    "get_device",
    "get_ep_devices",
    "get_version_string",
    "get_build_info",
]


def get_available_providers() -> list[str]:
    """Providers usable on this machine, highest priority first, CPU last."""
    return catalog().available()


def get_all_providers() -> list[str]:
    """Every installed provider, usable or not, by priority (CPU last).

    ``onyxrt providers`` (and :func:`get_ep_devices`) say why one is not usable.
    """
    return catalog().names()


def get_device() -> str:
    """``"GPU"`` when a usable provider drives a GPU, ``"NPU"`` for an NPU, else ``"CPU"``."""
    cat = catalog()
    kinds = {t for name in cat.available() for t in cat.specs[name].device_types}
    if "gpu" in kinds:
        return "GPU"
    if "npu" in kinds:
        return "NPU"
    return "CPU"


def get_ep_devices() -> list[EpDevice]:
    """One entry per (provider, device): usable providers with their devices, and
    unusable ones with the reason (``state``/``reason``) so nothing is hidden."""
    from .devices import Device

    cat = catalog()
    result: list[EpDevice] = []
    for name in cat.names():
        status = cat.status(name)
        spec = cat.specs[name]
        meta = {"version": status.package_version, "package": status.package,
                "protocol_version": str(status.protocol_version)}
        if not status.usable:
            kind = spec.device_types[0] if spec.device_types else "cpu"
            result.append(EpDevice(name, status.package, Device(kind, "unknown"), meta,
                                   state="not usable", reason=status.reason))
            continue
        try:
            devices = cat.devices(name)
        except Exception as exc:  # a provider whose device query fails is reported, not fatal
            kind = spec.device_types[0] if spec.device_types else "cpu"
            result.append(EpDevice(name, status.package, Device(kind, "unknown"), meta,
                                   state="not usable", reason=f"device query failed: {exc}"))
            continue
        cls = cat.provider_class(name)
        for dev in devices:
            result.append(EpDevice(name, cls.vendor or status.package, dev, meta,
                                   cls.option_schema.defaults()))
    return result


def get_version_string() -> str:
    """onyxrt's version."""
    from . import __version__

    return __version__


def get_build_info() -> str:
    """A one-line description of the installed core and providers."""
    cat = catalog()
    parts = [f"{n} ({cat.specs[n].package} {cat.specs[n].package_version})" for n in cat.names()]
    return f"onyxrt {get_version_string()}; providers: " + ", ".join(parts)
