"""onyxrt: run ONNX models across pluggable execution providers.

A drop-in for onnxruntime's Python API (``import onyxrt as ort``) built as a small core
plus provider packages discovered through the ``onyxrt.providers`` entry-point group.
"""

from __future__ import annotations

__version__ = "0.1.0"

from . import errors
from .api import (
    get_all_providers,
    get_available_providers,
    get_build_info,
    get_device,
    get_ep_devices,
    get_version_string,
)
from .devices import Device, EpDevice
from .iobinding import IOBinding
from .logs import set_default_logger_severity
from .ortvalue import OrtValue
from .placement import PlacementReport
from .profiling import ProfileSummary
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

__all__ = [
    "__version__",
    "errors",
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
