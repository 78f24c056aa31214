"""GPU kernels: MaxPool, AveragePool, GlobalAveragePool and GlobalMaxPool.

Windowed pools reduce a strided window view of the padded input (no copy) over its
kernel axes. MaxPool pads with -inf (the dtype's minimum for integers); its optional
Indices output is the flat index of each maximum in the unpadded input (row-major, or
column-major over the spatial axes with storage_order=1), computed on the device.
AveragePool divides by the number of taps that count: all of them, or without
count_include_pad only those on the input (never the ceil_mode overhang); those counts
depend only on the geometry and are computed on the device once per input shape.
float16 averages accumulate in float32.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from onyxrt.kernels import KernelInfo

from . import registry
from ._common import FLOATS, GpuKernel, bad, wants_output, widen
from ._spatial import Window, pad_spatial, prod, read_spatial_attrs, window, windows

__all__ = ["MaxPool", "AveragePool", "GlobalMaxPool", "GlobalAveragePool"]

_EIGHT_BIT = frozenset({np.dtype(np.int8), np.dtype(np.uint8)})


def _lowest(dtype: np.dtype[Any]) -> Any:
    if dtype.kind in "iu":
        return int(np.iinfo(dtype).min)
    return -np.inf


class _Pool(GpuKernel):
    """Window attributes and geometry shared by the windowed pools."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.attrs = read_spatial_attrs(info, need_kernel=True)
        self.ceil_mode = bool(info.attr("ceil_mode", 0))

    def _geometry(self, x: Any) -> tuple[Any, Any, Any, Window]:
        if x.ndim < 3:
            raise ValueError(f"X must have rank >= 3 (N, C, spatial...), got shape {x.shape}")
        k, s, d, pb, pe = self.attrs.resolve(x.ndim - 2)
        win = window(x.shape[2:], k, s, d, pb, pe, self.attrs.auto_pad, self.ceil_mode)
        return k, s, d, win


@registry.register("MaxPool", since=(1, 8, 10, 11, 12, 22), types={"T": FLOATS | _EIGHT_BIT})
class MaxPool(_Pool):
    """Max over each window; optional int64 Indices of the maxima (storage_order aware)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.storage_order = int(info.attr("storage_order", 0))
        if self.storage_order not in (0, 1):
            raise bad(info, f"storage_order={self.storage_order} must be 0 or 1")
        self.want_indices = wants_output(info, 1)

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
class AveragePool(_Pool):
    """Mean over each window; count_include_pad chooses whether pads count."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.count_include_pad = bool(info.attr("count_include_pad", 0))
        self._counts: dict[tuple[Any, ...], Any] = {}

    def _count(self, in_sp: tuple[int, ...], k: Any, s: Any, d: Any, win: Window,
               dtype: Any) -> Any:
        """How many taps of each window count (device, cached per geometry)."""
        key = (in_sp, str(dtype))
        counts = self._counts.get(key)
        if counts is not None:
            return counts
        cp = self.cp
        if self.count_include_pad:
            region = tuple(n + b + e for n, b, e in zip(in_sp, win.pads_begin, win.pads_end))
            mask = cp.ones((1, 1) + region, dtype=dtype)
            mask = pad_spatial(cp, mask, (0,) * len(k), win.extra_end, 0)
        else:
            mask = cp.ones((1, 1) + in_sp, dtype=dtype)
            mask = pad_spatial(cp, mask, win.pads_begin, win.total_end, 0)
        axes = tuple(range(2 + len(k), 2 + 2 * len(k)))
        counts = windows(cp, mask, k, s, d, win.out_shape).sum(axis=axes)
        self._counts[key] = counts
        return counts

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
            acc /= self._count(tuple(x.shape[2:]), k, s, d, win, xc.dtype)
        return (acc.astype(x.dtype, copy=False),)


def _spatial_axes(x: Any) -> tuple[int, ...]:
    if x.ndim < 2:
        raise ValueError(f"X must have rank >= 2 (N, C, spatial...), got shape {x.shape}")
    return tuple(range(2, x.ndim))


@registry.register("GlobalMaxPool", since=(1, 22), types={"T": FLOATS})
class GlobalMaxPool(GpuKernel):
    """Max over all spatial axes, kept as size-1 dims."""

    def compute(self, x):
        axes = _spatial_axes(x)
        return (x.max(axis=axes, keepdims=True) if axes else x.copy(),)


@registry.register("GlobalAveragePool", since=(1, 22), types={"T": FLOATS})
class GlobalAveragePool(GpuKernel):
    """Mean over all spatial axes, kept as size-1 dims (float16 accumulates in float32)."""

    def compute(self, x):
        axes = _spatial_axes(x)
        if not axes:
            return (x.copy(),)
        y = widen(x).mean(axis=axes, keepdims=True)
        return (y.astype(x.dtype, copy=False),)

