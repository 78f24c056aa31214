"""GPU fast paths of MatMul and Gemm; the operators themselves (and MatMulInteger, Det)
come from the operator library (:mod:`onyxrt_ops.linalg`), bound over CuPy in
``kernels/__init__``.

The library multiplies float16 operands widened to float32. Here float16 and float32
products go to cuBLAS's strided-batched GEMM with the compute type chosen explicitly
(:mod:`.blas`): float16 read as float16 and accumulated in float32 on tensor cores, without
the two conversions or the float32 copies, batched or not (a 2-D float16 4096x4096x4096
product on an H200: 0.19 ms, against 2.9 ms widened); float32 with TF32 when the
provider's ``use_tf32`` option is on. Other types, and shapes that are not one strided
batch, go to ``cupy.matmul`` in the operands' own type. Transposed operands are transposed
views, which the BLAS takes by its transpose flags (no copy); Gemm's ``beta * C`` of a
constant C is folded once, at creation, by the library's kernel.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from onyxrt.kernels import KernelInfo
from onyxrt_ops import library

from . import registry
from ._common import BACKEND, FLOATS
from .blas import kernel_blas

__all__ = ["MatMul", "Gemm"]

_MATMUL_TYPES = FLOATS | frozenset(np.dtype(t) for t in (np.int32, np.int64, np.uint32, np.uint64))


class _Blas:
    """Mixin: the product in the operands' own type, through cuBLAS (float16/float32) or
    ``cupy.matmul``."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)  # type: ignore[call-arg]
        self.blas = kernel_blas(info)

    def product(self, a: Any, b: Any) -> Any:
        return self.blas.product(a, b)


@registry.register("MatMul", since=(1, 9, 13), types={"T": _MATMUL_TYPES})
class MatMul(_Blas, library.kernel("MatMul", 13, BACKEND)):
    """The library's MatMul, float16 and float32 straight to cuBLAS."""


@registry.register("Gemm", since=(1, 6, 7, 9, 11, 13), types={"T": _MATMUL_TYPES})
class Gemm(_Blas, library.kernel("Gemm", 13, BACKEND)):
    """The library's Gemm, float16 and float32 straight to cuBLAS (``transA``/``transB``
    as transpose flags)."""
