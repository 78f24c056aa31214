"""float16 and float32 matrix products through cuBLAS with an explicit compute type.

``cupy.matmul`` is a good BLAS call for most products, but CuPy 14 decides the compute type
itself: a batched (rank > 2) float16 product is copied to float32, multiplied there and
copied back (no tensor cores, three extra kernels and two float32 copies of the operands),
and float32 products use TF32 only when the ``CUPY_TF32`` environment variable says so
(see docs/gpu.md, "float16, TF32 and cuBLAS"). :class:`CublasMatmul` calls cuBLAS's
``gemmStridedBatchedEx`` itself, on the current stream: through the library's C API with
onyxrt's own handle (:mod:`onyxrt_gpu.cublas_direct`: the call can be captured into a CUDA
graph, which CuPy's bindings refuse), else through ``cupy.cuda.cublas`` and CuPy's handle:

* float16 operands are read as float16 and accumulated in float32
  (``CUBLAS_COMPUTE_32F``), on tensor cores, with no copies;
* float32 operands use ``CUBLAS_COMPUTE_32F_FAST_TF32`` when the provider's ``use_tf32``
  option is on (onnxruntime's default), ``CUBLAS_COMPUTE_32F`` when it is off.

Operands are described to cuBLAS by pointer, leading dimension, transpose flag and batch
stride, so transposed views (Gemm's ``transB``), row slices and a broadcast right-hand
matrix (``[B, S, K] @ [K, N]``, folded into one ``B*S x K`` GEMM) need no copy; batch
dimensions that broadcast unevenly (``[2, 3, M, K] @ [3, K, N]``) take one strided batch
per leading index, up to :data:`MAX_CALLS` calls. Whatever else does not map onto strided
batches — other dtypes, 1-D operands, layouts with no leading dimension — returns
``None`` and the caller uses ``cupy.matmul``. Only CuPy's CUDA build takes this path: the
HIP build's hipBLAS bindings are not confirmed to take these compute types, so ROCm keeps
``cupy.matmul``.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np

from onyxrt.kernels import KernelInfo

from ..cublas_direct import DirectCublas, direct_cublas
from ..cupy_loader import cupy_module

__all__ = ["CublasMatmul", "kernel_blas", "MAX_CALLS"]

_HALF = np.dtype(np.float16)
_SINGLE = np.dtype(np.float32)
_INT_MAX = 2**31 - 1
_ONE = np.ones(1, np.float32)  # alpha and beta: host scalars of the compute type (float)
_ZERO = np.zeros(1, np.float32)


def _matrix_layout(shape: tuple[int, int], strides: tuple[int, int]) -> tuple[bool, int] | None:
    """How a ``rows x cols`` matrix with element ``strides`` looks to a column-major BLAS:
    ``(row_major, ld)`` — row-major memory is the transpose stored column-major — or
    ``None`` when no leading dimension describes it."""
    rows, cols = shape
    rs, cs = strides
    if cols == 1 or cs == 1:
        ld = rs if rows > 1 else cols
        if ld >= max(cols, 1):
            return True, ld
    if rows == 1 or rs == 1:
        ld = cs if cols > 1 else rows
        if ld >= max(rows, 1):
            return False, ld
    return None


def _batch_strides(x: Any, batch: tuple[int, ...]) -> list[int] | None:
    """``x``'s element strides along the output's batch dimensions ``batch`` (0 where it
    is broadcast), or ``None`` when a stride is not a whole number of elements."""
    isz = x.itemsize
    dims = x.shape[:-2]
    strides = [0] * (len(batch) - len(dims)) + [st if n > 1 else 0 for n, st in zip(dims, x.strides[:-2])]
    if any(st % isz for st in strides):
        return None
    return [st // isz for st in strides]


def _uniform_stride(strides: list[int], dims: tuple[int, ...]) -> int | None:
    """One stride ``s`` such that matrix ``i`` of the flattened ``dims`` sits ``i * s``
    elements on (0: every matrix is the same one), or ``None``."""
    live = [i for i, n in enumerate(dims) if n > 1]
    if all(strides[i] == 0 for i in live):
        return 0
    step = strides[live[-1]]
    span = 1
    for i in reversed(live):
        if strides[i] != step * span:
            return None
        span *= dims[i]
    return step if step > 0 else None


#: Most GEMM calls one product may take when its batch dimensions broadcast unevenly
#: (``[2, 3, M, K] @ [3, K, N]``: one strided batch per leading index); more goes to
#: ``cupy.matmul``.
MAX_CALLS = 64


class CublasMatmul:
    """``a @ b`` for float16/float32 CuPy arrays as one cuBLAS strided-batched GEMM.

    >>> blas = CublasMatmul(cupy, tf32=True)
    >>> y = blas.matmul(a, b)      # None: not expressible here, use cupy.matmul
    """

    def __init__(self, cupy: Any, *, tf32: bool) -> None:
        self.cp = cupy
        self.tf32 = bool(tf32)
        # The HIP build's BLAS bindings are not known to take cuBLAS's compute types.
        self.enabled = not bool(cupy.cuda.runtime.is_hip)
        self._lib: Any = None
        self._direct: DirectCublas | None = None  # found with _lib, once

    def compute_type(self, dtype: np.dtype[Any]) -> str:
        """The cuBLAS compute type name used for ``dtype`` operands."""
        if dtype == _SINGLE and self.tf32:
            return "CUBLAS_COMPUTE_32F_FAST_TF32"
        return "CUBLAS_COMPUTE_32F"

    def product(self, a: Any, b: Any) -> Any:
        """``a @ b``: through cuBLAS where :meth:`matmul` applies, else ``cupy.matmul``."""
        y = self.matmul(a, b)
        return self.cp.matmul(a, b) if y is None else y

    def matmul(self, a: Any, b: Any) -> Any:
        """The product ``a @ b`` (numpy.matmul's broadcasting), or ``None`` when this path
        does not apply and the caller should use ``cupy.matmul``."""
        if not self.enabled or a.dtype != b.dtype or a.dtype not in (_HALF, _SINGLE):
            return None
        if a.ndim < 2 or b.ndim < 2:
            return None
        m, k = a.shape[-2:]
        k2, n = b.shape[-2:]
        if k != k2:
            return None  # cupy.matmul raises the shape error
        try:
            batch = tuple(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
        except ValueError:
            return None
        if 0 in (m, n, k) or 0 in batch:
            return None
        isz = a.itemsize
        if any(st % isz for st in (*a.strides[-2:], *b.strides[-2:])):
            return None
        la = _matrix_layout((m, k), (a.strides[-2] // isz, a.strides[-1] // isz))
        lb = _matrix_layout((k, n), (b.strides[-2] // isz, b.strides[-1] // isz))
        bsa, bsb = _batch_strides(a, batch), _batch_strides(b, batch)
        if la is None or lb is None or bsa is None or bsb is None:
            return None
        # The trailing batch dimensions both operands step through evenly make one strided
        # batch; the leading ones (if any) are looped over, one GEMM call each.
        for split in range(len(batch) + 1):
            inner = batch[split:]
            sa, sb = _uniform_stride(bsa[split:], inner), _uniform_stride(bsb[split:], inner)
            if sa is not None and sb is not None:
                break
        assert sa is not None and sb is not None  # an empty inner batch always qualifies
        outer = batch[:split]
        if math.prod(outer) > MAX_CALLS:
            return None
        count = math.prod(inner)
        (a_rows, lda), (b_rows, ldb) = la, lb
        rows = m
        if count > 1 and sb == 0 and a_rows and sa == m * lda:
            # [B, S, K] @ [K, N]: A's rows run on from one matrix to the next, so the
            # batch is one tall GEMM (B*S x K) — fewer, larger tiles for the BLAS.
            rows, count, sa = m * count, 1, 0
        if max(rows, n, k, lda, ldb, count) > _INT_MAX:
            return None
        y = self.cp.empty(batch + (m, n), dtype=a.dtype)
        for index in itertools.product(*(range(d) for d in outer)):
            offset_a = sum(i * st for i, st in zip(index, bsa)) * isz
            offset_b = sum(i * st for i, st in zip(index, bsb)) * isz
            flat = 0
            for i, d in zip(index, outer):
                flat = flat * d + i
            offset_y = flat * count * rows * n * isz
            self._gemm(a.data.ptr + offset_a, a_rows, lda, sa, b.data.ptr + offset_b, b_rows,
                       ldb, sb, y.data.ptr + offset_y, rows, n, k, count, a.dtype)
        return y

    def _gemm(
        self, a_ptr: int, a_rows: bool, lda: int, sa: int, b_ptr: int, b_rows: bool, ldb: int,
        sb: int, y_ptr: int, rows: int, n: int, k: int, count: int, dtype: np.dtype[Any],
    ) -> None:
        cp = self.cp
        lib = self._cublas()
        data = cp.cuda.runtime.CUDA_R_16F if dtype == _HALF else cp.cuda.runtime.CUDA_R_32F
        op_n, op_t = lib.CUBLAS_OP_N, lib.CUBLAS_OP_T
        # Row-major Y = A @ B is column-major Y^T = B^T @ A^T: B goes first. A row-major
        # operand, read column-major, already is its transpose (no transpose flag).
        args = (
            op_n if b_rows else op_t, op_n if a_rows else op_t,
            n, rows, k, _ONE.ctypes.data,
            b_ptr, data, ldb, sb,
            a_ptr, data, lda, sa,
            _ZERO.ctypes.data,
            y_ptr, data, n, rows * n,
            count, getattr(lib, self.compute_type(dtype)), lib.CUBLAS_GEMM_DEFAULT,
        )
        if self._direct is not None:
            self._direct.gemm_strided_batched_ex(*args)
        else:
            lib.gemmStridedBatchedEx(cp.cuda.device.get_cublas_handle(), *args)

    def _cublas(self) -> Any:
        # Looked up on first use: CuPy loads the cuBLAS library when the attribute is
        # first read, so a machine without it fails on the first product, as with
        # cupy.matmul, not when kernels are built.
        if self._lib is None:
            self._lib = self.cp.cuda.cublas
            self._direct = direct_cublas(self.cp)
        return self._lib


def kernel_blas(info: KernelInfo) -> CublasMatmul:
    """The GEMM path of a kernel built with ``info``: its provider's ``use_tf32`` (on when
    the kernel is built without provider options, onnxruntime's default)."""
    return CublasMatmul(cupy_module(), tf32=bool(info.provider_options.get("use_tf32", True)))
