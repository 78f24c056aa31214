"""com.microsoft quantization and weight-only operators, written once over an array namespace.

What it holds (onnxruntime's CPU kernels are the reference, version 1 of each):

* QuantizeLinear / DequantizeLinear — the ai.onnx kernels of :mod:`onyxrt_ops.quantization`
  (per-tensor or per-axis; the com.microsoft schema has no blocks). 4-bit types are the CPU
  provider's (ml_dtypes), see ``onyxrt_cpu.kernels.contrib_quantization``;
* integer products with a float result: DynamicQuantizeMatMul, MatMulIntegerToFloat,
  QGemm (float or requantized output), MatMulInteger16;
* 8-bit tensors in and out: QLinearConv (ai.onnx's, plus ``channels_last``), QLinearAdd,
  QLinearMul, QLinearSigmoid, QLinearLeakyRelu, QLinearSoftmax, QLinearConcat,
  QLinearAveragePool, QLinearGlobalAveragePool, QLinearWhere;
* weight-only quantization: MatMulNBits (2/4/8-bit blocks packed in uint8, zero points
  packed or float), GatherBlockQuantized (uint8 data, 4- or 8-bit), MatMulBnb4
  (bitsandbytes FP4/NF4 code books) and MatMulFpQ4 (MLAS's 4-bit blob, deprecated);
* DynamicQuantizeLSTM (the library's LSTM gates; X and every step's H quantized to uint8
  dynamically as onnxruntime's ``ComputeGemm``, reverse sequences reordered as it does so
  that H is quantized over the same rows), QAttention (the library's Attention on the
  dequantized input and weights) and QEmbedLayerNormalization (the library's
  EmbedLayerNormalization on dequantized rows).

Semantics choices, so that integer outputs agree with onnxruntime bit for bit:

* integer accumulators are exact (float32 while sums of 8-bit products stay below 2**24,
  else float64 or int64), then multiplied by the float32 product of the scales — MLAS's
  ``float(acc) * scale`` output processors;
* requantizing divides by the output scale, rounds half to even and adds the zero point
  (``MlasQuantizeLinear``); the unary 8-bit operators build onnxruntime's 256-entry table the
  same way and index it (``xp.take``) so Sigmoid/LeakyRelu/Where/Concat cost one gather;
* QLinearSoftmax reproduces onnxruntime's table of ``exp`` (built in float64 on the host
  from the scalar scale) and its ``floor(1 / y_scale)`` multiplier; only the order of the
  float32 row sum differs (see the tests' ±1 allowance);
* packed sub-byte weights are unpacked with ``bitwise_right_shift``/``bitwise_and`` on uint8
  arrays, so a GPU backend unpacks them on the device.

Known gaps: MatMulNBits ``g_idx`` and prepacked weights (a ValueError at run time), and
MatMulNBits ``accuracy_level`` is accepted but every level is computed in float32 (onnxruntime
quantizes A to int8 at level 4, so its results differ from the float computation by the
quantization error of A); GatherBlockQuantized over int4/uint4/float8 data (types the array
API standard has no arrays of); the float16 scales of Q/DQ (onnxruntime's CPU kernels take
float only); DynamicQuantizeLSTM follows onnxruntime's single-thread grouping of H (its
batch-parallel path quantizes each thread's rows apart) and gives zero states where
onnxruntime leaves memory uninitialized (an empty sequence axis; without Y, the H rows of
empty sequences); QAttention's projection is float32, not onnxruntime's integer sums (equal
to float rounding); MatMulBnb4 ``transB=0`` (an InvalidGraph: onnxruntime's kernel then still
multiplies by B^T but with row stride K over an N x K buffer, reading past its end). MatMulFpQ4 reads its float32 scales out of the
byte blob with the backend's ``bitcast`` extra, so array-API-only backends lack it. Not
written: QMoE.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from onyxrt.errors import InvalidGraph
from onyxrt.kernels import KernelInfo

from .contrib_transformer import Attention, EmbedLayerNormalization
from .elementwise import _quiet
from .library import library
from .quantization import DequantizeLinear, QLinearConv, QuantizeLinear, _Quant
from .recurrent import LSTM
from .spatial import AveragePool

# The operators are reached through ``library`` (this module registers them on import).
__all__: list[str] = []

MS = "com.microsoft"
_U8, _I8 = np.dtype(np.uint8), np.dtype(np.int8)
BYTES = (np.uint8, np.int8)
F32 = (np.float32,)
_F16 = np.dtype(np.float16)


# --------------------------------------------------------------- QuantizeLinear family


@library.define("QuantizeLinear", 1, domain=MS, signature=(("T1", "T1", "T2"), ("T2",)),
                types={"T1": F32, "T2": (np.int8, np.uint8, np.int16, np.uint16)})
class MsQuantizeLinear(QuantizeLinear):
    """com.microsoft QuantizeLinear: ai.onnx's, per-tensor or per-axis (``axis``)."""


@library.define("DequantizeLinear", 1, domain=MS, signature=(("T1", "T2", "T1"), ("T2",)),
                types={"T1": (np.int8, np.uint8, np.int16, np.uint16, np.int32), "T2": F32})
class MsDequantizeLinear(DequantizeLinear):
    """com.microsoft DequantizeLinear: ai.onnx's, per-tensor or per-axis (``axis``)."""


class _Q8(_Quant):
    """Helpers of the 8-bit operators: scalar parameters, dequantize, requantize."""

    def scalar(self, p: Any, what: str) -> Any:
        """A per-tensor parameter (scalar or one value) as a 0-d array."""
        if p is None:
            return None
        if math.prod(p.shape) != 1:
            raise ValueError(f"{what} must be a scalar or a 1-element tensor, got shape {list(p.shape)}")
        return self.xp.reshape(p, ())

    def dequant(self, x: Any, scale: Any, zp: Any) -> Any:
        """``(x - zp) * scale`` in float32 (the subtraction is exact)."""
        xp = self.xp
        d = xp.astype(x, self.f32)
        if zp is not None:
            d = d - xp.astype(self.scalar(zp, "the zero point"), self.f32)
        return d * xp.astype(self.scalar(scale, "the scale"), self.f32)

    def quant(self, v: Any, scale: Any, zp: Any, dt: np.dtype[Any]) -> Any:
        """``saturate(round_half_even(v / scale) + zp)`` as ``dt`` (``MlasQuantizeLinear``)."""
        xp = self.xp
        with _quiet():
            q = xp.round(v / xp.astype(self.scalar(scale, "the output scale"), self.f32))
            if zp is not None:
                q = q + xp.astype(self.scalar(zp, "the output zero point"), self.f32)
        return self.saturate(q, dt)

    def levels(self, dt: np.dtype[Any]) -> Any:
        """The 256 values of 8-bit type ``dt``, ascending."""
        lo = -128 if dt == _I8 else 0
        return self.xp.astype(self.xp.arange(lo, lo + 256, dtype=self.backend.dtype(np.int32)),
                              self.backend.dtype(dt))

    def lookup(self, table: Any, x: Any) -> Any:
        """``table[x]`` for an 8-bit ``x`` and the 256-entry table of its values."""
        xp = self.xp
        idx = xp.astype(xp.reshape(x, (-1,)), self.backend.dtype(np.int64))
        if self.np_dtype(x) == _I8:
            idx = idx + 128
        return xp.reshape(xp.take(table, idx), x.shape)

    def requant_acc(self, acc: Any, multiplier: Any, zp: Any, dt: np.dtype[Any]) -> Any:
        """MLAS's requantization of an integer accumulator: ``round(float32(acc) *
        multiplier) + zp`` saturated to ``dt``."""
        xp = self.xp
        with _quiet():
            q = xp.round(xp.astype(acc, self.f32) * multiplier)
            if zp is not None:
                q = q + xp.astype(zp, self.f32)
        return self.saturate(q, dt)


_UNARY_SIG = (("T", "F", "T", "F", "T"), ("T",))
_UNARY_TYPES = {"T": BYTES, "F": F32}


class _QUnary(_Q8):
    """An 8-bit unary operator through onnxruntime's lookup table: every input level
    dequantized, :meth:`fn` applied in float32, quantized with y's parameters."""

    def fn(self, v: Any) -> Any:
        """The float function."""
        raise NotImplementedError

    def compute(self, x, x_scale, x_zero_point, y_scale, y_zero_point=None):
        dt = self.np_dtype(x)
        levels = self.levels(dt)
        with _quiet():
            table = self.quant(self.fn(self.dequant(levels, x_scale, x_zero_point)), y_scale, y_zero_point, dt)
        return (self.lookup(table, x),)


@library.define("QLinearSigmoid", 1, domain=MS, signature=_UNARY_SIG, types=_UNARY_TYPES)
class QLinearSigmoid(_QUnary):
    """Quantized logistic sigmoid (onnxruntime's table holds MLAS's approximation of the
    logistic; an exact one may land one unit away on a rare level)."""

    def fn(self, v):
        return 1.0 / (1.0 + self.xp.exp(-v))


@library.define("QLinearLeakyRelu", 1, domain=MS, signature=_UNARY_SIG, types=_UNARY_TYPES)
class QLinearLeakyRelu(_QUnary):
    """Quantized LeakyRelu (``alpha``, default 0.01)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.alpha = float(info.attr("alpha", 0.01))

    def fn(self, v):
        xp = self.xp
        return xp.where(v >= 0, v, v * xp.asarray(self.alpha, dtype=self.f32))


_BINARY_SIG = (("T", "F", "T", "T", "F", "T", "F", "T"), ("T",))


class _QBinary(_Q8):
    """An 8-bit elementwise binary operator, numpy broadcasting."""

    def compute(self, a, a_scale, a_zero_point, b, b_scale, b_zero_point, c_scale, c_zero_point=None):
        xp, f32 = self.xp, self.f32
        dt = self.np_dtype(a)
        if self.np_dtype(b) != dt:
            raise ValueError(f"A is {dt} and B is {self.np_dtype(b)}; they must match")
        ca = self.centered(a, self.scalar(a_zero_point, "A_zero_point"))
        cb = self.centered(b, self.scalar(b_zero_point, "B_zero_point"))
        sa, sb, sc = (xp.astype(self.scalar(s, n), f32) for s, n in
                      ((a_scale, "A_scale"), (b_scale, "B_scale"), (c_scale, "C_scale")))
        with _quiet():
            q = xp.round(self.combine(ca, cb, sa, sb, sc))
            if c_zero_point is not None:
                q = q + xp.astype(self.scalar(c_zero_point, "C_zero_point"), f32)
        return (self.saturate(q, dt),)

    def centered(self, v: Any, zp: Any) -> Any:
        """``v - zp`` in float32 (exact)."""
        d = self.xp.astype(v, self.f32)
        return d if zp is None else d - self.xp.astype(zp, self.f32)

    def combine(self, ca: Any, cb: Any, sa: Any, sb: Any, sc: Any) -> Any:
        """The result in units of C's scale, before rounding."""
        raise NotImplementedError


@library.define("QLinearAdd", 1, domain=MS, signature=_BINARY_SIG, types=_UNARY_TYPES)
class QLinearAdd(_QBinary):
    """``C = quantize(dequantize(A) + dequantize(B))``: MLAS scales each centered operand
    by its ratio to C's scale and adds."""

    def combine(self, ca, cb, sa, sb, sc):
        return ca * (sa / sc) + cb * (sb / sc)


@library.define("QLinearMul", 1, domain=MS, signature=_BINARY_SIG, types=_UNARY_TYPES)
class QLinearMul(_QBinary):
    """``C = quantize(dequantize(A) * dequantize(B))``: the centered product times
    ``A_scale * B_scale / C_scale``."""

    def combine(self, ca, cb, sa, sb, sc):
        return (ca * cb) * (sa * sb / sc)


@library.define("QLinearSoftmax", 1, domain=MS, signature=_UNARY_SIG, types=_UNARY_TYPES)
class QLinearSoftmax(_Q8):
    """Quantized softmax as onnxruntime computes it: ``exp`` from a 256-entry table
    indexed by ``x - max(x)``, pre-scaled so the row sum stays finite, each value times
    ``floor(1 / y_scale)`` over the row sum, rounded, plus the zero point. ``opset`` < 13
    coerces to 2-D at ``axis`` (default 1), else along ``axis`` (default -1)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        opset = info.attr("opset", None)
        if opset is None:
            raise InvalidGraph(f"{self.where()}: the opset attribute is required")
        self.opset = int(opset)
        self.axis = int(info.attr("axis", 1 if self.opset < 13 else -1))

    def compute(self, x, x_scale, x_zero_point, y_scale, y_zero_point):
        xp = self.xp
        dt = self.np_dtype(x)
        shape = tuple(x.shape)
        if math.prod(shape) == 0:
            return (x,)
        rank = len(shape)
        if not -rank <= self.axis < rank:
            raise ValueError(f"axis {self.axis} is out of range for an input of rank {rank}")
        axis = self.axis % rank
        reduce = math.prod(shape[axis:]) if self.opset < 13 else shape[axis]
        rows = xp.reshape(x, (-1, reduce)) if self.opset < 13 else xp.moveaxis(x, axis, -1)
        # onnxruntime's table (float64, then float32): exp((i - 255 + shift) * x_scale).
        xs = float(self.host(x_scale).reshape(-1)[0])
        shift = max(0.0, math.log(float(np.finfo(np.float32).max) / reduce) - 5) / xs
        table = np.exp((np.arange(256, dtype=np.float64) - 255 + shift) * xs).astype(np.float32)
        yscale = float(np.floor(np.float32(1.0) / self.host(y_scale).reshape(-1)[0].astype(np.float32)))
        i64 = self.backend.dtype(np.int64)
        r = xp.astype(rows, i64)
        idx = r - xp.max(r, axis=-1, keepdims=True) + 255
        e = xp.reshape(xp.take(xp.asarray(table), xp.reshape(idx, (-1,))), tuple(idx.shape))
        total = xp.sum(e, axis=-1, keepdims=True)
        with _quiet():
            q = xp.round(e * yscale / total) + xp.astype(xp.reshape(y_zero_point, ()), self.f32)
        q = self.saturate(q, dt)
        return (xp.reshape(q, shape) if self.opset < 13 else xp.moveaxis(q, -1, axis),)


@library.define("QLinearConcat", 1, domain=MS, signature=(("TF", "T8", "TV"), ("T8",)),
                types={"TF": F32, "T8": BYTES, "TV": (np.uint8, np.int8, np.float32)})
class QLinearConcat(_Q8):
    """Concat of 8-bit tensors, each (tensor, scale, zero point) triple requantized to
    Y's parameters (onnxruntime's dequantize→quantize table) along ``axis``."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        axis = info.attr("axis", None)
        if axis is None:
            raise InvalidGraph(f"{self.where()}: the axis attribute is required")
        self.axis = int(axis)

    def compute(self, y_scale, y_zero_point, *inputs):
        xp = self.xp
        if not inputs or len(inputs) % 3:
            raise ValueError(f"inputs after Y's scale and zero point come in (tensor, scale, zero point) "
                             f"triples; got {len(inputs)}")
        dt = self.np_dtype(y_zero_point)
        parts = []
        for x, s, z in zip(inputs[::3], inputs[1::3], inputs[2::3]):
            if self.np_dtype(x) != dt:
                raise ValueError(f"an input is {self.np_dtype(x)}, Y is {dt}; they must match")
            table = self.quant(self.dequant(self.levels(dt), s, z), y_scale, y_zero_point, dt)
            parts.append(self.lookup(table, x))
        rank = parts[0].ndim
        if not -rank <= self.axis < rank:
            raise ValueError(f"axis {self.axis} is out of range for inputs of rank {rank}")
        return (xp.concat(parts, axis=self.axis % rank),)


@library.define("QLinearWhere", 1, domain=MS,
                signature=(("B", "T", "TF", "T", "T", "TF", "T", "TF", "T"), ("T",)),
                types={"B": (np.bool_,), "T": BYTES, "TF": F32})
class QLinearWhere(_Q8):
    """``Z = where(condition, X, Y)`` with X and Y requantized to Z's parameters
    (onnxruntime's tables), numpy broadcasting."""

    def compute(self, condition, x, x_scale, x_zero_point, y, y_scale, y_zero_point, z_scale, z_zero_point):
        dt = self.np_dtype(z_zero_point)
        rx, ry = (self.lookup(self.quant(self.dequant(self.levels(dt), s, z), z_scale, z_zero_point, dt), v)
                  for v, s, z in ((x, x_scale, x_zero_point), (y, y_scale, y_zero_point)))
        return (self.xp.where(condition, rx, ry),)


class _ChannelsLast(_Q8):
    """``channels_last``: the input is (N, *spatial, C)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.channels_last = bool(info.attr("channels_last", 0))

    def to_first(self, x: Any) -> Any:
        """(N, *spatial, C) → (N, C, *spatial) when channels_last."""
        return self.xp.moveaxis(x, -1, 1) if self.channels_last and x.ndim >= 3 else x

    def to_last(self, y: Any) -> Any:
        """The inverse of :meth:`to_first`."""
        return self.xp.moveaxis(y, 1, -1) if self.channels_last and y.ndim >= 3 else y


@library.define("QLinearAveragePool", 1, domain=MS, signature=_UNARY_SIG, types=_UNARY_TYPES)
class QLinearAveragePool(_ChannelsLast, AveragePool):
    """AveragePool of the dequantized input (the library's float pool), quantized with
    ``nearbyint(y / y_scale + y_zero_point)`` like onnxruntime; NCHW or ``channels_last``."""

    def compute(self, x, x_scale, x_zero_point, y_scale, y_zero_point=None):
        xp = self.xp
        y = AveragePool.compute(self, self.to_first(self.dequant(x, x_scale, x_zero_point)))[0]
        with _quiet():
            q = y / xp.astype(self.scalar(y_scale, "y_scale"), self.f32)
            if y_zero_point is not None:
                q = q + xp.astype(self.scalar(y_zero_point, "y_zero_point"), self.f32)
        return (self.to_last(self.saturate(xp.round(q), self.np_dtype(x))),)


@library.define("QLinearGlobalAveragePool", 1, domain=MS, signature=_UNARY_SIG, types=_UNARY_TYPES)
class QLinearGlobalAveragePool(_ChannelsLast):
    """Mean over the spatial axes as MLAS computes it: the integer sum minus
    ``x_zero_point * count``, times ``x_scale / (y_scale * count)``, rounded, plus
    y's zero point; NCHW or ``channels_last`` (the spatial axes kept as size 1)."""

    def compute(self, x, x_scale, x_zero_point, y_scale, y_zero_point):
        xp = self.xp
        if x.ndim < 3:
            raise ValueError(f"X must have rank >= 3, got shape {list(x.shape)}")
        axes = tuple(range(1, x.ndim - 1)) if self.channels_last else tuple(range(2, x.ndim))
        count = math.prod(x.shape[a] for a in axes)
        i64 = self.backend.dtype(np.int64)
        acc = xp.sum(xp.astype(x, i64), axis=axes, keepdims=True)
        acc = acc - xp.astype(self.scalar(x_zero_point, "x_zero_point"), i64) * count
        f32 = self.f32
        mult = xp.astype(self.scalar(x_scale, "x_scale"), f32) / (
            xp.astype(self.scalar(y_scale, "y_scale"), f32) * float(count))
        return (self.requant_acc(acc, mult, self.scalar(y_zero_point, "y_zero_point"), self.np_dtype(x)),)


@library.define("QLinearConv", 1, domain=MS,
                signature=(("T1", "F", "T1", "T2", "F", "T2", "F", "T3", "T4"), ("T3",)),
                types={"T1": BYTES, "T2": BYTES, "T3": BYTES, "T4": (np.int32,), "F": F32})
class MsQLinearConv(_ChannelsLast, QLinearConv):
    """com.microsoft QLinearConv: ai.onnx's, with ``channels_last`` (X and Y NHWC)."""

    def compute(self, x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, bias=None):
        y = QLinearConv.compute(self, self.to_first(x), x_scale, x_zero_point, w, w_scale, w_zero_point,
                                y_scale, y_zero_point, bias)[0]
        return (self.to_last(y),)


# ------------------------------------------------------------- integer → float products


class _IntProduct(_Q8):
    """Exact integer matmul of centered operands, and MLAS's float output processor."""

    def product(self, a: Any, a_zp: Any, b: Any, b_zp: Any) -> Any:
        """``(a - a_zp) @ (b - b_zp)``, exact; ``b_zp`` per-tensor or per column of B."""
        xp = self.xp
        k = a.shape[-1] if a.ndim else 1
        small = k * 255 * 255 < 1 << 24  # every partial sum of 8-bit products exact in float32
        dt = self.f32 if small else self.f64
        ca = xp.astype(a, dt)
        if a_zp is not None:
            ca = ca - xp.astype(self.scalar(a_zp, "the zero point of A"), dt)
        cb = xp.astype(b, dt)
        if b_zp is not None:
            cb = cb - xp.astype(self.column(b_zp, b, "the zero point of B"), dt)
        return xp.matmul(ca, cb)

    def column(self, p: Any, b: Any, what: str) -> Any:
        """A per-tensor or per-column parameter of B (shape [N] or B's batch shape + [1, N])."""
        n = b.shape[-1]
        if math.prod(p.shape) == 1:
            return self.xp.reshape(p, ())
        if p.shape[-1] != n:
            raise ValueError(f"{what} has shape {list(p.shape)}; B has {n} columns")
        return p if p.ndim > 1 else self.xp.reshape(p, (1, n))

    def to_float(self, acc: Any, scale: Any, bias: Any) -> Any:
        """``float32(acc) * scale + bias``."""
        y = self.xp.astype(acc, self.f32) * scale
        return y if bias is None else y + self.xp.astype(bias, self.f32)


@library.define("MatMulIntegerToFloat", 1, domain=MS,
                signature=(("T1", "T2", "T3", "T3", "T1", "T2", "T3"), ("T3",)),
                types={"T1": BYTES, "T2": BYTES, "T3": F32})
class MatMulIntegerToFloat(_IntProduct):
    """``(A - a_zero_point) @ (B - b_zero_point) * (a_scale * b_scale) + bias``; B's
    parameters per-tensor or per column."""

    def compute(self, a, b, a_scale, b_scale, a_zero_point=None, b_zero_point=None, bias=None):
        xp = self.xp
        scale = (xp.astype(self.scalar(a_scale, "a_scale"), self.f32)
                 * xp.astype(self.column(b_scale, b, "b_scale"), self.f32))
        return (self.to_float(self.product(a, a_zero_point, b, b_zero_point), scale, bias),)


@library.define("DynamicQuantizeMatMul", 1, domain=MS, signature=(("T1", "T2", "T1", "T2", "T1"), ("T1",)),
                types={"T1": F32, "T2": BYTES})
class DynamicQuantizeMatMul(_IntProduct):
    """A quantized to uint8 over its range (with 0), as onnxruntime's
    ``GetQuantizationParameter``, then :class:`MatMulIntegerToFloat`."""

    def parameters(self, a: Any) -> tuple[np.float32, float]:
        """A's uint8 scale and zero point over its range (with 0), as onnxruntime's."""
        xp = self.xp
        empty = math.prod(a.shape) == 0
        lo = np.float32(min(0.0, float(xp.min(a)))) if not empty else np.float32(0)
        hi = np.float32(max(0.0, float(xp.max(a)))) if not empty else np.float32(0)
        scale = np.float32(1) if hi == lo else np.float32((hi - lo) / 255.0)
        return scale, float(np.round(np.clip(np.float32(0) - lo / scale, 0, 255)))

    def quantize(self, a: Any, scale: np.float32, zp: float) -> Any:
        """A as uint8: round(a / scale) + zp, saturated."""
        xp = self.xp
        with _quiet():
            qa = xp.clip(xp.round(a / float(scale)) + zp, 0.0, 255.0)
        return xp.astype(qa, self.backend.dtype(_U8))

    def compute(self, a, b, b_scale, b_zero_point=None, bias=None):
        xp = self.xp
        scale, zp = self.parameters(a)
        qa = self.quantize(a, scale, zp)
        mult = float(scale) * xp.astype(self.column(b_scale, b, "b_scale"), self.f32)
        acc = self.product(qa, xp.asarray(zp, dtype=self.f32), b, b_zero_point)
        return (self.to_float(acc, mult, bias),)


@library.define("MatMulInteger16", 1, domain=MS, signature=(("T1", "T2"), ("T3",)),
                types={"T1": (np.int16,), "T2": (np.int16,), "T3": (np.int32,)})
class MatMulInteger16(_Q8):
    """int16 @ int16 → int32 (accumulated in int64, wrapped to int32 like onnxruntime's
    int32 accumulator)."""

    def compute(self, a, b):
        xp = self.xp
        i64 = self.backend.dtype(np.int64)
        return (xp.astype(xp.matmul(xp.astype(a, i64), xp.astype(b, i64)), self.backend.dtype(np.int32)),)


@library.define("QGemm", 1, domain=MS,
                signature=(("TA", "T", "TA", "TB", "T", "TB", "TC", "T", "TYZ"), ("TY",)),
                types={"T": F32, "TA": BYTES, "TB": BYTES, "TC": (np.int32,), "TYZ": BYTES,
                       "TY": (np.float32, np.uint8, np.int8)})
class QGemm(_IntProduct):
    """Quantized Gemm: ``alpha * (A' - a_zp) @ (B' - b_zp) + C`` (C an int32 bias in
    units of ``a_scale * b_scale``), as float32 when y_scale is absent, else requantized
    with ``alpha * a_scale * b_scale / y_scale`` (MLAS); B's parameters per-tensor or per
    output column."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.trans_a = bool(info.attr("transA", 0))
        self.trans_b = bool(info.attr("transB", 0))
        self.alpha = float(info.attr("alpha", 1.0))

    def compute(self, a, a_scale, a_zero_point, b, b_scale, b_zero_point, c=None, y_scale=None,
                y_zero_point=None):
        xp = self.xp
        if a.ndim != 2 or b.ndim != 2:
            raise ValueError(f"A and B must be 2-D, got {list(a.shape)} and {list(b.shape)}")
        a = xp.permute_dims(a, (1, 0)) if self.trans_a else a
        b = xp.permute_dims(b, (1, 0)) if self.trans_b else b
        acc = self.product(a, a_zero_point, b, b_zero_point)
        if c is not None:
            acc = acc + xp.astype(c, acc.dtype)
        scale = (xp.astype(self.scalar(a_scale, "a_scale"), self.f32) * self.alpha
                 * xp.astype(self.column(b_scale, b, "b_scale"), self.f32))
        if y_scale is None:
            return (self.to_float(acc, scale, None),)
        if y_zero_point is None:
            raise ValueError("y_zero_point is required with y_scale")
        mult = scale / xp.astype(self.scalar(y_scale, "y_scale"), self.f32)
        return (self.requant_acc(acc, mult, self.scalar(y_zero_point, "y_zero_point"), self.np_dtype(y_zero_point)),)


# ------------------------------------------------------------------ weight-only quantization


class _Blocks(_Quant):
    """Unpacking of sub-byte values packed little-end first in uint8 bytes."""

    def unpack(self, packed: Any, bits: int) -> Any:
        """uint8 ``packed`` (..., n) → its (..., n * 8 / bits) values, as uint8."""
        xp = self.xp
        if bits == 8:
            return packed
        per = 8 // bits
        u8 = self.backend.dtype(_U8)
        shifts = xp.asarray(np.arange(0, 8, bits, dtype=np.uint8))
        vals = xp.bitwise_and(xp.bitwise_right_shift(packed[..., None], shifts),
                              xp.asarray((1 << bits) - 1, dtype=u8))
        return xp.reshape(vals, tuple(packed.shape[:-1]) + (packed.shape[-1] * per,))


@library.define("MatMulNBits", 1, domain=MS,
                signature=(("T1", "T2", "T1", "T3", "T4", "T1"), ("T1",)),
                types={"T1": (np.float32, np.float16), "T2": (np.uint8,),
                       "T3": (np.uint8, np.float32, np.float16), "T4": (np.int32,)})
class MatMulNBits(_Blocks):
    """``Y = A @ dequantize(B)^T + bias``: B (N, K) quantized in blocks of ``block_size``
    along K, ``bits``-bit values packed in uint8 ([N, k_blocks, blob]); scales [N, k_blocks];
    zero points packed uint8 like B (default ``2**(bits-1)``) or float; each weight is
    ``(q - zero_point) * scale``. float16 A is computed in float32 and rounded once."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.k, self.n = int(info.attr("K", 0)), int(info.attr("N", 0))
        self.bits = int(info.attr("bits", 4))
        self.block = int(info.attr("block_size", 0))
        if self.bits not in (2, 4, 8):
            raise InvalidGraph(f"{self.where()}: bits={self.bits}; 2, 4 and 8 are supported")
        if self.block < 16 or self.block & (self.block - 1):
            raise InvalidGraph(f"{self.where()}: block_size={self.block} must be a power of 2 >= 16")
        if self.k <= 0 or self.n <= 0:
            raise InvalidGraph(f"{self.where()}: K and N must be given and positive")
        if int(info.attr("weight_prepacked", 0)):
            raise InvalidGraph(f"{self.where()}: prepacked weights are not supported")

    def weights(self, b: Any, scales: Any, zero_points: Any) -> Any:
        """B dequantized, (N, K) float32."""
        xp = self.xp
        n, k, block, bits = self.n, self.k, self.block, self.bits
        kb = -(-k // block)
        blob = block * bits // 8
        if tuple(b.shape) != (n, kb, blob):
            raise ValueError(f"B has shape {list(b.shape)}; N={n}, K={k}, bits={bits}, "
                             f"block_size={block} need {[n, kb, blob]}")
        if math.prod(scales.shape) != n * kb:
            raise ValueError(f"scales has {math.prod(scales.shape)} values; {n * kb} expected")
        q = xp.astype(self.unpack(b, bits), self.f32)  # (N, kb, block)
        s = xp.reshape(xp.astype(scales, self.f32), (n, kb, 1))
        if zero_points is None:
            z = xp.asarray(float(1 << (bits - 1)), dtype=self.f32)
        elif self.np_dtype(zero_points) == _U8:
            cols = -(-kb * bits // 8)
            if math.prod(zero_points.shape) != n * cols:
                raise ValueError(f"zero_points has {math.prod(zero_points.shape)} bytes; {n * cols} expected")
            z = self.unpack(xp.reshape(zero_points, (n, cols)), bits)[:, :kb]
            z = xp.reshape(xp.astype(z, self.f32), (n, kb, 1))
        else:
            if math.prod(zero_points.shape) != n * kb:
                raise ValueError(f"zero_points has {math.prod(zero_points.shape)} values; {n * kb} expected")
            z = xp.reshape(xp.astype(zero_points, self.f32), (n, kb, 1))
        return xp.reshape((q - z) * s, (n, kb * block))[:, :k]

    def compute(self, a, b, scales, zero_points=None, g_idx=None, bias=None):
        xp = self.xp
        if g_idx is not None:
            raise ValueError("g_idx (act-order group indices) is not supported")
        if a.shape[-1] != self.k:
            raise ValueError(f"A has {a.shape[-1]} columns; K={self.k}")
        w = self.weights(b, scales, zero_points)
        y = xp.matmul(self.widen(a), xp.permute_dims(w, (1, 0)))
        if bias is not None:
            y = y + self.widen(bias)
        return (self.narrow(y, a),)


@library.define("GatherBlockQuantized", 1, domain=MS,
                signature=(("T1", "Tind", "T2", "T1"), ("T2",)),
                types={"T1": (np.uint8,), "T2": (np.float32, np.float16), "Tind": (np.int32, np.int64)})
class GatherBlockQuantized(_Blocks):
    """Gather of block-quantized uint8 ``data`` (``bits`` 4: two values a byte along the
    last axis; 8: one) along ``gather_axis``, dequantized ``(q - zero_point) * scale`` with
    blocks of ``block_size`` along ``quantize_axis`` (zero points packed like the data,
    default ``2**(bits-1)``). The rows are gathered first, then dequantized."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.bits = int(info.attr("bits", 4))
        self.block = int(info.attr("block_size", 128))
        self.gather_axis = int(info.attr("gather_axis", 0))
        self.quantize_axis = int(info.attr("quantize_axis", 1))
        if self.bits not in (4, 8):
            raise InvalidGraph(f"{self.where()}: bits={self.bits}; 4 and 8 are supported")
        if self.block < 16 or self.block & (self.block - 1):
            raise InvalidGraph(f"{self.where()}: block_size={self.block} must be a power of 2 >= 16")

    def compute(self, data, indices, scales, zero_points=None):
        xp = self.xp
        q = self.unpack(data, self.bits)
        rank = q.ndim
        g, qa = self.gather_axis, self.quantize_axis
        if not (-rank <= g < rank and -rank <= qa < rank):
            raise ValueError(f"gather_axis {g} or quantize_axis {qa} is out of range for rank {rank}")
        g, qa = g % rank, qa % rank
        shape = tuple(q.shape)
        want = shape[:qa] + (-(-shape[qa] // self.block),) + shape[qa + 1:]
        if tuple(scales.shape) != want:
            raise ValueError(f"scales has shape {list(scales.shape)}; data of shape {list(shape)} "
                             f"with block_size={self.block} on axis {qa} needs {list(want)}")
        z = None if zero_points is None else self.unpack(zero_points, self.bits)
        if z is not None and z.shape[-1] > want[-1]:  # packed 4-bit: a padding nibble
            z = z[..., :want[-1]]
        if z is not None and tuple(z.shape) != want:
            raise ValueError(f"zero_points hold shape {list(z.shape)}; {list(want)} expected")
        # Gather the rows (and their parameters) first: an embedding table is dequantized
        # only where indexed, unless the gather runs along the quantized axis.
        i64 = self.backend.dtype(np.int64)
        idx = xp.reshape(xp.astype(indices, i64), (-1,))
        idx = xp.where(idx < 0, idx + shape[g], idx)
        if g != qa:
            q = xp.take(q, idx, axis=g)
            scales = xp.take(scales, idx, axis=g)
            z = None if z is None else xp.take(z, idx, axis=g)
        s = self.expand(xp.astype(scales, self.f32), qa, q.shape[qa])
        zf = (xp.asarray(float(1 << (self.bits - 1)), dtype=self.f32) if z is None
              else self.expand(xp.astype(z, self.f32), qa, q.shape[qa]))
        y = (xp.astype(q, self.f32) - zf) * s
        if g == qa:
            y = xp.take(y, idx, axis=g)
        y = xp.reshape(y, shape[:g] + tuple(indices.shape) + shape[g + 1:])
        return (xp.astype(y, scales.dtype),)

    def expand(self, p: Any, axis: int, dim: int) -> Any:
        """Per-block parameters repeated ``block_size`` times along ``axis`` (cut to ``dim``)."""
        r = self.xp.repeat(p, self.block, axis=axis)
        return r[(slice(None),) * axis + (slice(0, dim), Ellipsis)]


# ------------------------------------------------------------------ DynamicQuantizeLSTM


@library.define("DynamicQuantizeLSTM", 1, domain=MS,
                signature=(("T", "T2", "T2", "T", "T1", "T", "T", "T", "T", "T2", "T", "T2"), ("T", "T", "T")),
                types={"T": F32, "T1": (np.int32,), "T2": BYTES}, host_inputs=(4,))
class DynamicQuantizeLSTM(LSTM, _IntProduct):
    """LSTM with 8-bit weights: ``W`` [dirs, input, 4H] and ``R`` [dirs, H, 4H] (already
    transposed), scales per direction or per gate column, one zero point per direction.
    Each product quantizes its float operand to uint8 over its range (with 0), as
    onnxruntime's ``ComputeGemm``: X once over its first ``max(sequence_lens)`` steps, H at
    every step over the whole batch. The batch groups of H follow onnxruntime's serial
    path; its batch-parallel path (batch > 4, or 2+ rows with hidden <= 256, on more than
    one thread) quantizes each thread's rows separately, so its results depend on the
    thread count."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        if self.layout != 0:
            raise InvalidGraph(f"{self.where()}: layout=1 is not supported (onnxruntime neither)")
        # onnxruntime quantizes H as it sits in its buffers (from the second step on): with
        # Y requested, the rows of finished sequences are zero there; without Y, they hold
        # their last state (zero for an empty sequence, whose row is never written).
        self.zero_finished = bool(info.output_names) and info.output_names[0] != ""

    def dynamic_u8(self, a: Any) -> tuple[Any, Any]:
        """``a`` quantized to uint8 over its range widened to 0 (onnxruntime's
        ``GetQuantizationParameter``), as the centered values ``q - zero_point`` in float32
        and the scale (0-d)."""
        xp = self.xp
        if math.prod(a.shape) == 0:
            return a, xp.asarray(1.0, dtype=self.f32)
        lo, hi = xp.minimum(xp.min(a), 0.0), xp.maximum(xp.max(a), 0.0)
        with _quiet():
            scale = xp.where(hi == lo, xp.asarray(1.0, dtype=self.f32), (hi - lo) / 255.0)
            zp = xp.round(xp.clip(0.0 - lo / scale, 0.0, 255.0))
            q = xp.clip(xp.round(a / scale) + zp, 0.0, 255.0)
        return q - zp, scale

    def weights(self, w: Any, scale: Any, zp: Any, name: str) -> list[tuple[Any, Any, Any]]:
        """Per direction: the weights, their scale (0-d or per column) and zero point."""
        dirs, gh = self.num_dirs, 4 * self.hidden
        for p, what in ((scale, "scale"), (zp, "zero point")):
            if p is None or tuple(p.shape) not in ((dirs,), (dirs, gh)):
                raise ValueError(f"{name}'s {what} must have shape [{dirs}] or [{dirs}, {gh}]")
        zps = self.host(zp).reshape(dirs, -1).astype(np.int32)
        if (zps != zps[:, :1]).any() or (self.np_dtype(w) == _I8 and zps.any()):
            raise ValueError(f"{name}'s zero point must be one value per direction (0 for int8)")
        sc = self.xp.astype(scale, self.f32)
        return [(w[d, ...], sc[d, ...], zp[d, ...] if zp.ndim == 1 else zp[d, 0]) for d in range(dirs)]

    def qproduct(self, a: Any, w: tuple[Any, Any, Any]) -> Any:
        """``a @ W`` with ``a`` quantized dynamically: ``float(acc) * (a_scale * w_scale)``."""
        qa, a_scale = self.dynamic_u8(a)
        wq, w_scale, w_zp = w
        return self.to_float(self.product(qa, None, wq, w_zp), a_scale * w_scale, None)

    def compute(self, X, W, R, B=None, sequence_lens=None, initial_h=None, initial_c=None, P=None,
                W_scale=None, W_zero_point=None, R_scale=None, R_zero_point=None):
        xp = self.xp
        if X.ndim != 3:
            raise ValueError(f"X must have rank 3, got shape {list(X.shape)}")
        seq, batch, isz = X.shape
        hs, gh, dirs = self.hidden, 4 * self.hidden, self.num_dirs
        if tuple(W.shape) != (dirs, isz, gh) or tuple(R.shape) != (dirs, hs, gh):
            raise ValueError(f"W {list(W.shape)} / R {list(R.shape)} must be [{dirs}, {isz}, {gh}] / "
                             f"[{dirs}, {hs}, {gh}]")
        b = None if B is None else self._shaped(B, "B", (dirs, 2 * gh), self.f32)
        p = None if P is None else self._shaped(P, "P", (dirs, 3 * hs), self.f32)
        ws = self.weights(W, W_scale, W_zero_point, "W")
        rs = self.weights(R, R_scale, R_zero_point, "R")
        mask, _ = self._mask(sequence_lens, seq, batch)  # validates sequence_lens
        lens = (np.full(batch, seq, np.int64) if sequence_lens is None
                else self.host(sequence_lens).astype(np.int64).reshape(-1))
        steps = int(lens.max(initial=0)) if batch else seq
        # onnxruntime runs a reverse direction forward over each sequence's valid prefix
        # reversed (the rest in place), so that H is quantized over the rows at the same
        # step; ``flat`` is that reordering of the (time, batch) rows (an involution).
        s_idx = np.arange(seq)[:, None]
        flat = np.where(s_idx < lens, lens - 1 - s_idx, s_idx) * batch + np.arange(batch)
        flat = xp.asarray(flat.reshape(-1))
        x = xp.astype(X, self.f32)[:steps, ...]
        started = xp.asarray((lens > 0)[:, None])
        empty_h = xp.zeros((batch, 0), dtype=self.f32)  # LSTM._step's own h @ R^T: zero-width
        ys, y_hs, y_cs = [], [], []
        for d in range(dirs):
            xd = x
            if self.reverse[d]:
                xd = xp.reshape(xp.take(xp.reshape(xp.astype(X, self.f32), (seq * batch, isz)),
                                        flat[: steps * batch], axis=0), (steps, batch, isz))
            xw = self.qproduct(xd, ws[d])  # X quantized over the same values either way
            bias = None if b is None else b[d, :gh] + b[d, gh:]
            _, params = self._prepare(d, xp.zeros((gh, 0), dtype=self.f32), None,
                                      None if p is None else p[d, ...])
            h = self._state(initial_h, "initial_h", batch, self.f32, d)
            c = self._state(initial_c, "initial_c", batch, self.f32, d)
            out = []
            for t in range(steps):
                hq = h
                if mask is not None and t:
                    hq = xp.where(mask[t - 1, ...] if self.zero_finished else started, h, 0.0)
                pre = xw[t, ...] + self.qproduct(hq, rs[d])
                if bias is not None:
                    pre = pre + bias
                h_new, c_new = self._step(d, pre, empty_h, c, params)
                if mask is None:
                    h, c = h_new, c_new
                    out.append(h_new)
                else:
                    m = mask[t, ...]
                    h, c = xp.where(m, h_new, h), xp.where(m, c_new, c)
                    out.append(xp.where(m, h_new, 0.0))
            out.extend([xp.zeros((batch, hs), dtype=self.f32)] * (seq - steps))
            y = xp.stack(out, axis=0) if seq else xp.zeros((0, batch, hs), dtype=self.f32)
            if self.reverse[d]:
                y = xp.reshape(xp.take(xp.reshape(y, (seq * batch, hs)), flat, axis=0), (seq, batch, hs))
            ys.append(y)
            # An empty sequence ends with zero states in onnxruntime (not the initial ones).
            y_hs.append(xp.where(started, h, 0.0))
            y_cs.append(xp.where(started, c, 0.0))
        return xp.stack(ys, axis=1), xp.stack(y_hs, axis=0), xp.stack(y_cs, axis=0)


# ------------------------------------------------------------------------ QAttention


@library.define("QAttention", 1, domain=MS,
                signature=(("T1", "T2", "T3", "T3", "T3", "T4", "T1", "T2", "T3"), ("T3", "T3")),
                types={"T1": (np.uint8,), "T2": BYTES, "T3": F32, "T4": (np.int32,)})
class QAttention(Attention, _IntProduct):
    """com.microsoft Attention with an 8-bit input (per-tensor scale and zero point) and
    8-bit merged Q/K/V weights (scale and zero point per tensor or per column). The
    operands are dequantized and projected in float32 (onnxruntime scales the exact integer
    sums instead: the two agree to float32 rounding), then :class:`Attention` runs."""

    def compute(self, x, weights, bias, input_scale, weight_scale, mask_index=None, input_zero_point=None,
                weight_zero_point=None, past=None):
        xp = self.xp
        if weights.ndim != 2:
            raise ValueError(f"weights must be 2-D, got shape {list(weights.shape)}")
        w = xp.astype(weights, self.f32)
        if weight_zero_point is not None:
            w = w - xp.astype(self.column(weight_zero_point, weights, "weight_zero_point"), self.f32)
        w = w * xp.astype(self.column(weight_scale, weights, "weight_scale"), self.f32)
        return super().compute(self.dequant(x, input_scale, input_zero_point), w, bias, mask_index, past)


# ---------------------------------------------------------- QEmbedLayerNormalization


@library.define("QEmbedLayerNormalization", 1, domain=MS,
                signature=(("I", "I", "Q", "Q", "Q", "Q", "Q", "I", "T", "T", "T", "T", "T", "Q", "Q", "Q", "Q", "Q"),
                           ("T", "I")),
                types={"T": F32, "I": (np.int32,), "Q": BYTES})
class QEmbedLayerNormalization(EmbedLayerNormalization, _Q8):
    """:class:`EmbedLayerNormalization` over 8-bit tables, gamma and beta, each with its own
    per-tensor scale and zero point: the looked-up rows are dequantized (never the whole
    table). As onnxruntime's kernel: positions are 0..S-1 (no position_ids input), and the
    mask index counts the mask's entries equal to 1 (not its non-zero ones)."""

    def compute(self, input_ids, segment_ids, word, position, segment, gamma, beta, mask,
                word_scale, position_scale, segment_scale, gamma_scale, beta_scale,
                word_zero_point, position_zero_point, segment_zero_point, gamma_zero_point, beta_zero_point):
        xp = self.xp
        if input_ids.ndim != 2:
            raise ValueError(f"input_ids must be 2-D (batch, sequence), got shape {list(input_ids.shape)}")
        b, s = input_ids.shape
        h = word.shape[-1]

        def rows(table: Any, ids: Any, scale: Any, zp: Any, name: str) -> Any:
            return self.dequant(self.lookup(table, ids, name), scale, zp)

        positions = xp.reshape(xp.arange(s, dtype=input_ids.dtype), (1, s))
        w = (rows(word, input_ids, word_scale, word_zero_point, "word_embedding")
             + rows(position, positions, position_scale, position_zero_point, "position_embedding"))
        if (segment_ids is None) != (segment is None):
            raise ValueError("segment_ids and segment_embedding must be given together")
        if segment is not None:
            w = w + rows(segment, segment_ids, segment_scale, segment_zero_point, "segment_embedding")
        g = self.dequant(self.vector(gamma, h, "gamma"), gamma_scale, gamma_zero_point)
        bt = self.dequant(self.vector(beta, h, "beta"), beta_scale, beta_zero_point)
        y, _, _ = self.normalize(xp.broadcast_to(w, (b, s, h)), (-1,), g, bt)
        i32 = self.backend.dtype(np.int32)
        index = xp.zeros((b,), dtype=i32) if mask is None else xp.sum(xp.astype(mask == 1, i32), axis=1, dtype=i32)
        return y, index


# ------------------------------------------------------------------------ MatMulBnb4

# bitsandbytes' 4-bit code books, by code (onnxruntime's ``fp4_qaunt_map``/``nf4_qaunt_map``).
_BNB4 = {
    0: np.array([0.0, 5.208333333e-03, 0.66666667, 1.0, 0.33333333, 0.5, 0.16666667, 0.25,
                 -0.0, -5.208333333e-03, -0.66666667, -1.0, -0.33333333, -0.5, -0.16666667, -0.25], np.float32),
    1: np.array([-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
                 -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
                 0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
                 0.7229568362236023, 1.0], np.float32),
}


@library.define("MatMulBnb4", 1, domain=MS, signature=(("T1", "T2", "T1"), ("T1",)),
                types={"T1": F32, "T2": (np.uint8,)})
class MatMulBnb4(_Blocks):
    """``Y = A @ B^T``: B (N, K) flattened and cut in blocks of ``block_size`` (the last
    one may be short), each value a 4-bit code (high nibble first) into the FP4
    (``quant_type`` 0) or NF4 (1) code book, times its block's ``absmax``."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.k, self.n = int(info.attr("K", 0)), int(info.attr("N", 0))
        self.block = int(info.attr("block_size", 0))
        self.quant_type = int(info.attr("quant_type", -1))
        if self.quant_type not in _BNB4:
            raise InvalidGraph(f"{self.where()}: quant_type={self.quant_type}; 0 (FP4) and 1 (NF4) are supported")
        if self.block not in (16, 32, 64, 128, 256):
            raise InvalidGraph(f"{self.where()}: block_size={self.block}; 16, 32, 64, 128 and 256 are supported")
        if self.k <= 0 or self.n <= 0:
            raise InvalidGraph(f"{self.where()}: K and N must be given and positive")
        if not int(info.attr("transB", 1)):
            raise InvalidGraph(f"{self.where()}: transB=0 is not supported")

    def compute(self, a, b, absmax):
        xp = self.xp
        numel = self.n * self.k
        blocks = -(-numel // self.block)
        if math.prod(b.shape) != (numel + 1) // 2 or math.prod(absmax.shape) != blocks:
            raise ValueError(f"B has {math.prod(b.shape)} bytes and absmax {math.prod(absmax.shape)} values; "
                             f"N={self.n}, K={self.k}, block_size={self.block} need {(numel + 1) // 2} and {blocks}")
        if a.shape[-1] != self.k:
            raise ValueError(f"A has {a.shape[-1]} columns; K={self.k}")
        u8 = self.backend.dtype(_U8)
        codes = xp.bitwise_and(xp.bitwise_right_shift(xp.reshape(b, (-1, 1)), xp.asarray(np.array([4, 0], np.uint8))),
                               xp.asarray(15, dtype=u8))
        codes = xp.astype(xp.reshape(codes, (-1,))[:numel], self.backend.dtype(np.int64))
        scale = xp.repeat(xp.reshape(xp.astype(absmax, self.f32), (-1,)), self.block)[:numel]
        w = xp.reshape(xp.take(xp.asarray(_BNB4[self.quant_type]), codes) * scale, (self.n, self.k))
        return (xp.matmul(a, xp.permute_dims(w, (1, 0))),)


# ------------------------------------------------------------------------ MatMulFpQ4


@library.define("MatMulFpQ4", 1, domain=MS, signature=(("T1", "T2", "T3"), ("T1",)),
                types={"T1": F32, "T2": (np.uint8,), "T3": (np.int64,)}, needs=("bitcast",), host_inputs=(2,))
class MatMulFpQ4(_Blocks):
    """``Y = A @ B`` with B (K, N) given by ``B_shape`` and packed as MLAS's 4-bit blocks:
    for each column, blocks of 32 values along K, each a float32 scale, a uint8 zero point
    (``blk_quant_type`` 1, the default; 0: symmetric, zero point 8) and 16 bytes whose low
    nibbles hold values 0-15 and high nibbles 16-31; a value is ``(q - zero_point) * scale``.
    Deprecated by onnxruntime in favour of MatMulNBits; its CPU kernel still runs it."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.zp8 = int(info.attr("blk_quant_type", 1)) != 0  # as onnxruntime: anything but 0 is Zp8

    def compute(self, a, b, b_shape):
        xp = self.xp
        shape = [int(v) for v in self.host(b_shape).reshape(-1)]
        if len(shape) != 2 or b.ndim != 1:
            raise ValueError(f"B must be a 1-D blob and B_shape two values, got {list(b.shape)} and {shape}")
        k, n = shape
        if a.shape[-1] != k:
            raise ValueError(f"A has {a.shape[-1]} columns; B_shape says K={k}")
        kb, head = -(-k // 32), 5 if self.zp8 else 4
        if b.shape[0] != n * kb * (16 + head):
            raise ValueError(f"B has {b.shape[0]} bytes; K={k}, N={n} need {n * kb * (16 + head)}")
        blob = xp.reshape(b, (n, kb, 16 + head))
        scale = self.backend.extras["bitcast"](xp.reshape(blob[..., :4], (-1,)), self.f32)
        scale = xp.reshape(scale, (n, kb, 1))
        zp = (xp.reshape(xp.astype(blob[..., 4], self.f32), (n, kb, 1)) if self.zp8
              else xp.asarray(8.0, dtype=self.f32))
        q = self.unpack(blob[..., head:], 4)  # (n, kb, 32): low then high nibble of each byte
        q = xp.concat((q[..., 0::2], q[..., 1::2]), axis=-1)  # byte l holds values l and l + 16
        w = xp.reshape((xp.astype(q, self.f32) - zp) * scale, (n, kb * 32))[:, :k]
        return (xp.matmul(a, xp.permute_dims(w, (1, 0))),)
