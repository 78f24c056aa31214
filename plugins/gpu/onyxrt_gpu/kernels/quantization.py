"""GPU fast paths for QuantizeLinear and DequantizeLinear; the operators themselves come
from the operator library (:mod:`onyxrt_ops.quantization`), bound over CuPy in
``kernels/__init__``.

A QDQ model (onnxruntime's ``quantize_static``) has a QuantizeLinear/DequantizeLinear pair
around every convolution, and the GPU keeps them (it runs the float convolutions of the
dequantized weights: ``ExecutionProvider.integer_qdq`` is False). The library writes each
as a chain of array calls — division, rounding, zero point, clip, cast: 12 launches for a
QuantizeLinear and 9 for a DequantizeLinear, 1386 of a QDQ MobileNetV2's 1716 launches a
run (measured with the simulated CuPy's event record). Here the common case — float32
data and scales, per tensor or per axis, an 8-bit zero point or none, no blocks, no
``precision`` or ``output_dtype`` other than those — is one fused kernel of the same steps
in the same order and types (float32 division, round half to even, the zero point added
in float32, clipped with NaN kept as the library's clip keeps it, then cast), so results
are the library's bit for bit; everything else is the library's.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from onyxrt_ops import library

from . import registry
from ._common import BACKEND, fused_kernel

__all__ = ["QuantizeLinear", "DequantizeLinear"]

_F32 = np.dtype(np.float32)
_BYTES = (np.dtype(np.uint8), np.dtype(np.int8))


def _quantize(cp: Any, zero_point: bool, out: np.dtype[Any]) -> Any:
    """round_half_even(x / s) [+ zp], clipped to ``out``'s range, as ``out``."""
    ii = np.iinfo(out)
    lo, hi = np.float32(ii.min), np.float32(ii.max)

    if zero_point:
        def quantize(x, s, zp):
            q = cp.rint(x / s) + zp.astype(cp.float32)
            return cp.minimum(cp.maximum(q, lo), hi).astype(out)
    else:
        def quantize(x, s):  # type: ignore[misc]
            return cp.minimum(cp.maximum(cp.rint(x / s), lo), hi).astype(out)
    return quantize


def _dequantize(cp: Any, zero_point: bool) -> Any:
    """(x - zp) * s in float32."""

    if zero_point:
        def dequantize(x, s, zp):
            return (x.astype(cp.float32) - zp.astype(cp.float32)) * s
    else:
        def dequantize(x, s):  # type: ignore[misc]
            return x.astype(cp.float32) * s
    return dequantize


class _Expanded:
    """Mixin: the scale and zero point laid out against the data (``expand``: a reshape,
    ~2-5 µs of Python each on CuPy) once for the same parameter arrays and data shape —
    a QDQ model's parameters are constants, the same device arrays every run."""

    _laid_out: tuple[Any, ...] | None = None

    def laid_out(self, scale: Any, zero_point: Any, shape: tuple[int, ...]) -> tuple[Any, Any]:
        cached = self._laid_out  # one read: another thread may replace it meanwhile
        if cached is not None and cached[0] is scale and cached[1] is zero_point and cached[2] == shape:
            return cached[3], cached[4]
        s = self.expand(scale, shape, "the scale")  # type: ignore[attr-defined]
        zp = None if zero_point is None else self.expand(zero_point, shape, "the zero point")  # type: ignore[attr-defined]
        self._laid_out = (scale, zero_point, shape, s, zp)
        return s, zp


def _register(op: str, cls: type) -> type:
    """``cls`` for every version of ``op`` the library defines, with the library's types
    (a version left with none is left to ``bind``, which refuses it with the reason)."""
    for version in library.versions(op):
        types = library.types(op, version, BACKEND)
        if types is not None:
            registry.register(op, version, types=types)(cls)
    return cls


class QuantizeLinear(_Expanded, library.kernel("QuantizeLinear", 28, BACKEND)):  # type: ignore[misc]
    """The library's QuantizeLinear; float32 data and scale (per tensor or per axis, no
    blocks) with an 8-bit output as one fused kernel."""

    def compute(self, x, y_scale, y_zero_point=None):
        out = self.out_dtype(y_zero_point)
        if (x.dtype != _F32 or y_scale.dtype != _F32 or out not in _BYTES or self.block_size
                or self.precision not in (None, _F32)):
            return super().compute(x, y_scale, y_zero_point)
        cp = self.xp.module
        s, zp = self.laid_out(y_scale, y_zero_point, tuple(x.shape))
        if zp is None:
            fn = fused_kernel(cp, f"quantize_{out.name}", lambda m: _quantize(m, False, out))
            return (fn(x, s),)
        fn = fused_kernel(cp, f"quantize_zp_{out.name}", lambda m: _quantize(m, True, out))
        return (fn(x, s, zp),)


class DequantizeLinear(_Expanded, library.kernel("DequantizeLinear", 28, BACKEND)):  # type: ignore[misc]
    """The library's DequantizeLinear; 8-bit data with a float32 scale (per tensor or per
    axis, no blocks) into float32 as one fused kernel."""

    def compute(self, x, x_scale, x_zero_point=None):
        if (x.dtype not in _BYTES or x_scale.dtype != _F32 or self.block_size
                or self.output_dtype not in (None, _F32)
                or (x_zero_point is not None and x_zero_point.dtype != x.dtype)):
            return super().compute(x, x_scale, x_zero_point)
        cp = self.xp.module
        s, zp = self.laid_out(x_scale, x_zero_point, tuple(x.shape))
        if zp is None:
            return (fused_kernel(cp, "dequantize", lambda m: _dequantize(m, False))(x, s),)
        return (fused_kernel(cp, "dequantize_zp", lambda m: _dequantize(m, True))(x, s, zp),)


_register("QuantizeLinear", QuantizeLinear)
_register("DequantizeLinear", DequantizeLinear)
