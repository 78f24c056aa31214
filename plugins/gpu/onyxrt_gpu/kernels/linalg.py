"""GPU kernels: MatMul and Gemm through ``cupy.matmul`` (cuBLAS / hipBLAS).

Transposed operands are passed as transposed views, which the BLAS takes with its
transpose flags (no copy). float16 products run natively (CuPy accumulates them in
float32). Gemm folds ``beta`` into a constant C once at creation.
"""

from __future__ import annotations

import numpy as np

from onyxrt.kernels import KernelInfo

from . import registry
from ._common import FLOATS, GpuKernel

__all__ = ["MatMul", "Gemm"]

_MATMUL_TYPES = FLOATS | frozenset(
    np.dtype(t) for t in (np.int32, np.int64, np.uint32, np.uint64)
)


def _scale(cp, v, factor: float):
    """``v * factor`` keeping ``v``'s dtype (integer results truncate toward zero)."""
    if factor == 1.0:
        return v
    if v.dtype.kind == "f":
        return v * factor
    return (v * factor).astype(v.dtype)


@registry.register("MatMul", since=(1, 9, 13), types={"T": _MATMUL_TYPES})
class MatMul(GpuKernel):
    """numpy.matmul semantics: batched N-d product, 1-D operands promoted and squeezed."""

    def compute(self, a, b):
        if a.ndim == 0 or b.ndim == 0:
            raise ValueError("MatMul operands must have rank >= 1")
        y = self.cp.matmul(a, b)
        return (y if y.dtype == a.dtype else y.astype(a.dtype),)


@registry.register("Gemm", since=(1, 6, 7, 9, 11, 13), types={"T": _MATMUL_TYPES})
class Gemm(GpuKernel):
    """Y = alpha * A' @ B' + beta * C, A'/B' optionally transposed, C broadcast to Y."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.alpha = float(info.attr("alpha", 1.0))
        self.beta = float(info.attr("beta", 1.0))
        self.trans_a = bool(info.attr("transA", 0))
        self.trans_b = bool(info.attr("transB", 0))
        # Versions 1 and 6 carry a `broadcast` flag; C is broadcast either way (a superset).
        # A constant C is scaled by beta once, here (beta == 1 uses C as it comes).
        c = info.constant(2)
        self.c_scaled = None
        if isinstance(c, np.ndarray) and self.beta not in (0.0, 1.0):
            if c.dtype.kind == "f":
                host = c * c.dtype.type(self.beta)
            else:
                host = (c * self.beta).astype(c.dtype)
            self.c_scaled = self.upload(np.ascontiguousarray(host))

    def compute(self, a, b, c=None):
        cp = self.cp
        if a.ndim != 2 or b.ndim != 2:
            raise ValueError(f"A and B must be 2-D, got shapes {a.shape} and {b.shape}")
        am = a.T if self.trans_a else a
        bm = b.T if self.trans_b else b
        if am.shape[1] != bm.shape[0]:
            raise ValueError(
                f"A' has shape {am.shape} and B' has shape {bm.shape}; inner dims differ"
            )
        y = cp.matmul(am, bm)
        if self.alpha != 1.0:
            if y.dtype.kind == "f":
                y *= self.alpha
            else:
                y = _scale(cp, y, self.alpha)
        if c is not None and self.beta != 0.0:
            cc = self.c_scaled if self.c_scaled is not None else _scale(cp, c, self.beta)
            if np.broadcast_shapes(tuple(cc.shape), tuple(y.shape)) != tuple(y.shape):
                raise ValueError(f"C of shape {cc.shape} does not broadcast to Y {y.shape}")
            y += cc.astype(y.dtype, copy=False)
        return (y if y.dtype == a.dtype else y.astype(a.dtype),)
