"""The introspection functions only ``onnxruntime.capi._pybind_state`` has: registered
kernels and operator schemas, compiled-model compatibility, and a DLPack capsule's
element type. Exported under onnxruntime's names by
:mod:`onyxrt.capi.onnxruntime_pybind11_state`."""

from __future__ import annotations

import ctypes
import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import field
from typing import TYPE_CHECKING, Any

from ..devices import Device, EpDevice
from ..discovery import catalog
from ..errors import InvalidArgument
from ..records import record

if TYPE_CHECKING:
    import onnx

__all__ = [
    "KernelDefInfo",
    "get_all_opkernel_def",
    "get_registered_ep_kernel_defs",
    "get_all_operator_schema",
    "OrtCompiledModelCompatibility",
    "OrtDeviceEpIncompatibilityReason",
    "get_compatibility_info_from_model",
    "get_compatibility_info_from_model_bytes",
    "get_model_compatibility_for_ep_devices",
    "get_hardware_device_ep_incompatibility_details",
    "is_dlpack_uint8_tensor",
]


@record(frozen=True)
class KernelDefInfo:
    """One registered kernel, as ``onnxruntime.capi`` describes it (``get_all_opkernel_def``)."""

    op_name: str
    domain: str
    version_range: tuple[int, int]
    provider: str
    type_constraints: Mapping[str, list[str]] = field(default_factory=dict)


_OPEN_END = 2147483647  # onnxruntime's "no later version" (INT_MAX)


def _kernel_defs(names: Iterable[str]) -> list[KernelDefInfo]:
    from ..dtypes import onnx_elem_type, type_string
    from ..protocol import KernelRegistryProvider

    cat = catalog()
    result = []
    for name in names:
        cls = cat.provider_class(name)
        registry = getattr(cls, "registry", None)
        if not (isinstance(cls, type) and issubclass(cls, KernelRegistryProvider)) or registry is None:
            continue
        defs = registry.definitions()
        for i, kdef in enumerate(defs):
            following = defs[i + 1] if i + 1 < len(defs) else None
            same_op = following is not None and (following.domain, following.op_type) == (kdef.domain, kdef.op_type)
            end = following.since_version - 1 if same_op and following is not None else _OPEN_END
            constraints = {
                key: sorted(type_string(onnx_elem_type(t)) for t in types)
                for key, types in kdef.types.items()
            }
            result.append(KernelDefInfo(kdef.op_type, kdef.domain or "ai.onnx",
                                        (kdef.since_version, end), name, constraints))
    return result


def get_all_opkernel_def() -> list[KernelDefInfo]:
    """Every kernel of every usable kernel-registry provider."""
    return _kernel_defs(catalog().available())


def get_registered_ep_kernel_defs(ep_name: str) -> list[KernelDefInfo]:
    """The kernels one provider registers."""
    if ep_name not in catalog().available():
        raise InvalidArgument(f"no usable provider named {ep_name!r}; usable: {catalog().available()}")
    return _kernel_defs([ep_name])


def get_all_operator_schema() -> list[onnx.defs.OpSchema]:
    """Every operator schema onyxrt knows: onnx's, every version."""
    import onnx.defs

    return list(onnx.defs.get_all_schemas_with_history())


class OrtCompiledModelCompatibility(enum.IntEnum):
    """Whether a compiled (EP-context) model suits a device (onnxruntime's values)."""

    EP_NOT_APPLICABLE = 0
    EP_SUPPORTED_OPTIMAL = 1
    EP_SUPPORTED_PREFER_RECOMPILATION = 2
    EP_UNSUPPORTED = 3


class OrtDeviceEpIncompatibilityReason(enum.IntFlag):
    """Why a provider cannot use a device (onnxruntime's values)."""

    NONE = 0
    DRIVER_INCOMPATIBLE = 1
    DEVICE_INCOMPATIBLE = 2
    MISSING_DEPENDENCY = 4
    UNKNOWN = 1 << 31


#: Metadata key under which a compiled model records what it was compiled for.
COMPATIBILITY_KEY_PREFIX = "ep_compatibility_info."


def get_compatibility_info_from_model(model_path: Any, ep_type: str) -> str:
    """The compatibility string a compiling provider stored in the model's metadata for
    ``ep_type`` ("" when there is none)."""
    from ..loader import load_model

    return _compatibility_info(load_model(model_path, read_external=False).proto, ep_type)


def get_compatibility_info_from_model_bytes(model_bytes: bytes, ep_type: str) -> str:
    """As :func:`get_compatibility_info_from_model`, from serialized bytes."""
    from ..loader import load_model

    return _compatibility_info(load_model(bytes(model_bytes), read_external=False).proto, ep_type)


def _compatibility_info(model: onnx.ModelProto, ep_type: str) -> str:
    key = COMPATIBILITY_KEY_PREFIX + ep_type
    return next((p.value for p in model.metadata_props if p.key == key), "")


def get_model_compatibility_for_ep_devices(ep_devices: Sequence[EpDevice], compatibility_info: str) -> OrtCompiledModelCompatibility:
    """Whether a model compiled with ``compatibility_info`` suits these devices: onyxrt's
    compiling provider (the simulated NPU) recompiles from its cache key, so a compiled
    model is never required — NOT_APPLICABLE."""
    return OrtCompiledModelCompatibility.EP_NOT_APPLICABLE


def get_hardware_device_ep_incompatibility_details(ep_name: str, hardware_device: Device) -> Any:
    """Why ``ep_name`` cannot use ``hardware_device``: a ``(reasons, notes)`` pair, with
    the provider's probe reason when it is unusable."""
    cat = catalog()
    if ep_name not in cat.names():
        return (OrtDeviceEpIncompatibilityReason.MISSING_DEPENDENCY, f"{ep_name} is not installed")
    status = cat.status(ep_name)
    if not status.usable:
        return (OrtDeviceEpIncompatibilityReason.MISSING_DEPENDENCY, status.reason)
    if hardware_device.type not in cat.specs[ep_name].device_types:
        return (OrtDeviceEpIncompatibilityReason.DEVICE_INCOMPATIBLE,
                f"{ep_name} drives {', '.join(cat.specs[ep_name].device_types)}, not {hardware_device.type}")
    return (OrtDeviceEpIncompatibilityReason.NONE, "")


def is_dlpack_uint8_tensor(capsule: Any) -> bool:
    """Whether a DLPack capsule (or an object exporting ``__dlpack__``) holds uint8 data
    (onnxruntime asks before deciding between bool and uint8). The capsule is only read:
    it can still be imported afterwards."""
    if hasattr(capsule, "__dlpack__"):
        capsule = capsule.__dlpack__()
    dtype = _dlpack_dtype(capsule)
    return dtype == (1, 8, 1)  # kDLUInt, 8 bits, 1 lane


# DLPack's C structs, as far as the element type: DLManagedTensor (and the versioned
# DLManagedTensorVersioned of DLPack 1.x) start with a DLTensor, or version/context/deleter/
# flags before it; DLTensor is data, device (2 x int32), ndim (int32), then the dtype
# (code uint8, bits uint8, lanes uint16).
class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32),
                ("ndim", ctypes.c_int32), ("dtype", _DLDataType)]


_VERSIONED_PREFIX = 8 + 3 * ctypes.sizeof(ctypes.c_void_p) + 8  # version, ctx, deleter, flags


def _dlpack_dtype(capsule: Any) -> tuple[int, int, int] | None:
    """(code, bits, lanes) of the tensor in a DLPack capsule, read in place; None when it
    is not an unconsumed DLPack capsule."""
    api = ctypes.pythonapi
    api.PyCapsule_IsValid.restype = ctypes.c_int
    api.PyCapsule_IsValid.argtypes = [ctypes.py_object, ctypes.c_char_p]
    api.PyCapsule_GetPointer.restype = ctypes.c_void_p
    api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
    for name, offset in ((b"dltensor", 0), (b"dltensor_versioned", _VERSIONED_PREFIX)):
        try:
            valid = api.PyCapsule_IsValid(capsule, name)
        except ctypes.ArgumentError:
            return None
        if valid:
            pointer = api.PyCapsule_GetPointer(capsule, name)
            tensor = _DLTensor.from_address(pointer + offset)
            return (tensor.dtype.code, tensor.dtype.bits, tensor.dtype.lanes)
    return None
