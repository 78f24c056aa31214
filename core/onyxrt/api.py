"""Module-level functions of onnxruntime's API: provider and device listings, versions,
process-wide switches (telemetry, provider libraries). The introspection functions only
``onnxruntime.capi`` has are :mod:`onyxrt.capi.introspection`."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._version import __version__
from .devices import Device, EpDevice
from .discovery import catalog
from .errors import InvalidArgument

if TYPE_CHECKING:
    pass

__all__ = [
    "get_available_providers",
    "get_all_providers",
    "get_device",
    "get_ep_devices",
    "get_hardware_devices",
    "get_version_string",
    "get_build_info",
    "cuda_version",
    "disable_telemetry_events",
    "enable_telemetry_events",
    "has_collective_ops",
    "preload_dlls",
    "print_debug_info",
    "register_execution_provider_library",
    "unregister_execution_provider_library",
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
    """``"GPU"`` when a usable provider drives a GPU, else ``"CPU"`` — onnxruntime's two
    answers — followed by ``"-NPU"`` when an NPU provider is usable too
    (``"CPU-NPU"``), as onnxruntime appends its accelerators (``"GPU-DML"``)."""
    cat = catalog()
    kinds = {t for name in cat.available() for t in cat.specs[name].device_types}
    device = "GPU" if "gpu" in kinds else "CPU"
    return device + "-NPU" if "npu" in kinds else device


def get_ep_devices() -> list[EpDevice]:
    """One entry per (provider, device): usable providers with their devices, and
    unusable ones with the reason (``state``/``reason``) so nothing is hidden."""
    return catalog().ep_devices()


def get_version_string() -> str:
    """onyxrt's version."""
    return __version__


def get_build_info() -> str:
    """A one-line description of the installed core and providers, in onnxruntime's
    form (``"onyxrt Build Info: version=..., providers: ..."``)."""
    cat = catalog()
    parts = [f"{n} ({cat.specs[n].package} {cat.specs[n].package_version})" for n in cat.names()]
    return f"onyxrt Build Info: version={get_version_string()}, providers: " + ", ".join(parts)


def get_hardware_devices() -> list[Device]:
    """The distinct devices of the usable providers (onnxruntime's ``OrtHardwareDevice``
    list): the host CPU first."""
    seen: list[Device] = []
    for ep in get_ep_devices():
        if ep.state == "usable" and ep.device not in seen:
            seen.append(ep.device)
    seen.sort(key=lambda d: d.type != "cpu")
    return seen


def cuda_version() -> str:
    """The CUDA version the usable CUDA provider runs on ("" when there is none), as
    onnxruntime's ``onnxruntime.cuda_version`` (read lazily: it asks the provider)."""
    cat = catalog()
    for name in cat.available():
        if "gpu" in cat.specs[name].device_types:
            details = cat.status(name).details
            for key in ("cuda_runtime", "cuda", "runtime"):
                if details.get(key):
                    return str(details[key])
    return ""


def disable_telemetry_events() -> None:
    """Kept for onnxruntime code that calls it first thing: onyxrt sends no telemetry, so
    there is nothing to disable."""


def enable_telemetry_events() -> None:
    """Kept for onnxruntime compatibility: onyxrt sends no telemetry, ever."""


def has_collective_ops() -> bool:
    """Whether collective (multi-device communication) operators are built in: no."""
    return False


def preload_dlls(cuda: bool = True, cudnn: bool = True, msvc: bool = True, directory: Any = None) -> None:
    """Kept for onnxruntime compatibility. onyxrt's GPU providers load their libraries
    through CuPy when first probed; ``onyxrt doctor`` says which library is missing, if
    any. Nothing needs preloading."""


def print_debug_info() -> None:
    """Print what onnxruntime's ``print_debug_info`` is asked for: versions, every
    installed provider with its state and, for unusable ones, why."""
    cat = catalog()
    import onnx

    print(f"onyxrt {get_version_string()} (python {sys.version.split()[0]}, onnx {onnx.__version__})")
    for name in cat.names():
        status = cat.status(name)
        state = "usable" if status.usable else f"not usable: {status.reason}"
        print(f"  {name} ({status.package} {status.package_version}): {state}")
    for failure in cat.failures:
        print(f"  plugin {failure.entry_point} ({failure.package}) failed: {failure.error}")


def register_execution_provider_library(registration_name: str, path: str) -> None:
    """Load providers from an onyxrt plugin that is not installed as a package: ``path`` is
    a module name (``"mypkg.plugin"``) or a ``.py`` file defining the
    ``onyxrt_providers`` hook (what an ``onyxrt.providers`` entry point names). Its
    providers join :func:`get_available_providers` under ``registration_name``.

    onnxruntime's native plugin libraries (``.so``/``.dll``/``.dylib``) cannot be loaded:
    onyxrt providers are Python packages (see docs/writing-a-provider.md).
    """
    text = str(path)
    if Path(text).suffix.lower() in (".so", ".dll", ".dylib", ".pyd") or ".so." in Path(text).name:
        raise InvalidArgument(
            f"register_execution_provider_library({registration_name!r}, {text!r}): this is a "
            "native onnxruntime plugin library, which onyxrt cannot load. onyxrt providers are "
            "Python packages: pip install the provider's onyxrt package, or pass the module "
            "name or .py file of an onyxrt plugin."
        )
    if text.endswith(".py"):
        file = Path(text)
        if not file.is_file():
            raise InvalidArgument(f"register_execution_provider_library: no such file {text!r}")
        module_name = f"onyxrt_registered_{registration_name}"
        spec = importlib.util.spec_from_file_location(module_name, file)
        assert spec is not None and spec.loader is not None
        loader = spec.loader

        def load() -> Any:
            module = importlib.util.module_from_spec(spec)
            loader.exec_module(module)
            return module
    else:

        def load() -> Any:
            return importlib.import_module(text)

    catalog().register_library(registration_name, load, text)


def unregister_execution_provider_library(registration_name: str) -> None:
    """Forget the providers :func:`register_execution_provider_library` added under
    ``registration_name`` (sessions already created keep theirs)."""
    catalog().unregister_library(registration_name)
