"""CPU overrides of the library's windowed pools (:mod:`onyxrt_ops.spatial`): MaxPool,
AveragePool and LpPool, each subclassing the library's kernel (attributes parsed and
checked once, there). The global pools come from the library: its ``xp.max``/``xp.mean``/
``xp.sum`` over the spatial axes are this module's former kernels (1x64x7x7 and
8x512x14x14 float32 within 1% of them: 7.1/211 us GlobalAveragePool, 5.7/250 us
GlobalMaxPool, 6.5/285 us GlobalLpPool) — except float32 GlobalAveragePool, whose
many short planes (a classifier head's 1280 planes of 7x7: numpy's mean 33 us,
onnxruntime 9) are averaged compiled (:func:`~onyxrt_cpu.native.global_average`).

The library folds the taps of each window over strided slices of a padded copy; here
cache-sized blocks of (image, channel) rows are laid out by a :class:`~._spatial.FlatPlan`
(stride phases, padded with ``-inf``/the dtype's minimum for max and 0 otherwise) in which
every tap is one contiguous slice, so each step runs long contiguous inner loops, and 2-D
MaxPool without Indices runs compiled. Measured against the library's kernels (3x3
windows, pads 1): MaxPool 7.8 vs 55 us on 1x16x8x8, 5.1 vs 30 ms on 8x64x112x112 (stride
2); AveragePool 2.1 vs 3.1 ms and LpPool 2.8 vs 7.8 ms on 8x64x56x56 (stride 2).
``ceil_mode`` windows that run past the end padding read padding that never counts (see
:class:`~._spatial.Window`). MaxPool's optional Indices output holds the flat (row-major,
or column-major over the spatial axes when storage_order=1) index of each maximum in the
unpadded input.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import numpy as np

from onyxrt_ops import library

from .. import native
from . import registry
from ._backend import BACKEND
from ._spatial import FlatPlan, Window, compute_dtype, flat_plan, lead_blocks, prod

__all__ = ["MaxPool", "AveragePool", "LpPool", "GlobalAveragePool"]


def _lowest(dtype: np.dtype[Any]) -> Any:
    if dtype.kind in "iu":
        return np.iinfo(dtype).min
    return -np.inf


def _reduce_taps(plan: FlatPlan, flat: np.ndarray, ufunc: np.ufunc) -> np.ndarray:
    """Fold every tap with ``ufunc`` (np.add, np.maximum): (*lead, lq) on the pitch grid."""
    acc = np.array(plan.tap(flat, 0), copy=True)
    for i in range(1, len(plan.tap_slices)):
        ufunc(acc, plan.tap(flat, i), out=acc)
    return acc


def _max_taps(
    plan: FlatPlan, flat: np.ndarray, tap_values: list[int]
) -> tuple[np.ndarray, np.ndarray]:
    """Max over the taps and ``tap_values`` of the first tap holding it, on the grid.

    Masked copies are slow, so the first matching tap is found arithmetically: tap ``i``
    scores ``T - i`` where it equals the max, and the highest score wins.
    """
    best = _reduce_taps(plan, flat, np.maximum)
    n_taps = len(plan.tap_slices)
    kdt = np.dtype(np.uint16) if n_taps < 65535 else np.dtype(np.int64)
    score = np.zeros(best.shape, dtype=kdt)
    cand = np.empty_like(score)
    hit = np.empty(best.shape, dtype=bool)
    for i in range(n_taps):
        np.equal(plan.tap(flat, i), best, out=hit)
        np.multiply(hit, kdt.type(n_taps - i), out=cand)
        np.maximum(score, cand, out=score)
    # Score 0 (a NaN maximum matches no tap) maps to tap 0.
    first = (n_taps - score.astype(np.int64)) % n_taps
    return best, np.take(np.asarray(tap_values, dtype=np.int64), first)


def _blocks(
    x: np.ndarray,
    k: tuple[int, ...],
    s: tuple[int, ...],
    d: tuple[int, ...],
    win: Window,
    fill: Any,
) -> Iterator[tuple[tuple[slice, slice], FlatPlan, np.ndarray]]:
    """Cache-sized blocks of (image, channel) rows, each laid out for its taps."""
    plan = flat_plan(x.shape[2:], win.pads_begin, k, s, d, win.out_shape)
    row_bytes = plan.row_bytes(x.dtype.itemsize) + 2 * plan.lq * x.dtype.itemsize
    for ns, cs in lead_blocks(x.shape[0], x.shape[1], row_bytes):
        yield (ns, cs), plan, plan.layout(x[ns, cs], fill)


@registry.register("MaxPool", since=(1, 8, 10, 11, 12, 22))
class MaxPool(library.kernel("MaxPool", 22, BACKEND)):
    """Max over each window; optional int64 Indices of the maxima (storage_order aware)."""

    def compute(self, x):
        k, s, d, win = self._geometry(x)
        y = np.empty(x.shape[:2] + win.out_shape, dtype=x.dtype)
        if not self.want_indices:
            if native.maxpool2d(np.ascontiguousarray(x), y, k, s, win.pads_begin, d):
                return (y,)
            for blk, plan, flat in _blocks(x, k, s, d, win, _lowest(x.dtype)):
                y[blk] = plan.view(_reduce_taps(plan, flat, np.maximum))
            return (y,)
        # Indices: flat input offset of the best tap relative to its window's origin, plus
        # the origin's offset (and the image/channel offset) added afterwards.
        in_sp = x.shape[2:]
        nsp = len(in_sp)
        if self.storage_order == 0:
            steps = [prod(in_sp[i + 1 :]) for i in range(nsp)]
        else:
            steps = [prod(in_sp[:i]) for i in range(nsp)]
        tap_off = [
            sum(t * dd * st for t, dd, st in zip(tap, d, steps, strict=True))
            for tap in itertools.product(*(range(kk) for kk in k))
        ]
        idx = np.empty(y.shape, dtype=np.int64)
        for blk, plan, flat in _blocks(x, k, s, d, win, _lowest(x.dtype)):
            best, arg = _max_taps(plan, flat, tap_off)
            y[blk] = plan.view(best)
            idx[blk] = plan.view(arg)
        n, c = x.shape[:2]
        origin = (np.arange(n * c, dtype=np.int64) * prod(in_sp)).reshape((n, c) + (1,) * nsp)
        for ax in range(nsp):
            shape = [1] * (nsp + 2)
            shape[ax + 2] = win.out_shape[ax]
            start = np.arange(win.out_shape[ax], dtype=np.int64) * s[ax] - win.pads_begin[ax]
            origin = origin + (start * steps[ax]).reshape(shape)
        idx += origin
        return (y, idx)


@registry.register("AveragePool", since=(1, 7, 10, 11, 19, 22))
class AveragePool(library.kernel("AveragePool", 22, BACKEND)):
    """Mean over each window; count_include_pad chooses whether pads count."""

    def compute(self, x):
        k, s, d, win = self._geometry(x)
        cdt = compute_dtype(x.dtype)
        acc = _sum_pool(x.astype(cdt, copy=False), k, s, d, win)
        if not win.padded or (self.count_include_pad and not any(win.extra_end)):
            acc /= cdt.type(prod(k))
            return (acc.astype(x.dtype, copy=False),)
        # Count, per output, the taps that land on elements that count: the input (and,
        # with count_include_pad, the declared pads) but never the ceil_mode overhang.
        in_sp = x.shape[2:]
        if self.count_include_pad:
            region = tuple(
                n + b + e for n, b, e in zip(in_sp, win.pads_begin, win.pads_end, strict=True)
            )
            mask, mask_pb = np.ones(region, cdt), (0,) * len(k)
        else:
            mask, mask_pb = np.ones(in_sp, cdt), win.pads_begin
        plan = flat_plan(mask.shape, mask_pb, k, s, d, win.out_shape)
        acc /= plan.view(_reduce_taps(plan, plan.layout(mask), np.add))
        return (acc.astype(x.dtype, copy=False),)


def _sum_pool(
    x: np.ndarray,
    k: tuple[int, ...],
    s: tuple[int, ...],
    d: tuple[int, ...],
    win: Window,
) -> np.ndarray:
    """Sum of each window (zero padding): (N, C, *out) in ``x``'s dtype."""
    y = np.empty(x.shape[:2] + win.out_shape, dtype=x.dtype)
    for blk, plan, flat in _blocks(x, k, s, d, win, 0):
        y[blk] = plan.view(_reduce_taps(plan, flat, np.add))
    return y


@registry.register("LpPool", since=(1, 2, 11, 18, 22))
class LpPool(library.kernel("LpPool", 22, BACKEND)):
    """(sum over each window of |x|**p) ** (1/p); pads are zeros."""

    def compute(self, x):
        k, s, d, win = self._geometry(x)
        cdt = compute_dtype(x.dtype)
        acc = _sum_pool(self.abs_pow(x.astype(cdt, copy=False)), k, s, d, win)
        return (self.root(acc).astype(x.dtype, copy=False),)


@registry.register("GlobalAveragePool", since=(1, 22))
class GlobalAveragePool(library.kernel("GlobalAveragePool", 22, BACKEND)):
    """Mean over all spatial axes; C-contiguous float32 compiled, anything else the
    library's."""

    def compute(self, x):
        if isinstance(x, np.ndarray) and x.dtype == np.float32:
            y = native.global_average(x)
            if y is not None:
                return (y,)
        return super().compute(x)
