"""Every public name of onnxruntime's ``onnxruntime.capi.onnxruntime_pybind11_state``
that onyxrt provides (docs/migrating-from-onnxruntime.md lists each, and the few left
out with the reason).

The exception classes are onnxruntime's status classes (:mod:`onyxrt.status`);
``InvalidArgument`` and ``InvalidGraph`` are onyxrt's own classes of those names, and every
typed error onyxrt raises derives from the class onnxruntime raises for the same failure,
so ``except C.Fail`` or ``except C.InvalidArgument`` keeps working.
"""

from __future__ import annotations

import types

import onnx.defs

from ..api import (
    disable_telemetry_events,
    enable_telemetry_events,
    get_all_providers,
    get_available_providers,
    get_build_info,
    get_device,
    get_ep_devices,
    get_hardware_devices,
    get_version_string,
    has_collective_ops,
    register_execution_provider_library,
    unregister_execution_provider_library,
)
from ..devices import Device as OrtHardwareDevice
from ..devices import EpDevice as OrtEpDevice
from ..devices import OrtHardwareDeviceType, OrtSyncStream
from ..errors import InvalidArgument, InvalidGraph
from ..iobinding import IOBinding as SessionIOBinding
from ..logs import (
    set_default_logger_callback,
    set_default_logger_severity,
    set_default_logger_verbosity,
)
from ..lora import AdapterFormat, LoraAdapter
from ..memory_info import (
    ArenaExtendStrategy,
    OrtAllocatorType,
    OrtArenaCfg,
    OrtDevice,
    OrtDeviceMemoryType,
    OrtMemoryInfo,
    OrtMemoryInfoDeviceType,
    OrtMemType,
    create_and_register_allocator,
    create_and_register_allocator_v2,
)
from ..model_compiler import (
    ModelCompiler,
    OrtCompileApiFlags,
    OrtEpContextData,
    OrtEpContextDataBuffer,
    OrtExternalInitializerInfo,
)
from ..model_package import ModelPackage, ModelPackageWriteMode
from ..model_package_selection import (
    ModelPackageComponentContext,
    ModelPackageContext,
    ModelPackageOptions,
)
from ..ortvalue import OrtValue, OrtValueVector, copy_tensors
from ..placement import OrtEpAssignedNode, OrtEpAssignedSubgraph
from ..seeding import set_seed
from ..session import InferenceSession, ModelMetadata, NodeArg
from ..session_options import (
    ExecutionMode,
    ExecutionOrder,
    GraphOptimizationLevel,
    OrtExecutionProviderDevicePolicy,
    RunOptions,
    SessionOptions,
)
from ..sparse import (
    OrtSparseFormat,
    SparseBlockSparseView,
    SparseCooView,
    SparseCsrView,
    SparseTensor,
)
from ..status import (
    DeviceReset,
    EngineError,
    EPFail,
    Fail,
    InvalidProtobuf,
    ModelLoadCanceled,
    ModelLoaded,
    ModelRequiresCompilation,
    NoModel,
    NoSuchFile,
    NotFound,
    RuntimeException,
)
from ..status import NotImplementedStatus as NotImplemented  # noqa: A001  (onnxruntime's name)
from ..threads import set_global_thread_pool_sizes
from .introspection import (
    KernelDefInfo,
    OrtCompiledModelCompatibility,
    OrtDeviceEpIncompatibilityReason,
    get_all_operator_schema,
    get_all_opkernel_def,
    get_compatibility_info_from_model,
    get_compatibility_info_from_model_bytes,
    get_hardware_device_ep_incompatibility_details,
    get_model_compatibility_for_ep_devices,
    get_registered_ep_kernel_defs,
    is_dlpack_uint8_tensor,
)

kNextPowerOfTwo = ArenaExtendStrategy.kNextPowerOfTwo
kSameAsRequested = ArenaExtendStrategy.kSameAsRequested


class SessionObjectInitializer:
    """onnxruntime's handle for default session and run options (its
    ``get_session_initializer()``): ``SessionObjectInitializer()`` converts to a fresh
    :class:`SessionOptions` or :class:`RunOptions` where onyxrt takes one."""


def get_default_session_options() -> SessionOptions:
    """A fresh :class:`SessionOptions` with onnxruntime's defaults."""
    return SessionOptions()


def get_session_initializer() -> SessionObjectInitializer:
    """A :class:`SessionObjectInitializer` (default session and run options)."""
    return SessionObjectInitializer()


#: ``C.schemadef.OpSchema``: onnx's operator schemas (``get_all_operator_schema`` returns them).
schemadef = types.ModuleType("onyxrt.capi.onnxruntime_pybind11_state.schemadef",
                             "onnx's operator schema types, as onnxruntime's schemadef names them")
schemadef.OpSchema = onnx.defs.OpSchema  # type: ignore[attr-defined]
#: ``C.opkernel.KernelDef``: what ``get_all_opkernel_def`` returns.
opkernel = types.ModuleType("onyxrt.capi.onnxruntime_pybind11_state.opkernel",
                            "kernel definitions, as onnxruntime's opkernel names them")
opkernel.KernelDef = KernelDefInfo  # type: ignore[attr-defined]

__all__ = [
    "AdapterFormat", "ArenaExtendStrategy", "DeviceReset", "EPFail", "EngineError", "ExecutionMode",
    "ExecutionOrder", "Fail", "GraphOptimizationLevel", "InferenceSession", "InvalidArgument",
    "InvalidGraph", "InvalidProtobuf", "LoraAdapter", "ModelCompiler", "ModelLoadCanceled",
    "ModelLoaded", "ModelMetadata", "ModelPackage", "ModelPackageComponentContext", "ModelPackageContext",
    "ModelPackageOptions", "ModelPackageWriteMode", "ModelRequiresCompilation", "NoModel", "NoSuchFile", "NodeArg",
    "NotFound", "NotImplemented", "OrtAllocatorType", "OrtArenaCfg", "OrtCompileApiFlags",
    "OrtCompiledModelCompatibility", "OrtDevice", "OrtDeviceEpIncompatibilityReason",
    "OrtDeviceMemoryType", "OrtEpAssignedNode", "OrtEpAssignedSubgraph", "OrtEpContextData",
    "OrtEpContextDataBuffer", "OrtEpDevice", "OrtExecutionProviderDevicePolicy",
    "OrtExternalInitializerInfo", "OrtHardwareDevice", "OrtHardwareDeviceType", "OrtMemType",
    "OrtMemoryInfo", "OrtMemoryInfoDeviceType", "OrtSparseFormat", "OrtSyncStream", "OrtValue",
    "OrtValueVector", "RunOptions", "RuntimeException", "SessionIOBinding",
    "SessionObjectInitializer", "SessionOptions", "SparseBlockSparseView", "SparseCooView",
    "SparseCsrView", "SparseTensor", "copy_tensors", "create_and_register_allocator",
    "create_and_register_allocator_v2", "disable_telemetry_events", "enable_telemetry_events",
    "get_all_operator_schema", "get_all_opkernel_def", "get_all_providers", "get_available_providers",
    "get_build_info", "get_compatibility_info_from_model", "get_compatibility_info_from_model_bytes",
    "get_default_session_options", "get_device", "get_ep_devices",
    "get_hardware_device_ep_incompatibility_details", "get_hardware_devices",
    "get_model_compatibility_for_ep_devices", "get_registered_ep_kernel_defs",
    "get_session_initializer", "get_version_string", "has_collective_ops", "is_dlpack_uint8_tensor",
    "kNextPowerOfTwo", "kSameAsRequested", "opkernel", "register_execution_provider_library",
    "schemadef", "set_default_logger_callback", "set_default_logger_severity", "set_default_logger_verbosity",
    "set_global_thread_pool_sizes", "set_seed", "unregister_execution_provider_library",
]
