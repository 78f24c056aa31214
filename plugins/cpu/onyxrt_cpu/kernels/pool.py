"""CPU kernels: pooling (MaxPool, AveragePool, LpPool and their Global forms).

Windowed pools pad the input once (``-inf``/the dtype's minimum for max, 0 otherwise) and
reduce over the kernel taps, each tap being one strided slice of the padded input, so
every step is a whole-tensor vectorized operation. ``ceil_mode`` windows that run past
the end padding read padding that never counts (see :class:`~._spatial.Window`).
MaxPool's optional Indices output holds the flat (row-major, or column-major over the
spatial axes when storage_order=1) index of each maximum in the unpadded input.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from onyxrt.errors import InvalidGraph
from onyxrt.kernels import Kernel, KernelInfo

from . import registry
from ._spatial import (
    Window,
    compute_dtype,
    pad_spatial,
    prod,
    read_spatial_attrs,
    taps,
    window,
)

__all__ = [
    "MaxPool",
    "AveragePool",
    "LpPool",
    "GlobalMaxPool",
    "GlobalAveragePool",
    "GlobalLpPool",
]


def _bad(info: KernelInfo, msg: str) -> InvalidGraph:
    return InvalidGraph(f"node {info.node_name!r} ({info.op_type}): {msg}")


def _lowest(dtype: np.dtype[Any]) -> Any:
    if dtype.kind in "iu":
        return np.iinfo(dtype).min
    return -np.inf


class _Pool(Kernel):
    """Window attributes and geometry shared by the windowed pools."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.attrs = read_spatial_attrs(info, need_kernel=True)
        self.ceil_mode = bool(info.attr("ceil_mode", 0))

    def _geometry(
        self, x: np.ndarray
    ) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], Window]:
        if x.ndim < 3:
            raise ValueError(f"X must have rank >= 3 (N, C, spatial...), got shape {x.shape}")
        k, s, d, pb, pe = self.attrs.resolve(x.ndim - 2)
        win = window(x.shape[2:], k, s, d, pb, pe, self.attrs.auto_pad, self.ceil_mode)
        return k, s, d, win

    @staticmethod
    def _padded(x: np.ndarray, win: Window, value: Any) -> np.ndarray:
        end = tuple(e + x_ for e, x_ in zip(win.pads_end, win.extra_end, strict=True))
        return pad_spatial(x, win.pads_begin, end, value)


@registry.register("MaxPool", since=(1, 8, 10, 11, 12, 22))
class MaxPool(_Pool):
    """Max over each window; optional int64 Indices of the maxima (storage_order aware)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.storage_order = int(info.attr("storage_order", 0))
        if self.storage_order not in (0, 1):
            raise _bad(info, f"storage_order={self.storage_order} must be 0 or 1")
        self.want_indices = len(info.output_names) > 1 and info.output_names[1] != ""

    def compute(self, x):
        k, s, d, win = self._geometry(x)
        xp = self._padded(x, win, _lowest(x.dtype))
        lead = (slice(None), slice(None))
        tap_list = list(taps(k, s, d, win.out_shape))
        y = np.array(xp[lead + tap_list[0][1]], copy=True)
        if not self.want_indices:
            for _, sl in tap_list[1:]:
                np.maximum(y, xp[lead + sl], out=y)
            return (y,)
        best_tap = np.zeros(y.shape, dtype=np.int64)
        for i, (_, sl) in enumerate(tap_list[1:], start=1):
            v = xp[lead + sl]
            better = v > y
            np.copyto(y, v, where=better)
            np.copyto(best_tap, i, where=better)
        return (y, self._indices(x.shape, best_tap, k, s, d, win))

    def _indices(
        self,
        x_shape: tuple[int, ...],
        best_tap: np.ndarray,
        kernel: tuple[int, ...],
        strides: tuple[int, ...],
        dilations: tuple[int, ...],
        win: Window,
    ) -> np.ndarray:
        in_sp = x_shape[2:]
        nsp = len(in_sp)
        tap_coords = np.unravel_index(best_tap, kernel) if nsp > 1 else (best_tap,)
        # Flat element stride of each spatial axis in the chosen storage order.
        if self.storage_order == 0:
            steps = [prod(in_sp[i + 1 :]) for i in range(nsp)]
        else:
            steps = [prod(in_sp[:i]) for i in range(nsp)]
        n, c = x_shape[:2]
        idx = (np.arange(n * c, dtype=np.int64) * prod(in_sp)).reshape((n, c) + (1,) * nsp)
        idx = np.broadcast_to(idx, best_tap.shape).copy()
        for ax in range(nsp):
            shape = [1] * (nsp + 2)
            shape[ax + 2] = win.out_shape[ax]
            pos = (np.arange(win.out_shape[ax], dtype=np.int64) * strides[ax]).reshape(shape)
            coord = pos + tap_coords[ax].astype(np.int64) * dilations[ax] - win.pads_begin[ax]
            idx += coord * steps[ax]
        return idx


@registry.register("AveragePool", since=(1, 7, 10, 11, 19, 22))
class AveragePool(_Pool):
    """Mean over each window; count_include_pad chooses whether pads count."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.count_include_pad = bool(info.attr("count_include_pad", 0))

    def compute(self, x):
        k, s, d, win = self._geometry(x)
        cdt = compute_dtype(x.dtype)
        xp = self._padded(x.astype(cdt, copy=False), win, 0)
        lead = (slice(None), slice(None))
        tap_list = list(taps(k, s, d, win.out_shape))
        acc = np.array(xp[lead + tap_list[0][1]], copy=True)
        for _, sl in tap_list[1:]:
            acc += xp[lead + sl]
        if not win.padded or (self.count_include_pad and not any(win.extra_end)):
            acc /= cdt.type(prod(k))
            return (acc.astype(x.dtype, copy=False),)
        # Count, per output, the taps that land on elements that count.
        in_sp = x.shape[2:]
        if self.count_include_pad:
            ones = np.ones(
                tuple(
                    n + b + e for n, b, e in zip(in_sp, win.pads_begin, win.pads_end, strict=True)
                ),
                cdt,
            )
            mask = pad_spatial(ones, (0,) * len(k), win.extra_end, 0)
        else:
            mask = self._padded(np.ones(in_sp, cdt), win, 0)
        count = np.zeros(win.out_shape, cdt)
        for _, sl in tap_list:
            count += mask[sl]
        acc /= count
        return (acc.astype(x.dtype, copy=False),)


def _lp_p(info: KernelInfo) -> float:
    p = info.attr("p", 2)
    if p is None or float(p) <= 0:
        raise _bad(info, f"p={p} must be positive")
    return float(p)


def _abs_pow(x: np.ndarray, p: float) -> np.ndarray:
    if p == 1.0:
        return np.abs(x)
    if p == 2.0:
        return x * x
    return np.abs(x) ** p


def _root(v: np.ndarray, p: float) -> np.ndarray:
    if p == 1.0:
        return v
    if p == 2.0:
        return np.sqrt(v)
    return v ** (1.0 / p)


@registry.register("LpPool", since=(1, 2, 11, 18, 22))
class LpPool(_Pool):
    """(sum over each window of |x|**p) ** (1/p); pads are zeros."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.p = _lp_p(info)

    def compute(self, x):
        k, s, d, win = self._geometry(x)
        cdt = compute_dtype(x.dtype)
        xp = self._padded(_abs_pow(x.astype(cdt, copy=False), self.p), win, 0)
        lead = (slice(None), slice(None))
        tap_list = list(taps(k, s, d, win.out_shape))
        acc = np.array(xp[lead + tap_list[0][1]], copy=True)
        for _, sl in tap_list[1:]:
            acc += xp[lead + sl]
        return (_root(acc, self.p).astype(x.dtype, copy=False),)


def _spatial_axes(x: np.ndarray) -> tuple[int, ...]:
    if x.ndim < 2:
        raise ValueError(f"X must have rank >= 2 (N, C, spatial...), got shape {x.shape}")
    return tuple(range(2, x.ndim))


@registry.register("GlobalMaxPool", since=(1, 22))
class GlobalMaxPool(Kernel):
    """Max over all spatial axes, kept as size-1 dims."""

    def compute(self, x):
        axes = _spatial_axes(x)
        return (np.max(x, axis=axes, keepdims=True) if axes else x.copy(),)


@registry.register("GlobalAveragePool", since=(1, 22))
class GlobalAveragePool(Kernel):
    """Mean over all spatial axes, kept as size-1 dims."""

    def compute(self, x):
        axes = _spatial_axes(x)
        if not axes:
            return (x.copy(),)
        cdt = compute_dtype(x.dtype)
        y = np.mean(x, axis=axes, keepdims=True, dtype=cdt)
        return (np.asarray(y).astype(x.dtype, copy=False),)


@registry.register("GlobalLpPool", since=(1, 2, 22))
class GlobalLpPool(Kernel):
    """(sum over all spatial axes of |x|**p) ** (1/p), kept as size-1 dims."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.p = _lp_p(info)

    def compute(self, x):
        axes = _spatial_axes(x)
        cdt = compute_dtype(x.dtype)
        v = np.sum(_abs_pow(x.astype(cdt, copy=False), self.p), axis=axes, keepdims=True)
        return (_root(np.asarray(v), self.p).astype(x.dtype, copy=False),)
