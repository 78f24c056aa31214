"""Large weights read straight from the serialized model into numpy, not parsed.

Parsing a model copies every weight into protobuf's memory, and reading a tensor's
``raw_data`` back out copies it once more (upb hands out bytes fields as new objects):
for a 435 MB BERT export the two copies cost ~0.6 s of a 1.7 s session creation. Before
parsing, :func:`split_raw_weights` walks the wire format of the model, its graph and
the graph's initializers (a few thousand fields: the nodes are copied as opaque spans),
and cuts the ``raw_data`` of every large numeric initializer out of the bytes protobuf
parses; :func:`weight_views` then reads each into a read-only, aligned numpy array (in
the loader's buffer itself when it may). The parsed model holds those initializers with
their name, type and dims only — the form the optimizer's computed weights already take
(:attr:`onyxrt.optimizer.PassContext.arrays`).

Anything the walk does not recognise (a group, a repeated graph field, a tensor with
segments or external data) is left in place: the model then parses as before, so a
malformed file fails where it always did, with the same message.
"""

from __future__ import annotations

import math
import sys
from collections import Counter
from collections.abc import Iterator
from typing import Any

import numpy as np
import onnx

from .graph import RAW_DTYPES
from .records import record

__all__ = ["RawWeight", "split_raw_weights", "weight_views"]

# Field numbers of onnx.proto (stable: they are the file format).
_MODEL_GRAPH = 7
_GRAPH_INITIALIZER = 5
_TENSOR_DATA_TYPE = 2
_TENSOR_SEGMENT = 3
_TENSOR_RAW_DATA = 9
_TENSOR_EXTERNAL_DATA = 13
_TENSOR_DATA_LOCATION = 14

_VARINT, _FIXED64, _LENGTH, _FIXED32 = 0, 1, 2, 5


@record(frozen=True)
class RawWeight:
    """Where the bytes of the ``index``-th top-level initializer lie in the serialized model."""

    index: int
    offset: int
    length: int


class _Unrecognised(Exception):
    """The bytes are not laid out as this walk expects: parse them whole instead."""


def _varint(buf: memoryview, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise _Unrecognised
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _fields(buf: memoryview, start: int, end: int) -> Iterator[tuple[int, int, int, int, int]]:
    """(field number, wire type, field start, payload start, payload end) of each field."""
    pos = start
    while pos < end:
        begin = pos
        tag, pos = _varint(buf, pos)
        number, wire = tag >> 3, tag & 7
        if wire == _VARINT:
            payload = pos
            _, pos = _varint(buf, pos)
        elif wire == _FIXED64:
            payload, pos = pos, pos + 8
        elif wire == _FIXED32:
            payload, pos = pos, pos + 4
        elif wire == _LENGTH:
            size, payload = _varint(buf, pos)
            pos = payload + size
        else:  # groups (deprecated) or garbage
            raise _Unrecognised
        if pos > end or number == 0:
            raise _Unrecognised
        yield number, wire, begin, payload, pos


def _tensor(buf: memoryview, start: int, end: int, min_bytes: int) -> tuple[int, int, int] | None:
    """(field start, bytes start, bytes end) of a tensor's raw_data field when it should
    be cut out, else None."""
    raw: tuple[int, int, int] | None = None
    numeric = False
    for number, wire, begin, payload, stop in _fields(buf, start, end):
        if number == _TENSOR_DATA_TYPE and wire == _VARINT:
            numeric = _varint(buf, payload)[0] in RAW_DTYPES
        elif number == _TENSOR_RAW_DATA and wire == _LENGTH:
            if raw is not None:
                return None  # written twice (protobuf keeps the last): leave it to protobuf
            raw = (begin, payload, stop)
        elif number in (_TENSOR_SEGMENT, _TENSOR_EXTERNAL_DATA, _TENSOR_DATA_LOCATION):
            return None
    return raw if numeric and raw is not None and raw[2] - raw[1] >= min_bytes else None


def split_raw_weights(data: Any, min_bytes: int = 4096) -> tuple[Any, list[RawWeight]]:
    """``data`` (a serialized ModelProto, bytes-like) without the ``raw_data`` of its top-level
    numeric initializers of at least ``min_bytes``, and where those bytes lie in ``data``.
    Returns ``data`` itself and no weights when the layout is not the expected one."""
    if sys.byteorder != "little":  # the views would need their bytes swapped
        return data, []
    buf = memoryview(data)
    try:
        graphs = [f for f in _fields(buf, 0, len(buf)) if f[0] == _MODEL_GRAPH]
        if len(graphs) != 1 or graphs[0][1] != _LENGTH:
            return data, []
        _, _, g_begin, g_start, g_end = graphs[0]
        pieces: list[bytes | memoryview] = []
        weights: list[RawWeight] = []
        kept = g_start  # graph bytes from here on are copied as they are
        index = 0
        for number, wire, begin, payload, stop in _fields(buf, g_start, g_end):
            if number != _GRAPH_INITIALIZER or wire != _LENGTH:
                continue
            cut = _tensor(buf, payload, stop, min_bytes)
            if cut is not None:
                field, raw_start, raw_end = cut
                # The tensor without its raw_data field (tag, length and bytes).
                body = bytes(buf[payload:field]) + bytes(buf[raw_end:stop])
                pieces += [buf[kept:begin], _encode_varint(_GRAPH_INITIALIZER << 3 | _LENGTH),
                           _encode_varint(len(body)), body]
                kept = stop
                weights.append(RawWeight(index, raw_start, raw_end - raw_start))
            index += 1
    except _Unrecognised:
        return data, []
    if not weights:
        return data, []
    pieces.append(buf[kept:g_end])
    graph = b"".join(pieces)
    model = b"".join([buf[:g_begin], _encode_varint(_MODEL_GRAPH << 3 | _LENGTH), _encode_varint(len(graph)),
                      graph, buf[g_end:]])
    return model, weights


def weight_views(model: onnx.ModelProto, data: Any, weights: list[RawWeight]) -> dict[str, np.ndarray]:
    """Name → a read-only array of ``data``'s bytes for each cut initializer of ``model``
    (parsed from :func:`split_raw_weights`' result). One whose bytes disagree with its
    type and dims, or whose name another initializer has too, gets its bytes back in
    ``model`` instead, so that the usual checks report it as they would have.

    A tensor's bytes lie at any offset of the file, and numpy copies a misaligned array
    whole before ``take`` and many other calls (BERT's 94 MB embedding table once per
    Gather: +60 ms a run). In a writable uint8 array (the file read by the loader) the
    weights are moved, in file order, to the 64-byte boundaries at or before where they
    lie — the bytes between them were parsed already — and viewed there; from ``bytes``
    each is copied out."""
    views: dict[str, np.ndarray] = {}
    counts = Counter(t.name for t in model.graph.initializer)
    in_place = isinstance(data, np.ndarray) and data.dtype == np.uint8 and data.flags.writeable
    base = data.ctypes.data if in_place else 0
    free = 0  # data[:free] holds moved weights
    for w in weights:
        tensor = model.graph.initializer[w.index]
        dtype = RAW_DTYPES.get(tensor.data_type)
        dims = tuple(tensor.dims)
        if (dtype is None or counts[tensor.name] != 1 or any(d < 0 for d in dims)
                or math.prod(dims) * dtype.itemsize != w.length):
            tensor.raw_data = bytes(data[w.offset:w.offset + w.length])
            continue
        at = free + (-(base + free) % 64)  # the next 64-byte boundary of the moved region
        if in_place and at <= w.offset:
            import ctypes  # memmove: the moves overlap, which numpy copies through a temporary

            ctypes.memmove(base + at, base + w.offset, w.length)
            value = data[at:at + w.length].view(dtype).reshape(dims)
            free = at + w.length
        else:
            value = np.frombuffer(data, dtype, math.prod(dims), w.offset).reshape(dims).copy()
        value.flags.writeable = False  # as the views of raw_data were: a weight is not written
        views[tensor.name] = value
    return views
