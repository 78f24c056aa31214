"""Typed errors raised by onyxrt.

Every error a user can cause (a bad model, a bad feed, a bad option, a provider that
cannot be used) is one of these classes, and its message names the file, node, input or
option involved, what was expected, what was found and what to do. Classes that mirror a
Python built-in also derive from it (``InvalidArgument`` is a ``ValueError``), and each
derives from the exception class onnxruntime raises for the same failure
(:mod:`onyxrt.status`; ``onyxrt.capi.onnxruntime_pybind11_state`` under onnxruntime's
names), so code written against onnxruntime's exceptions keeps working:

=========================  ==============================================
onyxrt                     onnxruntime class it is also
=========================  ==============================================
InvalidModel               Fail
ModelFileNotFound          NoSuchFile
ModelNotParsed             InvalidProtobuf
InvalidGraph               InvalidGraph (the same class)
UnknownOperator            InvalidGraph and NotImplemented
InvalidArgument            InvalidArgument (the same class)
NotImplementedOp           NotImplemented
ProviderError              EPFail
KernelError, OutOfMemory   RuntimeException
RunTerminated              Fail
PartitionError             Fail
CompileError               Fail
InvalidSetting             RuntimeError (as onnxruntime raises)
ConfigEntryNotFound        RuntimeError (as onnxruntime raises)
=========================  ==============================================
"""

from __future__ import annotations

from .status import (
    EPFail,
    Fail,
    InvalidProtobuf,
    NoSuchFile,
    NotImplementedStatus,
    RuntimeException,
)

__all__ = [
    "OnyxError",
    "InvalidModel",
    "ModelFileNotFound",
    "ModelNotParsed",
    "InvalidGraph",
    "UnknownOperator",
    "InvalidArgument",
    "InvalidInput",
    "InvalidProviderOption",
    "InvalidSetting",
    "ConfigEntryNotFound",
    "NotImplementedOp",
    "ProviderError",
    "ProviderUnavailable",
    "DiscoveryError",
    "DuplicateProviderError",
    "ProtocolVersionError",
    "PartitionError",
    "CompileError",
    "KernelError",
    "OutOfMemory",
    "ResourceLimitExceeded",
    "RunTerminated",
    "ModelPackageError",
    "InvalidPackage",
    "PackageEntryNotFound",
    "PackageIOError",
    "PackageStateError",
    "PackageContextError",
    "VariantNotRunnable",
    "ProviderOptionsNotApplicable",
    "InvalidAdapter",
    "AdapterFileNotFound",
    "InvalidSparseTensor",
    "UnsafeExternalData",
]


class OnyxError(Exception):
    """Base class of every error onyxrt raises on purpose."""


class InvalidModel(OnyxError, ValueError, Fail):
    """The model could not be read: malformed or truncated bytes, a file that does not
    exist, an IR version or opset this runtime does not support."""


class ModelFileNotFound(InvalidModel, NoSuchFile):
    """The model path names no file."""


class ModelNotParsed(InvalidModel, InvalidProtobuf):
    """The model's bytes are not a valid ONNX protobuf (truncated, empty or another format)."""


class InvalidGraph(InvalidModel):
    """The model parsed but its graph is not runnable: a cycle, a value used before it is
    produced, a duplicate output name."""


class UnsafeExternalData(InvalidModel):
    """An external-data reference points outside the model's folder or past its file."""


class InvalidArgument(OnyxError, ValueError):
    """An argument to an API call is wrong (an unknown output name, a bad option value)."""


class InvalidInput(InvalidArgument):
    """A feed does not match the model: missing, unknown, wrong dtype, rank or shape."""


class InvalidProviderOption(InvalidArgument):
    """A provider option is unknown or its value is outside what the provider accepts."""


class InvalidSetting(InvalidArgument, RuntimeError):
    """A setting onnxruntime checks in its native layer is missing or out of range (a
    logger severity, a config entry, a value of the model's ``ort_config``): a
    RuntimeError, as onnxruntime raises, and an InvalidArgument."""


class ConfigEntryNotFound(InvalidSetting):
    """A session or run config entry that was never set was asked for."""


class NotImplementedOp(OnyxError, NotImplementedError, NotImplementedStatus):
    """No provider in the session can run a node (unknown operator, version or type).

    ``nodes`` names the nodes nobody claimed (when the partitioner raised it).
    """

    def __init__(self, message: str, nodes: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.nodes = nodes


class UnknownOperator(NotImplementedOp, InvalidGraph):
    """A node names an operator its domain does not define (onnxruntime: InvalidGraph)."""


class ProviderError(OnyxError, RuntimeError, EPFail):
    """A provider failed: while being created, claiming nodes, compiling or computing.

    ``provider`` names the provider at fault when one is (a session being created leaves
    that provider out and warns, unless ``session.strict_providers`` is set).
    """

    def __init__(self, message: str, provider: str = "") -> None:
        super().__init__(message)
        self.provider = provider


class ProviderUnavailable(ProviderError):
    """A provider the user asked for is not installed or its probe failed (strict mode)."""


class DiscoveryError(OnyxError):
    """Loading provider plugins from their entry points went wrong."""


class DuplicateProviderError(DiscoveryError):
    """Two installed packages register the same provider name."""


class ProtocolVersionError(DiscoveryError):
    """A plugin implements a provider protocol version this core does not speak."""


class PartitionError(OnyxError, Fail):
    """The graph could not be split between the providers (e.g. CPU fallback disabled)."""


class CompileError(OnyxError, Fail):
    """``ModelCompiler`` could not produce what was asked (e.g. no node compiled under
    ``ERROR_IF_NO_NODES_COMPILED``)."""


class KernelError(OnyxError, RuntimeError, RuntimeException):
    """A kernel raised while computing a node; the message names the node and its inputs."""


class OutOfMemory(OnyxError, MemoryError, RuntimeException):
    """An allocation would exceed a memory limit; the message gives the request and limit."""


class ResourceLimitExceeded(OutOfMemory):
    """A kernel was about to build a tensor larger than ``session.max_tensor_bytes``.

    Raised before the memory is touched; the message names the node, the shape, the
    bytes requested, the limit and how to raise it. ``requested`` and ``limit`` are bytes.
    """

    def __init__(self, message: str, requested: int = 0, limit: int = 0) -> None:
        super().__init__(message)
        self.requested = requested
        self.limit = limit


class RunTerminated(OnyxError, RuntimeError, Fail):
    """A run was stopped because its ``RunOptions.terminate`` was set."""


# -- sparse tensors, LoRA adapters, model packages (onyxrt.sparse, .lora, .model_package) --


class ModelPackageError(OnyxError):
    """Base of the errors model-package code raises."""


class InvalidPackage(ModelPackageError, InvalidArgument):
    """A manifest, component or variant breaks the schema, a path breaks the layout's
    confinement rules, or an argument is wrong (a ValueError, as onnxruntime raises)."""


class PackageEntryNotFound(ModelPackageError, FileNotFoundError):
    """A named component, variant, shared asset or path is not there (onnxruntime raises
    FileNotFoundError for all of these)."""


class PackageIOError(ModelPackageError, OSError):
    """A package file or folder could not be read or written."""


class PackageStateError(ModelPackageError, RuntimeError):
    """The operation is not possible in the package's current state (commit without a
    root, a non-empty destination, a shared asset whose hash does not match)."""


class PackageContextError(ModelPackageError, RuntimeError):
    """A ``ModelPackageContext`` could not open, resolve or select (a RuntimeError, as
    onnxruntime raises); the cause is chained."""


class VariantNotRunnable(ModelPackageError, Fail):
    """The selected variant cannot become a session (no ``model_file``)."""


class ProviderOptionsNotApplicable(ModelPackageError, NotImplementedStatus):
    """The package gives provider options for a provider that takes none from a package
    (the built-in CPU provider, as in onnxruntime)."""


class InvalidAdapter(InvalidModel, RuntimeError):
    """An adapter file could not be read: truncated, corrupt, not an adapter, or holding a
    parameter onnxruntime would refuse. A ``RuntimeError`` too, as onnxruntime raises."""


class AdapterFileNotFound(InvalidAdapter, ModelFileNotFound):
    """The adapter path names no file."""


class InvalidSparseTensor(InvalidArgument, RuntimeError):
    """The arrays given do not make a sparse tensor, or the tensor does not hold what was
    asked of it. A ``RuntimeError`` too, as onnxruntime raises."""
