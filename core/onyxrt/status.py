"""onnxruntime's status exceptions, one class per status code.

onnxruntime raises its errors as classes of ``onnxruntime.capi.onnxruntime_pybind11_state``
(``Fail``, ``InvalidArgument``, ``NoSuchFile``, ...), and code written against it catches
them by those names. onyxrt's own typed errors (:mod:`onyxrt.errors`) derive from the
class of the matching status, so ``except C.InvalidArgument`` or ``except C.Fail`` keeps
catching what it caught on onnxruntime; :mod:`onyxrt.capi` exports these classes under
onnxruntime's names. ``InvalidArgument`` and ``InvalidGraph`` are onyxrt's classes of the
same names (defined in :mod:`onyxrt.errors`), so they are not repeated here.

Each class carries onnxruntime's numeric status ``code``.
"""

from __future__ import annotations

__all__ = [
    "Fail",
    "NoSuchFile",
    "NoModel",
    "EngineError",
    "RuntimeException",
    "InvalidProtobuf",
    "ModelLoaded",
    "NotImplementedStatus",
    "EPFail",
    "ModelLoadCanceled",
    "ModelRequiresCompilation",
    "NotFound",
    "DeviceReset",
]


class Fail(Exception):
    """onnxruntime's FAIL (1): a failure with no more specific status."""

    code = 1


class NoSuchFile(Exception):
    """onnxruntime's NO_SUCHFILE (3): the model file does not exist."""

    code = 3


class NoModel(Exception):
    """onnxruntime's NO_MODEL (4)."""

    code = 4


class EngineError(Exception):
    """onnxruntime's ENGINE_ERROR (5)."""

    code = 5


class RuntimeException(Exception):
    """onnxruntime's RUNTIME_EXCEPTION (6): a node failed while running."""

    code = 6


class InvalidProtobuf(Exception):
    """onnxruntime's INVALID_PROTOBUF (7): the model bytes do not parse."""

    code = 7


class ModelLoaded(Exception):
    """onnxruntime's MODEL_LOADED (8)."""

    code = 8


class NotImplementedStatus(Exception):
    """onnxruntime's NOT_IMPLEMENTED (9): no kernel for a node. Exported by
    :mod:`onyxrt.capi` as ``NotImplemented``, onnxruntime's name (which would shadow
    Python's ``NotImplemented`` constant here)."""

    code = 9


NotImplementedStatus.__name__ = NotImplementedStatus.__qualname__ = "NotImplemented"


class EPFail(Exception):
    """onnxruntime's EP_FAIL (11): an execution provider failed."""

    code = 11


class ModelLoadCanceled(Exception):
    """onnxruntime's MODEL_LOAD_CANCELED (12)."""

    code = 12


class ModelRequiresCompilation(Exception):
    """onnxruntime's MODEL_REQUIRES_COMPILATION (13)."""

    code = 13


class NotFound(Exception):
    """onnxruntime's NOT_FOUND (14)."""

    code = 14


class DeviceReset(Exception):
    """onnxruntime's device-reset status (a GPU device was reset under a session)."""

    code = 15
