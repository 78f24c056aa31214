"""CPU kernels: fast paths of the library's products (:mod:`onyxrt_ops.linalg`, bound over
numpy in ``kernels/__init__``).

Overrides of library operators, each subclassing the library's kernel (timed per call,
best of 9, OpenBLAS on one thread):

* Gemm — a constant B is laid out once as a contiguous (K, N) of the compute type
  (OpenBLAS multiplies a transposed view ~2x slower once there are several rows:
  [8, 1280] x [1000, 1280]^T 0.37 ms against the library's 0.83 ms; with a single row it
  gave other bits in concurrent runs than alone, tests/test_concurrency.py), and the
  library's steps written out (its per-call overhead: 4.7 us against 5.1 us for
  [1, 16] x [8, 16]^T), C's broadcast check remembered per pair of shapes and C added in
  place (an 8-layer 256-wide MLP at batch 1, eight Gemm + Relu: 105 to 92 us per run);
* MatMul — a batched (..., M, K) times a 2-D (K, N) as one GEMM over all rows rather than
  one per batch entry ([8, 128, 768] x [768, 768]: 11.7 ms against 12.2 ms, more with
  OpenBLAS's threads), a constant half-precision B converted to float32 once ([64, 256]
  float16: 0.16 ms against 0.27 ms), and 1.62 us against 1.70 us for 4x4;
* MatMulInteger — with a constant B (the weights) on a CPU with AVX-512 VNNI, the int8
  kernel of ``csrc/qgemm.c`` (u8 x s8 sums in int32, B packed once; a uint8 A or B shifted
  to that form, the zero points' terms from B's column sums and A's row sums): 0.87 ms for
  [128, 768] x [768, 768]. Otherwise float32 GEMMs over chunks of K short enough that
  every partial sum is an exact integer (below 2**24), summed in int32, with a constant B
  shifted by its zero point and converted once; numpy's int32 matmul has no BLAS (85 ms for
  [128, 768] x [768, 768]). Against the former float64 GEMM with B converted per call,
  u8 x s8: [128, 768] x [768, 768] 1.75 against 3.3 ms, x [768, 3072] 7.3-7.8 against
  14.5-14.9 ms, [128, 3072] x [3072, 768] 7.8 against 14.4-15.9 ms, one row 0.04 against
  0.37 ms (best of 5, two alternated processes each).

Det comes from the library (as fast as the former numpy kernel: 4.0 us for one 3x3
matrix, 30 us for 64 8x8 ones), and so does Einsum, over the numpy backend's ``einsum``
extra (``numpy.einsum`` with an optimized contraction order, as the former kernel).
"""

from __future__ import annotations

from collections.abc import Callable
from math import prod
from typing import Any

import numpy as np

from onyxrt.kernels import KernelInfo
from onyxrt_ops import library

from .. import native
from . import registry
from ._backend import BACKEND
from ._spatial import compute_dtype

__all__ = ["Gemm", "MatMul", "MatMulInteger", "matmul", "contiguous_transpose", "pack_integer_b", "integer_product",
           "packed_product", "is_row_vector", "MIN_PACKED_ROWS"]


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
    all rows rather than one per batch entry, and attention's scores (a batch of products
    whose B is a transposed view: each head's key, columns along memory) as the compiled
    batched GEMM (see :func:`_heads_times_keys`)."""
    if b.ndim == 2 and a.ndim > 2 and a.flags.c_contiguous:
        y = np.matmul(a.reshape(-1, a.shape[-1]), b)
        return y.reshape(a.shape[:-1] + (b.shape[-1],))
    if b.ndim > 2 and _heads_times_keys(a, b):
        y = np.empty(a.shape[:-1] + b.shape[-1:], np.float32)
        if native.gemm_batched(a, b, y):
            return y
    return np.matmul(a, b)


#: Products in a batch at least this many for the compiled batched GEMM: fewer leave a
#: thread of the pool idle (each product runs on one thread).
MIN_BATCHED_PRODUCTS = 4


def _heads_times_keys(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether ``a @ b`` is a batch of float32 products the compiled batched GEMM runs
    faster than numpy's loop over OpenBLAS: B's k axis along memory (a transposed key:
    ``Q @ K^T`` per head), same batch dimensions, at least MIN_BATCHED_PRODUCTS of them.
    numpy calls OpenBLAS once per head, each call split over the threads (12 heads of
    [197, 64] x [64, 197]: 625-843 µs against 431-663 on 2 cores; [128, 64] x [64, 128]:
    299-345 against 198-287). With B row-major (``probabilities @ V``) OpenBLAS is as fast
    or faster (392 against 439 µs), and keeps those."""
    return (
        native.GEMM_PREFERRED
        and a.dtype == np.float32
        and b.dtype == np.float32
        and a.ndim == b.ndim
        and a.shape[:-2] == b.shape[:-2]
        and b.strides[-2] == 4
        and b.strides[-1] > 4
        and prod(a.shape[:-2]) >= MIN_BATCHED_PRODUCTS
    )


# Fewer rows than this go to BLAS: one row is a matrix-vector product, which OpenBLAS's
# gemv streams as fast as the compiled kernel; from two rows the compiled kernel (which
# computes only the rows there are) beats OpenBLAS's small-M GEMM 2-3x ([2, 768] x
# [768, 3072]: 0.19 against 0.62 ms).
MIN_PACKED_ROWS = 2


def is_row_vector(bias: np.ndarray | None, n: int) -> bool:
    """Whether ``bias`` is n float32 values along the last axis only."""
    return bias is not None and bias.dtype == np.float32 and bias.shape in ((n,), (1, n))


def packed_product(
    a: np.ndarray, b: native.PackedMatrix, bias: np.ndarray | None = None
) -> np.ndarray | None:
    """``a (..., M, K) @ B (+ bias per column)`` through the compiled GEMM with B packed,
    all of a's rows as one product; ``None`` when it does not qualify (dtype, shapes, too
    few rows) or OpenBLAS runs the product faster (:func:`native.compiled_gemm_wins`)."""
    k, n = b.shape
    if a.dtype != np.float32 or a.ndim < 2 or a.shape[-1] != k:
        return None
    rows = a.size // k if k else 0
    if rows < MIN_PACKED_ROWS or not native.compiled_gemm_wins(rows, k, n):
        return None
    a2 = a if a.ndim == 2 else a.reshape(rows, k)
    y = np.empty((rows, n), dtype=np.float32)
    col_bias = None if bias is None else np.ascontiguousarray(bias.reshape(n))
    if not native.gemm(a2, b, y, None, col_bias):
        return None
    return y.reshape(a.shape[:-1] + (n,))


@registry.register("Gemm", since=(1, 6, 7, 9, 11, 13))
class Gemm(library.kernel("Gemm", 13, BACKEND)):
    """The library's Gemm, with a constant B laid out once as a contiguous (K, N)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self._b_src = src = info.constant(1)
        self._b_packed: np.ndarray | None = None
        self._checked: tuple[tuple[int, ...], tuple[int, ...]] | None = None
        if isinstance(src, np.ndarray) and src.ndim == 2:
            cdt = compute_dtype(src.dtype)
            self._b_packed = contiguous_transpose(src) if self.trans_b else np.ascontiguousarray(src, dtype=cdt)
        # A constant float32 B also packed for the compiled GEMM, as FusedMatMul's (5-18%
        # faster than OpenBLAS from 128 rows: GPT-2's [128, 768] x [768, 2304] 2.13 against
        # 2.42 ms), which products of at least MIN_PACKED_ROWS rows take.
        self._b_gemm: native.PackedMatrix | None = None
        if self._b_packed is not None and self._b_packed.dtype == np.float32 and native.GEMM_PREFERRED:
            self._b_gemm = native.pack_gemm_b(self._b_packed)
        #: the activation the compiled GEMM applies to each finished tile (FusedGemm's)
        self.native_act = (native.ACT_NONE, 0.0, 0.0)
        self._c_src = info.constant(2)
        self._fast_ok, self._c_row = self._fast_operands()
        #: the compiled one-row product (product, bias and activation in one call) for a
        #: batch-1 row through :meth:`_fast`
        self._gemv = native.one_row_product(self._b_packed) if self._fast_ok else None
        #: the compiled one-row product for the other Gemms with a constant float32 B and
        #: no transA — alpha other than 1, or a C that is an input (KMeans' conversion:
        #: -2 X Cᵀ + |X|²) — the scaling and C applied after it (:meth:`_one_row`)
        self._gemv_plain = None
        if (self._gemv is None and self._b_packed is not None and self._b_packed.dtype == np.float32
                and not self.trans_a):
            self._gemv_plain = native.one_row_product(self._b_packed)
        self.single_output = self._one_row_output()

    def _one_row_output(self) -> Callable[..., np.ndarray] | None:
        """The :attr:`~onyxrt.kernels.Kernel.single_output` of a Gemm that has the compiled
        one-row product: a batch-1 row straight to it (one Python frame, where compute,
        product and _fast took three: ~1.5 µs of a 256 x 256 layer's ~6), any other
        input through :meth:`compute`."""
        if self._gemv is None:
            return None
        gemv, panels, k, n = self._gemv.gemv, self._gemv.panels, self._gemv.k, self._gemv.n
        bias, (act, p0, p1) = self._c_row, self.native_act
        b_src, c_src, compute = self._b_src, self._c_src, self.compute
        row_in, row_out, f32, empty = (1, k), (1, n), np.dtype(np.float32), np.empty

        def single_output(a: np.ndarray, b: np.ndarray, c: np.ndarray | None = None) -> np.ndarray:
            if b is b_src and c is c_src and a.shape == row_in and a.dtype is f32 and a.strides[1] == 4:
                y = empty(row_out, f32)
                gemv(a, panels, y, k, n, bias, act, p0, p1)
                return y
            return compute(a, b, c)[0]  # type: ignore[no-any-return]

        return single_output

    def _fast_operands(self) -> tuple[bool, np.ndarray | None]:
        """Whether this Gemm's products take :meth:`_fast` — B a constant float32 (K, N),
        no transA, alpha 1, C absent or a constant every row gets the same way (shape
        (N,), (1, N), one value) — and then beta * C as a float32 (N,) row to add (None:
        nothing to add, C absent or beta 0)."""
        b, c = self._b_packed, self._c_src
        if b is None or b.dtype != np.float32 or self.trans_a or self.alpha != 1.0:
            return False, None
        n = b.shape[1]
        if c is None:
            absent = len(self.info.input_names) < 3 or not self.info.input_names[2]
            return absent, None
        if not isinstance(c, np.ndarray) or c.dtype != np.float32 or c.shape not in ((n,), (1, n), (), (1,), (1, 1)):
            return False, None
        if self.beta == 0.0:
            return True, None
        cc = self.c_scaled if self.c_scaled is not None else c
        return True, np.ascontiguousarray(np.broadcast_to(np.asarray(cc, np.float32).reshape(-1), (n,)))

    def compute(self, a, b, c=None):
        return (self.product(a, b, c)[0],)

    def product(self, a: np.ndarray, b: np.ndarray, c: np.ndarray | None) -> tuple[np.ndarray, bool]:
        """Y, and whether :attr:`native_act` was applied to it already."""
        if (self._fast_ok and b is self._b_src and c is self._c_src and a.dtype == np.float32
                and a.ndim == 2 and a.shape[1] == self._b_packed.shape[0]):
            return self._fast(a)
        if (self._gemv_plain is not None and b is self._b_src and a.dtype == np.float32
                and a.shape == (1, self._gemv_plain.k) and a.flags.c_contiguous):
            return self._one_row(a, c), False
        # The library's steps, written out: its per-call overhead (a few method calls) is
        # 9% of a small Gemm (see the module docstring).
        if a.ndim != 2 or b.ndim != 2:
            raise ValueError(f"A and B must be 2-D, got shapes {a.shape} and {b.shape}")
        if (self._b_gemm is not None and b is self._b_src and not self.trans_a and self.alpha == 1.0
                and a.shape[0] >= MIN_PACKED_ROWS):
            y = self._packed(a, c)
            if y is not None:
                return y, False
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
            raise ValueError(f"A' has shape {am.shape} and B' has shape {bm.shape}; inner dims differ")
        y = self._plus_c(self.scaled(np.matmul(am.astype(cdt, copy=False), bm), self.alpha), c, cdt)
        return y.astype(a.dtype, copy=False), False

    def _plus_c(self, y: np.ndarray, c: np.ndarray | None, cdt: np.dtype[Any]) -> np.ndarray:
        """``y + beta * C`` (C in ``cdt``, broadcast to Y), in place where ``y`` allows."""
        if c is None or self.beta == 0.0:
            return y
        cc = self.c_scaled if self.c_scaled is not None else self.scaled(c.astype(cdt, copy=False), self.beta)
        # The broadcast check is remembered for the last pair of shapes (np.broadcast_shapes
        # costs as much as a small product), and C is added in place: y is this call's own.
        if (cc.shape, y.shape) != self._checked:
            if np.broadcast_shapes(cc.shape, y.shape) != y.shape:
                raise ValueError(f"C of shape {cc.shape} does not broadcast to Y {y.shape}")
            self._checked = (cc.shape, y.shape)
        if y.dtype == cc.dtype and y.flags.writeable:
            y += cc
            return y
        return y + cc

    def _fast(self, a: np.ndarray) -> tuple[np.ndarray, bool]:
        """float32 A @ constant B (+ a constant bias row), checked at creation: the MLP
        layer's Gemm, without the general path's tests (a tiny model's run is mostly
        per-node overhead)."""
        if self._gemv is not None and a.shape[0] == 1 and a.flags.c_contiguous:
            y = np.empty((1, self._gemv.n), np.float32)
            self._gemv(a, y, self._c_row, *self.native_act)
            return y, True
        if (self._b_gemm is not None and a.shape[0] >= MIN_PACKED_ROWS and a.flags.c_contiguous
                and native.compiled_gemm_wins(a.shape[0], *self._b_gemm.shape)):
            y = np.empty((a.shape[0], self._b_gemm.shape[1]), np.float32)
            if native.gemm(a, self._b_gemm, y, None, self._c_row, None, *self.native_act):
                return y, True
        y = np.matmul(a, self._b_packed)
        if self._c_row is not None:
            y += self._c_row
        return y, False

    def _one_row(self, a: np.ndarray, c: np.ndarray | None) -> np.ndarray:
        """One float32 row times the constant B by the compiled one-row product, then the
        general path's steps on it: alpha * product (float32), + beta * C broadcast."""
        assert self._gemv_plain is not None
        y = np.empty((1, self._gemv_plain.n), np.float32)
        self._gemv_plain(a, y, None, native.ACT_NONE, 0.0, 0.0)
        if self.alpha != 1.0:
            y *= np.float32(self.alpha)
        return self._plus_c(y, c, np.dtype(np.float32)).astype(np.float32, copy=False)

    def _packed(self, a: np.ndarray, c: np.ndarray | None) -> np.ndarray | None:
        """A @ B (+ beta * C: a row of one value per column, added tile by tile; any other
        C afterwards) by the compiled GEMM with B packed; None where it does not apply."""
        assert self._b_gemm is not None
        n = self._b_gemm.shape[1]
        add_c = c is not None and self.beta != 0.0
        cc = None
        if add_c:
            cc = self.c_scaled if self.c_scaled is not None else self.scaled(c.astype(np.float32, copy=False), self.beta)
        row = cc if add_c and cc.dtype == np.float32 and cc.ndim <= 2 and cc.size == n and cc.shape[-1] == n else None
        y = packed_product(a, self._b_gemm, row)
        if y is None:
            return None
        if add_c and row is None:
            if np.broadcast_shapes(cc.shape, y.shape) != y.shape:
                raise ValueError(f"C of shape {cc.shape} does not broadcast to Y {y.shape}")
            y += cc
        return y


@registry.register("MatMul", since=(1, 9, 13))
class MatMul(library.kernel("MatMul", 13, BACKEND)):
    """The library's MatMul, with a batched A times a 2-D B as one GEMM and a constant
    half-precision B in float32 once."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self._b_src = src = info.constant(1)
        self._b_f32: np.ndarray | None = None
        if isinstance(src, np.ndarray) and compute_dtype(src.dtype) != src.dtype:
            self._b_f32 = src.astype(np.float32)

    def compute(self, a, b):
        # Not through the library's compute: its two extra calls per product are 5% of a
        # small MatMul (see the module docstring).
        if a.ndim == 0 or b.ndim == 0:
            raise ValueError("MatMul operands must have rank >= 1")
        cdt = compute_dtype(a.dtype)
        if cdt == a.dtype:
            return (np.asarray(matmul(a, b)),)
        if self._b_f32 is not None and (b is self._b_src or np.array_equal(b, self._b_src)):
            b = self._b_f32
        return (np.asarray(np.matmul(a.astype(cdt), b.astype(cdt, copy=False))).astype(a.dtype),)


def _zero_point(zp: np.ndarray, per_row: bool) -> np.ndarray:
    """A zero point in float32 (exact for 8-bit values): a scalar when it is one value,
    per-row ones of A as a column."""
    z = np.asarray(zp, dtype=np.float32)
    if z.size == 1:
        return z.reshape(())
    return z.reshape(-1, 1) if per_row and z.ndim == 1 else z


#: float32 holds every integer below 2**24 exactly.
_F32_EXACT = 1 << 24


def _exact_chunks(k: int, a_bound: float, b_bound: float) -> list[slice]:
    """Slices of the K axis short enough that every partial sum of a float32 GEMM over one
    stays below 2**24 (``|a| <= a_bound``, ``|b| <= b_bound``), so it is an exact integer
    whatever order the BLAS adds in."""
    step = max(1, int(_F32_EXACT // max(a_bound * b_bound, 1.0)))
    return [slice(i, min(i + step, k)) for i in range(0, k, step)] or [slice(0, 0)]


PackedB = tuple[native.PackedInt8, np.ndarray]


def pack_integer_b(b: np.ndarray, zb: np.ndarray | None) -> PackedB | None:
    """A constant 8-bit B packed for the int8 kernel (a uint8 B as int8 b - 128, its zero
    point moved alike), with its zero point as int32 (one value, or one per column);
    ``None`` without the kernel or for another layout."""
    z = np.zeros((), np.int32) if zb is None else np.asarray(zb).astype(np.int32)
    if b.ndim != 2 or z.size not in (1, b.shape[1]) or (z.size > 1 and z.ndim != 1):
        return None
    if b.dtype == np.uint8:
        b, z = (b.astype(np.int16) - 128).astype(np.int8), z - 128
    elif b.dtype != np.int8:
        return None
    packed = native.pack_int8(b)
    return None if packed is None else (packed, z.reshape(-1) if z.size > 1 else z.reshape(()))


def _unsigned_operand(a: np.ndarray, za: Any, k: int) -> tuple[np.ndarray, np.ndarray] | None:
    """The int8 kernel's left operand: an 8-bit ``a`` (..., K) as uint8 (int8 as a + 128)
    and its zero point as int32 moved alike; ``None`` for another dtype or K."""
    if a.ndim < 1 or a.shape[-1] != k:
        return None
    z = np.zeros((), np.int32) if za is None else np.asarray(za).astype(np.int32)
    if a.dtype == np.int8:
        return a.view(np.uint8) ^ np.uint8(0x80), z + 128
    return (a, z) if a.dtype == np.uint8 else None


def integer_product(a: np.ndarray, za: Any, b: PackedB) -> np.ndarray | None:
    """(a - za) @ (B - zb) in int32 by the int8 kernel: raw u8 x s8 sums, then the zero
    points' terms (from B's column sums and A's row sums); ``None`` where it does not
    apply (A not 8-bit, per-row zero points of a batched A)."""
    packed, zb = b
    k = packed.shape[0]
    operand = _unsigned_operand(a, za, k)
    if operand is None:
        return None
    a, z = operand
    lead = a.shape[:-1]
    a2 = a.reshape(-1, k)
    if z.size > 1 and (a.ndim != 2 or z.size != a.shape[0]):
        return None  # per-row zero points of a batched A: the caller's other path
    y = native.qgemm_u8s8(a2, packed)
    if y is None:
        return None
    za_col = z.reshape(-1, 1) if z.size > 1 else z
    if np.any(z):
        y -= za_col * packed.column_sums
    if np.any(zb):
        y -= a2.sum(axis=1, dtype=np.int32).reshape(-1, 1) * zb
        y += np.int32(k) * za_col * zb
    return y.reshape(*lead, packed.shape[1])


def integer_product_to_float(a: np.ndarray, za: Any, b: PackedB, scale: np.ndarray,
                             bias: np.ndarray | None) -> np.ndarray | None:
    """``float32((a - za) @ (B - zb)) * scale + bias`` by the int8 kernel with the zero
    points' terms, the scaling and the bias applied in its registers — the int32 sums of
    :func:`integer_product`, then the library's ``to_float`` steps, without the passes
    over the product in between. ``scale`` float32 of one value or one per column, ``bias``
    float32 [N] or None; ``None`` where it does not apply (see :func:`integer_product`)."""
    packed, zb = b
    k, n = packed.shape
    if n == 0 or scale.dtype != np.float32 or scale.size not in (1, n):
        return None
    if scale.size == n and scale.size > 1 and scale.shape[-1] != n:
        return None
    if bias is not None and (bias.dtype != np.float32 or bias.shape != (n,)):
        return None
    operand = _unsigned_operand(a, za, k)
    if operand is None or operand[1].size != 1:
        return None
    a, z = operand
    lead = a.shape[:-1]
    a2 = a.reshape(-1, k)
    row_sum = col_zb = None
    if not zb.any() and k < 1 << 15:
        # symmetric weights (quantize_dynamic's int8 default): z * column sums, which
        # |z| <= 383 and |sum| <= 128 K keep inside int32 — no overflow guard needed
        col_sub = packed.column_sums * z
    else:
        zb_col = np.broadcast_to(np.asarray(zb, np.int32), (n,))
        with np.errstate(over="ignore"):  # modulo 2**32 like the sums; the exact result fits
            col_sub = (z * packed.column_sums - np.int32(k) * z * zb_col).astype(np.int32)
        if zb.any():
            row_sum = a2.sum(axis=1, dtype=np.int32)
            col_zb = np.ascontiguousarray(zb_col, np.int32)
    y = native.qgemm_float(a2, packed, np.ascontiguousarray(col_sub, np.int32), row_sum, col_zb,
                           scale.reshape(-1) if scale.flags.c_contiguous else np.ascontiguousarray(scale).reshape(-1),
                           bias)
    return None if y is None else y.reshape(*lead, n)


@registry.register("MatMulInteger", since=10)
class MatMulInteger(library.kernel("MatMulInteger", 10, BACKEND)):
    """The library's MatMulInteger: a constant B (the weights) through the int8 kernel
    (:func:`integer_product`) where the CPU has one; otherwise float32 GEMMs over chunks of
    K short enough to be exact (8-bit operands: 2**24 / (255 * 255) = 258 terms, 518 for
    int8 weights), summed in int32, a constant B shifted by its zero point once (when first
    needed: with the int8 kernel it never is, and a float32 copy is 4x the weights)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        b, zb = info.constant(1), info.constant(3)
        self._b_const: tuple[np.ndarray, np.ndarray | None] | None = None
        self._b: tuple[np.ndarray, float] | None = None
        self._packed: PackedB | None = None
        if isinstance(b, np.ndarray) and b.ndim == 2 and (zb is not None or not info.has_input(3)):
            self._b_const = (b, zb)
            self._packed = pack_integer_b(b, zb)

    @staticmethod
    def _shifted_b(b: np.ndarray, zb: np.ndarray | None) -> tuple[np.ndarray, float]:
        bf = b.astype(np.float32)
        if zb is not None:
            bf -= _zero_point(zb, per_row=False)
        return bf, float(np.max(np.abs(bf))) if bf.size else 0.0

    def compute(self, a, b, a_zero_point=None, b_zero_point=None):
        if a.ndim < 1 or b.ndim < 1:
            raise ValueError(f"MatMulInteger needs inputs of rank >= 1, got {a.shape} and {b.shape}")
        if self._packed is not None and b.ndim == 2:
            y = integer_product(a, a_zero_point, self._packed)
            if y is not None:
                return (y,)
        if self._b_const is not None and b.ndim == 2:
            if self._b is None:
                self._b = self._shifted_b(*self._b_const)
            bf, b_bound = self._b
        else:
            bf, b_bound = self._shifted_b(b, b_zero_point)
        af = a.astype(np.float32)
        if a_zero_point is not None:
            af -= _zero_point(a_zero_point, per_row=True)
        k = af.shape[-1]
        if bf.shape[-2 if bf.ndim > 1 else 0] != k:
            raise ValueError(f"MatMulInteger: inner dimensions differ: {a.shape} @ {b.shape}")
        chunks = _exact_chunks(k, 255.0, b_bound)
        if len(chunks) == 1:
            return (np.asarray(matmul(af, bf)).astype(np.int32),)
        y: np.ndarray | None = None
        for part in chunks:
            bpart = bf[..., part, :] if bf.ndim > 1 else bf[part]
            partial = np.asarray(matmul(np.ascontiguousarray(af[..., part]), bpart)).astype(np.int32)
            y = partial if y is None else np.add(y, partial, out=y)
        return (y,)
