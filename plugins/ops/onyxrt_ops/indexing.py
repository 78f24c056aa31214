"""The indexing operators, written once over an array namespace.

Slice, Gather, GatherElements, GatherND, ScatterND, ScatterElements, Scatter (deprecated),
OneHot, NonZero, Unique and TensorScatter, with every ONNX version of each.

Negative indices count from the end of their axis; an index outside ``[-dim, dim)`` is an
``IndexError`` naming the range (the executor reports it as a ``KernelError`` naming the
node). Checking the range reads the indices' minimum and maximum back on the host (a
synchronization on a device; the GPU's Gather skips it, see its module). Slice bounds,
OneHot's depth and constant Gather indices are read on the host once, when the kernel is
built where they are constants.

The array API standard has no integer-array assignment, so the scatters are built from
sorting and gathering: the updates are sorted by target row (stably, so duplicates keep
their order), reduced per row in rounds — round ``r`` applies each row's ``r``-th update,
exactly the order of a sequential loop — and the rows merged into the data with ``where``.
Unique sorts (lexicographically along ``axis``, by repeated stable sorts), numbers the
groups with a cumulative sum, and maps them back to the input's order by the inverse of
the sorting permutation (a second sort, where a backend cannot assign at indices).

TensorScatter reads its write indices on the host and writes each batch's update window as
one or two slice assignments (two where a circular window wraps around the cache's end).

Known gaps: NonZero of string tensors needs Python truthiness per element (the CPU keeps
an override); Unique treats every NaN as one value, as ``numpy.unique`` does. The scatters
and Unique are a chain of small sorts and gathers with a few reads back to the host (a
[64, 64] ScatterND took 0.8-1.1 ms on an H200 over CuPy), correct but no fast path; the
CPU overrides them with numpy's indexed assignment.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from onyxrt.errors import InvalidGraph
from onyxrt.kernels import KernelInfo
from onyxrt.limits import check_allocation, output_of

from .library import OpKernel, dtype_name, library

# The operators are reached through ``library`` (this module registers them on import).
__all__: list[str] = []

_FLOATS = frozenset({"float16", "bfloat16", "float32", "float64"})


def _norm_axis(axis: int, rank: int, what: str = "axis") -> int:
    if not -rank <= axis < max(rank, 1):
        raise ValueError(f"{what} {axis} is out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def _reshaped(xp: Any, x: Any, shape: tuple[int, ...]) -> Any:
    """``x`` in ``shape``, without a call when it already is (the scatters' common case)."""
    return x if tuple(x.shape) == shape else xp.reshape(x, shape)


def _argsort(xp: Any, x: Any) -> Any:
    """A stable argsort along the last axis."""
    try:
        return xp.argsort(x, stable=True)
    except TypeError:  # CuPy has no ``stable`` keyword: its sorts are always stable
        return xp.argsort(x)


class Indexing(OpKernel):
    """Base of the indexing operators: the backend's int64 dtype, index checks."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.i64 = self.backend.dtype(np.int64)

    def wrapped(self, indices: Any, dim: int, what: str) -> Any:
        """int64 ``indices`` with negatives counted back from ``dim``; IndexError when one
        falls outside ``[-dim, dim)``."""
        xp = self.xp
        idx = xp.asarray(indices)
        if idx.dtype != self.i64:
            idx = xp.astype(idx, self.i64)
        if math.prod(idx.shape) == 0:
            return idx
        lo, hi = int(xp.min(idx)), int(xp.max(idx))
        if lo < -dim or hi >= dim:
            raise IndexError(f"{what} out of range: values span [{lo}, {hi}] for size {dim}")
        return idx if lo >= 0 else xp.where(idx < 0, idx + dim, idx)

    def linear(self, indices: Any, dims: tuple[int, ...], what: str) -> Any:
        """Row-major offsets into ``dims`` of the index tuples in ``indices``' last axis."""
        xp = self.xp
        k = len(dims)
        if k == 0:
            return xp.zeros(indices.shape[:-1], dtype=self.i64)
        idx = xp.astype(xp.asarray(indices), self.i64)
        d = xp.asarray(dims, dtype=self.i64)
        if math.prod(idx.shape) and bool(xp.any((idx < -d) | (idx >= d))):
            raise IndexError(f"{what} out of range for dims {list(dims)}")
        idx = xp.where(idx < 0, idx + d, idx)
        if k == 1:
            return idx[..., 0]
        strides = [math.prod(dims[j + 1:]) for j in range(k)]
        return xp.sum(idx * xp.asarray(strides, dtype=self.i64), axis=-1)


# --------------------------------------------------------------------------- Slice


def _slice_key(shape: tuple[int, ...], starts: list[int], ends: list[int], axes: list[int] | None,
               steps: list[int] | None) -> tuple[slice, ...]:
    """The basic index of a Slice on ``shape``, its bounds clamped as ONNX says."""
    rank = len(shape)
    if len(starts) != len(ends):
        raise ValueError(f"starts has {len(starts)} values but ends has {len(ends)}")
    axes = list(range(len(starts))) if axes is None else [_norm_axis(a, rank) for a in axes]
    steps = [1] * len(starts) if steps is None else steps
    if not len(axes) == len(steps) == len(starts):
        raise ValueError(f"starts/ends/axes/steps lengths differ: {len(starts)}, {len(ends)}, "
                         f"{len(axes)}, {len(steps)}")
    if len(set(axes)) != len(axes):
        raise ValueError(f"repeated axes in Slice: {axes}")
    key = [slice(None)] * rank
    for s, e, a, k in zip(starts, ends, axes, steps, strict=True):
        d = shape[a]
        if k == 0:
            raise ValueError(f"Slice step for axis {a} is 0")
        s, e = s + d if s < 0 else s, e + d if e < 0 else e
        if k > 0:
            s, e = min(max(s, 0), d), min(max(e, 0), d)
        else:
            s, e = min(max(s, 0), d - 1), min(max(e, -1), d - 1)
        key[a] = slice(s, e if e >= 0 else None, k)
    return tuple(key)


class Slicing(OpKernel):
    """Base of the Slice versions: ``bounds`` (starts, ends, axes, steps) known when built
    are turned into an index once per input shape."""

    bounds: tuple[Any, ...] | None = None
    _shape: tuple[int, ...] | None = None

    def key(self, shape: tuple[int, ...]) -> tuple[slice, ...]:
        """The index of the fixed ``bounds`` on ``shape`` (the last one is remembered)."""
        if shape != self._shape:
            self._key = _slice_key(shape, *self.bounds)
            self._shape = shape
        return self._key


@library.define("Slice", 1)
class Slice1(Slicing):
    """Slice v1: starts/ends/axes attributes, unit steps."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        starts, ends, axes = info.attr("starts"), info.attr("ends"), info.attr("axes")
        if starts is None or ends is None:
            raise InvalidGraph(f"{self.where()}: attributes 'starts' and 'ends' are required")
        if len(starts) != len(ends):
            raise InvalidGraph(f"{self.where()}: 'starts' and 'ends' must have the same length")
        if axes is not None and len(axes) != len(starts):
            raise InvalidGraph(f"{self.where()}: 'axes' must have as many values as 'starts'")
        self.bounds = ([int(v) for v in starts], [int(v) for v in ends],
                       None if axes is None else [int(v) for v in axes], None)

    def compute(self, data):
        return (data[self.key(tuple(data.shape))],)


@library.define("Slice", (10, 11, 13), host_inputs=(1, 2, 3, 4))
class Slice(Slicing):
    """Slice v10+: starts, ends and the optional axes and steps are inputs (read once when
    they are all constants)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        present = [i for i in (1, 2, 3, 4) if info.has_input(i)]
        if all(info.constant(i) is not None for i in present):
            self.bounds = tuple(self.host_ints(info.constant(i)) if info.has_input(i) else None
                                for i in (1, 2, 3, 4))

    def compute(self, data, starts, ends, axes=None, steps=None):
        shape = tuple(data.shape)
        if self.bounds is not None:
            return (data[self.key(shape)],)
        return (data[_slice_key(shape, self.host_ints(starts), self.host_ints(ends),
                                None if axes is None else self.host_ints(axes),
                                None if steps is None else self.host_ints(steps))],)


# --------------------------------------------------------------------------- Gather family


@library.define("Gather", (1, 11, 13))
class Gather(Indexing):
    """Gather slices of ``data`` along ``axis`` at ``indices`` (negatives count back).
    Constant indices are checked and moved into the backend's arrays once per axis size."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.axis = int(info.attr("axis", 0))
        const = info.constant(1)
        self.const = None if const is None else np.asarray(const, dtype=np.int64)
        if self.const is not None:
            self.span = (int(self.const.min()), int(self.const.max())) if self.const.size else (0, -1)
            self.const_indices = self.xp.asarray(self.const)
            self.wrapped_dim: int | None = None

    def checked_constant(self, dim: int) -> Any:
        """The constant indices, checked for an axis of size ``dim``, negatives wrapped."""
        lo, hi = self.span
        if lo < -dim or hi >= dim:
            raise IndexError(f"Gather index out of range: values span [{lo}, {hi}] for size {dim}")
        return self.const_indices if lo >= 0 else self.wrap_constant(dim)

    def wrap_constant(self, dim: int) -> Any:
        """The constant indices with negatives wrapped for ``dim`` (once per size)."""
        if dim != self.wrapped_dim:
            self.const_wrapped = self.xp.asarray(np.where(self.const < 0, self.const + dim, self.const))
            self.wrapped_dim = dim
        return self.const_wrapped

    def take(self, data: Any, idx: Any, axis: int) -> Any:
        """``xp.take`` with indices of any rank (the standard's take wants 1-D indices)."""
        xp = self.xp
        if idx.ndim == 1:
            return xp.take(data, idx, axis=axis)
        y = xp.take(data, xp.reshape(idx, (-1,)), axis=axis)
        return xp.reshape(y, tuple(data.shape[:axis]) + tuple(idx.shape) + tuple(data.shape[axis + 1:]))

    def compute(self, data, indices):
        axis = _norm_axis(self.axis, data.ndim)
        dim = data.shape[axis]
        if self.const is not None:
            return (self.take(data, self.checked_constant(dim), axis),)
        return (self.take(data, self.wrapped(indices, dim, "Gather index"), axis),)


def _check_element_indices(data: Any, indices: Any, axis: int) -> None:
    """GatherElements/ScatterElements: ``indices`` has data's rank and fits it off ``axis``."""
    if indices.ndim != data.ndim:
        raise ValueError(f"indices rank {indices.ndim} != data rank {data.ndim}")
    for d in range(data.ndim):
        if d != axis and indices.shape[d] > data.shape[d]:
            raise ValueError(f"indices shape {tuple(indices.shape)} exceeds data shape "
                             f"{tuple(data.shape)} on axis {d}")


@library.define("GatherElements", (11, 13))
class GatherElements(Indexing):
    """out[i][j][k] = data[index[i][j][k]][j][k] (for axis 0), per element."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.axis = int(info.attr("axis", 0))

    def compute(self, data, indices):
        axis = _norm_axis(self.axis, data.ndim)
        _check_element_indices(data, indices, axis)
        idx = self.wrapped(indices, data.shape[axis], "GatherElements index")
        return (self.take_along(data, idx, axis),)

    def take_along(self, data: Any, idx: Any, axis: int) -> Any:
        """``data``'s elements at ``idx`` along ``axis``, at their own place elsewhere."""
        if any(idx.shape[d] != data.shape[d] for d in range(data.ndim) if d != axis):
            # take_along_axis broadcasts; ONNX reads the leading part of the other axes.
            data = data[tuple(slice(None) if d == axis else slice(0, n) for d, n in enumerate(idx.shape))]
        return self.xp.take_along_axis(data, idx, axis=axis)


@library.define("GatherND", (11, 12, 13))
class GatherND(Indexing):
    """Gather slices addressed by the index tuples in the last axis of ``indices``."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.b = int(info.attr("batch_dims", 0))
        if self.b < 0:
            raise InvalidGraph(f"{self.where()}: batch_dims must be >= 0, got {self.b}")

    def compute(self, data, indices):
        xp, b = self.xp, self.b
        dshape, ishape = tuple(data.shape), tuple(indices.shape)
        r, q = len(dshape), len(ishape)
        if q < 1 or b >= min(r, q):
            raise ValueError(f"batch_dims {b} too large for data rank {r}, indices rank {q}")
        k = ishape[-1]
        if k > r - b:
            raise ValueError(f"indices last dim {k} > data rank {r} - batch_dims {b}")
        if dshape[:b] != ishape[:b]:
            raise ValueError(f"batch dims differ: data {dshape[:b]} vs indices {ishape[:b]}")
        batches, rest = math.prod(dshape[:b]), dshape[b + k:]
        per_batch, tuples = math.prod(dshape[b:b + k]), math.prod(ishape[b:-1])
        lin = xp.reshape(self.linear(indices, dshape[b:b + k], "GatherND index"), (batches, tuples))
        lin = lin + xp.reshape(xp.arange(batches, dtype=self.i64) * per_batch, (batches, 1))
        rows = xp.reshape(data, (batches * per_batch, math.prod(rest)))
        out = xp.take(rows, xp.reshape(lin, (-1,)), axis=0)
        return (xp.reshape(out, ishape[:-1] + rest),)


# --------------------------------------------------------------------------- Scatter family


def _reduction(kernel: OpKernel) -> str:
    """ScatterND/ScatterElements' ``reduction``: add/mul from version 16, max/min from 18."""
    info = kernel.info
    allowed = {11: ("none",), 13: ("none",), 16: ("none", "add", "mul")}.get(
        info.since_version, ("none", "add", "mul", "max", "min"))
    reduction = info.attr("reduction", "none")
    if reduction not in allowed:
        raise InvalidGraph(f"{kernel.where()}: reduction {reduction!r} is not supported in version "
                           f"{info.since_version} (expected one of {list(allowed)})")
    return reduction


class Scattering(Indexing):
    """Base of the scatters: :meth:`scatter` writes rows of updates into rows of data."""

    reduction = "none"
    _REDUCE = {"add": "add", "mul": "multiply", "max": "maximum", "min": "minimum"}

    def scatter(self, data: Any, lin: Any, updates: Any) -> Any:
        """A copy of ``data`` (rows, cols) with ``updates`` (n, cols) written at rows ``lin``
        (n,): the last duplicate wins, or duplicates are reduced in order."""
        xp = self.xp
        n = lin.shape[0]
        if n == 0:
            return xp.astype(data, data.dtype, copy=True)
        updates = self.narrow(updates, data)
        order = _argsort(xp, lin)
        targets = xp.take(lin, order)  # ascending; a row's updates in their order
        upd = xp.take(updates, order, axis=0)
        first = xp.concat([xp.ones((1,), dtype=xp.bool), targets[1:] != targets[:-1]])
        starts = xp.nonzero(first)[0]
        rows = xp.take(targets, starts)  # each target row once, ascending
        counts = xp.concat([starts[1:], xp.asarray([n], dtype=starts.dtype)]) - starts
        if self.reduction == "none":
            new = xp.take(upd, starts + counts - 1, axis=0)
        else:
            new = self.reduced(xp.take(data, rows, axis=0), upd, starts, counts)
        every = xp.arange(data.shape[0], dtype=rows.dtype)
        pos = xp.clip(xp.searchsorted(rows, every), 0, rows.shape[0] - 1)
        hit = xp.take(rows, pos) == every
        return xp.where(hit[:, None], xp.take(new, pos, axis=0), data)

    def reduced(self, acc: Any, upd: Any, starts: Any, counts: Any) -> Any:
        """``acc`` (one row per target) reduced with each target's updates, in rounds:
        round ``r`` applies the ``r``-th update of the targets that have one, the targets
        ordered by count so that they are a leading block."""
        xp = self.xp
        f = getattr(xp, self._REDUCE[self.reduction])
        by_count = _argsort(xp, -counts)
        left = self.host(xp.take(counts, by_count))  # descending, on the host
        wide = self.widen(acc)
        acc, starts = xp.take(wide, by_count, axis=0), xp.take(starts, by_count)
        for r in range(int(left[0])):
            k = int(np.count_nonzero(left > r))
            acc[:k, ...] = f(acc[:k, ...], self.widen(xp.take(upd, starts[:k] + r, axis=0)))
        return self.narrow(xp.take(acc, _argsort(xp, by_count), axis=0), upd)


@library.define("ScatterND", (11, 13, 16, 18))
class ScatterND(Scattering):
    """Copy of ``data`` with ``updates`` written (or reduced, v16+) at index tuples."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.reduction = _reduction(self)

    def compute(self, data, indices, updates):
        xp = self.xp
        dshape, ishape = tuple(data.shape), tuple(indices.shape)
        k = ishape[-1]
        if k > len(dshape):
            raise ValueError(f"indices last dim {k} > data rank {len(dshape)}")
        want = ishape[:-1] + dshape[k:]
        if tuple(updates.shape) != want:
            raise ValueError(f"updates shape {tuple(updates.shape)}, expected {want}")
        n, cols = math.prod(ishape[:-1]), math.prod(dshape[k:])
        lin = _reshaped(xp, self.linear(indices, dshape[:k], "ScatterND index"), (n,))
        out = self.scatter(_reshaped(xp, data, (math.prod(dshape[:k]), cols)), lin,
                           _reshaped(xp, updates, (n, cols)))
        return (_reshaped(xp, out, dshape),)


@library.define("Scatter", (9, 11))
class Scatter(Scattering):
    """Deprecated Scatter (v9/v11): ScatterElements without reduction."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.axis = int(info.attr("axis", 0))

    def compute(self, data, indices, updates):
        xp = self.xp
        axis = _norm_axis(self.axis, data.ndim)
        if tuple(indices.shape) != tuple(updates.shape):
            raise ValueError(f"indices shape {tuple(indices.shape)} != updates shape "
                             f"{tuple(updates.shape)}")
        _check_element_indices(data, indices, axis)
        dshape = tuple(data.shape)
        idx = self.wrapped(indices, dshape[axis], "ScatterElements index")
        # Row-major offsets of the elements: the index on ``axis``, the position elsewhere.
        lin = idx * math.prod(dshape[axis + 1:])
        for d, n in enumerate(idx.shape):
            if d != axis:
                shape = tuple(n if j == d else 1 for j in range(idx.ndim))
                lin = lin + xp.reshape(xp.arange(n, dtype=self.i64) * math.prod(dshape[d + 1:]), shape)
        size = math.prod(dshape)
        out = self.scatter(xp.reshape(data, (size, 1)), xp.reshape(lin, (-1,)), xp.reshape(updates, (-1, 1)))
        return (xp.reshape(out, dshape),)


@library.define("ScatterElements", (11, 13, 16, 18))
class ScatterElements(Scatter):
    """Per-element scatter of ``updates`` along ``axis``, optional reduction (v16+)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.reduction = _reduction(self)


# --------------------------------------------------------------------------- OneHot


@library.define("OneHot", (9, 11, 28), host_inputs=(1,))
class OneHot(Indexing):
    """One-hot encode ``indices`` with ``depth`` classes inserted at ``axis``."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.axis = int(info.attr("axis", -1))

    def compute(self, indices, depth, values):
        xp = self.xp
        depths = self.host(depth)
        if depths.size != 1:
            raise ValueError(f"depth must hold one value, got shape {depths.shape}")
        n = int(depths.reshape(-1)[0])
        if n < 1:
            raise ValueError(f"depth must be positive, got {n}")
        if math.prod(values.shape) != 2:
            raise ValueError(f"values must hold [off_value, on_value], got {math.prod(values.shape)} values")
        values = values if values.ndim == 1 else xp.reshape(values, (2,))
        rank = indices.ndim + 1
        axis = _norm_axis(self.axis, rank)
        shape = list(indices.shape)
        shape.insert(axis, n)
        check_allocation(shape, self.backend.numpy_dtype(values.dtype), output_of(self.info))
        if dtype_name(indices.dtype) in _FLOATS:
            indices = xp.trunc(self.widen(indices))
        ind = indices if indices.dtype == self.i64 else xp.astype(indices, self.i64)
        # Negative indices wrap (the v11 rule; onnxruntime applies it to v9 too).
        ind = xp.where(ind < 0, ind + n, ind)
        classes = xp.reshape(xp.arange(n, dtype=self.i64), tuple(n if d == axis else 1 for d in range(rank)))
        hot = xp.reshape(ind, tuple(shape[:axis]) + (1,) + tuple(shape[axis + 1:])) == classes
        return (self.narrow(xp.where(hot, values[1], values[0]), values),)


# --------------------------------------------------------------------------- NonZero


@library.define("NonZero", (9, 13))
class NonZero(Indexing):
    """Indices of the non-zero elements, int64 of shape (rank, count), row-major order; a
    scalar counts as a 1-element vector (as onnxruntime does)."""

    def compute(self, x):
        xp = self.xp
        mask = x if dtype_name(x.dtype) == "bool" else self.widen(x) != 0
        if x.ndim == 0:
            mask = xp.reshape(mask, (1,))
        y = xp.stack(xp.nonzero(mask))
        return (y if y.dtype == self.i64 else xp.astype(y, self.i64),)


# --------------------------------------------------------------------------- Unique


@library.define("Unique", (11, 28))
class Unique(Indexing):
    """Unique values (or sub-tensors along ``axis``) with first indices, inverse, counts;
    sorted ascending (lexicographically along ``axis``), or in first-occurrence order."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.sorted = bool(info.attr("sorted", 1))
        self.axis = info.attr("axis")

    def order(self, keys: Any) -> Any:
        """The stable lexicographic order of the rows of ``keys`` (n, m): stable sorts by
        each column, the last first."""
        xp = self.xp
        n, m = keys.shape
        if n == 0 or m == 0:
            return xp.arange(n, dtype=self.i64)
        order = _argsort(xp, keys[:, m - 1])
        for j in range(m - 2, -1, -1):
            order = xp.take(order, _argsort(xp, xp.take(keys[:, j], order)))
        return order

    def invert(self, permutation: Any) -> Any:
        """The inverse of a permutation (by sorting it: the standard cannot assign at
        integer indices)."""
        return _argsort(self.xp, permutation)

    def compute(self, x):
        xp = self.xp
        if self.axis is None:  # one sort of the values
            axis, n = None, math.prod(x.shape)
            values = _reshaped(xp, x, (n,))
            keys = self.widen(values)
            order = _argsort(xp, keys)
        else:
            axis = _norm_axis(int(self.axis), x.ndim)
            n = x.shape[axis]
            keys = xp.reshape(xp.moveaxis(x, axis, 0), (n, math.prod(x.shape) // n if n else 0))
            keys = self.widen(keys)
            order = self.order(keys)
        srt = xp.take(keys, order, axis=0)
        new = xp.ones((min(n, 1),), dtype=xp.bool)  # where a group starts in ``srt``
        if n > 1:
            differ = srt[1:, ...] != srt[:-1, ...]
            if dtype_name(srt.dtype) in _FLOATS:  # NaNs are one value, as in numpy.unique
                differ = differ & ~(xp.isnan(srt[1:, ...]) & xp.isnan(srt[:-1, ...]))
            new = xp.concat([new, differ if srt.ndim == 1 else xp.any(differ, axis=1)])
        starts = xp.nonzero(new)[0]
        starts = starts if starts.dtype == self.i64 else xp.astype(starts, self.i64)
        first = xp.take(order, starts)
        counts = xp.concat([starts[1:], xp.asarray([n], dtype=self.i64)]) - starts if n else starts
        groups = xp.cumulative_sum(xp.astype(new, self.i64)) - 1  # of the sorted rows
        inverse = xp.take(groups, self.invert(order))
        if not self.sorted:
            by_first = _argsort(xp, first)
            first, counts = xp.take(first, by_first), xp.take(counts, by_first)
            inverse = xp.take(self.invert(by_first), inverse)
        y = xp.take(values, first) if axis is None else xp.take(x, first, axis=axis)
        return (y,) + tuple(v if v.dtype == self.i64 else xp.astype(v, self.i64)
                            for v in (first, inverse, counts))


@library.define("TensorScatter", 24, host_inputs=(2,))
class TensorScatter(OpKernel):
    """Copy ``past_cache`` and write ``update`` into it along ``axis`` at per-batch
    ``write_indices`` (0 when absent), linearly or modulo the cache's length (``circular``)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.mode = info.attr("mode", "linear")
        if self.mode not in ("linear", "circular"):
            raise InvalidGraph(f"{self.where()}: mode must be 'linear' or 'circular', got {self.mode!r}")
        self.axis = int(info.attr("axis", -2))

    def windows(self, past: Any, update: Any, write_indices: Any) -> tuple[int, list[int]]:
        """(the normalized axis, each batch's first written position), checked."""
        rank = past.ndim
        if rank < 2 or update.ndim != rank:
            raise ValueError(f"TensorScatter: past_cache (rank {rank}) and update (rank {update.ndim}) "
                             "must have the same rank, at least 2")
        ax = self.axis + rank if self.axis < 0 else self.axis
        if not 0 < ax < rank:
            raise ValueError(f"TensorScatter: axis {self.axis} must name a non-batch dim of rank {rank}")
        max_len, seq_len = past.shape[ax], update.shape[ax]
        shape, ushape = tuple(past.shape), tuple(update.shape)
        if shape[:ax] + shape[ax + 1 :] != ushape[:ax] + ushape[ax + 1 :] or seq_len > max_len:
            raise ValueError(f"TensorScatter: update shape {ushape} does not fit past_cache shape {shape} "
                             f"along axis {ax}")
        batch = shape[0]
        starts = [0] * batch if write_indices is None else self.host_ints(write_indices)
        if len(starts) != batch:
            raise ValueError(f"TensorScatter: write_indices has {len(starts)} values, expected ({batch},)")
        if self.mode == "circular":
            starts = [s % max(max_len, 1) for s in starts]
        elif seq_len and (min(starts) < 0 or max(starts) + seq_len > max_len):
            raise ValueError(f"TensorScatter: linear mode needs 0 <= write_indices and write_indices + "
                             f"{seq_len} <= {max_len}, got write_indices {starts}")
        return ax, starts

    def compute(self, past, update, write_indices=None):
        ax, starts = self.windows(past, update, write_indices)
        max_len, seq_len = past.shape[ax], update.shape[ax]
        out = self.xp.astype(past, past.dtype, copy=True)  # CuPy's asarray takes no ``copy``
        between = (slice(None),) * (ax - 1)
        for b, start in enumerate(starts):
            # The window [start, start + seq_len), wrapped at max_len in circular mode.
            first = min(seq_len, max_len - start)
            out[(b, *between, slice(start, start + first), ...)] = update[(b, *between, slice(0, first), ...)]
            if first < seq_len:
                out[(b, *between, slice(0, seq_len - first), ...)] = update[(b, *between, slice(first, seq_len), ...)]
        return (out,)
