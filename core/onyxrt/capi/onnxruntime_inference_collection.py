"""onnxruntime's ``onnxruntime.capi.onnxruntime_inference_collection``: the Python classes
(onnxruntime's ``Session`` base class is onyxrt's :class:`InferenceSession`) and its helpers
``check_and_normalize_provider_args``, ``get_ort_device_type`` and
``get_vendor_id_for_device_type``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import InvalidArgument
from ..iobinding import IOBinding
from ..lora import AdapterFormat
from ..memory_info import OrtDevice, OrtDeviceVendorId
from ..model_compiler import ModelCompiler
from ..ortvalue import OrtValue, copy_tensors
from ..session import InferenceSession
from ..sparse import SparseTensor

Session = InferenceSession

__all__ = [
    "AdapterFormat", "IOBinding", "InferenceSession", "ModelCompiler", "OrtDevice",
    "OrtDeviceVendorId", "OrtValue", "Session", "SparseTensor", "check_and_normalize_provider_args",
    "copy_tensors", "get_ort_device_type", "get_vendor_id_for_device_type",
]


def get_ort_device_type(device_type: str) -> int:
    """onnxruntime's device-type number for a device name (``"cuda"`` → 1)."""
    return OrtDevice.make(device_type, 0).device_type()


def get_vendor_id_for_device_type(device_type: str) -> int:
    """The PCI vendor id a device name implies (``"cuda"`` → NVIDIA's, 0 when none)."""
    return OrtDevice.make(device_type, 0).device_vendor_id()


def check_and_normalize_provider_args(
    providers: Sequence[Any] | None,
    provider_options: Sequence[Mapping[str, Any]] | None,
    available_provider_names: Sequence[str],
) -> tuple[list[str], list[dict[str, str]]]:
    """onnxruntime's normalization of ``providers``/``provider_options``: two parallel
    lists, names and option dicts with string keys and values. A provider missing from
    ``available_provider_names`` is dropped with a warning, as onnxruntime does."""
    import warnings

    if providers is None:
        return [], []
    if not isinstance(providers, Sequence) or isinstance(providers, str):
        raise InvalidArgument("'providers' should be a sequence.")
    if provider_options is not None:
        if not isinstance(provider_options, Sequence) or isinstance(provider_options, str):
            raise InvalidArgument("'provider_options' should be a sequence.")
        if len(provider_options) != len(providers):
            raise InvalidArgument("'providers' and 'provider_options' should be the same length if both are given")
        if not all(isinstance(o, Mapping) for o in provider_options):
            raise InvalidArgument("Each element of 'provider_options' should be a dict.")
    names: list[str] = []
    options: list[dict[str, str]] = []
    for i, entry in enumerate(providers):
        if isinstance(entry, str):
            name, given = entry, dict(provider_options[i]) if provider_options else {}
        elif isinstance(entry, (tuple, list)) and len(entry) == 2 and isinstance(entry[0], str):
            if provider_options is not None:
                raise InvalidArgument("'providers' should not contain options when 'provider_options' is given")
            name, given = entry[0], dict(entry[1] or {})
        else:
            raise InvalidArgument(f"'providers' values must be str or (str, dict) tuples, got {entry!r}")
        if name not in available_provider_names:
            warnings.warn(
                f"Specified provider '{name}' is not in available provider names. "
                f"Available providers: {', '.join(available_provider_names)}",
                stacklevel=2,
            )
            continue
        if name in names:
            warnings.warn(f"Duplicate provider '{name}' encountered, ignoring.", stacklevel=2)
            continue
        names.append(name)
        options.append({str(k): str(v) for k, v in given.items()})
    return names, options
