"""GPU overrides of the library's MaxPool and AveragePool (:mod:`onyxrt_ops.spatial`),
subclassing its kernels (attributes parsed and checked there); LpPool and the global pools
come from the library, bound over CuPy.

Windowed pools reduce a strided window view of the padded input (no copy) over its
kernel axes: one reduction where the library folds one slice per tap. MaxPool pads with
-inf (the dtype's minimum for integers); its optional Indices output is the flat index of
each maximum in the unpadded input (row-major, or column-major over the spatial axes with
storage_order=1), computed on the device. AveragePool divides by the number of taps that
count (the library's counts, computed on the device once per input shape). float16 averages accumulate in float32.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from onyxrt.kernels import KernelInfo
from onyxrt_ops import library

from . import registry
from ._common import BACKEND, FLOATS, widen
from ._spatial import pad_spatial, prod, windows

__all__ = ["MaxPool", "AveragePool"]

_EIGHT_BIT = frozenset({np.dtype(np.int8), np.dtype(np.uint8)})


def _lowest(dtype: np.dtype[Any]) -> Any:
    if dtype.kind in "iu":
        return int(np.iinfo(dtype).min)
    return -np.inf


@registry.register("MaxPool", since=(1, 8, 10, 11, 12, 22), types={"T": FLOATS | _EIGHT_BIT})
class MaxPool(library.kernel("MaxPool", 22, BACKEND)):
    """Max over each window; optional int64 Indices of the maxima (storage_order aware)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.cp = self.xp.module

    def compute(self, x):
        cp = self.cp
        k, s, d, win = self._geometry(x)
        nsp = len(k)
        xp = pad_spatial(cp, x, win.pads_begin, win.total_end, _lowest(x.dtype))
        view = windows(cp, xp, k, s, d, win.out_shape)  # (N, C, *out, *K)
        taps_axes = tuple(range(2 + nsp, 2 + 2 * nsp))
        y = view.max(axis=taps_axes)
        if not self.want_indices:
            return (y,)
        # The best tap, then its flat offset in the input: origin of the window plus the
        # tap's offset, plus the (image, channel) plane.
        best = view.reshape(view.shape[: 2 + nsp] + (prod(k),)).argmax(axis=-1)
        in_sp = x.shape[2:]
        if self.storage_order == 0:
            steps = [prod(in_sp[i + 1 :]) for i in range(nsp)]
        else:
            steps = [prod(in_sp[:i]) for i in range(nsp)]
        rem = best
        idx = None
        for ax in range(nsp - 1, -1, -1):
            coord = rem % k[ax]
            rem = rem // k[ax]
            term = coord * (d[ax] * steps[ax])
            idx = term if idx is None else idx + term
        n, c = x.shape[:2]
        plane = cp.arange(n * c, dtype=cp.int64).reshape((n, c) + (1,) * nsp) * prod(in_sp)
        idx = idx + plane
        for ax in range(nsp):
            shape = [1] * (nsp + 2)
            shape[ax + 2] = win.out_shape[ax]
            start = cp.arange(win.out_shape[ax], dtype=cp.int64) * s[ax] - win.pads_begin[ax]
            idx = idx + (start * steps[ax]).reshape(shape)
        return (y, idx.astype(cp.int64, copy=False))


@registry.register("AveragePool", since=(1, 7, 10, 11, 19, 22), types={"T": FLOATS})
class AveragePool(library.kernel("AveragePool", 22, BACKEND)):
    """Mean over each window; count_include_pad chooses whether pads count."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.cp = self.xp.module

    def compute(self, x):
        cp = self.cp
        k, s, d, win = self._geometry(x)
        nsp = len(k)
        xc = widen(x)
        xp = pad_spatial(cp, xc, win.pads_begin, win.total_end, 0)
        acc = windows(cp, xp, k, s, d, win.out_shape).sum(axis=tuple(range(2 + nsp, 2 + 2 * nsp)))
        if not win.padded or (self.count_include_pad and not any(win.extra_end)):
            acc /= prod(k)
        else:
            acc /= self._count(xc)  # the library's, on the device once per input shape
        return (acc.astype(x.dtype, copy=False),)
