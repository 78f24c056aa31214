"""GPU override of the library's Conv (:mod:`onyxrt_ops.spatial`), subclassing its
kernel (attributes parsed and checked there); ConvTranspose and ConvInteger come from the
library, bound over CuPy.

Conv is im2col + one batched GEMM per group: the padded input's windows are a strided
view (``cupy.lib.stride_tricks.as_strided``, no copy), laid out once as a
``(N, group, C/group * taps, L)`` column matrix and multiplied by the weight viewed as
``(group, M/group, C/group * taps)`` — one copy of the columns where the library stacks
one slice per tap. A 1x1 convolution without padding is a plain (batched) GEMM on the
input itself; a depthwise convolution (one input channel per group) accumulates its taps
with multiply-adds instead of building columns. Column matrices larger than a budget are
built a few images at a time. The GEMMs of float16 and float32 convolutions go to cuBLAS
with an explicit compute type (:mod:`.blas`: float32 accumulation for float16, TF32 under
``use_tf32``); a grouped convolution of several images, whose batch is not one stride,
keeps ``cupy.matmul``.
"""

from __future__ import annotations

import itertools
from typing import Any

from onyxrt.kernels import KernelInfo
from onyxrt.spatial import Window
from onyxrt_ops import library

from . import registry
from ._common import BACKEND, FLOATS
from ._spatial import pad_spatial, prod, windows
from .blas import kernel_blas

__all__ = ["Conv"]

#: Largest column matrix (bytes) built in one piece; bigger batches go image by image.
COLUMN_BUDGET = 256 << 20


@registry.register("Conv", since=(1, 11, 22), types={"T": FLOATS})
class Conv(library.kernel("Conv", 22, BACKEND)):
    """N-d convolution with groups, strides, dilations, pads/auto_pad and optional bias."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.cp = self.xp.module
        self.blas = kernel_blas(info)

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
        nsp = x.ndim - 2
        out = win.out_shape
        ntaps = prod(k)
        wr = w.reshape(g, m // g, cg * ntaps)
        if ntaps == 1 and not win.padded:
            # 1x1: a GEMM on the (strided) input itself.
            xs = x
            if any(st != 1 for st in s):
                xs = x[(slice(None), slice(None)) + tuple(slice(None, None, st) for st in s)]
            y = self.blas.product(wr, xs.reshape(n, g, cg, prod(out)))
        elif cg == 1 and g > 1:
            y = self._depthwise(x, w, k, s, d, win)
        else:
            y = self._im2col(x, wr, k, s, d, win)
        y = y.reshape((n, m) + out)
        if b is not None:
            y += b.reshape((-1,) + (1,) * nsp).astype(y.dtype, copy=False)
        return (y,)

    def _im2col(self, x: Any, wr: Any, k: Any, s: Any, d: Any, win: Window) -> Any:
        cp = self.cp
        n, c = x.shape[:2]
        g, _, kg = wr.shape
        nsp = len(k)
        out = win.out_shape
        L = prod(out)
        xp = pad_spatial(cp, x, win.pads_begin, win.total_end, 0)
        view = windows(cp, xp, k, s, d, out)  # (N, C, *out, *K)
        # Columns ordered (C, *K) x (*out), matching W's (C/g, *K) flattening.
        perm = (0, 1) + tuple(range(2 + nsp, 2 + 2 * nsp)) + tuple(range(2, 2 + nsp))
        per_image = c * prod(k) * L * x.dtype.itemsize
        nb = max(1, COLUMN_BUDGET // max(per_image, 1))
        if nb >= n:
            cols = view.transpose(perm).reshape(n, g, kg, L)
            return self.blas.product(wr, cols)
        y = cp.empty((n, g, wr.shape[1], L), dtype=x.dtype)
        for n0 in range(0, n, nb):
            part = view[n0 : n0 + nb]
            cols = part.transpose(perm).reshape(part.shape[0], g, kg, L)
            y[n0 : n0 + nb] = self.blas.product(wr, cols)
        return y

    def _depthwise(self, x: Any, w: Any, k: Any, s: Any, d: Any, win: Window) -> Any:
        """One input channel per group: multiply-add the taps (no column matrix)."""
        cp = self.cp
        n, g = x.shape[:2]
        nsp = len(k)
        mpg = w.shape[0] // g
        xp = pad_spatial(cp, x, win.pads_begin, win.total_end, 0)
        view = windows(cp, xp, k, s, d, win.out_shape)  # (N, G, *out, *K)
        wd = w.reshape(g, mpg, prod(k))
        lead = (slice(None), slice(None), None) + (slice(None),) * nsp
        acc = None
        for i, tap in enumerate(itertools.product(*(range(kk) for kk in k))):
            src = view[lead + tap]  # (N, G, 1, *out)
            wt = wd[:, :, i].reshape((g, mpg) + (1,) * nsp)
            if acc is None:
                acc = src * wt
            else:
                acc += src * wt
        return acc
