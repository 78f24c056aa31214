"""``ModelCompiler``: onnxruntime's compile API (a model prepared ahead of time for the
providers of a ``SessionOptions``), and the small classes around it.

onnxruntime's compiling providers (TensorRT, QNN, OpenVINO...) replace the nodes they take
with ``EPContext`` nodes holding their compiled blobs, so later sessions skip compiling.
onyxrt's compiling provider (the simulated NPU) keeps a compile cache keyed on the model
instead, so no ``EPContext`` nodes are written: the compiled model is the input model,
optimized at ``graph_optimization_level`` for the session's providers (what onnxruntime
writes for the parts no provider compiles), with initializers placed as asked
(``external_initializers_file_path``/``_size_threshold``, or
``get_initializer_location_func``). ``OrtCompileApiFlags.ERROR_IF_NO_NODES_COMPILED``
therefore always raises :class:`~onyxrt.errors.CompileError` (a ``Fail``, as onnxruntime
raises when nothing compiles), saying why.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Callable
from typing import Any

import onnx

from .errors import CompileError, InvalidArgument
from .model_saving import discard_stale_file, fill_created_weights
from .ortvalue import OrtValue
from .session_options import GraphOptimizationLevel, SessionOptions

__all__ = [
    "ModelCompiler",
    "OrtCompileApiFlags",
    "OrtEpContextData",
    "OrtEpContextDataBuffer",
    "OrtExternalInitializerInfo",
]


class OrtCompileApiFlags(enum.IntFlag):
    """Flags of :class:`ModelCompiler` (onnxruntime's values)."""

    NONE = 0
    ERROR_IF_NO_NODES_COMPILED = 1
    ERROR_IF_OUTPUT_FILE_EXISTS = 2


class OrtExternalInitializerInfo:
    """Where an initializer's bytes live outside the model: file, offset, size."""

    def __init__(self, filepath: str, file_offset: int, byte_size: int) -> None:
        self._filepath, self._offset, self._size = str(filepath), int(file_offset), int(byte_size)

    def filepath(self) -> str:
        """The external file (relative to the model's folder)."""
        return self._filepath

    def file_offset(self) -> int:
        """Where the bytes start in the file."""
        return self._offset

    def byte_size(self) -> int:
        """How many bytes."""
        return self._size


class OrtEpContextData:
    """A compiled blob a provider hands to the EP-context write function."""

    def __init__(self, data: bytes) -> None:
        self._data = bytes(data)

    def size(self) -> int:
        """Bytes in the blob."""
        return len(self._data)

    def read(self) -> bytes:
        """The blob."""
        return self._data


class OrtEpContextDataBuffer:
    """A buffer the EP-context read function fills for a provider."""

    def __init__(self, max_size: int = 0) -> None:
        self._max = int(max_size)
        self._data: bytearray | None = None

    def max_size(self) -> int:
        """The most bytes the buffer may take."""
        return self._max

    def allocate(self, size: int) -> None:
        """Make room for ``size`` bytes."""
        if self._max and size > self._max:
            raise InvalidArgument(f"OrtEpContextDataBuffer: {size} bytes exceed max_size {self._max}")
        self._data = bytearray(size)

    def is_allocated(self) -> bool:
        """Whether :meth:`allocate` was called."""
        return self._data is not None

    def size(self) -> int:
        """Bytes allocated."""
        return len(self._data) if self._data is not None else 0

    def write(self, data: bytes, offset: int = 0) -> None:
        """Copy ``data`` into the buffer at ``offset``."""
        if self._data is None:
            raise InvalidArgument("OrtEpContextDataBuffer: allocate() before write()")
        end = offset + len(data)
        if offset < 0 or end > len(self._data):
            raise InvalidArgument(f"OrtEpContextDataBuffer: write of {len(data)} bytes at {offset} is outside the buffer")
        self._data[offset:end] = data


#: (initializer_name, initializer_value, external_info) -> where to store it, or None.
GetInitializerLocationFunc = Callable[[str, OrtValue, "OrtExternalInitializerInfo | None"],
                                      "OrtExternalInitializerInfo | None"]


class ModelCompiler:
    """Compile a model for the providers of ``sess_options`` (see the module doc)."""

    def __init__(
        self,
        sess_options: SessionOptions,
        input_model_path_or_bytes: Any,
        embed_compiled_data_into_model: bool = False,
        external_initializers_file_path: str | os.PathLike[str] | None = None,
        external_initializers_size_threshold: int = 1024,
        flags: int = OrtCompileApiFlags.NONE,
        graph_optimization_level: Any = GraphOptimizationLevel.ORT_DISABLE_ALL,
        get_initializer_location_func: GetInitializerLocationFunc | None = None,
    ) -> None:
        if not isinstance(sess_options, SessionOptions):
            raise InvalidArgument(f"ModelCompiler: sess_options must be a SessionOptions, got {type(sess_options).__name__}")
        if external_initializers_file_path is not None and get_initializer_location_func is not None:
            raise InvalidArgument(
                "ModelCompiler: give external_initializers_file_path or get_initializer_location_func, not both"
            )
        self._options = sess_options
        self._source = input_model_path_or_bytes
        self._embed = bool(embed_compiled_data_into_model)
        self._external_path = os.fspath(external_initializers_file_path) if external_initializers_file_path else None
        self._threshold = int(external_initializers_size_threshold)
        self._flags = OrtCompileApiFlags(int(flags))
        self._level = GraphOptimizationLevel(int(graph_optimization_level))
        self._location_func = get_initializer_location_func
        self._write_func: Callable[[str, OrtEpContextData], None] | None = None
        self._binary_location: tuple[str, str] | None = None

    def set_ep_context_binary_information(self, output_directory: str | os.PathLike[str], model_name: str) -> None:
        """Where compiling providers would put their EPContext binary files: a folder
        (written with a trailing separator, or a path with an extension, as onnxruntime
        requires) and a model name. Recorded; no binaries are produced here."""
        folder = os.fspath(output_directory)
        if not folder or not model_name:
            raise InvalidArgument("ModelCompiler.set_ep_context_binary_information: output_dir or model_name is empty")
        if not folder.endswith((os.sep, "/")) and not os.path.splitext(folder)[1]:
            raise InvalidArgument(
                f"ModelCompiler.set_ep_context_binary_information: output_dir {folder!r} is not a valid "
                "directory; end it with a path separator"
            )
        self._binary_location = (folder, str(model_name))

    def set_ep_context_data_write_func(self, write_func: Callable[[str, OrtEpContextData], None]) -> None:
        """Where compiled blobs go instead of files (none are produced here; see the
        module doc)."""
        self._write_func = write_func

    def clear_ep_context_data_write_func(self) -> None:
        """Forget the function of :meth:`set_ep_context_data_write_func`."""
        self._write_func = None

    def _compiled(self) -> onnx.ModelProto:
        from .session import InferenceSession

        if self._flags & OrtCompileApiFlags.ERROR_IF_NO_NODES_COMPILED:  # see the module doc
            raise CompileError(
                "ModelCompiler: unable to compile any nodes: no node was compiled into an EPContext node: onyxrt's compiling "
                "provider keeps a compile cache instead of EPContext nodes. Drop "
                "ERROR_IF_NO_NODES_COMPILED to write the model optimized for the providers."
            )
        options = _copy_options(self._options, self._level)
        session = InferenceSession(self._source, options)
        model = onnx.ModelProto()
        model.CopyFrom(session._model)
        fill_created_weights(model, session._graph.initializers)
        return model

    def _place_initializers(self, model: onnx.ModelProto, output_path: str | None) -> None:
        if self._location_func is not None:
            for tensor in model.graph.initializer:
                value = OrtValue(onnx.numpy_helper.to_array(tensor))
                info = self._location_func(tensor.name, value, None)
                if info is not None:
                    onnx.external_data_helper.set_external_data(
                        tensor, info.filepath(), offset=info.file_offset(), length=info.byte_size())
                    tensor.ClearField("raw_data")
                    tensor.data_location = onnx.TensorProto.EXTERNAL
        elif self._external_path is not None:
            if output_path is None:
                raise InvalidArgument("ModelCompiler: external initializers need compile_to_file")
            folder = os.path.dirname(os.path.abspath(output_path))
            location = os.path.relpath(os.path.join(folder, self._external_path), folder) \
                if os.path.isabs(self._external_path) else self._external_path
            discard_stale_file(os.path.join(folder, location))
            onnx.external_data_helper.convert_model_to_external_data(
                model, all_tensors_to_one_file=True, location=location, size_threshold=self._threshold,
                convert_attribute=False)

    def compile_to_file(self, output_model_path: str | None = None) -> None:
        """Write the compiled model to ``output_model_path`` (default: the input path with
        ``_ctx.onnx``, as onnxruntime names it)."""
        if output_model_path is None:
            if not isinstance(self._source, (str, os.PathLike)):
                raise InvalidArgument("ModelCompiler.compile_to_file: give an output path for a model given as bytes")
            root, _ = os.path.splitext(os.fspath(self._source))
            output_model_path = root + "_ctx.onnx"
        path = os.fspath(output_model_path)
        if self._flags & OrtCompileApiFlags.ERROR_IF_OUTPUT_FILE_EXISTS and os.path.exists(path):
            raise InvalidArgument(f"ModelCompiler: {path!r} exists (ERROR_IF_OUTPUT_FILE_EXISTS)")
        model = self._compiled()
        self._place_initializers(model, path)
        onnx.save_model(model, path)

    def compile_to_bytes(self) -> bytes:
        """The compiled model, serialized."""
        model = self._compiled()
        self._place_initializers(model, None)
        return bytes(model.SerializeToString())

    def compile_to_stream(self, write_function: Callable[[bytes], None]) -> None:
        """Hand the serialized compiled model to ``write_function`` (in one call)."""
        write_function(self.compile_to_bytes())


def _copy_options(options: SessionOptions, level: GraphOptimizationLevel) -> SessionOptions:
    import copy

    copied = copy.copy(options)
    copied.graph_optimization_level = level
    copied.optimized_model_filepath = ""
    return copied
