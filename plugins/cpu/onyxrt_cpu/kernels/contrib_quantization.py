"""CPU overrides of the operator library's com.microsoft quantization operators
(:mod:`onyxrt_ops.contrib_quantization`).

* QuantizeLinear and DequantizeLinear, not for speed: onnxruntime's CPU kernels also take
  int4/uint4 data, which only numpy (ml_dtypes) holds. They are the CPU provider's ai.onnx
  kernels (:mod:`.quantization`, over the library's attribute parsing) registered for the
  com.microsoft domain with those types added.
* MatMulIntegerToFloat and DynamicQuantizeMatMul (what onnxruntime's optimizer makes of a
  dynamically quantized model) — the library's kernels with their integer product through
  the int8 kernel (:func:`.linalg.integer_product`, ``csrc/qgemm.c``) when B and its zero
  point are constants and the CPU has AVX-512 VNNI, the library's exact product otherwise.
* MatMulNBits — constant 2/4/8-bit weights dequantized once into float32 (within a
  process-wide budget), not on every run, and packed for the compiled GEMM where it is
  preferred (its bias added to each tile, as a FusedMatMul's).

Every other operator is the library's, bound over numpy in ``kernels/__init__``.
"""

from __future__ import annotations

import weakref
from typing import Any

import ml_dtypes
import numpy as np

from onyxrt.kernels import KernelInfo
from onyxrt_ops import library

from .. import native
from . import registry
from ._backend import BACKEND
from .linalg import integer_product, integer_product_to_float, matmul, pack_integer_b
from .quantization import DequantizeLinear, QuantizeLinear, is_scalar

__all__ = ["MsQuantizeLinear", "MsDequantizeLinear", "MatMulIntegerToFloat", "DynamicQuantizeMatMul",
           "MatMulNBits", "QLinearAdd", "DEQUANTIZED_WEIGHTS_BUDGET"]

_INT4 = (ml_dtypes.int4, ml_dtypes.uint4)
_INTS = (np.int8, np.uint8, np.int16, np.uint16)


@registry.register("QuantizeLinear", since=1, domain="com.microsoft",
                   types={"T1": (np.float32,), "T2": _INTS + _INT4})
class MsQuantizeLinear(QuantizeLinear):
    """com.microsoft QuantizeLinear, per-tensor or per-axis, 4-bit outputs included."""


@registry.register("DequantizeLinear", since=1, domain="com.microsoft",
                   types={"T1": _INTS + (np.int32,) + _INT4, "T2": (np.float32,)})
class MsDequantizeLinear(DequantizeLinear):
    """com.microsoft DequantizeLinear, per-tensor or per-axis, 4-bit inputs included."""


_MS = "com.microsoft"
_BYTES = (np.int8, np.uint8)


@registry.register("QLinearAdd", since=1, domain=_MS, types={"T": _BYTES, "F": (np.float32,)})
class QLinearAdd(library.kernel("QLinearAdd", 1, BACKEND, _MS)):
    """The library's QLinearAdd; two 8-bit tensors of one shape with per-tensor parameters
    (a QDQ model's residual Add, fused) in one compiled pass with the same float32 steps
    (:func:`native.qlinear_add`)."""

    def compute(self, a, a_scale, a_zero_point, b, b_scale, b_zero_point, c_scale, c_zero_point=None):
        if (isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.shape == b.shape
                and all(is_scalar(s, (np.float32,)) for s in (a_scale, b_scale, c_scale))
                and all(z is None or is_scalar(z, (a.dtype,)) for z in (a_zero_point, b_zero_point, c_zero_point))):
            sc = np.float32(c_scale.reshape(()))
            y = native.qlinear_add(a, b, *(0 if z is None else int(z.reshape(())) for z in (a_zero_point, b_zero_point)),
                                   np.float32(a_scale.reshape(())) / sc, np.float32(b_scale.reshape(())) / sc,
                                   0 if c_zero_point is None else int(c_zero_point.reshape(())))
            if y is not None:
                return (y,)
        return super().compute(a, a_scale, a_zero_point, b, b_scale, b_zero_point, c_scale, c_zero_point)


class _Int8Product:
    """The library's ``product`` through the int8 kernel when B (input 1) and its zero point
    (input ``b_zp_index``) are constants, and its ``to_float`` in one compiled pass; mixed
    into the library's kernels below."""

    b_zp_index = 3

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)  # type: ignore[call-arg]
        b, zb = info.constant(1), info.constant(self.b_zp_index)
        self._packed = None
        if isinstance(b, np.ndarray) and (zb is not None or not info.has_input(self.b_zp_index)):
            self._packed = pack_integer_b(b, zb)

    def to_float(self, acc: Any, scale: Any, bias: Any) -> Any:
        y = native.accumulators_to_float(acc, scale, bias) if acc.size else None
        return super().to_float(acc, scale, bias) if y is None else y  # type: ignore[misc]

    def float_product(self, qa: Any, a_zp: Any, b: Any, scale: Any, bias: Any) -> Any:
        """``to_float(product(qa, a_zp, b, B's zero point), scale, bias)`` in one call of
        the int8 kernel, the scaling in its registers; ``None`` where it does not apply."""
        if self._packed is None or b.ndim != 2 or not isinstance(qa, np.ndarray) or qa.size == 0:
            return None
        if a_zp is not None and np.size(a_zp) != 1:
            return None
        if bias is not None and (not isinstance(bias, np.ndarray) or bias.dtype != np.float32):
            return None
        return integer_product_to_float(qa, None if a_zp is None else np.asarray(a_zp).reshape(()),
                                        self._packed, np.asarray(scale, np.float32), bias)

    def product(self, a: Any, a_zp: Any, b: Any, b_zp: Any) -> Any:
        if self._packed is not None and b.ndim == 2 and (a_zp is None or np.size(a_zp) == 1):
            y = integer_product(a, None if a_zp is None else np.asarray(a_zp).reshape(()), self._packed)
            if y is not None:
                return y
        return super().product(a, a_zp, b, b_zp)  # type: ignore[misc]


@registry.register("MatMulIntegerToFloat", since=1, domain=_MS,
                   types={"T1": _BYTES, "T2": _BYTES, "T3": (np.float32,)})
class MatMulIntegerToFloat(_Int8Product, library.kernel("MatMulIntegerToFloat", 1, BACKEND, _MS)):
    """The library's MatMulIntegerToFloat, its product and scaling by the int8 kernel."""

    b_zp_index = 5

    def compute(self, a, b, a_scale, b_scale, a_zero_point=None, b_zero_point=None, bias=None):
        if isinstance(a_scale, np.ndarray) and isinstance(b_scale, np.ndarray) and a_scale.size == 1:
            scale = a_scale.reshape(()).astype(np.float32) * self.column(b_scale, b, "b_scale").astype(np.float32)
            y = self.float_product(a, a_zero_point, b, scale, bias)
            if y is not None:
                return (y,)
        return super().compute(a, b, a_scale, b_scale, a_zero_point, b_zero_point, bias)


@registry.register("DynamicQuantizeMatMul", since=1, domain=_MS,
                   types={"T1": (np.float32,), "T2": _BYTES})
class DynamicQuantizeMatMul(_Int8Product, library.kernel("DynamicQuantizeMatMul", 1, BACKEND, _MS)):
    """The library's DynamicQuantizeMatMul, its product by the int8 kernel and A quantized
    in place on one float32 buffer (the library's four temporaries cost more than the
    product on [128, 768])."""

    b_zp_index = 3

    def parameters(self, a):
        if a.size == 0:
            return super().parameters(a)
        lo, hi = min(np.float32(0), a.min()), max(np.float32(0), a.max())
        scale = np.float32(1) if hi == lo else np.float32((hi - lo) / np.float32(255.0))
        return scale, float(np.round(np.clip(np.float32(0) - lo / scale, 0, 255)))

    def compute(self, a, b, b_scale, b_zero_point=None, bias=None):
        if isinstance(a, np.ndarray) and a.dtype == np.float32 and a.size and isinstance(b_scale, np.ndarray):
            scale, zp = self.parameters(a)
            qa = self.quantize(a, scale, zp)
            mult = float(scale) * self.column(b_scale, b, "b_scale").astype(np.float32)
            y = self.float_product(qa, np.asarray(zp, np.float32), b, mult, bias)
            if y is not None:
                return (y,)
        return super().compute(a, b, b_scale, b_zero_point, bias)

    def quantize(self, a, scale, zp):
        if a.dtype != np.float32:
            return super().quantize(a, scale, zp)
        # round(a / scale) + zp saturated, in float32: one compiled pass where it runs
        fast = native.quantize8(a, np.asarray(scale, np.float32), np.asarray(zp, np.uint8), np.dtype(np.uint8))
        if fast is not None:
            return fast
        q = np.divide(a, scale)
        np.round(q, out=q)
        q += np.float32(zp)
        np.clip(q, 0.0, 255.0, out=q)
        return q.astype(np.uint8)


#: Dequantized MatMulNBits weights kept at most, in bytes, over every node of the process:
#: a BERT-base quantized to 4 bits holds 340 MB of them. Past the budget (a quantized LLM,
#: whose point is its memory), nodes dequantize on every run as the library does.
DEQUANTIZED_WEIGHTS_BUDGET = 2 << 30
_dequantized_bytes = 0


@registry.register("MatMulNBits", since=1, domain=_MS,
                   types={"T1": (np.float32, np.float16), "T2": (np.uint8,),
                          "T3": (np.uint8, np.float32, np.float16), "T4": (np.int32,)})
class MatMulNBits(library.kernel("MatMulNBits", 1, BACKEND, _MS)):
    """The library's MatMulNBits, with constant weights (B, scales, zero points) dequantized
    once, at creation, into a float32 (N, K) matrix — within
    :data:`DEQUANTIZED_WEIGHTS_BUDGET` — instead of on every run. onnxruntime's CPU kernel
    computes these in float32 as well (``accuracy_level`` 0, what onnxruntime's quantizer
    writes): the float product of the same dequantized weights, so results agree to float
    rounding. Measured on onnxruntime's 4-bit quantization of a BERT-base export: 934 ms
    per run dequantizing, against onnxruntime's 137 ms."""

    def __init__(self, info: KernelInfo) -> None:
        global _dequantized_bytes
        super().__init__(info)
        self._weights: np.ndarray | None = None
        self._sources = tuple(info.constant(i) for i in (1, 2, 3))
        b, scales, zero_points = self._sources
        constant = isinstance(b, np.ndarray) and isinstance(scales, np.ndarray) and (
            zero_points is not None or not info.has_input(3))
        size = self.k * self.n * 4
        # Where the compiled GEMM is preferred, the dequantized weights are kept packed for
        # it (one copy in memory), as a FusedMatMul's constant weights: the products of a
        # 4-bit BERT took 6x a float BERT's FusedMatMul through numpy's matmul of the
        # transposed weights. 4-bit weights are dequantized straight into that layout.
        self._packed: native.PackedMatrix | None = None
        if constant and _dequantized_bytes + size <= DEQUANTIZED_WEIGHTS_BUDGET:
            if self.bits == 4 and native.GEMM_PREFERRED:
                self._packed = native.dequantize4_packed(b, scales, zero_points, self.k, self.block)
            if self._packed is None:
                # (N, K) as dequantized (4-bit in one compiled pass where it can); the
                # product reads its transpose in place (BLAS's transB).
                w = native.dequantize4(b, scales, zero_points, self.k, self.block) if self.bits == 4 else None
                self._weights = np.ascontiguousarray(self.weights(b, scales, zero_points) if w is None else w)
            _dequantized_bytes += size
            weakref.finalize(self, _release, size)
        if self._weights is not None and self._weights.dtype == np.float32 and native.GEMM_PREFERRED:
            self._packed = native.pack_gemm_b(self._weights.T)
            if self._packed is not None:
                self._weights = None

    def compute(self, a, b, scales, zero_points=None, g_idx=None, bias=None):
        w, packed = self._weights, self._packed
        if (w is None and packed is None) or g_idx is not None or any(
                given is not src for given, src in zip((b, scales, zero_points), self._sources)):
            return super().compute(a, b, scales, zero_points, g_idx, bias)
        if a.shape[-1] != self.k:
            raise ValueError(f"A has {a.shape[-1]} columns; K={self.k}")
        if packed is not None:
            return (self._packed_product(a, packed, bias),)
        y = matmul(self.widen(a), w.T)
        if bias is not None:
            y += self.widen(bias)
        return (self.narrow(y, a),)

    def _packed_product(self, a: np.ndarray, packed: native.PackedMatrix, bias: np.ndarray | None) -> np.ndarray:
        """A @ the packed weights (+ bias, added to each tile by the GEMM), any number of
        rows (one included: there is no other copy of the weights to hand the BLAS)."""
        af = np.ascontiguousarray(self.widen(a), dtype=np.float32)
        rows = af.size // self.k
        col_bias = None
        if bias is not None:
            col_bias = np.ascontiguousarray(self.widen(bias), dtype=np.float32).reshape(-1)
            if col_bias.size != self.n:
                raise ValueError(f"bias has {col_bias.size} values; N={self.n}")
        y = np.empty((rows, self.n), np.float32)
        if rows and not native.gemm(af.reshape(rows, self.k), packed, y, None, col_bias):
            raise RuntimeError("the compiled GEMM declined the dequantized weights it packed")
        return self.narrow(y.reshape(a.shape[:-1] + (self.n,)), a)


def _release(size: int) -> None:
    global _dequantized_bytes
    _dequantized_bytes -= size
