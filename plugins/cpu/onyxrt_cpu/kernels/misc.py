"""CPU kernels: BitCast, and a numpy fast path of the library's TensorScatter.

CumProd and TensorScatter come from the operator library (:mod:`onyxrt_ops.reduction`,
:mod:`onyxrt_ops.indexing`), bound over numpy in ``kernels/__init__``. CumProd was measured
no slower (``kernel.compute`` on float32, best of 7: [2, 8] 2.9 us before, 2.5 us from the
library; exclusive and reversed 11.8 → 8.0; [64, 1024] 221 → 220, exclusive and reversed
317 → 252). TensorScatter writes one or two slices per batch, faster for the usual few
batches ([1, 8, 128, 64] cache, one-step update: 20.5 → 9.2 us; [8, 2, 4]: 14.3 → 10.9 us)
but not for many ([64, 2, 4]: 15.2 → 68.8 us; [64, 8, 128, 64]: 501 → 544 us), where the
override below keeps numpy's indexed assignment (after the library's checks, which read the
write indices as Python ints: 22.3 and 523 us).

BitCast stays CPU-only: a reinterpretation of bytes, which the array API standard cannot
express. It reinterprets the little-endian bits of each element (numpy ``view``); the 4- and
2-bit types (int4, uint4, float4e2m1, int2, uint2) are held one per byte in their low bits
by ml_dtypes, so they are masked to those bits and viewed byte for byte.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from onyxrt.dtypes import np_dtype
from onyxrt.errors import InvalidGraph
from onyxrt.kernels import Kernel, KernelInfo
from onyxrt_ops import library

from . import registry
from ._backend import BACKEND


def _node(info: KernelInfo) -> str:
    return f"{info.op_type} node {info.node_name!r}"


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


# ------------------------------------------------------------- TensorScatter


@registry.register("TensorScatter", since=24)
class TensorScatter(library.kernel("TensorScatter", 24, BACKEND)):
    """The library's TensorScatter, with more than 8 batches written by one indexed
    assignment instead of a slice assignment per batch."""

    def compute(self, past, update, write_indices=None):
        if past.ndim < 1 or past.shape[0] <= 8:
            return super().compute(past, update, write_indices)
        ax, starts = self.windows(past, update, write_indices)
        pos = np.asarray(starts)[:, None] + np.arange(update.shape[ax])  # (batch, seq_len)
        pos %= max(past.shape[ax], 1)  # only circular windows wrap; linear ones were checked
        out = past.copy()
        # A view of ``out`` with the batch dim first and the sequence dim second (the dims
        # between them move behind it); writing into the view writes into ``out``.
        np.moveaxis(out, ax, 1)[np.arange(past.shape[0])[:, None], pos] = np.moveaxis(update, ax, 1)
        return (out,)
