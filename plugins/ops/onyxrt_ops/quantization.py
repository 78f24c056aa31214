"""Linear quantization, written once over an array namespace.

QuantizeLinear and DequantizeLinear (every version: per-tensor, per-axis and blocked
``block_size`` parameters, ``output_dtype``, ``saturate``, ``precision``),
DynamicQuantizeLinear, QLinearMatMul and QLinearConv, for the integer types int8, uint8, int16, uint16
and int32.

Scales and zero points are expanded once per call to a shape that broadcasts against the
data (blocked ones with ``repeat``). Quantizing divides in the scale's precision (or the
``precision`` attribute's; float16 and float64 natively, bfloat16 as float32 rounded to
bfloat16), rounds half to even (``xp.round``), adds the zero point in float32 at least and
clips to the integer range. QLinearMatMul accumulates ``(a - a_zero_point)`` products
exactly: in float32 while every partial sum of 8-bit products stays below 2**24, else in
float64, then requantizes. QLinearConv does the same around the library's Conv
(:mod:`onyxrt_ops.spatial`): x and y per-tensor, w per-tensor or per output channel, an
optional int32 bias added to the accumulator.

Attribute errors are :class:`~onyxrt.errors.InvalidGraph` naming the node; errors in the
data (a scale that does not match the axis or the blocks, a zero point of another type)
are ``ValueError`` from ``compute``.

Known gaps, left with the providers (declared away here, so a backend refuses them at
capability time): float8, float4/float6, 4- and 2-bit integer types and float8e8m0 scales,
which need ml_dtypes' casts and limits (the CPU provider overrides the kernels for them).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from onnx import helper

from onyxrt.dtypes import np_dtype
from onyxrt.errors import InvalidGraph
from onyxrt.kernels import KernelInfo

from .elementwise import _quiet
from .library import OpKernel, library
from .spatial import _Conv

# The operators are reached through ``library`` (this module registers them on import).
__all__: list[str] = []

#: The quantized types the standard holds (sub-byte and float8 types are the providers').
INTS = frozenset(np.dtype(t) for t in (np.int8, np.uint8, np.int16, np.uint16, np.int32))
#: Scale types without float8e8m0.
_SCALES = frozenset(np.dtype(t) for t in (np.float32, np.float16, np.float64, np.int32)) | {
    np_dtype(16)}  # bfloat16
_BYTES = frozenset(np.dtype(t) for t in (np.int8, np.uint8))
_F32, _F64 = np.dtype(np.float32), np.dtype(np.float64)


def expand(xp: Any, p: Any, shape: tuple[int, ...], axis: int, block: int, what: str) -> Any:
    """Scale or zero point ``p`` laid out to broadcast against data of ``shape``."""
    pshape = tuple(p.shape)
    size = int(np.prod(pshape))
    if size == 1 and (len(pshape) <= 1 or block <= 0):
        return xp.reshape(p, ())
    rank = len(shape)
    if not -rank <= axis < rank:
        raise ValueError(f"axis {axis} is out of range for data of rank {rank}")
    axis %= rank
    dim = shape[axis]
    if block > 0:
        want = shape[:axis] + (-(-dim // block),) + shape[axis + 1 :]
        if pshape != want:
            raise ValueError(f"{what} has shape {list(pshape)}; blocked quantization of shape "
                             f"{list(shape)} with block_size={block} on axis {axis} needs {list(want)}")
        return xp.repeat(p, block, axis=axis)[(slice(None),) * axis + (slice(0, dim), Ellipsis)]
    if len(pshape) != 1 or pshape[0] != dim:
        raise ValueError(f"{what} has shape {list(pshape)}; per-axis quantization on axis {axis} "
                         f"of shape {list(shape)} needs a 1-D tensor of {dim} values")
    return xp.reshape(p, (dim,) + (1,) * (rank - axis - 1))


class _Quant(OpKernel):
    """Helpers of the quantized operators: dtypes by name and float views."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.f32, self.f64 = self.backend.dtype(_F32), self.backend.dtype(_F64)

    def np_dtype(self, x: Any) -> np.dtype[Any]:
        """``x``'s dtype as a numpy dtype."""
        return self.backend.numpy_dtype(x.dtype)

    def as_float(self, a: Any) -> Any:
        """``a`` in float32 (float64 stays float64, 32-bit ints go to float64: exact)."""
        dt = self.np_dtype(a)
        if dt == _F64:
            return a
        return self.xp.astype(a, self.f64 if dt.kind in "iu" and dt.itemsize >= 4 else self.f32)

    def saturate(self, q: Any, out: np.dtype[Any]) -> Any:
        """Rounded values ``q`` clipped to ``out``'s range, as ``out``."""
        ii = np.iinfo(out)
        return self.xp.astype(self.xp.clip(q, float(ii.min), float(ii.max)), self.backend.dtype(out))


class LinearQuant(_Quant):
    """Attributes shared by QuantizeLinear and DequantizeLinear."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.axis = int(info.attr("axis", 1))
        self.block_size = int(info.attr("block_size", 0)) if info.since_version >= 21 else 0
        if self.block_size < 0:
            raise InvalidGraph(f"{self.where()}: block_size={self.block_size} must be >= 0")
        code = int(info.attr("output_dtype", 0)) if info.since_version >= 21 else 0
        self.output_dtype = self.elem_dtype(code, "output_dtype") if code else None

    def elem_dtype(self, code: int, attr: str) -> np.dtype[Any]:
        """The numpy dtype of ONNX element type ``code`` (an attribute's value)."""
        try:
            return np_dtype(code)
        except (KeyError, TypeError, ValueError):
            pass
        try:  # types onyxrt does not name (float6): onnx's numpy mapping
            return np.dtype(helper.tensor_dtype_to_np_dtype(code))
        except (KeyError, TypeError, ValueError):
            raise InvalidGraph(f"{self.where()}: {attr}={code} is not a supported element type") from None

    def expand(self, p: Any, shape: tuple[int, ...], what: str) -> Any:
        """:func:`expand` with this node's axis and block size."""
        return expand(self.xp, p, shape, self.axis, self.block_size, what)


def _define_quantize(cls: type[OpKernel]) -> type[OpKernel]:
    library.define("QuantizeLinear", (10, 13, 19, 21), types={"T2": INTS})(cls)
    return library.define("QuantizeLinear", (23, 24, 25, 28), types={"T2": _SCALES, "T3": INTS})(cls)


@_define_quantize
class QuantizeLinear(LinearQuant):
    """``y = saturate(round_half_even(x / y_scale) + y_zero_point)``; per-tensor, per-axis
    or blocked; the output is the zero point's type, else ``output_dtype``, else uint8."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        if self.output_dtype is not None and self.output_dtype.kind == "f":
            raise InvalidGraph(f"{self.where()}: output_dtype {self.output_dtype} is not a quantized type")
        #: float8 outputs only (a provider's override): whether overflow clamps to +-max.
        self.saturate_float8 = bool(info.attr("saturate", 1)) if info.since_version >= 19 else True
        code = int(info.attr("precision", 0)) if info.since_version >= 23 else 0
        self.precision = self.elem_dtype(code, "precision") if code else None
        if self.precision is not None and not self.backend.holds(self.precision):
            raise InvalidGraph(f"{self.where()}: {self.backend.name} cannot compute in {self.precision}")

    def out_dtype(self, y_zero_point: Any) -> np.dtype[Any]:
        """The output type: the zero point's (which must agree with ``output_dtype``)."""
        out = self.output_dtype
        if y_zero_point is not None:
            zdt = self.np_dtype(y_zero_point)
            if out is not None and out != zdt:
                raise ValueError(f"y_zero_point is {zdt} but output_dtype is {out}")
            out = zdt
        return np.dtype(np.uint8) if out is None else out

    def compute(self, x, y_scale, y_zero_point=None):
        out = self.out_dtype(y_zero_point)
        shape = tuple(x.shape)
        s = self.expand(y_scale, shape, "the scale")
        precision = self.precision or self.np_dtype(s)
        with _quiet():
            q = self.divide(x, s, precision)
            # Then the zero point in float32 at least: exact for every value that can land
            # inside a <= 16-bit range.
            wide = self.f64 if q.dtype == self.f64 else self.f32
            q = q if q.dtype == wide else self.xp.astype(q, wide)
            if y_zero_point is not None:
                q = q + self.xp.astype(self.expand(y_zero_point, shape, "the zero point"), wide)
            return (self.saturate(q, out),)

    def divide(self, x: Any, s: Any, precision: np.dtype[Any]) -> Any:
        """``round_half_even(x / s)`` computed in ``precision`` (bfloat16: in float32,
        rounded to bfloat16)."""
        xp = self.xp
        if precision.name in ("float16", "float64"):
            dt = self.backend.dtype(precision)
            return xp.round(xp.astype(x, dt) / xp.astype(s, dt))
        q = xp.astype(self.as_float(x), self.f32) / xp.astype(self.as_float(s), self.f32)
        if precision.name == "bfloat16":
            q = xp.astype(xp.astype(q, self.backend.dtype(precision)), self.f32)
        return xp.round(q)


def _define_dequantize(cls: type[OpKernel]) -> type[OpKernel]:
    library.define("DequantizeLinear", (10, 13), types={"T": INTS})(cls)
    library.define("DequantizeLinear", (19, 21, 23), types={"T1": INTS})(cls)
    return library.define("DequantizeLinear", (24, 25, 28), types={"T1": INTS, "T2": _SCALES})(cls)


@_define_dequantize
class DequantizeLinear(LinearQuant):
    """``y = (x - x_zero_point) * x_scale``; per-tensor, per-axis or blocked; the output is
    ``output_dtype`` or the scale's type."""

    def compute(self, x, x_scale, x_zero_point=None):
        xp = self.xp
        xdt, sdt = self.np_dtype(x), self.np_dtype(x_scale)
        out = self.output_dtype or (sdt if sdt.kind == "f" or sdt.name == "bfloat16" else _F32)
        if x_zero_point is not None and self.np_dtype(x_zero_point) != xdt:
            raise ValueError(f"x_zero_point is {self.np_dtype(x_zero_point)}, x is {xdt}; they must match")
        shape = tuple(x.shape)
        # int32: subtract exactly in int64, then round; narrower ints: exact in float32.
        wide = self.backend.dtype(np.int64) if xdt.itemsize >= 4 else self.f32
        d = xp.astype(x, wide)
        if x_zero_point is not None:
            d = d - xp.astype(self.expand(x_zero_point, shape, "the zero point"), wide)
        s = self.as_float(self.expand(x_scale, shape, "the scale"))
        return (xp.astype(xp.astype(d, self.f32) * s, self.backend.dtype(out)),)


@library.define("DynamicQuantizeLinear", 11)
class DynamicQuantizeLinear(_Quant):
    """uint8 quantization of ``x`` with a scale and zero point from its range (with 0)."""

    def compute(self, x):
        xp = self.xp
        u8 = self.backend.dtype(np.uint8)
        xf = xp.astype(x, self.f32) if x.dtype != self.f32 else x
        empty = 0 in x.shape
        lo = min(0.0, float(xp.min(xf))) if not empty else 0.0
        hi = max(0.0, float(xp.max(xf))) if not empty else 0.0
        scale = np.float32((np.float32(hi) - np.float32(lo)) / np.float32(255))
        if scale == 0:  # all zeros: scale 1 like onnxruntime (0 would break a requantize)
            return (xp.zeros(x.shape, dtype=u8), xp.asarray(1.0, dtype=self.f32), xp.asarray(0, dtype=u8))
        zp = np.uint8(np.clip(np.rint(np.float32(0) - np.float32(lo) / scale), 0, 255))
        with _quiet():
            y = xp.clip(xp.round(xf / float(scale)) + float(zp), 0.0, 255.0)
        return xp.astype(y, u8), xp.asarray(float(scale), dtype=self.f32), xp.asarray(int(zp), dtype=u8)


class QLinear(_Quant):
    """Base of the quantized products: the accumulator type, centered operands and the
    requantization of the result."""

    def acc_dtype(self, a: Any, b: Any, k: int) -> Any:
        """float32 when sums of ``k`` products of centered 8-bit ints stay below 2**24
        (every partial sum exact, in any order), else float64."""
        small = self.np_dtype(a) in _BYTES and self.np_dtype(b) in _BYTES
        return self.f32 if small and k * 255 * 255 < 1 << 24 else self.f64

    def centered(self, v: Any, zp: Any, dtype: Any) -> Any:
        """``v - zp`` in ``dtype`` (exact for 8-bit ints)."""
        d = self.xp.astype(v, dtype)
        return d if zp is None else d - self.xp.astype(zp, dtype)

    def requantize(self, acc: Any, real_scale: Any, y_scale: Any, y_zero_point: Any) -> Any:
        """Integer accumulator ``acc`` times ``real_scale`` quantized with y's parameters."""
        xp = self.xp
        if int(np.prod(tuple(y_scale.shape))) != 1:
            raise ValueError(f"y_scale must be a scalar (per-tensor), got shape {list(y_scale.shape)}")
        ys = xp.reshape(xp.astype(self.as_float(y_scale), self.f32), ())
        real = xp.astype(xp.astype(acc, self.f64) * real_scale, self.f32)  # float32 like the scales
        with _quiet():
            q = xp.astype(xp.round(real / ys), self.f64)
            q = q + xp.astype(xp.reshape(y_zero_point, ()), self.f64)
            return self.saturate(q, self.np_dtype(y_zero_point))


@library.define("QLinearMatMul", (10, 21), types={"T1": _BYTES, "T2": _BYTES, "T3": _BYTES})
class QLinearMatMul(QLinear):
    """Quantized numpy-style matmul: per-tensor, per-row (a) or per-column (b) parameters."""

    def compute(self, a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point):
        xp = self.xp

        def row_param(p):  # a's per-row parameters: [M] → [M, 1]; N-D ones broadcast
            return xp.reshape(p, (-1, 1)) if p.ndim == 1 and p.shape[0] > 1 else p

        dt = self.acc_dtype(a, b, a.shape[-1] if a.ndim else 1)
        acc = xp.matmul(self.centered(a, None if a_zero_point is None else row_param(a_zero_point), dt),
                        self.centered(b, b_zero_point, dt))
        real_scale = (xp.astype(self.as_float(row_param(a_scale)), self.f32)
                      * xp.astype(self.as_float(b_scale), self.f32))
        return (self.requantize(acc, xp.astype(real_scale, self.f64), y_scale, y_zero_point),)


@library.define("QLinearConv", 10, types={"T1": _BYTES, "T2": _BYTES, "T3": _BYTES})
class QLinearConv(QLinear, _Conv):
    """Quantized N-d convolution (per-tensor x and y, per-tensor or per-channel w) with an
    optional int32 bias, accumulated exactly and requantized."""

    def compute(self, x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, bias=None):
        xp = self.xp
        if x.ndim < 3 or w.ndim != x.ndim:
            raise ValueError(f"X must have rank >= 3 and W the same rank; got {list(x.shape)}, {list(w.shape)}")
        if x_zero_point is not None and math.prod(x_zero_point.shape) != 1:
            raise ValueError("x_zero_point must be a scalar (per-tensor)")
        m = w.shape[0]
        channel = (m,) + (1,) * (w.ndim - 2)  # broadcasts over Y (N, M, *out)
        if w_zero_point is not None and math.prod(w_zero_point.shape) != 1:
            w_zero_point = xp.reshape(w_zero_point, channel + (1,))  # over W (M, C/group, *k)
        dt = self.acc_dtype(x, w, math.prod(w.shape[1:]))
        xz = None if x_zero_point is None else xp.reshape(x_zero_point, ())
        # Padding with 0 is padding with x's zero point once it is subtracted.
        acc = xp.astype(self.convolve(self.centered(x, xz, dt), self.centered(w, w_zero_point, dt)), self.f64)
        if bias is not None:
            acc = acc + xp.reshape(xp.astype(bias, self.f64), channel)
        ws = xp.astype(self.as_float(w_scale), self.f32)
        ws = xp.reshape(ws, () if math.prod(ws.shape) == 1 else channel)
        real_scale = xp.reshape(xp.astype(self.as_float(x_scale), self.f32), ()) * ws
        return (self.requantize(acc, xp.astype(real_scale, self.f64), y_scale, y_zero_point),)
