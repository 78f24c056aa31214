"""GPU override of the library's Conv (:mod:`onyxrt_ops.spatial`), subclassing its
kernel (attributes parsed and checked there); ConvTranspose and ConvInteger come from the
library, bound over CuPy.

Every Conv is one GEMM call per piece of the batch (one piece unless the column matrix
exceeds :data:`COLUMN_BUDGET`), the weight viewed as ``(group, M/group, C/group * taps)``:

* **1x1, stride 1, no padding**: the input as it lies, ``(N, group, C/group, H*W)``, is the
  GEMM's right-hand side — no copy (cuBLAS's strided batch steps over the images; a grouped
  convolution of several images takes one GEMM call per image, as the input's layout
  gives no single stride over (image, group)).
* **Otherwise** (taps, strides or padding): the input is padded once, only as far as the
  windows reach (``cupy.zeros`` + one copy of the input into it; none when no window
  reaches a pad), and its windows — a strided view, no copy — are copied once into the
  column matrix, in the order the GEMM reads: ``(N, group, C/group * taps, L)`` when the
  batch or the groups are one, else ``(group, C/group * taps, N * L)``, so that a grouped or
  depthwise convolution of several images is still one strided-batched GEMM (over the
  groups); its ``(group, M/group, N, L)`` result is transposed into ``(N, M, L)`` by the same
  kernel that adds the bias. A depthwise convolution is such a GEMM with ``taps`` as its
  inner dimension — one launch where a multiply-add per tap took two.

The views of a constant W and B (the same device arrays every run) are made once. The GEMMs
of float16 and float32 convolutions go to cuBLAS with an explicit compute type (:mod:`.blas`:
float32 accumulation for float16, TF32 under ``use_tf32``); other types and ROCm use
``cupy.matmul``.
"""

from __future__ import annotations

from typing import Any

from onyxrt.kernels import KernelInfo
from onyxrt.spatial import Window
from onyxrt_ops import library

from . import registry
from ._common import BACKEND, FLOATS
from ._spatial import columns, pad_spatial, prod, reached_end
from .blas import kernel_blas

__all__ = ["Conv", "COLUMN_BUDGET"]

#: Largest column matrix (bytes) built in one piece; bigger batches go a few images at a time.
COLUMN_BUDGET = 256 << 20


@registry.register("Conv", since=(1, 11, 22), types={"T": FLOATS})
class Conv(library.kernel("Conv", 22, BACKEND)):
    """N-d convolution with groups, strides, dilations, pads/auto_pad and optional bias."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.cp = self.xp.module
        self.blas = kernel_blas(info)
        # Inputs that are initializers arrive as the same device array every run: their
        # reshaped views are kept (a CuPy call each saved per run). Others are never kept,
        # so no run holds on to a previous run's memory.
        self._constant = {i for i in (1, 2) if info.constant(i) is not None}
        self._views: dict[int, tuple[Any, Any]] = {}

    def compute(self, x, w, b=None):
        k, s, d, win = self._geometry(x, w)
        n, c = x.shape[:2]
        m = w.shape[0]
        g = self.group
        if c % g or m % g:
            raise ValueError(f"X has {c} channels and W {m} outputs: not divisible by group={g}")
        cg = c // g
        if w.shape[1] != cg:
            raise ValueError(f"W expects {w.shape[1] * g} input channels (group={g}), X has {c}")
        out = win.out_shape
        ntaps = prod(k)
        wr = self._view(1, w, (g, m // g, cg * ntaps))
        bias = None if b is None else self._view(2, b, (m,) + (1,) * len(out), x.dtype)
        if ntaps == 1 and not win.padded and all(st == 1 for st in s):
            # 1x1: the input itself is the GEMM's right-hand side.
            y = self.blas.product(wr, x.reshape(n, g, cg, prod(out))).reshape((n, m) + out)
        elif g > 1 and n > 1:
            return (self._group_major(x, wr, k, s, d, win, bias),)
        else:
            y = self._image_major(x, wr, k, s, d, win)
        if bias is not None:
            y += bias
        return (y,)

    def _view(self, index: int, a: Any, shape: tuple[int, ...], dtype: Any = None) -> Any:
        """``a`` reshaped (and cast to ``dtype``), kept while input ``index`` is a constant
        that keeps arriving as the same array."""
        kept = self._views.get(index)
        if kept is not None and kept[0] is a and kept[1].shape == shape:
            return kept[1]
        v = a.reshape(shape)
        if dtype is not None:
            v = v.astype(dtype, copy=False)
        if index in self._constant:
            self._views[index] = (a, v)
        return v

    def _padded(self, x: Any, k: Any, s: Any, d: Any, win: Window) -> Any:
        """``x`` with the zero padding its windows reach (``x`` itself when they reach none)."""
        end = reached_end(x.shape[2:], win.pads_begin, k, s, d, win.out_shape)
        return pad_spatial(self.cp, x, win.pads_begin, end, 0)

    def _image_major(self, x: Any, wr: Any, k: Any, s: Any, d: Any, win: Window) -> Any:
        """conv(x) as (N, M, *out) from columns (N, group, C/group * taps, L): right when
        the batch or the groups are one (one strided batch, no transposition)."""
        cp = self.cp
        n, c = x.shape[:2]
        g, mg = wr.shape[:2]
        out = win.out_shape
        xp = self._padded(x, k, s, d, win)
        nb = self._images_per_piece(x, k, win)
        if nb >= n:
            cols = columns(cp, xp, g, k, s, d, out, group_major=False)
            return self.blas.product(wr, cols).reshape((n, g * mg) + out)
        y = cp.empty((n, g, mg, prod(out)), dtype=x.dtype)
        for n0 in range(0, n, nb):
            cols = columns(cp, xp[n0 : n0 + nb], g, k, s, d, out, group_major=False)
            y[n0 : n0 + nb] = self.blas.product(wr, cols)
        return y.reshape((n, g * mg) + out)

    def _group_major(self, x: Any, wr: Any, k: Any, s: Any, d: Any, win: Window, bias: Any) -> Any:
        """conv(x) + bias as (N, M, *out) from columns (group, C/group * taps, N * L): one
        strided batch over the groups for the whole batch of images; the GEMM's
        (group, M/group, N, L) result is transposed into place by the bias add."""
        cp = self.cp
        n = x.shape[0]
        g, mg = wr.shape[:2]
        m = g * mg
        out = win.out_shape
        L = prod(out)
        xp = self._padded(x, k, s, d, win)
        nb = self._images_per_piece(x, k, win)
        y = cp.empty((n, m) + out, dtype=x.dtype)
        for n0 in range(0, n, nb):
            part = xp[n0 : n0 + nb] if nb < n else xp
            cnt = part.shape[0]
            yt = self.blas.product(wr, columns(cp, part, g, k, s, d, out, group_major=True))
            # (group, M/group, images, L) seen as (images, M, *out): element strides
            # (L, images * L, out's own) in the GEMM's contiguous result.
            isz = yt.itemsize
            inner = tuple(prod(out[i + 1 :]) * isz for i in range(len(out)))
            view = cp.lib.stride_tricks.as_strided(
                yt, shape=(cnt, m) + out, strides=(L * isz, cnt * L * isz) + inner
            )
            dst = y if cnt == n else y[n0 : n0 + cnt]
            if bias is None:
                cp.copyto(dst, view)
            else:
                cp.add(view, bias, out=dst)
        return y

    def _images_per_piece(self, x: Any, k: Any, win: Window) -> int:
        """How many images' columns fit in :data:`COLUMN_BUDGET` (at least one)."""
        per_image = x.shape[1] * prod(k) * prod(win.out_shape) * x.dtype.itemsize
        return max(1, COLUMN_BUDGET // max(per_image, 1))
