"""onyxrt: run ONNX models across pluggable execution providers.

A drop-in for onnxruntime's Python API (``import onyxrt as ort``) built as a small core
plus provider packages discovered through the ``onyxrt.providers`` entry-point group.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from . import capi, errors
from ._version import __version__
from .api import (
    disable_telemetry_events,
    enable_telemetry_events,
    get_all_providers,
    get_available_providers,
    get_build_info,
    get_device,
    get_ep_devices,
    get_version_string,
    has_collective_ops,
    preload_dlls,
    print_debug_info,
    register_execution_provider_library,
    unregister_execution_provider_library,
)
from .capi import onnxruntime_validation
from .devices import Device, EpDevice, OrtHardwareDeviceType, OrtSyncStream
from .iobinding import IOBinding
from .logs import (
    set_default_logger_callback,
    set_default_logger_severity,
    set_default_logger_verbosity,
)
from .options import ProviderOptionWarning
from .ortvalue import OrtValue, copy_tensors
from .placement import OrtEpAssignedNode, OrtEpAssignedSubgraph, PlacementReport
from .profiling import ProfileSummary
from .seeding import set_seed
from .session import (
    InferenceSession,
    ModelMetadata,
    NodeArg,
    PlacementWarning,
    ProviderFallbackWarning,
)
from .session_options import (
    ExecutionMode,
    ExecutionOrder,
    GraphOptimizationLevel,
    OrtExecutionProviderDevicePolicy,
    RunOptions,
    SessionOptions,
)
from .threads import set_global_thread_pool_sizes

#: Names imported when first used (PEP 562): LoRA adapters, model compilation, model
#: packages, sparse tensors and onnxruntime's memory-info classes cost import time most
#: programs never spend on them.
_LAZY = {
    "AdapterFormat": "lora", "LoraAdapter": "lora",
    "ModelCompiler": "model_compiler", "OrtCompileApiFlags": "model_compiler",
    "OrtEpContextData": "model_compiler", "OrtEpContextDataBuffer": "model_compiler",
    "OrtExternalInitializerInfo": "model_compiler",
    "ModelPackage": "model_package", "ModelPackageWriteMode": "model_package",
    "ModelPackageComponentContext": "model_package_selection",
    "ModelPackageContext": "model_package_selection", "ModelPackageOptions": "model_package_selection",
    "OrtSparseFormat": "sparse", "SparseTensor": "sparse",
    "OrtAllocatorType": "memory_info",
    "OrtArenaCfg": "memory_info",
    "OrtDevice": "memory_info",
    "OrtDeviceMemoryType": "memory_info",
    "OrtDeviceVendorId": "memory_info",
    "OrtMemoryInfo": "memory_info",
    "OrtMemoryInfoDeviceType": "memory_info",
    "OrtMemType": "memory_info",
    "create_and_register_allocator": "memory_info",
    "create_and_register_allocator_v2": "memory_info",
}
if TYPE_CHECKING:  # what the lazy names are, for type checkers and documentation tools
    from .lora import AdapterFormat, LoraAdapter
    from .memory_info import (
        OrtAllocatorType,
        OrtArenaCfg,
        OrtDevice,
        OrtDeviceMemoryType,
        OrtDeviceVendorId,
        OrtMemoryInfo,
        OrtMemoryInfoDeviceType,
        OrtMemType,
        create_and_register_allocator,
        create_and_register_allocator_v2,
    )
    from .model_compiler import (
        ModelCompiler,
        OrtCompileApiFlags,
        OrtEpContextData,
        OrtEpContextDataBuffer,
        OrtExternalInitializerInfo,
    )
    from .model_package import ModelPackage, ModelPackageWriteMode
    from .model_package_selection import (
        ModelPackageComponentContext,
        ModelPackageContext,
        ModelPackageOptions,
    )
    from .sparse import OrtSparseFormat, SparseTensor

# onnxruntime's module attributes and class aliases.
version = __version__
package_name = "onyxrt"
#: onnxruntime records here an exception raised while importing its native module; none.
import_capi_exception = None
OrtEpDevice = EpDevice
OrtHardwareDevice = Device
SessionIOBinding = IOBinding


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is not None:
        value = getattr(importlib.import_module(f".{module}", __name__), name)
        globals()[name] = value
        return value
    # Asked of the providers only when read (it may need the CUDA provider's probe).
    if name == "cuda_version":
        from .api import cuda_version

        return cuda_version()
    raise AttributeError(f"module 'onyxrt' has no attribute {name!r}")

__all__ = [
    "__version__",
    "version",
    "package_name",
    "capi",
    "errors",
    "onnxruntime_validation",
    "import_capi_exception",
    "AdapterFormat",
    "LoraAdapter",
    "ModelCompiler",
    "ModelPackage",
    "ModelPackageComponentContext",
    "ModelPackageContext",
    "ModelPackageOptions",
    "ModelPackageWriteMode",
    "OrtCompileApiFlags",
    "OrtEpContextData",
    "OrtEpContextDataBuffer",
    "OrtExternalInitializerInfo",
    "OrtAllocatorType",
    "OrtArenaCfg",
    "OrtDevice",
    "OrtDeviceMemoryType",
    "OrtDeviceVendorId",
    "OrtMemoryInfo",
    "OrtMemoryInfoDeviceType",
    "OrtMemType",
    "OrtEpAssignedNode",
    "OrtEpAssignedSubgraph",
    "OrtEpDevice",
    "OrtHardwareDevice",
    "OrtHardwareDeviceType",
    "OrtSyncStream",
    "OrtSparseFormat",
    "SparseTensor",
    "SessionIOBinding",
    "ProviderOptionWarning",
    "copy_tensors",
    "create_and_register_allocator",
    "create_and_register_allocator_v2",
    "disable_telemetry_events",
    "enable_telemetry_events",
    "has_collective_ops",
    "preload_dlls",
    "print_debug_info",
    "register_execution_provider_library",
    "unregister_execution_provider_library",
    "set_default_logger_callback",
    "set_default_logger_verbosity",
    "set_global_thread_pool_sizes",
    "set_seed",
    "InferenceSession",
    "SessionOptions",
    "RunOptions",
    "NodeArg",
    "ModelMetadata",
    "IOBinding",
    "OrtValue",
    "PlacementReport",
    "ProviderFallbackWarning",
    "PlacementWarning",
    "ProfileSummary",
    "GraphOptimizationLevel",
    "ExecutionMode",
    "ExecutionOrder",
    "OrtExecutionProviderDevicePolicy",
    "Device",
    "EpDevice",
    "get_available_providers",
    "get_all_providers",
    "get_device",
    "get_ep_devices",
    "get_version_string",
    "get_build_info",
    "set_default_logger_severity",
]


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY, "cuda_version"})
