"""CPU kernels: indexing — Slice, Gather*, Scatter*, OneHot, NonZero, Unique.

Every kernel is vectorized with numpy fancy indexing; scatter reductions use the
unbuffered ``ufunc.at`` so duplicate indices accumulate. Negative indices count from the
end of their axis; out-of-range indices raise ``IndexError`` with the offending range.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from onyxrt.errors import InvalidGraph
from onyxrt.kernels import Kernel, KernelInfo
from onyxrt.limits import check_allocation, output_of

from . import registry

_BF16: np.dtype[Any] | None
try:  # ml_dtypes ships with onnx; numpy ufunc loops on bfloat16 are partial or slow
    import ml_dtypes

    _BF16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover
    _BF16 = None


# --------------------------------------------------------------------------- helpers


def _bad(info: KernelInfo, msg: str) -> InvalidGraph:
    return InvalidGraph(f"node {info.node_name!r} ({info.op_type}): {msg}")


def _norm_axis(axis: int, rank: int, what: str = "axis") -> int:
    if not -rank <= axis < max(rank, 1):
        raise ValueError(f"{what} {axis} is out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def _norm_indices(indices: Any, dim: Any, what: str = "index") -> np.ndarray:
    """int64 indices with negatives wrapped; raise if any falls outside [-dim, dim).

    ``dim`` is one size, or sizes broadcasting against ``indices`` (one per last-axis slot).
    """
    idx = np.asarray(indices).astype(np.int64, copy=False)
    if idx.size == 0:
        return idx
    d = np.asarray(dim, dtype=np.int64)
    if d.ndim == 0:
        lo, hi = int(idx.min()), int(idx.max())
        if lo < -d or hi >= d:
            raise IndexError(f"{what} out of range: values span [{lo}, {hi}] for size {int(d)}")
        if lo >= 0:
            return idx
    elif ((idx < -d) | (idx >= d)).any():
        raise IndexError(f"{what} out of range for dims {d.tolist()}")
    return np.where(idx < 0, idx + d, idx)


def _reduction(info: KernelInfo) -> str:
    """ScatterND/ScatterElements' ``reduction``: add/mul from version 16, max/min from 18."""
    allowed = {11: ("none",), 13: ("none",), 16: ("none", "add", "mul")}.get(
        info.since_version, ("none", "add", "mul", "max", "min")
    )
    red = info.attr("reduction", "none")
    if red not in allowed:
        raise _bad(
            info,
            f"reduction {red!r} is not supported in version {info.since_version} "
            f"(expected one of {list(allowed)})",
        )
    return red


_UFUNCS = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _scatter_into(
    data: np.ndarray, lin: np.ndarray, updates: np.ndarray, reduction: str
) -> np.ndarray:
    """Copy of ``data`` viewed as (rows, cols) with ``updates`` (n, cols) written at rows ``lin``.

    ``data`` is already reshaped so its first axis is what ``lin`` indexes; the caller
    restores the shape. Reductions accumulate duplicates (``ufunc.at``); "none" lets the
    last duplicate win, like a sequential loop.
    """
    work_dtype = data.dtype
    if reduction != "none" and _BF16 is not None and data.dtype == _BF16:
        work_dtype = np.dtype(np.float32)
    out = np.array(data, dtype=work_dtype, copy=True, order="C")
    upd = updates.astype(work_dtype, copy=False)
    if reduction == "none":
        out[lin] = upd
    elif out.ndim == 1 or out.shape[1] == 1 or lin.size < 2:
        _UFUNCS[reduction].at(out, lin, upd)
    else:
        _reduce_rows(out, lin, upd, _UFUNCS[reduction])
    return out.astype(data.dtype, copy=False)


def _reduce_rows(out: np.ndarray, lin: np.ndarray, upd: np.ndarray, ufunc: np.ufunc) -> None:
    """``ufunc.at(out, lin, upd)`` for whole rows, much faster than ``ufunc.at`` on 2-D.

    Updates are applied in rounds: round r applies every target row's r-th update (in
    index order), so each row is reduced in the exact order of a sequential loop while each
    round is one vectorized gather-compute-scatter.
    """
    order = np.argsort(lin, kind="stable")
    sl = lin[order]
    first = np.ones(sl.size, dtype=bool)
    first[1:] = sl[1:] != sl[:-1]
    group = np.cumsum(first) - 1
    starts = np.flatnonzero(first)
    rank = np.arange(sl.size) - starts[group]  # occurrence number of each sorted update
    by_rank = order[np.argsort(rank, kind="stable")]
    bounds = np.concatenate([[0], np.cumsum(np.bincount(rank))])
    for r in range(bounds.size - 1):
        sel = by_rank[bounds[r] : bounds[r + 1]]
        rows = lin[sel]
        out[rows] = ufunc(out[rows], upd[sel])


# --------------------------------------------------------------------------- Slice


def _slice_tuple(
    shape: tuple[int, ...],
    starts: Any,
    ends: Any,
    axes: Any,
    steps: Any,
) -> tuple[slice, ...]:
    rank = len(shape)
    starts = [int(v) for v in np.asarray(starts).reshape(-1)]
    ends = [int(v) for v in np.asarray(ends).reshape(-1)]
    if len(starts) != len(ends):
        raise ValueError(f"starts has {len(starts)} values but ends has {len(ends)}")
    if axes is None:
        axes_l = list(range(len(starts)))
    else:
        axes_l = [_norm_axis(int(a), rank) for a in np.asarray(axes).reshape(-1)]
    steps_l = [1] * len(starts) if steps is None else [int(v) for v in np.asarray(steps).ravel()]
    if not len(axes_l) == len(steps_l) == len(starts):
        raise ValueError(
            f"starts/ends/axes/steps lengths differ: {len(starts)}, {len(ends)}, "
            f"{len(axes_l)}, {len(steps_l)}"
        )
    if len(set(axes_l)) != len(axes_l):
        raise ValueError(f"repeated axes in Slice: {axes_l}")
    out = [slice(None)] * rank
    for s, e, a, k in zip(starts, ends, axes_l, steps_l, strict=True):
        d = shape[a]
        if k == 0:
            raise ValueError(f"Slice step for axis {a} is 0")
        if s < 0:
            s += d
        if e < 0:
            e += d
        if k > 0:
            s = min(max(s, 0), d)
            e = min(max(e, 0), d)
        else:
            s = min(max(s, 0), d - 1)
            e = min(max(e, -1), d - 1)
        out[a] = slice(s, e if e >= 0 else None, k)
    return tuple(out)


@registry.register("Slice", since=1)
class Slice1(Kernel):
    """Slice v1: starts/ends/axes attributes, unit steps."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.starts = info.attr("starts")
        self.ends = info.attr("ends")
        self.axes = info.attr("axes")
        if self.starts is None or self.ends is None:
            raise _bad(info, "attributes 'starts' and 'ends' are required")
        if len(self.starts) != len(self.ends):
            raise _bad(info, "'starts' and 'ends' must have the same length")
        if self.axes is not None and len(self.axes) != len(self.starts):
            raise _bad(info, "'axes' must have as many values as 'starts'")

    def compute(self, data):
        return (data[_slice_tuple(data.shape, self.starts, self.ends, self.axes, None)],)


@registry.register("Slice", since=(10, 11, 13))
class Slice(Kernel):
    """Slice v10+: starts, ends, optional axes and steps as inputs (numpy clamping)."""

    def compute(self, data, starts, ends, axes=None, steps=None):
        return (data[_slice_tuple(data.shape, starts, ends, axes, steps)],)


# --------------------------------------------------------------------------- Gather family


class _AlongAxis(Kernel):
    """Base of the Gather/Scatter kernels that work along the ``axis`` attribute (default 0)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.axis = int(info.attr("axis", 0))


@registry.register("Gather", since=(1, 11, 13))
class Gather(_AlongAxis):
    """Gather slices of ``data`` along ``axis`` at ``indices`` (negatives count back)."""

    def compute(self, data, indices):
        axis = _norm_axis(self.axis, data.ndim)
        idx = _norm_indices(indices, data.shape[axis], "Gather index")
        return (np.take(data, idx, axis=axis),)


def _element_index(indices: np.ndarray, axis: int) -> tuple[np.ndarray, ...]:
    """Open index grids over ``indices.shape`` with ``indices`` itself on ``axis``."""
    rank = indices.ndim
    grid: list[np.ndarray] = []
    for d, n in enumerate(indices.shape):
        if d == axis:
            grid.append(indices)
        else:
            shp = [1] * rank
            shp[d] = n
            grid.append(np.arange(n, dtype=np.int64).reshape(shp))
    return tuple(grid)


def _check_element_indices(data: np.ndarray, indices: np.ndarray, axis: int) -> None:
    """GatherElements/ScatterElements: ``indices`` has data's rank and fits it off ``axis``."""
    if indices.ndim != data.ndim:
        raise ValueError(f"indices rank {indices.ndim} != data rank {data.ndim}")
    for d in range(data.ndim):
        if d != axis and indices.shape[d] > data.shape[d]:
            raise ValueError(
                f"indices shape {indices.shape} exceeds data shape {data.shape} on axis {d}"
            )


@registry.register("GatherElements", since=(11, 13))
class GatherElements(_AlongAxis):
    """out[i][j][k] = data[index[i][j][k]][j][k] (for axis 0), per element."""

    def compute(self, data, indices):
        axis = _norm_axis(self.axis, data.ndim)
        _check_element_indices(data, indices, axis)
        idx = _norm_indices(indices, data.shape[axis], "GatherElements index")
        return (data[_element_index(idx, axis)],)


def _nd_linear(indices: np.ndarray, dims: tuple[int, ...], what: str) -> np.ndarray:
    """Row-major linear offsets of k-tuples (last axis of ``indices``) into ``dims``."""
    k = indices.shape[-1]
    idx = np.asarray(indices).astype(np.int64, copy=False)
    if k == 0:
        return np.zeros(idx.shape[:-1], dtype=np.int64)
    d = np.asarray(dims, dtype=np.int64)
    idx = _norm_indices(idx, d, what)
    strides = np.ones(k, dtype=np.int64)
    if k > 1:
        strides[:-1] = np.cumprod(d[::-1])[::-1][1:]
    return idx @ strides if k > 1 else idx[..., 0]


@registry.register("GatherND", since=(11, 12, 13))
class GatherND(Kernel):
    """Gather slices addressed by the index tuples in the last axis of ``indices``."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.b = int(info.attr("batch_dims", 0))
        if self.b < 0:
            raise _bad(info, f"batch_dims must be >= 0, got {self.b}")

    def compute(self, data, indices):
        b = self.b
        r, q = data.ndim, indices.ndim
        if q < 1 or b >= min(r, q):
            raise ValueError(f"batch_dims {b} too large for data rank {r}, indices rank {q}")
        k = indices.shape[-1]
        if k > r - b:
            raise ValueError(f"indices last dim {k} > data rank {r} - batch_dims {b}")
        if data.shape[:b] != indices.shape[:b]:
            raise ValueError(
                f"batch dims differ: data {data.shape[:b]} vs indices {indices.shape[:b]}"
            )
        nb = math.prod(data.shape[:b])
        idx_dims = data.shape[b : b + k]
        rest = data.shape[b + k :]
        lin = _nd_linear(indices, idx_dims, "GatherND index").reshape(nb, -1)
        src = data.reshape((nb, int(np.prod(idx_dims, dtype=np.int64))) + rest)
        out = src[np.arange(nb)[:, None], lin]
        return (out.reshape(indices.shape[:-1] + rest),)


# --------------------------------------------------------------------------- Scatter family


@registry.register("ScatterND", since=(11, 13, 16, 18))
class ScatterND(Kernel):
    """Copy of ``data`` with ``updates`` written (or reduced) at index tuples."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.reduction = _reduction(info)

    def compute(self, data, indices, updates):
        k = indices.shape[-1]
        r = data.ndim
        if k > r:
            raise ValueError(f"indices last dim {k} > data rank {r}")
        want = indices.shape[:-1] + data.shape[k:]
        if updates.shape != want:
            raise ValueError(f"updates shape {updates.shape}, expected {want}")
        lin = _nd_linear(indices, data.shape[:k], "ScatterND index").reshape(-1)
        rows = math.prod(data.shape[:k])
        cols = math.prod(data.shape[k:])
        out = _scatter_into(
            data.reshape(rows, cols), lin, updates.reshape(lin.size, cols), self.reduction
        )
        return (out.reshape(data.shape),)


class _ScatterElementsBase(_AlongAxis):
    """Shared ScatterElements/Scatter computation."""

    reduction = "none"

    def compute(self, data, indices, updates):
        axis = _norm_axis(self.axis, data.ndim)
        if indices.shape != updates.shape:
            raise ValueError(f"indices shape {indices.shape} != updates shape {updates.shape}")
        _check_element_indices(data, indices, axis)
        idx = _norm_indices(indices, data.shape[axis], "ScatterElements index")
        lin = np.ravel_multi_index(_element_index(idx, axis), data.shape).reshape(-1)
        out = _scatter_into(data.reshape(-1), lin, updates.reshape(-1), self.reduction)
        return (out.reshape(data.shape),)


@registry.register("ScatterElements", since=(11, 13, 16, 18))
class ScatterElements(_ScatterElementsBase):
    """Per-element scatter of ``updates`` along ``axis``, optional reduction (v16+)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.reduction = _reduction(info)


@registry.register("Scatter", since=(9, 11))
class Scatter(_ScatterElementsBase):
    """Deprecated Scatter (v9/v11): ScatterElements without reduction."""


# --------------------------------------------------------------------------- OneHot


@registry.register("OneHot", since=(9, 11, 28))
class OneHot(Kernel):
    """One-hot encode ``indices`` with ``depth`` classes inserted at ``axis``."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.axis = int(info.attr("axis", -1))

    def compute(self, indices, depth, values):
        depth_a = np.asarray(depth).reshape(-1)
        if depth_a.size != 1:
            raise ValueError(f"depth must hold one value, got shape {np.shape(depth)}")
        n = int(depth_a[0])
        if n < 1:
            raise ValueError(f"depth must be positive, got {n}")
        vals = np.asarray(values).reshape(-1)
        if vals.size != 2:
            raise ValueError(f"values must hold [off_value, on_value], got {vals.size} values")
        ind = np.asarray(indices)
        rank = ind.ndim + 1
        axis = _norm_axis(self.axis, rank)
        out_shape = list(ind.shape)
        out_shape.insert(axis, n)
        check_allocation(out_shape, vals.dtype, output_of(self.info))
        if ind.dtype.kind == "f":
            ind = np.trunc(ind)
        ind = ind.astype(np.int64)
        # Negative indices wrap (the v11 rule; onnxruntime applies it to v9 too).
        ind = np.where(ind < 0, ind + n, ind)
        shp = [1] * rank
        shp[axis] = n
        hot = np.expand_dims(ind, axis) == np.arange(n, dtype=np.int64).reshape(shp)
        return (np.where(hot, vals[1], vals[0]).astype(vals.dtype, copy=False),)


# --------------------------------------------------------------------------- NonZero


@registry.register("NonZero", since=(9, 13))
class NonZero(Kernel):
    """Indices of the non-zero elements, int64 of shape (rank, count), row-major order."""

    def compute(self, x):
        x = np.asarray(x)
        if x.dtype.kind == "O":
            mask = np.vectorize(bool, otypes=[bool])(x) if x.size else np.zeros(x.shape, bool)
        elif _BF16 is not None and x.dtype == _BF16:
            mask = x.astype(np.float32) != 0
        else:
            mask = x != 0
        if x.ndim == 0:  # a scalar counts as a 1-element vector (as onnxruntime and numpy<2)
            return (np.zeros((1, int(bool(mask))), dtype=np.int64),)
        return (np.array(np.nonzero(mask), dtype=np.int64).reshape(x.ndim, -1),)


# --------------------------------------------------------------------------- Unique


@registry.register("Unique", since=(11, 28))
class Unique(Kernel):
    """Unique values (or sub-tensors along ``axis``) with first indices, inverse, counts."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.sorted = bool(info.attr("sorted", 1))
        self.axis = info.attr("axis")

    def compute(self, x):
        x = np.asarray(x)
        if self.axis is None:
            rows = x.reshape(-1, 1)
            axis = None
        else:
            axis = _norm_axis(int(self.axis), x.ndim)
            rows = np.moveaxis(x, axis, 0).reshape(x.shape[axis], -1)
        n, m = rows.shape
        keys = rows
        if _BF16 is not None and keys.dtype == _BF16:
            keys = keys.astype(np.float32)
        # Stable lexicographic order of the rows: the first row of each group is the
        # first occurrence.
        if m == 1:
            keys = keys[:, 0]
            order = np.argsort(keys, kind="stable")
        elif n == 0 or m == 0:
            order = np.arange(n)
        else:
            order = np.lexsort(keys.T[::-1])
        srt = keys[order]
        flags = np.ones(n, dtype=bool)
        if n > 1 and m > 0:
            differ = srt[1:] != srt[:-1]
            if srt.dtype.kind in "fc":  # NaNs are one value, as in numpy.unique
                differ &= ~(np.isnan(srt[1:]) & np.isnan(srt[:-1]))
            flags[1:] = differ if differ.ndim == 1 else np.any(differ, axis=1)
        elif n > 1:
            flags[1:] = False
        starts = np.flatnonzero(flags)
        first = order[starts].astype(np.int64)
        counts = np.diff(np.append(starts, n)).astype(np.int64)
        group = np.cumsum(flags) - 1
        inverse = np.empty(n, dtype=np.int64)
        inverse[order] = group
        if not self.sorted:
            by_first = np.argsort(first, kind="stable")
            rank = np.empty_like(by_first)
            rank[by_first] = np.arange(by_first.size)
            first = first[by_first]
            counts = counts[by_first]
            inverse = rank[inverse]
        if axis is None:
            y = x.reshape(-1)[first]
        else:
            y = np.take(x, first, axis=axis)
        return (y, first, inverse.astype(np.int64, copy=False), counts)
