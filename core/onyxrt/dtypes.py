"""Element types: ONNX ``TensorProto`` codes, numpy dtypes and onnxruntime's type strings.

numpy has no float8/int4/bfloat16; ``ml_dtypes`` (a dependency of onnx) supplies them, so
every ONNX element type maps to one numpy dtype and back.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx import TensorProto, helper

__all__ = [
    "np_dtype",
    "onnx_elem_type",
    "type_string",
    "elem_type_from_string",
    "type_proto_string",
    "FLOAT_TYPES",
    "SIGNED_INT_TYPES",
    "UNSIGNED_INT_TYPES",
    "INT_TYPES",
    "NUMERIC_TYPES",
    "ALL_TENSOR_TYPES",
    "raw_byte_size",
]

# onnxruntime spells element types this way in NodeArg.type ('tensor(float)').
_TYPE_NAMES: dict[int, str] = {
    TensorProto.FLOAT: "float",
    TensorProto.UINT8: "uint8",
    TensorProto.INT8: "int8",
    TensorProto.UINT16: "uint16",
    TensorProto.INT16: "int16",
    TensorProto.INT32: "int32",
    TensorProto.INT64: "int64",
    TensorProto.STRING: "string",
    TensorProto.BOOL: "bool",
    TensorProto.FLOAT16: "float16",
    TensorProto.DOUBLE: "double",
    TensorProto.UINT32: "uint32",
    TensorProto.UINT64: "uint64",
    TensorProto.COMPLEX64: "complex64",
    TensorProto.COMPLEX128: "complex128",
    TensorProto.BFLOAT16: "bfloat16",
    TensorProto.FLOAT8E4M3FN: "float8e4m3fn",
    TensorProto.FLOAT8E4M3FNUZ: "float8e4m3fnuz",
    TensorProto.FLOAT8E5M2: "float8e5m2",
    TensorProto.FLOAT8E5M2FNUZ: "float8e5m2fnuz",
    TensorProto.UINT4: "uint4",
    TensorProto.INT4: "int4",
}
for _name in ("FLOAT4E2M1", "FLOAT8E8M0", "UINT2", "INT2"):
    if hasattr(TensorProto, _name):  # newer onnx releases only
        _TYPE_NAMES[getattr(TensorProto, _name)] = _name.lower()

_NP_BY_CODE: dict[int, np.dtype[Any]] = {}
for _code in _TYPE_NAMES:
    try:
        _NP_BY_CODE[_code] = np.dtype(helper.tensor_dtype_to_np_dtype(_code))
    except (KeyError, TypeError, ValueError):  # a type this onnx/ml_dtypes cannot express
        pass
_CODE_BY_NP: dict[np.dtype[Any], int] = {}
for _code, _dt in _NP_BY_CODE.items():
    _CODE_BY_NP.setdefault(_dt, _code)
_CODE_BY_NAME = {name: code for code, name in _TYPE_NAMES.items()}


def np_dtype(elem_type: int) -> np.dtype[Any]:
    """The numpy dtype holding ONNX element type ``elem_type`` (a ``TensorProto`` code)."""
    try:
        return _NP_BY_CODE[elem_type]
    except KeyError:
        raise TypeError(f"ONNX element type {elem_type} has no numpy equivalent") from None


def onnx_elem_type(dtype: Any) -> int:
    """The ``TensorProto`` code for a numpy dtype (strings and objects map to STRING)."""
    dt = np.dtype(dtype)
    if dt.kind in "OUS":
        return TensorProto.STRING
    try:
        return _CODE_BY_NP[dt]
    except KeyError:
        raise TypeError(f"numpy dtype {dt} has no ONNX element type") from None


def type_string(elem_type: int) -> str:
    """onnxruntime's spelling of a tensor type, e.g. ``'tensor(float)'``."""
    return f"tensor({_TYPE_NAMES.get(elem_type, 'undefined')})"


def type_proto_string(type_proto: Any) -> str:
    """onnxruntime's spelling of any value type (``NodeArg.type``): ``'tensor(float)'``,
    ``'seq(tensor(float))'``, ``'map(int64,tensor(float))'``, ``'optional(tensor(int64))'``,
    ``'sparse_tensor(float)'``."""
    which = type_proto.WhichOneof("value")
    if which == "tensor_type":
        return type_string(type_proto.tensor_type.elem_type)
    if which == "sparse_tensor_type":
        return f"sparse_{type_string(type_proto.sparse_tensor_type.elem_type)}"
    if which == "sequence_type":
        return f"seq({type_proto_string(type_proto.sequence_type.elem_type)})"
    if which == "optional_type":
        return f"optional({type_proto_string(type_proto.optional_type.elem_type)})"
    if which == "map_type":
        key = _TYPE_NAMES.get(type_proto.map_type.key_type, "undefined")
        return f"map({key},{type_proto_string(type_proto.map_type.value_type)})"
    return "unknown"


def elem_type_from_string(name: str) -> int:
    """Inverse of :func:`type_string` for the element part (``'float'`` → FLOAT)."""
    inner = name[len("tensor(") : -1] if name.startswith("tensor(") else name
    return _CODE_BY_NAME[inner]


def _dts(*codes: int) -> frozenset[np.dtype[Any]]:
    return frozenset(_NP_BY_CODE[c] for c in codes if c in _NP_BY_CODE)


FLOAT_TYPES = _dts(
    TensorProto.FLOAT16, TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.BFLOAT16
)
SIGNED_INT_TYPES = _dts(TensorProto.INT8, TensorProto.INT16, TensorProto.INT32, TensorProto.INT64)
UNSIGNED_INT_TYPES = _dts(
    TensorProto.UINT8, TensorProto.UINT16, TensorProto.UINT32, TensorProto.UINT64
)
INT_TYPES = SIGNED_INT_TYPES | UNSIGNED_INT_TYPES
NUMERIC_TYPES = FLOAT_TYPES | INT_TYPES
ALL_TENSOR_TYPES = frozenset(_NP_BY_CODE.values())


# Bits per element of the types ONNX packs several to a byte in raw data (low bits first).
_PACKED_BITS: dict[int, int] = {
    getattr(TensorProto, name): bits
    for name, bits in (("UINT4", 4), ("INT4", 4), ("FLOAT4E2M1", 4), ("UINT2", 2), ("INT2", 2))
    if hasattr(TensorProto, name)
}


def raw_byte_size(elem_type: int, count: int) -> int | None:
    """Bytes the raw data of ``count`` elements of ``elem_type`` holds (packed types
    round up to whole bytes), or None for types without a fixed size (strings) or that
    this runtime cannot size."""
    bits = _PACKED_BITS.get(elem_type)
    if bits is not None:
        return (count * bits + 7) // 8
    if elem_type == TensorProto.STRING:
        return None
    dt = _NP_BY_CODE.get(elem_type)
    return None if dt is None else count * dt.itemsize
