"""CPU kernels: linear algebra (Gemm, MatMul, MatMulInteger, Einsum, Det).

Matrix products go through numpy's BLAS-backed matmul. float16/bfloat16 operands are
multiplied in float32 and cast back; MatMulInteger multiplies in float64, which is exact
for 8-bit operands, and returns int32.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from onyxrt.errors import InvalidGraph
from onyxrt.kernels import Kernel, KernelInfo

from .. import native
from . import registry
from ._spatial import compute_dtype

__all__ = ["Gemm", "MatMul", "MatMulInteger", "Einsum", "Det", "matmul", "contiguous_transpose"]


def _bad(info: KernelInfo, msg: str) -> InvalidGraph:
    return InvalidGraph(f"node {info.node_name!r} ({info.op_type}): {msg}")


def _scale(v: np.ndarray, factor: float) -> np.ndarray:
    """``v * factor`` keeping ``v``'s dtype (integer results are truncated toward zero)."""
    if factor == 1.0:
        return v
    if v.dtype.kind == "f":
        return v * v.dtype.type(factor)
    return (v * factor).astype(v.dtype)


@registry.register("Gemm", since=(1, 6, 7, 9, 11, 13))
class Gemm(Kernel):
    """Y = alpha * A' @ B' + beta * C, A'/B' optionally transposed, C broadcast to Y."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.alpha = float(info.attr("alpha", 1.0))
        self.beta = float(info.attr("beta", 1.0))
        self.trans_a = bool(info.attr("transA", 0))
        self.trans_b = bool(info.attr("transB", 0))
        # Versions 1 and 6 carry a `broadcast` flag; C is broadcast either way (a superset).
        self._b_src = info.constant(1)
        # The constant B as a contiguous (K, N) of the compute type, laid out once: OpenBLAS
        # multiplies a transposed view ~2x slower once there are several rows
        # (MobileNetV2's classifier at batch 8: 0.88 vs 0.38 ms), and with a single row
        # it gave other bits in concurrent runs than alone (tests/test_concurrency.py).
        self._b_packed: np.ndarray | None = None
        src = self._b_src
        if isinstance(src, np.ndarray) and src.ndim == 2:
            cdt = compute_dtype(src.dtype)
            self._b_packed = contiguous_transpose(src) if self.trans_b else np.ascontiguousarray(src, dtype=cdt)

    def compute(self, a, b, c=None):
        if a.ndim != 2 or b.ndim != 2:
            raise ValueError(f"A and B must be 2-D, got shapes {a.shape} and {b.shape}")
        cdt = compute_dtype(a.dtype)
        am = a.T if self.trans_a else a
        if (
            self._b_packed is not None
            and self._b_packed.dtype == cdt
            and (b is self._b_src or np.array_equal(b, self._b_src))
        ):
            bm = self._b_packed
        else:
            bm = (b.T if self.trans_b else b).astype(cdt, copy=False)
        if am.shape[1] != bm.shape[0]:
            raise ValueError(
                f"A' has shape {am.shape} and B' has shape {bm.shape}; inner dims differ"
            )
        y = np.matmul(am.astype(cdt, copy=False), bm)
        y = _scale(y, self.alpha)
        if c is not None and self.beta != 0.0:
            cc = _scale(np.asarray(c).astype(cdt, copy=False), self.beta)
            if np.broadcast_shapes(cc.shape, y.shape) != y.shape:
                raise ValueError(f"C of shape {cc.shape} does not broadcast to Y {y.shape}")
            y = y + cc
        return (np.asarray(y).astype(a.dtype, copy=False),)


def contiguous_transpose(w: np.ndarray) -> np.ndarray:
    """A 2-D constant's transpose as a contiguous array of its compute type: the compiled
    tiled copy for float32 (``native.transposed``, ~6x numpy's copy of the transposed
    view), numpy's otherwise."""
    packed = native.transposed(w)
    if packed is None:
        packed = np.ascontiguousarray(w.T, dtype=compute_dtype(w.dtype))
    return packed


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``np.matmul``, with a batched ``(..., M, K)`` times a 2-D ``(K, N)`` as one GEMM over
    all rows rather than one per batch entry."""
    if b.ndim == 2 and a.ndim > 2 and a.flags.c_contiguous:
        y = np.matmul(a.reshape(-1, a.shape[-1]), b)
        return y.reshape(a.shape[:-1] + (b.shape[-1],))
    return np.matmul(a, b)


@registry.register("MatMul", since=(1, 9, 13))
class MatMul(Kernel):
    """numpy.matmul semantics: batched N-d product, 1-D operands promoted and squeezed."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self._b_src = info.constant(1)
        self._b_f32: np.ndarray | None = None
        if isinstance(self._b_src, np.ndarray) and compute_dtype(self._b_src.dtype) != (
            self._b_src.dtype
        ):
            self._b_f32 = self._b_src.astype(np.float32)

    def compute(self, a, b):
        if a.ndim == 0 or b.ndim == 0:
            raise ValueError("MatMul operands must have rank >= 1")
        cdt = compute_dtype(a.dtype)
        if cdt == a.dtype:
            return (np.asarray(matmul(a, b)),)
        if self._b_f32 is not None and (b is self._b_src or np.array_equal(b, self._b_src)):
            bc = self._b_f32
        else:
            bc = b.astype(cdt)
        y = np.matmul(a.astype(cdt), bc)
        return (np.asarray(y).astype(a.dtype),)


def _zero_point(zp: Any, side: str, operand: np.ndarray) -> np.ndarray | float:
    z = np.asarray(zp, dtype=np.float64)
    if z.size == 1:
        return float(z.reshape(()))
    if side == "a" and z.ndim == 1:
        # Per-row zero points of A [M, K] come as an M-vector.
        return z.reshape(-1, 1)
    return z


@registry.register("MatMulInteger", since=10)
class MatMulInteger(Kernel):
    """(A - a_zero_point) @ (B - b_zero_point) with int32 output."""

    def compute(self, a, b, a_zero_point=None, b_zero_point=None):
        af = a.astype(np.float64)
        bf = b.astype(np.float64)
        if a_zero_point is not None:
            af -= _zero_point(a_zero_point, "a", a)
        if b_zero_point is not None:
            bf -= _zero_point(b_zero_point, "b", b)
        y = np.matmul(af, bf)
        return (np.asarray(np.rint(y)).astype(np.int32),)


@registry.register("Einsum", since=(12, 28))
class Einsum(Kernel):
    """Einstein summation (numpy.einsum, optimized contraction order)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        eq = info.attr("equation")
        if not eq:
            raise _bad(info, "attribute equation is required")
        self.equation = str(eq).replace(" ", "")

    def compute(self, *inputs):
        if not inputs:
            raise ValueError("Einsum needs at least one input")
        dtype = inputs[0].dtype
        cdt = compute_dtype(dtype)
        ops = [np.asarray(v).astype(cdt, copy=False) for v in inputs]
        y = np.einsum(self.equation, *ops, optimize=True)
        return (np.asarray(y).astype(dtype, copy=False),)


@registry.register("Det", since=(11, 22))
class Det(Kernel):
    """Determinant of each square matrix in the last two axes."""

    def compute(self, x):
        if x.ndim < 2 or x.shape[-1] != x.shape[-2]:
            raise ValueError(f"Det needs [..., M, M] input, got shape {x.shape}")
        cdt = compute_dtype(x.dtype)
        y = np.linalg.det(x.astype(cdt, copy=False))
        return (np.asarray(y).astype(x.dtype, copy=False),)
