"""LoRA adapters in onnxruntime's ``.onnx_adapter`` file format: ``AdapterFormat`` (read,
build and write adapter files) and ``LoraAdapter`` (an adapter a run can activate).

An adapter file is a FlatBuffers buffer (schema ``onnxruntime/lora/adapter_format/
adapter_schema.fbs``, file identifier ``"TORT"``): an ``Adapter`` table with a format
version (1), an adapter version, a model version and a vector of ``Parameter`` tables
(name, dims, element type, raw little-endian bytes). This module reads and writes that
layout itself (no FlatBuffers dependency), byte for byte as onnxruntime's builder lays it
out, so files travel both ways between onyxrt and onnxruntime.

Everything read is checked against the file's size before it is used: a truncated or
corrupt file raises :class:`InvalidAdapter` naming the file and what is wrong.

Example::

    fmt = AdapterFormat()
    fmt.set_adapter_version(1)
    fmt.set_parameters({"lora_A": OrtValue.ortvalue_from_numpy(a)})
    fmt.export_adapter("tuned.onnx_adapter")

    adapter = LoraAdapter()
    adapter.Load("tuned.onnx_adapter")
    run_options.add_active_adapter(adapter)
"""

from __future__ import annotations

import math
import os
import struct
import sys
from collections.abc import Mapping
from dataclasses import field
from pathlib import Path
from typing import Any, NoReturn

import numpy as np
from onnx import TensorProto

from .dtypes import np_dtype, onnx_elem_type, type_string
from .errors import AdapterFileNotFound, InvalidAdapter, InvalidArgument
from .ortvalue import OrtValue
from .records import record

__all__ = [
    "ADAPTER_FORMAT_VERSION",
    "SUPPORTED_ELEM_TYPES",
    "AdapterContents",
    "AdapterFileNotFound",
    "AdapterFormat",
    "InvalidAdapter",
    "LoraAdapter",
    "decode_adapter",
    "encode_adapter",
    "read_adapter_file",
]

ADAPTER_FORMAT_VERSION = 1
_FILE_IDENTIFIER = b"TORT"

# Element types onnxruntime's adapter loader accepts (IsSupportedLoraParameterType):
# numeric types with a fixed byte size. Bool, strings, complex and 4-bit types are refused
# when an adapter is loaded, so onyxrt refuses them when one is built.
SUPPORTED_ELEM_TYPES = frozenset({
    TensorProto.FLOAT, TensorProto.UINT8, TensorProto.INT8, TensorProto.UINT16,
    TensorProto.INT16, TensorProto.INT32, TensorProto.INT64, TensorProto.FLOAT16,
    TensorProto.DOUBLE, TensorProto.UINT32, TensorProto.UINT64, TensorProto.BFLOAT16,
    TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E4M3FNUZ, TensorProto.FLOAT8E5M2,
    TensorProto.FLOAT8E5M2FNUZ,
})

_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1
_LITTLE_ENDIAN = sys.byteorder == "little"


@record(frozen=True)
class AdapterContents:
    """What an adapter file holds: its three versions and its parameters by name, in file
    order (host arrays)."""

    format_version: int
    adapter_version: int
    model_version: int
    parameters: dict[str, np.ndarray] = field(default_factory=dict)


# -- writing -------------------------------------------------------------------------------


class _Builder:
    """The part of FlatBuffers' C++ ``FlatBufferBuilder`` this schema needs.

    The buffer grows from its end towards its start; ``_size`` is how much is written and
    an object's position is its distance from the end. Padding, alignment and vtable
    sharing follow the C++ builder step by step, so the bytes equal onnxruntime's.
    Pieces are kept in a list (joined once at the end) so large tensors are copied once.
    """

    def __init__(self) -> None:
        self._pieces: list[bytes] = []
        self._size = 0
        self._minalign = 1
        self._vtables: list[tuple[bytes, int]] = []  # (vtable bytes, its position)

    def _push(self, data: bytes) -> None:
        if data:
            self._pieces.append(data)
            self._size += len(data)

    def _prealign(self, length: int, alignment: int) -> None:
        # Pad so that after ``length`` more bytes the size is a multiple of ``alignment``.
        self._minalign = max(self._minalign, alignment)
        self._push(b"\0" * (-(self._size + length) % alignment))

    def _push_uoffset_to(self, target: int) -> None:
        self._prealign(0, 4)
        self._push(struct.pack("<I", self._size + 4 - target))

    def string(self, text: bytes) -> int:
        """A string (length, bytes, NUL); returns its position."""
        self._prealign(len(text) + 1, 4)
        self._push(text + b"\0")
        self._prealign(0, 4)
        self._push(struct.pack("<I", len(text)))
        return self._size

    def scalar_vector(self, data: bytes, count: int, elem_size: int) -> int:
        """A vector of ``count`` scalars of ``elem_size`` bytes already in ``data``."""
        self._prealign(len(data), 4)
        self._prealign(len(data), elem_size)
        self._push(data)
        self._prealign(0, 4)
        self._push(struct.pack("<I", count))
        return self._size

    def offset_vector(self, targets: list[int]) -> int:
        """A vector of offsets to the objects at ``targets``."""
        self._prealign(4 * len(targets), 4)
        for target in reversed(targets):
            self._push_uoffset_to(target)
        self._push(struct.pack("<I", len(targets)))
        return self._size

    def table(self, fields: list[tuple[int, str, int]]) -> int:
        """A table from ``(field index, "offset" | "int32", value)`` in the order the
        generated ``Create<Table>`` adds them; zero values (defaults, absent offsets) are
        left out, as the C++ builder does."""
        start = self._size
        slots: list[tuple[int, int]] = []
        for index, kind, value in fields:
            if not value:
                continue
            if kind == "offset":
                self._push_uoffset_to(value)
            else:
                self._prealign(0, 4)
                self._push(struct.pack("<i", value))
            slots.append((4 + 2 * index, self._size))
        self._prealign(0, 4)
        table_pos = self._size + 4  # where the table's vtable offset will be
        vt_len = max(max((slot for slot, _ in slots), default=0) + 2, 4)
        vtable = bytearray(vt_len)
        struct.pack_into("<HH", vtable, 0, vt_len, table_pos - start)
        for slot, pos in slots:
            struct.pack_into("<H", vtable, slot, table_pos - pos)
        vt_bytes = bytes(vtable)
        for known, known_pos in self._vtables:  # share an identical earlier vtable
            if known == vt_bytes:
                self._push(struct.pack("<i", known_pos - table_pos))
                return table_pos
        self._push(struct.pack("<i", vt_len))
        self._push(vt_bytes)
        self._vtables.append((vt_bytes, self._size))
        return table_pos

    def finish(self, root: int, identifier: bytes) -> bytes:
        """Root offset and file identifier in front; the whole buffer."""
        self._prealign(4 + len(identifier), self._minalign)
        self._push(identifier)
        self._push_uoffset_to(root)
        return b"".join(reversed(self._pieces))


def _check_version(what: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise InvalidArgument(f"{what} must be an int, got {type(value).__name__} {value!r}")
    if not _INT32_MIN <= int(value) <= _INT32_MAX:
        raise InvalidArgument(
            f"{what} {value} does not fit the adapter format's 32-bit signed field "
            f"({_INT32_MIN}..{_INT32_MAX})"
        )
    return int(value)


def _check_parameter(name: Any, value: Any) -> np.ndarray:
    """The host array of one parameter, or a typed error saying why it cannot be stored."""
    if not isinstance(name, str) or not name:
        raise InvalidArgument(
            f"adapter parameter names must be non-empty strings, got {name!r}; onnxruntime "
            "cannot load a parameter without a name"
        )
    if isinstance(value, OrtValue):
        if not value.is_tensor():
            raise InvalidArgument(f"adapter parameter {name!r} must be a tensor, got {value!r}")
        array = np.asarray(value.numpy())
    elif isinstance(value, np.ndarray):
        array = value
    else:
        raise InvalidArgument(
            f"adapter parameter {name!r} must be an OrtValue or a numpy array, got "
            f"{type(value).__name__}; wrap it with OrtValue.ortvalue_from_numpy(array)"
        )
    try:
        elem_type = onnx_elem_type(array.dtype)
    except TypeError:
        elem_type = TensorProto.UNDEFINED
    if elem_type not in SUPPORTED_ELEM_TYPES:
        supported = ", ".join(sorted(type_string(t)[7:-1] for t in SUPPORTED_ELEM_TYPES))
        raise InvalidArgument(
            f"adapter parameter {name!r} has dtype {array.dtype}, which the adapter format "
            f"does not carry (onnxruntime refuses it on load); use one of: {supported}"
        )
    if array.ndim == 0:
        raise InvalidArgument(
            f"adapter parameter {name!r} is a scalar; onnxruntime cannot load a parameter "
            "without dimensions, reshape it to (1,)"
        )
    return array


def encode_adapter(
    parameters: Mapping[str, Any], adapter_version: int = 0, model_version: int = 0
) -> bytes:
    """The bytes of an adapter file holding ``parameters`` (name → numpy array or
    ``OrtValue``), laid out exactly as onnxruntime's ``AdapterFormat.export_adapter`` lays
    them out."""
    adapter_version = _check_version("adapter_version", adapter_version)
    model_version = _check_version("model_version", model_version)
    checked = [(name, _check_parameter(name, value)) for name, value in parameters.items()]
    builder = _Builder()
    tables: list[int] = []
    for name, array in checked:
        name_pos = builder.string(name.encode("utf-8"))
        dims = np.asarray(array.shape, dtype="<i8")
        dims_pos = builder.scalar_vector(dims.tobytes(), dims.size, 8)
        data = np.ascontiguousarray(array)
        if not _LITTLE_ENDIAN and data.dtype.itemsize > 1:
            data = data.byteswap()
        raw_pos = builder.scalar_vector(data.tobytes(), data.nbytes, 1)
        elem_type = onnx_elem_type(array.dtype)
        # Field order of the generated CreateParameter: raw_data, data_type, dims, name.
        tables.append(builder.table(
            [(3, "offset", raw_pos), (2, "int32", elem_type), (1, "offset", dims_pos), (0, "offset", name_pos)]
        ))
    params_pos = builder.offset_vector(tables)
    # CreateAdapter: parameters, model_version, adapter_version, format_version.
    root = builder.table([
        (3, "offset", params_pos), (2, "int32", model_version),
        (1, "int32", adapter_version), (0, "int32", ADAPTER_FORMAT_VERSION),
    ])
    return builder.finish(root, _FILE_IDENTIFIER)


# -- reading -------------------------------------------------------------------------------


class _Reader:
    """Bounds- and alignment-checked access to a FlatBuffers buffer (what FlatBuffers'
    ``Verifier`` checks), raising :class:`InvalidAdapter` naming the source."""

    def __init__(self, data: bytearray | bytes, source: str) -> None:
        self.data = data
        self.source = source

    def fail(self, what: str) -> NoReturn:
        raise InvalidAdapter(
            f"{self.source} is not a valid onnxruntime adapter file: {what}. Write it again "
            "with AdapterFormat.export_adapter (onyxrt or onnxruntime)"
        )

    def _need(self, pos: int, size: int, what: str, align: int = 1) -> None:
        if pos < 0 or pos + size > len(self.data):
            self.fail(f"{what} at byte {pos} (+{size} bytes) lies outside the {len(self.data)}-byte file")
        if pos % align:
            self.fail(f"{what} at byte {pos} is not {align}-byte aligned")

    def u16(self, pos: int, what: str) -> int:
        self._need(pos, 2, what, 2)
        return int(struct.unpack_from("<H", self.data, pos)[0])

    def u32(self, pos: int, what: str) -> int:
        self._need(pos, 4, what, 4)
        return int(struct.unpack_from("<I", self.data, pos)[0])

    def i32(self, pos: int, what: str) -> int:
        self._need(pos, 4, what, 4)
        return int(struct.unpack_from("<i", self.data, pos)[0])

    def follow(self, pos: int, what: str) -> int:
        """Where the offset stored at ``pos`` points. As FlatBuffers' Verifier requires,
        it is non-zero (an object never points at itself) and below 2**31."""
        offset = self.u32(pos, what)
        if offset == 0 or offset >= 2**31:
            self.fail(f"{what} at byte {pos} holds the invalid offset {offset}")
        return pos + offset

    def table(self, pos: int, what: str) -> _Table:
        # As FlatBuffers' Verifier: the vtable must fit; each field is checked when read
        # (the table's own size entry is not trusted).
        vtable = pos - self.i32(pos, f"{what} (vtable offset)")
        vt_len = self.u16(vtable, f"{what} vtable")
        if vt_len % 2:
            self.fail(f"{what} vtable at byte {vtable} has odd length {vt_len}")
        self._need(vtable, vt_len, f"{what} vtable")
        return _Table(self, pos, vtable, vt_len, what)

    def vector(self, pos: int, elem_size: int, what: str) -> tuple[int, int]:
        """(position of the first element, element count) of the vector at ``pos``."""
        count = self.u32(pos, f"{what} (length)")
        self._need(pos + 4, count * elem_size, f"{what} ({count} elements)")
        return pos + 4, count


@record(frozen=True)
class _Table:
    reader: _Reader
    pos: int
    vtable: int
    vt_len: int
    what: str

    def _slot(self, index: int) -> int:
        slot = 4 + 2 * index
        if slot >= self.vt_len:
            return 0
        return self.reader.u16(self.vtable + slot, f"{self.what} vtable")

    def int32(self, index: int, name: str) -> int:
        off = self._slot(index)
        return self.reader.i32(self.pos + off, f"{self.what}.{name}") if off else 0

    def offset(self, index: int, name: str) -> int | None:
        """Position of the object field ``index`` refers to (None: absent)."""
        off = self._slot(index)
        if not off:
            return None
        return self.reader.follow(self.pos + off, f"{self.what}.{name}")


def _read_parameter(reader: _Reader, table: _Table, number: int) -> tuple[str, np.ndarray]:
    what = f"parameter #{number}"
    name_pos = table.offset(0, "name")
    if name_pos is None:
        reader.fail(f"{what} has no name")
    start, length = reader.vector(name_pos, 1, f"{what} name")
    reader._need(start + length, 1, f"{what} name terminator")
    if reader.data[start + length] != 0:
        reader.fail(f"{what} name is not NUL-terminated")
    try:
        name = bytes(reader.data[start : start + length]).decode("utf-8")
    except UnicodeDecodeError:
        reader.fail(f"{what} name is not UTF-8")
    what = f"parameter {name!r}"

    dims_pos = table.offset(1, "dims")
    if dims_pos is None:
        reader.fail(f"{what} has no dims")
    start, rank = reader.vector(dims_pos, 8, f"{what} dims")
    if rank == 0:
        reader.fail(f"{what} has empty dims (onnxruntime needs at least one dimension)")
    dims = struct.unpack_from(f"<{rank}q", reader.data, start)
    if any(d < 0 for d in dims):
        reader.fail(f"{what} has a negative dimension in {list(dims)}")

    elem_type = table.int32(2, "data_type")
    if elem_type not in SUPPORTED_ELEM_TYPES:
        reader.fail(f"{what} has element type {elem_type}, which is not a supported LoRA parameter type")
    dtype = np_dtype(elem_type)

    raw_pos = table.offset(3, "raw_data")
    if raw_pos is None:
        reader.fail(f"{what} has no raw_data")
    start, nbytes = reader.vector(raw_pos, 1, f"{what} raw_data")
    expected = math.prod(dims) * dtype.itemsize
    if nbytes != expected:
        reader.fail(
            f"{what} raw_data holds {nbytes} bytes but shape {list(dims)} of "
            f"{type_string(elem_type)} needs {expected}"
        )
    if expected == 0:
        try:
            return name, np.zeros(dims, dtype=dtype)
        except ValueError:  # numpy refuses shapes whose product overflows, even with a 0
            reader.fail(f"{what} has dims {list(dims)}, too large for numpy")
    array = np.frombuffer(reader.data, dtype=dtype, count=math.prod(dims), offset=start).reshape(dims)
    if not _LITTLE_ENDIAN and dtype.itemsize > 1:
        array = array.byteswap()
    elif array.ctypes.data % dtype.alignment:
        array = array.copy()  # the format does not promise aligned data; numpy kernels like it
    return name, array


def decode_adapter(data: bytearray | bytes, source: str = "<adapter bytes>") -> AdapterContents:
    """Parse and check an adapter file's bytes. Arrays are views of ``data`` where they
    are aligned (writable when ``data`` is a ``bytearray``, as onnxruntime's are).

    Raises :class:`InvalidAdapter` naming ``source`` when anything is out of place.
    """
    reader = _Reader(data, source)
    if len(data) <= 8:
        reader.fail(f"it holds {len(data)} bytes, too few for a FlatBuffers header")
    if bytes(data[4:8]) != _FILE_IDENTIFIER:
        reader.fail(f"its file identifier is {bytes(data[4:8])!r}, expected {_FILE_IDENTIFIER!r}")
    root = reader.table(reader.follow(0, "root offset"), "adapter table")
    format_version = root.int32(0, "format_version")
    if format_version != ADAPTER_FORMAT_VERSION:
        reader.fail(
            f"its format version is {format_version}; onyxrt (like onnxruntime) reads "
            f"version {ADAPTER_FORMAT_VERSION}"
        )
    params_pos = root.offset(3, "parameters")
    if params_pos is None:
        reader.fail("it has no parameters vector")
    start, count = reader.vector(params_pos, 4, "parameters")
    parameters: dict[str, np.ndarray] = {}
    for i in range(count):
        table = reader.table(reader.follow(start + 4 * i, f"parameter #{i} offset"), f"parameter #{i}")
        name, array = _read_parameter(reader, table, i)
        if name in parameters:
            reader.fail(f"parameter {name!r} appears twice")
        parameters[name] = array
    return AdapterContents(
        format_version, root.int32(1, "adapter_version"), root.int32(2, "model_version"), parameters
    )


def _path_str(file_path: Any, what: str) -> str:
    try:
        return os.fspath(file_path)
    except TypeError:
        raise InvalidArgument(
            f"{what} takes a file path (str or os.PathLike), got {type(file_path).__name__}"
        ) from None


def read_adapter_file(file_path: str | os.PathLike[str]) -> AdapterContents:
    """Read and check the adapter file at ``file_path``."""
    path = Path(_path_str(file_path, "reading an adapter"))
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            data = bytearray(size)
            got = handle.readinto(data)
    except FileNotFoundError:
        raise AdapterFileNotFound(f"adapter file {str(path)!r} does not exist") from None
    except IsADirectoryError:
        raise InvalidAdapter(f"adapter path {str(path)!r} is a directory, not a file") from None
    except OSError as exc:
        raise InvalidAdapter(f"cannot read adapter file {str(path)!r}: {exc.strerror or exc}") from exc
    if got != size:
        raise InvalidAdapter(f"adapter file {str(path)!r} changed size while being read")
    return decode_adapter(data, repr(str(path)))


# -- onnxruntime's classes -----------------------------------------------------------------


class AdapterFormat:
    """Reads, builds and writes adapter files (onnxruntime's ``AdapterFormat``).

    ``AdapterFormat()`` starts empty (format version 1, versions 0, no parameters);
    :meth:`read_adapter` loads a file. Parameters are ``OrtValue`` tensors by name.
    """

    def __init__(self, adapter: AdapterFormat | AdapterContents | None = None) -> None:
        self._format_version = ADAPTER_FORMAT_VERSION
        self._adapter_version = 0
        self._model_version = 0
        self._parameters: dict[str, OrtValue] = {}
        if isinstance(adapter, AdapterFormat):
            self._format_version = adapter._format_version
            self._adapter_version = adapter._adapter_version
            self._model_version = adapter._model_version
            self._parameters = dict(adapter._parameters)
        elif isinstance(adapter, AdapterContents):
            self._format_version = adapter.format_version
            self._adapter_version = adapter.adapter_version
            self._model_version = adapter.model_version
            self._parameters = {k: OrtValue.ortvalue_from_numpy(v) for k, v in adapter.parameters.items()}
        elif adapter is not None:
            raise InvalidArgument(
                f"AdapterFormat() takes nothing or another AdapterFormat, got {type(adapter).__name__}; "
                "use AdapterFormat.read_adapter(path) to read a file"
            )

    @staticmethod
    def read_adapter(file_path: str | os.PathLike[str]) -> AdapterFormat:
        """The adapter stored at ``file_path``. Its parameters are views of the file's
        bytes read into memory (no copy per parameter)."""
        return AdapterFormat(read_adapter_file(file_path))

    def export_adapter(self, file_path: str | os.PathLike[str]) -> None:
        """Write the adapter to ``file_path`` in onnxruntime's adapter format."""
        path = _path_str(file_path, "export_adapter")
        data = encode_adapter(self._parameters, self._adapter_version, self._model_version)
        try:
            with open(path, "wb") as handle:
                handle.write(data)
        except OSError as exc:
            raise InvalidArgument(
                f"cannot write adapter file {path!r}: {exc.strerror or exc}; check that its "
                "folder exists and is writable"
            ) from exc

    def get_format_version(self) -> int:
        """The file format version (1; what a read file declared)."""
        return self._format_version

    def get_adapter_version(self) -> int:
        """The adapter's own version number (the user's to choose)."""
        return self._adapter_version

    def set_adapter_version(self, adapter_version: int) -> None:
        """Set the adapter version (a 32-bit signed int)."""
        self._adapter_version = _check_version("adapter_version", adapter_version)

    def get_model_version(self) -> int:
        """The version of the model this adapter was made for."""
        return self._model_version

    def set_model_version(self, model_version: int) -> None:
        """Set the model version (a 32-bit signed int)."""
        self._model_version = _check_version("model_version", model_version)

    def get_parameters(self) -> dict[str, OrtValue]:
        """The parameters by name (a new dict of the same ``OrtValue`` objects)."""
        return dict(self._parameters)

    def set_parameters(self, params: Mapping[str, OrtValue]) -> None:
        """Replace the parameters with ``params`` (name → ``OrtValue``; numpy arrays are
        accepted too). Each is checked now, so a value the format cannot carry fails here
        instead of when the file is loaded."""
        if not isinstance(params, Mapping):
            raise InvalidArgument(
                f"set_parameters takes a dict of name -> OrtValue, got {type(params).__name__}"
            )
        checked: dict[str, OrtValue] = {}
        for name, value in params.items():
            _check_parameter(name, value)
            checked[name] = value if isinstance(value, OrtValue) else OrtValue.ortvalue_from_numpy(value)
        self._parameters = checked

    def __repr__(self) -> str:
        return (f"AdapterFormat(format_version={self._format_version}, adapter_version="
                f"{self._adapter_version}, model_version={self._model_version}, "
                f"parameters={sorted(self._parameters)})")


class LoraAdapter:
    """A LoRA adapter a run can activate (onnxruntime's ``LoraAdapter``).

    Built empty, then :meth:`Load`-ed from a file; ``RunOptions.add_active_adapter(adapter)``
    makes its parameters feed the model inputs of the same names for that run.
    :meth:`parameters` gives them as host arrays; :meth:`from_parameters` builds an
    adapter from arrays without a file.
    """

    def __init__(self) -> None:
        self._contents: AdapterContents | None = None
        self._path: str | None = None

    def Load(self, file_path: str | os.PathLike[str]) -> None:  # noqa: N802 (onnxruntime's name)
        """Read the adapter file at ``file_path`` (replacing anything loaded before).

        Raises :class:`AdapterFileNotFound` or :class:`InvalidAdapter` (both
        ``InvalidModel``) when the file is missing or not a valid adapter.
        """
        contents = read_adapter_file(file_path)
        self._contents = contents
        self._path = _path_str(file_path, "LoraAdapter.Load")

    @classmethod
    def from_parameters(
        cls, parameters: Mapping[str, Any], adapter_version: int = 0, model_version: int = 0
    ) -> LoraAdapter:
        """An adapter holding ``parameters`` (name → numpy array or ``OrtValue``), checked
        as :meth:`AdapterFormat.set_parameters` checks them."""
        arrays = {name: _check_parameter(name, value) for name, value in parameters.items()}
        adapter = cls()
        adapter._contents = AdapterContents(
            ADAPTER_FORMAT_VERSION,
            _check_version("adapter_version", adapter_version),
            _check_version("model_version", model_version),
            arrays,
        )
        return adapter

    @property
    def is_loaded(self) -> bool:
        """Whether the adapter holds parameters (was loaded or built)."""
        return self._contents is not None

    @property
    def path(self) -> str | None:
        """The file it was loaded from (None when built from arrays or empty)."""
        return self._path

    def _require(self) -> AdapterContents:
        if self._contents is None:
            raise InvalidArgument(
                "this LoraAdapter holds no parameters yet; call adapter.Load(path) first"
            )
        return self._contents

    @property
    def adapter_version(self) -> int:
        """The adapter version stored in the file."""
        return self._require().adapter_version

    @property
    def model_version(self) -> int:
        """The model version stored in the file."""
        return self._require().model_version

    def parameters(self) -> dict[str, np.ndarray]:
        """The parameters by name as host arrays (a new dict; the arrays are shared, not
        copied). Raises :class:`~onyxrt.errors.InvalidArgument` before :meth:`Load`."""
        return dict(self._require().parameters)

    def __repr__(self) -> str:
        if self._contents is None:
            return "LoraAdapter(not loaded)"
        where = f"{self._path!r}, " if self._path else ""
        return f"LoraAdapter({where}parameters={sorted(self._contents.parameters)})"
