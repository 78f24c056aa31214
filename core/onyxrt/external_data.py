"""Reading the external data of a model's tensors, and refusing what is unsafe.

Every tensor of a model — initializers, sparse initializers, tensors in node attributes
(Constant's ``value``), in control-flow subgraphs, in model-local function bodies and
their attribute defaults, and in training-info graphs — goes through one
:class:`ExternalDataReader`. Nothing else in onyxrt reads a tensor's ``location``: after
loading, no tensor of the model refers to a file (a ``TensorProto`` still marked external
is an error where it is read, never a read relative to the working directory).

How a reference is read, so that what is read is what was checked:

1. The ``location`` is checked as text: not empty, no NUL, not absolute (POSIX or
   Windows spelling), and ``..`` may not climb above the model's folder.
2. The file is opened **once** (``O_NONBLOCK``, so a FIFO cannot block the open), and
   the checks that follow are made on the open descriptor: its real path (the kernel's
   name for what was opened, ``/proc/self/fd``; macOS ``F_GETPATH``) must lie inside the
   model's folder or the folder of the model file's real path (onnxruntime's rule: a
   Hugging Face cache links ``snapshots/<rev>/model.onnx`` and its data into ``blobs/``),
   and it must be a regular file. Swapping a folder for a symlink after the check cannot
   redirect the read: there is no second open. Where the system cannot name an open
   descriptor, the path is walked one component at a time from the folder's descriptor
   with ``O_NOFOLLOW`` (symlinks then refused).
3. The tensor's size comes from its shape and element type; a ``length`` that disagrees
   is refused, ``offset + size`` must fit in the file, and exactly that many bytes are
   read (a 16 GiB file beside a 16-byte tensor costs 16 bytes).

A model given as bytes or a ``ModelProto`` has no folder: its external data is refused
unless the caller names one (``session.model_external_initializers_file_folder_path``, as
in onnxruntime) or supplies the files' contents in memory.
"""

from __future__ import annotations

import math
import os
import posixpath
import stat
import sys
from collections.abc import Collection, Iterator, Mapping
from pathlib import Path
from typing import Any

import onnx

from .dtypes import raw_byte_size
from .errors import InvalidModel, UnsafeExternalData
from .session_options import EXTERNAL_DATA_FOLDER_KEY

__all__ = ["ExternalDataReader", "model_tensors"]

_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)
_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
# One pread returns at most ~2 GiB on Linux; larger tensors are read in pieces.
_READ_CHUNK = 1 << 30


def model_tensors(model: onnx.ModelProto) -> Iterator[tuple[onnx.TensorProto, str]]:
    """Every ``TensorProto`` of ``model``, wherever it sits, with a description for
    messages (``initializer 'w'``, ``attribute 'value' of node 'c' in function 'f'``)."""
    yield from _graph_tensors(model.graph, "")
    for function in model.functions:
        qualified = f"{function.domain}:{function.name}" if function.domain else function.name
        where = f" in function {qualified!r}"
        yield from _nodes_tensors(function.node, where)
        for attr in function.attribute_proto:  # default values of the function's attributes
            yield from _attribute_tensors(attr, f"default of attribute {attr.name!r}{where}")
    for i, info in enumerate(model.training_info):
        yield from _graph_tensors(info.initialization, f" in training_info[{i}].initialization")
        yield from _graph_tensors(info.algorithm, f" in training_info[{i}].algorithm")


def _graph_tensors(graph: onnx.GraphProto, where: str) -> Iterator[tuple[onnx.TensorProto, str]]:
    for t in graph.initializer:
        yield t, f"initializer {t.name!r}{where}"
    for st in graph.sparse_initializer:
        yield st.values, f"sparse initializer {st.values.name!r} (values){where}"
        yield st.indices, f"sparse initializer {st.values.name!r} (indices){where}"
    yield from _nodes_tensors(graph.node, where)


def _nodes_tensors(nodes: Any, where: str) -> Iterator[tuple[onnx.TensorProto, str]]:
    for node in nodes:
        label = f"node {(node.name or node.op_type)!r}"
        for attr in node.attribute:
            yield from _attribute_tensors(attr, f"attribute {attr.name!r} of {label}{where}")


def _attribute_tensors(attr: onnx.AttributeProto, what: str) -> Iterator[tuple[onnx.TensorProto, str]]:
    # Every field is looked at whatever attr.type says: a corrupt type must not hide one.
    if attr.HasField("t"):
        yield attr.t, _named(attr.t, what)
    for i, t in enumerate(attr.tensors):
        yield t, _named(t, f"{what}[{i}]")
    sparse = [attr.sparse_tensor] if attr.HasField("sparse_tensor") else []
    for i, st in enumerate([*sparse, *attr.sparse_tensors]):
        yield st.values, f"{what} (sparse values{'' if i < len(sparse) else f' [{i}]'})"
        yield st.indices, f"{what} (sparse indices{'' if i < len(sparse) else f' [{i}]'})"
    if attr.HasField("g"):
        yield from _graph_tensors(attr.g, f" in the subgraph {what}")
    for i, g in enumerate(attr.graphs):
        yield from _graph_tensors(g, f" in subgraph {i} of {what}")


def _named(t: onnx.TensorProto, what: str) -> str:
    return f"tensor {t.name!r} in {what}" if t.name else what


class ExternalDataReader:
    """Reads the external data of one model's tensors into their ``raw_data``.

    ``folder`` is the folder locations are relative to (None: the model has none, and
    any external reference is refused unless ``in_memory`` holds its file);
    ``roots`` the real folders what is opened may lie in; ``in_memory`` maps locations
    to file contents given by the caller; tensors named in ``supplied`` are skipped
    (the caller provides their values). Files are opened once each per model.
    """

    def __init__(
        self,
        origin: str,
        folder: Path | None,
        roots: Collection[Path] = (),
        in_memory: Mapping[str, Any] | None = None,
        supplied: Collection[str] = (),
    ) -> None:
        self.origin = origin
        self.folder = folder
        self.roots = tuple(roots)
        self.in_memory = in_memory or {}
        self.supplied = supplied
        self._open: dict[str, tuple[int, int]] = {}  # location -> (fd, size)

    def read_model(self, model: onnx.ModelProto) -> None:
        """Fill in the data of every external tensor of ``model``; afterwards none refers
        to a file. Raises :class:`~onyxrt.errors.UnsafeExternalData` or
        :class:`~onyxrt.errors.InvalidModel` naming the tensor, location and reason."""
        try:
            for tensor, what in model_tensors(model):
                if tensor.data_location == onnx.TensorProto.EXTERNAL and tensor.name not in self.supplied:
                    self._fill(tensor, f"{self.origin}: {what}")
        finally:
            for fd, _ in self._open.values():
                os.close(fd)
            self._open.clear()

    def _fill(self, tensor: onnx.TensorProto, where: str) -> None:
        info = {e.key: e.value for e in tensor.external_data}
        location = info.get("location", "")
        if not location:
            raise UnsafeExternalData(f"{where}: external data has no location")
        if location in self.in_memory:
            data = memoryview(self.in_memory[location]).cast("B")
            offset, length = _extent(tensor, info, data.nbytes, where, location)
            raw = bytes(data[offset : offset + length])
        else:
            fd, size = self._file(location, where)
            offset, length = _extent(tensor, info, size, where, location)
            raw = _pread_exactly(fd, offset, length, where, location)
        tensor.raw_data = raw
        del tensor.external_data[:]
        tensor.data_location = onnx.TensorProto.DEFAULT

    def _file(self, location: str, where: str) -> tuple[int, int]:
        """(descriptor, size) of the regular file at ``location``, opened once and
        checked on the descriptor."""
        cached = self._open.get(location)
        if cached is not None:
            return cached
        if self.folder is None:
            raise UnsafeExternalData(
                f"{where}: its data is in the external file {location!r}, but the model was "
                "given as bytes or a ModelProto, so it has no folder to read that from; pass "
                "the model's file path instead, supply the file with "
                "SessionOptions.add_external_initializers_from_files_in_memory, or name its "
                f"folder with sess_options.add_session_config_entry({EXTERNAL_DATA_FOLDER_KEY!r}, FOLDER)"
            )
        relative = _checked_location(location, self.folder, where)
        fd = _open_checked(self.folder, relative, self.roots, where, location)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise UnsafeExternalData(
                    f"{where}: external data {location!r} is not a regular file "
                    f"({_file_kind(st.st_mode)}); only regular files are read"
                )
        except BaseException:
            os.close(fd)
            raise
        self._open[location] = (fd, st.st_size)
        return fd, st.st_size


def _checked_location(location: str, folder: Path, where: str) -> str:
    """``location`` normalized, after the checks that need no file system."""
    if "\0" in location:
        raise UnsafeExternalData(f"{where}: external data path {location!r} contains a NUL character")
    if os.path.isabs(location) or location.startswith(("/", "\\")) or ":" in location[:3]:
        raise UnsafeExternalData(
            f"{where}: external data path {location!r} is absolute; external data must "
            f"live inside the model's folder {str(folder)!r}"
        )
    relative = posixpath.normpath(location.replace("\\", "/"))
    if relative == ".." or relative.startswith("../"):
        raise UnsafeExternalData(
            f"{where}: external data path {location!r} climbs with '..' outside the model's "
            f"folder {str(folder)!r}; it is refused"
        )
    return relative


def _open_checked(folder: Path, relative: str, roots: tuple[Path, ...], where: str, location: str) -> int:
    """Open ``folder/relative`` once, then check that what was opened lies inside one of
    ``roots``. Every OSError becomes a typed error naming the tensor and the path."""
    try:
        fd = os.open(os.path.join(folder, relative), _OPEN_FLAGS)
    except FileNotFoundError:
        raise InvalidModel(f"{where}: external data file {location!r} not found in {str(folder)!r}") from None
    except OSError as exc:
        raise UnsafeExternalData(
            f"{where}: cannot open external data {location!r} in {str(folder)!r}: "
            f"{exc.strerror or exc}"
        ) from None
    try:
        real = _opened_path(fd)
        if real is None:  # no way to name an open descriptor: walk without symlinks instead
            os.close(fd)
            fd = _open_without_symlinks(folder, relative, where, location)
        elif not any(_inside(real, root) for root in roots):
            raise UnsafeExternalData(
                f"{where}: external data path {location!r} leads to {real!r}, outside the "
                f"model's folder {str(roots[0] if roots else folder)!r}; it is refused"
            )
    except BaseException:
        os.close(fd)
        raise
    return fd


def _opened_path(fd: int) -> str | None:
    """The real path of an open descriptor, as the kernel names it, or None."""
    if sys.platform.startswith("linux"):
        try:
            path = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            return None
        return path.removesuffix(" (deleted)")
    if sys.platform == "darwin":  # pragma: no cover - not run in CI
        import fcntl

        try:
            raw = fcntl.fcntl(fd, 50, b"\0" * 1024)  # F_GETPATH
        except OSError:
            return None
        return raw.split(b"\0", 1)[0].decode(errors="surrogateescape")
    return None


def _open_without_symlinks(folder: Path, relative: str, where: str, location: str) -> int:  # pragma: no cover
    """Walk ``relative`` from ``folder``'s descriptor, one component at a time, refusing
    symlinks (``O_NOFOLLOW``): the fallback where an open descriptor cannot be named."""
    parts = [p for p in relative.split("/") if p not in ("", ".")]
    try:
        fd = os.open(folder, _DIR_FLAGS)
    except OSError as exc:
        raise InvalidModel(f"{where}: cannot open the model's folder {str(folder)!r}: {exc.strerror}") from None
    try:
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            flags = (_OPEN_FLAGS if last else _DIR_FLAGS) | _NOFOLLOW
            try:
                next_fd = os.open(part, flags, dir_fd=fd)
            except FileNotFoundError:
                raise InvalidModel(
                    f"{where}: external data file {location!r} not found in {str(folder)!r}"
                ) from None
            except OSError as exc:
                raise UnsafeExternalData(
                    f"{where}: external data path {location!r}: {part!r} cannot be opened without "
                    f"following a symlink ({exc.strerror}); it is refused"
                ) from None
            os.close(fd)
            fd = next_fd
        return fd
    except BaseException:
        os.close(fd)
        raise


def _inside(path: str, root: Path) -> bool:
    return os.path.commonpath([path, str(root)]) == str(root)


def _file_kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def _extent(
    tensor: onnx.TensorProto, info: Mapping[str, str], size: int, where: str, location: str
) -> tuple[int, int]:
    """(offset, length) of a tensor's external data: the length its shape and type need
    (a declared ``length`` must agree), checked against the file's ``size``."""
    try:
        offset = int(info.get("offset", "0") or 0)
        declared = int(info["length"]) if info.get("length") else None
    except ValueError:
        raise UnsafeExternalData(f"{where}: external data offset/length are not integers") from None
    if offset < 0 or (declared is not None and declared < 0):
        raise UnsafeExternalData(f"{where}: external data offset {offset} / length {declared} is negative")
    if any(d < 0 for d in tensor.dims):
        raise InvalidModel(f"{where}: negative dims {list(tensor.dims)}")
    if tensor.data_type == onnx.TensorProto.STRING:
        raise UnsafeExternalData(f"{where}: string tensors cannot be stored as external data")
    needed = raw_byte_size(tensor.data_type, math.prod(tensor.dims))
    if needed is not None and declared is not None and declared != needed:
        raise UnsafeExternalData(
            f"{where}: external data length {declared} does not match the {needed} bytes its "
            f"shape {list(tensor.dims)} needs; the model or its data file is corrupt"
        )
    length = declared if declared is not None else needed
    if length is None:
        raise UnsafeExternalData(
            f"{where}: element type {tensor.data_type} has no fixed size; its external data must "
            "give a length"
        )
    if offset + length > size:
        raise UnsafeExternalData(
            f"{where}: external data offset {offset} + length {length} is past the end of "
            f"{location!r} ({size} bytes)"
        )
    return offset, length


def _pread_exactly(fd: int, offset: int, length: int, where: str, location: str) -> bytes:
    """Exactly ``length`` bytes at ``offset``; a file that shrank meanwhile is an error."""
    chunks = []
    done = 0
    try:
        while done < length:
            chunk = os.pread(fd, min(length - done, _READ_CHUNK), offset + done)
            if not chunk:
                raise UnsafeExternalData(
                    f"{where}: external data {location!r} ended after {offset + done} bytes while "
                    f"reading {length} bytes at offset {offset} (was the file changed?)"
                )
            chunks.append(chunk)
            done += len(chunk)
    except OSError as exc:
        raise InvalidModel(f"{where}: cannot read external data {location!r}: {exc.strerror or exc}") from None
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)
