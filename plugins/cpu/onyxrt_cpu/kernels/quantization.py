"""CPU kernels: linear quantization (QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear,
QLinearMatMul, QLinearConv).

Scales and zero points are per-tensor (a scalar or one value), per-axis (1-D, one value per
index of ``axis``) or blocked (the input's rank, ``ceil(D/block_size)`` along ``axis``); they
are expanded once to a shape that broadcasts against the data. Quantizing divides in the
scale's precision (or the ``precision`` attribute's), rounds half to even and clips to the
integer range; float8/float6/float4 targets are reached by an ml_dtypes cast, clamped to the
largest finite value first when ``saturate`` is set. The quantized matmul and conv accumulate
``(x - x_zero_point)`` products exactly in float64 (8-bit products summed far below 2**53)
and requantize the result.

Every operator but QLinearConv is the library's (:mod:`onyxrt_ops.quantization`, whose
attribute parsing these kernels inherit) with its numpy computation kept as an override:
the library's kernel over numpy was slower on int8 models (per-tensor, before -> library:
QuantizeLinear [4,8] 25 -> 64 us and [1,64,56,56] 405 -> 453 us; DequantizeLinear
7.3 -> 33.6 us and 54 -> 114 us; DynamicQuantizeLinear [1,64,56,56] 264 -> 421 us;
QLinearMatMul 4x8x4 42 -> 96 us, 256x512x256 24 -> 32 ms), and only numpy (ml_dtypes)
holds the float8, float6/float4 and 4/2-bit types. QLinearConv keeps the float Conv's
numpy im2col over the library's convolution (uint8 x, int8 w, per-tensor, with bias; before
-> library: [1,2,5,5] * [2,2,3,3] 34.5 -> 69.7 us, [1,16,56,56] * [32,16,1,1] 277 -> 594 us;
only [1,64,28,28] * [64,64,3,3] was faster from the library, 3.5 -> 2.8 ms).
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

from onyxrt.kernels import KernelInfo
from onyxrt.records import record
from onyxrt_ops import library
from onyxrt_ops.quantization import expand

from .. import native
from . import registry
from ._backend import BACKEND
from ._spatial import window
from .conv import conv_forward, pack_conv_weight

__all__ = [
    "QuantizeLinear",
    "DequantizeLinear",
    "QLinearMatMul",
    "QLinearConv",
    "ConvInteger",
    "quantize",
    "dequantize",
    "is_scalar",
]

_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)
_BF16 = np.dtype(ml_dtypes.bfloat16)
_SUB_BYTE_INTS = frozenset(
    np.dtype(t) for t in (ml_dtypes.int4, ml_dtypes.uint4, ml_dtypes.int2, ml_dtypes.uint2)
)
# Float targets with Inf/NaN encodings: ``saturate`` decides what overflow becomes. The
# others (float4/float6) have none, and the cast itself clamps to the largest finite value.
_FLOAT8 = frozenset(
    np.dtype(t)
    for t in (
        ml_dtypes.float8_e4m3fn,
        ml_dtypes.float8_e4m3fnuz,
        ml_dtypes.float8_e5m2,
        ml_dtypes.float8_e5m2fnuz,
    )
)


def _is_int(dt: np.dtype[Any]) -> bool:
    return dt.kind in "iu" or dt in _SUB_BYTE_INTS


def _int_range(dt: np.dtype[Any]) -> tuple[int, int]:
    ii = ml_dtypes.iinfo(dt) if dt in _SUB_BYTE_INTS else np.iinfo(dt)
    return int(ii.min), int(ii.max)


def _as_float(a: np.ndarray) -> np.ndarray:
    """Values of ``a`` in float32 (float64 stays float64); ints exact up to 2**24."""
    a = np.asarray(a)
    if a.dtype == _F64:
        return a
    if a.dtype.kind in "iu" and a.dtype.itemsize >= 4:
        return a.astype(_F64)
    return a.astype(_F32)


def _expand(p: np.ndarray, shape: tuple[int, ...], axis: int, block: int, what: str) -> np.ndarray:
    """The library's layout of a scale or zero point (:func:`onyxrt_ops.quantization.expand`)
    over numpy."""
    return expand(np, np.asarray(p), shape, axis, block, what)


def _saturate(v: np.ndarray, out: np.dtype[Any], saturate: bool = True) -> np.ndarray:
    """Values ``v`` (divided by the scale, zero point added) as ``out``.

    Integer targets take ``v`` already rounded (half to even) and clip it to the type's
    range, NaN to the lowest value (as onnxruntime's MLAS, whose max(v, lo) picks ``lo``);
    float targets are an ml_dtypes cast, clamped to +-max first for float8 when
    ``saturate`` (NaN stays NaN).
    """
    if _is_int(out):
        lo, hi = _int_range(out)
        r = np.minimum(np.fmax(v, lo), hi)  # fmax: NaN -> lo
        return r.astype(out) if out not in _SUB_BYTE_INTS else r.astype(np.int32).astype(out)
    if saturate and out in _FLOAT8:
        limit = float(ml_dtypes.finfo(out).max)
        v = np.clip(v, -limit, limit)
    return np.asarray(v).astype(out)


def _divide(x: np.ndarray, scale: np.ndarray, precision: np.dtype[Any]) -> np.ndarray:
    """``x / scale`` computed in ``precision`` (bfloat16: in float32, rounded to bfloat16)."""
    if precision in (np.dtype(np.float16), _F64):
        return x.astype(precision) / scale.astype(precision)
    q = _as_float(x).astype(_F32, copy=False) / _as_float(scale).astype(_F32, copy=False)
    if precision == _BF16:
        q = q.astype(_BF16).astype(_F32)
    return q


def quantize(
    x: np.ndarray,
    scale: np.ndarray,
    zero_point: np.ndarray | None,
    out: np.dtype[Any],
    *,
    axis: int = 1,
    block_size: int = 0,
    saturate: bool = True,
    precision: np.dtype[Any] | None = None,
) -> np.ndarray:
    """``saturate(round(x / scale) + zero_point)`` as ``out``."""
    shape = tuple(x.shape)
    s = _expand(scale, shape, axis, block_size, "the scale")
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        q = _divide(x, s, np.dtype(precision or s.dtype))
        if _is_int(out):
            # Round in the division's precision, then add the zero point in float32 at
            # least: exact for every value that can land inside a <= 16-bit range.
            q = np.rint(q)
            if q.dtype.itemsize < 4:
                q = q.astype(_F32)
        if zero_point is not None:
            z = _expand(zero_point, shape, axis, block_size, "the zero point")
            q = q + _as_float(z).astype(q.dtype if q.dtype.itemsize >= 4 else _F32)
        return _saturate(q, out, saturate)


def dequantize(
    x: np.ndarray,
    scale: np.ndarray,
    zero_point: np.ndarray | None,
    out: np.dtype[Any],
    *,
    axis: int = 1,
    block_size: int = 0,
) -> np.ndarray:
    """``(x - zero_point) * scale`` as ``out``, computed in float32."""
    shape = tuple(x.shape)
    if _is_int(x.dtype) and x.dtype.itemsize >= 4:  # int32: subtract exactly, then round
        d = x.astype(np.int64)
        if zero_point is not None:
            z = _expand(zero_point, shape, axis, block_size, "the zero point")
            d = d - z.astype(np.int64)
        d = d.astype(_F32)
    else:  # <= 16-bit ints and small floats: exact in float32
        d = x.astype(_F32)
        if zero_point is not None:
            z = _expand(zero_point, shape, axis, block_size, "the zero point")
            d -= z.astype(_F32)
    s = _as_float(_expand(scale, shape, axis, block_size, "the scale"))
    return np.asarray((d * s).astype(out, copy=False))


@registry.register("QuantizeLinear", since=(10, 13, 19, 21, 23, 24, 25, 28))
class QuantizeLinear(library.kernel("QuantizeLinear", 28, BACKEND)):
    """The library's QuantizeLinear (its attribute parsing) computed with numpy, which
    also covers float8/float6/float4/4-bit/2-bit outputs and float8e8m0 scales."""

    def compute(self, x, y_scale, y_zero_point=None):
        out = self.output_dtype
        if y_zero_point is not None and y_zero_point.dtype != out:
            out = self.out_dtype(y_zero_point)  # the zero point's, checked against output_dtype
        out = np.dtype(np.uint8) if out is None else out
        if self.block_size == 0 and y_scale.ndim <= 1 and (self.precision is None or self.precision == _F32):
            fast = native.quantize8(x, y_scale, y_zero_point, out)
            if fast is not None:
                return (fast,)
        return (quantize(x, y_scale, y_zero_point, out, axis=self.axis,
                         block_size=self.block_size, saturate=self.saturate_float8,
                         precision=self.precision),)


@registry.register("DequantizeLinear", since=(10, 13, 19, 21, 23, 24, 25, 28))
class DequantizeLinear(library.kernel("DequantizeLinear", 28, BACKEND)):
    """The library's DequantizeLinear (its attribute parsing) computed with numpy, which
    also covers float8/float6/float4/4-bit/2-bit inputs and float8e8m0 scales."""

    def compute(self, x, x_scale, x_zero_point=None):
        if x_zero_point is not None and x_zero_point.dtype != x.dtype:
            raise ValueError(f"x_zero_point is {x_zero_point.dtype}, x is {x.dtype}; they must match")
        out = self.output_dtype
        if out is None:
            out = x_scale.dtype if x_scale.dtype.kind == "f" or x_scale.dtype == _BF16 else _F32
        if out == _F32 and self.block_size == 0 and x_scale.ndim <= 1:
            fast = native.dequantize8(x, x_scale, x_zero_point)
            if fast is not None:
                return (fast,)
        return (dequantize(x, x_scale, x_zero_point, out, axis=self.axis, block_size=self.block_size),)


@registry.register("DynamicQuantizeLinear", since=11)
class DynamicQuantizeLinear(library.kernel("DynamicQuantizeLinear", 11, BACKEND)):
    """The library's DynamicQuantizeLinear computed with numpy in place (no copies)."""

    def compute(self, x):
        xf = np.asarray(x, dtype=_F32)
        lo = min(0.0, float(xf.min())) if xf.size else 0.0
        hi = max(0.0, float(xf.max())) if xf.size else 0.0
        scale = np.float32((np.float32(hi) - np.float32(lo)) / np.float32(255))
        if scale == 0:  # all zeros: scale 1 like onnxruntime (0 would break a requantize)
            return np.zeros(xf.shape, np.uint8), np.asarray(1.0, dtype=_F32), np.asarray(0, dtype=np.uint8)
        zp = np.uint8(np.clip(np.rint(np.float32(0) - np.float32(lo) / scale), 0, 255))
        # round(x / scale) + zp saturated, in float32: one compiled pass where it runs
        y = native.quantize8(xf, np.asarray(scale, _F32), np.asarray(zp, np.uint8), np.dtype(np.uint8))
        if y is not None:
            return y, np.asarray(scale, dtype=_F32), np.asarray(zp, dtype=np.uint8)
        with np.errstate(over="ignore", invalid="ignore"):
            y = np.clip(np.rint(xf / scale) + np.float32(zp), 0, 255).astype(np.uint8)
        return y, np.asarray(scale, dtype=_F32), np.asarray(zp, dtype=np.uint8)


def _acc_dtype(a: np.ndarray, b: np.ndarray, k: int) -> np.dtype[Any]:
    """float32 when sums of ``k`` products of centered 8-bit ints stay below 2**24 (every
    partial sum exact, in any order), else float64."""
    small = all(_is_int(t.dtype) and t.dtype.itemsize == 1 for t in (a, b))
    return _F32 if small and k * 255 * 255 < 1 << 24 else _F64


def _centered(v: np.ndarray, zp: np.ndarray | None, dtype: np.dtype[Any]) -> np.ndarray:
    """``v - zp`` in ``dtype`` (exact for 8-bit ints and float8 values)."""
    d = np.asarray(v).astype(dtype)
    if zp is not None:
        d -= np.asarray(zp).astype(dtype)
    return d


def _requantize(acc: np.ndarray, real_scale: np.ndarray, y_scale, y_zero_point) -> np.ndarray:
    """Integer accumulator ``acc`` (float64) times ``real_scale`` quantized with y's params."""
    y_zero_point = np.asarray(y_zero_point)
    ys = _as_float(np.asarray(y_scale)).astype(_F32)
    if ys.size != 1:
        raise ValueError(f"y_scale must be a scalar (per-tensor), got shape {list(ys.shape)}")
    real = (acc * real_scale).astype(_F32)  # dequantized output, float32 like the scales
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        q = real / ys.reshape(())
        if _is_int(y_zero_point.dtype):
            q = np.rint(q).astype(_F64)
        q = q + _as_float(y_zero_point.reshape(())).astype(q.dtype)
        return _saturate(q, y_zero_point.dtype)


@registry.register("QLinearMatMul", since=(10, 21))
class QLinearMatMul(library.kernel("QLinearMatMul", 21, BACKEND)):
    """The library's QLinearMatMul computed with numpy, which also covers float8 operands
    (QLinearMatMul-21)."""

    def compute(self, a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point):
        def row_param(p):  # a's per-row parameters: [M] → [M, 1]; N-D ones broadcast
            return p.reshape(-1, 1) if p.ndim == 1 and p.size > 1 else p

        dt = _acc_dtype(a, b, a.shape[-1] if a.ndim else 1)
        acc = np.matmul(_centered(a, None if a_zero_point is None else row_param(a_zero_point), dt),
                        _centered(b, b_zero_point, dt))
        real_scale = _as_float(row_param(a_scale)).astype(_F32) * _as_float(b_scale).astype(_F32)
        return (_requantize(acc, real_scale.astype(_F64), y_scale, y_zero_point),)


#: QLinearConv's inputs: x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale,
#: y_zero_point, bias.
_X_SCALE, _X_ZP, _W, _W_SCALE, _W_ZP, _Y_SCALE, _Y_ZP, _BIAS = 1, 2, 3, 4, 5, 6, 7, 8
# The integer kernel sums at most this many products: |sum (a - za)(b - zb)| < K * 255**2
# stays inside int32 with room for the bias.
_MAX_INTEGER_K = 32000
# The depthwise kernel sums a channel's taps in float32, exact while every partial sum of
# products of centered 8-bit values stays below 2**24: 258 * 255**2 < 2**24 (wider filters
# take the GEMM, one group per channel).
_MAX_DEPTHWISE_TAPS = 258
_BYTE_TYPES = (np.dtype(np.int8), np.dtype(np.uint8))
#: Input shapes a QLinearConv keeps a prepared call for (batch sizes, image sizes).
_MAX_PREPARED_SHAPES = 16


@record(frozen=True)
class IntegerFilter:
    """QLinearConv's constant 8-bit weights prepared once for :func:`native.qconv`: the
    GEMM's left operand (uint8 ``a``: int8 weights + 128, so its zero points move alike)
    with its row sums, or, for depthwise filters, the weights minus their zero points in
    int16 (:func:`native.qconv_depthwise`)."""

    a: np.ndarray | None  # uint8 [M, K]
    rowsum: np.ndarray  # int32 [M]
    zero_point: np.ndarray  # int32 [M], a's zero point
    centered: np.ndarray | None  # int16 [M, kh * kw], depthwise only
    kernel: tuple[int, ...]

    @classmethod
    def prepare(cls, w: Any, w_zero_point: Any, group: int) -> IntegerFilter | None:
        """``None`` where the integer kernel does not apply (no VNNI, not 1-D/2-D, not
        8-bit, zero points neither per tensor nor per output channel, K too large).
        Depthwise filters of more than :data:`_MAX_DEPTHWISE_TAPS` taps are prepared for
        the GEMM path, where the sums are integers whatever their size."""
        if not native.QGEMM or not isinstance(w, np.ndarray) or w.dtype not in _BYTE_TYPES:
            return None
        if w.ndim not in (3, 4) or w.shape[0] % group or w.shape[0] == 0:
            return None
        m, k = w.shape[0], int(np.prod(w.shape[1:]))
        zp = np.zeros(m, np.int32) if w_zero_point is None else np.asarray(w_zero_point).astype(np.int32)
        if w_zero_point is not None and (not isinstance(w_zero_point, np.ndarray)
                                         or w_zero_point.dtype != w.dtype or zp.size not in (1, m)):
            return None
        zp = np.broadcast_to(zp.reshape(-1), (m,)).copy()
        if k == 0 or k > _MAX_INTEGER_K:
            return None
        kernel = tuple(int(d) for d in w.shape[2:])
        flat = w.reshape(m, k)
        if group == m and w.shape[1] == 1 and k <= _MAX_DEPTHWISE_TAPS:  # depthwise
            centered = (flat.astype(np.int16) - zp.reshape(-1, 1).astype(np.int16)).astype(np.int16)
            return cls(None, np.zeros(m, np.int32), zp, np.ascontiguousarray(centered), kernel)
        if w.dtype == np.int8:
            a = flat.view(np.uint8) ^ np.uint8(0x80)
            zp = zp + 128
        else:
            a = np.ascontiguousarray(flat)
        return cls(np.ascontiguousarray(a), a.sum(axis=1, dtype=np.int32), zp, None, kernel)


def is_scalar(v: Any, dtypes: tuple[Any, ...]) -> bool:
    """Whether ``v`` is a one-element array of one of ``dtypes`` (a per-tensor parameter
    the compiled quantized kernels take)."""
    return isinstance(v, np.ndarray) and v.size == 1 and v.dtype in dtypes


def _integer_geometry(kernel: Any, x: np.ndarray, f: IntegerFilter) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """The compiled integer convolutions' geometry for ``x`` under ``kernel``'s attributes
    (N, C, H, W, kh, kw, OH, OW, strides, leading pads, dilations; a 1-D convolution as
    one of height 1) and the output's spatial shape; ``None`` where kernel_shape
    disagrees with the filter (the numpy path names the mismatch)."""
    if kernel.attrs.kernel_shape is not None and kernel.attrs.kernel_shape != f.kernel:
        return None
    k, s, d, pb, pe = kernel.attrs.resolve(x.ndim - 2, f.kernel)
    win = window(x.shape[2:], k, s, d, pb, pe, kernel.attrs.auto_pad)
    if x.ndim == 3:  # 1-D: a 2-D convolution of height 1
        k, s, d = (1, *k), (1, *s), (1, *d)
        pads, out_hw, in_hw = (0, win.pads_begin[0]), (1, win.out_shape[0]), (1, x.shape[2])
    else:
        pads, out_hw, in_hw = tuple(win.pads_begin), tuple(win.out_shape), tuple(x.shape[2:])
    return (x.shape[0], x.shape[1], *in_hw, *k, *out_hw, *s, *pads, *d), tuple(win.out_shape)


@registry.register("QLinearConv", since=10)
class QLinearConv(library.kernel("QLinearConv", 10, BACKEND)):
    """The library's QLinearConv: with constant 8-bit weights on a CPU with AVX-512 VNNI,
    1-D and 2-D convolutions in integers (:class:`IntegerFilter`, csrc/qconv.c: the int8
    GEMM over packed im2col columns, or the depthwise kernel, requantized in the same
    float steps — bit-identical to the numpy path); otherwise the float Conv's numpy
    im2col (:func:`.conv.conv_forward`), accumulating exactly in float64."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        zero_point = info.constant(_W_ZP)
        # a zero point fed at run time cannot be folded into the prepared weights
        fed_zero_point = zero_point is None and info.has_input(_W_ZP)
        self._filter = None if fed_zero_point else IntegerFilter.prepare(info.constant(_W), zero_point, self.group)
        # x_scale, x_zero_point, w_scale, y_scale, y_zero_point and the bias all constants
        self._constant_parameters = all(
            info.constant(i) is not None or (i == _BIAS and not info.has_input(i))
            for i in (_X_SCALE, _X_ZP, _W_SCALE, _Y_SCALE, _Y_ZP, _BIAS))
        self._calls: dict[tuple[Any, ...], Any] = {}

    def compute(
        self, x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, bias=None
    ):
        if self._filter is not None:
            y = self._integer(x, x_scale, x_zero_point, w, w_scale, y_scale, y_zero_point, bias)
            if y is not None:
                return (y,)
        x = np.asarray(x)
        w = np.asarray(w)
        if x.ndim < 3 or w.ndim != x.ndim:
            raise ValueError(
                f"X must have rank >= 3 and W the same rank; got {list(x.shape)}, {list(w.shape)}"
            )
        m = w.shape[0]
        if m % self.group:
            raise ValueError(f"W has {m} output channels, not divisible by group={self.group}")
        kernel = tuple(int(k) for k in w.shape[2:])
        if self.attrs.kernel_shape is not None and self.attrs.kernel_shape != kernel:
            raise ValueError(
                f"kernel_shape {list(self.attrs.kernel_shape)} does not match W's {list(kernel)}"
            )
        nsp = x.ndim - 2
        k, s, d, pb, pe = self.attrs.resolve(nsp, kernel)
        win = window(x.shape[2:], k, s, d, pb, pe, self.attrs.auto_pad)
        if x_zero_point is not None and np.size(x_zero_point) != 1:
            raise ValueError("x_zero_point must be a scalar (per-tensor)")
        per_channel = (1,) * nsp
        wz = None if w_zero_point is None else np.asarray(w_zero_point)
        if wz is not None and wz.size != 1:
            wz = wz.reshape((m, 1) + per_channel)
        dt = _acc_dtype(x, w, w[0].size)
        xc = _centered(x, x_zero_point, dt)  # padding with 0 is padding with x's zero point
        wp = _centered(w, wz, dt).reshape(self.group, m // self.group, -1)
        acc = conv_forward(xc, wp, k, s, d, win).astype(_F64, copy=False)
        if bias is not None:
            acc = acc + np.asarray(bias).astype(_F64).reshape((m,) + per_channel)
        ws = _as_float(np.asarray(w_scale)).astype(_F32)
        ws = ws.reshape(()) if ws.size == 1 else ws.reshape((m,) + per_channel)
        real_scale = _as_float(np.asarray(x_scale)).astype(_F32).reshape(()) * ws
        return (_requantize(acc, real_scale.astype(_F64), y_scale, y_zero_point),)

    def _integer(self, x, x_scale, x_zero_point, w, w_scale, y_scale, y_zero_point, bias):
        """The integer kernels' result, or ``None`` where they do not apply. With constant
        scales, zero points and bias (a QDQ model's), the call is prepared once per input
        shape."""
        if not isinstance(x, np.ndarray):
            return None
        key = (x.shape, x.dtype)
        call = self._calls.get(key) if self._constant_parameters else None
        if call is None:
            call = self._prepare(x, x_scale, x_zero_point, w, w_scale, y_scale, y_zero_point, bias)
            if self._constant_parameters and len(self._calls) < _MAX_PREPARED_SHAPES:
                self._calls[key] = call
        if call is False:
            return None
        kernel, before, after, shape, dtype = call
        y = np.empty(shape, dtype)
        kernel(np.ascontiguousarray(x), *before, y, *after)
        return y

    def _prepare(self, x, x_scale, x_zero_point, w, w_scale, y_scale, y_zero_point, bias):
        """The integer kernel's call for ``x`` (all but x and y), or ``False``."""
        f = self._filter
        assert f is not None
        m = w.shape[0]
        if (x.dtype not in _BYTE_TYPES or x.ndim != w.ndim
                or x.shape[1] != w.shape[1] * self.group or not is_scalar(x_scale, (_F32,))
                or not is_scalar(y_scale, (_F32,)) or not is_scalar(y_zero_point, _BYTE_TYPES)
                or (x_zero_point is not None and not is_scalar(x_zero_point, (x.dtype,)))
                or not isinstance(w_scale, np.ndarray) or w_scale.dtype != _F32
                or w_scale.size not in (1, m)):
            return False
        if bias is not None:
            if not isinstance(bias, np.ndarray) or bias.dtype != np.int32 or bias.shape != (m,):
                return False
            if bias.size and int(np.abs(bias.astype(np.int64)).max()) + int(np.prod(w.shape[1:])) * 65025 >= 1 << 31:
                return False
        placed = _integer_geometry(self, x, f)
        if placed is None:
            return False  # the numpy path names the mismatch
        geometry, out_shape = placed
        scale = (np.float32(x_scale.reshape(())) * w_scale.reshape(-1)).astype(_F64)
        scale = np.ascontiguousarray(np.broadcast_to(scale, (m,)))
        if not np.all(np.isfinite(scale)):
            return False
        flip = x.dtype == np.uint8  # uint8 x is read as int8 x - 128
        zx = 0 if x_zero_point is None else int(x_zero_point.reshape(()))
        zb = zx - 128 if flip else zx
        out_dtype = y_zero_point.dtype
        b = np.zeros(m, np.int32) if bias is None else np.ascontiguousarray(bias)
        requant = (flip, zb, float(y_scale.reshape(())), int(y_zero_point.reshape(())), *_int_range(out_dtype))
        shape = (x.shape[0], m, *out_shape)
        if f.centered is not None:
            return native.qconv_depthwise, (f.centered, b, scale), (geometry, *requant), shape, out_dtype
        return (native.qconv, (f.a, f.rowsum, f.zero_point, b, scale), (geometry, m, self.group, *requant),
                shape, out_dtype)


#: ConvInteger's inputs: x, w, x_zero_point, w_zero_point.
_CI_W, _CI_X_ZP, _CI_W_ZP = 1, 2, 3


@registry.register("ConvInteger", since=10)
class ConvInteger(library.kernel("ConvInteger", 10, BACKEND)):
    """Integer convolution of (x - x_zero_point) and (w - w_zero_point) into int32. With
    constant 8-bit weights (their zero point constant or absent) on a CPU with AVX-512
    VNNI, QLinearConv's integer kernels with their int32 output: the same exact sums,
    before any requantization (a dynamically quantized MobileNetV2's 52 ConvIntegers
    36.3 -> 3.5 ms, onnxruntime 6.3); otherwise the library's zero-point handling with its
    float64 convolution on the CPU's im2col GEMM (exact too)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        zero_point = info.constant(_CI_W_ZP)
        fed_zero_point = zero_point is None and info.has_input(_CI_W_ZP)
        self._filter = None if fed_zero_point else IntegerFilter.prepare(info.constant(_CI_W), zero_point, self.group)
        self._calls: dict[tuple[Any, ...], Any] = {}
        if self._filter is not None:
            # no requantization: a zero bias and unit scales fill the requantizing arguments
            m = self._filter.zero_point.shape[0]
            self._zeros, self._ones = np.zeros(m, np.int32), np.ones(m, _F64)

    def compute(self, x, w, x_zero_point=None, w_zero_point=None):
        if self._filter is not None:
            y = self._integer(x, x_zero_point)
            if y is not None:
                return (y,)
        return super().compute(x, w, x_zero_point, w_zero_point)

    def convolve(self, x, w):
        k, s, d, win = self._geometry(x, w)
        return conv_forward(x, pack_conv_weight(w, self.group, _F64), k, s, d, win)

    def _integer(self, x: Any, x_zero_point: Any) -> np.ndarray | None:
        """The int32 result of the integer kernels, or ``None`` where they do not apply
        (the zero point of x, fed at run time by DynamicQuantizeLinear, enters each call)."""
        f = self._filter
        assert f is not None
        if (not isinstance(x, np.ndarray) or x.dtype not in _BYTE_TYPES
                or (x_zero_point is not None and not is_scalar(x_zero_point, (x.dtype,)))):
            return None
        key = (x.shape, x.dtype)
        call = self._calls.get(key)
        if call is None:
            call = self._prepare(x)
            if len(self._calls) < _MAX_PREPARED_SHAPES:
                self._calls[key] = call
        if call is False:
            return None
        geometry, shape = call
        flip = x.dtype == np.uint8  # uint8 x is read as int8 x - 128
        zx = 0 if x_zero_point is None else int(x_zero_point.reshape(()))
        zb = zx - 128 if flip else zx
        y = np.empty(shape, np.int32)
        xc = np.ascontiguousarray(x)
        if f.centered is not None:
            native.qconv_depthwise(xc, f.centered, self._zeros, self._ones, y, geometry, flip, zb, 1.0, 0, 0, 0,
                                   int32_out=True)
        else:
            native.qconv(xc, f.a, f.rowsum, f.zero_point, self._zeros, self._ones, y, geometry, shape[1],
                         self.group, flip, zb, 1.0, 0, 0, 0, int32_out=True)
        return y

    def _prepare(self, x: np.ndarray) -> Any:
        """(geometry, output shape) for ``x``'s shape, or ``False``."""
        f = self._filter
        assert f is not None
        m = f.zero_point.shape[0]
        w_channels = x.shape[1] // self.group if x.ndim >= 3 else -1
        if x.ndim not in (3, 4) or x.ndim != len(f.kernel) + 2 or x.shape[1] % self.group:
            return False
        k_per_group = (f.a.shape[1] if f.a is not None else f.centered.shape[1]) // int(np.prod(f.kernel))
        if w_channels != k_per_group:
            return False  # the library names the channel mismatch
        placed = _integer_geometry(self, x, f)
        if placed is None:
            return False
        geometry, out_shape = placed
        return geometry, (x.shape[0], m, *out_shape)
