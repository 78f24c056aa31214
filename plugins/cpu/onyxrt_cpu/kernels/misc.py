"""CPU kernels: BitCast, CumProd and TensorScatter.

BitCast reinterprets the little-endian bits of each element (numpy ``view``); the 4- and
2-bit types (int4, uint4, float4e2m1, int2, uint2) are held one per byte in their low bits
by ml_dtypes, so they are masked to those bits and viewed byte for byte. CumProd mirrors
CumSum (runtime axis, ``exclusive``, ``reverse``; integers wrap around, half types are
multiplied in float32). TensorScatter writes an update window into a copy of a KV cache at
per-batch write indices, linearly or modulo the cache's sequence length.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from onyxrt.dtypes import np_dtype
from onyxrt.errors import InvalidGraph
from onyxrt.kernels import Kernel, KernelInfo

from . import registry

_BF16 = np_dtype(TensorProto.BFLOAT16)
_HALF_TYPES = (np.dtype(np.float16), _BF16)


def _node(info: KernelInfo) -> str:
    return f"{info.op_type} node {info.node_name!r}"


def _flag_attr(info: KernelInfo, name: str) -> bool:
    value = info.attr(name, 0)
    if value not in (0, 1):
        raise InvalidGraph(f"{_node(info)}: attribute {name!r} must be 0 or 1, got {value!r}")
    return bool(value)


# ------------------------------------------------------------------- BitCast


def _sub_byte_bits() -> dict[np.dtype, int]:
    bits: dict[np.dtype, int] = {}
    for name, width in (("INT4", 4), ("UINT4", 4), ("FLOAT4E2M1", 4), ("INT2", 2), ("UINT2", 2)):
        code = getattr(TensorProto, name, None)
        if code is None:
            continue
        try:
            bits[np_dtype(code)] = width
        except TypeError:  # this ml_dtypes cannot hold it
            pass
    return bits


_SUB_BYTE_BITS = _sub_byte_bits()


def _bit_width(dt: np.dtype) -> int:
    return _SUB_BYTE_BITS.get(dt, dt.itemsize * 8)


@registry.register("BitCast", since=26)
class BitCast(Kernel):
    """Reinterpret each element's bits as the ``to`` type (same bit width, same shape)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        to = info.attr("to")
        if to is None:
            raise InvalidGraph(f"{_node(info)}: attribute 'to' is required")
        if to == TensorProto.STRING:
            raise InvalidGraph(f"{_node(info)}: cannot bit-cast to string")
        try:
            self.to = np_dtype(int(to))
        except TypeError:
            raise InvalidGraph(f"{_node(info)}: 'to' = {to} is not a supported type") from None
        src = info.input_types[0].dtype if info.input_types and info.input_types[0] else None
        if src is not None and _bit_width(src) != _bit_width(self.to):
            raise InvalidGraph(
                f"{_node(info)}: cannot bit-cast {src} ({_bit_width(src)} bits) to "
                f"{self.to} ({_bit_width(self.to)} bits)"
            )

    def compute(self, x):
        x = np.asarray(x)
        if x.dtype.kind == "O":
            raise TypeError("BitCast does not accept string tensors")
        width = _bit_width(x.dtype)
        if width != _bit_width(self.to):
            raise ValueError(
                f"BitCast: {x.dtype} is {width} bits wide but {self.to} is "
                f"{_bit_width(self.to)} bits wide"
            )
        if x.dtype == self.to:
            return (x,)
        if width < 8:  # one value per byte, in the low bits
            raw = x.view(np.uint8) & np.uint8((1 << width) - 1)
            return (raw.view(self.to),)
        if x.dtype.byteorder == ">":
            x = x.astype(x.dtype.newbyteorder("<"))
        return (x.view(self.to),)  # same item size: any strides can be viewed


# ------------------------------------------------------------------- CumProd


@registry.register("CumProd", since=26)
class CumProd(Kernel):
    """Cumulative product along a runtime axis; ``exclusive`` shifts by one, ``reverse`` flips."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.exclusive = _flag_attr(info, "exclusive")
        self.reverse = _flag_attr(info, "reverse")

    def compute(self, x, axis):
        x = np.asarray(x)
        axis_arr = np.asarray(axis)
        if axis_arr.size != 1 or axis_arr.dtype.kind not in "iu":
            raise ValueError(f"CumProd: axis must be an integer scalar, got {axis_arr!r}")
        ax = int(axis_arr.reshape(()))
        if not -x.ndim <= ax < x.ndim:
            raise ValueError(f"CumProd: axis {ax} is out of range for rank {x.ndim}")
        ax %= x.ndim
        w = x.astype(np.float32) if x.dtype in _HALF_TYPES else x
        if self.reverse:
            w = np.flip(w, ax)
        out = np.cumprod(w, axis=ax, dtype=w.dtype)
        if self.exclusive and out.shape[ax] > 0:
            ones = np.ones_like(np.take(out, [0], axis=ax))
            head = np.take(out, np.arange(out.shape[ax] - 1), axis=ax)
            out = np.concatenate([ones, head], axis=ax)
        if self.reverse:
            out = np.flip(out, ax)
        return (np.asarray(out, dtype=x.dtype, order="C"),)


# ------------------------------------------------------------- TensorScatter


@registry.register("TensorScatter", since=24)
class TensorScatter(Kernel):
    """Copy ``past_cache`` and write ``update`` into it along ``axis`` at ``write_indices``."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.mode = info.attr("mode", "linear")
        if self.mode not in ("linear", "circular"):
            raise InvalidGraph(
                f"{_node(info)}: mode must be 'linear' or 'circular', got {self.mode!r}"
            )
        self.axis = int(info.attr("axis", -2))

    def compute(self, past, update, write_indices=None):
        past = np.asarray(past)
        update = np.asarray(update)
        if past.ndim < 2 or update.ndim != past.ndim:
            raise ValueError(
                f"TensorScatter: past_cache (rank {past.ndim}) and update (rank {update.ndim}) "
                "must have the same rank, at least 2"
            )
        ax = self.axis + past.ndim if self.axis < 0 else self.axis
        if not 0 < ax < past.ndim:
            raise ValueError(
                f"TensorScatter: axis {self.axis} must name a non-batch dim of rank {past.ndim}"
            )
        max_len, seq_len = past.shape[ax], update.shape[ax]
        other = [d for i, d in enumerate(past.shape) if i != ax]
        if other != [d for i, d in enumerate(update.shape) if i != ax] or seq_len > max_len:
            raise ValueError(
                f"TensorScatter: update shape {update.shape} does not fit past_cache shape "
                f"{past.shape} along axis {ax}"
            )
        batch = past.shape[0]
        if write_indices is None:
            start = np.zeros(batch, dtype=np.int64)
        else:
            start = np.asarray(write_indices).astype(np.int64).reshape(-1)
            if start.shape != (batch,):
                raise ValueError(
                    f"TensorScatter: write_indices has shape {np.shape(write_indices)}, "
                    f"expected ({batch},)"
                )
        pos = start[:, None] + np.arange(seq_len, dtype=np.int64)  # (batch, seq_len)
        if self.mode == "circular":
            pos %= max(max_len, 1)
        elif seq_len and (start.min() < 0 or pos.max() >= max_len):
            raise ValueError(
                f"TensorScatter: linear mode needs 0 <= write_indices and write_indices + "
                f"{seq_len} <= {max_len}, got write_indices {start.tolist()}"
            )
        out = past.copy()
        # A view of ``out`` with the batch dim first and the sequence dim second (the dims
        # between them move behind it); writing into the view writes into ``out``.
        out_v = np.moveaxis(out, ax, 1)
        out_v[np.arange(batch)[:, None], pos] = np.moveaxis(update, ax, 1)
        return (out,)
