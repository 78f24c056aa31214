"""Reading a model: from a path, PathLike, bytes or ``ModelProto``, with external data.

External data is read by :mod:`onyxrt.external_data`, not by onnx, so that every
reference is checked on what is actually opened: an absolute path, a ``..`` or a symlink
leading out of the model's folder, a file that is not a regular file, a missing file, or
an offset/length that disagrees with the tensor or passes the end of the file is
rejected with the reason.
"""

from __future__ import annotations

import functools
import os
import stat
from collections.abc import Collection, Mapping
from dataclasses import field
from pathlib import Path
from typing import Any

import onnx
import onnx.defs
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import DecodeError

from .errors import (
    InvalidGraph,
    InvalidModel,
    ModelFileNotFound,
    ModelNotParsed,
    UnknownOperator,
)
from .kernels import has_signature
from .records import record

__all__ = ["LoadedModel", "ParsedModel", "load_model", "read_model_file", "opset_versions"]


@record(frozen=True)
class ParsedModel:
    """A model built in memory by onyxrt itself (constant folding's evaluation), with the
    values of its data-less initializers as arrays: loaded as it is, not copied, and its
    arrays not serialized into it."""

    proto: onnx.ModelProto
    arrays: Mapping[str, Any]
    origin: str


@record
class LoadedModel:
    """A parsed model, its origin (for messages) and the folder external data lives in."""

    proto: onnx.ModelProto
    origin: str
    base_dir: Path | None  # None: given as bytes/ModelProto with no external-data folder
    path: Path | None = None
    #: Values of initializers the proto holds without data (``split_weights``), read
    #: from the serialized model (see :mod:`onyxrt.raw_weights`).
    arrays: dict[str, Any] = field(default_factory=dict)


def load_model(
    source: Any,
    external_files: Mapping[str, Any] | None = None,
    supplied: Collection[str] = (),
    external_folder: str | os.PathLike[str] | None = None,
    read_external: bool = True,
    split_weights: bool = False,
) -> LoadedModel:
    """Read ``source`` (str/PathLike path, bytes, or ``ModelProto``) and its external data.

    ``external_files`` maps external-data file names (their ``location``) to the files'
    contents, which are read instead of the disk
    (``SessionOptions.add_external_initializers_from_files_in_memory``); external
    initializers named in ``supplied`` are not read at all: the caller provides their
    values (``SessionOptions.add_external_initializers``). ``external_folder``
    (``session.model_external_initializers_file_folder_path``) is the folder external
    files are read from instead of the model's; a model given as bytes or a ``ModelProto``
    reads external files only from there, never from the working directory. ``read_external=False`` leaves external references as they are (for
    tools that read only the model's metadata). ``split_weights`` leaves the large
    numeric initializers of a path or bytes without data in the proto, their values in
    :attr:`LoadedModel.arrays` (for a caller that reads initializers through it).

    Raises :class:`~onyxrt.errors.InvalidModel` for a missing, unreadable, malformed or
    truncated model, and :class:`~onyxrt.errors.UnsafeExternalData` for external data
    references that escape the model's folder or its file (see :mod:`onyxrt.external_data`).
    """
    roots: tuple[Path, ...] = ()
    if isinstance(source, ParsedModel):
        loaded = LoadedModel(source.proto, source.origin, None, arrays=dict(source.arrays))
    elif isinstance(source, onnx.ModelProto):
        model = onnx.ModelProto()
        model.CopyFrom(source)  # we fill in external data; never touch the caller's proto
        loaded = LoadedModel(model, "<ModelProto>", None)
    elif isinstance(source, (bytes, bytearray, memoryview)):
        loaded = _parsed(bytes(source), "<bytes>", None, None, split_weights)
    elif isinstance(source, (str, os.PathLike)):
        path = Path(os.fspath(source))
        data = read_model_file(path, into_array=split_weights)
        # The folder of the path as given, not of a symlink's target: external data sits
        # beside the path the user named (as onnxruntime resolves it); the real folder of
        # a symlinked model file is allowed too (onnxruntime's rule for Hugging Face's
        # cache, where model.onnx and its data link into blobs/).
        folder = path.absolute().parent
        loaded = _parsed(data, str(path), folder, path, split_weights)
        roots = _real_folders(folder, path)
    else:
        raise InvalidModel(
            f"cannot load a model from {type(source).__name__}; pass a file path, bytes or "
            "an onnx.ModelProto"
        )
    if external_folder is not None and os.fspath(external_folder):
        # Named by the caller: the folder for every model, given as a path too (as in
        # onnxruntime, which then looks only there).
        loaded.base_dir = Path(os.fspath(external_folder)).absolute()
        roots = _real_folders(loaded.base_dir, None)
    _check_header(loaded)
    _check_text(loaded.proto, loaded.origin)
    if read_external:
        from .external_data import ExternalDataReader  # on first use: off `import onyxrt`

        reader = ExternalDataReader(loaded.origin, loaded.base_dir, roots, external_files, supplied)
        reader.read_model(loaded.proto)
    return loaded


def _real_folders(folder: Path, model_path: Path | None) -> tuple[Path, ...]:
    """The real folders external data may be read from: ``folder`` and the folder of the
    model file's real path."""
    try:
        roots = [folder.resolve()]
        if model_path is not None:
            real_parent = model_path.resolve().parent
            if real_parent not in roots:
                roots.append(real_parent)
    except (OSError, RuntimeError) as exc:  # a symlink loop in the folder's path
        raise InvalidModel(f"cannot resolve the model's folder {str(folder)!r}: {exc}") from None
    return tuple(roots)


#: protobuf cannot parse a message of 2 GiB or more; larger models keep weights outside.
_MAX_MODEL_FILE_BYTES = 2**31 - 1


def read_model_file(path: Path, into_array: bool = False) -> Any:
    """The bytes of a model file: a regular file (a FIFO, device or ``/dev/zero`` is
    refused before anything is read) of at most protobuf's 2 GiB, read exactly. With
    ``into_array``, a writable numpy uint8 array (which :mod:`onyxrt.raw_weights`
    rearranges in place)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise ModelFileNotFound(f"model file not found: {str(path)!r}") from None
    except IsADirectoryError:
        raise InvalidModel(f"{str(path)!r} is a folder; pass the path of the .onnx file") from None
    except (OSError, ValueError) as exc:  # name too long, symlink loop, permission; NUL in path
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise InvalidModel(f"cannot open model file {str(path)!r}: {reason}") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise InvalidModel(f"{str(path)!r} is a folder; pass the path of the .onnx file")
        if not stat.S_ISREG(st.st_mode):
            raise InvalidModel(
                f"model file {str(path)!r} is not a regular file (a FIFO, device or socket); "
                "save the model to a file and load that"
            )
        if st.st_size > _MAX_MODEL_FILE_BYTES:
            raise InvalidModel(
                f"model file {str(path)!r} is {st.st_size} bytes; an ONNX model file holds at most "
                "2 GiB (protobuf's limit); store the weights as external data"
            )
        if into_array:
            import mmap

            import numpy as np

            # Anonymous memory, filled by the read alone: np.empty asks for huge pages (the
            # kernel's compaction for them stalled the first read up to ~1 s here), and a
            # bytearray is zeroed first (~80 ms for 500 MB).
            buffer = np.frombuffer(mmap.mmap(-1, max(st.st_size, 1)), np.uint8)
            done = 0
            while done < st.st_size:
                got = os.preadv(fd, [buffer.data[done:]], done)
                if not got:
                    break  # the file shrank: parse what is there (a truncated model is reported)
                done += got
            return buffer[:done]
        chunks = []
        done = 0
        while done < st.st_size:
            chunk = os.pread(fd, st.st_size - done, done)
            if not chunk:
                break  # the file shrank: parse what is there (a truncated model is reported)
            chunks.append(chunk)
            done += len(chunk)
        return b"".join(chunks)
    except OSError as exc:
        raise InvalidModel(f"cannot read model file {str(path)!r}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def _parsed(data: Any, origin: str, folder: Path | None, path: Path | None, split_weights: bool) -> LoadedModel:
    """``data`` (bytes, or with ``split_weights`` a uint8 array this call may rewrite)
    parsed, its large weights read apart (see :mod:`onyxrt.raw_weights`) when asked."""
    if not split_weights:
        return LoadedModel(_parse(data, origin), origin, folder, path)
    from .raw_weights import split_raw_weights, weight_views

    stripped, weights = split_raw_weights(data)
    model = _parse(bytes(stripped), origin)
    return LoadedModel(model, origin, folder, path, weight_views(model, data, weights) if weights else {})


def _parse(data: bytes, origin: str) -> onnx.ModelProto:
    if not data:
        raise ModelNotParsed(f"{origin}: the model is empty (0 bytes)")
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as exc:
        if "MaxDepth" in str(exc):  # protobuf's nesting limit (~100 messages deep)
            raise ModelNotParsed(
                f"{origin}: the model nests messages deeper than protobuf allows ({exc}): "
                "control-flow subgraphs (If/Loop/Scan bodies) can nest about 30 levels; "
                "flatten the nesting"
            ) from None
        raise ModelNotParsed(
            f"{origin}: not a valid ONNX model ({exc}); the file may be truncated or not "
            "an .onnx file"
        ) from None
    if not model.HasField("graph"):
        raise InvalidModel(f"{origin}: the data parsed but holds no graph; is it an ONNX model?")
    return model


def _check_text(message: Any, origin: str, path: Any = "model") -> None:
    """Every string field must hold valid UTF-8. onnx.proto is proto2, which does not
    check: upb hands a corrupt name back as ``bytes``, which the rest of the runtime (and
    onnx's own C++ functions) cannot take. Only string and message fields are read, never
    the bytes fields (``ListFields`` would hand out copies of the weights' raw data).
    ``path`` is built lazily, (parent, field, index) tuples turned into text only for an
    error: formatting it for each of a model's ~1000 messages cost ~2 ms."""
    if type(message) is onnx.TensorProto and _plain_tensor(message):
        return  # most messages of a model, and the only text is the name: checked there
    if type(message) is onnx.AttributeProto and _plain_attribute(message):
        return  # a number, numbers or bytes: its text fields are checked there
    if type(message) is onnx.NodeProto and _plain_node(message):
        return  # the other most frequent kinds, checked without a call per nested message
    if type(message) is onnx.ValueInfoProto and _plain_value_info(message):
        return
    strings, messages = _text_fields(message.DESCRIPTOR)
    for name, repeated in strings:
        for text in getattr(message, name) if repeated else (getattr(message, name),):
            if isinstance(text, bytes):
                raise InvalidModel(
                    f"{origin}: {_path_text(path)}.{name} is not valid UTF-8 text ({text[:40]!r}); "
                    "the file is corrupt or not an ONNX model"
                )
    for name, repeated in messages:
        if repeated:
            for i, item in enumerate(getattr(message, name)):
                _check_text(item, origin, (path, name, i))
        elif message.HasField(name):
            _check_text(getattr(message, name), origin, (path, name, None))


def _plain_tensor(tensor: Any) -> bool:
    """Whether a TensorProto's only text fields are a valid name and doc string (no
    external data, segment or metadata entries, which the general walk reads)."""
    return (
        not isinstance(tensor.name, bytes) and not isinstance(tensor.doc_string, bytes)
        and not tensor.external_data and not getattr(tensor, "metadata_props", ())
        and not tensor.HasField("segment")
    )


# Attribute types that hold no message with text of its own (strings are bytes fields).
_PLAIN_ATTRIBUTES = frozenset({
    onnx.AttributeProto.INT, onnx.AttributeProto.INTS, onnx.AttributeProto.FLOAT,
    onnx.AttributeProto.FLOATS, onnx.AttributeProto.STRING, onnx.AttributeProto.STRINGS,
})


def _plain_attribute(attr: Any) -> bool:
    """Whether an AttributeProto is a plain value whose text fields are all valid."""
    return (
        attr.type in _PLAIN_ATTRIBUTES and not isinstance(attr.name, bytes)
        and not isinstance(attr.ref_attr_name, bytes) and not isinstance(attr.doc_string, bytes)
    )


def _valid_strings(message: Any) -> bool:
    """Whether none of ``message``'s own string fields holds undecodable bytes."""
    for name, repeated in _text_fields(message.DESCRIPTOR)[0]:
        if repeated:
            if any(isinstance(text, bytes) for text in getattr(message, name)):
                return False
        elif isinstance(getattr(message, name), bytes):
            return False
    return True


def _plain_node(node: Any) -> bool:
    """Whether a NodeProto's text is valid and it holds nothing but plain attributes (no
    subgraph, metadata or device configuration, which the general walk reads)."""
    if not _valid_strings(node):
        return False
    for name, repeated in _text_fields(node.DESCRIPTOR)[1]:
        if name == "attribute":
            if not all(_plain_attribute(a) for a in node.attribute):
                return False
        elif len(getattr(node, name)) if repeated else node.HasField(name):
            return False
    return True


def _plain_value_info(vi: Any) -> bool:
    """Whether a ValueInfoProto of a tensor has valid text, dimension names included."""
    if not _valid_strings(vi) or len(getattr(vi, "metadata_props", ())) > 0:
        return False
    tp = vi.type
    if not tp.HasField("tensor_type") or isinstance(tp.denotation, bytes):
        return False  # sequences, maps, optionals: the general walk
    return not any(isinstance(d.dim_param, bytes) or isinstance(d.denotation, bytes)
                   for d in tp.tensor_type.shape.dim)


def _path_text(path: Any) -> str:
    """The text of a lazy path of :func:`_check_text`: ``model.graph.node[3]``."""
    if isinstance(path, str):
        return path
    parent, name, index = path
    return f"{_path_text(parent)}.{name}" + ("" if index is None else f"[{index}]")


_TEXT_FIELDS: dict[Any, tuple[tuple[tuple[str, bool], ...], tuple[tuple[str, bool], ...]]] = {}


def _text_fields(
    descriptor: Any,
) -> tuple[tuple[tuple[str, bool], ...], tuple[tuple[str, bool], ...]]:
    """(string fields, message fields) of a message type as (name, repeated), computed
    once per type: walking the descriptor for every message cost MobileNetV2's load 9 ms."""
    fields = _TEXT_FIELDS.get(descriptor)
    if fields is None:
        strings = tuple((fd.name, _is_repeated(fd)) for fd in descriptor.fields
                        if fd.type == FieldDescriptor.TYPE_STRING)
        messages = tuple((fd.name, _is_repeated(fd)) for fd in descriptor.fields
                         if fd.type == FieldDescriptor.TYPE_MESSAGE)
        fields = _TEXT_FIELDS[descriptor] = (strings, messages)
    return fields


if hasattr(FieldDescriptor, "is_repeated"):  # protobuf 6 replaced .label by .is_repeated

    def _is_repeated(fd: Any) -> bool:
        return bool(fd.is_repeated)

else:  # pragma: no cover - protobuf < 6

    def _is_repeated(fd: Any) -> bool:
        return bool(fd.label == fd.LABEL_REPEATED)


def _check_header(loaded: LoadedModel) -> None:
    model = loaded.proto
    if model.ir_version > onnx.IR_VERSION:
        raise InvalidModel(
            f"{loaded.origin}: IR version {model.ir_version} is newer than this runtime's onnx "
            f"supports ({onnx.IR_VERSION}); upgrade the onnx package"
        )
    newest = onnx.defs.onnx_opset_version()
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx") and imp.version > newest:
            raise InvalidModel(
                f"{loaded.origin}: opset {imp.version} is newer than the newest this runtime "
                f"knows ({newest}); upgrade the onnx package"
            )


def check_model(loaded: LoadedModel) -> None:
    """Check what the graph IR does not: every operator is known, every domain imported.

    onnx's own checker is deliberately not run: it is stricter than onnxruntime (it
    rejects nodes listed out of topological order and outputs declared without a shape,
    which onnxruntime runs) and its messages lose the node names. Structure (cycles,
    undefined values, duplicate producers) is checked by :class:`~onyxrt.graph.Graph`,
    naming the nodes. Unknown operators are :class:`~onyxrt.errors.NotImplementedOp`.
    """
    model = loaded.proto
    if not model.opset_import:
        raise InvalidModel(f"{loaded.origin}: the model imports no opset; set opset_import")
    _check_ops(model.graph, loaded.origin, opset_versions(model))
    _check_dims(model.graph, loaded.origin)
    known = set(onnx.TensorProto.DataType.values())
    for vi in [*model.graph.input, *model.graph.output, *model.graph.value_info]:
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type not in known:
            raise InvalidModel(
                f"{loaded.origin}: value {vi.name!r} declares element type "
                f"{vi.type.tensor_type.elem_type}, which ONNX does not define; the file is corrupt"
            )


def opset_versions(model: onnx.ModelProto) -> dict[str, int]:
    """The model's opset version per domain ("" for the default domain, however spelled)."""
    return {("" if i.domain == "ai.onnx" else i.domain): int(i.version) for i in model.opset_import}


def _check_ops(graph: onnx.GraphProto, origin: str, opsets: dict[str, int]) -> None:
    for node in graph.node:
        domain = "" if node.domain == "ai.onnx" else node.domain
        if domain in ("", "ai.onnx.ml", "ai.onnx.preview.training") and not _known_operator(
            node.op_type, domain
        ):
            raise UnknownOperator(
                f"{origin}: node {node.name or '(unnamed)'!r} uses unknown operator "
                f"{node.op_type!r} in domain {domain or 'ai.onnx'!r}; check the op name or "
                "register a custom-op provider for it"
            )
        if domain == "" and "" in opsets:
            _check_arity(node, origin, opsets[""])
        if domain not in opsets and domain != "":
            raise InvalidModel(
                f"{origin}: node {node.name or node.op_type!r} uses domain {domain!r} but the "
                "model imports no opset for it"
            )
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                _check_ops(attr.g, origin, opsets)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for g in attr.graphs:
                    _check_ops(g, origin, opsets)


_ATTRIBUTE_TYPES = frozenset(onnx.AttributeProto.AttributeType.values())


@record(frozen=True)
class _SchemaFacts:
    """What :func:`_check_arity` reads from one operator's schema at one opset."""

    since_version: int
    inputs: tuple[int, int]
    outputs: tuple[int, int]
    attribute_types: dict[str, int]
    required: tuple[str, ...]


@functools.lru_cache(maxsize=4096)
def _schema_facts(op_type: str, opset: int) -> _SchemaFacts | None:
    """The arity and attributes of a default-domain operator at ``opset`` (None if it is
    not defined there). Cached: ``get_schema`` builds a new schema object with its
    attribute table on each call, ~15 µs, once per node of every model."""
    try:
        schema = onnx.defs.get_schema(op_type, max_inclusive_version=opset, domain="")
    except onnx.defs.SchemaError:
        return None
    return _SchemaFacts(
        since_version=int(schema.since_version),
        inputs=(schema.min_input, schema.max_input),
        outputs=(schema.min_output, schema.max_output),
        # (a pybind enum; the stub lacks __int__)
        attribute_types={name: int(a.type) for name, a in schema.attributes.items()},  # type: ignore[call-overload]
        required=tuple(name for name, a in schema.attributes.items() if a.required),
    )


@functools.lru_cache(maxsize=4096)
def _known_operator(op_type: str, domain: str) -> bool:
    """onnx defines it, or an installed operator library declared it (onnxruntime's
    default-domain SimplifiedLayerNormalization, the old experimental operators)."""
    return bool(onnx.defs.has(op_type, domain)) or has_signature(domain, op_type)


def _check_arity(node: onnx.NodeProto, origin: str, opset: int) -> None:
    """A standard operator's input and output counts must fit its schema at the model's
    opset, and its attributes be the schema's (as onnxruntime checks when it resolves the
    graph): the optimizer's patterns and the kernels index a node's inputs by position."""
    facts = _schema_facts(node.op_type, opset)
    if facts is None:
        return  # not defined at this opset: the partitioner reports that no provider runs it
    op = f"{node.op_type}-{facts.since_version}"
    for what, count, (low, high) in (
        ("inputs", len(node.input), facts.inputs),
        ("outputs", len(node.output), facts.outputs),
    ):
        if not low <= count <= high:
            expected = f"{low}" if low == high else f"{low} to {high}" if high < 1 << 30 else f"at least {low}"
            raise InvalidGraph(
                f"{origin}: node {node.name or '(unnamed)'!r} ({node.op_type}) has {count} {what}, but "
                f"{op} takes {expected}; fix the node in the model"
            )
    # Unknown attributes too: an attribute of another version (ReduceMean's 'axes' became
    # an input in opset 18) would be honoured by a pattern reading it and ignored by the
    # kernel, so what the model computes would depend on the optimization level.
    types = facts.attribute_types
    for a in node.attribute:
        want = types.get(a.name)
        if want is None:
            raise InvalidGraph(
                f"{origin}: node {node.name or '(unnamed)'!r} ({node.op_type}) has attribute {a.name!r}, "
                f"which {op} (the version at the model's opset {opset}) does not define; it takes "
                f"{sorted(types) or 'no attributes'}"
            )
        if a.type != want:
            got = onnx.AttributeProto.AttributeType.Name(a.type) if a.type in _ATTRIBUTE_TYPES else str(a.type)
            raise InvalidGraph(
                f"{origin}: node {node.name or '(unnamed)'!r} ({node.op_type}): attribute {a.name!r} is of "
                f"type {got}, but {op} takes {onnx.AttributeProto.AttributeType.Name(want)}; fix the "
                "node in the model"
            )
    if facts.required:
        names = {a.name for a in node.attribute}
        for name in facts.required:
            if name not in names:
                raise InvalidGraph(
                    f"{origin}: node {node.name or '(unnamed)'!r} ({node.op_type}) lacks the required "
                    f"attribute {name!r} of {op}; add it to the node"
                )


def _check_dims(graph: onnx.GraphProto, origin: str) -> None:
    """A negative declared dim (Paddle2ONNX and older exporters write -1 for a dynamic
    one) is read as unknown, as onnxruntime reads it; a negative initializer dim is an
    error. Either must be gone before onnx's shape inference (1.23) runs: it aborts the
    whole process on one (a C++ assertion in Slice's inference)."""
    for vi in [*graph.input, *graph.output, *graph.value_info]:
        if vi.type.HasField("tensor_type"):
            for d in vi.type.tensor_type.shape.dim:
                if d.HasField("dim_value") and d.dim_value < 0:
                    d.ClearField("dim_value")
    for t in graph.initializer:
        if any(d < 0 for d in t.dims):
            raise InvalidModel(f"{origin}: initializer {t.name!r} has negative dims {list(t.dims)}")
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                _check_dims(attr.g, origin)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for g in attr.graphs:
                    _check_dims(g, origin)
